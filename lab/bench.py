"""
Benchmarks for the gated attention kernels and for full training steps, run from the repository's root:

  python -m lab.bench --kernels        # attention alone: SDPA, SDPA + gate, fused Triton with each way of getting
                                       # dQ in its backward (kernels.choose_backward); bf16, GPU
  python -m lab.bench --train          # GPT-2 small optimizer steps of three variants of lab/variants.py (TIMED,
                                       # or --variants=...), each with the fused Triton and the PyTorch attention,
                                       # with and without torch.compile
  python -m lab.bench --step           # CPU: train.py's training step against a plain AdamW loop on the same
                                       # model, each in fresh processes, alternating rounds: time, page faults,
                                       # peak memory (--step_shape: the model; --step_modes=all: each part); a
                                       # step too big for the free memory is refused first, as train.py does
  python -m lab.bench --step --step_config=config/sink_lab.py   # the same, for the model and batch of a train.py
                                                                # config file: here the sink lab's
  python -m lab.bench --kernels --train --tiny   # smoke test: tiny sizes, fp32; on CPU, Triton's interpreter and
                                                 # a plain timer: checks the code runs, says nothing about speed

`python -m lab.bench --help` lists the keys (Keys below), given as --key=value (a bool key as a bare --key, a list
as a,b,c) or in a config file (cli.configure). --kernels and --train measure GPU speed: without a CUDA GPU they run
only with --tiny; --step measures a CPU's. Results go to {out_dir}/bench_kernels.{json,md},
{out_dir}/bench_train.{json,md} and {out_dir}/bench_step.{json,md}, with the device, the date and the exact
command; out_dir defaults to out-bench/ for --step (a CPU's timings, git-ignored: a look, not a committed
result), to out-bench-tiny/ for --tiny, and to results/ (the committed measurements, which lab/gpu/kernels.sh and
throughput.sh write) for --kernels and --train on a GPU; --out_dir=results puts --step's there, and every write into
results/ is said. FLOPs are counted the FlashAttention way: causal forward 2*B*H*T^2*D (half of
the 4*B*H*T^2*D of full attention), backward 2.5x forward, so forward+backward is 3.5x forward.
"""

import dataclasses
import datetime
import json
import math
import os
import platform
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import time
if not __package__:  # run as python lab/bench.py: find the project from its root, as python -m lab.bench does
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dataclasses import dataclass

# cli before torch: its excepthook (cli.one_line_interrupt) makes Ctrl-C while torch loads one line, not a traceback
from cli import (COMPILE_MODES, REPO, SDPA_BACKENDS, autocast_for, check_choice, config_path, configure, fail,
                 free_memory, keep_freed_memory, run_config_file, run_main, sdpa_order, sdpa_preference)
import torch

cuda = torch.cuda.is_available()
if not cuda:  # Triton kernels need its interpreter on CPU; must be set before triton is imported (by kernels)
    os.environ.setdefault("TRITON_INTERPRET", "1")
import kernels  # noqa: E402
from kernels import attention_torch, gated_attention  # noqa: E402
from lab.report import markdown_table  # noqa: E402
from lab.variants import VARIANTS  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from probe import estimate_mfu  # noqa: E402
from runfolder import (batch_that_fits, memory_need, step_memory, writable_folder, write_json,  # noqa: E402
                       write_text)
from train import optimizer_step  # noqa: E402

TIMED = ("baseline", "g1_elementwise", "g1_headwise")  # --train: the ungated model and GA's two best G1 gates
BACKENDS = ("triton", "torch")  # the fused kernel (G1 sigmoid gates and no gate), and SDPA with the gate apart
# --step: the CPU training steps it can time, each in its own process (glibc's allocator settings last a process).
# "real" is train.py's step; each real_* takes one part of it away, to show what that part is worth.
STEP_MODES = {
    "plain": "a plain AdamW loop (nanoGPT's): loss.backward(), AdamW.step(), zero_grad(); the loss over all the logits "
             "at once; no allocator setting",
    "real": "train.py's step: the loss in chunks (loss_chunk), train.optimizer_step (gradient clipping, the "
            "non-finite step skipped, fused AdamW), under cli.keep_freed_memory, in train.py's dtype (auto: bf16 "
            "autocast on a CPU that computes bf16 in hardware, else fp32)",
    "real_fp32": "train.py's step in fp32 (dtype=float32), as on a CPU without bf16 in hardware",
    "real_no_setting": "train.py's step without cli.keep_freed_memory",
    "real_plain_loss": "train.py's step with the loss over all the logits at once (loss_chunk=0)",
    "real_unfused": "train.py's step with the for-loop AdamW instead of the fused one",
    "real_no_clip": "train.py's step without clipping and the non-finite check: fused AdamW.step() alone",
}


@dataclass
class Keys:
    kernels: bool = False  # time the attention providers
    train: bool = False  # time full training steps of GPT-2 small
    tiny: bool = False  # smoke test: tiny sizes, fp32, no compile, few steps; runs on CPU, its timings mean nothing
    out_dir: str = ""  # "": out-bench (--step), out-bench-tiny (--tiny), results (--kernels, --train on a GPU)
    tokens: int = 16384  # --kernels: B*T per call
    seq_lens: tuple[int, ...] = (512, 1024, 2048, 4096, 8192)  # --kernels: the sequence lengths T
    head_dims: tuple[int, ...] = (64, 128)  # --kernels: the head dims D (H = width / D)
    width: int = 2048  # --kernels: H*D
    gqa: int = 0  # --kernels: also rows with Hkv = H / gqa (0: no)
    non_causal: bool = False  # --kernels: full attention instead of causal
    batch_size: int = 16  # --train: sequences per step (--tiny: divided by 8)
    block_size: int = 1024  # --train: T (--tiny: divided by 32)
    compile: str = "both"  # --train: torch.compile: both, true or false
    compile_mode: str = "default"  # --train: torch.compile's mode, one of cli.COMPILE_MODES (train.py's key too)
    sdpa_backend: str = "default"  # the kernel SDPA tries first, one of cli.SDPA_BACKENDS (train.py's key too)
    variants: tuple[str, ...] = TIMED  # --train: variants of lab/variants.py (python -m lab.repro list)
    backends: tuple[str, ...] = BACKENDS  # --train: attention backends, of triton and torch
    match_params: bool = False  # --train: shrink the MLP so a gated model has the baseline's parameter count (GA)
    loss_chunk: int = 0  # --train: the loss over this many rows of logits at a time (model.py; 0: all at once)
    pad_c_attn: int = 64  # --train: c_attn's output rows padded to a multiple of this (model.py's 64; 1: unpadded)
    profile: int = 0  # --train: profile each row's steps, this many, after all the timings: where time goes (0: no)
    warmup: int = 10  # --train, --step: untimed steps first (compile happens here)
    steps: int = 20  # --train, --step: timed steps
    step: bool = False  # time train.py's CPU training step against a plain AdamW loop (STEP_MODES)
    step_modes: tuple[str, ...] = ("plain", "real")  # --step: the steps to time, of STEP_MODES; all: every one
    # --step: the model: n_layer, n_embd, block_size, batch_size; n_head 4, the gate and the rest as train.py's
    # defaults. 4, 128, 128, 8 is train.py's default run; 4, 256, 256, 8 a heavier one
    step_shape: tuple[int, ...] = (4, 128, 128, 8)  # --step: n_layer, n_embd, block_size, batch_size (above)
    step_loss_chunk: int = 4096  # --step: rows of logits at a time in the real step (train.py's loss_chunk default)
    # --step: a train.py config file (e.g. config/sink_lab.py) whose model (every GPTConfig key it sets), batch_size,
    # dtype and loss_chunk the steps take instead of --step_shape's and --step_loss_chunk's
    step_config: str = ""  # --step: a train.py config file (above); "": --step_shape's model
    rounds: int = 3  # --step: rounds, each timing every mode once, in order, in a fresh process
    step_child: str = ""  # internal: time this one mode in this process and print its record as JSON


# ----------------------------------------------------------------------------
# The keys, each checked before anything is timed or written

def chosen(args, key, valid):
    """A list key's names in order, each once; one line naming those not in valid, or saying none was given."""
    names = list(dict.fromkeys(getattr(args, key)))
    wrong = [n for n in names if n not in valid]
    if not names or wrong:
        fail(f"--{key}={','.join(names)}: {'unknown ' + ', '.join(map(repr, wrong)) if wrong else 'give at least one'}"
             f"; choose from {', '.join(valid)}")
    return tuple(names)


def checked_keys(argv):
    """The keys of a command line (cli.configure), each checked: a mistaken key or value stops with one line
    (cli.fail). The list keys come back with each name once, in order; --step_modes=all as every mode."""
    args, _ = configure(Keys, argv)
    if not (args.kernels or args.train or args.step or args.step_child):
        fail("choose --kernels, --train and/or --step (python -m lab.bench --help)")
    if args.compile.lower() not in ("both", "true", "false"):
        fail(f"--compile={args.compile}: choose both, true or false")
    check_choice("--compile_mode", args.compile_mode, COMPILE_MODES)
    check_choice("--sdpa_backend", args.sdpa_backend, SDPA_BACKENDS)
    if args.loss_chunk < 0:
        fail(f"--loss_chunk={args.loss_chunk}: give 0 (the loss over all the logits at once) or a number of rows")
    if args.profile < 0:
        fail(f"--profile={args.profile}: give 0 (no profile) or a number of steps to profile, e.g. 5")
    for key in ("profile", "pad_c_attn"):
        if getattr(args, key) != getattr(Keys, key) and not args.train:
            fail(f"--{key}={getattr(args, key)} is a key of --train: add --train")
    if args.pad_c_attn < 1:
        fail(f"--pad_c_attn={args.pad_c_attn}: give a multiple of outputs per row: 64 (model.py's) or 1 (unpadded)")
    if args.gqa < 0:
        fail(f"--gqa={args.gqa}: give 0 (no GQA rows) or the number of query heads per KV head")
    for key in ("tokens", "width", "batch_size", "block_size"):  # else a B of tokens // T rounded up to 1, say
        if getattr(args, key) < 1:
            fail(f"--{key}={getattr(args, key)}: give a positive integer (default {getattr(Keys, key)})")
    for key in ("seq_lens", "head_dims"):
        if not getattr(args, key) or min(getattr(args, key)) < 1:
            fail(f"--{key}={','.join(map(str, getattr(args, key)))}: give positive integers, e.g. --{key}=512,1024")
    if args.kernels:
        check_heads(args)
    args.variants = chosen(args, "variants", list(VARIANTS))
    args.backends = chosen(args, "backends", list(BACKENDS))
    args.step_modes = tuple(STEP_MODES) if args.step_modes == ("all",) else \
        chosen(args, "step_modes", list(STEP_MODES))
    if args.step_child:
        check_choice("--step_child", args.step_child, STEP_MODES)
    if len(args.step_shape) != 4 or min(args.step_shape) < 1:
        fail(f"--step_shape={','.join(map(str, args.step_shape))}: give four positive integers, n_layer, n_embd, "
             "block_size, batch_size (e.g. 4,128,128,8)")
    try:  # model.py's own checks, here rather than as a traceback when the model is built
        shape_config(args.step_shape)
    except ValueError as e:
        fail(f"--step_shape={','.join(map(str, args.step_shape))}: model.py refuses its model (n_head={STEP_HEADS}): "
             f"{e}. Give an n_embd that is a multiple of {2 * STEP_HEADS} ({STEP_HEADS} heads of an even width, "
             "for the rotary embeddings), e.g. 128")
    if args.step_config and not (args.step or args.step_child):
        fail(f"--step_config={args.step_config} is a key of --step: add --step")
    if args.step_loss_chunk < 0 or args.rounds < 1 or args.steps < 1 or args.warmup < 0:
        fail("--step_loss_chunk and --warmup must be at least 0, --rounds and --steps at least 1")
    if not cuda and not args.tiny and (args.kernels or args.train):  # GPT-2 small and the kernel sweep: hours on a CPU
        fail("python -m lab.bench --kernels and --train measure GPU speed and no CUDA GPU is visible here; "
             "for a CPU smoke test of the code use --tiny (its timings mean nothing about speed)")
    reason = kernels.triton_unavailable()
    if reason and (args.kernels or (args.train and "triton" in args.backends)):
        fail(f"{reason}: --kernels times the fused kernel, and so does --train unless --backends=torch")
    return args


def kernel_sizes(args):
    """--kernels' sizes: (seq_lens, head_dims, width, tokens), the keys' or --tiny's own."""
    if args.tiny:
        return [16, 40], [32], 64, 80
    return list(args.seq_lens), list(args.head_dims), args.width, args.tokens


def check_heads(args):
    """--kernels: every head dim must give at least one query head (H = width / D), and --gqa must split them into
    whole groups (Hkv = H / gqa, which the kernels need to divide H): checked here, before the first row is timed."""
    _, head_dims, width, _ = kernel_sizes(args)
    sizes = f"--tiny's width {width} and head dim {head_dims[0]}" if args.tiny else \
        f"--width={width} and --head_dims={','.join(map(str, head_dims))}"
    heads = [width // D for D in head_dims]
    if min(heads) < 1:
        fail(f"--head_dims={max(head_dims)} is wider than --width={width}, which leaves no head (H = width / D): give "
             f"head dims of at most {width}, or a larger --width")
    if args.gqa and any(H % args.gqa for H in heads):
        common = math.gcd(*heads)
        fail(f"--gqa={args.gqa}: {sizes} give {', '.join(map(str, heads))} query heads (H = width / D), which "
             f"do not split into groups of {args.gqa} (Hkv = H / gqa); give a divisor of {common} "
             f"({', '.join(str(d) for d in range(1, common + 1) if common % d == 0)}), or 0 for no GQA rows")


STEP_HEADS = 4  # --step_shape's model: n_head


def shape_config(step_shape):
    """The GPTConfig of a --step_shape (n_layer, n_embd, block_size, batch_size): n_head 4, train.py's defaults."""
    n_layer, n_embd, block_size, _ = step_shape
    return GPTConfig(n_layer=n_layer, n_head=STEP_HEADS, n_embd=n_embd, block_size=block_size)


# train.py's defaults differ from GPTConfig's in these (the default run's sizes): a --step_config file must set them
STEP_CONFIG_SIZES = ("n_layer", "n_head", "n_embd", "block_size", "batch_size")


def step_setup(args):
    """What --step trains: (the model's GPTConfig, batch_size, the real step's dtype and loss_chunk, whose they are).
    With --step_config, the file's keys over train.py's defaults, which are GPTConfig's but for the sizes (the file
    must set them) and loss_chunk (--step_loss_chunk's); else --step_shape (n_head 4), or a toy shape for --tiny."""
    if args.step_config:
        path, scope = config_path(args.step_config), {}
        if path is None:
            fail(f"--step_config={args.step_config}: no such file; give a train.py config file, e.g. "
                 "config/sink_lab.py")
        run_config_file(args.step_config, path, scope)
        missing = [key for key in STEP_CONFIG_SIZES if key not in scope]
        if missing:
            fail(f"--step_config={args.step_config} sets no {', '.join(missing)}: give a file that sets the model's "
                 f"sizes and batch ({', '.join(STEP_CONFIG_SIZES)}), or time the default run's with --step_shape")
        model = {f.name: scope[f.name] for f in dataclasses.fields(GPTConfig) if f.name in scope}
        model.setdefault("loss_chunk", args.step_loss_chunk)
        try:
            config = GPTConfig(**model)
        except (TypeError, ValueError) as e:
            fail(f"--step_config={args.step_config}: {e}")
        return config, scope["batch_size"], scope.get("dtype", "auto"), config.loss_chunk, args.step_config
    shape = (2, 64, 16, 2) if args.tiny else args.step_shape
    return shape_config(shape), shape[3], "auto", args.step_loss_chunk, "--step_shape"


# ----------------------------------------------------------------------------
# What the results of one call share: where and when they were measured, the command, how they are written

device = "cuda" if cuda else "cpu"
SMOKE_NOTE = ("SMOKE TEST (--tiny): tiny sizes in fp32" +
              ("" if cuda else ", Triton's CPU interpreter and a plain timer") +
              ". It checks that the code runs; these timings mean nothing about speed.")


@dataclass
class Session:
    args: Keys  # the checked keys (checked_keys); out_folder says where each result goes
    command: str  # the command as a user runs it again: python -m lab.bench ...
    date: str
    device_name: str
    dtype: torch.dtype  # of --kernels and --train: bf16 on a GPU; fp32 on a CPU and with --tiny
    sdpa_order: tuple  # the order SDPA tries its kernels in, under --sdpa_backend (cli.sdpa_order)
    noted: set = dataclasses.field(default_factory=set)  # the results whose writes into results/ were said

    @property
    def sdpa_note(self):
        return (f"sdpa_backend={self.args.sdpa_backend!r}: SDPA tries its kernels in the order "
                f"{', '.join(self.sdpa_order)}")

    def write(self, name, payload, notes, header, rows, summary=None, partial=None):
        """{out_dir}/{name}.json (payload) and .md: notes, then summary = (title, header, rows) if given, then the
        table of every measurement. partial = (done, planned) while measurements are still to come: the files so
        far go to {name}.partial.{json,md} instead, so that a command stopped part-way leaves what it measured
        without replacing an earlier complete set; the complete write removes them."""
        args = self.args
        folder = out_folder(args, name)
        results = os.path.join(os.path.realpath(REPO), "results")
        said = (name, bool(partial))  # each kind of write into results/ is said once
        if os.path.commonpath([os.path.realpath(folder), results]) == results and said not in self.noted:
            self.noted.add(said)
            print(f"note: writing {name}.partial.json and .md into {folder}/ as the measurements come; {name}.json "
                  "and .md, the committed measurements, are replaced only once all are done" if partial else
                  f"note: writing {name}.json and .md into {folder}/, the committed measurements: the files there "
                  "are replaced", flush=True)
        os.makedirs(folder, exist_ok=True)
        base = os.path.join(folder, name + (".partial" if partial else ""))
        payload = dict(smoke_test=args.tiny, complete=not partial, **payload)
        write_json(base + ".json", payload)  # atomic, as every result file
        smoke = [f"- **{SMOKE_NOTE}**"] if args.tiny else []  # the first thing a reader of the file sees
        cut = [f"- **incomplete: {partial[0]} of {partial[1]} measurements; the command stopped (or is still "
               f"running) before the rest**"] if partial else []
        lines = [f"# {name}", "", *smoke, *cut, f"- device: {self.device_name}", f"- date: {self.date}",
                 f"- command: `{self.command}`", *[f"- {n}" for n in notes], ""]
        table = markdown_table(header, rows)
        if summary:
            title, summary_header, summary_rows = summary
            table = [f"## {title}", "", *markdown_table(summary_header, summary_rows), "", "## Every measurement", "",
                     *table]
        write_text(base + ".md", "\n".join(lines + table) + "\n")
        if partial:
            return
        for suffix in (".json", ".md"):  # the complete set replaces what a stopped command left
            if os.path.exists(os.path.join(folder, name + ".partial" + suffix)):
                os.remove(os.path.join(folder, name + ".partial" + suffix))
        print("\n".join(table))
        print(f"wrote {folder}/{name}.json and .md" +
              (" (a smoke test: the timings mean nothing about speed)" if args.tiny else ""))


def out_folder(args, name):
    """Where the results `name` go: --out_dir; else a smoke test's and a CPU step's to git-ignored folders (a look,
    not a committed result), the GPU's --kernels and --train to results/, as lab/gpu/kernels.sh and throughput.sh
    expect."""
    if args.out_dir:
        return args.out_dir
    if args.tiny:
        return "out-bench-tiny"
    return "out-bench" if name == "bench_step" else "results"


def sync():
    if cuda:
        torch.cuda.synchronize()


def time_ms(fn, grads=()):
    """Median milliseconds per call: triton.testing.do_bench on a GPU; on CPU (--tiny, where timings mean nothing)
    one call with a plain timer (Triton's interpreter compiles nothing, so no untimed call comes first)."""
    if cuda:
        fn()  # first call: Triton compiles and autotunes here, outside the timing
        import triton.testing
        return triton.testing.do_bench(fn, warmup=25, rep=100, grad_to_none=list(grads), return_mode="median")
    for g in grads:
        g.grad = None
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def sig(x, digits=4):
    return float(f"{x:.{digits}g}")


# ----------------------------------------------------------------------------
# --kernels: attention alone

# name -> (function of q, k, v, gate, causal; the fused backward's way to dQ, or None for SDPA; modes timed). The
# forward does not depend on the backward's mode, so the atomic provider times forward+backward only.
PROVIDERS = {
    "sdpa": (lambda q, k, v, g, c: attention_torch(q, k, v, None, c), None, ("fwd", "fwd+bwd")),
    "sdpa+gate": (lambda q, k, v, g, c: attention_torch(q, k, v, g, c), None, ("fwd", "fwd+bwd")),
    "triton": (lambda q, k, v, g, c: gated_attention(q, k, v, None, c, backend="triton"), "recompute",
               ("fwd", "fwd+bwd")),
    "triton+gate": (lambda q, k, v, g, c: gated_attention(q, k, v, g, c, backend="triton"), "recompute",
                    ("fwd", "fwd+bwd")),
    "triton+gate atomic-dq": (lambda q, k, v, g, c: gated_attention(q, k, v, g, c, backend="triton"), "atomic",
                              ("fwd+bwd",)),
}
FUSED = ("triton+gate", "triton+gate atomic-dq")  # the fused gated attention, under each way of getting dQ


def kernel_summary(records):
    """One row per shape: forward+backward ms of SDPA, SDPA + gate and the fused kernel (each dQ mode), and speed
    ratios (another provider's ms over the fused kernel's: above 1, the fused kernel is faster) for the faster
    of the fused modes, the kernel's targets: >= 1 against SDPA + gate, >= 0.9 against SDPA alone."""
    ms = {(r["D"], r["H"], r["Hkv"], r["T"], r["B"], r["provider"], r["mode"]): r["ms"] for r in records}
    rows = []
    for shape in dict.fromkeys(key[:5] for key in ms):
        get = lambda provider, mode="fwd+bwd": ms.get((*shape, provider, mode))  # noqa: E731
        fused = {p: get(p) for p in FUSED}
        best = min(fused, key=fused.get)
        rows.append(dict(zip(("D", "H", "Hkv", "T", "B"), shape), sdpa=get("sdpa"), sdpa_gate=get("sdpa+gate"),
                         **{p: get(p) for p in FUSED}, best=best,
                         vs_sdpa_gate=sig(get("sdpa+gate") / fused[best], 3), vs_sdpa=sig(get("sdpa") / fused[best], 3),
                         fwd_vs_sdpa_gate=sig(get("sdpa+gate", "fwd") / get("triton+gate", "fwd"), 3)))
    return rows


def bench_kernels(session):
    """Time every provider of PROVIDERS, forward and forward+backward, at every shape: bench_kernels.{json,md}."""
    args, dtype = session.args, session.dtype
    seq_lens, head_dims, width, tokens = kernel_sizes(args)  # the heads were checked (check_heads)
    causal = not args.non_causal
    records = []
    shapes = sum(1 + bool(args.gqa) for _ in head_dims) * len(seq_lens)
    planned = shapes * sum(len(modes) for _, _, modes in PROVIDERS.values())
    for D in head_dims:
        H = width // D
        for Hkv in [H] + ([H // args.gqa] if args.gqa else []):
            for T in seq_lens:
                B = max(1, tokens // T)
                gen = torch.Generator(device=device).manual_seed(0)
                # laid out as model.py passes them: (B, T, heads, D) tensors seen as (B, heads, T, D), so that each
                # provider's gradients land in the layout training has (a contiguous (B, heads, T, D) leaf would
                # cost the fused kernel, whose gradients are (B, T, heads, D) underneath, a copy SDPA never makes)
                q, k, v, g, dy = (torch.randn(B, T, h, d, device=device, dtype=dtype, generator=gen)
                                  for h, d in ((H, D), (Hkv, D), (Hkv, D), (H, D), (H, D)))
                for t in (q, k, v, g):
                    t.requires_grad_()
                fwd_flops = 4 * B * H * T * T * D * (0.5 if causal else 1.0)
                for provider, (fn, backward, modes) in PROVIDERS.items():
                    if backward:
                        kernels.choose_backward(backward)
                    run = lambda: fn(*(t.transpose(1, 2) for t in (q, k, v, g)), causal)  # noqa: E731
                    for mode, flops, call in (("fwd", fwd_flops, run),
                                              ("fwd+bwd", 3.5 * fwd_flops,
                                               lambda: run().backward(dy.transpose(1, 2)))):
                        if mode not in modes:
                            continue
                        ms = time_ms(call, grads=(q, k, v, g))
                        records.append(dict(device=session.device_name, B=B, H=H, Hkv=Hkv, T=T, D=D, causal=causal,
                                            dtype=str(dtype).replace("torch.", ""), provider=provider, mode=mode,
                                            ms=sig(ms), tflops=sig(flops / ms / 1e9)))
                        print(f"D={D} H={H} Hkv={Hkv} T={T} B={B} {provider:21s} {mode:8s} {ms:9.3f} ms "
                              f"{records[-1]['tflops']:8.2f} TFLOP/s", flush=True)
                if len(records) < planned:  # each shape whole: a command stopped later keeps it
                    write_kernels(session, records, (len(records), planned))
    kernels.choose_backward(kernels.DEFAULT_BACKWARD)
    write_kernels(session, records)


def write_kernels(session, records, partial=None):
    """bench_kernels.{json,md} of the records so far (Session.write; partial: (done, planned))."""
    args, dtype = session.args, session.dtype
    _, _, width, tokens = kernel_sizes(args)
    causal = not args.non_causal
    summary = kernel_summary(records)
    session.write("bench_kernels", dict(date=session.date, device=session.device_name, command=session.command,
                                        sdpa_backend=args.sdpa_backend, sdpa_order=session.sdpa_order,
                                        autotuned=kernels.tuned_configs(), summary=summary, records=records),
          [f"dtype {str(dtype).replace('torch.', '')}, causal={causal}, B*T = {tokens}, H*D = {width}, "
           "inputs require grad, laid out as model.py passes them ((B, T, H, D), seen as (B, H, T, D)); median of "
           "triton.testing.do_bench (CPU: one call)",
           "the fused kernel's launch configs, chosen per autotune key: the json's autotuned",
           session.sdpa_note,
           "TFLOP/s: forward 4*B*H*T^2*D (halved when causal), forward+backward 3.5x that",
           "triton+gate: the fused kernel with dQ in a kernel of its own (recompute); triton+gate atomic-dq: dQ added "
           "atomically in the dK/dV pass (kernels.choose_backward)",
           "the summary's ratios take the faster dQ mode at each shape; training (train.py, python -m lab.bench "
           f"--train) uses {kernels.DEFAULT_BACKWARD!r} here (kernels.DEFAULT_BACKWARD, set by "
           "GATED_ATTENTION_BACKWARD)"],
          ["D", "H", "Hkv", "T", "B", "provider", "mode", "ms", "TFLOP/s"],
          [[r["D"], r["H"], r["Hkv"], r["T"], r["B"], r["provider"], r["mode"], r["ms"], r["tflops"]] for r in records],
          summary=("Fused gated attention against SDPA, forward+backward",
                   ["D", "H", "Hkv", "T", "B", "SDPA ms", "SDPA+gate ms", "fused ms (recompute dQ)",
                    "fused ms (atomic dQ)",
                    "faster dQ", "SDPA+gate / fused", "SDPA / fused", "fwd: SDPA+gate / fused"],
                   [[r["D"], r["H"], r["Hkv"], r["T"], r["B"], r["sdpa"], r["sdpa_gate"], r["triton+gate"],
                     r["triton+gate atomic-dq"], "atomic" if r["best"] == FUSED[1] else "recompute", r["vs_sdpa_gate"],
                     r["vs_sdpa"], r["fwd_vs_sdpa_gate"]] for r in summary]), partial=partial)


# ----------------------------------------------------------------------------
# --train: full optimizer steps of GPT-2 small (or a tiny model)

def pad_c_attn(model, multiple, device):
    """--pad_c_attn: every attention layer's c_attn (kernels.AlignedLinear) pads its output rows to a multiple of
    `multiple` on `device` too: on a GPU model.py's 64, or 1 for the rows unpadded; on a CPU (--tiny) the same path."""
    for block in model.transformer.h:
        block.attn.c_attn.multiple, block.attn.c_attn.devices = multiple, (device,)


def profile_steps(step, steps, path):
    """Profile `steps` more calls of step(): PyTorch's profiler table, ops by their own (self) time on the device (on
    a CPU, the CPU's), written to `path`; returns the top 15 as [name, ms per step, calls per step]: where the time
    of a step goes, e.g. whether a gate costs its matmul or copies and small launches around it."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        for _ in range(steps):
            step()
        sync()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    averages = prof.key_averages()  # each op's totals over the steps (computed once: it walks every event)
    ops = sorted(averages, key=lambda op: getattr(op, key), reverse=True)
    what = f"{steps} steps profiled, sorted by {key} (microseconds, over all {steps})" if steps > 1 else \
        f"1 step profiled, sorted by {key} (microseconds)"
    write_text(path, what + "\n" + averages.table(sort_by=key, row_limit=40) + "\n")
    return [[op.key, sig(getattr(op, key) / 1e3 / steps), sig(op.count / steps)] for op in ops[:15]]


def bench_train(session):
    """Time train.py's optimizer step of each variant with each attention backend, compiled and not:
    bench_train.{json,md}."""
    args, dtype = session.args, session.dtype
    if args.tiny:
        # a tiny model, with the batch scaled down from --batch_size and --block_size (16 x 1024 -> 2 x 32)
        base = dict(block_size=max(8, args.block_size // 32), vocab_size=128, n_layer=2, n_head=2, n_embd=64)
        batch_size, warmup, steps, compiles = max(1, args.batch_size // 8), 0, 1, [False]  # a smoke test: one step
    else:  # GPT-2 small: 12 layers, 12 heads, 768 wide, T=1024, vocab 50304
        base = dict(block_size=args.block_size, vocab_size=50304, n_layer=12, n_head=12, n_embd=768)
        batch_size, warmup, steps = args.batch_size, args.warmup, args.steps
        # compiled first: the numbers the training-step goals are about, kept by a command stopped part-way
        compiles = {"both": [True, False], "true": [True], "false": [False]}[args.compile.lower()]
    T = base["block_size"]
    autocast = torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16)
    rows = [(c, v, b) for c in compiles for v in args.variants for b in args.backends]
    records, planned = [], len(rows) * (2 if args.profile else 1)  # each row timed, then each profiled
    shape = (base, batch_size, warmup, steps)

    def build(variant, backend, use_compile):  # a row's model, built anew, and train.py's step of it
        torch.manual_seed(0)
        config = GPTConfig(**base, **VARIANTS[variant].flags, attn_backend=backend, match_params=args.match_params,
                           loss_chunk=args.loss_chunk)
        model = GPT(config).to(device)
        pad_c_attn(model, args.pad_c_attn, device)
        optimizer = model.configure_optimizers(0.1, 6e-4)
        no_scaler = torch.amp.GradScaler(device, enabled=False)  # bf16 and fp32 need no loss scaling
        step_model = torch.compile(model, mode=args.compile_mode) if use_compile else model
        x = torch.randint(0, config.vocab_size, (batch_size, T + 1), device=device)
        x, y = x[:, :-1].contiguous(), x[:, 1:].contiguous()

        def step():  # train.py's step: clipping at 1.0, the skip of a non-finite step on the device, AdamW
            with autocast:
                _, loss = step_model(x, y)
            loss.backward()
            optimizer_step(optimizer, no_scaler, model.parameters(), 1.0, loss.detach())
        return model, step

    def free(use_compile):  # the last row's model and compiled code, before the next is built
        if use_compile:
            torch._dynamo.reset()
        if cuda:
            torch.cuda.empty_cache()

    for use_compile, variant, backend in rows:
        model, step = build(variant, backend, use_compile)
        record = dict(device=session.device_name, config="tiny" if args.tiny else "gpt2-small", variant=variant,
                      flags=VARIANTS[variant].flags, backend=backend, compile=use_compile,
                      params=model.num_params())
        try:
            for _ in range(warmup):
                step()
            sync()
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            sync()
            dt = (time.perf_counter() - t0) / steps
            mfu = estimate_mfu(model, batch_size, dt, seq_len=T)
            record |= dict(tokens_per_s=sig(batch_size * T / dt), mfu=None if mfu is None else sig(mfu),
                           ms_per_step=sig(dt * 1e3),
                           peak_mem_gb=sig(torch.cuda.max_memory_allocated() / 1e9) if cuda else None)
            print(f"{variant:15s} {backend:7s} compile={use_compile!s:5s} {dt * 1e3:9.2f} ms/step "
                  f"{batch_size * T / dt:10.0f} tok/s mfu={record['mfu']} peak={record['peak_mem_gb']} GB",
                  flush=True)
        except Exception as e:  # e.g. a compile failure: keep the other runs, but say so loudly
            if args.tiny:
                raise
            print(f"ERROR {variant} {backend} compile={use_compile}: {e!r}", file=sys.stderr, flush=True)
            record |= dict(tokens_per_s=None, mfu=None, ms_per_step=None, peak_mem_gb=None, error=repr(e)[:500])
        records.append(record)
        if len(records) < planned:  # a command stopped later keeps what was measured
            write_train(session, shape, records, (len(records), planned))
        model = step = None
        free(use_compile)
    # The profiles come after every timing: a process can stay slower on the host after a profile; a fused-kernel
    # timing that followed three profiles took 34% longer than the same row's in a run with none
    # (results/throughput-h200-2026-12-04/).
    for done, record in enumerate(records if args.profile else [], start=len(records) + 1):
        use_compile, variant, backend = record["compile"], record["variant"], record["backend"]
        if "error" in record:
            continue
        try:  # apart from the timing: a rebuild or profiler that fails (no CUPTI, memory) keeps the timing
            model, step = build(variant, backend, use_compile)
            for _ in range(warmup):
                step()
            sync()  # the warm-up's queued kernels finish before the profiler starts
            record["top_ops"] = profile_steps(step, args.profile, os.path.join(
                out_folder(args, "bench_train"), "profile", f"{variant}-{backend}-compile{use_compile}.txt"))
        except Exception as e:
            if args.tiny:
                raise
            print(f"ERROR profiling {variant} {backend} compile={use_compile}: {e!r}", file=sys.stderr, flush=True)
            record["profile_error"] = repr(e)[:500]
        if done < planned:
            write_train(session, shape, records, (done, planned))
        model = step = None
        free(use_compile)
    write_train(session, shape, records)


def write_train(session, shape, records, partial=None):
    """bench_train.{json,md} of the records so far (Session.write; partial: (done, planned))."""
    args, dtype = session.args, session.dtype
    base, batch_size, warmup, steps = shape
    T = base["block_size"]
    session.write("bench_train", dict(date=session.date, device=session.device_name, command=session.command,
                                      model=base, batch_size=batch_size, match_params=args.match_params,
                                      pad_c_attn=args.pad_c_attn, profile=args.profile,
                                      compile_mode=args.compile_mode, kernel_backward=kernels.BACKWARD,
                                      loss_chunk=args.loss_chunk, sdpa_backend=args.sdpa_backend,
                                      sdpa_order=session.sdpa_order, dtype=str(dtype).replace("torch.", ""),
                                      records=records),
          [" ".join(f"{k}={v}" for k, v in base.items()) + f", batch {batch_size} x T {T}, "
           f"{'bf16 autocast' if dtype == torch.bfloat16 else 'fp32'}, match_params={args.match_params}, "
           + (f"c_attn's output rows padded to a multiple of {args.pad_c_attn} (kernels.AlignedLinear: zero weight "
              "rows in the matmul, cut off after it; the same parameters, results up to rounding), "
              if args.pad_c_attn > 1 else
              "c_attn's output rows not padded (--pad_c_attn=1), ") +
           f"{warmup} warm-up then {steps} timed step{'s' * (steps != 1)} of train.py's own (train.optimizer_step: "
           f"gradient clipping, a non-finite step skipped on the device, fused AdamW); compiled with "
           f"mode={args.compile_mode!r}; {session.sdpa_note} (the torch backend); "
           f"the fused kernel's backward gets dQ by {kernels.BACKWARD!r} (kernels.choose_backward); the loss over "
           + (f"{args.loss_chunk} rows of logits at a time (loss_chunk)" if args.loss_chunk else
              "all the logits at once (loss_chunk=0)"),
           "variants (lab/variants.py): " + "; ".join(f"{v} {VARIANTS[v].flags}" for v in args.variants),
           "MFU: probe.estimate_mfu against probe.peak_flops (dense bf16 peak of the GPU)"] +
          ([f"--profile={args.profile}: {args.profile} more step{'s' if args.profile > 1 else ''} of each profiled "
            "once every row is timed (a process can stay slower on the host after a profile), after its warm-up: "
            "the top ops by their own time in the json (top_ops: name, ms per step, calls per step), PyTorch's "
            "profiler table in profile/ (on a GPU an op and the kernels it launches are listed each: their times "
            "overlap)"]
           if args.profile else []),
          ["variant", "backend", "compile", "ms/step", "tokens/s", "MFU", "peak GB", "params"],
          [[r["variant"], r["backend"], r["compile"], r["ms_per_step"], r["tokens_per_s"], r["mfu"], r["peak_mem_gb"],
            r["params"]] for r in records], partial=partial)


# ----------------------------------------------------------------------------
# --step: train.py's CPU training step against a plain AdamW loop on the same model

def step_chunk(mode, real_chunk):
    """The loss_chunk a STEP_MODES mode trains with: 0 (all the logits at once) for the plain loss, else the real's."""
    return 0 if mode in ("plain", "real_plain_loss") else real_chunk


def check_step_memory(args, setup):
    """Refuse up front, as train.py does and with its estimate (runfolder.step_memory), a --step whose step cannot
    fit in this machine's free memory: a child that outgrows it is killed by the system, maybe with others beside it.
    The estimate is the hungriest mode's (the loss over all the logits at once, where a mode has it)."""
    config, batch_size, _, real_chunk, source = setup
    available = free_memory("cpu")
    if available is None:  # the system cannot tell: as train.py, no refusal
        return
    with torch.device("meta"):  # the parameter count without allocating the weights (GPT-2 small's: 0.5 GB)
        n_params = sum(p.numel() for p in GPT(config).parameters())
    modes = (args.step_child,) if args.step_child else args.step_modes
    configs = [dataclasses.replace(config, loss_chunk=step_chunk(mode, real_chunk)) for mode in modes]
    mode, config = max(zip(modes, configs), key=lambda pair: step_memory(batch_size, pair[1], n_params))
    if step_memory(batch_size, config, n_params) <= available:
        return
    fits = batch_that_fits(config, n_params, available)
    if source == "--step_shape":
        shape = ",".join(map(str, args.step_shape[:3]))
        how = (f"try --step_shape={shape},{fits} or less" if fits >= 1 else
               f"even batch_size 1 does not fit: lower the block_size (--step_shape's third number, "
               f"{args.step_shape[2]}) or the model's size")
    else:
        how = (f"time a copy of {source} with batch_size = {fits} or less" if fits >= 1 else
               f"even batch_size = 1 does not fit: time a copy of {source} with a smaller block_size or model")
    fail(f"--step: the {mode} step of {source}'s model: {memory_need(batch_size, config, n_params, 'cpu')}; "
         f"{available / 2**30:.1f} GiB is free: {how}")


def time_step(args, setup, mode):
    """Time one STEP_MODES mode in this process (which must be fresh: the allocator setting cannot be undone, and
    the peak memory is the process's) on step_setup's model and batch, and print its record as one line:
    STEP_RECORD {json}."""
    config, batch_size, real_dtype, real_chunk, _ = setup
    n_layer, n_embd, block_size = config.n_layer, config.n_embd, config.block_size
    setting = keep_freed_memory() if mode not in ("plain", "real_no_setting") else False
    torch.manual_seed(0)
    chunk = step_chunk(mode, real_chunk)
    model = GPT(dataclasses.replace(config, loss_chunk=chunk))
    x = torch.randint(0, model.config.vocab_size, (batch_size, block_size + 1))
    x, y = x[:, :-1].contiguous(), x[:, 1:].contiguous()
    if mode == "plain":
        optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
    else:
        optimizer = model.configure_optimizers(0.1, 6e-4)  # fused on a CPU, as train.py's
        for group in optimizer.param_groups if mode == "real_unfused" else ():
            group["fused"], group["foreach"] = False, False  # the one-parameter-at-a-time loop
    no_scaler = torch.amp.GradScaler("cpu", enabled=False)
    ctx, dtype = autocast_for("cpu", "float32" if mode in ("plain", "real_fp32") else real_dtype)

    def step():
        with ctx:
            loss = model(x, y)[1]  # as train.py: the logits are not kept through backward
        loss.backward()
        if mode in ("plain", "real_no_clip"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        else:
            optimizer_step(optimizer, no_scaler, model.parameters(), 1.0, loss.detach())

    warmup, steps = (1, 2) if args.tiny else (args.warmup, args.steps)
    for _ in range(warmup):
        step()
    before, times = resource.getrusage(resource.RUSAGE_SELF), []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    after = resource.getrusage(resource.RUSAGE_SELF)
    peak = after.ru_maxrss * (1 if sys.platform == "darwin" else 1024)  # bytes on macOS, KiB on Linux
    ms = statistics.median(times) * 1e3
    print("STEP_RECORD " + json.dumps(dict(
        mode=mode, shape=[n_layer, n_embd, block_size, batch_size], dtype=dtype, loss_chunk=chunk,
        allocator_setting=setting,
        params=model.num_params(), ms_per_step=sig(ms), tokens_per_s=sig(batch_size * block_size / ms * 1e3),
        page_faults_per_step=round((after.ru_minflt - before.ru_minflt) / steps),
        system_s_per_step=sig((after.ru_stime - before.ru_stime) / steps),
        user_s_per_step=sig((after.ru_utime - before.ru_utime) / steps), peak_mem_gb=sig(peak / 1e9, 3))),
        flush=True)


def run_step_child(args, mode):
    """One mode in a fresh process: its record, or a failure naming the mode and the child's last words."""
    # the child runs from the repository (python -m lab.bench): a config file named from here goes by its full path
    config = os.path.abspath(config_path(args.step_config)) if args.step_config else ""
    cmd = [sys.executable, "-m", "lab.bench", f"--step_child={mode}",
           "--step_shape=" + ",".join(map(str, args.step_shape)), f"--step_loss_chunk={args.step_loss_chunk}",
           f"--warmup={args.warmup}", f"--steps={args.steps}", f"--step_config={config}"] + \
        (["--tiny"] if args.tiny else [])
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    lines = [line for line in out.stdout.splitlines() if line.startswith("STEP_RECORD ")]
    if out.returncode or not lines:
        last_words = (out.stderr or out.stdout).strip()[-1500:]
        how = f"failed (exit code {out.returncode})"
        if out.returncode < 0:  # killed by a signal, which leaves no words: the system's OOM killer sends SIGKILL
            number = -out.returncode
            name = {s.value: s.name for s in signal.Signals}.get(number, "unknown")
            oom = ": out of memory? (a smaller --step_shape or batch_size needs less)" if number == signal.SIGKILL \
                else ""
            how = f"was killed by signal {number} ({name}){oom}"
        fail(f"--step: the {mode} step {how}" + (f": {last_words}" if last_words else ""))
    return json.loads(lines[-1][len("STEP_RECORD "):])


def step_summary(records, step_modes):
    """One row per mode over the rounds: the median ms/step and its range, the median page faults, the largest
    peak, and each against the plain loop's (the median of the rounds' ratios, each round's pair run back to back)."""
    rows = []
    for mode in step_modes:
        mine = [r for r in records if r["mode"] == mode]
        row = dict(mode=mode, rounds=len(mine), ms_per_step=sig(statistics.median(r["ms_per_step"] for r in mine)),
                   ms_min=min(r["ms_per_step"] for r in mine), ms_max=max(r["ms_per_step"] for r in mine),
                   page_faults_per_step=round(statistics.median(r["page_faults_per_step"] for r in mine)),
                   peak_mem_gb=max(r["peak_mem_gb"] for r in mine), time_vs_plain=None, peak_vs_plain=None)
        if "plain" in step_modes:
            pairs = [(r, p) for r in mine for p in records if p["mode"] == "plain" and p["round"] == r["round"]]
            row["time_vs_plain"] = sig(statistics.median(r["ms_per_step"] / p["ms_per_step"] for r, p in pairs), 3)
            row["peak_vs_plain"] = sig(row["peak_mem_gb"] / max(p["peak_mem_gb"] for _, p in pairs), 3)
        rows.append(row)
    return rows


def bench_step(session, setup):
    """Each mode of --step_modes in a fresh process, --rounds times, alternating: bench_step.{json,md}."""
    args = session.args
    step_modes, (config, batch_size, real_dtype, real_chunk, source) = args.step_modes, setup
    shape = (config.n_layer, config.n_embd, config.block_size, batch_size)
    model_line = (f"{source}'s model: n_layer {config.n_layer}, n_head {config.n_head}, n_embd {config.n_embd}, "
                  f"block_size {config.block_size}, vocab {config.vocab_size}, mlp {config.mlp}, gate {config.gate}; "
                  f"batch_size {batch_size}; the real step's dtype {real_dtype}, loss_chunk {real_chunk}")
    rounds = 1 if args.tiny else args.rounds
    print(f"--step: {', '.join(step_modes)}; {rounds} round(s), each mode in a fresh process; {model_line}",
          flush=True)
    records = []
    for r in range(1, rounds + 1):
        for mode in step_modes:
            record = dict(round=r, **run_step_child(args, mode))
            records.append(record)
            print(f"round {r} {mode:16s} {record['ms_per_step']:9.1f} ms/step {record['page_faults_per_step']:8d} "
                  f"page faults/step  peak {record['peak_mem_gb']} GB", flush=True)
    summary = step_summary(records, step_modes)
    session.write("bench_step", dict(date=session.date, device=session.device_name, command=session.command,
                                     shape=list(shape), rounds=rounds, step_config=args.step_config or None,
                                     model=dataclasses.asdict(config), modes={m: STEP_MODES[m] for m in step_modes},
                                     cpu_count=os.cpu_count(), torch_threads=torch.get_num_threads(),
                                     loss_chunk=real_chunk, summary=summary, records=records),
          [f"{model_line} (eager); {1 if args.tiny else args.warmup} warm-up then {2 if args.tiny else args.steps} "
           f"timed steps a process; {rounds} round(s), each running every mode once in a fresh process, in the "
           f"order below; {os.cpu_count()} CPU cores, {torch.get_num_threads()} torch threads",
           *[f"{m}: {STEP_MODES[m]}" for m in step_modes],
           "ms/step: the median step of a process; page faults: minor faults a step (memory the system had to "
           "hand back); peak: the process's largest resident memory; vs plain: the median over rounds of the "
           "ratio to that round's plain loop (time), the largest peak over the plain loop's largest (memory)"],
          ["round", "mode", "dtype", "ms/step", "tokens/s", "page faults/step", "system s/step", "user s/step",
           "peak GB"],
          [[r["round"], r["mode"], r["dtype"], r["ms_per_step"], r["tokens_per_s"], r["page_faults_per_step"],
            r["system_s_per_step"], r["user_s_per_step"], r["peak_mem_gb"]] for r in records],
          summary=("Summary", ["mode", "rounds", "ms/step (median)", "range", "page faults/step", "peak GB",
                               "time vs plain", "peak vs plain"],
                   [[r["mode"], r["rounds"], r["ms_per_step"], f"{r['ms_min']}–{r['ms_max']}",
                     r["page_faults_per_step"], r["peak_mem_gb"], r["time_vs_plain"], r["peak_vs_plain"]]
                    for r in summary]))


# ----------------------------------------------------------------------------

def main(argv):
    args = checked_keys(argv)
    setup = step_setup(args) if args.step or args.step_child else None  # a bad --step_config stops here too
    if setup:  # before any child starts: a step too big for this machine's memory is refused, as train.py's
        check_step_memory(args, setup)
    if args.step_child:  # a child of --step: one mode, timed in this fresh process, its record printed
        time_step(args, setup, args.step_child)
        return
    for name, asked in (("bench_kernels", args.kernels), ("bench_train", args.train), ("bench_step", args.step)):
        if asked:  # before anything is timed: a folder that cannot be written stops here, not after the work
            writable_folder(out_folder(args, name))
    date = datetime.datetime.now().isoformat(timespec="seconds")
    if args.tiny:
        print(SMOKE_NOTE, flush=True)
    name = torch.cuda.get_device_name() if cuda else f"cpu ({platform.processor() or platform.machine()})"
    # every SDPA call of this process (the SDPA rows of --kernels, the torch attention of --train) under one preference
    with sdpa_preference(args.sdpa_backend):
        session = Session(args, shlex.join(["python", "-m", "lab.bench", *argv]), date, name,
                          torch.float32 if args.tiny or not cuda else torch.bfloat16, tuple(sdpa_order()))
        if args.kernels:
            bench_kernels(session)
        if args.train:
            bench_train(session)
        if args.step:
            bench_step(session, setup)


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))  # Ctrl-C or a closed pipe: one line

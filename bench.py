"""
Benchmarks for the gated attention kernels and for full training steps.

  python bench.py --kernels            # attention alone: SDPA, SDPA + gate, fused Triton with each way of getting
                                       # dQ in its backward (kernels.choose_backward); bf16, GPU
  python bench.py --train              # GPT-2 small optimizer steps of three variants of variants.py (TIMED,
                                       # or --variants=...),
                                       # each with the fused Triton and the PyTorch attention, with and
                                       # without torch.compile
  python bench.py --kernels --train --tiny   # smoke test: tiny sizes, fp32; on CPU, Triton's interpreter and
                                             # a plain timer: checks the code runs, says nothing about speed

`python bench.py --help` lists the keys (Keys below), given as --key=value (a bool key as a bare --key, a list as
a,b,c) or in a config file (common.configure). bench.py measures GPU speed: without a CUDA GPU it runs only with --tiny. Results go to
{out_dir}/bench_kernels.{json,md} and {out_dir}/bench_train.{json,md}, with the device, the date and the exact
command; out_dir defaults to results/ (the committed GPU measurements) and, for --tiny, to out-bench-tiny/
(git-ignored). FLOPs are counted the FlashAttention way: causal forward 2*B*H*T^2*D (half of
the 4*B*H*T^2*D of full attention), backward 2.5x forward, so forward+backward is 3.5x forward.
"""

import datetime
import os
import platform
import shlex
import sys
import time
from dataclasses import dataclass

import torch

cuda = torch.cuda.is_available()
if not cuda:  # Triton kernels need its interpreter on CPU; must be set before triton is imported (by common)
    os.environ.setdefault("TRITON_INTERPRET", "1")
from common import (COMPILE_MODES, SDPA_BACKENDS, configure, estimate_mfu, fail, markdown_table,  # noqa: E402
                    optimizer_step, sdpa_order, sdpa_preference, write_json, write_text)
from variants import VARIANTS  # noqa: E402

TIMED = ("baseline", "g1_elementwise", "g1_headwise")  # --train: the ungated model and GA's two best G1 gates
BACKENDS = ("triton", "torch")  # the fused kernel (G1 sigmoid gates and no gate), and SDPA with the gate apart


@dataclass
class Keys:
    kernels: bool = False  # time the attention providers
    train: bool = False  # time full training steps of GPT-2 small
    tiny: bool = False  # smoke test: tiny sizes, fp32, no compile; runs on CPU, its timings mean nothing
    out_dir: str = ""  # "": results (GPU runs), out-bench-tiny (--tiny)
    tokens: int = 16384  # --kernels: B*T per call
    seq_lens: tuple[int, ...] = (512, 1024, 2048, 4096, 8192)  # --kernels: the sequence lengths T
    head_dims: tuple[int, ...] = (64, 128)  # --kernels: the head dims D (H = width / D)
    width: int = 2048  # --kernels: H*D
    gqa: int = 0  # --kernels: also rows with Hkv = H / gqa (0: no)
    non_causal: bool = False  # --kernels: full attention instead of causal
    batch_size: int = 16  # --train: sequences per step (--tiny: divided by 8)
    block_size: int = 1024  # --train: T (--tiny: divided by 32)
    compile: str = "both"  # --train: torch.compile: both, true or false
    compile_mode: str = "default"  # --train: torch.compile's mode, one of common.COMPILE_MODES (train.py's key too)
    sdpa_backend: str = "default"  # the kernel SDPA tries first, one of common.SDPA_BACKENDS (train.py's key too)
    variants: tuple[str, ...] = TIMED  # --train: variants of variants.py (python repro.py list)
    backends: tuple[str, ...] = BACKENDS  # --train: attention backends, of triton and torch
    match_params: bool = False  # --train: shrink the MLP so a gated model has the baseline's parameter count (GA)
    loss_chunk: int = 0  # --train: the loss over this many rows of logits at a time (model.py; 0: all at once)
    warmup: int = 10  # --train: untimed steps first (compile happens here)
    steps: int = 20  # --train: timed steps


args, _ = configure(Keys, sys.argv[1:])
if not (args.kernels or args.train):
    fail("choose --kernels and/or --train (python bench.py --help)")
if args.compile.lower() not in ("both", "true", "false"):
    fail(f"--compile={args.compile}: choose both, true or false")
if args.compile_mode not in COMPILE_MODES:
    fail(f"--compile_mode={args.compile_mode}: choose one of {', '.join(COMPILE_MODES)}")
if args.sdpa_backend not in SDPA_BACKENDS:
    fail(f"--sdpa_backend={args.sdpa_backend}: choose one of {', '.join(SDPA_BACKENDS)}")
if args.loss_chunk < 0:
    fail(f"--loss_chunk={args.loss_chunk}: give 0 (the loss over all the logits at once) or a number of rows")
if args.gqa < 0:
    fail(f"--gqa={args.gqa}: give 0 (no GQA rows) or the number of query heads per KV head")
for key in ("seq_lens", "head_dims"):
    if not getattr(args, key) or min(getattr(args, key)) < 1:
        fail(f"--{key}={','.join(map(str, getattr(args, key)))}: give positive integers, e.g. --{key}=512,1024")
seq_lens, head_dims = list(args.seq_lens), list(args.head_dims)


def chosen(key, valid):
    names = list(dict.fromkeys(getattr(args, key)))  # in order, each once
    wrong = [n for n in names if n not in valid]
    if not names or wrong:
        fail(f"--{key}={','.join(names)}: {'unknown ' + ', '.join(map(repr, wrong)) if wrong else 'give at least one'}; "
             f"choose from {', '.join(valid)}")
    return names


variants = chosen("variants", list(VARIANTS))
backends = chosen("backends", list(BACKENDS))
if not cuda and not args.tiny:  # GPT-2 small and the kernel sweep would take hours on a CPU and measure nothing
    fail("bench.py measures GPU speed and no CUDA GPU is visible here; "
         "for a CPU smoke test of the code use --tiny (its timings mean nothing about speed)")
import kernels  # noqa: E402
from kernels import attention_torch, gated_attention  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402


device = "cuda" if cuda else "cpu"
device_name = torch.cuda.get_device_name() if cuda else f"cpu ({platform.processor() or platform.machine()})"
dtype = torch.float32 if args.tiny or not cuda else torch.bfloat16
command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
date = datetime.datetime.now().isoformat(timespec="seconds")
# results/ holds committed GPU measurements only: a smoke test writes to a git-ignored folder (out*/)
args.out_dir = args.out_dir or ("out-bench-tiny" if args.tiny else "results")
os.makedirs(args.out_dir, exist_ok=True)
SMOKE_NOTE = ("SMOKE TEST (--tiny): tiny sizes in fp32" +
              ("" if cuda else ", Triton's CPU interpreter and a plain timer") +
              ". It checks that the code runs; these timings mean nothing about speed.")
if args.tiny:
    print(SMOKE_NOTE, flush=True)
# Every SDPA call of this process (the SDPA rows of --kernels, the torch attention of --train) under one preference.
# The context is held in a global on purpose: a dropped one would be closed, and PyTorch's order back, at once.
SDPA_PREFERENCE = sdpa_preference(args.sdpa_backend)
SDPA_PREFERENCE.__enter__()
SDPA_ORDER = sdpa_order()
SDPA_NOTE = f"sdpa_backend={args.sdpa_backend!r}: SDPA tries its kernels in the order {', '.join(SDPA_ORDER)}"


def sync():
    if cuda:
        torch.cuda.synchronize()


def time_ms(fn, grads=()):
    """Median milliseconds per call: triton.testing.do_bench on a GPU; on CPU (--tiny, where timings mean nothing)
    one call with a plain timer."""
    fn()  # first call: Triton compiles and autotunes here, outside the timing
    if cuda:
        import triton.testing
        return triton.testing.do_bench(fn, warmup=25, rep=100, grad_to_none=list(grads), return_mode="median")
    for g in grads:
        g.grad = None
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def sig(x, digits=4):
    return float(f"{x:.{digits}g}")


def write(name, payload, notes, header, rows, summary=None):
    """{out_dir}/{name}.json (payload) and .md: notes, then summary = (title, header, rows) if given, then the table
    of every measurement."""
    payload = dict(smoke_test=args.tiny, **payload)
    write_json(os.path.join(args.out_dir, name + ".json"), payload)  # atomic, as every result file
    smoke = [f"- **{SMOKE_NOTE}**"] if args.tiny else []  # the first thing a reader of the file sees
    lines = [f"# {name}", "", *smoke, f"- device: {device_name}", f"- date: {date}", f"- command: `{command}`",
             *[f"- {n}" for n in notes], ""]
    table = markdown_table(header, rows)
    if summary:
        title, summary_header, summary_rows = summary
        table = [f"## {title}", "", *markdown_table(summary_header, summary_rows), "", "## Every measurement", "",
                 *table]
    write_text(os.path.join(args.out_dir, name + ".md"), "\n".join(lines + table) + "\n")
    print("\n".join(table))
    print(f"wrote {args.out_dir}/{name}.json and .md" +
          (" (a smoke test: the timings mean nothing about speed)" if args.tiny else ""))


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


if args.kernels:
    seq_lens, head_dims = ([16, 40], [32]) if args.tiny else (seq_lens, head_dims)
    width, tokens = (64, 80) if args.tiny else (args.width, args.tokens)
    causal = not args.non_causal
    records = []
    for D in head_dims:
        H = width // D
        for Hkv in [H] + ([H // args.gqa] if args.gqa else []):
            for T in seq_lens:
                B = max(1, tokens // T)
                gen = torch.Generator(device=device).manual_seed(0)
                q, k, v, g, dy = (torch.randn(B, h, T, d, device=device, dtype=dtype, generator=gen)
                                  for h, d in ((H, D), (Hkv, D), (Hkv, D), (H, D), (H, D)))
                for t in (q, k, v, g):
                    t.requires_grad_()
                fwd_flops = 4 * B * H * T * T * D * (0.5 if causal else 1.0)
                for provider, (fn, backward, modes) in PROVIDERS.items():
                    if backward:
                        kernels.choose_backward(backward)
                    run = lambda: fn(q, k, v, g, causal)  # noqa: E731
                    for mode, flops, call in (("fwd", fwd_flops, run),
                                              ("fwd+bwd", 3.5 * fwd_flops, lambda: run().backward(dy))):
                        if mode not in modes:
                            continue
                        ms = time_ms(call, grads=(q, k, v, g))
                        records.append(dict(device=device_name, B=B, H=H, Hkv=Hkv, T=T, D=D, causal=causal,
                                            dtype=str(dtype).replace("torch.", ""), provider=provider, mode=mode,
                                            ms=sig(ms), tflops=sig(flops / ms / 1e9)))
                        print(f"D={D} H={H} Hkv={Hkv} T={T} B={B} {provider:21s} {mode:8s} {ms:9.3f} ms "
                              f"{records[-1]['tflops']:8.2f} TFLOP/s", flush=True)
    kernels.choose_backward(kernels.DEFAULT_BACKWARD)
    summary = kernel_summary(records)
    write("bench_kernels", dict(date=date, device=device_name, command=command, sdpa_backend=args.sdpa_backend,
                                sdpa_order=SDPA_ORDER, summary=summary, records=records),
          [f"dtype {str(dtype).replace('torch.', '')}, causal={causal}, B*T = {tokens}, H*D = {width}, "
           "inputs require grad; median of triton.testing.do_bench (CPU: one call)",
           SDPA_NOTE,
           "TFLOP/s: forward 4*B*H*T^2*D (halved when causal), forward+backward 3.5x that",
           "triton+gate: the fused kernel with dQ in a kernel of its own (recompute); triton+gate atomic-dq: dQ added "
           "atomically in the dK/dV pass (kernels.choose_backward)",
           f"the summary's ratios take the faster dQ mode at each shape; training (train.py, bench.py --train) uses "
           f"{kernels.DEFAULT_BACKWARD!r} here (kernels.DEFAULT_BACKWARD, set by GATED_ATTENTION_BACKWARD)"],
          ["D", "H", "Hkv", "T", "B", "provider", "mode", "ms", "TFLOP/s"],
          [[r["D"], r["H"], r["Hkv"], r["T"], r["B"], r["provider"], r["mode"], r["ms"], r["tflops"]] for r in records],
          summary=("Fused gated attention against SDPA, forward+backward",
                   ["D", "H", "Hkv", "T", "B", "SDPA ms", "SDPA+gate ms", "fused ms (recompute dQ)",
                    "fused ms (atomic dQ)",
                    "faster dQ", "SDPA+gate / fused", "SDPA / fused", "fwd: SDPA+gate / fused"],
                   [[r["D"], r["H"], r["Hkv"], r["T"], r["B"], r["sdpa"], r["sdpa_gate"], r["triton+gate"],
                     r["triton+gate atomic-dq"], "atomic" if r["best"] == FUSED[1] else "recompute", r["vs_sdpa_gate"],
                     r["vs_sdpa"], r["fwd_vs_sdpa_gate"]] for r in summary]))

# ----------------------------------------------------------------------------
# --train: full optimizer steps of GPT-2 small (or a tiny model)

if args.train:
    if args.tiny:
        # a tiny model, with the batch scaled down from --batch_size and --block_size (16 x 1024 -> 2 x 32)
        base = dict(block_size=max(8, args.block_size // 32), vocab_size=128, n_layer=2, n_head=2, n_embd=64)
        batch_size, warmup, steps, compiles = max(1, args.batch_size // 8), 1, 2, [False]
    else:  # GPT-2 small: 12 layers, 12 heads, 768 wide, T=1024, vocab 50304
        base = dict(block_size=args.block_size, vocab_size=50304, n_layer=12, n_head=12, n_embd=768)
        batch_size, warmup, steps = args.batch_size, args.warmup, args.steps
        compiles = {"both": [False, True], "true": [True], "false": [False]}[args.compile.lower()]
    T = base["block_size"]
    autocast = torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16)
    records = []
    for use_compile in compiles:
        for variant, backend in ((v, b) for v in variants for b in backends):
            torch.manual_seed(0)
            config = GPTConfig(**base, **VARIANTS[variant].flags, attn_backend=backend, match_params=args.match_params,
                               loss_chunk=args.loss_chunk)
            model = GPT(config).to(device)
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

            record = dict(device=device_name, config="tiny" if args.tiny else "gpt2-small", variant=variant,
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
            del model, step_model, optimizer, x, y
            if use_compile:
                torch._dynamo.reset()
            if cuda:
                torch.cuda.empty_cache()
    write("bench_train", dict(date=date, device=device_name, command=command, model=base, batch_size=batch_size,
                              match_params=args.match_params, compile_mode=args.compile_mode,
                              kernel_backward=kernels.BACKWARD, loss_chunk=args.loss_chunk,
                              sdpa_backend=args.sdpa_backend, sdpa_order=SDPA_ORDER,
                              dtype=str(dtype).replace("torch.", ""), records=records),
          [" ".join(f"{k}={v}" for k, v in base.items()) + f", batch {batch_size} x T {T}, "
           f"{'bf16 autocast' if dtype == torch.bfloat16 else 'fp32'}, match_params={args.match_params}, "
           f"{warmup} warm-up then {steps} timed steps of train.py's own (common.optimizer_step: gradient clipping, "
           f"a non-finite step skipped on the device, fused AdamW); compiled with mode={args.compile_mode!r}; "
           f"{SDPA_NOTE} (the torch backend); "
           f"the fused kernel's backward gets dQ by {kernels.BACKWARD!r} (kernels.choose_backward); the loss over "
           + (f"{args.loss_chunk} rows of logits at a time (loss_chunk)" if args.loss_chunk else
              "all the logits at once (loss_chunk=0)"),
           "variants (variants.py): " + "; ".join(f"{v} {VARIANTS[v].flags}" for v in variants),
           "MFU: common.estimate_mfu against common.peak_flops (dense bf16 peak of the GPU)"],
          ["variant", "backend", "compile", "ms/step", "tokens/s", "MFU", "peak GB", "params"],
          [[r["variant"], r["backend"], r["compile"], r["ms_per_step"], r["tokens_per_s"], r["mfu"], r["peak_mem_gb"],
            r["params"]] for r in records])

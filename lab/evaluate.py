"""
What the attention sink and the massive activations cost a user, measured on any checkpoint. Massive activations
hurt low-bit activation quantization (GN §5.2: a model whose norms rescale without them, GatedNorm, loses the
least), the sink shapes how a model copes beyond its training length (GA Table 5), and a model leaning on its sink
cannot drop the first tokens from a sliding window (StreamingLLM). Three modes, each a validation loss under a
change the model was not trained for:

    python -m lab.evaluate --runs=out-baseline,out-g1 [--labels=base,g1] [--modes=quant,length,stream]
    python -m lab.evaluate --pretrained=gpt2 --modes=quant,stream    # published checkpoints (pretrained.py)

quant   weights and activations rounded to N bits (--quant=w8a8,w4a16,w8a4,w4a4: W bits of weights, A of
        activations; 16 means left in full precision). Fake quantization, round-to-nearest to a symmetric grid of
        2^(N-1) - 1 steps either side of 0: weights with one scale per output channel, activations with one scale
        per token, computed on the fly. Quantized: the weight and the input of every linear layer of the blocks
        (c_attn, whose outputs include the gate's logits; the attention's c_proj, W_O; the MLP's c_fc and c_proj;
        the blocks' GatedNorm W_down and W_up). Full precision: the token embedding and lm_head, the norms (the final
        one's GatedNorm too), the attention scores and softmax, the gate's product. A massive activation sets its
        token's scale, so the token's other features round to 0: part of the loss increase is what the outliers
        cost, the rest the rounding any model pays (w4a16 rounds the weights alone).
length  the loss at each position of windows 1x, 2x, 4x, 8x the training length T (--lengths), reported per
        bucket of positions [0, T), [T, 2T), [2T, 4T), [4T, 8T), with RoPE as trained ('none', whose angles run
        past anything seen in training), NTK-aware scaling ('ntk') or YaRN ('yarn', the method GA Table 5 uses, with
        the paper's ramp: model.rope_tables), the factor being the window over T (--rope=none,ntk,yarn): under
        ntk and yarn each length is another scaling, so a bucket compares across lengths only under none (GA scales
        once, for the longest). Every length reads the first positions of the same long windows; the lengths are
        powers of two, so that each ends a bucket. Each bucket's level has an interval made mostly of the spread
        between windows; each bucket of a length past T also has its increase over the same windows' [0, T) as
        trained (Δ, paired), whose interval is the one that tests the extrapolation; in [0, T) itself, what the
        scaling costs inside the trained length (GA Table 5). Needs rotary position embeddings.
stream  sliding-window attention (model.window_mask): each query sees its last w keys (--stream_windows, default
        T/8 and T/4) and the first k positions of the window (--keep_first=0,1,4: StreamingLLM keeps 4 "attention
        sinks"; with train.py's bos, position 0 is <|endoftext|>), k keys on top of the w, not out of them. The
        loss is taken on positions w..T-1, where the window cuts, and compared with full attention on the same
        positions. Positions stay those of training, so only what a query can see changes, not how far it must
        extrapolate.

The windows: for a run, --windows validation windows of its own data (data.shards.val_batches, anchored on
<|endoftext|> as it was trained; as many as the validation set holds without overlap, with a note, where that is
fewer); for a published checkpoint, windows of --window tokens cut from --text. Every
model runs in float32 on PyTorch's attention. Each difference comes with a 95% t-interval over the windows (the
same windows with and without the change: paired). Writes summary.json, summary.md and, with matplotlib,
quant.png, length.png and stream.png to --out_dir (default out-eval/), as one set: a new evaluation there takes
away the figures of modes it did not measure. `python -m lab.repro evaluate` runs this on
the study's checkpoints, and `python -m lab.repro report` includes the result.

Each run's record (its entry in summary.json, with the settings it was measured under, the device, the date, the
checkpoint's iteration and the commit of the code that measured it) is kept beside its checkpoint as evaluated.json
(runfolder.EVALUATED). A run whose checkpoint is gone (trained on a GPU machine that was given back with everything
on it) is then taken from that record, if it was measured under the settings asked for now (summary.json marks it
measured_earlier, and summary.md names it); a run that has its checkpoint is always measured afresh.
"""

import dataclasses
import json
import os
import sys
import time
if not __package__:  # run as python lab/evaluate.py: find the project from its root, as python -m lab.evaluate does
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dataclasses import dataclass

# cli before torch: its excepthook (cli.one_line_interrupt) makes Ctrl-C while torch loads one line, not a traceback
from cli import configure, dataset_dir, device_name, fail, free_memory, pick_device, run_main
import torch
import torch.nn as nn
import torch.nn.functional as F

import pretrained
from lab.report import (data_problem, distinct_styles, finite_json, kept_of_other_run, legend_beside, log_start,
                        pyplot, save_figure, variant_of)
from runfolder import (CHECKPOINT, EVALUATED, claimed, code_version, model_from_checkpoint, no_checkpoint,
    read_checkpoint, result_set, writable_folder, write_json, write_text)
from data.shards import TokenWindows, bos_token, dataset_fingerprint, val_batches, val_windows_apart
from model import GPT, VALID
from lab.report import PAPERS_SAY, fmt_interval, headline, not_a_file_name, repeated_label, table
from lab.stats import mean_ci

MODES = ("quant", "length", "stream")
FILES = ("summary.json", "summary.md", "quant.png", "length.png", "stream.png")  # all it writes in its out_dir


@dataclass
class EvaluateConfig:
    """Every key of lab/evaluate.py."""
    runs: tuple[str, ...] = ()  # train.py out_dirs
    labels: tuple[str, ...] = ()  # names for the models in the same order (default: the folders' names)
    checkpoint: str = CHECKPOINT  # which file of each run: ckpt.pt or best.pt
    pretrained: tuple[str, ...] = ()  # published checkpoints instead (pretrained.py): gpt2, gated-1b-baseline, ...
    text: str = ""  # for --pretrained: the text to cut windows from; default data/sample_text.txt
    window: int = 1024  # for --pretrained: tokens per window, the T of the modes
    modes: tuple[str, ...] = MODES  # what to measure: quant, length, stream
    windows: int = 64  # windows per measurement (for --pretrained: at most as many as the text holds)
    batch_size: int = 16  # windows of T tokens per forward pass (fewer of the longer ones: as many tokens)
    quant: tuple[str, ...] = ("w8a8", "w4a16", "w8a4", "w4a4")  # wNaM: N bits of weights, M of activations, 16 = full
    lengths: tuple[int, ...] = (1, 2, 4, 8)  # multiples of the training length, powers of two
    rope: tuple[str, ...] = ("none", "yarn")  # how RoPE runs past the training length: none, ntk, yarn
    stream_windows: tuple[int, ...] = ()  # sliding windows w in tokens; default T/8 and T/4
    keep_first: tuple[int, ...] = (0, 1, 4)  # first positions kept in view of every query
    out_dir: str = "out-eval"  # git-ignored; results/ holds committed results
    device: str = "auto"  # auto (cuda, then mps, then cpu), cpu, cuda, cuda:1, mps


# ----------------------------------------------------------------------------
# The loss of every token

@torch.no_grad()
def token_losses(model, x, y, rows):
    """Cross-entropy of every token of windows x, targets y (N, L), `rows` windows at a time: (N, L) float32 on
    the CPU. float32 throughout: a quantization grid is the only rounding a measurement should see."""
    device = model.lm_head.weight.device
    out = []
    for i in range(0, x.size(0), rows):
        logits, _ = model(x[i:i + rows].to(device))
        target = y[i:i + rows].to(device)
        out.append(F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), reduction="none")
                   .view(target.shape).cpu())
    return torch.cat(out)


def interval(per_window):
    """A mean over windows with its 95% t-interval: {"mean", "lo", "hi"} (lo, hi None for one window)."""
    mean, lo, hi = mean_ci(per_window.double().numpy())
    return {"mean": mean, "lo": lo, "hi": hi}


def rebuilt(model, **changes):
    """The model's own weights (shared, not copied) in a GPT whose config differs by `changes`."""
    return GPT.with_weights(dataclasses.replace(model.config, **changes), model.state_dict())


# ----------------------------------------------------------------------------
# quant: round-to-nearest fake quantization

# The bit widths a setting may name: 2 to 8, where round-to-nearest costs something worth measuring (2 bits: the
# grid {-1, 0, 1}; 1 bit would be {0}), and 16, which leaves that side in full precision. Any other number would be
# read as full precision and labelled as if it were a grid, so it is refused.
BITS = (2, 3, 4, 5, 6, 7, 8, 16)


def parse_setting(text):
    """'w4a16' -> (4, 16): weight bits, activation bits, each one of BITS; 16 leaves that side in full precision."""
    w, a = text.lower().removeprefix("w").partition("a")[::2]
    if not (w.isdecimal() and a.isdecimal()) or not all(int(b) in BITS for b in (w, a)):
        raise ValueError(f"quantization setting {text!r} is not valid: write wNaM with N and M each one of "
                         f"{', '.join(map(str, BITS[:-1]))} bits, or 16 for full precision, e.g. w8a8,w4a16,w4a4")
    return int(w), int(a)


def fake_quantize(x, bits):
    """x rounded to `bits` bits with one scale per row (its last dimension): the grid scale * {-q, ..., q},
    q = 2^(bits-1) - 1, scale = max |row| / q, so the row's largest magnitude is a grid point and every other value
    rounds to the nearest step. A weight's row is an output channel, an activation's a token."""
    if bits >= 16:
        return x
    q = 2 ** (bits - 1) - 1
    # in fp32 at least: bf16 keeps 8 significant bits, so x / scale rounded to bf16 can land a step off the nearest
    wide = x.to(torch.promote_types(x.dtype, torch.float32))
    scale = wide.abs().amax(-1, keepdim=True).clamp_min(torch.finfo(wide.dtype).tiny) / q
    return ((wide / scale).round().clamp(-q, q) * scale).to(x.dtype)


def quantized(model, w_bits, a_bits):
    """The model with every linear layer of its blocks quantized: its weight now (per output channel), its input on
    every call (per token). A new GPT; the unquantized tensors are the model's own."""
    state = model.state_dict()
    linears = [name for name, m in model.transformer.h.named_modules() if isinstance(m, nn.Linear)]
    for name in linears:
        key = f"transformer.h.{name}.weight"
        state[key] = fake_quantize(state[key], w_bits)
    q = GPT.with_weights(model.config, state)
    if a_bits < 16:
        for name in linears:
            q.transformer.h.get_submodule(name).register_forward_pre_hook(
                lambda module, args: (fake_quantize(args[0], a_bits),))
    return q


def evaluate_quant(model, x, y, rows, settings):
    """The loss in full precision, and under each setting with its increase (intervals over windows)."""
    full = token_losses(model, x, y, rows).mean(1)
    out = {"full": interval(full), "settings": []}
    for setting in settings:
        per_window = token_losses(quantized(model, *parse_setting(setting)), x, y, rows).mean(1)
        out["settings"].append({"setting": setting, "loss": interval(per_window),
                                "increase": interval(per_window - full)})
    return out


# ----------------------------------------------------------------------------
# length: past the training length, with RoPE as trained, NTK-aware or YaRN

def buckets(T, length):
    """Position ranges [0, T), [T, 2T), [2T, 4T), ... up to length."""
    edges = [0, T]
    while edges[-1] < length:
        edges.append(min(2 * edges[-1], length))
    return list(zip(edges[:-1], edges[1:]))


def window_bytes(n_head, vocab_size, L):
    """Memory one window of L tokens takes in a forward pass of the length mode: on PyTorch's attention path the
    scores of a layer's heads, n_head x L² float32, and the logits, L x vocab float32, dominate (the weights and the
    hidden states are small beside them at long lengths), each held about twice at its peak (the scores beside their
    softmax, the logits beside their log-softmax)."""
    return 2 * 4 * L * (n_head * L + vocab_size)


def length_rows(n_head, vocab_size, L, rows, free):
    """Windows of L tokens per forward pass: `rows`, fewer where they would not fit in 80% of `free` bytes (None:
    unknown), so that long lengths run in pieces; at least 1 (main() refused a length whose one window does not fit)."""
    return rows if free is None else max(1, min(rows, int(0.8 * free // window_bytes(n_head, vocab_size, L))))


def evaluate_length(model, x, y, rows, multiples, scalings):
    """Per scaling, per length: the loss per position bucket, with its interval over windows, and for each bucket of
    a length past T its increase over the same windows' first T positions as trained (1x, RoPE unscaled: paired, so
    a window's own difficulty cancels, which the levels' intervals are mostly made of; and a scaling's cost inside T
    counts against it). In [0, T) that increase is the scaling's cost inside the trained length (GA Table 5: every
    model loses some, the gated ones less), 0 up to rounding with RoPE as trained (causal: the later positions
    change nothing before them). x, y hold windows of max(multiples) * T tokens; each length reads their first
    positions. A factor of 1 is RoPE as trained whatever the scaling: measured once, first."""
    T = model.config.block_size
    first = token_losses(model, x[:, :T], y[:, :T], rows)  # 1x, as trained: every scaling's 1x row
    inside = first.mean(1)  # each window's loss within T, as trained: what each Δ is paired with
    out = {}
    for scaling in scalings:
        out[scaling] = []
        for m in multiples:
            L = m * T
            if m == 1:
                losses = first
            else:
                longer = rebuilt(model, block_size=L, rope_scaling=scaling, rope_factor=1.0 if scaling == "none"
                                 else float(m))
                per_pass = length_rows(model.config.n_head, model.config.vocab_size, L, max(1, rows // m),  # as
                                       free_memory(str(model.lm_head.weight.device)))  # many tokens a pass, if they fit
                losses = token_losses(longer, x[:, :L], y[:, :L], per_pass)
            out[scaling].append({"multiple": m, "length": L, "buckets": [
                {"from": a, "to": b, **interval(losses[:, a:b].mean(1))} |
                ({"increase": interval(losses[:, a:b].mean(1) - inside)} if m > 1 else {}) for a, b in buckets(T, L)]})
    return out


# ----------------------------------------------------------------------------
# stream: a sliding window, with and without the first positions

def evaluate_stream(model, x, y, rows, windows, keeps):
    """Per window w: the loss of positions w..T-1 under full attention, and under the window with each number of
    first positions kept, with its increase over full attention (intervals over windows)."""
    full = token_losses(model, x, y, rows)
    out = []
    for w in windows:
        reference = full[:, w:].mean(1)
        row = {"window": w, "full": interval(reference), "keep": []}
        for k in keeps:
            per_window = token_losses(rebuilt(model, attn_window=w, attn_keep_first=k), x, y, rows)[:, w:].mean(1)
            row["keep"].append({"k": k, "loss": interval(per_window), "increase": interval(per_window - reference)})
        out.append(row)
    return out


# ----------------------------------------------------------------------------
# A run's record, kept beside its checkpoint (runfolder.EVALUATED), for when the checkpoint is gone

def written(value):
    """A key's value as it is written on the command line: a list as a,b,c."""
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def run_settings(T, checkpoint, modes, n, batch_size, quant, multiples, scalings, stream_windows, keeps):
    """What a run's numbers depend on besides its weights, under lab/evaluate.py's key names (so that a message can
    say how to ask for them again); the stream windows resolved for the run's training length T (default T/8 and
    T/4), so that asking for the default or for the same windows by name is the same. The device is not among them: it
    changes the numbers only by rounding, and each record says which it was."""
    return {"checkpoint": checkpoint, "modes": [m for m in MODES if m in modes], "windows": n,
            "batch_size": batch_size, "quant": list(quant), "lengths": list(multiples), "rope": list(scalings),
            "stream_windows": list(stream_windows or (T // 8, T // 4)), "keep_first": list(keeps)}


def keep_record(run, record):
    """Write a run's record (with its "settings") beside its checkpoint, atomically: a kill while writing leaves the
    previous record whole, never half of one. A folder that cannot be written (read-only, full) costs one note, never
    the measurement: the summary holds it."""
    try:
        write_json(os.path.join(run, EVALUATED), finite_json(record)[0])
    except OSError as e:
        print(f"note: could not keep the record beside {os.path.join(run, record['checkpoint'])} ({EVALUATED}: "
              f"{e.strerror or e}); the summary holds it, but it cannot stand in for the run once its checkpoint is "
              "gone", flush=True)


def stored_record(run, checkpoint, settings_for):
    """The record kept of a run whose `checkpoint` is gone, to stand in for a measurement: only if it was measured
    under the settings asked for now, settings_for(T) (run_settings), T being the run's. FileNotFoundError where
    none is kept, ValueError where it cannot be read or differs, each one line saying what to do."""
    path = os.path.join(run, EVALUATED)
    if not os.path.isfile(path):
        raise FileNotFoundError(no_checkpoint(run, checkpoint))
    try:
        with open(path) as f:
            record = json.load(f)
        kept, asked = record["settings"], settings_for(record["T"])
    except (OSError, ValueError, KeyError, TypeError) as e:  # cut short, or not lab/evaluate.py's
        raise ValueError(f"no {checkpoint} in {run}, and its {EVALUATED} cannot be read ({type(e).__name__}: {e}): "
                         f"train the run again (python train.py --out_dir={run} ...)") from None
    other = kept_of_other_run(run, record, EVALUATED)
    if other:
        raise ValueError(f"no {checkpoint} in {run}, and {other}: evaluate the new run once it has saved its "
                         f"{checkpoint}")
    # batch_size, like the device, changes the numbers only by rounding: recorded, not required to match
    differ = [key for key in asked if key != "batch_size" and kept.get(key) != asked[key]]
    if differ:
        raise ValueError(
            f"no {checkpoint} in {run}, and the record kept of it ({EVALUATED}, measured on {record.get('device')}, "
            f"{record.get('date')}) was measured under other settings: " +
            "; ".join(f"{key} {written(kept.get(key))}, asked now {written(asked[key])}" for key in differ) +
            ". Re-run with " + " ".join(f"--{key}={written(kept.get(key))}" for key in differ) +
            f" to use it, or train the run again (python train.py --out_dir={run} ...)")
    return record


# ----------------------------------------------------------------------------
# Models and their windows

def run_data_dir(checkpoint):
    cfg = checkpoint["config"]
    return dataset_dir(cfg["dataset"], cfg.get("data_dir"))


def checked_checkpoint(path):
    """A run's checkpoint (runfolder.read_checkpoint), refused with one line (ValueError) where it cannot be
    measured here: not train.py's, trained on data that is not here or has changed since (lab.report.data_problem),
    or with weights that are not finite (every loss would be NaN)."""
    ckpt = read_checkpoint(path)
    if "dataset" not in ckpt.get("config", {}):
        raise ValueError(f"{path} lacks train.py's settings (its dataset): lab/evaluate.py reads train.py's "
                         "checkpoints")
    problem = data_problem(ckpt, run_data_dir(ckpt), path)
    if problem:
        raise ValueError(problem)
    bad = [k for k, v in ckpt["model"].items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise ValueError(f"the model in {path} is not finite (NaN or infinite weights in {len(bad)} tensor(s), e.g. "
                         f"{bad[0]}): there is nothing to measure; the run diverged before this state was saved (its "
                         "best.pt may be finite)")
    return ckpt


def run_windows(checkpoint, n, length):
    """n validation windows of `length` tokens of a run's data, anchored on <|endoftext|> if it was trained so,
    or as many as the validation set holds without overlap where that is fewer (the intervals treat the windows as
    independent: overlapping ones would make them too narrow), with a note: ((x, y), each (windows, length); the
    data's folder)."""
    data_dir = run_data_dir(checkpoint)
    bos = bos_token(data_dir) if checkpoint["config"].get("bos", False) else None
    try:
        most = max(val_windows_apart(data_dir, length, bos), 1)  # it raised where not even one window fits
        windows = val_batches(data_dir, length, min(n, most), 1, bos=bos)[0]
    except ValueError as e:
        raise ValueError(f"{e} (here: windows of {length} tokens; ask for shorter ones with --lengths)") from None
    if n > most:
        print(f"note: {data_dir}'s validation set holds {most} windows of {length} tokens without overlap: "
              f"{windows[0].size(0)} measured, not the {n} asked (overlapping windows would make the intervals too "
              "narrow)", flush=True)
    return windows, data_dir


def load_models(runs, checkpoint_name, names, text_path, window, n, device, settings_for):
    """For each model, train.py runs first, one in memory at a time: (model, T, what it is, windows), T the
    training length the modes take (a run's block_size; --window for a published checkpoint), windows(length)
    -> ((x, y), where they come from). A run whose checkpoint is gone comes as (None, T, the record kept of it,
    None): stored_record's, measured under settings_for(T). The published checkpoints are found and checked first:
    one refused after the runs were measured would cost their work."""
    text_path = text_path or pretrained.SAMPLE_TEXT
    found = [published(name, window, text_path) for name in names]
    for run in runs:
        path = os.path.join(run, checkpoint_name)
        if not os.path.isfile(path):
            record = stored_record(run, checkpoint_name, settings_for)
            yield None, record["T"], dict(record, run=run), None  # the folder where it is now
            continue
        ckpt = checked_checkpoint(path)
        model = model_from_checkpoint(ckpt, path, device, attn_backend="torch")
        # which run and which data: a record kept beside the checkpoint stands for this run only
        yield model, model.config.block_size, {"run": run, "checkpoint": checkpoint_name,
                                               "iter_num": ckpt.get("iter_num"), "run_id": ckpt.get("run_id"),
                                               "val_loss_logged": ckpt.get("val_loss"), "log_start": log_start(run),
                                               "data_fingerprint": dataset_fingerprint(run_data_dir(ckpt)),
                                               "bos": bool(ckpt["config"].get("bos", False))}, \
            lambda length, c=ckpt: run_windows(c, n, length)
    for name, (ckpt, enc, text) in zip(names, found):
        def windows(length, enc=enc, bos=enc.eot_token if ckpt.bos else None, text=text):
            batches = pretrained.text_windows(enc, text, length, n, bos)
            return (torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])), text_path
        yield pretrained.load_model(ckpt, device), window, {"pretrained": name, "about": ckpt.about}, windows


def published(name, window, text_path):
    """A published checkpoint's (ckpt, tokenizer, text) for windows of `window` tokens of text_path; what makes it
    unmeasurable (not found, a window past its positions, a text not UTF-8 or shorter than a window) raises, naming
    it."""
    ckpt = pretrained.locate(name)
    if window > ckpt.config.block_size:
        raise ValueError(f"--window={window} is longer than {name}'s {ckpt.config.block_size} positions")
    enc = pretrained.load_tokenizer(ckpt)
    try:
        with open(text_path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"--text={text_path}: not UTF-8 text (byte {e.start}): give a text file, e.g. "
                         "data/sample_text.txt") from None
    pretrained.text_windows(enc, text, window, 1, enc.eot_token if ckpt.bos else None)  # one window at least
    return ckpt, enc, text


def measure(model, T, windows, modes, rows, settings, multiples, scalings, stream_windows, keeps, n):
    """Each mode asked for on one model: its part of the model's record; "notes" where fewer than the n windows
    asked were measured (the data or the text holds no more)."""
    out = {"notes": []}
    if "quant" in modes or "stream" in modes:
        (x, y), out["data"] = windows(T)
        out["windows"] = x.size(0)
        if x.size(0) < n:
            out["notes"].append(f"{x.size(0)} windows of {T} tokens, not the {n} asked: {out['data']} holds no more "
                                "without overlap")
        if "quant" in modes:
            out["quant"] = evaluate_quant(model, x, y, rows, settings)
        if "stream" in modes:  # main() checked the windows against every model's T
            out["stream"] = evaluate_stream(model, x, y, rows, stream_windows or (T // 8, T // 4), keeps)
    if "length" in modes:  # main() refused models without RoPE and published checkpoints
        (x, y), out["data"] = windows(max(multiples) * T)
        out["length"] = evaluate_length(model, x, y, rows, multiples, scalings)
        out["length_windows"] = x.size(0)
        if x.size(0) < n:
            out["notes"].append(f"{x.size(0)} windows of {max(multiples) * T} tokens for the length mode, not the {n} "
                                f"asked: {out['data']} holds no more without overlap")
    return out


def evaluate(runs=(), labels=None, out_dir="out-eval", device="auto", modes=MODES, n=64, batch_size=16,
             settings=("w8a8", "w4a16", "w8a4", "w4a4"), multiples=(1, 2, 4, 8), scalings=("none", "yarn"),
             stream_windows=(), keeps=(0, 1, 4), checkpoint=CHECKPOINT, names=(), text_path="", window=1024):
    """Each mode on each model (train.py runs, then published checkpoints); writes summary.json, summary.md and the
    plots to out_dir and returns the summary. Each run's record is kept beside its checkpoint (keep_record), and
    stands in for a run whose checkpoint is gone (stored_record)."""
    device = pick_device(device)
    labels = list(labels or [os.path.basename(os.path.normpath(r)) for r in runs] + list(names))
    if len(labels) != len(runs) + len(names):
        raise ValueError(f"{len(labels)} labels for {len(runs) + len(names)} models")

    def settings_for(T):  # what a run of training length T is measured under here
        return run_settings(T, checkpoint, modes, n, batch_size, settings, multiples, scalings, stream_windows, keeps)
    records, here, code = [], device_name(device), code_version()  # which lab/evaluate.py measured (as train.py logs)
    models = load_models(runs, checkpoint, names, text_path, window, n, device, settings_for)
    for label, (model, T, source, windows) in zip(labels, models):
        if model is None:  # a run whose checkpoint is gone: the record kept of it, under these settings
            record = dict(source, label=label, measured_earlier=True)
            where = f" (measured earlier on {record['device']}, {record['date']}: its {checkpoint} is gone)"
        else:
            start = time.time()
            record = {"label": label, **source, "T": T, "params": model.num_params(),
                      "model": dataclasses.asdict(model.config), "device": here, "date": time.strftime("%Y-%m-%d"),
                      "code": code}
            if "run" in source:
                record["settings"] = settings_for(T)
            try:
                record.update(measure(model, T, windows, modes, batch_size, settings, multiples, scalings,
                                      stream_windows, keeps, n))
            except ValueError as e:  # e.g. a loss that is not finite (stats.mean_ci): say which model
                raise ValueError(f"{label} ({source.get('run') or source.get('pretrained')}): {e}") from None
            record["seconds"] = round(time.time() - start, 1)
            if "run" in source:  # at once, so that a later failure loses no run's numbers
                keep_record(source["run"], record)
            where = ""
            del model
        records.append(record)
        print(f"{label:>24}: " + ", ".join(f"{k} {v:.3f}" for k, v in headline(record).items()) +
              f" [{record['seconds']:.0f} s]{where}", flush=True)
    summary = {"device": here, "date": time.strftime("%Y-%m-%d"), "modes": list(modes), "models": records}
    # one set (runfolder.result_set: no plot of modes measured before is left beside it), each file atomically;
    # JSON has no NaN: a non-finite number is written as null
    with result_set(out_dir, FILES) as staging:
        summary["plots"] = plot(records, staging)
        write_text(os.path.join(staging, "summary.md"), markdown(summary))
        write_json(os.path.join(staging, "summary.json"), finite_json(summary)[0])
    return summary


# ----------------------------------------------------------------------------
# Tables (their pieces are lab/report.py's: the study's report shows the same numbers) and plots

def markdown(summary):
    records = summary["models"]
    fresh = any(not r.get("measured_earlier") for r in records)  # else every number is a record measured earlier
    lines = [(f"Measured by lab/evaluate.py on {summary['device']}, {summary['date']}" if fresh else
              f"Drawn by lab/evaluate.py on {summary['date']}, every model from the record measured earlier (below)")
             + ". Loss in nats per token, the mean "
             "over windows ± the half-width of its 95% t-interval; Δ: the increase over the same windows unchanged. "
             "An interval is one checkpoint's, over windows: it says nothing about how runs or seeds differ (the "
             "study's report compares those). The length mode's windows are longer than the other modes', so its "
             "[0, T) is not the full-precision loss of quant.",
             "", PAPERS_SAY, ""]
    earlier = [r for r in records if r.get("measured_earlier")]
    if earlier:
        lines[1:1] = ["", "Measured earlier, from the record kept of a run whose checkpoint is gone: " +
                      "; ".join(f"{r['label']} on {r['device']}, {r['date']}" for r in earlier) + "."]
    runs = [r for r in records if "run" in r]
    published = [r for r in records if "pretrained" in r]
    if runs and published:  # the runs' own validation data beside --text cut with each checkpoint's tokenizer
        lines[1:1] = ["", "Note: the published checkpoints (" + ", ".join(r["label"] for r in published) +
                      f") were measured on windows of {published[0].get('data')}, the runs on their own validation "
                      "data: compare each model's Δ, not one model's loss with another's."]
    # a field is compared only where every run recorded it (records kept before it was recorded have none: not
    # knowing is not differing)
    known = [k for k in ("data_fingerprint", "bos") if all(r.get(k) is not None for r in runs)]
    if len({(r["T"],) + tuple(json.dumps(r[k], sort_keys=True) for k in known)
            for r in runs}) > 1:  # e.g. a run trained without BOS windows: its keep-1 keeps a text token
        lines[1:1] = ["", "Note: these runs were measured on different windows (their data, T or BOS windows differ: "
                      + ", ".join(f"{r['label']} T={r['T']}" + (f" bos={r['bos']}" if "bos" in r else "")
                                  for r in runs) + "): compare each run's Δ, not one run's loss with another's."]
    notes = [f"{r['label']}: {note}" for r in records for note in r.get("notes", [])]
    if notes:  # fewer windows than asked: the reader must know the intervals rest on fewer
        lines[1:1] = ["", "Note: " + "; ".join(notes) + "."]
    quant = [r for r in records if "quant" in r]
    if quant:
        settings = [s["setting"].upper() for s in quant[0]["quant"]["settings"]]
        lines += ["## Low-bit quantization", "",
                  "Round-to-nearest; weights per output channel, activations per token; every linear layer of the "
                  "blocks, weight and input.", ""]
        lines += table(["model", "windows x T", "full precision"] + [f"{s} Δ" for s in settings],
                       [[r["label"], f"{r['windows']} x {r['T']}", fmt_interval(r["quant"]["full"])] +
                        [fmt_interval(s["increase"], ".4f", sign=True) for s in r["quant"]["settings"]] for r in quant])
    for r in (r for r in records if "length" in r):
        T = r["T"]
        widest = buckets(T, max(v[-1]["length"] for v in r["length"].values()))
        lines += [f"## Past the training length: {r['label']} (T = {T}, {r['length_windows']} windows)", "",
                  "Loss per bucket of positions; a length of m x T reads the first m x T positions of the same "
                  "windows.", ""]
        lines += table(["RoPE", "length"] + [f"[{a}, {b})" for a, b in widest],
                       [[scaling, f"{v['multiple']}x = {v['length']}"] + [fmt_interval(b) for b in v["buckets"]] +
                        ["–"] * (len(widest) - len(v["buckets"]))
                        for scaling, lengths in r["length"].items() for v in lengths])
        paired = [(scaling, v) for scaling, lengths in r["length"].items() for v in lengths
                  if any("increase" in b for b in v["buckets"])]  # a record kept before Δ was measured has none
        if paired:
            inside = any("increase" in v["buckets"][0] for _, v in paired)  # not in records kept before it was
            lines += ["Δ: each bucket's increase over the same windows' [0, T) as trained (1x, RoPE unscaled: "
                      "paired, so its interval leaves out how hard each window is, and a scaling's cost inside T "
                      "counts against it). " + ("In [0, T), what the scaling costs inside the trained length (0 "
                      "with RoPE as trained); past T, how well the model copes there. Compare each between models: "
                      "the lower Δ is the better." if inside else
                      "Compare it between models: the lower Δ copes better past T."), ""]
            lines += table(["RoPE", "length"] + [f"[{a}, {b}) Δ" for a, b in widest[1 - inside:]],
                           [[scaling, f"{v['multiple']}x = {v['length']}"] +
                            [fmt_interval(b["increase"], ".4f", sign=True) for b in v["buckets"][1 - inside:]] +
                            ["–"] * (len(widest) - len(v["buckets"])) for scaling, v in paired])
    stream = [r for r in records if "stream" in r]
    if stream:
        lines += ["## Sliding-window attention, with and without the first positions", "",
                  "The loss of positions w..T-1 (where the window cuts) under full attention, and its increase when "
                  "each query sees only its last w keys and the first k positions.", ""]
        keeps = [f"keep {k['k']} Δ" for k in stream[0]["stream"][0]["keep"]]
        lines += table(["model", "window w", "full attention"] + keeps,
                       [[r["label"], row["window"], fmt_interval(row["full"])] +
                        [fmt_interval(k["increase"], ".4f", sign=True) for k in row["keep"]]
                        for r in stream for row in r["stream"]])
    return "\n".join(lines)


def plot(records, out_dir):
    """quant.png, length.png and stream.png, for the modes measured; returns the names of the files written. One
    colour and line style per variant (distinct_styles; the seeds of a variant share them; in length.png the line
    style says the RoPE scaling), one legend beside the panels, an entry a variant with its number of seeds, in the
    image (bbox_inches="tight")."""
    plt = pyplot()
    if plt is None:
        return []
    from matplotlib.lines import Line2D
    written = []
    variants = list(dict.fromkeys(variant_of(r["label"]) for r in records))
    looks = dict(zip(variants, distinct_styles(len(variants))))

    def look(r):  # (colour, line style) of a record's variant
        return looks[variant_of(r["label"])]

    def entry(runs, v):
        mine = [r for r in runs if variant_of(r["label"]) == v]
        if len(mine) == 1 and mine[0]["label"] == v:  # a model labelled on its own (a published one), not a seed
            return v
        return f"{v} ({len(mine)} seed{'s' * (len(mine) > 1)})"

    def save(fig, runs, name, scalings=None):
        fig.tight_layout()
        shown = [v for v in variants if any(variant_of(r["label"]) == v for r in runs)]
        handles = [Line2D([], [], color=looks[v][0], linestyle="-" if scalings else looks[v][1], marker="o")
                   for v in shown]
        labels = [entry(runs, v) for v in shown]
        for scaling, style in (scalings or {}).items():  # length.png: the line style is the RoPE scaling's
            handles.append(Line2D([], [], color="gray", linestyle=style))
            labels.append(f"RoPE {scaling}")
        legend_beside(fig, [], extra=zip(handles, labels))
        written.append(save_figure(fig, os.path.join(out_dir, name), bbox_inches="tight"))

    quant = [r for r in records if "quant" in r]
    if quant:
        fig, ax = plt.subplots(figsize=(6, 4))
        for r in quant:
            settings = r["quant"]["settings"]
            ax.plot(range(1 + len(settings)), [0.0] + [s["increase"]["mean"] for s in settings], marker="o",
                    color=look(r)[0], linestyle=look(r)[1],
                    label=r["label"])
        ax.set_xticks(range(1 + len(settings)), ["full"] + [s["setting"].upper() for s in settings])
        ax.axhline(0, color="gray", linewidth=0.8)
        ax.set(xlabel="bits of the weights (W) and of the activations (A)", ylabel="loss increase (nats)",
               title="what rounding costs (round-to-nearest)")
        save(fig, quant, "quant.png")

    length = [r for r in records if "length" in r]
    if length:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        styles = {"none": "-", "ntk": ":", "yarn": "--"}
        for r in length:
            for scaling, lengths in r["length"].items():
                longest = lengths[-1]
                ax.plot(range(len(longest["buckets"])), [b["mean"] for b in longest["buckets"]], styles[scaling],
                        marker="o", color=look(r)[0], label=f"{r['label']}, RoPE {scaling}")
        T, widest = length[0]["T"], length[0]["length"][next(iter(length[0]["length"]))][-1]

        def times_T(n):  # 0, T, 2T, 4T, ... (or the position itself when a length is not a multiple of T)
            return "0" if n == 0 else "T" if n == T else f"{n // T}T" if n % T == 0 else str(n)
        ax.set_xticks(range(len(widest["buckets"])),
                      [f"[{times_T(b['from'])}, {times_T(b['to'])})" for b in widest["buckets"]])
        ax.set(xlabel=f"positions (T = {T}, the training length)", ylabel="loss (nats per token)",
               title=f"past the training length: windows of {widest['multiple']}T")
        save(fig, length, "length.png", {s: styles[s] for r in length for s in r["length"]})

    stream = [r for r in records if "stream" in r]
    if stream:
        n = max(len(r["stream"]) for r in stream)
        fig, axes = plt.subplots(1, n, figsize=(5 * n, 4), squeeze=False)
        for i, ax in enumerate(axes[0]):
            windows = []
            for r in stream:
                if i < len(r["stream"]):
                    row = r["stream"][i]
                    keeps = [k["k"] for k in row["keep"]]
                    ax.plot(keeps, [k["increase"]["mean"] for k in row["keep"]], marker="o",
                            color=look(r)[0], linestyle=look(r)[1],
                            label=f"{r['label']} (w={row['window']})")
                    ax.set_xticks(keeps)
                    windows.append(row["window"])
            ax.axhline(0, color="gray", linewidth=0.8)
            w = " or ".join(str(w) for w in dict.fromkeys(windows))
            ax.set(xlabel="first positions kept in view (k)", ylabel="loss increase over full attention (nats)",
                   title=f"sliding-window attention, w = {w}\n(each query sees its last {w} keys, plus the first k)")
        save(fig, stream, "stream.png")
    return written


# ----------------------------------------------------------------------------

def main(argv=None):
    a, given = configure(EvaluateConfig, sys.argv[1:] if argv is None else argv)
    runs, names, labels, modes = list(a.runs), list(a.pretrained), list(a.labels) or None, list(a.modes)
    if not runs and not names:
        fail("name the models: --runs=out-baseline,out-g1 (train.py out_dirs) and/or --pretrained=gpt2")
    if labels and len(labels) != len(runs) + len(names):
        fail(f"--labels has {len(labels)} names for {len(runs) + len(names)} models; give one per model")
    named = labels or [os.path.basename(os.path.normpath(r)) for r in runs] + names  # evaluate()'s default labels
    if (twice := repeated_label(named, runs + names)):
        fail(twice)
    if not modes or set(modes) - set(MODES):
        fail(f"--modes={written(a.modes)}: choose from {', '.join(MODES)}")
    for s in a.quant:
        try:
            parse_setting(s)
        except ValueError as e:
            fail(e)
    if "quant" in modes and not a.quant:
        fail("--quant=: the quant mode needs at least one setting, e.g. --quant=w8a8,w4a4 (or leave it out with "
             "--modes=length,stream)")
    # each setting once (a repeat would be measured again and shown as a second column of the same numbers)
    multiples, scalings, keeps = sorted(set(a.lengths)), list(dict.fromkeys(a.rope)), sorted(set(a.keep_first))
    quant = list(dict.fromkeys(s.lower() for s in a.quant))
    if not multiples or min(multiples) < 1:
        fail(f"--lengths={written(a.lengths)}: multiples of the training length, each at least 1, e.g. 1,2,4,8")
    if not scalings or set(scalings) - set(VALID["rope_scaling"]):
        fail(f"--rope={written(a.rope)}: choose from {', '.join(VALID['rope_scaling'])}")
    if not keeps or min(keeps) < 0:
        fail(f"--keep_first={written(a.keep_first)}: numbers of first positions, each at least 0, e.g. 0,1,4")
    for key in ("windows", "batch_size", "window"):
        if getattr(a, key) < 1:
            fail(f"--{key}={getattr(a, key)} must be at least 1")
    if any(m & (m - 1) for m in multiples):
        fail(f"--lengths={written(a.lengths)}: powers of two (1,2,4,8,...), so that each length ends a bucket of "
             "positions")
    if a.text and not names:
        fail("--text is the text published checkpoints are measured on: give --pretrained too, or leave it out")
    if "window" in given and not names:  # a run's T is its own training length
        fail("--window is the T of published checkpoints: give --pretrained too, or leave it out (a run is measured "
             "at its own training length)")
    if a.text and not os.path.isfile(a.text):
        fail(f"--text={a.text}: no such file")
    if names and "length" in modes:
        fail("the length mode measures train.py's runs; published checkpoints were trained on far longer windows "
             "than --window (leave it out for them: --modes=quant,stream)")
    stream_windows = sorted(set(a.stream_windows))

    def settings_for(T):  # what a run of training length T is measured under (evaluate's run_settings)
        return run_settings(T, a.checkpoint, modes, a.windows, a.batch_size, quant, multiples, scalings,
                            stream_windows, keeps)
    if (wrong := not_a_file_name(a.checkpoint)):
        fail(wrong)
    lengths_T = {}  # each model's training length T, for the stream windows' check
    for run in runs:  # every run's settings before anything is computed, so that a mistake costs no work
        path = os.path.join(run, a.checkpoint)
        if os.path.isdir(path) or os.path.isfile(run):
            fail(f"--runs names folders (train.py's out_dirs) and --checkpoint a file in each ({CHECKPOINT} or "
                 f"best.pt): {path} is no checkpoint file")
        try:  # from its checkpoint, or where that is gone from the record kept of it (its model's config)
            ckpt = checked_checkpoint(path) if os.path.isfile(path) else None
            args = ckpt["model_args"] if ckpt else stored_record(run, a.checkpoint, settings_for)["model"]
        except (ValueError, FileNotFoundError) as e:
            fail(e)
        if args.get("rope_scaling", "none") != "none" or args.get("attn_window") is not None:
            fail(f"{run} was trained with rope_scaling={args.get('rope_scaling')!r}, attn_window="
                 f"{args.get('attn_window')!r}: lab/evaluate.py measures models trained with plain RoPE and full "
                 "attention")
        if "length" in modes and args.get("pos_emb") != "rope":
            fail(f"{run} has learned position embeddings, which end at its {args['block_size']} positions: the length "
                 "mode needs RoPE (leave it out with --modes=quant,stream)")
        lengths_T[run] = args["block_size"]
        if "length" in modes and ckpt:  # a run to be measured, not read from its record
            check_length_memory(run, args, multiples, a.device)
            check_length_data(run, ckpt, max(multiples) * args["block_size"])
    lengths_T.update({name: a.window for name in names})  # a published checkpoint's T is --window
    for model, T in lengths_T.items():
        what = "--window, the window cut for it" if model in names else "its training length"
        if "stream" in modes and not 1 <= min(stream_windows or [T // 8]) <= max(stream_windows or [T // 4]) < T:
            fail(f"--stream_windows={written(a.stream_windows) or '(T/8, T/4)'}: sliding windows must be from 1 to "
                 f"T - 1 = {T - 1} tokens for {model} (T, {what}, is {T})")
        if "stream" in modes and max(keeps) > T:  # a window holds T positions: more cannot be kept in view
            fail(f"--keep_first={written(a.keep_first)}: at most T = {T} first positions for {model} (T is {what}); "
                 f"keep_first={T} already keeps every position in view")
    made = writable_folder(a.out_dir)  # before the work, not after it
    with claimed(a.out_dir, made):
        try:
            summary = evaluate(runs, labels, a.out_dir, a.device, modes, a.windows, a.batch_size, quant, multiples,
                               scalings, stream_windows, keeps, a.checkpoint, names, a.text, a.window)
        except (ValueError, FileNotFoundError, RuntimeError, ImportError) as e:
            fail(e)
    print(f"wrote {os.path.join(a.out_dir, 'summary.json')}, summary.md" + "".join(f", {p}" for p in summary["plots"]))


def check_length_data(run, ckpt, length):
    """Refuse, before any model is measured, a length the run's validation set holds no window of."""
    data_dir = run_data_dir(ckpt)
    try:
        bos = bos_token(data_dir) if ckpt["config"].get("bos", False) else None
        TokenWindows(data_dir, "val", 1, bos)  # the data is there and readable
    except (ValueError, FileNotFoundError) as e:
        fail(e)
    try:
        TokenWindows(data_dir, "val", length + 1, bos)
    except ValueError:
        fail(f"--lengths: the longest asks for windows of {length} tokens of {run}, and {data_dir}'s validation "
             "set holds none that long; ask for shorter ones with --lengths")


def check_length_memory(run, args, multiples, device):
    """Refuse, before any work, a length whose single window does not fit in the memory free now (the kernel's OOM
    killer would end the process without a word), naming the estimate and the longest lengths that fit."""
    T, device = args["block_size"], pick_device(device)
    free = free_memory(device)
    need = window_bytes(args["n_head"], args["vocab_size"], max(multiples) * T)
    if free is None or need <= 0.8 * free:
        return
    fit = [m for m in multiples if window_bytes(args["n_head"], args["vocab_size"], m * T) <= 0.8 * free]
    fail(f"--lengths={written(multiples)}: one window of {max(multiples)} x T = {max(multiples) * T} tokens of {run} "
         f"needs about {need / 2**30:.1f} GiB ({args['n_head']} heads x L² attention scores and L x "
         f"{args['vocab_size']} logits, float32), and {device} has {free / 2**30:.1f} GiB free: " +
         (f"ask for --lengths={written(fit)}" if fit else "leave the length mode out (--modes=quant,stream)"))


if __name__ == "__main__":
    run_main(main)  # Ctrl-C or a closed pipe: one line

"""What the massive activation on the BOS token does, run by run: GN's outlier-driven rescaling, put to the test.

    python -m lab.outlier --runs=out-sink-lab/baseline/seed1337,out-sink-lab/gatednorm/seed1337 --out=out/outlier.json

A run trained on windows that start with BOS often carries its largest activation there, in one channel of the
last block's output (GA's M-Act, GN's peak). That output goes to one place only, the final norm and the unembedding,
which predict the token after BOS. GN's reading: the outlier is a rescaler. RMSNorm divides a token's vector by its
root mean square, so one huge channel shrinks every other channel of that token, and the norm's small weight on the
huge channel keeps its own value from passing on. If so, the channel acts on the prediction through the norm's
denominator alone. Three measurements of the prediction at position 0 (its loss and entropy) test that:

  as trained;
  own term removed   the final norm's output in that channel set to 0 at position 0, its denominator untouched:
                     what the channel passes on by its own value (a rescaler: nearly nothing);
  outlier removed    the channel set, at position 0, to its mean over the other positions: the denominator shrinks
                     by rms_ratio, and the rest of the token's vector leaves the norm that much larger.

Position 0's prediction is the same in every window here (BOS attends only to itself) and trained close to its
best, so any change to it raises its loss: the outlier removed alone proves nothing, the own term removed beside it
does. Also: where the channel's value at BOS comes from (the block's input, its attention, its MLP), the final
norm's weight on it against the median |weight| (for PreAffine also its learned pre-scale), and the loss at the
other positions, which no change at position 0 can move (nothing after the last block mixes positions; checked).

For each run's ckpt.pt (or --checkpoint=best.pt), on the validation windows it was evaluated on. Prints a table,
writes --out (JSON: each run's numbers) and the same table beside it as Markdown.
"""

import math
import os
import sys
if not __package__:  # run as python lab/outlier.py: find the project from its root, as python -m lab.outlier does
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dataclasses import dataclass

# cli before torch: its excepthook (cli.one_line_interrupt) makes Ctrl-C while torch loads one line, not a traceback
from cli import configure, fail, pick_device, run_main
from data.shards import bos_token, val_batches
from lab.analyze import eval_windows
from runfolder import load_checkpoint, writable_folder, write_json, write_text
import torch
import torch.nn.functional as F


@dataclass
class OutlierConfig:
    """Every key of python -m lab.outlier."""
    runs: tuple[str, ...] = ()  # the runs' out_dirs (train.py's), trained on windows that start with BOS
    labels: tuple[str, ...] = ()  # names for the runs in the same order (default: the folders' paths)
    checkpoint: str = "ckpt.pt"  # which file of each run: ckpt.pt (the latest state) or best.pt
    out: str = "out-outlier/outlier.json"  # the JSON; the Markdown table goes beside it (.md)
    device: str = "cpu"  # cpu, cuda, mps or auto; the model runs in float32


def predictions(model, x, y, channel=None, value=None, own_term=True):
    """(loss at position 0, its entropy, loss at positions 1..T-1), summed over the windows (nats). With `channel`:
    that channel of the last block's output at position 0 set to `value`, when given; its term in the final norm's
    output at position 0 set to 0 when own_term is False."""
    def block(module, args, h):
        if value is None:
            return None
        h = h.clone()
        h[:, 0, channel] = value
        return h

    def norm(module, args, out):
        if own_term:
            return None
        out = out.clone()
        out[:, 0, channel] = 0.0
        return out
    hooks = [model.transformer.h[-1].register_forward_hook(block),
             model.transformer.ln_f.register_forward_hook(norm)]
    try:
        with torch.no_grad():
            logits, _ = model(x, y)
    finally:
        for hook in hooks:
            hook.remove()
    logp = logits.float().log_softmax(-1)
    first = F.nll_loss(logp[:, 0], y[:, 0], reduction="sum").item()
    entropy = -(logp[:, 0].exp() * logp[:, 0]).sum().item()
    rest = F.nll_loss(logp[:, 1:].flatten(0, 1), y[:, 1:].flatten(), reduction="sum").item()
    return first, entropy, rest


def activations(model, batches):
    """One pass over the windows, as trained: at position 0 the last block's input, its residual stream after the
    attention (what its MLP's norm reads) and its output, each (windows, channels); and at positions 1..T-1 the
    output's mean and mean |h| per channel."""
    seen = {"in": [], "mid": [], "out": [], "rest": [], "rest_abs": []}

    def output(module, args, h):
        seen["out"].append(h[:, 0])
        seen["rest"].append(h[:, 1:].sum((0, 1)))
        seen["rest_abs"].append(h[:, 1:].abs().sum((0, 1)))
    block = model.transformer.h[-1]
    hooks = [block.register_forward_pre_hook(lambda module, args: seen["in"].append(args[0][:, 0])),
             block.ln_2.register_forward_pre_hook(lambda module, args: seen["mid"].append(args[0][:, 0])),
             block.register_forward_hook(output)]
    try:
        with torch.no_grad():
            for x, _ in batches:
                model(x)
    finally:
        for hook in hooks:
            hook.remove()
    count = sum(x.shape[0] * (x.shape[1] - 1) for x, _ in batches)
    at0 = {k: torch.cat(seen[k]) for k in ("in", "mid", "out")}
    return at0, sum(seen["rest"]) / count, sum(seen["rest_abs"]) / count


def measure(run, checkpoint, device):
    """One run's numbers (see the module's docstring)."""
    model, ckpt = load_checkpoint(os.path.join(run, checkpoint), device)
    w = eval_windows(ckpt)
    if not w["bos"]:
        raise ValueError(f"{run} was trained on windows that do not start with BOS (bos=False): position 0 is an "
                         "ordinary token there, with nothing to test")
    batches = [(x.to(device), y.to(device)) for x, y in
               val_batches(w["data_dir"], w["block_size"], w["batch_size"], w["batches"], bos=bos_token(w["data_dir"]))]
    model.float()
    at0, mean_rest, abs_rest = activations(model, batches)
    h0 = at0["out"]  # (windows, channels): the last block's output at position 0
    channel = int(h0.abs().mean(0).argmax())
    value = mean_rest[channel].item()  # the channel's mean over positions 1..T-1 of every window
    outs = {"as_trained": [predictions(model, x, y) for x, y in batches],
            "removed": [predictions(model, x, y, channel, value=value) for x, y in batches],
            "own_term": [predictions(model, x, y, channel, own_term=False) for x, y in batches]}
    n, T = h0.shape[0], batches[0][0].shape[1]
    total = {name: [sum(o[i] for o in out) for i in range(3)] for name, out in outs.items()}
    for name in ("removed", "own_term"):  # nothing after the last block reads position 0
        if not math.isclose(total[name][2], total["as_trained"][2], rel_tol=1e-5, abs_tol=1e-6):
            raise RuntimeError(f"{run}: changing position 0 moved the other positions' loss "
                               f"({total['as_trained'][2]} -> {total[name][2]})")
    final = model.transformer.ln_f  # its weight, or for PreAffine and GatedNorm that of the RMSNorm inside
    weight = (final.weight if hasattr(final, "weight") else final.norm.weight).detach().abs()
    scale = getattr(final, "pre_scale", None)  # PreAffine's: its RMSNorm divides pre_scale * h, not h
    changed = h0.clone()
    changed[:, channel] = value
    seen_by_norm = [v if scale is None else v * scale.detach() for v in (h0, changed)]
    rms_ratio = (seen_by_norm[0].pow(2).mean(-1).sqrt() / seen_by_norm[1].pow(2).mean(-1).sqrt()).mean().item()
    scale = None if scale is None else scale.detach().abs()
    at = {k: v[:, channel].mean().item() for k, v in at0.items()}
    return dict(run=run, iter=ckpt["iter_num"], norm=model.config.norm, gate=model.config.gate, channel=channel,
                windows=n, act_bos=h0[:, channel].abs().mean().item(), act_rest=abs_rest[channel].item(),
                from_input=at["in"], from_attention=at["mid"] - at["in"], from_mlp=at["out"] - at["mid"],
                norm_weight=weight[channel].item(), norm_weight_median=weight.median().item(),
                pre_scale=None if scale is None else scale[channel].item(),
                pre_scale_median=None if scale is None else scale.median().item(), rms_ratio=rms_ratio,
                loss_first=total["as_trained"][0] / n, entropy_first=total["as_trained"][1] / n,
                loss_first_own_term=total["own_term"][0] / n, entropy_first_own_term=total["own_term"][1] / n,
                loss_first_without=total["removed"][0] / n, entropy_first_without=total["removed"][1] / n,
                loss_rest=total["as_trained"][2] / (n * (T - 1)), flat=math.log(model.config.vocab_size))


def table(rows):
    head = ("| run | norm | gate | channel | mean abs h at BOS (elsewhere) | from the block's input / attention / MLP "
            "| final norm's weight there (median) "
            "| loss at position 0: as trained, own term removed, outlier removed "
            "| its entropy (flat: ln V) | the rest divided by (its RMS with / without the outlier) | loss elsewhere |")
    lines = [head, "| --- " * 11 + "|"]
    for r in rows:
        weight = f"{r['norm_weight']:.3f} ({r['norm_weight_median']:.3f})"
        if r["pre_scale"] is not None:
            weight += f"; pre-scale {r['pre_scale']:.2f} ({r['pre_scale_median']:.2f})"
        lines.append(f"| {r['label']} | {r['norm']} | {r['gate']} | {r['channel']} | {r['act_bos']:.1f} "
                     f"({r['act_rest']:.2f}) | {r['from_input']:.1f} / {r['from_attention']:.1f} / "
                     f"{r['from_mlp']:.1f} | {weight} | {r['loss_first']:.3f}, {r['loss_first_own_term']:.3f}, "
                     f"{r['loss_first_without']:.3f} | {r['entropy_first']:.3f}, {r['entropy_first_own_term']:.3f}, "
                     f"{r['entropy_first_without']:.3f} ({r['flat']:.3f}) | {r['rms_ratio']:.1f} | "
                     f"{r['loss_rest']:.4f} |")
    return "\n".join(lines)


def main(argv=None):
    a, _ = configure(OutlierConfig, sys.argv[1:] if argv is None else argv)
    if not a.runs:
        fail("name the runs: --runs=out-sink-lab/baseline/seed1337,... (train.py's out_dirs)")
    if a.labels and len(a.labels) != len(a.runs):
        fail(f"--labels has {len(a.labels)} names for {len(a.runs)} runs; give one per run")
    if not a.out.endswith(".json"):
        fail(f"--out={a.out}: a .json file (the Markdown table is written beside it, .md)")
    writable_folder(os.path.dirname(a.out) or ".", key="--out's folder")  # before the work, not after it
    device = pick_device(a.device)
    rows = []
    for run, label in zip(a.runs, a.labels or a.runs):
        try:
            rows.append(dict(label=label, **measure(run, a.checkpoint, device)))
        except (FileNotFoundError, ValueError, RuntimeError) as e:
            fail(e)
    md = table(rows)
    print(md)
    write_json(a.out, dict(checkpoint=a.checkpoint, runs=rows))
    write_text(a.out[:-len(".json")] + ".md", md + "\n")
    print(f"wrote {a.out} and {a.out[:-len('.json')]}.md")


if __name__ == "__main__":
    run_main(main)  # Ctrl-C or a closed pipe: one line

"""What the massive activation on the BOS token does, run by run: GN's outlier-driven rescaling, put to the test.

    python -m lab.outlier --runs=out-sink-lab/baseline/seed1337,out-sink-lab/gatednorm/seed1337 --out=out/outlier.json

A run trained on windows that start with BOS often carries its largest activation there, in one channel of the
last block's output (GA's M-Act, GN's peak). That output goes to one place only, the final norm and the unembedding,
which predict the token after BOS. GN's reading: RMSNorm divides a token's vector by its root mean square, so one
huge channel shrinks every other channel of that token to almost nothing, and the norm's small weight on the huge
channel keeps it from passing too: a near-flat prediction, made by an outlier rather than by the weights. The test:
set that channel, at position 0 only, to its mean over the other positions, and see what happens to the prediction
at position 0. If the outlier is the rescaler, its loss changes and its entropy falls; the other positions' loss
cannot change (nothing after the last block reads position 0), which the tool checks.

For each run's ckpt.pt (or --checkpoint=best.pt), on the validation windows it was evaluated on: the channel (the
largest mean |h| at position 0), that mean |h| there and at the other positions, the final norm's weight on the
channel against the median weight (for PreAffine and GatedNorm, the RMSNorm's inside them), the loss and entropy of
the prediction at position 0 as trained and with the channel set to its mean elsewhere, and the loss at the other
positions. Prints a table, writes --out (JSON: each run's numbers) and the same table beside it as Markdown.
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
from runfolder import load_checkpoint, write_json, write_text
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


def predictions(model, x, y, channel=None):
    """(loss at position 0, its entropy, loss at positions 1..T-1), summed over the windows (nats), with the last
    block's output at position 0, `channel`, set to its mean over positions 1..T-1 of the same windows when given;
    and that output as the model computed it (before the change)."""
    seen = {}

    def hook(module, args, h):
        seen["h"] = h.detach().clone()
        if channel is None:
            return None
        h = h.clone()
        h[:, 0, channel] = h[:, 1:, channel].mean()
        return h
    handle = model.transformer.h[-1].register_forward_hook(hook)
    try:
        with torch.no_grad():
            logits, _ = model(x, y)
    finally:
        handle.remove()
    logp = logits.float().log_softmax(-1)
    first = F.nll_loss(logp[:, 0], y[:, 0], reduction="sum").item()
    entropy = -(logp[:, 0].exp() * logp[:, 0]).sum().item()
    rest = F.nll_loss(logp[:, 1:].flatten(0, 1), y[:, 1:].flatten(), reduction="sum").item()
    return first, entropy, rest, seen["h"]


def measure(run, checkpoint, device):
    """One run's numbers (see the module's docstring)."""
    model, ckpt = load_checkpoint(os.path.join(run, checkpoint), device)
    w = eval_windows(ckpt)
    if not w["bos"]:
        raise ValueError(f"{run} was trained on windows that do not start with BOS (bos=False): position 0 is an "
                         "ordinary token there, with nothing to test")
    batches = val_batches(w["data_dir"], w["block_size"], w["batch_size"], w["batches"], bos=bos_token(w["data_dir"]))
    model.float()
    outputs = [predictions(model, x.to(device), y.to(device)) for x, y in batches]
    h = torch.cat([o[3] for o in outputs])  # (windows, T, channels)
    channel = int(h[:, 0].abs().mean(0).argmax())
    changed = [predictions(model, x.to(device), y.to(device), channel) for x, y in batches]
    n, T = h.shape[0], h.shape[1]
    total = [sum(o[i] for o in outputs) for i in range(3)]
    after = [sum(o[i] for o in changed) for i in range(3)]
    if not math.isclose(total[2], after[2], rel_tol=1e-5, abs_tol=1e-6):  # nothing after the last block reads it
        raise RuntimeError(f"{run}: changing position 0 moved the other positions' loss ({total[2]} -> {after[2]})")
    final = model.transformer.ln_f  # its weight, or for PreAffine and GatedNorm that of the RMSNorm inside
    weight = final.weight if hasattr(final, "weight") else final.norm.weight
    return dict(run=run, iter=ckpt["iter_num"], norm=model.config.norm, gate=model.config.gate, channel=channel,
                act_bos=h[:, 0, channel].abs().mean().item(), act_rest=h[:, 1:, channel].abs().mean().item(),
                norm_weight=weight[channel].item(), norm_weight_median=weight.abs().median().item(),
                loss_first=total[0] / n, loss_first_without=after[0] / n, entropy_first=total[1] / n,
                entropy_first_without=after[1] / n, loss_rest=total[2] / (n * (T - 1)), windows=n,
                flat=math.log(model.config.vocab_size))


def table(rows):
    head = ("| run | norm | gate | channel | mean |h| at BOS | elsewhere | final norm's weight there (median) | "
            "loss at position 0: as trained → without the outlier | its entropy (flat: ln V) | loss elsewhere |")
    lines = [head, "| --- " * 10 + "|"]
    for r in rows:
        weight = f"{r['norm_weight']:.3f} ({r['norm_weight_median']:.3f})"
        lines.append(f"| {r['label']} | {r['norm']} | {r['gate']} | {r['channel']} | {r['act_bos']:.1f} | "
                     f"{r['act_rest']:.2f} | {weight} | {r['loss_first']:.3f} → {r['loss_first_without']:.3f} | "
                     f"{r['entropy_first']:.3f} → {r['entropy_first_without']:.3f} ({r['flat']:.3f}) | "
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
    device = pick_device(a.device)
    rows = []
    for run, label in zip(a.runs, a.labels or a.runs):
        try:
            rows.append(dict(label=label, **measure(run, a.checkpoint, device)))
        except (FileNotFoundError, ValueError, RuntimeError) as e:
            fail(e)
    md = table(rows)
    print(md)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    write_json(a.out, dict(checkpoint=a.checkpoint, runs=rows))
    write_text(a.out[:-len(".json")] + ".md", md + "\n")
    print(f"wrote {a.out} and {a.out[:-len('.json')]}.md")


if __name__ == "__main__":
    run_main(main)  # Ctrl-C or a closed pipe: one line

"""
Measure trained checkpoints the way GA §4.3 / Table 4 does, on the same validation windows:

    python analyze.py out-baseline out-g1 [more out_dirs ...] [--labels=base,g1] [--out_dir=results/analysis]

For each run (an out_dir holding ckpt.pt): validation loss, and per layer and averaged over layers
  F-Attn   attention probability on the first token (over heads and query positions 1..T-1),
  M-Act    max |h| of the hidden states each block outputs (max over all validation tokens),
  gate     mean gate score and the fraction of scores below 0.1 and 0.5 (sparsity).
Writes summary.json and, when matplotlib is installed, layers.png (per-layer F-Attn and M-Act of every
run), gate_hist.png (gate-score histograms), attn_maps.png (a head-averaged attention map per run, as in
GA Fig. 2) and curves.png (validation loss during training, from each run's log.jsonl).
"""

import argparse
import json
import os
import platform
import time

import numpy as np
import torch

from data.shards import val_batches
from train import dataset_dir, load_checkpoint, pick_device

GATE_SAMPLE = 200_000  # gate scores kept per run for its histogram


def device_name(device):
    return torch.cuda.get_device_name(device) if str(device).startswith("cuda") else f"CPU ({platform.processor() or platform.machine()})"


@torch.no_grad()
def analyze_run(run_dir, device, n_batches, batch_size, map_tokens):
    model, checkpoint = load_checkpoint(os.path.join(run_dir, "ckpt.pt"), device)
    cfg, train_cfg = model.config, checkpoint["config"]
    batches = val_batches(dataset_dir(train_cfg["dataset"], train_cfg.get("data_dir")), cfg.block_size, batch_size, n_batches)

    # gate scores for the histogram: every gate's input is its attention layer's input
    rng = np.random.default_rng(0)
    samples = []

    def keep_scores(attn, args):
        s = attn.gate.score(args[0]).float().flatten()
        take = min(s.numel(), GATE_SAMPLE // (n_batches * cfg.n_layer) + 1)
        samples.append(s[torch.from_numpy(rng.choice(s.numel(), take, replace=False)).to(s.device)].cpu().numpy())

    hooks = [b.attn.register_forward_pre_hook(keep_scores) for b in model.transformer.h] if cfg.gate != "none" else []
    losses, per_batch = [], []
    for x, y in batches:
        _, loss, stats = model(x.to(device), y.to(device), return_stats=True)
        losses.append(loss.item())
        per_batch.append(stats)
    for h in hooks:
        h.remove()

    def over_batches(key, reduce):
        if per_batch[0][key] is None:
            return None
        return [float(v) for v in reduce(np.array([s[key] for s in per_batch]), axis=0)]

    layers = {
        "first_token_attn": over_batches("first_token_attn", np.mean),
        "max_act": over_batches("max_act", np.max),  # the largest activation any validation token reached
        "gate_mean": over_batches("gate_mean", np.mean),
        "gate_below_0.1": over_batches("gate_below_0.1", np.mean),
        "gate_below_0.5": over_batches("gate_below_0.5", np.mean),
    }
    maps = model.attention_maps(batches[0][0][:1, :map_tokens].to(device))  # per layer (1, H, t, t)
    record = {
        "run": os.path.basename(os.path.normpath(run_dir)),
        "out_dir": run_dir,
        "model": {k: v for k, v in checkpoint["model_args"].items()},
        "params": model.num_params(),
        "iter": checkpoint["iter_num"],
        "tokens": checkpoint["iter_num"] * train_cfg["gradient_accumulation_steps"] * train_cfg["batch_size"] * cfg.block_size,
        "lr": train_cfg["learning_rate"],
        "loss_spikes": checkpoint.get("health", {}).get("loss_spikes"),
        "val_loss": float(np.mean(losses)),
        **{k: (float(np.mean(v)) if v is not None else None) for k, v in layers.items()},
        "layers": layers,
    }
    scores = np.concatenate(samples) if samples else None
    return record, scores, [m[0].mean(0).float().cpu().numpy() for m in maps]


def read_log(run_dir):
    path = os.path.join(run_dir, "log.jsonl")
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def plot(records, scores, maps, logs, out_dir):
    try:
        import matplotlib
        import matplotlib.ticker
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed, so no plots (pip install matplotlib); summary.json is written")
        return []
    names = [r["label"] for r in records]
    written = []

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in records:
        layer_ids = range(len(r["layers"]["first_token_attn"]))
        ax1.plot(layer_ids, r["layers"]["first_token_attn"], marker="o", label=r["label"])
        ax2.plot(layer_ids, r["layers"]["max_act"], marker="o", label=r["label"])
    ax1.set(xlabel="layer", ylabel="attention on the first token", title="F-Attn per layer (attention sink)")
    ax2.set(xlabel="layer", ylabel="max |h|", yscale="log", title="M-Act per layer (massive activations)")
    for ax in (ax1, ax2):
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax1.legend(fontsize=8)
    fig.tight_layout()
    written.append(_save(fig, out_dir, "layers.png"))

    gated = [(n, s) for n, s in zip(names, scores) if s is not None]
    if gated:
        fig, axes = plt.subplots(1, len(gated), figsize=(3.2 * len(gated), 3), squeeze=False)
        for ax, (n, s) in zip(axes[0], gated):
            ax.hist(s, bins=50, color="tab:orange")
            ax.set(title=f"{n}\nmean {s.mean():.3f}", xlabel="gate score", yticks=[])
        fig.tight_layout()
        written.append(_save(fig, out_dir, "gate_hist.png"))

    # one layer for every run: the layer where the first run (usually the baseline) sinks the most
    layer = int(np.argmax(records[0]["layers"]["first_token_attn"]))
    fig, axes = plt.subplots(1, len(records), figsize=(3.2 * len(records), 3.4), squeeze=False)
    for ax, r, m in zip(axes[0], records, maps):
        ax.imshow(m[layer], cmap="viridis", vmin=0, vmax=1)
        ax.set(title=f"{r['label']}, layer {layer}\nfirst-token {r['layers']['first_token_attn'][layer]:.2f}",
               xlabel="key", ylabel="query")
    fig.tight_layout()
    written.append(_save(fig, out_dir, "attn_maps.png"))

    if any(logs):
        fig, ax = plt.subplots(figsize=(6, 4))
        for n, log in zip(names, logs):
            pts = [(rec["tokens"] / 1e6, rec["val_loss"]) for rec in log if rec.get("val_loss") is not None]
            if pts:
                ax.plot(*zip(*pts), label=n)
        ax.set(xlabel="tokens (M)", ylabel="validation loss", title="validation loss during training")
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(_save(fig, out_dir, "curves.png"))
    return written


def _save(fig, out_dir, name):
    import matplotlib.pyplot as plt
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def analyze(run_dirs, labels=None, out_dir="results/analysis", device="auto", batches=8, batch_size=8, map_tokens=48):
    """Analyze every run on the same validation windows; returns the summary dict it writes."""
    labels = labels or [os.path.basename(os.path.normpath(d)) for d in run_dirs]
    if len(labels) != len(run_dirs):
        raise ValueError(f"{len(labels)} labels for {len(run_dirs)} runs")
    device = pick_device(device)
    os.makedirs(out_dir, exist_ok=True)
    records, scores, maps = [], [], []
    for run_dir, label in zip(run_dirs, labels):
        record, s, m = analyze_run(run_dir, device, batches, batch_size, map_tokens)
        record["label"] = label
        records.append(record)
        scores.append(s)
        maps.append(m)
        print(f"{label:>24}: val loss {record['val_loss']:.4f}, F-Attn {record['first_token_attn']:.3f}, "
              f"M-Act {record['max_act']:.1f}" + (f", gate mean {record['gate_mean']:.3f}, "
                                                   f"<0.1: {record['gate_below_0.1']:.2f}" if record["gate_mean"] is not None else ""))
    if len({r["model"]["block_size"] for r in records}) > 1:
        print("note: the runs have different block_size, so they were measured on different windows")
    summary = {
        "device": device_name(device),
        "date": time.strftime("%Y-%m-%d"),
        "validation": {"batches": batches, "batch_size": batch_size},
        "runs": records,
    }
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    summary["plots"] = plot(records, scores, maps, [read_log(d) for d in run_dirs], out_dir)
    return summary


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="out_dirs of training runs, each with a ckpt.pt")
    p.add_argument("--labels", default=None, help="comma-separated names for the runs (default: folder names)")
    p.add_argument("--out_dir", default="results/analysis")
    p.add_argument("--device", default="auto")
    p.add_argument("--batches", type=int, default=8, help="validation batches (the same windows for every run)")
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--map_tokens", type=int, default=48, help="sequence length of the attention-map plot")
    a = p.parse_args(argv)
    for run in a.runs:
        if not os.path.isfile(os.path.join(run, "ckpt.pt")):
            p.error(f"{run} has no ckpt.pt: train it first (python train.py --out_dir={run} ...)")
    summary = analyze(a.runs, a.labels.split(",") if a.labels else None, a.out_dir, a.device,
                      a.batches, a.batch_size, a.map_tokens)
    print(f"wrote {os.path.join(a.out_dir, 'summary.json')}" + "".join(f", {p}" for p in summary["plots"]))


if __name__ == "__main__":
    main()

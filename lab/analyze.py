"""
Measure trained checkpoints the way GA §4.3 / Table 4 does, every run on the same validation windows:

    python -m lab.analyze --runs=out-baseline,out-g1[,more out_dirs] [--labels=base,g1] [--out_dir=out-analysis]
    python -m lab.analyze --pretrained=gpt2[,gated-1b-baseline,...] [--out_dir=...]     # published checkpoints

For each run (an out_dir holding ckpt.pt, or the file --checkpoint names, e.g. best.pt): validation loss, and
per layer and averaged over layers (probe.py defines each)
  F-Attn      attention probability on the first token (over heads and query positions 1..T-1),
  sink share  the largest share of attention any one key receives from the window's second half, and which
              position and token that key is most often: a sink that is not on position 0 shows here,
  sink heads  the share of heads whose F-Attn exceeds 0.3 (Gu et al. 2025: a few strong sink heads hide in
              an average over heads),
  M-Act       max |h| of the hidden states each block outputs, per window, averaged over windows, and the
              few channels that carry it ("channels", per layer),
  value norm  the norm of the value vector at position 0 over the mean value norm elsewhere (per layer and KV head),
  gate        mean gate score and the fraction of scores below 0.1 and 0.5 (sparsity).
The windows are, by default, the ones train.py evaluated the first run on (its eval_iters batches of its
batch_size), so a single run's val loss is the one its training log shows for that checkpoint;
--batches/--batch_size choose others; the windows start with <|endoftext|> when the run was trained that way
(train.py's bos). Writes to out_dir (default out-analysis/, git-ignored):
  summary.json     every number, per run, per layer and per head, with where and on what it was measured
  summary.md       a table of the runs (probe.MEASURES' columns), as TUTORIAL.md shows it
  per_window.npz   each window's value of the per-window measures (val_loss, first_token_attn, max_act, peak_act,
                   ...), as arrays named "<i>/<key>" for run i of summary.json's runs: for confidence intervals over
                   windows (python -m lab.repro report reads them)
and, when matplotlib is installed, layers.png (per-layer F-Attn, sink share and M-Act of every run), gate_hist.png
(gate-score histograms), attn_maps.png (a head-averaged attention map per run, at the layer of its highest F-Attn,
as in GA Fig. 2), curves.png (validation loss and F-Attn during training, from each run's log.jsonl) and
emergence.png (the sink forming: per layer, F-Attn, M-Act and the sink's value norm ratio over the training steps, a
panel per run and measure, the runs in bands of at most five columns, from each run's log.jsonl); --plot_labels
picks the runs they show. These files are one set: a new analysis into the same out_dir replaces them together, and
takes away a figure of the earlier one that it does not draw (runfolder.result_set).
The sink's mechanism per layer, in summary.json and summary.md: the value norm ratio (the value vector's norm at
position 0 over the mean elsewhere: a sink parks attention on a small value) and the channels that carry the massive
activation (probe.massive_channels); lab.report.mechanism_rows gives them as a table's rows.
Beside each run's checkpoint it keeps what it measured there, measured.json and measured.npz, with the checkpoint's
iteration and run id (a folder that cannot be written costs a note, not the summary): a run whose checkpoint is gone
(left on a borrowed GPU machine) is read from them instead, if they were taken on the same windows and are of the run
the folder's log.jsonl records (not an earlier run's, left in a reused folder).
A checkpoint whose data is not on disk, or has changed since it was trained (the dataset fingerprint train.py records:
a dataset prepared again in place), is refused before any run is measured. A model whose weights are not finite is
measured, its numbers written as null (JSON has no NaN), and the command ends with an error naming it. out_dir is held
for the while (runfolder.claim_folder): a second command writing there stops with one line naming the first.

--pretrained measures published checkpoints instead (pretrained.py: GPT-2, the gated-attention paper's released
models, a folder or a hub id), each with its own tokenizer, on --windows windows of --window tokens cut one after
another from --text (data/sample_text.txt by default); summary.md then sets them beside the published values.
"""

import collections
import hashlib
import json
import math
import os
import sys
import time
import zipfile
if not __package__:  # run as python lab/analyze.py: find the project from its root, as python -m lab.analyze does
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dataclasses import asdict, dataclass

# cli before torch: its excepthook (cli.one_line_interrupt) makes Ctrl-C while torch loads one line, not a traceback
from cli import REPO, autocast_for, configure, dataset_dir, device_name, fail, pick_device, run_main
import numpy as np
import torch
import torch.nn.functional as F

import pretrained
from lab.report import (ANALYSIS_FILES, data_problem, distinct_styles, finite_json, kept_of_other_run,
    lacks_run_settings, legend_beside, load_windows, log_start, markdown_table, places_text, pyplot, save_figure,
    windows_id)
from runfolder import (CHECKPOINT, LOG, MEASURED, atomic_write, claimed, load_checkpoint, no_checkpoint, read_jsonl,
    result_set, writable_folder, write_json, write_text)
from data.shards import bos_token, dataset_fingerprint, read_meta, val_windows_apart
from probe import (GATE_KEYS, MEASURE, MEASURES, MECHANISM, MECHANISM_NOTE, Probe, SINK_HEAD_THRESHOLD, TRIGGER_KEYS,
    attention_maps, describe, layer_mean, massive_channels, most_often, summarize, trigger_positions)
from lab.report import (MECHANISM_ROWS_NOTE, mechanism_rows, not_a_file_name, older_sink_share, repeated_label,
                        window_set)
from lab.variants import VARIANTS


@dataclass
class AnalyzeConfig:
    """Every key of python -m lab.analyze."""
    runs: tuple[str, ...] = ()  # the runs' out_dirs
    labels: tuple[str, ...] = ()  # names for the runs in the same order (default: the folders' names)
    checkpoint: str = CHECKPOINT  # which file of each run: ckpt.pt (the latest state) or best.pt (the lowest val loss)
    out_dir: str = "out-analysis"  # git-ignored; results/ holds committed results
    device: str = "auto"  # auto (cuda, then mps, then cpu), cpu, cuda, cuda:1, mps
    batches: int = None  # validation batches (default: the first run's eval_iters)
    batch_size: int = None  # windows per batch (default: the first run's batch_size)
    map_tokens: int = 48  # sequence length of the attention-map plot
    plot_labels: tuple[str, ...] = ()  # the runs (by label) the plots show; default: every run
    # published checkpoints instead of runs (pretrained.py)
    pretrained: tuple[str, ...] = ()  # gpt2, gpt2-medium, gpt2-large, gpt2-xl, gated-1b-baseline, ... or folders
    text: str = ""  # a UTF-8 text file to measure them on; default: data/sample_text.txt
    window: int = 1024  # tokens per window
    windows: int = 8  # how many windows, cut one after another from the text (fewer if it is shorter)
    bos: bool = None  # start each window with <|endoftext|>; None: as each model was trained (GPT-2, Qwen3: none)


RUNS_ONLY = ("checkpoint", "batches", "batch_size", "plot_labels")  # the keys each kind of measurement alone reads
PRETRAINED_ONLY = ("text", "window", "windows", "bos")
GATE_SAMPLE = 200_000  # gate scores kept per run for its histogram
STORED_GATE_SAMPLE = 20_000  # of those, kept in the run's stored measurement (runfolder.MEASURED): enough for 40 bins


def eval_windows(checkpoint):
    """The validation windows train.py evaluated this run on (data.shards.val_batches' arguments)."""
    cfg = checkpoint["config"]
    return dict(data_dir=dataset_dir(cfg["dataset"], cfg.get("data_dir")),
                block_size=checkpoint["model_args"]["block_size"], batch_size=cfg["batch_size"],
                batches=cfg["eval_iters"], bos=cfg.get("bos", False))


def describe_windows(w):
    anchor = ", each starting with <|endoftext|>" if w["bos"] else ""
    return f"{w['batches']} batches x {w['batch_size']} windows of {w['block_size']} tokens of {w['data_dir']}{anchor}"


@torch.no_grad()
def analyze_run(run_dir, model, checkpoint, device, windows, map_tokens):
    cfg, train_cfg = model.config, checkpoint["config"]
    batches = load_windows(windows)
    # the run's dtype, resolved here as train.py resolves it (auto: bf16 autocast where this device computes bf16),
    # so that on the kind of machine it trained on the losses agree with its log's
    ctx, _ = autocast_for(device, train_cfg.get("dtype", "auto"))
    triggers = (read_meta(windows["data_dir"]) or {}).get("triggers")  # the Bigram-Backcopy task's (sink lab)
    shown = map_window(batches[0][0], map_tokens, triggers)
    layers, heads, windows_all, scores, maps, channels = measure(model, batches, device, ctx, map_tokens, triggers,
                                                                 shown)
    record = {
        "run": os.path.basename(os.path.normpath(run_dir)),
        "out_dir": run_dir,
        "model": {k: v for k, v in checkpoint["model_args"].items()},
        "params": model.num_params(),
        "iter": checkpoint["iter_num"],
        "tokens": checkpoint.get("tokens", checkpoint["iter_num"] * train_cfg["gradient_accumulation_steps"]
                                 * train_cfg["batch_size"] * cfg.block_size),
        "lr": train_cfg["learning_rate"],
        "max_iters": train_cfg["max_iters"],
        "seed": train_cfg.get("seed"),
        "loss_spikes": checkpoint.get("health", {}).get("loss_spikes"),
        "nonfinite_steps": checkpoint.get("health", {}).get("nonfinite_steps"),
        "val_loss": float(np.mean(windows_all["val_loss"])),
        "val_loss_logged": checkpoint.get("val_loss"),  # what train.py measured on its own eval windows
        "run_id": checkpoint.get("run_id"),  # which run (None for a checkpoint older than run ids)
        "log_start": log_start(run_dir),  # and how its log began: a new run in the folder begins another
        "data_fingerprint": dataset_fingerprint(windows["data_dir"]),  # which data, as measured here
        "eval_windows_trained": eval_windows(checkpoint),
        "train_config": dict(train_cfg),  # how it was trained: a study compares only runs trained alike
        "windows_id": windows_id(batches),
        **layer_means(layers, windows_all),
        "triggers": triggers,
        "map_tokens": batches[0][0][shown, :map_tokens].tolist(),  # the window the attention maps show
        "layers": layers,
        "heads": heads,
        "channels": channels,
        "per_window": windows_all,  # arrays, written to per_window.npz, not to summary.json
    }
    return record, scores, maps


def layer_means(layers, windows_all):
    """A record's headline numbers, each pooled over every batch: probe.summarize's (every measure of MEASURES
    the probe takes per layer, averaged over layers as GA Table 4's M-Act and F-Attn are, and peak_act, GN's
    residual-stream maximum, per window), and the layer means of the M-Act over the median and of the gate's share
    below 0.5."""
    return {**summarize(layers, torch.from_numpy(windows_all["peak_act"])),
            **{key: layer_mean(layers[key]) for key in ("act_ratio", "gate_below_0.5")}}


@torch.no_grad()
def measure(model, batches, device, ctx, map_tokens, triggers=None, shown=0):
    """Everything probe.py measures, over batches [(x, y), ...] that all have the same number of windows:
    (layers: per-layer statistics, heads: per-head ones (value_norm_ratio's per KV head), windows_all: per-window
    arrays with each window's loss,
    scores: a sample of gate scores ({"all": ...}, and with triggers {"trigger": ..., "other": ...}: the scores at
    the task's trigger positions and at positions 1..T-1 elsewhere) or None, maps: a head-averaged attention map
    per layer of window `shown` of the first batch, channels: per layer, probe.massive_channels over every window).
    triggers: the Bigram-Backcopy task's trigger tokens, for probe.py's mechanism statistics."""
    # gate scores for the histogram: a random sample of each layer's, from every batch
    keep_scores, samples = gate_sampler(GATE_SAMPLE // (len(batches) * model.config.n_layer) + 1)
    probed = [probe_batch(model, x.to(device), y.to(device), ctx, keep_scores, triggers) for x, y in batches]
    per_batch, per_head, kept, per_window = zip(*probed)
    massive, top_keys = zip(*kept)
    layers, heads, channels = pool_layers(model.config, per_batch, per_head, massive, top_keys)
    windows_all = {key: (None if per_window[0][key] is None else np.concatenate([w[key] for w in per_window]))
                   for key in per_window[0]}
    with ctx:
        maps = attention_maps(model, batches[0][0][shown:shown + 1, :map_tokens].to(device))  # per layer (1, H, t, t)
    scores = {kind: np.concatenate(parts) for kind, parts in samples.items()} or None
    return layers, heads, windows_all, scores, [m[0].mean(0).float().cpu().numpy() for m in maps], channels


def gate_sampler(per_layer):
    """A probe.Probe gate_scores callback that keeps a random sample of at most per_layer scores each time a layer
    reports them, and the dict of samples it fills: {"all": [arrays]}, and given the task's trigger positions
    {"trigger": [...], "other": [...]} too."""
    rng = np.random.default_rng(0)
    samples = {}

    def sample(kind, s):
        take = min(s.numel(), per_layer)
        if take:
            picked = s[torch.from_numpy(rng.choice(s.numel(), take, replace=False)).to(s.device)]
            samples.setdefault(kind, []).append(picked.cpu().numpy())

    def keep_scores(s, trig=None):
        sample("all", s.flatten())
        if trig is not None:  # (B, T): the scores at trigger positions, and at positions 1..T-1 elsewhere
            other = ~trig
            other[:, 0] = False
            for kind, where in (("trigger", trig), ("other", other)):
                sample(kind, s[where.view(*where.shape, *[1] * (s.dim() - 2)).expand_as(s)])
    return keep_scores, samples


def probe_batch(model, x, y, ctx, keep_scores, triggers):
    """One batch through the model under a probe.Probe: its per-layer statistics, per-head ones, massive
    activations, and per window its loss and the layer means of its F-Attn, sink share, M-Act and gate mean."""
    with ctx, Probe(model, gate_scores=keep_scores, triggers=triggers) as probe:
        logits, _ = model(x)  # no targets: the loss is computed here, per window
    # each window's own loss (the mean of the batch's is the loss train.py logs), for paired comparisons
    loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="none").view(y.shape).mean(1)
    del logits
    window = {"val_loss": loss.cpu().numpy(),
              **{key: (None if values is None else torch.stack(values).mean(0).numpy())
                 for key, values in probe.windows.items()}}
    window["peak_act"] = torch.stack(probe.windows["max_act"]).amax(0).numpy()  # the window's largest |h| anywhere
    if triggers is not None:  # how many query positions of each kind the trigger statistics pooled: their weights
        n = int(trigger_positions(x, triggers).sum())
        probe.stats["positions"] = {"trigger": n, "other": x.size(0) * (x.size(1) - 1) - n}
    return probe.stats, probe.heads, (probe.massive, probe.top_keys), window


def pool_layers(cfg, per_batch, per_head, massive, top_keys):
    """probe_batch's statistics of every batch (each of the same number of windows) pooled: (layers, heads,
    channels). top_keys: per batch, the probe's top_keys (each (window, head)'s top key, per layer)."""
    def over_batches(key):  # every batch has the same number of windows: the mean of batch means
        if per_batch[0][key] is None:
            return None
        values = np.array([s[key] for s in per_batch], dtype=float)  # (batches, layers)
        if key in TRIGGER_KEYS:  # pooled over positions of one kind, whose count differs from batch to batch
            weight = np.array([s["positions"][key.rsplit("_", 1)[1]] for s in per_batch], dtype=float)[:, None]
            weight = np.where(np.isnan(values), 0.0, weight)  # NaN: the batch had no position of the kind
            with np.errstate(invalid="ignore"):  # no such position in any batch: NaN, as probe.py says
                return [float(v) for v in (np.nan_to_num(values) * weight).sum(0) / weight.sum(0)]
        return [float(v) for v in np.mean(values, axis=0)]

    layers = {key: over_batches(key) for key in ("first_token_attn", "sink_share", "max_act", "act_ratio") + GATE_KEYS +
              ("max_act_first", "max_act_rest", "value_norm_ratio") + TRIGGER_KEYS}
    heads = {key: np.mean([h[key] for h in per_head], axis=0).tolist()
             for key in ("first_token_attn", "sink_share", "value_norm_ratio")}
    # the channels of the massive activation, pooled over every window of every batch
    channels = [massive_channels(torch.cat([m[layer]["pos"] for m in massive]),
                                 torch.cat([m[layer]["h"] for m in massive])) for layer in range(cfg.n_layer)]
    # sink heads over the whole validation set: a head's F-Attn averaged over every window, then thresholded
    layers["sink_heads"] = [float(np.mean(np.array(h) > SINK_HEAD_THRESHOLD)) if np.isfinite(h).all() else math.nan
                            for h in heads["first_token_attn"]]
    layers.update(pool_sink_location(top_keys))
    return layers, heads, channels


def pool_sink_location(top_keys):
    """Per layer: the key position and the token most often receiving a (window, head)'s largest share, counted over
    every (window, head) pair of every batch (probe.Probe.top_keys), and the fraction of pairs they are: the same
    whatever the windows' split into batches. None (and a share None) where the probe named no key or saw no ids."""
    out = {key: [] for key in ("sink_pos", "sink_pos_share", "sink_token", "sink_token_share")}
    for layer in range(len(top_keys[0]) if top_keys else 0):
        for what, key in (("pos", "sink_pos"), ("token", "sink_token")):
            parts = [batch[layer][what] for batch in top_keys]
            top, share = None, None
            if all(p is not None for p in parts):
                top, share = most_often(torch.cat([p.flatten() for p in parts]))
            out[key].append(top)
            out[key + "_share"].append(share)
    return out


def map_window(x, map_tokens, triggers=None):
    """Which window of the first batch x (B, T) the attention maps show: the first; on the task with triggers, the
    one with the most trigger positions in its first map_tokens tokens (the lowest index on a tie), so the maps
    show the head at work."""
    return int(trigger_positions(x[:, :map_tokens], triggers).sum(1).argmax()) if triggers else 0


def plot(records, scores, maps, logs, out_dir):
    """The figures of the runs (records, each with its gate-score sample, attention maps and log); returns the names
    of the files written to out_dir (none without matplotlib)."""
    plt = pyplot()
    if plt is None:
        return []
    names = [r["label"] for r in records]
    written = [plot_layers(plt, records, out_dir)]
    gated = [(n, s, r) for n, s, r in zip(names, scores, records) if s is not None]
    if gated:
        written.append(plot_gate_hist(plt, gated, out_dir))
    written.append(plot_attention_maps(plt, records, maps, out_dir))
    if any(logs):
        written.append(plot_curves(plt, names, logs, out_dir))
    if any(emergence_series(log) for log in logs):
        written.append(plot_emergence(plt, names, logs, out_dir))
    return written


def plot_layers(plt, records, out_dir):
    """layers.png: F-Attn, sink share and M-Act per layer, a line per run, one legend of the runs beside the panels;
    where every run has one layer (the sink lab), a bar per run, labelled with its value: a line through one point
    has no axis worth reading."""
    panels = [("first_token_attn", "attention on the first token", "F-Attn (attention sink)", "linear"),
              ("sink_share", "largest share one key receives", "sink share (a sink anywhere)", "linear"),
              ("max_act", "max |h| per window", "M-Act (massive activations)", "log")]
    one_layer = all(len(r["layers"]["first_token_attn"]) == 1 for r in records)
    height = max(3.0, 1.2 + 0.32 * len(records)) if one_layer else 4.5
    fig, axes = plt.subplots(1, 3, figsize=(16, height), sharey=one_layer)
    for ax, (key, label, title, scale) in zip(axes, panels):
        if one_layer:  # linear, from 0: a bar's length is its value; the first run on top
            rows = range(len(records))[::-1]
            bars = ax.barh(rows, [r["layers"][key][0] for r in records],
                           color=[f"C{i % 10}" for i in range(len(records))])
            ax.bar_label(bars, fmt="%.3g", fontsize=8, padding=2)
            ax.set_yticks(rows, [r["label"] for r in records], fontsize=8)
            ax.set(xlabel=label, ylabel="run", title=f"{title}, the one layer")
            ax.margins(x=0.15)
        else:
            for i, r in enumerate(records):  # the sink share of a run the older probe measured: dashed, and said
                older = key == "sink_share" and older_sink_share(r)
                ax.plot(range(len(r["layers"][key])), r["layers"][key], marker="o", color=f"C{i % 10}",
                        linestyle="--" if older else "-", label=r["label"] + (" (older probe)" if older else ""))
            ax.set(xlabel="layer", ylabel=label, yscale=scale, title=f"{title} per layer")
            ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    fig.tight_layout()
    if one_layer:  # the bars are named on their axis: no legend
        return save_figure(fig, os.path.join(out_dir, "layers.png"))
    from matplotlib.lines import Line2D
    older = [(Line2D([], [], color="grey", linestyle="--"), "dashed: the older probe's sink share")] \
        if any(older_sink_share(r) for r in records) else []
    legend_beside(fig, axes[:1], title="run", extra=older)  # inside a panel, it covered points (the repro's layer 6)
    return save_figure(fig, os.path.join(out_dir, "layers.png"), bbox_inches="tight")


def plot_gate_hist(plt, gated, out_dir):
    """gate_hist.png: a panel per gated run ((label, gate-score sample, its record) in gated), the share of scores in
    each bin; on the task with triggers, at trigger positions and elsewhere. Each legend gives the record's mean gate
    score (gate_mean, gate_mean_trigger, gate_mean_other: the tables' number, over every score, not the sample's),
    the sample's mean only where the record has none; it sits where it leaves the bars uncovered (legend_off_bars)."""
    fig, axes = grid(plt, len(gated), 3.4, 3.2)
    bins = np.linspace(0, 1, 41)
    for ax, (n, s, record) in zip(axes, gated):
        kinds = [("trigger", "trigger positions", "tab:red"), ("other", "other positions", "tab:blue")] \
            if "trigger" in s else [("all", "all positions", "tab:orange")]
        for kind, label, color in kinds:
            values = np.clip(s[kind], 0, 1)  # additive, SiLU and identity scores leave [0, 1]: drawn at the ends,
            outside = [f"{share:.0%} {side}, drawn at {end}" if share >= 0.01 else f"<1% {side}, drawn at {end}"
                       for share, side, end in ((np.mean(s[kind] < 0), "< 0", 0), (np.mean(s[kind] > 1), "> 1", 1))
                       if share > 0]  # and said so
            mean = record.get("gate_mean" if kind == "all" else f"gate_mean_{kind}")
            said = f"mean {mean:.3f}" if mean is not None else f"sample mean {s[kind].mean():.2f}"
            ax.hist(values, bins=bins, weights=np.full(len(values), 1 / max(len(values), 1)), color=color,
                    alpha=0.6, label="\n".join([f"{label} ({said})", *outside]))
        ax.set(title=n, xlabel="gate score", ylabel=f"share of scores (bins of {bins[1]:.3g})")
    fig.tight_layout()
    for ax in axes:
        legend_off_bars(fig, ax)
    fig.tight_layout()  # the new y ranges' tick labels
    return save_figure(fig, os.path.join(out_dir, "gate_hist.png"))


def legend_off_bars(fig, ax, gap=0.04):
    """A legend in ax's upper right or upper left corner, whichever needs less room above the bars beneath it, and
    the y-axis (from 0) raised until every bar under the legend ends below it (gap: as a share of the axis)."""
    renderer = fig.canvas.get_renderer()
    tallest = max((p.get_height() for p in ax.patches), default=0) or 1.0
    best = None
    for loc in ("upper right", "upper left"):
        legend = ax.legend(fontsize=7, loc=loc)
        box = legend.get_window_extent(renderer).transformed(ax.transData.inverted())  # in data units: x spans
        frac = legend.get_window_extent(renderer).transformed(ax.transAxes.inverted()).y0  # its foot on the axis
        under = max((p.get_height() for p in ax.patches if p.get_x() < box.x1 and p.get_x() + p.get_width() > box.x0),
                    default=0)
        top = max(1.05 * tallest, under / max(frac - gap, 0.05))
        if best is None or top < best[0]:
            best = (top, loc)
    ax.legend(fontsize=7, loc=best[1])
    ax.set_ylim(0, best[0])


def plot_attention_maps(plt, records, maps, out_dir):
    """attn_maps.png: a head-averaged attention map per run, each of the layer of that run's highest F-Attn, which
    its title names (so the panels' layers can differ). One layer for all, the first run's, hid sinks that formed in
    another layer (at a high learning rate, often the first); a lone sink head among a layer's heads can still be
    averaged away here, and layers.png and summary.json give every layer and head."""
    fig, axes = grid(plt, len(records), 3.6, 3.6, layout="constrained")  # room for the labels and the colour scale
    for ax, r, m in zip(axes, records, maps):
        f_attn = r["layers"]["first_token_attn"]
        layer = int(np.argmax(f_attn))
        image = ax.imshow(m[layer], cmap="viridis", vmin=0, vmax=1)
        ax.set_title(f"{r['label']}\nlayer {layer} (its highest F-Attn), first-token {f_attn[layer]:.2f}",
                     fontsize=9)
        ax.set(xlabel="key", ylabel="query")
        if r.get("triggers") and r.get("map_tokens"):  # the task's copy positions, marked at the left edge
            rows = trigger_positions(torch.tensor([r["map_tokens"]]), r["triggers"])[0].nonzero().flatten().tolist()
            ax.plot([-0.5] * len(rows), rows, ">", color="tab:red", markersize=5, clip_on=False,
                    label="trigger positions")
            if ax is axes[0]:
                ax.legend(fontsize=7, loc="upper right")
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention probability (head average)")
    return save_figure(fig, os.path.join(out_dir, "attn_maps.png"))


def plot_curves(plt, names, logs, out_dir):
    """curves.png: the validation loss and the sink (F-Attn, averaged over layers) during training, from each run's
    log.jsonl: a colour and line style of its own per run (distinct_styles), one legend beside both panels. The loss
    axis spans the evaluations after the first: the first, at step 0, sits far above the rest and would flatten
    every run into one line."""
    fig, (loss_ax, sink_ax) = plt.subplots(1, 2, figsize=(11, 4))
    later = []  # the losses after each run's first evaluation: the loss axis' range
    for n, log, (colour, style) in zip(names, logs, distinct_styles(len(names))):
        for ax, key in ((loss_ax, "val_loss"), (sink_ax, "first_token_attn")):
            pts = [(rec["tokens"] / 1e6, rec[key]) for rec in log if rec.get(key) is not None]
            if pts:
                ax.plot(*zip(*pts), label=n, color=colour, linestyle=style)
            if key == "val_loss":
                later += [y for _, y in pts[1:] if math.isfinite(y)]
    loss_ax.set(xlabel="tokens (M)", ylabel="validation loss (nats)", title="validation loss during training")
    if later:
        low, high = min(later), max(later)
        pad = 0.05 * (high - low) or 0.01 * max(abs(high), 1.0)
        loss_ax.set_ylim(low - pad, high + pad)
        loss_ax.set_title("validation loss during training\n(the axis: from each run's second evaluation on)")
    sink_ax.set(xlabel="tokens (M)", ylabel="attention on the first token", title="F-Attn during training")
    fig.tight_layout()
    legend_beside(fig, (loss_ax, sink_ax), title="run")
    return save_figure(fig, os.path.join(out_dir, "curves.png"), bbox_inches="tight")


EMERGENCE_ROWS = (  # the per-layer values of train.py's log records the emergence plot draws, one row of panels each
    ("first_token_attn", "F-Attn (attention on position 0)", "linear"),
    ("max_act", "M-Act (max |h| of the layer's output)", "log"),
    ("value_norm_ratio", "value norm at position 0 / elsewhere", "log"),
)


def emergence_series(log):
    """{key: (steps, values (evals x layers))} of EMERGENCE_ROWS' per-layer values in a run's log.jsonl records (their
    "layers"), for the records that have them; {} for a log without per-layer values (older train.py)."""
    out = {}
    for key, _, _ in EMERGENCE_ROWS:
        pts = [(rec["iter"], rec["layers"][key]) for rec in log if (rec.get("layers") or {}).get(key)]
        if pts:
            steps, values = zip(*pts)
            out[key] = (np.array(steps), np.array([[np.nan if v is None else v for v in row] for row in values],
                                                  dtype=float))
    return out


def plot_emergence(plt, names, logs, out_dir, columns=5):
    """emergence.png: the sink forming during training, from each run's log.jsonl (train.py's eval records): a panel
    per run and measure (EMERGENCE_ROWS: F-Attn, M-Act, the sink's value norm ratio), the runs in the runs' order
    wrapped into bands of at most `columns` (as even as they go: 8 runs, two bands of 4), each band a row per measure,
    the same y range for a measure in every band so the runs compare at a glance; one line per layer, neighbouring
    layers told apart by a qualitative palette (distinct_styles: viridis made layers 6 and 7 of 8 the same green),
    their legend beside the panels (none for a one-layer model). A measure no run of a band logged gets no row in that
    band, and a measure only some runs logged is drawn for those and named once, under the title, with its runs."""
    series = [emergence_series(log) for log in logs]
    keys = [row for row in EMERGENCE_ROWS if any(row[0] in s for s in series)]
    n_layers = max(v.shape[1] for s in series for _, v in s.values())
    looks = distinct_styles(n_layers)
    bands = -(-len(names) // columns)
    per_band = -(-len(names) // bands)  # the columns, spread evenly over the bands
    band_rows = [[k for k in keys if any(k[0] in s for s in series[b * per_band:(b + 1) * per_band])]
                 for b in range(bands)]
    n_rows = sum(len(rows) for rows in band_rows)
    fig, grid_axes = plt.subplots(n_rows, per_band, figsize=(3.6 * per_band, 2.7 * n_rows), squeeze=False)
    # a measure on a log axis only where every value of every run can be logged: one scale for the measure's panels
    logged = {key: scale == "log" and all(np.nanmin(s[key][1]) > 0 for s in series if key in s)
              for key, _, scale in keys}
    drawn = {}  # each measure's panels: one y range for them all (set_ylim, below)
    row = 0
    for b, rows in enumerate(band_rows):
        band = list(enumerate(zip(names, series)))[b * per_band:(b + 1) * per_band]
        for i, (key, label, _) in enumerate(rows):
            labelled = False
            for col in range(per_band):
                ax = grid_axes[row][col]
                if col >= len(band):
                    ax.set_visible(False)
                    continue
                _, (name, s) = band[col]
                if i == 0:
                    ax.set_title(name, fontsize=9)
                if key not in s:
                    if any(k in s for k, _, _ in rows) or i > 0:
                        ax.set_visible(False)  # said once, under the figure's title
                    else:  # a run without any per-layer values: its column says so once
                        ax.set(xticks=[], yticks=[], xlabel="training step", ylabel=label)
                        ax.text(0.5, 0.5, "no per-layer values\nin this run's log", ha="center", va="center",
                                transform=ax.transAxes, fontsize=8)
                    continue
                steps, values = s[key]
                for layer in range(values.shape[1]):
                    colour, style = looks[layer]
                    ax.plot(steps, values[:, layer], marker="o", markersize=2.5, color=colour, linestyle=style,
                            label=f"layer {layer}")
                if key == "value_norm_ratio":
                    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
                drawn.setdefault(key, []).append(ax)
                if logged[key]:
                    ax.set_yscale("log")
                ax.set(xlabel="training step", ylabel=label.split(" (")[0] if labelled else label)
                ax.yaxis.label.set_size(8)
                labelled = True
            row += 1
    for key, panels in drawn.items():  # the range of every run's values (and the ratio's 1), a margin around it
        values = np.concatenate([s[key][1].ravel() for s in series if key in s] +
                                [np.array([1.0])] * (key == "value_norm_ratio"))
        values = values[np.isfinite(values) & (values > 0 if logged[key] else True)]
        if values.size:
            low, high = values.min(), values.max()
            if logged[key]:
                pad = (high / low) ** 0.05
                low, high = low / pad, high * pad
            else:
                pad = 0.05 * (high - low) or 0.05 * max(abs(high), 1.0)
                low, high = low - pad, high + pad
            for ax in panels:
                ax.set_ylim(low, high)
    partial = [(label.split(" (")[0], [n for n, s in zip(names, series) if key in s])
               for key, label, _ in keys if not all(key in s for s in series if s)]
    notes = [f"{label}: only in the logs of {', '.join(runs)}" for label, runs in partial]
    one = "the model's one layer" if n_layers == 1 else "per layer"
    fig.suptitle("\n".join([f"The sink's emergence during training ({one}, on the first validation batch of each "
                            "eval)", *notes]), fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - (0.15 + 0.2 * (1 + len(notes))) / fig.get_figheight()))  # the title above
    if n_layers > 1:
        legend_beside(fig, [ax for ax in fig.axes if ax.get_visible()], title="layer")
    return save_figure(fig, os.path.join(out_dir, "emergence.png"), bbox_inches="tight")


def grid(plt, n, width, height, columns=4, **kw):
    """A figure of n panels, at most `columns` to a row, each width x height inches: (figure, the n axes). kw: more
    of plt.subplots' arguments."""
    rows, cols = -(-n // columns), min(n, columns)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, **kw)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def analyze(run_dirs, labels=None, out_dir="out-analysis", device="auto", batches=None, batch_size=None,
            map_tokens=48, checkpoint=CHECKPOINT, plot_labels=None):
    """Analyze every run on the same validation windows: the first run's eval windows, unless batches or
    batch_size say otherwise. plot_labels: the runs the plots show (default: all). Writes summary.json, summary.md,
    per_window.npz and the plots to out_dir; returns the summary (its records with their per-window arrays)."""
    labels = labels or [os.path.basename(os.path.normpath(d)) for d in run_dirs]
    if len(labels) != len(run_dirs):
        raise ValueError(f"{len(labels)} labels for {len(run_dirs)} runs")
    device = pick_device(device)
    records, scores, maps = [], [], []
    fingerprints = {}  # the windows (eval_windows' dict, as JSON) -> windows_id of their tokens
    data_notes = []  # where kept runs could not be checked on the data here (check_kept_windows)
    run_notes = []  # kept measurements of a state earlier than the end of the run's log
    for i, (run_dir, label) in enumerate(zip(run_dirs, labels)):
        model, ckpt, stored, trained = open_run(run_dir, checkpoint, device)
        if i == 0:  # how many windows: the first run's, so one run's val loss matches its own log
            given = batches is not None or batch_size is not None
            batches, batch_size, source = validation_windows(trained, label, batches, batch_size)
            os.makedirs(out_dir, exist_ok=True)
        elif given and stored is None:  # its own block_size and data: as many windows may not fit apart there
            check_windows_apart(eval_windows(trained), batches, batch_size)
        # each run's own data and block_size (a model cannot read longer windows than it was built for)
        windows = {**eval_windows(trained), "batches": batches, "batch_size": batch_size}
        key = json.dumps(windows, sort_keys=True)
        if stored is None:
            problem = not_finite(model, os.path.join(run_dir, checkpoint))
            record, s, m = analyze_run(run_dir, model, ckpt, device, windows, map_tokens)
            del model, ckpt
            record.update(label=label, checkpoint=checkpoint, eval_windows=windows,
                          measured_on=f"{device_name(device)}, {time.strftime('%Y-%m-%d')}")
            if problem:  # its numbers are NaN, written as null; nothing to keep for a study
                record["problem"] = problem  # no headline number of a layer that stayed finite either
                record.update({m.key: None for m in MEASURES if m.key in record and m.key != "loss_spikes"},
                              act_ratio=None, **{"gate_below_0.5": None})
            else:  # at once: a later run's failure loses none of this one
                keep_measurement(run_dir, record, s, m)
            if fingerprints.setdefault(key, record["windows_id"]) != record["windows_id"]:  # kept runs' windows
                raise ValueError(f"{run_dir}: measured here on {describe_windows(windows)}, whose tokens are not "
                                 "those the measurements kept of the runs before it were taken on (other data): "
                                 "measure it with runs trained on the same data")
            logged = record["val_loss_logged"]
            where = "" if logged is None else f" (val loss in its log: {logged:.4f})"
        else:
            record, s, m = stored
            note = check_kept_windows(record, run_dir, checkpoint, windows, fingerprints)
            data_notes += [note] if note and note not in data_notes else []  # (one note a folder, for any windows)
            record.update(label=label, out_dir=run_dir, eval_windows=windows)
            where = f" (measured earlier, on {record['measured_on']}: its {checkpoint} is gone)"
            log = read_jsonl(os.path.join(run_dir, LOG))
            if log and (log[-1].get("iter") or 0) > (record.get("iter") or 0):  # measured mid-run, or none saved
                note = (f"the measurement kept of {label} is of its state at iter {record.get('iter')}, and its log "
                        f"goes on to iter {log[-1]['iter']}")
                run_notes.append(note)  # said in summary.md and summary.json too
                where += (f"; note: {note} (measured while it trained, or no later state was saved: diverged, or "
                          "--always_save_checkpoint=False)")
        records.append(record)
        scores.append(s)
        maps.append(m)
        print(f"{label:>24}: {describe(record)}{where}")
    window_notes = note_window_differences(records, batches, batch_size)
    # where each run was measured: here and now, or in an earlier session (its checkpoint gone)
    places = dict(collections.Counter(r["measured_on"] for r in records))
    summary = {
        "device": device_name(device),  # where this analysis ran; "measured_on" says where the runs were measured
        "date": time.strftime("%Y-%m-%d"),
        "measured_on": places,
        "checkpoint": checkpoint,
        "validation": {"batches": batches, "batch_size": batch_size, "source": source, "data_notes": data_notes,
                       **({"window_notes": window_notes} if window_notes else {})},
        "runs": records,
        "problems": [f"{r['label']}: {r['problem']}" for r in records if r.get("problem")],
        **({"run_notes": run_notes} if run_notes else {}),
    }
    shown = [i for i, label in enumerate(labels) if plot_labels is None or label in plot_labels]
    write_summary(summary, scores, maps, run_dirs, shown, out_dir)
    return summary


def open_run(run_dir, checkpoint, device):
    """(model, checkpoint, None, checkpoint) for a run whose `checkpoint` file is here; (None, None, the measurement
    kept of it, what eval_windows reads of a checkpoint as the measurement kept it) for one whose file is gone.
    A checkpoint whose data is not here, or has changed since it was trained, is refused (lab.report.data_problem)."""
    path = os.path.join(run_dir, checkpoint)
    if os.path.isdir(path):
        raise ValueError(f"{path} is a folder, not a checkpoint: --checkpoint names a file in each run's folder "
                         f"({CHECKPOINT} or best.pt), and --runs the folders")
    if not os.path.isfile(path):
        stored = stored_measurement(run_dir, checkpoint)
        return None, None, stored, {"config": stored[0]["train_config"], "model_args": stored[0]["model"]}
    model, ckpt = load_run_checkpoint(path, device)
    return model, ckpt, None, ckpt


def load_run_checkpoint(path, device, reader="lab.analyze"):
    """(model, checkpoint) of train.py's checkpoint at path; a ValueError of one line where it lacks train.py's run
    settings, or its data is not here or has changed since it was trained (lab.report.data_problem)."""
    model, ckpt = load_checkpoint(path, device)
    problem = lacks_run_settings(path, ckpt.get("config", {}) if "iter_num" in ckpt else {}, reader)
    if problem:
        raise ValueError(problem)
    problem = data_problem(ckpt, eval_windows(ckpt)["data_dir"], path)
    if problem:
        raise ValueError(problem)
    return model, ckpt


def check_data(path):
    """Before any run is measured: stop with one line if the checkpoint at path (where there is one) was trained on
    data that is not here or has changed since (lab.report.data_problem). Its settings only: the tensors are
    memory-mapped, not read; a file that cannot be read is left for open_run to name."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        data_dir = eval_windows(ckpt)["data_dir"]
    except Exception:  # no file (a kept measurement stands for it), or not train.py's: open_run says which
        return
    try:
        problem = data_problem(ckpt, data_dir, path)
    except ValueError as e:  # a dataset whose preparation did not finish
        problem = str(e)
    if problem:
        fail(problem)


def not_finite(model, path):
    """'' for a model whose weights are all finite, else what is wrong, in words: a NaN or an infinity in a weight
    makes every measurement NaN."""
    bad = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
    if not bad:
        return ""
    return (f"the model in {path} is not finite (NaN or infinite weights in {len(bad)} tensor(s), e.g. {bad[0]}): "
            "its measurements are written as null; the run diverged before this state was saved (its best.pt may "
            "be finite)")


def validation_windows(trained, label, batches, batch_size):
    """(batches, batch_size, where they come from) of the windows every run is measured on: those given, else the
    eval windows of the first run (its checkpoint `trained`, labelled `label`); printed."""
    first = eval_windows(trained)
    given = batches is not None or batch_size is not None
    batches, batch_size = batches or first["batches"], batch_size or first["batch_size"]
    source = "set by --batches/--batch_size" if given else f"the eval windows run {label!r} was trained with"
    if given:  # more than the validation set holds apart would overlap, and the per-window intervals be too narrow
        check_windows_apart(first, batches, batch_size)
    print(f"validation: {describe_windows({**first, 'batches': batches, 'batch_size': batch_size})} "
          f"per run ({source})")
    return batches, batch_size, source


def check_windows_apart(w, batches, batch_size):
    """Stop with one line where batches x batch_size windows of w's block_size (eval_windows' dict) would overlap in
    w's validation set: checked for every run, whose block_size and data may differ from the first run's."""
    most = val_windows_apart(w["data_dir"], w["block_size"], bos_token(w["data_dir"]) if w["bos"] else None)
    if batches * batch_size > most:
        fail(f"--batches={batches} x --batch_size={batch_size} asks for {batches * batch_size} windows of "
             f"{w['block_size']} tokens, but {w['data_dir']}'s validation set holds {most} without "
             "overlap (overlapping windows would make the intervals too narrow): ask for at most that many")


def check_kept_windows(record, run_dir, checkpoint, windows, fingerprints):
    """A kept measurement counts only if it was taken on these windows: checked on the data where it is here, else
    against the other runs kept on the same windows (so a report can be drawn again without the data).
    fingerprints: the windows (as JSON) -> windows_id, filled in as runs are checked. Returns a note, said and kept
    in the summary, where the first run on these windows could not be checked on the data here; else None."""
    key = json.dumps(windows, sort_keys=True)
    taken = {k: v for k, v in (record.get("eval_windows") or {}).items() if k != "data_dir"}
    other = bool(taken) and taken != {k: v for k, v in windows.items() if k != "data_dir"}  # other windows asked
    note = None
    if not other and key not in fingerprints:  # the first run on these windows: checked on the data, where it is here
        try:
            here = windows_id(load_windows(windows))
        except FileNotFoundError:  # named as in this repository, so a committed report names no machine's folders
            data = windows["data_dir"]
            data = os.path.relpath(data, REPO) if data.startswith(REPO + os.sep) else data
            note = (f"{data} is not here: the measurements kept of the runs are compared with each "
                    "other, by a fingerprint of the windows each was taken on")
            here = record["windows_id"]
        if here != record["windows_id"]:  # other data here (a corpus of other packages): the kept runs agree or not
            note = (f"{windows['data_dir']} holds other data than the measurements kept of the runs were taken on: "
                    "they are compared with each other, and a run measured here would not compare with them")
        fingerprints[key] = record["windows_id"]
    if other or record["windows_id"] != fingerprints[key]:
        raise ValueError(f"{run_dir}: its {checkpoint} is gone, and the measurement kept of it was taken on "
                         f"other windows than {describe_windows(windows)} (other data, or cut otherwise): "
                         "train the run again here to compare it with these runs")
    if note:
        print(f"note: {note}")
    return note


def note_window_differences(records, batches, batch_size):
    """Say so where the runs were trained with other eval windows than they are measured on here, or on other data;
    returns the notes, which the summary keeps (summary.md's first line)."""
    notes = []
    if len({r["eval_windows_trained"]["batch_size"] * r["eval_windows_trained"]["batches"] for r in records}) > 1:
        notes.append("the runs were trained with different eval windows (batch_size x eval_iters: " +
                     ", ".join(f"{r['label']} {r['eval_windows_trained']['batch_size']}x"
                               f"{r['eval_windows_trained']['batches']}" for r in records) +
                     f"); all are measured here on the same {batches}x{batch_size}, so a run's val loss can differ "
                     "from its log")
    if len({window_set(r["eval_windows"]) for r in records}) > 1:
        groups = collections.defaultdict(list)  # each set of windows: the runs measured on it
        for r in records:
            w = r["eval_windows"]
            groups[f"{w['block_size']} tokens of {os.path.basename(os.path.normpath(w['data_dir']))}"
                   f"{'' if w['bos'] else ', no BOS'}"].append(r["label"])
        notes.append("the runs differ in block_size, dataset or bos, so they were measured on different windows (" +
                     "; ".join(f"{where}: {labels[0]}" + (f" and {len(labels) - 1} more" if len(labels) > 1 else "")
                               for where, labels in groups.items()) + ")")
    for note in notes:
        print(f"note: {note}")
    return notes


def write_summary(summary, scores, maps, run_dirs, shown, out_dir):
    """Into out_dir, as one set (runfolder.result_set): the plots of the runs `shown` (indices into summary["runs"],
    run_dirs and the runs' gate-score samples and attention maps), summary.md, per_window.npz and summary.json."""
    records = summary["runs"]
    logs = [read_jsonl(os.path.join(run_dirs[i], LOG)) for i in shown]
    for i, log in zip(shown, logs):
        if not log:  # said: a run missing from curves.png is no run that had no history
            print(f"note: {os.path.join(run_dirs[i], LOG)} is missing or empty: curves.png and emergence.png show no "
                  f"training history of {records[i]['label']}")
    with result_set(out_dir, ANALYSIS_FILES) as staging:  # each file atomically too: a full disk keeps the old set
        summary["plots"] = plot([records[i] for i in shown], [scores[i] for i in shown], [maps[i] for i in shown],
                                logs, staging)
        write_text(os.path.join(staging, "summary.md"), summary_table(summary))
        arrays = {f"{i}/{key}": values for i, r in enumerate(records) for key, values in r["per_window"].items()
                  if values is not None}
        atomic_write(os.path.join(staging, "per_window.npz"), lambda f: np.savez(f, **arrays))
        # the per-window arrays are in per_window.npz; JSON has no NaN: a non-finite number is written as null
        clean, replaced = finite_json({**summary, "runs": [{k: v for k, v in r.items() if k != "per_window"}
                                                           for r in records]})
        write_json(os.path.join(staging, "summary.json"), clean)
    if replaced:
        print(f"note: {replaced} non-finite value(s) written as null in {os.path.join(out_dir, 'summary.json')}")


def keep_measurement(run_dir, record, scores, maps):
    """Keep what was measured on a run's checkpoint beside it (runfolder.MEASURED): the record as JSON and its arrays
    (per-window values, a sample of the gate scores, the attention maps) as .npz, each written atomically, the
    JSON last: where it exists, the arrays do. A study whose checkpoints are gone still has its runs. A folder that
    cannot be written (read-only, full) costs one note, never the measurement: the summary holds it."""
    try:
        write_measurement(os.path.join(run_dir, MEASURED), record, scores, maps)
    except OSError as e:
        print(f"note: could not keep the measurement beside {os.path.join(run_dir, record['checkpoint'])} "
              f"({MEASURED}.json, .npz: {e.strerror or e}); the summary holds it, but a study cannot stand in "
              "for this run once its checkpoint is gone")


def write_measurement(base, record, scores, maps):
    arrays = {f"window/{key}": values for key, values in record["per_window"].items() if values is not None}
    # every k-th score of the sample, which runs batch after batch: from every part of the validation windows
    arrays.update({f"scores/{kind}": values[::max(1, -(-len(values) // STORED_GATE_SAMPLE))].astype(np.float16)
                   for kind, values in (scores or {}).items()})
    arrays["maps"] = np.stack(maps).astype(np.float16)  # (layers, t, t) probabilities
    if os.path.lexists(base + ".json"):  # the old record first: it never stands beside the new arrays
        os.remove(base + ".json")
    atomic_write(base + ".npz", lambda f: np.savez_compressed(f, **arrays))
    kept = {key: value for key, value in record.items() if key != "per_window"}
    write_json(base + ".json", finite_json(kept)[0])


def stored_measurement(run_dir, checkpoint):
    """(record, gate-score sample, attention maps) as keep_measurement kept them for run_dir's `checkpoint`; a
    ValueError that says what to do where there is none."""
    base = os.path.join(run_dir, MEASURED)
    train = f"train it first (python train.py --out_dir={run_dir} ...)"
    if not os.path.isfile(base + ".json"):
        raise ValueError(f"no {checkpoint} in {run_dir}, and no measurement kept of it ({MEASURED}.json): {train}")
    try:
        with open(base + ".json") as f:
            record = json.load(f)
        kept_of = record["checkpoint"]
    except (OSError, ValueError, KeyError, TypeError) as e:  # empty, cut short, or not lab/analyze.py's
        raise ValueError(f"no {checkpoint} in {run_dir}, and the measurement kept of it cannot be read ({MEASURED}"
                         f".json: {type(e).__name__}): it counts as absent; {train}") from None
    if kept_of != checkpoint:  # a checkpoint still here is what a mistyped name most likely meant
        raise ValueError(no_checkpoint(run_dir, checkpoint) if any(f.endswith(".pt") for f in os.listdir(run_dir))
                         else f"no {checkpoint} in {run_dir}; the measurement kept there is of its {kept_of}: "
                         f"ask for that one with --checkpoint={kept_of}")
    other = kept_of_other_run(run_dir, record, f"{MEASURED}.json")
    if other:
        raise ValueError(f"no {checkpoint} in {run_dir}, and {other}: measure the new run once it has saved its "
                         f"{checkpoint}")
    try:
        with np.load(base + ".npz") as arrays:
            parts = {}
            for name in arrays.files:  # "window/<key>", "scores/<kind>", "maps"
                group, _, key = name.partition("/")
                parts.setdefault(group, {})[key] = arrays[name]
        windows, maps = parts["window"], parts["maps"][""]
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as e:  # gone, truncated, not ours
        raise ValueError(f"no {checkpoint} in {run_dir}, and the arrays of the measurement kept of it cannot be read "
                         f"({MEASURED}.npz: {type(e).__name__}): it counts as absent; {train}") from None
    record["per_window"] = windows
    scores = {kind: values.astype(np.float32) for kind, values in parts.get("scores", {}).items()} or None
    return record, scores, list(maps.astype(np.float32))


def cell(measure, value):
    """A table's cell for one measure: its value in the measure's format, None (written –) where it has none or it
    is not finite (a diverged model's)."""
    return None if value is None or not math.isfinite(value) else measure.format(value)


def summary_table(summary):
    """The runs of a summary as a markdown table of probe.MEASURES, with where and on what they were measured; for
    runs of the sink lab's task, a second table of the sink's mechanism (probe.MECHANISM)."""
    v = summary["validation"]
    shown = [m for m in MEASURES if not m.mechanism]
    lines = [f"Measured by analyze.py on {places_text(summary['measured_on'])}: {summary['checkpoint']} of each "
             f"run, {v['batches']} batches x {v['batch_size']} validation windows ({v['source']}). Layer means."
             + "".join(f" Note: {note}." for note in [*v.get("data_notes", ()), *v.get("window_notes", ()),
                                                       *summary.get("run_notes", ())]), ""]
    lines += markdown_table(["run", "lr"] + [m.label for m in shown],
                            [[r["label"], f"{r['lr']:g}"] + [cell(m, r.get(m.key)) for m in shown]
                             for r in summary["runs"]])
    lab = [r for r in summary["runs"] if r.get("prev_attn_trigger") is not None]
    if lab:
        lines += ["", MECHANISM_NOTE, ""]
        lines += markdown_table(["run"] + [m.label for m in MECHANISM],
                                [[r["label"]] + [cell(m, r.get(m.key)) for m in MECHANISM] for r in lab])
    lines += ["", "Per layer: the sink's value and the channels of the massive activation. " + MECHANISM_ROWS_NOTE, ""]
    lines += markdown_table(*mechanism_rows(summary["runs"], per_layer=True))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------
# Published checkpoints (pretrained.py): the sink and the massive activations where they are known to exist

def analyze_pretrained(names, labels=None, out_dir="out-analysis", device="auto", text_path="", window=1024,
                       n_windows=8, bos=None, map_tokens=48):
    """Measure published checkpoints on the same text, each with its own tokenizer; writes summary.json, summary.md
    (the table beside the published reference values) and the plots to out_dir. Returns the summary."""
    labels = labels or names
    device = pick_device(device)
    ctx, _ = autocast_for(device, "auto" if device.startswith("cuda") else "float32")  # bf16 autocast on a GPU
    text_path = text_path or pretrained.SAMPLE_TEXT
    with open(text_path, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8")
    records, scores, maps = [], [], []
    for name, label in zip(names, labels):
        start = time.time()
        ckpt = pretrained.locate(name)  # its config and tokenizer: the weights come with load_model
        if window > ckpt.config.block_size:
            raise ValueError(f"--window={window} is longer than {name}'s {ckpt.config.block_size} positions")
        enc = pretrained.load_tokenizer(ckpt)
        use_bos = ckpt.bos if bos is None else bos
        if use_bos and enc.eot_token is None:
            raise ValueError(f"{name}'s tokenizer has no <|endoftext|> to start the windows with; use --bos=False")
        batches = pretrained.text_windows(enc, text, window, n_windows, enc.eot_token if use_bos else None)
        print(f"{label}: {ckpt.about}; loading its weights", flush=True)
        model = pretrained.load_model(ckpt, device)
        print(f"{label}: {model.num_params() / 1e6:.0f}M parameters; measuring {len(batches)} windows of {window} "
              f"tokens{' (BOS first)' if use_bos else ''} on {device_name(device)}", flush=True)
        layers, heads, windows_all, s, m, channels = measure(model, batches, device, ctx, map_tokens)
        loss = float(np.mean(windows_all["val_loss"]))
        records.append({
            "label": label, "name": name, "about": ckpt.about, "family": ckpt.family, "model": asdict(model.config),
            "params": model.num_params(), "windows": len(batches), "window": window, "bos": use_bos,
            "loss": loss, "ppl": math.exp(loss), **layer_means(layers, windows_all), "layers": layers, "heads": heads,
            "channels": channels,
            "sink_token_text": [None if t is None else enc.decode([t]) for t in layers["sink_token"]],
            "first_window_start": enc.decode(batches[0][0][0, :24].tolist()),
            "seconds": round(time.time() - start, 1)})
        scores.append(s)
        maps.append(m)
        r = records[-1]
        print(f"{label:>24}: loss {loss:.4f}, {describe(r)}; M-Act {r['act_ratio']:.0f}x the median "
              f"[{r['seconds']:.0f} s]", flush=True)
        del model
    digest = hashlib.sha256(raw).hexdigest()
    summary = {"device": device_name(device), "date": time.strftime("%Y-%m-%d"),
               "text": {"path": os.path.relpath(text_path, REPO),
                        "sha256": digest, "window": window, "windows": n_windows},
               "models": records,
               "literature": {family: pretrained.LITERATURE[family]
                              for family in dict.fromkeys(r["family"] for r in records)}}
    with result_set(out_dir, ANALYSIS_FILES) as staging:  # one set: no figure of an earlier analysis left beside it
        summary["plots"] = plot(records, scores, maps, [[] for _ in records], staging)
        write_text(os.path.join(staging, "summary.md"), pretrained_table(summary))
        write_json(os.path.join(staging, "summary.json"), finite_json(summary)[0])  # JSON has no NaN: null
    return summary


# GA Table 4's rows for the released models' variants: (label, lab/variants.py name)
GA_REFERENCE = (("baseline", "baseline"), ("G1 elementwise", "g1_elementwise"), ("G1 headwise", "g1_headwise"))


def pretrained_table(summary):
    """The measured checkpoints as a markdown table, then the published values to compare them with, each saying
    which model it comes from."""
    t = summary["text"]
    shown = [m for m in MEASURES if not m.mechanism and m.key not in ("val_loss", "loss_spikes")]  # no training run
    loss = MEASURE["val_loss"]
    lines = [f"Measured by analyze.py on {summary['device']}, {summary['date']}: {t['windows']} windows of "
             f"{t['window']} tokens of {t['path']} (sha256 {t['sha256'][:12]}), each model with its own tokenizer. "
             "Layer means; loss in nats per token; M-Act / median: how many times the median |h| M-Act is.", ""]
    lines += markdown_table(["model", "params", "loss"] + [m.label for m in shown] + ["M-Act / median"],
                            [[r["label"], f"{r['params'] / 1e6:.0f}M", cell(loss, r["loss"])] +
                             [cell(m, r.get(m.key)) for m in shown] +
                             [None if r.get("act_ratio") is None else f"{r['act_ratio']:.0f}"]
                             for r in summary["models"]])
    if "qwen3" in summary["literature"]:
        lines += ["", "Published, GA Table 4 (a 15B-parameter MoE, 2B active, trained on 400B tokens; not the models "
                  "above):", "", "| GA Table 4 row | F-Attn | M-Act | gate mean |", "| --- | --- | --- | --- |"]
        for label, name in GA_REFERENCE:
            row = VARIANTS[name].ga
            lines.append(f"| {label} | {row.f_attn:.3f} | {row.m_act} | "
                         f"{'–' if row.gate_mean is None else f'{row.gate_mean:.3f}'} |")
    lines += ["", "Per layer: the sink's value and the channels of the massive activation. " + MECHANISM_ROWS_NOTE, ""]
    lines += markdown_table(*mechanism_rows(summary["models"], per_layer=True))
    for family, note in summary["literature"].items():
        lines += ["", f"{family}: {note}"]
    return "\n".join(lines) + "\n"


def check_kind(given, runs, names):
    """Runs or published checkpoints, not both; and no key only the other kind reads (it would not be applied)."""
    if runs and names:
        fail("give --runs (checkpoints of train.py) or --pretrained (published ones), not both")
    unused = sorted(given & set(RUNS_ONLY if names else PRETRAINED_ONLY))
    if unused:
        kind, why = (("runs (--runs)", "published checkpoints are measured on --text's windows") if names else
                     ("published checkpoints (--pretrained)", "a run is measured on its own validation windows"))
        fail(f"--{unused[0]} is a key of {kind}: {why}; leave it out")


def main(argv=None):
    a, given = configure(AnalyzeConfig, sys.argv[1:] if argv is None else argv)
    runs, labels, names = list(a.runs), list(a.labels) or None, list(a.pretrained)
    check_kind(given, runs, names)
    if names:
        if labels and len(labels) != len(names):
            fail(f"--labels has {len(labels)} names for {len(names)} checkpoints; give one per checkpoint")
        if (twice := repeated_label(labels or names, names)):
            fail(twice)
        for name in ("window", "windows", "map_tokens"):
            if getattr(a, name) < 1:
                fail(f"--{name}={getattr(a, name)} must be at least 1")
        if a.text and not os.path.isfile(a.text):
            fail(f"--text={a.text}: no such file")
        made = writable_folder(a.out_dir)  # before the measurement, not after it
        with claimed(a.out_dir, made):
            try:
                summary = analyze_pretrained(names, labels, a.out_dir, a.device, a.text, a.window, a.windows, a.bos,
                                             a.map_tokens)
            except (ValueError, FileNotFoundError, RuntimeError, ImportError, UnicodeDecodeError) as e:
                fail(e)
        print(f"wrote {os.path.join(a.out_dir, 'summary.json')}, summary.md"
              + "".join(f", {p}" for p in summary["plots"]))
        return
    if not runs:
        fail("name the runs to analyze: --runs=out-baseline,out-g1 (their out_dirs), or published "
             "checkpoints: --pretrained=gpt2")
    if labels and len(labels) != len(runs):
        fail(f"--labels has {len(labels)} names for {len(runs)} runs; give one per run")
    known = labels or [os.path.basename(os.path.normpath(r)) for r in runs]
    if (twice := repeated_label(known, runs)):
        fail(twice)
    unknown = [p for p in a.plot_labels if p not in known]
    if unknown:
        fail(f"--plot_labels names {', '.join(unknown)}, not a run's label; the labels: {', '.join(known)}")
    for name in ("batches", "batch_size", "map_tokens"):
        if getattr(a, name) is not None and getattr(a, name) < 1:
            fail(f"--{name}={getattr(a, name)} must be at least 1")
    if (wrong := not_a_file_name(a.checkpoint)):
        fail(wrong)
    for run in runs:  # a run's checkpoint, or the measurement kept of it (runfolder.MEASURED)
        kept = os.path.isfile(os.path.join(run, MEASURED + ".json"))
        if os.path.isdir(os.path.join(run, a.checkpoint)) or os.path.isfile(run):
            fail(f"--runs names folders (train.py's out_dirs) and --checkpoint a file in each ({CHECKPOINT} or "
                 f"best.pt): {os.path.join(run, a.checkpoint)} is no checkpoint file")
        if not (os.path.isfile(os.path.join(run, a.checkpoint)) or kept):
            fail(no_checkpoint(run, a.checkpoint))
        check_data(os.path.join(run, a.checkpoint))
    made = writable_folder(a.out_dir)  # before the measurement, not after it
    with claimed(a.out_dir, made):
        try:
            summary = analyze(runs, labels, a.out_dir, a.device, a.batches, a.batch_size, a.map_tokens, a.checkpoint,
                              a.plot_labels or None)
        except (ValueError, FileNotFoundError) as e:  # a corrupt checkpoint, too little validation data: one line
            fail(e)
    print(f"wrote {os.path.join(a.out_dir, 'summary.json')}, summary.md, per_window.npz"
          + "".join(f", {p}" for p in summary["plots"]))
    if summary["problems"]:  # written, and said: a NaN model's summary is no result to build on
        fail("; ".join(summary["problems"]))


if __name__ == "__main__":
    run_main(main)  # Ctrl-C or a closed pipe: one line

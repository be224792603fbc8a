"""
The reproduction study's report, REPORT.md and its figures (what `python -m lab.repro report` writes), and the
tables of lab/evaluate.py's measurements that its summary.md and the report share. A library: no command line.

  provenance     finite_json (JSON without NaN), data_problem (the data a checkpoint was trained on: gone or changed),
                 log_start and kept_of_other_run (a measurement kept in a run folder another run has since reused),
                 load_windows and windows_id (the validation windows a run is measured on, and their fingerprint)
  the papers     PAPERS, the papers' numbers for each measure, and COMPARE, how a claim compares a variant with its
                 reference on it (paper_numbers, comparison)
  evaluations    PAPERS_SAY, headline, fmt_interval, table: lab/evaluate.py's numbers, in its summary.md and here
  numbers        over_seeds, fmt, fmt_ci, fmt_seeds, fmt_tokens, fmt_difference, status: how the report writes a
                 number (over seeds: one or two seeds' values as they are, a mean ± half-width from three on)
  REPORT.md      render_report, then one function per section (counts_section, claims_section ... paper_table),
                 and evaluate_section, the section on lab/evaluate.py's measurements; paper_effect: a claim's effect
                 in the paper, for stats.size_word
  figures        plot_headline, plot_trends, plot_sweep and what the report says of each figure (PLOT_TEXT); the
                 figures of single runs are lab/analyze.py's

The measurements, their names, formats and directions are probe.MEASURES'; what the papers report for them is
PAPERS, here.
"""

import hashlib
import json
import math
import os

import numpy as np

from data.bigram_backcopy.prepare import make_chain, window_ideal_loss
from data.shards import (GPT2_EOT_ID, bos_token, dataset_fingerprint, find_shards, get_tokenizer, prepare_command,
                         read_meta, val_batches)
from lab.stats import MIN_SEEDS, RULE, compare, mean_ci
from lab.variants import STABILITY_ROW, SWEEP, SWEPT, VARIANTS
from model import GPTConfig
from probe import MEASURE, MEASURES, MECHANISM, MECHANISM_NOTE, SINK_HEAD_THRESHOLD
from runfolder import CHECKPOINT, EVALUATED, LOG, atomic_write, describe_fingerprint_change, read_jsonl


# -----------------------------------------------------------------------------
# Tables, plots, and where results were measured (every lab script writes through these)

def lacks_run_settings(path, config, reader):
    """The one line lab.analyze, lab.outlier and lab.repro stop with where a checkpoint's training config lacks
    RUN_SETTINGS (not train.py's checkpoint, or older than its settings); '' where it has them."""
    if set(RUN_SETTINGS) <= config.keys():
        return ""
    return f"{path} lacks train.py's run settings {RUN_SETTINGS}: python -m {reader} reads train.py's checkpoints"


def places_text(places):
    """Where results were measured, {"<device>, <date>": number of runs}, in words: the one place, or each with its
    runs (runs measured in an earlier session keep the place they were measured in)."""
    if len(places) == 1:
        return next(iter(places))
    return "; ".join(f"{p} ({n} run{'s' * (n > 1)})" for p, n in places.items())


def repeated_label(labels, sources):
    """A line naming the first label that two models share (their tables' rows and plots' legends would be told apart
    by nothing), or None. sources: what each label names, in the same order."""
    first = {}
    for label, source in zip(labels, sources):
        if label in first:
            return (f"two models share the label {label!r} ({first[label]} and {source}): give --labels=..., one per "
                    "model, or measure each once")
        first[label] = source
    return None


def not_a_file_name(checkpoint):
    """A line for a --checkpoint that is a path, not the name of a file in each run's folder, or None: a path would
    measure another run's file under this run's name, and keep its record in this run's folder."""
    if os.path.basename(checkpoint) != checkpoint or checkpoint in ("", ".", ".."):
        return (f"--checkpoint={checkpoint}: the name of a file in each run's folder ({CHECKPOINT} or best.pt), not a "
                "path; to measure another run's checkpoint, name its folder in --runs")
    return None


def markdown_table(header, rows):
    """A markdown table's lines: the header, the rule, one line a row (None written as –)."""
    return ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"] + \
        ["| " + " | ".join("–" if c is None else str(c) for c in row) + " |" for row in rows]


def pyplot():
    """matplotlib.pyplot drawing into files (the Agg backend), or None, after a note, where matplotlib is missing
    (pip install -r requirements.txt brings it): the scripts then write their numbers and skip the plots."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is not installed, so no plots (pip install matplotlib); the numbers are written")
        return None
    return plt


def save_figure(fig, path, dpi=120, bbox_inches=None):
    """Write a figure to path, atomically (runfolder.atomic_write), and free it; returns the file's name.
    bbox_inches="tight": the image grows to hold what lies outside the panels (a legend beside them)."""
    import matplotlib.pyplot as plt
    kind = os.path.splitext(path)[1][1:] or "png"  # a file object has no name to tell the format by
    try:
        atomic_write(path, lambda f: fig.savefig(f, dpi=dpi, format=kind, bbox_inches=bbox_inches))
    finally:
        plt.close(fig)
    return os.path.basename(path)


def variant_of(label):
    """The variant a run's label names: lab.repro's labels are <variant>/seed<N>; any other label is its own."""
    head, _, seed = label.rpartition("/seed")
    return head if head and seed.isdigit() else label


LINE_STYLES = ("-", "--", ":", "-.")


def distinct_styles(n):
    """n (colour, line style) pairs, each of the first 40 unlike the others: tab10's ten hues first, solid lines;
    then each hue's lighter shade (tab20), dashed; then dotted, dash-dotted. matplotlib's default cycle repeats its
    ten colours past ten lines, and tab20 in order puts a hue's dark and light shades side by side."""
    import matplotlib
    tab20 = matplotlib.colormaps["tab20"]
    return [(tab20(2 * (i % 10) + (i // 10) % 2), LINE_STYLES[(i // 10) % len(LINE_STYLES)]) for i in range(n)]


def legend_beside(fig, axes, title=None, extra=()):
    """One legend for the figure, right of its panels (never over the data), of each label drawn in any of axes once,
    in the order first drawn, then extra's (handle, label) pairs (a line style's meaning); save the figure with
    bbox_inches="tight" so that it is in the image. None if no label."""
    handles = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    for handle, label in extra:
        handles.setdefault(label, handle)
    if not handles:
        return None
    return fig.legend(list(handles.values()), list(handles), loc="center left", bbox_to_anchor=(1.0, 0.5),
                      fontsize=8, title=title, title_fontsize=8, ncol=1 + (len(handles) - 1) // 30)


# -----------------------------------------------------------------------------
# Where a result comes from: the run and the data it measures (lab/analyze.py and lab/evaluate.py check both)

def finite_json(value):
    """(value with every non-finite number replaced by None, how many were): JSON has no NaN or infinity, and a file
    holding them is not valid JSON. NumPy numbers come back as Python's."""
    replaced = 0

    def clean(v):
        nonlocal replaced
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        if isinstance(v, (float, np.floating)):
            if math.isfinite(v):
                return float(v)
            replaced += 1
            return None
        return v.item() if isinstance(v, np.generic) else v
    return clean(value), replaced


def load_windows(windows):
    """The validation batches [(x, y), ...] that `windows` (eval_windows' dict) describes."""
    bos = bos_token(windows["data_dir"]) if windows["bos"] else None
    return val_batches(windows["data_dir"], windows["block_size"], windows["batch_size"], windows["batches"], bos=bos)


def window_set(windows):
    """What makes two runs' validation windows alike (eval_windows' dict): their length, their data, a BOS first."""
    return windows["block_size"], windows["data_dir"], windows["bos"]


def windows_id(batches):
    """A fingerprint of the windows' tokens: two measurements compare only when they were taken on the same windows
    (the same data, cut the same way), whatever machine or folder the data sat in."""
    digest = hashlib.sha1()
    for x, _ in batches:
        digest.update(x.long().numpy().tobytes())  # int64, as it always was
    return digest.hexdigest()[:16]


def data_problem(checkpoint, data_dir, path):
    """'' when data_dir holds the data the checkpoint at path was trained on, else one line saying what is wrong
    (the data is not there, or has changed since) and what to do. train.py records data.shards.dataset_fingerprint
    in checkpoint["data_fingerprint"]; an older checkpoint records none, and only the data's presence is checked."""
    if not find_shards(data_dir, "val"):  # a ValueError for a dataset whose preparation did not finish
        name = checkpoint.get("config", {}).get("dataset") or os.path.basename(os.path.normpath(data_dir))
        where = "which is not here (moved? put it back there)" if not os.path.isdir(data_dir) else \
            "which holds no validation shards here"
        return (f"{path} was trained on the data in {data_dir}, {where}: prepare it "
                f"({prepare_command(data_dir, name)}), then measure again")
    recorded = checkpoint.get("data_fingerprint")
    if not isinstance(recorded, dict):
        return ""
    current = dataset_fingerprint(data_dir)
    changed = describe_fingerprint_change(recorded, current)
    if not changed:
        return ""
    return (f"{path} was trained on other data than {data_dir} holds now: its {changed} changed since (fingerprint "
            f"recorded in the checkpoint: train {recorded.get('train')}, val {recorded.get('val')}; on disk: train "
            f"{current['train']}, val {current['val']}), as when a dataset is prepared again in place. Measuring it "
            "there would measure the model on another task: prepare the data it was trained on again (the same "
            "source and settings give the same fingerprint), or train the run again on this data")


def log_start(run_dir):
    """The first record of a run's log.jsonl, its iter and validation loss (None without one): what a measurement
    kept in the folder records of the run it measured. A resumed run keeps it; a new run in the folder starts
    another."""
    log = read_jsonl(os.path.join(run_dir, LOG))
    return {"iter": log[0].get("iter"), "val_loss": log[0].get("val_loss")} if log else None


def kept_of_other_run(run_dir, kept, name):
    """Why the measurement `name` kept in run_dir (kept: its record, with the checkpoint's "iter" or "iter_num" and,
    where recorded, its "run_id", logged validation loss "val_loss_logged" and the log's first record "log_start") is
    not of the run whose log.jsonl is there now, or '' when nothing says so. A folder reused for a new run
    (--overwrite=True) keeps the old run's measurements until the new run is measured: they must never stand for it."""
    log_path = os.path.join(run_dir, LOG)
    if not os.path.isfile(log_path):
        return ""  # the measurement is all the folder holds of a run
    log = read_jsonl(log_path)
    it = kept.get("iter", kept.get("iter_num"))
    ids = {r["run_id"] for r in log if r.get("run_id")}
    if kept.get("run_id") and ids:
        same = kept["run_id"] in ids
    else:  # the measured state in the log, or else the log starts as the measured run's did (cut short since)
        loss = kept.get("val_loss_logged")
        same = any(r.get("iter") == it and (loss is None or r.get("val_loss") == loss) for r in log) or \
            bool(kept.get("log_start")) and kept["log_start"] == log_start(run_dir)
    if same:
        return ""
    return (f"the measurement kept in {run_dir} ({name}, of the state at iter {it}"
            f"{', run ' + kept['run_id'] if kept.get('run_id') else ''}) is not of the run its {LOG} records: it is "
            "an earlier run's, left there when the folder was reused")


# -----------------------------------------------------------------------------
# The report's words

# every file lab/analyze.py writes in its out_dir, as one set (runfolder.result_set); a report copies its figures
ANALYSIS_FILES = ("summary.json", "summary.md", "per_window.npz", "layers.png", "gate_hist.png", "attn_maps.png",
                  "curves.png", "emergence.png")
# what the lab reads from a checkpoint's training config (train.py writes all of them; lacks_run_settings)
RUN_SETTINGS = ("dataset", "batch_size", "eval_iters", "gradient_accumulation_steps", "learning_rate", "max_iters")
EVALUATE_DIR = "evaluate"  # lab/evaluate.py's output for the report, under the report's folder (lab.repro evaluate)

# What the papers report for a measure of probe.MEASURES, by its key: (paper, variants.Row field, column name,
# format) per paper that gives it, in the order paper_pair tries them; a measure not here has no paper's number
PAPERS = {
    "val_loss": (("ga", "ppl", "GA PPL", ".3f"), ("gn", "loss", "GN loss", ".3f")),
    "first_token_attn": (("ga", "f_attn", "GA F-Attn", ".3f"),),
    "max_act": (("ga", "m_act", "GA M-Act", ".0f"),),
    "peak_act": (("gn", "max_act", "GN max act", ".0f"),),
    "gate_mean": (("ga", "gate_mean", "GA gate mean", ".3f"),),
}
# How a claim compares a variant with its reference on a measure, by its key: "diff", a difference in the measure's
# units (a loss in nats; a gate score, a share in [0, 1]); any other measure by "ratio" (a scale: activations, F-Attn)
COMPARE = {"val_loss": "diff", "gate_mean": "diff"}


def paper_numbers(key):
    """The papers' numbers for the measure of this key (PAPERS), none where no paper gives one."""
    return PAPERS.get(key, ())


def comparison(key):
    """How a claim compares a variant with its reference on the measure of this key: "ratio" or "diff" (COMPARE)."""
    return COMPARE.get(key, "ratio")


# -----------------------------------------------------------------------------
# lab/evaluate.py's numbers, in its summary.md and in the report

PAPERS_SAY = (
    "What the papers report, at scales far beyond this one. Quantization: GN §5.2 rounds its MoE models (7B and 24B) "
    "to W4A4; the baseline, with its massive activations, loses far more than GatedNorm, which loses the least "
    "(unaided, better than the baseline with SmoothQuant). Length: GA Table 5 extends its models from 32k to 128k "
    "tokens with YaRN; all lose some accuracy within 32k, the gated ones less, and past 32k the gated model scores far"
    " higher on RULER (66.6 and 58.8 against the baseline's 37.5 and 31.7, at 64k and 128k); GA suggests, as one "
    "possible explanation, that the baseline's sink, tuned to the trained RoPE, does not adapt to the rescaled one. "
    "Streaming: StreamingLLM (Xiao et al. 2024) finds that a sliding window fails once the first tokens leave it and "
    "works again when 4 are kept; neither paper measures whether a sink-free gated model needs no such tokens: the "
    "streaming rows here are this project's measurement of it.")


def headline(r):
    """One record's numbers that a row of a summary table shows, {column: value}: each quantization setting's loss
    increase; per RoPE scaling, the loss of the last position bucket at the longest length, and its increase over
    the same windows' [0, T) as trained where the record has it (for ntk and yarn, [0, T)'s increase too: what the
    scaling costs inside the trained length); the loss increase of the largest sliding window with each number of
    first positions kept."""
    out = {}
    for s in r.get("quant", {}).get("settings", []):
        out[f"{s['setting'].upper()} Δ"] = s["increase"]["mean"]
    for scaling, lengths in r.get("length", {}).items():
        first, last = lengths[-1]["buckets"][0], lengths[-1]["buckets"][-1]
        if scaling != "none" and "increase" in first:  # (as trained it is 0: causal)
            out[f"{scaling} {lengths[-1]['multiple']}x [0, {first['to']}) Δ"] = first["increase"]["mean"]
        out[f"{scaling} {lengths[-1]['multiple']}x [{last['from']}, {last['to']})"] = last["mean"]
        if "increase" in last:  # records kept before the paired increase was measured have only the level
            out[f"{scaling} {lengths[-1]['multiple']}x [{last['from']}, {last['to']}) Δ"] = last["increase"]["mean"]
    if r.get("stream"):
        row = r["stream"][-1]
        for keep in row["keep"]:
            out[f"w={row['window']} keep {keep['k']} Δ"] = keep["increase"]["mean"]
    return out


def fmt_interval(v, spec=".3f", sign=False):
    """A mean over windows ± half its interval ({"mean", "lo", "hi"})."""
    s = format(v["mean"], ("+" if sign else "") + spec)
    return s if v["lo"] is None else f"{s} ± {(v['hi'] - v['lo']) / 2:{spec}}"


def table(header, rows):
    """A markdown table's lines, then a blank line."""
    return markdown_table(header, rows) + [""]


# -----------------------------------------------------------------------------
# Numbers as the report writes them

SEEDS_NOTE = (f"over seeds, with {MIN_SEEDS} or more: the mean ± the half-width of its 95% t-interval, which with "
              "few seeds may pass a measure's bounds, below 0 or a share above 1; with fewer: each seed's value")


def over_seeds(values):
    """A metric over a variant's seeds: {"mean", "lo", "hi", "n", "values"} (lo/hi: the mean's 95% t-interval, None
    for one seed), or None when a run lacks it (no gate)."""
    if not values or any(x is None for x in values):
        return None
    mean, lo, hi = mean_ci(values)
    return {"mean": mean, "lo": lo, "hi": hi, "n": len(values), "values": [float(x) for x in values]}


def fmt(x, spec):
    return "–" if x is None else format(x, spec)


def fmt_ci(m, spec):
    """over_seeds' numbers as SEEDS_NOTE says: from MIN_SEEDS seeds on, the mean ± the half-width of its 95%
    t-interval (a count's spec, "g", then gives three significant digits: a mean over seeds is no count); with fewer,
    each seed's value ('x (1 seed)', 'x, y'), which says more than a mean of two."""
    if m is None:
        return "–"
    if m["n"] < MIN_SEEDS:
        return fmt_seeds(m["values"], spec)
    spec = ".3g" if spec == "g" else spec
    return f"{m['mean']:{spec}} ± {(m['hi'] - m['lo']) / 2:{spec}}"


def some_seeds(values, spec):
    """fmt_ci over the seeds that have a value (None: a record kept from before the measure), saying how many of
    the variant's seeds those are when not all."""
    have = [x for x in values if x is not None]
    if len(have) == len(values) or not have:
        return fmt_ci(over_seeds(values), spec)
    shown = fmt_ci(over_seeds(have), spec) if len(have) >= MIN_SEEDS else ", ".join(format(x, spec) for x in have)
    return f"{shown} ({len(have)} of {len(values)} seeds)"


def fmt_seeds(values, spec):
    """Each seed's value: 'x (1 seed)', 'x, y'."""
    text = ", ".join(format(x, spec) for x in values)
    return f"{text} (1 seed)" if len(values) == 1 else text


def fmt_tokens(n):
    """12,288 / 1.23M / 105M / 2.1B: readable at every scale."""
    if n < 1e6:
        return f"{n:,}"
    if n < 999.5e6:
        return f"{n / 1e6:.3g}M"
    return f"{n / 1e9:.3g}B"


def fmt_difference(c, stat):
    """A claim's estimate with Welch's interval and its degrees of freedom: a ratio (×) or a difference (signed), as
    comparison says; without an interval (one seed on a side), the estimate alone."""
    def fmt(x):  # a ratio below 0.1 to two significant digits: an interval's 0.0047 must not read as 0.00; a bound
        # that rounds onto no change (0.9954 as 1.00) gets the digits that keep it off it, as the verdict reads it
        if stat == "ratio" and abs(x) < 0.1:
            return f"{x:#.2g}"
        null, digits = (1.0, 2) if stat == "ratio" else (0.0, 4)
        sign = "" if stat == "ratio" else "+"
        while x != null and float(f"{x:.{digits}f}") == null and digits < 15:
            digits += 1
        return f"{x:{sign}.{digits}f}"
    estimate = ("×" if stat == "ratio" else "") + fmt(c["estimate"])
    if c["lo"] is None:
        return f"{estimate} (no interval: one seed)"
    return f"{estimate} [{fmt(c['lo'])}, {fmt(c['hi'])}], df {c['df']:.1f}"


def status(rs):
    done = sum(not stopped_early(r) for r in rs)
    words = [f"{done}/{len(rs)} finished"]
    failed = [r for r in rs if r["exit_code"]]
    if failed:
        words.append(f"{len(failed)} exited non-zero")
    skipped = sum(r["nonfinite_steps"] or 0 for r in rs)
    if skipped:
        words.append(f"{skipped} non-finite steps skipped")
    return ", ".join(words)


# -----------------------------------------------------------------------------
# REPORT.md

def seeds_per_variant(counts):
    """The variants' numbers of seeds in words: '1 seed', '3 seeds', '1 to 3 seeds' (counts: sorted, each once)."""
    low, high = counts[0], counts[-1]
    return f"{low} seed" if high == 1 else f"{high} seeds" if low == high else f"{low} to {high} seeds"


def render_report(result, root, tiny, commands, report_command, plots, analyzed, title, every_command=()):
    """REPORT.md, but for the section on lab/evaluate.py (evaluate_section): result is the study's summary.json
    (`python -m lab.repro report`), commands the last command recorded for each (variant, seed), every_command all of
    commands.jsonl (a resumed run's earlier parts too), plots the figures' file names, analyzed lab/analyze.py's
    records of the runs (their eval windows and per-layer numbers)."""
    records, variants = result["runs"], result["variants"]
    first, val = records[0], result["validation"]
    m, windows = first["model"], analyzed[0]["eval_windows"]
    seeds = sorted({len(v["seeds"]) for v in variants.values()})
    lines = [f"# {title}" + (": TINY CPU SMOKE TEST" if tiny else ""), ""]
    if tiny:
        lines += ["**This is a smoke test of the pipeline (`python -m lab.repro` with `--tiny`: a tiny model trained "
                  "for a few dozen steps on a CPU). It concludes nothing about the papers' claims; the tables below "
                  "are here only so that the pipeline can be checked.**", ""]
    lines += [
        f"{measured_on(result)} Runs: `{root}/<variant>/seed<N>/`, "
        f"{seeds_per_variant(seeds)} per variant, each {m['n_layer']} layers, {m['n_embd']} wide, "
        f"{m['n_head']} heads, T={m['block_size']}, qk_norm={m.get('qk_norm')}, "
        f"{fmt_tokens(first['tokens'])} training tokens. Every measurement below comes from the runs' `ckpt.pt` (or, "
        f"where a run's checkpoint is gone, from what lab/analyze.py measured on it then, kept beside its log), on "
        f"the same {val['batches'] * val['batch_size']:,} validation windows ({val['batches']} x {val['batch_size']}, "
        f"{fmt_tokens(val['batches'] * val['batch_size'] * windows['block_size'])} tokens"
        f"{', each starting with <|endoftext|>' if windows['bos'] else ''}; {val['source']})."
        + "".join(f" Note: {note}." for note in (*val.get("data_notes", ()), *val.get("window_notes", ())))
        + (f" Left out, not finished (the same `train` command continues them): {'; '.join(result['unfinished'])}."
           if result.get("unfinished") else "")
        + (f" Left out, nothing of them to report: {'; '.join(result['unusable'])}."
           if result.get("unusable") else "")]
    by = {}
    for r in records:
        by.setdefault(r["variant"], []).append(r)
    lines += counts_section(result.get("sink_counts"))
    lines += claims_section(result["claims"])
    lines += sweep_section(result["sweep"])
    elsewhere = {r["variant"] for r, a in zip(records, analyzed)  # measured on other windows: ranks nothing
                 if window_set(a["eval_windows"]) != window_set(windows)}
    lines += measured_section(by, variants, elsewhere)
    lines += table4_section(by, variants)
    lines += mechanism_section(records, variants, windows)
    lines += sink_parts_section(records, analyzed)
    lines += sink_section(records, analyzed)
    if not tiny:
        lines += paper_table(by)
    lines += ["", "## Commands run", "",
              f"The last command recorded for each run in `{root}/commands.jsonl` (written by "
              "`python -m lab.repro train`):", ""]
    for r in records:
        c = commands.get((r["variant"], r["seed"]))
        lines.append(f"- {r['variant']} seed {r['seed']}: " +
                     (f"exit code {c['exit_code']} after {c['seconds']:.0f} s on {c['date']}: `{c['command']}`" if c
                      else "not recorded in commands.jsonl (run by hand?)"))
    lines += training_time(records, every_command)
    lines += ["", f"This report: `{report_command}`", ""]
    if plots:
        lines += ["## Plots", ""] + [f"{PLOT_TEXT.get(p, p)}\n\n![{p}]({p})\n" for p in plots]
    return "\n".join(lines)


def training_time(records, every_command):
    """The device time the reported runs' training took, from every command recorded for them (a resumed run's
    earlier parts included): runs trained K side by side shared the device, so each counts 1/K of its time."""
    runs = {(r["variant"], r["seed"]) for r in records}
    ran = [c for c in every_command if (c["variant"], c.get("seed")) in runs and "seconds" in c]
    if not ran:
        return []
    seconds = sum(c["seconds"] / c.get("parallel", 1) for c in ran)
    shared = any(c.get("parallel", 1) > 1 for c in ran)
    share = ", runs side by side counted at their share" if shared else ""
    return ["", f"Training time: {seconds / 60:.1f} minutes of the device in all ({seconds:,.0f} s over "
                f"{len(ran)} command{'s' * (len(ran) > 1)}{share}), not counting data preparation, "
                "`python -m lab.repro evaluate` or this report."]


def measured_on(result):
    """Where and when the runs were measured: 'Device: D. Date: Y.' when all at once, else each place with its runs."""
    places = result.get("measured_on") or {f"{result['device']}, {result['date']}": len(result["runs"])}
    if len(places) == 1:
        device, _, date = next(iter(places)).rpartition(", ")
        return f"Device: {device}. Date: {date}."
    return f"Measured on {places_text(places)}."


def counts_section(counts):
    """The seeds that grew a sink head, per variant (k of n, the rate's exact interval), and the claims decided on
    those counts (repro.sink_counts), or nothing when the study counts none."""
    if not counts:
        return []
    rates = counts["variants"]
    lines = ["", "## Seeds that grew a sink head", "",
             f"{counts['rule']} A run has a sink head when some head, in some layer, puts more than "
             f"{counts['threshold']} of its attention on the first token (its F-Attn, averaged over the validation "
             "windows). Whether a variant grows a sink is decided here, on these counts; the claims on F-Attn in the "
             "next section say how much attention the sink takes, and their verdicts do not decide it.", "",
             "| variant | seeds with a sink head | rate [95% CI, Clopper-Pearson] |", "| --- | --- | --- |"]
    lines += [f"| {v} | {r['k']} of {r['n']}{uncounted(r['trained'], r['n'], r['stopped'])} | {r['k'] / r['n']:.2f} "
              f"[{r['lo']:.2f}, {r['hi']:.2f}] |" for v, r in rates.items()]
    lines += ["", "| claim | reference | variant | Fisher's p, the paper's direction | p, the opposite | verdict |",
              "| --- | --- | --- | --- | --- | --- |"]
    for c in counts["claims"]:
        sides = [f"{x}: {rates[x]['k']} of {rates[x]['n']}" if x in rates else f"{x}: –"
                 for x in (c["reference"], c["variant"])]
        ps = [f"{c[key]:.3g}" if key in c else "–" for key in ("p", "p_opposite")]
        verdict = f"**{c['verdict']}**" if "p" in c else c["verdict"]
        lines.append(f"| {c['claim']} | {sides[0]} | {sides[1]} | {ps[0]} | {ps[1]} | {verdict} |")
    return lines


def uncounted(trained, counted, stopped):
    """What a count of sink heads (grew_sink_head) leaves out of a variant's trained runs: the stopped ones (stopped
    early) and the rest of those not counted (their sink heads not measured: an older probe's runs)."""
    unmeasured = trained - counted - stopped
    why = [f"{stopped} stopped early"] * bool(stopped) + [f"{unmeasured} not measured" if stopped else "not measured"
                                                          ] * bool(unmeasured)
    return f" ({trained - counted} more trained, {', '.join(why)})" if why else ""


def claims_section(claims):
    """Each claim: our numbers, the estimate with its interval, the verdict, whether it points the paper's way and
    is the paper's size, and the papers' numbers."""
    lines = ["", "## The papers' claims, decided by rule", "", RULE,
             "The paper's direction is the one it reports. Ours: each side's per-seed values where it has fewer than "
             f"{MIN_SEEDS} seeds, else its mean over seeds (geometric for a ratio, the mean the ratio compares); "
             "seeds: the reference's / the variant's. A claim that no paper makes, on a measure of this project's "
             "own, says so. The verdicts are computed by `python -m lab.repro report` (lab/stats.py), never written "
             "by hand.", "",
             "| claim | measure | ours: reference → variant | estimate [95% CI] | seeds | verdict | direction | "
             "size against the paper's | paper | paper source |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in claims:
        measure = MEASURE[c["measure"]]
        fixed = not isinstance(c["reference"], str)
        ref = f"the fixed value {c['reference']:g}" if fixed else c["reference"]
        if "estimate" not in c:
            lines.append(f"| {c['claim']} | {measure.label} | {ref} → {c['variant']} | – | – | {c['verdict']} | "
                         "– | – | – | – |")
            continue
        sides = [measure.format(c["ref_mean"]) if fixed else fmt_side(c["ref_seeds"], c["ref_mean"], measure.spec),
                 fmt_side(c["var_seeds"], c["var_mean"], measure.spec)]
        ours = f"{ref} → {c['variant']}: {sides[0]} → {sides[1]}"
        seeds = f"{c['n_seeds_var']}" if fixed else f"{c['n_seeds_ref']} / {c['n_seeds_var']}"
        if c.get("left_out"):  # seeds without this measure, whose other seeds have it (older_sink_share)
            seeds += " (left out, measured by an older probe: " + \
                ", ".join(f"{n} of {x}" for x, n in c["left_out"].items() if n) + ")"
        theirs, source = ("–", "–") if fixed else paper_text(c["reference"], c["variant"],
                                                             paper_numbers(c["measure"]), comparison(c["measure"]))
        estimate = fmt_difference(c, comparison(c["measure"]))
        lines.append(f"| {c['claim']} | {measure.label} | {ours} | {estimate} | {seeds} | **{c['verdict']}** | "
                     f"{c['pointing']} | {c['size'] or '–'} | {theirs} | {source} |")
    return lines


def fmt_side(values, mean, spec):
    """One side of a claim: its per-seed values in parentheses below MIN_SEEDS seeds, else the mean given."""
    if len(values) < MIN_SEEDS:
        return "(" + ", ".join(format(x, spec) for x in values) + ")"
    return format(mean, spec)


def best_variants(variants, measure):
    """The variants whose mean is the best of the column by measure.better (several on a tie), among those with
    MIN_SEEDS seeds or more (a mean of fewer ranks nothing); none when the measure has no better direction or every
    such variant has the same mean."""
    means = {v: x[measure.key]["mean"] for v, x in variants.items()
             if x[measure.key] is not None and x[measure.key]["n"] >= MIN_SEEDS}
    if measure.better is None or len(set(means.values())) < 2:
        return set()
    best = (min if measure.better == "lower" else max)(means.values())
    return {v for v, mean in means.items() if mean == best}


def words(items):
    """'a', 'a and b', 'a, b and c'."""
    return " and ".join(filter(None, [", ".join(items[:-1]), items[-1]]))


def measured_section(by, variants, elsewhere=()):
    """Every measure of every variant (mean over seeds with its interval), the best of each column in bold among the
    variants measured on the first run's windows (elsewhere: those measured on other windows, which rank nothing)
    and all of whose seeds ran to the end (a seed that stopped early holds an earlier state's values)."""
    shown = [m for m in MEASURES if not m.mechanism]
    stopped = sorted(v for v, rs in by.items() if any(map(stopped_early, rs)))
    ranked = {v: x for v, x in variants.items() if v not in elsewhere and v not in stopped}
    best = {m.key: best_variants(ranked, m) for m in shown}
    # one head a run: its sink heads is a yes/no, counted over seeds, never a mean
    counted = {v: grew_sink_head(rs) for v, rs in by.items() if variants[v]["sink_heads"] is not None and one_head(rs)}
    def cell(v, m):
        if m.key == "sink_heads" and v in counted:
            grew, rs = counted[v], by[v]
            text = f"{sum(grew)} of {len(grew)}{uncounted(len(rs), len(grew), sum(map(stopped_early, rs)))}"
        else:
            text = fmt_ci(variants[v][m.key], m.spec)
        text = f"**{text}**" if v in best[m.key] else text
        older = older_values(by[v], m.key)
        if not older:
            return text
        return ("" if variants[v][m.key] is None else text + "; ") + "older probe: " + fmt_seeds(older, m.spec)
    rows = [[v, len(rs), f"{rs[0]['lr']:g}", status(rs)] + [cell(v, m) for m in shown] for v, rs in by.items()]
    directions = {}  # better -> the labels of the measures with that direction
    for m in shown:
        directions.setdefault(m.better, []).append(m.label)
    legend = f"In bold: the best mean of each column among the variants with {MIN_SEEDS} seeds or more (a mean, " \
        "not a test: the claims are decided by the rule)" + \
        (f", {words(sorted(elsewhere))} left out: measured on other windows" if elsewhere else "") + \
        (f", {words(stopped)} left out: a seed stopped early, its values an earlier state's" if stopped else "") + \
        ". " + "; ".join(
        f"{better.capitalize()} is better for {words(labels)}" for better, labels in directions.items() if better) + \
        " (the direction the papers count as an improvement)" + \
        (f"; {words(directions[None])}: neither" if None in directions else "") + "." + \
        (" Sink heads of a variant whose model has one attention head: how many of its runs grew a sink head "
         "(a yes/no a run, counted)." if counted else "")
    return ["", "## Measured", "",
            f"Per variant, {SEEDS_NOTE}. Val loss in nats. F-Attn: attention on the "
            "first token; sink share (this project's measure, not a paper's): the largest share of attention one key "
            "in the window's first three eighths receives from its second half (probe.sink_keys); sink heads: the "
            f"share of heads whose F-Attn exceeds {SINK_HEAD_THRESHOLD} (Gu et al. 2025); "
            "M-Act: max |h| of each layer's output in a window; all averaged over layers (GA §4.3) and windows. Peak "
            "act: the largest |h| of any layer in a window (GN's residual-stream maximum). Gate: mean score and share "
            "of scores below 0.1 (a SiLU or identity gate's negative scores count as below; gate_hist.png clips them "
            "to 0). Loss spikes: per run (probe.count_spike). Each run's own values: summary.md, beside "
            "this report." + old_sink_share(by), ""] + \
        markdown_table(["variant", "seeds", "lr", "runs"] + [m.label for m in shown], rows) + ["", legend]


def older_sink_share(run):
    """Whether the probe measured this run (a record with its per-layer values) before 2026-11-27, when the sink
    share's candidate keys were the whole first half: its top key was then often T/2 - 1, beside the first late
    query, so that sink share measures recency, not a sink. Such a record's layers have no value norm ratio, added
    that day (a record without per-layer values says nothing of its probe)."""
    return "layers" in run and "value_norm_ratio" not in (run["layers"] or {})


def over_variant(runs, key):
    """over_seeds of one measure over a variant's runs, never pooling two definitions: the sink share from the runs
    the current probe measured only (older_sink_share's runs are shown apart, by older_values)."""
    return over_seeds([r[key] for r in runs if not (key == "sink_share" and older_sink_share(r))])


def older_values(runs, key):
    """The sink shares of a variant's runs measured by the probe's older definition (none for any other measure)."""
    return [r[key] for r in runs if key == "sink_share" and older_sink_share(r) and r.get(key) is not None]


def old_sink_share(by):
    """A warning where some runs were measured by the probe's older sink share (older_sink_share)."""
    old = [f"{v}/seed{r.get('seed')}" for v, rs in by.items() for r in rs if older_sink_share(r)]
    if not old:
        return ""
    return (f" {len(old)} of the runs ({old[0]}{', ...' if len(old) > 1 else ''}) were measured before 2026-11-27, "
            "when the sink share's candidate keys were the whole first half: its top key was then often T/2 - 1, "
            "beside the first late query, so their sink share measures recency, not a sink. Their sink share is "
            "shown apart (\"older probe\"), never in one mean with the others, and no claim uses it.")


def sweep_section(sweep):
    if not sweep:
        return []
    a, b = SWEPT
    row = STABILITY_ROW
    loss, act = MEASURE["val_loss"], MEASURE["max_act"]
    lines = ["", "## Stability: the learning-rate sweep", "",
             f"{row} ({row.note}). Here: {a} and {b} at each learning rate (min_lr = lr/10), the difference of their "
             f"final val losses ({b} − {a}, nats) decided by the same rule: the "
             "paper's direction is negative (the gate does better), and it matters most at the highest rate.", "",
             f"| lr | {a} {loss.label} | {b} {loss.label} | {b} − {a} [95% CI] | verdict | {a} {act.label} | "
             f"{b} {act.label} | {a} spikes | {b} spikes | seeds finished ({a} / {b}) |", "| --- " * 10 + "|"]
    for r in sweep:
        x, y, d = r[a], r[b], r.get("difference")
        lines.append(f"| {r['lr']:g} | {fmt_ci(x and x['val_loss'], loss.spec)} | "
                     f"{fmt_ci(y and y['val_loss'], loss.spec)} | "
                     f"{fmt_difference(d, comparison(loss.key)) if d else '–'} | "
                     f"{d['verdict'] if d else 'not measured'} | "
                     f"{fmt_ci(x and x['max_act'], act.spec)} | {fmt_ci(y and y['max_act'], act.spec)} | "
                     f"{spikes(x)} | {spikes(y)} | {' / '.join(finished(s) for s in (x, y))} |")
    if len(sweep) == 1:
        lines += ["", "Only this rate is trained so far, so no sweep is drawn: `python -m lab.repro train sweep`, with "
                  "the keys the other runs were trained with, trains the rest."]
    return lines


def finished(row):
    """How many of a sweep row's seeds ran to max_iters (a run that diverged stops early): 'k/n', '–'."""
    return f"{sum(row['finished'])}/{len(row['finished'])}" if row else "–"


def spikes(row):
    """Each seed's loss spikes: '0, 2, 1'."""
    return ", ".join(fmt(n, "d") for n in row["loss_spikes"]) if row else "–"


def one_head(runs):
    """Whether every run's model has a single attention head (1 layer x 1 head, the sink lab's): its sink heads, a
    share of heads, is then 0 or 1, a yes/no."""
    return all(r.get("model") and r["model"]["n_layer"] * r["model"]["n_head"] == 1 for r in runs)


def stopped_early(run):
    """Whether a run stopped before its max_iters (train.py stops a run that diverges): its values are then those of
    an earlier state than the other seeds'."""
    return run["iter"] < run["max_iters"]


def grew_sink_head(runs):
    """Whether each run grew a sink head (a head's F-Attn above probe.SINK_HEAD_THRESHOLD): a yes/no per run, to be
    counted over seeds. A run whose sink heads were not measured, or that stopped early (whether a sink had formed by
    its end is not known), is left out, not counted as a no (uncounted says which)."""
    return [r["sink_heads"] > 0 for r in runs if r.get("sink_heads") is not None and not stopped_early(r)]


def table4_section(by, variants):
    """GA Table 4's sink column beside ours: each variant's F-Attn (mean over seeds, 95% CI), how many of its seeds
    grew a sink head, and whether it sits on the same side of the baseline as in the paper."""
    f_attn = MEASURE["first_token_attn"]
    if "baseline" not in by or variants["baseline"][f_attn.key] is None:
        return []
    theirs_base = VARIANTS["baseline"].ga.f_attn
    rows = []
    for v, rs in by.items():
        row, ours = VARIANTS[v].ga, variants[v][f_attn.key]
        if not (row and row.f_attn is not None and ours):
            continue
        grew = grew_sink_head(rs)
        sinks = f"{sum(grew)} of {len(grew)}{uncounted(len(rs), len(grew), sum(map(stopped_early, rs)))}"
        base = variants["baseline"][f_attn.key]
        c = compare(base["values"], ours["values"], comparison(f_attn.key))  # the rule's interval, over seeds
        stopped = [sum(map(stopped_early, by[x])) for x in ("baseline", v)]
        if v == "baseline":
            side = "the reference"
        elif any(stopped):  # as a claim: a diverged seed's F-Attn is an earlier state's
            side = f"a seed stopped early ({stopped[0]} / {stopped[1]})"
        elif c["seeds"] < MIN_SEEDS:
            side = f"too few seeds ({len(base['values'])} / {len(ours['values'])})"
        elif c["lo"] <= c["null"] <= c["hi"]:
            side = "not separated from the baseline"  # which is not the same as "as high"
        else:
            below = c["estimate"] < c["null"]
            side = ("as in GA: " if below == (row.f_attn < theirs_base) else "unlike GA: ") + \
                ("below" if below else "above") + " the baseline"
        rows.append([v, fmt_ci(ours, f_attn.spec), sinks, format(row.f_attn, f_attn.spec), side])
    return ["", "## GA Table 4's sink column, beside ours", "",
            f"{f_attn.label} per variant ({SEEDS_NOTE}), the seeds that grew "
            f"a sink head ({f_attn.label} > {SINK_HEAD_THRESHOLD} in some head), GA's {f_attn.label} for the same row, "
            f"and, with {MIN_SEEDS} seeds or more on each side, whether the variant sits below or above the baseline "
            "(the 95% interval of the ratio of their F-Attn over seeds, as the rule computes it, leaves out 1) on "
            "GA's side of it or not; where the interval holds 1, the two are not separated. A comparison, not a "
            "verdict: the claims above are decided by the rule.", ""] + \
        markdown_table(["variant", f"{f_attn.label} (ours)", "seeds with a sink head", f"GA {f_attn.label}",
                        "against the baseline"], rows)


def mechanism_section(records, variants, windows):
    """The sink's mechanism on a task with triggers (the sink lab): each measure's mean over seeds, per variant; and
    the lowest loss a model can reach, on the text and on the first run's windows (windows: load_windows')."""
    if not any(r.get("prev_attn_trigger") is not None for r in records):
        return []
    meta = read_meta(windows["data_dir"]) or {}
    ideal, P, triggers = "", None, None
    if {"ideal_loss", "symbols", "triggers", "alpha", "seed"} <= meta.keys():  # the chain again, from its settings
        P, triggers = make_chain(meta["symbols"], len(meta["triggers"]), meta["alpha"], meta["seed"])
    if triggers is not None and triggers == meta["triggers"]:
        T, bos = windows["block_size"], bool(windows["bos"])
        ideal = (f" The task's text has an entropy of {meta['ideal_loss']:.4f} nats a token (meta.json's ideal loss), "
                 f"a perfect model's loss on the text read whole; on these windows ({'BOS, then ' * bos}{T} symbols) a "
                 f"perfect model's is {window_ideal_loss(P, np.isin(np.arange(len(P)), triggers), T, bos):.4f} "
                 "(data/bigram_backcopy/prepare.py's window_ideal_loss), the floor under every val loss above: "
                 + ("the first prediction of each sees only BOS, and the second" if bos else "the first") +
                 " cannot see the symbol a trigger there would copy.")
    rows = [[v, len(x["seeds"])] + [fmt_ci(x[m.key], m.spec) for m in MECHANISM] for v, x in variants.items()]
    return ["", "## The sink's mechanism", "", MECHANISM_NOTE + f" Per variant, {SEEDS_NOTE}; each run's value "
            "pools its windows, heads and positions of the kind." + ideal, ""] + \
        markdown_table(["variant", "seeds"] + [m.label for m in MECHANISM], rows)


# -----------------------------------------------------------------------------
# The sink's mechanism per run (lab/analyze.py's summary.md and the study's report)

def _fmt(value, spec):
    return None if value is None or isinstance(value, float) and not math.isfinite(value) else format(value, spec)


def _layer_value(record, key, layer):
    values = (record.get("layers") or {}).get(key)
    return values[layer] if values and layer is not None and layer < len(values) else None  # None: no finite layer


def _top_layer(record, key, n):
    """The layer (of n) with the largest finite value of record's per-layer `key` (the first on a tie), or None."""
    values = [(v, -i) for i in range(n) for v in [_layer_value(record, key, i)] if v is not None and math.isfinite(v)]
    return -max(values)[1] if values else None


def _channel_cells(c):
    """A layer's massive_channels dict as cells: the position of the max |h| (how often), the top channels with their
    mean h, the share of ||h||^2 they hold, the channel of the max (how often); None where it was not measured."""
    if not c:
        return [None] * 4
    return [f"{c['pos']} ({_fmt(c['pos_share'], '.0%')})",
            ", ".join(f"{ch}: {_fmt(v, '.1f')}" for ch, v in zip(c["channels"], c["values"])),
            _fmt(c["share"], ".0%"), f"{c['top_channel']} ({_fmt(c['top_channel_share'], '.0%')})"]


MECHANISM_ROWS_NOTE = ("Value norm ratio: the norm of the value vector at position 0 over the mean value norm at the "
                       "other positions (a sink head parks attention on a key whose value is small: the ratio falls "
                       "far below 1). Peak position: where each window's largest |h| of the layer's output sits, the "
                       "most often (share of windows). Top channels: the hidden state's channels with the largest mean "
                       "|h| there, with their mean h; their norm² share: how much of that position's squared norm "
                       "they hold; peak channel: the channel of the largest |h|, the most often (share of windows).")


def mechanism_rows(records, per_layer=False):
    """The sink's mechanism per run, as a table: (header, rows), header a list of column names, rows a list of rows,
    each a list of cells (str, or None where a run lacks the measurement: written – by lab.report.markdown_table), so

        lines = markdown_table(*mechanism_rows(summary["runs"]))

    renders it (MECHANISM_ROWS_NOTE says what the columns mean). records: lab/analyze.py's run records (summary.json's
    "runs", or "models" of --pretrained), each with "label" (or "run", "name"), "layers" and "channels".

    per_layer=False: one row per run, 10 cells: run, sink layer (the layer of the highest F-Attn), F-Attn and value
    norm ratio at that layer, M-Act layer (the layer of the highest M-Act), M-Act there, and at that layer: peak
    position ("0 (100%)": the position of the max |h|, share of windows), top channels ("447: -3000.1, 138: 12.0,
    ..."), their norm² share ("95%"), peak channel ("447 (100%)": the channel of the max |h|, share of windows).
    per_layer=True: one row per run and layer, 9 cells: run, layer, F-Attn, value norm ratio, M-Act, peak position,
    top channels, their norm² share, peak channel. No header contains "|"."""
    tail = ["peak position", "top channels (mean h)", "their norm² share", "peak channel"]
    rows = []
    for r in records:
        label = r.get("label") or r.get("run") or r.get("name")
        layers, channels = r.get("layers") or {}, r.get("channels") or []
        n = len(layers.get("first_token_attn") or [])
        channel = lambda i: channels[i] if i < len(channels) else None  # noqa: E731
        if per_layer:
            rows += [[label, str(i), _fmt(_layer_value(r, "first_token_attn", i), ".3f"),
                      _fmt(_layer_value(r, "value_norm_ratio", i), ".3f"), _fmt(_layer_value(r, "max_act", i), ".1f")]
                     + _channel_cells(channel(i)) for i in range(n)]
            continue
        sink, act = _top_layer(r, "first_token_attn", n), _top_layer(r, "max_act", n)
        rows.append([label, None if sink is None else str(sink), _fmt(_layer_value(r, "first_token_attn", sink), ".3f"),
                     _fmt(_layer_value(r, "value_norm_ratio", sink), ".3f"), None if act is None else str(act),
                     _fmt(_layer_value(r, "max_act", act), ".1f")]
                    + _channel_cells(None if act is None else channel(act)))
    if per_layer:
        return ["run", "layer", "F-Attn", "value norm ratio", "M-Act"] + tail, rows
    return ["run", "sink layer", "F-Attn", "value norm ratio", "M-Act layer", "M-Act"] + tail, rows


def sink_parts_section(records, analyzed):
    """What a sink is made of, per variant: the value at the sink key (a head does nothing by attending to a key
    whose value is near zero) over seeds, and, for each variant's first seed, the layer that sinks the most and the
    channels that carry the massive activation (analyze.mechanism_rows)."""
    if not any((a.get("layers") or {}).get("value_norm_ratio") for a in analyzed):
        return []  # measured before the probe kept values (a kept run of an older report)
    by = {}
    for r, a in zip(records, analyzed):
        ratios = (a.get("layers") or {}).get("value_norm_ratio")
        if ratios:
            sink = int(np.argmax(a["layers"]["first_token_attn"]))
            by.setdefault(r["variant"], []).append((r["seed"], a["layers"]["first_token_attn"][sink], ratios[sink]))
    rows = []
    for v, seeds in by.items():
        fa = over_seeds([x[1] for x in seeds])
        ratio = over_seeds([x[2] for x in seeds])
        low = sum(x[2] < 0.5 for x in seeds)
        trained = sum(r["variant"] == v for r in records)
        rows.append([v, f"{len(seeds)} of {trained}", fmt_ci(fa, ".3f"), fmt_ci(ratio, ".3f"),
                     f"{low} of {len(seeds)}"])
    first = [one_seed(records, analyzed, v)[1] for v in dict.fromkeys(r["variant"] for r in records)]
    return ["", "## What the sink is made of", "",
            f"At each run's sink layer (the layer of its highest F-Attn), {SEEDS_NOTE}: F-Attn, and the value norm "
            "ratio, the norm of the value vector at position 0 over the mean value norm at the other positions. A "
            "sink head parks its attention on a key whose value is near zero, so that attending there adds almost "
            "nothing: its ratio falls far below 1. Seeds: those whose value norms were measured, of the seeds trained "
            "(a run measured by an older probe has none). The last column counts the seeds whose ratio is below "
            "0.5.", ""] + \
        markdown_table(["variant", "seeds", "F-Attn at the sink layer", "value norm ratio there",
                        "seeds with ratio < 0.5"], rows) + \
        ["", "One seed of each variant (the first the current probe measured, where there is one): where it sinks and "
         "which channels carry its massive activation. " +
         MECHANISM_ROWS_NOTE, ""] + markdown_table(*mechanism_rows(first))


def one_seed(records, analyzed, variant):
    """The (record, lab/analyze.py record) of the run that stands for a variant in a per-layer table: its first seed
    that the probe measured by its current definitions, else its first seed (older_sink_share)."""
    return min(((r, a) for r, a in zip(records, analyzed) if r["variant"] == variant),
               key=lambda pair: (older_sink_share(pair[0]), pair[0]["seed"]))


def sink_section(records, analyzed):
    """Per layer, for one seed of the baseline and of G1 (the first the current probe measured, where there is one):
    where attention piles up, and on which token."""
    lines = ["", "## Where the sink is", "",
             "Per layer, one seed (the first that the probe measured by its current sink share, where there is one): "
             "F-Attn, the sink share, the share of sink heads, and the key position and token that most often receive "
             "a (window, head)'s largest share (with how often).", ""]
    decode = token_decoder(analyzed[0]["eval_windows"]["data_dir"], (analyzed[0].get("model") or {}).get("vocab_size"))
    per_layer = [MEASURE[key] for key in ("first_token_attn", "sink_share", "sink_heads")]
    shown = 0
    for v in dict.fromkeys(r["variant"] for r in records if r["variant"] in SWEPT):
        r, a = one_seed(records, analyzed, v)
        L = a["layers"]
        older = "; measured by the probe's older sink share: its sink share and top key look at the whole first " \
            "half, where position T/2 - 1 is recency, not a sink" if older_sink_share(r) else ""
        lines += [f"{r['variant']} (seed {r['seed']}{older}):", ""] + markdown_table(
            ["layer"] + [m.label for m in per_layer] + ["top key position", "top key token"],
            [[i] + [fmt(L[m.key][i], m.spec) for m in per_layer] +
             [f"{L['sink_pos'][i]} ({fmt(L['sink_pos_share'][i], '.0%')})",
              f"{decode(L['sink_token'][i])} ({fmt(L['sink_token_share'][i], '.0%')})"]
             for i in range(len(L["first_token_attn"]))]) + [""]
        shown += 1
    return lines if shown else []


GPT2_VOCAB_SIZES = (GPT2_EOT_ID + 1, GPTConfig.vocab_size)  # GPT-2's vocabulary, and model.py's padded one


def token_decoder(data_dir, vocab_size=None):
    """token id -> `id 'text'` with the dataset's tokenizer (its meta.json's), or the bare id when it cannot be
    loaded. Without the dataset (a report drawn again from kept runs), GPT-2's tokenizer only for a model whose
    vocabulary is GPT-2's: a guess that decoded a synthetic task's ids as GPT-2 text would name the wrong tokens."""
    try:
        meta = read_meta(data_dir)
        name = meta.get("tokenizer", "gpt2") if meta else "gpt2" if vocab_size in GPT2_VOCAB_SIZES else None
        enc = get_tokenizer(name) if name else None
    except Exception:  # no tokenizer here: the ids still say which token it is
        enc = None

    def decode(token):
        if token is None:
            return "–"
        if enc is None or token >= enc.n_vocab:
            return f"{token}"
        return f"{token} `{enc.decode([token])!r}`".replace("|", "\\|")
    return decode


def paper_text(ref, variant, numbers, kind):
    """The papers' reference → variant and source for a claim, from the first paper that gives both numbers
    (numbers: a measure's paper_numbers), its change on the scale the size word compares (kind: the measure's
    comparison, "diff" or "ratio"; GA's perplexities by their ratio, whose log is a loss difference)."""
    pair = paper_pair(ref, variant, numbers)
    if not pair:
        row = VARIANTS[variant].ga or VARIANTS[variant].gn
        if row and row.note:  # the paper says what it found in words, with no number to compare
            return row.note, f"{row.paper} {row.table}"
        return "–", "–"
    x, y, key, name, spec, source = pair
    if key == "ppl":
        change = f"×{y / x:.3f}"
    elif kind == "diff":  # a loss in nats, a gate score
        change = f"{y - x:+.3f} nats" if key == "loss" else f"{y - x:+.3f}"
    else:
        change = f"×{y / x:.2f}"
    return f"{name} {x:{spec}} → {y:{spec}} ({change})", source


def paper_pair(ref, variant, numbers):
    """The papers' (reference value, variant value, Row field, name, format, source) from the first paper that
    gives both rows that number."""
    for paper, key, name, spec in numbers:
        p, q = getattr(VARIANTS[ref], paper), getattr(VARIANTS[variant], paper)
        if p and q and getattr(p, key) is not None and getattr(q, key) is not None:
            source = f"{q.paper} {q.table}" if p.table == q.table else f"{p.paper} {p.table} → {q.table}"
            return getattr(p, key), getattr(q, key), key, name, spec, source
    return None


def paper_effect(ref, variant, measure):
    """The paper's effect for a claim's quantity on the scale stats.size_word compares (the first paper that gives
    both rows a number for the measure): the log of the ratio for a ratio measure, and for the loss against GA's
    perplexities the log of the perplexity ratio (a loss difference in nats); else the difference. None without."""
    pair = paper_pair(ref, variant, paper_numbers(measure.key))
    if not pair:
        return None
    x, y, key = pair[:3]
    return math.log(y / x) if comparison(measure.key) == "ratio" or key == "ppl" else y - x


def paper_table(by):
    """The papers' numbers for the variants trained: every number a measure of MEASURES has in a paper."""
    numbers = [number for m in MEASURES for number in paper_numbers(m.key)]  # (paper, Row field, column, format)
    rows = []
    for name in by:
        v = VARIANTS[name]
        source = "; ".join(f"{row}" + (f": {row.note}" if row.note else "") for row in (v.ga, v.gn) if row)
        rows.append([name] + [fmt(getattr(v, paper) and getattr(getattr(v, paper), field), spec)
                              for paper, field, _, spec in numbers] + [source or "–"])
    return ["", "## The papers' numbers for the same rows", "",
            "GA: 15A2B MoE, 400B tokens, reports perplexity (Tables 1, 3, 4). GN: 2B dense, reports loss and the "
            "residual stream's max activation (Table 1; compare it with our peak act). "
            "Absolute values are not comparable across these scales (model, data, tokenizer, tokens): compare only "
            "the direction and size of the trends.", ""] + \
        markdown_table(["variant"] + [column for _, _, column, _ in numbers] + ["source"], rows)


def evaluate_section(report_dir, root, trained):
    """REPORT.md's section on lab/evaluate.py's measurements (`python -m lab.repro evaluate`, in
    report_dir/EVALUATE_DIR), when there are any: each headline number averaged over a variant's seeds. trained:
    the (variant, seed) of every run the report draws, to name those not evaluated; an evaluation of another run (one
    left out as not finished) is named and left out."""
    folder = os.path.join(report_dir, EVALUATE_DIR)
    if not os.path.isfile(os.path.join(folder, "summary.json")):
        return ""
    try:
        with open(os.path.join(folder, "summary.json")) as f:
            evaluations = json.load(f)
        headlines = [headline(r) for r in evaluations["models"]]  # each record's numbers, read here once
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:  # cut short, or not lab/evaluate.py's
        why = (f"{EVALUATE_DIR}/summary.json cannot be read ({type(e).__name__}): run `python -m lab.repro evaluate` "
               "again")
        print(f"note: the report has no section on lab/evaluate.py's measurements: {why}", flush=True)
        return "\n".join(["", "## Downstream consequences (lab/evaluate.py)", "", f"**Not shown: {why}.**", ""])
    by, stale, not_reported = {}, [], []
    reported = {f"{v}/seed{s}" for v, s in trained}
    for r, numbers in zip(evaluations["models"], headlines):
        if r["label"] not in reported:  # e.g. evaluated, then left out of the report as not finished
            not_reported.append(r["label"])
            continue
        by.setdefault(variant_of(r["label"]), []).append(numbers)
        run = os.path.join(root, r["label"])  # its folder under this root (the runner labels it <variant>/seed<N>)
        run = run if os.path.isdir(run) else r.get("run", "")  # else where it was evaluated
        ckpt = os.path.join(run, r.get("checkpoint", ""))
        if os.path.isfile(ckpt):  # trained again since?
            changed = os.path.getmtime(ckpt) > os.path.getmtime(os.path.join(folder, "summary.json"))
        else:  # gone: lab/evaluate.py read the run from what it kept of the checkpoint, if it kept anything
            changed = not os.path.isfile(os.path.join(run, EVALUATED))
        if changed:
            stale.append(r["label"])
    columns = list(dict.fromkeys(k for rows in by.values() for row in rows for k in row))
    lines = ["", "## Downstream consequences (lab/evaluate.py)", "",
             (f"Measured by `python -m lab.repro evaluate` on {evaluations['device']}, {evaluations['date']}"
              if any(not r.get("measured_earlier") for r in evaluations["models"]) else
              f"Drawn by `python -m lab.repro evaluate` on {evaluations['date']}, every run from its record measured "
              "earlier (below)") + "; the details, each checkpoint with its intervals over windows, in "
             f"[{EVALUATE_DIR}/summary.md]({EVALUATE_DIR}/summary.md). Here, {SEEDS_NOTE}. Δ: the loss increase "
             "(nats) with W-bit weights and A-bit activations, or a sliding window of w keys that keeps the first k "
             "positions, over the same windows unchanged; a RoPE column: the loss of the last positions of the longest "
             "windows (with Δ: its increase over the first T positions of the same windows, as trained" +
             ("; a [0, T) Δ: what the scaling costs inside the trained length"
              if any(" [0, " in c and c.endswith(" Δ") for c in columns) else "") + ").", ""]
    earlier = [f"{r['label']} on {r['device']}, {r['date']}" for r in evaluations["models"]
               if r.get("measured_earlier")]
    if earlier:
        lines += ["Measured in an earlier session, from the record kept of each run whose checkpoint is gone: " +
                  "; ".join(earlier) + ".", ""]
    if stale:
        lines += [f"**Out of date: the checkpoints of {', '.join(stale)} changed (or are gone from {root}/) since they "
                  "were evaluated; run `python -m lab.repro evaluate` again.**", ""]
    evaluated = {r["label"] for r in evaluations["models"]}
    missing = [f"{v}/seed{s}" for v, s in trained if f"{v}/seed{s}" not in evaluated]
    if missing:
        lines += [f"Not evaluated: {', '.join(missing)} (each `python -m lab.repro evaluate` replaces the "
                  "evaluations before it: name every variant wanted in one call).", ""]
    if not_reported:
        lines += [f"Evaluated but not in this report, so left out here too: {', '.join(not_reported)}.", ""]
    cells = {v: [some_seeds([row.get(c) for row in rows], ".4f") for c in columns] for v, rows in by.items()}
    if any("seeds)" in cell for row in cells.values() for cell in row):
        lines += ["A cell marked (k of n seeds) holds only the seeds measured with that column: the others' records "
                  "were kept from an earlier lab/evaluate.py, which did not compute it.", ""]
    lines += [PAPERS_SAY, ""] + table(["variant", "seeds"] + columns,
                                      [[v, len(rows)] + cells[v] for v, rows in by.items()])
    plots = [p for p in ("quant.png", "length.png", "stream.png") if os.path.isfile(os.path.join(folder, p))]
    return "\n".join(lines + [f"![{p}]({EVALUATE_DIR}/{p})\n" for p in plots])


# -----------------------------------------------------------------------------
# Figures from the runs' logs and the sweep. logs: {(variant, seed): the run's log.jsonl records}

PLOT_TEXT = {
    "headline.png": "F-Attn during training, baseline against G1 (each seed thin, their mean thick), and each "
                    "variant's final F-Attn (the bar: the mean over seeds; a dot: each seed; the 95% t-interval "
                    f"where there are {MIN_SEEDS} seeds or more) beside GA Table 4's.",
    # lab.repro's analyze_runs draws the figures of single runs from each variant's first (lowest) seed alone
    "layers.png": "F-Attn, sink share and M-Act per layer, each variant's first seed (lab/analyze.py).",
    "gate_hist.png": "The distribution of gate scores, each gated variant's first seed.",
    "attn_maps.png": "One head-averaged attention map per variant, of its first seed, at the layer of that run's "
                     "highest F-Attn (each title names it).",
    "curves.png": "Validation loss (its axis from the second evaluation on) and F-Attn during training, each "
                  "variant's first seed (lab/analyze.py, from train.py's log).",
    "trends.png": "F-Attn, sink heads, M-Act and gate mean against tokens seen (mean over seeds; in a model of one "
                  "head, whose sink heads is a yes/no a run, the share of seeds with a sink head): whether the sink "
                  "is still growing when the runs end.",
    "emergence.png": "The sink forming during training, each variant's first seed: F-Attn, M-Act and the value norm "
                     "ratio per layer against the training step (lab/analyze.py, from train.py's log).",
    "lr_sweep.png": "The stability sweep: final loss, M-Act (its geometric mean over seeds, on a log axis) and loss "
                    "spikes against the learning rate, baseline and G1.",
}


def plot_trends(by, logs, out_dir):
    """F-Attn, sink heads, M-Act and gate mean against tokens seen, from each run's log (mean over seeds), every
    variant outside the sweep in each panel: is the sink still growing when the runs end? Where every run has one
    head (the sink lab), a run's sink heads is a yes/no: its panel counts the seeds with a sink head, as a share of
    those logged at that point, never a mean that would read as part of a sink."""
    plt = pyplot()
    if plt is None:
        return []
    shown = [v for v in by if v not in SWEEP]
    counted = all(one_head(by[v]) for v in shown)
    panels = [("first_token_attn", "F-Attn (attention on the first token)"),
              ("sink_heads", f"seeds with a sink head (F-Attn > {SINK_HEAD_THRESHOLD}), a yes/no a run" if counted
               else f"sink heads (share of heads with F-Attn > {SINK_HEAD_THRESHOLD})"),
              ("max_act", "M-Act (max |h| per window)"), ("gate_mean", "gate mean")]
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    styles = dict(zip(shown, distinct_styles(len(shown))))  # one look per variant in every panel
    for ax, (key, title) in zip(axes.flat, panels):
        for v in shown:
            points = {}
            for r in by[v]:
                for rec in logs[v, r["seed"]]:
                    if rec.get(key) is not None:
                        points.setdefault(rec["tokens"], []).append(rec[key])
            if points:
                xs = sorted(points)
                share = key == "sink_heads" and counted  # k of n seeds, as a share
                ys = [np.mean(np.array(points[x]) > 0) if share else np.mean(points[x]) for x in xs]
                colour, style = styles[v]
                ax.plot([x / 1e6 for x in xs], ys, marker=".", label=v, color=colour, linestyle=style)
        ax.set(xlabel="tokens seen (M)", title=title, yscale="log" if key == "max_act" and ax.lines else "linear",
               ylabel="share of the seeds" if key == "sink_heads" and counted else
               f"{MEASURE[key].label} (mean over seeds)")
        if not ax.lines:  # e.g. the gate mean of a study without a gated variant: an empty axis would read as 0
            ax.text(0.5, 0.5, "no variant here has a gate" if key == "gate_mean" else "not in these runs' logs",
                    ha="center", va="center", transform=ax.transAxes)
            ax.set(xticks=[], yticks=[])
    fig.tight_layout()
    legend_beside(fig, axes.flat, title="variant")
    return [save_figure(fig, os.path.join(out_dir, "trends.png"), bbox_inches="tight")]


def plot_headline(by, variants, logs, out_dir):
    """The study in one figure: F-Attn during training, baseline against G1 (each seed thin, their mean thick), and
    each variant's final F-Attn (mean over seeds, each seed a dot, the 95% CI from MIN_SEEDS seeds on) beside GA
    Table 4's value where the paper gives one."""
    plt = pyplot()
    if plt is None or not {"baseline", "g1_elementwise"} <= by.keys():
        return []
    fig, (curve, bars) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [1, 1.3]})
    for v, color in (("baseline", "tab:blue"), ("g1_elementwise", "tab:orange")):
        runs = [logs[v, r["seed"]] for r in by[v]]
        points = {}
        for log in runs:
            xs = [rec["tokens"] / 1e6 for rec in log if rec.get("first_token_attn") is not None]
            ys = [rec["first_token_attn"] for rec in log if rec.get("first_token_attn") is not None]
            curve.plot(xs, ys, color=color, alpha=0.3, linewidth=1)
            for x, y in zip(xs, ys):
                points.setdefault(x, []).append(y)
        xs = sorted(points)
        curve.plot(xs, [np.mean(points[x]) for x in xs], color=color, linewidth=2.5,
                   label=f"{v} ({len(runs)} seed{'s' * (len(runs) > 1)})")
    highest = max((y for line in curve.lines for y in line.get_ydata()), default=1.0)
    curve.set(xlabel="tokens seen (M)", ylabel="attention on the first token (F-Attn)",
              ylim=(0, min(1.0, max(0.1, 1.15 * highest))),  # a weak sink (real text's 0.06) flat on 0-1 shows nothing
              title="the sink forming during training")
    names = [v for v in by if variants[v]["first_token_attn"] is not None]
    stats = [variants[v]["first_token_attn"] for v in names]
    means = [s["mean"] for s in stats]
    bars.bar(range(len(names)), means, color="tab:gray", label="ours (mean over seeds)")
    # each seed's value as a dot; an interval only from MIN_SEEDS seeds on (SEEDS_NOTE): a one-seed bar with a flat
    # "CI" would claim certainty, and a t-interval of two seeds says little more than the two dots
    dots = [(i, x) for i, s in enumerate(stats) for x in s["values"]]
    bars.plot(*zip(*dots), ".", color="black", label="each seed")
    ci = [(i, s) for i, s in enumerate(stats) if s["n"] >= MIN_SEEDS]
    if ci:
        bars.errorbar([i for i, _ in ci], [s["mean"] for _, s in ci], fmt="none", capsize=3, color="black",
                      yerr=[[s["mean"] - s["lo"] for _, s in ci], [s["hi"] - s["mean"] for _, s in ci]],
                      label=f"95% CI over seeds ({MIN_SEEDS} or more)")
    paper = [(i, VARIANTS[v].ga.f_attn) for i, v in enumerate(names) if VARIANTS[v].ga and VARIANTS[v].ga.f_attn]
    if paper:
        bars.plot(*zip(*paper), "D", color="tab:red", label="GA Table 4 (15B MoE, 400B tokens)")
    seeds = [len(by[v]) for v in names]
    bars.set_xticks(range(len(names)), [f"{v} ({n} seed{'s' * (n > 1)})" for v, n in zip(names, seeds)],
                    rotation=45, ha="right", fontsize=8)
    bars.set(xlabel="variant", ylabel="F-Attn at the end", ylim=(0, 1), title="the sink by variant")
    fig.tight_layout()
    legend_beside(fig, (curve, bars))  # inside, the bars' legend covered seed dots and interval caps
    return [save_figure(fig, os.path.join(out_dir, "headline.png"), bbox_inches="tight")]


def on_log_scale(m):
    """over_seeds' numbers for a log axis: the geometric mean, and the t-interval of the logs exponentiated, as the
    rule decides a ratio (an arithmetic interval of values several times apart can reach below 0, off a log axis)."""
    mean, lo, hi = mean_ci(np.log(m["values"]))
    return {**m, "mean": math.exp(mean), "lo": None if lo is None else math.exp(lo),
            "hi": None if hi is None else math.exp(hi)}


def plot_sweep(sweep, out_dir):
    """Final val loss, M-Act and loss spikes against the learning rate, baseline and G1: the mean over seeds (M-Act,
    on a log axis: the geometric mean, on_log_scale), each seed's value as a dot, and the 95% CI over seeds where
    there are MIN_SEEDS or more. Nothing until two rates are trained: one rate is no curve, and its numbers are the
    sweep's table."""
    plt = pyplot()
    if plt is None or len({r["lr"] for r in sweep}) < 2:
        return []
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    # both models' M-Act alike on the one axis: geometric where every value can be logged, else arithmetic
    geometric = all(min(r[f]["max_act"]["values"]) > 0 for r in sweep for f in SWEPT if r[f] and r[f]["max_act"])
    for family in SWEPT:
        rows = [r for r in sweep if r[family]]
        lrs = [r["lr"] for r in rows]
        for ax, key in zip(axes[:2], ("val_loss", "max_act")):
            kept = [(lr, r[family][key]) for lr, r in zip(lrs, rows) if r[family][key]]  # None: a run without it
            if not kept:
                continue
            xs, stats = zip(*kept)
            if key == "max_act" and geometric:
                stats = [on_log_scale(m) for m in stats]
            means = [m["mean"] for m in stats]
            err = [[m["mean"] - m["lo"] if m["n"] >= MIN_SEEDS else 0 for m in stats],
                   [m["hi"] - m["mean"] if m["n"] >= MIN_SEEDS else 0 for m in stats]]
            line = ax.errorbar(xs, means, yerr=err, marker="o", capsize=3, label=family)
            ax.plot([lr for lr, m in zip(xs, stats) for _ in m["values"]], [x for m in stats for x in m["values"]],
                    ".", color=line[0].get_color(), alpha=0.5)
        counted = [(lr, [x for x in r[family]["loss_spikes"] if x is not None]) for lr, r in zip(lrs, rows)]
        counted = [(lr, xs) for lr, xs in counted if xs]  # a run without the count is left out, not counted as 0
        axes[2].plot([lr for lr, _ in counted], [np.mean(xs) for _, xs in counted], marker="o", label=family)
    axes[0].set(xscale="log", xlabel="learning rate", ylabel="final val loss (nats)",
                title="loss against learning rate")
    axes[1].set(xscale="log", yscale="log", xlabel="learning rate", ylabel="M-Act", title="massive activations")
    axes[2].set(xscale="log", xlabel="learning rate", ylabel="loss spikes per run", title="loss spikes")
    top = max(1.0, axes[2].get_ylim()[1])  # a count: no spike at all sits at the bottom, not mid-axis
    axes[2].set_ylim(-0.05 * top, top)
    lrs = sorted({r["lr"] for r in sweep})
    for ax in axes:  # the swept rates as the ticks, written as they are set
        ax.set_xticks(lrs, [f"{lr:g}" for lr in lrs])
        ax.minorticks_off()
    fig.tight_layout()
    legend_beside(fig, axes[:1])  # inside the loss panel, it could lie over a rate's seed dots
    return [save_figure(fig, os.path.join(out_dir, "lr_sweep.png"), bbox_inches="tight")]


if __name__ == "__main__":  # run by mistake: say what writes a report, rather than exit 0 having done nothing
    from cli import fail
    fail("lab/report.py is a library with no command line: `python -m lab.repro report` writes a study's report "
         "(python -m lab.analyze and python -m lab.evaluate measure runs)")

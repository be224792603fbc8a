"""
Reproduce the gated-attention papers' trends on one GPU: the same small model, data order, token budget
and learning-rate schedule (config/repro.py) for each variant of variants.py, several seeds each, then one
analysis of all of them with confidence intervals and a verdict for each of the papers' claims, by rule.

    python repro.py list                       # every variant, its flags and the paper rows it is compared with
    python repro.py prepare                    # the corpus: .py files of this Python's installed packages
    python repro.py train all --seeds=3 --parallel=3   # the study (variants.STUDY), three seeds, 3 runs at once
    python repro.py train baseline g1_elementwise --max_iters=400
    python repro.py train baseline:2 g1_elementwise:2 g1_headwise --parallel=2 --budget_min=18   # what fits
    python repro.py evaluate                   # evaluate.py on the models' checkpoints: results/repro/evaluate/
    python repro.py report                     # results/repro/{summary.json, REPORT.md, *.png}
    python repro.py train all --study=sink_lab --seeds=3 --parallel=2   # the sink lab on a laptop CPU
    python repro.py report --study=sink_lab    # results/sink_lab/

Two studies share this runner (--study): `repro`, the GPU study of the papers' trends on real text
(config/repro.py, variants.STUDY), and `sink_lab`, the attention sink on the Bigram-Backcopy task on a CPU
(config/sink_lab.py, variants.LAB: GA Table 4's sink column, the other gate positions and the baseline without a
BOS token), each with its own claims, runs (out-repro/, out-sink-lab/) and report (results/repro/, results/sink_lab/).

The first word is the step. `train` and `evaluate` take variant names: `all` is the study, `models` its
one-model-each part, `sweep` its learning-rate sweep, and any other name of variants.VARIANTS (g3, glu, ...)
that variant too. After `train`, NAME:N gives each variant NAME names N seeds instead of --seeds' number (baseline:2,
models:3). The runs start in the order named (a variant's seeds one after another), so name first what matters
most. repro.py's own keys (common.configure):

    --seeds=N          train each variant with N seeds: config/repro.py's seed, +1, ... (the seed changes the
                       initialisation and the order of the training data); default 1
    --budget_min=M     start no run that would end, by the time estimate below, more than M minutes after `train`
                       began; the runs left out are listed, and the same command trains them later. For a GPU
                       available for a fixed time: the runs that fit are whole, and the report can follow. 0: no limit
    --parallel=K       run K trainings side by side on the one device (a small model leaves most of an H100
                       idle: two side by side finished in about the time of one); each run's output then goes
                       to <root>/logs/<variant>-seed<N>.txt
    --study=NAME       repro (default) or sink_lab: which study's config, variants, claims, runs and report
    --config=FILE      a config file applied after the study's own, e.g. config/repro_sink.py (the known levers
                       of the attention sink, for a baseline sink large enough to measure)
    --root=DIR         where the runs are: out-repro/ or out-sink-lab/ (-tiny added with --tiny)
    --report_dir=DIR   where the report goes: results/repro/ or results/sink_lab/ (<root>/report/ with --tiny)
    --tiny             a CPU-sized smoke test of the whole pipeline on the default dataset: it concludes nothing

Every other --key=value after `train` is a train.py key and goes to every run, after the variant's own
flags, so it wins; train.py checks it. After `evaluate` it is an evaluate.py key (--modes=quant, --windows=128,
...): `evaluate` runs evaluate.py on every trained seed of the variants named (default: `models`) and writes to
<report_dir>/evaluate/; `report` then adds a section of their numbers, averaged over seeds.

When a new run stops before its first evaluation (a mistaken key, missing data), the others would stop the same
way, so repro.py starts no more. --out_dir, --init_from and --seed are repro.py's to set.

Each run goes to <root>/<variant>/seed<N>/ and is nothing more than `python train.py <the study's config>
--out_dir=<root>/<variant>/seed<N> --seed=<N> <the variant's flags> <your keys>`, printed before it starts so
it can be rerun by hand, and recorded (command, exit code, seconds, date) in <root>/commands.jsonl, from which
the report lists the commands actually run. An interrupted study is resumed by the same command: a run whose
log reaches max_iters is skipped, a run with a checkpoint continues (--init_from=resume), the rest start.
Before it starts, `train` prints an estimate of the time it will take (from the speed of the runs it already timed at
this --parallel, or from the model's FLOPs on a GPU it knows); --budget_min uses the same estimate, updated as runs
end.
"""

import ast
import json
import math
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, fields

import numpy as np
import torch

from common import (configure, dataset_dir, fail, flops_per_token, markdown_table, peak_flops, read_jsonl,
                    run_config_file)
from data import ON_FIRST_USE, prepare_on_first_use
from data.shards import find_shards, read_meta
from model import GPT, GPTConfig
from probe import MECHANISM_COLUMNS, MECHANISM_NOTE
from stats import RULE, compare, mean_ci, verdict
from variants import LAB, MODELS, STABILITY_ROW, STUDY, SWEEP, SWEPT, VARIANTS, Row

REPO = os.path.dirname(os.path.abspath(__file__))
STEPS = ("list", "prepare", "train", "evaluate", "report")


@dataclass
class Keys:
    study: str = "repro"  # which study (STUDIES): repro, the GPU study on real text; sink_lab, the CPU lab
    root: str = ""  # where the runs are; "": the study's (out-repro; out-repro-tiny with --tiny)
    report_dir: str = ""  # where the report goes; "": the study's (results/repro; <root>/report with --tiny)
    tiny: bool = False  # a CPU smoke test of the pipeline: tiny model, few steps, concludes nothing
    seeds: int = 1  # seeds per variant: the config's seed, seed + 1, ...
    parallel: int = 1  # runs side by side on the one device
    budget_min: float = 0.0  # start no run estimated to end later than this many minutes after train began; 0: none
    config: str = ""  # a config file applied after the study's (config/repro_sink.py: the sink's levers)


KEYS = {f.name for f in fields(Keys)}
SET_BY_REPRO = ("out_dir", "init_from", "seed")  # train.py keys that repro.py decides for every run
SET_FOR_EVALUATE = ("runs", "labels", "out_dir", "pretrained")  # evaluate.py keys that repro.py decides
EVALUATE_DIR = "evaluate"  # under the report's folder

# The papers' claims, each decided by stats.RULE: (claim, reference, variant, measure, the paper's direction:
# -1 when the paper finds the variant's value below the reference's, +1 above). The reference None compares
# the variant with a fixed value (MEASURES' null).
CLAIMS = [
    ("GA: a sigmoid gate on each head's SDPA output (G1 elementwise) lowers the loss",
     "baseline", "g1_elementwise", "loss", -1),
    ("GA: G1's gate scores are sparse: their mean is below an untrained gate's 0.5", None, "g1_elementwise",
     "gate_mean", -1),
    ("GA: G1 reduces the attention sink (attention on the first token)", "baseline", "g1_elementwise",
     "first_token_attn", -1),
    ("GA: G1 reduces the attention sink wherever it forms (the largest share one key receives)",
     "baseline", "g1_elementwise", "sink_share", -1),
    ("GA: G1 reduces the massive activations", "baseline", "g1_elementwise", "max_act", -1),
    ("GA: a head-shared G1 gate keeps more of the sink than head-specific G1",
     "g1_elementwise", "g1_head_shared", "first_token_attn", +1),
    ("GA: NS-sigmoid (scores in [0.5, 1], not sparse) keeps more of the sink than G1",
     "g1_elementwise", "g1_ns_sigmoid", "first_token_attn", +1),
    ("GA: an input-independent gate keeps more of the sink than G1",
     "g1_elementwise", "g1_input_independent", "first_token_attn", +1),
    ("GA: a headwise G1 gate lowers the loss too", "baseline", "g1_headwise", "loss", -1),
    ("GA: gating the values (G2) lowers the loss", "baseline", "g2_elementwise", "loss", -1),
    ("GA: G2 helps less than G1", "g1_elementwise", "g2_elementwise", "loss", +1),
    ("GA: gating after the output projection (G5) helps less than G1", "g1_elementwise", "g5", "loss", +1),
    ("GA: NS-sigmoid helps less than the sigmoid gate (sparsity matters)", "g1_elementwise", "g1_ns_sigmoid",
     "loss", +1),
    ("GA: an input-independent gate helps less than G1 (input dependence matters)",
     "g1_elementwise", "g1_input_independent", "loss", +1),
    ("GA: an additive SiLU gate lowers the loss", "baseline", "g1_additive_silu", "loss", -1),
    ("GA: a non-gate non-linearity (RMSNorm of each head's SDPA output) lowers the loss",
     "baseline", "sdpa_rmsnorm", "loss", -1),
    ("GN: the gate lowers the residual stream's peak activation", "baseline", "g1_elementwise", "peak_act", -1),
    ("GN: GatedNorm on top of the gate lowers the peak further", "g1_elementwise", "g1_gatednorm", "peak_act", -1),
    ("GN: PreAffine on top of the gate lowers the peak further", "g1_elementwise", "g1_preaffine", "peak_act", -1),
    ("GN: DyT (a bounded norm, no gate) lowers the peak", "baseline", "dyt", "peak_act", -1),
    ("GN: DyT costs loss", "baseline", "dyt", "loss", +1),
]
# each measure: its name, its key in the runs' records and per-window arrays (analyze.py), its format, how a
# variant is compared with its reference ("diff", in nats for the loss, or "ratio"), and the papers' numbers for
# the same thing (which paper, its Row field, its name, its format)
MEASURES = {
    "loss": ("val loss (nats)", "val_loss", ".4f", "diff", [("ga", "ppl", "GA PPL", ".3f"), ("gn", "loss", "GN loss", ".3f")]),
    "first_token_attn": ("F-Attn", "first_token_attn", ".3f", "ratio", [("ga", "f_attn", "GA F-Attn", ".3f")]),
    "sink_share": ("sink share", "sink_share", ".3f", "ratio", []),
    "max_act": ("M-Act", "max_act", ".1f", "ratio", [("ga", "m_act", "GA M-Act", ".0f")]),
    "peak_act": ("peak act", "peak_act", ".1f", "ratio", [("gn", "max_act", "GN max act", ".0f")]),
    "gate_mean": ("gate mean", "gate_mean", ".3f", "diff", [("ga", "gate_mean", "GA gate mean", ".3f")]),
}
UNTRAINED_GATE = 0.5  # sigmoid(0): the mean score of a gate that has learned nothing, the gate_mean claim's reference
# the per-run numbers of the report's table: (record key, column name, format)
COLUMNS = [("val_loss", "val loss (nats)", ".4f"), ("first_token_attn", "F-Attn", ".3f"),
           ("sink_share", "sink share", ".3f"), ("sink_heads", "sink heads", ".2f"), ("max_act", "M-Act", ".1f"),
           ("peak_act", "peak act", ".1f"), ("gate_mean", "gate mean", ".3f"), ("gate_below_0.1", "gate < 0.1", ".2f"),
           ("loss_spikes", "loss spikes", ".1f")]

# --tiny: a CPU smoke test of the whole pipeline on the embedded default dataset, minutes not hours
TINY = dict(dataset="pystdlib", n_layer=2, n_head=2, n_embd=64, block_size=64, batch_size=8,
            gradient_accumulation_steps=1, max_iters=30, lr_decay_iters=30, warmup_iters=5, eval_interval=15,
            eval_iters=2, log_interval=10, compile=False)

# The sink lab's claims: GA Table 4's sink column, decided on the Bigram-Backcopy task, where a sink forms in minutes
LAB_CLAIMS = [
    ("GA: G1 removes the attention sink (attention on the first token)", "baseline", "g1_elementwise",
     "first_token_attn", -1),
    ("GA: G1 removes the sink wherever it forms (the largest share one key receives)", "baseline", "g1_elementwise",
     "sink_share", -1),
    ("GA: G1's gate scores are sparse: their mean is below an untrained gate's 0.5", None, "g1_elementwise",
     "gate_mean", -1),
    ("GA: a headwise G1 gate removes the sink too", "baseline", "g1_headwise", "first_token_attn", -1),
    ("GA: NS-sigmoid (scores in [0.5, 1], never sparse) keeps more of the sink than G1", "g1_elementwise",
     "g1_ns_sigmoid", "first_token_attn", +1),
    ("GA: an input-independent gate keeps more of the sink than G1", "g1_elementwise", "g1_input_independent",
     "first_token_attn", +1),
    ("GA: gating the values (G2) reduces the sink", "baseline", "g2_elementwise", "first_token_attn", -1),
    ("GA: G1 lowers the loss", "baseline", "g1_elementwise", "loss", -1),
]
# --tiny for the sink lab: its own model and data, a few dozen steps
LAB_TINY = dict(max_iters=40, lr_decay_iters=40, warmup_iters=5, eval_interval=20, eval_iters=2, log_interval=20)


@dataclass(frozen=True)
class Study:
    """One study this runner trains and reports: its name (--study), its config (train.py's, before each variant's
    flags), its variants (`all`), its claims, where its runs and report go, its --tiny settings, its report's title."""
    name: str
    config: str
    variants: tuple
    claims: list
    root: str
    report_dir: str
    tiny: dict
    title: str


STUDIES = {
    "repro": Study("repro", os.path.join("config", "repro.py"), STUDY, CLAIMS, "out-repro", os.path.join("results", "repro"),
                   TINY, "Reproducing the gated-attention trends at small scale"),
    "sink_lab": Study("sink_lab", os.path.join("config", "sink_lab.py"), LAB, LAB_CLAIMS, "out-sink-lab",
                      os.path.join("results", "sink_lab"), LAB_TINY,
                      "The sink lab: the attention sink on the Bigram-Backcopy task"),
}


def groups(study):
    """The names that stand for several variants: `all` (the study's variants), and the GPU study's two parts."""
    return {"all": study.variants, "models": MODELS, "sweep": SWEEP}


def run_dir(root, variant, seed):
    return os.path.join(root, variant, f"seed{seed}")


def train_command(variant, seed, root, tiny=False, extra=(), resume=False, config="", study=STUDIES["repro"]):
    """The exact train.py argv of one run. The user's extra flags come last, so they win."""
    flags = {**(study.tiny if tiny else {}), **VARIANTS[variant].all_flags}
    return ([sys.executable, os.path.join(REPO, "train.py"), os.path.join(REPO, study.config)] +
            ([config] if config else []) + [f"--out_dir={run_dir(root, variant, seed)}", f"--seed={seed}"] +
            [f"--{k}={v}" for k, v in flags.items()] + (["--init_from=resume"] if resume else []) + list(extra))


def study_settings(keys, extra):
    """The train.py settings every run shares, as train.py will read them (the study's config, --config, --tiny,
    then the user's keys): the seeds, the run length and the model size come from here."""
    scope, study = {}, STUDIES[keys.study]
    for path in [study.config] + ([keys.config] if keys.config else []):
        full = path if os.path.isfile(path) else os.path.join(REPO, path)
        if not os.path.isfile(full):
            fail(f"--config={path}: no such config file")
        run_config_file(path, full, scope)
    scope.update(study.tiny if keys.tiny else {})
    for word in extra:
        key, _, text = word[2:].partition("=")
        try:
            scope[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            scope[key] = text
    return {k: v for k, v in scope.items() if not k.startswith("_")}


def list_variants(study=STUDIES["repro"]):
    for name, v in VARIANTS.items():
        flags = " ".join(f"--{k}={x}" for k, x in v.all_flags.items())
        rows = "; ".join(str(row) for row in (v.ga, v.gn) if row)
        print(f"{'*' if name in study.variants else ' '} {name:<23} {flags:<52} {rows}")
    if study.name == "repro":
        print(f"* the study ({len(STUDY)} variants: {len(MODELS)} models, {len(SWEEP)} in the learning-rate sweep): "
              "python repro.py train all")
    else:
        print(f"* the {study.name} study ({len(study.variants)} variants, {study.config}): "
              f"python repro.py train all --study={study.name}")


def prepare(name="pysrc"):
    """The study corpus: every .py file of the installed packages (de-duplicated, split by file)."""
    src = sysconfig.get_paths()["purelib"]
    cmd = [sys.executable, os.path.join(REPO, "data", "textdir", "prepare.py"), "--src", src, "--name", name,
           "--exts", ".py"]
    print(shlex.join(cmd), flush=True)
    subprocess.run(cmd, check=True)


# -----------------------------------------------------------------------------
# Training: the runs one after another, or K side by side

def finished(root, variant, seed, max_iters):
    log = read_jsonl(os.path.join(run_dir(root, variant, seed), "log.jsonl"))
    return bool(log) and log[-1].get("iter", 0) >= max_iters


# The share of a GPU's peak bf16 FLOP/s one config/repro.py run reached with two side by side on an H100: a median
# of 326 s for 105M tokens at 0.33 GFLOP a token, evaluations and compilation included (six runs on 2026-11-25,
# results/study-h100-2026-11-25/commands.jsonl; 290 s on 2026-11-22).
RUN_PEAK_SHARE = 0.11


def run_flops(settings):
    """The training FLOPs of one run with these shared settings: the model's FLOPs per token times its tokens."""
    names = {f.name for f in fields(GPTConfig)}
    with torch.device("meta"):
        model = GPT(GPTConfig(**{k: v for k, v in settings.items() if k in names}))
    tokens = settings["max_iters"] * settings["batch_size"] * settings.get("gradient_accumulation_steps", 1) * \
        model.config.block_size
    return flops_per_token(model) * tokens


def seconds_per_run(root, keys, flops):
    """(seconds, where the number comes from) for one run: the median speed (seconds per FLOP) of the earlier complete
    runs timed at this --parallel, times this run's FLOPs, so runs of another length or size count too; or else the
    FLOPs at RUN_PEAK_SHARE of a known GPU's peak (measured with two runs side by side, taken for any K until runs at
    this K have been timed); (None, why not) when neither is known. flops: run_flops of the run. A run to resume is
    counted whole."""
    past = [c["seconds"] / c["flops"] for c in read_jsonl(os.path.join(root, "commands.jsonl"))
            if c.get("flops") and c.get("exit_code") == 0 and not c.get("resumed", True)
            and c.get("parallel", 1) == keys.parallel]
    if past:
        return float(np.median(past)) * flops, f"the median speed of {len(past)} earlier runs"
    peak = peak_flops()  # None off CUDA or on a GPU it does not know
    if peak is None:
        return None, "no earlier run timed here, and no GPU whose peak FLOP/s is known"
    return flops / (RUN_PEAK_SHARE * peak), f"FLOPs at {RUN_PEAK_SHARE:.0%} of the GPU's peak"


def estimate(todo, root, keys, flops):
    """A line saying how long the runs to do will take (seconds_per_run for each, K at a time; flops: run_flops)."""
    waves = math.ceil(len(todo) / keys.parallel)
    per_run, how = seconds_per_run(root, keys, flops)
    if per_run is None:
        return f"{len(todo)} runs to do, {keys.parallel} at a time ({waves} rounds); no time estimate yet ({how})"
    return (f"{len(todo)} runs to do, {keys.parallel} at a time: about {waves * per_run / 60:.0f} min "
            f"({waves} rounds of ~{per_run / 60:.1f} min, from {how})")


def fits_budget(start, root, keys, flops):
    """Whether a run started now ends, by seconds_per_run, within --budget_min of `start` (True without a budget, or
    while nothing says how long a run takes: then the first runs start, and the times they take decide the rest)."""
    if not keys.budget_min:
        return True
    per_run, _ = seconds_per_run(root, keys, flops)
    return per_run is None or time.time() + per_run <= start + keys.budget_min * 60


def train(runs, root, keys, extra, settings):
    os.makedirs(root, exist_ok=True)
    todo = []
    for v, seed in runs:
        if finished(root, v, seed, settings["max_iters"]):
            print(f"=== {v} seed {seed}: finished (its log reaches max_iters={settings['max_iters']}), skipped")
        else:
            todo.append((v, seed))
    start, flops = time.time(), run_flops(settings)  # every run of the study has the same settings
    print(estimate(todo, root, keys, flops) if todo else "nothing to train", flush=True)
    data_dir = dataset_dir(settings.get("dataset", ""), settings.get("data_dir", ""))
    if todo and keys.parallel > 1 and settings.get("dataset") in ON_FIRST_USE and not find_shards(data_dir, "train"):
        prepare_on_first_use(settings["dataset"], data_dir)  # train.py would: once here, not by K runs side by side
    running, broken = {}, None  # running: process -> (variant, seed, command, resumed, start time)
    while todo or running:
        while todo and len(running) < keys.parallel and broken is None and fits_budget(start, root, keys, flops):
            v, seed = todo.pop(0)
            proc, cmd, resumed = launch(v, seed, root, keys, extra)
            running[proc] = (v, seed, cmd, resumed, time.time())
        if not running:
            break
        proc = wait_for_one(running)
        v, seed, cmd, resumed, t0 = running.pop(proc)
        seconds = time.time() - t0
        # a diverged run exits non-zero but is itself a result (the stability sweep): record it and go on
        with open(os.path.join(root, "commands.jsonl"), "a") as f:
            f.write(json.dumps({"variant": v, "seed": seed, "command": shlex.join(cmd), "exit_code": proc.returncode,
                                "seconds": round(seconds, 1), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                                "resumed": resumed, "parallel": keys.parallel, "flops": flops}) + "\n")
        print(f"=== {v} seed {seed}: exit code {proc.returncode} after {seconds:.0f} s", flush=True)
        # A new run logs its first evaluation before any step, so one that failed without a log.jsonl never
        # started: the keys, the data or the device, and every other run would fail alike.
        started = os.path.isfile(os.path.join(run_dir(root, v, seed), "log.jsonl"))
        if proc.returncode and not resumed and not started and broken is None:
            broken = (v, seed)
    if todo and broken is None:  # not a failure: what the budget holds is done, and the report can follow
        print(f"=== the budget of {keys.budget_min:g} min leaves {len(todo)} run{'s' * (len(todo) > 1)} untrained: "
              f"{', '.join(f'{v} seed {s}' for v, s in todo)}; the same command trains them later (the finished "
              "runs are skipped)", flush=True)
    if broken and todo:
        where = (f" (in {log_path(root, *broken)})" if keys.parallel > 1 else " (its error is above)")
        fail(f"the run {broken[0]} seed {broken[1]} stopped before its first evaluation{where}; the other "
             f"{len(todo)} would stop the same way, so none of them was started")


def log_path(root, variant, seed):
    return os.path.join(root, "logs", f"{variant}-seed{seed}.txt")


def launch(v, seed, root, keys, extra):
    # train.py will not start a new run over an old one: a folder with a checkpoint is resumed instead
    resume = os.path.isfile(os.path.join(run_dir(root, v, seed), "ckpt.pt"))
    cmd = train_command(v, seed, root, keys.tiny, extra, resume, keys.config, STUDIES[keys.study])
    print(f"\n=== {v} seed {seed}: " + (f"resuming the run in {run_dir(root, v, seed)}" if resume
                                        else f"starting a new run in {run_dir(root, v, seed)}"), flush=True)
    print(shlex.join(cmd), flush=True)
    out = None
    if keys.parallel > 1:  # interleaved outputs would be unreadable: one file per run
        os.makedirs(os.path.dirname(log_path(root, v, seed)), exist_ok=True)
        out = open(log_path(root, v, seed), "a")
        print(f"    its output: {log_path(root, v, seed)}", flush=True)
    env = dict(os.environ)
    if keys.parallel > 1 and "OMP_NUM_THREADS" not in env:
        # K runs side by side share the cores: each takes its share. Otherwise each of them takes every core, and on
        # a CPU they fight over them: on 2 cores, two sink-lab runs side by side took 75 s each (13 s alone, 21 s
        # alone on one thread; 2026-11-25)
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // keys.parallel))
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if out else None, env=env)
    if out:
        out.close()  # the child keeps its own copy of the file
    return proc, cmd, resume


def wait_for_one(running):
    while True:
        for proc in running:
            if proc.poll() is not None:
                return proc
        time.sleep(0.2)


# -----------------------------------------------------------------------------
# The report: every run measured on the same validation windows, each claim decided by stats.RULE

def trained_runs(root, order=STUDY):
    """(variant, seed) of every run with a checkpoint under root: in the study's order (its variants), then the
    other variants."""
    runs = []
    for v in list(order) + [v for v in VARIANTS if v not in order]:
        folder = os.path.join(root, v)
        names = os.listdir(folder) if os.path.isdir(folder) else []
        seeds = sorted(int(n[4:]) for n in names if n.startswith("seed") and n[4:].isdigit()
                       and os.path.isfile(os.path.join(folder, n, "ckpt.pt")))
        runs += [(v, seed) for seed in seeds]
    return runs


def over_seeds(values):
    """A metric over a variant's seeds: {"mean", "lo", "hi", "n"} (lo/hi None for one seed), or None when a run
    lacks it (no gate)."""
    if not values or any(x is None for x in values):
        return None
    mean, lo, hi = mean_ci(values)
    return {"mean": mean, "lo": lo, "hi": hi, "n": len(values)}


def decide(ref_windows, var_windows, stat, direction):
    """stats.compare of two stacks of per-window values (seeds, windows), and the verdict by stats.RULE."""
    c = compare(ref_windows, var_windows, stat)
    word = verdict(c["lo"], c["hi"], direction, 1.0 if stat == "ratio" else 0.0) if c["conclusive"] else \
        "inconclusive (one seed)"
    return {**c, "verdict": word}


def report(root, out_dir, tiny, report_command, study=STUDIES["repro"]):
    from analyze import analyze

    runs = trained_runs(root, study.variants)
    if not runs:
        fail(f"no trained runs under {root}/: run `python repro.py train all --study={study.name}"
             f"{' --tiny' if tiny else ''}` first")
    os.makedirs(out_dir, exist_ok=True)
    # every run on the same windows: the first run's eval windows (config/repro.py: 2,048 windows, ~1M tokens); the
    # plots of single runs (attention maps, gate scores) show each variant's first seed
    summary = analyze([run_dir(root, v, s) for v, s in runs], [f"{v}/seed{s}" for v, s in runs], out_dir,
                      plot_labels=[f"{v}/seed{s}" for v, s in runs if s == min(x for w, x in runs if w == v)])
    commands = {(c["variant"], c.get("seed")): c for c in read_jsonl(os.path.join(root, "commands.jsonl"))}
    records, windows = [], {}
    for (v, seed), r in zip(runs, summary["runs"]):
        cmd = commands.get((v, seed))
        records.append({"variant": v, "seed": seed, **{key: r[key] for key, _, _ in COLUMNS}, "ppl": math.exp(r["val_loss"]),
                        "tokens": r["tokens"], "lr": r["lr"], "iter": r["iter"], "max_iters": r["max_iters"],
                        "nonfinite_steps": r["nonfinite_steps"], "params": r["params"], "model": r["model"],
                        "flags": VARIANTS[v].all_flags, "layers": r["layers"], "command": cmd and cmd["command"],
                        "exit_code": cmd and cmd["exit_code"], "device": summary["device"], "date": summary["date"],
                        "tiny": tiny, **{key: r.get(key) for key, _, _ in MECHANISM_COLUMNS}})
        windows.setdefault(v, []).append(r["per_window"])
    by = {}
    for r in records:
        by.setdefault(r["variant"], []).append(r)
    variants = {v: {"seeds": [r["seed"] for r in rs], **{key: over_seeds([r[key] for r in rs])
                                                         for key, _, _ in COLUMNS + list(MECHANISM_COLUMNS)}}
                for v, rs in by.items()}
    claims = [claim_result(*c, windows, variants) for c in study.claims]
    sweep = sweep_rows(by, windows) if study.name == "repro" else []  # the learning-rate sweep is the GPU study's
    result = {"device": summary["device"], "date": summary["date"], "validation": summary["validation"],
              "rule": RULE, "claims": claims, "sweep": sweep, "variants": variants, "runs": records}
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(result, f, indent=1)
    plots = [os.path.basename(p) for p in summary["plots"]]
    plots = plot_headline(by, variants, root, out_dir) + plots + plot_trends(by, root, out_dir) + \
        plot_sweep(sweep, out_dir)
    with open(os.path.join(out_dir, "REPORT.md"), "w") as f:
        f.write(render_report(result, root, tiny, commands, report_command, plots, summary["runs"], study.title) +
                evaluate_section(out_dir, root))
    print(f"wrote {out_dir}/summary.json and {out_dir}/REPORT.md")


def evaluate_runs(root, report_dir, names, passed, study=STUDIES["repro"]):
    """evaluate.py on every trained seed of the named variants (default: the study's models; the GPU study's
    learning-rate sweep is left out)."""
    import evaluate

    for w in passed:
        if w[2:].partition("=")[0] in SET_FOR_EVALUATE:
            fail(f"{w}: repro.py evaluate sets --runs, --labels and --out_dir ({report_dir}/{EVALUATE_DIR}) itself; "
                 "name variants to choose the runs")
    variants = chosen_variants(names or ["models" if study.name == "repro" else "all"], study)
    runs = [(v, s) for v, s in trained_runs(root, study.variants) if v in variants]
    if not runs:
        fail(f"no trained runs of {', '.join(variants)} under {root}/: run `python repro.py train ...` first")
    evaluate.main([f"--runs={','.join(run_dir(root, v, s) for v, s in runs)}",
                   f"--labels={','.join(f'{v}/seed{s}' for v, s in runs)}",
                   f"--out_dir={os.path.join(report_dir, EVALUATE_DIR)}", *passed])


def evaluate_section(report_dir, root):
    """REPORT.md's section on evaluate.py's measurements (`repro.py evaluate`), when there are any: each headline
    number averaged over a variant's seeds."""
    folder = os.path.join(report_dir, EVALUATE_DIR)
    if not os.path.isfile(os.path.join(folder, "summary.json")):
        return ""
    from evaluate import PAPERS_SAY, headline, table

    with open(os.path.join(folder, "summary.json")) as f:
        evaluations = json.load(f)
    by, stale = {}, []
    for r in evaluations["models"]:
        by.setdefault(r["label"].rsplit("/seed", 1)[0], []).append(headline(r))
        ckpt = os.path.join(r.get("run", ""), r.get("checkpoint", ""))
        if not os.path.isfile(ckpt) or os.path.getmtime(ckpt) > os.path.getmtime(os.path.join(folder, "summary.json")):
            stale.append(r["label"])
    columns = list(dict.fromkeys(k for rows in by.values() for row in rows for k in row))
    lines = ["", "## Downstream consequences (evaluate.py)", "",
             f"Measured by `repro.py evaluate` on {evaluations['device']}, {evaluations['date']}; the details, each "
             f"checkpoint with its intervals over windows, in [{EVALUATE_DIR}/summary.md]({EVALUATE_DIR}/summary.md). "
             "Here: the mean over seeds ± the half-width of its 95% t-interval. Δ: the loss increase (nats) with W-bit "
             "weights and A-bit activations, or a sliding window of w keys that keeps the first k positions, over the "
             "same windows unchanged; a RoPE column: the loss of the last positions of the longest windows.", ""]
    if stale:
        lines += [f"**Out of date: the checkpoints of {', '.join(stale)} changed (or are gone from {root}/) since they "
                  "were evaluated; run `python repro.py evaluate` again.**", ""]
    evaluated = {r["label"] for r in evaluations["models"]}
    missing = [f"{v}/seed{s}" for v, s in trained_runs(root) if f"{v}/seed{s}" not in evaluated]
    if missing:
        lines += [f"Not evaluated: {', '.join(missing)} (each `repro.py evaluate` replaces the evaluations before it: "
                  "name every variant wanted in one call).", ""]
    lines += [PAPERS_SAY, ""] + table(["variant", "seeds"] + columns, [
        [v, len(rows)] + [fmt_ci(over_seeds([row.get(c) for row in rows]), ".4f") for c in columns]
        for v, rows in by.items()])
    plots = [p for p in ("quant.png", "length.png", "stream.png") if os.path.isfile(os.path.join(folder, p))]
    return "\n".join(lines + [f"![{p}]({EVALUATE_DIR}/{p})\n" for p in plots])


def stacked(windows, variant, key):
    """A variant's per-window values of one measure as (seeds, windows), or None (not trained, or no gate)."""
    rows = [w[key if key != "val_loss" else "loss"] for w in windows.get(variant, [])]
    return np.stack(rows) if rows and all(x is not None for x in rows) else None


def claim_result(claim, ref, variant, measure, direction, windows, variants):
    name, key, spec, stat, _ = MEASURES[measure]
    var = stacked(windows, variant, key)
    base = np.full_like(var, UNTRAINED_GATE) if ref is None and var is not None else stacked(windows, ref, key)
    out = {"claim": claim, "reference": ref, "variant": variant, "measure": measure, "direction": direction}
    if var is None or base is None:
        missing = " and ".join(x for x in (ref, variant) if x is not None and x not in windows)
        return {**out, "verdict": f"not measured ({missing} not trained)"}
    return {**out, **decide(base, var, stat, direction),
            "ref_mean": UNTRAINED_GATE if ref is None else variants[ref][key]["mean"],
            "var_mean": variants[variant][key]["mean"]}


def sweep_rows(by, windows):
    """One row per learning rate at which SWEPT's two variants were trained (the study's own runs at config/
    repro.py's rate, and the sweep's): each one's loss, M-Act and spikes, and G1 - baseline with its verdict."""
    families = {}  # lr -> {family: variant name}
    for family in SWEPT:
        for v in [family] + [s for s in SWEEP if s.rpartition("_lr")[0] == family]:
            if v in by:
                families.setdefault(by[v][0]["lr"], {})[family] = v
    rows = []
    for lr in sorted(families):
        names = families[lr]
        row = {"lr": lr}
        for family in SWEPT:
            rs = by.get(names.get(family), [])
            row[family] = None if not rs else {  # None: not trained at this rate
                "variant": names[family], "val_loss": over_seeds([r["val_loss"] for r in rs]),
                "max_act": over_seeds([r["max_act"] for r in rs]), "loss_spikes": [r["loss_spikes"] for r in rs],
                "nonfinite_steps": [r["nonfinite_steps"] for r in rs],
                "finished": all(r["iter"] >= r["max_iters"] for r in rs)}
        if all(row[f] for f in SWEPT):
            a, b = (stacked(windows, names[f], "val_loss") for f in SWEPT)
            row["difference"] = decide(a, b, "diff", -1)
        rows.append(row)
    return rows


# -----------------------------------------------------------------------------
# Plots from the runs' logs and the sweep

def plot_trends(by, root, out_dir):
    """F-Attn, sink heads, M-Act and gate mean against tokens seen, from each run's log.jsonl (mean over seeds),
    every variant outside the sweep in each panel: is the sink still growing when the runs end?"""
    plt = pyplot()
    if plt is None:
        return []
    metrics = [("first_token_attn", "F-Attn (attention on the first token)"),
               ("sink_heads", "sink heads (share of heads with F-Attn > 0.3)"),
               ("max_act", "M-Act (max |h| per window)"), ("gate_mean", "gate mean")]
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    shown = [v for v in by if v not in SWEEP]
    colors = {v: plt.get_cmap("tab20")(i % 20) for i, v in enumerate(shown)}  # one colour per variant in every panel
    for ax, (key, title) in zip(axes.flat, metrics):
        for v in shown:
            rs = by[v]
            points = {}
            for r in rs:
                for rec in read_jsonl(os.path.join(run_dir(root, v, r["seed"]), "log.jsonl")):
                    if rec.get(key) is not None:
                        points.setdefault(rec["tokens"], []).append(rec[key])
            if points:
                xs = sorted(points)
                ax.plot([x / 1e6 for x in xs], [np.mean(points[x]) for x in xs], marker=".", label=v, color=colors[v])
        ax.set(xlabel="tokens seen (M)", title=title, yscale="log" if key == "max_act" else "linear")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    return [save(fig, out_dir, "trends.png")]


def plot_headline(by, variants, root, out_dir):
    """The study in one figure: F-Attn during training, baseline against G1 (each seed thin, their mean thick), and
    each variant's final F-Attn (mean over seeds, 95% CI) beside GA Table 4's value where the paper gives one."""
    plt = pyplot()
    if plt is None or not {"baseline", "g1_elementwise"} <= by.keys():
        return []
    fig, (curve, bars) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [1, 1.3]})
    for v, color in (("baseline", "tab:blue"), ("g1_elementwise", "tab:orange")):
        runs = [read_jsonl(os.path.join(run_dir(root, v, r["seed"]), "log.jsonl")) for r in by[v]]
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
    curve.set(xlabel="tokens seen (M)", ylabel="attention on the first token (F-Attn)", ylim=(0, 1),
              title="the sink forming during training")
    curve.legend()
    names = [v for v in by if variants[v]["first_token_attn"] is not None]
    means = [variants[v]["first_token_attn"]["mean"] for v in names]
    err = [[m - (variants[v]["first_token_attn"]["lo"] if variants[v]["first_token_attn"]["lo"] is not None else m)
            for m, v in zip(means, names)],
           [(variants[v]["first_token_attn"]["hi"] if variants[v]["first_token_attn"]["hi"] is not None else m) - m
            for m, v in zip(means, names)]]
    bars.bar(range(len(names)), means, yerr=err, capsize=3, color="tab:gray", label="ours (mean, 95% CI)")
    paper = [(i, VARIANTS[v].ga.f_attn) for i, v in enumerate(names) if VARIANTS[v].ga and VARIANTS[v].ga.f_attn]
    if paper:
        bars.plot(*zip(*paper), "D", color="tab:red", label="GA Table 4 (15B MoE, 400B tokens)")
    bars.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
    bars.set(ylabel="F-Attn at the end", ylim=(0, 1), title="the sink by variant")
    bars.legend(fontsize=8)
    fig.tight_layout()
    return [save(fig, out_dir, "headline.png")]


def plot_sweep(sweep, out_dir):
    """Final val loss, M-Act and loss spikes against the learning rate, baseline and G1 (95% CIs over seeds)."""
    plt = pyplot()
    if plt is None or not sweep:
        return []
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for family in SWEPT:
        rows = [r for r in sweep if r[family]]
        lrs = [r["lr"] for r in rows]
        for ax, key in zip(axes[:2], ("val_loss", "max_act")):
            means = [r[family][key]["mean"] for r in rows]
            err = [[m - (r[family][key]["lo"] if r[family][key]["lo"] is not None else m) for m, r in zip(means, rows)],
                   [(r[family][key]["hi"] if r[family][key]["hi"] is not None else m) - m for m, r in zip(means, rows)]]
            ax.errorbar(lrs, means, yerr=err, marker="o", capsize=3, label=family)
        axes[2].plot(lrs, [np.mean([x or 0 for x in r[family]["loss_spikes"]]) for r in rows], marker="o", label=family)
    axes[0].set(xscale="log", xlabel="learning rate", ylabel="final val loss (nats)", title="loss against learning rate")
    axes[1].set(xscale="log", yscale="log", xlabel="learning rate", ylabel="M-Act", title="massive activations")
    axes[2].set(xscale="log", xlabel="learning rate", ylabel="loss spikes per run", title="loss spikes")
    lrs = sorted({r["lr"] for r in sweep})
    for ax in axes:  # the swept rates as the ticks, written as they are set
        ax.set_xticks(lrs, [f"{lr:g}" for lr in lrs])
        ax.minorticks_off()
    axes[0].legend()
    fig.tight_layout()
    return [save(fig, out_dir, "lr_sweep.png")]


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save(fig, out_dir, name):
    import matplotlib.pyplot as plt
    fig.savefig(os.path.join(out_dir, name), dpi=120)
    plt.close(fig)
    return name


# -----------------------------------------------------------------------------
# REPORT.md

def fmt(x, spec):
    return "–" if x is None else format(x, spec)


def fmt_ci(m, spec):
    """mean ± half-width of its 95% CI over seeds ('mean (1 seed)' without one)."""
    if m is None:
        return "–"
    if m["lo"] is None:
        return f"{m['mean']:{spec}} (1 seed)"
    return f"{m['mean']:{spec}} ± {(m['hi'] - m['lo']) / 2:{spec}}"


def fmt_tokens(n):
    """12,288 / 1.23M / 105M / 2.1B: readable at every scale."""
    if n < 1e6:
        return f"{n:,}"
    if n < 999.5e6:
        return f"{n / 1e6:.3g}M"
    return f"{n / 1e9:.3g}B"


def fmt_difference(c, stat):
    if stat == "ratio":
        return f"×{c['estimate']:.2f} [{c['lo']:.2f}, {c['hi']:.2f}]"
    return f"{c['estimate']:+.4f} [{c['lo']:+.4f}, {c['hi']:+.4f}]"


def status(rs):
    done = sum(r["iter"] >= r["max_iters"] for r in rs)
    words = [f"{done}/{len(rs)} finished"]
    failed = [r for r in rs if r["exit_code"]]
    if failed:
        words.append(f"{len(failed)} exited non-zero")
    skipped = sum(r["nonfinite_steps"] or 0 for r in rs)
    if skipped:
        words.append(f"{skipped} non-finite steps skipped")
    return ", ".join(words)


def render_report(result, root, tiny, commands, report_command, plots, analyzed, title=STUDIES["repro"].title):
    records, variants = result["runs"], result["variants"]
    first, val = records[0], result["validation"]
    m, windows = first["model"], analyzed[0]["eval_windows"]
    seeds = sorted({len(v["seeds"]) for v in variants.values()})
    lines = [f"# {title}" + (": TINY CPU SMOKE TEST" if tiny else ""), ""]
    if tiny:
        lines += ["**This is a smoke test of the pipeline (`repro.py --tiny`: a tiny model trained for a few dozen "
                  "steps on a CPU). It concludes nothing about the papers' claims; the tables below are here only so "
                  "that the pipeline can be checked.**", ""]
    lines += [
        f"Device: {result['device']}. Date: {result['date']}. Runs: `{root}/<variant>/seed<N>/`, "
        f"{'–'.join(map(str, seeds))} seed(s) per variant, each {m['n_layer']} layers, {m['n_embd']} wide, "
        f"{m['n_head']} heads, T={m['block_size']}, qk_norm={m.get('qk_norm')}, "
        f"{fmt_tokens(first['tokens'])} training tokens. Every measurement below comes from the runs' `ckpt.pt`, on "
        f"the same {val['batches'] * val['batch_size']:,} validation windows ({val['batches']} x {val['batch_size']}, "
        f"{fmt_tokens(val['batches'] * val['batch_size'] * windows['block_size'])} tokens"
        f"{', each starting with <|endoftext|>' if windows['bos'] else ''}; {val['source']}).",
        "", "## The papers' claims, decided by rule", "", RULE,
        "The paper's direction is the one it reports; a ratio is the variant's mean over the reference's. "
        "The verdicts are computed by `repro.py report` (stats.py), never written by hand.", "",
        "| claim | measure | ours: reference → variant | difference [95% CI] | verdict | paper | paper source |",
        "| --- | --- | --- | --- | --- | --- | --- |"]
    for c in result["claims"]:
        name, key, spec, stat, paper_numbers = MEASURES[c["measure"]]
        ref = c["reference"] or f"untrained gate ({UNTRAINED_GATE})"
        if "estimate" not in c:
            lines.append(f"| {c['claim']} | {name} | {ref} → {c['variant']} | – | {c['verdict']} | – | – |")
            continue
        ours = f"{ref} → {c['variant']}: {c['ref_mean']:{spec}} → {c['var_mean']:{spec}}"
        theirs, source = paper_text(c["reference"], c["variant"], paper_numbers)
        lines.append(f"| {c['claim']} | {name} | {ours} | {fmt_difference(c, stat)} | **{c['verdict']}** | {theirs} | "
                     f"{source} |")
    lines += sweep_section(result["sweep"])
    lines += ["", "## Measured", "",
              "Mean over seeds ± the half-width of its 95% t-interval. Val loss in nats. F-Attn: attention on the "
              "first token; sink share: the largest share of attention one key receives from the window's second "
              "half; sink heads: the share of heads whose F-Attn exceeds 0.3 (Gu et al. 2025); M-Act: max |h| of each "
              "layer's output in a window; all averaged over layers (GA §4.3) and windows. Peak act: the largest |h| of "
              "any layer in a window (GN's residual-stream maximum). Gate: mean score and share of scores below 0.1. "
              "Loss spikes: per run (train.py's count_spike).", "",
              "| variant | seeds | lr | runs | " + " | ".join(c for _, c, _ in COLUMNS) + " |",
              "| --- " * (4 + len(COLUMNS)) + "|"]
    by = {}
    for r in records:
        by.setdefault(r["variant"], []).append(r)
    for v, rs in by.items():
        lines.append(f"| {v} | {len(rs)} | {rs[0]['lr']:g} | {status(rs)} | " +
                     " | ".join(fmt_ci(variants[v][key], spec) for key, _, spec in COLUMNS) + " |")
    lines += table4_section(by, variants)
    lines += mechanism_section(records, variants, windows["data_dir"])
    lines += sink_section(records, analyzed)
    if not tiny:
        lines += paper_table(by)
    lines += ["", "## Commands run", "",
              f"The last command recorded for each run in `{root}/commands.jsonl` (written by `repro.py train`):", ""]
    for r in records:
        c = commands.get((r["variant"], r["seed"]))
        lines.append(f"- {r['variant']} seed {r['seed']}: " +
                     (f"exit code {c['exit_code']} after {c['seconds']:.0f} s on {c['date']}: `{c['command']}`" if c
                      else "not recorded in commands.jsonl (run by hand?)"))
    lines += ["", f"This report: `{report_command}`", ""]
    if plots:
        lines += ["## Plots", ""] + [f"{PLOT_TEXT.get(p, p)}\n\n![{p}]({p})\n" for p in plots]
    return "\n".join(lines)


PLOT_TEXT = {
    "headline.png": "F-Attn during training, baseline against G1 (each seed thin, their mean thick), and each "
                    "variant's final F-Attn (mean over seeds with its 95% t-interval) beside GA Table 4's.",
    "layers.png": "F-Attn, sink share and M-Act per layer, every run (analyze.py).",
    "gate_hist.png": "The distribution of gate scores of each gated run (sparse: piled up near 0).",
    "attn_maps.png": "One head-averaged attention map per run, at the layer where the first run sinks the most.",
    "curves.png": "Validation loss during training.",
    "trends.png": "F-Attn, sink heads, M-Act and gate mean against tokens seen (mean over seeds): whether the sink "
                  "is still growing when the runs end.",
    "lr_sweep.png": "The stability sweep: final loss, M-Act and loss spikes against the learning rate, baseline and G1.",
}


def sweep_section(sweep):
    if not sweep:
        return []
    a, b = SWEPT
    row = STABILITY_ROW
    lines = ["", "## Stability: the learning-rate sweep", "",
             f"{row} ({row.note}). Here: {a} and {b} at each learning rate (min_lr = lr/10), the difference of their "
             f"final val losses ({b} − {a}, nats, paired on the validation windows) decided by the same rule: the "
             "paper's direction is negative (the gate does better), and it matters most at the highest rate.", "",
             f"| lr | {a} val loss | {b} val loss | {b} − {a} [95% CI] | verdict | {a} M-Act | {b} M-Act | "
             f"{a} spikes | {b} spikes | finished |", "| --- " * 10 + "|"]
    for r in sweep:
        x, y, d = r[a], r[b], r.get("difference")
        lines.append(f"| {r['lr']:g} | {fmt_ci(x and x['val_loss'], '.4f')} | {fmt_ci(y and y['val_loss'], '.4f')} | "
                     f"{fmt_difference(d, 'diff') if d else '–'} | {d['verdict'] if d else 'not measured'} | "
                     f"{fmt_ci(x and x['max_act'], '.1f')} | {fmt_ci(y and y['max_act'], '.1f')} | "
                     f"{spikes(x)} | {spikes(y)} | "
                     f"{'/'.join(('yes' if s['finished'] else 'no') if s else '–' for s in (x, y))} |")
    return lines


def spikes(row):
    """Each seed's loss spikes: '0, 2, 1'."""
    return ", ".join(fmt(n, "d") for n in row["loss_spikes"]) if row else "–"


def mechanism_section(records, variants, data_dir):
    """The sink's mechanism on a task with triggers (the sink lab): each measure's mean over seeds, per variant."""
    if not any(r.get("prev_attn_trigger") is not None for r in records):
        return []
    meta = read_meta(data_dir) or {}
    ideal = f" The task's ideal loss (meta.json) is {meta['ideal_loss']:.4f} nats." if "ideal_loss" in meta else ""
    rows = [[v, len(x["seeds"])] + [fmt_ci(x[key], spec) for key, _, spec in MECHANISM_COLUMNS]
            for v, x in variants.items()]
    return ["", "## The sink's mechanism", "", MECHANISM_NOTE + " Mean over seeds ± the half-width of its 95% "
            "t-interval; each run's value pools its windows, heads and positions of the kind." + ideal, ""] + \
        markdown_table(["variant", "seeds"] + [c for _, c, _ in MECHANISM_COLUMNS], rows)


def table4_section(by, variants):
    """GA Table 4's sink column beside ours: each variant's F-Attn (mean over seeds, 95% CI), how many of its seeds
    grew a sink head, and whether it sits on the same side of the baseline as in the paper."""
    if "baseline" not in by or variants["baseline"]["first_token_attn"] is None:
        return []
    ours_base, theirs_base = variants["baseline"]["first_token_attn"]["mean"], VARIANTS["baseline"].ga.f_attn
    rows = []
    for v, rs in by.items():
        row, ours = VARIANTS[v].ga, variants[v]["first_token_attn"]
        if not (row and row.f_attn is not None and ours):
            continue
        sinks = f"{sum((r['sink_heads'] or 0) > 0 for r in rs)} of {len(rs)}"
        if v == "baseline":
            side = "the reference"
        else:
            same = (ours["mean"] < ours_base) == (row.f_attn < theirs_base)
            side = ("as in GA: " if same else "unlike GA: ") + ("below" if ours["mean"] < ours_base else "above") + \
                " the baseline"
        rows.append([v, fmt_ci(ours, ".3f"), sinks, f"{row.f_attn:.3f}", side])
    return ["", "## GA Table 4's sink column, beside ours", "",
            "F-Attn per variant (mean over seeds ± the half-width of its 95% t-interval), the seeds that grew a sink "
            "head (F-Attn > 0.3 in some head), GA's F-Attn for the same row, and whether the variant's mean sits on the "
            "same side of the baseline's as in GA. A comparison of means, not a verdict: the claims above are decided "
            "by the rule.", ""] + markdown_table(["variant", "F-Attn (ours)", "seeds with a sink head", "GA F-Attn",
                                                  "against the baseline"], rows)


def sink_section(records, analyzed):
    """Per layer, for the first seed of the baseline and of G1: where attention piles up, and on which token."""
    lines = ["", "## Where the sink is", "",
             "Per layer, first seed: F-Attn, the sink share, the share of sink heads, and the key position and token "
             "that most often receive a (window, head)'s largest share (with how often).", ""]
    decode = token_decoder(analyzed[0]["eval_windows"]["data_dir"])
    shown = 0
    for r, a in zip(records, analyzed):
        if r["variant"] not in SWEPT or any(x["variant"] == r["variant"] and x["seed"] < r["seed"] for x in records):
            continue
        L = a["layers"]
        lines += [f"{r['variant']} (seed {r['seed']}):", "",
                  "| layer | F-Attn | sink share | sink heads | top key position | top key token |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for i in range(len(L["first_token_attn"])):
            lines.append(f"| {i} | {fmt(L['first_token_attn'][i], '.3f')} | {fmt(L['sink_share'][i], '.3f')} | "
                         f"{fmt(L['sink_heads'][i], '.2f')} | {L['sink_pos'][i]} ({fmt(L['sink_pos_share'][i], '.0%')}) | "
                         f"{decode(L['sink_token'][i])} ({fmt(L['sink_token_share'][i], '.0%')}) |")
        lines.append("")
        shown += 1
    return lines if shown else []


def token_decoder(data_dir):
    """token id -> `id 'text'` with the dataset's tokenizer, or the bare id when it cannot be loaded."""
    try:
        from data.shards import get_tokenizer, read_meta
        enc = get_tokenizer((read_meta(data_dir) or {}).get("tokenizer", "gpt2"))
    except Exception:  # no tokenizer here: the ids still say which token it is
        enc = None

    def decode(token):
        if token is None:
            return "–"
        if enc is None or token >= enc.n_vocab:
            return f"{token}"
        return f"{token} `{enc.decode([token])!r}`".replace("|", "\\|")
    return decode


def paper_text(ref, variant, numbers):
    """The papers' reference → variant and source for a claim, from the first paper that gives both numbers."""
    if ref is None:  # a property of one run: the paper's value
        row = VARIANTS[variant].ga
        return f"{variant}: {row.gate_mean:.3f}", f"{row.paper} {row.table}"
    pair = paper_pair(ref, variant, numbers)
    if not pair:
        return "–", "–"
    x, y, key, name, spec, source = pair
    change = f"×{y / x:.3f}" if key == "ppl" else f"{y - x:+.3f} nats" if key == "loss" else f"×{y / x:.2f}"
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


def paper_table(by):
    lines = ["", "## The papers' numbers for the same rows", "",
             "GA: 15A2B MoE, 400B tokens, reports perplexity (Tables 1, 3, 4). GN: 2B dense, reports loss and the "
             "residual stream's max activation (Table 1; compare it with our peak act). "
             "Absolute values are not comparable across these scales (model, data, tokenizer, tokens): compare only "
             "the direction and size of the trends.", "",
             "| variant | GA PPL | GN loss | GA gate mean | GA M-Act | GN max act | GA F-Attn | source |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in by:
        v = VARIANTS[name]
        ga, gn = v.ga or Row("GA", "", ""), v.gn or Row("GN", "", "")  # no row in that paper: no numbers
        source = "; ".join(f"{row}" + (f": {row.note}" if row.note else "") for row in (v.ga, v.gn) if row)
        lines.append(f"| {name} | {fmt(ga.ppl, '.3f')} | {fmt(gn.loss, '.3f')} | {fmt(ga.gate_mean, '.3f')} | "
                     f"{fmt(ga.m_act, 'd')} | {fmt(gn.max_act, 'd')} | {fmt(ga.f_attn, '.3f')} | {source or '–'} |")
    return lines


def chosen_variants(names, study=STUDIES["repro"]):
    """Variant names and groups (all: the study's, models, sweep) as the variants, in order, each once."""
    counted = [n for n in names if ":" in n]
    if counted:
        fail(f"{counted[0]}: a number of seeds (NAME:N) is for `repro.py train`; the other steps take every "
             "trained seed of the variants named")
    variants = list(dict.fromkeys(v for n in names for v in groups(study).get(n, [n])))
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        fail((f"unknown variant(s) {', '.join(unknown)}" if unknown else "name the variants") +
             f"; choose 'all' (the study), 'models', 'sweep' or from: {', '.join(VARIANTS)}")
    return variants


def chosen_runs(names, seeds, base_seed, study=STUDIES["repro"]):
    """The (variant, seed) runs `train` names, in the order named, each once: NAME (a variant or a group) takes
    `seeds` seeds, NAME:N takes N (base_seed, base_seed + 1, ...)."""
    counts = []
    for word in names:
        name, colon, n = word.partition(":")
        if colon and not re.fullmatch(r"[1-9][0-9]*", n):
            fail(f"{word}: after the ':' comes the number of seeds, at least 1 (e.g. {name}:2)")
        counts.append((name, int(n) if colon else seeds))
    chosen_variants([name for name, _ in counts], study)  # one line naming an unknown variant, or none named
    return list(dict.fromkeys((v, base_seed + i) for name, n in counts for v in chosen_variants([name], study)
                              for i in range(n)))


def main(argv):
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return
    if not argv:
        sys.exit(__doc__)
    step, words = argv[0], argv[1:]
    if step not in STEPS:
        fail(f"{step!r} is not a step; start with one of {', '.join(STEPS)} (python repro.py --help)")
    names = [w for w in words if not w.startswith("--")]
    own = [w for w in words if w.startswith("--") and w[2:].partition("=")[0] in KEYS]
    passed = [w for w in words if w.startswith("--") and w not in own]  # train.py's keys
    # only `train` passes keys on: for the other steps, configure names any unknown key
    keys, _ = configure(Keys, own if step in ("train", "evaluate") else own + passed)
    if names and step not in ("train", "evaluate"):
        fail(f"`repro.py {step}` takes no variant names, got {' '.join(names)}")
    for key in ("seeds", "parallel"):
        if getattr(keys, key) < 1:
            fail(f"--{key}={getattr(keys, key)} must be at least 1")
    if keys.budget_min < 0:
        fail(f"--budget_min={keys.budget_min:g} must be at least 0 (0: no limit)")
    if keys.study not in STUDIES:
        fail(f"--study={keys.study!r} is not a study; choose one of {', '.join(STUDIES)}")
    study = STUDIES[keys.study]
    root = keys.root or (study.root + "-tiny" if keys.tiny else study.root)
    report_dir = keys.report_dir or (os.path.join(root, "report") if keys.tiny else study.report_dir)

    if step == "list":
        list_variants(study)
    elif step == "prepare":
        prepare()
    elif step == "train":
        for w in passed:
            if w[2:].partition("=")[0] in SET_BY_REPRO:
                fail(f"{w}: repro.py sets --out_dir (<root>/<variant>/seed<N>, see --root), --seed (see --seeds) "
                     "and --init_from (resume when the folder holds a checkpoint) for every run")
        settings = study_settings(keys, passed)
        train(chosen_runs(names, keys.seeds, settings.get("seed", 1337), study), root, keys, passed, settings)
    elif step == "evaluate":
        evaluate_runs(root, report_dir, names, passed, study)
    else:
        try:
            report(root, report_dir, keys.tiny, shlex.join([sys.executable, os.path.join(REPO, "repro.py"), *argv]),
                   study)
        except (ValueError, FileNotFoundError) as e:  # a corrupt checkpoint, too little validation data: one line
            fail(e)


if __name__ == "__main__":
    main(sys.argv[1:])

"""
Reproduce the gated-attention papers' trends on one GPU: the same small model, data order, token budget
and learning-rate schedule (config/repro.py) for each variant of lab/variants.py, several seeds each, then one
analysis of all of them with confidence intervals and a verdict for each of the papers' claims, by rule. From the
repository's root:

    python -m lab.repro list                  # every variant, its flags and the paper rows it is compared with
    python -m lab.repro prepare               # the corpus: .py files of this Python's installed packages
    python -m lab.repro train all --seeds=3              # the study (variants.STUDY), three seeds, one run at a time
    python -m lab.repro train all --seeds=3 --config=config/repro_sink.py   # the committed study's (results/repro/)
    python -m lab.repro train baseline g1_elementwise --max_iters=400
    python -m lab.repro train baseline:2 g1_elementwise:2 g1_headwise --budget_min=18   # what fits, in that order
    python -m lab.repro evaluate              # lab/evaluate.py on the models' checkpoints: out-repro/report/evaluate/
    python -m lab.repro report                # out-repro/report/{summary.json, REPORT.md, commands.jsonl, *.png}
    python -m lab.repro report --report_dir=results/repro   # the same, replacing the committed report
    python -m lab.repro restore --config=config/repro_sink.py   # the kept runs back: no GPU, no data; then
    python -m lab.repro report --report_dir=results/repro   # redraws the committed report (its evaluate/ included)
    python -m lab.repro train all --study=sink_lab --seeds=3 --parallel=2   # the sink lab on a laptop CPU
    python -m lab.repro report --study=sink_lab   # out-sink-lab/report/

Two studies share this runner (--study): `repro`, the GPU study of the papers' trends on real text
(config/repro.py, variants.STUDY), and `sink_lab`, the attention sink on the Bigram-Backcopy task on a CPU
(config/sink_lab.py, variants.LAB: GA Table 4's sink column, the other gate positions and the baseline without a
BOS token), each with its own claims, runs (out-repro/, out-sink-lab/) and committed report (results/repro/,
results/sink_lab/). A report is written to <root>/report/ (git-ignored) unless --report_dir names another folder:
the committed one is replaced only when named so, and the runner says so.

The first word is the step. `train` and `evaluate` take variant names: `all` is the study, `models` its
one-model-each part, `sweep` its learning-rate sweep, and any other name of variants.VARIANTS (g3, glu, ...) that
variant too. After `train`, NAME:N gives each variant NAME names N seeds instead of --seeds' number (baseline:2,
models:3). The runs start in the order named (a variant's seeds one after another), so name first what matters most.
--seeds=N trains each variant with N seeds, the config's seed (1337; --seed=S: S), +1, ...: the seed changes the
initialisation and the order of the training data. --parallel=K runs K trainings side by side on the one device,
which pays only where one run leaves it idle (on a 2-core CPU, the sink lab's tiny runs; not config/repro.py's model
on an H100 or H200, where two side by side each took twice as long as one alone); each run's output then goes to
<root>/logs/<variant>-seed<N>.txt. --budget_min=M starts no run that would end, by the time estimate below, more
than M minutes after `train` began: for a GPU available for a fixed time, the runs that fit are whole and the report
can follow; the runs left out are listed, and the same command trains them later (a budget that admits no run
stops `train` with one line and exit status 1). --config=FILE is applied after the
study's config, e.g. config/repro_sink.py (the known levers of the attention sink, for a baseline sink large enough
to measure). --tiny is a CPU-sized smoke test of the whole pipeline on the default dataset: it concludes nothing.

Every other --key=value after `train` is a train.py key and goes to every run, after the variant's own flags, so it
wins; it is checked as train.py checks it (python train.py --help lists them) before any run is restored or started,
and a key train.py would refuse stops the runner with train.py's own line. Keys that make a variant (DEFINING_KEYS:
gate, gate_act, norm, ...; the sweep's learning rate) are refused there and in a --config: the report names and
compares each run as the variant of its folder, and refuses a run whose keys of these are not what the study's own
config and its variant make them, so a setting of your own is a variant of its own (lab/variants.py). After
`evaluate` it is a key of lab/evaluate.py (--modes=quant, --windows=128, ...): `evaluate` runs it on every finished
seed of the variants named (default: `models`; with --study=sink_lab, `all`, and --modes=quant,stream where no
--modes is given: the lab's learned positions have no length mode) and writes to <report_dir>/evaluate/;
`report` then adds a section of their numbers, averaged over seeds.

The runner starts the project's tools one way, each as its own process (start_tool): train.py for `train`,
`python -m lab.evaluate` for `evaluate`, `python -m lab.analyze` for `report`, each command printed before it starts
so that it can be rerun by hand (from the repository's root). What it reads back is what they write: a run's
log.jsonl and checkpoint; lab/analyze.py's summary.json, summary.md, per_window.npz and figures (in
<root>/analysis/: `report` measures every trained run there, on the same validation windows, then copies its table
and figures to the report); lab/evaluate.py's summary.json.

When a new run stops before its first evaluation (missing data, say), the others would stop the same way, so the
runner starts no more, and exits with status 1. A run that fails otherwise is recorded and the others go on; `train`
then exits with status 4 (RUNS_FAILED_EXIT), naming the failed runs last, so that the report of the others can
follow. A diverged run (train.py's exit status 3) is a result, not a failure. --out_dir and --init_from are the
runner's to set, and each run's --seed (--seed=S sets the first).

Each run goes to <root>/<variant>/seed<N>/ and is nothing more than `python train.py <the study's config>
--out_dir=<root>/<variant>/seed<N> --seed=<N> <the variant's flags> <your keys>`, printed before it starts so
it can be rerun by hand, and recorded (command, exit code, seconds, date) in <root>/commands.jsonl, from which
the report lists the commands actually run. An interrupted study is resumed by the same command: a run whose
checkpoint reaches max_iters (or whose train.py ended it there) is skipped, a run with a checkpoint continues
(--init_from=resume), a run stopped before its first checkpoint (a new run saves only its initial state, as best.pt)
starts again (--overwrite=True: no training is lost), the rest start. Ctrl-C stops the runs as train.py stops on
it, their files whole, and the runner with one line (exit status 130). `report` draws the finished runs alone: a
run with a checkpoint short of max_iters is no seed yet, and REPORT.md names it.
Before it starts, `train` prints an estimate of the time it will take (from the speed of the runs it already timed at
this --parallel, or from the model's FLOPs on a GPU it knows); --budget_min uses the same estimate, updated as runs
end.

A study can grow over several sessions on a borrowed GPU, whose checkpoints go back with the machine. `report` keeps
what it needs of each run in <report_dir>/runs/<variant>/seed<N>/: its log.jsonl, what lab/analyze.py and
lab/evaluate.py measured on its checkpoint (measured.json, measured.npz, evaluated.json) and its command, small files
to commit with the report. `train` puts each kept run that <root> lacks back there (from --report_dir, by default
the committed report), if it was trained with the same
settings (it is then finished, and skipped), and lab/analyze.py and lab/evaluate.py read a run whose checkpoint is
gone from what they kept of it. So the next session trains only the runs still missing, and its report covers them
all; it refuses runs that were not trained alike, or measured on other validation windows. `restore` (with the keys
the study was trained with, e.g. --config=config/repro_sink.py) puts the kept runs back and trains nothing: `report`
then draws the committed study again on any machine, without a GPU or its data (the kept runs compared by the
fingerprint of the windows each was measured on).

This file is the scheduler: its keys, the studies and their claims, the steps (list, prepare, train, restore,
evaluate, report) and main. lab/report.py renders REPORT.md and the study's figures; lab/stats.py decides the
claims.
"""

import contextlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import types
import zipfile
if not __package__:  # run as python lab/repro.py: find the project from its root, as python -m lab.repro does
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dataclasses import dataclass, fields

# cli before torch: its excepthook (cli.one_line_interrupt) makes Ctrl-C while torch loads one line, not a traceback
from cli import (DIVERGED_EXIT, config_path, configure, dataset_dir, device_name, fail, run_config_file, run_main,
                 usage)
import numpy as np
import torch

from data import prepare_if_missing
from data.shards import find_shards
from lab.report import (ANALYSIS_FILES, EVALUATE_DIR, comparison, evaluate_section, grew_sink_head, kept_of_other_run,
    lacks_run_settings, load_windows, older_sink_share, over_seeds, over_variant, paper_effect, plot_headline,
    plot_sweep, plot_trends, render_report, stopped_early, windows_id)
from lab.stats import (COUNT_RULE, RULE, clopper_pearson, compare, count_verdict, decide, direction_word, effect,
    size_word)
from lab.variants import LAB, MODELS, STUDY, SWEEP, SWEPT, VARIANTS
from model import GPT, RUNTIME_FLAGS, GPTConfig
from probe import MEASURE, MEASURES, SINK_HEAD_THRESHOLD, flops_per_token, peak_flops
from runfolder import (BEST, CHECKPOINT, EVALUATED, LOG, MEASURED, MEASUREMENTS, atomic_write, memory_need,
    read_jsonl, result_set, saved_state, write_json, write_text)
from runfolder import claimed as claimed_folder
from train import TrainConfig, check_settings  # train.py's keys and its checks on them, to refuse a key before any run

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above lab/
STEPS = ("list", "prepare", "train", "restore", "evaluate", "report")


@dataclass
class Keys:
    study: str = "repro"  # which study (STUDIES): repro, the GPU study on real text; sink_lab, the CPU lab
    root: str = ""  # where the runs are; "": the study's (out-repro; out-repro-tiny with --tiny)
    report_dir: str = ""  # report/evaluate write here ("": <root>/report); train/restore: kept runs ("": results/STUDY)
    tiny: bool = False  # a CPU smoke test of the pipeline: tiny model, few steps, concludes nothing
    seeds: int = 1  # seeds per variant: the config's seed (train's --seed=S: S), seed + 1, ...
    parallel: int = 1  # runs side by side on the one device
    budget_min: float = 0.0  # start no run estimated to end later than this many minutes after train began; 0: none
    config: str = ""  # a config file applied after the study's (config/repro_sink.py: the sink's levers)


KEYS = {f.name for f in fields(Keys)}
SET_BY_REPRO = ("out_dir", "init_from", "seed")  # train.py keys that the runner decides for every run
# the keys some variant sets (gate, gate_act, norm, ...; the sweep's learning rate, the lab's bos): with the values
# the study's own config gives them, what makes a run the variant its folder names
DEFINING_KEYS = tuple(sorted({k for v in VARIANTS.values() for k in {**v.flags, **v.train}}))
# train.py keys that say how a run was computed, logged or stored, not what it trained: the runs of one report may
# differ in them (a GPU's runs beside a CPU's, a run resumed with --overwrite). Every other train.py key is compared
# across the runs a report draws (report_settings), not only those the study's config names.
INCIDENTAL_KEYS = ("overwrite", "eval_only", "wandb_log", "wandb_project", "wandb_run_name", "log_interval", "device",
                   "backend", "compile", "compile_mode", "sdpa_backend", "data_dir") + tuple(RUNTIME_FLAGS)
SET_FOR_EVALUATE = ("runs", "labels", "out_dir", "pretrained")  # lab/evaluate.py keys that the runner decides
COMMANDS = "commands.jsonl"  # under the root: every train.py command run, with its exit code and time
RUNS_FAILED_EXIT = 4  # `train`'s exit status when runs failed and the others ran: the report can follow (study.sh)
STOP_GRACE, STOP_WAIT = 5, 60  # seconds, after Ctrl-C: for the tools to end on their own, then on the runner's word
ANALYSIS_DIR = "analysis"  # under the root: lab/analyze.py's measurements of every run, for the report
# the files of a report drawn again as one set (the runs it keeps, its packages list and evaluations apart)
REPORT_FILES = ("REPORT.md", "summary.json", "summary.md", COMMANDS, "headline.png", "trends.png", "lr_sweep.png") + \
    tuple(name for name in ANALYSIS_FILES if name.endswith(".png"))
RUNS_DIR = "runs"  # under the report: what it keeps of each run (KEPT and COMMAND), without the checkpoints
KEPT = (LOG, MEASURED + ".json", MEASURED + ".npz", EVALUATED)  # a run's log and the measurements of its checkpoint
COMMAND = "command.json"  # kept beside them: the run's record in commands.jsonl

# The papers' claims, each decided by stats.RULE: (claim, reference, variant, measure (a key of probe.MEASURE), the
# paper's direction: -1 when the paper finds the variant's value below the reference's, +1 above). The reference may
# also be a number, a fixed value to compare the variant with (none of the claims below needs one). A claim that no
# paper makes, on a measure of this project's own, says so: "ours (not a paper's claim): ...".
CLAIMS = [
    ("GA: a sigmoid gate on each head's SDPA output (G1 elementwise) lowers the loss",
     "baseline", "g1_elementwise", "val_loss", -1),
    ("GA: G1 lowers the loss at the baseline's parameter count too (the MLP narrowed to pay for the gate, as in GA's "
     "dense models)", "baseline", "g1_elementwise_matched", "val_loss", -1),
    ("GA: G1's gate scores are sparser than G2's (value gate)", "g2_elementwise", "g1_elementwise", "gate_mean", -1),
    ("GA: G1's gate scores are sparser than a head-shared gate's", "g1_head_shared", "g1_elementwise", "gate_mean",
     -1),
    ("GA: G1's gate scores are sparser than an input-independent gate's", "g1_input_independent", "g1_elementwise",
     "gate_mean", -1),
    ("GA: G1 reduces the attention sink (attention on the first token)", "baseline", "g1_elementwise",
     "first_token_attn", -1),
    ("ours (not a paper's claim): G1 reduces the attention sink wherever it forms (the largest share one key "
     "receives)", "baseline", "g1_elementwise", "sink_share", -1),
    ("GA: G1 reduces the massive activations", "baseline", "g1_elementwise", "max_act", -1),
    ("GA: a head-shared G1 gate keeps more of the sink than head-specific G1",
     "g1_elementwise", "g1_head_shared", "first_token_attn", +1),
    ("GA: NS-sigmoid (scores in [0.5, 1], not sparse) keeps more of the sink than G1",
     "g1_elementwise", "g1_ns_sigmoid", "first_token_attn", +1),
    ("GA: an input-independent gate keeps more of the sink than G1",
     "g1_elementwise", "g1_input_independent", "first_token_attn", +1),
    ("GA: a headwise G1 gate lowers the loss too", "baseline", "g1_headwise", "val_loss", -1),
    ("GA: gating the values (G2) lowers the loss", "baseline", "g2_elementwise", "val_loss", -1),
    ("GA: G2 helps less than G1", "g1_elementwise", "g2_elementwise", "val_loss", +1),
    ("GA: gating after the output projection (G5) helps less than G1", "g1_elementwise", "g5", "val_loss", +1),
    ("GA: NS-sigmoid helps less than the sigmoid gate (sparsity matters)", "g1_elementwise", "g1_ns_sigmoid",
     "val_loss", +1),
    ("GA: an input-independent gate helps less than G1 (input dependence matters)",
     "g1_elementwise", "g1_input_independent", "val_loss", +1),
    ("GA: an additive SiLU gate lowers the loss", "baseline", "g1_additive_silu", "val_loss", -1),
    ("GA: a non-gate non-linearity (RMSNorm of each head's SDPA output) lowers the loss",
     "baseline", "sdpa_rmsnorm", "val_loss", -1),
    ("GN: the gate lowers the residual stream's peak activation", "baseline", "g1_elementwise", "peak_act", -1),
    ("GN: GatedNorm on top of the gate lowers the peak further", "g1_elementwise", "g1_gatednorm", "peak_act", -1),
    ("GN: PreAffine on top of the gate lowers the peak further", "g1_elementwise", "g1_preaffine", "peak_act", -1),
    ("GN: DyT (a bounded norm in RMSNorm's place; ours has no gate) lowers the peak", "baseline", "dyt", "peak_act",
     -1),
    ("GN: DyT costs loss", "baseline", "dyt", "val_loss", +1),
]

# --tiny: a CPU smoke test of the whole pipeline on the embedded default dataset, minutes not hours
TINY = dict(dataset="pystdlib", n_layer=2, n_head=2, n_embd=64, block_size=64, batch_size=8,
            gradient_accumulation_steps=1, max_iters=30, lr_decay_iters=30, warmup_iters=5, eval_interval=15,
            eval_iters=2, log_interval=10, compile=False)

# The sink lab's claims: GA Table 4's sink column, decided on the Bigram-Backcopy task, where a sink forms in minutes
LAB_CLAIMS = [
    ("GA: G1 reduces the attention sink (attention on the first token)", "baseline", "g1_elementwise",
     "first_token_attn", -1),
    ("ours (not a paper's claim): G1 reduces the sink wherever it forms (the largest share one key receives)",
     "baseline", "g1_elementwise", "sink_share", -1),
    ("GA: G1's gate scores are sparser than G2's (value gate)", "g2_elementwise", "g1_elementwise", "gate_mean", -1),
    ("GA: G1's gate scores are sparser than an input-independent gate's", "g1_input_independent", "g1_elementwise",
     "gate_mean", -1),
    ("GA: a headwise G1 gate reduces the sink too", "baseline", "g1_headwise", "first_token_attn", -1),
    ("GA: NS-sigmoid (scores in [0.5, 1], never sparse) keeps more of the sink than G1", "g1_elementwise",
     "g1_ns_sigmoid", "first_token_attn", +1),
    ("GA: an input-independent gate keeps more of the sink than G1", "g1_elementwise", "g1_input_independent",
     "first_token_attn", +1),
    ("GA: a G2 (value) gate keeps more of the sink than G1", "g1_elementwise", "g2_elementwise", "first_token_attn",
     +1),
    ("GA: G1 reduces the massive activations", "baseline", "g1_elementwise", "max_act", -1),
    ("GA: a G2 (value) gate reduces the massive activations (while it keeps the sink)", "baseline", "g2_elementwise",
     "max_act", -1),
    ("GA: G1 lowers the loss", "baseline", "g1_elementwise", "val_loss", -1),
    ("GN: GatedNorm on top of the gate lowers the peak activation", "g1_elementwise", "g1_gatednorm", "peak_act", -1),
    ("GN: PreAffine on top of the gate lowers the peak activation", "g1_elementwise", "g1_preaffine", "peak_act", -1),
    ("GN: DyT (a bounded norm in RMSNorm's place; ours has no gate) lowers the peak activation", "baseline", "dyt",
     "peak_act", -1),
    ("GN: DyT costs loss", "baseline", "dyt", "val_loss", +1),
    ("ours (not a paper's claim): GatedNorm without the gate lowers the peak activation, as GN's reading predicts "
     "(GN's Table 1 has it only with GA)", "baseline", "gatednorm", "peak_act", -1),
]
# The sink lab's claims on a yes/no outcome of each run, whether it grew a sink head (some head's F-Attn above
# probe.SINK_HEAD_THRESHOLD), decided on the counts over seeds by stats.COUNT_RULE: (claim, reference, variant, the
# paper's direction: -1 when the variant's runs grow a sink head less often than the reference's, +1 more often)
LAB_COUNTS = [
    ("GA: G1 removes the sink", "baseline", "g1_elementwise", -1),
    ("GA: headwise G1 removes the sink", "baseline", "g1_headwise", -1),
    ("GA: NS-sigmoid keeps more of the sink than G1", "g1_elementwise", "g1_ns_sigmoid", +1),
    ("GA: an input-independent gate keeps more of the sink than G1", "g1_elementwise", "g1_input_independent", +1),
    ("GA: a G2 (value) gate keeps more of the sink than G1", "g1_elementwise", "g2_elementwise", +1),
]
# --tiny for the sink lab: its own model and data, a few dozen steps
LAB_TINY = dict(max_iters=40, lr_decay_iters=40, warmup_iters=5, eval_interval=20, eval_iters=2, log_interval=20)


@dataclass(frozen=True)
class Study:
    """One study this runner trains and reports: its name (--study), its config (train.py's, before each variant's
    flags), its variants (`all`), its claims, where its runs and report go, its --tiny settings, its report's title."""
    name: str  # its --study name
    config: str  # train.py's config file for every run, before the variant's flags
    variants: tuple  # what `all` trains
    claims: list  # (claim, reference, variant, measure, direction), as CLAIMS
    root: str  # where its runs go by default
    report_dir: str  # its committed report: where `train` and `restore` find kept runs unless --report_dir says
    tiny: dict  # the train.py settings --tiny adds
    title: str  # REPORT.md's title
    counts: list = ()  # (claim, reference, variant, direction), as LAB_COUNTS: decided on counts of seeds, first


STUDIES = {
    "repro": Study("repro", os.path.join("config", "repro.py"), STUDY, CLAIMS, "out-repro",
                   os.path.join("results", "repro"), TINY, "Reproducing the gated-attention trends at small scale"),
    "sink_lab": Study("sink_lab", os.path.join("config", "sink_lab.py"), LAB, LAB_CLAIMS, "out-sink-lab",
                      os.path.join("results", "sink_lab"), LAB_TINY,
                      "The sink lab: the attention sink on the Bigram-Backcopy task", LAB_COUNTS),
}


def groups(study):
    """The names that stand for several variants: `all` (the study's variants), and the GPU study's two parts."""
    return {"all": study.variants, "models": MODELS, "sweep": SWEEP}


def run_dir(root, variant, seed):
    return os.path.join(root, variant, f"seed{seed}")


# -----------------------------------------------------------------------------
# The tools (train.py, lab/analyze.py, lab/evaluate.py, a dataset's prepare.py), run one way: each in its own process

def tool_command(script, args):
    """The argv that runs one of the project's scripts (a path from the repository's root) with this Python: a
    top-level one by its path, a lab tool as a module (python -m lab.analyze), as a user runs it."""
    if script.startswith("lab/"):
        return [sys.executable, "-m", script.removesuffix(".py").replace("/", "."), *args]
    return [sys.executable, os.path.join(REPO, script), *args]


def start_tool(cmd, log=None, env=None):
    """Start a tool's command (tool_command) in its own process, the command printed first so that it can be rerun
    by hand; its output goes to the terminal or, with log, to the end of that file. Returns the process."""
    print(shlex.join(cmd), flush=True)
    out = None
    if log:  # side by side, interleaved outputs would be unreadable: one file per process
        os.makedirs(os.path.dirname(log), exist_ok=True)
        out = open(log, "a")
        print(f"    its output: {log}", flush=True)
    # the lab's tools run as modules of the repository, from whatever folder the runner was started in
    path = os.pathsep.join(filter(None, [REPO, (env or os.environ).get("PYTHONPATH")]))
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if out else None,
                            env=dict(env or os.environ, PYTHONPATH=path),
                            preexec_fn=stop_with_runner())
    if out:
        out.close()  # the child keeps its own copy of the file
    return proc


def stop_with_runner():
    """On Linux, what a tool's process runs before its program starts: the kernel then sends it SIGTERM when the
    runner dies, even killed (kill -9, a closed terminal), so that no tool trains on unwatched, its command
    unrecorded, holding its run folder from the same command run again (train.py's files are whole however it is
    stopped). SIGTERM, not Ctrl-C's SIGINT, which the tools of a background job inherit ignored. Elsewhere None:
    macOS and Windows have no such call, and the same command refuses a folder that an orphan still holds."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # found here: the child, just forked, only calls it
    except (OSError, AttributeError):
        return None
    runner = os.getpid()

    def in_the_tool():
        prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != runner:  # the runner died before the call: no signal will come
            os.kill(os.getpid(), signal.SIGTERM)
    return in_the_tool


@contextlib.contextmanager
def one_interrupt():
    """Within the block Ctrl-C raises KeyboardInterrupt once and the ones after it are ignored, so that nothing cuts
    short the tools' stop (stop_tools): `timeout -s INT` sends the runner two, and a second press would leave a tool
    killed in its stride. Where Ctrl-C is not Python's own (ignored in a background job, or handled by a caller), it
    is left as it is."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    seen = []

    def handler(signum, frame):
        if not seen:
            seen.append(signum)
            raise KeyboardInterrupt
    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def stop_tools(procs):
    """End the tools still running when the runner got Ctrl-C, each as Ctrl-C ends it (train.py: its files whole, a
    line that says where it stopped). Ctrl-C at a terminal reaches them too: they have STOP_GRACE seconds to end on
    it before the runner sends them one (it may have reached the runner alone: kill -INT), then STOP_WAIT seconds
    before they are killed. (Windows sends a console's Ctrl-C to all its processes, and has no SIGINT to send.)"""
    interrupt = (lambda p: p.send_signal(signal.SIGINT)) if os.name == "posix" else (lambda p: p.terminate())
    for seconds, stop in ((STOP_GRACE, interrupt), (STOP_WAIT, lambda p: p.kill())):
        deadline = time.monotonic() + seconds
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        for p in procs:
            if p.poll() is None:
                stop(p)
    for p in procs:
        p.wait()


def run_tool(script, args):
    """Run a tool to its end (start_tool, output on the terminal); a tool that fails stops the runner with one
    line, after the tool's own message."""
    with one_interrupt():
        proc = start_tool(tool_command(script, args))
        try:
            proc.wait()
        except KeyboardInterrupt:  # the tool ends too (stop_tools), and run_main says it in one line
            stop_tools([proc])
            raise
    if proc.returncode:
        fail(f"{script} stopped with exit code {proc.returncode} (its message is above); nothing was written after it")


# -----------------------------------------------------------------------------
# list and prepare

@contextlib.contextmanager
def claimed(*folders):
    """runfolder.claimed for each folder (a folder named twice, once) for the with-block: this process their one
    owner, a folder another process holds one line naming that process, and a folder the block left holding nothing
    but the claim's lock (the command failed before it wrote) left as it was."""
    with contextlib.ExitStack() as claims:  # (released in reverse: a report folder inside the root first)
        for folder in dict.fromkeys(os.path.realpath(f) for f in folders):
            try:
                claims.enter_context(claimed_folder(folder))
            except OSError as e:  # a file of that name, or a folder this user cannot write
                fail(f"{folder} cannot be used as a folder ({e.strerror or e}): choose another --root or "
                     "--report_dir")
        yield


def committed(folder):
    """Whether folder lies in this repository's results/, the committed measurements."""
    results = os.path.join(os.path.realpath(REPO), "results")
    return os.path.commonpath([os.path.realpath(folder), results]) == results


def list_variants(study=STUDIES["repro"]):
    for name, v in VARIANTS.items():
        flags = " ".join(f"--{k}={x}" for k, x in v.all_flags.items())
        rows = "; ".join(str(row) for row in (v.ga, v.gn) if row)
        print(f"{'*' if name in study.variants else ' '} {name:<23} {flags:<52} {rows}")
    if study.name == "repro":
        print(f"* the study ({len(STUDY)} variants: {len(MODELS)} models, {len(SWEEP)} in the learning-rate sweep): "
              "python -m lab.repro train all")
    else:
        print(f"* the {study.name} study ({len(study.variants)} variants, {study.config}): "
              f"python -m lab.repro train all --study={study.name}")


CORPUS_PACKAGES = "packages.txt"  # beside the corpus: the distributions it was built from (prepare)
REPORT_PACKAGES = "corpus-packages.txt"  # the same list, kept with a report of runs trained on that corpus


def corpus_packages(purelib):
    """'name==version' of each distribution installed in purelib, sorted: the packages whose .py files the corpus is
    made of (another list, another corpus)."""
    from importlib import metadata
    return sorted({f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions(path=[purelib])
                   if d.metadata["Name"]}, key=str.lower)


CORPUS = "pysrc"  # the study's dataset (config/repro.py), which prepare builds


def require_corpus(settings, data_dir):
    """Stop with one line when the runs' dataset is the study's corpus and it is not prepared: `prepare` builds it
    (train.py's own advice would name data/textdir/prepare.py, which makes another corpus from another folder)."""
    if settings.get("dataset") == CORPUS and not find_shards(data_dir, "train"):
        fail(f"the study's corpus {CORPUS!r} is not prepared in {data_dir}: run `python -m lab.repro prepare` first "
             "(the .py files of the installed packages)")


def prepare(name=CORPUS):
    """The study corpus: every .py file of the installed packages (de-duplicated, split by file), and beside it the
    list of those packages (CORPUS_PACKAGES), which a report of runs trained on it keeps: the corpus is built again
    from the same packages on the same Python."""
    purelib = sysconfig.get_paths()["purelib"]
    with contextlib.suppress(FileNotFoundError):  # an earlier list: no file of the dataset's (prepared again)
        os.remove(os.path.join(dataset_dir(name), CORPUS_PACKAGES))
    run_tool(os.path.join("data", "textdir", "prepare.py"), ["--src", purelib, "--name", name, "--exts", ".py"])
    write_text(os.path.join(dataset_dir(name), CORPUS_PACKAGES),
               f"# the distributions whose .py files made this corpus (Python {sys.version.split()[0]}, from "
               f"{purelib}): installed in an environment of the same Python, they should give the same corpus\n" +
               "".join(f"{line}\n" for line in corpus_packages(purelib)))


def keep_corpus_packages(root, out_dir, runs, records):
    """Copy the corpus's list of packages (CORPUS_PACKAGES, where prepare wrote one) into the report as
    REPORT_PACKAGES, from the data of the runs measured here (a report drawn from kept runs alone keeps its own);
    where that data has none (prepared before the list was written), an earlier list in the report is taken away."""
    here = [r for (v, seed), r in zip(runs, records)
            if os.path.isfile(os.path.join(run_dir(root, v, seed), CHECKPOINT))]
    if not here:
        return
    config = here[0].get("train_config") or {}  # (every run here is on one corpus: check_kept_data, write_report)
    path = os.path.join(dataset_dir(config.get("dataset", ""), config.get("data_dir", "")), CORPUS_PACKAGES)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            write_text(os.path.join(out_dir, REPORT_PACKAGES), f.read())
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(out_dir, REPORT_PACKAGES))


# -----------------------------------------------------------------------------
# Training: the runs one after another, or K side by side

def train_command(variant, seed, root, tiny=False, extra=(), resume=False, config="", study=STUDIES["repro"],
                  restart=False):
    """The exact train.py argv of one run. The user's extra flags come last, so they win. resume: continue the
    run's checkpoint; restart: replace what a run that stopped before its first checkpoint left (restartable)."""
    flags = {**(study.tiny if tiny else {}), **VARIANTS[variant].all_flags}
    return tool_command("train.py", [os.path.join(REPO, study.config)] + ([config] if config else []) +
                        [f"--out_dir={run_dir(root, variant, seed)}", f"--seed={seed}"] +
                        [f"--{k}={v}" for k, v in flags.items()] +
                        (["--init_from=resume"] if resume else ["--overwrite=True"] if restart else []) + list(extra))


def train_config(args):
    """train.py's config for these arguments, read and checked as train.py reads and checks its own (cli.configure
    on its TrainConfig, then its check_settings): a key it would refuse stops here with train.py's own line."""
    c, _ = configure(TrainConfig, args)
    check_settings(c)
    return c


def study_settings(keys, extra):
    """The train.py settings every run shares, as train.py will read them (the study's config, --config, --tiny,
    then the user's keys): the seeds, the run length and the model size come from here. A key train.py would refuse
    stops here with its line (train_config), before anything is restored, counted or started."""
    scope, study = {}, STUDIES[keys.study]
    for path in [study.config] + ([keys.config] if keys.config else []):
        full = config_path(path)
        if full is None:
            fail(f"--config={path}: no such config file")
        run_config_file(path, full, scope)
    tiny = study.tiny if keys.tiny else {}
    # a config file's imports and helpers are no settings (cli.configure skips them alike)
    names = [k for k, v in scope.items() if not (k.startswith("_") or isinstance(v, types.ModuleType) or callable(v))]
    names += list(tiny) + [word[2:].partition("=")[0] for word in extra]
    c = train_config([study.config] + ([keys.config] if keys.config else []) +
                     [f"--{k}={v}" for k, v in tiny.items()] + list(extra))
    return {k: getattr(c, k) for k in dict.fromkeys(names)}  # each as train.py types it (--compile: True)


def report_settings(keys):
    """The train.py settings in which the runs of one report must not differ beyond what their variants set: those
    the study's config (and --config) name first, then every other train.py key but INCIDENTAL_KEYS and the
    runner's own (SET_BY_REPRO). A run trained with a key the config does not name (--qk_norm=True, --dropout=0.2)
    is then refused beside runs trained without it, not pooled with them as the same variant."""
    named = list(study_settings(keys, []))
    return named + [f.name for f in fields(TrainConfig) if f.name not in named and f.name not in INCIDENTAL_KEYS
                    and f.name not in SET_BY_REPRO]


def check_run_keys(runs, root, keys, extra):
    """Each run's train.py command (train_command: its variant's flags, then the user's keys) checked as train.py will
    check it (train_config), so that a key that fits the study's settings but not a variant's stops before any run;
    and as `report` will (mislabelled): the user's keys and --config may change the study's settings for every run,
    not the keys that make a variant (GA's sigmoid rows beside a SiLU gate)."""
    study = STUDIES[keys.study]
    planned = [{"variant": v, "seed": seed, "train_config": vars(train_config(
        train_command(v, seed, root, keys.tiny, extra, config=keys.config, study=study)[2:]))} for v, seed in runs]
    wrong = mislabelled(planned, keys.tiny, study)
    if wrong:
        fail(f"these keys would train {wrong[0]}{'; ...' if len(wrong) > 1 else ''}, but the report names and "
             "compares each run as the variant of its folder, so the keys that make a variant (gate, gate_act, norm, "
             "...: lab.repro.DEFINING_KEYS) keep their values: give a setting of your own a variant of its own (a "
             "line in lab/variants.py's VARIANTS, and in CONTROLS where no paper has its row: docs/flags.md, 'Adding "
             "a variant of your own')")


def reached(folder):
    """The iteration of the state a run folder holds: its checkpoint's, else that of the measurement kept of it (a
    run restored from a report), else 0. Never its log's: train.py logs an evaluation before it saves the state, so
    a run stopped during that save (Ctrl-C, a full disk) has logged an iteration that no file holds."""
    try:
        state = saved_state(os.path.join(folder, CHECKPOINT))
    except ValueError:  # unreadable: no state to count (train and report say why when they read it)
        state = None
    if state:
        return state[0]
    measured = os.path.join(folder, MEASURED + ".json")
    if os.path.isfile(measured):
        with open(measured) as f:
            return json.load(f).get("iter") or 0
    return 0


def run_done(folder, commands, max_iters):
    """Whether the run in folder is done: the state it holds reached max_iters (reached); or its last command (the
    last of commands, its records) ended as train.py ends a finished run, exit status 0 with the log at max_iters
    (with --always_save_checkpoint=False, or a last state not finite, no file holds that state), or stopped it as
    diverged (cli.DIVERGED_EXIT: the stability sweep's result, which training it again would only repeat)."""
    log = read_jsonl(os.path.join(folder, LOG))
    if not log:
        return False
    code = commands[-1].get("exit_code") if commands else None
    return code == DIVERGED_EXIT or code == 0 and log[-1].get("iter", 0) >= max_iters or reached(folder) >= max_iters


def finished(root, variant, seed, max_iters):
    """run_done() for a run under root, by the commands that root's commands.jsonl records for it."""
    commands = read_jsonl(os.path.join(root, COMMANDS))
    commands = [c for c in commands if (c.get("variant"), c.get("seed")) == (variant, seed)]
    return run_done(run_dir(root, variant, seed), commands, max_iters)


# The share of a GPU's peak bf16 FLOP/s that config/repro.py's runs reached together, two side by side on an H100,
# 0.11 each: a median of 326 s for 105M tokens at 0.33 GFLOP a token, evaluations and compilation included (six runs
# on 2026-11-25, results/study-h100-2026-11-25/commands.jsonl; 290 s on 2026-11-22). K runs side by side are taken to
# share it, 1/K each: one alone at 0.22 (one alone on an H200 reached 0.24-0.26, results/repro/commands.jsonl).
GPU_PEAK_SHARE = 0.22


def run_memory(settings, configs):
    """A line: the memory one training step of a run with these settings needs, by train.py's own estimate
    (runfolder.step_memory, deliberately low: a device it refuses surely lacks the memory); configs: its files."""
    names = {f.name for f in fields(GPTConfig)}  # loss_chunk too: it decides how many logits are held at once
    with torch.device("meta"):
        model = GPT(GPTConfig(**{k: v for k, v in settings.items() if k in names}))
    need = memory_need(settings["batch_size"], model.config, model.num_params(), "the device")
    return (f"each run of {' + '.join(configs)}: {need}, deliberately low; train.py refuses a device with less free "
            "memory, and names a split of the batch that fits")


def run_flops(settings, variant):
    """The training FLOPs of one run of `variant` with these shared settings: its model's FLOPs per token (the
    variant's flags on the settings, as train_command passes them) times its tokens."""
    settings = {**settings, **VARIANTS[variant].all_flags}
    names = {f.name for f in fields(GPTConfig)} - set(RUNTIME_FLAGS)  # the model, not how a run computed it
    with torch.device("meta"):
        model = GPT(GPTConfig(**{k: v for k, v in settings.items() if k in names}))
    tokens = settings["max_iters"] * settings["batch_size"] * settings.get("gradient_accumulation_steps", 1) * \
        model.config.block_size
    return flops_per_token(model) * tokens


def this_device():
    """The device lab.repro's runs train on (train.py's device='auto' picks CUDA when there is one), in words."""
    return device_name("cuda" if torch.cuda.is_available() else "cpu")


def seconds_per_run(root, keys, flops):
    """(seconds, where the number comes from) for one run: the median speed (seconds per FLOP) of the earlier complete
    runs timed on this device at this --parallel, times this run's FLOPs, so runs of another length or size count
    too; or else the FLOPs at GPU_PEAK_SHARE / K of a known GPU's peak, K = --parallel (until runs at this K have
    been timed); (None, why not) when neither is known. flops: run_flops of the run. A
    run to resume is counted whole. Another GPU's times never count: a budget filled by an H200's times would overrun
    on an H100."""
    here = this_device()
    past = [c["seconds"] / c["flops"] for c in read_jsonl(os.path.join(root, COMMANDS))
            if c.get("flops") and c.get("exit_code") == 0 and not c.get("resumed", True)
            and c.get("parallel", 1) == keys.parallel and c.get("device") == here]
    if past:
        return float(np.median(past)) * flops, f"the median speed of {len(past)} earlier runs on {here}"
    peak = peak_flops()  # None off CUDA or on a GPU it does not know
    if peak is None:
        return None, "no earlier run timed here, and no GPU whose peak FLOP/s is known"
    share = GPU_PEAK_SHARE / keys.parallel
    return flops / (share * peak), f"FLOPs at {share:.0%} of the GPU's peak, {keys.parallel} run(s) side by side"


def estimate(todo, root, keys, flops):
    """A line saying how long the runs to do will take (seconds_per_run for each, K at a time; flops: run_flops of the
    largest of them, so that a study of several variants is not underestimated)."""
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


def check_trained_alike(runs, root, settings):
    """Before any data is prepared or run started: a run continues, or counts as finished, only with the settings it
    was trained with. One resumed with others would mix two settings in one run (a checkpoint records only the
    last); a finished one would pass for them."""
    otherwise = []
    for v, seed in runs:
        if any(os.path.isfile(os.path.join(run_dir(root, v, seed), n)) for n in (CHECKPOINT, MEASURED + ".json")):
            off = differences(settings, run_settings(root, v, seed), v)
            otherwise += [f"{v} seed {seed}: {', '.join(off)}"] if off else []
    if otherwise:
        fail(f"runs under {root}/ were trained with other settings than these ({otherwise[0]}"
             f"{'; ...' if len(otherwise) > 1 else ''}): a run cannot continue, or count as finished, with settings "
             "it was not trained with. Give the keys they were trained with, or another --root for these settings")


def train(runs, root, keys, extra, settings):
    """Train the runs not finished, K at a time (keys.parallel), within the budget. Returns when every run it started
    ended well or diverged (a result); stops (fail) when a new run failed before its first evaluation (every other
    would fail alike: none is started), exits with RUNS_FAILED_EXIT when runs failed and the others ran, and with 130
    on Ctrl-C, the runs stopped as train.py stops on Ctrl-C."""
    os.makedirs(root, exist_ok=True)
    todo = []
    for v, seed in runs:
        if finished(root, v, seed, settings["max_iters"]):
            print(f"=== {v} seed {seed}: finished (at max_iters={settings['max_iters']}, or it diverged), "
                  "skipped")
        else:
            todo.append((v, seed))
    start, flops = time.time(), {v: run_flops(settings, v) for v in dict.fromkeys(v for v, _ in todo)}
    print(estimate(todo, root, keys, max(flops[v] for v, _ in todo)) if todo else "nothing to train", flush=True)
    data_dir = dataset_dir(settings.get("dataset", ""), settings.get("data_dir", ""))
    if todo and keys.parallel > 1:  # train.py would prepare it: once here, not by K runs side by side
        prepare_if_missing(settings.get("dataset", ""), data_dir)
    running, broken, failed = {}, None, []  # running: process -> (variant, seed, command, resumed, start time)
    launched = 0  # runs started here
    with one_interrupt():  # (a second Ctrl-C waits for the runs to stop)
        try:
            while todo or running:
                while todo and len(running) < keys.parallel and broken is None and \
                        fits_budget(start, root, keys, flops[todo[0][0]]):
                    v, seed = todo.pop(0)
                    launched += 1
                    proc, cmd, resumed = launch(v, seed, root, keys, extra)
                    running[proc] = (v, seed, cmd, resumed, time.time())
                if not running:
                    break
                proc = wait_for_one(running)
                v, seed, cmd, resumed, t0 = running.pop(proc)
                seconds = record_run(root, keys, flops[v], proc, v, seed, cmd, resumed, t0)
                print(f"=== {v} seed {seed}: exit code {proc.returncode} after {seconds:.0f} s", flush=True)
                # a diverged run exits non-zero but is itself a result (the stability sweep): it is no failure
                if proc.returncode not in (0, DIVERGED_EXIT):
                    failed.append((v, seed, proc.returncode))
                # A new run logs its first evaluation before any step, so one that failed without a log.jsonl of its
                # own never started: the keys, the data or the device, and every other run would fail alike. (A run
                # started again over one stopped early finds that one's log: only a log written since counts.)
                log = os.path.join(run_dir(root, v, seed), LOG)
                started = os.path.isfile(log) and os.path.getmtime(log) >= t0 - 1
                if proc.returncode and not resumed and not started and broken is None:
                    broken = (v, seed)
        except KeyboardInterrupt:  # Ctrl-C: the runs stop as train.py stops on it, their files whole, and are recorded
            stop_tools(list(running))
            for proc, (v, seed, cmd, resumed, t0) in running.items():
                record_run(root, keys, flops[v], proc, v, seed, cmd, resumed, t0)
            stopped = ", ".join(f"{v} seed {seed}" for v, seed, *_ in running.values())
            print(f"interrupted (Ctrl-C){f'; stopped {stopped}' if stopped else ''}: the same command continues "
                  "the study (the finished runs are skipped, a run with a checkpoint resumes, the others start again)",
                  file=sys.stderr, flush=True)
            raise SystemExit(130)
    if todo and not launched:  # the budget admits no run: nothing new to evaluate or report, and the time is lost
        per_run, how = seconds_per_run(root, keys, flops[todo[0][0]])
        fail(f"the budget of {keys.budget_min:g} min admits none of the {len(todo)} runs to train: one takes about "
             f"{per_run / 60:.1f} min, by {how}; give --budget_min={math.ceil(per_run / 60)} or more (0: no limit)")
    if todo and broken is None:  # not a failure: what the budget holds is done, and the report can follow
        print(f"=== the budget of {keys.budget_min:g} min leaves {len(todo)} run{'s' * (len(todo) > 1)} untrained: "
              f"{', '.join(f'{v} seed {s}' for v, s in todo)}; the same command trains them later (the finished "
              "runs are skipped)", flush=True)
    if broken and todo:
        where = (f" (in {log_path(root, *broken)})" if keys.parallel > 1 else " (its error is above)")
        others = ", ".join(f"{v} seed {s} (exit code {code})" for v, s, code in failed if (v, s) != broken)
        fail(f"the run {broken[0]} seed {broken[1]} stopped before its first evaluation{where}; the other "
             f"{len(todo)} would stop the same way, so none of them was started" +
             (f"; failed too: {others}" if others else ""))
    if failed:  # the others ran: a failure all the same, said last, after whatever the budget left
        where = f"in {root}/logs/" if keys.parallel > 1 else "above"
        print(f"error: {len(failed)} of the runs failed: "
              f"{', '.join(f'{v} seed {s} (exit code {code})' for v, s, code in failed)}; their errors are {where}. "
              "The same command trains them again (the finished runs are skipped)", file=sys.stderr, flush=True)
        raise SystemExit(RUNS_FAILED_EXIT)


def record_run(root, keys, flops, proc, v, seed, cmd, resumed, t0):
    """Append one ended train.py command (its exit code, its time) to <root>/commands.jsonl; returns its seconds."""
    seconds = time.time() - t0
    with open(os.path.join(root, COMMANDS), "a") as f:
        f.write(json.dumps({"variant": v, "seed": seed, "command": shlex.join(cmd), "exit_code": proc.returncode,
                            "seconds": round(seconds, 1), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                            "resumed": resumed, "parallel": keys.parallel, "flops": flops,
                            "device": this_device()}) + "\n")
    return seconds


def log_path(root, variant, seed):
    return os.path.join(root, "logs", f"{variant}-seed{seed}.txt")


def restartable(folder):
    """Whether a run folder without a checkpoint holds only what a new run writes before its first ckpt.pt: its log
    and best.pt with the initial state (iter 0; train.py saves no ckpt.pt then, which would read as a new run), no
    measurements. Such a run was stopped (Ctrl-C, a kill) before its first checkpoint; started again from scratch
    (--overwrite=True) it loses no training. Anything more (a later state in best.pt, a kept run's measurements) is
    left to train.py, which refuses to replace it."""
    held = [n for n in (LOG, BEST) + MEASUREMENTS if os.path.lexists(os.path.join(folder, n))]
    if not held or set(held) - {LOG, BEST}:
        return False
    try:
        best = saved_state(os.path.join(folder, BEST))
    except ValueError:  # not a state train.py saved: not ours to replace
        return False
    return best is None or best[0] == 0


def launch(v, seed, root, keys, extra):
    # train.py will not start a new run over an old one: a folder with a checkpoint is resumed instead, and the
    # remains of a run stopped before its first checkpoint are replaced (restartable)
    folder = run_dir(root, v, seed)
    resume = os.path.isfile(os.path.join(folder, CHECKPOINT))
    restart = not resume and restartable(folder)
    cmd = train_command(v, seed, root, keys.tiny, extra, resume, keys.config, STUDIES[keys.study], restart)
    print(f"\n=== {v} seed {seed}: " + (f"resuming the run in {folder}" if resume else
                                        f"starting the run in {folder} again: it stopped before its first checkpoint"
                                        if restart else f"starting a new run in {folder}"), flush=True)
    env = dict(os.environ)
    if keys.parallel > 1 and "OMP_NUM_THREADS" not in env:
        # K runs side by side share the cores: each takes its share. Otherwise each of them takes every core, and on
        # a CPU they fight over them: on 2 cores, two sink-lab runs side by side took 75 s each (13 s alone, 21 s
        # alone on one thread; 2026-11-25)
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // keys.parallel))
    return start_tool(cmd, log_path(root, v, seed) if keys.parallel > 1 else None, env), cmd, resume


def wait_for_one(running):
    while True:
        for proc in running:
            if proc.poll() is not None:
                return proc
        time.sleep(0.2)


# -----------------------------------------------------------------------------
# Evaluate: lab/evaluate.py on the checkpoints trained so far

def trained_runs(root, order=STUDY, unusable=None):
    """(variant, seed) of every run under root with a checkpoint, or with the measurements lab/analyze.py kept of
    its checkpoint when that is gone: in the study's order (its variants), then the other variants. Kept
    measurements that cannot be read, or that are an earlier run's (the folder reused), count as absent, with a
    note (and in unusable, where given, {(variant, seed): why} for the report to name)."""
    runs = []
    for v in list(order) + [v for v in VARIANTS if v not in order]:
        folder = os.path.join(root, v)
        names = os.listdir(folder) if os.path.isdir(folder) else []
        seeds = sorted(int(n[4:]) for n in names if n.startswith("seed") and n[4:].isdigit() and any(
            os.path.isfile(os.path.join(folder, n, f)) for f in (CHECKPOINT, MEASURED + ".json")))
        for seed in seeds:
            problem = kept_problem(run_dir(root, v, seed))
            if problem:
                print(f"note: {v} seed {seed} left out: its {CHECKPOINT} is not in {run_dir(root, v, seed)}, and "
                      f"{problem}", flush=True)
                if unusable is not None:
                    unusable[(v, seed)] = f"{v} seed {seed} (no {CHECKPOINT}, and {problem})"
            else:
                runs.append((v, seed))
    return runs


def kept_problem(folder):
    """Why the measurement kept in a run folder without its checkpoint cannot stand for the run, or ''."""
    if os.path.isfile(os.path.join(folder, CHECKPOINT)):
        return ""
    try:
        with open(os.path.join(folder, MEASURED + ".json")) as f:
            record = json.load(f)
        record["train_config"].items()
        with np.load(os.path.join(folder, MEASURED + ".npz")) as arrays:
            arrays.files
    except (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile) as e:
        return f"the measurement kept of it cannot be read ({MEASURED}.json, .npz: {type(e).__name__})"
    return kept_of_other_run(folder, record, MEASURED + ".json")


# -----------------------------------------------------------------------------
# A study over several sessions: a borrowed GPU machine goes back with the checkpoints on it, so the report keeps
# what it needs of each run (its log, lab/analyze.py's and lab/evaluate.py's measurements of its checkpoint, its
# command) in <report_dir>/runs/, small files committed with the report; `train` puts them back on the next machine.

def differences(settings, config, variant):
    """The study's settings in which a run's training config differs, as 'key=theirs (here: ours)' words, leaving
    out what the variant sets itself, what the runner sets for each run and how a run is computed (INCIDENTAL_KEYS)."""
    own = set(VARIANTS[variant].all_flags) | set(SET_BY_REPRO) | set(INCIDENTAL_KEYS)
    same = lambda a, b: json.dumps(a) == json.dumps(b)  # noqa: E731 (as JSON keeps them: a tuple is a list)
    return [f"{k}={config.get(k)!r} (here: {v!r})" for k, v in settings.items() if k not in own
            and not same(config.get(k), v)]


def keep_runs(root, report_dir, runs, commands):
    """What the report keeps of each run (KEPT, and its command as COMMAND) in <report_dir>/runs/<variant>/seed<N>/:
    {path: bytes}, read now and written by write_kept once the report is in place, so that a report that stops
    before (Ctrl-C while plotting, a claim it cannot decide) leaves the runs its folder keeps as they were."""
    out = {}
    for v, seed in runs:
        source, kept = run_dir(root, v, seed), run_dir(os.path.join(report_dir, RUNS_DIR), v, seed)
        for name in KEPT:
            if os.path.isfile(os.path.join(source, name)):
                with open(os.path.join(source, name), "rb") as f:
                    out[os.path.join(kept, name)] = f.read()
        if (v, seed) in commands:
            out[os.path.join(kept, COMMAND)] = json.dumps(commands[(v, seed)]).encode()
    return out


def write_kept(files):
    """keep_runs' files, each atomically."""
    for path, data in files.items():
        atomic_write(path, lambda f, data=data: f.write(data))


def kept_records(report_dir):
    """What <report_dir>/runs/ keeps of each run ({variant, seed, train_config}): what restore_runs puts back, and
    what a report must not replace with runs trained otherwise."""
    kept = os.path.join(report_dir, RUNS_DIR)
    out = []
    for v, seed in trained_runs(kept):
        path = os.path.join(run_dir(kept, v, seed), MEASURED + ".json")
        if os.path.isfile(path):  # (a folder of runs with their checkpoints, named as a report: nothing kept)
            with open(path) as f:
                out.append({"variant": v, "seed": seed, "train_config": json.load(f)["train_config"]})
    return out


def kept_trained_otherwise(report_dir, settings):
    """'variant seed N: key=theirs (here: ours), ...' for each run <report_dir>/runs/ keeps that was trained with other
    settings than these (differences)."""
    return [f"{r['variant']} seed {r['seed']}: {', '.join(off)}" for r in kept_records(report_dir)
            for off in [differences(settings, r["train_config"], r["variant"])] if off]


def restore_runs(root, report_dir, settings):
    """Put back under root each run kept in <report_dir>/runs/ that root lacks, if it was trained with these
    settings: it then counts as trained (its measurements stand for its checkpoint) and finished (as finished() would
    count it), and its command joins commands.jsonl. A kept run trained otherwise is named and left out."""
    kept = os.path.join(report_dir, RUNS_DIR)
    # seeds: variant -> the seeds restored; otherwise: the commands of those trained otherwise; left: why each of
    # the runs not restored was not
    restored, seeds, otherwise, left = [], {}, [], []
    runs = [(r, read_jsonl(os.path.join(run_dir(kept, r["variant"], r["seed"]), COMMAND)))  # [] where none was kept
            for r in kept_records(report_dir)]
    # in the order they were trained (their last command's date): commands.jsonl as the sessions wrote it, so that a
    # report drawn again writes the commands.jsonl it keeps
    for r, command in sorted(runs, key=lambda run: run[1][-1].get("date", "") if run[1] else ""):
        v, seed = r["variant"], r["seed"]
        source, target = run_dir(kept, v, seed), run_dir(root, v, seed)
        if os.path.exists(target):
            continue
        off = differences(settings, r["train_config"], v)
        wanted = settings.get("max_iters", 0)
        if off or not run_done(source, command, wanted):  # an unfinished run cannot resume without its checkpoint
            why = f"it was trained with {', '.join(off)}" if off else \
                f"it was measured at iter {reached(source)} of {wanted}"
            left.append(f"{v} seed {seed}, kept in {kept}/, not restored: {why}")
            otherwise += [c["command"] for c in command[-1:] if off and c.get("command")]
            continue
        partial = target + ".restoring"  # copied whole, then renamed: a run is back entirely or not at all
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(source, partial)
        if command:
            with open(os.path.join(root, COMMANDS), "a") as out:
                out.write(json.dumps(command[-1]) + "\n")
        os.replace(partial, target)
        restored.append(f"{v} seed {seed}")
        seeds.setdefault(v, []).append(seed)  # for the line below
    for line in left[:5]:  # (a committed report keeps 185 runs: five lines say enough)
        print(f"=== {line}")
    if len(left) > 5:
        print(f"=== ... and {len(left) - 5} more kept runs not restored", flush=True)
    if otherwise:  # e.g. restore without the --config they were trained with: the one their commands were given
        configs = {tuple(w for w in shlex.split(c)[3:] if w.endswith(".py") and not w.startswith("--"))
                   for c in otherwise}  # (after python, train.py and the study's config)
        hint = f" (--config={next(iter(configs))[0]}, as in their command.json)" if len(configs) == 1 and \
            len(next(iter(configs))) == 1 else ""
        print(f"=== {len(otherwise)} kept runs were not restored for their settings: give the keys they were trained "
              f"with{hint}", flush=True)
    if restored:
        listed = "; ".join(f"{v} seed{'s' * (len(s) > 1)} {', '.join(map(str, sorted(s)))}" if len(s) <= 3 else
                           f"{v} {len(s)} seeds from {min(s)} to {max(s)}" for v, s in seeds.items())  # for 160 too
        print(f"=== measured in an earlier session, restored from {kept}/ (their checkpoints are not here): "
              f"{len(restored)} run{'s' * (len(restored) > 1)}: {listed}", flush=True)
    return restored


def check_kept_data(root, settings, kept_from=""):
    """Before any training: the runs kept from an earlier session (their checkpoints gone) were measured on
    validation windows whose fingerprint their record keeps. Where this machine's data gives other windows (the
    corpus built from other installed packages, say), a run trained now would not compare with them, and the report
    would refuse them only after the training time was spent: refuse now, preparing the data first where train.py
    would prepare it on first use. kept_from: the report they were kept in, whose list of the corpus's packages
    (REPORT_PACKAGES) the refusal names."""
    kept = [(v, seed) for v, seed in trained_runs(root)
            if not os.path.isfile(os.path.join(run_dir(root, v, seed), CHECKPOINT))]
    data_dir = dataset_dir(settings.get("dataset", ""), settings.get("data_dir", ""))
    if kept:
        prepare_if_missing(settings.get("dataset", ""), data_dir)
    if not kept:
        return
    if not find_shards(data_dir, "val"):  # no data and none to prepare: train.py says what to do
        print(f"note: {data_dir}/ holds no validation shards, so the data was not checked against the "
              f"{len(kept)} kept runs", flush=True)
        return
    seen = {}  # the windows (as JSON) -> their fingerprint here
    for v, seed in kept:
        folder = run_dir(root, v, seed)
        with open(os.path.join(folder, MEASURED + ".json")) as f:
            record = json.load(f)
        windows = {**record["eval_windows"], "data_dir": data_dir}
        key = json.dumps(windows, sort_keys=True)
        if key not in seen:
            seen[key] = windows_id(load_windows(windows))
        if seen[key] != record["windows_id"]:
            fail(f"{data_dir}/ is not the data that {v} seed {seed} (kept from {record.get('measured_on')}) was "
                 f"measured on: its validation windows give the fingerprint {seen[key]} here, "
                 f"{record['windows_id']} there, so runs trained now would not compare with the kept ones. Prepare "
                 f"the data as it was ({how_it_was_prepared(kept_from)}), or train a study of your own on this data, "
                 "which restores none of the kept runs: --root and --report_dir of its own (an empty report folder)")
    print(f"=== {data_dir}/ gives the validation windows the {len(kept)} kept runs were measured on", flush=True)


def how_it_was_prepared(kept_from):
    """How to prepare the data of the runs kept in the report kept_from again: with the Python and the packages its
    REPORT_PACKAGES lists, where it has one."""
    path = os.path.join(kept_from, REPORT_PACKAGES) if kept_from else ""
    if not os.path.isfile(path):
        return ("`python -m lab.repro prepare` builds the corpus from the installed Python packages: the same "
                "packages give the same corpus")
    with open(path, encoding="utf-8") as f:
        python = re.search(r"\(Python ([^\s,)]+)", f.readline())
    python = f"Python {python.group(1)}" if python else "the Python it names"
    return (f"`python -m lab.repro prepare` run by {python} in an environment holding exactly the packages {path} "
            "lists: docs/study.md, \"Rebuilding the committed runs' corpus\"")


def unalike(records, names):
    """The study settings (names) in which the analyzed runs (records, with their train_config) differ beyond what
    their variants set: 'key: value (runs); value (runs)' for each."""
    out = []
    for key in names:
        values = {}
        for r in records:
            # a run that lacks the key (trained before it existed) is not compared in it, as mislabelled does
            if key not in VARIANTS[r["variant"]].all_flags and key not in SET_BY_REPRO and key in r["train_config"]:
                values.setdefault(json.dumps(r["train_config"].get(key)), []).append(f"{r['variant']} seed {r['seed']}")
        if len(values) > 1:
            out.append(f"{key}: " + "; ".join(f"{value} ({', '.join(runs)})" for value, runs in values.items()))
    return out


def evaluate_runs(root, report_dir, names, passed, study=STUDIES["repro"]):
    """lab/evaluate.py on every finished seed of the named variants (default: the study's models; the GPU study's
    learning-rate sweep is left out), into <report_dir>/evaluate/."""
    for w in passed:
        if w[2:].partition("=")[0] in SET_FOR_EVALUATE:
            fail(f"{w}: `python -m lab.repro evaluate` sets --runs, --labels and --out_dir "
                 f"({report_dir}/{EVALUATE_DIR}) itself; name variants to choose the runs")
    variants = chosen_variants(names or ["models" if study.name == "repro" else "all"], study)
    runs = [(v, s) for v, s in trained_runs(root, study.variants) if v in variants]
    if not runs:
        fail(f"no trained runs of {', '.join(variants)} under {root}/: run `python -m lab.repro train ...` first")
    with claimed(root, report_dir):  # no training, other evaluation or report while the runs are measured
        trained = {run: run_settings(root, *run) for run in runs}
        runs, unfinished = finished_runs(root, runs, trained)
        if not runs:
            fail(f"no finished runs of {', '.join(variants)} under {root}/ ({'; '.join(unfinished)}): the `train` "
                 "command that started them continues them")
        if not any(w.startswith("--modes=") for w in passed) and \
                any(trained[run].get("pos_emb", "rope") != "rope" for run in runs):  # the sink lab's learned positions
            print("note: these runs have no rotary position embeddings, which lab/evaluate.py's length mode needs: "
                  "evaluating --modes=quant,stream", flush=True)
            passed = ["--modes=quant,stream", *passed]
        print(f"=== lab.evaluate: {len(runs)} runs, into {os.path.join(report_dir, EVALUATE_DIR)}/", flush=True)
        run_tool("lab/evaluate.py", [f"--runs={','.join(run_dir(root, v, s) for v, s in runs)}",
                                     f"--labels={','.join(f'{v}/seed{s}' for v, s in runs)}",
                                     f"--out_dir={os.path.join(report_dir, EVALUATE_DIR)}", *passed])


# -----------------------------------------------------------------------------
# The report: every run measured by lab/analyze.py on the same validation windows, each claim decided by stats.RULE

def analyze_runs(root, runs):
    """lab/analyze.py on the runs, into <root>/analysis/: every run on the first run's eval windows (config/repro.py:
    2,048 windows, ~1M tokens); the figures of single runs (attention maps, gate scores) show each variant's first
    seed. Returns (its summary.json, each run's per-window values {measure key: array} from its per_window.npz)."""
    folder = os.path.join(root, ANALYSIS_DIR)
    print(f"=== lab.analyze: the {len(runs)} runs on the same validation windows, into {folder}/", flush=True)
    labels = [f"{v}/seed{s}" for v, s in runs]
    first = [f"{v}/seed{s}" for v, s in runs if s == min(x for w, x in runs if w == v)]
    run_tool("lab/analyze.py", [f"--runs={','.join(run_dir(root, v, s) for v, s in runs)}",
                                f"--labels={','.join(labels)}", f"--out_dir={folder}",
                                f"--plot_labels={','.join(first)}"])
    with open(os.path.join(folder, "summary.json")) as f:
        summary = json.load(f)
    with np.load(os.path.join(folder, "per_window.npz")) as arrays:
        windows = [{} for _ in runs]
        for name in arrays.files:  # "<i>/<key>": run i's values of measure key, one per window
            i, _, key = name.partition("/")
            windows[int(i)][key] = arrays[name]
    return summary, windows


def claim_problem(study):
    """Why one of the study's claims cannot be decided (a line naming it), or None: each names variants of VARIANTS
    (or a number for its reference), a measure of probe.MEASURE and a direction of -1 or +1. A claim added by hand
    (docs/flags.md) is read before the report reads any run, not after."""
    counts = [(claim, ref, variant, None, direction) for claim, ref, variant, direction in study.counts]  # no measure
    for claim, ref, variant, measure, direction in [*study.claims, *counts]:
        fixed = isinstance(ref, (int, float)) and measure is not None  # a count's reference is a variant's seeds
        unknown = [name for name in ((variant,) if fixed else (ref, variant)) if name not in VARIANTS]
        ratio = measure in MEASURE and comparison(MEASURE[measure].key) == "ratio"
        if unknown:
            why = f"names {unknown[0]!r}, not a variant of lab.variants.VARIANTS"
        elif measure is not None and measure not in MEASURE:
            why = f"names the measure {measure!r}; the measures are {', '.join(MEASURE)}"
        elif fixed and not (math.isfinite(ref) and (ref > 0 or not ratio)):
            why = f"has the fixed reference {ref!r}: a finite number" + (
                ", above 0 (its measure is compared as a ratio)" if ratio else "")
        elif direction not in (-1, 1):
            why = f"has the direction {direction!r}, not -1 or +1"
        else:
            continue
        return f"the claim {claim!r} {why}"
    return None


def report(root, out_dir, tiny, report_command, study=STUDIES["repro"], settings=()):
    """The report of every finished run under root, into out_dir; settings: the names of the study's settings, in
    which its runs must not differ beyond what their variants set. A run not finished (stopped before max_iters, not
    diverged) is left out, and named: it is no seed yet."""
    problem = claim_problem(study)
    if problem:
        fail(f"{problem} (lab/repro.py's claims of --study={study.name})")
    unusable = {}  # runs with nothing to report (no checkpoint, nothing kept that stands for one): named in REPORT.md
    runs = trained_runs(root, study.variants, unusable)
    for (v, seed), c in last_commands(read_jsonl(os.path.join(root, COMMANDS))).items():  # a seed that failed
        if (v, seed) not in runs and (v, seed) not in unusable and c.get("exit_code"):  # before its first checkpoint
            unusable[(v, seed)] = f"{v} seed {seed} (no {CHECKPOINT}: its last command exited {c['exit_code']})"
    if not runs:
        fail(f"no trained runs under {root}/: run `python -m lab.repro train all --study={study.name}"
             f"{' --tiny' if tiny else ''}` first, or `python -m lab.repro restore` with the keys the runs a report "
             f"keeps were trained with (e.g. --config=config/repro_sink.py for {STUDIES['repro'].report_dir}/) to "
             "draw that report again")
    with claimed(root, out_dir):  # no training, evaluation or other report while this one reads and writes
        trained = {run: run_settings(root, *run) for run in runs}
        runs, unfinished = finished_runs(root, runs, trained)
        if not runs:
            fail(f"no finished runs under {root}/ to report ({'; '.join(unfinished)}): the `train` command that "
                 "started them continues them")
        wrong = mislabelled([{"variant": v, "seed": seed, "train_config": trained[(v, seed)]} for v, seed in runs],
                            tiny, study) + mislabelled(kept_records(out_dir), tiny, study, " (kept in the report)")
        if wrong:
            fail(f"{wrong[0]}{'; ...' if len(wrong) > 1 else ''} was trained otherwise than --study={study.name} and "
                 "the variant make it, so the report would name and compare it as what it is not: report it with the "
                 "--study it was trained in, or move it (and a report that keeps it: --report_dir) aside")
        # a run the report keeps but root lacks would stay in out_dir/runs/ beside a report that leaves it out, and
        # `restore` would bring it back into the next one: the same folder, two reports
        absent = [f"{r['variant']} seed {r['seed']}" for r in kept_records(out_dir)
                  if (r["variant"], r["seed"]) not in trained]
        if absent:
            fail(f"{os.path.join(out_dir, RUNS_DIR)}/ keeps {absent[0]}{' and more' if len(absent) > 1 else ''}, which "
                 f"{root}/ lacks: `python -m lab.repro restore` with the same --root, --report_dir and the keys it was "
                 f"trained with puts it back (or says why not), or move it out of {out_dir}/ to report without it")
        write_report(root, out_dir, tiny, report_command, study, settings, runs, unfinished, unusable)


def last_commands(commands):
    """{(variant, seed): the last of commands (commands.jsonl's records) for that run}."""
    return {(c.get("variant"), c.get("seed")): c for c in commands}


def finished_runs(root, runs, trained):
    """(the runs finished, 'variant seed N (iter i of m)' for each of the others), saying which are left out: a run
    stopped before its max_iters (trained: each run's settings) and not diverged is no seed yet."""
    done, unfinished = [], []
    for v, seed in runs:
        if finished(root, v, seed, trained[(v, seed)]["max_iters"]):
            done.append((v, seed))
            continue
        unfinished.append(f"{v} seed {seed} (iter {reached(run_dir(root, v, seed))} of "
                          f"{trained[(v, seed)]['max_iters']})")
        print(f"note: {unfinished[-1]} left out: not finished, so no seed yet (the same `train` command continues "
              "it)", flush=True)
    return done, unfinished


def run_settings(root, variant, seed):
    """The train.py settings a run was trained with: its checkpoint's, or those its kept measurement records."""
    folder = run_dir(root, variant, seed)
    try:
        state = saved_state(os.path.join(folder, CHECKPOINT), settings=True)
    except ValueError as e:
        fail(str(e))
    if state is not None:
        problem = lacks_run_settings(os.path.join(folder, CHECKPOINT), state[2], "lab.repro")
        if problem:
            fail(problem)
        return state[2]
    with open(os.path.join(folder, MEASURED + ".json")) as f:  # (trained_runs checked that it reads)
        return json.load(f)["train_config"]


def mislabelled(records, tiny, study, where=""):
    """'variant seed N: key=theirs (the study's variant: ours)' for each run (records of variant, seed, train_config)
    whose DEFINING_KEYS are not what the study's own config and its variant make them: train refuses to train such a
    run, report to report it. A key a run lacks (trained before that flag existed) is taken as it was then."""
    out, want = [], {}
    for r in records:
        v = r["variant"]
        if v not in want:
            want[v] = train_config(train_command(v, 0, "", tiny, study=study)[2:])
        off = [f"{k}={r['train_config'][k]!r} (the study's {v}: {getattr(want[v], k)!r})" for k in DEFINING_KEYS
               if k in r["train_config"] and json.dumps(r["train_config"][k]) != json.dumps(getattr(want[v], k))]
        if off:
            out.append(f"{v} seed {r['seed']}{where}: {', '.join(dict.fromkeys(off))}")
    return out


OLDER = "measured by the older probe: "  # comparable's mark, in a run's values, of a measure it left out
STOPPED = "stopped early"  # comparable's mark of a run that did not reach its max_iters (diverged)


def comparable(run, values):
    """A run's per-window values that compare with every other run's: without the sink share where the probe
    measured it by its older definition (report.older_sink_share), so that no claim pools two definitions of one
    measure; and STOPPED when the run stopped before its max_iters (diverged: its values are an earlier state's)."""
    values = {**values, STOPPED: stopped_early(run)}
    if not older_sink_share(run) or "sink_share" not in values:
        return values
    return {key: a for key, a in values.items() if key != "sink_share"} | {OLDER + "sink_share": True}


def write_report(root, out_dir, tiny, report_command, study, settings, runs, unfinished=(), unusable=None):
    """report's work on the runs, with root and out_dir held: lab/analyze.py's measurement, the claims, REPORT.md
    and the figures, each file written atomically, then the runs it keeps (runs/). unfinished: the runs not finished,
    and unusable: {(variant, seed): why} of those with nothing to report, each named in REPORT.md."""
    unusable = unusable or {}
    summary, per_window = analyze_runs(root, runs)
    off = unalike([{**r, "variant": v, "seed": s} for (v, s), r in zip(runs, summary["runs"])], settings)
    if off:
        fail(f"the runs under {root}/ were not trained alike, so the report cannot compare them: {' | '.join(off)}; "
             f"move the runs of one setting elsewhere (or report them with --root), and train the others again")
    other = unalike([{**r, "variant": v, "seed": s} for (v, s), r in zip(runs, summary["runs"])] +
                    [dict(r, seed=f"{r['seed']} (kept)") for r in kept_records(out_dir)], settings)
    if other:  # e.g. a study trained without the --config of the report it would replace
        fail(f"{out_dir}/ is the report of runs trained otherwise than those under {root}/ ({' | '.join(other)}), "
             f"and the report would replace it: give --report_dir another folder, or train with the settings of the "
             f"runs it keeps (the --config they were trained with, in {os.path.join(out_dir, RUNS_DIR)}/)")
    every_command = read_jsonl(os.path.join(root, COMMANDS))
    commands = last_commands(every_command)
    kept = keep_runs(root, out_dir, runs, commands)  # written below, once the report is in place
    records, windows = [], {}
    for (v, seed), r, w in zip(runs, summary["runs"], per_window):
        cmd = commands.get((v, seed))
        records.append({"variant": v, "seed": seed, **{m.key: r[m.key] for m in MEASURES if not m.mechanism},
                        "ppl": math.exp(r["val_loss"]), "tokens": r["tokens"], "lr": r["lr"], "iter": r["iter"],
                        "max_iters": r["max_iters"], "nonfinite_steps": r["nonfinite_steps"], "params": r["params"],
                        "model": r["model"], "flags": VARIANTS[v].all_flags, "layers": r["layers"],
                        "command": cmd and cmd["command"], "exit_code": cmd and cmd["exit_code"],
                        "measured_on": r.get("measured_on"), "tiny": tiny,
                        **{m.key: r.get(m.key) for m in MEASURES if m.mechanism}})
        windows.setdefault(v, []).append(comparable(r, w))
    by = {}
    for r in records:
        by.setdefault(r["variant"], []).append(r)
    variants = {v: {"seeds": [r["seed"] for r in rs], **{m.key: over_variant(rs, m.key) for m in MEASURES}}
                for v, rs in by.items()}  # (the sink share of runs measured by the older probe apart: over_variant)
    claims = [claim_result(*c, windows) for c in study.claims]
    sweep = sweep_rows(by, windows) if study.name == "repro" else []  # the learning-rate sweep is the GPU study's
    result = {"device": summary["device"], "date": summary["date"], "measured_on": summary["measured_on"],
              "validation": summary["validation"],
              "rule": RULE, "claims": claims, "sweep": sweep, "variants": variants, "runs": records,
              "unfinished": list(unfinished), **({"unusable": list(unusable.values())} if unusable else {})}
    if study.counts:  # a yes/no outcome per run, counted over seeds: the report leads with it
        result["sink_counts"] = sink_counts(by, study.counts)
    logs = {(v, s): read_jsonl(os.path.join(run_dir(root, v, s), LOG)) for v, s in runs}
    # one set, REPORT.md and summary.json last (runfolder.result_set): a report cut short leaves the old one whole
    with result_set(out_dir, REPORT_FILES, last=("summary.json", "REPORT.md")) as staging:
        write_json(os.path.join(staging, "summary.json"), result)
        # every train.py command of the runs reported (failed and resumed parts too), as the root recorded them: the
        # report folder, copied off the GPU machine, says how each run was made
        reported = set(runs) | set(unusable)  # (with the commands of those left out: how they failed)
        write_text(os.path.join(staging, COMMANDS), "".join(json.dumps(c) + "\n" for c in every_command
                                                            if (c.get("variant"), c.get("seed")) in reported))
        for name in ["summary.md"] + summary["plots"]:  # lab/analyze.py's table and figures, beside the report
            with open(os.path.join(root, ANALYSIS_DIR, name), "rb") as f:
                data = f.read()
            atomic_write(os.path.join(staging, name), lambda f, data=data: f.write(data))
        plots = plot_headline(by, variants, logs, staging) + summary["plots"] + plot_trends(by, logs, staging) + \
            plot_sweep(sweep, staging)
        write_text(os.path.join(staging, "REPORT.md"),
                   render_report(result, root, tiny, commands, report_command, plots, summary["runs"], study.title,
                                 every_command) +
                   evaluate_section(out_dir, root, runs))
    write_kept(kept)
    keep_corpus_packages(root, out_dir, runs, summary["runs"])
    print(f"wrote {out_dir}/summary.json and {out_dir}/REPORT.md")


def decided(ref, var, stat, direction, paper=None):
    """stats.compare of a variant's per-window values (seeds, windows) against its reference's (or a fixed value),
    the verdict by stats.RULE, whether the estimate points the paper's way ("pointing") and, given the paper's effect
    for the same quantity (a difference, or a log ratio: report.paper_effect), whether it is the same size."""
    c = compare(ref, var, stat)
    ours = effect(c)
    return {**c, "verdict": decide(c, direction), "pointing": direction_word(ours, direction),
            "size": size_word(ours, paper), "paper_effect": paper}


def stacked(windows, variant, key):
    """A variant's per-window values of one measure as (seeds, windows), from the seeds that have it (report leaves
    out of the sink share the runs measured by the probe's older definition), or None (not trained, or no gate)."""
    rows = [w.get(key) for w in windows.get(variant, []) if OLDER + key not in w]
    return np.stack(rows) if rows and all(x is not None for x in rows) else None


def left_out(windows, variant, key):
    """How many of a variant's seeds comparable() left out of a measure."""
    return sum(OLDER + key in w for w in windows.get(variant, []))


def center(values, stat):
    """The per-seed values' mean as the estimand takes it: arithmetic for a difference, geometric for a ratio."""
    return float(np.exp(np.mean(np.log(values)))) if stat == "ratio" else float(np.mean(values))


def claim_result(claim, ref, variant, measure, direction, windows):
    """One claim decided: the variant against its reference (a variant, or a number: a fixed value) on the
    per-seed values of the measure (each run's mean over the validation windows), compared as the measure says
    (report.comparison). ref_mean and var_mean are the means the estimate compares: geometric for a ratio."""
    m = MEASURE[measure]
    fixed = not isinstance(ref, str)
    var = stacked(windows, variant, m.key)
    base = float(ref) if fixed else stacked(windows, ref, m.key)
    out = {"claim": claim, "reference": ref, "variant": variant, "measure": measure, "direction": direction}
    if var is None or base is None:
        missing = [x for x in (ref, variant) if isinstance(x, str) and x not in windows]
        older = any(OLDER + m.key in w for x in (ref, variant) if isinstance(x, str) for w in windows.get(x, []))
        why = f"{' and '.join(missing)} not trained" if missing else \
            f"every run of a side was measured by the probe's older {m.label}" if older else f"no {m.label} in the runs"
        return {**out, "verdict": f"not measured ({why})"}
    stat = comparison(m.key)
    try:
        c = decided(base, var, stat, direction, None if fixed else paper_effect(ref, variant, m))
    except ValueError as e:  # a non-finite window (var's and ref's rows: the sides' seeds, in the order trained)
        fail(f"the claim {claim!r} cannot be decided on {m.label} ({ref} → {variant}): {e}")
    dropped = {x: left_out(windows, x, m.key) for x in (ref, variant) if isinstance(x, str)}
    stopped = {x: sum(w.get(STOPPED, False) for w in windows[x]) for x in (ref, variant) if isinstance(x, str)}
    if any(stopped.values()):  # as in the sweep (sweep_rows): a diverged seed's values come from an earlier step
        c["verdict"] = ("not decided (" + "; ".join(f"{k} of {len(windows[x])} seeds of {x} stopped early" for x, k
                                                   in stopped.items() if k) + f", their {m.label} an earlier state's)")
    return {**out, **c, "ref_mean": base if fixed else center(c["ref_seeds"], stat),
            "var_mean": center(c["var_seeds"], stat), **({"left_out": dropped} if any(dropped.values()) else {})}


def sink_counts(by, counts):
    """The seeds of each variant that grew a sink head (a run's sink heads above 0: some head's F-Attn above
    probe.SINK_HEAD_THRESHOLD), k of n with the rate's exact 95% interval, and each claim of counts (claim,
    reference, variant, direction) decided by stats.COUNT_RULE."""
    rates, stopped = {}, {v: sum(map(stopped_early, rs)) for v, rs in by.items()}
    for v, rs in by.items():
        grew = grew_sink_head(rs)  # the runs that stopped early left out
        if grew:
            lo, hi = clopper_pearson(sum(grew), len(grew))
            rates[v] = {"k": sum(grew), "n": len(grew), "lo": lo, "hi": hi, "trained": len(rs), "stopped": stopped[v]}
    claims = []
    for claim, ref, variant, direction in counts:
        out = {"claim": claim, "reference": ref, "variant": variant, "direction": direction}
        missing = [x for x in (ref, variant) if x not in rates]
        if missing:
            why = [f"{x} not trained" if x not in by else f"every seed of {x} stopped early" if stopped[x] == len(by[x])
                   else f"{x}'s sink heads not measured" for x in missing]
            claims.append({**out, "verdict": f"not measured ({' and '.join(why)})"})
            continue
        (k, n), (j, m) = ((rates[x]["k"], rates[x]["n"]) for x in (ref, variant))
        claims.append({**out, **count_verdict(k, n, j, m, direction)})
        if stopped[ref] or stopped[variant]:  # as claim_result decides a mean: a diverged seed leaves it open
            claims[-1]["verdict"] = "not decided (" + "; ".join(
                f"{stopped[x]} of {len(by[x])} seeds of {x} stopped early" for x in (ref, variant) if stopped[x]) + \
                ", whether a sink had formed by their end not known)"
    return {"rule": COUNT_RULE, "threshold": SINK_HEAD_THRESHOLD, "variants": rates, "claims": claims}


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
                "finished": [not stopped_early(r) for r in rs]}  # per seed: a diverged run stops early
        a, b = (stacked(windows, names[f], "val_loss") if row[f] else None for f in SWEPT)
        if a is not None and b is not None:
            row["difference"] = decided(a, b, comparison("val_loss"), -1)
            stopped = {f: sum(not x for x in row[f]["finished"]) for f in SWEPT}
            if any(stopped.values()):  # a diverged run's loss is its last saved state's, from an earlier step
                (k, n), (j, m) = ((stopped[f], len(row[f]["finished"])) for f in SWEPT)
                counted = count_verdict(k, n, j, m, -1)["verdict"]
                row["difference"]["verdict"] = (f"not decided on the loss ({k} of {n} / {j} of {m} seeds stopped "
                                                f"early, their loss an earlier state's); the seeds stopped, by the "
                                                f"count rule: {counted}")
        rows.append(row)
    return rows


# -----------------------------------------------------------------------------
# The command line

def chosen_variants(names, study=STUDIES["repro"]):
    """Variant names and groups (all: the study's, models, sweep) as the variants, in order, each once."""
    counted = [n for n in names if ":" in n]
    if counted:
        fail(f"{counted[0]}: a number of seeds (NAME:N) is for `python -m lab.repro train`; the other steps take "
             "every trained seed of the variants named")
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
    if "--help" in argv or "-h" in argv:  # before a step or after it: what the runner does, and its keys
        configure(Keys, ["--help"])
    if not argv:
        sys.exit(usage(Keys))
    step, words = argv[0], argv[1:]
    if step not in STEPS:
        fail(f"{step!r} is not a step; start with one of {', '.join(STEPS)} (python -m lab.repro --help)")
    names = [w for w in words if not w.startswith("--")]
    own = [w for w in words if w.startswith("--") and w[2:].partition("=")[0] in KEYS]
    passed = [w for w in words if w.startswith("--") and w not in own]  # train.py's keys
    # train.py's keys (lab/evaluate.py's for `evaluate`; for `restore`, the settings its runs were trained with) go
    # on; for the other steps, configure names any unknown key
    keys, _ = configure(Keys, own if step in ("train", "restore", "evaluate") else own + passed)
    if names and step not in ("train", "evaluate"):
        fail(f"`python -m lab.repro {step}` takes no variant names, got {' '.join(names)}")
    for key in ("seeds", "parallel"):
        if getattr(keys, key) < 1:
            fail(f"--{key}={getattr(keys, key)} must be at least 1")
    if keys.budget_min < 0:
        fail(f"--budget_min={keys.budget_min:g} must be at least 0 (0: no limit)")
    if keys.study not in STUDIES:
        fail(f"--study={keys.study!r} is not a study; choose one of {', '.join(STUDIES)}")
    study = STUDIES[keys.study]
    root = keys.root or (study.root + "-tiny" if keys.tiny else study.root)
    # a command run to look never replaces the committed report: results/ is written only when --report_dir names it;
    # the kept runs are read from there by default (train and restore only read them)
    report_dir = keys.report_dir or os.path.join(root, "report")
    kept_from = keys.report_dir or (report_dir if keys.tiny else os.path.join(REPO, study.report_dir))
    if step in ("evaluate", "report") and committed(report_dir):
        print(f"note: writing into {report_dir}/, committed results, as --report_dir={keys.report_dir} asks: what it "
              "holds is replaced", flush=True)

    if step == "list":
        memory = run_memory(study_settings(keys, []), [study.config] + ([keys.config] if keys.config else []))
        list_variants(study)  # after the settings are read: a config file's mistake is the one line printed
        print(memory)
    elif step == "prepare":
        prepare()
    elif step == "train":
        for w in passed:
            if w[2:].partition("=")[0] in ("out_dir", "init_from"):
                fail(f"{w}: the runner (lab.repro) sets --out_dir (<root>/<variant>/seed<N>, see --root) and "
                     "--init_from (resume when the folder holds a checkpoint) for every run")
        settings = study_settings(keys, passed)  # (a key train.py refuses stops here, as in check_run_keys)
        passed = [w for w in passed if w[2:].partition("=")[0] != "seed"]  # --seed=N: the first seed, not each run's
        runs = chosen_runs(names, keys.seeds, settings.get("seed", 1337), study)
        check_run_keys(runs, root, keys, passed)
        other = kept_trained_otherwise(kept_from, settings) if keys.report_dir else []
        if other:  # the report named would refuse to mix them (write_report): say so before any training
            fail(f"{kept_from}/, the report named, keeps runs trained otherwise than these settings ({other[0]}"
                 f"{'; ...' if len(other) > 1 else ''}): its report would refuse runs trained now beside them. Give "
                 "the settings they were trained with (the --config in their command.json), or another --report_dir")
        with claimed(root):  # a second `train` on this root would start the same runs beside these
            restore_runs(root, kept_from, settings)
            check_trained_alike(runs, root, settings)
            check_kept_data(root, settings, kept_from)
            if not all(finished(root, v, seed, settings["max_iters"]) for v, seed in runs):
                require_corpus(settings, dataset_dir(settings.get("dataset", ""), settings.get("data_dir", "")))
            train(runs, root, keys, passed, settings)
    elif step == "restore":  # the kept runs back under root, so that `report` draws them again: no GPU, no data
        settings = study_settings(keys, passed)  # a bad --config stops here, before root is made
        with claimed(root):
            if not restore_runs(root, kept_from, settings):
                print(f"nothing restored: {os.path.join(kept_from, RUNS_DIR)}/ keeps no run trained with these "
                      f"settings that {root}/ lacks")
    elif step == "evaluate":
        evaluate_runs(root, report_dir, names, passed, study)
    else:
        report(root, report_dir, keys.tiny, shlex.join(tool_command("lab/repro.py", argv)), study,
               report_settings(keys))


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))  # (cli.run_main: Ctrl-C is one line and exit status 130, no traceback)

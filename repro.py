"""
Reproduce the gated-attention papers' trends on one GPU: the same small model, data order, token budget
and learning-rate schedule (config/repro.py) for each variant of variants.py, then one analysis of all of them.

    python repro.py list                       # every variant, its flags and the paper rows it is compared with
    python repro.py prepare                    # the corpus: .py files of this Python's installed packages
    python repro.py train all                  # the study (variants.STUDY), or name variants:
    python repro.py train baseline g1_elementwise --max_iters=400
    python repro.py report                     # results/repro/{summary.json, REPORT.md, *.png}

The first word is the step. `train` takes variant names: `all` is the study, and any other name of
variants.VARIANTS (g3, glu, ...) trains that variant too. repro.py's own keys (common.configure):

    --root=DIR         where the runs are: out-repro/ (out-repro-tiny/ with --tiny)
    --report_dir=DIR   where the report goes: results/repro/ (<root>/report/ with --tiny)
    --tiny             a CPU-sized smoke test of the whole pipeline on the default dataset: it concludes nothing

Every other --key=value after `train` is a train.py key and goes to every run, after the variant's own
flags, so it wins; train.py checks it. When the first run stops before its first evaluation (a mistaken
key, missing data), the others would stop the same way, so repro.py stops there. --out_dir and --init_from
are repro.py's to set.

Each run goes to <root>/<variant>/ and is nothing more than `python train.py config/repro.py
--out_dir=<root>/<variant> <the variant's flags> <your keys>`, printed before it starts so it can be rerun by
hand, and recorded (command, exit code, seconds, date) in <root>/commands.jsonl, from which the report lists
the commands actually run. A variant whose folder already holds a checkpoint is resumed (--init_from=resume:
train.py continues an interrupted run, or says there is nothing to do for a finished one).
"""

import json
import math
import os
import shlex
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, fields

from common import configure, fail, read_jsonl
from variants import HIGH_LR, STUDY, VARIANTS, Row

REPO = os.path.dirname(os.path.abspath(__file__))
STEPS = ("list", "prepare", "train", "report")


@dataclass
class Keys:
    root: str = ""  # where the runs are; "": out-repro (out-repro-tiny with --tiny)
    report_dir: str = ""  # where the report goes; "": results/repro (<root>/report with --tiny)
    tiny: bool = False  # a CPU smoke test of the pipeline: tiny model, few steps, concludes nothing


KEYS = {f.name for f in fields(Keys)}
SET_BY_REPRO = ("out_dir", "init_from")  # train.py keys that repro.py decides for every run

# The papers' central claims, as (claim, reference variant, variant, what is compared). The report puts our
# numbers and the papers' side by side; it gives no verdict (see VERDICT).
CLAIMS = [
    ("GA: a sigmoid gate on each head's SDPA output (G1 elementwise) lowers the loss",
     "baseline", "g1_elementwise", "loss"),
    ("GA: G1 removes the attention sink", "baseline", "g1_elementwise", "first_token_attn"),
    ("GA: G1 removes the massive activations", "baseline", "g1_elementwise", "max_act"),
    ("GA: G1's gate scores are sparse", None, "g1_elementwise", "gate_mean"),
    ("GA: a headwise G1 gate keeps most of the gain", "baseline", "g1_headwise", "loss"),
    ("GA: a head-shared G1 gate keeps more of the sink", "baseline", "g1_head_shared", "first_token_attn"),
    ("GA: gating the values (G2) helps, less than G1", "baseline", "g2_elementwise", "loss"),
    ("GA: gating after the output projection (G5) barely helps", "baseline", "g5", "loss"),
    ("GA: sparsity matters: NS-sigmoid (scores in [0.5, 1]) helps far less than the sigmoid gate",
     "baseline", "g1_ns_sigmoid", "loss"),
    ("GA: NS-sigmoid keeps most of the sink", "baseline", "g1_ns_sigmoid", "first_token_attn"),
    ("GA: input dependence matters: an input-independent gate helps less", "baseline", "g1_input_independent", "loss"),
    ("GA: an input-independent gate keeps most of the sink", "baseline", "g1_input_independent", "first_token_attn"),
    ("GA: an additive SiLU gate helps, less than the multiplicative sigmoid", "baseline", "g1_additive_silu", "loss"),
    ("GA: a non-gate non-linearity (RMSNorm of each head's SDPA output) helps, less than G1",
     "baseline", "sdpa_rmsnorm", "loss"),
    ("GN: gating (+GA) lowers the residual-stream outliers", "baseline", "g1_elementwise", "peak_act"),
    ("GN: GatedNorm on top of the gate lowers the outliers further", "g1_elementwise", "g1_gatednorm", "peak_act"),
    ("GN: GatedNorm on top of the gate does not cost loss", "g1_elementwise", "g1_gatednorm", "loss"),
    ("GN: PreAffine on top of the gate lowers the outliers further", "g1_elementwise", "g1_preaffine", "peak_act"),
    ("GN: PreAffine on top of the gate does not cost loss", "g1_elementwise", "g1_preaffine", "loss"),
    ("GN: DyT (a bounded norm, without a gate) removes the outliers", "baseline", "dyt", "peak_act"),
    ("GN: DyT costs loss", "baseline", "dyt", "loss"),
]
# what each measure is called, our key, its format, and the papers' numbers that measure the same thing
# (which paper, its Row field, its name, its format)
MEASURES = {
    "loss": ("val loss (nats)", "val_loss", ".4f", [("ga", "ppl", "GA PPL", ".3f"), ("gn", "loss", "GN loss", ".3f")]),
    "first_token_attn": ("F-Attn", "first_token_attn", ".3f", [("ga", "f_attn", "GA F-Attn", ".3f")]),
    "max_act": ("M-Act", "max_act", ".1f", [("ga", "m_act", "GA M-Act", ".0f")]),
    "peak_act": ("peak act", "peak_act", ".1f", [("gn", "max_act", "GN max act", ".0f")]),
}
VERDICT = ("**Verdicts are not given.** Each variant here is a single training run (one seed). Calling a claim "
           "reproduced, not reproduced or inconclusive needs several seeds per variant and a rule stated in advance "
           "(for example: the 95% confidence interval of the difference to the reference excludes zero and has the "
           "paper's sign). This study does not have them yet: seeds with confidence intervals are planned work. "
           "Below are the measured numbers and their differences, beside the papers'.")

# --tiny: a CPU smoke test of the whole pipeline on the embedded default dataset, minutes not hours
TINY = dict(dataset="pystdlib", n_layer=2, n_head=2, n_embd=64, block_size=64, batch_size=8,
            gradient_accumulation_steps=1, max_iters=30, lr_decay_iters=30, warmup_iters=5, eval_interval=15,
            eval_iters=2, log_interval=10, compile=False)


def run_dir(root, variant):
    return os.path.join(root, variant)


def train_command(variant, root, tiny=False, extra=(), resume=False):
    """The exact train.py argv of a variant's run. The user's extra flags come last, so they win."""
    flags = {**(TINY if tiny else {}), **VARIANTS[variant].all_flags}
    return ([sys.executable, os.path.join(REPO, "train.py"), os.path.join(REPO, "config", "repro.py"),
             f"--out_dir={run_dir(root, variant)}"] + [f"--{k}={v}" for k, v in flags.items()]
            + (["--init_from=resume"] if resume else []) + list(extra))


def list_variants():
    for name, v in VARIANTS.items():
        flags = " ".join(f"--{k}={x}" for k, x in v.all_flags.items())
        rows = "; ".join(str(row) for row in (v.ga, v.gn) if row)
        print(f"{'*' if name in STUDY else ' '} {name:<23} {flags:<52} {rows}")
    print(f"* the study ({len(STUDY)} variants): python repro.py train all")


def prepare(name="pysrc"):
    """The study corpus: every .py file of the installed packages (de-duplicated, split by file)."""
    src = sysconfig.get_paths()["purelib"]
    cmd = [sys.executable, os.path.join(REPO, "data", "textdir", "prepare.py"), "--src", src, "--name", name,
           "--exts", ".py"]
    print(shlex.join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def train(variants, root, tiny, extra):
    os.makedirs(root, exist_ok=True)
    for i, v in enumerate(variants):
        # train.py will not start a new run over an old one: a folder with a checkpoint is resumed instead
        resume = os.path.isfile(os.path.join(run_dir(root, v), "ckpt.pt"))
        cmd = train_command(v, root, tiny, extra, resume)
        print(f"\n=== {v}: " + (f"resuming the run in {run_dir(root, v)} (a finished run has nothing to do)" if resume
                                else f"starting a new run in {run_dir(root, v)}"), flush=True)
        print(shlex.join(cmd), flush=True)
        t0 = time.time()
        result = subprocess.run(cmd)
        seconds = time.time() - t0
        # a diverged run exits non-zero but is itself a result (the stability pair): record it and go on
        with open(os.path.join(root, "commands.jsonl"), "a") as f:
            f.write(json.dumps({"variant": v, "command": shlex.join(cmd), "exit_code": result.returncode,
                                "seconds": round(seconds, 1), "date": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n")
        print(f"=== {v}: exit code {result.returncode} after {seconds:.0f} s", flush=True)
        # A new run logs its first evaluation before any step, so one that failed without a log.jsonl never
        # started. For the first run that means the keys, the data or the device: every other run would fail alike.
        started = os.path.isfile(os.path.join(run_dir(root, v), "log.jsonl"))
        if i == 0 and result.returncode and not resume and not started and len(variants) > 1:
            fail(f"the first run ({v}) stopped before its first evaluation (its error is above); the other "
                 f"{len(variants) - 1} would stop the same way, so none was started")


def report(root, out_dir, tiny, report_command):
    from analyze import analyze

    done = [v for v in VARIANTS if os.path.isfile(os.path.join(run_dir(root, v), "ckpt.pt"))]
    if not done:
        fail(f"no trained runs under {root}/: run `python repro.py train all{' --tiny' if tiny else ''}` first")
    # every run on the baseline's (or first run's) own eval windows: the val loss its training log shows
    os.makedirs(out_dir, exist_ok=True)
    summary = analyze([run_dir(root, v) for v in done], done, out_dir)
    commands = {c["variant"]: c for c in read_jsonl(os.path.join(root, "commands.jsonl"))}  # the last one wins
    records = []
    for v, r in zip(done, summary["runs"]):
        cmd = commands.get(v)
        records.append({"variant": v, "val_loss": r["val_loss"], "ppl": math.exp(r["val_loss"]),
                        "first_token_attn": r["first_token_attn"], "max_act": r["max_act"],
                        "peak_act": max(r["layers"]["max_act"]), "gate_mean": r["gate_mean"],
                        "gate_below_0.1": r["gate_below_0.1"], "tokens": r["tokens"], "lr": r["lr"], "iter": r["iter"],
                        "max_iters": r["max_iters"], "seed": r["seed"], "loss_spikes": r["loss_spikes"],
                        "nonfinite_steps": r["nonfinite_steps"], "params": r["params"], "model": r["model"],
                        "flags": VARIANTS[v].all_flags, "command": cmd and cmd["command"],
                        "exit_code": cmd and cmd["exit_code"], "device": summary["device"], "date": summary["date"],
                        "tiny": tiny})
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(records, f, indent=1)
    with open(os.path.join(out_dir, "REPORT.md"), "w") as f:
        f.write(render_report(records, summary, root, tiny, commands, report_command))
    print(f"wrote {out_dir}/summary.json and {out_dir}/REPORT.md")


def fmt(x, spec):
    return "–" if x is None else format(x, spec)


def fmt_tokens(n):
    """12,288 / 1.23M / 105M / 2.1B: readable at every scale."""
    if n < 1e6:
        return f"{n:,}"
    if n < 999.5e6:
        return f"{n / 1e6:.3g}M"
    return f"{n / 1e9:.3g}B"


def status(r):
    done = "finished" if r["iter"] >= r["max_iters"] else f"stopped at iter {r['iter']:,} of {r['max_iters']:,}"
    if r["exit_code"]:
        done += f", exit code {r['exit_code']}"
    if r["nonfinite_steps"]:
        done += f", {r['nonfinite_steps']} non-finite steps skipped"
    return done


def render_report(records, summary, root, tiny, commands, report_command):
    first = records[0]
    m, val = first["model"], summary["validation"]
    lines = ["# Reproducing the gated-attention trends" + (": TINY CPU SMOKE TEST" if tiny else " at small scale"), ""]
    if tiny:
        lines += ["**This is a smoke test of the pipeline (`repro.py --tiny`: a tiny model trained for a few dozen "
                  "steps on a CPU). It concludes nothing about the papers' claims; the table below is here only so "
                  "that the pipeline can be checked.**", ""]
    lines += [
        f"Device: {summary['device']}. Date: {summary['date']}. Runs: `{root}/`, one per variant, each "
        f"{m['n_layer']} layers, {m['n_embd']} wide, {m['n_head']} heads, T={m['block_size']}, seed {first['seed']}. "
        f"Every measurement below comes from the runs' `ckpt.pt`, on the same {val['batches']} x "
        f"{val['batch_size']} validation windows ({val['source']}).",
        "",
        "## Measured",
        "",
        "Val loss in nats; perplexity = exp(val loss). F-Attn: attention on the first token; M-Act: max |h| of each "
        "layer's output; both averaged over layers (GA §4.3). Peak act: the largest |h| of any layer's output (the "
        "residual stream's maximum, as GN reports it). Gate: mean score and share of scores below 0.1.",
        "",
        "| variant | tokens | lr | status | val loss (nats) | perplexity | F-Attn | M-Act | peak act | gate mean | "
        "gate < 0.1 | loss spikes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in records:
        lines.append(f"| {r['variant']} | {fmt_tokens(r['tokens'])} | {r['lr']:g} | {status(r)} | {r['val_loss']:.4f} | "
                     f"{r['ppl']:.2f} | {r['first_token_attn']:.3f} | {r['max_act']:.1f} | {r['peak_act']:.1f} | "
                     f"{fmt(r['gate_mean'], '.3f')} | "
                     f"{fmt(r['gate_below_0.1'], '.2f')} | {fmt(r['loss_spikes'], 'd')} |")
    if not tiny:
        lines += paper_table(records) + claims_section({r["variant"]: r for r in records})
    lines += ["", "## Commands run", "",
              f"The last command recorded for each variant in `{root}/commands.jsonl` (written by `repro.py train`):", ""]
    for r in records:
        c = commands.get(r["variant"])
        lines.append(f"- {r['variant']}: " + (f"exit code {c['exit_code']} after {c['seconds']:.0f} s on {c['date']}: "
                                                f"`{c['command']}`" if c else
                                                "not recorded in commands.jsonl (run by hand?)"))
    lines += ["", f"This report: `{report_command}`", ""]
    plots = [os.path.basename(p) for p in summary.get("plots", [])]
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({p})\n" for p in plots]
    return "\n".join(lines)


def paper_table(records):
    lines = ["", "## The papers' numbers for the same rows", "",
             "GA: 15A2B MoE, 400B tokens, reports perplexity (Tables 1, 3, 4). GN: 2B dense, reports loss and the "
             "residual stream's max activation (Table 1; compare it with our peak act). "
             "Absolute values are not comparable across these scales (model, data, tokenizer, tokens): compare only "
             "the direction and size of the trends.", "",
             "| variant | GA PPL | GN loss | GA gate mean | GA M-Act | GN max act | GA F-Attn | source |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in records:
        v = VARIANTS[r["variant"]]
        ga, gn = v.ga or Row("GA", "", ""), v.gn or Row("GN", "", "")  # no row in that paper: no numbers
        source = "; ".join(f"{row}" + (f": {row.note}" if row.note else "") for row in (v.ga, v.gn) if row)
        lines.append(f"| {r['variant']} | {fmt(ga.ppl, '.3f')} | {fmt(gn.loss, '.3f')} | {fmt(ga.gate_mean, '.3f')} | "
                     f"{fmt(ga.m_act, 'd')} | {fmt(gn.max_act, 'd')} | {fmt(ga.f_attn, '.3f')} | {source or '–'} |")
    return lines


def paper_pair(ref, variant, numbers):
    """The papers' (reference value, variant value, Row field, name, format, source) from the first paper that
    gives both rows that number."""
    for paper, key, name, spec in numbers:
        p, q = getattr(VARIANTS[ref], paper), getattr(VARIANTS[variant], paper)
        if p and q and getattr(p, key) is not None and getattr(q, key) is not None:
            source = f"{q.paper} {q.table}" if p.table == q.table else f"{p.paper} {p.table} → {q.table}"
            return getattr(p, key), getattr(q, key), key, name, spec, source
    return None


def claims_section(by):
    lines = ["", "## The papers' central claims beside our runs", "", VERDICT, "",
             "| claim | measure | ours: reference → variant | ours: difference | paper: reference → variant | "
             "paper: difference | paper source |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for claim, ref, variant, measure in CLAIMS:
        if measure == "gate_mean":  # a property of one run: no reference
            r, p = by.get(variant), VARIANTS[variant].ga
            ours = (f"{variant}: mean {r['gate_mean']:.3f}, {r['gate_below_0.1'] * 100:.0f}% below 0.1" if r
                    else f"{variant} not trained")
            lines.append(f"| {claim} | gate mean | {ours} | – | {variant}: mean {p.gate_mean:.3f} | – | "
                         f"{p.paper} {p.table} |")
            continue
        name, key, spec, paper_numbers = MEASURES[measure]
        a, b = by.get(ref), by.get(variant)
        if a and b:
            d = b[key] - a[key]
            ours = f"{ref} → {variant}: {a[key]:{spec}} → {b[key]:{spec}}"
            diff = (f"{d:+.4f} nats (PPL ×{math.exp(d):.3f})" if measure == "loss"
                    else f"{d:+{spec}} (×{b[key] / a[key]:.2f})" if a[key] else f"{d:+{spec}}")
        else:
            missing = " and ".join(v for v in (ref, variant) if v not in by)
            ours, diff = f"{ref} → {variant}: {missing} not trained", "–"
        paper = paper_pair(ref, variant, paper_numbers)
        theirs, their_diff, source = "–", "–", "–"
        if paper:  # a perplexity ratio and a loss difference in nats are what compare with ours
            x, y, paper_key, paper_name, paper_spec, source = paper
            theirs = f"{paper_name} {x:{paper_spec}} → {y:{paper_spec}}"
            their_diff = (f"{y - x:+.3f} (PPL ×{y / x:.3f})" if paper_key == "ppl" else
                          f"{y - x:+.3f} nats" if paper_key == "loss" else f"{y - x:+{paper_spec}} (×{y / x:.2f})")
        lines.append(f"| {claim} | {name} | {ours} | {diff} | {theirs} | {their_diff} | {source} |")

    a, b = by.get("baseline_high_lr"), by.get("g1_elementwise_high_lr")
    row = VARIANTS["baseline_high_lr"].ga
    lines += ["", f"{row.paper} {row.table}: gating keeps training stable at learning rates where the baseline spikes "
              f"or diverges ({row.note}). Our pair at lr {HIGH_LR:g}:", ""]
    for r, name in ((a, "baseline_high_lr"), (b, "g1_elementwise_high_lr")):
        lines.append(f"- {name}: " + (f"val loss {r['val_loss']:.4f}, loss spikes: {fmt(r['loss_spikes'], 'd')}, "
                                      f"{status(r)}" if r else "not trained"))
    return lines


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
    keys, _ = configure(Keys, own if step == "train" else own + passed)
    if names and step != "train":
        fail(f"`repro.py {step}` takes no variant names, got {' '.join(names)}")
    root = keys.root or ("out-repro-tiny" if keys.tiny else "out-repro")
    report_dir = keys.report_dir or (os.path.join(root, "report") if keys.tiny else os.path.join("results", "repro"))

    if step == "list":
        list_variants()
    elif step == "prepare":
        prepare()
    elif step == "train":
        for w in passed:
            if w[2:].partition("=")[0] in SET_BY_REPRO:
                fail(f"{w}: repro.py sets --out_dir (<root>/<variant>, see --root) and --init_from (resume when the "
                     "folder holds a checkpoint) for every run")
        variants = list(dict.fromkeys(v for n in names for v in (STUDY if n == "all" else [n])))  # in order, once
        unknown = [v for v in variants if v not in VARIANTS]
        if unknown or not variants:
            fail((f"unknown variant(s) {', '.join(unknown)}" if unknown else "name the variants to train") +
                 f"; choose 'all' (the study) or from: {', '.join(VARIANTS)}")
        train(variants, root, keys.tiny, passed)
    else:
        try:
            report(root, report_dir, keys.tiny, shlex.join([sys.executable, os.path.join(REPO, "repro.py"), *argv]))
        except (ValueError, FileNotFoundError) as e:  # a corrupt checkpoint, too little validation data: one line
            fail(e)


if __name__ == "__main__":
    main(sys.argv[1:])

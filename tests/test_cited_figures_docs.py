"""
The measured figures that docs/study.md, docs/training.md, docs/kernels.md, docs/gpu.md and TUTORIAL.md's prose
state are the committed results' own: each test reads a results folder's files (summary.json, outlier.json,
commands.jsonl, the runs' command.json, the logs, the benchmarks' json and text), computes the figures a page quotes
from it, with the project's own rule where a report made them (lab.stats.compare and decide, lab.report's
formatting), and asserts that the page says them in its own words. A result drawn again with other numbers, or a
figure mistyped, fails here. (TUTORIAL.md's table rows and the "Printed" blocks of results/**/README.md are checked
by tests/test_tutorial.py and tests/test_docs.py; docs/evaluate.md states no measured figure of a committed result.)
"""

import functools
import glob
import json
import math
import os
import re
import statistics
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from lab.stats import compare, decide

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/
RESULTS = os.path.join(REPO, "results")
WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight")  # counts as the pages spell them


@functools.cache
def text(path):
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        return f.read()


@functools.cache
def data(path):
    """A committed json file, read once."""
    return json.loads(text(path))


@functools.cache
def jsonl(path):
    return [json.loads(line) for line in text(path).splitlines() if line.strip()]


def squash(s):
    """Runs of whitespace as one space: pages wrap their lines anywhere."""
    return re.sub(r"\s+", " ", s)


def says(page, *phrases):
    """Each phrase is in the page, however the page wraps it."""
    body = squash(text(page))
    for phrase in phrases:
        assert squash(phrase) in body, f"{page} does not say {phrase!r}, which its committed results give"


def r(x, digits):
    """x rounded half up, as a reader rounds (a float's 13.95 is 13.949999..., which format() rounds down)."""
    return str(Decimal(repr(x)).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def by_variant(runs, key="variant"):
    out = {}
    for run in runs:
        out.setdefault(run[key] if key in run else run["label"].split("/")[0], []).append(run)
    return out


def minus(x, spec):
    """A negative number as the pages write it, with a true minus sign."""
    return format(x, spec).replace("-", "−")


# ----------------------------------------------------------------------------
# results/repro/: the committed study (docs/study.md, docs/gpu.md, TUTORIAL.md §5)

REPRO = "results/repro/summary.json"


def claim(summary, variant, measure):
    return next(c for c in data(summary)["claims"] if c["variant"] == variant and c["measure"] == measure
                and c["reference"] == "baseline")


def test_the_studys_g1_claims_are_the_reports():
    """docs/study.md: the loss (−0.027 nats), F-Attn (×0.39), M-Act (×0.29) and the peak (×0.31), all reproduced;
    G1 at the matched count −0.023 nats with two seeds, too few; the sizes beside GA's."""
    loss, fattn, mact, peak = (claim(REPRO, "g1_elementwise", m)
                               for m in ("val_loss", "first_token_attn", "max_act", "peak_act"))
    assert {c["verdict"] for c in (loss, fattn, mact, peak)} == {"reproduced"}
    says("docs/study.md", f"the loss ({minus(loss['estimate'], '.3f')} nats), F-Attn (×{fattn['estimate']:.2f}), "
                          f"M-Act (×{mact['estimate']:.2f}) and the peak activation (×{peak['estimate']:.2f}), all "
                          "reproduced")
    matched = claim(REPRO, "g1_elementwise_matched", "val_loss")
    assert matched["verdict"] == "too few seeds" and matched["n_seeds_var"] == 2
    says("docs/study.md", f"G1 at the matched count: {minus(matched['estimate'], '.3f')} nats with two seeds, too few")
    # Which cuts are "smaller than GA's" and which "within ×2" is the report's size word (lab.stats.size_word)
    smaller = [c for c in (fattn, mact) if c["size"] == "smaller than the paper's"]
    within = [c for c in (fattn, mact, loss, peak) if c["size"] == "same size (within ×2)"]
    assert smaller == [fattn] and len(within) == 3, "the report's size words changed: reword docs/study.md"
    says("docs/study.md", "(the sink's cut smaller than GA's ×0.10; M-Act's cut, the loss gain and the peak's cut "
                          "within ×2 of the papers', a cut's size read on a log scale)")
    says("TUTORIAL.md", "all four reproduced (F-Attn's cut smaller than GA's;")


def test_the_studys_seed_counts_and_sinks_are_its_runs():
    """docs/study.md: three seeds of the baseline and G1, two of four variants, one of two; a sink in layer 6 of all
    three baselines, none in G1, headwise, head-shared, G2 or NS-sigmoid; TUTORIAL.md: 3 of 3 against 0 of 3."""
    runs = by_variant(data(REPRO)["runs"])
    seeds = {v: len(rs) for v, rs in runs.items()}
    assert seeds == {"baseline": 3, "g1_elementwise": 3, "g1_elementwise_matched": 2, "g1_headwise": 2,
                     "g1_head_shared": 2, "g1_ns_sigmoid": 2, "g2_elementwise": 1, "g1_input_independent": 1}
    says("docs/study.md",
         f"It holds {WORDS[seeds['baseline']]} seeds of the baseline and of G1 elementwise, "
         f"{WORDS[seeds['g1_elementwise_matched']]} of G1 at the baseline's parameter count",
         f"and {WORDS[seeds['g2_elementwise']]} of G2 and of the input-independent gate")
    layer6 = [run["layers"]["sink_heads"][6] > 0 for run in runs["baseline"]]
    assert all(layer6)
    says("docs/study.md", f"A sink grew in layer 6 of all {WORDS[len(layer6)]} baselines")
    sinkless = ("g1_elementwise", "g1_elementwise_matched", "g1_headwise", "g1_head_shared", "g2_elementwise",
                "g1_ns_sigmoid")
    assert all(run["sink_heads"] == 0 for v in sinkless for run in runs[v])
    says("docs/study.md", "no run of G1, headwise, head-shared, G2 or NS-sigmoid grew a sink head")
    counts = {v: sum(run["sink_heads"] > 0 for run in runs[v]) for v in ("baseline", "g1_elementwise")}
    says("TUTORIAL.md", f"the baseline grew sink heads in {counts['baseline']} of {seeds['baseline']} seeds and G1 in "
                        f"{counts['g1_elementwise']} of {seeds['g1_elementwise']}")
    g1, base = runs["g1_elementwise"][0]["params"], runs["baseline"][0]["params"]
    says("TUTORIAL.md", f"G1's with {(g1 - base) / 1e6:.1f}M more parameters, {(g1 - base) / g1:.0%} of the model")


def test_the_studys_run_times_are_its_commands():
    """docs/study.md: 4.8 minutes a run (the median), on an H200; docs/gpu.md: 4.6 to 5.2 minutes (274–309 s);
    TUTORIAL.md: the sixteen runs took 77 minutes."""
    records = jsonl("results/repro/commands.jsonl")
    seconds = [rec["seconds"] for rec in records]
    assert {rec["device"] for rec in records} == {"NVIDIA H200"} and len(records) == 16
    says("docs/study.md", f"took {statistics.median(seconds) / 60:.1f} minutes on an H200 (the median of the sixteen "
                          "kept runs)", "records: NVIDIA H200 for the sixteen runs")
    says("docs/gpu.md", f"a run took {min(seconds) / 60:.1f} to {max(seconds) / 60:.1f} minutes "
                        f"({min(seconds):.0f}–{max(seconds):.0f} s, the sixteen runs in")
    says("TUTORIAL.md", f"The study's sixteen runs took {sum(seconds) / 60:.0f} minutes of an H200")


def test_the_corpus_the_study_names_is_its_package_list():
    lines = text("results/repro/corpus-packages.txt").splitlines()
    python = re.search(r"\d+\.\d+\.\d+", lines[0]).group()
    packages = [line for line in lines[1:] if "==" in line]
    says("docs/study.md", f"Its first line names the Python ({python}), the other lines its {len(packages)} packages")


# ----------------------------------------------------------------------------
# results/study-h200-2026-11-26/: the first report (docs/study.md, docs/gpu.md, TUTORIAL.md §5)

H200 = "results/study-h200-2026-11-26"


def logged_ms(folder):
    """Every step time train.py's console logged, in ms, over a study's runs."""
    return [int(ms) for path in sorted(glob.glob(os.path.join(REPO, folder, "logs", "*.txt")))
            for ms in re.findall(r"^iter \d+: .*?, (\d+) ms,", text(os.path.relpath(path, REPO)), re.MULTILINE)]


def test_the_first_h200_report_grew_one_sink_layer_and_g1_beat_every_baseline_seed():
    runs = by_variant(data(f"{H200}/summary.json")["runs"])
    assert all(sum(x > 0 for x in run["layers"]["sink_heads"]) == 1 for run in runs["baseline"])
    says("docs/study.md", "A sink grew in one layer of each baseline")
    says("TUTORIAL.md", "grew a sink in a single layer of each baseline seed")
    says("docs/gpu.md", "a sink grew in one layer of both baseline seeds on an H200")
    for key in ("val_loss", "first_token_attn", "max_act"):
        assert max(run[key] for run in runs["g1_elementwise"]) < min(run[key] for run in runs["baseline"]), key
    says("docs/study.md", "every G1 seed beat every baseline seed on loss, F-Attn and M-Act")
    assert all(run["sink_heads"] == 0 for run in runs["g1_elementwise"])
    verdicts = {c["measure"]: c["verdict"] for c in data(f"{H200}/summary.json")["claims"]
                if c["variant"] == "g1_elementwise" and c["reference"] == "baseline"}
    assert {verdicts[k] for k in ("val_loss", "first_token_attn", "max_act")} == {"inconclusive"}
    says("docs/study.md", "the rule of the time called those claims inconclusive")


def test_the_h200_step_times_are_the_logged_ones():
    """docs/study.md and docs/gpu.md: one run alone 65–69 ms a step, two side by side up to 148 ms."""
    ms = logged_ms(H200)
    alone = [x for x in ms if x < 100]  # nothing was logged between 69 and 101 ms
    assert alone and not [x for x in ms if max(alone) < x < 100]
    for page in ("docs/study.md", "docs/gpu.md"):
        says(page, f"{min(alone)}–{max(alone)} ms")
    says("docs/study.md", f"two side by side took 141–{max(ms)} ms each")
    says("docs/gpu.md", f"141–{max(ms)} ms a step each and one alone {min(alone)}–{max(alone)} ms")


# ----------------------------------------------------------------------------
# results/study-h100-2026-11-25/: training logs only (docs/study.md, docs/gpu.md, TUTORIAL.md §5)

H100 = "results/study-h100-2026-11-25"


def test_the_h100_baselines_grew_no_sink_layer():
    lasts = [jsonl(f"{H100}/logs/baseline-seed{seed}.jsonl")[-1] for seed in (1337, 1338)]
    fattn = " and ".join(f"{last['first_token_attn']:.3f}" for last in lasts)
    heads = [round(x * 8) for last in lasts for x in last["layers"]["sink_heads"]]  # 8 heads a layer
    assert sum(heads) == 1 and sum(last["layers"]["sink_heads"][i] > 0 for last in lasts for i in range(8)) == 1
    for page in ("docs/study.md", "TUTORIAL.md"):
        says(page, f"F-Attn over layers {fattn}; one head of {8 * len(lasts[0]['layers']['sink_heads'])} in one seed "
                   "crossed 0.3")
    says("docs/study.md", f"(F-Attn over layers {fattn}, two seeds on one H100")


def test_the_h100_run_times_are_its_commands_and_logs():
    records = jsonl(f"{H100}/commands.jsonl")
    seconds = [rec["seconds"] for rec in records]
    assert {rec["parallel"] for rec in records} == {2} and len(records) == 6
    for page in ("docs/study.md", "docs/gpu.md"):
        says(page, f"took {min(seconds):.0f}–{max(seconds):.0f} s with two side by side on an H100")
    says("docs/gpu.md", f"three rounds ({WORDS[len(records)]} runs)")
    ms = logged_ms(H100)
    alone = [x for x in ms if x < 100]
    assert alone and not [x for x in ms if max(alone) < x < 100]
    says("docs/study.md", f"on an H100, {min(alone)}–{max(alone)} ms alone and 150–{max(ms)} ms side by side")


# ----------------------------------------------------------------------------
# results/sink_lab/: the sink lab's study (TUTORIAL.md §2 and §4, docs/study.md)

LAB = "results/sink_lab/summary.json"


def lab_claim(summary, measure, variant, reference="baseline"):
    return next(c for c in data(summary)["claims"] if c["measure"] == measure and c["variant"] == variant
                and c["reference"] == reference)


def test_what_holds_at_every_seed_of_the_lab_is_its_runs():
    counts = {v: (c["k"], c["n"]) for v, c in data(LAB)["sink_counts"]["variants"].items()}
    runs = by_variant(data(LAB)["runs"])

    def span(variant, key, spec, sep):
        values = [run[key] for run in runs[variant]]
        return f"{format(min(values), spec)}{sep}{format(max(values), spec)}"
    k, n = counts["baseline"]
    fattn = span("baseline", "first_token_attn", ".2f", "-")
    says("TUTORIAL.md", f"the baseline grows a sink head ({k} of {n}, F-Attn {fattn})")
    assert counts["g1_input_independent"] == counts["g1_ns_sigmoid"] == (n, n)
    says("TUTORIAL.md", f"the input-independent gate and NS-sigmoid keep it ({n} of {n} each), G1 grows none "
                        f"({counts['g1_elementwise'][0]} of {counts['g1_elementwise'][1]})")
    assert counts["g1_elementwise"][0] == 0
    says("TUTORIAL.md", f"G1's F-Attn ({span('g1_elementwise', 'first_token_attn', '.2f', ' to ')}:",
         f"M-Act (the baseline's {span('baseline', 'max_act', '.0f', ' to ')}, "
         f"G1's {span('g1_elementwise', 'max_act', '.0f', ' to ')}, so one seed can show either larger)")
    k_g2, n_g2 = counts["g2_elementwise"]
    assert k_g2 == n_g2 and counts["g1_ns_sigmoid"][0] == n
    says("TUTORIAL.md", "NS-sigmoid, the input-independent gate and G2 keep all of the sink")


def test_the_lab_reports_mact_and_sparsity_figures():
    mact = lab_claim(LAB, "max_act", "g1_elementwise")
    assert mact["verdict"] == "reproduced"
    says("TUTORIAL.md", f"the massive activation shrinks with G1 (×{mact['estimate']:.2f} of the baseline's)")
    variants = data(LAB)["variants"]
    ii, g1 = variants["g1_input_independent"]["gate_below_0.1"], variants["g1_elementwise"]["gate_below_0.1"]
    says("TUTORIAL.md", f"a share of {ii['mean']:.2f} ± {(ii['hi'] - ii['lo']) / 2:.2f} below 0.1, G1's "
                        f"{g1['mean']:.2f})",
         f"kept its sink in all {data(LAB)['sink_counts']['variants']['g1_input_independent']['k']}")


def test_the_labs_run_count_and_times_are_its_runs_command_files():
    """docs/study.md: 185 runs, the first 145 in 39 minutes (2026-11-27), the norms' 40 on 2026-12-01, 32 s a run
    two side by side."""
    records = [json.loads(text(os.path.relpath(p, REPO)))
               for p in sorted(glob.glob(os.path.join(RESULTS, "sink_lab", "runs", "*", "*", "command.json")))]
    days = {}
    for rec in records:
        days.setdefault(rec["date"][:10], []).append(rec)
    (first_day, first), (last_day, last) = sorted(days.items())
    ends = [datetime.fromisoformat(rec["date"]) for rec in first]
    starts = [end - timedelta(seconds=rec["seconds"]) for end, rec in zip(ends, first)]
    minutes = (max(ends) - min(starts)).total_seconds() / 60
    assert {rec["parallel"] for rec in first} == {2}
    says("docs/study.md", f"{len(records)} runs. The first {len(first)} took {minutes:.0f} minutes on an idle 2-core "
                          f"CPU ({first_day}) and the norms' {len(last)} were trained on {last_day}",
         f"took {statistics.mean(rec['seconds'] for rec in first):.0f} s each on average with one thread")


def test_the_labs_unseen_seeds_do_not_shrink_the_massive_activation():
    runs = {run["label"]: run for run in data("results/sink_lab/unseen-seeds/summary.json")["runs"]}
    seeds = sorted({label.split("/")[1] for label in runs})
    c = compare([runs[f"baseline/{s}"]["max_act"] for s in seeds], [runs[f"g1_elementwise/{s}"]["max_act"]
                                                                     for s in seeds], "ratio")
    says("TUTORIAL.md", f"at {WORDS[len(seeds)]} seeds chosen afterwards it did not shrink at all "
                        f"(×{c['estimate']:.2f}, {decide(c, -1)}")


# ----------------------------------------------------------------------------
# results/sink_lab/norms/: the outlier and GN's norms (TUTORIAL.md §2)

def test_the_outlier_figures_are_outlier_json():
    runs = data("results/sink_lab/norms/outlier.json")["runs"]
    both = [x for x in runs if x["label"].split("/")[0] in ("baseline", "g1_elementwise")]
    ratios = [x["kl_own_term"] / x["kl_denominator"] for x in both]
    mlp = min(abs(x["from_mlp"]) / (abs(x["from_input"]) + abs(x["from_attention"]) + abs(x["from_mlp"]))
              for x in both)
    says("TUTORIAL.md", f"own term in {sum(q < 1 for q in ratios)} of {len(both)} runs (the ratio of the two below "
                        f"0.1 in {sum(q < 0.1 for q in ratios)} of them); {math.floor(mlp * 1000) / 10}% or more of",
         f"the 64 channels' in {sum(x['own_term_rank'] == 1 for x in both)} of the {len(both)} runs")
    assert {x["channels"] for x in both} == {64}
    top = max(both, key=lambda x: x["kl_own_term"] / x["kl_denominator"])
    assert top["label"].startswith("baseline/") and round(top["kl_own_term"] / top["kl_denominator"]) == 2
    says("TUTORIAL.md", "in one baseline seed it moved the prediction twice as far as the denominator")
    gn = {x["label"]: x for x in runs if x["label"].startswith("gatednorm/")}
    says("TUTORIAL.md", f"({gn['gatednorm/1337']['act_bos']:.0f} in the page's run",
         f"divided the rest by at most {max(x['rms_ratio'] for x in gn.values()):.1f}")
    first = gn["gatednorm/1337"]
    says("TUTORIAL.md", f"(its RMS {first['out_rms_bos']:.2f} in that run, {first['out_rms_rest']:.2f} on average "
         f"elsewhere), and GatedNorm's own gate does most of that: the gate's output at BOS has "
         f"{first['norm_gate_shrink']:.2f} of the RMS of what it multiplies ({first['norm_gate_shrink_rest']:.2f} on "
         f"average elsewhere), and scaled up to that average, its direction kept, the prediction after BOS moves by "
         f"{first['kl_norm_gate_size']:.4f}, where the denominator moved it by {first['kl_denominator']:.4f}.")
    assert first["kl_norm_gate_size"] > first["kl_denominator"]
    gated = [x for x in runs if x["norm_gate_shrink"] is not None]  # GatedNorm's, with G1 or without
    shrink, size = ([x[k] for x in gated] for k in ("norm_gate_shrink", "kl_norm_gate_size"))
    says("TUTORIAL.md", f"in {sum(x['norm_gate_shrink'] < x['norm_gate_shrink_rest_min'] for x in gated)} of the "
         f"{len(gated)} runs with GatedNorm (with G1 or without) it shrinks BOS's vector more than any other token's, "
         f"to {min(shrink):.2f} to {max(shrink):.2f} of its size, and with that shrink set to its mean elsewhere the "
         f"prediction after BOS moves by {min(size):.3f} to {max(size):.3f} nats, further than the outlier's "
         f"denominator moves it in {sum(x['kl_norm_gate_size'] > x['kl_denominator'] for x in gated)} of "
         f"{len(gated)}.",
         f"smaller than at any other position in {sum(x['out_rms_bos'] < x['out_rms_rest_min'] for x in runs)} of the "
         f"page's {len(runs)} runs.")
    big = sorted(x["act_bos"] for x in runs if x["label"].startswith("g1_gatednorm/") and x["act_bos"] > 50)
    says("TUTORIAL.md", f"its outlier was still {big[0]:.0f} to {big[-1]:.0f} in {WORDS[len(big)]} seeds of ten")
    pre = [x["pre_scale"] / x["pre_scale_median"] for x in runs if x["label"].startswith("g1_preaffine/")]
    says("TUTORIAL.md", f"({min(pre):.1f} to {max(pre):.1f} times its median there)")
    assert max(x["act_bos"] for x in runs if x["label"].startswith("dyt/")) < 2
    says("TUTORIAL.md", "grew no outlier on BOS")


def test_gatednorms_sink_grows_late_in_the_tutorials_seed_and_its_range_over_ten_seeds():
    """TUTORIAL.md §2: when the study's seed-1337 runs first read F-Attn above 0.3, how often GatedNorm's did so later
    than the baseline's over the ten seeds, and what their last evaluations printed (a student's run prints the
    same)."""
    def log(variant, seed):
        with open(os.path.join(REPO, f"results/sink_lab/runs/{variant}/seed{seed}/log.jsonl"), encoding="utf-8") as f:
            return [r for r in map(json.loads, f) if "first_token_attn" in r]

    def first_above(evals):
        return next(r["iter"] for r in evals if r["first_token_attn"] > 0.3)
    seeds = sorted(r["seed"] for r in data("results/sink_lab/summary.json")["runs"] if r["variant"] == "gatednorm")
    assert seeds[0] == 1337 and len(seeds) == 10
    logs = {(v, s): log(v, s) for v in ("baseline", "gatednorm") for s in seeds}
    gn, base = logs["gatednorm", 1337], logs["baseline", 1337]
    later = sum(first_above(logs["gatednorm", s]) > first_above(logs["baseline", s]) for s in seeds)
    same = sum(first_above(logs["gatednorm", s]) == first_above(logs["baseline", s]) for s in seeds)
    assert later + same == len(seeds)  # never earlier
    last = {v: [logs[v, s][-1]["first_token_attn"] for s in seeds] for v in ("gatednorm", "baseline")}
    assert all(logs[v, s][-1]["sink_heads"] == 1 for v, s in logs)  # one head: above 0.3 at the last evaluation
    says("TUTORIAL.md", f"F-Attn first read above 0.3 at step {first_above(gn)} of {gn[-1]['iter']:,}, the baseline's at "
         f"step {first_above(base)} (later in {later} of the study's 10 seeds, at the same step in the other {same}), "
         f"and its last evaluation printed F-Attn {gn[-1]['first_token_attn']:.3f}, where the baseline's printed "
         f"{base[-1]['first_token_attn']:.3f}. At its ten seeds GatedNorm's last evaluation printed "
         f"{min(last['gatednorm']):.2f} to {max(last['gatednorm']):.2f} and the baseline's "
         f"{min(last['baseline']):.2f} to {max(last['baseline']):.2f},")


def test_gns_norms_claims_are_the_labs_reports():
    counts = data(LAB)["sink_counts"]["variants"]
    gn = lab_claim(LAB, "peak_act", "gatednorm")
    assert gn["verdict"] == "reproduced"
    unseen = "results/sink_lab/norms/unseen/summary.json"
    gn2 = lab_claim(unseen, "peak_act", "gatednorm")
    k2, n2 = (data(unseen)["sink_counts"]["variants"]["gatednorm"][key] for key in ("k", "n"))
    assert gn2["verdict"] == "reproduced"
    says("TUTORIAL.md",
         f"GatedNorm without the gate grew the sink head in {counts['gatednorm']['k']} of {counts['gatednorm']['n']}, "
         f"and its peak activation was ×{gn['estimate']:.2f} [{gn['lo']:.2f}, {gn['hi']:.2f}] of the baseline's",
         f"{WORDS[n2]} seeds nobody had used, {k2} of {n2} and "
         f"×{gn2['estimate']:.2f} [{gn2['lo']:.2f}, {gn2['hi']:.2f}]")
    g1gn = lab_claim(LAB, "peak_act", "g1_gatednorm", "g1_elementwise")
    c = counts["g1_gatednorm"]
    says("TUTORIAL.md", f"G1 with GatedNorm grew no sink head in {c['n'] - c['k']} of {c['n']} seeds and its peak was "
                        f"×{g1gn['estimate']:.2f} of G1's",
         f"kept the attention sink in {counts['dyt']['k']} of {counts['dyt']['n']} seeds")


# ----------------------------------------------------------------------------
# results/sink_lab/high-lr/: the lab at 10× its rate (TUTORIAL.md §6)

def test_the_lab_at_a_high_rate_is_its_runs():
    runs = by_variant(data("results/sink_lab/high-lr/summary.json")["runs"])
    failed = 3.0  # nats, as results/sink_lab/high-lr/README.md fixed it before any run
    base, g1 = runs["baseline_lr0.3"], runs["g1_elementwise_lr0.3"]
    assert len(base) == len(g1) == 10 and all(x["val_loss"] >= failed for x in base)
    assert all(x["val_loss"] < failed and round(x["val_loss"], 1) == 2.4 for x in g1)
    assert all(x["max_act"] >= 1000 for x in base) and sum(x["loss_spikes"] for x in g1) > 0
    ratio = compare([x["max_act"] for x in base], [x["max_act"] for x in g1], "ratio")
    says("TUTORIAL.md", "Over ten seeds nobody had used", "the baseline did not train in any",
         f"G1 trained in all ten, to about 2.4 with M-Act ×{ratio['estimate']:.2f} of the baseline's",
         "(G1's runs had loss spikes")
    loss = compare(*([x["val_loss"] for x in runs[f"{m}_lr0.1"]] for m in ("baseline", "g1_elementwise")))
    assert loss["lo"] > 0
    says("TUTORIAL.md", f"ended {loss['estimate']:.2f} nats *above* the baseline")


# ----------------------------------------------------------------------------
# results/tutorial/: the prose around TUTORIAL.md's tables (§2, §5, §6)

def tutorial_runs(folder):
    return {run["label"]: run for run in data(f"results/tutorial/{folder}summary.json")["runs"]}


def test_the_attention_maps_note_names_the_layers_the_committed_figure_and_todays_show():
    """TUTORIAL.md §5 and results/tutorial/README.md: results/tutorial/attn_maps.png shows every run at the first
    run's layer of highest F-Attn (drawn before lab.analyze drew each run at its own, and the runs cannot be drawn
    again); the note under it names that layer and what today's rule draws instead, from summary.json."""
    runs = tutorial_runs("")
    f_attn = {label: run["layers"]["first_token_attn"] for label, run in runs.items()}
    own = {label: f.index(max(f)) for label, f in f_attn.items()}
    shown = own["baseline"]
    assert runs["baseline"]["sink_heads"] == 0 and own["baseline_lr2e-2"] == own["g1_lr2e-2"] != shown
    layer = own["g1_lr2e-2"]
    high = [f_attn[r] for r in ("baseline_lr2e-2", "g1_lr2e-2")]
    assert {f"{f[shown]:.2f}" for f in high} == {"0.02"}
    heads = [runs[r]["heads"]["first_token_attn"][layer] for r in ("baseline_lr2e-2", "g1_lr2e-2")]
    assert all(sum(h > 0.3 for h in hs) == 2 for hs in heads)  # their sink heads: two of that layer's four
    says("TUTORIAL.md", f"every run at one layer: layer {shown}, where the first run's F-Attn is highest "
         f"({max(f_attn['baseline']):.2f}: no sink)",
         f"the high-rate runs are drawn at layer {layer}, where in the page's runs their sink heads are (F-Attn "
         f"{high[0][layer]:.2f} and {high[1][layer]:.2f} there, against 0.02 in layer {shown}), and G1 at layer "
         f"{own['g1']}.")
    says("results/tutorial/README.md", f"`attn_maps.png` shows every run at layer {shown}, the layer of the first "
         f"run's highest F-Attn ({max(f_attn['baseline']):.2f}: no sink)",
         f"(the high-rate runs' sink heads are in layer {layer};")
    intel = {r["label"]: r["layers"]["first_token_attn"] for r in tutorial_runs("fp32-intel-2026-12-05/").values()}
    assert sorted(intel) == sorted(f_attn)  # the same four runs, rounded on another CPU, drawn by today's rule


def test_the_tutorials_lab_figures_are_drawn_from_the_studys_kept_runs_of_the_same_training():
    """results/tutorial/lab/'s figures are drawn from results/sink_lab/runs/*/seed1337 (its README says so): those
    runs measure what this folder's summary holds, to the last digit, on the same windows."""
    keys = ("val_loss", "first_token_attn", "sink_share", "max_act", "gate_mean", "layers", "heads", "windows_id",
            "map_tokens")
    study = {"baseline": "baseline", "g1": "g1_elementwise", "g1_input_independent": "g1_input_independent",
             "g1_ns_sigmoid": "g1_ns_sigmoid"}
    for label, run in tutorial_runs("lab/").items():
        kept = data(f"results/sink_lab/runs/{study[label]}/seed1337/measured.json")
        assert {k: run[k] for k in keys} == {k: kept[k] for k in keys}, label
        assert run["train_config"] | {"out_dir": None, "overwrite": None} == \
            kept["train_config"] | {"out_dir": None, "overwrite": None}, label
    says("results/tutorial/README.md", "figures were drawn again on 2026-12-05 from the study's kept measurements of "
         "those runs, whose summary is this folder's to the last digit")


def test_the_labs_one_seed_prose_is_its_summary():
    lab = tutorial_runs("lab/")
    b, g, ii, ns = (lab[k] for k in ("baseline", "g1", "g1_input_independent", "g1_ns_sigmoid"))
    assert b["first_token_attn_other"] > 0.99 and g["sink_heads"] == 0
    says("TUTORIAL.md", "over 99% of the attention of the positions that have nothing to do lands",
         f"the triggers put {b['prev_attn_trigger']:.0%} of theirs on the previous token",
         f"the same loss ({g['val_loss']:.4f} against {b['val_loss']:.4f}) with no sink (F-Attn "
         f"{g['first_token_attn']:.3f}, no sink head)",
         f"(mean score {g['gate_mean_other']:.3f} there) and opens at the triggers ({g['gate_mean_trigger']:.3f})",
         f"one number for every token ({ii['gate_mean']:.3f}), and the sink comes back (F-Attn "
         f"{ii['first_token_attn']:.3f})", f"back too ({ns['first_token_attn']:.3f})",
         f"this seed's G1 has a larger one than its baseline ({g['max_act']:.1f} against {b['max_act']:.1f})")
    assert g["max_act"] > b["max_act"]
    ratio = b["layers"]["value_norm_ratio"][0]
    says("TUTORIAL.md", f"the value norm at position 0 is about {ratio:.2f} of the others'")


ROUNDINGS = ("", "bf16/", "fp32-avx512-2026-11-25/", "fp32-intel-2026-12-05/")  # seed 1337's runs, rounded four ways


def test_section_5s_prose_is_the_four_runs_of_seed_1337():
    fp32, bf16, avx512, intel = (tutorial_runs(f) for f in ROUNDINGS)
    b, g = fp32["baseline"], fp32["g1"]
    says("TUTORIAL.md", f"G1's is lower ({r(g['max_act'], 1)} against {r(b['max_act'], 1)})",
         f"a mean of {g['gate_mean']:.2f}, with {g['gate_below_0.1']:.0%} below 0.1",
         f"an F-Attn of {min(g['first_token_attn'], b['first_token_attn']):.3f} to "
         f"{max(g['first_token_attn'], b['first_token_attn']):.3f}",
         f"({b['val_loss']:.3f} against {g['val_loss']:.3f})")
    assert b["sink_heads"] == g["sink_heads"] == 0
    says("TUTORIAL.md", f"ended at val loss {bf16['baseline']['val_loss']:.3f} (baseline) and "
                        f"{bf16['g1']['val_loss']:.3f} (G1), M-Act {bf16['baseline']['max_act']:.1f} and "
                        f"{bf16['g1']['max_act']:.1f}, gate mean {bf16['g1']['gate_mean']:.3f}")
    four = (fp32, bf16, avx512, intel)
    fattn = [s[k]["first_token_attn"] for s in four for k in ("baseline", "g1")]
    g_act, b_act = ([s[k]["max_act"] for s in four] for k in ("g1", "baseline"))
    gates = [s["g1"]["gate_mean"] for s in four]
    assert all(s[k]["sink_heads"] == 0 for s in four for k in ("baseline", "g1"))
    assert max(g_act) < min(b_act) and all(abs(s["g1"]["val_loss"] - s["baseline"]["val_loss"]) < 0.01 for s in four)
    says("TUTORIAL.md", f"no sink (F-Attn {min(fattn):.3f} to {max(fattn):.3f}, no sink head), G1's M-Act below the "
                        f"baseline's ({min(g_act):.1f} to {max(g_act):.1f} against {min(b_act):.1f} to "
                        f"{max(b_act):.1f}), a gate mean of {min(gates):.2f} to {max(gates):.2f}, and a loss "
                        "difference under 0.01 nats")


def five_bf16_seeds(lr):
    """(baseline, G1) of the five bf16 seeds, 9001-9004 and 1337, as results/tutorial/unseen-seeds/README.md
    pairs them."""
    unseen, seed = tutorial_runs("unseen-seeds/"), tutorial_runs("bf16/")
    pairs = [(unseen[f"baseline{lr}/{s}"], unseen[f"g1{lr}/{s}"]) for s in (9001, 9002, 9003, 9004)]
    return pairs + [(seed[f"baseline{lr}"], seed[f"g1{lr}"])]


def ratio_over(pairs, key="max_act"):
    return compare([b[key] for b, _ in pairs], [g[key] for _, g in pairs], "ratio")


def test_section_5s_unseen_seeds_are_theirs():
    """Decided on the four new seeds, which no claim had looked at (seed 1337's runs are where the claims came
    from), and, beside them, over the five bf16 seeds."""
    pairs = five_bf16_seeds("")
    new = pairs[:4]
    assert all(g["max_act"] < b["max_act"] and b["sink_heads"] == g["sink_heads"] == 0 for b, g in pairs)
    mact, mact5 = ratio_over(new), ratio_over(pairs)
    loss = compare([b["val_loss"] for b, _ in new], [g["val_loss"] for _, g in new])
    gains = [g["val_loss"] - b["val_loss"] for b, g in new]
    best = min(range(4), key=lambda i: gains[i])
    gates = [g["gate_mean"] for _, g in new]
    says("TUTORIAL.md",
         f"does not decide it (×{mact['estimate']:.2f} [{mact['lo']:.2f}, {mact['hi']:.2f}], {decide(mact, -1)}; "
         f"×{mact5['estimate']:.2f} [{mact5['lo']:.2f}, {mact5['hi']:.2f}] over the five bf16 seeds, with the seed "
         f"the claim came from), and a gate mean of {min(gates):.2f} to {max(gates):.2f}",
         f"G1's loss ended up to {-gains[best]:.3f} nats lower (seed {9001 + best})",
         f"({loss['estimate']:.3f} [{loss['lo']:.3f}, {loss['hi']:+.3f}], {decide(loss, -1)})")
    assert decide(mact, -1) == "inconclusive"  # "does not decide it": the words hold only while the rule says so


def test_section_6s_prose_is_its_runs():
    fp32, bf16, avx512, intel = (tutorial_runs(f) for f in ROUNDINGS)
    b, g = fp32["baseline_lr2e-2"], fp32["g1_lr2e-2"]
    says("TUTORIAL.md", f"(M-Act {b['max_act']:,.0f} without the gate, {g['max_act']:,.0f} with it)",
         f"a sink share of {b['sink_share']:.2f} and {g['sink_share']:.2f}",
         f"(sink heads {b['sink_heads']:.2f}: two of all 16)",
         f"G1 ended lower ({g['val_loss']:.3f} against {b['val_loss']:.3f}, one seed each) with sparser gates "
         f"({g['gate_below_0.1']:.0%} of scores below")
    assert b["sink_heads"] == g["sink_heads"] == 2 / 16 and b["loss_spikes"] == g["loss_spikes"] == 0
    says("TUTORIAL.md", f"ended with M-Act {bf16['baseline_lr2e-2']['max_act']:,.0f} without the gate and "
                        f"{bf16['g1_lr2e-2']['max_act']:,.0f} with it",
         f"({avx512['baseline_lr2e-2']['max_act']:,.0f} and {avx512['g1_lr2e-2']['max_act']:,.0f})")
    b, g = intel["baseline_lr2e-2"], intel["g1_lr2e-2"]
    assert g["max_act"] < b["max_act"] and g["val_loss"] < b["val_loss"]
    says("TUTORIAL.md", f"on the Intel Xeon G1's was the smaller again ({b['max_act']:,.0f} and {g['max_act']:,.0f}) "
                        f"and G1 again ended lower ({g['val_loss']:.3f} against {b['val_loss']:.3f})")
    heads = {s[k]["sink_heads"] * 16 for s in (fp32, bf16, avx512, intel) for k in ("baseline_lr2e-2", "g1_lr2e-2")}
    assert min(heads) == 0 and max(heads) == 2
    hot, cool = five_bf16_seeds("_lr2e-2"), five_bf16_seeds("")
    hot_gates, cool_gates = ([g["gate_below_0.1"] for _, g in pairs] for pairs in (hot, cool))
    gains = [b["val_loss"] - g["val_loss"] for b, g in hot]
    loss = compare([b["val_loss"] for b, _ in hot[:4]], [g["val_loss"] for _, g in hot[:4]])
    mact, mact5 = ratio_over(hot[:4]), ratio_over(hot)
    assert all(b["loss_spikes"] == g["loss_spikes"] == 0 for b, g in hot) and min(gains) > 0
    assert all(g["max_act"] < b["max_act"] for b, g in hot[:4])
    says("TUTORIAL.md", f"({min(hot_gates):.0%} to {max(hot_gates):.0%} of scores below 0.1, against "
                        f"{min(cool_gates):.0%} to {max(cool_gates):.0%})",
         f"G1 ended lower, by {min(gains):.2f} to {max(gains):.2f} nats ({loss['estimate']:.2f} [{loss['lo']:.2f}, "
         f"{loss['hi']:.2f}] on the four new seeds, {decide(loss, -1)} by the study's rule)",
         f"×{mact['estimate']:.2f} [{mact['lo']:.2f}, {mact['hi']:.2f}], {decide(mact, -1)} "
         f"(×{mact5['estimate']:.2f} [{mact5['lo']:.2f}, {mact5['hi']:.2f}] with seed 1337 too)")


def test_the_learning_rate_sweeps_prose_is_their_runs():
    runs = tutorial_runs("unseen-seeds/") | tutorial_runs("lr-sweep/")
    seeds = (9001, 9002, 9003, 9004)
    rates = {"6e-4": "_lr6e-4", "2e-3": "", "6e-3": "_lr6e-3", "2e-2": "_lr2e-2", "6e-2": "_lr6e-2",
             "2e-1": "_lr2e-1"}
    mean = {(m, lr): statistics.mean(runs[f"{m}{s}/{seed}"]["val_loss"] for seed in seeds)
            for m in ("baseline", "g1") for lr, s in rates.items()}
    for m in ("baseline", "g1"):
        assert min(rates, key=lambda lr: mean[m, lr]) == "2e-3"
    above = {(m, lr): mean[m, lr] - mean[m, "2e-3"] for m in ("baseline", "g1") for lr in ("6e-3", "2e-1")}
    says("TUTORIAL.md", "Of the six rates tried, both did best at 2e-3",
         f"its mean final loss was {above['baseline', '6e-3']:.2f} nats above its own at 2e-3 at 3× the recipe's rate "
         f"and {above['baseline', '2e-1']:.2f} at 100×, G1's {above['g1', '6e-3']:.2f} and {above['g1', '2e-1']:.2f}")
    assert all(x["loss_spikes"] == 0 and x["iter"] >= x["max_iters"] for x in runs.values())
    for lr in ("6e-3", "2e-2", "6e-2", "2e-1"):
        b, g = ([runs[f"{m}{rates[lr]}/{s}"]["val_loss"] for s in seeds] for m in ("baseline", "g1"))
        assert all(y < x for x, y in zip(b, g)) and decide(compare(b, g), -1) == "reproduced", lr
    for lr in ("6e-4", "2e-3"):
        b, g = ([runs[f"{m}{rates[lr]}/{s}"]["val_loss"] for s in seeds] for m in ("baseline", "g1"))
        assert decide(compare(b, g), -1) == "inconclusive", lr
    fp32 = tutorial_runs("lr-sweep/fp32/")
    b, g = ([fp32[f"{m}_lr6e-2/{s}"]["val_loss"] for s in (9001, 9002, 9003)] for m in ("baseline", "g1"))
    assert decide(compare(b, g), -1) == "reproduced"
    says("TUTORIAL.md", "So G1 ended lower at every seed at every rate from 3× up, reproduced by the study's rule at "
                        "each of the four (and at 6e-2 in fp32 too", "at 2e-3 and 6e-4 the difference is inconclusive")
    deep = tutorial_runs("lr-sweep-12-layers/")
    assert all(x["loss_spikes"] == 0 and x["iter"] >= x["max_iters"] for x in deep.values())
    for lr in ("2e-2", "6e-2", "2e-1"):
        assert all(deep[f"g1_lr{lr}/{s}"]["val_loss"] < deep[f"baseline_lr{lr}/{s}"]["val_loss"] for s in seeds), lr
    says("TUTORIAL.md", "no run spiked or diverged either, and G1 again ended lower at every seed from 10× up")


# ----------------------------------------------------------------------------
# results/bench_step/: a CPU's training step (docs/training.md)

def bench_step(case):
    """Each mode's summary row, its time against the plain loop's recomputed from the records as lab/bench.py
    defines it (the median over rounds of the ratio to that round's plain loop), unrounded: the json's 0.415 is
    0.4146 rounded, which rounds again to 0.41, not 0.42."""
    bench = data(f"results/bench_step/{case}/bench_step.json")
    rows = {row["mode"]: dict(row) for row in bench["summary"]}
    plain = {rec["round"]: rec["ms_per_step"] for rec in bench["records"] if rec["mode"] == "plain"}
    for mode, row in rows.items():
        row["time_vs_plain"] = statistics.median(rec["ms_per_step"] / plain[rec["round"]] for rec in bench["records"]
                                                 if rec["mode"] == mode)
    return rows


def test_the_cpu_step_table_is_the_benchmarks():
    rows = bench_step("default-run")

    def ms(row):
        return f"{r(row['ms_per_step'], 0)} ({r(row['ms_min'], 0)}–{r(row['ms_max'], 0)})"
    p, real, fp32 = rows["plain"], rows["real"], rows["real_fp32"]
    says("docs/training.md",
         f"| plain AdamW loop (fp32) | {ms(p)} | {p['page_faults_per_step']:,} | {p['peak_mem_gb']:.2f} GB |",
         f"| **train.py's (bf16 autocast)** | **{ms(real)}: {real['time_vs_plain']:.2f} of the plain loop's** | "
         f"**{real['page_faults_per_step']:,}** | **{real['peak_mem_gb']:.2f} GB: {real['peak_vs_plain']:.2f} of "
         "it** |",
         f"| train.py's in fp32 | {ms(fp32)}: {fp32['time_vs_plain']:.2f} | {fp32['page_faults_per_step']:,} | "
         f"{r(fp32['peak_mem_gb'], 2)} GB: {fp32['peak_vs_plain']:.2f} |")
    for mode, name in (("real_no_setting", "without the allocator setting"),
                       ("real_plain_loss", "with the loss over all the logits at once"),
                       ("real_unfused", "with the for-loop AdamW"),
                       ("real_no_clip", "without clipping and the non-finite check")):
        row = rows[mode]
        says("docs/training.md", f"| train.py's {name} | {ms(row)} | {row['page_faults_per_step']:,} | "
                                 f"{r(row['peak_mem_gb'], 2)} GB |")
    says("docs/training.md", f"took {real['ms_per_step']:.0f} ms in bf16 against {fp32['ms_per_step']:.0f} ms in fp32",
         f"about {round(p['page_faults_per_step'], -4):,} page faults a step")
    big = bench_step("4x256-T256")
    says("docs/training.md", f"train.py's step {big['real']['ms_per_step']:,.0f} ms against "
                             f"{big['plain']['ms_per_step']:,.0f} ms "
                             f"({big['real']['ms_per_step'] / big['plain']['ms_per_step']:.2f}), "
                             f"{big['real']['peak_mem_gb']:.2f} GB against {big['plain']['peak_mem_gb']:.2f} GB at its "
                             f"peak ({r(big['real']['peak_vs_plain'], 2)})")


def test_the_sink_labs_step_is_its_benchmark():
    rows = bench_step("sink-lab")
    p, real = rows["plain"], rows["real"]
    says("docs/training.md",
         f"train.py's step takes {real['ms_per_step']:.1f} ms ({real['ms_min']:.1f}–{real['ms_max']:.1f}) against "
         f"the plain loop's {p['ms_per_step']:.1f} ({p['ms_min']:.1f}–{p['ms_max']:.1f}), "
         f"{real['time_vs_plain']:.2f} of it, "
         f"at the same peak memory ({p['peak_mem_gb']:.2f} GB), with {real['page_faults_per_step']} page fault a step "
         f"against the plain loop's {p['page_faults_per_step']}",
         "they come out at " + ", ".join(f"{rows[m]['time_vs_plain']:.2f}" for m in ("real", "real_fp32"))
         + f" and {rows['real_plain_loss']['time_vs_plain']:.2f}")


def test_whole_runs_before_and_after_are_their_timings():
    seconds = {}
    for line in text("results/bench_step/before-and-after/summary.txt").splitlines():
        m = re.match(r"round \d+ (\w+) (old|new) ([\d.]+) s:", line)
        if m:
            seconds.setdefault((m[1], m[2]), []).append(float(m[3]))

    def span(key):
        return f"{min(seconds[key]):.1f}–{max(seconds[key]):.1f} s"
    ratio = statistics.median(seconds["default", "new"]) / statistics.median(seconds["default", "old"])
    says("docs/training.md", f"the default run took {span(('default', 'new'))} against "
                             f"{span(('default', 'old'))} ({ratio:.2f}), and the sink lab {span(('sinklab', 'new'))} "
                             f"against {span(('sinklab', 'old'))} (the same)")


# ----------------------------------------------------------------------------
# results/throughput-h200-2026-11-29/: GPT-2 small's training step (docs/training.md, docs/gpu.md)

def throughput():
    rows = {}
    for m in re.finditer(r"^(\w+)\s+(triton|torch)\s+compile=(True|False)\s+([\d.]+) ms/step\s+\d+ tok/s "
                         r"mfu=([\d.]+) peak=([\d.]+) GB", text("results/throughput-h200-2026-11-29/bench.txt"),
                         re.MULTILINE):
        rows[m[1], m[2], m[3] == "True"] = {"ms": float(m[4]), "mfu": float(m[5]), "peak": float(m[6])}
    return rows


def test_the_training_throughput_is_the_benchmarks():
    """docs/training.md and docs/gpu.md against results/bench_train.json (2026-12-04) and that day's align rows."""
    rows = {(x["variant"], x["backend"], x["compile"]): x["ms_per_step"]
            for x in data("results/bench_train.json")["records"]}
    compiled = [x for x in data("results/bench_train.json")["records"] if x["compile"]]
    padded = sorted(x["ms_per_step"] for x in data(
        "results/throughput-h200-2026-12-04/align/compiled/padded/bench_train.json")["records"])

    def spread(variant):
        xs = [v for k, v in rows.items() if k[0] == variant and k[2]]
        return f"{min(xs):.2f}-{max(xs):.2f}"

    def slower(variant):
        return sorted(rows[variant, b, True] / rows["baseline", b, True] - 1 for b in ("torch", "triton"))
    mfu = sorted(x["mfu"] for x in compiled if x["variant"] == "baseline")
    peaks = [x["peak_mem_gb"] for x in compiled]
    mfus = f"{math.floor(100 * mfu[0])}-{round(100 * mfu[-1])}%"
    says("docs/training.md", f"took {spread('g1_elementwise')} ms compiled with the default gate (G1 elementwise) and "
                             f"{spread('baseline')} ms without a gate ({mfus} MFU), peak memory "
                             f"{r(min(peaks), 1)}-{r(max(peaks), 1)} GB",
         f"The headwise gate took {spread('g1_headwise')} ms there, and {padded[0]:.2f}-{padded[-1]:.2f} ms with")
    pad_more = sorted(x["ms_per_step"] / rows["baseline", x["backend"], True] - 1 for x in data(
        "results/throughput-h200-2026-12-04/align/compiled/padded/bench_train.json")["records"])
    el, hw = slower("g1_elementwise"), slower("g1_headwise")
    after_profiles = {x["backend"]: x["ms_per_step"] / rows["baseline", x["backend"], True] - 1  # the baseline again
                      for x in data("results/throughput-h200-2026-12-04/align/compiled/unpadded/bench_train.json")[
                          "records"] if x["variant"] == "baseline"}
    says("docs/gpu.md", f"sync, the bench's {len(rows)} measurements and align",
         f"the baseline runs at {mfus} MFU, G1 elementwise "
         f"{el[0]:.0%}-{el[1]:.0%} and G1 headwise {hw[0]:.0%}-{hw[1]:.0%} slower a step unpadded, "
         f"{pad_more[0]:.1%}-{pad_more[1]:.0%} padded".replace("%-", "-"),
         f"a timing that followed three profiles took {after_profiles['triton']:.0%} longer than without them (on "
         f"the fused kernel; on PyTorch attention, one after two profiles was within "
         f"{math.ceil(100 * after_profiles['torch'])}%)")


# ----------------------------------------------------------------------------
# results/bench_kernels.json and results/kernels-h200-2026-11-26/: the fused kernel (docs/kernels.md, docs/gpu.md)

def test_the_kernel_speed_ratios_are_the_benchmarks():
    rows = data("results/bench_kernels.json")["summary"]
    fwd512 = [x["fwd_vs_sdpa_gate"] for x in rows if x["T"] == 512]
    fwd_long = [x["fwd_vs_sdpa_gate"] for x in rows if x["T"] > 512]
    both = [x["vs_sdpa_gate"] for x in rows]
    says("docs/kernels.md", f"faster at T = 512 ({min(fwd512):.2f}–{max(fwd512):.2f}) and at "
                            f"{min(fwd_long):.2f}–{max(fwd_long):.2f} above; forward+backward, "
                            f"{min(both):.2f}–{r(max(both), 2)} at every shape")
    assert min(fwd512) > 1 and max(both) < 1
    cudnn = data("results/kernels-h200-2026-11-26/bench_kernels-cudnn.json")["summary"]
    ratios = [x["vs_sdpa_gate"] for x in cudnn]
    won = [x for x in cudnn if x["vs_sdpa_gate"] > 1]
    assert [(x["D"], x["Hkv"], x["T"]) for x in won] == [(64, 8, 512)]
    span = f"{min(ratios):.2f}–{max(ratios):.2f}"
    says("docs/kernels.md", f"({span} in the same day's run with cuDNN's SDPA first",
         "one shape, D = 64, Hkv = 8, T = 512, went to the kernel")
    says("docs/gpu.md", f"their time over its time: {min(both):.2f}–{r(max(both), 2)}), and at all but one in the "
                        f"bench-cudnn step's run ({span}: D = 64, Hkv = 8, T = 512 went to the")
    default = {(x["D"], x["Hkv"], x["T"]): x["sdpa_gate"] for x in rows}
    change = max(abs(x["sdpa_gate"] / default[x["D"], x["Hkv"], x["T"]] - 1) for x in cudnn)
    assert change < 0.03, change
    says("docs/training.md", "it changed SDPA + gate's times by less than 3% at every shape")


def test_the_gpu_tier_counts_are_its_log():
    tier = text("results/kernels-h200-2026-11-26/tier.txt")
    outcome = {word: len(re.findall(rf"^\[gw\d+\] \[ *\d+%\] {word}\b", tier, re.MULTILINE))
               for word in ("PASSED", "FAILED", "SKIPPED")}
    items = int(re.search(r"(\d+) workers \[(\d+) items\]", tier)[2])
    workers = int(re.search(r"(\d+) workers \[", tier)[1])
    steps = {line.split("\t")[0]: line.split("\t") for line in text("results/kernels-h200-2026-11-26/steps.tsv")
             .splitlines()[1:]}
    ran = sum(outcome.values())
    limit = steps["tier"][3]
    assert steps["tier"][1] == "124"  # stopped at its limit
    says("docs/kernels.md", f"the GPU tier ran {ran} of its {items} tests in its {limit} s limit: "
                            f"{outcome['PASSED']} passed", f"and {outcome['SKIPPED']} CPU-only tests were skipped",
         f"The {outcome['FAILED']} failures were the T = 1 case")
    says("docs/gpu.md", f"the benchmark took {steps['bench'][2]} s; the tier, stopped at its {limit} s limit, ran "
                        f"{ran} of its {items} tests with {workers} workers: {outcome['PASSED']} passed",
         f"{outcome['SKIPPED']} CPU-only tests were skipped", f"The {outcome['FAILED']} that failed are one case")


def test_the_sink_labs_m_act_on_an_avx512_xeon_is_its_timing_page():
    """TUTORIAL.md §2 and TEACHERS.md's question 4: the README's sink lab on an Intel Xeon with AVX-512 gave G1 the
    smaller M-Act, as its timing page (tests/time_readme.py, 2026-11-30) printed it."""
    page = "results/timings/intel-xeon-2-cores-2026-11-30-0ea438f.md"
    act = {name: float(re.search(rf"^{name}: val loss .*?, M-Act ([\d.]+),", text(page), re.MULTILINE)[1])
           for name in ("baseline", "g1")}
    assert act["g1"] < act["baseline"]
    says("TUTORIAL.md", f"the same seed's G1 has the smaller ({act['g1']:.1f} against {act['baseline']:.1f}, the "
         f"README's sink lab on 2026-11-30: [results/timings/]({page})")
    says("exercises/TEACHERS.md", f"the smaller, {act['g1']:.0f} against {act['baseline']:.0f}: "
         f"[results/timings/](../{page}), 2026-11-30)")

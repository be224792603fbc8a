"""
The times the pages state (docs/timings.md above all, the README, TUTORIAL.md, docs/sink_lab.md, the exercises'
TEACHERS.md and the results pages) are the committed timing pages' own: each test here reads a figure off the page
that measured it (results/timings/*.md, which tests/time_readme.py, time_suite.py and time_sharing.py printed;
results/tutorial/README.md's tables, which tests/time_tutorial.py printed; results/bench_step/; the studies'
commands.jsonl and console output) and asserts that the page states it in its own words. A figure typed by hand, or
a timing page replaced by another, fails here. Where a page rounds a time into minutes ("4.5 to 5 minutes"), the
test accepts what that wording implies: a figure with a tenth (1.3) within 0.05 minutes of the measured one, a whole
or half minute (5, 2.5) within a quarter of a minute. The times that no committed page holds (timed by hand, read
off output that was not kept; docs/timings.md says which) are left out. The helpers are
tests/test_cited_figures_lab.py's.
"""

import functools
import glob
import os
import re
import statistics

from test_cited_figures_docs import bench_step
from test_cited_figures_lab import FRACTION, WORDS, load, squash

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/
TIMINGS = "docs/timings.md"


@functools.cache
def text(path):
    """A file of the repository, as it is."""
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        return f.read()


def page(path):
    """A page of the repository, squashed: its prose as one line."""
    return squash(text(path))


def says(path, *texts):
    """Assert that the page states each text, naming those it lacks."""
    missing = [t for t in texts if t not in page(path)]
    assert not missing, f"{path} does not state, as the committed timing pages give it: {missing}"


def stated(path, pattern):
    """The figures a page states where the pattern (its words, the figures as groups) matches, as floats."""
    m = re.search(pattern, page(path))
    assert m, f"{path} no longer says {pattern!r}"
    return [float(x) for x in m.groups()]


def about(minutes, seconds):
    """Whether a figure in minutes states the seconds within the rounding its wording implies: a tenth (1.3) to
    0.05 minutes, a whole or half minute (5, 2.5) to a quarter of a minute."""
    return abs(minutes - seconds / 60) <= (0.25 if (minutes * 2).is_integer() else 0.05) + 1e-9


def min_s(seconds):
    """'10 min 58 s', as the pages (and tests/time_suite.py) write a duration."""
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60} s"


# -----------------------------------------------------------------------------
# results/timings/: the README's commands, by tests/time_readme.py (docs/timings.md, results/timings/README.md,
# the README, docs/sink_lab.md, TUTORIAL.md §2, TEACHERS.md)

COMMANDS = ("setup", "main", "baseline", "g1", "analysis")  # the README's five timed commands, in order


def readme_page(name):
    """A tests/time_readme.py page: each command's seconds by its order, train.py's 'done:' lines and the set-up
    check's estimate of the main job ('~6 min')."""
    body = text(f"results/timings/{name}.md")
    rows = re.findall(r"^\| [^|]+ \| `([^`]+)` \| ([\d.]+) \| 0 \|$", body, re.MULTILINE)
    done = re.findall(r"^(done: (\d+) iterations in (\d+) s, .*)$", body, re.MULTILINE)
    assert len(rows) == len(COMMANDS) and len(done) == 3, name
    return {**{k: float(row[1]) for k, row in zip(COMMANDS, rows)}, "done": done,
            "estimate": re.search(r"main job (~\d+ min)", body)[1]}


def all_commands(pages):
    """The README's commands' minutes in all, rounded, which the pages must agree on."""
    minutes = {round(sum(p[k] for k in COMMANDS) / 60) for p in pages}
    assert len(minutes) == 1, minutes
    return minutes.pop()


def printed(line, key):
    """A figure train.py's last line printed, as it printed it ('val loss 3.5723')."""
    return re.search(rf"[ (,]{re.escape(key)} ([\d.]+)", line)[1]


XEON = {"bf16": ("intel-xeon-2-cores-2026-11-30-0ea438f", "intel-xeon-2-cores-2026-11-30-14feb5b"),
        "no_bf16": ("intel-xeon-2-cores-2026-11-30-0ea438f-no-bf16", "intel-xeon-2-cores-2026-11-30-14feb5b-no-bf16")}
AMD_AVX2 = ("amd-epyc-avx2-2-cores-2026-12-06-7c9c1b2", "amd-epyc-avx2-2-cores-2026-12-06-7c9c1b2-again")  # no bf16


def test_the_main_jobs_times_are_time_readmes_pages():
    rows = {"bf16": "| with its bf16 (AMX) | bf16 autocast |",
            "no_bf16": "| as a CPU without bf16 (AVX2, fp32) | fp32 |"}
    wall = {}
    for kind, names in XEON.items():
        pages = [readme_page(n) for n in names]
        wall[kind] = [p["main"] for p in pages]
        loop = [p["done"][0][2] for p in pages]
        line = pages[0]["done"][0][0]
        assert len({p["done"][0][0].split(" val loss ")[1] for p in pages}) == 1  # "each run printed the same numbers"
        numbers = " | ".join(printed(line, k) for k in ("val loss", "F-Attn", "sink heads", "M-Act", "gate mean",
                                                          "gate < 0.1"))
        loops = f"{loop[0]} s and {loop[1]} s for the 300 iterations, the rest preparing the data" \
            if kind == "bf16" else f"{loop[0]} s, {loop[1]} s"
        says(TIMINGS, f"{rows[kind]} {wall[kind][0]:.0f} s, {wall[kind][1]:.0f} s ({loops}) | {numbers} |")
    says("results/timings/README.md", f"(the main job {wall['bf16'][0]:.0f} s and {wall['bf16'][1]:.0f} s with bf16, "
                                      f"{wall['no_bf16'][0]:.0f} s both times without)")
    assert round(wall["no_bf16"][0]) == round(wall["no_bf16"][1])
    halves = {kind: round(statistics.mean(w) / 60 * 2) / 2 for kind, w in wall.items()}
    spoken = {2.0: "two", 2.5: "two and a half"}
    # the older CPU without bf16: its own table, and the top of the range the README and train.py give
    amd = [readme_page(n) for n in AMD_AVX2]
    assert len({p["done"][0][0].split(" val loss ")[1] for p in amd}) == 1  # "each run printed the same numbers"
    numbers = " | ".join(printed(amd[0]["done"][0][0], k) for k in ("val loss", "F-Attn", "sink heads", "M-Act",
                                                                     "gate mean", "gate < 0.1"))
    says(TIMINGS, f"| AMD EPYC, AVX2 (no bf16) | fp32 | {amd[0]['main']:.0f} s, {amd[1]['main']:.0f} s "
                  f"({amd[0]['done'][0][2]} s, {amd[1]['done'][0][2]} s) | {numbers} |",
         f"| without bf16 (AVX2, fp32) | fp32 | 110 s (108 s training; the data was prepared) | {numbers} |")
    xeon = [readme_page(n) for names in XEON.values() for n in names]
    (estimate,), (recent,) = {p["estimate"] for p in amd}, {p["estimate"] for p in xeon}  # lab.setup_check's
    says(TIMINGS, f'estimated "{estimate}" before each')
    says("TUTORIAL.md", f"estimates the main job at {estimate} rather than {recent.removesuffix(' min')},")
    slow = statistics.mean(p["main"] for p in amd)
    ratio = f"{slow / statistics.mean(wall['no_bf16']):.1f} times the"
    says(TIMINGS, f"{ratio} Intel Xeon's time as a CPU without bf16")
    says("results/timings/README.md", f"the main job took {amd[0]['main']:.0f} s and {amd[1]['main']:.0f} s, {ratio} "
                                      "Xeon's time as a CPU without bf16")
    top = WORDS[round(slow / 60)]
    says(TIMINGS, f"About one to {spoken[halves['bf16']]} minutes on a 2-core CPU that computes bf16; on one that "
                  f"does not, {spoken[halves['no_bf16']]} on a recent one and {top} on an older one")
    says("README.md", f"it takes from {spoken[halves['bf16']]} to {top} minutes, by the CPU")
    says("train.py", f"for {spoken[halves['bf16']]} to {top} minutes on a 2-core CPU")
    says("results/timings/README.md", f"on an idle machine (about {WORDS[all_commands(xeon)]} minutes on the Intel "
                                      f"Xeon's pages, {WORDS[all_commands(amd)]} on the AMD EPYC's)")


def test_the_sink_labs_times_are_time_readmes_pages():
    rows = {"bf16": "| with its bf16 |", "no_bf16": "| as a CPU without bf16 (AVX2) |",
            "amd": "| AMD EPYC, AVX2 (no bf16) |"}
    models = {}  # each host's four models' seconds
    for kind, names in (*XEON.items(), ("amd", AMD_AVX2)):
        a, b = (readme_page(n) for n in names)
        f_attn = ", ".join(printed(a["done"][i][0], "F-Attn") for i in (1, 2))
        iterations = "2000 iterations in " if kind == "bf16" else ""
        says(TIMINGS, f"{rows[kind]} {a['baseline']} s, {b['baseline']} s ({iterations}{a['done'][1][2]} s, "
                      f"{b['done'][1][2]} s) | {a['g1']} s, {b['g1']} s ({a['done'][2][2]} s, {b['done'][2][2]} s) | "
                      f"{a['analysis']} s, {b['analysis']} s | {f_attn} |")
        models[kind] = [p[k] for p in (a, b) for k in ("baseline", "g1")]
    xeon = models["bf16"] + models["no_bf16"]
    assert 1.8 < statistics.mean(models["amd"]) / statistics.mean(xeon) < 2.2  # "about twice the Intel Xeon's time"
    models = xeon + models["amd"]
    lo, hi = stated("docs/sink_lab.md", r"A model trains in (\d+) to (\d+) s on a 2-core CPU")
    assert lo <= min(models) and max(models) <= hi, (models, lo, hi)  # the ranges the pages give hold these runs
    says(TIMINGS, f"## The sink lab: {lo:.0f} to {hi:.0f} s a model",
         f"On a laptop CPU, {lo:.0f} to {hi:.0f} s a model")
    says("TUTORIAL.md", f"{lo:.0f} to {hi:.0f} seconds on a 2-core CPU")
    says("exercises/TEACHERS.md", f"({lo:.0f} to {hi:.0f} s a model, by the CPU)")
    for number in ("08_predict_then_measure", "11_active_dormant"):  # the exercises that train the lab's two runs
        for path in (f"exercises/{number}/README.md", f"exercises/{number}/starter.py",
                     f"exercises/solutions/{number}.py"):
            says(path, f"{lo:.0f} to {hi:.0f} seconds")
    says("exercises/check.py", f"({lo:.0f} to {hi:.0f} seconds on a 2-core CPU; README.md")


# -----------------------------------------------------------------------------
# results/timings/suite-*.md: the test suite, by tests/time_suite.py (docs/timings.md)

def suite_page(commit, versions=""):
    """A tests/time_suite.py page (of one commit, with what its name ends in: its versions, "-torch2.6", or "-again",
    a second run): wall-clock and pytest's seconds, its summary counts, the tests' sum, by file."""
    name, = [n for n in os.listdir(os.path.join(REPO, "results", "timings"))
             if n.startswith("suite-") and n.endswith(f"-{commit}{versions}.md")]
    body = text(f"results/timings/{name}")
    wall = int(re.search(r"^- wall-clock: (\d+) s \(", body, re.MULTILINE)[1])
    failed, passed, pytest = re.search(r"^- pytest: (?:(\d+) failed, )?(\d+) passed, .* in ([\d.]+)s \(", body,
                                       re.MULTILINE).groups()
    skipped = int(re.search(r"^- pytest: .*?(\d+) skipped", body, re.MULTILINE)[1])
    tests = int(re.search(r"add up to (\d+) s;", body)[1])
    files = {f: float(s) for f, s in re.findall(r"^\| (tests/\S+) \| \d+ \| ([\d.]+) \|$", body, re.MULTILINE)}
    return {"name": name, "wall": wall, "passed": int(passed), "pytest": float(pytest), "tests": tests,
            "files": files, "failed": int(failed or 0), "skipped": skipped}


def test_the_suites_times_are_time_suites_pages():
    now, again = suite_page("757fcad"), suite_page("757fcad", "-again")
    assert now["skipped"] == 112 + 2 + 1  # the skips' reasons, as `-rs` listed them, add up to the page's count
    says(TIMINGS, f"**Now:** {now['passed']} passed, {now['skipped']} skipped (112 that need a GPU, two that need a "
                  "user other than root, and one that compares the GPT-2 tokens with tiktoken's own download where "
                  f"`GPT2_TIKTOKEN_CACHE` names it: `-rs` lists them) at 757fcad, in {min_s(now['wall'])} on a fresh "
                  f"clone (pytest's own time {min_s(now['pytest'])}; the tests' own times add up to {now['tests']} s)")
    budget = 600
    assert 0 < now["wall"] - budget < 60
    says(TIMINGS, f"The budget is 10 minutes; this run took {now['wall'] - budget} s more.")
    assert (again["passed"], again["skipped"], again["failed"]) == (now["passed"], now["skipped"], 0)
    says(TIMINGS, f"The same command right after it, on the same host and commit, took {min_s(again['wall'])} ([its "
                  f"page](../results/timings/{again['name']})): every file of 5 s or more took from")
    less = {name: 1 - again["files"][name] / seconds for name, seconds in now["files"].items() if seconds >= 5}
    low, high = min(less, key=less.get), max(less, key=less.get)
    assert less[low] > 0  # every file faster the second time: the host, not the code
    says(TIMINGS, f"took from {less[low]:.0%} ({low}) to {less[high]:.0%} ({high}) less, the host's speed")
    f = now["files"]
    longest = sorted(f, key=f.get, reverse=True)[:4]
    assert longest == ["tests/test_exercises.py", "tests/test_repro.py", "tests/test_gpu_scripts.py",
                       "tests/test_train.py"], longest
    says(TIMINGS, f"The longest files: the exercises' ({f[longest[0]]:.0f} s), the study's tools ({f[longest[1]]:.0f} "
                  f"s), the GPU scripts at toy size ({f[longest[2]]:.0f} s), the training script's "
                  f"({f[longest[3]]:.0f} s).")
    ci = suite_page("cf8af86")
    says(TIMINGS, f"{now['passed'] - ci['passed']} more tests pass than at cf8af86 ({ci['passed']} passed, "
                  f"{min_s(ci['wall'])} on this kind of host, 2026-12-04; below).")
    old = suite_page("b813cd2")
    says(TIMINGS, f"{old['passed']} passed, {old['skipped']} skipped at b813cd2, in {min_s(old['wall'])} on a fresh "
                  f"clone (pytest's own time {min_s(old['pytest'])}; the tests' own times add up to {old['tests']} s)",
         f"2026-12-02 ([its page](../results/timings/{old['name']})): more than twice the budget.")
    assert 2 < old["wall"] / budget < 2.5
    f = old["files"]
    longest = sorted(f, key=f.get, reverse=True)[:3]
    assert longest == ["tests/test_exercises.py", "tests/test_repro.py", "tests/test_gpu_scripts.py"], longest
    says(TIMINGS, f"The longest files: the exercises' ({f[longest[0]]:.0f} s:", f"the study's tools "
                  f"({f[longest[1]]:.0f} s), the GPU scripts at toy size ({f[longest[2]]:.0f} s).",
         f"(tests/test_sink_lab.py: {f['tests/test_sink_lab.py']:.0f} s beside the rest of the suite")
    was = suite_page("d4531f5")
    says(TIMINGS, f"{was['passed']} passed at d4531f5 ({min_s(was['wall'])}, pytest's own {min_s(was['pytest'])}, "
                  f"{was['tests']} s of tests, 2026-12-02)",
         f"(the exercises' {was['files']['tests/test_exercises.py']:.0f} s then:")
    ratio = {name: f[name] / seconds for name, seconds in was["files"].items() if seconds >= 5}
    exercises = ratio.pop("tests/test_exercises.py")
    low, high = min(ratio, key=ratio.get), max(ratio, key=ratio.get)
    says(TIMINGS, f"every other file took from {round(100 * (1 - ratio[low])):.0f}% less ({low}) to "
                  f"{round(100 * (ratio[high] - 1)):.0f}% more ({high})",
         f"The exercises' took {round(100 * (exercises - 1)):.0f}% more: in the suite, what the fork saves is within "
         "the host's spread")
    assert ratio[low] <= exercises <= ratio[high]
    first = suite_page("4a159f1")
    says(TIMINGS, f"{first['passed']} passed at 4a159f1 ({min_s(first['wall'])}, pytest's own "
                  f"{min_s(first['pytest'])}, {first['tests']} s of tests, 2026-12-01)",
         f"([its page](../results/timings/{first['name']})), two and a half minutes over the budget")
    assert 135 <= first["wall"] - budget < 165
    f = first["files"]
    says(TIMINGS, f"Its longest files: the exercises' ({f['tests/test_exercises.py']:.0f} s), the study's tools "
                  f"({f['tests/test_repro.py']:.0f} s), the GPU scripts at toy size "
                  f"({f['tests/test_gpu_scripts.py']:.0f} s).")
    was = suite_page("7b732a9")
    says(TIMINGS, f"{was['passed']} passed at 7b732a9 ({min_s(was['wall'])}, pytest's own {min_s(was['pytest'])}, "
                  f"{was['tests']} s of tests, 2026-12-01)", f"([its page](../results/timings/{was['name']})), a "
                  f"minute over the budget.")
    assert 30 <= was["wall"] - budget < 90
    before = suite_page("3a444d5")
    says(TIMINGS, f"{before['passed']} passed at 3a444d5 ({min_s(before['wall'])}, pytest's own "
                  f"{min_s(before['pytest'])}, {before['tests']} s of tests, 2026-12-01)",
         f"([its page](../results/timings/{before['name']}))")
    late = suite_page("65d9d8c")
    says(TIMINGS, f"{late['passed']} passed at 65d9d8c ({min_s(late['wall'])}, pytest's own {min_s(late['pytest'])}, "
                  f"{late['tests']} s of tests, 2026-11-30, late)")
    for commit in ("e77ba13", "f236da8", "8532121"):
        p = suite_page(commit)
        says(TIMINGS, f"{min_s(p['wall'])} at {commit} ({p['passed']} passed, {p['tests']} s of tests)"
             if commit == "e77ba13" else f"{min_s(p['wall'])} at {commit} ({p['passed']} passed, {p['tests']} s)")
    old = suite_page("15b69b7", "-torch2.11")
    says(TIMINGS, f"| 2.11.0+cu130 | 3.6.0 | 15b69b7 | {old['passed']} passed, 113 skipped ([its page]"
                  f"(../results/timings/{old['name']}), by `python tests/time_suite.py` in that venv) | "
                  f"{min_s(old['wall'])} |")


def test_the_suites_runs_at_the_newest_torch_and_at_the_floor_are_their_pages():
    """docs/timings.md's table of the suite at both ends of requirements.txt: each row's result and time its page's,
    the versions each page names."""
    rows = [("fc11288", "-torch2.15", "2.15.0+cu132", "3.9.0"), ("fc11288", "-torch2.6", "2.6.0+cu124", "3.2.0"),
            ("e30f003", "-torch2.6", "2.6.0+cu124", "3.2.0")]
    for commit, versions, torch_version, triton_version in rows:
        p = suite_page(commit, versions)
        assert f"torch {torch_version}, Triton {triton_version}," in text(f"results/timings/{p['name']}")
        result = (f"{p['failed']} failed, " if p["failed"] else "") + f"{p['passed']} passed, {p['skipped']} skipped " \
            f"([its page](../results/timings/{p['name']}))"
        row, = [line for line in text(TIMINGS).splitlines() if p["name"] in line]
        assert row.startswith(f"| {torch_version}, ") and f" | {triton_version} | " in row and result in row, row
        assert row.endswith(f" | {min_s(p['wall'])} |"), row
        assert (p["failed"] == 0) == (commit != "fc11288" or versions != "-torch2.6")


def test_the_suites_runs_on_each_python_are_their_pages():
    """docs/timings.md's table of the suite under each Python at cf8af86: each row's result and time its page's, the
    Python and torch each page names; 3.10's later run at b007ea6, its sentence; and the sentence that sets the 3.11 run
    (CI's versions) beside the budget."""
    rows = [("", "3.11.7", "2.13.0+cpu"), ("-py3.12", "3.12.1", "2.15.0+cu132"), ("-py3.13", "3.13.0", "2.15.0+cu132")]
    for versions, python, torch_version in rows:
        p = suite_page("cf8af86", versions)
        assert f"Python {python}, torch {torch_version}," in text(f"results/timings/{p['name']}")
        result = (f"{p['failed']} failed, " if p["failed"] else "") + f"{p['passed']} passed, {p['skipped']} skipped " \
            f"([its page](../results/timings/{p['name']}))"
        row, = [line for line in text(TIMINGS).splitlines() if line.startswith("|") and f"/{p['name']})" in line]
        assert row.startswith(f"| {python} | {torch_version} | ") and result in row, row
        assert row.endswith(f" | {min_s(p['wall'])} |"), row
    py310 = suite_page("b007ea6", "-py3.10")  # later, in a sentence of its own
    assert "Python 3.10.13, torch 2.14.1+cu130, Triton 3.8.0, NumPy 2.2.6," in text(f"results/timings/{py310['name']}")
    says(TIMINGS, f"Under Python 3.10 the same way, later that day at b007ea6 (torch 2.14.1+cu130, Triton 3.8.0, NumPy "
                  f"2.2.6, matplotlib 3.10.9, transformers 5.20.2: the last releases for 3.10), {py310['passed']} "
                  f"passed, {py310['skipped']} skipped in {min_s(py310['wall'])} ([its page](../results/timings/"
                  f"{py310['name']}))")
    assert not py310["failed"]
    ci = suite_page("cf8af86")
    assert ci["wall"] < 600
    says(TIMINGS, f"with CI's versions, took {min_s(ci['wall'])} at cf8af86 ({ci['passed']} passed, {ci['skipped']} "
                  f"skipped; [its page](../results/timings/{ci['name']}), 2026-12-04), within the budget")


def unchanged_files_moved(after, before):
    """How much longer each test file took at commit `after` than at `before`, among the files whose tests did not
    change between them (git diff --stat BEFORE AFTER -- tests/; files under a second left out): {file: ratio - 1}."""
    changed = {("4a159f1", "7b732a9"): {"tests/test_cli.py", "tests/test_data.py", "tests/test_docs.py",
                                        "tests/test_exercises.py", "tests/test_gradebook.py", "tests/test_train.py",
                                        "tests/test_cited_figures_lab.py"},
               ("7b732a9", "3a444d5"): {"tests/test_docs.py", "tests/test_repro.py"}}[after, before]
    now, was = suite_page(after)["files"], suite_page(before)["files"]
    return {f: now[f] / was[f] - 1 for f in was if f in now and f not in changed and was[f] >= 1}


def test_the_suites_runs_are_compared_as_the_pages_give_them():
    """What the two files holding 7b732a9's new tests took more, and how far the files that did not change moved (the
    host's spread: the page once said 5-14%, six files of twenty), at 7b732a9 and at 4a159f1."""
    now, before = suite_page("7b732a9")["files"], suite_page("3a444d5")["files"]
    grown = [now[f] - before[f] for f in ("tests/test_repro.py", "tests/test_docs.py")]
    change = unchanged_files_moved("7b732a9", "3a444d5")
    tutorial = change.pop("tests/test_tutorial.py")
    low, high = min(change, key=change.get), max(change, key=change.get)
    says(TIMINGS, f"tests/test_repro.py and tests/test_docs.py, took {grown[0]:.0f} s and {grown[1]:.0f} s longer "
                  "than in the run below, three hours earlier; the files that did not change moved by the host's "
                  f"spread, from {-change[low]:.0%} less ({low}) to {change[high]:.0%} more ({high}), the tutorial's "
                  f"{tutorial:.0%} more.")
    change = unchanged_files_moved("4a159f1", "7b732a9")
    low, high = min(change, key=change.get), max(change, key=change.get)
    says(TIMINGS, "The files whose tests did not change since the run below, four hours earlier, moved by the host's "
                  f"spread, from {-change[low]:.0%} less ({low}) to {change[high]:.0%} more ({high}), so this figure "
                  "moves by a minute or more")


# -----------------------------------------------------------------------------
# results/timings/sharing-*.md: a CPU shared by several trainings, by tests/time_sharing.py (docs/timings.md,
# TEACHERS.md)

def sharing_rows():
    body = text("results/timings/sharing-intel-xeon-2-cores-2026-11-30-2000-steps.md")
    rows = re.findall(r"^\| (\d) \| (PyTorch default \(one per core\)|OMP_NUM_THREADS=1) \| ([\d, ]+) "
                      r"\| ([\d.]+) s \|$", body, re.MULTILINE)
    assert len(rows) == 4
    return {(int(n), "one" if t == "OMP_NUM_THREADS=1" else "torch"): ([int(x) for x in each.split(", ")], float(w))
            for n, t, each, w in rows}


def test_a_shared_cpus_times_are_time_sharings_page():
    rows = sharing_rows()
    names = {"torch": "PyTorch's (one per core)", "one": "`OMP_NUM_THREADS=1`"}
    for (n, threads), (each, wall) in rows.items():
        says(TIMINGS, f"| {n} | {names[threads]} | {', '.join(map(str, each))} s | "
                      f"{wall:.0f} s |")
    alone = 1 - rows[1, "torch"][0][0] / rows[1, "one"][0][0]  # the speed one thread loses, alone
    gain = rows[3, "torch"][1] / rows[3, "one"][1]
    says(TIMINGS, f"one run alone loses a {FRACTION[round(1 / alone)]}, three at once gain {WORDS[round(gain)]} times")
    says("exercises/TEACHERS.md",
         f"three sink-lab runs side by side on 2 cores took about {round(statistics.mean(rows[3, 'torch'][0]) / 60)}"
         f" minutes each that way and {round(statistics.mean(rows[3, 'one'][0]) / 60)} minute each with one thread")


# -----------------------------------------------------------------------------
# results/tutorial/README.md: the tutorial, by tests/time_tutorial.py (docs/timings.md, TUTORIAL.md, TEACHERS.md)

OLDER_CPU = "2 cores, AMD EPYC, Python 3.11.7, 2026-12-06"  # the fourth host: AVX2, no AVX-512, no bf16


def tutorial_tables():
    """The tables results/tutorial/README.md keeps, each as {caption, bf16, idle, §: seconds} (§0: the start)."""
    body = text("results/tutorial/README.md")
    tables = []
    for caption, rows in re.findall(r"^((?:TUTORIAL\.md|tutorial\.ipynb), every .*)\n\n\| section .*\n\| --- .*\n"
                                    r"((?:\|.*\n)+)", body, re.MULTILINE):
        older = caption.endswith(OLDER_CPU)  # a CPU without bf16 of its own: fp32 with or without --no_bf16
        t = {"caption": caption, "bf16": "as a CPU without bf16" not in caption and not older,
             "notebook": "ipynb" in caption, "older": older}
        for name, blocks, seconds in re.findall(r"^\| ([^|]+) \| ([^|]+) \| (\d+) \|$", rows, re.MULTILINE):
            key = "all" if name == "all" else 0 if name == "(start)" else int(name.split(".")[0])
            t[key] = int(seconds)
            t.setdefault("blocks", {})[key] = blocks
        tables.append(t)
    assert len(tables) == 9 and sum(t["older"] for t in tables) == 1, [t["caption"] for t in tables]
    # the page's one run not on an idle machine: the blocks' run beside the notebook's ("beside a process reading
    # files"), the last table
    assert "the blocks' beside a process reading files" in squash(body) and not tables[-1]["notebook"]
    for t in tables:
        t["idle"] = t is not tables[-1]
        t["fifth run"] = t["blocks"][2].startswith("4 / 7")
    return tables


def test_the_timings_pages_tutorial_paragraph_is_its_tables():
    old, x, xb, a, ab, f, fb, jup, blocks = tutorial_tables()
    says(TIMINGS, f"{f['all']} s on an idle 2-core AMD EPYC run as a CPU without bf16 (fp32, AVX2 at most), "
                  f"{fb['all']} s on the same CPU with its bf16 in use (2026-11-27). §5 and §6, four training runs on "
                  f"real text, took {f[5] + f[6]} s and {fb[5] + fb[6]} s of that; the sink lab's §2, {f[2]} s and "
                  f"{fb[2]} s;",
         f"On the slower host (2026-11-29, at 6741cbe): {a['all']} s without bf16 and {ab['all']} s with it; §5 and "
         f"§6, {a[5] + a[6]} s and {ab[5] + ab[6]} s; §2, {a[2]} s and {ab[2]} s.",
         f"{x['all']} s without bf16 and {xb['all']} s with it; §5 and §6, {x[5] + x[6]} s and {xb[5] + xb[6]} s; "
         f"§2, {x[2]} s and {xb[2]} s.", f"{jup['all']} s against {blocks['all']} s on a 2-core AMD EPYC with bf16")
    says(TIMINGS, f"On an older 2-core AMD EPYC with AVX2 and no AVX-512, so without bf16 (2026-12-06, at 7c9c1b2): "
                  f"{old['all']} s; §5 and §6, {old[5] + old[6]} s; §2, {old[2]} s: {old['all'] / x['all']:.1f} times "
                  "the Intel Xeon's time without bf16.")
    says("results/tutorial/README.md",
         f"all of them {old['all'] / x['all']:.1f} times (§2, with its five runs on both, {old[2] / x[2]:.1f} times;")
    assert all(2.7 < old[k] / x[k] < 3.5 for k in (2, 5, 6))  # "each section that trains took about three times"
    line = re.search(r"line (\d+) \(bash\)", old["blocks"][2])[1]  # §2's slowest block (TEACHERS.md's plan quotes it)
    says("results/tutorial/README.md", f"its slowest block, line {line}, trains the two other gates and measures all "
                                       "four runs")
    rest = [t["all"] - t[2] - t[5] - t[6] for t in (x, xb, a, ab, f, fb)]  # the paragraph's first hosts
    assert max(rest) < 5
    says(TIMINGS, "everything else, under 5 s")


def check_range(path, pattern, *runs):
    """The ranges a page states where the pattern matches (its figures in minutes, two a range) are those of the
    runs' seconds, one list of seconds a range."""
    figures = stated(path, pattern)
    assert len(figures) == 2 * len(runs), pattern
    for (lo, hi), seconds in zip(zip(figures[::2], figures[1::2]), runs):
        assert about(lo, min(seconds)) and about(hi, max(seconds)), \
            f"{path}: {lo} to {hi} minutes, where the timed runs took {min(seconds) / 60:.2f} to " \
            f"{max(seconds) / 60:.2f}"


def test_the_tutorials_times_are_its_tables():
    """TUTORIAL.md's and TEACHERS.md's ranges, over every idle run the tables keep (the notebook's among them: the
    same blocks, cell by cell), without bf16 and with it."""
    every = tutorial_tables()
    idle = [t for t in every if t["idle"] and not t["older"]]  # the older CPU's: a sentence of its own
    fp32, bf16 = [t for t in idle if not t["bf16"]], [t for t in idle if t["bf16"]]

    def each(tables, *sections):
        return [sum(t[s] for s in sections) for t in tables]
    old = next(t for t in every if t["older"])
    says("TUTORIAL.md", f"On an older 2-core CPU without bf16 (an AMD EPYC with AVX2 and no AVX-512) they took "
                        f"{old['all'] / 60:.0f} minutes, {(old[5] + old[6]) / 60:.0f} of them in §5 and §6")
    says("exercises/TEACHERS.md", f"about {(old[5] + old[6]) / 60:.0f} on an older one (an AMD EPYC without AVX-512;")
    slowest = int(re.search(r"line \d+ \(bash\): (\d+) s", old["blocks"][2])[1])  # §2's: the two other gates
    says("exercises/TEACHERS.md", f"(40 to 90 s for both and their measurement, {round(slowest, -1)} on an older CPU)")
    check_range("TUTORIAL.md", r"Its blocks compute for ([\d.]+) to ([\d.]+) minutes in all on an idle 2-core CPU "
                               r"without bf16 \(([\d.]+) to ([\d.]+) minutes on one with bf16,",
                each(fp32, "all"), each(bf16, "all"))
    table = r" \(([\d.]+) to ([\d.]+) with bf16\) \|"
    check_range("TUTORIAL.md", r"the dataset's preparation included: ([\d.]+) to ([\d.]+) minutes" + table,
                each(fp32, 5), each(bf16, 5))
    check_range("TUTORIAL.md", r"the measurement of all four: ([\d.]+) to ([\d.]+) minutes" + table,
                each(fp32, 6), each(bf16, 6))
    prose = r" \(([\d.]+) to ([\d.]+) minutes (?:in all )?on a 2-core CPU without bf16, ([\d.]+) to ([\d.]+) with it\)"
    check_range("TUTORIAL.md", r"on the same validation windows" + prose, each(fp32, 5), each(bf16, 5))
    check_range("TUTORIAL.md", r"measure all four runs" + prose, each(fp32, 6), each(bf16, 6))
    check_range("TUTORIAL.md", r"§1 to §4 and §7 compute for ([\d.]+) to ([\d.]+) minutes",
                each(idle, 0, 1, 2, 3, 4, 7))
    check_range("TUTORIAL.md", r"§5 and §6 add ([\d.]+) to ([\d.]+) minutes of training without bf16",
                each(fp32, 5, 6))
    pair = r"([\d.]+) to ([\d.]+) minutes{} on a 2-core CPU\s+without bf16 \(([\d.]+) to ([\d.]+) with bf16\)"
    for words in ("train four models on real text: " + pair.format(""), "measure them, " + pair.format(" in all")):
        check_range("exercises/TEACHERS.md", words, each(fp32, 5, 6), each(bf16, 5, 6))


def test_the_sink_labs_section_names_every_run_since_its_fifth():
    """TUTORIAL.md said §2's five runs were timed on one host: the Intel Xeon's two runs and the AMD EPYC's of
    2026-12-01 (the notebook's and the blocks') all have §2's fifth run."""
    tables = [t for t in tutorial_tables() if not t["older"]]  # the hosts TUTORIAL.md's table gives
    fifth = [t for t in tables if t["fifth run"]]
    hosts = {re.search(r"2 cores, ([^,]+), .*(\d{4}-\d\d-\d\d)$", t["caption"]).groups() for t in fifth}
    fp32, bf16 = [t[2] for t in fifth if not t["bf16"]], [t[2] for t in fifth if t["bf16"]]
    assert len(fp32) == 1
    lo, hi = (format(x / 60, ".1f") for x in (min(bf16), max(bf16)))
    says("TUTORIAL.md", f"{fp32[0] / 60:.1f} minutes in all ({lo} to {hi} with bf16) on the {WORDS[len(hosts)]} hosts "
                        "timed since the fifth run was added")
    four = [t for t in tables if not t["fifth run"]]
    check_range("TUTORIAL.md", r"four runs took ([\d.]+) to ([\d.]+) minutes, ([\d.]+) to ([\d.]+) with bf16",
                [t[2] for t in four if not t["bf16"]], [t[2] for t in four if t["bf16"]])


# -----------------------------------------------------------------------------
# results/bench_step/: a training step on a CPU (docs/timings.md; docs/training.md's are
# tests/test_cited_figures_docs.py's)

def test_the_cpu_steps_times_are_the_benchmarks():
    rows = bench_step("default-run")
    p, real, fp32 = rows["plain"], rows["real"], rows["real_fp32"]
    says(TIMINGS, f"train.py's training step takes {real['time_vs_plain']:.2f} of the time of a plain AdamW loop",
         f"at {real['peak_vs_plain']:.2f} of its peak memory and without a page fault; {fp32['time_vs_plain']:.2f} of "
         f"it in fp32 (`python -m lab.bench --step`: {real['ms_per_step']:.0f} ms a step in bf16, "
         f"{fp32['ms_per_step']:.0f} in fp32, against {p['ms_per_step']:.0f}; 2-core CPU, "
         f"{load('bench_step/default-run/bench_step.json')['date'][:10]};")
    assert real["page_faults_per_step"] == 0
    lab = bench_step("sink-lab")
    says(TIMINGS, f"took {lab['real']['time_vs_plain']:.2f} of the plain loop's ({lab['real']['ms_per_step']:.1f} ms "
                  f"against {lab['plain']['ms_per_step']:.1f},")
    seconds = {}
    for line in text("results/bench_step/before-and-after/summary.txt").splitlines():
        m = re.match(r"round \d+ default (old|new) ([\d.]+) s:", line)
        if m:
            seconds.setdefault(m[1], []).append(float(m[2]))
    says(TIMINGS, f"took the run to {statistics.median(seconds['new']) / statistics.median(seconds['old']):.2f} of "
                  "what it took before")


# -----------------------------------------------------------------------------
# the studies' commands.jsonl and console output: each run's seconds, the steps' ms (the results pages)

def seconds(path):
    return [r["seconds"] for r in load(path)]


def test_the_results_pages_run_times_are_their_commands():
    h200 = seconds("study-h200-2026-11-26/commands.jsonl")
    says("results/study-h200-2026-11-26/README.md", f"Two runs trained side by side, {min(h200):.0f}–{max(h200):.0f} "
                                                    "s each ([commands.jsonl](commands.jsonl))")
    h100 = seconds("study-h100-2026-11-25/commands.jsonl")  # docs/study.md's and gpu.md's: test_cited_figures_docs
    says("TUTORIAL.md", f"an estimate from the committed H100 runs, two of which side by side took "
                        f"{min(h100):.0f}–{max(h100):.0f} s")
    hot = sorted(seconds("sink_lab/high-lr/commands.jsonl"))
    slow = [s for s in hot if s > 900]
    says("results/sink_lab/high-lr/README.md", f"{min(hot):.0f}-{max(s for s in hot if s < 900):.0f} s a run, "
                                               f"{WORDS[len(slow)]} at over {min(slow) // 10 * 10:.0f} s beside the "
                                               "test suite")
    sweep = sorted(seconds("tutorial/lr-sweep/commands.jsonl"))
    says("results/tutorial/lr-sweep/README.md", f"({sweep[0]}-{sweep[-2]} s a run, one at {sweep[-1]} s while another",
         "(`fp32/commands.jsonl`: {}-{} s a run)".format(*(f(seconds("tutorial/lr-sweep/fp32/commands.jsonl"))
                                                          for f in (min, max))))
    deep = sorted(seconds("tutorial/lr-sweep-12-layers/commands.jsonl"))
    says("results/tutorial/lr-sweep-12-layers/README.md",
         f"({deep[0]}-{deep[-3]} s a run, but for two that ran while other work ran beside them: {deep[-2]} s beside "
         f"the exercises' tests, {deep[-1]} s beside a trial of lab.analyze)",
         "(`fp32/commands.jsonl`: {}-{} s a run)".format(*(f(seconds("tutorial/lr-sweep-12-layers/fp32/commands.jsonl"))
                                                          for f in (min, max))))


def step_ms(job_numbers=None, first=2):
    """Each variant's step times (ms) in results/repro/'s console output, the first log lines of a run left out."""
    out = {}
    for path in sorted(os.listdir(os.path.join(REPO, "results", "repro"))):
        m = re.fullmatch(r"study-(\d+)-output\.txt", path)
        if not m or (job_numbers and int(m[1]) not in job_numbers):
            continue
        for run, body in re.findall(r"^=== (\S+) seed \d+:.*\n((?:(?!===).*\n)*)",
                                    text(f"results/repro/{path}"), re.MULTILINE):
            ms = [int(x) for x in re.findall(r"^iter \d+: .*?, (\d+) ms,", body, re.MULTILINE)][first:]
            if ms:  # a run this job trained (not one it found finished)
                out.setdefault(run, []).append(ms)
    return out


def test_the_gpu_studys_step_times_are_its_console_output():
    ms = {v: [x for run in runs for x in run] for v, runs in step_ms().items()}
    gates = [x for v in ms if v.startswith(("g1_", "g2_")) and v != "g1_elementwise_matched" for x in ms[v]]
    says("results/repro/README.md", f"the baseline {min(ms['baseline'])}–{max(ms['baseline'])} ms a step",
         f"every G1 variant and G2 {min(gates)}–{max(gates)} ms",
         f"G1 at the matched count {min(ms['g1_elementwise_matched'])}–{max(ms['g1_elementwise_matched'])} ms")
    medians = {v: [statistics.median(run) for run in runs] for v, runs in step_ms({1, 2, 7}, first=1).items()}
    b, g = medians["baseline"], medians["g1_elementwise"]
    says("results/repro/README.md", f"the median step was {min(b):.0f}–{max(b):.0f} ms for the baseline and "
                                    f"{min(g):.0f}–{max(g):.0f} ms for G1 elementwise")


def logged_seconds(pattern):
    """Each run's training time, the time_s of its log's last record, for the runs under results/ the pattern names."""
    return [load(os.path.relpath(path, os.path.join(REPO, "results")))[-1]["time_s"]
            for path in glob.glob(os.path.join(REPO, "results", pattern, "log.jsonl"))]


def test_the_unseen_seeds_and_norms_run_times_are_their_logs_and_commands():
    later = [s for v in ("g1_ns_sigmoid", "g1_input_independent", "g2_elementwise")  # "the other three afterwards"
             for s in logged_seconds(f"sink_lab/unseen-seeds/runs/{v}/seed*")]
    says("results/sink_lab/unseen-seeds/README.md",
         f"at one thread, {min(later):.0f}-{max(later):.0f} s of training a run (the `time_s` of their logs)")
    tutorial = logged_seconds("tutorial/unseen-seeds/runs/*/seed*")
    assert len(tutorial) == 16
    says("results/tutorial/unseen-seeds/README.md",
         f"{min(tutorial):.0f}-{max(tutorial):.0f} s of training a run (the `time_s` of their logs)")
    again = [r for root in ("own", "norms", "unseen") for r in load(f"sink_lab/norms/retrained/{root}.jsonl")]
    assert len(again) == 72 and {(r["exit_code"], r["parallel"]) for r in again} == {(0, 2)}  # outlier.json's 72 runs
    says("results/sink_lab/norms/README.md", f"in [retrained/](retrained/): {min(r['seconds'] for r in again):.0f}-"
                                             f"{max(r['seconds'] for r in again):.0f} s a run, two at a time)")
    prepared = re.findall(r"^prepare\t0\t(\d+)\t", "".join(text(f"results/repro/{n}") for n in sorted(os.listdir(
        os.path.join(REPO, "results", "repro"))) if n.endswith("-output.txt")), re.MULTILINE)
    assert len(prepared) == 1  # job 1's output alone keeps its steps' seconds
    says("results/repro/README.md", f"Each job prepared the corpus ({prepared[0]} s in job 1, whose output keeps its "
                                    "steps' seconds)")


# -----------------------------------------------------------------------------
# results/timings/grading-*.md: grading one student, by tests/time_grading.py (docs/timings.md, TEACHERS.md)

def grading_page(name):
    """(untouched seconds, solved seconds, exercises, checks) of a time_grading.py page, each grading as it should
    be."""
    body = text(f"results/timings/{name}")
    rows = re.findall(r"^\| (every starter untouched|every exercise solved[^|]*) \| ([\d.]+) \| \d \| "
                      r"(\d+) of (\d+) \| (\d+) of (\d+) \|$", body, re.MULTILINE)
    untouched = [s for what, s, *_ in rows if what == "every starter untouched"]
    solved = [(s, int(p), int(t), int(c), int(ct)) for what, s, p, t, c, ct in rows
              if what != "every starter untouched"]
    assert len(untouched) == len(solved) == 2 and all(p == t and c == ct for _, p, t, c, ct in solved)
    return untouched, [s for s, *_ in solved], solved[0][2], solved[0][3]


def within_5(low, high, seconds):
    """low to high says seconds to 5 s, the pages' rounding."""
    seconds = [float(s) for s in seconds]
    assert low <= min(seconds) < low + 5 and high - 5 < max(seconds) <= high, (seconds, low, high)


def test_grading_a_students_times_are_time_gradings_pages():
    untouched, solved, total, checks = grading_page("grading-amd-epyc-avx2-2-cores-2026-12-02-1d65b3f.md")
    says(TIMINGS, f"the untouched starters (0/{total} exercises) {untouched[0]} s and {untouched[1]} s; every "
                  f"exercise solved, with the two sink-lab runs of 08 and 11 in place ({total}/{total}, "
                  f"{checks}/{checks} checks), {solved[0]} s and {solved[1]} s.")
    lo, hi = stated("exercises/TEACHERS.md", r"(\d+) to (\d+) s a student on an idle 2-core CPU on Linux")
    within_5(lo, hi, untouched + solved)
    before_untouched, before_solved, _, _ = grading_page("grading-amd-epyc-avx2-2-cores-2026-12-02-c13da51.md")
    says(TIMINGS, f"{before_untouched[0]} s and {before_untouched[1]} s untouched, {before_solved[0]} s and "
                  f"{before_solved[1]} s solved; that is still the time where the checker cannot fork")
    lo, hi = stated("exercises/TEACHERS.md", r"loads torch afresh, which took (\d+) to (\d+) s on the same CPU")
    within_5(lo, hi, before_untouched + before_solved)
    untouched, solved, _, _ = grading_page("grading-amd-epyc-2-cores-2026-12-01-eaf4b50.md")
    says(TIMINGS, f"{untouched[0]} s and {untouched[1]} s untouched, {solved[0]} s and {solved[1]} s solved; timed by")

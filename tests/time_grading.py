"""
How long grading one student takes: `python exercises/check.py all --student=ID --result=ID.json` in a student copy
(exercises/make_student_copy.py, the sink lab's task prepared, as exercises/TEACHERS.md's steps leave it), twice
with every starter untouched and twice with every exercise solved by its reference solution, the sink-lab runs that
exercises 08 and 11 read in place (out/exercises/08/ and 11/: the baseline and G1, trained once by the exercises'
own commands, and copied). Each grading is a checker that loads torch and, on Linux without a GPU, one process
that loads it and forks each exercise's child (elsewhere, a child per exercise that loads it).

    python tests/time_grading.py        # from a checkout that holds exercises/solutions/ (a teacher's)

It writes a Markdown page (the machine, the versions, the commit and the date; each grading's seconds and what it
scored) to stdout; the copy is deleted after. It exits 1 if a grading did not score what it should, after the page.
docs/timings.md's figures for grading a student come from its pages, in results/timings/.
"""

import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from time_readme import busy, commit, cpu_flags, versions  # noqa: E402  (as the README's timing names the machine)
from time_tutorial import cpu_name  # noqa: E402

REPO = os.path.dirname(HERE)
SOLUTIONS = os.path.join(REPO, "exercises", "solutions")


def run(args, cwd, env=None):
    """Run a command in the copy; stop with its output's end if it fails."""
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"error: {' '.join(args)} failed: {(done.stdout + done.stderr).strip()[-800:]}")


def grade(copy, env):
    """One grading as a teacher runs it: (wall seconds, exit status, the result file's exercises passed, checks
    passed, checks in all)."""
    result = os.path.join(copy, "timing.json")
    if os.path.exists(result):
        os.remove(result)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "exercises/check.py", "all", "--student=timing", "--result=timing.json"],
                          cwd=copy, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if not os.path.isfile(result):
        sys.exit(f"error: the grading wrote no result file: {(done.stdout + done.stderr).strip()[-800:]}")
    with open(result, encoding="utf-8") as f:
        r = json.load(f)
    checks = sum(e["passed"] for e in r["exercises"]), sum(e["total"] for e in r["exercises"])
    return wall, done.returncode, r["passed"], r["total"], *checks


def main(argv):
    if argv:
        sys.exit(f"error: unknown argument(s) {argv}: the script takes none")
    if not os.path.isdir(SOLUTIONS):
        sys.exit("error: this checkout has no exercises/solutions/ (a student copy): grading solved exercises needs "
                 "them; run it in the project's own checkout")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EXERCISE_RUNS", "CHECK_SEED")}
    with tempfile.TemporaryDirectory() as tmp:
        at = commit()  # what the copy holds (a commit made while it runs is not)
        copy = os.path.join(tmp, "student")
        run([sys.executable, os.path.join(REPO, "exercises", "make_student_copy.py"), copy], cwd=tmp)
        run([sys.executable, "data/bigram_backcopy/prepare.py"], cwd=copy, env=env)  # TEACHERS.md's step
        torch_version, _ = versions(copy, {})
        share = busy()
        rows = [("every starter untouched", grade(copy, env)) for _ in range(2)]
        for flags, name in (("--gate=none", "baseline"), ("", "g1")):  # exercise 08's commands, then a copy for 11
            run([sys.executable, "train.py", "config/sink_lab.py", *flags.split(),
                 f"--out_dir=out/exercises/08/{name}"], cwd=copy, env=env)
        shutil.copytree(os.path.join(copy, "out", "exercises", "08"), os.path.join(copy, "out", "exercises", "11"))
        for path in glob.glob(os.path.join(SOLUTIONS, "*.py")):
            name = os.path.splitext(os.path.basename(path))[0]
            if os.path.isdir(os.path.join(copy, "exercises", name)):
                shutil.copy(path, os.path.join(copy, "exercises", name, "starter.py"))
        rows += [("every exercise solved, the runs of 08 and 11 in place", grade(copy, env)) for _ in range(2)]
    flags = f" ({', '.join(cpu_flags())})" if cpu_flags() else ""
    idle = f"; its CPUs {share:.0%} busy in the 2 s before it began" if share is not None else ""
    out = [f"`python exercises/check.py all --student=ID --result=ID.json` in a student copy made at {at}: "
           f"{os.cpu_count()} cores, {cpu_name()}{flags}{idle}; Python {platform.python_version()}, torch "
           f"{torch_version}; {time.strftime('%Y-%m-%d')} (`python tests/time_grading.py`)", "",
           "| the copy | seconds, wall-clock | exit | exercises passed | checks passed |",
           "| --- | --- | --- | --- | --- |"]
    wrong = False
    for what, (wall, code, passed, total, checks, all_checks) in rows:
        out.append(f"| {what} | {wall:.1f} | {code} | {passed} of {total} | {checks} of {all_checks} |")
        wrong |= (passed == total) != what.startswith("every exercise solved") or (code == 0) != (passed == total)
    if wrong:
        out += ["", "A grading did not score what it should: every untouched starter fails, every solution passes."]
    print("\n".join(out))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

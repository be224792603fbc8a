"""
How much a CPU shared by several trainings loses to PyTorch's threads, and what OMP_NUM_THREADS=1 gives back: the
sink lab's baseline (`python train.py config/sink_lab.py`, STEPS steps, no evaluation but the last) alone and as
RUNS copies side by side, each time with PyTorch's own number of threads (one per core) and with OMP_NUM_THREADS=1.
A class on one server, or a student's laptop running a training beside another, is the side-by-side case: each
process then spins a thread per core, and they wait on each other.

    python tests/time_sharing.py              # RUNS = this machine's cores + 1, STEPS = 200
    python tests/time_sharing.py --runs=8 --steps=100

It writes a Markdown page (the machine, the versions, the commit and the date; each setting's seconds, as train.py
printed them, and the wall-clock of the whole) to stdout; the copy of the repository it runs in is deleted after.
It exits 1 if a run failed, after the page. docs/timings.md's figures for a shared CPU come from its pages, in
results/timings/.
"""

import os
import platform
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_tutorial import copy_of_repo  # noqa: E402  (a copy without runs or prepared data)
from time_readme import busy, commit, cpu_flags, versions  # noqa: E402  (as the README's timing names the machine)
from time_tutorial import cpu_name  # noqa: E402

DONE = re.compile(r"^done: (\d+) iterations in (\d+) s", re.M)  # train.py's last line


def side_by_side(repo, runs, steps, threads):
    """Start `runs` trainings at once (threads: OMP_NUM_THREADS, None: PyTorch's default), wait for all: (the wall
    seconds of the whole, each run's seconds as train.py printed them, the exit statuses)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "PYTHONPATH")}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    start = time.perf_counter()
    jobs = [subprocess.Popen([sys.executable, "train.py", "config/sink_lab.py", f"--max_iters={steps}",
                              f"--eval_interval={steps}", f"--out_dir=out/sharing/{threads}-{runs}-{i}"], cwd=repo,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for i in range(runs)]
    printed = [job.communicate()[0] for job in jobs]
    wall = time.perf_counter() - start
    seconds = [int(m.group(2)) if (m := DONE.search(text)) else None for text in printed]
    return wall, seconds, [job.returncode for job in jobs], printed


def main(argv):
    keys = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    unknown = set(keys) - {"runs", "steps"} or [a for a in argv if not (a.startswith("--") and "=" in a)]
    if unknown:
        sys.exit(f"error: unknown argument(s) {sorted(unknown)}: use --runs=N and --steps=N")
    runs, steps = int(keys.get("runs", (os.cpu_count() or 1) + 1)), int(keys.get("steps", 200))
    with tempfile.TemporaryDirectory() as tmp:
        at = commit()  # what the copy holds (a commit made while it runs is not)
        repo = copy_of_repo(os.path.join(tmp, "repo"))
        prepared = subprocess.run([sys.executable, "data/bigram_backcopy/prepare.py"], cwd=repo, capture_output=True,
                                  text=True)  # once, before the timed runs (train.py would, in each at once)
        if prepared.returncode:
            sys.exit(f"error: preparing the sink lab's task failed: {prepared.stderr.strip()[-500:]}")
        torch_version, _ = versions(repo, {})
        share = busy()
        rows, failed = [], []
        for count in (1, runs):
            for threads in (None, 1):
                wall, seconds, codes, printed = side_by_side(repo, count, steps, threads)
                rows.append((count, threads, wall, seconds))
                failed += [text.strip().splitlines()[-1:] for text, code in zip(printed, codes) if code]
    flags = f" ({', '.join(cpu_flags())})" if cpu_flags() else ""
    idle = f"; its CPUs {share:.0%} busy in the 2 s before it began" if share is not None else ""
    out = [f"The sink lab's baseline, {steps} steps a run, alone and {runs} side by side, in a fresh copy at "
           f"{at}: {os.cpu_count()} cores, {cpu_name()}{flags}{idle}; Python {platform.python_version()}, "
           f"torch {torch_version}; {time.strftime('%Y-%m-%d')} "
           f"(`{' '.join(['python tests/time_sharing.py', *argv])}`)", "",
           "| runs at once | threads per run | each run's seconds (train.py's `done: ... in N s`) | all, wall-clock |",
           "| --- | --- | --- | --- |"]
    for count, threads, wall, seconds in rows:
        each = ", ".join("failed" if s is None else str(s) for s in seconds)
        out.append(f"| {count} | {f'OMP_NUM_THREADS={threads}' if threads else 'PyTorch default (one per core)'} "
                   f"| {each} | {wall:.1f} s |")
    if failed:
        out += ["", "Failed runs, their last line:", "", *[f"- {line}" for lines in failed for line in lines]]
    print("\n".join(out))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

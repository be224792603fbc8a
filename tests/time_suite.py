"""
How long the README's test command takes, as CI runs it: the command exactly as the README gives it, in a fresh
clone of this repository's commit (tracked files only, nothing prepared, no caches), with this Python. It prints a
Markdown page: the machine (its CPU, its flags, how busy its CPUs were in the 2 s before), the versions, the commit
and the date; the wall-clock time, pytest's own summary line (and its FAILED lines), and the tests' own seconds per
file (TEST_DURATIONS, tests/conftest.py), the longest first. The suite's time in docs/timings.md comes from these
pages, committed in results/timings/.

    python tests/time_suite.py                         # the whole suite (7 to 25 minutes on a 2-core CPU)
    python tests/time_suite.py tests/test_stats.py     # the README's command on these test files only

It exits with pytest's exit status, after the page.
"""

import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from time_readme import busy, commit, cpu_flags, readme_bash_lines  # noqa: E402  (as the README's timing)
from time_tutorial import cpu_name  # noqa: E402


def readme_test_command():
    """The README's test command: the line of its bash blocks that runs `-m pytest`."""
    for _, line in readme_bash_lines():
        if "-m pytest" in line:
            return line.split(" #")[0].strip()
    sys.exit("error: README.md has no bash line that runs `-m pytest`")


def per_file(durations):
    """{test file: (seconds, tests)} from TEST_DURATIONS' lines (seconds, outcome, node id)."""
    files = defaultdict(lambda: [0.0, 0])
    for line in durations.splitlines():
        seconds, _, node = line.split("\t")
        files[node.split("::")[0]][0] += float(seconds)
        files[node.split("::")[0]][1] += 1
    return files


def page(command, seconds, summary, files, busy_share, argv, failures=(), at=None):
    code = ("import numpy, torch, xdist\ntry:\n    import triton; t = triton.__version__\nexcept ImportError:\n"
            "    t = 'none'\nprint(torch.__version__, t, numpy.__version__, xdist.__version__)")
    torch_version, triton_version, numpy_version, xdist_version = (subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True).stdout.split() + ["?"] * 4)[:4]
    found = cpu_flags()
    flags = f" ({', '.join(found)})" if found else ""
    idle = f"; its CPUs {busy_share:.0%} busy in the 2 s before it began" if busy_share is not None else ""
    at = at or commit().replace(" with uncommitted changes", "")  # the clone holds the commit, not the working tree
    total = sum(s for s, _ in files.values())
    out = [f"`{command}` in a fresh clone at {at}: {os.cpu_count()} cores, {cpu_name()}{flags}{idle}; Python "
           f"{platform.python_version()}, torch {torch_version}, Triton {triton_version}, NumPy {numpy_version}, "
           f"pytest-xdist {xdist_version}; "
           f"{time.strftime('%Y-%m-%d')} (`{' '.join(['python tests/time_suite.py', *argv])}`)", "",
           f"- wall-clock: {seconds:.0f} s ({int(seconds // 60)} min {seconds % 60:.0f} s)",
           f"- pytest: {summary}", *(f"  - {line}" for line in failures),
           f"- the tests' own seconds (setup, call and teardown) add up to {total:.0f} s; by file, the longest "
           "first:", "", "| file | tests | seconds |", "| --- | --- | --- |"]
    out += [f"| {name} | {n} | {s:.1f} |" for name, (s, n) in sorted(files.items(), key=lambda kv: -kv[1][0])]
    return "\n".join(out)


def main(argv):
    if any(arg.startswith("-") for arg in argv):
        sys.exit("error: give test files or folders (e.g. tests/test_stats.py), or nothing for the whole suite")
    command = readme_test_command()
    run = [sys.executable if word in ("python", "python3") else word for word in shlex.split(command)] + argv
    with tempfile.TemporaryDirectory() as tmp:
        clone = os.path.join(tmp, "repo")
        # the commit checked out here, not the clone's default branch; named on the page as cloned (a commit made
        # while the suite runs is not the one timed)
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        at = head[:7] or commit()
        subprocess.run(["git", "clone", "-q", REPO, clone], check=True)
        if head and os.path.isdir(os.path.join(REPO, ".git")):
            subprocess.run(["git", "checkout", "-q", head], cwd=clone, check=True)
        durations = os.path.join(tmp, "durations.tsv")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TIKTOKEN_CACHE_DIR")}
        busy_share = busy()  # what else ran as the timing began
        start = time.perf_counter()
        done = subprocess.run(run, cwd=clone, env={**env, "TEST_DURATIONS": durations}, capture_output=True,
                              text=True)
        seconds = time.perf_counter() - start
        lines = [line for line in done.stdout.strip().splitlines() if line.strip()]
        summary = lines[-1] if lines else f"(no output; exit {done.returncode})"
        failures = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]  # pytest's short summary
        text = open(durations, encoding="utf-8").read() if os.path.exists(durations) else ""
    print(page(command, seconds, summary, per_file(text), busy_share, argv, failures, at))
    sys.exit(done.returncode)


if __name__ == "__main__":
    main(sys.argv[1:])

"""
How long the README's commands take, as a newcomer runs them: every `python ...` line of its bash blocks (the set-up
check, the main job, the sink lab; not the venv's or the test suite's, timed on their own), in order, in a fresh
copy of the repository (no prepared data, no runs: each dataset is prepared on first use, as the newcomer's is).
For each: its seconds, its exit status and the lines in which it reports what it measured. The times the README and
docs/timings.md state come from this script's output, committed in results/timings/ (the pip lines of the set-up
are not run: the packages are this Python's).

    python tests/time_readme.py                    # this CPU as it is (bf16 where it computes bf16)
    python tests/time_readme.py --no_bf16          # as a CPU without bf16 or AVX-512 runs it (as time_tutorial.py)
    python tests/time_readme.py --toy              # each training a few steps: a check of this script, in a minute
    python tests/time_readme.py --section=sink     # only the commands of the README's sections whose title has this

It writes a Markdown page (the machine, the versions, the commit and the date; a table of seconds; what each command
reported) to stdout; the copy is deleted after. It exits 1 if a command failed, after the page.
"""

import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from test_tutorial import copy_of_repo  # noqa: E402  (the copy the tutorial's timing runs in)
from time_tutorial import NO_BF16, cpu_name  # noqa: E402  (as the tutorial's timing runs and names the CPU)

NOT_TIMED = ("-m venv", "-m pytest")  # the set-up's virtual environment, and the suite (docs/timings.md's own line)
TOY = ["--max_iters=4", "--eval_interval=2", "--eval_iters=1", "--log_interval=2"]  # a training of seconds
# what a command prints about its result: train.py's last line, the analysis' line per run, the set-up check's verdict
REPORTED = re.compile(r"^(done: .*|\s*\S+: val loss .*|ready: .*|not ready.*|\s*note\s+timings .*)$", re.M)


def readme_bash_lines(path=os.path.join(REPO, "README.md")):
    """(its ## section, the line) for every line of the README's bash blocks."""
    found, section, fence = [], "(start)", None
    with open(path, encoding="utf-8") as f:
        for line in f.read().split("\n"):
            if line.startswith("```"):
                fence = None if fence else (line[3:].strip() or "text")
            elif fence is None and line.startswith("## "):
                section = line[3:].strip()
            elif fence == "bash":
                found.append((section, line))
    return found


def readme_commands(path=os.path.join(REPO, "README.md")):
    """The README's commands as a newcomer types them: (its ## section, the command without its comment) for every
    line of a bash block that runs python."""
    return [(section, line.split("  #")[0].split(" #")[0].strip()) for section, line in readme_bash_lines(path)
            if re.match(r"python3? ", line) and not any(n in line for n in NOT_TIMED)]


def run_commands(repo, commands, toy=False, env=None):
    """Run each (section, command) in repo with this Python, one after another: a list of dicts (section, command,
    seconds, exit, reported lines). A training gets TOY's keys at toy size."""
    env = {**os.environ, **(env or {})}
    env.pop("PYTHONPATH", None)  # the copy's own files, as a newcomer's
    results = []
    for section, command in commands:
        run = re.sub(r"^python3? ", lambda _: f"{shlex.quote(sys.executable)} ", command)
        if toy and " train.py" in run:
            run += " " + " ".join(TOY)
        start = time.perf_counter()
        done = subprocess.run(["bash", "-c", run], cwd=repo, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        printed = done.stdout + done.stderr
        lines = [line.strip() for line in REPORTED.findall(printed)]
        if done.returncode:
            lines += printed.strip().splitlines()[-3:]
        results.append({"section": section, "command": command, "seconds": seconds, "exit": done.returncode,
                        "reported": lines})
    return results


def versions(repo, env):
    """(torch's version, whether train.py's dtype=auto trains in bf16 here), as the copy's Python sees them."""
    code = "import torch, cli; print(torch.__version__, cli.cpu_computes_bf16())"
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, env={**os.environ, **env}, capture_output=True,
                         text=True).stdout.split()
    return (out[0], out[1] == "True") if len(out) == 2 else ("?", False)


def commit():
    """The repository's commit, with a mark where its working tree differs from it (what the copy holds)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" with uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def cpu_flags():
    """The CPU's instruction sets that decide how it trains (Linux's /proc/cpuinfo; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    return [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]


def busy(seconds=2.0):
    """The share of the CPUs' time spent on any work over `seconds` (Linux's /proc/stat; None elsewhere): taken just
    before the timing begins, near 0 means nothing else ran (a load average would still count the minute before)."""
    def times():
        with open("/proc/stat", encoding="utf-8") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # all, and idle + iowait
    try:
        (total0, idle0), _, (total1, idle1) = times(), time.sleep(seconds), times()
    except (OSError, ValueError, IndexError):
        return None
    return 1 - (idle1 - idle0) / max(1, total1 - total0)


def page(results, argv, toy, no_bf16, torch_version, bf16, busy_share=None):
    """The Markdown page: the machine (its CPU flags, and how busy its CPUs were just before the timing began: near
    0% is idle), the versions, the commit and the date; the table of seconds; what each command reported."""
    found = cpu_flags()
    flags = f" ({', '.join(found)})" if found else ""
    idle = f"; its CPUs {busy_share:.0%} busy in the 2 s before it began" if busy_share is not None else ""
    out = [f"The README's commands in order{', each training at toy size' if toy else ''}, in a fresh copy at "
           f"{commit()}: {os.cpu_count()} cores, {cpu_name()}{flags}{idle}"
           f"{', run as a CPU without bf16 (AVX2 at most)' if no_bf16 else ''}; train.py's dtype=auto trains in "
           f"{'bf16' if bf16 else 'fp32'} here; Python {platform.python_version()}, torch {torch_version}; "
           f"{time.strftime('%Y-%m-%d')} (`{' '.join(['python tests/time_readme.py', *argv])}`)", "",
           "| README section | command | seconds | exit |", "| --- | --- | --- | --- |"]
    out += [f"| {r['section']} | `{r['command']}` | {r['seconds']:.1f} | {r['exit']} |" for r in results]
    out += ["", "What each reported:", ""]
    for r in results:
        out += [f"`{r['command']}`", "", "```text", *(r["reported"] or ["(no line of results)"]), "```", ""]
    return "\n".join(out)


def main(argv):
    for arg in argv:
        if arg not in ("--toy", "--no_bf16") and not arg.startswith("--section="):
            sys.exit(f"error: unknown argument {arg!r}: --toy, --no_bf16 and --section=TEXT are the script's own")
    toy, no_bf16 = "--toy" in argv, "--no_bf16" in argv
    part = next((a.split("=", 1)[1] for a in argv if a.startswith("--section=")), "")
    commands = [(s, c) for s, c in readme_commands() if part.lower() in s.lower()]
    if not commands:
        sys.exit(f"error: no README section with {part!r} in its title runs a command")
    env = NO_BF16 if no_bf16 else {}
    busy_share = busy()  # what else ran as the timing began
    with tempfile.TemporaryDirectory() as tmp:
        repo = copy_of_repo(os.path.join(tmp, "repo"))
        torch_version, bf16 = versions(repo, env)
        results = run_commands(repo, commands, toy=toy, env=env)
    print(page(results, argv, toy, no_bf16, torch_version, bf16, busy_share))
    sys.exit(1 if any(r["exit"] for r in results) else 0)


if __name__ == "__main__":
    main(sys.argv[1:])

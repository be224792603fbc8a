"""
How long TUTORIAL.md takes, section by section, as a reader runs it: every bash and python block in order, at full
size, in a fresh copy of the repository (no prepared data, no runs: the datasets are prepared on first use, as the
reader's are). The times TUTORIAL.md and the lesson plans state come from this script.

    python tests/time_tutorial.py                    # this CPU as it is (bf16 where it computes bf16)
    python tests/time_tutorial.py --no_bf16          # as a CPU without bf16 or AVX-512 runs it (see below)
    python tests/time_tutorial.py --toy              # at the tests' toy size: a check of this script, in a minute
    python tests/time_tutorial.py --keep=DIR         # and keep what the tutorial wrote (its out/tutorial/) in DIR

--no_bf16 runs every block with ATEN_CPU_CAPABILITY=avx2 and ONEDNN_MAX_CPU_ISA=AVX2: PyTorch's own kernels and
oneDNN's matmuls then use AVX2 at most, and train.py's dtype=auto trains in fp32, as on a CPU with AVX2 and no bf16
(a 2-core AMD EPYC emulated this way gave the main job's numbers of such a CPU to the last digit). It writes
Markdown tables (seconds per section, then per block) to stdout, with the machine and the date; the copy is
deleted after.
"""

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
from test_tutorial import NOT_COPIED, REPO, blocks  # noqa: E402  (TUTORIAL.md read, and copied, as the test does)

# Runs the blocks (label, kind, code) of _blocks.json in order in one namespace, as one Python session and a
# shell; prints a line of seconds per block (@@time, then JSON).
TIMER = """
import json, subprocess, sys, time
namespace = {"__name__": "__main__"}
for section, language, line, code in json.load(open("_blocks.json", encoding="utf-8")):
    start = time.perf_counter()
    if language == "bash":
        if subprocess.run(["bash", "-euo", "pipefail", "-c", code], stdout=subprocess.DEVNULL).returncode:
            sys.exit(f"TUTORIAL.md line {line}: the bash block failed")
    else:
        exec(compile("\\n" * (line - 1) + code, "TUTORIAL.md", "exec"), namespace)
    print("@@time", json.dumps([section, language, line, round(time.perf_counter() - start, 1)]), flush=True)
"""


def sectioned_blocks(path=os.path.join(REPO, "TUTORIAL.md")):
    """The runnable blocks of the tutorial with the section (## heading) each is in."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out = []
    for language, line, code in blocks(path):
        if language in ("python", "bash"):
            heading = next((lines[i] for i in range(line - 2, -1, -1) if lines[i].startswith("## ")), "## (start)")
            out.append((heading[3:], language, line, code))
    return out


def main(argv):
    toy, no_bf16 = "--toy" in argv, "--no_bf16" in argv
    keep = next((a[len("--keep="):] for a in argv if a.startswith("--keep=")), None)
    if keep and os.path.exists(keep):
        sys.exit(f"error: {keep} exists: give --keep a new folder")
    env = dict(os.environ, PYTHONPATH="")
    env.pop("TUTORIAL_TOY", None)
    if toy:
        env["TUTORIAL_TOY"] = "1"
    if no_bf16:
        env.update(ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2")
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "repo")
        shutil.copytree(REPO, repo, ignore=NOT_COPIED)
        with open(os.path.join(repo, "_blocks.json"), "w", encoding="utf-8") as f:
            json.dump(sectioned_blocks(), f)
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-c", TIMER], cwd=repo, env=env, capture_output=True, text=True)
        total = time.perf_counter() - start
        if result.returncode:
            sys.exit((result.stdout + result.stderr)[-4000:])
        if keep:
            shutil.copytree(os.path.join(repo, "out", "tutorial"), keep)
    times = {}
    for row in result.stdout.splitlines():
        if row.startswith("@@time "):
            section, language, line, seconds = json.loads(row[len("@@time "):])
            times.setdefault(section, []).append((language, line, seconds))
    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True,
                         text=True).stdout.strip() or platform.processor()
    print(f"TUTORIAL.md, every block in order{' at toy size' if toy else ''}, in a fresh copy: {os.cpu_count()} cores, "
          f"{cpu}{', as a CPU without bf16 (AVX2 at most, fp32)' if no_bf16 else ''}, Python "
          f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}\n")
    print("| section | blocks (bash / python), the slowest | seconds |\n| --- | --- | --- |")
    for section, rows in times.items():
        slowest = max(rows, key=lambda r: r[2])
        kinds = f"{sum(r[0] == 'bash' for r in rows)} / {sum(r[0] == 'python' for r in rows)}"
        print(f"| {section} | {kinds}; line {slowest[1]} ({slowest[0]}): {slowest[2]:.0f} s | "
              f"{sum(r[2] for r in rows):.0f} |")
    print(f"| all | {len(sum(times.values(), []))} blocks | {total:.0f} |")
    print("\n| TUTORIAL.md line | section | block | seconds |\n| --- | --- | --- | --- |")
    for section, rows in times.items():
        for language, line, seconds in rows:
            print(f"| {line} | {section.split('.')[0]} | {language} | {seconds:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1:])

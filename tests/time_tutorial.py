"""
How long TUTORIAL.md takes, section by section, as a reader runs it: every bash and python block in order, at full
size, in a fresh copy of the repository (no prepared data, no runs: the datasets are prepared on first use, as the
reader's are). The times TUTORIAL.md and the lesson plans state come from this script.

    python tests/time_tutorial.py                    # this CPU as it is (bf16 where it computes bf16)
    python tests/time_tutorial.py --no_bf16          # as a CPU without bf16 or AVX-512 runs it (see below)
    python tests/time_tutorial.py --toy              # at the tests' toy size: a check of this script, in a minute
    python tests/time_tutorial.py --keep=DIR         # and keep what the tutorial wrote (its out/tutorial/) in DIR
    python tests/time_tutorial.py --jupyter          # tutorial.ipynb in a Jupyter kernel, as in Jupyter or Colab

--jupyter (pip install nbclient ipykernel) runs the copy's tutorial.ipynb cell by cell in a Jupyter kernel of this
Python (ipykernel, through nbclient), %%bash cells by IPython's cell magic, where the default runs TUTORIAL.md's
blocks as the tests do (python blocks in one namespace, bash blocks in `bash -euo pipefail`); the cells are the
blocks, in order (tests/test_tutorial.py checks that), so the tables are the same.

--no_bf16 runs every block with ATEN_CPU_CAPABILITY=avx2 and ONEDNN_MAX_CPU_ISA=AVX2: PyTorch's own kernels and
oneDNN's matmuls then use AVX2 at most, and train.py's dtype=auto trains in fp32, as on a CPU with AVX2 and no bf16
(a 2-core AMD EPYC emulated this way gave the main job's numbers of such a CPU to the last digit). It writes
Markdown tables (seconds per section, then per block) to stdout, with the machine and the date; the copy is
deleted after.
"""

import importlib.util
import os
import platform
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_tutorial import code_cells, copy_of_repo, run_programs, sectioned_blocks  # noqa: E402  (as its test runs it)

# --no_bf16: PyTorch's own kernels and oneDNN's matmuls at AVX2 at most (train.py's dtype=auto then trains in fp32)
NO_BF16 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def cpu_name():
    """The CPU's model name (Linux's /proc/cpuinfo), else what Python knows of it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "") or \
                platform.processor()
    except OSError:
        return platform.processor()


def run_in_jupyter(repo, programs, toy, env):
    """The copy's tutorial.ipynb in a Jupyter kernel, cell by cell: the same '=== label: seconds' lines as
    run_programs prints, a label per code cell (its block's); exits with the cell that failed and its error."""
    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError
    except ImportError:
        nbformat = None
    if nbformat is None or importlib.util.find_spec("ipykernel") is None:  # ipykernel: the kernel nbclient starts
        sys.exit("error: --jupyter needs nbclient and ipykernel: pip install nbclient ipykernel")
    nb = nbformat.read(os.path.join(repo, "tutorial.ipynb"), as_version=4)
    cells = code_cells(os.path.join(repo, "tutorial.ipynb"))
    if len(cells) != len(programs):
        sys.exit("error: tutorial.ipynb is not TUTORIAL.md's blocks: run python tests/test_tutorial.py to write it")
    os.environ.update(env, PYTHONPATH=repo, **({"TUTORIAL_TOY": "1"} if toy else {}))  # the kernel's, and its cells'
    client = NotebookClient(nb, timeout=None, kernel_name="python3", resources={"metadata": {"path": repo}})
    printed = []
    with client.setup_kernel():
        for (n, _, _), (label, _, _) in zip(cells, programs):
            start = time.perf_counter()
            try:
                client.execute_cell(nb.cells[n], n)
            except CellExecutionError as e:
                sys.exit(f"{label}: the cell failed in the Jupyter kernel\n{str(e)[-3000:]}")
            printed.append(f"=== {label}: {time.perf_counter() - start:.1f} s")
    return "\n".join(printed)


def main(argv):
    for arg in argv:  # a typo would start the full timing, minutes to an hour, as if nothing were wrong
        if arg not in ("--toy", "--no_bf16", "--jupyter") and not arg.startswith("--keep="):
            sys.exit(f"error: unknown argument {arg!r}: the script's own are --toy, --no_bf16, --jupyter, --keep=DIR")
    toy, no_bf16, jupyter = "--toy" in argv, "--no_bf16" in argv, "--jupyter" in argv
    keep = next((a[len("--keep="):] for a in argv if a.startswith("--keep=")), None)
    if keep and os.path.exists(keep):
        sys.exit(f"error: {keep} exists: give --keep a new folder")
    env = NO_BF16 if no_bf16 else {}
    # one program a block, in one namespace: a python block at its own lines of TUTORIAL.md, a bash block in a shell
    programs = [(f"{line} {language} {section}", "TUTORIAL.md",
                 "\n" * (line - 1) + code if language == "python" else f"_sh({code!r}, 'TUTORIAL.md line {line}')")
                for section, language, line, code in sectioned_blocks()]
    with tempfile.TemporaryDirectory() as tmp:
        repo = copy_of_repo(os.path.join(tmp, "repo"))
        start = time.perf_counter()
        try:
            stdout = run_in_jupyter(repo, programs, toy, env) if jupyter else \
                run_programs(repo, programs, toy=toy, env=env, timeout=None)
        except AssertionError as e:  # a block failed: the end of what the tutorial printed
            sys.exit(str(e))
        total = time.perf_counter() - start
        if keep:
            shutil.copytree(os.path.join(repo, "out", "tutorial"), keep)
    times = {}
    for label, seconds in re.findall(r"^=== (\d+ \w+ .*): ([\d.]+) s$", stdout, re.M):
        line, language, section = label.split(" ", 2)
        times.setdefault(section, []).append((language, int(line), float(seconds)))
    how = "tutorial.ipynb, every cell in order in a Jupyter kernel" if jupyter else "TUTORIAL.md, every block in order"
    print(f"{how}{' at toy size' if toy else ''}, in a fresh copy: {os.cpu_count()} cores, "
          f"{cpu_name()}{', as a CPU without bf16 (AVX2 at most, fp32)' if no_bf16 else ''}, Python "
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

"""
The layout a student meets: the core on top (what the GPT computes, how it is computed fast, what is measured, the
loop, sampling, published checkpoints, and two support modules), the lab below it, the tests in tests/. These hold
the promises the README's layout makes: a short top level, a core that never reaches into the lab, files and
functions short enough to read in one sitting, and train.py's loop in its first half.
"""

import ast
import os
import subprocess
import sys

import pytest

from test_cli import SCRIPTS as RUN_WITH_HELP  # test_cli.py runs `python <each> --help` from the root

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/
CORE = ("model.py", "kernels.py", "probe.py", "train.py", "sample.py", "pretrained.py", "cli.py", "runfolder.py")
LONGEST_FUNCTION = 60  # lines, def to last line, in the core
MOST_LINES = {"train.py": 650, "model.py": 580}
MOST_LINES_TOGETHER = 1200  # model.py and train.py: what a student reads to see the gate and the loop (nanoGPT: 666)


def tracked_top_level():
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if out.returncode:
        pytest.skip("not a git checkout")
    return sorted({path for path in out.stdout.split() if "/" not in path})


def imported_modules(path):
    """The top-level names of every module a file imports, at any depth of the file (lazy imports included)."""
    tree = ast.parse(open(os.path.join(REPO, path), encoding="utf-8").read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_the_top_level_is_the_core_and_at_most_17_files():
    files = tracked_top_level()
    python = [f for f in files if f.endswith(".py")]
    assert len(files) <= 17, files
    assert sorted(python) == sorted(CORE), python  # the core, and nothing else in Python, at the top


def test_no_core_module_imports_the_lab():
    for path in CORE:
        assert "lab" not in imported_modules(path), f"{path} imports the lab package"
    for path in ("data/__init__.py", "data/shards.py"):
        assert "lab" not in imported_modules(path), f"{path} imports the lab package"


def test_the_command_line_module_loads_no_project_module():
    """Reading a command line loads neither the model nor Triton: cli.py imports no module of the project."""
    project = {os.path.splitext(f)[0] for f in CORE} | {"data", "lab"}
    assert not imported_modules("cli.py") & project
    code = "import sys, cli; print(sorted(m for m in ('model', 'kernels', 'triton', 'runfolder') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.parametrize("path", sorted(MOST_LINES))
def test_the_files_a_student_reads_first_stay_short(path):
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        lines = f.read().count("\n")
    assert lines <= MOST_LINES[path], f"{path}: {lines} lines, more than {MOST_LINES[path]}"


def test_the_model_and_the_loop_together_stay_within_a_sitting():
    lines = sum(open(os.path.join(REPO, path), encoding="utf-8").read().count("\n") for path in MOST_LINES)
    assert lines <= MOST_LINES_TOGETHER, f"model.py and train.py: {lines} lines, more than {MOST_LINES_TOGETHER}"


def test_no_core_function_is_longer_than_a_screen_or_two():
    long = []
    for path in CORE:
        tree = ast.parse(open(os.path.join(REPO, path), encoding="utf-8").read())
        long += [f"{path}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
                 for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and node.end_lineno - node.lineno + 1 > LONGEST_FUNCTION]
    assert not long, long


def test_train_py_reads_top_to_bottom_with_the_loop_in_its_first_half():
    """nanoGPT's order: the keys, then main (config, data, model, optimizer, the loop), the loop itself (Trainer.run)
    beginning in the file's first half, and the guards it meets behind the run folder's object."""
    source = open(os.path.join(REPO, "train.py"), encoding="utf-8").read()
    tree = ast.parse(source)
    top = {node.name: node.lineno for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    trainer = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Trainer")
    run = next(node for node in trainer.body if isinstance(node, ast.FunctionDef) and node.name == "run")
    assert top["TrainConfig"] < top["main"] < top["Trainer"] < run.lineno
    assert run.lineno < source.count("\n") / 2, f"the loop begins at line {run.lineno}"
    assert any(isinstance(node, ast.While) for node in ast.walk(run)), "Trainer.run holds the loop"
    assert "RunFolder" in {n.id for n in ast.walk(next(f for f in tree.body if getattr(f, "name", "") == "main"))
                           if isinstance(n, ast.Name)}


@pytest.mark.parametrize("tool", ["repro", "analyze", "evaluate", "bench", "variants", "setup_check"])
def test_a_lab_tool_runs_as_a_module_from_the_root_and_as_a_script_from_anywhere(tool, tmp_path):
    """python -m lab.<tool> from the root is the way the docs give; python lab/<tool>.py, from any folder, is the
    guess a newcomer makes, and it works too instead of failing on the project's imports. (The first, for a tool
    test_cli.py runs with --help, is run there.)"""
    argv = [] if tool == "variants" else ["--help"]
    runs = [([sys.executable, os.path.join(REPO, "lab", f"{tool}.py"), *argv], str(tmp_path))]
    if f"-m lab.{tool}" not in RUN_WITH_HELP:
        runs.append(([sys.executable, "-m", f"lab.{tool}", *argv], REPO))
    # side by side: each is mostly Python importing the project, and a CPU has two cores or more
    procs = [subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for cmd, cwd in runs]
    for (cmd, _), proc in zip(runs, procs):
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0 and "Traceback" not in stderr, (cmd, stderr[-2000:])
        assert stdout.strip(), cmd

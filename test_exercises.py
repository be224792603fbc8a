"""
The exercises (exercises/) prove their checks in both directions, as a teacher needs them to:
every reference solution passes its checks, every untouched starter fails them with "not filled yet", and each
known wrong answer (a MUTANTS edit of a solution, listed at the solution's bottom) fails with the check meant to
catch it -- so no check is one that cannot fail.
"""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.abspath(__file__))
EXERCISES = os.path.join(REPO, "exercises")
SOLUTIONS = os.path.join(EXERCISES, "solutions")
sys.path.insert(0, EXERCISES)
import check  # noqa: E402  (exercises/check.py)

NAMES = [os.path.basename(d) for d in check.exercise_dirs()]
needs_solutions = pytest.mark.skipif(not os.path.isdir(SOLUTIONS), reason="the reference solutions were removed "
                                     "(exercises/solutions/): nothing to check the checks against")


def run_quiet(exercise, path):
    lines = []
    result = check.run(os.path.join(EXERCISES, exercise), str(path), out=lines.append)
    return result, "\n".join(lines)


@pytest.fixture(autouse=True)
def exercise_runs(request, monkeypatch):
    """Exercise 08 measures two trained runs: the toy-size ones of conftest's tutorial_runs fixture, trained only for
    a test of exercise 08 (the others need no trained run, nor train.py)."""
    params = getattr(request.node, "callspec", None)
    if params is not None and str(params.params.get("name", "")).startswith("08"):
        monkeypatch.setenv("EXERCISE_RUNS", request.getfixturevalue("tutorial_runs"))


def test_there_are_at_least_eight_exercises_each_complete():
    assert len(NAMES) >= 8, NAMES
    for name in NAMES:
        folder = os.path.join(EXERCISES, name)
        assert sorted(f for f in os.listdir(folder) if not f.startswith("__")) == ["README.md", "checks.py", "starter.py"], name
        with open(os.path.join(folder, "README.md"), encoding="utf-8") as f:
            text = f.read()
        for needed in ("Time:", "Difficulty:", f"python exercises/check.py {name[:2]}"):
            assert needed in text, f"{name}/README.md lacks {needed!r}"
        with open(os.path.join(folder, "starter.py"), encoding="utf-8") as f:
            starter = f.read()
        assert f"TODO({name[:2]}-gap" in starter, f"{name}/starter.py marks no gap as TODO({name[:2]}-gapK)"


def test_nothing_a_student_runs_reads_the_solutions():
    for root, _, files in os.walk(EXERCISES):
        if os.path.abspath(root).startswith(SOLUTIONS):
            continue
        for file in files:
            if file.endswith(".py"):
                with open(os.path.join(root, file), encoding="utf-8") as f:
                    assert "solutions" not in f.read(), os.path.join(root, file)


@pytest.mark.parametrize("name", NAMES)
def test_the_untouched_starter_fails_as_not_filled(name):
    (passed, total, status, _), text = run_quiet(name, os.path.join(EXERCISES, name, "starter.py"))
    assert status == "not filled", text
    assert "not filled yet" in text and f"{passed}/{total} checks passed" in text, text
    assert "Traceback" not in text


@needs_solutions
@pytest.mark.parametrize("name", NAMES)
def test_the_reference_solution_passes(name):
    (passed, total, status, _), text = run_quiet(name, os.path.join(SOLUTIONS, name + ".py"))
    assert status == "ok" and passed == total >= 3, text


def mutants():
    if not os.path.isdir(SOLUTIONS):
        return []
    cases = []
    for name in NAMES:
        if not os.path.isfile(os.path.join(SOLUTIONS, name + ".py")):
            continue  # test_the_reference_solution_passes reports it
        solution = check.load_module(os.path.join(SOLUTIONS, name + ".py"), f"solution_{name[:2]}")
        for check_name, old, new in getattr(solution, "MUTANTS", []):
            cases.append(pytest.param(name, check_name, old, new, id=f"{name[:2]}-{check_name}-{len(cases)}"))
    return cases


@needs_solutions
def test_every_exercise_has_mutants():
    names = {case.values[0] for case in mutants()}
    assert names == set(NAMES), f"exercises without MUTANTS: {sorted(set(NAMES) - names)}"


@needs_solutions
@pytest.mark.parametrize("name, check_name, old, new", mutants())
def test_a_known_mistake_fails_the_check_meant_to_catch_it(name, check_name, old, new, tmp_path):
    with open(os.path.join(SOLUTIONS, name + ".py"), encoding="utf-8") as f:
        text = f.read()
    assert text.count(old) == 1, f"the mutant's text must occur once in solutions/{name}.py: {old!r}"
    path = tmp_path / f"{name}_mutant.py"
    path.write_text(text.replace(old, new), encoding="utf-8")
    (passed, total, status, failed), out = run_quiet(name, path)
    assert status in ("wrong", "error") and failed == check_name, out
    assert "Traceback" not in out


def test_the_command_line_reports_and_exits_nonzero_on_the_starter():
    result = subprocess.run([sys.executable, "exercises/check.py", "01"], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1 and "not filled yet" in result.stdout, result.stdout + result.stderr
    result = subprocess.run([sys.executable, "exercises/check.py", "99"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode != 0 and "no exercise '99'" in result.stderr
    listing = subprocess.run([sys.executable, "exercises/check.py", "--list"], cwd=REPO, capture_output=True, text=True)
    assert listing.returncode == 0 and len(listing.stdout.splitlines()) == len(NAMES)


# Student code that would hang the checker or forge its verdict: each is a starter of exercise 01 whose first gap
# does something other than return, checked on the command line (the exit status is what grading reads).
GAP1 = '    raise NotImplementedError("01-gap1:'


def starter_with(tmp_path, gap1=None, end=None):
    """Exercise 01's starter with gap 1's body replaced by gap1 (lines of the function body) and end appended to
    the file; the other gap stays unfilled."""
    with open(os.path.join(EXERCISES, "01_g1_gate", "starter.py"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    if gap1 is not None:
        i = next(i for i, line in enumerate(lines) if line.startswith(GAP1))
        lines[i:i + 1] = ["    " + line for line in gap1]
    path = tmp_path / "starter.py"
    path.write_text("\n".join(lines + (end or [])) + "\n", encoding="utf-8")
    return path


def check_cli(path, *args, timeout=120):
    result = subprocess.run([sys.executable, "exercises/check.py", "01", f"--file={path}", *args], cwd=REPO,
                            capture_output=True, text=True, timeout=timeout)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize("call", ["sys.exit(0)", "exit()", "os._exit(0)"])
def test_a_function_that_ends_the_program_fails(call, tmp_path):
    path = starter_with(tmp_path, gap1=["import os, sys", call])
    code, out = check_cli(path)
    assert code == 1, out
    assert "[01.g1_gate_shapes]" in out and "0/8 checks passed." in out, out
    if call == "os._exit(0)":  # nothing in the process sees it: the checker that watches it reports it
        assert "ended the process" in out and "os._exit" in out, out
    else:
        assert f"your code ended the program ({call}" in out and "g1_gate" in out, out
    assert "Traceback" not in out


def test_a_file_that_prints_a_pass_and_exits_on_import_fails(tmp_path):
    path = starter_with(tmp_path, end=['print("8/8 checks passed -- well done.")', "exit()"])
    code, out = check_cli(path)
    assert code == 1, out
    assert "your file ended the program while it was imported (exit()" in out and out.rstrip().endswith("0/8 checks passed."), out


def test_an_endless_loop_is_stopped_and_named(tmp_path):
    path = starter_with(tmp_path, gap1=["while True:", "    pass"])
    code, out = check_cli(path, "--timeout=3", timeout=60)
    assert code == 1, out
    assert "[01.g1_gate_shapes] did not finish within 3 s" in out, out
    assert "your g1_gate did not return (starter.py line 39: while True:)" in out, out


def test_an_endless_loop_that_swallows_the_stop_is_killed_and_named(tmp_path):
    path = starter_with(tmp_path, gap1=["import time", "while True:", "    try:", "        time.sleep(0.1)",
                                        "    except BaseException:", "        pass"])
    code, out = check_cli(path, "--timeout=2", timeout=60)
    assert code == 1, out
    assert "[01.g1_gate_shapes] did not finish within 2 s" in out and "your g1_gate did not return" in out, out
    assert "0/8 checks passed." in out

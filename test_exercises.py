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
def exercise_runs(tutorial_runs, monkeypatch):
    """Exercise 08 measures two trained runs: the toy-size ones of conftest's tutorial_runs fixture."""
    monkeypatch.setenv("EXERCISE_RUNS", tutorial_runs)


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

"""
The exercises (exercises/) prove their checks in both directions, as a teacher needs them to:
every reference solution passes its checks, every untouched starter fails them with "not filled yet", and each
known wrong answer (a MUTANTS edit of a solution, listed at the solution's bottom) fails with the check meant to
catch it -- so no check is one that cannot fail.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/
EXERCISES = os.path.join(REPO, "exercises")
SOLUTIONS = os.path.join(EXERCISES, "solutions")
sys.path.insert(0, EXERCISES)
import check  # noqa: E402  (exercises/check.py)
check.load_torch()  # the checks' helpers, which the tests call too, use it
try:
    import make_student_copy  # noqa: E402  (exercises/make_student_copy.py, the teacher's: not in a student copy)
except ImportError:
    make_student_copy = None

NAMES = [os.path.basename(d) for d in check.exercise_dirs()]
TRAINED_RUNS = ("08", "11")  # the exercises whose checks read trained runs ($EXERCISE_RUNS)
needs_solutions = pytest.mark.skipif(not os.path.isdir(SOLUTIONS), reason="the reference solutions were removed "
                                     "(exercises/solutions/): nothing to check the checks against")
needs_copier = pytest.mark.skipif(make_student_copy is None, reason="exercises/make_student_copy.py is not here (a "
                                  "student copy): the tests that make a copy run in the teacher's checkout")


def giveaways(name):
    """The reference solution's GIVEAWAYS: code fragments of the answer, which only the last hints may show ([] without
    the solutions)."""
    path = os.path.join(SOLUTIONS, name + ".py")
    return list(check.load_module(path, f"solution_{name[:2]}").GIVEAWAYS) if os.path.isfile(path) else []


def squash(text):
    return "".join(text.split())


def given_away(name, text):
    """The giveaways of exercise `name` that text holds, whitespace ignored."""
    return [g for g in giveaways(name) if squash(g) in squash(text)]


def run_quiet(exercise, path):
    lines = []
    result = check.run(os.path.join(EXERCISES, exercise), str(path), out=lines.append)
    return result, "\n".join(lines)


@pytest.fixture(autouse=True)
def exercise_runs(request, monkeypatch):
    """Exercises 08 and 11 measure two trained sink-lab runs: the toy-size ones of conftest's sink_lab_runs fixture,
    trained only for a test of one of them (the others need no trained run, nor train.py)."""
    params = getattr(request.node, "callspec", None)
    if params is not None and str(params.params.get("name", ""))[:2] in TRAINED_RUNS:
        monkeypatch.setenv("EXERCISE_RUNS", request.getfixturevalue("sink_lab_runs"))


with open(os.path.join(EXERCISES, "README.md"), encoding="utf-8") as f:
    TABLE = f.read()  # the exercises' table, with each one's time and difficulty


def test_there_are_at_least_eight_exercises_each_complete():
    assert len(NAMES) >= 8, NAMES
    for name in NAMES:
        folder = os.path.join(EXERCISES, name)
        assert sorted(f for f in os.listdir(folder) if not f.startswith(("__", "."))) == \
            ["README.md", "checks.py", "hints.md", "starter.py"], name
        with open(os.path.join(folder, "README.md"), encoding="utf-8") as f:
            text = f.read()
        for needed in ("Time:", "Difficulty:", f"python exercises/check.py {name[:2]}"):
            assert needed in text, f"{name}/README.md lacks {needed!r}"
        time, stars = (re.search(rf"^{key}: (.*)$", text, re.M).group(1) for key in ("Time", "Difficulty"))
        row = re.search(rf"^\| {name[:2]} \|.*\| (~\d+ min) \| ([★☆]+) \|", TABLE, re.M)
        assert row and time.startswith(row.group(1)) and stars == row.group(2), \
            f"{name}: README.md says {time}, {stars}; exercises/README.md's table {row and row.groups()}"
        with open(os.path.join(folder, "starter.py"), encoding="utf-8") as f:
            starter = f.read()
        assert f"TODO({name[:2]}-gap" in starter, f"{name}/starter.py marks no gap as TODO({name[:2]}-gapK)"


def test_nothing_a_student_runs_reads_the_solutions():
    for root, _, files in os.walk(EXERCISES):
        if os.path.abspath(root).startswith(SOLUTIONS):
            continue
        for file in files:
            if file.endswith(".py") and file != "make_student_copy.py":  # the teacher's: not in a student's copy
                with open(os.path.join(root, file), encoding="utf-8") as f:
                    text = f.read()
                if file == "check.py":  # the folder's name, only to refuse a student's code that reads it
                    assert text.count("solutions") == 1 and 'REFERENCE_ANSWERS = os.path.join("exercises", ' \
                        '"solutions")' in text
                    continue
                if file == "gradebook.py":  # the teacher's table: it hashes them, to flag one handed in verbatim
                    assert text.count('"solutions"') == 1 and "hashlib.sha256(text)" in text
                    continue
                assert "solutions" not in text, os.path.join(root, file)


@pytest.mark.parametrize("name", NAMES)
def test_the_untouched_starter_fails_as_not_filled(name):
    (passed, total, status, _), text = run_quiet(name, os.path.join(EXERCISES, name, "starter.py"))
    assert status == "not filled", text
    assert "not filled yet" in text and f"{passed}/{total} checks passed" in text, text
    assert "Traceback" not in text
    assert not given_away(name, text), f"the starter's message gives the answer away: {given_away(name, text)}"


def test_a_starter_run_as_its_readme_says_is_one_line_while_a_gap_is_left():
    """Exercise 10's README: `python exercises/10_bigram_backcopy/starter.py` prints the student's numbers; untouched,
    the gap it reaches first, not a traceback."""
    starter = os.path.join(EXERCISES, "10_bigram_backcopy", "starter.py")
    out = subprocess.run([sys.executable, starter], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and out.stdout == "" and out.stderr == "not filled yet: 10-gap1: write make_text\n", \
        out.stderr


@needs_solutions
@pytest.mark.parametrize("name", NAMES)
def test_the_reference_solution_passes(name):
    (passed, total, status, _), text = run_quiet(name, os.path.join(SOLUTIONS, name + ".py"))
    assert status == "ok" and passed == total >= 3, text


@needs_solutions
def test_exercise_04s_memory_watch_leaves_tracing_already_on_as_it_was():
    """PYTHONTRACEMALLOC=1 or a profiler traces before the check does: what was held before the call is not counted
    against the answer (the reference passes), and tracing stays on for its owner."""
    import tracemalloc
    name = next(n for n in NAMES if n.startswith("04"))
    tracemalloc.start()
    held = [bytearray(8 * 2**20)]  # 8 MiB traced before the check: twice its limit
    try:
        (passed, total, status, _), text = run_quiet(name, os.path.join(SOLUTIONS, name + ".py"))
        assert tracemalloc.is_tracing()
    finally:
        tracemalloc.stop()
    assert status == "ok" and passed == total and held, text


def mutants():
    if not os.path.isdir(SOLUTIONS):
        return []
    cases = []
    for name in NAMES:
        if not os.path.isfile(os.path.join(SOLUTIONS, name + ".py")):
            continue  # test_the_reference_solution_passes reports it
        solution = check.load_module(os.path.join(SOLUTIONS, name + ".py"), f"solution_{name[:2]}")
        for check_name, old, new, *said in getattr(solution, "MUTANTS", []):  # said: words its message must hold
            cases.append(pytest.param(name, check_name, old, new, said[0] if said else None,
                                      id=f"{name[:2]}-{check_name}-{len(cases)}"))
    return cases


@needs_solutions
def test_every_exercise_has_mutants():
    names = {case.values[0] for case in mutants()}
    assert names == set(NAMES), f"exercises without MUTANTS: {sorted(set(NAMES) - names)}"


@needs_solutions
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # a wrong answer's arithmetic may overflow,
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # or read past its row (NaN, inf)
@pytest.mark.parametrize("seed", [0, 8000])
@pytest.mark.parametrize("name, check_name, old, new, said", mutants())
def test_a_known_mistake_fails_the_check_meant_to_catch_it(name, check_name, old, new, said, seed, tmp_path,
                                                           monkeypatch):
    """At the suite's run seed (0) the mistake fails the check meant for it; at another (a graded run draws one at
    random: 8000 is one where a check's inputs once hid a mistake from the check meant for it) an earlier check may
    catch it first, but the message still names it (its `said` words)."""
    with open(os.path.join(SOLUTIONS, name + ".py"), encoding="utf-8") as f:
        text = f.read()
    assert text.count(old) == 1, f"the mutant's text must occur once in solutions/{name}.py: {old!r}"
    path = tmp_path / f"{name}_mutant.py"
    path.write_text(text.replace(old, new), encoding="utf-8")
    monkeypatch.setattr(check, "RUN_SEED", seed)
    (passed, total, status, failed), out = run_quiet(name, path)
    assert status in ("wrong", "error") and (failed == check_name or seed), out
    assert said is None or said in out, f"the message should name the mistake ({said!r}): {out}"
    assert "Traceback" not in out
    assert not given_away(name, out), f"the message names the mistake by giving the answer: {given_away(name, out)}"


# Hints: the statement and the starter say what to compute and why; the formula comes only in the last hints, one at
# a time (check.py NN --hint), so that a student who asks for every hint has asked for the answer.
@pytest.mark.parametrize("name", NAMES)
def test_the_hints_come_one_at_a_time_and_only_the_last_ones_give_the_answer(name):
    folder = os.path.join(EXERCISES, name)
    hints = check.hints_of(folder)
    assert len(hints) >= 3 and all(hints), f"{name}/hints.md: at least three hints, each with a text"
    texts = {}
    for file in ("README.md", "starter.py", "checks.py"):
        with open(os.path.join(folder, file), encoding="utf-8") as f:
            texts[file] = f.read()
    assert "<details>" not in texts["README.md"], f"{name}/README.md shows hints at once: they belong in hints.md"
    assert "## Stuck?" in texts["README.md"] and f"check.py {name[:2]} --hint" in texts["README.md"], name
    if not os.path.isdir(SOLUTIONS):
        return
    assert len(giveaways(name)) >= 2, f"solutions/{name}.py lists too few GIVEAWAYS to test with"
    for file, text in texts.items():
        assert not given_away(name, text), f"{name}/{file} gives the answer away: {given_away(name, text)}"
    assert not given_away(name, hints[0]), f"{name}'s first hint gives the answer away: {given_away(name, hints[0])}"
    missing = [g for g in giveaways(name) if squash(g) not in squash("\n".join(hints))]
    assert not missing, f"{name}/hints.md never gives these parts of the answer: {missing}"


def test_the_hint_command_shows_the_next_hint_and_remembers(tmp_path, monkeypatch):
    folder = tmp_path / "42_demo"  # an exercise of its own: three hints, the last the answer
    folder.mkdir()
    (folder / "README.md").write_text("# 42. A demo\n", encoding="utf-8")
    (folder / "hints.md").write_text("# Hints: exercise 42\n\nOne at a time.\n\n## Hint 1\nThink.\n\n## Hint 2\n"
                                     "Think harder.\n\n## Hint 3\nThe answer is `x + 1`.\n", encoding="utf-8")
    folder, record = str(folder), str(tmp_path / "seen.json")
    hints = check.hints_of(folder)
    assert hints == ["Think.", "Think harder.", "The answer is `x + 1`."]
    shown = []
    for _ in range(4):  # one more than there are: the last again
        lines = []
        assert check.show_hint(folder, out=lines.append, path=record) == 0
        shown.append("\n".join(lines))
    for i, text in enumerate(shown[:-1]):
        assert text.startswith(f"Hint {i + 1} of 3, exercise 42 (A demo)") and hints[i] in text, text
    assert "the last one, with the answer" in shown[2] and shown[3] == shown[2]
    assert "--hint` shows hint 2" in shown[0] and "--hint` shows hint 3" in shown[1]
    assert check.hints_seen(folder, record) == 3
    lines = []
    check.show_hint(folder, 1, out=lines.append, path=record)  # hint 1 again: the record keeps the most seen
    assert "Think." in "\n".join(lines) and check.hints_seen(folder, record) == 3
    assert check.hints_seen(os.path.join(EXERCISES, NAMES[0]), record) == 0  # another exercise: none seen

    def closed_pipe(line):  # `check.py 42 --hint | head -1`: the reader stops reading before the hint is printed
        raise BrokenPipeError
    fresh = str(tmp_path / "fresh.json")
    for expected in (1, 2):
        with pytest.raises(BrokenPipeError):
            check.show_hint(folder, out=closed_pipe, path=fresh)
        assert check.hints_seen(folder, fresh) == expected  # asked for, so counted
    with pytest.raises(SystemExit, match="has hints 1 to 3, not 99"):
        check.show_hint(folder, 99, path=record)
    monkeypatch.setattr(check, "HINTS_SEEN", record)  # the pointer a failed check prints: the next hint, none past
    assert check.hint_pointer(folder) == ""  # the last (all 3 seen): no hint 4 of 3
    monkeypatch.setattr(check, "HINTS_SEEN", fresh)
    assert "--hint` shows hint 3 of 3 " in check.hint_pointer(folder), check.hint_pointer(folder)
    junk = tmp_path / "junk.json"  # a record edited by hand: a count that is no number counts as none seen
    junk.write_text('{"42": "2"}\n', encoding="utf-8")
    assert check.hints_seen(folder, str(junk)) == 0
    lines = []
    assert check.show_hint(folder, out=lines.append, path=str(junk)) == 0 and lines[0].startswith("Hint 1 of 3")
    (tmp_path / "42_demo" / "hints.md").write_text("## Hint 1\na\n## Hint 3\nb\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"numbers its hints \[1, 3\]"):
        check.hints_of(folder)


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
    assert "your file ended the program while it was imported (exit()" in out, out
    assert "0/8 checks passed.\nStuck?" in out, out  # the checker's own last lines
    # what the student's code prints is marked as such, so it never passes for the checker's own lines
    assert "  | 8/8 checks passed -- well done.\n" in out and "\n8/8 checks passed" not in out, out


def test_what_the_students_code_prints_is_marked_cleaned_and_in_order(tmp_path):
    """Each line the student's code prints (stdout or stderr) reaches the console as '  | line', without control
    characters (a cleared screen, colours, a carriage return), before the verdict of the check it was printed in."""
    path = starter_with(tmp_path, gap1=["import sys", "print('in gap 1')", "sys.stderr.write('\\x1b[2J\\x1b[31mred\\r"
                                        "!\\n')", "raise NotImplementedError('01-gap1: still to do')"])
    result = subprocess.run([sys.executable, "exercises/check.py", "01", f"--file={path}"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    out = result.stdout
    assert "  | in gap 1\n  | red!\n  [01.g1_gate_shapes] not filled yet" in out, out
    assert "\x1b" not in out and "\r" not in out, out


def test_what_the_students_code_prints_is_bounded(tmp_path):
    """Output with no end of line, megabytes of it, never piles up in the checker: a line is cut at LINE_SHOWN
    characters and the whole at OUTPUT_SHOWN bytes, said each time; a C1 control (\\x9b, an escape) is dropped."""
    path = starter_with(tmp_path, gap1=["import sys", "sys.stderr.write('\\x9b2J' + 'x' * 3_000_000)",
                                        "raise NotImplementedError('01-gap1: still to do')"])
    result = subprocess.run([sys.executable, "exercises/check.py", "01", f"--file={path}"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    out = result.stdout
    assert "more characters)" in out and "past 1,048,576 bytes, is not shown)" in out, out[-2000:]
    assert len(out) < 100_000 and "\x9b" not in out and "[01.g1_gate_shapes] not filled yet" in out, out[-2000:]


def test_an_exception_message_never_passes_for_the_checkers_lines(tmp_path):
    """The message of an exception the student's code raises is the student's text: shown without control
    characters, cut, and each line after its first marked '  | ', so that a message holding a cleared screen and
    "8/8 checks passed" reads as what it is."""
    path = starter_with(tmp_path, gap1=["raise NotImplementedError('01-gap1: x\\n8/8 checks passed -- well done."
                                        "\\x1b[2J' + 'y' * 3000)"])
    code, out = check_cli(path)
    assert code == 1 and "\x1b" not in out and "\n8/8 checks passed" not in out, out
    assert "  | 8/8 checks passed -- well done.yyy" in out and "(1,031 more characters)" in out, out
    assert out.rstrip().endswith("0/8 checks passed.") or "\n0/8 checks passed." in out, out


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads other processes' environments in /proc (Linux)")
def test_the_signing_key_reaches_no_process_the_checker_starts(tmp_path):
    """The key stays in the checker's own environment, which no other process of the user may read: neither the
    student's process nor the watchdog beside the checker carries it, so the graded code cannot read it from theirs
    (and sign a result file of its own)."""
    secret = f"the-teachers-key-{os.getpid()}-{time.time_ns()}"
    path = starter_with(tmp_path, gap1=[
        "import os",
        f"needle = {secret!r}.encode()",
        "for pid in [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getppid()]:",
        "    try:",
        "        with open(f'/proc/{pid}/environ', 'rb') as f:",
        "            print('the key, in the environment of pid', pid) if needle in f.read() else None",
        "    except OSError:",
        "        pass",
        "print('looked')",
        "raise NotImplementedError('01-gap1: still to do')"])
    result = subprocess.run([sys.executable, "exercises/check.py", "01", f"--file={path}"], cwd=REPO,
                            env=dict(os.environ, **{check.SIGNING_KEY_VAR: secret}), capture_output=True, text=True,
                            timeout=120)
    out = result.stdout + result.stderr
    assert "  | looked" in out and "the key, in the environment" not in out, out


def test_exercise_09s_check_on_a_gpu_reads_a_masked_load_however_it_is_written():
    """On a GPU, without the interpreter to watch the loads, exercise 09's mask check reads the kernel's source: a
    masked headwise load laid out over two lines, or given its mask by position (tl.load's second parameter), is
    masked; a load without a mask is not."""
    import types
    checks = check.load_module(os.path.join(EXERCISES, "09_triton_headwise", "checks.py"), "checks_09_source")
    body = "def flash_attention_fwd(G, rows, row_ok):\n    o = 1.0\n    if GATE == 2:\n        g = {load}\n" \
           "        o = o * tl.sigmoid(g)\n    tl.store(G, o)\n"
    for load, masked in [("tl.load(G + rows,\n                    mask=row_ok, other=0.0)", True),
                         ("tl.load(G + rows, row_ok, 0.0)", True), ("tl.load(G + rows, mask=row_ok)", True),
                         ("tl.load(G + rows)", False), ("tl.load(G + rows,\n                    other=0.0)", False)]:
        student = types.SimpleNamespace(in_child=lambda *a, **k: None,
                                        source_of=lambda name, text=body.format(load=load): text)
        if masked:
            checks.check_headwise_load_masked(student)
        else:
            with pytest.raises(check.Wrong, match="the headwise tl.load has no mask"):
                checks.check_headwise_load_masked(student)


@pytest.mark.parametrize("path", [os.path.join(EXERCISES, "09_triton_headwise", "starter.py"),
                                  os.path.join(SOLUTIONS, "09_triton_headwise.py")], ids=["starter", "solution"])
def test_exercise_09s_launch_names_fused_multiply_adds(path, monkeypatch):
    """Exercise 09's given launch names enable_fp_fusion=True, as kernels.py's do: left out, Triton 3.9 warns at the
    first compile on a GPU, in the middle of the student's check output, about a setting the exercise never mentions.
    A spy on the kernel's run records what the launch asked for (gate None: the starter's gaps are not reached)."""
    if not os.path.exists(path):
        pytest.skip("the reference solutions were removed (a student copy)")
    from conftest import fused_kernel_runs_on_the_cpu
    if not fused_kernel_runs_on_the_cpu():
        pytest.skip("Triton's interpreter is not on here (a GPU machine, or no Triton)")
    import torch
    module = check.load_module(path, "exercise_09_launch_" + os.path.basename(path)[:-3])
    asked, fn = [], module.flash_attention_fwd
    def spy(*args, _run=fn.run, **kwargs):
        asked.append(kwargs.get("enable_fp_fusion"))
        return _run(*args, **kwargs)
    monkeypatch.setattr(fn, "run", spy)
    q, k, v = (torch.randn(1, 1, 16, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
    y = module.attention(q, k, v, None)
    reference = torch.softmax((q @ k.transpose(-2, -1) * 16 ** -0.5).masked_fill(
        torch.ones(16, 16, dtype=torch.bool).triu(1), float("-inf")), -1) @ v
    assert asked == [True] and torch.allclose(y, reference, atol=1e-5), asked


def test_the_08_report_shows_the_reason_as_one_clean_line(capsys):
    """Exercise 08's report prints the student's REASON: one line, without control characters, cut."""
    checks = check.load_module(os.path.join(EXERCISES, "08_predict_then_measure", "checks.py"), "checks_08_reason")
    checks._measured.update(baseline=2.0, g1=1.0)
    import types
    reason = "the gate\n\x1b[2J  [08.report] ok\n6/6 checks passed -- well done.\n" + "A" * 3000
    checks.check_report(types.SimpleNamespace(PREDICTION_MAX_ACT=checks.CHOICES[0], REASON=reason))
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\n6/6 checks passed" not in out and "(2,5" in out, out
    assert "because: the gate [08.report] ok 6/6 checks passed -- well done. AAA" in out, out


def test_grading_as_root_with_a_key_is_warned(tmp_path, monkeypatch):
    """As root the student's code can read everything, the key included: a signed file then proves nothing, and the
    checker says so before any student code runs. Without the key, or as another user, no warning."""
    for euid, key, warned in ((0, "k", True), (0, None, False), (1000, "k", False)):
        monkeypatch.setattr(check.os, "geteuid", lambda: euid, raising=False)
        monkeypatch.delenv(check.SIGNING_KEY_VAR, raising=False)
        if key:
            monkeypatch.setenv(check.SIGNING_KEY_VAR, key)
        lines = []
        check.grade([], result_path=str(tmp_path / f"{euid}-{key}.json"), out=lines.append)
        assert any(line.startswith("warning: grading as root") for line in lines) == warned, (euid, key, lines)


@needs_solutions
def test_runs_measured_where_their_data_is_missing_are_the_setups_not_the_students(tmp_path, monkeypatch,
                                                                                  sink_lab_runs):
    """Exercise 08's runs there, the sink lab's task not prepared where they are checked (a teacher's fresh copy):
    status 'setup' at runs_exist_and_match, with the command that prepares it; never 'your code raised'."""
    import torch
    for name in ("baseline", "g1"):
        checkpoint = torch.load(os.path.join(sink_lab_runs, name, "ckpt.pt"), map_location="cpu", weights_only=True)
        checkpoint["config"]["data_dir"] = str(tmp_path / "no-data")  # where the task was never prepared
        os.makedirs(tmp_path / name)
        torch.save(checkpoint, tmp_path / name / "ckpt.pt")
    monkeypatch.setenv("EXERCISE_RUNS", str(tmp_path))
    name = next(n for n in NAMES if n.startswith("08"))
    (passed, total, status, failed), text = run_quiet(name, os.path.join(SOLUTIONS, name + ".py"))
    assert (status, failed) == ("setup", "runs_exist_and_match") and passed == 3, text
    assert "cannot be checked on this machine" in text and "python data/bigram_backcopy/prepare.py" in text, text
    assert "your code raised" not in text, text
    assert check.grade_entry(os.path.join(EXERCISES, name), (passed, total, status, failed), 1.0)["status"] == \
        "setup"


@needs_solutions
def test_a_correct_file_that_silences_its_output_is_not_slowed(tmp_path):
    """The mark that orders the student's output before each verdict goes through the checker's own descriptor: a
    file that sends its fd 2 to /dev/null (to silence C-level warnings, say) is checked as fast as any other, never
    failed as too slow by waits for marks that cannot come."""
    with open(os.path.join(SOLUTIONS, NAMES[0] + ".py"), encoding="utf-8") as f:
        text = f.read()
    path = tmp_path / "quiet.py"
    path.write_text(text + "\nimport os\nos.dup2(os.open(os.devnull, os.O_WRONLY), 2)\n", encoding="utf-8")
    start = time.monotonic()
    code, out = check_cli(path)
    assert code == 0 and "8/8 checks passed" in out, out
    assert time.monotonic() - start < 30, out  # a second's wait for each of its requests would take far longer


@pytest.mark.parametrize("how", ["open", "glob", "command", "relative command", "command run there", "hard link",
                                 "rename"])
def test_a_file_that_reads_the_reference_answers_while_checked_is_refused(how, tmp_path):
    """The grading account can read a checkout with the reference answers (the teacher's): the student's code that
    opens one, finds one with glob or has a command print one, while it is checked, gets nothing from it."""
    answers = tmp_path / "teacher" / "exercises" / "solutions"
    answers.mkdir(parents=True)
    (answers / "01_g1_gate.py").write_text("def g1_gate(*args):\n    return 'the answer'\n", encoding="utf-8")
    target = str(answers / "01_g1_gate.py")
    reach = {"open": [f"text = open({target!r}).read()"],
             "glob": ["import glob", f"found = glob.glob({str(tmp_path)!r} + '/**/exercises/solutions/*.py', "
                      "recursive=True)", "text = open(found[0]).read() if found else ''"],
             "command": ["import subprocess", f"text = subprocess.run(['cat', {target!r}], capture_output=True, "
                         "text=True).stdout"],
             "relative command": ["import subprocess", f"text = subprocess.run(['cat', 'exercises/solutions/"
                                  f"01_g1_gate.py'], cwd={str(tmp_path / 'teacher')!r}, capture_output=True, "
                                  "text=True).stdout"],
             "command run there": ["import subprocess", "text = subprocess.run(['cat', '01_g1_gate.py'], "
                                   f"cwd={str(answers)!r}, capture_output=True, text=True).stdout"],
             "hard link": ["import os", f"os.link({target!r}, {str(tmp_path / 'a.py')!r})",
                           f"text = open({str(tmp_path / 'a.py')!r}).read()"],
             "rename": ["import os", f"os.rename({target!r}, {str(tmp_path / 'a.py')!r})",
                        f"text = open({str(tmp_path / 'a.py')!r}).read()"]}[how]
    path = starter_with(tmp_path, end=reach + ["exec(text)"])
    code, out = check_cli(path)
    assert code == 1 and "0/8 checks passed." in out, out
    if how != "glob":  # glob finds nothing, as if there were no answers: the unfilled gap fails as such
        assert "reading the reference answers while your code is checked is refused" in out, out
    else:
        assert "not filled yet" in out, out


def test_an_endless_loop_is_stopped_and_named(tmp_path):
    path = starter_with(tmp_path, gap1=["while True:", "    pass"])
    code, out = check_cli(path, "--timeout=3", timeout=60)
    assert code == 1, out
    assert "[01.g1_gate_shapes] did not finish within 3 s" in out, out
    assert "your g1_gate did not return (starter.py line 39: while True:)" in out, out


@pytest.mark.parametrize("swallowed", [False, True])
def test_an_endless_loop_in_a_helper_names_the_function_the_check_called(swallowed, tmp_path):
    """Stuck in a function of the student's own (or a given one) that the answer calls: both are named, whether the
    stop is raised in the loop or the loop swallows it and the process is killed."""
    body = ["    try:", "        time.sleep(0.1)", "    except BaseException:", "        pass"] if swallowed else \
        ["    time.sleep(0.1)"]
    path = starter_with(tmp_path, gap1=["return spin()"], end=["import time", "def spin():", "  while True:", *body])
    code, out = check_cli(path, "--timeout=2", timeout=60)
    assert code == 1 and "did not finish within 2 s: your spin did not return (starter.py line" in out, out
    assert ", called from your g1_gate (line 39)" in out, out


def test_an_endless_loop_that_swallows_the_stop_is_killed_and_named(tmp_path):
    path = starter_with(tmp_path, gap1=["import time", "while True:", "    try:", "        time.sleep(0.1)",
                                        "    except BaseException:", "        pass"])
    code, out = check_cli(path, "--timeout=2", timeout=60)
    assert code == 1, out
    assert "[01.g1_gate_shapes] did not finish within 2 s" in out and "your g1_gate did not return" in out, out
    assert "0/8 checks passed." in out



# Grading: `check.py all` (or a list) runs every exercise, prints a score table and writes a JSON result.
def grade_cli(*args, cwd=REPO, timeout=120):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "exercises/check.py", *args], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=timeout)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize("names", [["01", "01"], ["01", "03", "1"]])
def test_an_exercise_named_twice_is_one_line_before_any_grading(names):
    """`check.py 01 01 01` graded one exercise three times and scored "3/3 exercises passed"."""
    code, out = grade_cli(*names, "--timeout=1")
    assert code == 1 and out.strip() == f"error: {NAMES[0]} named more than once: each exercise is graded once, " \
        "e.g. `check.py 01 03` or `check.py all`", out


def test_ctrl_c_while_torch_loads_is_the_checkers_one_line(tmp_path):
    """Ctrl-C in the checker's first seconds, while torch loads: the line its main prints on Ctrl-C, not the
    import's traceback, with the exit status Python gives Ctrl-C. A stand-in torch on PYTHONPATH raises
    KeyboardInterrupt as it is imported, as Ctrl-C there does. What needs no torch never loads it: the list (and the
    hints: both read files), a mistyped argument and a result file's check answer at once."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise KeyboardInterrupt\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "exercises/check.py", NAMES[0][:2]], cwd=REPO, capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.stderr == check.STOPPED + "\n" and out.stdout == "", out.stderr[-2000:]
    assert out.returncode in (-2, 130), out.returncode
    for args, code, says in ((["--list"], 0, NAMES[-1]), ([NAMES[0][:2], "--student=Ann"], 1, "when grading"),
                             ([NAMES[0][:2], "--timeout=inf"], 1, "the time limit is a number of seconds"),
                             ([f"--verify={tmp_path / 'none.json'}"], 1, "error: ")):
        out = subprocess.run([sys.executable, os.path.join(EXERCISES, "check.py"), *args], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == code and says in out.stdout + out.stderr and "Traceback" not in out.stderr, out


def test_a_python_without_torch_is_one_line_that_says_what_to_do(tmp_path):
    """A stand-in torch on PYTHONPATH that cannot be imported, as in a Python where torch is not installed: what
    needs no torch still answers (the list), and a check is refused in one line that says how to set up."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\")\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "exercises/check.py", NAMES[0][:2]], cwd=REPO, capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 1 and out.stdout == "", out
    assert out.stderr == ("error: torch does not import here (No module named 'torch'): set up the project as its "
                          "README says, then `python -m lab.setup_check` says what is missing\n"), out.stderr


def test_an_empty_file_argument_is_refused_not_taken_for_the_starter(tmp_path):
    """--file= with no name (a variable left empty in a script: --file=$MINE) checked the exercise's own starter.py in
    place of the file meant, and reported its result as the student's: refused in one line, as --result= is, before
    anything is checked (a stand-in torch that cannot be imported shows that nothing got that far)."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\")\n")
    out = subprocess.run([sys.executable, "exercises/check.py", NAMES[0][:2], "--file="], cwd=REPO,
                         capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 1 and out.stdout == "", out
    assert out.stderr == "error: --file= needs a file name, e.g. --file=my_attempt.py\n", out.stderr


def read_json(path):
    import json
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def test_the_score_table_and_the_result_file(tmp_path):
    dirs = [os.path.join(EXERCISES, n) for n in NAMES[:5]]
    results = [(8, 8, "ok", None), (3, 9, "wrong", "trap"), (0, 8, "not filled", None), (2, 7, "timeout", "slow"),
               (0, 7, "error", None)]
    entries = [check.grade_entry(d, r, 1.234) for d, r in zip(dirs, results)]
    assert [e["status"] for e in entries] == ["passed", "failed", "not filled", "timeout", "error"]
    assert [e["first_failing_check"] for e in entries] == [None, "trap", "import", "slow", "import"]
    assert entries[0]["checker_seconds"] == 1.2 and entries[0]["title"] and entries[0]["id"] == NAMES[0][:2]
    assert "seconds" not in entries[0]  # the checker's time, under a name no one reads as the student's
    lines = check.score_table(entries)
    assert lines[0].split() == ["exercise", "checks", "first", "failing", "check", "status", "checker", "s"], lines
    assert lines[2].split() == [NAMES[0], "8/8", "-", "passed", "1.2"] and "trap" in lines[3], lines
    assert lines[-1] == "1/5 exercises passed, 13/39 checks.", lines
    path = tmp_path / "sub" / "r.json"
    check.write_result(str(path), check.grade_result(entries, date="2026-01-01T00:00:00+0000", student="Ann 7"))
    result = read_json(path)
    assert result["exercises"] == entries and result["passed"] == 1 and result["all_passed"] is False, result
    assert result["student"] == "Ann 7" and check.grade_result(entries)["student"] is None, result
    assert result["date"] == "2026-01-01T00:00:00+0000" and result["python"] and "torch" in result
    assert os.listdir(path.parent) == ["r.json"]  # atomic_write's temporary file is gone
    assert check.grade_result([check.grade_entry(dirs[0], results[0], 1)])["all_passed"] is True


# The student copy (exercises/make_student_copy.py): what a student gets, with no way back to the solutions.
def make_copy(tmp_path):
    if make_student_copy is None:
        pytest.skip(needs_copier.kwargs["reason"])
    dest = tmp_path / "student"
    result = subprocess.run([sys.executable, os.path.join(EXERCISES, "make_student_copy.py"), str(dest)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return dest


def with_solution(copy, name):
    """Put the reference solution of exercise `name` in place of the copy's starter."""
    with open(os.path.join(SOLUTIONS, name + ".py"), encoding="utf-8") as f:
        (copy / "exercises" / name / "starter.py").write_text(f.read(), encoding="utf-8")


@needs_copier
@pytest.mark.parametrize("args", [["--work", "FOLDER"], ["--wrok=FOLDER"], ["--work="], ["other"]])
def test_a_mistyped_command_line_is_one_line_and_copies_nothing(tmp_path, args):
    """`make_student_copy.py DEST --work FOLDER` (a space for the '='), a misspelled key or two folders: one line on
    stderr naming what to give, exit status 2, nothing made (it printed the whole usage on stdout, no error)."""
    done = subprocess.run([sys.executable, os.path.join(EXERCISES, "make_student_copy.py"), str(tmp_path / "copy"),
                           *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and not done.stdout and done.stderr.startswith("error: ") and \
        "--work=FOLDER" in done.stderr and done.stderr.count("\n") == 1, done.stdout + done.stderr
    assert os.listdir(tmp_path) == []


@needs_copier
def test_a_fresh_copy_takes_one_students_work_to_grade_it(tmp_path):
    """--work=FOLDER: the student's starters, hints record and 08/11 runs (nothing else) go into the fresh copy, what
    the folder lacks is said and left as the copy has it; a symbolic link among them is refused and the copy deleted;
    a --work that is no folder is one line, before any copy."""
    work = tmp_path / "ann"
    (work / "exercises" / NAMES[0]).mkdir(parents=True)
    (work / "exercises" / NAMES[0] / "starter.py").write_text("ANSWER = 'ann'\n", encoding="utf-8")
    (work / "exercises" / ".hints-seen.json").write_text('{"01": 2}\n', encoding="utf-8")
    (work / "exercises" / NAMES[0] / "notes.txt").write_text("not work\n", encoding="utf-8")
    (work / "out" / "exercises" / "08" / "g1").mkdir(parents=True)
    (work / "out" / "exercises" / "08" / "g1" / "ckpt.pt").write_bytes(b"run")
    (work / "model.py").write_text("# the student's own model.py: not theirs to hand in\n", encoding="utf-8")

    def copy(dest, *args):
        return subprocess.run([sys.executable, os.path.join(EXERCISES, "make_student_copy.py"), str(dest), *args],
                              capture_output=True, text=True, timeout=120)
    done = copy(tmp_path / "grade-ann", f"--work={work}")
    assert done.returncode == 0, done.stdout + done.stderr
    dest = tmp_path / "grade-ann"
    assert (dest / "exercises" / NAMES[0] / "starter.py").read_text(encoding="utf-8") == "ANSWER = 'ann'\n"
    assert (dest / "exercises" / ".hints-seen.json").read_text(encoding="utf-8") == '{"01": 2}\n'
    assert (dest / "out" / "exercises" / "08" / "g1" / "ckpt.pt").read_bytes() == b"run"
    assert not (dest / "exercises" / NAMES[0] / "notes.txt").exists()
    assert (dest / "model.py").read_text(encoding="utf-8") == open(os.path.join(REPO, "model.py")).read()
    assert (dest / "exercises" / NAMES[1] / "starter.py").read_text(encoding="utf-8") == \
        open(os.path.join(EXERCISES, NAMES[1], "starter.py"), encoding="utf-8").read()  # not handed in: untouched
    said = done.stdout
    assert "and 3 of the student's" in said and f"exercises/{NAMES[1]}/starter.py" in said and \
        "out/exercises/11/" in said and "out/exercises/08/" not in said, said
    (work / "exercises" / NAMES[1]).mkdir()
    os.symlink(os.path.join(REPO, "model.py"), work / "exercises" / NAMES[1] / "starter.py")
    refused = copy(tmp_path / "grade-ann-2", f"--work={work}")
    assert refused.returncode != 0 and "is a symbolic link" in refused.stderr and \
        len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert not (tmp_path / "grade-ann-2").exists()
    none = copy(tmp_path / "grade-bo", f"--work={tmp_path / 'bo'}")
    assert none.returncode != 0 and "is no folder" in none.stderr and not (tmp_path / "grade-bo").exists()
    os.remove(work / "exercises" / NAMES[1] / "starter.py")
    # a folder with none of a student's files would grade as untouched starters: refused, the parent of the
    # students' folders (the collected folder itself, for COLLECTED/ID) with a way to the right one
    (tmp_path / "empty").mkdir()
    for folder, said in ((tmp_path, f"it holds students' folders; give one of them, e.g. --work={work}"),
                         (tmp_path / "empty", "give the folder of one student's collected files")):
        refused = copy(tmp_path / "grade-none", f"--work={folder}")
        assert refused.returncode != 0 and f"--work={folder} holds none of a student's files" in refused.stderr \
            and said in refused.stderr and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert not (tmp_path / "grade-none").exists()


@needs_solutions
def test_grading_passes_with_the_solutions_and_mixes(tmp_path):
    copy = make_copy(tmp_path)
    first, third = NAMES[0], NAMES[2]
    with_solution(copy, first)
    code, out = grade_cli(first[:2], third[:2], f"--result={tmp_path / 'mixed.json'}", cwd=copy)
    assert code == 1, out
    entries = read_json(tmp_path / "mixed.json")["exercises"]
    assert [(e["name"], e["status"]) for e in entries] == [(first, "passed"), (third, "not filled")], entries
    assert entries[0]["first_failing_check"] is None and entries[0]["passed"] == entries[0]["total"], entries
    assert "1/2 exercises passed" in out, out
    with_solution(copy, third)
    code, out = grade_cli(first[:2], third[:2], cwd=copy)  # the default result file, in the current folder
    assert code == 0, out
    result = read_json(copy / "check-result.json")
    assert result["all_passed"] is True and [e["status"] for e in result["exercises"]] == ["passed"] * 2, result
    assert "2/2 exercises passed" in out and "Traceback" not in out, out


def test_a_backup_folder_or_a_folder_of_ones_own_is_said_not_graded(tmp_path):
    """A copy of an exercise's folder beside it ('07_x copy') would be graded too, and the gradebook keep one of the
    two: refused in one line. A folder NN_name without checks.py (the student's own, an exercise emptied) is no
    exercise: a note, never a traceback."""
    copy = make_copy(tmp_path)
    first = NAMES[0]
    shutil.copytree(copy / "exercises" / first, copy / "exercises" / f"{first} copy")
    (copy / "exercises" / "12_my_attempts").mkdir()
    for args in (["all"], [first[:2]], ["--list"]):
        code, out = grade_cli(*args, cwd=copy)
        assert code == 1 and out.strip() == (f"error: two folders for exercise {first[:2]}: {first!r} and "
                                             f"{first + ' copy'!r}; " + out.split("; ", 1)[1].strip()), out
    shutil.rmtree(copy / "exercises" / f"{first} copy")
    code, out = grade_cli("--list", cwd=copy)
    assert code == 0 and "note: exercises/12_my_attempts has no checks.py" in out and "Traceback" not in out, out
    assert out.count("\n") == len(NAMES) + 1, out
    (copy / "exercises" / first / "checks.py").unlink()  # an exercise emptied: named, with what to do
    code, out = grade_cli(first[:2], cwd=copy)
    assert code == 1 and out.strip() == (f"error: exercises/{first} has no checks.py, so it cannot be checked: "
                                         "restore the folder from a fresh copy of the exercises"), out
    assert not (copy / "check-result.json").exists()


def test_the_student_copy_holds_no_solution_and_checks_on_its_own(tmp_path, monkeypatch, request):
    copy = make_copy(tmp_path)
    assert not (copy / "exercises" / "solutions").exists()
    assert not (copy / "exercises" / "make_student_copy.py").exists()
    assert not (copy / "exercises" / "TEACHERS.md").exists()  # the lesson plans and the discussions' answers
    assert (copy / "exercises" / "README.md").read_text(encoding="utf-8").count("TEACHERS.md") == 0
    # everything the copy's README names: the tests a student may run, with what they need, and the licence
    for name in ("TUTORIAL.md", "tutorial.ipynb", "LICENSE", "requirements-test.txt", ".ci/run", "tests/conftest.py",
                 "tests/test_model.py", "tests/test_exercises.py"):
        assert (copy / name).is_file(), name
    readme = (copy / "README.md").read_text(encoding="utf-8")
    assert all(name in readme for name in ("requirements-test.txt", "python3 -m pytest -q", "tutorial.ipynb",
                                           "LICENSE", ".ci/run", "tests/"))
    assert os.access(copy / ".ci" / "run", os.X_OK) == os.access(os.path.join(REPO, ".ci", "run"), os.X_OK)
    assert not list(copy.glob("test_*.py"))
    # every relative link of every Markdown page leads to a file or folder of the copy
    pages = sorted(copy.rglob("*.md"))
    assert len(pages) > 20 and make_student_copy.broken_links(copy) == [], make_student_copy.broken_links(copy)
    for core in ("model.py", "cli.py", "runfolder.py", "probe.py", "kernels.py", "train.py", "lab/__init__.py",
                 "lab/analyze.py", "data/shards.py", "config/sink_lab.py"):
        assert (copy / core).is_file(), core
    assert not list(copy.glob("data/*/*.bin")) and not list(copy.rglob("__pycache__"))
    # a second copy into the same (now not empty) folder is refused, in one line
    again = subprocess.run([sys.executable, os.path.join(EXERCISES, "make_student_copy.py"), str(copy)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode != 0 and len(again.stderr.strip().splitlines()) == 1 and "not empty" in again.stderr
    texts = {}
    for path in copy.rglob("*"):
        if path.is_file():
            try:
                texts[path] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                texts[path] = ""
    for path, text in texts.items():
        if path.suffix == ".py":  # (results/ logs name the folder they were measured in: data, not code)
            assert REPO not in text, f"{path} names the original checkout"
        assert not re.search(r"^MUTANTS\s*=", text, re.M), f"{path} holds a solution's mutants"  # (tests read them)
    if os.path.isdir(SOLUTIONS):  # no file of the copy holds a solution's distinctive line
        known = set()  # every line a student may see anyway: the starters, checks, statements, the project's code
        for root, dirs, files in os.walk(REPO):  # (not the tests, which the copy holds too, nor the teachers' page)
            dirs[:] = [d for d in dirs if not d.startswith((".", "out")) and os.path.join(root, d) != SOLUTIONS
                       and os.path.join(root, d) != os.path.join(REPO, "tests")]
            for file in files:
                if file.endswith((".py", ".md")) and file != "TEACHERS.md":
                    with open(os.path.join(root, file), encoding="utf-8") as f:
                        known |= {line.strip() for line in f}
        copy_lines = set().union(*({line.strip() for line in text.splitlines()} for text in texts.values()))
        for name in NAMES:
            with open(os.path.join(SOLUTIONS, name + ".py"), encoding="utf-8") as f:
                distinct = {line.strip() for line in f if len(line.strip()) >= 25} - known
            assert len(distinct) >= 5, f"{name}: too few distinctive lines to test with: {distinct}"
            assert not distinct & copy_lines, f"the copy holds lines of solutions/{name}.py: {distinct & copy_lines}"
    # its checker runs from its own files, with PYTHONPATH unset: `check.py all` grades every untouched starter as
    # not filled, in its score table and in the result file a teacher collects
    # the students' section of exercises/README.md shows what the untouched first starter prints, word for word
    code, out = grade_cli(NAMES[0][:2], cwd=copy)
    readme = (copy / "exercises" / "README.md").read_text(encoding="utf-8")
    assert code == 1 and f"$ python exercises/check.py {NAMES[0][:2]}\n{out.strip()}\n```" in readme, out
    # a student asks for two hints of the first exercise; the starter's check then points at the third
    for n in (1, 2):
        code, out = grade_cli(NAMES[0][:2], "--hint", cwd=copy)
        assert code == 0 and out.startswith(f"Hint {n} of "), out
    code, out = grade_cli(NAMES[0][:2], cwd=copy)
    assert code == 1 and f"--hint` shows hint 3 of {len(check.hints_of(os.path.join(EXERCISES, NAMES[0])))}" in out, out
    # `check.py all` in the copy: the first exercise untouched (two hints seen), every other one solved where the
    # solutions are (a student copy's own run of this test has none: there all untouched), each from the copy's own
    # files (the core, data/, config/): one row of its score table and one entry of its result file each
    solved = NAMES[1:] if os.path.isdir(SOLUTIONS) else []
    for name in solved:
        with_solution(copy, name)
    if set(TRAINED_RUNS) & {name[:2] for name in solved}:  # exercises 08 and 11 read two trained runs
        monkeypatch.setenv("EXERCISE_RUNS", request.getfixturevalue("sink_lab_runs"))
    code, out = grade_cli("all", "--result=r.json", cwd=copy, timeout=900)
    assert code == 1 and "result written to r.json\n" in out, out
    result = read_json(copy / "r.json")
    assert [e["hints_seen"] for e in result["exercises"]] == [2] + [0] * (len(NAMES) - 1), result
    assert [e["name"] for e in result["exercises"]] == NAMES and result["total"] == len(NAMES), result
    for e in result["exercises"]:
        passed = e["name"] in solved
        assert e["status"] == ("passed" if passed else "not filled") and e["total"] >= 3, e
        assert e["passed"] == (e["total"] if passed else 0) and bool(e["first_failing_check"]) is not passed, e
        assert e["title"] and e["id"] == e["name"][:2] and e["checker_seconds"] >= 0, e
        assert f"{e['name']:23s}" in out and f"{e['passed']}/{e['total']}" in out, out  # its row of the table
    assert result["passed"] == len(solved) and result["all_passed"] is False and result["python"] and result["torch"]
    assert result["date"][:2] == "20", result
    assert f"{len(solved)}/{len(NAMES)} exercises passed" in out and "not filled yet" in out and "] ok: " not in out
    assert "Traceback" not in out
    if solved:  # the first one solved too: passed
        with_solution(copy, NAMES[0])
        code, out = grade_cli(NAMES[0][:2], cwd=copy)
        assert code == 0 and "Traceback" not in out, out
    # and the copy's project files, not the original's: a broken model.py in the copy breaks its check
    (copy / "model.py").write_text('raise ImportError("the copy\'s model.py")\n', encoding="utf-8")
    code, out = grade_cli(NAMES[0][:2], cwd=copy)
    assert code == 1 and "the copy's model.py" in out, out


@needs_copier
@pytest.mark.parametrize("where", ["student", "exercises/student", "."])
def test_a_copy_inside_the_checkout_is_refused(tmp_path, where):
    """A student copy made inside the teacher's checkout would sit beside exercises/solutions/ (and be a folder git
    sees as the project's): refused in one line, before anything is written."""
    source = tmp_path / "project"
    (source / "exercises").mkdir(parents=True)
    (source / "exercises" / "README.md").write_text("# E\n", encoding="utf-8")
    before = sorted(str(p) for p in source.rglob("*"))
    dest = source / where
    with pytest.raises(SystemExit) as stop:
        make_student_copy.make_copy(str(dest), source=str(source))
    assert "is inside the project's checkout" in str(stop.value) and "\n" not in str(stop.value), stop.value
    assert sorted(str(p) for p in source.rglob("*")) == before
    assert make_student_copy.make_copy(str(tmp_path / "project-student"), source=str(source)) == 1  # beside it: fine


@needs_copier
def test_a_copy_into_a_file_or_a_folder_that_is_not_empty_is_refused(tmp_path):
    """The copy goes into a new or empty folder: a file of that name, or a folder that holds something, is refused in
    one line and left as it was."""
    source = tmp_path / "project"
    (source / "exercises").mkdir(parents=True)
    (source / "exercises" / "README.md").write_text("# E\n", encoding="utf-8")
    (tmp_path / "full").mkdir()
    for dest, kept, said in ((tmp_path / "notes.txt", tmp_path / "notes.txt", "is a file, not a folder"),
                             (tmp_path / "full", tmp_path / "full" / "a", "exists and is not empty")):
        kept.write_text("mine\n", encoding="utf-8")
        with pytest.raises(SystemExit) as stop:
            make_student_copy.make_copy(str(dest), source=str(source))
        assert str(stop.value) == f"error: {dest} {said}: give a new folder", stop
        assert kept.read_text(encoding="utf-8") == "mine\n"


@needs_copier
def test_a_folder_of_runs_that_is_a_symbolic_link_is_refused(tmp_path):
    """--work=FOLDER: a folder among the runs of 08 and 11 that is a symbolic link is refused, not skipped: grading
    would read whatever it points at, and a run left out silently would read as one not trained."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "ckpt.pt").write_bytes(b"run")
    work = tmp_path / "ann"
    (work / "out" / "exercises" / "08").mkdir(parents=True)
    os.symlink(elsewhere, work / "out" / "exercises" / "08" / "g1")
    with pytest.raises(SystemExit, match="g1 is a symbolic link"):
        make_student_copy.work_files(str(work))


@needs_copier
def test_a_broken_link_in_the_copy_deletes_it(tmp_path):
    """A page of the copy that links to what the copy lacks (here the teachers' page, which is never copied): the copy
    is deleted, and one line names each broken link; web addresses, anchors and code are no links to check."""
    source = tmp_path / "project"
    (source / "exercises").mkdir(parents=True)
    (source / "docs").mkdir()
    (source / "README.md").write_text("# P\n\n[Docs](docs/a.md#top), [web](https://example.org), [up](#p)\n"
                                      "`[code](nowhere.md)`, [teachers](exercises/TEACHERS.md)\n", encoding="utf-8")
    (source / "docs" / "a.md").write_text("[back](../README.md) ![plot](../results/p.png)\n", encoding="utf-8")
    (source / "exercises" / "README.md").write_text("# E\n\n## For teachers\n\n[answers](TEACHERS.md)\n\n## After\n\n"
                                                    "[back](../README.md)\n", encoding="utf-8")
    (source / "exercises" / "TEACHERS.md").write_text("# For teachers\n", encoding="utf-8")
    dest = tmp_path / "copy"
    with pytest.raises(SystemExit) as stop:
        make_student_copy.make_copy(str(dest), source=str(source))
    message = str(stop.value)
    assert not dest.exists() and message.startswith("error: ") and "\n" not in message, message
    assert message.endswith(": README.md: exercises/TEACHERS.md, docs/a.md: ../results/p.png"), message
    (source / "README.md").write_text("# P\n\n[Docs](docs/a.md#top)\n", encoding="utf-8")
    (source / "results").mkdir()
    (source / "results" / "p.png").write_bytes(b"")
    assert make_student_copy.make_copy(str(dest), source=str(source)) == 4  # the teachers' page, not copied
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == \
        ["README.md", "docs/a.md", "exercises/README.md", "results/p.png"]
    # the section for teachers is cut out of exercises/README.md, not what follows it
    assert (dest / "exercises" / "README.md").read_text(encoding="utf-8") == "# E\n\n## After\n\n[back](../README.md)\n"


@needs_copier
@pytest.mark.parametrize("stop", [KeyboardInterrupt, OSError])
def test_a_copy_stopped_half_way_leaves_nothing(stop, tmp_path, monkeypatch):
    """Ctrl-C or a full disk in the middle of the copy: what was copied is deleted (an empty folder given stays, empty),
    so that the same command can run again; a half copy would also have skipped the check for solution code."""
    source = tmp_path / "project"
    (source / "exercises").mkdir(parents=True)
    (source / "docs").mkdir()
    for name in ("a.md", "b.md", "c.md"):
        (source / "docs" / name).write_text("# page\n", encoding="utf-8")
    (source / "exercises" / "README.md").write_text("# E\n", encoding="utf-8")
    copied, copy2 = [], shutil.copy2

    def copy_then_stop(src, dst):
        if len(copied) == 2:
            raise stop(28, "No space left on device") if stop is OSError else stop()
        copied.append(dst)
        return copy2(src, dst)
    monkeypatch.setattr(shutil, "copy2", copy_then_stop)
    for dest in (tmp_path / "new", tmp_path / "given"):
        if dest.name == "given":
            dest.mkdir()
        copied.clear()
        with pytest.raises(SystemExit if stop is OSError else KeyboardInterrupt) as e:
            make_student_copy.make_copy(str(dest), source=str(source))
        if stop is OSError:
            assert str(e.value).startswith(f"error: copying into {dest} failed (") and "deleted" in str(e.value)
        assert (dest.exists() and not os.listdir(dest)) if dest.name == "given" else not dest.exists()


@needs_copier
def test_the_student_copy_holds_every_file_of_the_project(tmp_path):
    """Each top-level file and folder of the repository is in the copy's lists, or left out on purpose (NOT_COPIED):
    a new one cannot go missing unnoticed. The copy's modules, the core's and the lab's, import in a fresh process
    there (PYTHONPATH unset), each from the copy's own files."""
    msc = make_student_copy
    listed = set(msc.TOP_FILES) | set(msc.TOP_DIRS) | set(msc.NOT_COPIED)
    lacking = [name for name in msc.TOP_DIRS + msc.NOT_COPIED if not os.path.exists(os.path.join(REPO, name))]
    assert not lacking, f"make_student_copy.py lists what the repository lacks: {lacking}"
    unlisted = [name for name in sorted(os.listdir(REPO)) if not name.startswith(".") and not msc.skipped(name)
                and name not in listed and not name.endswith(".py")]
    assert not unlisted, f"make_student_copy.py neither copies nor leaves out {unlisted}: add each to a list"
    copy = os.path.realpath(make_copy(tmp_path))
    core = sorted(f[:-3] for f in os.listdir(REPO) if f.endswith(".py") and f not in ("conftest.py",)
                  and not f.startswith("test_"))
    lab = sorted(f[:-3] for f in os.listdir(os.path.join(REPO, "lab")) if f.endswith(".py") and f != "__init__.py")
    assert {"model", "cli", "runfolder", "probe", "kernels", "train"} <= set(core) and "analyze" in lab, (core, lab)
    assert all(os.path.isfile(os.path.join(copy, f"{m}.py")) for m in core), core
    assert all(os.path.isfile(os.path.join(copy, "lab", f"{m}.py")) for m in lab), lab
    gpu = sorted(f for f in os.listdir(os.path.join(REPO, "lab", "gpu")) if not msc.skipped(f"lab/gpu/{f}"))
    assert gpu and sorted(os.listdir(os.path.join(copy, "lab", "gpu"))) == gpu, gpu
    modules = core + ["lab"] + [f"lab.{m}" for m in lab]
    code = "\n".join([  # prints the file of every module it loaded from the copy or from this repository
        "import importlib, os, sys",
        f"for m in {modules!r}:",
        "    importlib.import_module(m)",
        f"roots = ({copy!r}, {REPO!r})",
        # the installed packages are no project files, even in a virtual environment made inside the repository
        "installed = tuple(os.path.realpath(p) + os.sep for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})",
        "files = [os.path.realpath(m.__file__) for m in list(sys.modules.values())",
        "         if os.path.isabs(getattr(m, '__file__', None) or '')]",
        "print('\\n'.join(sorted(f for f in files if f.startswith(roots) and not f.startswith(installed))))"])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", code], cwd=copy, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    loaded = result.stdout.split()
    assert len(loaded) >= len(modules) and all(os.path.realpath(f).startswith(copy + os.sep) for f in loaded), loaded
    # and a lab tool runs in the copy as the docs give it
    result = subprocess.run([sys.executable, "-m", "lab.bench", "--help"], cwd=copy, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stdout + result.stderr


def test_the_whole_exercise_has_a_time_limit_too(tmp_path):
    path = starter_with(tmp_path, gap1=["while True:", "    pass"])
    lines, why = [], []
    passed, total, status, failed = check.run_isolated(os.path.join(EXERCISES, NAMES[0]), str(path), lines.append,
                                                       time_limit=60, exercise_limit=4, why=why)
    out = "\n".join(lines)
    assert (passed, status, failed) == (0, "timeout", "g1_gate_shapes"), out
    assert "the exercise did not finish within 4 s (stopped at [01.g1_gate_shapes])" in out, out
    assert why == ["the exercise did not finish within 4 s (stopped at [01.g1_gate_shapes]): a function far slower "
                   "than the exercise needs?"], why
    (tmp_path / "importing").mkdir()  # the exercise's limit runs out while the file is imported: said so, not 60 s
    path = starter_with(tmp_path / "importing", end=["import time", "time.sleep(120)"])
    lines, why = [], []
    result = check.run_isolated(os.path.join(EXERCISES, NAMES[0]), str(path), lines.append, time_limit=60,
                                exercise_limit=4, why=why)
    assert result[2:] == ("timeout", None) and result[0] == 0, (result, lines)
    assert why == ["the exercise did not finish within 4 s (stopped while your file was imported): a function far "
                   "slower than the exercise needs?"], (why, lines)


def test_the_reason_tells_a_syntax_error_from_an_exit_on_import(tmp_path):
    """Both stop the exercise at its import ("import", status error); the reason the result file records (for the
    gradebook) is the line the student saw, which tells them apart; a failed check's is its message, on one line."""
    reasons = []
    for name, end in (("syntax", ["def broken(:"]), ("exits", ["import sys", "sys.exit(3)"])):
        (tmp_path / name).mkdir()
        path = starter_with(tmp_path / name, end=end)
        why = []
        result = check.run_isolated(os.path.join(EXERCISES, NAMES[0]), str(path), lambda line: None, why=why)
        assert result[2:] == ("error", None) and len(why) == 1, (result, why)
        assert result[:2] == (0, len(check.checks_of(os.path.join(EXERCISES, NAMES[0])))), result  # 0 of all
        reasons.append(why[0])
    assert reasons[0].startswith("your file does not import: SyntaxError: ") and "line " in reasons[0], reasons
    assert reasons[1].startswith("your file ended the program while it was imported (sys.exit(3)"), reasons
    (tmp_path / "wrong").mkdir()  # a check that fails: its reason is the check's message, not the FAILED line
    lines, why = [], []
    result = check.run_isolated(os.path.join(EXERCISES, NAMES[0]), str(starter_with(tmp_path / "wrong", ["return y"])),
                                lines.append, why=why)
    failed = [line for line in lines if "] FAILED: " in line]
    assert result[2] == "wrong" and len(failed) == 1 and "\n" in failed[0], (result, lines)
    assert why == [check.reason_of(failed[0].split("\n", 1)[1])] and not why[0].startswith("FAILED"), (why, failed)
    assert check.reason_of("[01.x] FAILED: the numbers\n      at T=40\n  off by 2", "[01.x]") == \
        "FAILED: the numbers at T=40 off by 2"
    assert len(check.reason_of("x" * 10_000)) == check.REASON_CHARS


# A student file that tries to forge its grade, outlive the checker, or freeze it (issue: a grade no student file can
# forge). The verdict is decided in a process that never imports the file: whatever the file does, it gets at best
# a failed or timed-out check.
FORGE_TOKEN = [  # the old checker's child held a token and a pipe to the verdict: find them on the stack, report a pass
    "import os, sys",
    "f = sys._getframe(1)",
    "while f is not None:",
    "    v = f.f_locals",
    "    if 'token' in v and 'connection' in v:",
    "        v['connection'].send((v['token'], 'result', 8, 8, 'ok', None))",
    "        os._exit(0)",
    "    f = f.f_back",
    "return y",
]
FORGE_CODE = [  # make every check a function that returns None, wherever checks.py was loaded
    "import sys",
    "for m in list(sys.modules.values()):",
    "    for k, fn in list(getattr(m, '__dict__', {}).items()):",
    "        if k.startswith('check_') and hasattr(fn, '__code__'):",
    "            fn.__code__ = (lambda student: None).__code__",
    "return y",
]


@pytest.mark.parametrize("attack", [FORGE_TOKEN, FORGE_CODE], ids=["token-on-the-stack", "checks-code-replaced"])
def test_a_file_that_reaches_for_the_verdict_fails(attack, tmp_path):
    code, out = check_cli(starter_with(tmp_path, gap1=attack))
    assert code == 1, out
    assert "8/8 checks passed" not in out and "[01.gate_scores_in_0_1] FAILED" in out, out


def test_a_file_that_writes_to_the_answer_pipe_gets_an_error(tmp_path):
    path = starter_with(tmp_path, gap1=["import os", "for fd in range(3, 64):", "    try:",
                                        "        os.write(fd, (2**40).to_bytes(8, 'little'))",
                                        "    except OSError:", "        pass", "return y"])
    code, out = check_cli(path)
    assert code == 1 and "could not be read" in out and "0/8 checks passed" in out, out


def test_a_process_left_behind_cannot_rewrite_the_result(tmp_path):
    """A detached process (double fork, a session of its own) that rewrites the result file after the checker ended
    is ended with the child, before the result is written."""
    result = tmp_path / "r.json"
    path = starter_with(tmp_path, gap1=[
        "import json, os, time",
        "if os.fork() == 0:",
        "    os.setsid()",
        "    if os.fork() == 0:",
        "        time.sleep(3)",
        f"        open({str(result)!r}, 'w').write(json.dumps({{'all_passed': True, 'passed': 11}}))",
        "    os._exit(0)",
        "return y"])
    copy = make_copy(tmp_path)
    (copy / "exercises" / NAMES[0] / "starter.py").write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    code, out = grade_cli(NAMES[0][:2], f"--result={result}", cwd=copy)
    assert code == 1, out
    import time
    time.sleep(5)
    assert read_json(result)["all_passed"] is False, out
    code, out = grade_cli(f"--verify={result}", cwd=copy)
    assert code == 0 and "is as the checker wrote it" in out, out


@pytest.mark.skipif(not sys.platform.startswith("linux") or check.torch.cuda.is_available(), reason="the zygote "
                    "forks on Linux without a GPU (elsewhere each child is a fresh Python)")
def test_each_child_is_forked_from_a_zygote_that_a_student_can_only_stop_and_that_ends_with_the_checker(tmp_path):
    """The command line forks each exercise's child from one process that imported torch before any student's code
    ran (the zygote): the child is still the checker's own child, in a session of its own. A student's code that
    kills the zygote (a process of the same user) only slows the next exercise, graded in a fresh Python; a zygote
    left alone ends with the checker."""
    record = tmp_path / "record.json"
    spy = ["import json, os, signal",
           "parent, kids = os.getppid(), []",
           "for task in os.listdir(f'/proc/{parent}/task'):",
           "    try:",
           "        kids += open(f'/proc/{parent}/task/{task}/children').read().split()",
           "    except OSError:  # a thread of the checker's that ended",
           "        pass",
           "zygotes = [int(p) for p in kids if int(p) != os.getpid() and b'check.zygote' in "
           "open(f'/proc/{p}/cmdline', 'rb').read()]",
           "cmdline = lambda pid: open(f'/proc/{pid}/cmdline', 'rb').read().decode(errors='replace')",
           f"if not os.path.exists({str(record)!r}):  # what the first call saw",
           f"    open({str(record)!r}, 'w').write(json.dumps({{'parent': cmdline(parent), 'own': "
           "cmdline(os.getpid()), 'session': os.getsid(0) == os.getpid(), 'zygotes': zygotes}))"]
    copy = make_copy(tmp_path)
    path = starter_with(tmp_path, gap1=spy + ["for pid in zygotes:", "    os.kill(pid, signal.SIGKILL)",
                                              "return y"])
    (copy / "exercises" / NAMES[0] / "starter.py").write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    code, out = grade_cli(NAMES[0][:2], NAMES[1][:2], f"--result={tmp_path / 'r.json'}", cwd=copy)
    seen = read_json(record)
    assert "exercises/check.py" in seen["parent"] and "check.zygote" in seen["own"] and seen["session"], seen
    assert len(seen["zygotes"]) == 1, seen
    entries = read_json(tmp_path / "r.json")["exercises"]
    assert [e["status"] for e in entries] == ["failed", "not filled"], out  # the second, in a fresh Python
    path = starter_with(tmp_path, gap1=spy + ["return y"])
    record.unlink()
    code, out = check_cli(path)
    zygote = read_json(record)["zygotes"][0]
    with pytest.raises(ProcessLookupError):
        os.kill(zygote, 0)


def test_a_zygote_that_finds_a_gpu_forks_nothing(tmp_path):
    """No child forked after its parent asked for CUDA can use it (exercise 09 runs its kernel there): a zygote that
    finds a GPU ends at once, and the checker starts a fresh Python for each exercise instead."""
    code = ("import socket, sys\n"
            f"sys.path.insert(0, {EXERCISES!r})\n"
            "import check\n"
            "check.load_torch()\n"
            "check.torch.cuda.is_available = lambda: True  # as on a machine with a GPU\n"
            "ours, theirs = socket.socketpair(type=socket.SOCK_SEQPACKET)\n"
            "ours.send(b'a request')\n"
            "check.zygote(theirs.fileno())  # (without the GPU's line, it reads the request and waits for the next)\n"
            "print('ended, the request unread' if theirs.recv(32, socket.MSG_DONTWAIT) == b'a request' else '?')\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ended, the request unread", done.stdout + done.stderr


@pytest.mark.skipif(not check.torch.cuda.is_available(), reason="needs a GPU: exercise 09's kernel on CUDA")
@needs_solutions
def test_exercise_09s_solution_passes_on_the_command_line_on_a_gpu():
    """On a GPU the command line's child runs exercise 09's kernel on CUDA, which no child forked from a process that
    asked for CUDA could: the reference solution passes as it does in a fresh Python."""
    code, out = grade_cli("09", f"--file={os.path.join(SOLUTIONS, '09_triton_headwise.py')}", timeout=600)
    assert code == 0 and "checks passed -- well done" in out, out


@pytest.mark.parametrize("edited", ["checks.py", "starter.py"])
def test_a_file_that_edits_the_next_exercises_checks_stops_the_grading(edited, tmp_path):
    """The next exercise's checks, or its starter (a solution copied in its place, say): either is no student's."""
    copy = make_copy(tmp_path)
    target = copy / "exercises" / NAMES[1] / edited
    path = starter_with(tmp_path, gap1=[f"open({str(target)!r}, 'w').write('def check_ok(student):\\n    pass\\n')",
                                        "return y"])
    (copy / "exercises" / NAMES[0] / "starter.py").write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    code, out = grade_cli(NAMES[0][:2], NAMES[1][:2], f"--result={tmp_path / 'r.json'}", cwd=copy)
    entries = read_json(tmp_path / "r.json")["exercises"]
    assert code == 1 and "changed the checker's, the project's or the exercises' files" in out, out
    assert [e["status"] for e in entries] == ["error"], entries  # exercise 02 is not graded by the edited checks
    # no partial credit for the checks run before the edit was seen: the gradebook counts "passed"
    assert (entries[0]["passed"], entries[0]["first_failing_check"]) == (0, "changed the checker's files"), entries


def test_a_file_that_plants_a_start_up_file_stops_the_grading_and_names_it(tmp_path):
    """A usercustomize.py in the account's own site-packages would run in every later Python of the account, the
    next student's grading included: the grading stops and names it, and the next grading in the account notes it
    before any verdict. (PYTHONUSERBASE points the account's site-packages into tmp_path.)"""
    copy = make_copy(tmp_path)
    plant = ["import site", "os.makedirs(site.getusersitepackages(), exist_ok=True)",
             "open(os.path.join(site.getusersitepackages(), 'usercustomize.py'), 'w').write('x = 1\\n')", "return y"]
    path = starter_with(tmp_path, gap1=["import os"] + plant)
    (copy / "exercises" / NAMES[0] / "starter.py").write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    env = dict(os.environ, PYTHONUSERBASE=str(tmp_path / "userbase"))
    env.pop("PYTHONPATH", None)
    run = subprocess.run([sys.executable, "exercises/check.py", NAMES[0][:2], NAMES[1][:2],
                          f"--result={tmp_path / 'r.json'}"], cwd=copy, env=env, capture_output=True, text=True,
                         timeout=120)
    out = run.stdout + run.stderr
    planted = next((tmp_path / "userbase").rglob("usercustomize.py"))
    assert run.returncode == 1 and f"{planted} runs in every Python of this account from now on" in out, out
    assert [e["status"] for e in read_json(tmp_path / "r.json")["exercises"]] == ["error"]
    with open(os.path.join(EXERCISES, NAMES[0], "starter.py"), encoding="utf-8") as f:  # the planting starter gone
        (copy / "exercises" / NAMES[0] / "starter.py").write_text(f.read(), encoding="utf-8")
    run = subprocess.run([sys.executable, "exercises/check.py", NAMES[0][:2], f"--result={tmp_path / 'r2.json'}"],
                         cwd=copy, env=env, capture_output=True, text=True, timeout=120)
    assert f"note: Python runs start-up files from this account's own site-packages: {planted}." in run.stdout, \
        run.stdout + run.stderr


def test_the_hint_counts_are_read_before_the_students_code_runs(tmp_path):
    """The record of hints seen is no .py file, so no digest guards it: a starter that rewrites it while it is
    graded does not change the counts in the result file (read before any student code ran)."""
    import json
    copy = make_copy(tmp_path)
    record = copy / "exercises" / ".hints-seen.json"
    record.write_text(json.dumps({NAMES[0][:2]: 3, NAMES[1][:2]: 2}), encoding="utf-8")
    path = starter_with(tmp_path, end=[f"open({str(record)!r}, 'w').write('{{}}')"])
    (copy / "exercises" / NAMES[0] / "starter.py").write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    code, out = grade_cli(NAMES[0][:2], NAMES[1][:2], f"--result={tmp_path / 'r.json'}", cwd=copy)
    assert record.read_text(encoding="utf-8") == "{}", out  # the starter did rewrite it
    result = read_json(tmp_path / "r.json")
    assert [e["hints_seen"] for e in result["exercises"]] == [3, 2], out
    assert [e["checks_sha256"] for e in result["exercises"]] == [
        check.text_digest(str(copy / "exercises" / n / "checks.py")) for n in NAMES[:2]]
    assert result["checker_sha256"] == check.text_digest(str(copy / "exercises" / "check.py"))


def test_the_result_file_names_the_student(tmp_path):
    """`--student=ID` goes into the result file, under its seal; without it the file records none, and says so."""
    import json
    code, out = grade_cli(NAMES[0][:2], "--student=Ann Lee 7", f"--result={tmp_path / 'ann.json'}")
    assert code == 1 and "--student" not in out, out
    assert f"result written to {tmp_path / 'ann.json'} for Ann Lee 7" in out, out  # outside the folder: as given
    result = read_json(tmp_path / "ann.json")
    assert result["student"] == "Ann Lee 7" and check.verify_result(str(tmp_path / "ann.json")) == [], result
    result["student"] = "Bo"  # another's name on Ann's file: the seal no longer matches
    (tmp_path / "ann.json").write_text(json.dumps(result), encoding="utf-8")
    assert "changed after the checker wrote it" in check.verify_result(str(tmp_path / "ann.json"))[0]
    code, out = grade_cli(NAMES[0][:2], f"--result={tmp_path / 'r.json'}")
    assert code == 1 and read_json(tmp_path / "r.json")["student"] is None, out
    assert [line for line in out.splitlines() if "--student=" in line and "teacher will need it" in line], out
    for args in (["--student="], ["--student=a\tb"], ["--student=Ann"], ["--hint", "--student=Ann"],
                 ["--student=" + "x" * 101, f"--result={tmp_path / 'long.json'}"]):  # at most 100 characters
        code, out = grade_cli(NAMES[0][:2], *args)
        assert code == 1 and out.startswith("error: ") and out.count("\n") == 1 and "--student" in out, (args, out)


def test_the_result_file_is_sealed_and_signed(tmp_path, monkeypatch):
    import json
    dirs = [os.path.join(EXERCISES, n) for n in NAMES[:2]]
    entries = [check.grade_entry(d, (0, 8, "not filled", None), 1.0, check.file_digest(os.path.join(d, "starter.py")))
               for d in dirs]
    path = tmp_path / "r.json"
    check.write_result(str(path), check.grade_result(entries))
    assert check.verify_result(str(path)) == []
    forged = read_json(path)
    forged["all_passed"], forged["exercises"][0]["status"] = True, "passed"
    path.write_text(json.dumps(forged), encoding="utf-8")
    assert "changed after the checker wrote it" in check.verify_result(str(path))[0]
    check.write_result(str(path), check.grade_result(entries), key="teacher's secret")
    assert read_json(path)["seal"].startswith("hmac-sha256:")
    assert check.verify_result(str(path), key="teacher's secret") == []
    assert "set CHECK_SIGNING_KEY" in check.verify_result(str(path))[0]
    forged = read_json(path)
    forged["passed"] = 2
    forged["seal"] = check.seal(forged)  # a forger without the key can only make a plain checksum
    path.write_text(json.dumps(forged), encoding="utf-8")
    assert "not signed" in check.verify_result(str(path), key="teacher's secret")[0]
    forged["seal"] = check.seal(forged, key="a guess")
    path.write_text(json.dumps(forged), encoding="utf-8")
    assert "changed after" in check.verify_result(str(path), key="teacher's secret")[0]
    assert "no seal" in check.verify_result(str(tmp_path / "nothing.json"))[0] or \
        "cannot be read" in check.verify_result(str(tmp_path / "nothing.json"))[0]
    # a seal that holds over a file whose graded starter.py is not the one here (--verify run in another copy, such
    # as the teacher's checkout): the starter is named, and the command says the file itself is intact
    entries[0]["file_sha256"] = "0" * 64
    check.write_result(str(path), check.grade_result(entries))
    assert check.verify_result(str(path)) == [f"exercise {NAMES[0][:2]}: starter.py changed since it was graded "
                                              f"({os.path.relpath(os.path.join(EXERCISES, NAMES[0], 'starter.py'))})"]
    code, out = grade_cli(f"--verify={path}")
    assert code == 1 and "note: the result file itself is as the checker wrote it" in out and REPO in out, out


def test_sigterm_to_the_checker_ends_the_students_process(tmp_path):
    """The student's loop swallows every exception; the checker, told to stop, ends it before it ends itself."""
    import signal
    import time
    pid_file = tmp_path / "pid"
    path = starter_with(tmp_path, gap1=["import os, time", f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))",
                                        "while True:", "    try:", "        time.sleep(0.05)",
                                        "    except BaseException:", "        pass"])
    proc = subprocess.Popen([sys.executable, "exercises/check.py", "01", f"--file={path}"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    child = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=30)[0]
    assert proc.returncode != 0, out
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


def test_a_file_that_stops_the_checker_does_not_freeze_it(tmp_path):
    path = starter_with(tmp_path, gap1=["import os, signal", "os.kill(os.getppid(), signal.SIGSTOP)", "return y"])
    code, out = check_cli(path, timeout=90)
    assert code == 1 and "[01.gate_scores_in_0_1] FAILED" in out, out


@pytest.mark.parametrize("where", ["its own process", "a process it starts"])
def test_a_file_that_takes_too_much_memory_is_stopped(where, tmp_path, monkeypatch):
    monkeypatch.setenv("CHECK_MEMORY_GB", "0.75")
    take = (["import time, torch", "big = torch.ones(2**28, dtype=torch.float32)"] if where == "its own process" else
            ["import subprocess, sys, time", "subprocess.Popen([sys.executable, '-c', "
             "'import time; big = bytes(2**30) + b\"x\"; time.sleep(60)'])"])
    path = starter_with(tmp_path, gap1=take + ["time.sleep(30)", "return y"])
    code, out = check_cli(path, timeout=90)
    assert code == 1 and "used more than 0.8 GiB of memory and was stopped" in out, out
    assert "0/8 checks passed" in out, out


def test_the_import_guard_refuses_a_file_changed_the_moment_after_it_started(tmp_path):
    """ImportGuard.newer: a file written before the checker started is trusted; one written after it is not, however
    soon after (a student's import can run well within a second of the start)."""
    before = tmp_path / "before.py"
    before.write_text("x = 1\n", encoding="utf-8")
    time.sleep(0.05)  # past the file system's clock tick
    guard = check.ImportGuard()
    time.sleep(0.05)
    after = tmp_path / "after.py"
    after.write_text("x = 2\n", encoding="utf-8")
    assert not guard.newer(str(before)) and guard.newer(str(after))
    assert not guard.newer(str(tmp_path / "nowhere.py"))


def test_the_memory_limit_is_half_the_machine_at_most_8_gib(monkeypatch):
    """Unset CHECK_MEMORY_GB: half the machine's memory, at most 8 GiB (a big server lends no student 100 GiB);
    set, its GiB."""
    monkeypatch.delenv("CHECK_MEMORY_GB", raising=False)
    for pages, limit in ((2**20, 2**31), (2**30, 8 * 2**30)):  # 4 GiB of 4 KiB pages, and 4 TiB
        monkeypatch.setattr(check.os, "sysconf", lambda name, pages=pages: pages if name == "SC_PHYS_PAGES" else 4096)
        assert check.memory_limit() == limit
    monkeypatch.setenv("CHECK_MEMORY_GB", "0.75")
    assert check.memory_limit() == int(0.75 * 2**30)


@needs_solutions
def test_the_checker_imports_no_file_changed_after_it_started(tmp_path):
    """A student's process edits a module the checker imports only later (exercise 10's checks read the sink lab's
    task from data/bigram_backcopy/prepare.py) so that, imported there, it makes every check pass: the checker
    refuses to import it, and the check fails."""
    copy = make_copy(tmp_path)
    target = copy / "data" / "bigram_backcopy" / "prepare.py"
    payload = ("\nimport sys\nfor m in list(sys.modules.values()):\n"
               "    for k, v in list(getattr(m, '__dict__', {}).items()):\n"
               "        if k.startswith('check_'):\n"
               "            v.__code__ = (lambda student: None).__code__\n")
    with open(os.path.join(SOLUTIONS, "10_bigram_backcopy.py"), encoding="utf-8") as f:
        solution = f.read()  # make_text right, so that the checks reach the import; the other two wrong
    path = tmp_path / "evil10.py"
    path.write_text(solution + f"\n\nwith open({str(target)!r}, 'a') as f:\n    f.write({payload!r})\n\n"
                    "def copy_positions(idx, triggers):\n    return idx < 0\n\n"
                    "def task_numbers(P, triggers, text):\n    return 0.5, 1.0\n", encoding="utf-8")
    result = subprocess.run([sys.executable, "exercises/check.py", "10", f"--file={path}"], cwd=copy,
                            capture_output=True, text=True, timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 1 and "passed -- well done" not in out, out
    assert "created or changed after the checker started" in out, out


def test_a_chain_of_detached_processes_is_ended_whole(tmp_path):
    """150 processes, each in a session of its own, each the parent of the next: none outlives the check."""
    marker = f"sleep {os.getpid()}.{len(str(tmp_path))}"
    path = starter_with(tmp_path, end=[
        "import os",
        "def _chain():",
        "    r, w = os.pipe()",
        "    for level in range(150):",
        "        if os.fork():",
        "            if level == 0:",
        "                os.close(w)",
        "                os.read(r, 1)",
        "                return",
        f"            os.execv('/bin/sleep', ['sleep', '{marker.split()[1]}'])",
        "        os.setsid()",
        "    os.write(w, b'x')",
        "    import time",
        "    time.sleep(10**6)",
        "_chain()"])
    code, out = check_cli(path, timeout=120)
    assert code == 1 and "not filled yet" in out, out
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().replace(b"\0", b" ").decode(errors="replace").strip() == marker:
                    left.append(pid)
        except OSError:
            pass
    assert not left, f"{len(left)} processes outlived the check"


def test_a_nan_where_a_number_belongs_fails(tmp_path):
    solution = open(os.path.join(SOLUTIONS, "03_f_attn.py"), encoding="utf-8").read() if os.path.isdir(SOLUTIONS) \
        else None
    if solution is None:
        pytest.skip("needs the reference solutions")
    path = tmp_path / "nan03.py"
    path.write_text(solution + "\n\ndef f_attn(probs):\n    return float('nan')\n", encoding="utf-8")
    result = subprocess.run([sys.executable, "exercises/check.py", "03", f"--file={path}"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "off by nan" in result.stdout, result.stdout + result.stderr


def test_expect_close_fails_a_nan_and_a_wrong_shape_that_broadcasts():
    """A NaN compares as no error (nan > tol is False), and a (1, 6) answer broadcasts against a (6,) one: the helpers
    fail both, in the check's words, not pass them."""
    import torch
    want = torch.arange(6.0)
    with pytest.raises(check.Wrong, match=r"out has NaN or inf values \(1 of 6\)"):
        check.expect_close("out", torch.tensor([0.0, 1, 2, 3, 4, float("nan")]), want)
    with pytest.raises(check.Wrong, match=r"out should have shape \(6,\), got \(1, 6\)"):
        check.expect_close("out", want.reshape(1, 6), want)
    check.expect_close("out", want + 1e-7, want)  # within the tolerance: no complaint
    # same(), how a check recognises a known answer: b's shape, and equal to 1e-8 unless told
    assert check.same(want, want.clone()) and not check.same(want.reshape(1, 6), want)
    assert not check.same(want + 1e-5, want) and check.same(want + 1e-5, want, 1e-4)


@pytest.mark.parametrize("setting", ["CHECK_SEED=99999999999999999999", "CHECK_SEED=abc", "CHECK_MEMORY_GB=inf",
                                     "CHECK_MEMORY_GB=0", "--timeout=inf"])
def test_the_checkers_own_settings_are_one_line(setting):
    env = dict(os.environ)
    args = ["exercises/check.py", "01"]
    if setting.startswith("--"):
        args.append(setting)
    else:
        env[setting.split("=")[0]] = setting.split("=", 1)[1]
    result = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode == 1 and out.startswith("error: ") and out.count("\n") == 1, out
    assert "Traceback" not in out and setting.split("=")[0].lstrip("-") in out, out


def test_a_file_by_another_name_is_read_and_bad_paths_are_said_before_grading(tmp_path):
    """--file= with no .py ending is Python source all the same; a notebook, or a --result= that names a folder or a
    folder that is not there, is one line before anything is checked (not after minutes of grading)."""
    path = starter_with(tmp_path)
    answer = tmp_path / "answer.txt"
    answer.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    code, out = check_cli(answer)
    assert code == 1 and "[01.g1_gate_shapes] not filled yet" in out and "does not import" not in out, out
    for args, says in ([f"--file={tmp_path / 'answer.ipynb'}"], "is a notebook"),\
                      ([f"--file={tmp_path}"], f"{tmp_path} is a folder: --file= names the file to check"),\
                      ([f"--result={tmp_path}"], "must name a file in a folder that exists"),\
                      ([f"--result={tmp_path / 'nowhere' / 'r.json'}"], "must name a file in a folder that exists"):
        result = subprocess.run([sys.executable, "exercises/check.py", "01", *args], cwd=REPO, capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 1 and result.stderr.startswith("error: ") and says in result.stderr, result
        assert result.stdout == "" and result.stderr.count("\n") == 1, result


def test_a_listing_read_only_in_part_ends_quietly():
    """`check.py --list | head -1`: the reader closes the pipe; no traceback."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # each line written as it is printed, so the pipe breaks mid-list
    result = subprocess.run(f"{shlex.quote(sys.executable)} exercises/check.py --list | head -1", shell=True,
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.stdout.startswith(NAMES[0]) and result.stdout.count("\n") == 1, result.stdout
    assert result.stderr == "", result.stderr


def test_a_checker_failure_is_never_a_pass_and_a_reason_fits_whole():
    """The checker's own failure (no check ran: 0 of 0) is an error in the result file and the score table, never a
    pass; a grading of no exercise is not "all passed"; a reason of exactly REASON_CHARS characters is kept whole."""
    entry = check.grade_entry(os.path.join(EXERCISES, NAMES[0]), (0, 0, "error", None), 1.0)
    assert (entry["status"], entry["first_failing_check"]) == ("error", "import"), entry
    assert check.score_table([entry])[-1] == "0/1 exercises passed, 0/0 checks."
    assert check.grade_result([entry])["all_passed"] is False and check.grade_result([])["all_passed"] is False
    assert check.reason_of("x" * check.REASON_CHARS) == "x" * check.REASON_CHARS


def test_each_graded_run_draws_its_own_seed_and_the_result_records_it(monkeypatch):
    """A graded run's inputs come from a seed drawn afresh (no file can answer them in advance), CHECK_SEED repeats a
    run's, and the result file records the seed it was graded with (the gradebook tells runs apart by it)."""
    monkeypatch.setattr(check, "RUN_SEED", 0)
    monkeypatch.delenv("CHECK_SEED", raising=False)
    seeds = set()
    for _ in range(5):
        check.draw_run_seed()
        seeds.add(check.RUN_SEED)
    assert len(seeds) > 1 and all(0 <= s < check.MAX_SEED for s in seeds), seeds
    monkeypatch.setenv("CHECK_SEED", "7000")
    check.draw_run_seed()
    assert check.RUN_SEED == 7000 and check.grade_result([])["seed"] == 7000


@needs_solutions
@pytest.mark.parametrize("change, said", [
    ({"baseline": {"gate": "g1"}}, "the baseline needs --gate=none"),
    ({"baseline": {"gate": "g1"}, "g1": {"gate": "none"}}, "the folders look swapped"),
    ({"g1": {"iter_num": -1}}, "stopped at different steps (baseline 40, g1 39): is the g1 run still training? "
                               "Wait for its 'done:' line"),
    ({"baseline": {"learning_rate": 0.3}}, "differ in more than the gate: learning_rate"),
    ({"baseline": {"dataset": "pystdlib"}, "g1": {"dataset": "pystdlib"}}, "this exercise measures the sink lab's task"),
], ids=["baseline-gated", "swapped", "steps", "learning-rate", "dataset"])
def test_trained_runs_that_are_not_the_readmes_two_fail(change, said, sink_lab_runs, tmp_path, monkeypatch):
    """Exercises 08 and 11 compare a baseline with a G1 run that differ in the gate alone: a gated baseline, swapped
    folders, runs stopped at different steps, another setting changed or another task each fail runs_exist_and_match
    with what to train again; the two runs as trained pass it."""
    import torch
    monkeypatch.setenv("EXERCISE_RUNS", str(tmp_path))
    for name in ("baseline", "g1"):
        checkpoint = torch.load(os.path.join(sink_lab_runs, name, "ckpt.pt"), map_location="cpu", weights_only=True)
        for key, value in change.get(name, {}).items():
            if key == "iter_num":
                checkpoint["iter_num"] += value
            else:
                checkpoint["config"][key] = value
        os.makedirs(tmp_path / name)
        torch.save(checkpoint, tmp_path / name / "ckpt.pt")
    with pytest.raises(check.Wrong, match=re.escape(said)):
        check.expect_trained_runs("08", "step 2")
    monkeypatch.setenv("EXERCISE_RUNS", sink_lab_runs)
    check.expect_trained_runs("08", "step 2")  # as trained: no complaint


@needs_copier
def test_a_copy_that_holds_a_line_of_a_solution_or_links_out_of_itself_is_deleted(tmp_path, monkeypatch):
    """One distinctive line of a solution (25 characters or more, in no starter, statement or project page or module;
    the tests are copied too, so they make no line known) in any file of the copy -- a test, a text file -- deletes
    it, naming the file and the solution; so does a link that leads out of the copy, even to a file that is there."""
    source = tmp_path / "project"
    answers = source / "exercises" / "solutions"
    answers.mkdir(parents=True)
    (source / "exercises" / "README.md").write_text("# E\n", encoding="utf-8")
    (source / "docs").mkdir()
    (source / "tests").mkdir()
    line = "out = probs @ v * gate  # ans"  # 29 characters
    (answers / "01_demo.py").write_text(f"def f(probs, v, gate):\n    {line}\n    return out.sum(dim=-1) * 2\n",
                                        encoding="utf-8")
    monkeypatch.setattr(make_student_copy, "ANSWERS", str(answers))
    for holder in ("tests/test_demo.py", "docs/notes.txt"):
        (source / holder).write_text(f"# notes\n    {line}\n", encoding="utf-8")
        dest = tmp_path / "copy"
        with pytest.raises(SystemExit, match=re.escape(f"held solution code, so it was deleted: {holder} (from "
                                                       "01_demo.py)")):
            make_student_copy.make_copy(str(dest), source=str(source))
        assert not dest.exists()
        (source / holder).unlink()
    (tmp_path / "elsewhere.md").write_text("# there, outside the copy\n", encoding="utf-8")
    (source / "docs" / "notes.md").write_text("[out](../../elsewhere.md)\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=re.escape("docs/notes.md: ../../elsewhere.md")):
        make_student_copy.make_copy(str(tmp_path / "copy"), source=str(source))
    assert not (tmp_path / "copy").exists()

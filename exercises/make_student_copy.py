"""
Make the copy of the project a student gets: the tutorial, the exercises without their reference solutions, and the
project files the tutorial and the checks use. For teachers; it is not part of the copy.

    python exercises/make_student_copy.py DEST      # DEST must not exist, or be an empty folder

What is copied is a fixed list (TOP_FILES, TOP_DIRS: the lab/ package, config/, data/, ...) and the core: every
top-level *.py (model.py, cli.py, runfolder.py, ...), less what git ignores (prepared token shards, outputs, caches),
the exercises' solutions folder and this script. What a student does not get is listed too (NOT_COPIED: the test
suites, tests/), so that tests/test_exercises.py finds any top-level file or folder that is in neither list. The
copy's checker runs from the copy's own files (exercises/check.py finds the project beside itself), so nothing
in it leads back here. Before it reports success, the copy is searched for every reference solution's distinctive
lines (those found in no starter, checks.py, statement nor project file); a copy that holds one is deleted.
"""

import fnmatch
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ANSWERS = os.path.join(HERE, "solutions")

TOP_FILES = ["README.md", "TUTORIAL.md", "tutorial.ipynb", "PAPERS.md", "LICENSE", "requirements.txt",
             "requirements-extra.txt", ".gitignore"]
TOP_DIRS = ["config", "data", "docs", "exercises", "lab", "results"]  # lab/: the study's tools and lab/gpu/ scripts
NOT_SCRIPTS = ["test_*.py", "conftest.py"]  # test suites (in tests/, never copied): none is a script of the core
# the top-level files and folders a student does not get (besides what git ignores): the test suites, which test the
# checks against the solutions, and what they need
NOT_COPIED = ["tests", "requirements-test.txt"]
# what git ignores (.gitignore), relative to the repository, and what is never copied
SKIP = ["*/__pycache__", "*.pyc", "*/.pytest_cache", "out*", "data/*/*.bin", "data/*/meta.json", "data/*/.cache",
        "*/.lock", ".lock", "exercises/solutions", "exercises/make_student_copy.py", "*/.*"]


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
    """Every line (stripped) of the project's .py and .md files but the solutions: starters, checks.py, the
    statements, scripts, tests."""
    known = set()
    for root, dirs, names in os.walk(source):
        dirs[:] = [d for d in dirs if not d.startswith(".") and not d.startswith("out") and d != "__pycache__"
                   and os.path.realpath(os.path.join(root, d)) != os.path.realpath(ANSWERS)]
        for n in names:
            if n.endswith((".py", ".md")):
                known |= _lines(os.path.join(root, n))
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


def make_copy(dest, source=REPO):
    """Copy the student's files into dest (absent or empty); returns the number of files copied."""
    if os.path.exists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        raise SystemExit(f"error: {dest} exists and is not empty: give a new folder")
    files = files_to_copy(source, dest)
    os.makedirs(dest, exist_ok=True)
    for rel in files:
        os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(os.path.join(source, rel), os.path.join(dest, rel))
    _strip_teachers_section(os.path.join(dest, "exercises", "README.md"))
    found = leaks(dest, source)
    if found:
        shutil.rmtree(dest)
        raise SystemExit("error: the copy held solution code, so it was deleted: " +
                         ", ".join(f"{f} (from {a})" for f, a in found))
    return len(files)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__.strip())
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    n = make_copy(argv[0])
    print(f"wrote {n} files to {argv[0]}: hand it out; students check their work with "
          f"`python exercises/check.py 01` there, and `python exercises/check.py all --result=FILE` for a grade")
    return 0


if __name__ == "__main__":
    sys.exit(main())

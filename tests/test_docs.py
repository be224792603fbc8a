"""
The documentation stays true to the code: the README is a short front door whose set-up commands come first, whose
test command is CI's and whose layout tree names every top-level file; docs/flags.md holds the flag table
lab/variants.py generates; every relative link and anchor in the Markdown resolves; every command a page gives
names a script or module that exists, in the layout it has now; the published-checkpoint API named is the one that
exists; and no tracked file points outside the project.
"""

import ast
import glob
import json
import os
import re
import shlex
import subprocess
import sys
import time

import numpy as np
import pytest

import lab.variants as variants

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/
README = os.path.join(REPO, "README.md")
FLAGS_PAGE = os.path.join(REPO, "docs", "flags.md")
MY_PAGES = ("training", "kernels", "study", "evaluate", "flags", "timings")  # docs/<name>.md: a manual, or the timings
LAB = os.path.join(REPO, "lab")


def variants_markers():
    """The two marker lines between which `python -m lab.variants --write` puts the flag table: the strings
    lab/variants.py defines (as module attributes, or assigned in its source), so the page and the tool agree."""
    if isinstance(getattr(variants, "BEGIN", None), str) and isinstance(getattr(variants, "END", None), str):
        return variants.BEGIN, variants.END
    found = {}
    for node in ast.walk(ast.parse(read(os.path.join(LAB, "variants.py")))):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                names = [target] if isinstance(target, ast.Name) else list(getattr(target, "elts", []))
                values = [node.value] if isinstance(target, ast.Name) else list(getattr(node.value, "elts", []))
                for name, value in zip(names, values):
                    if isinstance(name, ast.Name) and name.id in ("BEGIN", "END") and isinstance(value, ast.Constant):
                        found[name.id] = value.value
    assert set(found) == {"BEGIN", "END"}, "lab/variants.py defines no BEGIN and END marker lines"
    return found["BEGIN"], found["END"]


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


BEGIN, END = variants_markers()  # e.g. "<!-- BEGIN python variants.py -->\n": docs/flags.md's marker lines


def markdown_files():
    """Every Markdown file a reader follows links through."""
    files = [README, os.path.join(REPO, "TUTORIAL.md"), os.path.join(REPO, "PAPERS.md")]
    files += sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    files += sorted(glob.glob(os.path.join(REPO, "exercises", "**", "*.md"), recursive=True))
    return files


def without_code(text):
    """The text with fenced blocks blanked out (line numbers kept) and inline code spans removed."""
    lines, fenced = [], False
    for line in text.split("\n"):
        if re.match(r"^\s*```", line):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else re.sub(r"`[^`]*`", "", line))
    return lines


def slug(heading):
    """GitHub's anchor of a heading: lowercase, punctuation dropped but '-' and '_', spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path):
    """The anchors of a Markdown file's headings, as GitHub makes them (a repeated one gets -1, -2, ...)."""
    found, seen = set(), {}
    fenced = False
    for line in read(path).split("\n"):
        if re.match(r"^\s*```", line):
            fenced = not fenced
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading and not fenced:
            base = slug(heading.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def links(path):
    """(line number, target) of every link and image in a Markdown file, outside code."""
    return [(i, target) for i, line in enumerate(without_code(read(path)), 1) for target in LINK.findall(line)]


# ----------------------------------------------------------------------------
# The README: short, set-up first, CI's test command

def test_readme_is_a_short_front_door_with_set_up_on_its_first_screen():
    size = os.path.getsize(README)
    assert size <= 16_000, f"README.md is {size} bytes: move a script's manual to docs/, keep the README under 16 KB"
    first = "\n".join(read(README).split("\n")[:80])
    for command in ("python3 -m venv", "--index-url https://download.pytorch.org/whl/cpu",
                    "pip install -r requirements.txt", "python train.py"):
        assert command in first, f"README.md's first 80 lines lack the set-up command {command!r}"
    assert "python train.py --help" in read(README)  # the keys are found by --help, not by reading the script


def test_readme_sets_up_before_any_command_needs_it():
    """The first command the README gives is the set-up (a virtual environment, torch from PyTorch's CPU index, the
    requirements); every python or pytest command comes after it."""
    lines = read(README).split("\n")
    commands = [(i, line.split("#")[0].strip()) for i, line in enumerate(lines)
                if re.match(r"^\s*(python3?|pip|torchrun|bash)\b", line)]
    assert commands and "python3 -m venv" in commands[0][1], f"README.md's first command is {commands[:1]}, not the set-up"
    set_up = max(i for i, command in commands if re.search(r"pip install (torch|-r requirements\.txt)", command))
    first_use = min(i for i, command in commands if not command.startswith(("python3 -m venv", "pip install")))
    assert set_up < first_use, "README.md gives a command before the set-up that it needs (venv, torch, requirements)"


def test_readme_keeps_its_volatile_figures_on_the_timings_page():
    """Times, speeds and test counts change with every machine and commit: they live in docs/timings.md, with their
    device and date, and the README links there instead of quoting them."""
    readme = read(README)
    timings = os.path.join(REPO, "docs", "timings.md")
    assert os.path.isfile(timings) and "](docs/timings.md" in readme, "the README does not link docs/timings.md"
    prose = "\n".join(without_code(readme))
    for pattern, what in ((r"\b\d+ (passed|skipped|failed)\b", "a test count"),
                          (r"\b\d[\d.,]*(?:-\d[\d.,]*)? ?(?:s|ms|min|minutes?|seconds?|tokens/s)\b", "a timing")):
        found = re.findall(rf".{{0,30}}{pattern}.{{0,10}}", prose)
        assert not found, f"README.md quotes {what} ({found[0]!r}): it belongs in docs/timings.md"
    page = read(timings)
    assert "](../README.md)" in "\n".join(page.split("\n")[:6]) and re.search(r"\b20\d\d-\d\d-\d\d\b", page)


def layout_tree(text):
    """The README's picture of the layout: the ```text block under its "Layout" heading, as (depth, name) pairs, a
    folder's name ending in '/', depth from the indentation (two spaces a level)."""
    section = re.split(r"^## ", text, flags=re.MULTILINE)
    body = next((part for part in section if part.lower().startswith("layout")), None)
    assert body is not None, "README.md has no '## Layout' section"
    block = re.search(r"^```text\n(.*?)^```", body, re.MULTILINE | re.DOTALL)
    assert block, "README.md's Layout section has no ```text block: the tree"
    entries = []
    for line in block.group(1).split("\n"):
        if line.strip():
            indent = len(line) - len(line.lstrip(" "))
            entries.append((indent // 2, line.split()[0]))
    return entries


def test_readme_pictures_the_layout_with_every_top_level_file():
    """The README's tree names every top-level tracked file and folder (hidden ones aside), one a line, and every
    name in it exists where the tree puts it, so a newcomer's map matches the room."""
    entries = layout_tree(read(README))
    paths, parents = [], []
    for depth, name in entries:
        parents = parents[:depth]
        assert len(parents) == depth, f"README.md's tree: {name!r} is indented under nothing"
        path = "".join(parents) + name
        paths.append(path)
        if name.endswith("/"):
            parents.append(name)
        assert os.path.exists(os.path.join(REPO, path)), f"README.md's tree names {path}, which does not exist"
        assert name.endswith("/") == os.path.isdir(os.path.join(REPO, path)), f"README.md's tree: {path} (a folder ends in /)"
    assert len(paths) == len(set(paths)), "README.md's tree names a file twice"
    try:
        tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.decode()
        tracked = [name for name in tracked.split("\0") if name and os.path.exists(os.path.join(REPO, name))]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: what is on disk
        tracked = [name + ("/x" if os.path.isdir(os.path.join(REPO, name)) else "") for name in os.listdir(REPO)]
    top = {name.split("/")[0] + ("/" if "/" in name else "") for name in tracked if not name.startswith(".")}
    assert top, "no tracked files"
    missing = sorted(top - {path for depth, path in zip([d for d, _ in entries], paths) if depth == 0})
    assert not missing, f"README.md's layout tree lacks the top-level {missing}"
    for tool in ("lab/" + name for name in os.listdir(LAB) if name.endswith(".py") and name != "__init__.py"):
        assert tool in paths, f"README.md's tree does not show {tool} under lab/"


def test_readme_runs_the_tests_as_ci_does():
    with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as f:
        ci = [line.strip() for line in f if "pytest" in line and not line.lstrip().startswith("#")]
    assert ci, ".ci/run runs no pytest command"
    readme_commands = [line.split("#")[0].strip() for line in read(README).split("\n")]
    assert ci[-1] in readme_commands, f"README.md does not give CI's test command {ci[-1]!r} on a line of its own"


def test_every_page_of_docs_says_what_it_covers_and_links_back():
    readme = read(README)
    for name in MY_PAGES:
        path = os.path.join(REPO, "docs", f"{name}.md")
        lines = read(path).split("\n")
        assert lines[0].startswith("# "), f"docs/{name}.md has no title"
        assert "](../README.md)" in "\n".join(lines[:6]), f"docs/{name}.md does not link back to the README at its top"
        assert f"](docs/{name}.md" in readme, f"the README does not link to docs/{name}.md"


# ----------------------------------------------------------------------------
# docs/flags.md and `python variants.py`

def generated_table(page):
    assert page.count(BEGIN) == 1 and page.count(END) == 1, "docs/flags.md lost its marker lines"
    return page.split(BEGIN)[1].split(END)[0]


def test_flags_page_holds_the_flag_table_verbatim():
    """docs/flags.md's flag table is variants.flag_table(), between its markers, with a blank line either side."""
    table = generated_table(read(FLAGS_PAGE))
    assert table == "\n" + variants.flag_table() + "\n", \
        "docs/flags.md's flag table is out of date: run `python -m lab.variants --write`"
    assert variants.flag_table().count("\n") == len(variants.FLAGS) + 2


def lab_train_commands(page):
    """The variants a page's `python -m lab.repro train ... --study=sink_lab` commands name, in order."""
    return [word for line in read(os.path.join(REPO, "docs", page)).splitlines()
            if line.startswith("python -m lab.repro train ") and "--study=sink_lab" in line
            for word in line.split()[4:] if not word.startswith("--")]


@pytest.mark.parametrize("page", ["sink_lab.md", "study.md"])
def test_the_sink_lab_pages_commands_train_every_variant_of_the_lab_once(page):
    """docs/sink_lab.md's commands of the lab's study name each variant of lab.variants.LAB (what `train all
    --study=sink_lab` trains) once, and no other: a variant dropped from LAB, or added, shows here."""
    named = lab_train_commands(page)
    assert len(named) == len(set(named)) and set(named) == set(variants.LAB), named


def test_every_config_field_has_a_row_in_the_flag_table():
    """docs/flags.md promises every GPTConfig flag: a field added without its Flag would be missing from the page
    with no test the wiser (the table is written from FLAGS, not from the dataclass)."""
    import dataclasses
    from model import GPTConfig
    named = {name.strip() for f in variants.FLAGS for name in f.name.split(",")}
    missing = [f.name for f in dataclasses.fields(GPTConfig) if f.name not in named]
    assert not missing, f"GPTConfig{missing} has no Flag in lab.variants.FLAGS: add one, then " \
                        "python -m lab.variants --write"
    assert named <= {f.name for f in dataclasses.fields(GPTConfig)}, "a Flag names no GPTConfig field"


def test_python_variants_prints_the_table_and_writes_it_into_the_page(tmp_path):
    tool = [sys.executable, "-m", "lab.variants"]  # run from the repository's root, as the page says

    def start(*args):
        return subprocess.Popen(tool + list(args), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def result(proc):
        stdout, stderr = proc.communicate(timeout=120)
        return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)

    stale = tmp_path / "flags.md"
    page = read(FLAGS_PAGE)
    stale.write_text(page.replace(generated_table(page), "\n| an old table |\n\n"), encoding="utf-8")
    (tmp_path / "bare.md").write_text("# no markers\n", encoding="utf-8")
    # the runs that do not depend on one another side by side (each is mostly Python's imports); then the page again
    plain, write, bare, helped, missing = (start(), start(f"--write={stale}"), start(f"--write={tmp_path / 'bare.md'}"),
                                           start("--help"), start(f"--write={tmp_path / 'nowhere.md'}"))
    out = result(plain)
    assert out.returncode == 0 and out.stdout == variants.flag_table(), out.stderr
    out = result(write)
    assert out.returncode == 0 and "rewritten" in out.stdout, out.stdout + out.stderr
    assert stale.read_text(encoding="utf-8") == page  # the page as committed: the rest of it untouched
    out = result(start(f"--write={stale}"))
    assert out.returncode == 0 and "up to date" in out.stdout
    out = result(bare)
    assert out.returncode != 0 and BEGIN.strip() in out.stderr  # says what the page lacks
    out = result(helped)
    assert out.returncode == 0 and "usage" in out.stdout
    out = result(missing)  # a page that is not there: one line, no traceback
    assert out.returncode != 0 and out.stderr.startswith(f"error: {tmp_path / 'nowhere.md'} cannot be read"), out
    assert out.stderr.count("\n") == 1, out.stderr


@pytest.mark.filterwarnings("ignore:'lab.variants' found in sys.modules")  # runpy runs it again, as -m does
@pytest.mark.parametrize("args", [["--write"], ["-h"], ["--write={page}", "extra"]])
def test_python_variants_write_defaults_to_the_flags_page_atomically_and_takes_one_argument(args, monkeypatch, capsys,
                                                                                            tmp_path):
    """Run in-process, its writer recorded in place of writing: `--write` alone puts the table into docs/flags.md,
    through runfolder.atomic_write (a kill leaves the old page); -h is the usage, exit 0, as --help; a second argument
    after --write=PATH is the usage, exit non-zero, and the page as it was."""
    import runpy
    import runfolder
    page = tmp_path / "flags.md"
    page.write_text(read(FLAGS_PAGE), encoding="utf-8")
    writes = []
    monkeypatch.setattr(runfolder, "atomic_write", lambda path, write: writes.append(path))
    monkeypatch.setattr(sys, "argv", ["lab/variants.py", *(a.format(page=page) for a in args)])
    if args == ["--write"]:
        runpy.run_module("lab.variants", run_name="__main__")
        assert writes == [FLAGS_PAGE] and capsys.readouterr().out == f"{FLAGS_PAGE}: the flag table is up to date\n"
    elif args == ["-h"]:
        runpy.run_module("lab.variants", run_name="__main__")
        assert capsys.readouterr().out.startswith("usage: python -m lab.variants [--write[=PATH]]")
    else:
        with pytest.raises(SystemExit) as stop:
            runpy.run_module("lab.variants", run_name="__main__")
        assert str(stop.value).startswith("usage: ") and not writes and page.read_text(encoding="utf-8") == \
            read(FLAGS_PAGE)


# ----------------------------------------------------------------------------
# Links and the API they name

def test_every_relative_link_and_anchor_resolves():
    broken, checked = [], 0
    for path in markdown_files():
        here = os.path.dirname(path)
        for line, target in links(path):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                continue
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(here, file)) if file else path
            where = f"{os.path.relpath(path, REPO)}:{line}: {target}"
            checked += 1
            if not os.path.exists(dest):
                broken.append(f"{where} (no such file)")
            elif anchor and (not dest.endswith(".md") or anchor not in anchors(dest)):
                broken.append(f"{where} (no heading with that anchor)")
    assert not broken, "broken links:\n" + "\n".join(broken)
    assert checked >= 50


def test_the_anchor_rule_is_githubs():
    assert slug("Training, data and sampling (`train.py`, `data/`, `sample.py`)") == \
        "training-data-and-sampling-trainpy-data-samplepy"
    assert slug("The measurements (GA §4.3, Table 4; Gu et al. 2025)") == "the-measurements-ga-43-table-4-gu-et-al-2025"
    assert slug("2. The sink lab: a sink in a minute") == "2-the-sink-lab-a-sink-in-a-minute"


def test_a_broken_link_or_anchor_is_found(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Top\n\n## A b\n\n```bash\n# not a heading\n```\n[x](#a-b) [y](#not-a-heading) `[z](nope.md)`\n"
                    "[w](missing.md)\n", encoding="utf-8")
    assert anchors(str(page)) == {"top", "a-b"}
    assert links(str(page)) == [(8, "#a-b"), (8, "#not-a-heading"), (9, "missing.md")]


def test_the_docs_name_the_published_checkpoint_api_that_exists():
    import pretrained
    assert callable(pretrained.locate) and callable(pretrained.load_model)
    for path in markdown_files():
        text = read(path)
        if path == FLAGS_PAGE:  # its table is variants.FLAGS' text (lab/variants.py), not this page's
            text = text.replace(generated_table(text), "")
        assert "from_pretrained" not in text, \
            f"{os.path.relpath(path, REPO)} names GPT.from_pretrained: use pretrained.load_model(pretrained.locate(...))"
    assert 'pretrained.load_model(pretrained.locate("gpt2"))' in read(README)


LAB_TOOLS = sorted(name[:-3] for name in os.listdir(LAB) if name.endswith(".py") and name != "__init__.py")
MODULE = re.compile(r"\bpython3? -m ([A-Za-z_][\w.]*)")


def project_module(name):
    """Whether `python -m NAME` would run the project's code (a module under the root, or a lab tool's bare name,
    which is where it used to be), not an installed one such as pytest or venv."""
    first = name.split(".")[0]
    return (first in LAB_TOOLS or os.path.isfile(os.path.join(REPO, first + ".py"))
            or os.path.isfile(os.path.join(REPO, first, "__init__.py")))


def module_file(name):
    """The file `python -m NAME` runs from the repository's root, or None."""
    base = os.path.join(REPO, *name.split("."))
    for path in (base + ".py", os.path.join(base, "__main__.py")):
        if os.path.isfile(path):
            return path
    return None


def test_the_scripts_configs_and_tests_the_docs_name_exist():
    """Every `python X.py`, `python -m lab.X`, `bash X.sh` and config/X.py a page gives (run from the repository's
    root) is a file (a module run with -m has its `__main__` block), and every `test_...` name it cites is a test of
    the suite: a renamed or moved file or test shows up here."""
    placeholders = {"script.py", "my_script.py", "config/file.py"}
    command = re.compile(r"(?:\bpython3?|\bbash|\btorchrun(?: --[\w=-]+)*)\s+((?:[\w.-]+/)*[\w.-]+\.(?:py|sh))\b")
    tests = "".join(read(path) for path in glob.glob(os.path.join(REPO, "tests", "test_*.py")))
    assert tests, "no tests/test_*.py"
    missing, named, modules = [], 0, set()
    for path in markdown_files():
        text = read(path)
        for name in set(command.findall(text) + re.findall(r"\b(config/[\w-]+\.py)\b", text)) - placeholders:
            named += 1
            if not os.path.isfile(os.path.join(REPO, name)):
                missing.append(f"{os.path.relpath(path, REPO)}: {name}")
        for name in set(MODULE.findall(text)):
            if name.endswith("."):  # a placeholder, `python -m lab.<tool>`: the package at least must be there
                name = name.rstrip(".")
                if project_module(name) and not os.path.isfile(os.path.join(REPO, *name.split("."), "__init__.py")):
                    missing.append(f"{os.path.relpath(path, REPO)}: python -m {name}.<...> (no such package)")
                continue
            if not project_module(name):
                continue
            named += 1
            modules.add(name)
            file = module_file(name)
            if file is None:
                missing.append(f"{os.path.relpath(path, REPO)}: python -m {name} (no such module)")
            elif file.endswith(".py") and "__main__" not in read(file):
                missing.append(f"{os.path.relpath(path, REPO)}: python -m {name} (the module has no __main__ block)")
        for name in set(re.findall(r"`(test_\w+)`", text)):
            if not re.search(rf"^def {name}\(", tests, re.MULTILINE):
                missing.append(f"{os.path.relpath(path, REPO)}: the test {name}")
    assert named >= 30 and {"lab.repro", "lab.analyze"} <= modules
    assert not missing, "named in the docs but not in the project:\n" + "\n".join(missing)


def test_a_command_for_a_module_that_is_not_there_is_found():
    assert project_module("lab.repro") and project_module("repro") and project_module("lab.nothing_here")
    assert not project_module("pytest") and not project_module("venv")
    assert module_file("lab.repro") and module_file("lab.nothing_here") is None and module_file("repro") is None
    assert MODULE.findall("run `python -m lab.repro report`, then python3 -m pytest -q") == ["lab.repro", "pytest"]


# Where a file used to be, before the lab's tools moved into lab/, the tests into tests/ and common.py split into
# cli.py and runfolder.py: a page that names one of these sends its reader to a file that is not there.
STALE = [
    (re.compile(rf"(?<![\w/.-])({'|'.join(LAB_TOOLS)})\.(py\b|(?!(?:md|txt|json)\b)[A-Za-z_])"), "a lab tool outside lab/ (lab/X.py, "
     "python -m lab.X, lab.X.name)"),
    (re.compile(rf"^\s*(?:from|import)\s+({'|'.join(LAB_TOOLS)})\b", re.MULTILINE), "a lab tool imported bare (from lab.X)"),
    (re.compile(r"(?<![\w/.-])gpu/"), "gpu/ (now lab/gpu/)"),
    (re.compile(r"(?<![\w/])(test_\w+\.py|conftest\.py)\b"), "a test file outside tests/"),
    (re.compile(r"\bcommon\.(py\b|[a-z_])|^\s*(?:from|import)\s+common\b", re.MULTILINE),
     "common.py (now cli.py and runfolder.py)"),
]


def stale_names(text):
    return [(what, text[max(0, m.start() - 30):m.end() + 10].replace("\n", " "))
            for pattern, what in STALE for m in pattern.finditer(text)]


def test_no_page_names_a_file_where_it_used_to_be():
    found = []
    for path in [README, os.path.join(REPO, "TUTORIAL.md"), os.path.join(REPO, "PAPERS.md")] + \
            sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))):
        text = read(path)
        if path == FLAGS_PAGE:  # its table is lab/variants.py's text, checked against it above
            text = text.replace(generated_table(text), "")
        if path.endswith("TUTORIAL.md"):  # a line quoted from a committed result is a record, kept as it was written
            quoted = {line for result in glob.glob(os.path.join(REPO, "results", "**", "summary.md"), recursive=True)
                      for line in read(result).split("\n") if line.strip()}
            text = "\n".join(line for line in text.split("\n") if line not in quoted)
        if path == README:  # the layout tree names each file in its folder: checked where it puts them, above
            text = re.sub(r"^```text\n.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
        found += [f"{os.path.relpath(path, REPO)}: {what}: ...{where}..." for what, where in stale_names(text)]
    assert not found, "pages that name a file where it used to be:\n" + "\n".join(found)


def test_the_stale_name_check_catches_what_it_looks_for():
    for line in ("python repro.py report", "see `analyze.py`", "variants.FLAGS", "bash gpu/study.sh", "test_docs.py",
                 "from common import read_jsonl", "`common.optimizer_step`", "import variants", "conftest.py sets"):
        assert stale_names(line), line
    for line in ("python -m lab.repro report", "lab/analyze.py", "lab.variants.FLAGS", "bash lab/gpu/study.sh",
                 "tests/test_docs.py", "from runfolder import read_jsonl", "out-gpu/kernels.tar.gz",
                 "a common factor", "from lab.variants import VARIANTS", "tests/conftest.py sets", "docs/evaluate.md",
                 "[evaluate.md](evaluate.md)", "`bench.txt`", "report.json"):
        assert not stale_names(line), line


# ----------------------------------------------------------------------------
# The project stands alone

SHARED = "../" "shared"  # written in two parts, so that this file does not match itself
ISSUE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)


def tracked_text_files():
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    for name in out.stdout.decode().split("\0"):
        path = os.path.join(REPO, name)
        if not name or name.startswith("data/gpt2_bpe/") or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data:  # binary
            continue
        yield name, data.decode("utf-8", errors="replace")


def test_no_tracked_file_points_outside_the_project():
    """No file refers to a folder beside the checkout or to an issue tracker's numbers: the project is read alone."""
    found, files = [], 0
    for name, text in tracked_text_files():
        files += 1
        for i, line in enumerate(text.split("\n"), 1):
            if SHARED in line or ISSUE.search(line):
                found.append(f"{name}:{i}: {line.strip()[:120]}")
    assert files > 50
    assert not found, "tracked files that point outside the project:\n" + "\n".join(found)


def test_the_standalone_check_catches_what_it_looks_for():
    for line in ("see issue" + " 13", "fixed in Issue" + " #4", "Issues" + " 13–16", "ISSUE" + " 2"):  # split: see SHARED
        assert ISSUE.search(line), line
    for line in ("no " + "issues here", "t" + "issue" + " 3", "issues" + ": none"):  # split likewise
        assert not ISSUE.search(line), line


PLACEHOLDER = re.compile(r"\b[A-Z]{3,}[0-9]+\b")  # SEEDS10: a token meant to be replaced by a measured figure
NOT_PLACEHOLDERS = {"AVX2", "AVX512", "HBM3"}  # names of things, in capitals with digits


def test_no_page_keeps_a_placeholder_for_a_figure():
    """A figure written into a page later is never left as its token (the tutorial once said 'ten seeds ...,
    SEEDS10'): every capitalised word ending in digits on a page or in the notebook is a name of something."""
    found = []
    for path in markdown_files() + glob.glob(os.path.join(REPO, "results", "**", "*.md"), recursive=True) + \
            [os.path.join(REPO, "tutorial.ipynb")]:
        for i, line in enumerate(read(path).split("\n"), 1):
            found += [f"{os.path.relpath(path, REPO)}:{i}: {token}" for token in PLACEHOLDER.findall(line)
                      if token not in NOT_PLACEHOLDERS]
    assert not found, "placeholders left in the pages:\n" + "\n".join(found)
    assert PLACEHOLDER.findall("ten seeds of your own, SEEDS10 |") == ["SEEDS10"]


FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)
DATED = re.compile(r"\s*Printed \(\d{4}-\d\d-\d\d\):\s*")


def python_blocks(text):
    """(code, printed, dated) for each python block of a page: printed is the ```text block right after it (None where
    there is none: a figure's block), dated whether 'Printed (date):' stands between the two."""
    blocks = list(FENCE.finditer(text))
    out = []
    for block, after in zip(blocks, blocks[1:] + [None]):
        if block.group(1) == "python":
            gap = text[block.end():after.start()] if after else ""
            pair = after is not None and after.group(1) == "text" and (not gap.strip() or DATED.fullmatch(gap))
            out.append((block.group(2), after.group(2) if pair else None, bool(pair and gap.strip())))
    return out


RESULTS_PAGES = sorted(glob.glob(os.path.join(REPO, "results", "**", "README.md"), recursive=True))
PRINTING = [os.path.relpath(os.path.dirname(path), os.path.join(REPO, "results")) for path in RESULTS_PAGES
            if any(printed is not None for _, printed, _ in python_blocks(read(path)))]


def test_every_script_of_a_results_page_shows_when_it_printed_what_it_shows():
    """A python block of results/ followed by its output says 'Printed (date):' between them; the test below runs
    every such block again."""
    assert {"sink_lab/unseen-seeds", "sink_lab/high-lr", "sink_lab/norms", "tutorial/lr-sweep",
            "tutorial/unseen-seeds"} <= set(PRINTING)
    undated = [os.path.relpath(path, REPO) for path in RESULTS_PAGES
               if any(printed is not None and not dated for _, printed, dated in python_blocks(read(path)))]
    # a 'Printed' line in another form would leave its script out of the test below, without a word
    undated += [f"{os.path.relpath(path, REPO)}: {line}" for path in RESULTS_PAGES
                for line in re.findall(r"^Printed \(.*$", read(path), re.M) if not DATED.fullmatch(line)]
    assert not undated, f"a python block's output without its 'Printed (YYYY-MM-DD):' line: {undated}"
    assert python_blocks("```python\nprint(1)\n```\n\nPrinted (2026-01-02):\n\n```text\n1\n```\n"
                         "```python\nx = 2\n```\nprose\n```text\nshown\n```\n") == [
        ("print(1)\n", "1\n", True), ("x = 2\n", None, False)]


@pytest.mark.parametrize("folder", PRINTING)
def test_the_seed_checks_numbers_are_what_their_script_prints(folder, tmp_path):
    """results/<folder>/README.md shows scripts and what they printed from the committed summaries and logs: run
    again, each prints the same (a summary drawn again, or a number edited by hand, would differ). A python block
    with no output after it draws the page's figure from the same numbers: run after the first, into a temporary
    folder."""
    blocks = python_blocks(open(os.path.join(REPO, "results", folder, "README.md"), encoding="utf-8").read())
    for code, printed, _ in blocks:
        if printed is not None:
            result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                                    timeout=120, env=dict(os.environ, PYTHONPATH=REPO))
            assert result.returncode == 0, result.stderr
            assert result.stdout == printed
            continue
        drawn = code.replace(f'"results/{folder}"', repr(str(tmp_path)))
        assert drawn != code, f"the figure block of results/{folder}/README.md draws into another folder"
        result = subprocess.run([sys.executable, "-c", blocks[0][0] + drawn], cwd=REPO, capture_output=True,
                                text=True, timeout=120, env=dict(os.environ, PYTHONPATH=REPO, MPLBACKEND="Agg"))
        assert result.returncode == 0, result.stderr
        assert [name for name in os.listdir(tmp_path) if name.endswith(".png")], result.stdout


ANALYSES = [(os.path.relpath(path, REPO), block) for path in RESULTS_PAGES  # a page's command that drew its folder
            for block in re.findall(r"```bash\n(.*?)```", read(path), re.S)
            if "-m lab.analyze " in block and "--out_dir=$D" in block]


def analysis_as_measured(summary):
    """lab.analyze's summary.json without what the machine that drew it decides: the day (test_repro.as_measured),
    where the data's folder was (each run's eval_windows name it by its absolute path) and whether the data was
    there (the notes that kept measurements were checked against each other, not against the data)."""
    from test_repro import as_measured
    validation = {k: v for k, v in summary["validation"].items() if k != "data_notes"}
    runs = [r if "eval_windows" not in r else
            {**r, "eval_windows": {**r["eval_windows"], "data_dir": os.path.basename(r["eval_windows"]["data_dir"])}}
            for r in summary["runs"]]
    return {**as_measured(summary), "validation": validation, "runs": runs}


def without_data_notes(table):
    """lab.analyze's summary.md without the notes its first line ends with where the data was not there."""
    first, _, rest = table.partition("\n")
    return re.sub(r" Note: .*$", "", first) + "\n" + rest


def test_the_committed_analyses_are_found():
    folders = [re.search(r"^D=(\S+)$", block, re.M).group(1) for _, block in ANALYSES]
    assert {"results/sink_lab/unseen-seeds", "results/sink_lab/high-lr", "results/tutorial/lr-sweep",
            "results/tutorial/lr-sweep/fp32"} <= set(folders) and len(set(folders)) == len(folders), folders


@pytest.mark.parametrize("page, block", ANALYSES, ids=[re.search(r"^D=(\S+)$", b, re.M).group(1) for _, b in ANALYSES])
def test_the_committed_analyses_are_what_their_pages_command_draws(page, block, tmp_path, drawing_checkout):
    """A folder of results/ that lab.analyze drew from the runs it keeps (runs/<run>/: their logs and measurements)
    is what the command its page shows draws now, in a fresh checkout and without the figures: summary.json and
    summary.md (but for the day and the machine they were drawn on) and per_window.npz."""
    checkout, env = drawing_checkout
    folder = re.search(r"^D=(\S+)$", block, re.M).group(1)
    script = re.sub(r"(^|\s)python -m ", rf"\1{shlex.quote(sys.executable)} -m ", block, flags=re.M)
    out = subprocess.run(["bash", "-e", "-c", script.replace("--out_dir=$D", f"--out_dir={tmp_path}")],
                         cwd=checkout, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    stale = f"{folder}/ is not what {page}'s command draws now: run it again (in the repository's root) and commit it"
    with open(os.path.join(REPO, folder, "summary.json")) as f, open(tmp_path / "summary.json") as g:
        assert analysis_as_measured(json.load(g)) == analysis_as_measured(json.load(f)), f"{stale}: summary.json"
    assert without_data_notes(read(tmp_path / "summary.md")) == \
        without_data_notes(read(os.path.join(REPO, folder, "summary.md"))), f"{stale}: summary.md differs"
    with np.load(os.path.join(REPO, folder, "per_window.npz")) as theirs, np.load(tmp_path / "per_window.npz") as ours:
        assert sorted(ours.files) == sorted(theirs.files) and theirs.files, stale
        assert all(np.array_equal(ours[k], theirs[k]) for k in theirs.files), f"{stale}: per_window.npz differs"


def test_the_readme_timing_script_runs_the_readmes_commands_and_keeps_what_they_report(tmp_path):
    """tests/time_readme.py, whose output results/timings/ keeps (the times the README and docs/timings.md state):
    it finds the set-up check, the main job and the sink lab's commands in the README as a newcomer types them, and
    at toy size runs the sink lab's three in a fresh copy, each with its seconds, exit status and what it reported
    (train.py's last line, the analysis' line per run)."""
    import time_readme
    from test_tutorial import copy_of_repo
    commands = time_readme.readme_commands()
    assert commands[:2] == [("Set up", "python -m lab.setup_check"), ("The main job", "python train.py")], commands
    lab = [c for s, c in commands if s == "The sink lab"]
    assert len(lab) == 3 and lab[0].startswith("python train.py config/sink_lab.py --gate=none") and \
        lab[2].startswith("python -m lab.analyze --runs=out/sink-lab/baseline,out/sink-lab/g1"), commands
    assert not [c for _, c in commands if "pytest" in c or "venv" in c or "pip" in c], commands
    results = time_readme.run_commands(copy_of_repo(str(tmp_path / "repo")), [("The sink lab", c) for c in lab],
                                       toy=True)
    assert [r["exit"] for r in results] == [0, 0, 0] and all(r["seconds"] > 0 for r in results), results
    assert [len(r["reported"]) for r in results] == [1, 1, 2], results
    assert results[0]["reported"][0].startswith("done: 4 iterations") and "F-Attn" in results[0]["reported"][0]
    assert [line.split(":")[0] for line in results[2]["reported"]] == ["baseline", "g1"], results
    page = time_readme.page(results, ["--toy"], True, False, "2.x", True, busy_share=0.25)
    assert "| The sink lab | `python train.py config/sink_lab.py --gate=none" in page and page.count("```text") == 3
    assert "its CPUs 25% busy in the 2 s before it began" in page and "(`python tests/time_readme.py --toy`)" in page
    if os.path.isfile("/proc/stat"):  # a share of the CPUs' time
        assert 0 <= time_readme.busy(0.2) <= 1
    # a failing command: its exit status, and the end of what it printed in place of results
    failed = time_readme.run_commands(str(tmp_path / "repo"), [("x", "python -c \"raise SystemExit('error: no')\"")])
    assert failed[0]["exit"] == 1 and failed[0]["reported"] == ["error: no"], failed


def test_the_suite_timing_script_times_the_readmes_test_command_as_ci_runs_it():
    """tests/time_suite.py, whose pages results/timings/ keeps (the suite's time docs/timings.md states): the command
    it runs is the README's, which .ci/run runs; the tests' seconds are summed per file from TEST_DURATIONS' lines,
    and the page gives the wall-clock time, pytest's summary and the files, the longest first."""
    import time_suite
    command = time_suite.readme_test_command()
    assert command.startswith("python3 -m pytest") and "-n auto" in command
    with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as f:
        assert f.read().strip().splitlines()[-1] == command
    files = time_suite.per_file("1.50\tpassed\ttests/test_a.py::t1\n0.25\tfailed\ttests/test_a.py::t2[x]\n"
                                "3.00\tpassed\ttests/test_b.py::t\n")
    assert dict(files) == {"tests/test_a.py": [1.75, 2], "tests/test_b.py": [3.0, 1]}
    page = time_suite.page(command, 630.4, "1 failed, 1 passed in 1.0s", files, 0.02, [],
                           ["FAILED tests/test_a.py::t2[x] - assert 0"])
    assert page.startswith(f"`{command}` in a fresh clone at ") and "its CPUs 2% busy" in page
    import numpy
    import torch
    assert f", torch {torch.__version__}, Triton " in page and f", NumPy {numpy.__version__}, " in page  # the versions
    assert "- wall-clock: 630 s (10 min 30 s)" in page and "- pytest: 1 failed, 1 passed in 1.0s" in page
    assert "\n  - FAILED tests/test_a.py::t2[x] - assert 0\n" in page
    assert "add up to 5 s" in page and page.index("| tests/test_b.py | 1 | 3.0 |") < page.index("| tests/test_a.py")
    stop = subprocess.run([sys.executable, os.path.join(REPO, "tests", "time_suite.py"), "-k", "x"],
                          capture_output=True, text=True)
    assert stop.returncode == 1 and stop.stderr.startswith("error: give test files") and not stop.stdout


def test_the_sharing_timing_script_starts_the_runs_at_once_and_reads_their_seconds(tmp_path):
    """tests/time_sharing.py, whose pages results/timings/ keeps (docs/timings.md's figures for a shared CPU): its
    runs start together, each with OMP_NUM_THREADS as asked (none: PyTorch's own) and an out_dir of its own, and
    their seconds are read from train.py's last line; a run that fails is None. A stand-in train.py here, which
    sleeps a second: three at once take about one."""
    import time_sharing
    (tmp_path / "train.py").write_text(
        "import os, sys, time\ntime.sleep(1)\nout = [a for a in sys.argv if a.startswith('--out_dir=')][0]\n"
        "if out.endswith('-2'):\n    sys.exit('error: the third fails')\n"
        "print(f\"done: 7 iterations in {3 if os.environ.get('OMP_NUM_THREADS') == '1' else 9} s ({out})\")\n")
    start = time.perf_counter()
    wall, seconds, codes, printed = time_sharing.side_by_side(str(tmp_path), 3, 7, 1)
    assert wall < 2.5 and time.perf_counter() - start < 2.5, wall  # side by side, not one after another
    assert seconds == [3, 3, None] and codes[:2] == [0, 0] and codes[2] == 1, printed
    assert [p.split("(")[-1].strip(")\n") for p in printed[:2]] == ["--out_dir=out/sharing/1-3-0",
                                                                   "--out_dir=out/sharing/1-3-1"]
    assert time_sharing.side_by_side(str(tmp_path), 1, 7, None)[1] == [9]  # PyTorch's own threads
    stop = subprocess.run([sys.executable, os.path.join(REPO, "tests", "time_sharing.py"), "--threads=2"],
                          capture_output=True, text=True)
    assert stop.returncode == 1 and stop.stderr.startswith("error: unknown argument") and not stop.stdout


@pytest.mark.parametrize("argv", [["--no-bf16"], ["--help"], ["--toy", "--keep"]])
def test_the_tutorial_timing_script_refuses_an_argument_it_does_not_know(argv):
    """A typo (--no-bf16) would start the whole tutorial's timing, the better part of an hour, as if nothing were
    wrong."""
    import time_tutorial
    with pytest.raises(SystemExit, match=f"^error: unknown argument '{argv[-1]}': the script's own are --toy"):
        time_tutorial.main(argv)


@pytest.mark.parametrize("content, says", [
    ("# markers the wrong way round\n{END}{BEGIN}", "no table to replace"),
    (b"# \xff not UTF-8\n", "cannot be read"),
])
def test_python_variants_write_refuses_a_page_it_cannot_place_the_table_in(tmp_path, content, says):
    """--write=PATH onto a page whose markers are the wrong way round, or that is not UTF-8 text: one line, exit 1,
    and the page as it was."""
    page = tmp_path / "flags.md"
    if isinstance(content, str):
        page.write_text(content.format(BEGIN=BEGIN, END=END), encoding="utf-8")
    else:
        page.write_bytes(content)
    before = page.read_bytes()
    out = subprocess.run([sys.executable, "-m", "lab.variants", f"--write={page}"], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 1 and out.stderr.startswith(f"error: {page}") and says in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr and page.read_bytes() == before


def test_the_input_independent_gate_is_described_by_its_logits_which_start_at_zero():
    """A score is the activation's output (probe.py's gate_mean): the input-independent gate's zero-initialised
    parameters are its logits, and its scores start at sigmoid(0) = 0.5, as the flag table and PAPERS.md say."""
    from model import GPT, GPTConfig
    gate = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, vocab_size=11, block_size=8,
                         gate_input="none")).transformer.h[0].attn.gate
    assert gate.score(gate.logits(None)).unique().tolist() == [0.5]
    what = next(f.what for f in variants.FLAGS if f.name == "gate_input")
    papers = open(os.path.join(REPO, "PAPERS.md"), encoding="utf-8").read()
    for text in (what, papers):
        assert "learned score per channel, zero-initialised" not in " ".join(text.split())
        assert "0.5" in text


def test_every_markdown_table_has_a_rule_cell_for_every_column():
    """A table whose rule line (| --- |) has another number of cells than its header is no table to a renderer
    (GitHub's): its rows show as lines of pipes. lab/outlier.py wrote one (results/sink_lab/norms/outlier.md)."""
    rule = re.compile(r"^\|(\s*:?-+:?\s*\|)+\s*$")
    wrong = []
    for path in markdown_files() + sorted(glob.glob(os.path.join(REPO, "results", "**", "*.md"), recursive=True)):
        lines = [line.replace("\\|", "") for line in without_code(read(path))]  # an escaped pipe is text
        for n, (head, below) in enumerate(zip(lines, lines[1:]), 1):
            if head.lstrip().startswith("|") and rule.match(below.strip()) and head.count("|") != below.count("|"):
                wrong.append(f"{os.path.relpath(path, REPO)}:{n}: {head.count('|') - 1} columns, "
                             f"{below.count('|') - 1} rule cells")
    assert not wrong, wrong

"""
The documentation stays true to the code: the README is a short front door whose set-up commands come first and
whose test command is CI's; docs/flags.md holds the flag table variants.py generates; every relative link and
anchor in the Markdown resolves; the published-checkpoint API named is the one that exists; and no tracked file
points outside the project.
"""

import glob
import os
import re
import subprocess
import sys

import pytest

import lab.variants as variants

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/
README = os.path.join(REPO, "README.md")
FLAGS_PAGE = os.path.join(REPO, "docs", "flags.md")
MY_PAGES = ("training", "kernels", "study", "evaluate", "flags")  # docs/<name>.md, each a script's manual
BEGIN, END = "<!-- BEGIN python variants.py -->\n", "<!-- END python variants.py -->\n"  # variants.py's markers


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


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
        "docs/flags.md's flag table is out of date: run `python variants.py --write`"
    assert variants.flag_table().count("\n") == len(variants.FLAGS) + 2


def test_python_variants_prints_the_table_and_writes_it_into_the_page(tmp_path):
    script = os.path.join(REPO, "variants.py")
    out = subprocess.run([sys.executable, script], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == variants.flag_table(), out.stderr
    stale = tmp_path / "flags.md"
    page = read(FLAGS_PAGE)
    stale.write_text(page.replace(generated_table(page), "\n| an old table |\n\n"), encoding="utf-8")
    out = subprocess.run([sys.executable, script, f"--write={stale}"], capture_output=True, text=True)
    assert out.returncode == 0 and "rewritten" in out.stdout, out.stdout + out.stderr
    assert stale.read_text(encoding="utf-8") == page  # the page as committed: the rest of it untouched
    out = subprocess.run([sys.executable, script, f"--write={stale}"], capture_output=True, text=True)
    assert out.returncode == 0 and "up to date" in out.stdout
    (tmp_path / "bare.md").write_text("# no markers\n", encoding="utf-8")
    out = subprocess.run([sys.executable, script, f"--write={tmp_path / 'bare.md'}"], capture_output=True, text=True)
    assert out.returncode != 0 and "BEGIN python variants.py" in out.stderr  # says what the page lacks
    out = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "usage" in out.stdout


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
        if path == FLAGS_PAGE:  # its table is variants.FLAGS' text (variants.py), not this page's
            text = text.replace(generated_table(text), "")
        assert "from_pretrained" not in text, \
            f"{os.path.relpath(path, REPO)} names GPT.from_pretrained: use pretrained.load_model(pretrained.locate(...))"
    assert 'pretrained.load_model(pretrained.locate("gpt2"))' in read(README)


def test_the_scripts_configs_and_tests_the_docs_name_exist():
    """Every `python X.py`, `bash X.sh` and config/X.py a page gives (run from the repository's root) is a file, and
    every `test_...` name it cites is a test of the suite: a renamed file or test shows up here."""
    placeholders = {"script.py", "my_script.py", "config/file.py"}
    command = re.compile(r"(?:\bpython3?|\bbash|\btorchrun(?: --[\w=-]+)*)\s+((?:[\w.-]+/)*[\w.-]+\.(?:py|sh))\b")
    tests = "".join(read(path) for path in glob.glob(os.path.join(REPO, "test_*.py")))
    missing, named = [], 0
    for path in markdown_files():
        text = read(path)
        for name in set(command.findall(text) + re.findall(r"\b(config/[\w-]+\.py)\b", text)) - placeholders:
            named += 1
            if not os.path.isfile(os.path.join(REPO, name)):
                missing.append(f"{os.path.relpath(path, REPO)}: {name}")
        for name in set(re.findall(r"`(test_\w+)`", text)):
            if not re.search(rf"^def {name}\(", tests, re.MULTILINE):
                missing.append(f"{os.path.relpath(path, REPO)}: the test {name}")
    assert named >= 30
    assert not missing, "named in the docs but not in the project:\n" + "\n".join(missing)


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

"""
TUTORIAL.md cannot rot: every bash and python block in it runs here, in order, in a copy of the repository, at the
toy size TUTORIAL_TOY=1 sets (config/tutorial.py). The python blocks run as one program whose line numbers are
TUTORIAL.md's, so a failure points at the Markdown line. Also: its tables are the committed results' own, and its
figures and the exercises' links to it exist.
"""

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.abspath(__file__))
TUTORIAL = os.path.join(REPO, "TUTORIAL.md")
RUN_LANGUAGES = ("python", "bash")
LAB_RUNS = ("baseline", "g1", "g1_input_independent", "g1_ns_sigmoid")  # section 2's runs, under out/tutorial/lab/  # every block in one of these runs; "text" blocks are output, shown only


def blocks(path=TUTORIAL):
    """The fenced blocks of a Markdown file: (language, first line number of the code, code)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found, i = [], 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            found.append((fence.group(1), i + 2, "\n".join(lines[i + 1:end])))
            i = end
        i += 1
    return found


def as_program(path=TUTORIAL):
    """One Python program that runs the file's blocks in order: each python block at its own line numbers, each
    bash block as a call of _sh on its opening fence's line."""
    with open(path, encoding="utf-8") as f:
        out = [""] * (f.read().count("\n") + 1)
    for language, line, code in blocks(path):
        if language == "python":
            for k, text in enumerate(code.split("\n")):
                out[line - 1 + k] = text
        elif language == "bash":
            out[line - 2] = f"_sh({code!r}, {line})"
    return "\n".join(out)


RUNNER = """
import subprocess, sys
def _sh(commands, line):
    print(f"$ {commands}", flush=True)
    if subprocess.run(["bash", "-euo", "pipefail", "-c", commands]).returncode:
        sys.exit(f"TUTORIAL.md line {line}: the bash block failed")
source = open("_tutorial_program.py", encoding="utf-8").read()
exec(compile(source, "TUTORIAL.md", "exec"), {"__name__": "__main__", "_sh": _sh})
"""


def test_every_block_is_python_bash_or_output():
    languages = [language for language, _, _ in blocks()]
    assert set(languages) <= set(RUN_LANGUAGES) | {"text"}, languages
    assert languages.count("bash") >= 3 and languages.count("python") >= 10


def test_the_program_keeps_the_markdown_line_numbers():
    program = as_program().split("\n")
    with open(TUTORIAL, encoding="utf-8") as f:
        markdown = f.read().split("\n")
    for language, line, code in blocks():
        if language == "python":
            assert program[line - 1:line - 1 + code.count("\n") + 1] == markdown[line - 1:line - 1 + code.count("\n") + 1]
    compile("\n".join(program), "TUTORIAL.md", "exec")  # valid Python as a whole


def copy_of_repo(dest):
    ignore = shutil.ignore_patterns(".git", "out*", "__pycache__", ".pytest_cache", ".benchmarks", "*.bin",
                                    "meta.json", ".whl")
    shutil.copytree(REPO, dest, ignore=ignore)
    return dest


def test_the_tutorial_runs_top_to_bottom(tmp_path, stdlib_data):
    repo = copy_of_repo(tmp_path / "repo")
    for file in glob.glob(os.path.join(stdlib_data, "*")):  # a small prepared stdlib: the reader's takes ~10 s more
        shutil.copy(file, repo / "data" / "pystdlib")
    (repo / "_tutorial_program.py").write_text(as_program(), encoding="utf-8")
    env = dict(os.environ, TUTORIAL_TOY="1", PYTHONPATH=str(repo))
    result = subprocess.run([sys.executable, "-c", RUNNER], cwd=repo, env=env, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    assert "F-Attn" in result.stdout and "largest difference torch vs triton" in result.stdout
    assert "previous token at the triggers" in result.stdout  # the lab's mechanism, printed
    for name in ("baseline", "g1", "baseline_lr2e-2", "g1_lr2e-2") + tuple(f"lab/{n}" for n in LAB_RUNS):
        assert (repo / "out" / "tutorial" / name / "ckpt.pt").is_file()
    for folder in ("analysis", "lab/analysis"):
        summary = (repo / "out" / "tutorial" / folder / "summary.md").read_text().split("\n\n")[1]  # the first table
        assert len([row for row in summary.splitlines() if row.startswith("| ") and "---" not in row]) == 5  # header + 4


def test_a_failing_block_is_reported_at_its_markdown_line(tmp_path):
    md = tmp_path / "t.md"
    md.write_text("# t\n\n```python\nx = 1\n```\n\ntext\n\n```python\nassert x == 2, 'x is not 2'\n```\n")
    program = as_program(str(md))
    with pytest.raises(AssertionError) as e:
        exec(compile(program, "t.md", "exec"), {})
    assert e.traceback[-1].lineno + 1 == 10 and "x is not 2" in str(e.value)


def test_its_tables_are_the_committed_results_and_its_figures_exist():
    with open(TUTORIAL, encoding="utf-8") as f:
        text = f.read()
    committed = []
    for folder in ("tutorial", os.path.join("tutorial", "lab")):  # the real-text runs, and the sink lab's
        with open(os.path.join(REPO, "results", folder, "summary.md"), encoding="utf-8") as f:
            lines = f.read().splitlines()
        assert lines[0] in text  # where and when it was measured
        committed += lines
    rows = [line for line in text.splitlines() if line.startswith("| run |") or re.match(r"^\| [A-Za-z][\w.-]* \| [\d.e-]+ \|", line)]
    assert len(rows) >= 16, "the tutorial shows analyze.py's tables in sections 2, 5 and 6"
    for row in rows:
        assert row in committed, f"TUTORIAL.md's table row is not in results/tutorial/**/summary.md: {row}"
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert os.path.isfile(os.path.join(REPO, image)), image
    assert "TABLE-" not in text and "CONCLUSION-" not in text


def slug(heading):
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_to_the_tutorial_name_its_sections():
    with open(TUTORIAL, encoding="utf-8") as f:
        anchors = {slug(line.lstrip("#")) for line in f if line.startswith("## ")}
    assert "2-the-sink-lab-a-sink-in-a-minute" in anchors and "3-the-gate" in anchors and "7-the-fused-kernel" in anchors
    # every relative link and anchor of the Markdown files is checked by test_docs.py; these are the tutorial's own
    files = glob.glob(os.path.join(REPO, "exercises", "**", "*.md"), recursive=True) + [os.path.join(REPO, "README.md")]
    files += glob.glob(os.path.join(REPO, "docs", "*.md"))
    links = 0
    for path in files:
        with open(path, encoding="utf-8") as f:
            for anchor in re.findall(r"TUTORIAL\.md#([\w-]+)", f.read()):
                assert anchor in anchors, f"{os.path.relpath(path, REPO)} links to TUTORIAL.md#{anchor}, not a section"
                links += 1
    assert links >= 8

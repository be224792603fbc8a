"""
TUTORIAL.md cannot rot: every bash and python block in it runs here, in order, in a copy of the repository, at the
toy size TUTORIAL_TOY=1 sets (config/tutorial.py), and then every block runs a second time, as a reader who goes
back to one does. The python blocks run as one program whose line numbers are TUTORIAL.md's, so a failure points at
the Markdown line. Also: its tables are the committed results' own, and its figures and the exercises' links to it
exist.

tutorial.ipynb, the same tutorial as a Jupyter (or Colab) notebook, is generated from TUTORIAL.md by this file:

    python tests/test_tutorial.py            # (re)write tutorial.ipynb from TUTORIAL.md
    python tests/test_tutorial.py --check    # exit 1 if tutorial.ipynb is not what TUTORIAL.md gives

(from the repository's root). TUTORIAL.md is the source: edit it, never the notebook, then regenerate. The prose
between fenced blocks becomes markdown cells; a ```python block a code cell; a ```bash block a code cell that starts
with %%bash (the cell magic of Jupyter and Colab that runs the cell in a shell); a ```text block (output, shown only)
stays in the markdown. The notebook carries no outputs and fixed cell ids, so one TUTORIAL.md gives one file, which
the tests below compare with the committed one, and run, cell by cell, as they run the Markdown. Standard library
only: an .ipynb is JSON in nbformat 4.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
from code import InteractiveConsole

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/
TUTORIAL = os.path.join(REPO, "TUTORIAL.md")
NOTEBOOK = os.path.join(REPO, "tutorial.ipynb")
RUN_LANGUAGES = ("python", "bash")  # every block in one of these runs (and is a notebook code cell); "text" blocks are output, shown only
LAB_RUNS = ("baseline", "g1", "g1_input_independent", "g1_ns_sigmoid", "gatednorm")  # section 2's runs, under out/tutorial/lab/
BASH_MAGIC = "%%bash\n"
REGENERATE = "python tests/test_tutorial.py"
HEADER = ("*This notebook is generated from [TUTORIAL.md](TUTORIAL.md): edit that file, not this one, then "
          f"regenerate it with `{REGENERATE}` in the repository's root. Start Jupyter in the repository's root (in "
          "Colab, clone the repository and `%cd` into it first): the tutorial's commands and paths are relative to "
          "it. A `%%bash` cell is one of the tutorial's shell commands.*")


def segments(text):
    """A Markdown text cut at its runnable blocks: (language, first line number of the content, content), in order,
    language None for the prose before, between and after them (a ```text block stays in its prose). Lines count
    from 1."""
    lines = text.split("\n")
    found, prose, prose_start, i = [], [], 1, 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            if fence.group(1) in RUN_LANGUAGES:
                found += [(None, prose_start, "\n".join(prose)),
                          (fence.group(1), i + 2, "\n".join(lines[i + 1:end]))]
                prose, prose_start = [], end + 2
            else:
                prose += lines[i:end + 1]
            i = end + 1
        else:
            prose.append(lines[i])
            i += 1
    return found + [(None, prose_start, "\n".join(prose))]


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


def sectioned_blocks(path=TUTORIAL):
    """The runnable blocks of a tutorial with the section each is in: (its ## heading, language, line, code)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    return [(next((lines[i][3:] for i in range(line - 2, -1, -1) if lines[i].startswith("## ")), "(start)"),
             language, line, code) for language, line, code in blocks(path) if language in RUN_LANGUAGES]


def as_program(path=TUTORIAL, languages=RUN_LANGUAGES):
    """One Python program that runs the file's blocks of these languages in order: each python block at its own line
    numbers, each bash block as a call of _sh on its opening fence's line."""
    with open(path, encoding="utf-8") as f:
        out = [""] * (f.read().count("\n") + 1)
    for language, line, code in blocks(path):
        if language == "python" and language in languages:
            for k, text in enumerate(code.split("\n")):
                out[line - 1 + k] = text
        elif language == "bash" and language in languages:
            out[line - 2] = f"_sh({code!r}, {f'{os.path.basename(path)} line {line}'!r})"
    return "\n".join(out)


# ----------------------------------------------------------------------------
# The notebook: TUTORIAL.md's prose and blocks as nbformat 4 cells

def _source(text):
    """A cell's source as nbformat stores it: its lines, each but the last ending in a newline."""
    return text.splitlines(keepends=True)


def notebook(text):
    """The text of the .ipynb file for a Markdown text: a header cell, then its prose and blocks in order (blank prose
    dropped), code cells with no outputs, and ids numbered in order, so the file depends on the text alone."""
    cells = [{"cell_type": "markdown", "metadata": {}, "source": _source(HEADER)}]
    for language, _, content in segments(text):
        content = content.strip("\n")
        if language is None and content.strip():
            cells.append({"cell_type": "markdown", "metadata": {}, "source": _source(content)})
        elif language is not None:
            code = BASH_MAGIC + content if language == "bash" else content
            cells.append({"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                          "source": _source(code)})
    for n, cell in enumerate(cells):
        cell["id"] = f"cell-{n:03d}"
    nb = {"cells": cells,
          "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                       "language_info": {"name": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def code_cells(path=NOTEBOOK):
    """A notebook's code cells, in order: (cell number, 'python' or 'bash', the code without its %%bash line)."""
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    out = []
    for n, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            code = "".join(cell["source"])
            bash = code.startswith(BASH_MAGIC)
            out.append((n, "bash" if bash else "python", code[len(BASH_MAGIC):] if bash else code))
    return out


def write_notebook(check=False):
    """Write tutorial.ipynb from TUTORIAL.md; with check, write nothing and return whether the file is in step."""
    with open(TUTORIAL, encoding="utf-8") as f:
        wanted = notebook(f.read())
    if check:
        if not os.path.isfile(NOTEBOOK):
            return False
        with open(NOTEBOOK, encoding="utf-8") as f:
            return f.read() == wanted
    with open(NOTEBOOK, "w", encoding="utf-8", newline="\n") as f:
        f.write(wanted)
    return True


# ----------------------------------------------------------------------------
# Running the tutorial: RUNNER runs programs (label, filename, source) in order, in one namespace, in a copy of the repository

RUNNER = """
import json, subprocess, sys, time
def _sh(commands, where):
    print(f"$ {commands}", flush=True)
    if subprocess.run(["bash", "-euo", "pipefail", "-c", commands]).returncode:
        sys.exit(f"{where}: the bash block failed")
namespace = {"__name__": "__main__", "_sh": _sh}
for label, filename, source in json.load(open("_tutorial_programs.json", encoding="utf-8")):
    print(f"=== {label}", flush=True)
    start = time.perf_counter()
    exec(compile(source, filename, "exec"), namespace)
    print(f"=== {label}: {time.perf_counter() - start:.1f} s", flush=True)
"""


def test_every_block_is_python_bash_or_output():
    languages = [language for language, _, _ in blocks()]
    assert set(languages) <= set(RUN_LANGUAGES) | {"text"}, languages
    assert languages.count("bash") >= 3 and languages.count("python") >= 10


class _Paste(InteractiveConsole):
    """Python's interactive prompt, compiling what is pasted into it line by line, running nothing: the syntax
    errors a reader who pastes a block into `python` sees (after an indented block, the prompt needs a blank line
    before the next statement)."""
    def __init__(self):
        super().__init__()
        self.errors = []

    def runcode(self, compiled):
        pass

    def showsyntaxerror(self, filename=None, **kwargs):
        self.errors.append(sys.exc_info()[1])


def test_every_python_block_can_be_pasted_into_the_python_prompt():
    wrong = []
    for language, line, source in blocks():
        if language == "python":
            prompt = _Paste()
            for k, text in enumerate(source.split("\n") + [""]):
                before = len(prompt.errors)
                prompt.push(text)
                if len(prompt.errors) > before:
                    wrong.append(f"TUTORIAL.md line {line + k}: {text.strip()[:60]}")
    assert not wrong, "pasted into python, these lines are syntax errors (add a blank line before each):\n" + \
        "\n".join(wrong)


# calls whose value is None, which the python prompt does not print
RETURN_NONE = ("print", "hook.remove")


def test_no_python_block_prints_a_value_its_reader_did_not_ask_for():
    """Pasted into python, every expression statement of a block prints its value unless it is None, inside a with
    or for block too (the notebook echoes only a cell's last line): base(x) would print pages of tensors. So a block's
    bare expressions are calls that return None, and what a reader should not see is assigned, as to _."""
    import ast
    echoed = []
    for language, line, source in blocks():
        if language == "python":
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Expr) and not isinstance(node.value, ast.Constant) and not (
                        isinstance(node.value, ast.Call) and ast.unparse(node.value.func) in RETURN_NONE):
                    echoed.append(f"TUTORIAL.md line {line + node.lineno}: {ast.unparse(node)[:60]}")
    assert not echoed, "pasted into python, these print their value (assign it: _ = ...):\n" + "\n".join(echoed)


def names_needed(source):
    """The global names a piece of module code reads (in functions too) but neither binds, imports nor has as a
    builtin."""
    import builtins
    import symtable
    top = symtable.symtable(source, "block", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    needed, tables = set(), [top]
    while tables:
        table = tables.pop()
        tables += table.get_children()
        needed |= {s.get_name() for s in table.get_symbols() if s.is_referenced() and (table is top or s.is_global())}
    return needed - bound - set(dir(builtins))


def test_each_section_runs_in_a_fresh_python_session():
    """A reader may start at any section (homework after a class, a session restarted): each section's python
    blocks, run from its first, need no name that an earlier section defined."""
    sections = {}
    for heading, language, _, source in sectioned_blocks():
        if language == "python":
            sections.setdefault(heading, []).append(source)
    assert names_needed("import os\ndef f(x):\n    return os, x, torch, [y for y in x]\nz = len(f(1))\n") == {"torch"}
    for heading, codes in sections.items():
        missing = names_needed("\n".join(codes))
        assert not missing, f"{heading}: its blocks use {sorted(missing)} from an earlier section: import them there"


def test_the_program_keeps_the_markdown_line_numbers():
    program = as_program().split("\n")
    with open(TUTORIAL, encoding="utf-8") as f:
        markdown = f.read().split("\n")
    for language, line, code in blocks():
        if language == "python":
            assert program[line - 1:line - 1 + code.count("\n") + 1] == markdown[line - 1:line - 1 + code.count("\n") + 1]
    compile("\n".join(program), "TUTORIAL.md", "exec")  # valid Python as a whole


# what a copy of the repository leaves out: git's files, runs, caches and prepared data (a reader's copy has none)
_NOT_COPIED = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", ".benchmarks", "*.bin", "meta.json",
                                     ".whl")


def NOT_COPIED(folder, names):
    """What copy_of_repo leaves out: the patterns above, and the run folders (out/, out-repro/, ...), which are
    folders named out*, not files (lab/outlier.py is a tool)."""
    return set(_NOT_COPIED(folder, names)) | {n for n in names
                                              if n.startswith("out") and os.path.isdir(os.path.join(folder, n))}


def copy_of_repo(dest, stdlib_data=None):
    """A copy of the repository, without runs or prepared data but for a small prepared stdlib if given (the
    reader's takes ~10 s more)."""
    shutil.copytree(REPO, dest, ignore=NOT_COPIED)
    for file in glob.glob(os.path.join(stdlib_data, "*")) if stdlib_data else []:
        shutil.copy(file, os.path.join(dest, "data", "pystdlib"))
    return dest


def run_programs(repo, programs, toy=True, env=None, timeout=900):
    """Run RUNNER in repo (at toy size unless toy is False; env: more environment) on programs, a list of (label,
    filename, source): its stdout, or a failure with the end of its output."""
    with open(os.path.join(repo, "_tutorial_programs.json"), "w", encoding="utf-8") as f:
        json.dump(programs, f)
    env = {key: value for key, value in os.environ.items() if key != "TUTORIAL_TOY"} | (env or {})
    env.update(PYTHONPATH=str(repo), **({"TUTORIAL_TOY": "1"} if toy else {}))
    result = subprocess.run([sys.executable, "-c", RUNNER], cwd=repo, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    return result.stdout


def check_what_it_printed_and_wrote(repo, stdout):
    assert "F-Attn" in stdout and "largest difference torch vs triton" in stdout
    assert "previous token at the triggers" in stdout  # the lab's mechanism, printed
    for name in ("baseline", "g1", "baseline_lr2e-2", "g1_lr2e-2") + tuple(f"lab/{n}" for n in LAB_RUNS):
        assert (repo / "out" / "tutorial" / name / "ckpt.pt").is_file()
    for folder in ("analysis", "lab/analysis"):
        summary = (repo / "out" / "tutorial" / folder / "summary.md").read_text().split("\n\n")[1]  # the first table
        assert len([row for row in summary.splitlines() if row.startswith("| ") and "---" not in row]) == 5  # header + 4


def test_the_tutorial_and_its_notebook_run_top_to_bottom_and_every_block_runs_again(tmp_path, stdlib_data):
    """Every block in order, as the notebook's code cells are (the same code, in the same order: checked here, so
    one run serves both, with errors at TUTORIAL.md's lines); then, as a reader who goes back to one, every python
    block again on what the whole tutorial left (a block must not depend on a later one not having run yet). A
    training command run again must not refuse the folder its first run wrote: each says --overwrite=True."""
    import kernels  # here: run as python tests/test_tutorial.py (to write the notebook), the project is not on sys.path
    if kernels.triton_unavailable():
        pytest.skip("section 7 runs the fused kernel, which cannot run here")
    runnable = [(language, code) for language, _, code in blocks() if language in RUN_LANGUAGES]
    assert [(language, code) for _, language, code in code_cells()] == runnable, \
        f"tutorial.ipynb is not TUTORIAL.md's blocks: {REGENERATE}"
    for language, code in runnable:
        for command in re.findall(r"python3? train\.py[^\n]*", code) if language == "bash" else []:
            assert "--overwrite=True" in command, f"run twice, this stops with 'already holds a run': {command}"
    repo = copy_of_repo(tmp_path / "repo", stdlib_data)
    stdout = run_programs(repo, [("TUTORIAL.md, every block", "TUTORIAL.md", as_program()),
                                 ("TUTORIAL.md, every python block again", "TUTORIAL.md", as_program(languages=("python",)))])
    assert "=== TUTORIAL.md, every python block again" in stdout
    check_what_it_printed_and_wrote(repo, stdout)


def test_the_notebook_is_generated_from_the_tutorial():
    assert write_notebook(check=True), \
        f"tutorial.ipynb is not what TUTORIAL.md gives: run `{REGENERATE}` in the repository's root and commit it"
    with open(NOTEBOOK, encoding="utf-8") as f:
        nb = json.load(f)
    assert nb["nbformat"] == 4 and all(len(cell["id"]) <= 64 for cell in nb["cells"])
    assert "generated from [TUTORIAL.md]" in "".join(nb["cells"][0]["source"]) and REGENERATE in HEADER
    code = [cell for cell in nb["cells"] if cell["cell_type"] == "code"]
    assert all(cell["outputs"] == [] and cell["execution_count"] is None for cell in code)  # no outputs, ever
    runnable = [(language, code) for language, _, code in blocks() if language in RUN_LANGUAGES]
    assert [(language, code) for _, language, code in code_cells()] == runnable  # every block, in order, as it is


def test_the_converter_makes_cells_of_prose_and_blocks(tmp_path):
    text = ("# T\n\nProse.\n\n```python\nx = 1\n\ny = 2\n```\n\nOutput:\n\n```text\nshown only\n```\n\n"
            "```bash\npython train.py\n```\n")
    (tmp_path / "t.ipynb").write_text(notebook(text), encoding="utf-8")
    nb = json.loads(notebook(text))
    assert nb["cells"][0]["source"] == [HEADER]
    assert [cell["cell_type"] for cell in nb["cells"]] == ["markdown", "markdown", "code", "markdown", "code"]
    assert nb["cells"][1]["source"] == ["# T\n", "\n", "Prose."]
    assert nb["cells"][2]["source"] == ["x = 1\n", "\n", "y = 2"]
    assert "```text\n" in nb["cells"][3]["source"]  # an output block stays in the prose
    assert nb["cells"][4]["source"] == ["%%bash\n", "python train.py"]
    assert code_cells(tmp_path / "t.ipynb") == [(2, "python", "x = 1\n\ny = 2"), (4, "bash", "python train.py")]
    assert [cell["id"] for cell in nb["cells"]] == [f"cell-{n:03d}" for n in range(5)]  # fixed: the file is the text's


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


if __name__ == "__main__":
    if sys.argv[1:] not in ([], ["--check"]):
        sys.exit(__doc__)
    if sys.argv[1:] == ["--check"]:
        if not write_notebook(check=True):
            sys.exit(f"tutorial.ipynb is not what TUTORIAL.md gives: run `{REGENERATE}` and commit it")
        print("tutorial.ipynb is in step with TUTORIAL.md")
    else:
        write_notebook()
        print("wrote tutorial.ipynb from TUTORIAL.md")

"""
The command line every script shares (cli.configure): --help lists every key with its default, type and meaning;
list keys are written a,b,c; a bad key or value stops with one line that says what to do.
"""

import ast
import dataclasses
import os
import subprocess
import sys

import pytest

from cli import configure, usage

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/
# each script as a user runs it from the repository's root (python <command>): the top-level scripts by their path,
# the lab's tools as modules; with its source file and the dataclass of its keys
SCRIPTS = {"train.py": ("train.py", "TrainConfig"), "sample.py": ("sample.py", "SampleConfig"),
           "-m lab.analyze": ("lab/analyze.py", "AnalyzeConfig"),
           "-m lab.evaluate": ("lab/evaluate.py", "EvaluateConfig"),
           "-m lab.repro": ("lab/repro.py", "Keys"), "-m lab.bench": ("lab/bench.py", "Keys")}
PREPARE = ["data/pystdlib/prepare.py", "data/textdir/prepare.py", "data/bigram_backcopy/prepare.py",
           "data/openwebtext/prepare.py", "data/fineweb/prepare.py"]


def declared_keys(path, class_name):
    """The keys a script's dataclass declares, read from its source (the file path, from the repository's root;
    nothing is imported), with those of the dataclass it extends (TrainConfig extends model.GPTConfig)."""
    tree = ast.parse(open(os.path.join(REPO, path), encoding="utf-8").read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    keys = [s.target.id for s in cls.body if isinstance(s, ast.AnnAssign)]
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id == "GPTConfig":
            keys += declared_keys("model.py", "GPTConfig")
    return set(keys)


def help_of(command):
    """What `python <command> --help` prints, run from the repository's root (a path, or -m and a module)."""
    out = subprocess.run([sys.executable, *command.split(), "--help"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, f"python {command} --help: exit {out.returncode}\n{out.stderr[-2000:]}"
    return out.stdout


@pytest.mark.parametrize("command", list(SCRIPTS))
def test_every_script_lists_every_key_with_its_meaning_on_help(command):
    path, class_name = SCRIPTS[command]
    text = help_of(command)
    doc = ast.get_docstring(ast.parse(open(os.path.join(REPO, path), encoding="utf-8").read()))
    assert text.startswith(doc.splitlines()[0]), "--help starts with the script's own description"
    assert f"python {command}" in text, "its usage says how to run it: from the repository's root, as the test does"
    lines = {}
    for line in text.splitlines():
        if line.startswith("  --"):
            key = line[4:].split("=", 1)[0]
            lines[key] = line
    assert set(lines) == declared_keys(path, class_name)
    for key, line in lines.items():
        _, _, after_type = line.partition(")")  # "  --key=default  (type)  meaning"
        assert after_type.strip(), f"{path}: --{key} has no comment saying what it does"


@pytest.mark.parametrize("path", PREPARE)
def test_every_prepare_script_answers_help(path):
    assert "usage:" in help_of(path)


@dataclasses.dataclass
class Base:
    size: int = 8  # how big
    name: str = "base"  # what it is called


@dataclasses.dataclass
class Keys(Base):
    # the run
    steps: int = 3  # how many steps
    size: int = 4  # a smaller size
    lengths: tuple[int, ...] = (1, 2)  # sequence lengths
    names: tuple[str, ...] = ("a",)  # some names
    # a flag explained above it
    fast: bool = False


def test_list_keys_are_written_a_b_c_and_arrive_as_tuples(tmp_path):
    c, given = configure(Keys, ["--lengths=16,32", "--names=x, y"])
    assert (c.lengths, c.names, given) == ((16, 32), ("x", "y"), {"lengths", "names"})
    assert configure(Keys, ["--lengths=64"])[0].lengths == (64,)
    config = tmp_path / "c.py"
    config.write_text("lengths = [5, 6]\nnames = 'p,q'\n")
    c, _ = configure(Keys, [str(config)])
    assert (c.lengths, c.names) == ((5, 6), ("p", "q"))
    with pytest.raises(SystemExit, match="--lengths=1,x: lengths must be a list of int, written a,b,c"):
        configure(Keys, ["--lengths=1,x"])


def test_help_shows_the_source_order_its_comments_and_the_base_keys_after_the_last_one_redeclared():
    text = usage(Keys)
    body = text[text.index("Keys, with their defaults"):].splitlines()[1:]
    assert body == [
        "  # the run",
        "  --steps=3  (int)  how many steps",
        "  --size=4  (int)  a smaller size",
        "  --name='base'  (str)  what it is called",
        "  --lengths=1,2  (list of int)  sequence lengths",
        "  --names=a  (list of str)  some names",
        "  # a flag explained above it",
        "  --fast=False  (bool)",
    ]
    with pytest.raises(SystemExit) as exit_:
        configure(Keys, ["--steps=2", "--help"])
    assert exit_.value.code == 0


def test_an_unknown_key_points_to_help():
    with pytest.raises(SystemExit, match="unknown key 'step' \\(did you mean 'steps'\\?\\); --help lists the keys"):
        configure(Keys, ["--step=2"])


@dataclasses.dataclass
class Numbers:
    ints: tuple[int, ...] = (1,)  # whole numbers
    floats: tuple[float, ...] = (0.5,)  # any numbers


@pytest.mark.parametrize("text", ["ints = [1.5]", "ints = [True]", "ints = ['a']", "floats = [True]"])
def test_a_list_key_takes_only_its_own_items(tmp_path, text):
    """1.5 is no int and True no number: a config file's list is checked item by item, never coerced."""
    config = tmp_path / "c.py"
    config.write_text(text + "\n")
    with pytest.raises(SystemExit, match="must be a list of"):
        configure(Numbers, [str(config)])


def test_a_float_list_takes_whole_numbers_too():
    assert configure(Numbers, ["--floats=1,2.5"])[0].floats == (1.0, 2.5)

"""
The command line every script shares (cli.configure): --help lists every key with its default, type and meaning;
list keys are written a,b,c; a bad key or value stops with one line that says what to do.
"""

import ast
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import cli
from cli import check_choice, configure, usage

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/
# each script as a user runs it from the repository's root (python <command>): the top-level scripts by their path,
# the lab's tools as modules; with its source file and the dataclass of its keys
SCRIPTS = {"train.py": ("train.py", "TrainConfig"), "sample.py": ("sample.py", "SampleConfig"),
           "-m lab.analyze": ("lab/analyze.py", "AnalyzeConfig"),
           "-m lab.evaluate": ("lab/evaluate.py", "EvaluateConfig"),
           "-m lab.repro": ("lab/repro.py", "Keys"), "-m lab.bench": ("lab/bench.py", "Keys"),
           "-m lab.outlier": ("lab/outlier.py", "OutlierConfig")}
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


@pytest.fixture(scope="module")
def helps():
    """`python <command> --help` of every script, run from the repository's root (a path, or -m and a module), a
    few at a time (each is mostly Python and torch starting, which leaves a core idle): command -> its result."""
    def run(command):
        return subprocess.run([sys.executable, *command.split(), "--help"], cwd=REPO, capture_output=True,
                              text=True, timeout=300)
    commands = [*SCRIPTS, *PREPARE]
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(commands, pool.map(run, commands)))


def help_of(helps, command):
    """What `python <command> --help` printed; it must have ended well."""
    out = helps[command]
    assert out.returncode == 0, f"python {command} --help: exit {out.returncode}\n{out.stderr[-2000:]}"
    return out.stdout


@pytest.mark.parametrize("command", list(SCRIPTS))
def test_every_script_lists_every_key_with_its_meaning_on_help(helps, command):
    path, class_name = SCRIPTS[command]
    text = help_of(helps, command)
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
def test_every_prepare_script_answers_help(helps, path):
    assert "usage:" in help_of(helps, path)


@pytest.mark.parametrize("command", list(SCRIPTS))
def test_ctrl_c_while_torch_loads_is_one_line(tmp_path, command):
    """Ctrl-C in a script's first seconds, while torch loads and before run_main can catch it: the one line run_main
    prints, not the import's traceback, with the exit status Python gives Ctrl-C (SIGINT: 130 to a shell). A stand-in
    torch on PYTHONPATH raises KeyboardInterrupt as it is imported, as Ctrl-C there does: this holds only if the
    script imports cli (its excepthook, cli.one_line_interrupt) before torch."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise KeyboardInterrupt\n")
    out = subprocess.run([sys.executable, *command.split()], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.stderr == "interrupted (Ctrl-C)\n" and out.stdout == "", out.stderr[-2000:]
    assert out.returncode in (-2, 130), out.returncode  # killed by SIGINT as Python does, or run_main's 130


def test_sigterm_is_ctrl_cs_interrupt_within_and_as_before_outside_in_threads_and_forked_children():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(cli.Terminated) as stop:
        with cli.terminate_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler runs at the next bytecode; never reached
    assert isinstance(stop.value, KeyboardInterrupt) and stop.value.exit_status == 143
    assert signal.getsignal(signal.SIGTERM) is before
    with ThreadPoolExecutor(1) as pool:  # Python sets handlers in the main thread only: elsewhere, nothing changes
        pool.submit(lambda: cli.terminate_as_interrupt().__enter__()).result()
    assert signal.getsignal(signal.SIGTERM) is before
    with cli.terminate_as_interrupt():  # a child forked within ends as SIGTERM ends it, raising nothing
        child = os.fork()
        if child == 0:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            finally:
                os._exit(7)  # reached only if the signal did not end it
        _, status = os.waitpid(child, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # ignored by whoever started the process (nohup-like): left so
    try:
        with cli.terminate_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)


def test_run_main_gives_sigterm_its_own_line_and_status(capsys):
    def main():
        raise cli.Terminated()
    with pytest.raises(SystemExit) as e:
        cli.run_main(main)
    assert e.value.code == 143 and capsys.readouterr().err == "terminated (SIGTERM)\n"


class Writes:
    """A stream that records each write: what reaches the terminal in one piece."""

    def __init__(self):
        self.writes = []

    def write(self, text):
        self.writes.append(text)

    def flush(self):
        pass


@pytest.mark.parametrize("error", [SystemExit("error: a mistake"), cli.Diverged("error: the run has diverged")])
def test_run_main_writes_an_errors_line_whole(monkeypatch, error):
    """Under torchrun every process writes unbuffered to one terminal, and each says the same mistake: Python's own
    line for a SystemExit is two writes (the text, then the newline), so two processes' lines could come out as one
    ("error: a mistake)error: a mistake"). run_main writes each line in one piece, with the exit status Python gives."""
    stderr = Writes()
    monkeypatch.setattr(sys, "stderr", stderr)

    def main():
        raise error
    with pytest.raises(SystemExit) as e:
        cli.run_main(main)
    assert stderr.writes == [f"{error.code}\n"]
    assert e.value.code == (cli.DIVERGED_EXIT if isinstance(error, cli.Diverged) else 1)
    for quiet in (None, 0, 3):  # an exit status, not a line: left as it was
        with pytest.raises(SystemExit) as e:
            cli.run_main(lambda: quiet)
        assert e.value.code == quiet and stderr.writes == [f"{error.code}\n"]


def test_the_excepthook_prints_any_other_error_as_python_does(capsys):
    try:
        raise ValueError("not a Ctrl-C")
    except ValueError as e:
        cli.one_line_interrupt(type(e), e, e.__traceback__)
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and err.endswith("ValueError: not a Ctrl-C\n"), err
    assert sys.excepthook is cli.one_line_interrupt


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


def test_a_str_key_takes_any_text_and_unquotes_a_quoted_one():
    """A prompt of 1,500 words (sample.py --start, the sink lab's own format) was parsed as Python and raised
    MemoryError; {[]: 1} raised TypeError: tracebacks. A str key's text is now parsed only when quoted."""
    words = " ".join(f"s{i % 64}" for i in range(1500))
    assert configure(Keys, [f"--name={words}"])[0].name == words
    assert [configure(Keys, [f"--name={text}"])[0].name for text in ("{[]: 1}", "'x y'", '"x"', "", "1e3")] == \
        ["{[]: 1}", "x y", "x", "", "1e3"]


@pytest.mark.parametrize("arg, error", [
    ("--steps={{1}}", "steps must be int, got '{{1}}'"),  # TypeError inside literal_eval: a set in a set
    ("--lengths={[]: 1}", "lengths must be a list of int, written a,b,c; got '{[]: 1}'"),
    ("--steps=" + "(" * 100_000 + ")" * 100_000, "steps must be int"),  # too deep for the parser
])
def test_text_no_literal_can_be_is_one_line(arg, error):
    with pytest.raises(SystemExit) as e:
        configure(Keys, [arg])
    assert error in str(e.value.code) and str(e.value.code).count("\n") == 0


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
    for flag in ("--help", "-h"):
        with pytest.raises(SystemExit) as exit_:
            configure(Keys, ["--steps=2", flag])
        assert exit_.value.code == 0


@dataclasses.dataclass
class Wider(Base):
    colour: str = "red"  # its colour


@dataclasses.dataclass
class Redeclares(Wider):
    name: str = "mine"
    steps: int = 3  # how many steps
    size: int = 4  # a smaller size
    depth: int = 1  # how deep


def test_help_puts_the_base_keys_after_the_last_redeclared_one_and_keeps_their_comments():
    """Two keys redeclared: the base's others follow the last of them (as TrainConfig redeclares five of
    GPTConfig's); one redeclared without a comment keeps the base's."""
    text = usage(Redeclares)
    assert text[text.index("Keys, with their defaults"):].splitlines()[1:] == [
        "  --name='mine'  (str)  what it is called",
        "  --steps=3  (int)  how many steps",
        "  --size=4  (int)  a smaller size",
        "  --colour='red'  (str)  its colour",
        "  --depth=1  (int)  how deep",
    ]


def test_an_unknown_key_points_to_help():
    with pytest.raises(SystemExit, match="unknown key 'step' \\(did you mean 'steps'\\?\\); --help lists the keys"):
        configure(Keys, ["--step=2"])


@dataclasses.dataclass
class Trainer:
    learning_rate: float = 1e-3
    batch_size: int = 8
    block_size: int = 64
    weight_decay: float = 0.1


@pytest.mark.parametrize("arg, meant", [
    ("--lr=1e-3", "'learning_rate'"),  # the words' initials, as other trainers spell the key
    ("--wd=0", "'weight_decay'"),
    ("--bs=4", "'batch_size' or 'block_size'"),  # both keys it may stand for, never a guess between them
    ("--learning=1", "'learning_rate'"),  # a beginning of three letters or more
    ("--batch=1", "'batch_size'"),
    ("--weigh=1", "'weight_decay'"),  # difflib's and the beginning's alike: named once
    ("--batch_sise=4", "'batch_size'"),  # a misspelling, as before
])
def test_an_unknown_short_name_points_to_the_keys_it_may_stand_for(arg, meant):
    with pytest.raises(SystemExit) as stop:
        configure(Trainer, [arg])
    assert str(stop.value) == f"error: {arg}: unknown key {arg[2:].split('=')[0]!r} (did you mean {meant}?); " \
                              "--help lists the keys"


@dataclasses.dataclass
class Evals:
    eval_log: bool = False
    eval_interval: int = 1
    eval_iters: int = 1
    eval_only: bool = False


def test_a_beginning_names_at_most_three_keys_and_takes_three_letters():
    """A name that begins four keys names the first three (and difflib's nearest, here one of them), never all."""
    with pytest.raises(SystemExit) as stop:
        configure(Evals, ["--eval=1"])
    assert str(stop.value) == ("error: --eval=1: unknown key 'eval' (did you mean 'eval_log' or 'eval_interval' or "
                               "'eval_iters'?); --help lists the keys")
    with pytest.raises(SystemExit, match=r"unknown key 'bat' \(did you mean 'batch_size'\?\)"):
        configure(Trainer, ["--bat=1"])


@pytest.mark.parametrize("arg", ["--x=1", "--le=1", "--zzz=1"])
def test_a_name_like_no_key_suggests_none(arg):
    """Two letters that are no key's initials, or a name no key begins: no guess, only where the keys are listed."""
    with pytest.raises(SystemExit) as stop:
        configure(Trainer, [arg])
    assert "did you mean" not in str(stop.value) and str(stop.value).endswith("; --help lists the keys")


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
    floats = configure(Numbers, ["--floats=1,2.5"])[0].floats
    assert floats == (1.0, 2.5) and [type(x) for x in floats] == [float, float]  # 1.0, as a float key's 1 is


def test_config_files_see_the_values_before_them_and_may_use_helpers(tmp_path):
    """A config file is plain Python run with the current values as globals: it may read what an earlier file or
    flag set, import a function, or define one; only its keys are read back."""
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    first.write_text("steps = 5\n")
    second.write_text("from math import sqrt\n\ndef double(x):\n    return 2 * x\n\n"
                      "steps = double(steps)\nsize = int(sqrt(size * 4))\n")
    c, given = configure(Keys, [str(first), "--size=9", str(second)])
    assert (c.steps, c.size, given) == (10, 6, {"steps", "size"})


def test_defaults_replace_the_dataclasss_and_flags_replace_both():
    """configure's defaults (a resumed run's own settings) stand where nothing is given, and are not given."""
    c, given = configure(Keys, ["--steps=5"], defaults={"steps": 9, "size": 7})
    assert (c.steps, c.size, c.name, given) == (5, 7, "base", {"steps"})


@dataclasses.dataclass
class Typed:
    count: int = 1  # a whole number
    rate: float = 0.5  # a number
    hidden: int = None  # None: a rule


@pytest.mark.parametrize("arg, message", [
    ("--count=True", "--count=True: count must be int, got True (bool)"),  # a bool is no number, though Python's int
    ("--rate=True", "--rate=True: rate must be float, got True (bool)"),
    ("--count=None", "--count=None: count must be int, got None (NoneType)"),  # only a key whose default is None
])
def test_a_value_of_another_type_is_refused_never_coerced(arg, message):
    with pytest.raises(SystemExit) as e:
        configure(Typed, [arg])
    assert str(e.value.code) == f"error: {message}"
    assert configure(Typed, ["--hidden=None", "--rate=2"])[0] == Typed(count=1, rate=2.0, hidden=None)



# -----------------------------------------------------------------------------
# torchrun's variables, and joining the other processes in bounded time

TORCHRUN = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


def set_env(monkeypatch, env):
    for key in TORCHRUN:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)


@pytest.mark.parametrize("drop", ["MASTER_ADDR", "MASTER_PORT"])
def test_torchrun_variables_without_the_master_address_are_refused(monkeypatch, drop):
    """RANK, LOCAL_RANK and WORLD_SIZE without MASTER_ADDR/MASTER_PORT: torch.distributed stopped with a traceback."""
    set_env(monkeypatch, {k: v for k, v in TORCHRUN.items() if k != drop})
    with pytest.raises(SystemExit, match=f"^error: .*but not {drop}: torchrun sets all of .*MASTER_ADDR, MASTER_PORT"):
        cli.processes()
    set_env(monkeypatch, TORCHRUN)
    assert cli.processes() == (True, 0, 0, 1)


@pytest.mark.parametrize("change", [{"WORLD_SIZE": "0"}, {"RANK": "2", "WORLD_SIZE": "2"}, {"RANK": "-1"},
                                    {"MASTER_PORT": "70000"}, {"LOCAL_RANK": "-1"}, {"MASTER_PORT": "65536"},
                                    {"MASTER_PORT": "0"}])
def test_torchrun_variables_that_cannot_fit_together_are_refused(monkeypatch, change):
    set_env(monkeypatch, TORCHRUN | change)
    with pytest.raises(SystemExit, match="^error: RANK=.* do not fit together"):
        cli.processes()


def test_one_process_without_torchrun_and_torchruns_variables_half_set_or_not_numbers(monkeypatch):
    set_env(monkeypatch, {})
    assert cli.processes() == (False, 0, 0, 1)
    set_env(monkeypatch, {"RANK": "0"})  # a stray variable: every missing one named, not a KeyError
    with pytest.raises(SystemExit, match="^error: the environment sets RANK=0 but not LOCAL_RANK, WORLD_SIZE, "
                                         "MASTER_ADDR, MASTER_PORT: "):
        cli.processes()
    set_env(monkeypatch, TORCHRUN | {"WORLD_SIZE": "two"})
    with pytest.raises(SystemExit, match="^error: RANK='0', LOCAL_RANK='0', WORLD_SIZE='two', MASTER_PORT='29500' "
                                         "must be whole numbers"):
        cli.processes()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


JOIN = ("import cli, torch, torch.distributed as dist; _, rank, _, n = cli.processes(); "
        "cli.init_processes('gloo', rank, n)")


def start_rank(rank, port, world_size=2, timeout="3", extra=""):
    env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), GATED_JOIN_TIMEOUT=timeout)
    return subprocess.Popen([sys.executable, "-c", JOIN + extra], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("rank", [0, 1])
def test_a_process_whose_partners_never_start_stops_with_one_line(rank):
    """WORLD_SIZE=2 and one process: init_process_group alone waits silently (for ever on rank 1)."""
    began = time.monotonic()
    proc = start_rank(rank, free_port(), timeout="1")  # nobody comes: any wait shows it (timed after the imports)
    try:
        out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("init_processes still waits after 90 s with GATED_JOIN_TIMEOUT=1")
    assert time.monotonic() - began < 60
    assert f"rank {rank}: waiting up to 1 s for all 2 processes to meet at 127.0.0.1:" in out
    lines = err.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: ") and "torchrun --nproc_per_node=2" in lines[0]


def test_a_master_port_another_program_holds_stops_with_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = start_rank(0, taken.getsockname()[1])
        _, err = proc.communicate(timeout=90)
    assert proc.returncode == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "choose a free port (torchrun --master_port=N)" in err


def test_processes_that_all_start_join_and_compute_together():
    port = free_port()
    # destroy_process_group before exit, as train.py does: a gloo group left to the interpreter's exit aborts the
    # process now and then ("terminate called without an active exception", about 1 run in 8 on a 2-core machine)
    total = ("; x = torch.tensor([rank + 1.0]); dist.all_reduce(x); print('sum', x.item(), flush=True); "
             "dist.destroy_process_group()")
    procs = [start_rank(rank, port, timeout="60", extra=total) for rank in (1, 0)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "sum 3.0" in out, err


@pytest.mark.parametrize("value", ["soon", "0", "-5", "inf"])
def test_a_join_timeout_that_is_no_number_of_seconds_is_refused(monkeypatch, value):
    monkeypatch.setenv("GATED_JOIN_TIMEOUT", value)
    with pytest.raises(SystemExit, match="^error: GATED_JOIN_TIMEOUT=.* must be a number of seconds above 0"):
        cli.join_timeout()


def test_the_join_timeout_is_gated_join_timeouts_seconds_else_join_timeout(monkeypatch):
    monkeypatch.delenv("GATED_JOIN_TIMEOUT", raising=False)
    assert cli.join_timeout() == cli.JOIN_TIMEOUT == 120
    monkeypatch.setenv("GATED_JOIN_TIMEOUT", "2.5")
    assert cli.join_timeout() == 2.5


# -----------------------------------------------------------------------------
# paths, config files and values a careless user writes

@dataclasses.dataclass
class Paths:
    out_dir: str = "out"  # a folder
    data_dir: str = ""  # another
    runs: tuple[str, ...] = ()  # folders
    start: str = "hello"  # text, not a path
    rate: float = 0.1  # a number
    rates: tuple[float, ...] = (0.1,)  # numbers


def test_a_leading_tilde_in_a_path_key_is_the_home_folder(tmp_path, monkeypatch):
    """out_dir='~/x' in a config file (or a quoted --out_dir=~/x, which no shell expands) made a folder named ~."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "c.py").write_text("out_dir = '~/runs/a'\nruns = ['~/r1', '/abs/r2']\nstart = '~/not a path'\n")
    c, given = configure(Paths, ["~/c.py", "--data_dir=~"])  # the config file itself is found under ~ too
    assert (c.out_dir, c.data_dir, c.runs) == (str(tmp_path / "runs" / "a"), str(tmp_path), (str(tmp_path / "r1"),
                                                                                          "/abs/r2"))
    assert c.start == "~/not a path" and given == {"out_dir", "data_dir", "runs", "start"}
    assert configure(Paths, ["--out_dir=~/y", "--runs=~/p,q"])[0].out_dir == str(tmp_path / "y")
    assert configure(Paths, ["--runs=~/p,q"])[0].runs == (str(tmp_path / "p"), "q")
    assert configure(Keys, ["--names=~/p,q"])[0].names == ("~/p", "q")  # a list of words, not of paths
    assert all(map(cli.is_path_key, ("out_dir", "init_path", "prompt_file", *cli.PATH_KEYS)))
    assert not any(map(cli.is_path_key, ("start", "dir", "names")))


def test_a_folder_given_as_config_file_is_named_as_a_folder(tmp_path):
    """...and told the key it likely belongs to: --runs=a,b where the command reads runs (a space instead of a comma
    makes the second run a bare argument), else --out_dir."""
    with pytest.raises(SystemExit, match="is a folder, not a config file.*several runs are one list, --runs=a,b"):
        configure(Paths, [str(tmp_path)])
    with pytest.raises(SystemExit, match=f"is a folder, not a config file.*a run's folder is --out_dir={tmp_path}$"):
        configure(Settings, [str(tmp_path)])


def test_a_config_file_is_the_working_directorys_before_the_repositorys(tmp_path, monkeypatch):
    """config/x.py names the file as given from the working directory where there is one, else the repository's
    (so that config/... works from any directory)."""
    (tmp_path / "mine" / "config").mkdir(parents=True)
    (tmp_path / "mine" / "config" / "sink_lab.py").write_text("out_dir = 'mine'\n")
    monkeypatch.chdir(tmp_path / "mine")
    assert configure(Paths, ["config/sink_lab.py"])[0].out_dir == "mine"
    monkeypatch.chdir(tmp_path)
    assert cli.config_path("config/sink_lab.py") == os.path.join(REPO, "config", "sink_lab.py")


def test_a_config_file_named_without_its_folder_is_told_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        configure(Paths, ["sink_lab.py"])
    assert str(e.value.code) == ("error: config file sink_lab.py not found; did you mean config/sink_lab.py? "
                                 "(arguments are config files or --key=value; --help lists the keys)")


@dataclasses.dataclass
class Settings:
    out_dir: str = "out"
    overwrite: bool = False
    hidden: int = None
    mode: str = "fast"

    def __post_init__(self):
        if self.mode not in ("fast", "slow"):
            raise ValueError(f"mode={self.mode!r} is not valid; choose fast or slow")


@pytest.mark.parametrize("arg, message", [
    ("--overwrite=true", "--overwrite=true: overwrite must be bool (True or False), got 'true'"),
    ("--hidden=none", "--hidden=none: hidden must be int or None, got 'none'"),
    ("--mode=FAST", "mode='FAST' is not valid; choose fast or slow (did you mean --mode=fast?)"),
    ("--mode=quick", "mode='quick' is not valid; choose fast or slow"),
])
def test_a_value_spelled_otherwise_is_told_how_to_spell_it(arg, message):
    with pytest.raises(SystemExit) as e:
        configure(Settings, [arg])
    assert str(e.value.code) == f"error: {message}"
    with pytest.raises(SystemExit, match=r"choose one of default, fast \(did you mean fast\?\)$"):
        check_choice("mode", "Fast", ("default", "fast"))


@dataclasses.dataclass
class Labelled(Settings):
    label: str = "x"  # free text, any case


def test_the_key_whose_lower_case_passes_is_named_among_others_in_capitals():
    with pytest.raises(SystemExit) as e:
        configure(Labelled, ["--label=Run A", "--mode=FAST"])
    assert str(e.value.code) == "error: mode='FAST' is not valid; choose fast or slow (did you mean --mode=fast?)"


@pytest.mark.parametrize("arg", ["-out_dir=x", "out_dir=x"])
def test_a_key_with_one_dash_or_none_is_told_it_takes_two(arg):
    with pytest.raises(SystemExit, match=f"^error: {arg}: a key takes two dashes, --out_dir=x"):
        configure(Paths, [arg])


def test_a_config_file_saved_with_a_bom_or_a_coding_line_is_read_as_python_reads_it(tmp_path):
    """Windows' Notepad saves UTF-8 with a byte-order mark; a coding line declares another encoding: Python runs
    both, so a config file may be either."""
    bom = tmp_path / "bom.py"
    bom.write_bytes("\ufeffout_dir = 'café'\n".encode("utf-8"))
    assert configure(Paths, [str(bom)])[0].out_dir == "café"
    latin = tmp_path / "latin.py"
    latin.write_bytes("# -*- coding: latin-1 -*-\nout_dir = 'café'\n".encode("latin-1"))
    assert configure(Paths, [str(latin)])[0].out_dir == "café"
    latin.write_bytes("rate = 0.5\nout_dir = 'café'\n".encode("latin-1"))
    with pytest.raises(SystemExit, match=f"^error: {latin} line 2: not UTF-8 text; save the config file as UTF-8"):
        configure(Paths, [str(latin)])
    # Notepad's "Unicode" is UTF-16: null bytes, which Python refuses with no line ("line None" was said)
    wide = tmp_path / "wide.py"
    wide.write_bytes("out_dir = 'café'\n".encode("utf-16"))
    with pytest.raises(SystemExit, match=f"^error: {wide}: not UTF-8 text; save the config file as UTF-8"):
        configure(Paths, [str(wide)])


@pytest.mark.parametrize("text, line, error", [
    ("import json\n\nrate = json.loads('0.5 x')\n", 3, "JSONDecodeError: Extra data"),  # raised in a library
    ("def half(x):\n    return x / 0\n\nrate = half(1)\n", 2, "ZeroDivisionError: division by zero"),  # in a helper
])
def test_a_mistake_in_a_config_file_names_its_line_in_the_file(tmp_path, text, line, error):
    """The line of the config file where the error arose: the innermost of its own, not the library's."""
    config = tmp_path / "c.py"
    config.write_text(text)
    with pytest.raises(SystemExit) as e:
        configure(Paths, [str(config)])
    assert str(e.value.code).startswith(f"error: {config} line {line}: {error}"), e.value.code


@pytest.mark.parametrize("text, error", [
    ("steps = 2\nstep = 3\n", "line 2: unknown key 'step' (did you mean 'steps'?)"),
    ("steps = 2\nsize = 'big'\n\nsize = 'bigger'\n", "line 4: size must be int, got 'bigger' (str)"),  # the last
    ("for i in range(3):\n    steps = i\n", "line 1: unknown key 'i'"),  # a loop's variable stays in the file's scope
    ("from math import pi\n", "line 1: unknown key 'pi'"),
    ("globals()['stepz'] = 1\n", ": unknown key 'stepz'"),  # assigned where no line says so: the file alone
])
def test_a_config_files_unknown_key_or_wrong_value_names_the_line_that_sets_it(tmp_path, text, error):
    config = tmp_path / "c.py"
    config.write_text(text)
    with pytest.raises(SystemExit) as e:
        configure(Keys, [str(config)])
    assert str(e.value.code).startswith(f"error: {config}{'' if error[0] == ':' else ' '}{error}"), e.value.code


def test_a_config_file_that_cannot_be_read_is_one_line(tmp_path):
    """Any OSError (a file made unreadable, or replaced by a folder, after it was found): one line, no traceback."""
    with pytest.raises(SystemExit, match="^error: config file c.py cannot be read: Is a directory$"):
        cli.run_config_file("c.py", str(tmp_path), {})


@pytest.mark.parametrize("text", ["rate = 1e400", "rate = float('nan')", "rates = [0.5, float('inf')]"])
def test_a_number_that_is_not_finite_is_refused(tmp_path, text):
    config = tmp_path / "c.py"
    config.write_text(text + "\n")
    with pytest.raises(SystemExit, match="must be a (finite number|list of float)"):
        configure(Paths, [str(config)])


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "Infinity"])
def test_a_number_on_the_command_line_that_is_not_finite_is_called_so(value):
    """--rate=nan is a float to Python, so "must be float, got 'nan'" read as nonsense: it says finite."""
    with pytest.raises(SystemExit) as e:
        configure(Paths, [f"--rate={value}"])
    assert e.value.code == f"error: --rate={value}: rate must be a finite number, got {value!r}"


def test_a_gpu_this_machine_does_not_have_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert cli.pick_device("cuda:0") == "cuda:0"
    with pytest.raises(SystemExit, match=r"^error: device='cuda:7' but this machine has 1 GPU \(cuda:0 to cuda:0\)"):
        cli.pick_device("cuda:7")
    with pytest.raises(SystemExit, match=r"^error: device='cuda:1' but this machine has 1 GPU "):  # 0-based
        cli.pick_device("cuda:1")


def test_each_process_under_torchrun_takes_the_gpu_of_its_local_rank(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert [cli.pick_device(name, 1) for name in ("cuda", "auto", "cuda:0")] == ["cuda:1", "cuda:1", "cuda:0"]
    assert cli.pick_device("cuda") == "cuda"


def test_a_device_this_machine_cannot_run_on_is_one_line(monkeypatch):
    """auto: CUDA, else Apple's MPS, else the CPU; a device asked for by name that is not here, or that no script runs
    on, is one line that names the way out."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert cli.pick_device("auto") == "mps"
    with pytest.raises(SystemExit, match=r"^error: device='cuda' but CUDA is not available here; use --device=cpu"):
        cli.pick_device("cuda")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert cli.pick_device("auto") == "cpu"
    with pytest.raises(SystemExit, match=r"^error: device='mps' but MPS \(Apple GPU\) is not available here"):
        cli.pick_device("mps")
    for name in ("meta", "gpu"):  # one torch knows but no script runs on, and one it does not know
        with pytest.raises(SystemExit, match=f"^error: device='{name}' is not valid; choose 'auto', 'cpu', 'cuda'"):
            cli.pick_device(name)


def test_the_fused_kernel_off_a_gpu_runs_only_in_tritons_interpreter_and_only_with_triton(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert cli.pick_device("cpu", attn_backend="triton") == "cpu"
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(SystemExit, match="^error: attn_backend='triton' runs the fused kernel on a CUDA GPU; on cpu"):
        cli.pick_device("cpu", attn_backend="triton")
    find_spec = cli.importlib.util.find_spec
    monkeypatch.setattr(cli.importlib.util, "find_spec", lambda name, *a: None if name == "triton" else find_spec(name, *a))
    with pytest.raises(SystemExit, match=r"^error: attn_backend='triton' needs the triton package \(pip install triton\)"):
        cli.pick_device("cpu", attn_backend="triton")


def test_auto_precision_on_a_gpu_is_bf16_where_it_has_it_else_fp16_whichever_gpu(monkeypatch):
    """Under torchrun the device is cuda:N: its autocast is CUDA's all the same. A precision named is taken as named."""
    for bf16, expected in ((True, "bfloat16"), (False, "float16")):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda bf16=bf16: bf16)
        with warnings.catch_warnings():  # a CPU-only machine: torch warns that CUDA's autocast is disabled here
            warnings.simplefilter("ignore")
            assert [cli.autocast_for(device, "auto")[1] for device in ("cuda", "cuda:1")] == [expected, expected]
    assert cli.autocast_for("cpu", "float16")[1] == "float16"


def test_the_device_a_result_was_measured_on_is_named_in_words(monkeypatch):
    """cli.device_name, which train.py's first record of a command and the lab's results carry: the GPU's own
    name for CUDA (as torch reports it), Apple's GPU for MPS (never 'CPU'), else the CPU's."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: f"NVIDIA H200 ({device})")
    assert cli.device_name("cuda:1") == "NVIDIA H200 (cuda:1)"
    assert cli.device_name("mps") == "Apple GPU (MPS)"
    assert cli.device_name("cpu").startswith("CPU (") and cli.device_name(torch.device("cpu")).startswith("CPU (")

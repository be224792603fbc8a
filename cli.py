"""
The command line and the device, shared by every script (train.py, sample.py and the lab's): it imports no module
of this project, so reading a command line never loads the model or Triton, and it imports torch only inside the
functions that use it, so the data preparation scripts, which read their command lines here, never load torch.

  fail, configure        the one command-line convention: config files and --key=value, checked against a
                         dataclass of keys (a bool key may be given as a bare --key, a list key as a,b,c);
                         --help lists the keys with their defaults, types and comments
  pick_device,           where and in which precision to run; device_name, free_memory; processes (torchrun's
  autocast_for           rank and world size, or one process) and init_processes (joining them, in bounded time, by
                         one of DDP_BACKENDS); on_rank_0 and partner_lost (what fails on one process: one line)
  speed settings         COMPILE_MODES, SDPA_BACKENDS, sdpa_preference and sdpa_order (train.py and the lab's bench
                         share them), keep_freed_memory (the CPU allocator setting train.py runs under)
  dataset_dir            where a dataset's shards are
  run_main               a script's main(): Ctrl-C, a diverged run or a closed pipe as one line each; Ctrl-C while
                         torch loads too (one_line_interrupt, the excepthook set here, before the script imports torch)
"""

import ast
import builtins
import contextlib
import ctypes
import dataclasses
import difflib
import glob
import importlib.util
import inspect
import math
import os
import platform
import re
import signal
import sys
import textwrap
import threading
import time
import tokenize
import traceback
import types
import typing
from contextlib import nullcontext

REPO = os.path.dirname(os.path.abspath(__file__))


def fail(message, diverged=False):
    """Stop with a message and a non-zero exit status (no traceback: it is the user's input). diverged: a training
    run that stopped because it diverged, which run_main gives its own exit status."""
    raise (Diverged if diverged else SystemExit)(f"error: {message}")


DIVERGED_EXIT = 3  # python train.py's exit status when the run diverged (torchrun's launcher exits with its own): for a
#                   study, a result, not a failure to retry


class Diverged(SystemExit):
    """fail(..., diverged=True): the message, and DIVERGED_EXIT as the exit status under run_main."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop, `kill`) inside terminate_as_interrupt: Ctrl-C's path (the same one line, the
    saved state as it was), with SIGTERM's exit status."""
    exit_status, name = 128 + 15, "terminated (SIGTERM)"


@contextlib.contextmanager
def terminate_as_interrupt(active=True):
    """Within it, SIGTERM raises Terminated in this process, so that a run stopped by a scheduler or `kill` says
    where its checkpoint is, as after Ctrl-C. Not in another thread (Python cannot), nor in a child forked within
    (a preparation's worker): those end as SIGTERM ends them. The handler before is restored afterwards. active=False
    (a torchrun process): SIGTERM ends it at once, as torchrun expects of a process it stops, even one waiting on a
    collective in C, where a Python handler would run only once the wait ended."""
    if not active or threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:  # ignored by whoever started it: left so, as Python
        yield                                                       # leaves an ignored SIGINT
        return
    pid = os.getpid()

    def handler(signum, frame):
        if os.getpid() != pid:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
        raise Terminated()
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)  # None: a handler not Python's


def run_main(main):
    """A script's main() from the command line: a diverged run's own exit status, Ctrl-C as one line with the
    status a shell gives a command it interrupted (130), and output piped into a reader that stopped reading (`| head`)
    as one line too, never a traceback. main's return value, if any, is the exit status. fail's line is written whole
    (say_whole), as Python would write it but for that."""
    try:
        sys.exit(main())
    except SystemExit as e:  # fail's (a Diverged too): its line, whole
        if not isinstance(e.code, str):
            raise
        say_whole(sys.stderr, e.code)
        sys.exit(DIVERGED_EXIT if isinstance(e, Diverged) else 1)
    except KeyboardInterrupt as e:
        print(getattr(e, "name", "interrupted (Ctrl-C)"), file=sys.stderr)
        sys.exit(getattr(e, "exit_status", 130))
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that exiting flushes into nothing
        print("stopped: the program reading this output closed it (what was saved before stays as it was)",
              file=sys.stderr)
        sys.exit(1)


def say_whole(stream, line):
    """line and its newline in one write: under torchrun, whose processes write unbuffered (PYTHONUNBUFFERED=1) to
    one terminal, print's two writes (the text, then the newline) of two processes at once can make one line of two
    processes' ("...how long)rank 0: waiting ..."), as Python's own line for a SystemExit can."""
    stream.write(f"{line}\n")
    stream.flush()


def one_line_interrupt(kind, value, tb, print_exception=sys.excepthook):
    """sys.excepthook of every script, set when it imports this module, which each does before torch: Ctrl-C before
    run_main is reached (while torch and the model load, the first seconds) is one line too, as run_main says it,
    and Python's exit status for Ctrl-C stands; any other error is printed as Python prints it."""
    if issubclass(kind, KeyboardInterrupt):
        print("interrupted (Ctrl-C)", file=sys.stderr)
    else:
        print_exception(kind, value, tb)


sys.excepthook = one_line_interrupt


def check_choice(key, value, choices):
    """Stop with one line unless value is one of choices (key is the name the user wrote, e.g. --compile_mode)."""
    if value not in choices:
        near = f" (did you mean {value.lower()}?)" if isinstance(value, str) and value.lower() in choices else ""
        fail(f"{key}={value!r} is not valid; choose one of {', '.join(choices)}{near}")


# -----------------------------------------------------------------------------
# The command line: `python script.py [config/file.py ...] [--key=value ...]`, applied in the order given

def config_path(name):
    """Where the config file `name` is: as given (from the working directory, a leading ~ for the home folder), else
    inside the repository, so that config/... works from any directory; None where it is neither."""
    name = os.path.expanduser(name)
    return next((path for path in (name, os.path.join(REPO, name)) if os.path.isfile(path)), None)


def _config_not_found(arg, fields=()):
    """Stop on an argument that is neither --key=value nor a config file, saying which mistake it looks like
    (fields: the keys of the command, to name the one a folder belongs to)."""
    if os.path.isdir(os.path.expanduser(arg)):
        meant = "; several runs are one list, --runs=a,b (commas, no spaces)" if "runs" in fields else \
            f"; a run's folder is --out_dir={arg}" if "out_dir" in fields else ""
        fail(f"{arg} is a folder, not a config file: name a .py file of key = value lines (e.g. config/sink_lab.py)"
             + meant)
    if arg.startswith("-") and not arg.startswith("--"):
        fail(f"{arg}: a key takes two dashes, --{arg.lstrip('-')} (--help lists the keys)")
    if "=" in arg and not arg.endswith(".py") and arg.partition("=")[0].isidentifier():
        fail(f"{arg}: a key takes two dashes, --{arg} (--help lists the keys)")
    configs = sorted(os.path.relpath(path, REPO) for path in glob.glob(os.path.join(REPO, "config", "*.py")))
    near = difflib.get_close_matches(arg if arg.startswith("config") else f"config/{arg}", configs, n=1, cutoff=0.8)
    fail(f"config file {arg} not found" + (f"; did you mean {near[0]}?" if near else "") +
         " (arguments are config files or --key=value; --help lists the keys)")


# Keys whose values are paths (besides every *_dir, *_path and *_file): a leading ~ in them is the home folder, as a
# shell would make it, so that out_dir="~/runs" in a config file, or a quoted '--out_dir=~/runs', names no folder "~"
PATH_KEYS = ("root", "config", "step_config", "text", "runs", "pretrained")


def is_path_key(key):
    return key.endswith(("_dir", "_path", "_file")) or key in PATH_KEYS


def configure(keys, argv, defaults=None):
    """Fill the dataclass `keys` from config files (plain Python run with the current values as globals) and
    --key=value overrides. Values are read as Python literals (strings need no quotes) and must have the
    field's type; a bool key may be written --key for --key=True; a list key (a field typed tuple[int, ...],
    tuple[str, ...]) is written a,b,c; a leading ~ in a path key (is_path_key) is the home folder. An unknown key,
    a value of the wrong type or a mistake in a config file stops with one line naming it (and the file and line).
    --help (or -h) prints the script's usage and every key, and exits. `defaults` (a dict) replaces some of the
    dataclass's defaults, e.g. a resumed run's own settings. Returns (config, given): given is the set of keys a file
    or a flag set."""
    if "--help" in argv or "-h" in argv:
        print(usage(keys))
        raise SystemExit(0)
    fields = {f.name: f for f in dataclasses.fields(keys)}
    values = {name: f.default for name, f in fields.items()} | dict(defaults or {})
    given = set()
    for arg in argv:
        if not arg.startswith("--"):
            path = config_path(arg)
            if path is None:
                _config_not_found(arg, fields)
            scope = dict(values)
            lines = _assignments(run_config_file(arg, path, scope))
            for key, value in scope.items():
                if key.startswith("_") or isinstance(value, types.ModuleType) or callable(value):
                    continue  # imports and helpers a config file may use
                value = _typed(key, value, f"{arg} line {lines[key]}" if key in lines else arg, fields)
                if value != values[key]:  # what the file changed (a file cannot be seen assigning a value unchanged)
                    values[key] = value
                    given.add(key)
            continue
        key, eq, text = arg[2:].partition("=")
        _known(key, arg, fields)
        want = fields[key].type
        if not eq:
            if want is not bool:
                fail(f"{arg}: write --{key}=value")
            text = "True"  # a bare --flag sets a bool key
        if _item_type(want):
            value = text  # a list key: a,b,c (parsed by _typed)
        else:
            try:  # a str key's text is read as a literal only when quoted: a long prompt is no Python to parse
                value = ast.literal_eval(text) if want is not str or text[:1] in "'\"" else text
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):  # {[]: 1}; too deep to parse
                value = text
            if want is str and not isinstance(value, str):
                value = text  # strings need no quotes: --gate=g1 as well as --gate='g1'
            elif want is float and text.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
                fail(f"{arg}: {key} must be a finite number, got {text!r}")  # a float, but never a setting
            elif want is not str and value is text:  # written as Python writes it: True, None
                spelled = " (True or False)" if want is bool else ""
                fail(f"{arg}: {key} must be {_type_name(want)}{spelled}"
                     f"{' or None' if fields[key].default is None else ''}, got {text!r}")
        values[key] = _typed(key, value, arg, fields)
        given.add(key)
    return _build(keys, values, given), given


def _build(keys, values, given):
    """keys(**values), or one line for a check of the dataclass itself (GPTConfig's on the model's flags), naming
    the lower-case value that would pass where a given value differs only in case (--gate=G1, as the papers write
    it)."""
    try:
        return keys(**values)
    except ValueError as e:
        for key in sorted(k for k in given if isinstance(values[k], str) and values[k] != values[k].lower()):
            try:
                keys(**(values | {key: values[key].lower()}))
            except ValueError:
                continue
            fail(f"{e} (did you mean --{key}={values[key].lower()}?)")
        fail(e)


def _item_type(want):
    """The item type of a list key's type tuple[X, ...], else None."""
    args = typing.get_args(want)
    return args[0] if typing.get_origin(want) is tuple and len(args) == 2 and args[1] is Ellipsis else None


def _type_name(want):
    item = _item_type(want)
    return f"list of {item.__name__}" if item else want.__name__


def _known(key, where, fields):
    if key not in fields:
        close = _initials(key, fields) or list(dict.fromkeys(difflib.get_close_matches(key, fields, n=1) +
                                                             _beginning(key, fields)))
        fail(f"{where}: unknown key {key!r}" + (f" (did you mean {' or '.join(map(repr, close))}?)" if close else "")
             + "; --help lists the keys")


def _initials(key, fields):
    """The keys whose words' initials a short name is, as other trainers spell them: lr for learning_rate."""
    return [f for f in fields if "_" in f and "".join(w[:1] for w in f.split("_")) == key.lower()]


def _beginning(key, fields):
    """The keys (at most three) a name of three letters or more begins: learning for learning_rate, eval for each of
    eval_interval, eval_iters and eval_only."""
    return [f for f in fields if f.startswith(key.lower())][:3] if len(key) >= 3 else []


def _items(value, item):
    """A list key's value as a tuple of `item`s: from "a,b,c" (the command line, or a config file), a list or tuple
    (a config file) or a single value. Each must be an item as it is (an int for int, a number for float): 1.5 is
    no int and True no number. Raises ValueError (SyntaxError for text that is no literal) otherwise."""
    if isinstance(value, str):
        value = [text.strip() for text in value.split(",") if text.strip()]
    elif not isinstance(value, (list, tuple)):
        value = [value]
    items = []
    for v in value:
        if isinstance(v, str) and item is not str:
            v = ast.literal_eval(v)
        number = item in (int, float) and type(v) in ((int,) if item is int else (int, float)) and math.isfinite(v)
        if not (number or item is str and isinstance(v, str)):
            raise ValueError(f"{v!r} is no {item.__name__}")
        items.append(item(v))
    return tuple(items)


def _typed(key, value, where, fields):
    _known(key, where, fields)
    want = fields[key].type
    item = _item_type(want)
    if item is not None:
        try:
            items = _items(value, item)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            fail(f"{where}: {key} must be a {_type_name(want)}, written a,b,c; got {value!r}")
        return tuple(map(os.path.expanduser, items)) if item is str and is_path_key(key) else items
    if want is float and type(value) is int:
        value = float(value)
    if value is None and fields[key].default is None:  # n_kv_head=None, mlp_hidden=None: "the default rule"
        return value
    if type(value) is not want:
        fail(f"{where}: {key} must be {want.__name__}, got {value!r} ({type(value).__name__})")
    if want is float and not math.isfinite(value):  # 1e400 in a config file is inf; float("nan") passes type()
        fail(f"{where}: {key} must be a finite number, got {value!r}")
    return os.path.expanduser(value) if want is str and is_path_key(key) else value


def _source_lines(cls):
    """A dataclass's body as [("comment", text) or ("key", name, its line's comment)], in source order: what --help
    shows of it."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return [("key", f.name, "") for f in dataclasses.fields(cls) if f.name in cls.__annotations__]
    by_line = {}
    for tok in tokenize.generate_tokens(iter(source.splitlines(keepends=True)).__next__):
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            by_line.setdefault(tok.start[0], []).append(tok)
    out = []
    for number in sorted(by_line)[1:]:  # after the `class` line
        toks = by_line[number]
        if toks[0].type == tokenize.COMMENT:
            out.append(("comment", toks[0].string.lstrip("#").strip()))
        elif len(toks) >= 2 and toks[0].type == tokenize.NAME and toks[1].string == ":" and \
                toks[0].string in cls.__annotations__:
            out.append(("key", toks[0].string, " ".join(t.string.lstrip("#").strip() for t in toks
                                                      if t.type == tokenize.COMMENT)))
    return out


def usage(keys):
    """What --help prints: the script's docstring (its module's), then every key of `keys` with its default, type and
    comment, in the order and under the comments of its source. A base dataclass's keys (TrainConfig's from
    GPTConfig) follow the last of them the class itself declares."""
    fields = {f.name: f for f in dataclasses.fields(keys)}
    bases = [b for b in keys.__mro__[1:] if dataclasses.is_dataclass(b)]
    inherited = [entry for b in reversed(bases) for entry in _source_lines(b) if entry[0] == "key"]
    comment_of = {entry[1]: entry[2] for entry in inherited}
    lines = []

    def key_line(name, comment):
        f = fields[name]
        default = ",".join(map(str, f.default)) if _item_type(f.type) else repr(f.default)
        text = f"  --{name}={default}  ({_type_name(f.type)})" + (f"  {comment}" if comment else "")
        lines.extend(textwrap.wrap(text, 116, subsequent_indent="        ", break_on_hyphens=False))

    own = _source_lines(keys)
    own_keys = [entry[1] for entry in own if entry[0] == "key"]
    rest = [(name, comment) for _, name, comment in inherited if name not in own_keys]  # the base's, not redeclared
    redeclared = [name for name in own_keys if name in comment_of]
    for entry in own:
        if entry[0] == "comment":
            lines.append(f"  # {entry[1]}")
            continue
        key_line(entry[1], entry[2] or comment_of.get(entry[1], ""))
        if redeclared and entry[1] == redeclared[-1]:  # the base's other keys beside the ones the class redeclares
            for name, comment in rest:
                key_line(name, comment)
    if not redeclared:
        for name, comment in rest:
            key_line(name, comment)
    doc = (inspect.getmodule(keys).__doc__ or "").strip("\n")
    return "\n".join([doc, "", "Keys, with their defaults (a config file or --key=value sets one; a bool also --key):",
                       *lines])


def run_config_file(arg, path, scope):
    """exec a config file into scope; a mistake in it becomes one line naming the file and the line. Returns its
    source (bytes)."""
    try:
        with open(path, "rb") as f:  # bytes: compile reads a UTF-8 BOM and a coding line as Python itself does
            source = f.read()
        if b"\0" in source:  # as Python 3.11 says it (3.10's compile raises a ValueError)
            raise SyntaxError("source code string cannot contain null bytes")
        code = builtins.compile(source, path, "exec")  # under its own name, so errors point into it
        exec(code, scope)
        return source
    except SyntaxError as e:
        where = f"{arg} line {e.lineno}" if e.lineno else arg  # null bytes have no line (UTF-16, as Notepad saves)
        if "Non-UTF-8" in e.msg or "codec can't decode" in e.msg or "null bytes" in e.msg:
            fail(f"{where}: not UTF-8 text; save the config file as UTF-8 "
                 "(or declare its encoding in its first line: # -*- coding: latin-1 -*-)")
        fail(f"{where}: {e.msg} (a config file is Python: key = value lines)")
    except OSError as e:
        fail(f"config file {arg} cannot be read: {e.strerror or e}")
    except (Exception, SystemExit) as e:  # NameError, ZeroDivisionError, sys.exit(), ... from the file's own code
        lines = [frame.lineno for frame in traceback.extract_tb(e.__traceback__) if frame.filename == path]
        where = f"{arg} line {lines[-1] if lines else '?'}"
        if isinstance(e, SystemExit):  # else the script would end with the file's exit status, and no word of why
            fail(f"config file {where} calls sys.exit({e.code!r}): a config file only sets keys (key = value lines); "
                 "remove the exit")
        fail(f"{where}: {type(e).__name__}: {e}")


def _assignments(source):
    """{name: the last line of a config file's source that assigns it (the value it leaves)}: an unknown key or a
    value of the wrong type in a file is named with its line, as the file's own errors are."""
    tree = ast.parse(source)  # it compiled already
    lines = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            name = node.id
        elif isinstance(node, ast.alias):  # from math import pi
            name = node.asname or node.name.split(".")[0]
        else:
            continue
        lines[name] = max(lines.get(name, 0), node.lineno)
    return lines


# -----------------------------------------------------------------------------
# Device and precision

def check_device_name(name):
    """Stop with one line unless name spells a device: 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps' (an index after any
    of them, as torch allows), whether or not this machine has it (pick_device says that)."""
    if not (isinstance(name, str) and re.fullmatch(r"auto|(cpu|cuda|mps)(:\d+)?", name)):
        fail(f"device={name!r} is not valid; choose 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'")


def pick_device(name, local_rank=None, attn_backend="auto"):
    """'auto' -> cuda, else mps, else cpu. Under torchrun each process takes the GPU of its local rank. With
    attn_backend='triton' (the fused kernel), a device it cannot run on is one line here, not kernels.py's traceback
    at the first forward (a Triton older than kernels.MIN_TRITON still is: this module loads none of the project's)."""
    import torch
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    if name == "cuda" and local_rank is not None:
        name = f"cuda:{local_rank}"
    check_device_name(name)
    kind = torch.device(name).type
    if kind == "cuda" and not torch.cuda.is_available():
        fail(f"device={name!r} but CUDA is not available here; use --device=cpu (or auto)")
    if kind == "cuda" and (torch.device(name).index or 0) >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        fail(f"device={name!r} but this machine has {count} GPU{'s' * (count != 1)} (cuda:0 to cuda:{count - 1}); "
             "use one of them, or --device=cuda")
    if kind == "mps" and not torch.backends.mps.is_available():
        fail(f"device={name!r} but MPS (Apple GPU) is not available here; use --device=cpu (or auto)")
    if attn_backend == "triton" and importlib.util.find_spec("triton") is None:
        fail("attn_backend='triton' needs the triton package (pip install triton); or use --attn_backend=torch")
    if attn_backend == "triton" and kind != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        fail(f"attn_backend='triton' runs the fused kernel on a CUDA GPU; on {name} only in Triton's interpreter "
             "(TRITON_INTERPRET=1 before the command: slow, for testing the kernel). Or use --attn_backend=torch")
    return name


TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE")  # what train.py reads of what torchrun sets
MASTER_VARS = ("MASTER_ADDR", "MASTER_PORT")  # where the processes meet, which torchrun sets too
JOIN_TIMEOUT = 120  # seconds init_processes waits for the other processes; GATED_JOIN_TIMEOUT changes it


def processes():
    """(ddp, rank, local_rank, world_size): one process, or one per GPU under torchrun, which sets all of
    TORCHRUN_VARS and MASTER_VARS. Some of them without the others is a stray variable or a broken launcher, never a
    run that could work: refuse it rather than guess whether the user meant one process or many."""
    found = [k for k in TORCHRUN_VARS if k in os.environ]
    if not found:
        return False, 0, 0, 1
    missing = [k for k in TORCHRUN_VARS + MASTER_VARS if not os.environ.get(k)]
    if missing:
        fail(f"the environment sets {', '.join(f'{k}={os.environ[k]}' for k in found)} but not {', '.join(missing)}: "
             f"torchrun sets all of {', '.join(TORCHRUN_VARS + MASTER_VARS)}. For one process unset {' '.join(found)} "
             "(e.g. env -u RANK python train.py ...); for several, launch with torchrun")
    try:
        rank, local_rank, world_size, port = (int(os.environ[k]) for k in TORCHRUN_VARS + ("MASTER_PORT",))
    except ValueError:
        fail(f"{', '.join(f'{k}={os.environ[k]!r}' for k in TORCHRUN_VARS + ('MASTER_PORT',))} must be whole numbers "
             "(torchrun sets them)")
    if not (world_size >= 1 and 0 <= rank < world_size and local_rank >= 0 and 0 < port < 2**16):
        fail(f"RANK={rank}, LOCAL_RANK={local_rank}, WORLD_SIZE={world_size}, MASTER_PORT={port} do not fit together: "
             "WORLD_SIZE is at least 1, RANK one of 0..WORLD_SIZE-1, MASTER_PORT in 1..65535. Launch with torchrun, "
             "which sets them, or unset them for one process")
    return True, rank, local_rank, world_size


def join_timeout():
    """The seconds init_processes waits for every process: GATED_JOIN_TIMEOUT where set, else JOIN_TIMEOUT."""
    text = os.environ.get("GATED_JOIN_TIMEOUT", "")
    try:
        seconds = float(text) if text else JOIN_TIMEOUT
    except ValueError:
        seconds = -1
    if not 0 < seconds < float("inf"):
        fail(f"GATED_JOIN_TIMEOUT={text!r} must be a number of seconds above 0 (how long the processes wait for "
             "each other to start)")
    return seconds


# train.py's backend: torch.distributed's process-group backends by name ('auto': nccl on CUDA, gloo otherwise)
DDP_BACKENDS = ("auto", "nccl", "gloo", "mpi", "ucc", "xccl")


def init_processes(backend, rank, world_size):
    """torch.distributed.init_process_group for torchrun's processes (see processes), waiting at most join_timeout()
    seconds for all world_size of them to meet at MASTER_ADDR:MASTER_PORT, where init_process_group alone would wait
    silently (for 30 minutes, or forever for a rank whose master never starts). Says that it waits; a process that
    never came stops the others with one line that says how to launch them. Collectives keep PyTorch's timeout.
    End with dist.destroy_process_group(), as train.py does: a gloo group left to the interpreter's exit now and then
    aborts the process ("terminate called without an active exception")."""
    import datetime
    import torch.distributed as dist
    seconds, where = join_timeout(), f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    say_whole(sys.stdout, f"rank {rank}: waiting up to {seconds:g} s for all {world_size} processes to meet at {where} "
              "(GATED_JOIN_TIMEOUT sets how long)")
    deadline = time.monotonic() + seconds
    late = (f"set WORLD_SIZE={world_size}, and the processes did not all start within {seconds:g} s at {where}: "
            f"launch all of them with torchrun --nproc_per_node={world_size} train.py ... (or, on several machines, "
            "torchrun on each with the same --master_addr and --master_port); for one process unset RANK, LOCAL_RANK "
            "and WORLD_SIZE; if they are only slow to start, set GATED_JOIN_TIMEOUT to more seconds")
    try:
        if rank != 0 and not _reachable(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), deadline):
            fail(f"rank {rank} found no process at {where} (rank 0 never started, or MASTER_ADDR and MASTER_PORT "
                 f"name another place): you {late}")
        remaining = datetime.timedelta(seconds=max(deadline - time.monotonic(), 1))
        store, _, _ = next(dist.rendezvous("env://", rank, world_size, timeout=remaining))
        joined = _meet(store, world_size, deadline)
        if joined < world_size:
            fail(f"only {joined} of {world_size} processes joined: you {late}")
        store.set_timeout(dist.default_pg_timeout)  # from here on PyTorch's own timeout, as without this function
        dist.init_process_group(backend=backend, store=dist.PrefixStore("default_pg", store), rank=rank,
                                world_size=world_size)
    except dist.DistStoreError:  # rank 0's store, waiting for the other ranks to connect
        fail(f"rank 0 waited at {where} and not all {world_size} processes joined: you {late}")
    except (RuntimeError, ValueError) as e:  # the port taken by another program, a backend not built in, ...
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        hint = "; another program listens there: choose a free port (torchrun --master_port=N)" \
            if "EADDRINUSE" in text else ""
        fail(f"cannot start the processes at {where} with backend={backend!r}: {text}{hint}")


def _reachable(host, port, deadline):
    """Whether something listens at host:port before deadline (time.monotonic), tried quietly every half second:
    torch's own client logs a C++ stack trace for every try."""
    import socket
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)


def _meet(store, world_size, deadline):
    """Count this process in on the store and wait (until deadline) for all world_size: how many came. Under torchrun
    the store is its agent's, up before any process, so connecting to it says nothing about the others."""
    key = f"gated_attention/joined/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    joined = store.add(key, 1)
    while joined < world_size and time.monotonic() < deadline:
        time.sleep(0.1)
        joined = store.add(key, 0)
    return joined


def on_rank_0(action, rank, device=None):
    """Run action (preparing the data, making out_dir) on rank 0 alone, then tell every process how it went: where it
    failed, rank 0 says why (one line) and the others stop at once, quietly, rather than wait at a barrier (NCCL's
    waits until its timeout) or meet rank 0's absence at their next collective (gloo's traceback, on every rank).
    device: where the processes' collectives run (init_processes's backend: a GPU for NCCL); None, one process."""
    failed = None
    if rank == 0:
        try:
            action()
        except (Exception, SystemExit) as e:  # not Ctrl-C: every process gets its own, and says it its own way
            failed = e
    if device is not None:
        import torch
        import torch.distributed as dist
        flag = torch.tensor([failed is not None], dtype=torch.int32, device=device)
        dist.broadcast(flag, 0)
        if flag.item() and rank != 0:
            raise SystemExit(1)  # rank 0's line says why
    if failed is not None:
        raise failed


# what gloo and NCCL say when a collective loses a process of the run (it ended: its own line said why)
PARTNER_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "NCCL communicator was aborted")


def partner_lost(e, rank, ddp=True):
    """For train.py's `except RuntimeError as e:`: under torchrun (ddp), a collective that failed because another
    process of the run ended (a save that failed on rank 0, a GPU out of memory on one rank: that process said why)
    stops this one with one line, not a traceback per process; any other error goes on as it was."""
    import torch.distributed as dist
    if ddp and (isinstance(e, dist.DistNetworkError) or any(text in str(e) for text in PARTNER_LOST)):
        raise SystemExit(f"error: rank {rank} stopped: another process of this run ended (its own message says why)")
    raise e


def free_memory(device):
    """Bytes free for a run or a measurement on device now: a GPU's own; the machine's otherwise (MPS shares it),
    counting the caches the system would give up; None where the system cannot tell."""
    import torch
    if str(device).startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[0]
    try:
        import psutil
        return psutil.virtual_memory().available
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as f:  # Linux: MemAvailable counts the page cache it would give up
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # Windows, macOS: no such sysconf
        return None


def device_name(device):
    """What a result was measured on, in words: the GPU's name, Apple's GPU for MPS, or the CPU's."""
    import torch
    if str(device).startswith("cuda"):
        return torch.cuda.get_device_name(device)
    return "Apple GPU (MPS)" if str(device).startswith("mps") else f"CPU ({platform.processor() or platform.machine()})"


def cpu_computes_bf16():
    """Whether this CPU multiplies bf16 matrices in hardware (AVX512-BF16, as on AMD Zen 4 and later, or Intel's
    AMX): there a bf16 matmul runs about twice as fast as an fp32 one; elsewhere bf16 is emulated, and slower.
    ATEN_CPU_CAPABILITY=avx2 (PyTorch's switch to use AVX2 at most) makes it False: with ONEDNN_MAX_CPU_ISA=AVX2
    too, a CPU that has bf16 runs as one without it would, in fp32."""
    import torch
    try:
        if torch.backends.cpu.get_cpu_capability() not in ("AVX512", "AMX"):
            return False  # PyTorch was told (or found) to use AVX2 or less
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:  # a PyTorch without these checks: assume not
        return False


DTYPES = ("auto", "float32", "bfloat16", "float16")  # train.py's --dtype; auto: autocast_for picks


def autocast_for(device, dtype):
    """(autocast context, resolved dtype name). auto: bf16 where the GPU has it, fp16 on older GPUs; on a CPU, bf16
    where it computes bf16 in hardware (the output layer's matmuls, most of a small model's step, take about half
    the time); fp32 elsewhere."""
    import torch
    device_type = device.split(":")[0]
    if dtype == "auto":
        if device_type == "cuda":
            dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
        else:
            dtype = "bfloat16" if device_type == "cpu" and cpu_computes_bf16() else "float32"
    if dtype not in DTYPES[1:]:
        fail(f"dtype={dtype!r} is not valid; choose one of {', '.join(map(repr, DTYPES))}")
    if dtype == "float32":
        return nullcontext(), dtype
    return torch.autocast(device_type=device_type, dtype=getattr(torch, dtype)), dtype


# torch.compile's modes (its `mode=`): 'reduce-overhead' replays the compiled forward and backward as CUDA graphs,
# so the CPU no longer launches each kernel; 'max-autotune' also benchmarks matmul and Triton configurations while
# compiling, and '-no-cudagraphs' does that without the graphs. train.py and lab/bench.py take one as compile_mode.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

# Which kernel F.scaled_dot_product_attention (the 'torch' attention path) tries first. PyTorch's own order puts
# FlashAttention-2 first; on Hopper GPUs cuDNN's attention kernels are reported faster for training shapes. 'cudnn'
# and 'flash' put that kernel first and keep every other behind it, so inputs it cannot take fall back as before.
# It changes which kernel computes, not what. train.py and lab/bench.py take one as sdpa_backend.
SDPA_BACKENDS = ("default", "cudnn", "flash")


def _sdpa_priority():
    """SDPA's kernels (SDPBackend) in the order it tries them now: PyTorch's own, or a preference's. Each kernel once:
    PyTorch 2.6 and 2.7 list MATH twice by default, and OVERRIDEABLE (a kernel for other devices' backends) not at all;
    it is put last, where later versions have it."""
    import torch
    from torch.nn.attention import SDPBackend
    order = list(dict.fromkeys(torch._C._get_sdp_priority_order()))  # what sdpa_kernel itself reads
    order += [b.value for b in SDPBackend.__members__.values() if b.value >= 0 and b.value not in order]  # not ERROR
    return [SDPBackend(i) for i in order]


def sdpa_order():
    """The names of SDPA's kernels in the order it tries them now (recorded with the benchmarks)."""
    return [backend.name for backend in _sdpa_priority()]


def sdpa_preference(name):
    """A context in which SDPA tries the kernel `name` (one of SDPA_BACKENDS) first, then every other in the order it
    had (PyTorch's own: FlashAttention, memory-efficient, math, cuDNN in PyTorch 2.13); 'default' changes nothing."""
    if name not in SDPA_BACKENDS:
        raise ValueError(f"sdpa_backend={name!r} is not valid; choose one of {', '.join(SDPA_BACKENDS)}")
    if name == "default":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    first = SDPBackend.CUDNN_ATTENTION if name == "cudnn" else SDPBackend.FLASH_ATTENTION
    try:
        return sdpa_kernel([first] + [b for b in _sdpa_priority() if b != first], set_priority=True)  # all enabled
    except (AttributeError, TypeError):  # an older PyTorch, whose sdpa_kernel cannot set an order
        raise RuntimeError(f"sdpa_backend={name!r} needs a PyTorch whose torch.nn.attention.sdpa_kernel takes "
                           "set_priority; upgrade PyTorch or use sdpa_backend='default'") from None


def keep_freed_memory(device_type="cpu"):
    """On a CPU under Linux, make glibc's malloc keep the memory a training step frees, for the next step to reuse.
    By default every block above a few MB is a fresh mapping, handed back to the system when freed, and the freed
    top of the heap is handed back too; a step that frees 1-3 GB then page-faults all of it in again on the next
    step. On a 2-core machine that was 30-40% of a step's time, spent in the kernel (lab/bench.py --step measures it).
    Set once per process, before the first step: every block up to 1 GiB from the heap (M_MMAP_THRESHOLD), and the
    heap never trimmed (M_TRIM_THRESHOLD -1). Returns whether it was set: not off a CPU, off Linux, or where the C
    library is not glibc (musl has no mallopt)."""
    if device_type != "cpu" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        # mallopt returns 1 when it took the value; both take an int, and -1 for the threshold means "never"
        return libc.mallopt(-3, 1 << 30) == 1 and libc.mallopt(-1, -1) == 1  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        return False


# -----------------------------------------------------------------------------

def dataset_dir(dataset, data_dir=""):
    """Where a dataset's shards are: data_dir if given, else data/<dataset> in this repo."""
    return data_dir or os.path.join(REPO, "data", dataset)

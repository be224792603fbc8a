"""
Check an exercise: run its checks against your file, stop at the first one that fails and say what is
likely wrong.

    python exercises/check.py 01                        # checks exercises/01_*/starter.py
    python exercises/check.py 01 --file=my_attempt.py   # checks another file
    python exercises/check.py --list                    # the exercises
    python exercises/check.py 01 --timeout=0            # no time limit on a check (e.g. to debug a slow one)
    python exercises/check.py 01 --hint                 # the next hint (one more each time; the last: the answer)
    python exercises/check.py 01 --hint=2               # hint 2 again
    python exercises/check.py all                       # every exercise, a score table and check-result.json
    python exercises/check.py all --student=ID --result=ID.json   # the same, for a teacher: who, and where
    python exercises/check.py 01 03 05 --result=r.json  # some of them, the result file written to r.json
    python exercises/check.py --verify=r.json           # is r.json as the checker wrote it?

Each exercise folder holds README.md (the statement), starter.py (your file: fill the gaps marked TODO), hints.md
(the hints, which --hint shows one at a time, each saying more than the one before, the last the answer) and
checks.py (the checks, in order: shapes first, then invariants, then traps for the usual mistakes, then numbers
against the project's own code). A gap you have not filled yet raises NotImplementedError, which is reported
as "not filled yet", not as a crash. Exit status: 0 when every check passes, 1 otherwise.

Grading (`all`, a list of exercises, or --result=PATH): the exercises run one after another, each in a child process
of its own, under the same limits per check and one for the whole exercise (EXERCISE_TIME_LIMIT); each prints its
failures and summary (not its passing checks), then a score table, and a JSON result (default check-result.json in
the current folder, written atomically) that a teacher can collect: the student (--student=NAME_OR_ID; null without
it), one entry per exercise (id, title, passed, total, first_failing_check, reason: the line that says what stopped
it (a syntax error, sys.exit(), a wrong value), checker_seconds: how long checking it took (the student's code
included), status: passed / failed / not filled / timeout / error / setup, hints_seen, the file_sha256 of the file
graded and the checks_sha256 of its checks.py) with the date, the Python and torch versions and the checker_sha256
of check.py, sealed with a checksum of its content (an HMAC with $CHECK_SIGNING_KEY, when set) that --verify checks.
exercises/gradebook.py makes one table of a class's files. Exit status: 0 only when every exercise passes.

Your code runs in a child process, the only one that imports your file, one request at a time under the time limit
of the check that asked (TIME_LIMIT seconds, more for the slow exercises: TIME_LIMITS). The checks run in this
process: each asks the child to call one of your functions with inputs chosen here (drawn with a random RUN_SEED on
the command line; CHECK_SEED=N repeats a run's, which the result file records as "seed"), gets the answer back as
data (numbers, strings, tensors, arrays; never a pickle) and compares it with the project's reference code. So a
function that loops forever is stopped and named; one that calls sys.exit(), exit() or os._exit() fails the check it
was in, as does one that crashes the interpreter or takes more than CHECK_MEMORY_GB of memory; and nothing your code
does while it is checked can make a check pass but answering right. (The checks are files of your copy, and whoever
edits them on their own machine makes them say what they like: a grade that counts comes from a teacher's run of the
starter.py files they collect, in a copy of their own.) When the child ends, every process it started is ended too. What
this protects and what it cannot: "What the grader guarantees" in the teachers' part of exercises/README.md (in
the project's own checkout; a student copy leaves that part out).

A check is a function `check_<name>(student)` in checks.py, with a docstring that says what it checks; it
receives your file as a Student (its attributes and calls are answered by the child, as data) and raises
Wrong("...") with the likely cause when the answer is wrong.
"""

import faulthandler
import functools
import glob
import importlib.machinery
import importlib.util
import math
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)  # the exercises use the core's modules (model.py, probe.py, kernels.py...) as references
STOPPED = "stopped: this run wrote no result (a result file that is there now is not from it)"


torch = None  # imported by load_torch(), when there is something to check


def load_torch():
    """Import torch as this module's `torch`: before an exercise's checks are loaded (checks_of), in the student's
    process before their file (serve), and on the command line once its arguments are read. What needs no torch
    answers without it, a second or two sooner: --list, --hint, --verify, a mistyped argument, the gradebook."""
    global torch
    if torch is not None:  # loaded already (checks_of runs for every exercise graded)
        return
    import torch
    if not torch.cuda.is_available():  # no GPU: Triton kernels run in Triton's interpreter (set before triton's import)
        os.environ.setdefault("TRITON_INTERPRET", "1")

# How long one check (or the import of your file) may run before it counts as stuck. Every reference solution
# takes well under a second a check on a laptop CPU, so this leaves a slow two-core laptop, and a slow but correct
# answer, a wide margin. Exercise 08 probes two trained models; exercise 09 runs Triton's interpreter on the CPU.
TIME_LIMIT = 60
TIME_LIMITS = {"08": 300, "09": 180}
# How long one whole exercise may take, the start of its child process included (every check within its own limit
# too): the checks of a reference solution take seconds, so only a check that is slow but never quite past its own
# limit, check after check, reaches it.
EXERCISE_TIME_LIMIT = 600
EXERCISE_TIME_LIMITS = {"08": 1200, "09": 900}
GRACE = 10  # seconds more before a check that ignores the time limit (stuck inside C code) is killed (at most
# the limit itself: a short limit asked for with --timeout gets a short grace)


sys.modules.setdefault("check", sys.modules[__name__])  # checks.py files `from check import Wrong` (also as __main__)


# Every check draws its inputs from seeded generators, and RUN_SEED shifts every seed: a graded run (the command line
# draws it at random) asks what no file could have answered in advance, while the test suite's runs (0) repeat.
RUN_SEED = 0


def generator(seed):
    """A torch.Generator for a check's inputs: seed, shifted by this run's RUN_SEED."""
    return torch.Generator().manual_seed(seed + RUN_SEED)


def seeded(seed):
    """seed, shifted by this run's RUN_SEED (for torch.manual_seed and numpy's generators)."""
    return seed + RUN_SEED


class Wrong(AssertionError):
    """A check failed: the message says what was expected and the likely cause, never the expected values."""


def same(a, b, tol=1e-8):
    """Whether a is a tensor of b's shape equal to b within tol (absolute and relative), compared in float64 on the
    CPU: how a check recognises one known wrong answer."""
    return (isinstance(a, torch.Tensor) and a.shape == b.shape and bool(torch.isfinite(a).all())
            and bool(torch.allclose(a.detach().double().cpu(), b.detach().double().cpu(), atol=tol, rtol=tol)))


def random_qk(B=2, H=3, T=12, D=8, seed=0, dtype=None):
    """Seeded random queries and keys (B, H, T, D), float64 unless dtype says otherwise."""
    g = generator(seed)
    dtype = dtype or torch.float64
    return torch.randn(B, H, T, D, generator=g, dtype=dtype), torch.randn(B, H, T, D, generator=g, dtype=dtype)


def causal_probs(q, k):
    """The causal attention probabilities softmax(q k^T / sqrt(D)) (B, H, T, T), explicit, in float64."""
    q, k = q.double(), k.double()
    T = q.size(2)
    s = (q @ k.transpose(-2, -1)) * q.size(-1) ** -0.5
    return s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)


def expect_shape(what, got, shape, hint=""):
    """got must be a tensor of this shape."""
    if not isinstance(got, torch.Tensor):
        raise Wrong(f"{what} should be a torch.Tensor, got {type(got).__name__}. {hint}".strip())
    if tuple(got.shape) != tuple(shape):
        raise Wrong(f"{what} should have shape {tuple(shape)}, got {tuple(got.shape)}. {hint}".strip())


def expect_close(what, got, want, atol=1e-5, rtol=1e-4, hint=""):
    """got must match want (same shape, finite, within atol + rtol * |want|). The message gives the size and place
    of the largest error, not the expected values (that would give the answer away)."""
    expect_shape(what, got, want.shape, hint)
    got = got.detach().double().cpu()
    want = want.detach().double().cpu()
    if not torch.isfinite(got).all():
        raise Wrong(f"{what} has NaN or inf values ({int((~torch.isfinite(got)).sum())} of {got.numel()}). "
                    f"{hint}".strip())
    err = (got - want).abs()
    bad = err > atol + rtol * want.abs()
    if bad.any():
        worst = tuple(int(i) for i in torch.nonzero(err == err.max())[0])
        raise Wrong(f"{what} is off at {int(bad.sum())} of {got.numel()} entries (largest error {err.max().item():.3g} "
                    f"at index {worst}; allowed {atol:g} + {rtol:g}*|expected|). {hint}".strip())


def exercise_dirs():
    """The exercises: the folders NN_name that hold a checks.py, sorted. Two for one number are refused in one line
    (a backup copy beside an exercise would be graded too, and the gradebook would keep one of the two)."""
    dirs = sorted(d for d in glob.glob(os.path.join(HERE, "[0-9][0-9]_*"))
                  if os.path.isfile(os.path.join(d, "checks.py")))
    for a, b in zip(dirs, dirs[1:]):
        if os.path.basename(a)[:2] == os.path.basename(b)[:2]:
            raise SystemExit(f"error: two folders for exercise {os.path.basename(a)[:2]}: {os.path.basename(a)!r} and "
                             f"{os.path.basename(b)!r}; the checker grades one: move the other out of exercises/ (a "
                             "backup copy elsewhere), or rename it so that it does not start with two digits")
    return dirs


def not_exercises():
    """The folders NN_name without a checks.py (a student's own folder, an exercise emptied): not graded."""
    return sorted(d for d in glob.glob(os.path.join(HERE, "[0-9][0-9]_*"))
                  if os.path.isdir(d) and not os.path.isfile(os.path.join(d, "checks.py")))


def find_exercise(number):
    number = f"{int(number):02d}" if str(number).isdigit() else str(number)
    for d in exercise_dirs():
        if os.path.basename(d).startswith(number + "_") or os.path.basename(d) == number:
            return d
    for d in not_exercises():
        if os.path.basename(d).startswith(number + "_"):
            raise SystemExit(f"error: {os.path.relpath(d)} has no checks.py, so it cannot be checked: restore the "
                             "folder from a fresh copy of the exercises")
    names = ", ".join(os.path.basename(d) for d in exercise_dirs())
    raise SystemExit(f"error: no exercise {number!r}; the exercises are {names}")


def load_module(path, name):
    # the loader named: a file with no .py ending (--file=answer.txt) is Python source too
    spec = importlib.util.spec_from_file_location(name, path, loader=importlib.machinery.SourceFileLoader(name, path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look a module up by name
    spec.loader.exec_module(module)
    return module


def checks_of(exercise_dir):
    """The exercise's checks, in the order checks.py defines them."""
    load_torch()  # first: the checks and the modules they compare with need it, and TRITON_INTERPRET set
    module = load_module(os.path.join(exercise_dir, "checks.py"), f"checks_{os.path.basename(exercise_dir)}")
    return [(name[len("check_"):], fn) for name, fn in vars(module).items()
            if name.startswith("check_") and callable(fn)]


class TimeLimit(BaseException):
    """A check ran past its time limit. A BaseException, so that an `except Exception` in your code lets it through.
    function and place: where in the student's file it was stopped, when known."""

    def __init__(self, function=None, place=""):
        super().__init__()
        self.function, self.place = function, place


class StudentExited(BaseException):
    """The student's code raised SystemExit (sys.exit(), exit()); the message says where. Not a SystemExit: the
    process that runs the checks never ends because the student's code asked it to."""


class StudentEnded(BaseException):
    """The process running the student's code ended (os._exit, a crash, a signal) or was stopped (memory) without
    answering: exitcode, and where in the student's file, when known."""

    def __init__(self, exitcode, function=None, place="", message=None):
        super().__init__(message)
        self.exitcode, self.function, self.place, self.message = exitcode, function, place, message


class StudentRaised(Exception):
    """An exception of the student's code of a type the checker does not rebuild: its type's name and message."""

    def __init__(self, type_name, message):
        super().__init__(message)
        self.type_name = type_name


class ProtocolError(Exception):
    """An answer from the student's process that is not one the checker sent for: it counts as an error."""


class NotHere(Exception):
    """What a check needs is missing from this machine (the sink lab's data was not prepared): a gap in the setup
    where the checker runs, not in the student's code. Status 'setup': check again once it is there."""


def time_limit_of(exercise_dir):
    return TIME_LIMITS.get(os.path.basename(exercise_dir)[:2], TIME_LIMIT)


def exercise_time_limit_of(exercise_dir):
    return EXERCISE_TIME_LIMITS.get(os.path.basename(exercise_dir)[:2], EXERCISE_TIME_LIMIT)


class _Alarm:
    """Raise TimeLimit in this thread after `seconds` (none if 0, or where signals cannot do it: another thread than
    the main one, or Windows; there the watching process stops a stuck check)."""

    def __init__(self, seconds):
        self.seconds = seconds if (seconds and hasattr(signal, "setitimer")
                                   and threading.current_thread() is threading.main_thread()) else 0

    def _ring(self, signum, frame):
        raise TimeLimit()

    def __enter__(self):
        if self.seconds:
            self.previous = signal.signal(signal.SIGALRM, self._ring)
            signal.setitimer(signal.ITIMER_REAL, max(self.seconds, 1e-3))

    def __exit__(self, *exc):
        if self.seconds:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)


def _student_frames(exc, path):
    """The frames of the student's file in exc's traceback; for an exception raised from another (`raise ... from
    e`, as Triton's interpreter wraps an error inside a kernel), those of the innermost cause that has some: the
    kernel's line, not its launch."""
    frames, seen = [], set()
    while exc is not None and id(exc) not in seen:  # (`raise e from e` makes a loop)
        seen.add(id(exc))
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if os.path.abspath(f.filename) == os.path.abspath(path)] or frames
        exc = exc.__cause__
    return frames


def _student_frame(exc, path):
    """The innermost frame of the student's file in exc's traceback (or its cause's: _student_frames), or None."""
    frames = _student_frames(exc, path)
    return frames[-1] if frames else None


def _stuck(seconds, function, place):
    """The diagnosis of a check (or the import) that did not finish: which of the student's functions, and where."""
    if function is None:
        return (f"did not finish within {seconds:g} s, after your functions had returned: is an answer far too big "
                f"(a huge tensor)?")
    who = "your file's top level is still running" if function == "<module>" else f"your {function} did not return"
    return (f"did not finish within {seconds:g} s: {who}{place}. An endless loop (a `while` whose condition never "
            f"changes), or far more work than the exercise needs?")


def _exited(exc, path, importing=False):
    """The diagnosis of a SystemExit (sys.exit(), exit(), quit()) raised by the student's code."""
    frame = _student_frame(exc, path)
    call = frame.line if frame is not None and frame.line else f"SystemExit({exc.code!r})"
    where = "" if frame is None else (f" in {frame.name}," if frame.name != "<module>" else ",") + \
        f" {os.path.basename(path)} line {frame.lineno}"
    if importing:
        return f"your file ended the program while it was imported ({call}{where}): leave that to the checker."
    return (f"your code ended the program ({call}{where}): a function must return its answer; leave ending the "
            f"program to the checker.")


def _where(exc, path, code=True):
    """Where in the student's file the exception came from: ' (file line N: code)', or '' if not from there (for an
    exception rebuilt from the student's process: what that process found)."""
    if hasattr(exc, "student_where"):
        return exc.student_where[0 if code else 1]
    frames = _student_frames(exc, path)
    if not frames:
        return ""
    return f" ({os.path.basename(path)} line {frames[-1].lineno}" + (f": {frames[-1].line})" if code else ")")


def summary(passed, total, status):
    return f"{passed}/{total} checks passed" + (" -- well done." if status == "ok" else ".")


# ----------------------------------------------------------------------------
# The student's file as the checks see it. A check never holds the student's module: it gets `student`, a Student,
# whose attributes and calls are requests, answered by the process that imported the file, as data -- None, bools,
# numbers, strings, tuples, lists, dicts, tensors and numpy arrays, always copies -- or, for anything else (a
# function, a class), a StudentObject that stands for it. student.in_child(helper, *args) runs one of checks.py's
# helpers beside the student's code (one that watches it: hooks left behind, inputs changed in place, probe.py
# refused) and returns what it saw, as data. run_isolated answers from a child process, the only one that imports
# the student's file, so the process that decides the verdict runs none of the student's code and reads nothing
# from it but data (never a pickle); run answers in this process (the test suite's fast path). Both copy every
# value the same way, so a check sees the same in both.

TENSOR_DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
                 "complex64", "complex128")  # torch's dtypes by name
MAX_DEPTH = 64  # nesting of an answer
MAX_ANSWER = 2**28  # bytes of one answer: far above any exercise's, far below what would exhaust the checker's memory


def to_data(value, objects, blobs, depth=0):
    """value as a JSON-able tree, its tensors' and arrays' bytes appended to blobs; anything that is not data is
    kept in objects (its number goes in the tree)."""
    if depth > MAX_DEPTH:
        raise ValueError(f"the answer is nested more than {MAX_DEPTH} levels deep")
    import numpy as np
    if value is None:
        return None
    if isinstance(value, np.generic) and value.dtype.kind in "biufc":
        blobs.append(np.asarray(value).tobytes())
        return {"t": "np", "dtype": value.dtype.str, "b": len(blobs) - 1}
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, torch.Tensor) and value.layout == torch.strided and str(value.dtype)[6:] in TENSOR_DTYPES:
        t = value.detach().cpu().contiguous()
        blobs.append(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        return {"t": "tensor", "dtype": str(t.dtype)[6:], "shape": list(t.shape), "b": len(blobs) - 1}
    if isinstance(value, torch.dtype) and str(value)[6:] in TENSOR_DTYPES:
        return {"t": "dtype", "v": str(value)[6:]}
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufc":
        blobs.append(np.ascontiguousarray(value).tobytes())
        return {"t": "ndarray", "dtype": value.dtype.str, "shape": list(value.shape), "b": len(blobs) - 1}
    if isinstance(value, (tuple, list)):
        items = [to_data(v, objects, blobs, depth + 1) for v in value]
        return {"t": "tuple", "v": items} if isinstance(value, tuple) else items
    if isinstance(value, dict):
        keys = [to_data(k, objects, blobs, depth + 1) for k in value]
        return {"t": "dict", "k": keys, "v": [to_data(v, objects, blobs, depth + 1) for v in value.values()]}
    objects.append(value)
    return {"t": "object", "id": len(objects) - 1, "type": type(value).__name__}


def from_data(tree, blobs, link, depth=0):
    """The value to_data described, rebuilt from plain JSON and bytes (never unpickled): what the checks get."""
    import numpy as np
    if depth > MAX_DEPTH + 1:
        raise ProtocolError("an answer nested too deep")
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if isinstance(tree, list):
        return [from_data(v, blobs, link, depth + 1) for v in tree]
    if not isinstance(tree, dict):
        raise ProtocolError(f"an answer holds a {type(tree).__name__}")
    kind = tree.get("t")
    if kind == "tuple":
        return tuple(from_data(v, blobs, link, depth + 1) for v in tree["v"])
    if kind == "dict":
        return dict(zip((from_data(k, blobs, link, depth + 1) for k in tree["k"]),
                        (from_data(v, blobs, link, depth + 1) for v in tree["v"])))
    if kind == "dtype" and tree["v"] in TENSOR_DTYPES:
        return getattr(torch, tree["v"])
    if kind == "object":
        return object_class(str(tree["type"]))(link, int(tree["id"]), str(tree["type"]))
    raw = blobs[tree["b"]]
    if kind == "tensor" and tree["dtype"] in TENSOR_DTYPES:
        dtype, shape = getattr(torch, tree["dtype"]), [int(n) for n in tree["shape"]]
        if len(raw) != math.prod(shape) * torch.empty((), dtype=dtype).element_size():
            raise ProtocolError("a tensor's bytes do not match its shape")
        if not raw:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)
    if kind in ("ndarray", "np"):
        dtype = np.dtype(str(tree["dtype"]))
        if dtype.kind not in "biufc" or len(raw) % dtype.itemsize:
            raise ProtocolError("an array of an unknown type")
        array = np.frombuffer(raw, dtype=dtype).copy()
        return array[0] if kind == "np" else array.reshape([int(n) for n in tree["shape"]])
    raise ProtocolError(f"an answer of unknown kind {kind!r}")


def encode_answer(header, value=None, objects=None):
    """One answer as bytes: a JSON header (with the value's tree) and the value's raw bytes after it."""
    import json
    blobs = []
    if objects is not None:
        header["value"] = to_data(value, objects, blobs)
    header["sizes"] = [len(b) for b in blobs]
    text = json.dumps(header).encode("utf-8")
    return b"".join([len(text).to_bytes(8, "little"), text] + blobs)


def decode_answer(data, link):
    """(header, value) of encode_answer's bytes; ProtocolError for anything else."""
    import json
    try:
        size = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + size].decode("utf-8"))
        blobs, at = [], 8 + size
        for n in header["sizes"]:
            if not (isinstance(n, int) and 0 <= n <= len(data) - at):
                raise ProtocolError("sizes past the answer's end")
            blobs.append(data[at:at + n])
            at += n
        value = from_data(header.get("value"), blobs, link) if header.get("ok") else None
        return header, value
    except ProtocolError:
        raise
    except Exception as e:  # malformed JSON, missing keys, wrong types: not an answer the checker sent for
        raise ProtocolError(f"{type(e).__name__}: {e}; did your code write to the checker's pipe?") from None


# The exceptions of the student's code that the checks see as themselves (a check may expect a ValueError); any
# other type arrives as StudentRaised, with its name.
REBUILT = {e.__name__: e for e in (ValueError, TypeError, IndexError, RuntimeError, AttributeError, AssertionError,
                                   ZeroDivisionError, NotImplementedError, ArithmeticError, OverflowError, NameError,
                                   RecursionError, MemoryError, ImportError, ModuleNotFoundError, OSError,
                                   FileNotFoundError, UnboundLocalError, Wrong)}


def describe_error(e, path, importing=False):
    """An exception of the student's process (the student's, or a helper's Wrong) as data for the checks."""
    try:
        message = str(e)
    except Exception:
        message = f"(a {type(e).__name__} whose message cannot be printed)"
    frames = _student_frames(e, path)
    frame = frames[-1] if frames else None
    error = {"type": "Wrong" if isinstance(e, Wrong) else type(e).__name__, "message": message[:4000],
             "where": [_where(e, path), _where(e, path, code=False)], "function": frame and frame.name}
    if isinstance(e, TimeLimit) and frame is not None and frames[0].name not in (frame.name, "<module>"):
        # stuck in a helper (a given one, say): name the function the check called too, where the loop may be
        error["where"][0] += f", called from your {frames[0].name} (line {frames[0].lineno})"
    if isinstance(e, SystemExit):
        error["exit"] = _exited(e, path, importing)
    return error


def rebuild_error(error):
    """The exception the checks see for describe_error's description, every text in it as student_text."""
    kind, message = student_text(error.get("type"), 100), student_text(error.get("message"))
    function = error.get("function") and student_text(error.get("function"), 100)
    if kind == "TimeLimit":
        return TimeLimit(function, student_text((error.get("where") or [""])[0]))
    if kind == "SystemExit":
        return StudentExited(student_text(error.get("exit")))
    e = REBUILT[kind](message) if kind in REBUILT else StudentRaised(kind, message)
    where = error.get("where")
    e.student_where = (student_text(where[0]), student_text(where[1])) \
        if isinstance(where, list) and len(where) == 2 else ("", "")
    return e


def student_text(text, limit=None, one_line=False):
    """Text from the student's process (an exception's message, where it was raised, a string the file set) as the
    checker prints it: without control characters, each line cut at limit characters (LINE_SHOWN), and every line
    after the first marked '  | ' like the code's own output, so that none of it passes for a line of the checker's
    (a cleared screen, or "8/8 checks passed" in an exception's message). one_line: every run of white space, line
    ends included, made one space."""
    limit = limit or LINE_SHOWN
    lines = [CONTROL.sub("", line) for line in str(text).split("\n")]
    lines = [" ".join(" ".join(lines).split())] if one_line else lines
    return "\n  | ".join(line[:limit] + (f" ... ({len(line) - limit:,} more characters)" if len(line) > limit else "")
                         for line in lines)


class StudentObject:
    """Stands for something of the student's file that is not data (a function, a class, an object): reading an
    attribute or calling it is a request to the process that holds it."""

    def __init__(self, link, number, type_name):
        self._link, self._number, self._type = link, number, type_name

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._link.request(("get", self._number, name))

    def __call__(self, *args, **kwargs):
        return self._link.request(("call", self._number, args, kwargs))

    def __reduce__(self):  # as an argument of a request: the holder finds its own object again
        return ObjectNumber, (self._number,)

    def __repr__(self):
        return f"<the student's {self._type}>"


@functools.lru_cache(maxsize=None)
def object_class(type_name):
    """A StudentObject class named as the student's object's type, so that a check's message "got set" names it."""
    return type(type_name if type_name.isidentifier() else "object", (StudentObject,), {})


class ObjectNumber(int):
    """A StudentObject as it travels back to the process that holds the object."""


class Student(StudentObject):
    """The student's file, as the checks see it (object 0 of the process that imported it)."""

    def __init__(self, link):
        super().__init__(link, 0, "file")

    def in_child(self, helper, *args):
        """helper(module, *args) -- a function of checks.py, run where the student's module is -- as data."""
        return self._link.request(("helper", helper.__name__, args, {}))

    def source_of(self, name):
        """The source code of the student's function `name`, as text (what a check reads when it cannot watch)."""
        return self._link.request(("source", 0, name))


ObjectNumber.__module__ = "check"  # a request names it so, in the child too (sys.modules["check"] is this file)


class Answerer:
    """The side that holds the student's module and answers requests: in the child process, or in this one."""

    def __init__(self, module, exercise_dir, path, in_child=False):
        self.objects, self.path, self.exercise_dir, self._checks = [module], path, exercise_dir, None
        self.in_child = in_child  # there, a KeyboardInterrupt of the student's code is one more exception

    def resolve(self, value):
        if isinstance(value, ObjectNumber):
            return self.objects[int(value)]
        if isinstance(value, (list, tuple)):
            return type(value)(self.resolve(v) for v in value)
        if isinstance(value, dict):
            return {k: self.resolve(v) for k, v in value.items()}
        return value

    def answer(self, request):
        """The answer's bytes: the value the request asks for, or the exception it raised."""
        op, number, *rest = request
        try:
            target = self.objects[number] if isinstance(number, int) else None
            if op == "get" and number == 0 and not hasattr(target, rest[0]):  # the module: a name the starter had
                raise AttributeError(f"your file defines no {rest[0]!r}, which the starter has (renamed? deleted? "
                                     "indented into another function?)")
            if op == "get":
                value = getattr(target, rest[0])
            elif op == "call":
                value = target(*self.resolve(rest[0]), **self.resolve(rest[1]))
            elif op == "helper":
                value = getattr(self.checks(), number)(self.objects[0], *self.resolve(rest[0]))
            elif op == "source":
                import inspect
                fn = getattr(target, rest[0])
                value = inspect.getsource(getattr(fn, "fn", fn))  # a @triton.jit kernel keeps its function in .fn
            else:
                raise ProtocolError(f"unknown request {op!r}")
            return encode_answer({"ok": True}, value, self.objects)
        except BaseException as e:  # the student's exception (SystemExit and TimeLimit too): the checks judge it
            if isinstance(e, KeyboardInterrupt) and not self.in_child:
                raise
            return encode_answer({"ok": False, "error": describe_error(e, self.path)})

    def checks(self):
        if self._checks is None:
            self._checks = load_module(os.path.join(self.exercise_dir, "checks.py"),
                                       f"checks_{os.path.basename(self.exercise_dir)}_child")
        return self._checks


class InProcess:
    """Answers the checks' requests in this process, copying both ways as the child process does (run)."""

    def __init__(self, answerer):
        self.answerer = answerer

    def request(self, request):
        import pickle
        from torch.utils._python_dispatch import _disable_current_modes
        # as in a child process, the student's code runs outside the dispatch modes the check has entered here (a
        # mode that watches ops sees only what a helper run by in_child does): so the test suite's fast path fails
        # a check that would watch the wrong process on the command line (torch function modes and grad mode are
        # not switched off: no check enters one around a student's call)
        with _disable_current_modes():
            answer = self.answerer.answer(pickle.loads(pickle.dumps(request)))
        header, value = decode_answer(answer, self)
        if not header["ok"]:
            raise rebuild_error(header["error"])
        return value


def import_student(path, number, seconds=0):
    """The student's module, imported under a time limit (TimeLimit past it)."""
    with _Alarm(seconds):
        return load_module(path, f"student_{number}")


def run(exercise_dir, path, out=print, time_limit=None):
    """Run the checks of exercise_dir on the file at path, importing it in this process; returns (passed, total,
    status, failed): status is one of 'ok', 'not filled', 'wrong', 'error', 'timeout', 'setup'; failed is the name of
    the check that stopped it (None if none did). time_limit: seconds a check may run (default
    time_limit_of(exercise_dir); 0: no limit). The student's code runs in this process, so it could reach the
    verdict: the test suite's fast path for trusted files (the reference answers and known mistakes). The command
    line calls run_isolated."""
    time_limit = time_limit_of(exercise_dir) if time_limit is None else time_limit
    number = os.path.basename(exercise_dir)[:2]

    def connect():
        try:
            module = import_student(path, number, time_limit)
        except KeyboardInterrupt:
            raise
        except BaseException as e:
            raise rebuild_error(describe_error(e, path, importing=True)) from None
        return Student(InProcess(Answerer(module, exercise_dir, path)))

    result = _run_checks(exercise_dir, path, out, time_limit, connect, alarm=True)
    out(summary(*result[:3]))
    return result


def _verdict(e, path, time_limit, label, importing=False):
    """(status, line) of a check (or the import, label '') that raised e."""
    where = _where(e, path)
    if isinstance(e, TimeLimit):
        function, place = e.function, e.place
        if function is None and not place:  # raised in this process (run's alarm): its own traceback says where
            frame = _student_frame(e, path)
            function, place = (frame.name, where) if frame is not None else (None, "")
        what = "importing your file" if importing else label
        return "timeout", f"{what} {_stuck(time_limit, function, place)}"
    if isinstance(e, StudentExited):
        return "error", f"{label}{' ' if label else ''}{e}"
    if isinstance(e, StudentEnded):
        return "error", e.message and f"{label}{' ' if label else ''}{e.message}" or \
            _ended(e.exitcode, label, importing, e.function, e.place)
    if isinstance(e, NotImplementedError):
        where = "" if importing else _where(e, path, False)
        return "not filled", f"{label}{' ' if label else ''}not filled yet: {e}{where}"
    if importing:
        return "error", f"your file does not import: {getattr(e, 'type_name', type(e).__name__)}: {e}{where}"
    if isinstance(e, ProtocolError):
        return "error", f"{label} your code's answer could not be read: {e}"
    if isinstance(e, NotHere):
        return "setup", f"{label} cannot be checked on this machine: {e}"
    return None


def reason_of(line, label=""):
    """What stopped an exercise, for the result file: the line the student saw without the check's label (the
    result names the check), or a failed check's own message, on one line and at most REASON_CHARS long."""
    text = " ".join(line.removeprefix(label).split())
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 3] + "..."


REASON_CHARS = 300  # a spreadsheet's cell, not the whole story: the student's copy prints that


def _run_checks(exercise_dir, path, out, time_limit, connect, alarm=False, step=lambda name, index, total: None,
                over=lambda label: None, checks=None, why=None):
    """Import the student's file (connect(): the Student) and run the checks in order until one fails; step(name,
    index, total) is called as each begins (name None: the import). alarm: time each check here (run); otherwise the
    Student's link times its requests (run_isolated). over(label): the line for a time limit that was the whole
    exercise's, or None. checks: checks_of(exercise_dir), if loaded already. why: a list, given the reason of the
    check that stopped the run (reason_of), if one did. Returns (passed, total, status, failed)."""
    checks = checks_of(exercise_dir) if checks is None else checks
    number = os.path.basename(exercise_dir)[:2]
    out(f"checking {shown_path(path)} against exercise {os.path.basename(exercise_dir)}")
    step(None, 0, len(checks))
    try:
        student = connect()
    except (Exception, TimeLimit, StudentExited, StudentEnded) as e:
        status, line = _verdict(e, path, time_limit, "", importing=True)
        line = (isinstance(e, TimeLimit) and over("")) or line
        out(f"  {line}")
        if why is not None:
            why.append(reason_of(line))
        return 0, len(checks), status, None
    status, failed = "ok", None
    for passed, (name, fn) in enumerate(checks):
        what = " ".join((fn.__doc__ or name).strip().split("\n\n")[0].split())  # its first paragraph, on one line
        label = f"[{number}.{name}]"
        step(name, passed, len(checks))
        try:
            with _Alarm(time_limit if alarm else 0):
                fn(student)
        except (Exception, TimeLimit, StudentExited, StudentEnded) as e:
            verdict = _verdict(e, path, time_limit, label)
            if isinstance(e, TimeLimit) and over(label):
                status, line = "timeout", over(label)
            elif verdict is not None:
                status, line = verdict
            elif isinstance(e, AssertionError):  # Wrong, or a plain assert in checks.py
                status, line = "wrong", f"{label} FAILED: {what}\n      {e}"
            else:
                status, line = "error", f"{label} your code raised {getattr(e, 'type_name', type(e).__name__)}: " \
                                        f"{e}{_where(e, path)}"
            out(f"  {line}")
            if why is not None:
                why.append(reason_of(str(e) if status == "wrong" and str(e) else line, label))
            failed = name
            break
        out(f"  {label} ok: {what}")
    else:
        passed = len(checks)
    return passed, len(checks), status, failed


# ----------------------------------------------------------------------------
# The child process. run_isolated starts it in a session of its own, its stdin and stdout two pipes: requests in
# (pickled by the checker: the child trusts the checker, never the other way round) and answers out (encode_answer's
# bytes; what the student's code prints goes to stderr, so it never mixes with them). It
# imports the student's file, says how that went, then answers one request at a time, each under the time left to
# the check that asked; faulthandler writes every thread's stack to stack_file just before the checker would kill
# a request that never returns, so that the checker can name the student's function that did not.

CHILD_MAIN = "import sys; sys.path.insert(0, sys.argv[1]); import check; check.serve(*sys.argv[2:])"


def _private_pipes():
    """(requests, answers): the child's stdin and stdout as file descriptors of its own; fd 0 then reads nothing
    and fd 1 writes to stderr, so that the student's input() and print() never touch the checker's pipes."""
    fd_in, fd_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    if os.name == "nt":
        import msvcrt
        for fd in (fd_in, fd_out):
            msvcrt.setmode(fd, os.O_BINARY)
    return fd_in, fd_out


# What the student's code prints reaches the checker through a pipe of its own (the child's stderr, where its stdout
# goes too), forwarded line by line with a mark: it can never pass for the checker's own lines. Before each answer
# the child writes OUTPUT_SYNC into that pipe through a descriptor of its own (the student's code may redirect fd 2),
# so that the checker prints what came before the answer before its verdict.
OUTPUT_SYNC = b"\x00check: an answer follows\n"
# colours, a cleared screen, a carriage return; C1 controls (\x9b is an escape too) and text-direction overrides
CONTROL = re.compile("\x1b\\[[0-?]*[ -/]*[@-~]|\x1b.?|"
                     "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
LINE_SHOWN, OUTPUT_SHOWN = 2000, 1 << 20  # characters of one printed line, bytes of one child's output, shown
_mark_fd = None  # the child's own descriptor of its output pipe (serve)


def _sync_output():
    """In the child: mark on its output that all printed so far is out (OUTPUT_SYNC). Whatever the student's code
    did to its own output (closed it, replaced sys.stdout), this never fails."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # closed, None, or an object of the student's
            pass
    try:
        os.write(_mark_fd, OUTPUT_SYNC)
    except (OSError, TypeError):  # closed by the student's code: the checker stops waiting for marks
        pass


def _forward_output(pipe, synced):
    """In the checker: each line the child's pipe (a file object, held here so that its descriptor is never closed
    and reused under this thread) brings, to this process's stderr as '  | line', without
    control characters, each line cut at LINE_SHOWN characters and the whole at OUTPUT_SHOWN bytes (the rest read
    and dropped: memory stays bounded whatever the child prints); synced is released at each OUTPUT_SYNC."""
    buffer, shown, cut = b"", 0, False

    def show(data):
        nonlocal shown, cut
        if not data or cut:
            return
        shown += len(data)
        text = CONTROL.sub("", data.decode("utf-8", "replace").rstrip("\n"))
        more = len(text) - LINE_SHOWN
        text = text[:LINE_SHOWN] + (f" ... ({more:,} more characters)" if more > 0 else "")
        if shown > OUTPUT_SHOWN:
            cut, text = True, f"... (the rest of what your code printed, past {OUTPUT_SHOWN:,} bytes, is not shown)"
        try:
            sys.stderr.write(f"  | {text}\n")
            sys.stderr.flush()
        except Exception:  # this process's stderr closed or None: the verdicts matter, not the prints
            pass
    while True:
        try:
            chunk = os.read(pipe.fileno(), 1 << 16)
        except (OSError, ValueError):
            chunk = b""
        if not chunk:
            break
        *lines, buffer = (buffer + chunk).split(b"\n")  # one split a chunk: linear in what is read
        for line in lines:
            line += b"\n"
            if line.endswith(OUTPUT_SYNC):
                show(line[:-len(OUTPUT_SYNC)])
                synced.release()
            else:
                show(line)
        if len(buffer) > LINE_SHOWN * 4:  # a line with no end yet: shown in parts, a mark's start kept back
            keep = len(OUTPUT_SYNC) - 1
            show(buffer[:-keep])
            buffer = buffer[-keep:]
    show(buffer)


def _write_frame(fd, data):
    data = len(data).to_bytes(8, "little") + data
    while data:
        data = data[os.write(fd, data):]


def _read_exactly(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


REFERENCE_ANSWERS = os.path.join("exercises", "solutions")  # the teacher's, in the project's own checkout
SPAWNS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn")  # audit events that run a command


# the audit events whose first argument is a path the code reads: opened, listed, or given a second name outside the
# answers (a hard link, a rename), under which an open would not see where the file came from
LOOKS = ("open", "os.listdir", "os.scandir", "os.link", "os.rename")


def _refuse_reference_answers(path):
    """In the child, before the student's file (path) is imported: opening or listing anything in the reference
    answers of any checkout the account can read (a path through the REFERENCE_ANSWERS folder), or a command that names
    them, raises PermissionError; nothing is refused when path is itself a reference answer (the tests that check
    the checks). A deterrent, not a wall (code that goes through ctypes, say, is not seen): a teacher grades where
    no checkout with the answers can be read (exercises/TEACHERS.md)."""
    mark = os.sep + REFERENCE_ANSWERS + os.sep
    if mark in os.path.realpath(path):
        return

    def hook(event, args):
        if event in LOOKS and args and isinstance(args[0], (str, bytes, os.PathLike)):  # args[0]: the path read
            named = [os.path.realpath(os.fsdecode(args[0])) + os.sep]
        elif event in SPAWNS:  # a command that names them by a path, relative or not, or runs among them
            cwd = args[2] if event == "subprocess.Popen" and len(args) > 2 and args[2] else os.getcwd()
            named = [os.path.realpath(os.fsdecode(cwd)) + os.sep]
            if REFERENCE_ANSWERS + os.sep in str(args).replace("/", os.sep):
                named.append(mark)
        else:
            return
        if any(mark in n for n in named):
            raise PermissionError("reading the reference answers while your code is checked is refused")
    sys.addaudithook(hook)


def serve(exercise_dir, path, stack_file):
    """The child process's whole life: import the student's file, then answer requests until it is stopped."""
    import pickle
    load_torch()
    _die_with_parent()
    global _mark_fd
    fd_in, fd_out = _private_pipes()
    _mark_fd = os.dup(2)  # the output pipe, as the student's code cannot redirect it
    stacks = open(stack_file, "w", encoding="utf-8")
    faulthandler.enable(file=stacks)  # a crash (segmentation fault...) writes the stack there too
    _refuse_reference_answers(path)
    number = os.path.basename(exercise_dir)[:2]
    _sync_output()
    _write_frame(fd_out, encode_answer({"ok": True}))  # started: torch and this file are imported
    while True:
        op, *request = pickle.loads(_read_exactly(fd_in, int.from_bytes(_read_exactly(fd_in, 8), "little")))
        seconds = request.pop()
        if seconds:
            faulthandler.dump_traceback_later(seconds + min(GRACE, seconds) / 2, file=stacks)
        if op == "import":  # ("import", None, the file's own time limit): the time left includes starting up
            try:
                answerer = Answerer(import_student(path, number, request[1] or 0), exercise_dir, path, in_child=True)
                answer = encode_answer({"ok": True})
            except BaseException as e:
                answer = encode_answer({"ok": False, "error": describe_error(e, path, importing=True)})
        else:
            with _Alarm(seconds):
                answer = answerer.answer((op, *request))
        faulthandler.cancel_dump_traceback_later()
        _sync_output()  # what the student's code printed appears before the checker's next line
        _write_frame(fd_out, answer)


def _prctl(option, value):
    """Linux's prctl(option, value); False where there is none."""
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 1, 4, 36, 37


def _die_with_parent():
    """The child is killed when the checker ends, however it ends (Linux)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the checker ended before the line above
        os._exit(1)


def memory_limit():
    """Bytes of memory the student's process may hold: $CHECK_MEMORY_GB, else half the machine's, at most 8 GiB (every
    exercise needs well under 1 GiB); None where the machine cannot tell."""
    if os.environ.get("CHECK_MEMORY_GB"):
        return int(float(os.environ["CHECK_MEMORY_GB"]) * 2**30)  # checked by check_settings
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    return min(total // 2, 8 * 2**30)


def _resident(pid, shared_once=False):
    """Bytes of memory process pid holds now (Linux), or 0: all its resident pages (RSS, cheap to read); shared_once:
    its proportional share (Pss), where the kernel gives it, so that the pages a forked process shares with its parent
    count once over the two, not once in each (slower to read: the kernel walks the process's memory)."""
    if shared_once:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _descendants(pids):
    """pids and every process below them (Linux's /proc), found by walking down from each."""
    found, todo = [], list(pids)
    while todo and len(found) < 100_000:
        pid = todo.pop()
        found.append(pid)
        todo += _children(pid)
    return found


def _children(pid):
    """The process ids whose parent is pid (Linux's /proc), or []."""
    found = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(p) for p in f.read().split()]
        return found
    except (OSError, ValueError):
        pass
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:  # kernels without .../children
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
        except (OSError, ValueError, IndexError):
            pass
    return found


class ChildProcess:
    """The link to the child process that imported the student's file (run_isolated): requests and their answers,
    each within the time left (self.deadline, time.monotonic()); the child stopped, with everything it started,
    when it is too late, when it takes too much memory, and at the end."""

    def __init__(self, exercise_dir, path, stack_file, watchdog=None, zygote=None):
        self.path, self.stack_file, self.deadline, self.proc, self.watchdog = path, stack_file, None, None, watchdog
        self.grace = GRACE  # seconds past the deadline before a request that ignores it (stuck in C code) is killed
        self.kept = set(_children(os.getpid()))  # this process's own children (a watchdog, the zygote): never the
        #                                           student's
        self.subreaper = _prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of the student's processes become ours to end
        self.memory = memory_limit()
        env = without_key()
        apart = {"start_new_session": True} if os.name == "posix" else \
            {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
        self.proc = zygote.fork(exercise_dir, path, stack_file) if zygote is not None and self.subreaper else None
        if self.proc is None:
            self.proc = subprocess.Popen([sys.executable, "-c", CHILD_MAIN, HERE, exercise_dir, path, stack_file],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         env=env, **apart)
        self.synced, self.marks_lost = threading.Semaphore(0), False  # a release per mark of the child's output
        self.printed = threading.Thread(target=_forward_output, args=(self.proc.stderr, self.synced), daemon=True)
        self.printed.start()
        # Blocking reads and writes run in threads of their own, so that this one can keep time, watch the memory,
        # and stop the child whatever it does (stops reading, never answers, or floods its pipe).
        self.answers = queue.Queue()
        threading.Thread(target=self._read_answers, args=(self.proc.stdout, self.answers), daemon=True).start()

    @staticmethod
    def _read_answers(pipe, answers):
        """Put each answer's bytes on answers as it arrives; EOFError at the end, ProtocolError for an oversized one."""
        try:
            while True:
                head = pipe.read(8)
                if len(head) < 8:
                    raise EOFError
                size = int.from_bytes(head, "little")
                if size > MAX_ANSWER:
                    raise ProtocolError(f"an answer of {size:,} bytes, more than the checker takes "
                                        f"({MAX_ANSWER:,}): a result far bigger than the exercise needs?")
                body = pipe.read(size)
                if len(body) < size:
                    raise EOFError
                answers.put(body)
        except (EOFError, ProtocolError, OSError, ValueError) as e:
            answers.put(e if not isinstance(e, (OSError, ValueError)) else EOFError())

    def request(self, request):
        """The value the child answers to request, or the exception it raised (TimeLimit past the deadline,
        StudentEnded if it ended)."""
        import pickle
        if self.proc is None or self.proc.poll() is not None:
            raise StudentEnded(self.proc and self.proc.returncode, message="the process of your code has ended")
        seconds = max(1e-3, self.deadline - time.monotonic()) if self.deadline is not None else 0
        try:
            self._send(pickle.dumps(request + (seconds,)))
            header, value = decode_answer(self._receive(), self)
        except TimeLimit:
            self.stop()
            function, place = _stuck_in(self.stack_file, self.path)
            raise TimeLimit(function, place) from None
        except EOFError:
            self._ended()
            raise StudentEnded(self.proc.returncode, *_stuck_in(self.stack_file, self.path)) from None
        if not header["ok"]:
            raise rebuild_error(header["error"])
        return value

    def start(self, seconds):
        """Wait for the child to say it started (StudentEnded, with what went wrong, if it does not)."""
        self.deadline, grace, self.grace = time.monotonic() + seconds, self.grace, 0
        try:
            self._receive()
        except TimeLimit:
            self.stop()
            raise StudentEnded(None, message=f"the checks did not start within {seconds} s (importing torch and "
                                             "check.py)") from None
        except EOFError:
            self._ended()
            raise StudentEnded(None, message=f"the checks could not start (exit status {self.proc.returncode}): see "
                                             "the error above.") from None
        finally:
            self.grace = grace

    def _ended(self):
        """The child closed its answers' pipe: wait for it to end (it should be ending), or end it; then what it
        printed last (an error on its way out) is printed before the verdict."""
        try:
            self.proc.wait(timeout=GRACE)
        except subprocess.TimeoutExpired:
            self.stop()
        self.printed.join(timeout=1)

    def _late(self):
        """The time to wait for the child now (None: no limit); TimeLimit once past the deadline and its grace."""
        if self.deadline is None:
            return 0.25
        left = self.deadline + self.grace - time.monotonic()
        if left <= 0:
            raise TimeLimit()
        return min(left, 0.25)

    def _memory_held(self):
        """Bytes held now by the child and every process it started (detached ones are this process's children):
        the child's RSS when it is alone (read at every wait), their proportional shares when there are several."""
        roots = [self.proc.pid] + [p for p in _children(os.getpid()) if p not in self.kept and p != self.proc.pid]
        procs = _descendants(roots)
        return sum(_resident(p, shared_once=len(procs) > 1) for p in procs)

    def _watch(self):
        """Between waits: the memory of the child and what it started, and a checker stopped by a signal (SIGSTOP)
        resumed by the watchdog."""
        if self.watchdog is not None and self.watchdog.poll() is None:
            os.kill(self.watchdog.pid, signal.SIGCONT)
        if self.memory and self._memory_held() > self.memory:
            self.stop()
            raise StudentEnded(None, message=f"your code used more than {self.memory / 2**30:.1f} GiB of memory and "
                                             "was stopped: a tensor far bigger than the exercise needs?")

    def _send(self, data):
        """Write one request, in a thread: a child that stops reading cannot hold this process past the deadline."""
        done = queue.Queue()

        def write(pipe=self.proc.stdin):
            try:
                pipe.write(len(data).to_bytes(8, "little") + data)
                pipe.flush()
                done.put(None)
            except (OSError, ValueError):
                done.put(EOFError())

        threading.Thread(target=write, daemon=True).start()
        self._wait(done)

    def _receive(self):
        answer = self._wait(self.answers)
        # what the student's code printed before it answered, printed before the verdict: the mark that follows it
        # comes at once; one that does not come within a second never will (its descriptor closed), nor later ones
        if not self.marks_lost and not self.synced.acquire(timeout=1):
            self.marks_lost = True
        return answer

    def _wait(self, box):
        """What box receives (an exception put there is raised), within the deadline (TimeLimit past it)."""
        while True:
            wait = self._late()
            self._watch()
            try:
                item = box.get(timeout=wait)
            except queue.Empty:
                continue
            if isinstance(item, BaseException):
                raise item
            return item

    def stop(self):
        """End the child and every process it started -- detached ones too, which became this process's children
        (Linux) -- and wait until they have all ended."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its group, started with it (POSIX)
        except (AttributeError, ProcessLookupError, PermissionError):
            pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        give_up = time.monotonic() + 60  # a process that cannot be killed (another user's) must not hang the checker
        while time.monotonic() < give_up:  # what it started, and what that started...: ours as each parent ends
            strays = [p for p in _children(os.getpid()) if p not in self.kept]
            if not strays:
                break
            tree = _descendants(strays)
            for sig in ("SIGSTOP", "SIGKILL"):  # all frozen first, so none can start another while we kill
                for pid in tree:
                    try:
                        os.kill(pid, getattr(signal, sig, signal.SIGTERM))
                    except (ProcessLookupError, PermissionError):
                        pass
            for pid in strays:
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
        # The pipes are left to their reading and writing threads: closing one that a thread is blocked on would
        # wait for that thread; with every process that held them gone, those threads end.
        self.printed.join(timeout=1)  # the last of what the student's code printed, before the checker's summary
        if self.subreaper:
            _prctl(PR_SET_CHILD_SUBREAPER, 0)
            self.subreaper = False
        self.proc = None


def _stuck_in(stack_file, path):
    """(function, place) of the innermost frame of the student's file in faulthandler's dump, or (None, ''); place
    also names the outermost such frame (the function the check called) where it is another function."""
    try:
        with open(stack_file, encoding="utf-8", errors="replace") as f:
            dump = f.read()
    except OSError:
        return None, ""
    for block in re.split(r"\n(?=\S)", dump):  # one block per thread: its frames innermost first
        frames = [(line, function) for file, line, function in re.findall(r'File "(.*)", line (\d+) in (\S+)', block)
                  if os.path.abspath(file) == os.path.abspath(path)]
        if not frames:
            continue
        (line, function), (outer_line, outer) = frames[0], frames[-1]
        try:
            with open(path, encoding="utf-8") as f:
                code = f.read().splitlines()[int(line) - 1].strip()
        except (OSError, IndexError, UnicodeDecodeError):
            code = ""
        place = f" ({os.path.basename(path)} line {line}" + (f": {student_text(code, 200)})" if code else ")")
        if outer not in (function, "<module>"):  # the function the check called, then where it was stuck
            place += f", called from your {student_text(outer, 100)} (line {outer_line})"
        return student_text(function, 100), place  # the file's text, as it is now
    return None, ""


STARTUP_LIMIT = 120  # seconds for the child to import torch and the checks, before the student's file is imported

# A watchdog beside the checker: a student's process that stops the checker (SIGSTOP) does not freeze the grading,
# because this process, in a session of its own, sends it SIGCONT four times a second until the checker closes its
# stdin; the checker sends it SIGCONT in turn while it waits.
WATCHDOG = ("import os, select, signal, sys\nparent = int(sys.argv[1])\n"
            "while not select.select([sys.stdin], [], [], 0.25)[0] and os.getppid() == parent:\n"
            "    os.kill(parent, signal.SIGCONT)\n")


def _watchdog():
    if os.name != "posix":
        return None
    try:
        return subprocess.Popen([sys.executable, "-c", WATCHDOG, str(os.getpid())], stdin=subprocess.PIPE,
                                start_new_session=True, env=without_key())
    except OSError:
        return None


# The zygote: a process that imported torch and this file once, before any student's code ran, and forks each
# exercise's child from itself. A fresh Python for every child costs seconds (importing torch), a fork milliseconds:
# grading every exercise of a student is the imports of two processes, not of twelve. Linux without a GPU only (no
# forked child can use CUDA once its parent asked for it). The child must end up this process's own child, as a fresh
# one is (its memory watched, its exit status waited for, its processes ended), so the zygote forks twice and the
# child, orphaned, is adopted by this process, a subreaper while it checks.
ZYGOTE_MAIN = "import sys; sys.path.insert(0, sys.argv[1]); import check; check.zygote(int(sys.argv[2]))"


class Zygote:
    def __init__(self):
        import socket
        self.sock, theirs = socket.socketpair(type=socket.SOCK_SEQPACKET)  # a message each, never split
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE_MAIN, HERE, str(theirs.fileno())],
                                     pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True, env=without_key())
        theirs.close()

    def fork(self, *args):
        """A Forked child serving args (serve's), this process's own child; None if the zygote cannot make one (it
        failed, or a student's process stopped it): the caller starts a fresh Python instead."""
        import json
        import socket
        if self.proc is None:
            return None
        pipes = [os.pipe() for _ in range(3)]  # the child's stdin, stdout and stderr
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
        try:
            os.kill(self.proc.pid, signal.SIGCONT)  # (a student's code may have stopped it)
            self.sock.settimeout(STARTUP_LIMIT)  # the first one waits for torch's import
            socket.send_fds(self.sock, [json.dumps([os.getpid(), *args]).encode()], theirs)
            pid = int(self.sock.recv(32) or 0)
        except (OSError, ValueError):
            pid = 0
        for fd in theirs:
            os.close(fd)
        if not pid:
            for fd in (pipes[0][1], pipes[1][0], pipes[2][0]):
                os.close(fd)
            self.close()
            return None
        return Forked(pid, os.fdopen(pipes[0][1], "wb"), os.fdopen(pipes[1][0], "rb"), os.fdopen(pipes[2][0], "rb"))

    def close(self):
        if self.proc is not None:
            self.sock.close()
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def start_zygote():
    """A Zygote where a fork can make the child this process's own (Linux), else None. (On a machine with a GPU the
    zygote ends at once, and each child is a fresh Python: zygote().)"""
    if not sys.platform.startswith("linux") or not _prctl(PR_SET_CHILD_SUBREAPER, 1):
        return None
    _prctl(PR_SET_CHILD_SUBREAPER, 0)  # (set while a child is checked: ChildProcess)
    try:
        return Zygote()
    except (OSError, AttributeError):  # AttributeError: a Python without socket.send_fds
        return None


class Forked:
    """What ChildProcess uses of a subprocess.Popen, for a forked child that this process adopted."""

    def __init__(self, pid, stdin, stdout, stderr):
        self.pid, self.stdin, self.stdout, self.stderr, self.returncode = pid, stdin, stdout, stderr, None

    def poll(self):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # waited for elsewhere
                pid, status = self.pid, 9  # (SIGKILL's status)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.005)
        return self.returncode

    def kill(self):
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def zygote(fd):
    """The zygote's whole life: import torch, then fork a child for each request until the checker closes the link.
    No other process of the user may read or write its memory (it is what every later child starts from)."""
    import json
    import socket
    _die_with_parent()
    _prctl(PR_SET_DUMPABLE, 0)
    load_torch()
    if torch.cuda.is_available():  # CUDA, once this asked for it, works in no forked child: a fresh Python each
        return
    sock = socket.socket(fileno=fd)
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 3)
        except OSError:
            return
        if not data:
            return
        if len(fds) != 3:
            sock.sendall(b"0")
            continue
        checker, *args = json.loads(data)
        told, tell = os.pipe()
        middle = os.fork()
        if middle == 0:
            sock.close()
            os.close(told)
            child = os.fork()
            if child:  # the middle process: it ends at once, so that the checker adopts the child
                os.write(tell, str(child).encode())
                os._exit(0)
            os.close(tell)
            while os.getppid() != checker:  # adopted: the checker is its parent, as if it had started it
                if os.getppid() == 1:
                    os._exit(1)
                time.sleep(0.001)
            os.setsid()
            for i, fd in enumerate(fds):
                os.dup2(fd, i)
            os.closerange(3, 1 << 16)  # the zygote's descriptors, as a fresh process has none of them
            _prctl(PR_SET_DUMPABLE, 1)  # as a fresh process is: the checker reads its memory use in /proc
            for name in ("random", "numpy.random"):  # seeded afresh, as in a fresh process, not as in every fork
                if name in sys.modules:
                    sys.modules[name].seed()
            sys.argv = ["-c", HERE, *args]
            serve(*args)
            sys.exit(0)
        os.close(tell)
        for fd in fds:
            os.close(fd)
        os.waitpid(middle, 0)
        pid = os.read(told, 32)
        os.close(told)
        sock.sendall(pid or b"0")


def run_isolated(exercise_dir, path, out=print, time_limit=None, exercise_limit=None, checks=None, why=None,
                 zygote=None):
    """run(), with the student's file imported only by a child process: its answers are data that the checks here
    judge, each request of a check within the check's time limit, the whole exercise within exercise_limit (seconds,
    default exercise_time_limit_of; none when time_limit is 0). Nothing the code does -- sys.exit(), os._exit(), a
    crash, printing "8/8 checks passed", reaching into this process's objects, which it cannot see -- makes a check
    pass; when the run ends, the child and every process it started are ended before this returns. checks: the
    exercise's checks, if already loaded (checks_of); why: as _run_checks'; zygote: the Zygote to fork the child
    from (None: a fresh Python)."""
    checks = checks_of(exercise_dir) if checks is None else checks  # before the student's code runs
    load_references()
    time_limit = time_limit_of(exercise_dir) if time_limit is None else time_limit
    if exercise_limit is None:
        exercise_limit = exercise_time_limit_of(exercise_dir) if time_limit else 0
    end = time.monotonic() + exercise_limit if exercise_limit else None
    watchdog = _watchdog()
    with tempfile.TemporaryDirectory() as tmp:
        link = ChildProcess(exercise_dir, path, os.path.join(tmp, "stacks.txt"), watchdog, zygote)
        link.grace = min(GRACE, time_limit) if time_limit else GRACE

        def step(name, index, total):
            limit = [time.monotonic() + time_limit] if time_limit else []
            link.deadline = min(limit + ([end] if end is not None else []), default=None)

        def connect():
            link.start(STARTUP_LIMIT)
            link.deadline = min([time.monotonic() + time_limit] + ([end] if end else [])) if time_limit else end
            link.request(("import", None, time_limit))
            return Student(link)

        def over(label):
            if end is None or time.monotonic() < end:
                return None
            what = f"at {label}" if label else "while your file was imported"
            return (f"the exercise did not finish within {exercise_limit:g} s (stopped {what}): a function far slower "
                    "than the exercise needs?")

        try:
            result = _run_checks(exercise_dir, path, out, time_limit, connect, step=step, over=over, checks=checks,
                                 why=why)
        finally:
            link.stop()
            if watchdog is not None:
                watchdog.stdin.close()
                watchdog.wait()
    out(summary(*result[:3]))
    return result


def _ended(exitcode, label, importing, function=None, place=""):
    """The line for a child process that ended without answering; function and place: where in the student's file
    it crashed, if faulthandler saw it."""
    what = "your file, while it was imported," if importing else f"{label} your code"
    if exitcode is not None and exitcode < 0:
        try:
            how = f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"signal {-exitcode}"
        where = f" in {function}{place}" if function and function != "<module>" else place
        return f"{what} crashed the process ({how}{where}) before the check finished."
    return (f"{what} ended the process (exit status {exitcode}) before the check finished: os._exit()? "
            f"A function must return its answer; leave ending the program to the checker.")


# ----------------------------------------------------------------------------
# Trained runs: exercises 08 and 11 measure two sink-lab runs, a baseline and G1, trained by the student with the two
# commands of the exercise's README.md into out/exercises/NN/ (the test suite points $EXERCISE_RUNS at toy-size ones).

RUN_FLAGS = {"baseline": "--gate=none ", "g1": ""}  # what the two train.py commands add; they differ in this only
# train.py settings that may differ between the two runs without changing what is trained
NOT_COMPARED = {"out_dir", "gate", "overwrite", "init_from", "eval_only", "wandb_log", "wandb_project",
                "wandb_run_name", "log_interval", "device", "dtype", "compile", "backend", "attn_backend"}


def runs_dir(number):
    """The folder holding exercise `number`'s runs, baseline/ and g1/."""
    return os.environ.get("EXERCISE_RUNS") or os.path.join(REPO, "out", "exercises", number)


def train_command(number, name):
    """The README's command that trains run `name` ("baseline" or "g1") of exercise `number`."""
    out_dir = os.path.join(runs_dir(number), name)
    rel = os.path.relpath(out_dir, REPO)
    return f"python train.py config/sink_lab.py {RUN_FLAGS[name]}--out_dir={out_dir if rel.startswith('..') else rel}"


def expect_trained_runs(number, where):
    """The two runs of exercise `number` exist, were trained on the sink lab's task to the same step, and differ only
    in the gate; NotImplementedError (not filled yet) while one is missing, with the command to train it (`where`:
    the README's place that gives the commands)."""
    from runfolder import CHECKPOINT, read_checkpoint
    again = "\n".join(f"          {train_command(number, name)} --overwrite=True" for name in RUN_FLAGS)
    configs = {}
    for name in RUN_FLAGS:
        path = os.path.join(runs_dir(number), name, CHECKPOINT)
        if not os.path.isfile(path):
            raise NotImplementedError(f"no trained {name} run at {path}: train it with\n"
                                      f"          {train_command(number, name)}\n"
                                      f"      (20 to 80 seconds on a 2-core CPU; README.md, {where})")
        try:
            checkpoint = read_checkpoint(path)
        except ValueError as e:
            raise Wrong(f"{e} Train it again: {train_command(number, name)} --overwrite=True") from None
        configs[name] = dict(checkpoint["config"], iter_num=checkpoint.get("iter_num"))
    base, g1 = configs["baseline"], configs["g1"]
    if base.get("dataset") != "bigram_backcopy" or g1.get("dataset") != "bigram_backcopy":
        raise Wrong(f"the runs were trained on {base.get('dataset')!r} and {g1.get('dataset')!r}: this exercise "
                    f"measures the sink lab's task, bigram_backcopy. Train both with config/sink_lab.py:\n{again}")
    if base["gate"] != "none" or g1["gate"] != "g1":
        swapped = " (the folders look swapped)" if base["gate"] == "g1" and g1["gate"] == "none" else ""
        raise Wrong(f"baseline/ was trained with gate={base['gate']!r} and g1/ with gate={g1['gate']!r}{swapped}: "
                    f"the baseline needs --gate=none, the G1 run the default gate (g1). Train them again:\n{again}")
    if base["iter_num"] != g1["iter_num"]:
        short = "baseline" if (base["iter_num"] or 0) < (g1["iter_num"] or 0) else "g1"
        raise Wrong(f"the runs stopped at different steps (baseline {base['iter_num']}, g1 {g1['iter_num']}): is the "
                    f"{short} run still training? Wait for its 'done:' line and check again. If it was interrupted, "
                    f"train it again:\n          {train_command(number, short)} --overwrite=True")
    differ = sorted(k for k in set(base) | set(g1) if k not in NOT_COMPARED and base.get(k) != g1.get(k))
    if differ:
        listed = ", ".join(f"{k} (baseline {base.get(k)!r}, g1 {g1.get(k)!r})" for k in differ[:4])
        raise Wrong(f"the two runs differ in more than the gate: {listed}. A comparison means one change: train both "
                    "with README.md's two commands, which differ only in --gate (add --overwrite=True to replace a "
                    "run).")
    from cli import dataset_dir
    from data.shards import find_shards, prepare_command
    data_dir = dataset_dir(base["dataset"], base.get("data_dir"))
    try:  # the windows the runs are measured on: the grader's to prepare, in a fresh copy (TEACHERS.md)
        prepared = bool(find_shards(data_dir, "val"))
    except ValueError as e:
        raise NotHere(str(e)) from None
    if not prepared:
        raise NotHere(f"the sink lab's task, which the runs are measured on, is not prepared in {data_dir}: make it "
                      f"with {prepare_command(data_dir, 'bigram_backcopy')} (a few seconds), then check again")


def run_batches(run_dir, batches):
    """(model, data_dir, [(x, y) batches]) of a trained run: its model on the CPU, and the first
    `batches` batches of its validation windows, as the starters' validation_windows draws them (the run's data,
    block and batch size, BOS first when it trained so)."""
    from cli import dataset_dir
    from runfolder import CHECKPOINT, load_checkpoint
    from data.shards import bos_token, val_batches
    model, checkpoint = load_checkpoint(os.path.join(run_dir, CHECKPOINT))
    cfg = checkpoint["config"]
    data_dir = dataset_dir(cfg["dataset"], cfg.get("data_dir"))
    bos = bos_token(data_dir) if cfg.get("bos", False) else None
    return model, data_dir, list(val_batches(data_dir, checkpoint["model_args"]["block_size"], cfg["batch_size"],
                                             batches, bos=bos))


# ----------------------------------------------------------------------------
# Hints: hints.md holds "## Hint 1", "## Hint 2", ... sections; --hint shows the next one not yet seen. How many each
# exercise's student has seen is kept in HINTS_SEEN (beside the exercises; a dot file, so a student copy starts at
# none) and goes into the grading result: a teacher sees who needed the answer.

HINTS_SEEN = os.path.join(HERE, ".hints-seen.json")


def hints_of(exercise_dir):
    """The exercise's hints, in order, as markdown texts (hints.md's "## Hint K" sections; [] without hints.md)."""
    try:
        with open(os.path.join(exercise_dir, "hints.md"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return []
    parts = re.split(r"^## Hint (\d+)[ \t]*$", text, flags=re.M)[1:]  # [number, body, number, body, ...]
    numbers = [int(n) for n in parts[0::2]]
    if numbers != list(range(1, len(numbers) + 1)):
        raise SystemExit(f"error: {os.path.relpath(exercise_dir)}/hints.md numbers its hints {numbers}, not 1, 2, ...")
    return [body.strip() for body in parts[1::2]]


def _hints_record(path=None):
    """{exercise id: hints seen} from HINTS_SEEN ({} if there is none, or it cannot be read)."""
    import json
    try:
        with open(path or HINTS_SEEN, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def hints_seen(exercise_dir, path=None, record=None):
    """How many of the exercise's hints have been shown (0 if none, or if the record cannot be read)."""
    seen = (_hints_record(path) if record is None else record).get(os.path.basename(exercise_dir)[:2], 0)
    return seen if isinstance(seen, int) else 0


def show_hint(exercise_dir, number=None, out=print, path=None):
    """Print hint `number` (default: the next one not yet seen; the last again once all are) and record it as seen.
    Returns the exit status."""
    import json
    from runfolder import atomic_write  # the project's own (REPO is on sys.path)
    hints, key = hints_of(exercise_dir), os.path.basename(exercise_dir)[:2]
    if not hints:
        out(f"exercise {key} has no hints (no {os.path.relpath(exercise_dir)}/hints.md)")
        return 1
    record = _hints_record(path)
    seen = hints_seen(exercise_dir, record=record)
    number = number if number is not None else min(seen + 1, len(hints))
    if not 1 <= number <= len(hints):
        raise SystemExit(f"error: exercise {key} has hints 1 to {len(hints)}, not {number}")
    if number > seen:  # recorded before it is shown: a hint piped into `head`, which closes the pipe, was asked for
        record[key] = number
        try:
            atomic_write(path or HINTS_SEEN, lambda f: f.write((json.dumps(record, indent=1) + "\n").encode("utf-8")))
        except OSError:  # a read-only checkout: the hint is shown all the same
            pass
    last = number == len(hints)
    out(f"Hint {number} of {len(hints)}, exercise {key} ({title_of(exercise_dir)})" +
        (": the last one, with the answer" if last else "") + "\n")
    out(hints[number - 1] + "\n")
    if last:
        out("That was the last hint. If your answer still fails, the check's message names the likely mistake; "
            "the exercise's README.md lists the usual ones under \"Help! I get ...\".")
    else:
        out(f"Try it, and check again. `python exercises/check.py {key} --hint` shows hint {number + 1}" +
            (", the last: it gives the answer." if number + 1 == len(hints) else
             f"; hint {len(hints)}, the last, gives the answer."))
    return 0


def hint_pointer(exercise_dir):
    """The line that tells a student where the next hint is, or '' (no hints, or all seen)."""
    hints, seen, key = hints_of(exercise_dir), hints_seen(exercise_dir), os.path.basename(exercise_dir)[:2]
    if not hints or seen >= len(hints):
        return ""
    return (f"Stuck? `python exercises/check.py {key} --hint` shows hint {seen + 1} of {len(hints)} "
            f"(one at a time; the last gives the answer).")


def title_of(exercise_dir):
    """The exercise's title: the first line of its README.md without '# ' and the number ('' if none)."""
    try:
        with open(os.path.join(exercise_dir, "README.md"), encoding="utf-8") as f:
            line = f.readline()
    except OSError:
        return ""
    return re.sub(r"^\d+\.\s*", "", line.lstrip("# ").strip())


# The status of an exercise in the grading result, from run_isolated's status.
GRADE_STATUS = {"ok": "passed", "wrong": "failed", "not filled": "not filled", "timeout": "timeout", "error": "error",
                "setup": "setup"}
RESULT_FILE = "check-result.json"


def shown_path(path):
    """path as short as it can be said from here, but never a path up and out of here (../../tmp/me.py): then as
    given (absolute)."""
    shown = os.path.relpath(path)
    return os.path.abspath(path) if shown == os.pardir or shown.startswith(os.pardir + os.sep) else shown


def file_digest(path, lf=False):
    """The SHA-256 of a file's bytes (None if it cannot be read): which file a verdict belongs to; lf: of its text
    with CRLF line ends read as LF."""
    import hashlib
    try:
        with open(path, "rb") as f:
            data = f.read()
        return hashlib.sha256(data.replace(b"\r\n", b"\n") if lf else data).hexdigest()
    except OSError:
        return None


def text_digest(path):
    """file_digest of a text file with its line ends as LF: a copy checked out with CRLF (Git on Windows) has the
    same text_digest."""
    return file_digest(path, lf=True)


def grade_entry(exercise_dir, result, seconds, digest=None, hints=None, checks_digest=None, reason=None):
    """One exercise's entry of the grading result, from run_isolated's (passed, total, status, failed); seconds: how
    long the checker took (named checker_seconds: no one's time on the exercise); digest: the SHA-256 of the file that
    was graded, as file_digest read it before its checks ran; hints: the record of hints seen, as read before any
    student code ran (which could rewrite it; None: read it now); checks_digest: the text_digest of the checks.py
    that graded it (the gradebook compares it with the teacher's); reason: what stopped it, as reason_of wrote it
    (None when it passed)."""
    passed, total, status, failed = result
    ok = status == "ok" and passed == total
    name = os.path.basename(exercise_dir)
    return {"id": name[:2], "name": name, "title": title_of(exercise_dir), "passed": passed, "total": total,
            "first_failing_check": None if ok else (failed or "import"), "reason": None if ok else reason,
            "checker_seconds": round(seconds, 1), "status": "passed" if ok else GRADE_STATUS.get(status, "error"),
            "hints_seen": hints_seen(exercise_dir, record=hints), "file_sha256": digest,
            "checks_sha256": checks_digest}


def score_table(entries):
    """The score table of grade_entry's entries, as lines."""
    rows = [("exercise", "checks", "first failing check", "status", "checker s")]
    rows += [(e["name"], f"{e['passed']}/{e['total']}", e["first_failing_check"] or "-", e["status"],
              f"{e['checker_seconds']:.1f}") for e in entries]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(w) if i in (1, 4) else cell.ljust(w) for i, (cell, w) in
                       enumerate(zip(row, widths))).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    done = sum(e["status"] == "passed" for e in entries)
    lines.append(f"{done}/{len(entries)} exercises passed, {sum(e['passed'] for e in entries)}/"
                 f"{sum(e['total'] for e in entries)} checks.")
    return lines


def grade_result(entries, date=None, student=None, checker_digest=None):
    """The grading result (a dict, as written to the JSON file) of grade_entry's entries; student: whose (None when
    not given); checker_digest: the text_digest of the check.py that graded them."""
    import platform
    from importlib import metadata
    try:
        torch_version = sys.modules["torch"].__version__ if "torch" in sys.modules else metadata.version("torch")
    except Exception:  # no torch installed: every entry says so already
        torch_version = None
    date = date or time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return {"student": student, "date": date, "python": platform.python_version(), "torch": torch_version,
            "seed": RUN_SEED, "passed": sum(e["status"] == "passed" for e in entries), "total": len(entries),
            "all_passed": bool(entries) and all(e["status"] == "passed" for e in entries), "exercises": entries,
            "checker_sha256": checker_digest}


# The result file carries a checksum of its content: a file changed after the checker wrote it (by hand, or by a
# program that does not recompute it) is told apart by `check.py --verify=FILE`. With CHECK_SIGNING_KEY set in the
# checker's environment (a teacher's secret; never passed to the student's process, and, on Linux, unreadable by
# other processes while the checker runs), the checksum is an HMAC that only the key's holder can make.
SIGNING_KEY_VAR = "CHECK_SIGNING_KEY"


def without_key():
    """This process's environment without the signing key: the environment of every process the checker starts (the
    student's, and the watchdog, whose environment any process of the same user could read), so that the key stays
    in this one."""
    return {k: v for k, v in os.environ.items() if k != SIGNING_KEY_VAR}


def seal(result, key=None):
    """The result's checksum: SHA-256 (or HMAC-SHA-256 with key) of its JSON without the "seal" entry."""
    import hashlib
    import hmac
    import json
    text = json.dumps({k: v for k, v in result.items() if k != "seal"}, sort_keys=True).encode("utf-8")
    if key:
        return "hmac-sha256:" + hmac.new(key.encode("utf-8"), text, hashlib.sha256).hexdigest()
    return "sha256:" + hashlib.sha256(text).hexdigest()


def write_result(path, result, key=None):
    """Write the grading result to path as JSON, sealed (see seal), atomically: a kill leaves the previous file or the
    whole new one."""
    import json
    from runfolder import atomic_write  # the project's own (REPO is on sys.path): a copy's, in a student copy
    result = dict(result, seal=seal(result, key))
    text = json.dumps(result, indent=2) + "\n"
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def read_sealed(path, key=None):
    """(result, problems): the result file at path (None if it cannot be read as one) and the problems with its seal,
    as lines ([]: it is as the checker wrote it). A sealed file needs the same key it was sealed with. Files written
    before the "student" and "checker_seconds" fields verify as well: the seal covers whatever the file holds."""
    import json
    try:
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: JSON nested deeper than Python parses
        return None, [f"{path} cannot be read as a result file: {type(e).__name__}: {str(e)[:200]}"]
    if not (isinstance(result, dict) and isinstance(result.get("seal"), str)
            and isinstance(result.get("exercises"), list) and all(isinstance(e, dict) for e in result["exercises"])):
        return None, [f"{path} has no seal, or is not laid out as a result file: not one this checker wrote"]
    problems = []
    signed = result["seal"].startswith("hmac-")
    if signed and not key:
        problems.append(f"{path} is signed: set {SIGNING_KEY_VAR} to the key it was graded with to verify it")
    elif key and not signed:  # with a key, only a signature counts: anyone can compute a plain checksum
        problems.append(f"{path} is not signed with {SIGNING_KEY_VAR}: it was not graded with the key, or was "
                        "changed after")
    elif result["seal"] != seal(result, key):
        problems.append(f"{path} was changed after the checker wrote it (its seal does not match its content)" +
                        (", or it was signed with another key" if signed else ""))
    return result, problems


def changed_starters(result, exercises=HERE):
    """The problems with the graded files: each exercise's starter.py under `exercises` whose SHA-256 is not the one
    recorded (a missing starter.py is not checked)."""
    problems = []
    for entry in result["exercises"]:
        folder = os.path.join(exercises, os.path.basename(str(entry.get("name"))))
        recorded, now = entry.get("file_sha256"), file_digest(os.path.join(folder, "starter.py"))
        if recorded and now and recorded != now:
            problems.append(f"exercise {entry.get('id')}: starter.py changed since it was graded "
                            f"({os.path.relpath(os.path.join(folder, 'starter.py'))})")
    return problems


def verify_result(path, key=None):
    """The problems with the result file at path, as lines ([]: it is as the checker wrote it, and every graded file
    still has the recorded SHA-256). A sealed file needs the same key it was sealed with."""
    result, problems = read_sealed(path, key)
    return problems + (changed_starters(result) if result is not None else [])


def grade(exercise_dirs, result_path=RESULT_FILE, time_limit=None, out=print, student=None, zygote=None):
    """Run every exercise in exercise_dirs on its starter.py, one child process each (run_isolated; forked from
    zygote, if given, which is ended before the result is written), print each one's failures and summary, then a
    score table; write the JSON result, for `student` (None: not given), to result_path. Returns the exit status: 0
    only when every exercise passed."""
    result_path = os.path.abspath(result_path)  # where the command was given, whatever the checks do
    key = os.environ.pop(SIGNING_KEY_VAR, None) or None  # from here on, in this process's memory alone: no process
    #                                                      it starts (the student's, git, a compiler) inherits it
    previous = verify_result(result_path, key)[:1] if os.path.exists(result_path) else []
    if previous and "changed after" in previous[0] and "another key" not in previous[0]:
        out(f"note: the previous {os.path.relpath(result_path)} was changed after the checker wrote it; it is "
            "replaced now")
    if key and hasattr(os, "geteuid") and os.geteuid() == 0:  # as root, nothing is closed to the student's code
        out(f"warning: grading as root with {SIGNING_KEY_VAR}: the student's code runs as root too and can read the "
            "key, so a signed file proves nothing; grade as an ordinary user (exercises/TEACHERS.md in the project's "
            "own checkout, 'Grading the files yourself').")
    hooks = startup_files(user_only=True)
    if hooks:  # rarely the user's own: say so before a grade depends on them
        out(f"note: Python runs start-up files from this account's own site-packages: {', '.join(hooks)}. If you "
            "did not put them there, code graded earlier in this account may have: delete them and grade again.")
    # Before any student code runs, which could edit them: every exercise's checks loaded, and the digests of the
    # files that decide a verdict or are graded (a file graded later, changed by an earlier one, is no student's).
    loaded = {d: checks_of(d) for d in exercise_dirs}
    before = checker_digests()
    hints = _hints_record()  # (not a .py file: the student's code could rewrite it, so it is read now)
    checks = {d: text_digest(os.path.join(d, "checks.py")) for d in exercise_dirs}  # what grades, line ends aside
    checker = text_digest(os.path.join(HERE, "check.py"))
    entries = []
    for exercise_dir in exercise_dirs:
        name = os.path.basename(exercise_dir)
        out(f"== {name}: {title_of(exercise_dir)}")
        started = time.monotonic()
        starter = os.path.join(exercise_dir, "starter.py")
        digest = before.get(os.path.relpath(starter, REPO))

        def compact(line, prefix=f"  [{name[:2]}."):
            if not (line.startswith(prefix) and "] ok: " in line) and not line.startswith("checking "):
                out(line)
        why = []  # what stopped it, in the result file for the gradebook (reason_of)
        try:
            result = run_isolated(exercise_dir, starter, out=compact, time_limit=time_limit,
                                  checks=loaded[exercise_dir], why=why, zygote=zygote)
        except Exception as e:  # the checker's own trouble (cannot start a process...): this exercise only
            out(f"  the checker failed: {type(e).__name__}: {e}")
            result, why = (0, 0, "error", None), [reason_of(f"the checker failed: {type(e).__name__}: {e}")]
        after = checker_digests()
        changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
        if changed:  # this verdict came from what was loaded before; the next exercise's might not
            out(f"  your code changed the checker's, the project's or the exercises' files ({', '.join(changed[:3])}"
                "): this exercise counts as failed, and grading stops. Restore them: from a fresh copy of the files you "
                "were given (or git checkout, in a git repository).")
            for path in (p for p in changed if os.path.isabs(p) and os.path.exists(p)):  # a start-up file
                out(f"  {path} runs in every Python of this account from now on: delete it before anything else "
                    "runs, and grade no one else in this account before you have")
            result, why = (0, result[1], "error", "changed the checker's files"), [reason_of(", ".join(changed))]
        entries.append(grade_entry(exercise_dir, result, time.monotonic() - started, digest, hints,
                                   checks[exercise_dir], why[0] if why else None))
        if changed:
            break
    if zygote is not None:
        zygote.close()
    out("")
    for line in score_table(entries):
        out(line)
    result = grade_result(entries, student=student, checker_digest=checker)
    try:
        write_result(result_path, result, key)
    except Exception as e:
        out(f"error: could not write the result to {result_path}: {type(e).__name__}: {e}")
        return 1
    problems = verify_result(result_path, key)  # no process of the student's is left to change it, but say if one did
    if problems:
        out(f"error: {problems[0]}")
        return 1
    out(f"result written to {shown_path(result_path)}" + (" (signed)" if key else "") +
        (f" for {student}" if student else ""))
    if not student:
        out("note: no --student=NAME_OR_ID given, so the file names no one: your teacher will need it "
            "(run it again with --student=...)")
    return 0 if result["all_passed"] else 1


def checker_digests():
    """{path: SHA-256} of the Python files that decide a verdict or are graded: this file, every checks.py and
    starter.py (and any other file of exercises/), the core's modules, data/ and lab/ (new ones included); and of
    Python's start-up files (startup_files), by their full paths."""
    paths = []
    for pattern in ("*.py", "exercises/**/*.py", "data/**/*.py", "lab/**/*.py"):
        paths += glob.glob(os.path.join(REPO, pattern), recursive=True)
    return {**{os.path.relpath(p, REPO): file_digest(p) for p in sorted(set(paths))},
            **{p: file_digest(p) for p in startup_files()}}


def startup_files(user_only=False):
    """The files Python runs whenever it starts (site's *.pth, sitecustomize.py, usercustomize.py) in the folders it
    looks in: every folder on sys.path, the site-packages folders and the user's own (PYTHONUSERBASE's), which need
    not exist yet. A student's code that wrote one would run in every later Python of the account, the next
    checker's included, before anything here could refuse it. user_only: the user's site-packages alone."""
    import site
    user = site.getusersitepackages()
    folders = {user} if user_only else {user, *site.getsitepackages(), *(p for p in sys.path if p)}
    paths = set()
    for folder in folders:
        for name in ("*.pth", "sitecustomize.py", "usercustomize.py"):
            paths.update(glob.glob(os.path.join(glob.escape(folder), name)))
    return sorted(paths)


REFERENCES = ("numpy", "model", "kernels", "probe", "runfolder", "cli", "data.shards", "triton")


def load_references():
    """Import the modules the checks compare with, before any student code runs (which could edit them on disk)."""
    for name in REFERENCES:
        try:
            importlib.import_module(name)
        except Exception:  # not installed (Triton) or not in this copy: the check that needs it says so
            pass


MAX_SEED = 10**9


def draw_run_seed():
    """RUN_SEED for a command-line run: $CHECK_SEED (to repeat a run's inputs: the result file records the seed),
    else a random one."""
    import secrets
    global RUN_SEED
    RUN_SEED = int(os.environ["CHECK_SEED"]) if os.environ.get("CHECK_SEED") else secrets.randbelow(10**6) * 1000


def check_settings():
    """The environment's settings of the checker, each refused in one line when it cannot be meant."""
    memory, seed = os.environ.get("CHECK_MEMORY_GB"), os.environ.get("CHECK_SEED")
    try:
        ok = not memory or 0.05 <= float(memory) <= 2**20
    except ValueError:
        ok = False
    if not ok:
        raise SystemExit(f"error: CHECK_MEMORY_GB={memory!r}: the student's process's memory limit in GiB, a number "
                         "from 0.05 up (leave it unset for half the machine's memory, at most 8 GiB)")
    if seed and not (seed.isdigit() and int(seed) < MAX_SEED):
        raise SystemExit(f"error: CHECK_SEED={seed!r}: the seed of the checks' inputs, a whole number from 0 to "
                         f"{MAX_SEED - 1} (a result file records the one it was graded with)")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if argv[0].startswith("--verify="):
        if argv[0] == "--verify=" or len(argv) > 1:
            raise SystemExit("error: --verify=RESULT checks one result file, e.g. "
                             "`check.py --verify=check-result.json`")
        problems = verify_result(argv[0][len("--verify="):], os.environ.get(SIGNING_KEY_VAR) or None)
        for line in problems:
            print(f"error: {line}")
        if problems and all("starter.py changed since" in line for line in problems):
            print(f"note: the result file itself is as the checker wrote it; the starter.py files compared are those "
                  f"of {REPO}: to check a student's, put them in a fresh copy (python exercises/make_student_copy.py "
                  "DEST --work=FOLDER) and run --verify there, never with the student's own check.py")
        if not problems:
            print(f"{argv[0][len('--verify='):]} is as the checker wrote it, and every graded starter.py is unchanged")
        return 1 if problems else 0
    if argv[0] == "--list":
        for d in exercise_dirs():
            print(f"{os.path.basename(d):28s} {title_of(d)}")
        for d in not_exercises():
            print(f"note: {os.path.relpath(d)} has no checks.py: it is no exercise, and is not graded")
        return 0
    names, path, time_limit, result_path, hint, student = [], None, None, None, False, None
    for arg in argv:
        if arg.startswith("--file="):
            path = arg[len("--file="):]
            if not path:  # else the exercise's starter.py, checked in place of the file meant
                raise SystemExit("error: --file= needs a file name, e.g. --file=my_attempt.py")
        elif arg.startswith("--timeout="):
            try:
                time_limit = float(arg[len("--timeout="):])
            except ValueError:
                time_limit = -1
            if not 0 <= time_limit <= 86400:
                raise SystemExit(f"error: {arg!r}: the time limit is a number of seconds, at most a day (0: none)")
        elif arg.startswith("--result="):
            result_path = arg[len("--result="):]
            if not result_path:
                raise SystemExit("error: --result= needs a file name")
        elif arg.startswith("--student="):
            student = arg[len("--student="):].strip()
            if not student or len(student) > 100 or not student.isprintable():
                raise SystemExit(f"error: {arg!r}: --student= takes your name or student ID as your teacher asked "
                                 "for it: one line of at most 100 characters")
        elif arg == "--hint" or arg.startswith("--hint="):
            hint = True if arg == "--hint" else arg[len("--hint="):]
            if hint is not True and not hint.isdigit():
                raise SystemExit(f"error: {arg!r}: --hint shows the next hint, --hint=K hint K (a number)")
        elif arg.startswith("-"):
            raise SystemExit(f"error: unknown argument {arg!r}; use --file=PATH, --timeout=SECONDS, --result=PATH, "
                             f"--student=NAME_OR_ID, --hint or --verify=RESULT")
        else:
            names.append(arg)
    if not names:
        raise SystemExit("error: which exercise? e.g. `check.py 01`, `check.py 01 03` or `check.py all`")
    if path is not None and path.endswith(".ipynb"):
        raise SystemExit(f"error: --file={path} is a notebook: the checker reads Python source; save the code as a .py "
                         "file (Jupyter: File > Save and Export Notebook As > Executable Script)")
    if result_path is not None and (os.path.isdir(result_path) or not os.path.isdir(
            os.path.dirname(os.path.abspath(result_path)))):  # said now, not after minutes of grading
        raise SystemExit(f"error: --result={result_path} must name a file in a folder that exists, e.g. "
                         "--result=ID.json")
    dirs = exercise_dirs() if names == ["all"] else [find_exercise(n) for n in names]
    twice = sorted({os.path.basename(d) for d in dirs if dirs.count(d) > 1})
    if twice:  # `check.py 01 01 01` would score "3/3 exercises passed" for one exercise
        raise SystemExit(f"error: {', '.join(twice)} named more than once: each exercise is graded once, e.g. "
                         "`check.py 01 03` or `check.py all`")
    grading = len(dirs) > 1 or names == ["all"] or result_path is not None
    if names == ["all"]:
        for d in not_exercises():
            print(f"note: {os.path.relpath(d)} has no checks.py: it is no exercise, and is not graded (an exercise "
                  "emptied? a fresh copy has it)")
    if student is not None and (hint or not grading):
        raise SystemExit("error: --student= names whose result file it is: use it when grading, e.g. "
                         "`check.py all --student=ID --result=ID.json`")
    if hint:
        if len(dirs) != 1 or names == ["all"]:
            raise SystemExit("error: --hint is for one exercise, e.g. `check.py 05 --hint`")
        return show_hint(dirs[0], None if hint is True else int(hint))
    if grading and path is not None:
        raise SystemExit("error: --file= checks one exercise; grading runs each exercise's starter.py")
    path = None if grading else path or os.path.join(dirs[0], "starter.py")
    if path is not None and not os.path.isfile(path):
        raise SystemExit(f"error: {path} is a folder: --file= names the file to check, e.g. {dirs[0]}/starter.py"
                         if os.path.isdir(path) else f"error: no file {path}")
    zygote = start_zygote()  # first: it imports torch while this process does
    try:
        return check_or_grade(dirs, path, grading, result_path, time_limit, student, zygote)
    finally:
        if zygote is not None:
            zygote.close()


def check_or_grade(dirs, path, grading, result_path, time_limit, student, zygote):
    """The command line's work once its arguments are read: grade dirs, or check the file at path (dirs[0])."""
    try:
        load_torch()  # here, before the first check: a Ctrl-C while it loads is caught below
    except ImportError as e:
        raise SystemExit(f"error: torch does not import here ({e}): set up the project as its README says, then "
                         "`python -m lab.setup_check` says what is missing") from None
    if grading:
        return grade(dirs, result_path or RESULT_FILE, time_limit, out=lambda line: print(line, flush=True),
                     student=student, zygote=zygote)
    exercise_dir = dirs[0]
    passed, total, status, _ = run_isolated(exercise_dir, path, out=lambda line: print(line, flush=True),
                                            time_limit=time_limit, zygote=zygote)
    ok = status == "ok" and passed == total
    pointer = "" if ok or status == "setup" else hint_pointer(exercise_dir)  # setup: the machine's, not a hint's
    if pointer:
        print(pointer)
    return 0 if ok else 1


class ImportGuard:
    """Once student code may have run (the command line installs it first thing), this process imports no file that
    was created or changed since it started: a student's process could have written one where an import would find
    it (a module named as an optional dependency of torch's, in a folder on sys.path, or an edited project file). A
    new or changed source is refused (ImportError, which a check reports as a failure, never a pass); a bytecode
    cache written since is not trusted, and the unchanged source is compiled instead. A file's change time (ctime)
    cannot be set back by its owner."""

    def __init__(self):
        self.since = time.time()

    def newer(self, path):
        try:
            return os.stat(path).st_ctime >= self.since
        except OSError:
            return False

    def find_spec(self, name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        origin = spec and spec.origin
        if not origin or not os.path.isfile(origin):
            return None  # built in, frozen, a namespace package: no file of anyone's
        if self.newer(origin):
            raise ImportError(f"the checker does not import {origin}: it was created or changed after the checker "
                              "started (by the code being checked?)")
        if spec.cached and isinstance(spec.loader, importlib.machinery.SourceFileLoader) and self.newer(spec.cached):
            spec.loader = SourceOnly(spec.loader.name, spec.loader.path)
        return spec


class SourceOnly(importlib.machinery.SourceFileLoader):
    """Loads a module from its source, never from a bytecode cache (ImportGuard: one written after it started)."""

    def get_code(self, fullname):
        return compile(self.get_data(self.path), self.path, "exec", dont_inherit=True)


def _terminated(signum, frame):
    raise KeyboardInterrupt  # unwinds through run_isolated, which ends the student's processes on its way out


def protect_checker():
    """The command line's process, which decides: on Linux no other process of the user (root aside) may read its
    memory or environment (the signing key) or attach a debugger to it; it imports no file changed since it started
    (ImportGuard); SIGTERM and SIGHUP end the student's processes before this one ends."""
    _prctl(PR_SET_DUMPABLE, 0)
    sys.meta_path.insert(0, ImportGuard())
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, _terminated)


if __name__ == "__main__":
    try:  # all of it: a Ctrl-C while it starts is this one line too
        protect_checker()
        check_settings()
        draw_run_seed()
        status = main()
        sys.stdout.flush()  # here, where a closed pipe is caught below, not as Python exits
        sys.exit(status)
    except KeyboardInterrupt:
        print(STOPPED, file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:  # `check.py --list | head`: the reader stopped reading; nothing more to say to it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that exiting flushes into nothing
        sys.exit(1)

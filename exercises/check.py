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
    python exercises/check.py 01 03 05 --result=r.json  # some of them, the result file written to r.json

Each exercise folder holds README.md (the statement), starter.py (your file: fill the gaps marked TODO), hints.md
(the hints, which --hint shows one at a time, each saying more than the one before, the last the answer) and
checks.py (the checks, in order: shapes first, then invariants, then traps for the usual mistakes, then numbers
against the project's own code). A gap you have not filled yet raises NotImplementedError, which is reported
as "not filled yet", not as a crash. Exit status: 0 when every check passes, 1 otherwise.

Grading (`all`, a list of exercises, or --result=PATH): the exercises run one after another, each in a child process
of its own, under the same limits per check and one for the whole exercise (EXERCISE_TIME_LIMIT); each prints its
failures and summary (not its passing checks), then a score table, and a JSON result (default check-result.json in
the current folder, written atomically) that a teacher can collect: one entry per exercise (id, title, passed,
total, first_failing_check, seconds, status: passed / failed / not filled / timeout / error, hints_seen) with the
date and the Python and torch versions. Exit status: 0 only when every exercise passes.

Your code runs in a child process, one check at a time under a time limit (TIME_LIMIT seconds, more for the slow
exercises: TIME_LIMITS). This process only watches it: the verdict is what the child reports, check by check, over a
pipe of its own, tagged with a token your code never sees -- never anything it prints or its exit status. So a
function that loops forever is stopped and named, and one that calls sys.exit(), exit() or os._exit() fails the
check it was in, as does one that crashes the interpreter.

A check is a function `check_<name>(student)` in checks.py, with a docstring that says what it checks; it
receives your file as a module and raises Wrong("...") with the likely cause when the answer is wrong.
"""

import faulthandler
import glob
import importlib.util
import multiprocessing
import multiprocessing.connection
import os
import re
import secrets
import signal
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)  # the exercises use the core's modules (model.py, probe.py, kernels.py...) as references
if __name__ != "__main__":  # where checks run (the child process, or an import of this file); the command line
    import torch            # only watches them, and importing torch there too would cost every check a second or two
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


class Wrong(AssertionError):
    """A check failed: the message says what was expected and the likely cause, never the expected values."""


def same(a, b, tol=1e-8):
    """Whether a is a tensor of b's shape equal to b within tol (absolute and relative), compared in float64 on the
    CPU: how a check recognises one known wrong answer."""
    return (isinstance(a, torch.Tensor) and a.shape == b.shape and bool(torch.isfinite(a).all())
            and bool(torch.allclose(a.detach().double().cpu(), b.detach().double().cpu(), atol=tol, rtol=tol)))


def random_qk(B=2, H=3, T=12, D=8, seed=0, dtype=None):
    """Seeded random queries and keys (B, H, T, D), float64 unless dtype says otherwise."""
    g = torch.Generator().manual_seed(seed)
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
    return sorted(d for d in glob.glob(os.path.join(HERE, "[0-9][0-9]_*")) if os.path.isdir(d))


def find_exercise(number):
    number = f"{int(number):02d}" if str(number).isdigit() else str(number)
    for d in exercise_dirs():
        if os.path.basename(d).startswith(number + "_") or os.path.basename(d) == number:
            return d
    names = ", ".join(os.path.basename(d) for d in exercise_dirs())
    raise SystemExit(f"error: no exercise {number!r}; the exercises are {names}")


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look a module up by name
    spec.loader.exec_module(module)
    return module


def checks_of(exercise_dir):
    """The exercise's checks, in the order checks.py defines them."""
    module = load_module(os.path.join(exercise_dir, "checks.py"), f"checks_{os.path.basename(exercise_dir)}")
    return [(name[len("check_"):], fn) for name, fn in vars(module).items()
            if name.startswith("check_") and callable(fn)]


class TimeLimit(BaseException):
    """A check ran past its time limit. A BaseException, so that an `except Exception` in your code lets it through."""


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
            signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc):
        if self.seconds:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)


def _student_frame(exc, path):
    """The innermost frame of the student's file in exc's traceback, or None."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.abspath(f.filename) == os.path.abspath(path)]
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
    """Where in the student's file the exception came from: ' (file line N: code)', or '' if not from there."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.abspath(f.filename) == os.path.abspath(path)]
    if not frames:
        return ""
    return f" ({os.path.basename(path)} line {frames[-1].lineno}" + (f": {frames[-1].line})" if code else ")")


def summary(passed, total, status):
    return f"{passed}/{total} checks passed" + (" -- well done." if status == "ok" else ".")


def run(exercise_dir, path, out=print, time_limit=None):
    """Run the checks of exercise_dir on the file at path, in this process; returns (passed, total, status, failed):
    status is one of 'ok', 'not filled', 'wrong', 'error', 'timeout'; failed is the name of the check that stopped it
    (None if none did). time_limit: seconds a check may run (default time_limit_of(exercise_dir); 0: no limit).
    Student code can end this process (os._exit): the command line calls run_isolated, which cannot be fooled."""
    result = _run_checks(exercise_dir, path, out, time_limit)
    out(summary(*result[:3]))
    return result


def _run_checks(exercise_dir, path, out, time_limit=None, step=lambda name, index, total: None):
    """run() without the summary line; step(name, index, total) is called as each check (name None: the import of
    the student's file) begins."""
    time_limit = time_limit_of(exercise_dir) if time_limit is None else time_limit
    checks = checks_of(exercise_dir)
    number = os.path.basename(exercise_dir)[:2]
    out(f"checking {os.path.relpath(path)} against exercise {os.path.basename(exercise_dir)}")
    step(None, 0, len(checks))
    try:
        with _Alarm(time_limit):
            student = load_module(path, f"student_{number}")
    except NotImplementedError as e:
        out(f"  not filled yet: {e}")
        return 0, len(checks), "not filled", None
    except TimeLimit as e:
        frame = _student_frame(e, path)
        out(f"  importing your file {_stuck(time_limit, frame and frame.name, _where(e, path))}")
        return 0, len(checks), "timeout", None
    except SystemExit as e:
        out(f"  {_exited(e, path, importing=True)}")
        return 0, len(checks), "error", None
    except Exception as e:
        out(f"  your file does not import: {type(e).__name__}: {e}{_where(e, path)}")
        return 0, len(checks), "error", None
    status, failed = "ok", None
    for passed, (name, fn) in enumerate(checks):
        what = (fn.__doc__ or name).strip().splitlines()[0]
        step(name, passed, len(checks))
        try:
            with _Alarm(time_limit):
                fn(student)
        except TimeLimit as e:
            frame = _student_frame(e, path)
            out(f"  [{number}.{name}] {_stuck(time_limit, frame and frame.name, _where(e, path))}")
            status = "timeout"
        except SystemExit as e:
            out(f"  [{number}.{name}] {_exited(e, path)}")
            status = "error"
        except NotImplementedError as e:
            out(f"  [{number}.{name}] not filled yet: {e}{_where(e, path, code=False)}")
            status = "not filled"
        except AssertionError as e:  # Wrong, or a plain assert in checks.py
            out(f"  [{number}.{name}] FAILED: {what}\n      {e}")
            status = "wrong"
        except Exception as e:
            out(f"  [{number}.{name}] your code raised {type(e).__name__}: {e}{_where(e, path)}")
            status = "error"
        else:
            out(f"  [{number}.{name}] ok: {what}")
            continue
        failed = name
        break
    else:
        passed = len(checks)
    return passed, len(checks), status, failed


def _child(connection, token, exercise_dir, path, time_limit, stack_file):
    """The child process of run_isolated: runs the checks and reports each step on connection, tagged with token.
    Should a check outlive its alarm (stuck inside C code, or the student's code caught TimeLimit), faulthandler
    writes every thread's stack to stack_file just before the parent kills the process: the parent reads there
    which of the student's functions did not return."""
    def send(*message):
        sys.stdout.flush()  # what the student's code printed appears before the checker's next line
        sys.stderr.flush()
        connection.send((token,) + message)

    stacks = open(stack_file, "w", encoding="utf-8")
    faulthandler.enable(file=stacks)  # a crash (segmentation fault...) writes the stack there too

    def step(name, index, total):
        if time_limit:
            faulthandler.dump_traceback_later(time_limit + min(GRACE, time_limit) / 2, file=stacks)
        send("step", name, index, total)

    result = _run_checks(exercise_dir, path, lambda line: send("line", line), time_limit, step)
    faulthandler.cancel_dump_traceback_later()
    send("result", *result)
    connection.close()


def _stuck_in(stack_file, path):
    """(function, place) of the innermost frame of the student's file in faulthandler's dump, or (None, '')."""
    try:
        with open(stack_file, encoding="utf-8", errors="replace") as f:
            dump = f.read()
    except OSError:
        return None, ""
    for file, line, function in re.findall(r'File "(.*)", line (\d+) in (\S+)', dump):  # innermost first
        if os.path.abspath(file) == os.path.abspath(path):
            try:
                with open(path, encoding="utf-8") as f:
                    code = f.read().splitlines()[int(line) - 1].strip()
            except (OSError, IndexError):
                code = ""
            return function, f" ({os.path.basename(path)} line {line}" + (f": {code})" if code else ")")
    return None, ""


STARTUP_LIMIT = 120  # seconds for the child to import torch and the checks, before the first check starts


def run_isolated(exercise_dir, path, out=print, time_limit=None, exercise_limit=None):
    """run(), with the student's code in a child process that this one watches: a check past its time limit is
    stopped, and nothing the code does -- sys.exit(), os._exit(), a crash, printing "8/8 checks passed" -- can make
    the result a pass. The result is only what the child reported, check by check, on a pipe of its own, each
    message tagged with a token made here for this run; the summary line is printed here.
    exercise_limit: seconds for the whole run, the child's start included (default exercise_time_limit_of; none
    when time_limit is 0)."""
    time_limit = time_limit_of(exercise_dir) if time_limit is None else time_limit
    if exercise_limit is None:
        exercise_limit = exercise_time_limit_of(exercise_dir) if time_limit else 0
    end = time.monotonic() + exercise_limit if exercise_limit else None
    number = os.path.basename(exercise_dir)[:2]
    token = secrets.token_hex(16)
    context = multiprocessing.get_context("spawn")  # a fresh interpreter, on every platform
    receive, send = context.Pipe(duplex=False)
    with tempfile.TemporaryDirectory() as tmp:
        stack_file = os.path.join(tmp, "stacks.txt")
        child = context.Process(target=_child, args=(send, token, exercise_dir, path, time_limit, stack_file),
                                daemon=True)
        child.start()
        send.close()  # the child holds the only writing end: when it ends, receive reads end-of-file
        name, passed, total, started, result = None, 0, 0, False, None
        deadline = time.monotonic() + STARTUP_LIMIT
        try:
            while result is None:
                limits = ([] if started and not time_limit else [deadline]) + ([end] if end is not None else [])
                wait = max(0.0, min(limits) - time.monotonic()) if limits else None
                if not multiprocessing.connection.wait([receive, child.sentinel], wait):
                    child.kill()
                    if end is not None and time.monotonic() >= end:
                        child.join()
                        what = f"at [{number}.{name}]" if name else ("while your file was imported" if started
                                                                      else "before the checks started")
                        out(f"  the exercise did not finish within {exercise_limit:g} s (stopped {what}): "
                            f"a function far slower than the exercise needs?")
                        result = (passed, total, "timeout", name)
                        break
                    if not started:
                        out(f"  the checks did not start within {STARTUP_LIMIT} s (importing torch and checks.py)")
                        result = (0, total, "error", None)
                        break
                    child.join()
                    function, place = _stuck_in(stack_file, path)
                    what = f"[{number}.{name}]" if name else "importing your file"
                    out(f"  {what} {_stuck(time_limit, function, place)} It was stopped.")
                    result = (passed, total, "timeout", name)
                    break
                try:
                    message = receive.recv() if receive.poll() else None
                except EOFError:
                    message = None
                if message is None:  # the child ended without a result
                    child.join(GRACE)
                    out("  " + _ended(child.exitcode, number, name, started, *_stuck_in(stack_file, path)))
                    result = (passed, total, "error", name)
                    break
                if not (isinstance(message, tuple) and len(message) > 1 and message[0] == token):
                    continue  # not from the checker
                kind, *body = message[1:]
                if kind == "line":
                    out(*body)
                elif kind == "step":
                    name, passed, total = body
                    started = True
                    deadline = time.monotonic() + time_limit + min(GRACE, time_limit)
                elif kind == "result":
                    result = tuple(body)
        finally:
            child.join(GRACE if result is not None else 0)
            if child.is_alive():  # it hangs after reporting (a thread of the student's), or this one was interrupted
                child.kill()
                child.join()
            receive.close()
    out(summary(*result[:3]))
    return result


def _ended(exitcode, number, name, started, function=None, place=""):
    """The diagnosis of a child process that ended without reporting a result; function and place: where in the
    student's file it crashed, if faulthandler saw it."""
    if not started:
        return f"the checks could not start (exit status {exitcode}): see the error above."
    what = f"[{number}.{name}] your code" if name else "your file, while it was imported,"
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
                                      f"      (15 to 25 seconds on an idle laptop CPU; README.md, {where})")
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
        raise Wrong(f"the runs stopped at different steps (baseline {base['iter_num']}, g1 {g1['iter_num']}): was the "
                    f"{short} run interrupted? Train it again:\n          {train_command(number, short)} "
                    f"--overwrite=True")
    differ = sorted(k for k in set(base) | set(g1) if k not in NOT_COMPARED and base.get(k) != g1.get(k))
    if differ:
        listed = ", ".join(f"{k} (baseline {base.get(k)!r}, g1 {g1.get(k)!r})" for k in differ[:4])
        raise Wrong(f"the two runs differ in more than the gate: {listed}. A comparison means one change: train both "
                    "with README.md's two commands, which differ only in --gate (add --overwrite=True to replace a "
                    "run).")


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
    last = number == len(hints)
    out(f"Hint {number} of {len(hints)}, exercise {key} ({title_of(exercise_dir)})" +
        (": the last one, with the answer" if last else "") + "\n")
    out(hints[number - 1] + "\n")
    if last:
        out("That was the last hint. If your answer still fails, the check's message names the likely mistake; "
            "the exercise's README.md lists the usual ones under \"Help! I get ...\".")
    else:
        out(f"Try it, and check again. `python exercises/check.py {key} --hint` shows hint {number + 1}; "
            f"hint {len(hints)}, the last, gives the answer.")
    if number > seen:
        record[key] = number
        try:
            atomic_write(path or HINTS_SEEN, lambda f: f.write((json.dumps(record, indent=1) + "\n").encode("utf-8")))
        except OSError:  # a read-only checkout: the hint is shown all the same
            pass
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
GRADE_STATUS = {"ok": "passed", "wrong": "failed", "not filled": "not filled", "timeout": "timeout", "error": "error"}
RESULT_FILE = "check-result.json"


def grade_entry(exercise_dir, result, seconds):
    """One exercise's entry of the grading result, from run_isolated's (passed, total, status, failed)."""
    passed, total, status, failed = result
    ok = status == "ok" and passed == total
    name = os.path.basename(exercise_dir)
    return {"id": name[:2], "name": name, "title": title_of(exercise_dir), "passed": passed, "total": total,
            "first_failing_check": None if ok else (failed or "import"),
            "seconds": round(seconds, 1), "status": "passed" if ok else GRADE_STATUS.get(status, "error"),
            "hints_seen": hints_seen(exercise_dir)}


def score_table(entries):
    """The score table of grade_entry's entries, as lines."""
    rows = [("exercise", "checks", "first failing check", "status", "seconds")]
    rows += [(e["name"], f"{e['passed']}/{e['total']}", e["first_failing_check"] or "-", e["status"],
              f"{e['seconds']:.1f}") for e in entries]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(w) if i in (1, 4) else cell.ljust(w) for i, (cell, w) in
                       enumerate(zip(row, widths))).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    done = sum(e["status"] == "passed" for e in entries)
    lines.append(f"{done}/{len(entries)} exercises passed, {sum(e['passed'] for e in entries)}/"
                 f"{sum(e['total'] for e in entries)} checks.")
    return lines


def grade_result(entries, date=None):
    """The grading result (a dict, as written to the JSON file) of grade_entry's entries."""
    import platform
    from importlib import metadata
    try:
        torch_version = sys.modules["torch"].__version__ if "torch" in sys.modules else metadata.version("torch")
    except Exception:  # no torch installed: every entry says so already
        torch_version = None
    date = date or time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return {"date": date, "python": platform.python_version(), "torch": torch_version,
            "passed": sum(e["status"] == "passed" for e in entries), "total": len(entries),
            "all_passed": bool(entries) and all(e["status"] == "passed" for e in entries), "exercises": entries}


def write_result(path, result):
    """Write the grading result to path as JSON, atomically: a kill leaves the previous file or the whole new one."""
    import json
    from runfolder import atomic_write  # the project's own (REPO is on sys.path): a copy's, in a student copy
    text = json.dumps(result, indent=2) + "\n"
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def grade(exercise_dirs, result_path=RESULT_FILE, time_limit=None, out=print):
    """Run every exercise in exercise_dirs on its starter.py, one child process each (run_isolated), print each one's
    failures and summary, then a score table; write the JSON result to result_path. Returns the exit status: 0 only
    when every exercise passed."""
    result_path = os.path.abspath(result_path)  # where the command was given, whatever the checks do
    entries = []
    for exercise_dir in exercise_dirs:
        name = os.path.basename(exercise_dir)
        out(f"== {name}: {title_of(exercise_dir)}")
        started = time.monotonic()

        def compact(line, prefix=f"  [{name[:2]}."):
            if not (line.startswith(prefix) and "] ok: " in line) and not line.startswith("checking "):
                out(line)
        try:
            result = run_isolated(exercise_dir, os.path.join(exercise_dir, "starter.py"), out=compact,
                                  time_limit=time_limit)
        except Exception as e:  # the checker's own trouble (cannot start a process...): this exercise only
            out(f"  the checker failed: {type(e).__name__}: {e}")
            result = (0, 0, "error", None)
        entries.append(grade_entry(exercise_dir, result, time.monotonic() - started))
    out("")
    for line in score_table(entries):
        out(line)
    result = grade_result(entries)
    try:
        write_result(result_path, result)
    except Exception as e:
        out(f"error: could not write the result to {result_path}: {type(e).__name__}: {e}")
        return 1
    out(f"result written to {os.path.relpath(result_path)}")
    return 0 if result["all_passed"] else 1


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if argv[0] == "--list":
        for d in exercise_dirs():
            with open(os.path.join(d, "README.md"), encoding="utf-8") as f:
                print(f"{os.path.basename(d):28s} {f.readline().lstrip('# ').strip()}")
        return 0
    names, path, time_limit, result_path, hint = [], None, None, None, False
    for arg in argv:
        if arg.startswith("--file="):
            path = arg[len("--file="):]
        elif arg.startswith("--timeout="):
            try:
                time_limit = float(arg[len("--timeout="):])
            except ValueError:
                time_limit = -1
            if not time_limit >= 0:
                raise SystemExit(f"error: {arg!r}: the time limit is a number of seconds (0: none)")
        elif arg.startswith("--result="):
            result_path = arg[len("--result="):]
            if not result_path:
                raise SystemExit("error: --result= needs a file name")
        elif arg == "--hint" or arg.startswith("--hint="):
            hint = True if arg == "--hint" else arg[len("--hint="):]
            if hint is not True and not hint.isdigit():
                raise SystemExit(f"error: {arg!r}: --hint shows the next hint, --hint=K hint K (a number)")
        elif arg.startswith("-"):
            raise SystemExit(f"error: unknown argument {arg!r}; use --file=PATH, --timeout=SECONDS, --result=PATH "
                             f"or --hint")
        else:
            names.append(arg)
    if not names:
        raise SystemExit("error: which exercise? e.g. `check.py 01`, `check.py 01 03` or `check.py all`")
    dirs = exercise_dirs() if names == ["all"] else [find_exercise(n) for n in names]
    if hint:
        if len(dirs) != 1 or names == ["all"]:
            raise SystemExit("error: --hint is for one exercise, e.g. `check.py 05 --hint`")
        return show_hint(dirs[0], None if hint is True else int(hint))
    if len(dirs) > 1 or names == ["all"] or result_path is not None:  # grading
        if path is not None:
            raise SystemExit("error: --file= checks one exercise; grading runs each exercise's starter.py")
        return grade(dirs, result_path or RESULT_FILE, time_limit, out=lambda line: print(line, flush=True))
    exercise_dir = dirs[0]
    path = path or os.path.join(exercise_dir, "starter.py")
    if not os.path.isfile(path):
        raise SystemExit(f"error: no file {path}")
    passed, total, status, _ = run_isolated(exercise_dir, path, out=lambda line: print(line, flush=True),
                                            time_limit=time_limit)
    ok = status == "ok" and passed == total
    pointer = "" if ok else hint_pointer(exercise_dir)
    if pointer:
        print(pointer)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""
Check an exercise: run its checks against your file, stop at the first one that fails and say what is
likely wrong.

    python exercises/check.py 01                        # checks exercises/01_*/starter.py
    python exercises/check.py 01 --file=my_attempt.py   # checks another file
    python exercises/check.py --list                    # the exercises

Each exercise folder holds README.md (the statement), starter.py (your file: fill the gaps marked TODO) and
checks.py (the checks, in order: shapes first, then invariants, then traps for the usual mistakes, then numbers
against the project's own code). A gap you have not filled yet raises NotImplementedError, which is reported
as "not filled yet", not as a crash. Exit status: 0 when every check passes, 1 otherwise.

A check is a function `check_<name>(student)` in checks.py, with a docstring that says what it checks; it
receives your file as a module and raises Wrong("...") with the likely cause when the answer is wrong.
"""

import glob
import importlib.util
import os
import sys
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)  # the exercises use the project's modules (model.py, probe.py, kernels.py) as references
if not torch.cuda.is_available():  # no GPU: Triton kernels run in Triton's interpreter (set before triton is imported)
    os.environ.setdefault("TRITON_INTERPRET", "1")


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
        raise Wrong(f"{what} has NaN or inf values ({int((~torch.isfinite(got)).sum())} of {got.numel()}). {hint}".strip())
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


def _where(exc, path, code=True):
    """Where in the student's file the exception came from: ' (file line N: code)', or '' if not from there."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) == os.path.abspath(path)]
    if not frames:
        return ""
    return f" ({os.path.basename(path)} line {frames[-1].lineno}" + (f": {frames[-1].line})" if code else ")")


def run(exercise_dir, path, out=print):
    """Run the checks of exercise_dir on the file at path; returns (passed, total, status, failed): status is one
    of 'ok', 'not filled', 'wrong', 'error'; failed is the name of the check that stopped it (None if none did)."""
    checks = checks_of(exercise_dir)
    number = os.path.basename(exercise_dir)[:2]
    out(f"checking {os.path.relpath(path)} against exercise {os.path.basename(exercise_dir)}")
    try:
        student = load_module(path, f"student_{number}")
    except NotImplementedError as e:
        out(f"  not filled yet: {e}")
        return 0, len(checks), "not filled", None
    except Exception as e:
        out(f"  your file does not import: {type(e).__name__}: {e}{_where(e, path)}")
        return 0, len(checks), "error", None
    status, failed = "ok", None
    for passed, (name, fn) in enumerate(checks):
        what = (fn.__doc__ or name).strip().splitlines()[0]
        try:
            fn(student)
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
    out(f"{passed}/{len(checks)} checks passed" + (" -- well done." if status == "ok" else "."))
    return passed, len(checks), status, failed


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
    exercise_dir = find_exercise(argv[0])
    path = os.path.join(exercise_dir, "starter.py")
    for arg in argv[1:]:
        if not arg.startswith("--file="):
            raise SystemExit(f"error: unknown argument {arg!r}; use --file=PATH")
        path = arg[len("--file="):]
    if not os.path.isfile(path):
        raise SystemExit(f"error: no file {path}")
    return 0 if run(exercise_dir, path)[2] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

# Without a GPU, run the Triton kernels through Triton's CPU interpreter (must be set before triton is imported).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
else:  # the GPU test tier: one config per kernel, no autotuning (test_kernels.py tests every config and the autotuner)
    os.environ.setdefault("GATED_ATTENTION_CONFIGS", "first")

# Under pytest-xdist (the README's `-n auto`: a worker per core) each worker gets its share of the cores, for torch
# here and for every process a test starts (OMP_NUM_THREADS): workers that each ran a thread per core would slow each
# other down (docs/timings.md: the suite's time each way).
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
CORES = max(1, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1) // WORKERS)
if WORKERS > 1 and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = str(CORES)
    torch.set_num_threads(CORES)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/
sys.path.insert(0, REPO)  # the tests import the project's modules (model, train, lab.repro) from the repository root

from data.shards import HEADER_BYTES, find_shards, write_dataset  # noqa: E402  (after TRITON_INTERPRET: nothing here imports triton, but keep it so)


def _interpreter_problem():
    """Why Triton's interpreter cannot run here, or None. Before Triton 3.7 it converts one-element arrays to ints,
    which NumPy 2.4 refuses: every kernel test would fail with an InterpreterError that does not say so."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return None
    try:
        from importlib.metadata import version
        triton = version("triton")
        triton_version = tuple(int(x) for x in triton.split(".")[:2])
    except Exception:  # no triton (the kernel tests skip), or a version string of another form
        return None
    if triton_version < (3, 7) and tuple(int(x) for x in np.__version__.split(".")[:2]) >= (2, 4):
        return (f"Triton {triton}'s interpreter, which runs the kernel tests on a CPU, does not work with "
                f"NumPy {np.__version__}: pip install -U triton (3.7 or later), or pip install 'numpy<2.4'")
    return None


def fused_kernel_runs_on_the_cpu():
    """Whether the fused Triton kernel runs on CPU tensors here: Triton there for it, and its interpreter on (set
    above where there is no GPU; on a machine with a GPU it is off, and the kernel refuses CPU tensors)."""
    import kernels  # here, not at the top: conftest sets TRITON_INTERPRET before anything imports triton
    return kernels.triton_unavailable() is None and os.environ.get("TRITON_INTERPRET") == "1"


def prepared_in_the_checkout():
    """The paths in the checkout's data/ that git status lists (datasets prepared there, files changed), or None
    outside a git checkout. A test prepares its data in its own folder: one that prepared into data/ would hand later tests (and the
    user) a dataset they did not make, and a test comparing the checkout before and after would fail beside it."""
    try:
        done = subprocess.run(["git", "status", "--porcelain", "--ignored", "--", "data"], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.splitlines() if done.returncode == 0 else None
    return None if lines is None else {line[3:] for line in lines if "__pycache__" not in line}


def pytest_configure(config):
    global _WORKER, _PREPARED
    # an xdist worker, known by its config: a pytest that a test starts inherits the worker's environment
    _WORKER = hasattr(config, "workerinput")
    problem = _interpreter_problem()
    if problem:
        pytest.exit(problem, returncode=pytest.ExitCode.USAGE_ERROR)
    _PREPARED = None if _WORKER else prepared_in_the_checkout()  # the main process's, once: before any test runs


# The suite trains toy runs and copies the repository (the tutorial's test alone writes ~350 MB), and pytest keeps
# every test's temporary folder, for the last three sessions: here a passing test's tmp_path is removed when it ends
# (before most of it is ever written out to disk), and a passing session removes its whole folder (the session
# fixtures' too; with pytest-xdist, the main process removes the folder that holds its workers'), so a passing run
# leaves nothing behind. A failing test keeps its folder to look into, and a --basetemp of the user's own is theirs.
_failed = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        item.stash[_failed] = True
    return report


@pytest.fixture(autouse=True)
def _remove_tmp_path_if_the_test_passes(request):
    yield
    folder = request.node.funcargs.get("tmp_path") if hasattr(request.node, "funcargs") else None
    if folder is not None and not request.node.stash.get(_failed, False):
        shutil.rmtree(folder, ignore_errors=True)


def pytest_sessionfinish(session, exitstatus):
    after = None if _WORKER or _PREPARED is None else prepared_in_the_checkout()
    new = sorted(after - _PREPARED) if after is not None else []
    if new:  # a test wrote data into the checkout: the session fails, saying which
        print(f"\nerror: the tests left files in the checkout's data/ that were not there when they started: "
              f"{', '.join(new)} (a test prepared a dataset there, not in its tmp_path)", file=sys.stderr)
        session.exitstatus = exitstatus = pytest.ExitCode.TESTS_FAILED
    # an xdist worker's basetemp is set (a folder inside the main process's): the main process removes it
    config = session.config
    if exitstatus == pytest.ExitCode.OK and config.option.basetemp is None and hasattr(config, "_tmp_path_factory"):
        shutil.rmtree(config._tmp_path_factory.getbasetemp(), ignore_errors=True)  # the attribute xdist reads too


# TEST_DURATIONS=<file>: each test's seconds (setup, call and teardown) and outcome, a line appended as each test
# ends, so that a run stopped at a time limit (lab/gpu/kernels.sh's GPU tier) still says which tests took its time;
# pytest's own --durations prints only at the end. Written by the main process, which pytest-xdist sends every
# worker's reports to. Outcomes: passed, failed, error (in setup or teardown), skipped, xfailed, xpassed, crashed (a
# worker that died in the test: its one report).
_durations, _WORKER, _PREPARED = {}, False, None


def pytest_runtest_logreport(report):
    path = os.environ.get("TEST_DURATIONS")
    if not path or _WORKER:
        return
    seconds, outcome = _durations.pop(report.nodeid, (0.0, "passed"))
    seconds += report.duration
    if report.when not in ("setup", "call", "teardown"):
        outcome = "crashed"
    elif report.failed and outcome == "passed":  # the first failure names the test's outcome
        outcome = "failed" if report.when == "call" else "error"
    elif hasattr(report, "wasxfail") and outcome == "passed":
        outcome = "xfailed" if report.skipped else "xpassed"
    elif report.skipped and outcome == "passed":
        outcome = "skipped"
    if report.when in ("setup", "call"):
        _durations[report.nodeid] = (seconds, outcome)
        return
    with open(path, "a") as f:
        f.write(f"{seconds:.2f}\t{outcome}\t{report.nodeid}\n")


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    """A small dataset of random GPT-2 token ids (dataset name 'toy'): analysis and the study need windows, not meaning."""
    root = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    docs = {split: [rng.integers(0, 50000, n, dtype=np.uint16) for n in (3000, 2000)] for split in ("train", "val")}
    write_dataset(str(root), "toy", docs, source="random tokens")
    return str(root)


@pytest.fixture(scope="session")
def stdlib_data(tmp_path_factory):
    """The first 150 files of the standard library, prepared as the default dataset is."""
    from data.pystdlib.prepare import prepare as prepare_pystdlib
    data_dir = str(tmp_path_factory.mktemp("pystdlib"))
    prepare_pystdlib(out_dir=data_dir, max_files=150, workers=2)
    return data_dir


@pytest.fixture(scope="session")
def sink_lab_runs(tmp_path_factory):
    """The sink lab's baseline and G1 runs at toy size (config/sink_lab.py with TUTORIAL_TOY=1, a few seconds each),
    in a folder holding baseline/ and g1/ as out/exercises/08/ holds them after exercise 08's commands: the trained
    runs the exercises measure."""
    from data.bigram_backcopy.prepare import prepare
    root = tmp_path_factory.mktemp("sink_lab_runs")
    prepare(out_dir=str(root / "data"))  # the task, as the first run would generate it: so both can start at once
    # side by side, each on its share of the cores: at toy size a run is mostly Python starting, so two end sooner
    env = dict(os.environ, TUTORIAL_TOY="1", OMP_NUM_THREADS=str(max(1, CORES // 2)))
    runs = [subprocess.Popen([sys.executable, "train.py", "config/sink_lab.py", *flags, f"--data_dir={root / 'data'}",
                              f"--out_dir={root / name}"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
            for name, flags in (("baseline", ["--gate=none"]), ("g1", []))]
    for run in runs:
        said, _ = run.communicate(timeout=300)
        assert run.returncode == 0, said
    return str(root)


PREPARED = (".bin", "meta.json", "packages.txt", ".cache", ".prepare.lock")  # what preparing a dataset leaves in data/


@pytest.fixture(scope="session")
def drawing_checkout(tmp_path_factory):
    """(a checkout, an environment) to draw the committed results again in, as on a fresh clone where the sink lab's
    task was prepared (python data/bigram_backcopy/prepare.py) and no other dataset was: the repository's files
    linked, not copied, without run folders or prepared data, then the task generated (about 1 s). The environment
    puts the checkout first on PYTHONPATH, and before it a matplotlib that cannot be imported: the scripts then skip
    their figures (how they are drawn where matplotlib is missing), the slow part, and the numbers are the same."""
    root = tmp_path_factory.mktemp("drawing")
    checkout, stub = root / "checkout", root / "no-matplotlib" / "matplotlib"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('left out: the figures are not drawn here')\n")
    checkout.mkdir()
    for name in os.listdir(REPO):
        if name not in (".git", "data", "__pycache__", ".pytest_cache") and not name.startswith("out"):
            os.symlink(os.path.join(REPO, name), checkout / name)
    (checkout / "data").mkdir()
    for name in os.listdir(os.path.join(REPO, "data")):
        source = os.path.join(REPO, "data", name)
        if not os.path.isdir(source) or name == "gpt2_bpe":  # (the tokenizer's files, not a dataset)
            os.symlink(source, checkout / "data" / name)
            continue
        (checkout / "data" / name).mkdir()
        for file in os.listdir(source):
            if not file.endswith(PREPARED) and file != "__pycache__":
                os.symlink(os.path.join(source, file), checkout / "data" / name / file)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(stub.parent), str(checkout)])}
    done = subprocess.run([sys.executable, os.path.join("data", "bigram_backcopy", "prepare.py")], cwd=checkout,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return checkout, env


def change_a_token(data_dir):
    """data_dir's first val shard with one token changed to another token of the text: the dataset prepared again in
    place, as a re-run with another seed would, at the cost of one write."""
    tokens = np.memmap(find_shards(str(data_dir), "val")[0], dtype=np.uint16, mode="r+", offset=HEADER_BYTES)
    i = next(i for i in range(100, len(tokens)) if tokens[i] != tokens[i + 1])
    tokens[i] = tokens[i + 1]
    tokens.flush()
    del tokens

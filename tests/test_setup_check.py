"""
The set-up check (lab/setup_check.py): on this machine it passes and says ready, its smoke run leaves nothing behind,
a missing package is one FAIL line with the pip command, and a check that raises is one line, never a traceback.

    python -m pytest -q tests/test_setup_check.py
"""

import os
import subprocess
import sys

import pytest

from lab import setup_check

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/
NAMES = ("python", "torch", "packages", "triton", "tokenizer", "compute", "sink lab", "timings")


def run_check(args, tmp_path, **env):
    """python -m lab.setup_check as a student runs it, its temporary folders in tmp_path/tmp: (exit status, output).
    One thread: its toy steps gain nothing from a second, and on a busy CPU two threads took 5 times as long."""
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"), OMP_NUM_THREADS="1", **env)
    done = subprocess.run([sys.executable, "-m", "lab.setup_check", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=env)
    return done.returncode, done.stdout + done.stderr


def repo_state():
    """git status with the ignored files (prepared data, out folders), but for Python's byte-code caches."""
    lines = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    return sorted(line for line in lines if "__pycache__" not in line)


def test_ready_here_and_the_smoke_run_leaves_nothing_behind(tmp_path):
    before = repo_state()
    code, out = run_check(["--smoke_iters=20"], tmp_path)
    assert code == 0, out
    assert "\nready: " in out and "python train.py" in out and "Traceback" not in out
    for name in NAMES:
        assert any(line.split()[1:2] == name.split()[:1] for line in out.splitlines()[1:]), (name, out)
    assert "FAIL" not in out and "skip" not in out
    assert repo_state() == before  # nothing in the repository: no run folder, no data prepared in data/
    left = [name for name in os.listdir(tmp_path / "tmp") if not name.startswith("torchinductor_")]
    assert left == []  # and its temporary folder deleted (torch's own cache folder, which any train.py run makes, stays)


def test_a_missing_package_is_one_fail_line_with_the_pip_command(tmp_path):
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "matplotlib.py").write_text("raise ImportError('No module named matplotlib (simulated)')\n")
    code, out = run_check(["--skip_train=True"], tmp_path, PYTHONPATH=str(fake))
    assert code == 1, out
    assert "Traceback" not in out and "\nready: " not in out
    packages = next(line for line in out.splitlines() if line.split()[1:2] == ["packages"])
    assert packages.split()[0] == "FAIL" and "matplotlib" in packages and "numpy" not in packages
    assert "not ready" in out and "1. packages" in out and "fix: pip install -r requirements.txt" in out
    assert "skip  torch" not in out and "skip  sink lab" in out  # the others still checked; the smoke run skipped


def test_a_check_that_raises_is_one_line_and_what_needs_it_is_skipped(monkeypatch, capsys):
    def broken(found, keys):
        raise RuntimeError("something deep inside\nsecond line")

    def never(found, keys):
        raise AssertionError("a check whose dependency failed must not run")

    monkeypatch.setattr(setup_check, "CHECKS", [("first", broken, (), "the fix"), ("second", never, ("first",), None)])
    fixes, _ = setup_check.run(setup_check.Keys())
    out = capsys.readouterr().out
    assert "FAIL  first      RuntimeError: something deep inside\n" in out and "second line" not in out
    assert "skip  second     needs first, which did not pass" in out and "Traceback" not in out
    assert fixes == [("first: RuntimeError: something deep inside", "the fix")]


def test_a_torch_older_than_the_project_needs_fails_with_the_upgrade_command(monkeypatch):
    """torch older than setup_check.TORCH_MIN (requirements.txt's floor, the same) is a FAIL with pip install -U."""
    import torch
    monkeypatch.setattr(torch, "__version__", "2.5.1+cu124")
    for cuda, fix in (("12.4", "pip install -U torch"),  # the build the user has, newer: a CUDA one stays CUDA
                      (None, "pip install -U torch --index-url https://download.pytorch.org/whl/cpu")):
        monkeypatch.setattr(torch.version, "cuda", cuda)
        with pytest.raises(setup_check.Problem) as e:
            setup_check.torch_build({}, setup_check.Keys())
        assert str(e.value) == "2.5.1+cu124: the project needs torch 2.6 or newer" and e.value.fix == fix
    with open(os.path.join(REPO, "requirements.txt")) as f:
        floor = next(line.split(">=")[1].split()[0] for line in f if line.startswith("torch>="))
    assert setup_check.version_of(floor) == setup_check.TORCH_MIN, "requirements.txt and setup_check disagree"


def test_a_triton_too_old_for_the_kernel_is_a_note_that_says_what_is_lost(monkeypatch):
    triton = pytest.importorskip("triton")
    import kernels
    monkeypatch.setattr(triton, "__version__", "3.2.0")
    monkeypatch.setattr(kernels, "HAS_TRITON", False)
    import torch
    for cuda, upgrade in (("12.4", "pip install -U torch: a CUDA build of torch brings its own"),
                          (None, "pip install -U triton")):
        monkeypatch.setattr(torch.version, "cuda", cuda)
        status, text = setup_check.triton({}, setup_check.Keys())
        assert status == "note" and text == (f"backend='triton' needs Triton 3.3 or newer, found 3.2.0 ({upgrade}): "
                                             "only the fused kernel is lost (TUTORIAL §7, lab.bench's timings of it, "
                                             "its tests)")


def test_help_lists_the_keys(capsys):
    with pytest.raises(SystemExit) as stop:
        setup_check.main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "python -m lab.setup_check" in out and "--smoke_iters=100" in out and "--skip_train=False" in out


@pytest.mark.parametrize("arg, says", [("--smoke_iters=5", "at least 20 steps"), ("--smoke_timeout=0", "at least 1")])
def test_smoke_settings_that_cannot_be_meant_are_one_line(arg, says):
    """Refused before any check runs: a timeout of 0 would report a working machine as broken."""
    with pytest.raises(SystemExit) as stop:
        setup_check.main([arg])
    assert str(stop.value).startswith(f"error: {arg}") and says in str(stop.value)


def test_a_busy_machine_is_said_with_the_thread_setting_that_helps_beside_other_trainings():
    """Busier than its cores: the timings are said to be slower than idle, and, unless OMP_NUM_THREADS is set
    already, that one thread per training is several times faster beside other trainings."""
    assert setup_check.busy_note(1.9, 2, env={}) == ""
    note = setup_check.busy_note(3.04, 2, env={})
    assert note.startswith("; busy now (load 3.0 on 2 cores): less when idle; beside other trainings, "
                           "OMP_NUM_THREADS=1 before each command") and "docs/timings.md" in note, note
    assert setup_check.busy_note(3.04, 2, env={"OMP_NUM_THREADS": "1"}) == "; busy now (load 3.0 on 2 cores): less " \
        "when idle"

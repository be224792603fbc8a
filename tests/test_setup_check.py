"""
The set-up check (lab/setup_check.py): on this machine it passes and says ready, its smoke run leaves nothing behind,
a missing package is one FAIL line with the pip command, and a check that raises is one line, never a traceback.

    python -m pytest -q tests/test_setup_check.py
"""

import builtins
import contextlib
import os
import subprocess
import sys
import time

import pytest
import torch

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


def test_a_check_whose_need_was_skipped_is_skipped_too(monkeypatch, capsys):
    """A skip passes nothing on: as timings after a failed compute (sink lab skipped), which would read the smoke
    run's numbers that were never measured."""
    def broken(found, keys):
        raise RuntimeError("broken")

    def never(found, keys):
        raise AssertionError("a check whose dependency did not pass must not run")

    monkeypatch.setattr(setup_check, "CHECKS", [("first", broken, (), None), ("second", never, ("first",), None),
                                                ("third", never, ("second",), None)])
    setup_check.run(setup_check.Keys())
    out = capsys.readouterr().out
    assert "skip  second     needs first, which did not pass" in out
    assert "skip  third      needs second, which did not pass" in out and "AssertionError" not in out


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


def test_the_fewest_smoke_steps_and_seconds_allowed_are_20_and_1(monkeypatch):
    """--smoke_iters=19 is refused before any check runs; 20 steps and a timeout of 1 s are taken."""
    seen = []
    monkeypatch.setattr(setup_check, "run", lambda keys: seen.append(keys) or ([], {}))
    with pytest.raises(SystemExit) as stop:
        setup_check.main(["--smoke_iters=19"])
    assert str(stop.value) == "error: --smoke_iters=19: at least 20 steps, for the loss to fall" and not seen
    assert setup_check.main(["--smoke_iters=20", "--smoke_timeout=1"]) == 0
    assert seen == [setup_check.Keys(smoke_iters=20, smoke_timeout=1)]


def test_a_busy_machine_is_said_with_the_thread_setting_that_helps_beside_other_trainings():
    """Busier than its cores: the timings are said to be slower than idle, and, unless OMP_NUM_THREADS is set
    already, that one thread per training is several times faster beside other trainings."""
    assert setup_check.busy_note(1.9, 2, env={}) == ""
    note = setup_check.busy_note(3.04, 2, env={})
    assert note.startswith("; busy now (load 3.0 on 2 cores): less when idle; beside other trainings, "
                           "OMP_NUM_THREADS=1 before each command") and "docs/timings.md" in note, note
    assert setup_check.busy_note(3.04, 2, env={"OMP_NUM_THREADS": "1"}) == "; busy now (load 3.0 on 2 cores): less " \
        "when idle"


def test_other_work_measured_as_the_steps_were_timed_decides_busy_not_the_last_minutes_load():
    """Where the CPUs' time can be read, what other processes did while the steps were timed says busy (half a
    core or more), whatever the load average, which lags a minute: an idle machine after a busy minute is idle, and a
    machine that has just become busy is busy."""
    assert setup_check.busy_note(3.04, 2, others=0.2, env={}) == ""
    assert setup_check.busy_note(0.1, 2, others=1.46, env={"OMP_NUM_THREADS": "1"}) == \
        "; busy now (other work kept 1.5 of 2 cores busy as it timed): less when idle"
    assert setup_check.busy_note(0.1, 2, others=0.5, env={}).startswith("; busy now (other work kept 0.5 of 2 cores")


def test_other_processes_cores_are_the_cpus_busy_time_less_this_processs_own(monkeypatch):
    readings = iter([(100.0, 4.0), (103.5, 5.0)])  # 3.5 s of all CPUs' work in 2 s, 1 s of it this process's
    monkeypatch.setattr(setup_check, "cpu_seconds", lambda: next(readings))
    assert setup_check.others_cores(setup_check.cpu_seconds(), 2.0) == pytest.approx(1.25)
    assert setup_check.others_cores(None, 2.0) is None


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads Linux's /proc/stat")
def test_a_process_spinning_beside_the_timing_is_counted_and_this_processs_own_work_is_not():
    # on one CPU, as on a one-core machine, and the spinner niced: it runs only while this process does not, so this
    # process works a quarter of the second and sleeps the rest (busy all of it, it left the spinner half a core at
    # most on one core, and others read 0.50 or just below)
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})  # (this thread's, which the spinner inherits)
    spin = subprocess.Popen([sys.executable, "-c", "import os; os.nice(19)\nwhile True: pass"])
    try:
        time.sleep(0.3)  # started
        before, start = setup_check.cpu_seconds(), time.perf_counter()
        while time.perf_counter() < start + 0.25:  # this process's own work: not others'
            pass
        time.sleep(max(0.0, start + 1.0 - time.perf_counter()))  # others_cores reads a second or more
        others = setup_check.others_cores(before, time.perf_counter() - start)
    finally:
        spin.kill()
        spin.wait()
        os.sched_setaffinity(0, cpus)
    assert 0.5 <= others <= (os.cpu_count() or 1), others


def test_torch_at_the_floor_passes_and_a_cuda_build_is_never_called_a_cpu_one(monkeypatch):
    """TORCH_MIN itself is new enough; the 'CPU build on an NVIDIA machine' note is for a CPU build only: a CUDA
    build that sees no GPU is named as the CUDA build it is."""
    import torch
    monkeypatch.setattr(torch, "__version__", "2.6.0+cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(setup_check.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(torch.version, "cuda", None)
    status, text = setup_check.torch_build({}, setup_check.Keys())
    assert status == "note" and text.startswith("2.6.0+cpu, a CPU build, but this machine has an NVIDIA GPU"), text
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    status, text = setup_check.torch_build({}, setup_check.Keys())
    assert status == "ok" and text.startswith("2.6.0+cpu, a CUDA 12.4 build; "), text


class NotFinite(torch.autograd.Function):
    """The identity, whose gradient is NaN: a loss that is finite while the gradients are not."""
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * float("nan")


@contextlib.contextmanager
def lower_precision(scale, nan_grads):
    """The forward of the check's training dtype, faked: its loss `scale` times fp32's, its gradients NaN if asked."""
    import model
    forward = model.GPT.forward

    def skewed(self, idx, targets=None):
        logits, loss = forward(self, idx, targets)
        return logits, NotFinite.apply(loss * scale) if nan_grads else loss * scale

    model.GPT.forward = skewed
    try:
        yield
    finally:
        model.GPT.forward = forward


@pytest.mark.parametrize("scale, cosine, nan_grads, says", [
    (1.01, 0.995, False, None),  # within 2% of fp32's loss, gradients within cosine 0.99: ok
    (1.03, 0.995, False, "bfloat16 disagrees with fp32 (loss "),  # the loss 3% off
    (1.0, 0.985, False, "bfloat16 disagrees with fp32 (loss "),  # the gradients' direction off
    (1.0, None, True, "a tiny model's loss or gradients are not finite in bfloat16"),  # a finite loss, NaN gradients
])
def test_the_compute_check_compares_the_training_dtype_with_fp32(monkeypatch, scale, cosine, nan_grads, says):
    """compute runs the tiny model twice, in fp32 and in the dtype training picks: a loss more than 2% off fp32's,
    a gradient cosine under 0.99 or a gradient that is not finite is a FAIL; within them it is ok and records the
    device the timings use. The training dtype is faked here (bfloat16, its loss scaled), and the cosine too."""
    import cli
    monkeypatch.setattr(cli, "pick_device", lambda name: "cpu:0")  # a device the check must pass on as it is
    monkeypatch.setattr(cli, "autocast_for", lambda device, dtype: (contextlib.nullcontext(), "float32")
                        if dtype == "float32" else (lower_precision(scale, nan_grads), "bfloat16"))
    if cosine is not None:
        monkeypatch.setattr(torch.nn.functional, "cosine_similarity", lambda a, b, dim: torch.tensor(cosine))
    found = {}
    if says is None:
        status, text = setup_check.compute(found, setup_check.Keys())
        assert status == "ok" and text.startswith("cpu:0: training uses bfloat16; a tiny G1 model's loss "), text
        assert found == {"device": "cpu:0"}
    else:
        with pytest.raises(setup_check.Problem) as e:
            setup_check.compute(found, setup_check.Keys())
        assert str(e.value).startswith(says) and not found, str(e.value)


def fake_train(monkeypatch, tmp_path, records=(), returncode=0, output="", prepared=True):
    """setup_check.sink_lab with train.py replaced: the command it was given (in `calls`), the log.jsonl `records`
    written to its --out_dir, its temporary folder under tmp_path, and a wall clock of 15 s."""
    import json
    import types
    import data.shards
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        if returncode == "timeout":
            raise subprocess.TimeoutExpired(cmd, kw["timeout"])
        out_dir = next(a.split("=", 1)[1] for a in cmd if a.startswith("--out_dir="))
        os.makedirs(out_dir)
        with open(os.path.join(out_dir, "log.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
        return subprocess.CompletedProcess(cmd, returncode, output, "")

    monkeypatch.setattr(setup_check.subprocess, "run", run)
    monkeypatch.setattr(setup_check, "time", types.SimpleNamespace(perf_counter=iter([10.0, 25.0]).__next__))
    monkeypatch.setattr(data.shards, "find_shards", lambda *a: ["train_000.bin"] if prepared else [])
    monkeypatch.setattr(setup_check.tempfile, "tempdir", str(tmp_path))
    return calls


def record(iter, val_loss, time_s, nonfinite_steps=0):
    return {"iter": iter, "val_loss": val_loss, "tokens": iter * 2048, "tokens_per_s": 20480.0,
            "nonfinite_steps": nonfinite_steps, "time_s": time_s}


@pytest.mark.parametrize("prepared", [True, False])
def test_the_smoke_run_is_judged_and_timed_from_its_log(monkeypatch, tmp_path, prepared):
    """sink_lab's command (the lab's config at n steps, everything in its temporary folder), its time per step
    (tokens / iter / tokens_per_s), its eval time (the first record's) and its start-up (wall clock less the run's
    own time), and the temporary folder deleted afterwards."""
    calls = fake_train(monkeypatch, tmp_path, [record(0, 4.2, 2.0), record(40, 3.1, 9.0)], prepared=prepared)
    found, readings = {}, iter([(100.0, 1.0), (121.0, 2.0)])  # the CPUs' 21 s of work in its 15 s, 1 s of it its own
    monkeypatch.setattr(setup_check, "cpu_seconds", readings.__next__)
    status, text = setup_check.sink_lab(found, setup_check.Keys(smoke_iters=40))
    assert status == "ok" and text == ("train.py config/sink_lab.py" + ("" if prepared else
                                       " (task made in a temp folder)") +
                                       ": 40 steps in 15 s, 100 ms a step; val loss 4.20 -> 3.10, finite"), text
    assert found == {"step": pytest.approx(0.1), "eval_s": 2.0, "startup": 6.0, "others": pytest.approx(20 / 15)}
    (cmd,) = calls
    assert cmd[1:8] == ["train.py", "config/sink_lab.py", "--max_iters=40", "--lr_decay_iters=40", "--warmup_iters=4",
                        "--eval_interval=40", "--log_interval=40"]
    tmp = [a.split("=", 1)[1] for a in cmd if a.startswith(("--out_dir=", "--data_dir="))]
    assert len(tmp) == (1 if prepared else 2) and all(p.startswith(str(tmp_path) + os.sep) for p in tmp), cmd
    assert os.listdir(tmp_path) == []  # the temporary folder deleted


@pytest.mark.parametrize("records, returncode, says", [
    ([record(0, 4.2, 2.0), record(40, 3.1, 9.0, nonfinite_steps=2)], 0, "the run did not end at step 40 with a finite loss"),
    ([record(0, 4.2, 2.0), record(20, 3.1, 5.0)], 0, "the run did not end at step 40 with a finite loss"),
    ([record(0, 4.2, 2.0), record(40, None, 9.0)], 0, "the run did not end at step 40 with a finite loss"),
    ([record(0, 4.2, 2.0), record(40, 3.95, 9.0)], 0, "the loss did not fall: val loss 4.20 -> 3.95"),
    ([], 1, "train.py stopped (exit 1): RuntimeError: the last line"),
    ([], "timeout", "40 steps took more than 300 s"),
])
def test_a_smoke_run_that_did_not_train_is_a_fail_with_the_trial_command(monkeypatch, tmp_path, records, returncode,
                                                                         says):
    fake_train(monkeypatch, tmp_path, records, returncode, output="step 1\nRuntimeError: the last line\n")
    with pytest.raises(setup_check.Problem) as e:
        setup_check.sink_lab({}, setup_check.Keys(smoke_iters=40))
    assert str(e.value) == says and e.value.fix == setup_check.TRIAL
    assert os.listdir(tmp_path) == []


def test_the_timings_note_adds_up_the_steps_evals_and_start_up(monkeypatch):
    """The sink lab's estimate: start-up + its steps x the smoke run's step + its evals (one at step 0) x the smoke
    run's eval; the main job's: start-up + its steps x the fastest timed step after the first (which allocates) + its
    evals x eval_iters x a third of a step. The model timed is shrunk here, the clock faked: steps of 1 (the first,
    not counted), 2 and 3 s."""
    import dataclasses
    import types
    import cli
    from train import TrainConfig
    configure = cli.configure

    def small(keys, argv):
        c, given = configure(keys, argv)
        return (c if argv else dataclasses.replace(c, n_layer=1, n_head=2, n_kv_head=2, head_dim=16, n_embd=32, vocab_size=65, block_size=16,
                                                   batch_size=2, loss_chunk=0)), given

    monkeypatch.setattr(cli, "configure", small)
    clock = iter([0.0, 1.0, 10.0, 12.0, 20.0, 23.0])
    monkeypatch.setattr(setup_check, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    seen = []  # the busy note's `others`: the smoke run's here (the steps' cannot be read under the fake clock)
    monkeypatch.setattr(setup_check, "busy_note", lambda load, cores, others: seen.append(others) or "")
    found = {"startup": 3.0, "step": 0.01, "eval_s": 1.0, "device": "cpu", "others": 1.2}
    status, text = setup_check.timings(found, setup_check.Keys())
    assert seen == [1.2]
    lab, c = configure(TrainConfig, ["config/sink_lab.py"])[0], configure(TrainConfig, [])[0]
    lab_s = 3.0 + lab.max_iters * 0.01 + (lab.max_iters // lab.eval_interval + 1) * 1.0
    main_s = 3.0 + c.max_iters * 2.0 + (c.max_iters // c.eval_interval + 1) * c.eval_iters * 2.0 / 3
    assert found["main_s"] == pytest.approx(main_s)
    assert status == "note" and text == (f"estimated from the steps timed here: sink lab ~{setup_check.minutes(lab_s)} "
                                         f"a model ({lab.max_iters} steps), main job ~{setup_check.minutes(main_s)} "
                                         f"({c.max_iters} steps)"), text


def test_minutes_and_the_idle_boundary():
    assert [setup_check.minutes(s) for s in (0.4, 89.4, 90, 150, 3600)] == ["0 s", "89 s", "2 min", "2 min", "60 min"]
    assert setup_check.busy_note(2.0, 2, env={}) == ""  # as busy as its cores: not busier


def test_a_note_passes_what_needs_it_and_a_check_that_exits_is_one_line(monkeypatch, capsys):
    def noted(found, keys):
        return "note", "works, with a remark"

    def exits(found, keys):
        raise SystemExit("error: a key the check read was wrong")

    def fine(found, keys):
        return "ok", "ran"

    monkeypatch.setattr(setup_check, "CHECKS", [("first", noted, (), None), ("second", fine, ("first",), None),
                                                ("third", exits, ("second",), None)])
    fixes, _ = setup_check.run(setup_check.Keys())
    out = capsys.readouterr().out
    assert "note  first" in out and "ok    second     ran" in out and "Traceback" not in out
    assert "FAIL  third      SystemExit: error: a key the check read was wrong\n" in out
    assert fixes == [("third: SystemExit: error: a key the check read was wrong", "pip install -r requirements.txt")]


def test_the_summary_numbers_each_fix_once_and_ready_says_the_main_jobs_time(monkeypatch, capsys):
    pip = "pip install -r requirements.txt"
    monkeypatch.setattr(setup_check, "run", lambda keys: ([("packages: a", pip), ("triton: b", pip),
                                                           ("compute: c", "the other fix")], {}))
    assert setup_check.main([]) == 1
    assert capsys.readouterr().out == ("not ready: fix these, then run python -m lab.setup_check again\n"
                                       f"  1. packages: a\n     fix: {pip}\n  2. compute: c\n     fix: the other fix\n")
    monkeypatch.setattr(setup_check, "run", lambda keys: ([], {"main_s": 700}))
    assert setup_check.main([]) == 0
    assert "(the main job, ~12 min here)" in capsys.readouterr().out


@pytest.mark.parametrize("torch_is", ["missing", "broken"])
def test_without_torch_the_keys_are_read_by_hand(monkeypatch, capsys, torch_is):
    """cli needs torch: without it, --help still prints the usage and --skip_train=True still skips the smoke run.
    Also where torch is there but broken: its import raises a plain ImportError, not ModuleNotFoundError."""
    if torch_is == "missing":
        monkeypatch.setitem(sys.modules, "cli", None)  # import cli raises ModuleNotFoundError, as without torch
    else:
        real = builtins.__import__

        def broken(name, *args, **kwargs):
            if name == "cli":
                raise ImportError("libtorch_cpu.so: cannot open shared object file")
            return real(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", broken)
    seen = []
    monkeypatch.setattr(setup_check, "run", lambda keys: seen.append(keys) or ([], {}))
    assert setup_check.main(["--skip_train=True"]) == 0 and seen == [setup_check.Keys(skip_train=True)]
    with pytest.raises(SystemExit) as stop:
        setup_check.main(["--help"])
    assert not stop.value.code and "python -m lab.setup_check" in capsys.readouterr().out


def test_a_broken_install_that_raises_something_else_is_one_fail_line_too(monkeypatch):
    """A package whose import raises other than ImportError (a broken binary: OSError) is named, with its first line."""
    real = setup_check.importlib.import_module

    def import_module(name):
        if name == "matplotlib":
            raise OSError("libfreetype.so.6: cannot open shared object file\nsecond line")
        return real(name)

    monkeypatch.setattr(setup_check.importlib, "import_module", import_module)
    with pytest.raises(setup_check.Problem) as e:
        setup_check.packages({}, setup_check.Keys())
    assert str(e.value) == "cannot import matplotlib (OSError: libfreetype.so.6: cannot open shared object file)"
    assert e.value.fix == setup_check.PIP

"""
lab/gpu/*.sh, the one-command GPU steps, at toy size on a CPU (TOY=1): each runs its parts, records every part's
exit code, time and time limit, and ends with one tarball of what it wrote; a failing part does not stop the rest,
and the script's exit code says it failed. Run again, a command skips the parts that succeeded. The deadline
(BUDGET_S) is off unless set. The toy runs are also the suite's runs of python -m lab.bench --tiny, checked with
test_bench.py's checks.

    python -m pytest -q tests/test_gpu_scripts.py
"""

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time

import pytest
import torch

import kernels
from cli import sdpa_order
from test_bench import check_bench_kernels_tiny, check_bench_train_tiny
from test_train import folder_state

# the scripts' steps that run the fused kernel (at toy size through Triton's interpreter): where it cannot run (no
# Triton, or one older than kernels.MIN_TRITON) these skip; that the scripts then refuse in one line is tested below
runs_the_fused_kernel = pytest.mark.skipif(kernels.triton_unavailable() is not None,
                                           reason="runs the fused kernel, which cannot run here")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/


def script(name, *args, work, env=None, wait=True, **popen):
    """Run lab/gpu/<name>.sh with TOY=1, its logs in work/ and its tarball in work/out/: no deadline and no time
    limit unless env sets them. Started from work/, not the repository: each script finds the repository's root
    itself. popen: more of subprocess.Popen's keys, with wait=False."""
    inherited = {k: v for k, v in os.environ.items() if k not in ("BUDGET_S", "STEP_LIMIT", "SHARE", "FRESH",
                                                                  "BESIDE_STUDY")}
    env = {**inherited, "TOY": "1", "WORK": str(work), "OUT": str(work / "out"), **(env or {})}
    cmd = ["bash", os.path.join(REPO, "lab", "gpu", f"{name}.sh"), *args]
    os.makedirs(work, exist_ok=True)
    if not wait:
        return subprocess.Popen(cmd, env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                **popen)
    return subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, timeout=300)


def packed(work, name):
    """{path inside the tarball (from the work folder on): bytes} of $OUT/<name>.tar.gz."""
    with tarfile.open(work / "out" / f"{name}.tar.gz") as tar:
        return {m.name.split(f"{work.name}/", 1)[-1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def rows(files, name):
    return list(csv.DictReader(io.StringIO(files[f"{name}/steps.tsv"].decode()), delimiter="\t"))


def steps(files, name):
    return [(r["step"], r["exit"]) for r in rows(files, name)]


def fake_python(path, body):
    """A stand-in for python: start_log's version checks (-c) end at once, and then body (sh)."""
    path.write_text(f'#!/bin/sh\ncase "$1" in -c) exit 0;; esac\n{body}\n')
    path.chmod(0o755)
    return str(path)


def bench_output(files, name):
    """What lab.bench printed in the script's bench step (after the step's own first line, its command)."""
    return files[f"{name}/bench.txt"].decode().split("\n", 1)[1]


def test_kernels_sh_refuses_where_the_fused_kernel_cannot_run(tmp_path):
    """With a Triton older than the kernel needs (a stand-in package of version 3.2.0) every kernel test would skip and
    the tier would look passed: both commands of kernels.sh refuse in one line, exit 2, before writing anything."""
    (tmp_path / "old" / "triton").mkdir(parents=True)
    (tmp_path / "old" / "triton" / "__init__.py").write_text('__version__ = "3.2.0"\n')
    (tmp_path / "old" / "triton" / "language.py").write_text("")
    for args in ((), ("configs",)):
        done = script("kernels", *args, work=tmp_path / "work", env={"PYTHONPATH": str(tmp_path / "old")})
        assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
        assert done.stderr.startswith("error: backend='triton' needs Triton 3.3 or newer, found 3.2.0 (pip install -U ")
        assert done.stderr.endswith("): lab/gpu/kernels.sh tests and times the fused kernel\n")
        assert done.stderr.count("\n") == 1
    assert os.listdir(tmp_path / "work") == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is visible here")
@pytest.mark.parametrize("name,args", [pytest.param("kernels", (), marks=runs_the_fused_kernel), ("throughput", ()),
                                       ("study", ("start", "baseline"))])  # (kernels.sh refuses an old Triton first)
def test_a_script_for_the_gpu_refuses_a_machine_without_one(tmp_path, name, args):
    """Without TOY=1 on a CPU, the scripts would run the kernel tests on 8 CPU workers, prepare the corpus for an
    hour and train config/repro.py there: one line, exit 2, nothing written."""
    done = script(name, *args, work=tmp_path / "work", env={"TOY": "0"})
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stdout + done.stderr
    assert done.stderr.startswith(f"error: no CUDA GPU is visible here, and {name}.sh measures one (TOY=1: ")
    assert os.listdir(tmp_path / "work") == []


@runs_the_fused_kernel
def test_the_three_gpu_steps_at_toy_size(tmp_path, dataset):
    """kernels.sh, throughput.sh and the study's start / wait / pack, side by side (they are independent)."""
    data = {"DATA_DIR": dataset}
    results = folder_state(os.path.join(REPO, "results"))  # committed measurements: toy runs must not touch them
    jobs = {name: script(name, work=tmp_path / name, env=data, wait=False) for name in ("kernels", "throughput")}
    study = tmp_path / "study"
    # the job's own pack is slowed (its tar waits 3 s): `wait` must wait for it, not pack beside it (bash execs a
    # -c string's last command, so the pack that ends the job runs under the job's pid with another command line)
    slow = tmp_path / "slow-tar"
    slow.mkdir()
    (slow / "tar").write_text(f'#!/bin/sh\nsleep 3\nexec {shutil.which("tar")} "$@"\n')
    (slow / "tar").chmod(0o755)
    # the budget (0.6 s) lets the first run start (nothing is timed yet), and no second: it would end too late
    start = script("study", "start", "baseline", "g1_elementwise:1", "--budget_min=0.01", "--max_iters=6",
                   "--eval_interval=3", "--",
                   "--windows=4", "--quant=w4a4", "--lengths=1,2", "--keep_first=0,1", work=study,
                   env={**data, "PATH": f"{slow}{os.pathsep}{os.environ['PATH']}"})
    assert start.returncode == 0 and "started (pid" in start.stdout, start.stdout + start.stderr
    again = script("study", "start", "baseline", work=study, env=data)
    assert again.returncode == 1 and "already running" in again.stdout  # one study at a time
    waited = script("study", "wait", "200", work=study)
    assert waited.returncode == 0 and "the study's job ended: exit 0" in waited.stdout, waited.stdout
    # the job packed its results when it ended, and `wait` says where
    assert f"packed when it ended: {study / 'out' / 'study.tar.gz'}" in waited.stdout
    assert (study / "out" / "study.tar.gz").is_file()
    # `pack` makes the tarball again from what is there (the report, the runs' logs, the job's output), and `wait`
    # does when the job has ended and the tarball is not in its $OUT (a machine that empties $OUT between commands)
    (study / "out" / "study.tar.gz").unlink()
    assert script("study", "pack", work=study).returncode == 0
    (study / "out" / "study.tar.gz").unlink()
    rewaited = script("study", "wait", "10", work=study)
    assert rewaited.returncode == 0 and "holds no study.tar.gz" in rewaited.stdout and "packing again" in \
        rewaited.stdout and (study / "out" / "study.tar.gz").is_file(), rewaited.stdout
    for name, job in jobs.items():
        out, _ = job.communicate(timeout=300)
        assert job.returncode == 0, out

    kernels = packed(tmp_path / "kernels", "kernels")
    assert steps(kernels, "kernels") == [("bench", "0"), ("tier", "0"), ("bench-cudnn", "0")]
    # with BUDGET_S unset (the default) there is no deadline and no part has a time limit
    assert {(r["limit"], r["ran"]) for r in rows(kernels, "kernels")} == {("none", "now")}
    cudnn = json.loads(kernels["kernels/bench-cudnn/bench_kernels.json"])
    assert cudnn["sdpa_backend"] == "cudnn" and {r["provider"] for r in cudnn["records"]} >= {"sdpa", "sdpa+gate"}
    # the order in force while it timed (not only the key's value): cuDNN first, then PyTorch's own order
    order = ["CUDNN_ATTENTION"] + [b for b in sdpa_order() if b != "CUDNN_ATTENTION"]
    assert cudnn["sdpa_order"] == order
    assert f"in the order {', '.join(order)}" in kernels["kernels/bench-cudnn/bench_kernels.md"].decode()
    assert b"torch" in kernels["kernels/env.txt"] and b"1 passed" in kernels["kernels/tier.txt"]
    assert b"::test_choose_configs" in kernels["kernels/tier.txt"] and b"PASSED" in kernels["kernels/tier.txt"]
    seconds, outcome, test = kernels["kernels/tier-durations.tsv"].decode().splitlines()[0].split("\t")
    assert outcome == "passed" and test.startswith("tests/test_kernels.py::test_choose_configs") and float(seconds) >= 0
    assert len(kernels["kernels/tier-durations.tsv"].splitlines()) == 1
    check_bench_kernels_tiny(bench_output(kernels, "kernels"), tmp_path / "kernels" / "kernels" / "bench")

    throughput = packed(tmp_path / "throughput", "throughput")
    assert steps(throughput, "throughput") == [("sync", "0"), ("bench", "0"), ("train", "0")]
    assert {r["limit"] for r in rows(throughput, "throughput")} == {"none"}
    assert b"passed" in throughput["throughput/sync.txt"]  # the optimizer-step tests (the GPU's test skips here)
    check_bench_train_tiny(bench_output(throughput, "throughput"), tmp_path / "throughput" / "throughput" / "bench")
    log = throughput["throughput-run/log.jsonl"].decode()  # the run's log, not its checkpoints
    assert '"tokens_per_s"' in log and not any(p.endswith(".pt") for p in throughput)

    files = packed(study, "study")
    assert {"repro-tiny/report/REPORT.md", "repro-tiny/report/summary.json",
            "repro-tiny/report/evaluate/summary.json", "repro-tiny/commands.jsonl",
            "repro-tiny/baseline/seed1337/log.jsonl", "study/study-job/output.txt"} <= set(files)
    assert files["study/study-job/exit"].strip() == b"0"
    # toy runs write only under WORK: results/, which holds committed measurements only, is as it was
    assert folder_state(os.path.join(REPO, "results")) == results
    command = files["study/study-job/command"]  # each stage as a user runs it: the lab's tools as modules
    assert b"-m lab.repro train baseline" in command and b"-m lab.repro evaluate --windows=4" in command
    assert b"-m lab.repro report" in command and b"repro.py" not in command
    # the tools the study started ran as modules too, and printed so: python -m lab.evaluate, python -m lab.analyze
    assert b" -m lab.evaluate --runs=" in files["study/study-job/output.txt"]
    assert b" -m lab.analyze --runs=" in files["study/study-job/output.txt"]
    assert b"leaves 1 run untrained: g1_elementwise seed 1337" in files["study/study-job/output.txt"]
    assert "repro-tiny/g1_elementwise/seed1337/log.jsonl" not in files  # and the report followed, on baseline alone


# (training, evaluation, report) exit codes -> the job's: the report follows a training that succeeded or failed in
# part (lab.repro's 4: the other runs trained), even when the evaluation failed; the code is the training's failure,
# else the report's, else the evaluation's. A training that failed outright is reported by nothing after it.
JOB_OUTCOMES = [((0, 0, 0), 0, "train evaluate report"), ((0, 1, 0), 1, "train evaluate report"),
                ((4, 0, 0), 4, "train evaluate report"), ((4, 1, 0), 4, "train evaluate report"),
                ((0, 1, 2), 2, "train evaluate report"), ((0, 0, 2), 2, "train evaluate report"),
                ((1, 0, 0), 1, "train")]


def test_the_job_reports_after_failed_runs_or_a_failed_evaluation_and_exits_with_what_failed(tmp_path):
    """The job's command, with a stand-in for python whose lab.repro stages exit as told: which stages ran and the
    job's exit code, for each outcome (the real stages at toy size: test_the_three_gpu_steps_at_toy_size)."""
    jobs = []
    for n, (codes, _, _) in enumerate(JOB_OUTCOMES):
        work = tmp_path / str(n)
        work.mkdir()
        calls = work / "calls.txt"
        cases = " ".join(f"{stage}) echo {stage} >> {calls}; exit {code};;"
                         for stage, code in zip(("train", "evaluate", "report"), codes))
        python = fake_python(work / "python", f'[ "$1 $2" = "-m lab.repro" ] && case "$3" in {cases} esac\nexit 9')
        jobs.append((work, script("study", "start", "baseline", work=work, env={"PYTHON": python}, wait=False)))
    for work, job in jobs:
        job.communicate(timeout=60)
        assert job.returncode == 0
    for (work, _), (codes, code, stages) in zip(jobs, JOB_OUTCOMES):
        waited = script("study", "wait", "60", work=work)
        assert waited.returncode == (code != 0) and f"the study's job ended: exit {code}" in waited.stdout, \
            (codes, waited.stdout)
        assert (work / "calls.txt").read_text().split() == stages.split(), codes
        assert (work / "out" / "study.tar.gz").is_file(), codes  # packed, failed or not


@runs_the_fused_kernel
def test_throughput_modes_batch_sizes_and_alignment_at_toy_size(tmp_path):
    """lab/gpu/throughput.sh modes: one lab.bench --train per torch.compile mode, then one with the atomic dQ
    backward, one with the loss in chunks and one with cuDNN's SDPA first, each into its own folder; then align:
    G1 headwise with c_attn's output rows padded (lab.bench --pad_c_attn=64, model.py's), then G1 headwise and the
    baseline unpadded (--pad_c_attn=1).
    lab/gpu/throughput.sh batch, side by side with it (they are independent): G1 elementwise on the fused kernel at
    three (B, T), each into its own folder; at toy size lab.bench --tiny scales each down (B/8, T/32), so the records
    say which shape each step ran."""
    batch = script("throughput", "batch", work=tmp_path / "batch", wait=False)
    out = script("throughput", "modes", work=tmp_path / "modes")
    assert out.returncode == 0, out.stdout + out.stderr
    files = packed(tmp_path / "modes", "throughput-modes")
    modes = ["reduce-overhead", "max-autotune-no-cudagraphs"]
    assert steps(files, "throughput-modes") == [(f"bench-{mode}", "0") for mode in modes] + [
        ("bench-atomic-dq", "0"), ("bench-loss-chunk", "0"), ("bench-sdpa-cudnn", "0")]
    for mode in modes:
        record = json.loads(files[f"throughput-modes/{mode}/bench_train.json"])
        assert record["compile_mode"] == mode and record["kernel_backward"] == "recompute"
        assert record["loss_chunk"] == 0
    record = json.loads(files["throughput-modes/atomic-dq/bench_train.json"])
    assert record["compile_mode"] == "default" and record["kernel_backward"] == "atomic"
    assert {r["backend"] for r in record["records"]} == {"triton"}
    record = json.loads(files["throughput-modes/loss-chunk/bench_train.json"])
    assert record["loss_chunk"] == 16 and record["kernel_backward"] == "recompute"  # 4 chunks of the toy's 2 x 32
    assert [(r["variant"], r["backend"]) for r in record["records"]] == [("g1_elementwise", "triton")]
    assert "the loss over 16 rows of logits at a time" in files["throughput-modes/loss-chunk/bench_train.md"].decode()
    record = json.loads(files["throughput-modes/sdpa-cudnn/bench_train.json"])
    assert record["sdpa_backend"] == "cudnn" and {r["backend"] for r in record["records"]} == {"torch"}
    assert record["sdpa_order"][0] == "CUDNN_ATTENTION" and sorted(record["sdpa_order"]) == sorted(sdpa_order())
    assert [r["variant"] for r in record["records"]] == ["baseline", "g1_elementwise", "g1_headwise"]
    usage = script("throughput", "fast", work=tmp_path / "usage")
    assert usage.returncode == 2 and "usage: bash lab/gpu/throughput.sh [batch|modes|align]" in usage.stdout
    # align: the headwise gate with c_attn's outputs padded first (no earlier run measured it), on the fused kernel
    # first; then as model.py computes it beside the baseline, PyTorch attention first
    out = script("throughput", "align", work=tmp_path / "align")
    assert out.returncode == 0, out.stdout + out.stderr
    files = packed(tmp_path / "align", "throughput-align")
    assert steps(files, "throughput-align") == [(f"{mode}-{part}", "0") for mode in ("compiled", "eager")
                                                 for part in ("padded", "unpadded")]
    unpadded, padded = (json.loads(files[f"throughput-align/eager/{part}/bench_train.json"]) for part in ("unpadded",
                                                                                                           "padded"))
    assert json.loads(files["throughput-align/compiled/padded/bench_train.json"])["pad_c_attn"] == 64
    assert (unpadded["pad_c_attn"], padded["pad_c_attn"]) == (1, 64) and padded["complete"] is True
    assert [(r["variant"], r["backend"]) for r in padded["records"]] == [("g1_headwise", "triton"),
                                                                         ("g1_headwise", "torch")]
    assert [(r["variant"], r["backend"]) for r in unpadded["records"]] == [
        (v, b) for v in ("g1_headwise", "baseline") for b in ("torch", "triton")]
    assert {r["params"] for r in padded["records"]} == {unpadded["records"][0]["params"]}  # the same model
    assert "padded to a multiple of 64" in files["throughput-align/eager/padded/bench_train.md"].decode()
    # each measurement profiled once every row is timed (2 steps at toy size): the top ops by their own time, each a
    # share of the step
    for part, data in (("unpadded", unpadded), ("padded", padded)):
        for r in data["records"]:
            ops = r["top_ops"]
            assert len(ops) == 15 and ops == sorted(ops, key=lambda op: -op[1]) and ops[0][1] > 0
            assert any(name == "aten::mm" for name, _, _ in ops), ops  # the model's matmuls are among them
            table = files[f"throughput-align/eager/{part}/profile/{r['variant']}-{r['backend']}-compileFalse.txt"]
            table = table.decode()
            assert table.startswith("2 steps profiled, sorted by self_cpu_time_total") and "aten::mm" in table

    printed, _ = batch.communicate(timeout=300)
    assert batch.returncode == 0, printed
    files = packed(tmp_path / "batch", "throughput-batch")
    shapes = {"8x1024": (1, 32), "32x1024": (4, 32), "8x2048": (1, 64)}
    assert steps(files, "throughput-batch") == [(f"bench-{shape}", "0") for shape in shapes]
    for shape, (B, T) in shapes.items():
        data = json.loads(files[f"throughput-batch/{shape}/bench_train.json"])
        assert data["batch_size"] == B and data["model"]["block_size"] == T
        assert [(r["variant"], r["backend"]) for r in data["records"]] == [("g1_elementwise", "triton")]
        assert data["records"][0]["tokens_per_s"] * data["records"][0]["ms_per_step"] / 1e3 == \
            pytest.approx(B * T, rel=1e-2)


def test_each_tests_seconds_are_written_as_it_ends_once_under_xdist(tmp_path):
    """TEST_DURATIONS (tests/conftest.py, which lab/gpu/kernels.sh's tier sets): a line per test, its seconds
    (setup, call and teardown) and outcome, appended as it ends, by the main process alone under pytest-xdist, also
    when this test itself runs in an xdist worker (whose environment the pytest it starts inherits)."""
    (tmp_path / "test_three.py").write_text(
        "import time, pytest\n"
        "def test_slow():\n    time.sleep(0.3)\n"
        "def test_fails():\n    assert False\n"
        "def test_skips():\n    pytest.skip('no')\n"
        "@pytest.fixture\ndef broken():\n    yield\n    raise RuntimeError('teardown')\n"
        "def test_errs(broken):\n    pass\n"
        "@pytest.mark.xfail\ndef test_xfails():\n    assert False\n")
    env = dict(os.environ, TEST_DURATIONS=str(tmp_path / "durations.tsv"),
               PYTHONPATH=os.pathsep.join([os.path.join(REPO, "tests"), REPO]))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest", "-n", "2",
                          "test_three.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and "1 failed, 2 passed, 1 skipped, 1 xfailed, 1 error" in out.stdout, \
        out.stdout + out.stderr
    lines = sorted((line.split("\t") for line in (tmp_path / "durations.tsv").read_text().splitlines()),
                   key=lambda fields: fields[2])
    assert [(outcome, test) for _, outcome, test in lines] == [
        ("error", "test_three.py::test_errs"), ("failed", "test_three.py::test_fails"),
        ("skipped", "test_three.py::test_skips"), ("passed", "test_three.py::test_slow"),
        ("xfailed", "test_three.py::test_xfails")]
    assert float(dict((test, s) for s, _, test in lines)["test_three.py::test_slow"]) >= 0.3


def test_a_failing_step_is_recorded_and_the_rest_still_runs(tmp_path):
    """With a Python that fails every command, each step fails, the tarball still holds what there is, and the
    exit code is not 0."""
    out = script("kernels", work=tmp_path, env={"PYTHON": "false"})
    assert out.returncode != 0
    files = packed(tmp_path, "kernels")
    assert steps(files, "kernels") == [(s, "1") for s in ("bench", "tier", "bench-cudnn")]
    assert "== bench: exit 1" in out.stdout


@runs_the_fused_kernel
def test_kernel_configs_at_toy_size(tmp_path):
    """lab/gpu/kernels.sh configs: the configs' own tests, then the sweep with the autotuner on, each test named on its
    own line as it ends."""
    out = script("kernels", "configs", work=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    files = packed(tmp_path, "kernels-configs")
    assert steps(files, "kernels-configs") == [("configs", "0"), ("autotune", "0")]
    assert b"GATED_ATTENTION_CONFIGS=autotune" in files["kernels-configs/autotune.txt"]
    assert b"::test_choose_configs" in files["kernels-configs/configs.txt"]
    usage = script("kernels", "all", work=tmp_path)
    assert usage.returncode == 2 and "usage: bash lab/gpu/kernels.sh [configs]" in usage.stdout


def test_the_deadline_stops_a_step_and_still_packs(tmp_path):
    """BUDGET_S, for machines that stop commands after a fixed time: the bench is stopped at its share of the budget
    (41%: 4 s of 12), the tier at its share or at the deadline, a part that would start after the deadline is
    skipped, and the tarball is still made."""
    slow = fake_python(tmp_path / "slow-python", "sleep 60")
    started = time.time()
    out = script("kernels", work=tmp_path, env={"PYTHON": slow, "BUDGET_S": "12"})
    assert time.time() - started < 40, "the deadline did not stop the step"
    assert out.returncode == 124 and "== bench: stopped at its limit of 4 s" in out.stdout, out.stdout
    assert "== bench-cudnn: skipped, the command's deadline (BUDGET_S=12 s) has passed" in out.stdout
    files = packed(tmp_path, "kernels")
    (bench, tier, cudnn) = steps(files, "kernels")
    assert bench == ("bench", "124") and tier[1] in ("124", "skipped") and cudnn == ("bench-cudnn", "skipped")
    assert rows(files, "kernels")[0]["limit"] == "4"


def test_a_command_stopped_before_its_own_pack_leaves_the_parts_done_so_far(tmp_path):
    """A machine that stops a command at its own limit (every process of it at once, SIGKILL; no BUDGET_S set) while
    a part runs: $OUT still holds the tarball, whole, of the parts that ended before it (it used to hold nothing)."""
    python = fake_python(tmp_path / "python",
                         'case "$1 $2" in "-m pytest") echo testing; sleep 60;; *) echo benched;; esac')
    work = tmp_path / "work"
    tier = work / "kernels" / "tier.txt"
    job = script("kernels", work=work, env={"PYTHON": python}, wait=False, start_new_session=True)
    try:
        deadline = time.time() + 60
        while not (tier.exists() and b"testing" in tier.read_bytes()):  # the bench has ended, and the tier runs
            assert time.time() < deadline and job.poll() is None, "the tier did not start"
            time.sleep(0.1)
    finally:
        os.killpg(job.pid, 9)
        job.communicate(timeout=60)
    assert os.listdir(work / "out") == ["kernels.tar.gz"]  # the tarball alone: no part-written one beside it
    files = packed(work, "kernels")
    assert steps(files, "kernels") == [("bench", "0")] and b"benched" in files["kernels/bench.txt"]


def test_a_step_limit_set_by_hand_stops_each_part(tmp_path):
    """STEP_LIMIT=S, with no deadline: every part is stopped after S seconds, none is skipped."""
    slow = fake_python(tmp_path / "slow-python", "sleep 60")
    started = time.time()
    out = script("kernels", "configs", work=tmp_path, env={"PYTHON": slow, "STEP_LIMIT": "2"})
    assert time.time() - started < 30 and out.returncode == 124, out.stdout
    files = packed(tmp_path, "kernels-configs")
    assert steps(files, "kernels-configs") == [("configs", "124"), ("autotune", "124")]
    assert [r["limit"] for r in rows(files, "kernels-configs")] == ["2", "2"]


@pytest.mark.parametrize("name, value", [("BUDGET_S", "1.5"), ("BUDGET_S", "abc"), ("BUDGET_S", "-10"),
                                         ("BUDGET_S", "08"), ("STEP_LIMIT", "2m")])
def test_a_time_limit_that_is_no_whole_number_of_seconds_is_refused(tmp_path, name, value):
    """BUDGET_S and STEP_LIMIT are counted with bash's arithmetic, which reads 1.5 as a syntax error (the command
    ended at once, having run and packed nothing, with exit status 0) and abc as an unset variable's name: refused in
    one line, exit 2, before anything runs; so is a `study.sh wait` whose SECONDS is no whole number."""
    quick = fake_python(tmp_path / "python", "exit 0")
    out = script("kernels", work=tmp_path, env={"PYTHON": quick, name: value})
    assert out.returncode == 2 and out.stderr == f"error: {name}={value}: a whole number of seconds (e.g. " \
        f"{name}=3600), or unset for no limit\n", out.stdout + out.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "kernels").exists()  # nothing ran
    for words in (["1.5"], ["abc"], ["60", "60"], ["08"]):
        out = script("study", "wait", *words, work=tmp_path)
        assert out.returncode == 2 and out.stderr.startswith(f"error: wait {' '.join(words)}: SECONDS is one whole "
                                                             "number") and out.stderr.count("\n") == 1, out.stderr


def test_a_step_limit_of_0_is_refused(tmp_path):
    """timeout reads 0 seconds as no limit at all, so STEP_LIMIT=0 ran every part to its end: refused, in one
    line, before anything runs."""
    quick = fake_python(tmp_path / "python", "exit 0")
    out = script("kernels", work=tmp_path, env={"PYTHON": quick, "STEP_LIMIT": "0"})
    assert out.returncode == 2 and out.stderr == "error: STEP_LIMIT=0 stops no part (timeout reads 0 as no limit): " \
        "1 or more seconds, or unset\n", out.stdout + out.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "kernels").exists()  # nothing ran


def test_without_a_deadline_no_part_is_limited(tmp_path):
    """BUDGET_S unset: the parts whose share of a budget would limit them run with no time limit, and none is
    run under `timeout`."""
    quick = fake_python(tmp_path / "python", "exit 0")
    for args, name in (((), "kernels"), (("configs",), "kernels-configs")):
        out = script("kernels", *args, work=tmp_path, env={"PYTHON": quick})
        assert out.returncode == 0 and "stopped after" not in out.stdout, out.stdout
        assert {r["limit"] for r in rows(packed(tmp_path, name), name)} == {"none"}


def test_a_measurement_beside_a_running_study_is_refused(tmp_path):
    """kernels.sh and throughput.sh time and test things on the GPU: while the study's job runs under the same WORK
    they stop at once with one line (exit 75) and leave their folders as they were; BESIDE_STUDY=1 runs them anyway;
    neither a job that has ended (its pid file left behind) nor a pid since reused by another process blocks them."""
    quick = fake_python(tmp_path / "python", "exit 0")
    # the job as study.sh starts it: a bash running lab.repro's commands
    job = subprocess.Popen(["bash", "-c", "sleep 60; : python -m lab.repro train"], start_new_session=True)
    other = subprocess.Popen(["sleep", "60"])  # a live process that is not the job
    try:
        (tmp_path / "study-job").mkdir()
        (tmp_path / "study-job" / "pid").write_text(f"{job.pid}\n")
        (tmp_path / "kernels").mkdir()
        (tmp_path / "kernels" / "bench.txt").write_text("an earlier run's output\n")
        for name, args in (("kernels", ()), ("kernels", ("configs",)), ("throughput", ("align",))):
            out = script(name, *args, work=tmp_path, env={"PYTHON": quick})
            assert out.returncode == 75 and out.stdout.count("\n") == 1 and out.stderr == "", out.stdout + out.stderr
            assert out.stdout.startswith(f"error: the study's job is running (pid {job.pid}") and \
                "bash lab/gpu/study.sh wait" in out.stdout and "BESIDE_STUDY=1" in out.stdout, out.stdout
        assert sorted(p.name for p in (tmp_path / "kernels").iterdir()) == ["bench.txt"]
        assert not (tmp_path / "throughput-align").exists() and not (tmp_path / "out").exists()
        again = script("study", "start", "baseline", work=tmp_path, env={"PYTHON": quick})  # study.sh's own words
        assert again.returncode == 1 and f"a study is already running (pid {job.pid})" in again.stdout, again.stdout
        beside = script("kernels", work=tmp_path, env={"PYTHON": quick, "BESIDE_STUDY": "1"})
        assert beside.returncode == 0 and steps(packed(tmp_path, "kernels"), "kernels")[0] == ("bench", "0"), \
            beside.stdout
        (tmp_path / "study-job" / "pid").write_text(f"{other.pid}\n")  # the pid now names another process
        reused = script("kernels", "configs", work=tmp_path, env={"PYTHON": quick})
        assert reused.returncode == 0, reused.stdout
    finally:
        os.killpg(job.pid, 9)
        other.kill()
        job.wait(), other.wait()
    (tmp_path / "study-job" / "pid").write_text(f"{job.pid}\n")  # the job has ended
    after = script("throughput", "align", work=tmp_path, env={"PYTHON": quick})
    assert after.returncode == 0, after.stdout


def test_a_command_run_again_picks_up_where_it_left_off(tmp_path):
    """Run again with the same code, arguments and settings, a command skips the parts that succeeded (their output
    stays, and is packed) and runs the others; FRESH=1, or other settings, run every part again."""
    calls, broken = tmp_path / "calls.txt", tmp_path / "tier-fails"
    python = fake_python(tmp_path / "python", f'echo "$*" >> {calls}\n'
                                               f'[ "$1 $2" = "-m pytest" ] && [ -e {broken} ] && exit 1\necho ok')
    broken.touch()
    first = script("kernels", work=tmp_path, env={"PYTHON": python})
    assert first.returncode == 1 and steps(packed(tmp_path, "kernels"), "kernels") == [
        ("bench", "0"), ("tier", "1"), ("bench-cudnn", "0")]
    broken.unlink()
    calls.unlink()
    again = script("kernels", work=tmp_path, env={"PYTHON": python})
    assert again.returncode == 0 and "picking up where the last run of this command left off" in again.stdout
    assert "== bench: done in the last run" in again.stdout
    ran = [line for line in calls.read_text().splitlines() if not line.startswith("-c ")]  # not the version checks
    assert len(ran) == 1 and "-m pytest" in ran[0]  # only the tier ran
    files = packed(tmp_path, "kernels")
    assert [(r["step"], r["exit"], r["ran"]) for r in rows(files, "kernels")] == [
        ("bench", "0", "before"), ("tier", "0", "now"), ("bench-cudnn", "0", "before")]
    assert b"ok" in files["kernels/bench.txt"]  # the earlier run's output, kept
    for env in ({"FRESH": "1"}, {"DATA_DIR": str(tmp_path)}):
        out = script("kernels", work=tmp_path, env={"PYTHON": python, **env})
        assert out.returncode == 0 and "picking up" not in out.stdout
        assert {r["ran"] for r in rows(packed(tmp_path, "kernels"), "kernels")} == {"now"}


def test_a_study_that_fails_says_so(tmp_path):
    """A job that stops (here lab.repro refuses an unknown variant) ends `wait` with exit 1 and its output."""
    assert script("study", "start", "no_such_variant", work=tmp_path).returncode == 0  # the job starts, then fails
    waited = script("study", "wait", "60", work=tmp_path)
    assert waited.returncode == 1 and "no_such_variant" in waited.stdout and "exit 1" in waited.stdout
    usage = script("study", work=tmp_path)
    assert usage.returncode == 2 and "usage: bash lab/gpu/study.sh start" in usage.stdout


@pytest.mark.parametrize("words", [["baseline", "--root=out-mine"], ["baseline", "--", "--report_dir=out-mine/r"],
                                   ["baseline", "--study=sink_lab"]])
def test_the_study_job_is_the_committed_studys_and_refuses_a_root_or_report_of_ones_own(tmp_path, words):
    """study.sh evaluates and reports into the committed study's folders, so a --root, --report_dir or --study among
    its words (which `train` alone would honour) is refused in one line before any job starts."""
    out = script("study", "start", *words, work=tmp_path)
    assert out.returncode == 2 and out.stderr.startswith(f"error: {words[-1]}: study.sh runs the committed study only")
    assert "A study of your own" in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert not (tmp_path / "study-job").exists()  # no job


def test_the_toy_throughput_without_its_data_says_how_to_make_it(tmp_path):
    """TOY=1 throughput.sh trains on DATA_DIR: without it, one line that gives the command making a toy dataset."""
    out = script("throughput", work=tmp_path, env={"DATA_DIR": ""})
    assert out.returncode == 2 and out.stderr.startswith("error: TOY=1 needs DATA_DIR") and out.stderr.count("\n") == 1
    assert "python3 data/textdir/prepare.py --src lab --name toy --out_dir /tmp/toyds" in out.stderr, out.stderr


@pytest.mark.parametrize("name", ["kernels", "throughput", "study"])
def test_help_prints_the_usage(tmp_path, name):
    """--help (and -h) prints the script's header, which starts with its usage line, runs nothing and exits 0."""
    for flag in ("--help", "-h"):
        out = script(name, flag, work=tmp_path)
        assert out.returncode == 0 and f"usage: bash lab/gpu/{name}.sh" in out.stdout, out.stdout + out.stderr
        assert "TOY=1" in out.stdout and not out.stdout.startswith("#")
    assert not (tmp_path / "out").exists()  # nothing ran


def test_the_gpu_scripts_and_their_page_are_written_for_a_gpu_of_ones_own():
    """lab/gpu/* and docs/gpu.md describe the steps for a user with a GPU of their own: no remote runner, no lent,
    borrowed or rented machine, no fixed limit on a command, no device time, no story of a particular day."""
    forbidden = re.compile(r"runner|\blent\b|borrow|\brent(ed|al)?\b|\b(10|30|nine|ten|thirty)[- ]minutes?\b"
                           r"|\b9 minutes\b|device time|go(es)? back when idle|re-?sync|fresh working tree"
                           r"|fresh (GPU )?machine|remote|lost (a|the|whole)|kills? a command", re.IGNORECASE)
    gpu = os.path.join("lab", "gpu")
    paths = [os.path.join(gpu, f) for f in sorted(os.listdir(os.path.join(REPO, gpu)))] + ["docs/gpu.md"]
    found = []
    for path in paths:
        with open(os.path.join(REPO, path)) as f:
            found += [f"{path}:{n}: {line.strip()}" for n, line in enumerate(f, 1) if forbidden.search(line)]
    assert found == [], "\n".join(found)


def test_a_wait_that_gives_up_while_the_job_packs_waits_for_its_pack(tmp_path):
    """`wait SECONDS` that ends while the job's command has ended and the job packs (its tar slowed by 7 s) waits for
    that pack, as `wait` does without SECONDS: packing beside it would write the same tarball and folder at once."""
    slow = tmp_path / "slow-tar"
    slow.mkdir()
    (slow / "tar").write_text(f'#!/bin/sh\nsleep 7\nexec {shutil.which("tar")} "$@"\n')
    (slow / "tar").chmod(0o755)
    python = fake_python(tmp_path / "python", "exit 0")  # train, evaluate and report end at once
    work = tmp_path / "work"
    env = {"PYTHON": python, "PATH": f"{slow}{os.pathsep}{os.environ['PATH']}"}
    assert script("study", "start", "baseline", work=work, env=env).returncode == 0
    waited = script("study", "wait", "1", work=work)
    assert waited.returncode == 0 and "the study's job ended: exit 0" in waited.stdout, waited.stdout
    assert "packed when it ended" in waited.stdout and "still running" not in waited.stdout, waited.stdout


def test_a_wait_that_gives_up_packs_what_there_is_so_far(tmp_path):
    """`wait SECONDS` that ends while the job still runs (exit 3) leaves the tarball of what there is so far in $OUT,
    so that a machine stopped right after it still gives the job's command and output back."""
    python = fake_python(tmp_path / "python", '[ "$1 $2 $3" = "-m lab.repro train" ] && { echo training; sleep 60; }')
    work = tmp_path / "work"
    assert script("study", "start", "baseline", work=work, env={"PYTHON": python}).returncode == 0
    try:
        waited = script("study", "wait", "3", work=work)
        assert waited.returncode == 3 and "still running after" in waited.stdout, waited.stdout
        files = packed(work, "study")
        assert b"training" in files["study/study-job/output.txt"] and "study/study-job/exit" not in files
    finally:
        os.killpg(int((work / "study-job" / "pid").read_text()), 9)


@pytest.mark.parametrize("name, words", [("throughput", ["batch", "modes"]), ("kernels", ["configs", "extra"]),
                                         ("study", ["pack", "now"])])
def test_more_words_than_one_part_are_refused(tmp_path, name, words):
    """One part a command: `throughput.sh batch modes` ran batch alone and said nothing of modes (a GPU's time spent
    on half of what was asked). Refused in one line, exit 2, before anything runs."""
    quick = fake_python(tmp_path / "python", "exit 0")
    out = script(name, *words, work=tmp_path, env={"PYTHON": quick})
    assert out.returncode == 2 and out.stderr == f"error: {name}.sh {' '.join(words)}: one part a command (the " \
        "usage: --help); run the others one after another\n", out.stdout + out.stderr
    assert not (tmp_path / "out").exists()

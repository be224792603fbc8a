"""
gpu/*.sh, the one-command GPU steps, at toy size on a CPU (TOY=1): each runs its steps, records every step's exit
code and time, and leaves one tarball with what a GPU session must bring back; a failing step does not stop the
rest, and the script's exit code says it failed. The toy runs are also the suite's runs of bench.py --tiny, checked
with test_bench.py's checks.

    python -m pytest -q test_gpu_scripts.py
"""

import csv
import io
import json
import os
import shutil
import subprocess
import tarfile
import time

import pytest

from common import sdpa_order
from test_bench import check_bench_kernels_tiny, check_bench_train_tiny
from test_train import folder_state

REPO = os.path.dirname(os.path.abspath(__file__))


def script(name, *args, work, env=None, wait=True):
    env = {**os.environ, "TOY": "1", "WORK": str(work), "OUT": str(work / "out"), **(env or {})}
    cmd = ["bash", os.path.join(REPO, "gpu", f"{name}.sh"), *args]
    if not wait:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def packed(work, name):
    """{path inside the tarball (from the work folder on): bytes} of $OUT/<name>.tar.gz."""
    with tarfile.open(work / "out" / f"{name}.tar.gz") as tar:
        return {m.name.split(f"{work.name}/", 1)[-1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def steps(files, name):
    return [(r["step"], r["exit"]) for r in csv.DictReader(io.StringIO(files[f"{name}/steps.tsv"].decode()), delimiter="\t")]


def bench_output(files, name):
    """What bench.py printed in the script's bench step (after the step's own first line, its command)."""
    return files[f"{name}/bench.txt"].decode().split("\n", 1)[1]


def test_the_three_gpu_steps_at_toy_size(tmp_path, dataset):
    """kernels.sh, throughput.sh and the study's start / wait / pack, side by side (they are independent)."""
    data = {"DATA_DIR": dataset}
    results = folder_state(os.path.join(REPO, "results"))  # committed GPU measurements: toy runs must not touch them
    jobs = {name: script(name, work=tmp_path / name, env=data, wait=False) for name in ("kernels", "throughput")}
    study = tmp_path / "study"
    # the budget (0.6 s) lets the first run start (nothing is timed yet), and no second: it would end too late
    start = script("study", "start", "baseline", "g1_elementwise:1", "--budget_min=0.01", "--max_iters=6",
                   "--eval_interval=3", "--",
                   "--windows=4", "--quant=w4a4", "--lengths=1,2", "--keep_first=0,1", work=study, env=data)
    assert start.returncode == 0 and "started (pid" in start.stdout, start.stdout + start.stderr
    again = script("study", "start", "baseline", work=study, env=data)
    assert again.returncode == 1 and "already running" in again.stdout  # one study at a time
    waited = script("study", "wait", "200", work=study)
    assert waited.returncode == 0 and "the study's job ended: exit 0" in waited.stdout, waited.stdout
    # the job packed its results when it ended, and `wait` brought them back at once
    assert "packed when it ended" in waited.stdout and (study / "out" / "study.tar.gz").is_file()
    # a runner that copies a fresh working tree before each command deletes the report folder (which git does not
    # ignore) between commands: `pack` still gives the report, from the job's own tarball
    shutil.rmtree(study / "repro-tiny" / "report")
    (study / "out" / "study.tar.gz").unlink()
    assert script("study", "pack", work=study).returncode == 0
    for name, job in jobs.items():
        out, _ = job.communicate(timeout=300)
        assert job.returncode == 0, out

    kernels = packed(tmp_path / "kernels", "kernels")
    assert steps(kernels, "kernels") == [("bench", "0"), ("tier", "0"), ("bench-cudnn", "0")]
    cudnn = json.loads(kernels["kernels/bench-cudnn/bench_kernels.json"])
    assert cudnn["sdpa_backend"] == "cudnn" and {r["provider"] for r in cudnn["records"]} >= {"sdpa", "sdpa+gate"}
    # the order in force while it timed (not only the key's value): cuDNN first, then PyTorch's own order
    order = ["CUDNN_ATTENTION"] + [b for b in sdpa_order() if b != "CUDNN_ATTENTION"]
    assert cudnn["sdpa_order"] == order
    assert f"in the order {', '.join(order)}" in kernels["kernels/bench-cudnn/bench_kernels.md"].decode()
    assert b"torch" in kernels["kernels/env.txt"] and b"1 passed" in kernels["kernels/tier.txt"]
    assert b"::test_choose_configs" in kernels["kernels/tier.txt"] and b"PASSED" in kernels["kernels/tier.txt"]
    check_bench_kernels_tiny(bench_output(kernels, "kernels"), tmp_path / "kernels" / "kernels" / "bench")

    throughput = packed(tmp_path / "throughput", "throughput")
    assert steps(throughput, "throughput") == [("sync", "0"), ("bench", "0"), ("train", "0")]
    assert b"passed" in throughput["throughput/sync.txt"]  # the optimizer-step tests (the GPU's test skips here)
    check_bench_train_tiny(bench_output(throughput, "throughput"), tmp_path / "throughput" / "throughput" / "bench")
    log = throughput["throughput-run/log.jsonl"].decode()  # the run's log, not its checkpoints
    assert '"tokens_per_s"' in log and not any(p.endswith(".pt") for p in throughput)

    files = packed(study, "study")
    assert {"repro-tiny/report/REPORT.md", "repro-tiny/report/summary.json", "repro-tiny/report/evaluate/summary.json",
            "repro-tiny/commands.jsonl", "repro-tiny/baseline/seed1337/log.jsonl", "study/study-job/output.txt"} <= set(files)
    assert files["study/study-job/exit"].strip() == b"0"
    # toy runs write only under WORK: results/, which holds committed GPU measurements only, is as it was
    assert folder_state(os.path.join(REPO, "results")) == results
    assert b"repro.py evaluate --windows=4" in files["study/study-job/command"]
    assert b"leaves 1 run untrained: g1_elementwise seed 1337" in files["study/study-job/output.txt"]
    assert "repro-tiny/g1_elementwise/seed1337/log.jsonl" not in files  # and the report followed, on baseline alone


def test_throughput_compile_modes_at_toy_size(tmp_path):
    """gpu/throughput.sh modes: one bench.py --train per torch.compile mode, then one with the atomic dQ backward, one
    with the loss in chunks and one with cuDNN's SDPA first, each into its own folder."""
    out = script("throughput", "modes", work=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    files = packed(tmp_path, "throughput-modes")
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
    usage = script("throughput", "fast", work=tmp_path)
    assert usage.returncode == 2 and "gpu/throughput.sh [batch|modes]" in usage.stdout


def test_throughput_batch_sizes_at_toy_size(tmp_path):
    """gpu/throughput.sh batch: G1 elementwise on the fused kernel at three (B, T), each into its own folder; at toy
    size bench.py --tiny scales each down (B/8, T/32), so the records say which shape each step ran."""
    out = script("throughput", "batch", work=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    files = packed(tmp_path, "throughput-batch")
    shapes = {"8x1024": (1, 32), "32x1024": (4, 32), "8x2048": (1, 64)}
    assert steps(files, "throughput-batch") == [(f"bench-{shape}", "0") for shape in shapes]
    for shape, (B, T) in shapes.items():
        data = json.loads(files[f"throughput-batch/{shape}/bench_train.json"])
        assert data["batch_size"] == B and data["model"]["block_size"] == T
        assert [(r["variant"], r["backend"]) for r in data["records"]] == [("g1_elementwise", "triton")]
        assert data["records"][0]["tokens_per_s"] * data["records"][0]["ms_per_step"] / 1e3 == \
            pytest.approx(B * T, rel=1e-2)


def test_a_failing_step_is_recorded_and_the_rest_still_runs(tmp_path):
    """With a Python that fails every command, each step fails, the tarball still holds what there is, and the
    exit code is not 0."""
    out = script("kernels", work=tmp_path, env={"PYTHON": "false"})
    assert out.returncode != 0
    files = packed(tmp_path, "kernels")
    assert steps(files, "kernels") == [(s, "1") for s in ("bench", "tier", "bench-cudnn")]
    assert "== bench: exit 1" in out.stdout


def test_kernel_configs_at_toy_size(tmp_path):
    """gpu/kernels.sh configs: the configs' own tests, then the sweep with the autotuner on, each test named on its
    own line as it ends."""
    out = script("kernels", "configs", work=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    files = packed(tmp_path, "kernels-configs")
    assert steps(files, "kernels-configs") == [("configs", "0"), ("autotune", "0")]
    assert b"GATED_ATTENTION_CONFIGS=autotune" in files["kernels-configs/autotune.txt"]
    assert b"::test_choose_configs" in files["kernels-configs/configs.txt"]
    usage = script("kernels", "all", work=tmp_path)
    assert usage.returncode == 2 and "gpu/kernels.sh [configs]" in usage.stdout


def test_the_deadline_stops_a_step_and_still_packs(tmp_path):
    """A remote runner that kills a command at its limit would leave nothing: past the command's deadline
    (BUDGET_S) the running step is stopped (exit 124), the steps after it are skipped, and the tarball is made."""
    slow = tmp_path / "slow-python"
    slow.write_text('#!/bin/sh\ncase "$1" in -c) exit 1;; esac\nsleep 60\n')  # start_log's version checks end at once
    slow.chmod(0o755)
    started = time.time()
    out = script("kernels", work=tmp_path, env={"PYTHON": str(slow), "BUDGET_S": "8"})
    assert time.time() - started < 40, "the deadline did not stop the step"
    assert out.returncode == 124 and "stopped at its limit of" in out.stdout, out.stdout
    files = packed(tmp_path, "kernels")
    assert steps(files, "kernels") == [("bench", "124"), ("tier", "skipped"), ("bench-cudnn", "skipped")]


def test_a_study_that_fails_says_so(tmp_path):
    """A job that stops (here repro.py refuses an unknown variant) ends `wait` with exit 1 and its output."""
    assert script("study", "start", "no_such_variant", work=tmp_path).returncode == 0  # the job starts, then fails
    waited = script("study", "wait", "60", work=tmp_path)
    assert waited.returncode == 1 and "no_such_variant" in waited.stdout and "exit 1" in waited.stdout
    usage = script("study", work=tmp_path)
    assert usage.returncode == 2 and "gpu/study.sh start" in usage.stdout

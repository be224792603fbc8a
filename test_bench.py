"""bench.py's tiny modes on CPU (Triton interpreter, fp32) write complete, sensible records."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def run_bench(tmp_path, *flags):
    out = subprocess.run([sys.executable, "bench.py", *flags, "--tiny", f"--out_dir={tmp_path}"], cwd=HERE,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]


def test_bench_kernels_tiny(tmp_path):
    run_bench(tmp_path, "--kernels", "--gqa=2")
    data = json.load(open(tmp_path / "bench_kernels.json"))
    assert data["date"] and data["device"] and "--kernels" in data["command"]
    keys = {"device", "B", "H", "Hkv", "T", "D", "causal", "dtype", "provider", "mode", "ms", "tflops"}
    records = data["records"]
    for r in records:
        assert keys <= r.keys(), keys - r.keys()
        assert r["ms"] > 0 and r["tflops"] > 0 and r["causal"] is True and r["dtype"] == "float32"
        assert r["H"] * r["D"] == 64 and r["H"] % r["Hkv"] == 0
    combos = {(r["provider"], r["mode"], r["T"], r["Hkv"]) for r in records}
    want = {(p, m, t, hkv) for p in ("sdpa", "sdpa+gate", "triton", "triton+gate") for m in ("fwd", "fwd+bwd")
            for t in (16, 40) for hkv in (2, 1)}
    assert combos == want and len(records) == len(want)
    md = open(tmp_path / "bench_kernels.md").read()
    assert "python bench.py --kernels" in md and md.count("| triton+gate |") == 8


def test_bench_train_tiny(tmp_path):
    run_bench(tmp_path, "--train", "--match_params")
    data = json.load(open(tmp_path / "bench_train.json"))
    assert data["date"] and data["batch_size"] == 2 and data["match_params"] is True
    keys = {"device", "config", "gate", "backend", "compile", "tokens_per_s", "mfu", "ms_per_step", "peak_mem_gb"}
    records = data["records"]
    runs = {(r["gate"], r["backend"]) for r in records}
    assert runs == {("none", "torch"), ("none", "triton"), ("g1-elementwise", "triton"),
                    ("g1-elementwise", "torch"), ("g1-headwise", "triton")}
    for r in records:
        assert keys <= r.keys(), keys - r.keys()
        assert r["ms_per_step"] > 0 and r["tokens_per_s"] > 0 and r["compile"] is False and "error" not in r
        # tokens/s and ms/step describe the same measurement: batch 2 x T 32 tokens per step
        assert r["tokens_per_s"] * r["ms_per_step"] / 1e3 == pytest.approx(64, rel=1e-2)
    params = {r["gate"]: r["params"] for r in records}
    assert abs(params["g1-elementwise"] - params["none"]) < 0.01 * params["none"]  # param-matched
    assert "python bench.py --train" in open(tmp_path / "bench_train.md").read()

"""analyze.py on checkpoints with known answers, and the repro.py study pipeline at toy size (CPU)."""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from analyze import analyze
from data.shards import val_batches, write_dataset
from model import GPT, GPTConfig
from train import save_checkpoint

REPO = os.path.dirname(os.path.abspath(__file__))
VOCAB = 50304


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A small dataset of random GPT-2 token ids: analysis needs windows, not meaning."""
    root = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    docs = {split: [rng.integers(0, 50000, n, dtype=np.uint16) for n in (3000, 2000)] for split in ("train", "val")}
    write_dataset(str(root), "toy", docs, source="random tokens")
    return str(root)


def make_run(run_dir, data_dir, uniform_attention=False, **kw):
    """A checkpoint as train.py writes it, for a model whose statistics we can predict."""
    torch.manual_seed(0)
    cfg = GPTConfig(block_size=32, vocab_size=VOCAB, n_layer=2, n_head=2, n_embd=32, attn_backend="torch", **kw)
    model = GPT(cfg)
    if uniform_attention:  # W_q = 0: every score is 0, query i attends 1/(i+1) to each earlier token
        for block in model.transformer.h:
            with torch.no_grad():
                block.attn.c_attn.weight[:cfg.n_embd].zero_()
                if block.attn.gate is not None:
                    block.attn.gate.gate_proj.weight.zero_()  # every gate score = sigmoid(0) = 1/2
    os.makedirs(run_dir)
    config = dict(dataset="toy", data_dir=data_dir, gradient_accumulation_steps=2, batch_size=4, learning_rate=1e-3)
    save_checkpoint({"model": model.state_dict(), "model_args": dataclasses.asdict(cfg), "iter_num": 10,
                     "config": config, "health": {"loss_spikes": 3}}, os.path.join(run_dir, "ckpt.pt"))
    return model


def test_analyze_known_answers(tmp_path, dataset):
    make_run(str(tmp_path / "base"), dataset, uniform_attention=True, gate="none")
    gated = make_run(str(tmp_path / "g1"), dataset, uniform_attention=True, gate="g1")
    summary = analyze([str(tmp_path / "base"), str(tmp_path / "g1")], ["base", "g1"], str(tmp_path / "res"),
                      device="cpu", batches=2, batch_size=3, map_tokens=16)
    b, g = summary["runs"]
    T = 32
    uniform = sum(1 / (i + 1) for i in range(1, T)) / (T - 1)
    assert b["first_token_attn"] == pytest.approx(uniform, abs=1e-6)
    assert b["layers"]["first_token_attn"] == pytest.approx([uniform] * 2, abs=1e-6)
    assert g["gate_mean"] == pytest.approx(0.5) and g["gate_below_0.1"] == 0.0 and b["gate_mean"] is None
    assert b["tokens"] == 10 * 2 * 4 * 32 and b["loss_spikes"] == 3 and b["lr"] == 1e-3

    # val loss and M-Act recomputed directly on the same fixed validation windows
    losses, acts = [], []
    for blk in gated.transformer.h:
        blk.register_forward_hook(lambda m, i, o: acts.append(o.abs().max().item()))
    with torch.no_grad():
        for x, y in val_batches(dataset, T, 3, 2):
            losses.append(gated.eval()(x, y)[1].item())
    assert g["val_loss"] == pytest.approx(np.mean(losses), rel=1e-5)
    assert g["layers"]["max_act"] == pytest.approx([max(acts[0::2]), max(acts[1::2])], rel=1e-5)
    assert g["params"] - b["params"] == 2 * 32 * 32  # G1 elementwise: n_embd * n_head * head_dim per layer

    on_disk = json.load(open(tmp_path / "res" / "summary.json"))
    assert [r["label"] for r in on_disk["runs"]] == ["base", "g1"] and on_disk["device"].startswith("CPU")
    pytest.importorskip("matplotlib")
    for name in ("layers.png", "gate_hist.png", "attn_maps.png"):
        assert (tmp_path / "res" / name).stat().st_size > 1000


def test_analyze_cli_errors(tmp_path):
    result = subprocess.run([sys.executable, os.path.join(REPO, "analyze.py"), str(tmp_path / "nothing")],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "no ckpt.pt" in result.stderr and "train.py" in result.stderr


def test_repro_pipeline_tiny(tmp_path, dataset):
    """The study's commands end to end at toy size: train two variants, then the report."""
    root, env = str(tmp_path / "runs"), {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, os.path.join(REPO, "repro.py")]
    train = subprocess.run(cmd + ["train", "baseline", "g1_elementwise", "--tiny", f"--root={root}", "--dataset=toy",
                                  f"--data_dir={dataset}", "--max_iters=6", "--eval_interval=3", "--block_size=32"],
                           capture_output=True, text=True, env=env, cwd=tmp_path)
    assert train.stdout.count("exit code 0") == 2, train.stdout + train.stderr
    report = subprocess.run(cmd + ["report", "--tiny", f"--root={root}"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    records = json.load(open(os.path.join(root, "report", "summary.json")))
    assert [r["variant"] for r in records] == ["baseline", "g1_elementwise"]
    for r in records:
        assert set(r) >= {"variant", "val_loss", "first_token_attn", "max_act", "gate_mean", "tokens", "lr", "device", "loss_spikes"}
        assert r["tokens"] == 6 * 8 * 32 and r["tiny"] and 0 < r["first_token_attn"] < 1 and r["max_act"] > 0
    assert records[0]["gate_mean"] is None and 0 < records[1]["gate_mean"] < 1
    text = open(os.path.join(root, "report", "REPORT.md")).read()
    assert "TINY CPU SMOKE TEST" in text and "| baseline |" in text and "G1 removes the attention sink" in text


def test_repro_rejects_unknown_variant():
    result = subprocess.run([sys.executable, os.path.join(REPO, "repro.py"), "train", "g9"], capture_output=True, text=True)
    assert result.returncode != 0 and "g9" in result.stderr and "g1_elementwise" in result.stderr

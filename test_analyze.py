"""analyze.py on checkpoints with known answers and on a real (tiny) train.py run, and the repro.py study
pipeline at toy size (CPU)."""

import dataclasses
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import analyze
import repro
import train
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


@pytest.fixture(scope="module")
def trained_run(dataset, tmp_path_factory):
    """A real 4-iteration train.py run on the toy data: its out_dir (ckpt.pt, best.pt, log.jsonl)."""
    out_dir = str(tmp_path_factory.mktemp("trained") / "run")
    train.main(["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=4", "--eval_iters=2",
                "--max_iters=4", "--eval_interval=2", "--warmup_iters=1", "--learning_rate=3e-3", "--device=cpu",
                "--dataset=toy", f"--data_dir={dataset}", f"--out_dir={out_dir}"])
    return out_dir


def make_run(run_dir, data_dir, uniform_attention=False, eval_iters=5, **kw):
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
    config = dict(dataset="toy", data_dir=data_dir, gradient_accumulation_steps=2, batch_size=4, eval_iters=eval_iters,
                  learning_rate=1e-3, max_iters=10, seed=1)
    save_checkpoint({"model": model.state_dict(), "model_args": dataclasses.asdict(cfg), "iter_num": 10,
                     "config": config, "health": {"loss_spikes": 3}}, os.path.join(run_dir, "ckpt.pt"))
    return model


def test_analyze_known_answers(tmp_path, dataset):
    make_run(str(tmp_path / "base"), dataset, uniform_attention=True, gate="none")
    gated = make_run(str(tmp_path / "g1"), dataset, uniform_attention=True, gate="g1")
    summary = analyze.analyze([str(tmp_path / "base"), str(tmp_path / "g1")], ["base", "g1"], str(tmp_path / "res"),
                              device="cpu", batches=2, batch_size=3, map_tokens=16)
    b, g = summary["runs"]
    T = 32
    uniform = sum(1 / (i + 1) for i in range(1, T)) / (T - 1)
    assert b["first_token_attn"] == pytest.approx(uniform, abs=1e-6)
    assert b["layers"]["first_token_attn"] == pytest.approx([uniform] * 2, abs=1e-6)
    assert g["gate_mean"] == pytest.approx(0.5) and g["gate_below_0.1"] == 0.0 and b["gate_mean"] is None
    assert b["tokens"] == 10 * 2 * 4 * 32 and b["loss_spikes"] == 3 and b["lr"] == 1e-3

    # val loss and M-Act recomputed directly on the windows asked for (2 batches of 3, not the runs' 5 of 4)
    assert summary["validation"] == {"batches": 2, "batch_size": 3, "source": "set by --batches/--batch_size"}
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


def test_analyze_uses_the_runs_own_eval_windows(trained_run, dataset, tmp_path, monkeypatch, capsys):
    """By default a run is measured on the windows train.py evaluated it on, so the val loss is the logged one;
    a second run trained with other eval windows is measured on the first run's, with a note."""
    monkeypatch.chdir(tmp_path)  # the default out_dir is relative: out-analysis/, beside results/, git-ignored
    make_run(str(tmp_path / "other"), dataset, eval_iters=5)  # trained with 5 x 4 eval windows, not 2 x 4
    with open(os.path.join(trained_run, "log.jsonl"), "a") as f:
        f.write('{"iter": 6, "val_lo')  # the last line a crash cut short
    analyze.main([trained_run, str(tmp_path / "other"), "--labels=run,other"])
    out = capsys.readouterr().out
    summary = json.load(open(tmp_path / "out-analysis" / "summary.json"))
    run = summary["runs"][0]
    _, checkpoint = train.load_checkpoint(os.path.join(trained_run, "ckpt.pt"))
    assert checkpoint["iter_num"] == 4 and run["val_loss"] == pytest.approx(checkpoint["val_loss"], rel=1e-5)
    assert run["val_loss_logged"] == checkpoint["val_loss"]
    assert summary["validation"]["batches"] == 2 and summary["validation"]["batch_size"] == 4
    assert "'run'" in summary["validation"]["source"] and "2 batches x 4 windows" in out
    assert summary["runs"][1]["eval_windows"]["batches"] == 2  # measured on run's windows, not its own 5
    assert "different eval windows" in out and "skipped 1 unreadable line" in out

    # best.pt, the lowest-validation-loss state, on request
    best = train.load_checkpoint(os.path.join(trained_run, "best.pt"))[1]
    summary = analyze.analyze([trained_run], out_dir=str(tmp_path / "best"), device="cpu", checkpoint="best.pt")
    assert summary["checkpoint"] == "best.pt" and summary["runs"][0]["val_loss"] == pytest.approx(best["val_loss"], rel=1e-5)


def test_analyze_cli_errors(tmp_path, trained_run):
    # as a user sees it: one line, no traceback
    result = subprocess.run([sys.executable, os.path.join(REPO, "analyze.py"), str(tmp_path / "nothing")],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "no ckpt.pt" in result.stderr and "train.py" in result.stderr
    assert result.stderr.strip().count("\n") == 0, result.stderr

    def error(*argv):
        with pytest.raises(SystemExit) as e:
            analyze.main([*argv, f"--out_dir={tmp_path / 'res'}"])
        return str(e.value.code)

    # a checkpoint name the run does not have: the message names it and what the run has
    shutil.copytree(trained_run, tmp_path / "latest_only", ignore=shutil.ignore_patterns("best.pt"))
    message = error(str(tmp_path / "latest_only"), "--checkpoint=best.pt")
    assert message.startswith("error: no best.pt in") and "ckpt.pt" in message and "--checkpoint" in message
    # a checkpoint cut short (a full disk, a copy interrupted): train.load_checkpoint's one line
    os.makedirs(tmp_path / "cut")
    data = open(os.path.join(trained_run, "ckpt.pt"), "rb").read()
    open(tmp_path / "cut" / "ckpt.pt", "wb").write(data[:len(data) // 2])
    message = error(str(tmp_path / "cut"))
    assert message.startswith("error: ") and str(tmp_path / "cut" / "ckpt.pt") in message and "\n" not in message
    # a checkpoint without train.py's run settings (someone else's file): which settings are missing
    os.makedirs(tmp_path / "foreign")
    checkpoint = train.load_checkpoint(os.path.join(trained_run, "ckpt.pt"))[1]
    save_checkpoint({"model": checkpoint["model"], "model_args": checkpoint["model_args"]}, str(tmp_path / "foreign" / "ckpt.pt"))
    assert "lacks train.py's run settings" in error(str(tmp_path / "foreign"))
    assert "--labels has 1 names for 2 runs" in error(trained_run, trained_run, "--labels=a")


def test_repro_pipeline_tiny(tmp_path, dataset):
    """The study's commands end to end at toy size: train two variants, train one again (a resume), report."""
    root, env = str(tmp_path / "runs"), {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, os.path.join(REPO, "repro.py")]
    extra = ["--dataset=toy", f"--data_dir={dataset}", "--max_iters=6", "--eval_interval=3", "--block_size=32"]
    first = subprocess.run(cmd + ["train", "baseline", "g1_elementwise", "--tiny", f"--root={root}", *extra],
                           capture_output=True, text=True, env=env, cwd=tmp_path)
    assert first.stdout.count("exit code 0") == 2 and first.stdout.count("starting a new run") == 2, first.stdout + first.stderr
    again = subprocess.run(cmd + ["train", "baseline", "--tiny", f"--root={root}", *extra],
                           capture_output=True, text=True, env=env, cwd=tmp_path)
    assert "resuming the run" in again.stdout and "nothing to do" in again.stdout and "exit code 0" in again.stdout

    # commands.jsonl: exactly the commands that ran, as printed before each
    commands = [json.loads(line) for line in open(os.path.join(root, "commands.jsonl"))]
    assert [c["variant"] for c in commands] == ["baseline", "g1_elementwise", "baseline"]
    printed = [line for line in (first.stdout + again.stdout).splitlines() if line.startswith(sys.executable)]
    assert [c["command"] for c in commands] == printed
    for c in commands:
        argv = shlex.split(c["command"])
        assert argv[1] == os.path.join(REPO, "train.py") and f"--out_dir={os.path.join(root, c['variant'])}" in argv
        assert argv[-len(extra):] == extra and c["exit_code"] == 0 and c["seconds"] > 0 and c["date"]
    assert "--init_from=resume" in commands[2]["command"] and "--init_from" not in commands[0]["command"]

    report = subprocess.run(cmd + ["report", "--tiny", f"--root={root}"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    records = json.load(open(os.path.join(root, "report", "summary.json")))
    assert [r["variant"] for r in records] == ["baseline", "g1_elementwise"]
    for r in records:
        assert r["tokens"] == 6 * 8 * 32 and r["tiny"] and 0 < r["first_token_attn"] < 1 and r["max_act"] > 0
        assert r["ppl"] == pytest.approx(math.exp(r["val_loss"]))
        # measured on the run's own eval windows: the val loss train.py logged for that checkpoint
        logged = train.load_checkpoint(os.path.join(root, r["variant"], "ckpt.pt"))[1]["val_loss"]
        assert r["val_loss"] == pytest.approx(logged, rel=1e-5)
    assert records[0]["gate_mean"] is None and 0 < records[1]["gate_mean"] < 1

    text = open(os.path.join(root, "report", "REPORT.md")).read()
    assert "SMOKE TEST" in text.splitlines()[0] and "concludes nothing" in text
    assert not re.search(r"\b(yes|no)\b", text, re.IGNORECASE)  # no verdicts
    assert "central claims" not in text and "GA PPL" not in text  # no claims, no paper columns
    assert "To be written" not in text and "TODO" not in text
    assert "| val loss (nats) | perplexity |" in text and "| 1,536 |" in text and "0.0M" not in text
    assert f"`{commands[2]['command']}`" in text and f"`{commands[1]['command']}`" in text  # the last of each
    assert f"`{commands[0]['command']}`" not in text


def full_study_records(skip=()):
    """Hand-made records of a finished full-size study, as repro.report writes them."""
    records = []
    for i, v in enumerate(v for v in repro.VARIANTS if v not in skip):
        gated = repro.VARIANTS[v]["gate"] != "none"
        records.append(dict(variant=v, val_loss=3.5 - 0.01 * i, ppl=math.exp(3.5 - 0.01 * i), first_token_attn=0.4,
                            max_act=100.0, peak_act=300.0, gate_mean=0.2 if gated else None,
                            **{"gate_below_0.1": 0.4 if gated else None}, tokens=104_857_600, lr=3e-3, iter=1600,
                            max_iters=1600, seed=1337, loss_spikes=0, nonfinite_steps=0, exit_code=0,
                            model=dict(n_layer=8, n_embd=512, n_head=8, block_size=512)))
    return records


def test_render_report_full_study_lists_claims_without_verdicts():
    records = full_study_records(skip=("g5",))
    summary = dict(device="NVIDIA H100", date="2026-11-23", plots=[],
                   validation=dict(batches=20, batch_size=64, source="the eval windows run 'baseline' was trained with"))
    commands = {r["variant"]: dict(command=f"python train.py --out_dir=out-repro/{r['variant']}", exit_code=0,
                                   seconds=240.0, date="2026-11-23 10:00:00") for r in records if r["variant"] != "dyt"}
    text = repro.render_report(records, summary, "out-repro", False, commands, "python repro.py report")

    assert "SMOKE" not in text and "To be written" not in text and "TODO" not in text
    assert not re.search(r"\b(yes|no)\b", text, re.IGNORECASE)
    assert "Verdicts are not given" in text and "several seeds" in text and "planned work" in text
    for claim, *_ in repro.CLAIMS:
        assert f"| {claim} |" in text
    # the G1 loss claim: our difference in nats and as a perplexity ratio, beside GA's perplexities
    d = records[1]["val_loss"] - records[0]["val_loss"]
    assert f"{d:+.4f} nats (PPL ×{math.exp(d):.3f})" in text and "GA PPL 6.026 → 5.761" in text
    assert "(PPL ×0.956)" in text and "GN loss 1.964 → 2.216 | +0.252 nats" in text  # DyT costs loss in GN
    # loss and perplexity in separate labelled columns, ours and the papers', with the caveat on scale
    assert "| val loss (nats) | perplexity |" in text and "| GA PPL | GN loss |" in text
    assert "| baseline | 6.026 | 1.964 |" in text and "Absolute values are not comparable" in text
    assert "| 105M |" in text and "0.0M" not in text
    assert "baseline → g5: g5 not trained" in text
    assert "- dyt: not recorded" in text and "`python train.py --out_dir=out-repro/baseline`" in text


def test_token_counts_read_well_at_every_scale():
    assert [repro.fmt_tokens(n) for n in (1536, 12_288, 1_228_800, 10_485_760, 104_857_600, 2_100_000_000)] == \
        ["1,536", "12,288", "1.23M", "10.5M", "105M", "2.1B"]


def test_variants_are_what_their_names_and_paper_rows_say():
    fields = {f.name for f in dataclasses.fields(GPTConfig)}
    for v, flags in repro.VARIANTS.items():
        GPTConfig(n_layer=1, n_head=2, n_embd=32, **{k: x for k, x in flags.items() if k in fields})  # valid flags
        assert (flags["gate"] == "g1") == v.startswith("g1"), v  # a g1_ name means a G1 gate, and only then
        assert v in repro.PAPER
    # rows compared with a paper row that has no gate have no gate either
    assert repro.VARIANTS["sdpa_rmsnorm"] == dict(gate="none", sdpa_nonlin="rmsnorm")
    assert repro.VARIANTS["dyt"] == dict(gate="none", norm="dyt") and repro.PAPER["dyt"]["gn_max_act"] == 73
    assert repro.PAPER["sdpa_rmsnorm"]["ga_ppl"] == 5.847
    for _, ref, variant, _ in repro.CLAIMS:
        assert variant in repro.VARIANTS and ref in (None, *repro.VARIANTS)


def test_repro_rejects_unknown_variant():
    result = subprocess.run([sys.executable, os.path.join(REPO, "repro.py"), "train", "g9"], capture_output=True, text=True)
    assert result.returncode != 0 and "g9" in result.stderr and "g1_elementwise" in result.stderr

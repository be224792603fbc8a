"""lab/evaluate.py (python -m lab.evaluate): the quantizer against its definition, each mode against what it must
reproduce when nothing is changed (16 bits, a factor of 1, a window that cuts nothing), and the tool end to end (its
main) on train.py-format runs."""

import dataclasses
import errno
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lab.evaluate as evaluate
import lab.report as report
from model import GPT
from runfolder import code_version
from test_analyze import (HOLD, REPO, assert_every_plot_is_labelled, assert_legends_in_image_beside_the_data, copy_run,
    disk_full, error_of, files_of, keep_figures, keep_saved, make_run, matplotlib_colour, prepare_again, read_only,
    set_provenance, unwritable_out_dir)

VOCAB = 50304


# ----------------------------------------------------------------------------
# quant

def test_fake_quantize_is_round_to_nearest_on_a_symmetric_grid_per_row():
    torch.manual_seed(0)
    x = torch.randn(5, 64, dtype=torch.float64)
    x[2, 7] = 1000.0  # a massive activation in one row
    for bits in (2, 4, 8):
        q = 2 ** (bits - 1) - 1
        scale = x.abs().amax(1, keepdim=True) / q
        y = evaluate.fake_quantize(x, bits)
        steps = y / scale
        torch.testing.assert_close(steps, steps.round())  # on the grid scale * integer
        assert steps.abs().max() <= q + 1e-9
        torch.testing.assert_close(y.abs().amax(1), x.abs().amax(1))  # each row's largest value is a grid point
        assert ((y - x).abs() <= scale / 2 + 1e-12).all()  # round to nearest: within half a step
        torch.testing.assert_close(evaluate.fake_quantize(y, bits), y)  # values on the grid come back unchanged
        # the other rows do not feel row 2's outlier (one scale per row)...
        torch.testing.assert_close(y[[0, 1, 3, 4]], evaluate.fake_quantize(x[[0, 1, 3, 4]], bits))
    # ...while in its own row, at 4 bits, every other feature rounds to 0: what a massive activation costs
    assert (evaluate.fake_quantize(x, 4)[2].count_nonzero() == 1)
    assert evaluate.fake_quantize(x, 16) is x and evaluate.fake_quantize(torch.zeros(2, 3), 4).eq(0).all()


@pytest.mark.parametrize("text,bits", [("w8a8", (8, 8)), ("W4A16", (4, 16)), ("w4a4", (4, 4)), ("w16a8", (16, 8))])
def test_settings_parse(text, bits):
    assert evaluate.parse_setting(text) == bits


@pytest.mark.parametrize("text", ["w4", "a4w4", "w1a8", "w12a8", "wxa8", "8-8", "w33a33", "w8a32", "w17a8", "w0a8",
                                  "w\u00b2a8"])  # a superscript two: a digit to isdigit, not to int()
def test_bad_settings_say_how_to_write_one(text):
    with pytest.raises(ValueError, match="wNaM"):
        evaluate.parse_setting(text)


def test_a_quantized_model_rounds_every_block_linear_weight_and_input_and_nothing_else(tmp_path):
    model = make_run(str(tmp_path / "r"), str(tmp_path), gate="g1", norm="gatednorm").eval()
    x = torch.randint(0, VOCAB, (2, 32))
    same = evaluate.quantized(model, 16, 16)
    torch.testing.assert_close(same(x)[0], model(x)[0], rtol=0, atol=0)
    q = evaluate.quantized(model, 4, 8)
    linears = {n for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert {"transformer.h.0.attn.c_attn", "transformer.h.1.mlp.c_proj", "transformer.h.0.ln_1.down",
            "lm_head"} <= linears
    for name, p in q.named_parameters():
        original = model.get_parameter(name)
        if name.removesuffix(".weight") in linears and name.startswith("transformer.h."):
            assert p.data_ptr() != original.data_ptr()
            torch.testing.assert_close(p, evaluate.fake_quantize(original, 4))
            assert max(len(row.unique()) for row in p) <= 15  # 4 bits: -7..7 steps
        else:  # embeddings, lm_head, norms: the model's own tensors
            assert p.data_ptr() == original.data_ptr(), name
    inputs = {}
    for name in linears:
        q.get_submodule(name).register_forward_hook(lambda m, args, out, n=name: inputs.__setitem__(n, args[0]))
    q(x)
    for name, a in inputs.items():  # a forward hook sees the input after the pre-hook that quantizes it
        on_grid = torch.allclose(a, evaluate.fake_quantize(a, 8))  # 8 bits, one scale per token
        assert on_grid == name.startswith("transformer.h."), name  # not lm_head, nor the final GatedNorm's
    assert not torch.allclose(q(x)[0], model(x)[0])


# ----------------------------------------------------------------------------
# length and stream

def test_buckets_double_from_the_training_length():
    assert evaluate.buckets(32, 32) == [(0, 32)]
    assert evaluate.buckets(32, 256) == [(0, 32), (32, 64), (64, 128), (128, 256)]
    assert evaluate.buckets(32, 96) == [(0, 32), (32, 64), (64, 96)]


# ----------------------------------------------------------------------------
# The script

@pytest.fixture(scope="module")
def two_runs(dataset, tmp_path_factory):
    root = tmp_path_factory.mktemp("eval_runs")
    make_run(str(root / "base"), dataset, gate="none", qk_norm=True)
    make_run(str(root / "g1"), dataset, gate="g1")
    return str(root)


def test_evaluate_end_to_end(two_runs, tmp_path, monkeypatch):
    """Every mode on two runs: full precision is the plain loss of the same windows; the 1x length is it too for
    every scaling; RoPE as trained leaves the first T positions of longer windows as they were (causal); a window
    that keeps every position in view changes nothing, and a window that cuts does."""
    out = tmp_path / "out"
    figures = keep_figures(monkeypatch, evaluate)
    evaluate.main([f"--runs={two_runs}/base,{two_runs}/g1", "--labels=base,g1", "--device=cpu", "--windows=6",
                   "--batch_size=4", "--quant=w8a8,w4a4", "--lengths=1,2", "--rope=none,ntk,yarn",
                   "--stream_windows=4,8", "--keep_first=0,1,32", f"--out_dir={out}"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["modes"] == ["quant", "length", "stream"]
    assert [r["label"] for r in summary["models"]] == ["base", "g1"]
    # the same data, T and BOS windows: no note; a run trained without BOS windows beside them is said
    assert [r["bos"] for r in summary["models"]] == [False, False]
    assert "different windows" not in evaluate.markdown(summary)
    summary["models"][1]["bos"] = True
    assert "Note: these runs were measured on different windows (their data, T or BOS windows differ: base T=32 " \
        "bos=False, g1 T=32 bos=True): compare each run's Δ" in evaluate.markdown(summary)
    summary["models"][1]["bos"] = False
    # a record kept before the data's fingerprint was recorded has none: unknown, not different; two known ones differ
    fingerprint = summary["models"][1]["data_fingerprint"]
    summary["models"][0]["data_fingerprint"] = None
    assert "different windows" not in evaluate.markdown(summary)
    summary["models"][0]["data_fingerprint"] = dict(fingerprint, val="0" * 16)
    assert "different windows" in evaluate.markdown(summary)
    summary["models"][0]["data_fingerprint"] = fingerprint
    for r in summary["models"]:
        ckpt = evaluate.read_checkpoint(os.path.join(r["run"], "ckpt.pt"))
        model = evaluate.model_from_checkpoint(ckpt, r["run"])
        (x, y), _ = evaluate.run_windows(ckpt, 6, 32)
        (xl, yl), _ = evaluate.run_windows(ckpt, 6, 64)  # the length mode's windows, as long as the longest
        with torch.no_grad():
            loss = F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten()).item()
            first = F.cross_entropy(model(xl[:, :32])[0].flatten(0, 1), yl[:, :32].flatten()).item()
        assert (r["T"], r["windows"], r["length_windows"]) == (32, 6, 6)
        assert r["quant"]["full"]["mean"] == pytest.approx(loss, abs=1e-5)
        w8, w4 = r["quant"]["settings"]
        assert (w8["setting"], w4["setting"]) == ("w8a8", "w4a4")
        assert abs(w8["increase"]["mean"]) < abs(w4["increase"]["mean"]) and w4["increase"]["mean"] != 0
        assert w4["loss"]["mean"] == pytest.approx(loss + w4["increase"]["mean"], abs=1e-5)
        # intervals over the 6 windows: full precision's, and the increase paired window by window
        with torch.no_grad():
            full = F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="none").view(6, 32).mean(1)
            rounded = evaluate.quantized(model, 4, 4)(x)[0]
            rounded = F.cross_entropy(rounded.flatten(0, 1), y.flatten(), reduction="none").view(6, 32).mean(1)
        for interval, values in ((r["quant"]["full"], full), (w4["increase"], rounded - full)):
            half = 2.5706 * values.double().std().item() / 6 ** 0.5  # t(0.975, 5 degrees of freedom)
            assert (interval["hi"] - interval["lo"]) / 2 == pytest.approx(half, rel=1e-3)
        for scaling, lengths in r["length"].items():
            assert [v["multiple"] for v in lengths] == [1, 2] and lengths[-1]["length"] == 64
            assert lengths[0]["buckets"][0]["mean"] == pytest.approx(first, abs=1e-5)
            assert [(b["from"], b["to"]) for b in lengths[-1]["buckets"]] == [(0, 32), (32, 64)]
        none = r["length"]["none"]
        assert none[1]["buckets"][0]["mean"] == pytest.approx(first, abs=1e-5)  # 2x: the first T positions as at 1x
        for scaling in ("ntk", "yarn"):  # a factor of 2 rescales every position's angles
            assert r["length"][scaling][1]["buckets"][0]["mean"] != pytest.approx(first, abs=1e-7)
        # a bucket past T under YaRN, and a stream row, against the model rebuilt by hand
        config = dataclasses.replace(model.config, block_size=64, rope_scaling="yarn", rope_factor=2.0)
        yarn = GPT.with_weights(config, model.state_dict())
        windowed = GPT.with_weights(dataclasses.replace(model.config, attn_window=4),
                                             model.state_dict())
        with torch.no_grad():
            per_token = F.cross_entropy(yarn(xl)[0].flatten(0, 1), yl.flatten(), reduction="none").view(yl.shape)
            past = per_token[:, 32:].mean().item()
            # the paired increase: each window's [T, 2T) under YaRN against its own [0, T) as trained
            trained = F.cross_entropy(model(xl[:, :32])[0].flatten(0, 1), yl[:, :32].flatten(), reduction="none")
            rise = (per_token[:, 32:].mean(1) - trained.view(-1, 32).mean(1)).double()
            cut = F.cross_entropy(windowed(x)[0][:, 4:].flatten(0, 1), y[:, 4:].flatten()).item()
        assert r["length"]["yarn"][1]["buckets"][1]["mean"] == pytest.approx(past, abs=1e-5)
        paired = r["length"]["yarn"][1]["buckets"][1]["increase"]
        assert paired["mean"] == pytest.approx(rise.mean().item(), abs=1e-5)
        half = 2.5706 * rise.std().item() / 6 ** 0.5  # t(0.975, 5 degrees of freedom): the interval over 6 windows
        assert (paired["hi"] - paired["lo"]) / 2 == pytest.approx(half, rel=1e-3)
        # at 2x, [0, T) has its increase too: what a scaling costs inside T (GA Table 5), 0 with RoPE as trained
        assert all("increase" not in b for lengths in r["length"].values() for b in lengths[0]["buckets"])
        assert r["length"]["none"][1]["buckets"][0]["increase"]["mean"] == pytest.approx(0, abs=1e-6)
        inside = r["length"]["yarn"][1]["buckets"][0]["increase"]["mean"]
        assert inside == pytest.approx((per_token[:, :32].mean(1) - trained.view(-1, 32).mean(1)).mean().item(),
                                       abs=1e-5) and inside != pytest.approx(0, abs=1e-6)
        assert r["stream"][0]["keep"][0]["loss"]["mean"] == pytest.approx(cut, abs=1e-5)
        assert [row["window"] for row in r["stream"]] == [4, 8]
        for row in r["stream"]:
            keep = {k["k"]: k for k in row["keep"]}
            assert keep[32]["increase"]["mean"] == pytest.approx(0, abs=1e-6)
            assert keep[0]["increase"]["mean"] != pytest.approx(0, abs=1e-6)
            assert keep[0]["loss"]["mean"] == pytest.approx(row["full"]["mean"] + keep[0]["increase"]["mean"], abs=1e-5)
    table = (out / "summary.md").read_text()
    assert "| base | 6 x 32 |" in table and "| g1 | 8 |" in table and "| yarn | 2x = 64 |" in table
    stream = summary["models"][1]["stream"][1]  # g1 at w=8: the loss under full attention, then each increase
    assert f"| g1 | 8 | {report.fmt_interval(stream['full'])} | " + " | ".join(
        report.fmt_interval(k["increase"], ".4f", sign=True) for k in stream["keep"]) + " |" in table
    assert report.PAPERS_SAY in table  # the papers' words, the same in the study's report
    # each row's numbers: report.headline's, the same the study's report averages over seeds
    base = summary["models"][0]
    row = next(line for line in table.splitlines() if line.startswith("| base | 6 x 32 |")).strip("| ").split(" | ")
    assert row[3:] == [report.fmt_interval(s["increase"], ".4f", sign=True) for s in base["quant"]["settings"]]
    assert [k for k in report.headline(base)] == ["W8A8 Δ", "W4A4 Δ", "none 2x [32, 64)", "none 2x [32, 64) Δ",
                                                  "ntk 2x [0, 32) Δ", "ntk 2x [32, 64)", "ntk 2x [32, 64) Δ",
                                                  "yarn 2x [0, 32) Δ", "yarn 2x [32, 64)", "yarn 2x [32, 64) Δ",
                                                  "w=8 keep 0 Δ", "w=8 keep 1 Δ", "w=8 keep 32 Δ"]
    numbers, longest, widest = report.headline(base), base["length"]["yarn"][-1]["buckets"][-1], base["stream"][-1]
    assert (numbers["W4A4 Δ"], numbers["yarn 2x [32, 64)"], numbers["yarn 2x [32, 64) Δ"], numbers["w=8 keep 0 Δ"]) \
        == (base["quant"]["settings"][1]["increase"]["mean"], longest["mean"], longest["increase"]["mean"],
            widest["keep"][0]["increase"]["mean"])  # each increase, never the loss it rose to
    rises = [report.fmt_interval(b["increase"], ".4f", sign=True) for b in base["length"]["yarn"][1]["buckets"]]
    assert f"| yarn | 2x = 64 | {' | '.join(rises)} |" in table and "| [0, 32) Δ | [32, 64) Δ |" in table  # Δ's row
    old = json.loads(json.dumps(base))  # a record kept before Δ was measured: levels only, and still a report row
    for lengths in old["length"].values():
        for v in lengths:
            for b in v["buckets"]:
                b.pop("increase", None)
    assert not any(k.startswith(("none", "yarn")) and k.endswith("Δ") for k in report.headline(old))
    assert "[32, 64) Δ |" not in evaluate.markdown({**summary, "models": [old]})
    for lengths in old["length"].values():  # kept before [0, T)'s Δ was measured: no such column
        for b in lengths[1]["buckets"][1:]:
            b["increase"] = {"mean": 0.5, "lo": 0.25, "hi": 0.75}
    text = evaluate.markdown({**summary, "models": [old]})
    assert "| yarn | 2x = 64 | +0.5000 ± 0.2500 |" in text and "[0, 32) Δ" not in text and "In [0, T)" not in text
    assert "yarn 2x [0, 32) Δ" not in report.headline(old) and "yarn 2x [32, 64) Δ" in report.headline(old)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert {"quant.png", "length.png", "stream.png"} <= set(os.listdir(out))
    assert [name for name, _ in figures] == ["quant.png", "length.png", "stream.png"]
    assert_every_plot_is_labelled(figures)


@pytest.mark.parametrize("argv,words", [
    (["--modes=quant,speed"], "--modes=quant,speed: choose from"),
    (["--quant=w8a8,w3"], "wNaM"),
    (["--quant=w33a33"], "'w33a33' is not valid: write wNaM with N and M each one of 2, 3, 4, 5, 6, 7, 8 bits, or 16"),
    (["--window=64"], "--window is the T of published checkpoints: give --pretrained too"),
    (["--rope=none,linear"], "--rope=none,linear: choose from none, ntk, yarn"),
    (["--lengths=0,2"], "at least 1"),
    (["--keep_first=-1"], "at least 0"),
    (["--stream_windows=32"], "--stream_windows=32: sliding windows must be from 1 to T - 1 = 31"),
    (["--lengths=1,3"], "powers of two"),
    (["--text=data/sample_text.txt"], "give --pretrained too"),
    (["--labels=a"], "1 names for 2 models"),
    (["--labels=a,a"], "two models share the label 'a' ("),
    (["--windows=0"], "--windows=0 must be at least 1"),
    (["--lengths=1,x"], "--lengths=1,x: lengths must be a list of int, written a,b,c"),
    (["--modes="], "--modes=: choose from quant, length, stream"),
    (["--keep_first=0,33"], "--keep_first=0,33: at most T = 32 first positions for"),
    (["--quant=", "--modes=quant"], "--quant=: the quant mode needs at least one setting"),
])
def test_mistakes_are_one_line(two_runs, tmp_path, argv, words):
    with pytest.raises(SystemExit) as e:
        evaluate.main([f"--runs={two_runs}/base,{two_runs}/g1", "--device=cpu", "--windows=2", "--modes=stream",
                       f"--out_dir={tmp_path}", *argv])
    assert str(e.value).startswith("error: ") and words in str(e.value), str(e.value)


def test_what_it_cannot_measure_is_refused_before_any_work(dataset, tmp_path):
    """A run with learned positions under the default modes (length needs RoPE), a run trained with a sliding window:
    refused before the first model is measured, so nothing is lost to a late error."""
    make_run(str(tmp_path / "rope"), dataset)
    make_run(str(tmp_path / "learned"), dataset, pos_emb="learned")
    make_run(str(tmp_path / "windowed"), dataset, attn_window=8)
    out = tmp_path / "out"
    for run, words in (("learned", "learned position embeddings"), ("windowed", "attn_window=8")):
        with pytest.raises(SystemExit) as e:
            evaluate.main([f"--runs={tmp_path / 'rope'},{tmp_path / run}", "--device=cpu", f"--out_dir={out}"])
        assert words in str(e.value) and not out.exists(), str(e.value)
    with pytest.raises(SystemExit, match="the length mode measures train.py's runs"):
        evaluate.main(["--pretrained=gpt2", f"--out_dir={out}"])


def test_a_missing_run_or_model_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no ckpt.pt in nowhere: train it first"):
        evaluate.main(["--runs=nowhere"])
    with pytest.raises(SystemExit, match="name the models"):
        evaluate.main([])


# ----------------------------------------------------------------------------
# A run's record, kept beside its checkpoint, for when the checkpoint is gone

SMALL = ["--device=cpu", "--windows=4", "--batch_size=4", "--quant=w8a8,w4a4", "--lengths=1,2", "--rope=none,yarn",
         "--keep_first=0,4"]  # every mode, quickly; the stream windows left to their default, T/8 and T/4


@pytest.fixture(scope="module")
def evaluated(two_runs, tmp_path_factory):
    """Copies of the two runs evaluated once; then base's checkpoint is gone, as a run trained on a GPU machine that
    was given back: (root, the summary of that first evaluation)."""
    root = tmp_path_factory.mktemp("evaluated")
    for run in ("base", "g1"):
        shutil.copytree(os.path.join(two_runs, run), root / run)
    twice = {"--quant=w8a8,w4a4": "--quant=w8a8,W8A8,w4a4", "--keep_first=0,4": "--keep_first=4,0,4"}  # said twice:
    evaluate.main([f"--runs={root}/base,{root}/g1", *[twice.get(a, a) for a in SMALL], f"--out_dir={root}/out"])
    os.remove(root / "base" / "ckpt.pt")  # (measured once, as SMALL says them: the records stand in for SMALL)
    return root, json.loads((root / "out" / "summary.json").read_text())


def kept(run):
    return json.loads((run / evaluate.EVALUATED).read_text())


def test_each_run_keeps_its_record_with_what_it_was_measured_under(evaluated):
    root, summary = evaluated
    for record in summary["models"]:
        assert kept(root / record["label"]) == record  # the numbers, and all else, as in summary.json
        assert record["settings"] == {"checkpoint": "ckpt.pt", "modes": ["quant", "length", "stream"], "windows": 4,
                                      "batch_size": 4, "quant": ["w8a8", "w4a4"], "lengths": [1, 2],
                                      "rope": ["none", "yarn"], "stream_windows": [4, 8], "keep_first": [0, 4]}
        assert record["iter_num"] == 10 and record["model"]["block_size"] == record["T"] == 32
        assert (record["device"], record["date"]) == (summary["device"], summary["date"])
        assert record["code"] == code_version()  # which code measured it, as train.py's log says (None outside git)


def test_a_run_whose_checkpoint_is_gone_is_its_kept_record(evaluated, tmp_path, capsys):
    """The same settings (the default stream windows named, in another order): base's numbers exactly as measured
    then, under its new label, saying where they come from; g1, which has its checkpoint, measured again."""
    root, first = evaluated
    before = kept(root / "base")
    evaluate.main([f"--runs={root}/base,{root}/g1", "--labels=b,g", *SMALL, "--stream_windows=8,4",
                   f"--out_dir={tmp_path}"])
    lines = {line.split(":")[0].strip(): line for line in capsys.readouterr().out.splitlines() if ": " in line}
    again = json.loads((tmp_path / "summary.json").read_text())
    base, g1 = again["models"]
    assert base == dict(first["models"][0], label="b", measured_earlier=True)
    assert kept(root / "base") == before  # read, not written again
    assert f"(measured earlier on {before['device']}, {before['date']}: its ckpt.pt is gone)" in lines["b"]
    assert f"Measured earlier, from the record kept of a run whose checkpoint is gone: b on {before['device']}, " \
           f"{before['date']}." in (tmp_path / "summary.md").read_text()
    assert "Measured earlier" not in (root / "out" / "summary.md").read_text()
    assert "measured earlier" not in lines["g"] and kept(root / "g1") == g1  # measured here, and kept again
    assert report.headline(g1) == pytest.approx(report.headline(first["models"][1]), abs=1e-6)


@pytest.mark.parametrize("argv,words", [
    (["--quant=w4a4"], "base, and the record kept of it (evaluated.json, measured on CPU"),
    (["--quant=w4a4"], "measured under other settings: quant w8a8,w4a4, asked now w4a4. Re-run with --quant=w8a8,w4a4 "
                       "to use it, or train the run again (python train.py --out_dir="),
    (["--windows=3", "--modes=quant,stream"],
     "modes quant,length,stream, asked now quant,stream; windows 4, asked now 3. Re-run with "
     "--modes=quant,length,stream --windows=4 to use it"),
    (["--stream_windows=2"], "stream_windows 4,8, asked now 2. Re-run with --stream_windows=4,8"),
    (["--checkpoint=best.pt"], "checkpoint ckpt.pt, asked now best.pt. Re-run with --checkpoint=ckpt.pt"),
])
def test_a_kept_record_measured_otherwise_is_refused_in_one_line(evaluated, tmp_path, argv, words):
    """Named: the run, each setting that differs, and the settings to ask for; before any run is measured (g1, which
    has its checkpoint, comes first)."""
    root, _ = evaluated
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        evaluate.main([f"--runs={root}/g1,{root}/base", *SMALL, *argv, f"--out_dir={out}"])
    message = str(e.value)
    checkpoint, run = ("best.pt", "g1") if "--checkpoint=best.pt" in argv else ("ckpt.pt", "base")  # g1 has no best.pt
    assert message.startswith(f"error: no {checkpoint} in {root}/{run}, ")
    assert words in message and "\n" not in message, message
    assert not out.exists()


def test_a_kept_record_is_checked_like_a_checkpoint(evaluated, tmp_path):
    """main() refuses what it cannot measure from the kept record's model, as from a checkpoint's."""
    root, _ = evaluated
    shutil.copytree(root / "base", tmp_path / "base")
    record = kept(tmp_path / "base")
    record["model"]["attn_window"] = 8
    (tmp_path / "base" / evaluate.EVALUATED).write_text(json.dumps(record))
    with pytest.raises(SystemExit, match="attn_window=8: lab/evaluate.py measures models trained with plain RoPE"):
        evaluate.main([f"--runs={tmp_path}/base", *SMALL, f"--out_dir={tmp_path}/out"])
    (tmp_path / "base" / evaluate.EVALUATED).write_text('{"label": "base", "T"')  # cut short
    with pytest.raises(SystemExit, match="its evaluated.json cannot be read .*: train the run again"):
        evaluate.main([f"--runs={tmp_path}/base", *SMALL, f"--out_dir={tmp_path}/out"])


def test_a_run_with_its_checkpoint_is_measured_again_whatever_it_kept(evaluated, tmp_path):
    root, _ = evaluated
    shutil.copytree(root / "g1", tmp_path / "g1")
    evaluate.main([f"--runs={tmp_path}/g1", "--device=cpu", "--windows=2", "--modes=quant", "--quant=w4a16",
                   f"--out_dir={tmp_path}/out"])
    record = json.loads((tmp_path / "out" / "summary.json").read_text())["models"][0]
    assert [s["setting"] for s in record["quant"]["settings"]] == ["w4a16"] and record["windows"] == 2
    assert kept(tmp_path / "g1") == record and record["settings"]["modes"] == ["quant"]  # replaced


def test_a_run_with_neither_checkpoint_nor_record_is_to_be_trained(dataset, tmp_path):
    make_run(str(tmp_path / "r"), dataset)
    os.remove(tmp_path / "r" / "ckpt.pt")
    with pytest.raises(SystemExit, match=f"no ckpt.pt in {tmp_path}/r: train it first"):
        evaluate.main([f"--runs={tmp_path}/r", "--device=cpu"])


def test_a_record_is_written_whole_or_not_at_all(tmp_path):
    """A write that fails half-way (here: a value JSON cannot hold) leaves the record before it, and no stray file."""
    evaluate.keep_record(str(tmp_path), {"label": "r", "T": 32})
    with pytest.raises(TypeError):
        evaluate.keep_record(str(tmp_path), {"label": "r", "T": 32, "bad": {1, 2}})
    assert kept(tmp_path) == {"label": "r", "T": 32} and os.listdir(tmp_path) == [evaluate.EVALUATED]


@pytest.mark.parametrize("name", ["summary.json", "summary.md", "quant.png", "evaluated.json"])
def test_a_full_disk_leaves_the_previous_results_whole(two_runs, tmp_path, monkeypatch, capsys, name):
    """A write that fails part-way (the disk full) leaves the previous file as it was, and no temporary file."""
    if name.endswith(".png"):
        pytest.importorskip("matplotlib")
    run, out = tmp_path / "run", tmp_path / "out"
    shutil.copytree(os.path.join(two_runs, "g1"), run)
    argv = [f"--runs={run}", "--device=cpu", "--windows=2", "--modes=quant", "--quant=w4a4", f"--out_dir={out}"]
    evaluate.main(argv)
    before, kept_before = files_of(out), files_of(run)  # the files written before the one that fails are new ones
    disk_full(monkeypatch, name)
    if name == evaluate.EVALUATED:  # a side file: one note, and the summary is written all the same
        evaluate.main(argv)
        assert "note: could not keep the record beside" in capsys.readouterr().out
        assert json.loads((out / "summary.json").read_text())["models"][0]["quant"]
    else:
        with pytest.raises(OSError) as e:
            evaluate.main(argv)
        assert e.value.errno == errno.ENOSPC
    monkeypatch.undo()
    folder, old = (run, kept_before) if name == evaluate.EVALUATED else (out, before)
    now = files_of(folder)
    assert now[name] == old[name] and set(now) == set(old)  # the file as it was, and no .tmp left beside it


def test_a_new_evaluation_leaves_no_plot_of_modes_measured_before(two_runs, tmp_path):
    """stream.png of an earlier evaluation would show numbers the new summary does not hold: it goes."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    argv = [f"--runs={two_runs}/g1", "--device=cpu", "--windows=2", "--quant=w4a4", f"--out_dir={out}"]
    evaluate.main(argv + ["--modes=quant,stream", "--stream_windows=8", "--keep_first=0,1"])
    assert {"quant.png", "stream.png"} <= set(os.listdir(out))
    evaluate.main(argv + ["--modes=quant"])
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(os.listdir(out)) == sorted(summary["plots"] + [".lock", "summary.json", "summary.md"]) and \
        summary["plots"] == ["quant.png"]


def test_the_figures_give_each_variant_one_look_and_a_whole_legend_beside_the_panels(tmp_path, monkeypatch):
    """quant.png, length.png and stream.png of 12 variants x 2 seeds (the committed study's records, relabelled): the
    seeds of a variant drawn alike, no two variants alike (f"C{i}" gave the 11th run the 1st's colour), one legend
    entry a variant, beside the panels and whole in the image (32 entries ran past a fixed-size figure), each y axis
    in its unit, each sliding-window panel titled with its window."""
    pytest.importorskip("matplotlib")
    with open(os.path.join(REPO, "results", "repro", "evaluate", "summary.json")) as f:
        kept = json.load(f)["models"]
    records = [{**kept[(2 * v + seed) % len(kept)], "label": f"variant{v}/seed{1337 + seed}"}
               for v in range(12) for seed in range(2)]
    figures = keep_saved(monkeypatch, evaluate)
    assert evaluate.plot(records, str(tmp_path)) == ["quant.png", "length.png", "stream.png"]
    assert_every_plot_is_labelled([(name, fig) for name, fig, _ in figures])
    for name, fig, kw in figures:
        assert_legends_in_image_beside_the_data(name, fig, kw)
        entries = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
        assert entries[:12] == [f"variant{v} (2 seeds)" for v in range(12)], entries
        for ax in fig.axes:
            assert "nats" in ax.get_ylabel(), ax.get_ylabel()
            looks = {}
            for line in ax.lines[:-1] if name != "length.png" else ax.lines:  # (the zero line last)
                variant = line.get_label().split("/")[0]
                looks.setdefault(variant, set()).add((matplotlib_colour(line.get_color()),
                                                      line.get_linestyle() if name != "length.png" else ""))
            assert len(looks) == 12 and all(len(look) == 1 for look in looks.values()), looks
            assert len(set().union(*looks.values())) == 12, looks
    stream = dict((name, fig) for name, fig, _ in figures)["stream.png"]
    assert [ax.get_title().split("\n")[0] for ax in stream.axes] == \
        [f"sliding-window attention, w = {row['window']}" for row in kept[0]["stream"]]


@pytest.mark.parametrize("kind", ["a-file", "under-a-file", "not-writable"])
def test_an_out_dir_that_cannot_be_written_is_refused_before_the_work(two_runs, tmp_path, monkeypatch, kind):
    out, words = unwritable_out_dir(tmp_path, kind)
    monkeypatch.setattr(evaluate, "evaluate", lambda *a, **k: pytest.fail("measured before the out_dir was checked"))
    with pytest.raises(SystemExit) as e:
        evaluate.main([f"--runs={two_runs}/g1", "--device=cpu", f"--out_dir={out}"])
    message = str(e.value.code)
    assert message.startswith(f"error: --out_dir={out} ") and words in message and "\n" not in message, message


def test_a_length_that_does_not_fit_in_memory_is_refused_with_one_that_does(two_runs, tmp_path, monkeypatch):
    """T = 32, 2 heads, 50304 logits: one window of 1024 T = 32768 tokens needs 2 x 4 x L x (2 L + 50304) bytes,
    about 20 GiB; with 2 GiB free, 64 T (0.8 GiB) is the longest asked for that fits."""
    monkeypatch.setattr(evaluate, "free_memory", lambda device: 2**31)
    monkeypatch.setattr(evaluate, "evaluate", lambda *a, **k: pytest.fail("measured before the memory was checked"))
    with pytest.raises(SystemExit) as e:
        evaluate.main([f"--runs={two_runs}/g1", "--device=cpu", "--modes=length", "--lengths=1,2,64,1024",
                       f"--out_dir={tmp_path}"])
    message = str(e.value.code)
    need = evaluate.window_bytes(2, VOCAB, 1024 * 32)
    assert need > 2**31 >= evaluate.window_bytes(2, VOCAB, 64 * 32) / 0.8
    assert message.startswith("error: --lengths=1,2,64,1024: one window of 1024 x T = 32768 tokens of ") and \
        f"needs about {need / 2**30:.1f} GiB" in message and "2.0 GiB free: ask for --lengths=1,2,64" in message, \
        message


def test_a_length_longer_than_the_validation_set_is_refused_before_any_model_is_measured(two_runs, tmp_path,
                                                                                         monkeypatch):
    """The first run's quantization measured, then the second's windows found too long: that was minutes lost on a
    GPU. Every run's longest window is checked against its data first."""
    monkeypatch.setattr(evaluate, "free_memory", lambda device: 2**50)
    monkeypatch.setattr(evaluate, "evaluate", lambda *a, **k: pytest.fail("measured before the data was checked"))
    with pytest.raises(SystemExit, match=r"^error: --lengths: the longest asks for windows of 131072 tokens of .*base, "
                                         r"and .* validation set holds none that long; ask for shorter ones"):
        evaluate.main([f"--runs={two_runs}/base,{two_runs}/g1", "--device=cpu", "--modes=quant,length",
                       "--lengths=1,4096", f"--out_dir={tmp_path}"])


def test_long_lengths_run_in_pieces_that_fit(two_runs, monkeypatch):
    """The windows of a long length go through the model fewer at a time where memory is short; the losses are the
    same as all at once."""
    path = f"{two_runs}/g1/ckpt.pt"
    model = evaluate.model_from_checkpoint(evaluate.read_checkpoint(path), path, attn_backend="torch")
    x = torch.randint(0, VOCAB, (4, 64))
    y = torch.randint(0, VOCAB, (4, 64))
    passes = []
    token_losses = evaluate.token_losses
    monkeypatch.setattr(evaluate, "token_losses",
                        lambda m, x, y, rows: passes.append(rows) or token_losses(m, x, y, rows))
    whole = evaluate.evaluate_length(model, x, y, 8, [1, 2], ["none"])
    assert passes == [8, 4]  # 8 windows of T, 4 of 2T: as many tokens per pass
    monkeypatch.setattr(evaluate, "free_memory", lambda device: evaluate.window_bytes(2, VOCAB, 64) * 1.3)
    passes.clear()
    pieces = evaluate.evaluate_length(model, x, y, 8, [1, 2], ["none"])
    assert passes[-1] == 1  # one window of 2T at a time
    means = [[b["mean"] for length in out["none"] for b in length["buckets"]] for out in (whole, pieces)]
    assert means[1] == pytest.approx(means[0])


# ----------------------------------------------------------------------------
# What a careless user meets: which run and which data, folders shared with others, what cannot be measured

QUICK = ["--device=cpu", "--windows=2", "--modes=quant", "--quant=w4a4"]


def test_a_checkpoint_whose_data_was_prepared_again_is_refused_before_any_work(two_runs, dataset, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(dataset, data)
    run = copy_run(os.path.join(two_runs, "g1"), tmp_path / "g1")
    run_id = set_provenance(run, data)
    evaluate.main([f"--runs={run}", *QUICK, f"--out_dir={tmp_path / 'same'}"])  # the data it was trained on
    record = kept(tmp_path / "g1")
    assert record["run_id"] == run_id and record["data_fingerprint"]["val"]  # which run, which data
    prepare_again(data)
    out = tmp_path / "out"
    message = error_of(evaluate.main, [f"--runs={os.path.join(two_runs, 'base')},{run}", *QUICK, f"--out_dir={out}"])
    assert f"{run}/ckpt.pt was trained on other data than {data} holds now" in message
    assert record["data_fingerprint"]["val"] in message and not out.exists()
    shutil.rmtree(data)  # the data gone: refused before the first run is measured, with the command that prepares it
    message = error_of(evaluate.main, [f"--runs={os.path.join(two_runs, 'base')},{run}", *QUICK, f"--out_dir={out}"])
    assert "which is not here (moved? put it back there): prepare it (python data/textdir/prepare.py" in message
    assert not out.exists()


def test_a_kept_record_of_an_earlier_run_never_stands_for_the_new_one(two_runs, tmp_path):
    run = copy_run(os.path.join(two_runs, "g1"), tmp_path / "g1")
    set_provenance(run)
    evaluate.main([f"--runs={run}", *QUICK, f"--out_dir={tmp_path / 'first'}"])
    assert kept(tmp_path / "g1")["run_id"] == "0123456789abcdef"
    os.remove(os.path.join(run, "ckpt.pt"))
    with open(os.path.join(run, "log.jsonl"), "w") as f:  # a new run in the folder, before its first checkpoint
        f.write(json.dumps({"iter": 0, "tokens": 0, "val_loss": 9.5}) + "\n")
    message = error_of(evaluate.main, [f"--runs={run}", *QUICK, f"--out_dir={tmp_path / 'out'}"])
    assert f"the measurement kept in {run} (evaluated.json, of the state at iter 10, run 0123456789abcdef) is not " \
           "of the run its log.jsonl records" in message


def test_windows_beyond_the_validation_set_are_cut_to_those_it_holds_with_a_note(two_runs, dataset, tmp_path, capsys):
    """Windows asked for beyond what the validation split holds would overlap, and the intervals, which take them as
    independent, would be too narrow: as many as it holds are measured, said in the output and in summary.md."""
    from data.shards import TokenWindows
    out = tmp_path / "out"
    evaluate.main([f"--runs={two_runs}/base", "--device=cpu", "--windows=1000", "--modes=quant", "--quant=w8a8",
                   f"--out_dir={out}"])
    windows = TokenWindows(dataset, "val", 33)  # T = 32, and the target's token
    most = len(windows) // windows.text_length
    record = json.loads((out / "summary.json").read_text())["models"][0]
    assert record["windows"] == most < 1000 and record["settings"]["windows"] == 1000
    starts = np.arange(most) * len(windows) // most  # data.shards.val_batches' windows: none overlaps the next
    assert np.diff(starts).min() >= windows.text_length
    assert f"{most} measured, not the 1000 asked" in capsys.readouterr().out
    assert f"Note: base: {most} windows of 32 tokens, not the 1000 asked" in (out / "summary.md").read_text()


def test_a_read_only_run_folder_costs_a_note_not_the_summary(two_runs, tmp_path, monkeypatch, capsys):
    run = copy_run(os.path.join(two_runs, "g1"), tmp_path / "g1")
    read_only(monkeypatch, run)
    evaluate.main([f"--runs={run}", *QUICK, f"--out_dir={tmp_path / 'out'}"])
    assert f"note: could not keep the record beside {run}/ckpt.pt (evaluated.json: Permission denied)" in \
        capsys.readouterr().out
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["models"][0]["quant"]["settings"]
    assert not os.path.exists(os.path.join(run, evaluate.EVALUATED))


def test_a_results_folder_another_process_holds_is_refused(two_runs, tmp_path, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setattr(evaluate, "evaluate", lambda *a, **k: pytest.fail("measured into a folder another holds"))
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        message = error_of(evaluate.main, [f"--runs={two_runs}/g1", *QUICK, f"--out_dir={out}"])
    finally:
        holder.kill()
        holder.wait()
    assert message.startswith(f"error: {out} is in use by another process (pid {holder.pid}: "), message


def test_a_model_that_is_not_finite_is_refused_before_any_work(two_runs, tmp_path, monkeypatch):
    run = copy_run(os.path.join(two_runs, "g1"), tmp_path / "g1")
    checkpoint = torch.load(os.path.join(run, "ckpt.pt"), weights_only=True)
    checkpoint["model"]["transformer.wte.weight"][3, 0] = float("inf")
    torch.save(checkpoint, os.path.join(run, "ckpt.pt"))
    monkeypatch.setattr(evaluate, "evaluate", lambda *a, **k: pytest.fail("measured a model that is not finite"))
    message = error_of(evaluate.main, [f"--runs={two_runs}/base,{run}", *QUICK, f"--out_dir={tmp_path / 'out'}"])
    assert f"the model in {run}/ckpt.pt is not finite" in message and "transformer.wte.weight" in message


def test_the_checkpoint_is_a_file_name_in_each_run_folder(two_runs, tmp_path):
    run = copy_run(os.path.join(two_runs, "g1"), tmp_path / "g1")
    message = error_of(evaluate.main, [f"--runs={run}", f"--checkpoint={two_runs}/base/ckpt.pt", *QUICK,
                                       f"--out_dir={tmp_path / 'out'}"])
    assert "the name of a file in each run's folder" in message and not os.path.exists(run + "/evaluated.json")
    message = error_of(evaluate.main, [f"--runs={run}", "--checkpoint=best.pt", *QUICK,
                                       f"--out_dir={tmp_path / 'out'}"])
    assert message == f"error: no best.pt in {run}: it has ckpt.pt; choose one with --checkpoint=NAME"


def test_a_published_checkpoint_it_cannot_measure_is_refused_before_any_run_is_measured(two_runs, tmp_path,
                                                                                       monkeypatch):
    pytest.importorskip("transformers")
    from test_pretrained import tiny_gpt2
    tiny_gpt2(tmp_path / "gpt2", n_positions=64, vocab_size=50257)
    (tmp_path / "short.txt").write_text("hello world")
    (tmp_path / "binary.txt").write_bytes(b"\x80\x81" * 100)
    monkeypatch.setattr(evaluate, "measure", lambda *a, **k: pytest.fail("measured before the checkpoint was checked"))
    for argv, words in ((["--window=100"], "--window=100 is longer than"),
                        (["--window=32", f"--text={tmp_path / 'short.txt'}"], "fewer than one window of 33"),
                        (["--window=32", f"--text={tmp_path / 'binary.txt'}"], "not UTF-8 text")):
        message = error_of(evaluate.main, [f"--runs={two_runs}/g1", f"--pretrained={tmp_path / 'gpt2'}",
                                           "--modes=quant", *argv, *QUICK[1:], f"--out_dir={tmp_path / 'out'}"])
        assert words in message and "\n" not in message, message


def test_a_summary_of_records_measured_earlier_does_not_say_it_was_measured_here():
    record = {"label": "b", "measured_earlier": True, "device": "NVIDIA H200", "date": "2026-11-26", "notes": []}
    text = evaluate.markdown({"device": "CPU (x86_64)", "date": "2026-12-01", "modes": [], "models": [record]})
    assert not text.startswith("Measured by lab/evaluate.py on CPU") and "b on NVIDIA H200, 2026-11-26" in text


def test_runs_beside_published_checkpoints_are_said_to_be_measured_on_other_windows():
    """A run is measured on its own validation data, a published checkpoint on --text cut with its own tokenizer:
    their losses side by side compare nothing without a note."""
    run = {"label": "g1", "run": "out/g1", "data": "data/pystdlib", "T": 64, "notes": []}
    gpt2 = {"label": "gpt2", "pretrained": "gpt2", "data": "data/sample_text.txt", "T": 64, "notes": []}
    text = evaluate.markdown({"device": "CPU (x86_64)", "date": "2026-12-01", "modes": [], "models": [run, gpt2]})
    assert "Note: the published checkpoints (gpt2) were measured on windows of data/sample_text.txt, the runs on " \
        "their own validation data" in text
    assert "published checkpoints" not in evaluate.markdown({"device": "CPU (x86_64)", "date": "2026-12-01",
                                                               "modes": [], "models": [gpt2]})


def test_fake_quantize_picks_the_nearest_step_in_bf16_too():
    """In bf16, x / scale was itself rounded to 8 significant bits before round(): at 8 bits about 9% of a normal
    row's entries went to another grid step than the nearest, up to 1.4 steps away."""
    torch.manual_seed(1)
    x = torch.randn(64, 256).bfloat16()
    for bits in (8, 4):
        got = evaluate.fake_quantize(x, bits)
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got, evaluate.fake_quantize(x.float(), bits).bfloat16(), rtol=0, atol=0)

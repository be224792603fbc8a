"""lab/analyze.py on checkpoints with known answers and on a real (tiny) train.py run (CPU)."""

import builtins
import copy
import dataclasses
import errno
import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import lab.analyze as analyze
import lab.report as report
import train
from runfolder import load_checkpoint, read_checkpoint, result_set, save_checkpoint
from data.shards import bos_token, read_meta, val_batches, val_windows_apart
from model import GPT, GPTConfig
from probe import (GATE_KEYS, MEASURE, MEASURES, MECHANISM, SINK_HEAD_THRESHOLD, TRIGGER_KEYS, Probe, attention_maps,
    trigger_positions)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/
VOCAB = 50304


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
    cfg = GPTConfig(**{**dict(block_size=32, vocab_size=VOCAB, n_layer=2, n_head=2, n_embd=32, attn_backend="torch"),
                       **kw})
    model = GPT(cfg)
    if uniform_attention:  # W_q = 0: every score is 0, query i attends 1/(i+1) to each earlier token
        for block in model.transformer.h:
            with torch.no_grad():
                block.attn.c_attn.weight[:cfg.n_embd].zero_()
                if block.attn.gate is not None:  # W_theta: c_attn's last rows; every gate score = sigmoid(0) = 1/2
                    block.attn.c_attn.weight[-cfg.gate_logits_width():].zero_()
    os.makedirs(run_dir)
    config = dict(dataset="toy", data_dir=data_dir, gradient_accumulation_steps=2, batch_size=4, eval_iters=eval_iters,
                  learning_rate=1e-3, max_iters=10, seed=1, dtype="float32")  # fp32: the known answers are exact
    save_checkpoint({"model": model.state_dict(), "model_args": dataclasses.asdict(cfg), "iter_num": 10,
                     "config": config, "health": {"loss_spikes": 3}}, os.path.join(run_dir, "ckpt.pt"))
    return model


def keep_figures(monkeypatch, module):
    """Every figure `module` writes with lab.report.save_figure from now on, as (file name, figure), still written."""
    figures, save = [], module.save_figure

    def keep(fig, path, **kw):
        figures.append((os.path.basename(path), fig))
        return save(fig, path, **kw)
    monkeypatch.setattr(module, "save_figure", keep)
    return figures


def keep_saved(monkeypatch, module):
    """As keep_figures, each as (file name, figure, save_figure's keywords): where the image's edges lie."""
    figures, save = [], module.save_figure

    def keep(fig, path, **kw):
        figures.append((os.path.basename(path), fig, kw))
        return save(fig, path, **kw)
    monkeypatch.setattr(module, "save_figure", keep)
    return figures


def assert_legends_in_image_beside_the_data(name, fig, kw):
    """Each legend of a saved figure lies whole within the saved image, and over no panel's data area."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    canvas = FigureCanvasAgg(fig)  # (a closed figure keeps no canvas to measure with)
    canvas.draw()
    renderer = canvas.get_renderer()
    inches = fig.dpi_scale_trans.inverted()
    image = fig.get_tightbbox(renderer) if kw.get("bbox_inches") == "tight" else fig.bbox_inches
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert legends, f"{name}: no legend"
    for legend in legends:
        box = legend.get_window_extent(renderer).transformed(inches)
        assert image.x0 - 1e-6 <= box.x0 and box.x1 <= image.x1 + 1e-6 and image.y0 - 1e-6 <= box.y0 and \
            box.y1 <= image.y1 + 1e-6, f"{name}: a legend reaches past the saved image ({box} in {image})"
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(renderer).transformed(inches)), \
                f"{name}: a legend lies over the panel {ax.get_title()!r}"


def disk_full(monkeypatch, name, after=64):
    """From now on, writing a file named `name` (or atomic_write's temporary file for it, .<name>.*.tmp) fails as on
    a full disk: its first `after` bytes are written, then OSError(ENOSPC). Whether the script opens the file itself
    (open, io.open: matplotlib, zipfile) or through atomic_write (os.fdopen)."""
    real_open, real_fdopen = builtins.open, os.fdopen

    def meant(path):
        base = os.path.basename(str(path))
        return base == name or base.startswith(f".{name}.")

    class Full:
        def __init__(self, f):
            self._f, self._written = f, 0

        def write(self, data):
            room = after - self._written
            size = len(data) if isinstance(data, str) else memoryview(data).nbytes
            if size > room:
                self._f.write(data[:room] if isinstance(data, str) else bytes(memoryview(data).cast("B"))[:room])
                self._f.flush()
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self._written += size
            return self._f.write(data)

        def __getattr__(self, key):
            return getattr(self._f, key)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._f.close()

    def full_open(file, mode="r", *args, **kw):
        f = real_open(file, mode, *args, **kw)
        return Full(f) if isinstance(file, (str, os.PathLike)) and set(mode) & set("wax+") and meant(file) else f

    def full_fdopen(fd, *args, **kw):
        f = real_fdopen(fd, *args, **kw)
        return Full(f) if meant(os.readlink(f"/proc/self/fd/{fd}")) else f
    monkeypatch.setattr(builtins, "open", full_open)
    monkeypatch.setattr(io, "open", full_open)
    monkeypatch.setattr(os, "fdopen", full_fdopen)


def files_of(folder):
    """{name: bytes} of every file in folder."""
    return {name: (folder / name).read_bytes() for name in os.listdir(folder)}


def assert_every_plot_is_labelled(figures):
    """Each panel of each figure names its two axes; a figure in which colour encodes a value (an image) has a colour
    scale saying what it is."""
    assert figures
    for name, fig in figures:
        colour_scales = {image.colorbar.ax: image.colorbar for ax in fig.axes for image in ax.images
                         if image.colorbar is not None}
        for ax in fig.axes:
            if not ax.get_visible() or ax in colour_scales:
                continue
            assert ax.get_xlabel() and ax.get_ylabel(), f"{name}: the panel {ax.get_title()!r} lacks an axis label"
            if ax.images:
                assert colour_scales, f"{name}: colour encodes a value in {ax.get_title()!r}, with no colour scale"
        for bar in colour_scales.values():
            assert bar.ax.get_ylabel(), f"{name}: the colour scale does not say what it measures"


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
    assert b["tokens"] == 10 * 2 * 4 * 32 and b["loss_spikes"] == 3 and b["lr"] == 1e-3 and b["seed"] == 1
    assert list(summary["measured_on"].values()) == [2]  # both runs, measured here
    assert len(analyze.stored_measurement(str(tmp_path / "g1"), "ckpt.pt")[2]) == 2  # a map of every layer kept

    # val loss and M-Act recomputed directly on the windows asked for (2 batches of 3, not the runs' 5 of 4)
    assert summary["validation"] == {"batches": 2, "batch_size": 3, "source": "set by --batches/--batch_size",
                                     "data_notes": []}  # the data is here: every run checked on it
    losses, acts, values, outs = [], [], [], []
    for blk in gated.transformer.h:
        blk.register_forward_hook(lambda m, i, o: acts.append(o.abs().amax(dim=(1, 2))))  # each window's max
        blk.register_forward_hook(lambda m, i, o: outs.append(o))
        blk.attn.register_forward_hook(lambda m, args, o: values.append(m.project(*args[:2])[2]))  # (B, T, Hkv, D)
    with torch.no_grad():
        for x, y in val_batches(dataset, T, 3, 2):
            logits, loss = gated.eval()(x, y)
            losses.append(torch.nn.functional.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(1))
    losses = torch.cat(losses)
    assert g["val_loss"] == pytest.approx(losses.mean().item(), rel=1e-5)
    per_layer = [torch.cat(acts[0::2]), torch.cat(acts[1::2])]  # (6,) per layer: 2 batches x 3 windows
    assert g["layers"]["max_act"] == pytest.approx([a.mean().item() for a in per_layer], rel=1e-5)
    # the sink's value: ||v_0|| / mean ||v_j>0||, per window and KV head, averaged over both
    norms = [torch.cat(values[layer::2]).norm(dim=-1) for layer in range(2)]  # (6, T, Hkv) per layer
    ratios = [(n[:, 0] / n[:, 1:].mean(1)) for n in norms]
    assert g["layers"]["value_norm_ratio"] == pytest.approx([r.mean().item() for r in ratios], rel=1e-5)
    assert g["heads"]["value_norm_ratio"] == [pytest.approx(r.mean(0).tolist(), rel=1e-5) for r in ratios]
    # the channels of the massive activation, over all 6 windows: the channel of each window's max |h|
    for layer in range(2):
        out = torch.cat(outs[layer::2])
        top = out.abs().flatten(1).argmax(1) % out.size(-1)
        c = g["channels"][layer]
        assert c["top_channel_share"] == pytest.approx((top == c["top_channel"]).float().mean().item())
        assert len(c["channels"]) == len(c["values"]) == 3 and 0 < c["share"] <= 1
    # the per-window values lab/repro.py's confidence intervals use: each window's loss, M-Act and peak
    w = g["per_window"]
    assert w["val_loss"] == pytest.approx(losses.numpy(), rel=1e-5)
    assert w["max_act"] == pytest.approx(((per_layer[0] + per_layer[1]) / 2).numpy(), rel=1e-5)
    assert w["peak_act"] == pytest.approx(torch.maximum(*per_layer).numpy(), rel=1e-5)
    assert g["peak_act"] == pytest.approx(w["peak_act"].mean()) and b["per_window"]["gate_mean"] is None
    assert len(w["first_token_attn"]) == len(w["sink_share"]) == len(w["gate_mean"]) == 6
    assert g["sink_share"] == pytest.approx(w["sink_share"].mean()) and 0 <= g["sink_heads"] <= 1
    assert len(g["heads"]["first_token_attn"]) == 2 and len(g["heads"]["first_token_attn"][0]) == 2  # layers x heads
    assert g["params"] - b["params"] == 2 * 32 * 32  # G1 elementwise: n_embd * n_head * head_dim per layer

    # the headline numbers are probe.summarize's of the per-layer ones: layer means, and the per-window peak's mean
    assert g["max_act"] == pytest.approx(np.mean(g["layers"]["max_act"]), rel=1e-12)
    assert g["sink_heads"] == pytest.approx(np.mean(g["layers"]["sink_heads"])) and g["act_ratio"] > 1

    on_disk = json.load(open(tmp_path / "res" / "summary.json"))
    assert [r["label"] for r in on_disk["runs"]] == ["base", "g1"] and on_disk["device"].startswith("CPU")
    assert "per_window" not in on_disk["runs"][0] and on_disk["runs"][1]["val_loss"] == g["val_loss"]
    with np.load(tmp_path / "res" / "per_window.npz") as arrays:  # each run's per-window values, as in memory
        assert sorted(arrays.files) == sorted(f"{i}/{key}" for i, r in enumerate((b, g))
                                              for key, values in r["per_window"].items() if values is not None)
        assert "0/gate_mean" not in arrays.files and "1/gate_mean" in arrays.files
        for key, values in w.items():
            assert arrays[f"1/{key}"].dtype == values.dtype and (arrays[f"1/{key}"] == values).all()
    # the table TUTORIAL.md shows: probe.MEASURES' labels and formats, – where a run has no value
    table = (tmp_path / "res" / "summary.md").read_text().splitlines()
    assert "2 batches x 3 validation windows" in table[0]
    header = table[2].strip("| ").split(" | ")
    shown = [m for m in MEASURES if not m.mechanism]
    assert header == ["run", "lr"] + [m.label for m in shown]
    base_row, g1_row = (dict(zip(header, row.strip("| ").split(" | "))) for row in table[4:6])
    assert (base_row["run"], base_row["lr"]) == ("base", "0.001")
    for m in shown:
        for record, row in ((b, base_row), (g, g1_row)):
            assert row[m.label] == ("–" if record[m.key] is None else format(record[m.key], m.spec)), m.key
    assert base_row["gate mean"] == "–" and g1_row["F-Attn"] == f"{uniform:.3f}" and g1_row["loss spikes"] == "3"
    assert "F-Attn at triggers" not in "\n".join(table)  # the mechanism's table: only on the task with triggers
    pytest.importorskip("matplotlib")
    for name in ("layers.png", "gate_hist.png", "attn_maps.png"):
        assert (tmp_path / "res" / name).stat().st_size > 1000
    assert on_disk["plots"] == ["layers.png", "gate_hist.png", "attn_maps.png"]  # no log.jsonl: no curves
    assert on_disk["runs"][1]["channels"] == g["channels"]
    # the mechanism per layer: one row per run and layer
    at = table.index(next(line for line in table if line.startswith("| run | layer | F-Attn | value norm ratio")))
    rows = [row.strip("| ").split(" | ") for row in table[at + 2:at + 6]]
    assert [row[:2] for row in rows] == [["base", "0"], ["base", "1"], ["g1", "0"], ["g1", "1"]]
    assert rows[3][3] == f"{g['layers']['value_norm_ratio'][1]:.3f}"


def test_every_figure_labels_its_axes_and_shows_its_colour_scale(trained_run, tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    figures = keep_figures(monkeypatch, analyze)
    analyze.main([f"--runs={trained_run}", f"--out_dir={tmp_path}"])
    wrote = capsys.readouterr().out.splitlines()[-1]  # every file it wrote, the per-window values too
    files = ["summary.json", "summary.md", "per_window.npz"] + [name for name, _ in figures]
    assert wrote == f"wrote {tmp_path / files[0]}, {', '.join(files[1:])}"
    assert sorted(f for f in os.listdir(tmp_path) if not f.startswith(".")) == sorted(files)  # (.lock: claimed)
    assert [name for name, _ in figures] == ["layers.png", "gate_hist.png", "attn_maps.png", "curves.png",
                                             "emergence.png"]
    assert_every_plot_is_labelled(figures)
    attn = dict(figures)["attn_maps.png"]
    bar = next(image.colorbar for ax in attn.axes for image in ax.images if image.colorbar)
    assert bar.mappable.get_clim() == (0, 1) and "attention" in bar.ax.get_ylabel()


def test_the_gate_histogram_says_how_many_scores_it_draws_at_its_ends(tmp_path, monkeypatch):
    """Its bins span [0, 1], a sigmoid gate's scores; a SiLU or identity gate's leave it, and are drawn in the end
    bins: each panel's legend says what share lies below 0 and above 1, and a panel whose scores all lie within says
    nothing of it."""
    plt = pytest.importorskip("matplotlib.pyplot")
    figures = keep_figures(monkeypatch, analyze)
    signed = np.array([-0.5, -0.2, 0.1, 0.3, 0.5, 0.6, 0.9, 1.4])  # 2 of 8 below 0, 1 of 8 above 1
    rare = np.r_[-1.0, np.full(199, 0.5)]  # 1 of 200 below 0
    analyze.plot_gate_hist(plt, [("silu", {"all": signed}, {}), ("sigmoid", {"all": np.array([0.1, 0.5, 0.9])}, {}),
                                 ("rare", {"all": rare}, {})], str(tmp_path))  # records without a gate mean
    (name, fig), = figures
    legends = [[t.get_text() for t in ax.get_legend().get_texts()] for ax in fig.axes if ax.get_legend()]
    assert legends == [["all positions (sample mean 0.39)\n25% < 0, drawn at 0\n12% > 1, drawn at 1"],
                       ["all positions (sample mean 0.50)"], ["all positions (sample mean 0.49)\n<1% < 0, drawn at 0"]]


def test_the_gate_histogram_gives_the_records_mean_and_keeps_its_legend_off_the_bars(tmp_path, monkeypatch):
    """Each legend gives the record's gate mean, the number the tables print (the mean of every score), not the mean
    of the kept sample (0.24 against the record's 0.247 in the repro study's G1), on the task with triggers each
    position's; and no legend covers a bar, wherever the peaks stand."""
    plt = pytest.importorskip("matplotlib.pyplot")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    figures = keep_figures(monkeypatch, analyze)
    rng = np.random.default_rng(0)
    low = np.r_[np.full(900, 0.01), rng.uniform(0.1, 0.9, 100)]  # a peak at the left
    high = np.r_[np.full(900, 0.99), rng.uniform(0.1, 0.9, 100)]  # at the right
    flat = rng.uniform(0, 1, 1000)  # bars everywhere, all alike
    gated = [("g1", {"all": low}, {"gate_mean": 0.247}), ("g4", {"all": high}, {"gate_mean": 0.871}),
             ("flat", {"all": flat}, {"gate_mean": 0.5}),
             ("task", {"trigger": high, "other": low}, {"gate_mean": 0.1, "gate_mean_trigger": 0.456,
                                                        "gate_mean_other": 0.013})]
    analyze.plot_gate_hist(plt, gated, str(tmp_path))
    (name, fig), = figures
    legends = [[t.get_text() for t in ax.get_legend().get_texts()] for ax in fig.axes if ax.get_legend()]
    assert legends == [["all positions (mean 0.247)"], ["all positions (mean 0.871)"], ["all positions (mean 0.500)"],
                       ["trigger positions (mean 0.456)", "other positions (mean 0.013)"]], legends
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    for ax in fig.axes:
        box = ax.get_legend().get_window_extent(renderer)
        for bar in ax.patches:
            if bar.get_height() > 0:
                assert not box.overlaps(bar.get_window_extent(renderer)), f"{ax.get_title()}: a legend over a bar"


def test_analyze_uses_the_runs_own_eval_windows(trained_run, dataset, tmp_path, monkeypatch, capsys):
    """By default a run is measured on the windows train.py evaluated it on, so the val loss is the logged one;
    a second run trained with other eval windows is measured on the first run's, with a note."""
    monkeypatch.chdir(tmp_path)  # the default out_dir is relative: out-analysis/, beside results/, git-ignored
    make_run(str(tmp_path / "other"), dataset, eval_iters=5)  # trained with 5 x 4 eval windows, not 2 x 4
    with open(os.path.join(trained_run, "log.jsonl"), "a") as f:
        f.write('{"iter": 6, "val_lo')  # the last line a crash cut short
    analyze.main([f"--runs={trained_run},{tmp_path / 'other'}", "--labels=run,other"])
    out = capsys.readouterr().out
    summary = json.load(open(tmp_path / "out-analysis" / "summary.json"))
    run = summary["runs"][0]
    _, checkpoint = load_checkpoint(os.path.join(trained_run, "ckpt.pt"))
    assert checkpoint["iter_num"] == 4 and run["val_loss"] == pytest.approx(checkpoint["val_loss"], rel=1e-5)
    assert run["val_loss_logged"] == checkpoint["val_loss"]
    assert summary["validation"]["batches"] == 2 and summary["validation"]["batch_size"] == 4
    assert "'run'" in summary["validation"]["source"] and "2 batches x 4 windows" in out
    assert summary["runs"][1]["eval_windows"]["batches"] == 2  # measured on run's windows, not its own 5
    assert "different eval windows" in out and "skipped 1 unreadable line" in out

    # best.pt, the lowest-validation-loss state, on request
    best = load_checkpoint(os.path.join(trained_run, "best.pt"))[1]
    summary = analyze.analyze([trained_run], out_dir=str(tmp_path / "best"), device="cpu", checkpoint="best.pt")
    assert summary["checkpoint"] == "best.pt" and summary["runs"][0]["val_loss"] == pytest.approx(best["val_loss"], rel=1e-5)
    # the val loss logged beside the one measured is the checkpoint's own, not the lowest the run reached before it
    rose = copy_run(trained_run, tmp_path / "rose")
    checkpoint = torch.load(os.path.join(rose, "ckpt.pt"), weights_only=True)
    save_checkpoint({**checkpoint, "best_val_loss": checkpoint["val_loss"] - 0.5}, os.path.join(rose, "ckpt.pt"))
    run = analyze.analyze([rose], out_dir=str(tmp_path / "rose-out"), device="cpu")["runs"][0]
    assert run["val_loss_logged"] == checkpoint["val_loss"]


def test_a_run_whose_checkpoint_is_gone_is_read_from_what_was_measured_on_it(trained_run, tmp_path, capsys):
    """lab/analyze.py keeps what it measured beside the checkpoint (measured.json, measured.npz). With the checkpoint
    gone (a GPU machine given back), the run is read from them: the same numbers, per-window values, gate scores and
    maps, said to be measured earlier; on other windows, or for another checkpoint, it is refused with what to do."""
    kept = tmp_path / "kept"
    shutil.copytree(trained_run, kept, ignore=shutil.ignore_patterns("measured.*"))
    fresh = analyze.analyze([str(kept)], out_dir=str(tmp_path / "fresh"), device="cpu")["runs"][0]
    assert os.path.isfile(kept / "measured.json") and os.path.isfile(kept / "measured.npz")
    for name in ("ckpt.pt", "best.pt"):
        os.remove(kept / name)
    capsys.readouterr()
    summary = analyze.analyze([str(kept), trained_run], labels=["kept", "here"], out_dir=str(tmp_path / "again"),
                              device="cpu")
    again, here = summary["runs"]
    for key in [m.key for m in MEASURES] + ["layers", "heads", "channels", "windows_id", "tokens", "iter",
                                            "val_loss_logged"]:
        assert again[key] == fresh[key], key
    for key, values in fresh["per_window"].items():
        assert values is None and key not in again["per_window"] or np.array_equal(again["per_window"][key], values)
    assert here["val_loss"] == fresh["val_loss"]  # the kept run's windows served the run measured now
    out = capsys.readouterr().out
    assert "kept: val loss" in out and "measured earlier, on CPU" in out and "ckpt.pt is gone" in out
    with np.load(tmp_path / "again" / "per_window.npz") as arrays:
        assert np.array_equal(arrays["0/val_loss"], fresh["per_window"]["val_loss"])
    record, scores, maps = analyze.stored_measurement(str(kept), "ckpt.pt")
    every = 2 * 4 * 32 * 32  # 2 batches x 4 windows x 32 positions x 32 channels (elementwise G1, one layer)
    assert scores["all"].size == min(every, analyze.STORED_GATE_SAMPLE) and 0 <= scores["all"].min() <= scores["all"].max() <= 1
    assert len(maps) == record["model"]["n_layer"] and np.allclose([m.sum(-1) for m in maps], 1, atol=1e-2)  # rows of P

    with pytest.raises(ValueError, match="measurement kept there is of its ckpt.pt: ask for that one with "
                                         "--checkpoint=ckpt.pt"):
        analyze.analyze([str(kept)], out_dir=str(tmp_path / "best"), device="cpu", checkpoint="best.pt")
    (kept / "best.pt").write_bytes(b"")  # a checkpoint left: a name not here is a typo of it, not the kept one's
    with pytest.raises(ValueError, match=r"^no best in .*kept: it has best.pt; choose one with --checkpoint=NAME$"):
        analyze.analyze([str(kept)], out_dir=str(tmp_path / "best"), device="cpu", checkpoint="best")
    os.remove(kept / "best.pt")
    with pytest.raises(ValueError, match="taken on other windows than 1 batches x 4 windows.*train the run again"):
        analyze.analyze([str(kept)], out_dir=str(tmp_path / "other"), device="cpu", batches=1)


def test_kept_measurements_are_drawn_again_without_the_data(trained_run, tmp_path, capsys):
    """A report can be drawn again from what was measured on runs whose checkpoints are gone, on a machine without
    their data (a clone of a published study): the kept runs are then held to the same windows by comparing their
    windows' fingerprints with each other, and one taken on other windows is still refused."""
    first = tmp_path / "first"
    shutil.copytree(trained_run, first, ignore=shutil.ignore_patterns("measured.*"))
    fresh = analyze.analyze([str(first)], out_dir=str(tmp_path / "fresh"), device="cpu")["runs"][0]
    kept = []
    for name, where in (("a", "NVIDIA H200, 2026-11-26"), ("b", "NVIDIA H100 80GB HBM3, 2026-11-22")):
        run = tmp_path / name  # a kept run whose data sat in a folder this machine lacks, measured on a GPU
        shutil.copytree(first, run, ignore=shutil.ignore_patterns("*.pt"))
        record = json.load(open(run / "measured.json"))
        record["train_config"]["data_dir"] = str(tmp_path / "data-elsewhere")
        record["measured_on"] = where
        json.dump(record, open(run / "measured.json", "w"))
        kept.append(str(run))
    capsys.readouterr()
    summary = analyze.analyze(kept, out_dir=str(tmp_path / "again"), device="cpu")
    assert [r["val_loss"] for r in summary["runs"]] == [fresh["val_loss"]] * 2
    assert [r["eval_windows"]["data_dir"] for r in summary["runs"]] == [str(tmp_path / "data-elsewhere")] * 2
    assert summary["runs"][0]["windows_id"] == fresh["windows_id"]
    assert (tmp_path / "again" / "layers.png").stat().st_size > 1000
    # where they were measured, not where they were drawn again
    assert summary["measured_on"] == {"NVIDIA H200, 2026-11-26": 1, "NVIDIA H100 80GB HBM3, 2026-11-22": 1}
    assert open(tmp_path / "again" / "summary.md").readline().startswith(
        "Measured by analyze.py on NVIDIA H200, 2026-11-26 (1 run); NVIDIA H100 80GB HBM3, 2026-11-22 (1 run): ")
    out = capsys.readouterr().out
    assert out.count("data-elsewhere is not here: the measurements kept of the runs are compared with each other") == 1
    # and the summary says it too, not only the terminal: a result knows which data it was checked on
    [note] = summary["validation"]["data_notes"]
    assert note.endswith("data-elsewhere is not here: the measurements kept of the runs are compared with each "
                         "other, by a fingerprint of the windows each was taken on")
    assert f"Note: {note}." in open(tmp_path / "again" / "summary.md").readline()
    # a kept run on other windows of the same folder (without BOS, as the sink lab's baseline_no_bos): the same note,
    # said once
    shutil.copytree(tmp_path / "a", tmp_path / "c")
    record = json.load(open(tmp_path / "c" / "measured.json"))
    record["train_config"]["bos"] = record["eval_windows"]["bos"] = False
    record["windows_id"] = "1" * 16
    json.dump(record, open(tmp_path / "c" / "measured.json", "w"))
    capsys.readouterr()
    both = analyze.analyze(kept + [str(tmp_path / "c")], out_dir=str(tmp_path / "both"), device="cpu")
    assert both["validation"]["data_notes"] == [note]
    assert "note: the runs differ in block_size, dataset or bos" in capsys.readouterr().out
    # data that sat in this repository's folders is named as there, not by this machine's path (a committed report)
    record = json.load(open(tmp_path / "c" / "measured.json"))
    record["train_config"]["data_dir"] = os.path.join(analyze.REPO, "data", "gone-from-here")
    json.dump(record, open(tmp_path / "c" / "measured.json", "w"))
    [note] = analyze.analyze([str(tmp_path / "c")], out_dir=str(tmp_path / "c-again"), device="cpu")["validation"][
        "data_notes"]
    assert note.startswith(os.path.join("data", "gone-from-here") + " is not here: ")
    assert "its log goes on" not in capsys.readouterr().out
    # a measurement taken mid-run (lab.analyze while it trained), its checkpoint gone since: said to be of that state
    last = record["iter"]
    json.dump({**record, "iter": last - 1}, open(tmp_path / "c" / "measured.json", "w"))
    stale = analyze.analyze([str(tmp_path / "c")], out_dir=str(tmp_path / "c-stale"), device="cpu")
    said = f"the measurement kept of c is of its state at iter {last - 1}, and its log goes on to iter {last}"
    assert f"note: {said} (measured while it trained" in capsys.readouterr().out
    assert stale["run_notes"] == [said]  # the summary's files say it too, not the console alone
    assert f"Note: {said}." in open(tmp_path / "c-stale" / "summary.md").readline()
    assert json.load(open(tmp_path / "c-stale" / "summary.json"))["run_notes"] == [said]

    record = json.load(open(tmp_path / "b" / "measured.json"))
    record["windows_id"] = "0" * 16  # as if b had been measured on other tokens
    json.dump(record, open(tmp_path / "b" / "measured.json", "w"))
    with pytest.raises(ValueError, match=r"b: its ckpt.pt is gone, and the measurement kept of it was taken on other "
                                         r"windows than .*data-elsewhere"):
        analyze.analyze(kept, out_dir=str(tmp_path / "refused"), device="cpu")


def test_kept_measurements_are_drawn_again_beside_other_data(trained_run, tmp_path, capsys):
    """A clone whose own data (a corpus of other installed packages) is not the kept runs': the report is drawn
    again from them all the same, compared with each other, and said so; a run measured here on that other data is
    refused beside them, whichever comes first."""
    first = tmp_path / "first"
    shutil.copytree(trained_run, first, ignore=shutil.ignore_patterns("measured.*"))
    analyze.analyze([str(first)], out_dir=str(tmp_path / "fresh"), device="cpu")
    kept = []
    for name in ("a", "b"):
        run = tmp_path / name  # kept runs measured on other tokens than this machine's data gives
        shutil.copytree(first, run, ignore=shutil.ignore_patterns("*.pt"))
        record = json.load(open(run / "measured.json"))
        record["windows_id"] = "1" * 16
        json.dump(record, open(run / "measured.json", "w"))
        kept.append(str(run))
    capsys.readouterr()
    summary = analyze.analyze(kept, out_dir=str(tmp_path / "again"), device="cpu")
    assert [r["windows_id"] for r in summary["runs"]] == ["1" * 16] * 2
    assert "holds other data than the measurements kept of the runs were taken on" in capsys.readouterr().out
    [note] = summary["validation"]["data_notes"]
    assert "holds other data than the measurements kept" in note
    assert f"Note: {note}." in open(tmp_path / "again" / "summary.md").readline()
    assert analyze.analyze([str(first)], out_dir=str(tmp_path / "here"), device="cpu")["validation"]["data_notes"] == []
    with pytest.raises(ValueError, match="ckpt.pt is gone, and the measurement kept of it was taken on other windows"):
        analyze.analyze([str(first)] + kept, out_dir=str(tmp_path / "mixed"), device="cpu")
    with pytest.raises(ValueError, match="measured here on .* whose tokens are not those the measurements kept"):
        analyze.analyze(kept + [str(first)], out_dir=str(tmp_path / "mixed2"), device="cpu")
    # as a command: one line, and the --out_dir it made for nothing is gone (one that was there is left as it was)
    for out in (tmp_path / "new" / "analysis", tmp_path / "mine"):
        with pytest.raises(SystemExit, match="whose tokens are not those the measurements kept"):
            analyze.main([f"--runs={kept[0]},{first}", f"--out_dir={out}", "--device=cpu"])
    assert not (tmp_path / "new" / "analysis").exists() and (tmp_path / "new").is_dir()
    (tmp_path / "mine").mkdir(exist_ok=True)
    with pytest.raises(SystemExit):
        analyze.main([f"--runs={kept[0]},{first}", f"--out_dir={tmp_path / 'mine'}", "--device=cpu"])
    assert os.listdir(tmp_path / "mine") == []


def test_a_key_of_the_other_kind_of_measurement_is_refused(trained_run, tmp_path, monkeypatch):
    """--text, --window, --windows and --bos say what published checkpoints are measured on; --checkpoint, --batches,
    --batch_size and --plot_labels, what runs are. Given with the other kind, each was not applied, and not a word
    said (--runs=R --windows=-3 measured R as without it): refused in one line, before any work, as lab.evaluate
    refuses its --window and --text without --pretrained."""
    monkeypatch.setattr(analyze, "analyze", lambda *a, **k: pytest.fail("measured"))
    monkeypatch.setattr(analyze, "analyze_pretrained", lambda *a, **k: pytest.fail("measured"))
    for argv, key in (([f"--runs={trained_run}", "--windows=-3"], "windows"),
                      ([f"--runs={trained_run}", "--bos"], "bos"),
                      ([f"--runs={trained_run}", "--window=64", "--text=x.txt"], "text"),
                      (["--pretrained=gpt2", "--checkpoint=best.pt"], "checkpoint"),
                      (["--pretrained=gpt2", "--batches=2", "--plot_labels=a"], "batches")):
        with pytest.raises(SystemExit) as e:
            analyze.main([*argv, f"--out_dir={tmp_path / 'out'}"])
        message = str(e.value.code)
        kind = "runs (--runs)" if "--pretrained=gpt2" in argv else "published checkpoints (--pretrained)"
        assert message.startswith(f"error: --{key} is a key of {kind}: ") and message.endswith("; leave it out")
        assert "\n" not in message, message
    assert not (tmp_path / "out").exists()


def test_runs_and_pretrained_together_are_named_before_a_key_of_either(trained_run, tmp_path):
    """--runs and --pretrained both given, with a key of one of them: the mistake is giving both, not the key."""
    with pytest.raises(SystemExit) as e:
        analyze.main([f"--runs={trained_run}", "--pretrained=gpt2", "--checkpoint=best.pt",
                      f"--out_dir={tmp_path / 'out'}"])
    assert str(e.value.code) == "error: give --runs (checkpoints of train.py) or --pretrained (published ones), " \
        "not both", e.value.code


def test_analyze_cli_errors(tmp_path, trained_run):
    # as a user sees it: one line, no traceback
    result = subprocess.run([sys.executable, "-m", "lab.analyze", f"--runs={tmp_path / 'nothing'}"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode != 0 and "no ckpt.pt" in result.stderr and "train.py" in result.stderr
    assert result.stderr.strip().count("\n") == 0, result.stderr

    def error(*argv):
        with pytest.raises(SystemExit) as e:
            analyze.main([*argv, f"--out_dir={tmp_path / 'res'}"])
        return str(e.value.code)

    # a checkpoint name the run does not have: the message names it and what the run has
    shutil.copytree(trained_run, tmp_path / "latest_only", ignore=shutil.ignore_patterns("best.pt", "measured.*"))
    message = error(f"--runs={tmp_path / 'latest_only'}", "--checkpoint=best.pt")
    assert message.startswith("error: no best.pt in") and "ckpt.pt" in message and "--checkpoint" in message
    # a checkpoint cut short (a full disk, a copy interrupted): train.load_checkpoint's one line
    os.makedirs(tmp_path / "cut")
    data = open(os.path.join(trained_run, "ckpt.pt"), "rb").read()
    open(tmp_path / "cut" / "ckpt.pt", "wb").write(data[:len(data) // 2])
    message = error(f"--runs={tmp_path / 'cut'}")
    assert message.startswith("error: ") and str(tmp_path / "cut" / "ckpt.pt") in message and "\n" not in message
    # a checkpoint without train.py's run settings (someone else's file): which settings are missing
    os.makedirs(tmp_path / "foreign")
    checkpoint = load_checkpoint(os.path.join(trained_run, "ckpt.pt"))[1]
    save_checkpoint({"model": checkpoint["model"], "model_args": checkpoint["model_args"]}, str(tmp_path / "foreign" / "ckpt.pt"))
    assert "lacks train.py's run settings" in error(f"--runs={tmp_path / 'foreign'}")
    config = {k: v for k, v in checkpoint["config"].items() if k != "eval_iters"}  # an iteration, one setting short
    save_checkpoint({**checkpoint, "config": config}, str(tmp_path / "foreign" / "ckpt.pt"))
    assert "lacks train.py's run settings" in error(f"--runs={tmp_path / 'foreign'}")
    for name in ("batches", "batch_size", "map_tokens"):  # 0 would not fall back to the default windows
        assert f"--{name}=0 must be at least 1" in error(f"--runs={trained_run}", f"--{name}=0")
    assert "is no checkpoint file" in error(f"--runs={os.path.join(trained_run, 'ckpt.pt')}")  # a file, not a folder
    assert "--labels has 1 names for 2 runs" in error(f"--runs={trained_run},{trained_run}", "--labels=a")
    os.makedirs(tmp_path / "other" / os.path.basename(trained_run))  # a second run of the same folder name
    shutil.copy(os.path.join(trained_run, "ckpt.pt"), tmp_path / "other" / os.path.basename(trained_run))
    message = error(f"--runs={trained_run},{tmp_path / 'other' / os.path.basename(trained_run)}")
    assert message.startswith(f"error: two models share the label {os.path.basename(trained_run)!r} ({trained_run} "
                              "and ") and "--labels=" in message
    assert "name the runs to analyze: --runs=" in error()
    message = error(f"--runs={trained_run}", "--batches=100000")  # more than the val set holds apart: refused at once
    assert "windows of" in message and "validation set holds" in message and "without overlap" in message, message
    assert "unknown key 'run'" in error(f"--run={trained_run}")
    message = error(f"--runs={trained_run}", "--plot_labels=run,other")
    assert "--plot_labels names other, not a run's label; the labels: run" in message


def test_the_runs_and_labels_are_list_keys(trained_run, tmp_path, capsys, monkeypatch):
    """--runs, --labels and --plot_labels are written a,b,c; the plots show the runs --plot_labels names."""
    pytest.importorskip("matplotlib")
    figures = keep_figures(monkeypatch, analyze)
    analyze.main([f"--runs={trained_run},{trained_run}", "--labels=first,second", "--plot_labels=second",
                  f"--out_dir={tmp_path}"])
    summary = json.load(open(tmp_path / "summary.json"))
    assert [r["label"] for r in summary["runs"]] == ["first", "second"]
    assert summary["runs"][0]["val_loss"] == summary["runs"][1]["val_loss"]  # the same run, on the same windows
    out = capsys.readouterr().out
    assert "first: val loss" in out and "F-Attn" in out and "(val loss in its log:" in out  # probe.describe's line
    assert analyze.AnalyzeConfig.__dataclass_fields__["runs"].type == tuple[str, ...]
    layers = dict(figures)["layers.png"]  # one layer: a bar per run shown, named on the shared run axis
    assert [len(ax.patches) for ax in layers.axes] == [1] * 3
    assert [t.get_text() for t in layers.axes[0].get_yticklabels()] == ["second"]


def test_layers_png_draws_a_line_per_run_over_layers_and_a_bar_per_run_for_one_layer(monkeypatch, tmp_path):
    """Several layers: a line per run against the layer; one layer (the sink lab): a labelled bar per run whose
    length is the run's value, on a linear axis from 0, never one point on a layer axis."""
    plt = analyze.pyplot()
    if plt is None:
        pytest.skip("needs matplotlib")
    figures = keep_figures(monkeypatch, analyze)
    def record(label, layers, older=False):  # older: measured by the probe's older sink share (no value norm ratio)
        return {"label": label, "layers": {"first_token_attn": [0.1 * (i + 1) for i in range(layers)],
                                           "sink_share": [0.05] * layers, "max_act": [200.0 + i for i in range(layers)],
                                           **({} if older else {"value_norm_ratio": [1.0] * layers})}}
    analyze.plot_layers(plt, [record("base", 3), record("g1", 3)], str(tmp_path))
    analyze.plot_layers(plt, [record("base", 1), record("g1", 1), record("ns", 1)], str(tmp_path))
    analyze.plot_layers(plt, [record("base", 3), record("g1", 3, older=True)], str(tmp_path))
    lines, bars, mixed = (fig for _, fig in figures)
    assert [[line.get_label() for line in ax.lines] for ax in lines.axes] == [["base", "g1"]] * 3
    assert list(lines.axes[0].lines[0].get_xdata()) == [0, 1, 2]
    # the older probe's sink share: dashed, and the legend says what dashed means; its other measures drawn as any
    # run's
    share = mixed.axes[1]
    assert [(line.get_label(), line.get_linestyle()) for line in share.lines] == [("base", "-"),
                                                                                 ("g1 (older probe)", "--")]
    assert [t.get_text() for t in mixed.legends[0].get_texts()] == ["base", "g1",
                                                                   "dashed: the older probe's sink share"]
    assert [line.get_linestyle() for ax in (mixed.axes[0], mixed.axes[2]) for line in ax.lines] == ["-"] * 4
    for ax, key in zip(bars.axes, ("first_token_attn", "sink_share", "max_act")):
        widths = [patch.get_width() for patch in ax.patches]
        assert widths == [record(n, 1)["layers"][key][0] for n in ("base", "g1", "ns")]  # the values, in order
        assert ax.get_xscale() == "linear" and ax.get_xlim()[0] == 0 and not ax.lines
    where = {t.get_text(): t.get_position()[1] for t in bars.axes[0].get_yticklabels()}
    assert where["base"] > where["g1"] > where["ns"]  # the first run on top, as in the tables


def test_layers_png_has_one_legend_of_the_runs_beside_the_panels(monkeypatch, tmp_path):
    """layers.png of several layers: one legend of the runs, beside the panels and in the image, none inside a panel
    (inside the F-Attn and sink share panels it covered the repro study's baseline at layer 6)."""
    plt = analyze.pyplot()
    if plt is None:
        pytest.skip("needs matplotlib")
    figures = keep_saved(monkeypatch, analyze)
    records = [{"label": f"variant{i}/seed1337", "layers": {"first_token_attn": [0.02 * (i + layer) for layer in
                                                                                   range(8)],
                                                            "sink_share": [0.05] * 8, "max_act": [100.0] * 8,
                                                            "value_norm_ratio": [1.0] * 8}} for i in range(8)]
    analyze.plot_layers(plt, records, str(tmp_path))
    (name, fig, kw), = figures
    assert not any(ax.get_legend() for ax in fig.axes) and len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [r["label"] for r in records]
    assert_legends_in_image_beside_the_data(name, fig, kw)


@pytest.mark.parametrize("name", ["summary.json", "summary.md", "per_window.npz", "layers.png"])
def test_a_full_disk_leaves_the_previous_results_whole(trained_run, tmp_path, monkeypatch, name):
    """A write that fails part-way (the disk full) leaves the previous file as it was, and no temporary file."""
    if name.endswith(".png"):
        pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    out = tmp_path / "out"
    analyze.analyze([str(run)], out_dir=str(out), device="cpu")
    before = files_of(out)
    disk_full(monkeypatch, name)
    with pytest.raises(OSError) as e:
        analyze.analyze([str(run)], out_dir=str(out), device="cpu")
    monkeypatch.undo()
    assert e.value.errno == errno.ENOSPC
    now = files_of(out)
    assert now[name] == before[name] and set(now) == set(before)  # the file as it was, and no .tmp left beside it


def test_result_set_replaces_the_old_set_as_one(tmp_path, monkeypatch):
    """runfolder.result_set: the new files replace the old, the old set's files the new lacks go, files of no set
    stay, the summary is renamed last; an error in the block leaves the folder as it was, with no staging folder."""
    for name, text in (("summary.json", "old"), ("a.png", "old"), ("b.png", "old"), ("notes.txt", "mine")):
        (tmp_path / name).write_text(text)
    with pytest.raises(RuntimeError, match="plotting failed"):
        with result_set(str(tmp_path), ("summary.json", "a.png", "b.png")) as staging:
            open(os.path.join(staging, "a.png"), "w").write("new")
            raise RuntimeError("plotting failed")
    assert files_of(tmp_path) == {"summary.json": b"old", "a.png": b"old", "b.png": b"old", "notes.txt": b"mine"}
    moved, real_replace = [], os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (moved.append(os.path.basename(dst)), real_replace(src, dst)))
    with result_set(str(tmp_path), ("summary.json", "a.png", "b.png")) as staging:
        for name in ("summary.json", "a.png"):
            open(os.path.join(staging, name), "w").write("new")
    assert files_of(tmp_path) == {"summary.json": b"new", "a.png": b"new", "notes.txt": b"mine"}
    assert moved[-2:] == ["a.png", "summary.json"]  # the summary last (os.replace is also atomic_write's)


def test_an_analysis_leaves_no_plot_of_the_one_before(trained_run, dataset, tmp_path, monkeypatch):
    """Analysed again into the same folder with an ungated run, the gated run's gate histogram goes (it would show
    another run's gate); Ctrl-C while plotting leaves the earlier analysis whole."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    first = analyze.analyze([trained_run], out_dir=str(out), device="cpu")
    assert "gate_hist.png" in first["plots"]
    before = files_of(out)
    make_run(str(tmp_path / "none"), dataset, gate="none")

    def interrupted(*args):
        raise KeyboardInterrupt
    with monkeypatch.context() as m:
        m.setattr(analyze, "plot_attention_maps", interrupted)
        with pytest.raises(KeyboardInterrupt):
            analyze.analyze([str(tmp_path / "none")], out_dir=str(out), device="cpu")
    assert files_of(out) == before  # the earlier set whole, no staging folder left
    second = analyze.analyze([str(tmp_path / "none")], out_dir=str(out), device="cpu")
    assert "gate_hist.png" not in second["plots"]
    assert sorted(os.listdir(out)) == sorted(second["plots"] + ["summary.json", "summary.md", "per_window.npz"])
    assert set(second["plots"]) | {"summary.json", "summary.md", "per_window.npz"} <= set(report.ANALYSIS_FILES)


def unwritable_out_dir(tmp_path, kind):
    """An --out_dir that is a file, lies under a file, or is a folder this user cannot write in: (path, what the
    message says)."""
    if kind == "not-writable" and os.geteuid() == 0:
        pytest.skip("root writes in any folder")
    out = tmp_path / "out"
    if kind == "a-file":
        out.write_text("x")
    elif kind == "under-a-file":
        (tmp_path / "file").write_text("x")
        out = tmp_path / "file" / "out"
    else:
        out.mkdir(mode=0o500)
    return out, "is not writable" if kind == "not-writable" else "cannot be made"


@pytest.mark.parametrize("kind", ["a-file", "under-a-file", "not-writable"])
def test_an_out_dir_that_cannot_be_written_is_refused_before_the_work(trained_run, tmp_path, monkeypatch, kind):
    out, words = unwritable_out_dir(tmp_path, kind)
    monkeypatch.setattr(analyze, "analyze", lambda *a, **k: pytest.fail("measured before the out_dir was checked"))
    monkeypatch.setattr(analyze, "analyze_pretrained", lambda *a, **k: pytest.fail("measured before the check"))
    for argv in ([f"--runs={trained_run}"], ["--pretrained=gpt2"]):
        with pytest.raises(SystemExit) as e:
            analyze.main([*argv, f"--out_dir={out}"])
        message = str(e.value.code)
        assert message.startswith(f"error: --out_dir={out} ") and words in message and "\n" not in message, message


# ----------------------------------------------------------------------------
# The sink's mechanism: the rows for a report, and its emergence during training

def mechanism_record(label, f_attn, max_act, ratio, top_channel):
    n = len(f_attn)
    channel = {"channels": [top_channel, 1, 2], "values": [-300.0, 20.0, 10.0], "share": 0.95,
               "top_channel": top_channel, "top_channel_share": 0.75, "pos": 0, "pos_share": 1.0}
    return {"label": label, "layers": {"first_token_attn": f_attn, "max_act": max_act, "value_norm_ratio": ratio},
            "channels": [channel] * n}


def test_mechanism_rows_name_the_sink_layer_and_the_massive_channels():
    from lab.report import markdown_table
    runs = [mechanism_record("base", [0.1, 0.8, 0.3], [5.0, 40.0, 300.0], [1.0, 0.02, 0.9], 447),
            mechanism_record("g1", [0.05, 0.04, float("nan")], [2.0, 9.0, 3.0], [1.1, 1.0, 0.9], 138),
            {"run": "old", "layers": {"first_token_attn": [0.5], "max_act": [3.0]}}]  # measured before the keys
    header, rows = report.mechanism_rows(runs)
    assert len(header) == 10 and len(rows) == 3 and all(len(row) == len(header) for row in rows)
    base = dict(zip(header, rows[0]))
    assert (base["sink layer"], base["F-Attn"], base["value norm ratio"]) == ("1", "0.800", "0.020")
    assert (base["M-Act layer"], base["M-Act"], base["peak position"]) == ("2", "300.0", "0 (100%)")
    assert base["top channels (mean h)"] == "447: -300.0, 1: 20.0, 2: 10.0"
    assert (base["their norm² share"], base["peak channel"]) == ("95%", "447 (75%)")
    assert not any("|" in column for column in header)  # a markdown table's cells cannot hold one
    assert dict(zip(header, rows[1]))["sink layer"] == "0"  # NaN is no layer's F-Attn
    old = dict(zip(header, rows[2]))
    assert old["run"] == "old" and old["value norm ratio"] is None and old["top channels (mean h)"] is None
    header, rows = report.mechanism_rows(runs, per_layer=True)
    assert len(header) == 9 and [row[:2] for row in rows] == [["base", "0"], ["base", "1"], ["base", "2"], ["g1", "0"],
                                                             ["g1", "1"], ["g1", "2"], ["old", "0"]]
    assert rows[5][2] is None and rows[1][3] == "0.020"
    lines = markdown_table(header, rows)
    assert len(lines) == 2 + 7 and "| – |" in lines[-1]
    # a run whose every layer's F-Attn is NaN (diverged) has no sink layer: a row of blanks, not a TypeError
    nan = float("nan")
    header, rows = report.mechanism_rows([mechanism_record("nan", [nan, nan], [nan, nan], [0.5, 0.5], 3)])
    row = dict(zip(header, rows[0]))
    assert row["sink layer"] is None and row["F-Attn"] is None and row["value norm ratio"] is None


def fake_log(n_layer, sink):
    """A log.jsonl's records as train.py writes them: per layer F-Attn rising on the sink layer (or none), M-Act and
    the value norm ratio."""
    log = []
    for step in range(0, 101, 20):
        f = [0.05 + (0.8 * step / 100 if sink and layer == n_layer // 2 else 0) for layer in range(n_layer)]
        log.append({"iter": step, "tokens": step * 1000, "val_loss": 3 - step / 100,
                    "first_token_attn": sum(f) / n_layer,
                    "layers": {"first_token_attn": f, "max_act": [1.0 + step * (layer + 1) for layer in range(n_layer)],
                               "value_norm_ratio": [1.0 - (0.9 * step / 100 if f[layer] > 0.3 else 0) + 0.01
                                                    for layer in range(n_layer)]}})
    return log


@pytest.mark.parametrize("n_layer", [1, 8])
def test_the_emergence_plot_draws_each_layer_of_each_run_side_by_side(tmp_path, monkeypatch, n_layer):
    """A panel per run (baseline, gated) and measure (F-Attn, M-Act, the value norm ratio), one line per layer, a
    shared y-axis for a measure; a run whose log predates the per-layer values says so once, in its first panel."""
    plt = pytest.importorskip("matplotlib.pyplot")
    figures = keep_figures(monkeypatch, analyze)
    logs = [fake_log(n_layer, sink=True), fake_log(n_layer, sink=False),
            [{"iter": 0, "tokens": 0, "val_loss": 3.0, "first_token_attn": 0.1}]]  # an older train.py's log
    name = analyze.plot_emergence(plt, ["baseline", "g1", "old"], logs, str(tmp_path))
    assert name == "emergence.png" and (tmp_path / name).stat().st_size > 1000
    fig = dict(figures)[name]
    assert_every_plot_is_labelled(figures)
    grid = np.array(fig.axes).reshape(3, 3)  # rows: measures; columns: runs
    assert [ax.get_title() for ax in grid[0]] == ["baseline", "g1", "old"]
    assert [len(ax.get_lines()) for ax in grid[0]] == [n_layer, n_layer, 0]
    assert "no per-layer values in this run's log" in grid[0][2].texts[0].get_text().replace("\n", " ")
    assert not grid[1][2].get_visible() and not grid[2][2].get_visible()  # said once, not in every row
    assert grid[1][0].get_yscale() == "log" and grid[0][0].get_ylim() == grid[0][1].get_ylim()  # shared along a row
    sink = grid[0][0].get_lines()[n_layer // 2]
    assert sink.get_ydata()[-1] == pytest.approx(0.85) and sink.get_label() == f"layer {n_layer // 2}"
    assert list(sink.get_xdata()) == [rec["iter"] for rec in logs[0]]  # against the training step, not tokens
    # a legend of the layers beside the panels, none for a one-layer model (its one entry said nothing)
    assert len(fig.legends) == (n_layer > 1) and all(len(legend.get_texts()) == n_layer for legend in fig.legends)
    assert analyze.emergence_series(logs[2]) == {}
    logs[0][1]["layers"]["max_act"][0] = None  # a value the log holds as null (not finite): a gap, never 0
    steps, values = analyze.emergence_series(logs[0])["max_act"]
    assert np.isnan(values[1, 0]) and np.isfinite(np.delete(values, 1, 0)).all() and values.shape == (6, n_layer)


def test_the_emergence_plot_wraps_many_runs_tells_neighbouring_layers_apart_and_drops_empty_rows(tmp_path,
                                                                                                monkeypatch):
    """The sink lab's 15 runs drew 15 columns in one row (7008 px wide, unreadable on a page): at most 5 columns now,
    in bands, every run once; 8 layers in viridis made layers 6 and 7 the same green: each layer a look of its own;
    a measure only one run logged (the repro study's value norm ratio) is drawn for it alone, said once under the
    title, and no band whose runs lack it gets a row of empty panels; the legend beside the panels."""
    plt = pytest.importorskip("matplotlib.pyplot")
    figures = keep_saved(monkeypatch, analyze)
    names = [f"variant{i}/seed1337" for i in range(15)]
    analyze.plot_emergence(plt, names, [fake_log(1, sink=i % 2 == 0) for i in range(15)], str(tmp_path))
    logs = [fake_log(8, sink=i % 2 == 0) for i in range(8)]
    for i, log in enumerate(logs):
        for rec in log:
            if i != 2:
                del rec["layers"]["value_norm_ratio"]
    analyze.plot_emergence(plt, names[:8], logs, str(tmp_path))
    (_, many, _), (name, layered, kw) = figures
    for fig, n in ((many, 15), (layered, 8)):
        shown = [ax for ax in fig.axes if ax.get_visible()]
        titles = [ax.get_title() for ax in shown if ax.get_title()]
        assert titles == names[:n]  # each run once, in the runs' order
        columns = {round(ax.get_position().x0, 3) for ax in shown}
        assert len(columns) <= 5, f"{len(columns)} columns"
        for ax in shown:  # one range for a measure, holding every run's values
            low, high = ax.get_ylim()
            ys = np.concatenate([np.asarray(line.get_ydata(), dtype=float) for line in ax.lines] or [np.array([])])
            assert all(low <= y <= high for y in ys if np.isfinite(y)), ax.get_title()
    assert len({round(ax.get_position().x0, 3) for ax in layered.axes}) == 4  # 8 runs: two bands of 4
    lines = [ax for ax in layered.axes if ax.get_visible()][0].get_lines()
    looks = [(matplotlib_colour(line.get_color()), line.get_linestyle()) for line in lines]
    assert len(lines) == 8 and len(set(looks)) == 8
    assert all(looks[i][0] != looks[i + 1][0] for i in range(7))  # neighbouring layers in different colours
    ratio = [ax for ax in layered.axes if ax.get_visible() and ax.get_ylabel().startswith("value norm")]
    assert len(ratio) == 1 and ratio[0].lines  # the one run that logged it
    assert len(layered.axes) == 4 * (3 + 2)  # the first band: three rows; the second, without the ratio: two
    assert "only in the logs of variant2/seed1337" in layered._suptitle.get_text()
    assert_legends_in_image_beside_the_data(name, layered, kw)


def test_the_attention_maps_show_each_runs_sink_layer_and_the_curves_the_logs_values(tmp_path, monkeypatch):
    """attn_maps.png draws each run's map of the layer where its own F-Attn is highest (one layer for all, the
    first run's, hid a sink another run grew elsewhere), and its title names that layer; curves.png draws each log's
    validation loss and F-Attn against the tokens seen (millions)."""
    plt = pytest.importorskip("matplotlib.pyplot")
    figures = keep_figures(monkeypatch, analyze)
    rng = np.random.default_rng(0)
    records = [{"label": "base", "layers": {"first_token_attn": [0.1, 0.8, 0.3]}},
               {"label": "g1", "layers": {"first_token_attn": [0.05, 0.04, 0.9]}}]
    maps = [[rng.random((6, 6)) for _ in range(3)] for _ in records]
    analyze.plot_attention_maps(plt, records, maps, str(tmp_path))
    logs = [fake_log(2, sink=True), fake_log(2, sink=False)]
    analyze.plot_curves(plt, ["base", "g1"], logs, str(tmp_path))
    (_, drawn), (_, curves) = figures
    images = [image.get_array() for ax in drawn.axes for image in ax.images]
    assert len(images) == 2 and np.array_equal(images[0], maps[0][1]) and np.array_equal(images[1], maps[1][2])
    assert [ax.get_title() for ax in drawn.axes if ax.images] == [
        "base\nlayer 1 (its highest F-Attn), first-token 0.80", "g1\nlayer 2 (its highest F-Attn), first-token 0.90"]
    loss, sink = curves.axes
    for ax, key in ((loss, "val_loss"), (sink, "first_token_attn")):
        for line, log in zip(ax.lines, logs):
            assert list(line.get_xdata()) == [rec["tokens"] / 1e6 for rec in log]
            assert list(line.get_ydata()) == [rec[key] for rec in log]


def test_the_curves_give_each_run_its_own_look_one_legend_beside_and_a_loss_axis_past_the_first_eval(
        tmp_path, monkeypatch):
    """curves.png of 15 runs (the sink lab's variants): no two runs drawn alike (matplotlib's ten-colour cycle gave
    two variants each colour), one legend for the figure, beside the panels and in the image, and a loss axis
    spanning the evaluations after the first (step 0's loss, far above, flattened every run into one line)."""
    plt = pytest.importorskip("matplotlib.pyplot")
    figures = keep_saved(monkeypatch, analyze)
    names = [f"variant{i}/seed1337" for i in range(15)]
    logs = [fake_log(1, sink=i % 2 == 0) for i in range(15)]
    for i, log in enumerate(logs):
        for rec in log:
            rec["val_loss"] = 4.2 if rec["iter"] == 0 else 2.3 - 0.001 * rec["iter"] + 0.01 * i
    analyze.plot_curves(plt, names, logs, str(tmp_path))
    (name, fig, kw), = figures
    loss, sink = fig.axes[:2]
    for ax in (loss, sink):
        looks = {(matplotlib_colour(line.get_color()), line.get_linestyle()) for line in ax.lines}
        assert len(ax.lines) == 15 and len(looks) == 15, looks
    assert len(fig.legends) == 1 and [t.get_text() for t in fig.legends[0].get_texts()] == names
    assert_legends_in_image_beside_the_data(name, fig, kw)
    later = [rec["val_loss"] for log in logs for rec in log[1:]]
    low, high = loss.get_ylim()
    assert low <= min(later) and max(later) <= high < 4.2, (low, high)


def matplotlib_colour(colour):
    import matplotlib.colors
    return matplotlib.colors.to_hex(colour)


# ----------------------------------------------------------------------------
# What a careless user meets: which run and which data a result comes from, folders shared with others, broken files

HOLD = ("import sys, time; from runfolder import claim_folder; lock = claim_folder(sys.argv[1]); "
        "print('held', flush=True); time.sleep(60)")


def copy_run(source, target):
    """A copy of a run folder without what lab/analyze.py and lab/evaluate.py kept in it."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("measured.*", "evaluated.json"))
    return str(target)


def set_provenance(run_dir, data_dir=None, name="ckpt.pt"):
    """Give a run's checkpoint what train.py records in it now, where it lacks them (an older train.py's): a run id
    and the fingerprint of its data (the data in data_dir, made its data_dir, when given). Returns the run id."""
    from data.shards import dataset_fingerprint
    path = os.path.join(run_dir, name)
    checkpoint = torch.load(path, weights_only=True)
    if data_dir is not None:
        checkpoint["config"]["data_dir"] = str(data_dir)
    checkpoint.setdefault("run_id", "0123456789abcdef")
    checkpoint["data_fingerprint"] = dataset_fingerprint(checkpoint["config"]["data_dir"])
    save_checkpoint(checkpoint, path)
    return checkpoint["run_id"]


def prepare_again(data_dir, seed=5):
    """The toy dataset prepared again in place from other tokens, as `prepare.py` run again on another source does."""
    from data.shards import write_dataset
    for name in os.listdir(data_dir):
        os.remove(os.path.join(data_dir, name))
    rng = np.random.default_rng(seed)
    docs = {split: [rng.integers(0, 50000, n, dtype=np.uint16) for n in (3000, 2000)] for split in ("train", "val")}
    write_dataset(str(data_dir), "toy", docs, source="other random tokens")


def error_of(main, argv):
    """The one line a script stops with (cli.fail's SystemExit)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    message = str(e.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    return message


def test_a_checkpoint_whose_data_was_prepared_again_is_refused(trained_run, dataset, tmp_path):
    """A dataset prepared again in place is another task: the run is measured only on the data it was trained on
    (the fingerprint its checkpoint records), and refused, before any work, on other data or none."""
    data = tmp_path / "data"
    shutil.copytree(dataset, data)
    run = copy_run(trained_run, tmp_path / "run")
    run_id = set_provenance(run, data)
    analyze.main([f"--runs={run}", "--device=cpu", f"--out_dir={tmp_path / 'same'}"])  # the same data: measured
    recorded = torch.load(os.path.join(run, "ckpt.pt"), weights_only=True)["data_fingerprint"]
    kept = json.load(open(os.path.join(run, "measured.json")))
    assert kept["data_fingerprint"] == recorded and kept["run_id"] == run_id  # which run, which data
    prepare_again(data)
    from data.shards import dataset_fingerprint
    now = dataset_fingerprint(str(data))
    out = tmp_path / "out"
    message = error_of(analyze.main, [f"--runs={run}", "--device=cpu", f"--out_dir={out}"])
    assert f"{run}/ckpt.pt was trained on other data than {data} holds now" in message
    assert recorded["val"] in message and now["val"] in message and "train and val shards" in message
    assert "prepare the data it was trained on again" in message and not out.exists()
    shutil.rmtree(data)  # gone: named, with the command that prepares it
    message = error_of(analyze.main, [f"--runs={run}", "--device=cpu", f"--out_dir={out}"])
    assert f"{data}, which is not here (moved? put it back there)" in message and "prepare.py" in message
    assert not out.exists()


def test_a_kept_measurement_of_an_earlier_run_never_stands_for_the_new_one(trained_run, tmp_path, capsys):
    """A folder reused for a new run (--overwrite=True) keeps the old run's measured.json until the new run is
    measured: with the checkpoint gone, it stands for the run only if the folder's log.jsonl records its state."""
    run = copy_run(trained_run, tmp_path / "run")
    run_id = set_provenance(run)
    analyze.analyze([run], out_dir=str(tmp_path / "first"), device="cpu")
    kept = json.load(open(os.path.join(run, "measured.json")))
    assert (kept["run_id"], kept["iter"]) == (run_id, 4)
    for name in ("ckpt.pt", "best.pt"):
        os.remove(os.path.join(run, name))
    again = analyze.analyze([run], out_dir=str(tmp_path / "kept"), device="cpu")  # its own log: it stands
    assert again["runs"][0]["val_loss"] == kept["val_loss"]
    # the new run in the folder: its log starts again, another state, another loss
    with open(os.path.join(run, "log.jsonl"), "w") as f:
        f.write(json.dumps({"iter": 0, "tokens": 0, "val_loss": 9.5}) + "\n")
    message = error_of(analyze.main, [f"--runs={run}", "--device=cpu", f"--out_dir={tmp_path / 'out'}"])
    assert f"the measurement kept in {run} (measured.json, of the state at iter 4, run {run_id}) is not of the run " \
           "its log.jsonl records" in message and "earlier run's" in message
    # a log that records run ids: the run id decides
    with open(os.path.join(run, "log.jsonl"), "w") as f:
        f.write(json.dumps({"iter": 4, "tokens": 512, "val_loss": kept["val_loss_logged"], "run_id": "ffff"}) + "\n")
    assert "earlier run's" in error_of(analyze.main, [f"--runs={run}", "--device=cpu",
                                                      f"--out_dir={tmp_path / 'out'}"])


def read_only(monkeypatch, folder):
    """From now on no file can be made in folder, as in a read-only folder (the tests may run as root, whom
    permissions do not stop): atomic_write's temporary file there is refused."""
    import tempfile
    real = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kw):
        if dir is not None and os.path.realpath(dir) == os.path.realpath(folder):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(dir))
        return real(*args, dir=dir, **kw)
    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


def test_a_read_only_run_folder_costs_a_note_not_the_summary(trained_run, tmp_path, monkeypatch, capsys):
    run = copy_run(trained_run, tmp_path / "run")
    before = files_of(tmp_path / "run")
    read_only(monkeypatch, run)
    analyze.main([f"--runs={run}", "--device=cpu", f"--out_dir={tmp_path / 'out'}"])
    out = capsys.readouterr().out
    assert f"note: could not keep the measurement beside {run}/ckpt.pt" in out and "Permission denied" in out
    summary = json.load(open(tmp_path / "out" / "summary.json"))
    assert summary["runs"][0]["val_loss"] == pytest.approx(summary["runs"][0]["val_loss_logged"], rel=1e-5)
    assert files_of(tmp_path / "run") == before  # the run folder as it was


@pytest.mark.parametrize("kind", ["npz-cut", "json-empty", "json-not-a-record"])
def test_a_kept_measurement_cut_short_counts_as_absent_in_one_line(trained_run, tmp_path, kind):
    run = copy_run(trained_run, tmp_path / "run")
    analyze.analyze([run], out_dir=str(tmp_path / "first"), device="cpu")
    for name in ("ckpt.pt", "best.pt"):
        os.remove(os.path.join(run, name))
    name = "measured.npz" if kind == "npz-cut" else "measured.json"
    data = open(os.path.join(run, name), "rb").read()
    open(os.path.join(run, name), "wb").write({"npz-cut": data[:len(data) // 2], "json-empty": b"",
                                               "json-not-a-record": b"[1, 2]"}[kind])
    message = error_of(analyze.main, [f"--runs={run}", "--device=cpu", f"--out_dir={tmp_path / 'out'}"])
    assert f"no ckpt.pt in {run}, and the" in message and f"{name}: " in message and "counts as absent" in message
    assert "train it first" in message


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_model_that_is_not_finite_is_named_and_its_summary_stays_valid_json(trained_run, tmp_path, value):
    """A NaN or infinite weight makes every measurement NaN: summary.json stays valid JSON (null where a number would
    be NaN), the run's record names the problem, nothing is kept for a study, and the command fails with one line."""
    run = copy_run(trained_run, tmp_path / "run")
    checkpoint = torch.load(os.path.join(run, "ckpt.pt"), weights_only=True)
    weight = next(k for k in checkpoint["model"] if k.endswith("c_attn.weight"))
    checkpoint["model"][weight][0, 0] = value
    save_checkpoint(checkpoint, os.path.join(run, "ckpt.pt"))
    out = tmp_path / "out"
    message = error_of(analyze.main, [f"--runs={run}", "--device=cpu", f"--out_dir={out}"])
    assert f"the model in {run}/ckpt.pt is not finite" in message and weight in message

    def no_constant(name):  # Python's json reads NaN and Infinity; JSON itself has neither
        pytest.fail(f"summary.json holds {name}")
    summary = json.loads((out / "summary.json").read_text(), parse_constant=no_constant)
    record = summary["runs"][0]
    assert record["val_loss"] is None and record["first_token_attn"] is None and "not finite" in record["problem"]
    assert summary["problems"] == [f"run: {record['problem']}"]
    assert "| run | 0.003 | –" in (out / "summary.md").read_text()  # no nan in the table
    assert [analyze.cell(MEASURE["val_loss"], v) for v in (float("nan"), float("inf"), None, 2.5)] == [None] * 3 + [
        "2.5000"]  # nor a non-finite number of a model whose weights are finite
    assert not os.path.exists(os.path.join(run, "measured.json"))


def test_a_results_folder_another_process_holds_is_refused(trained_run, tmp_path, monkeypatch):
    """Two commands writing one results folder would mix their files: the second stops with one line naming the
    first, the lock lab/repro.py takes on its report folders."""
    out = tmp_path / "out"
    monkeypatch.setattr(analyze, "analyze", lambda *a, **k: pytest.fail("measured into a folder another holds"))
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        message = error_of(analyze.main, [f"--runs={trained_run}", "--device=cpu", f"--out_dir={out}"])
    finally:
        holder.kill()
        holder.wait()
    assert message.startswith(f"error: {out} is in use by another process (pid {holder.pid}: "), message


@pytest.mark.parametrize("checkpoint", ["../other/best.pt", "."])
def test_the_checkpoint_is_a_file_name_in_each_run_folder(trained_run, tmp_path, checkpoint):
    """--checkpoint=../other/best.pt would measure another run's file under this run's name and keep it in this run's
    folder; a folder is no checkpoint."""
    run = copy_run(trained_run, tmp_path / "run")
    copy_run(trained_run, tmp_path / "other")
    message = error_of(analyze.main, [f"--runs={run}", f"--checkpoint={checkpoint}", "--device=cpu",
                                      f"--out_dir={tmp_path / 'out'}"])
    assert f"--checkpoint={checkpoint}: the name of a file in each run's folder" in message
    assert not os.path.exists(os.path.join(run, "measured.json"))
    os.makedirs(os.path.join(run, "latest.pt"))
    message = error_of(analyze.main, [f"--runs={run}", "--checkpoint=latest.pt", f"--out_dir={tmp_path / 'out'}"])
    assert f"{run}/latest.pt is no checkpoint file" in message


def test_trigger_statistics_pool_every_position_of_their_kind_over_batches(monkeypatch):
    """measure's mechanism statistics over batches that hold different numbers of trigger positions are the pooled
    means over every position of the kind, as one probe over all the windows at once gives (not a mean of batch
    means, which would weigh a batch with few trigger positions like one with many). Its maps: the head average of
    the window asked for; its gate sample: about GATE_SAMPLE scores of each kind, a share from every batch and layer."""
    import contextlib
    monkeypatch.setattr(analyze, "GATE_SAMPLE", 100)
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=24, vocab_size=8, n_layer=2, n_head=2, n_embd=32, attn_backend="torch")).eval()
    triggers = [1, 5]
    rich = torch.randint(0, 8, (4, 24))  # about a quarter of the positions are triggers
    poor = torch.randint(2, 5, (4, 24))  # none, but three
    poor[0, 5], poor[1, 9], poor[3, 20] = 1, 5, 1
    batches = [(x, torch.roll(x, -1, 1)) for x in (rich, poor)]
    layers, _, _, scores, maps, _ = analyze.measure(model, batches, "cpu", contextlib.nullcontext(), map_tokens=8,
                                                    triggers=triggers, shown=3)
    with torch.no_grad(), Probe(model, triggers=triggers) as probe:
        model(torch.cat([rich, poor]))
    for key in TRIGGER_KEYS:
        assert layers[key] == pytest.approx(probe.stats[key], abs=1e-6), key
    expected = [m[0].mean(0).numpy() for m in attention_maps(model, rich[3:4, :8])]  # window 3, its 2 heads averaged
    assert len(maps) == 2 and all(np.allclose(m, e, atol=1e-6) for m, e in zip(maps, expected))
    assert sorted(scores) == ["all", "other", "trigger"]
    assert all(100 <= scores[kind].size <= 100 + 2 * 2 for kind in scores)  # (+1 for each of 2 batches x 2 layers)
    # a model whose numbers are NaN: NaN, never a 0 from a batch whose NaN was counted with its positions
    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.transformer.wte.weight[:, 0] = float("nan")
    layers = analyze.measure(broken, batches, "cpu", contextlib.nullcontext(), map_tokens=8, triggers=triggers)[0]
    assert all(np.isnan(layers[key]).all() for key in TRIGGER_KEYS)
    # a kind that no batch holds stays NaN, as probe.py says
    none = [(x, x) for x in (torch.randint(2, 5, (2, 24)),) * 2]
    layers = analyze.measure(model, none, "cpu", contextlib.nullcontext(), map_tokens=8, triggers=triggers)[0]
    assert np.isnan(layers["prev_attn_trigger"]).all() and not np.isnan(layers["gate_mean_other"]).any()
    # an empty trigger list (the API's, not a dataset's): every position is 'other', none a trigger
    layers = analyze.measure(model, batches, "cpu", contextlib.nullcontext(), map_tokens=8, triggers=[])[0]
    assert np.isnan(layers["gate_mean_trigger"]).all() and not np.isnan(layers["first_token_attn_other"]).any()


def test_the_maps_show_the_first_window_with_the_most_triggers_in_the_tokens_they_show():
    x = torch.full((4, 24), 3)  # 1 and 5 are triggers, 3 is not
    x[1, 10:21:2] = 1  # six triggers, all after the first 8 tokens the maps show
    x[2, [2, 4]] = 5
    x[3, [3, 6]] = 1  # as many as window 2: the first of them is shown
    assert analyze.map_window(x, 8, [1, 5]) == 2 and analyze.map_window(x, 24, [1, 5]) == 1
    assert analyze.map_window(x, 8, None) == 0  # no task with triggers: the first window


def test_the_gate_sample_takes_each_score_at_most_once_and_sorts_them_by_position_kind():
    """gate_sampler's callback, given a layer's scores (B, T, ...) and the trigger positions: a sample of at most
    per_layer scores of all positions, of the trigger positions and of the other positions 1..T-1, each score once."""
    s = torch.arange(2 * 6 * 3, dtype=torch.float32).view(2, 6, 3)  # every score distinct
    trig = torch.zeros(2, 6, dtype=torch.bool)
    trig[0, 2] = trig[1, 4] = True
    keep, samples = analyze.gate_sampler(100)  # room for every score
    keep(s, trig)
    other = ~trig
    other[:, 0] = False
    for kind, where in (("all", torch.ones_like(trig)), ("trigger", trig), ("other", other)):
        [sample] = samples[kind]
        assert sorted(sample.tolist()) == s[where].flatten().tolist(), kind
    keep, samples = analyze.gate_sampler(4)
    keep(s, None)  # no triggers: all positions only
    [sample] = samples.pop("all")
    assert not samples and len(sample) == len(set(sample.tolist())) == 4 and set(sample.tolist()) <= set(range(36))


def test_pooled_over_batches_a_sink_head_and_the_sink_location_count_every_window_and_head():
    """pool_layers: a head is a sink head when its F-Attn averaged over every window exceeds SINK_HEAD_THRESHOLD,
    not by a vote of the batches; the sink's key position is the one most (window, head) pairs of all batches name,
    every head counted."""
    keys = ("first_token_attn", "sink_share", "max_act", "act_ratio", "max_act_first", "max_act_rest",
            "value_norm_ratio") + GATE_KEYS + TRIGGER_KEYS
    per_batch = [{**dict.fromkeys(keys), "first_token_attn": [f]} for f in (0.45, 0.25)]  # None: not measured
    # per layer, per head: F-Attn 0.35, 0.35 and 0.3 on average (the last not above the threshold, only at it); each
    # of the first batch's heads above the threshold, none of the second's
    per_head = [{"first_token_attn": [f], "sink_share": [[0.1] * 3], "value_norm_ratio": [[1.0] * 3]}
                for f in ([0.5, 0.4, 0.5], [0.2, 0.3, 0.1])]
    assert SINK_HEAD_THRESHOLD == 0.3
    massive = [[{"pos": torch.zeros(2, dtype=torch.long), "h": torch.ones(2, 4)}]] * 2
    # (window, head) top keys: head 0 names 0 in 3 of 4 windows, heads 1 and 2 name 3 in all; 3 is 9 of the 12 pairs
    top_keys = [[{"pos": torch.tensor(pos), "token": None}] for pos in ([[0, 3, 3], [0, 3, 3]], [[3, 3, 3], [0, 3, 3]])]
    layers, heads, _ = analyze.pool_layers(GPTConfig(n_layer=1), per_batch, per_head, massive, top_keys)
    assert heads["first_token_attn"] == [pytest.approx([0.35, 0.35, 0.3])] and layers["sink_heads"] == [2 / 3]
    assert layers["first_token_attn"] == [pytest.approx(0.35)] and layers["gate_mean"] is None
    assert (layers["sink_pos"], layers["sink_pos_share"]) == ([3], [9 / 12]) and layers["sink_token"] == [None]


def test_the_windows_asked_for_are_at_most_those_the_validation_set_holds_apart(sink_lab_runs):
    """Counted as the windows are cut: the sink lab's start with BOS, which takes none of the text, so more of them
    fit than without; that many are measured, one more is refused, whether --batches or --batch_size asks."""
    ckpt = read_checkpoint(os.path.join(sink_lab_runs, "baseline", "ckpt.pt"))
    w = analyze.eval_windows(ckpt)
    most = val_windows_apart(w["data_dir"], w["block_size"], bos_token(w["data_dir"]))
    assert w["bos"] and w["batches"] > 1 and most > val_windows_apart(w["data_dir"], w["block_size"])
    for batches, batch_size in ((most, 1), (1, most)):
        assert analyze.validation_windows(ckpt, "base", batches, batch_size)[:2] == (batches, batch_size)
    for batches, batch_size in ((most + 1, 1), (1, most + 1), (None, most)):  # None: the run's own eval_iters
        with pytest.raises(SystemExit, match=f"validation set holds {most} without overlap"):
            analyze.validation_windows(ckpt, "base", batches, batch_size)


def test_a_kept_gate_sample_is_every_kth_score_and_at_most_stored_gate_sample(tmp_path):
    scores = np.arange(3 * analyze.STORED_GATE_SAMPLE // 2, dtype=np.float32) / (3 * analyze.STORED_GATE_SAMPLE // 2)
    analyze.write_measurement(str(tmp_path / "measured"), {"per_window": {}}, {"all": scores}, [np.eye(2)])
    with np.load(tmp_path / "measured.npz") as arrays:
        assert np.array_equal(arrays["scores/all"], scores[::2].astype(np.float16))  # every 2nd: the fewest kept


def test_on_the_sink_labs_task_the_mechanism_is_tabled_and_the_maps_show_the_window_with_most_triggers(
        sink_lab_runs, tmp_path):
    runs = [copy_run(os.path.join(sink_lab_runs, name), tmp_path / name) for name in ("baseline", "g1")]
    summary = analyze.analyze(runs, ["base", "g1"], str(tmp_path / "res"), device="cpu", map_tokens=16)
    windows = summary["runs"][0]["eval_windows"]
    triggers = read_meta(windows["data_dir"])["triggers"]
    x = report.load_windows(windows)[0][0]
    counts = trigger_positions(x[:, :16], triggers).sum(1).tolist()
    shown = counts.index(max(counts))
    assert counts[shown] > counts[0]  # another window than the first: the choice shows
    for run, record in zip(runs, summary["runs"]):
        assert record["triggers"] == triggers and record["map_tokens"] == x[shown, :16].tolist()
        model, _ = load_checkpoint(os.path.join(run, "ckpt.pt"))
        [expected] = attention_maps(model, x[shown:shown + 1, :16])
        maps = analyze.stored_measurement(run, "ckpt.pt")[2]
        assert np.allclose(maps[0], expected[0].mean(0).numpy(), atol=1e-3)  # kept as float16
    table = (tmp_path / "res" / "summary.md").read_text().splitlines()
    at = table.index("| " + " | ".join(["run"] + [m.label for m in MECHANISM]) + " |")
    rows = [row.strip("| ").split(" | ") for row in table[at + 2:at + 4]]
    assert rows == [[r["label"]] + [analyze.cell(m, r[m.key]) or "–" for m in MECHANISM] for r in summary["runs"]]


@pytest.mark.parametrize("layer", [0, 1])
def test_a_diverged_run_has_no_finite_headline_number(tmp_path, dataset, layer):
    """A NaN in layer 0's queries leaves layer 0's gate finite and makes layer 1 NaN: the run's row must not read
    'no sink heads, gate mean 0.5' (NaN > 0.3 is False, and a layer mean skips NaN layers), but '–' throughout;
    a NaN in layer 1's leaves every number of layer 0 finite, and the row '–' all the same."""
    make_run(str(tmp_path / "base"), dataset, gate="g1")
    make_run(str(tmp_path / "nan"), dataset, gate="g1")
    checkpoint = torch.load(tmp_path / "nan" / "ckpt.pt", weights_only=True)
    checkpoint["model"][f"transformer.h.{layer}.attn.c_attn.weight"][0, 0] = float("nan")  # a query row, not the gate's
    save_checkpoint(checkpoint, str(tmp_path / "nan" / "ckpt.pt"))
    summary = analyze.analyze([str(tmp_path / "base"), str(tmp_path / "nan")], ["base", "nan"], str(tmp_path / "res"),
                              device="cpu", batches=2, batch_size=3, map_tokens=16)
    base, bad = summary["runs"]
    assert "not finite" in bad["problem"] and bad["loss_spikes"] == 3
    for key in ("val_loss", "first_token_attn", "sink_heads", "gate_mean", "gate_below_0.1", "gate_below_0.5",
                "act_ratio"):
        assert base[key] is not None and bad[key] is None, key
    layers = json.loads((tmp_path / "res" / "summary.json").read_text())["runs"][1]["layers"]  # NaN written as null
    assert layers["sink_heads"][1] is None and layers["sink_pos"][1] is None


def test_the_sink_location_does_not_depend_on_how_the_windows_are_batched(tmp_path, dataset):
    """sink_pos/sink_token count every (window, head) pair's top key: the same windows in 1 batch of 12 or 4 of 3
    give the same answer, also where no BOS sink wins every batch (a sharpened gated model, no training)."""
    make_run(str(tmp_path / "g1"), dataset, gate="g1")
    checkpoint = torch.load(tmp_path / "g1" / "ckpt.pt", weights_only=True)
    for key in checkpoint["model"]:
        if key.endswith("c_attn.weight"):
            checkpoint["model"][key] *= 20  # sharp attention: the top keys spread over positions
    save_checkpoint(checkpoint, str(tmp_path / "g1" / "ckpt.pt"))
    layers = [analyze.analyze([str(tmp_path / "g1")], ["g1"], str(tmp_path / f"res{n}"), device="cpu", batches=n,
                              batch_size=12 // n, map_tokens=16)["runs"][0]["layers"] for n in (1, 4)]
    keys = ("sink_pos", "sink_pos_share", "sink_token", "sink_token_share")
    assert [layers[0][k] for k in keys] == [layers[1][k] for k in keys]
    for key in ("first_token_attn", "sink_share", "max_act", "value_norm_ratio", "gate_mean"):  # means over windows
        assert layers[1][key] == pytest.approx(layers[0][key], rel=1e-5), key
    assert min(layers[0]["sink_pos_share"]) < 1  # the top keys disagree: a split could have changed the answer


def test_runs_on_other_windows_are_said_in_the_summary_and_each_is_held_to_its_own_val_set(dataset, tmp_path):
    """A second run of another block_size is measured on other windows: summary.md says so, not the terminal alone;
    and --batches x --batch_size is checked against that run's validation set too, not only the first run's."""
    make_run(str(tmp_path / "short"), dataset, block_size=16)
    make_run(str(tmp_path / "long"), dataset)  # block_size 32
    summary = analyze.analyze([str(tmp_path / "short"), str(tmp_path / "long")], out_dir=str(tmp_path / "a"),
                              device="cpu")
    [note] = summary["validation"]["window_notes"]
    assert "16 tokens of " in note and ": short;" in note and "32 tokens of " in note and note.endswith(": long)")
    assert f"Note: {note}." in open(tmp_path / "a" / "summary.md").readline()
    fits = val_windows_apart(dataset, 16)
    assert val_windows_apart(dataset, 32) < fits
    with pytest.raises(SystemExit, match="windows of 32 tokens, but .* holds"):
        analyze.analyze([str(tmp_path / "short"), str(tmp_path / "long")], out_dir=str(tmp_path / "b"),
                        device="cpu", batches=1, batch_size=fits)


def test_a_kept_record_never_stands_beside_the_arrays_of_another_state(trained_run, tmp_path, monkeypatch, capsys):
    """measured.json is written after measured.npz, so that where the record is, its arrays are. A new measurement
    whose record cannot be written (the disk full) must not leave the old record beside the new arrays: with the
    checkpoint gone, the run would be read as one state's numbers with another state's per-window values."""
    run = copy_run(trained_run, tmp_path / "run")
    first = analyze.analyze([run], out_dir=str(tmp_path / "first"), device="cpu")["runs"][0]  # iter 4's, kept
    train.main(["--device=cpu", f"--out_dir={run}", "--init_from=resume", "--max_iters=6", "--learning_rate=0.05"])
    disk_full(monkeypatch, "measured.json", after=0)
    second = analyze.analyze([run], out_dir=str(tmp_path / "second"), device="cpu")["runs"][0]  # .npz, no .json
    monkeypatch.undo()
    assert "could not keep the measurement" in capsys.readouterr().out
    assert not np.array_equal(first["per_window"]["val_loss"], second["per_window"]["val_loss"])  # another state
    for name in ("ckpt.pt", "best.pt"):
        os.remove(os.path.join(run, name))
    try:
        record, _, _ = analyze.stored_measurement(run, "ckpt.pt")
    except ValueError as e:  # no measurement kept, as the note said
        assert "no measurement kept" in str(e)
        return
    assert record["iter"] == 4 and np.array_equal(record["per_window"]["val_loss"], first["per_window"]["val_loss"])

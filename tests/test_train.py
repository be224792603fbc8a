"""Tests of train.py and sample.py on tiny models and a slice of real data (CPU, about a minute)."""

import dataclasses
import importlib.util
import json
import math
import os
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
import types

import pytest
import torch

import kernels
import model as model_py
import probe
import sample
import train
import cli
import runfolder
from cli import configure, device_name
from conftest import change_a_token
from runfolder import BEST, CHECKPOINT, load_checkpoint, model_from_checkpoint, no_checkpoint, save_checkpoint
from model import GPTConfig
from train import TrainConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/
TINY = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=4", "--eval_iters=2",
        "--log_interval=1", "--warmup_iters=2", "--learning_rate=3e-3", "--device=cpu"]
CKPT_KEYS = {"model", "optimizer", "scaler", "model_args", "iter_num", "val_loss", "best_val_loss", "best_iter",
             "config", "rng", "loader", "health", "initial_val_loss", "run_id", "data_fingerprint", "tokenizer",
             "data_prepare", "tokens"}


def run_cli(*args, check=True, timeout=300):
    """Run a script of the repo as a user would; returns the CompletedProcess."""
    result = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{args} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def read_log(out_dir):
    with open(os.path.join(out_dir, "log.jsonl")) as f:
        return [json.loads(line) for line in f]


def close(a, b, rel):
    """a == b up to a relative tolerance, where either may be None (a statistic the model does not have)."""
    return a is None and b is None or (a is not None and b is not None and math.isclose(a, b, rel_tol=rel, abs_tol=1e-7))


def folder_state(path):
    """Every file under path with its bytes: a refused command must leave this exactly as it was. The claim's
    .lock (runfolder.claim_folder) is no run file: it names whichever train.py last held the folder."""
    path = pathlib.Path(path)
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.fixture(scope="session")
def tiny_run(stdlib_data, tmp_path_factory):
    """A finished 6-iteration run: its out_dir."""
    out_dir = str(tmp_path_factory.mktemp("tiny_run"))
    train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--max_iters=6", "--eval_interval=3"])
    return out_dir


def test_eval_only_says_nothing_of_what_becomes_best_pt(tiny_run, tmp_path, capsys):
    """eval_only writes nothing, so best_state's notes on a folder with no best.pt ("ckpt.pt's state becomes
    best.pt at the next evaluation") are untrue there: it said them, and left the folder without best.pt."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    (run / "best.pt").unlink()
    before = folder_state(run)
    capsys.readouterr()
    train.main([f"--out_dir={run}", "--init_from=resume", "--eval_only=True"])
    out = capsys.readouterr().out
    assert "eval iter 6:" in out and "best.pt" not in out, out
    assert folder_state(run) == before  # nothing written


# ----------------------------------------------------------------------------
# training end to end

def test_default_dataset_is_prepared_on_first_use_and_the_loss_falls(tmp_path):
    data_dir, out_dir = tmp_path / "pystdlib", tmp_path / "out"
    result = run_cli("train.py", f"--data_dir={data_dir}", f"--out_dir={out_dir}", "--n_layer=2", "--n_head=2",
                     "--n_embd=64", "--block_size=64", "--batch_size=8", "--max_iters=40", "--lr_decay_iters=40",
                     "--warmup_iters=5", "--learning_rate=3e-3", "--min_lr=3e-4", "--eval_interval=20", "--eval_iters=4")
    assert "preparing the dataset pystdlib" in result.stdout
    assert json.loads((data_dir / "meta.json").read_text())["train_tokens"] > 1_000_000

    log = read_log(out_dir)
    assert [r["iter"] for r in log] == [0, 20, 40]
    assert log[-1]["val_loss"] < log[0]["val_loss"] - 3.0, [r["val_loss"] for r in log]  # measured: 10.4 -> 5.1
    last = log[-1]
    assert 0 < last["first_token_attn"] < 1 and last["max_act"] > 0 and 0 < last["gate_mean"] < 1
    assert last["train_loss"] > 0 and last["tokens"] == 40 * 8 * 64 and last["tokens_per_s"] > 0
    assert last["mfu"] is None  # no known peak FLOP/s for a CPU
    assert last["loss_spikes"] >= 0 and last["nonfinite_steps"] == 0
    assert len(last["layers"]["max_act"]) == 2
    assert "done: 40 iterations" in result.stdout and "val loss" in result.stdout and "gate mean" in result.stdout

    model, checkpoint = load_checkpoint(str(out_dir / "ckpt.pt"))
    assert set(checkpoint) == CKPT_KEYS
    assert checkpoint["iter_num"] == 40 and checkpoint["config"]["max_iters"] == 40
    assert checkpoint["model_args"]["n_embd"] == 64 and model.config.gate == "g1"
    assert not any(k.startswith("_orig_mod.") for k in checkpoint["model"])


def test_an_evaluation_runs_each_validation_batch_once(tiny_run, monkeypatch):
    """The first validation batch gives its loss and the probe's measurements in one forward pass: an evaluation
    runs eval_iters forwards, not one more, and what it reports is the mean loss over the batches and the probe's
    measurements on the first, as measured apart."""
    from probe import Probe
    forward, calls, seen = model_py.GPT.forward, [], []
    monkeypatch.setattr(model_py.GPT, "forward", lambda self, idx, targets=None: (
        calls.append(targets is not None), forward(self, idx, targets))[1])
    log_and_save = train.Trainer.log_and_save
    monkeypatch.setattr(train.Trainer, "log_and_save", lambda self, *args: (
        seen.append(self), log_and_save(self, *args))[1])
    train.main(["--out_dir=" + tiny_run, "--init_from=resume", "--eval_only=True"])
    trainer = seen[0]
    assert calls == [True] * len(trainer.val) and len(trainer.val) == 2  # eval_iters=2: two forwards, with targets
    record = read_log(tiny_run)[-1]  # eval_only writes nothing: the last record is the run's own, of the same state
    model = trainer.raw_model.eval()
    with torch.no_grad(), trainer.ctx:  # in the run's precision (bf16 autocast on a CPU that computes it)
        losses = [forward(model, x, y)[1].item() for x, y in trainer.val]
        with Probe(model) as probe:
            forward(model, trainer.val[0][0])
    assert record["val_loss"] == pytest.approx(sum(losses) / len(losses), rel=1e-5)
    for key, value in probe.summary().items():
        assert record[key] == (None if value is None else pytest.approx(value, rel=1e-5, abs=1e-7)), key


def test_each_eval_logs_the_sinks_emergence_per_layer(stdlib_data, tmp_path):
    """Each log record holds, per layer (a list of n_layer values), F-Attn, M-Act and the sink's value norm ratio
    (record["layers"], the emergence plot's series), per KV head the value norm ratio, and per layer the channels of
    the massive activation (probe.massive_channels), all JSON without NaN."""
    from probe import TOP_CHANNELS
    out_dir = tmp_path / "run"
    train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--n_layer=2", "--max_iters=2",
                       "--eval_interval=2"])
    text = (out_dir / "log.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    log = [json.loads(line) for line in text.splitlines()]
    assert [r["iter"] for r in log] == [0, 2]
    for r in log:
        for key in ("first_token_attn", "max_act", "value_norm_ratio"):
            values = r["layers"][key]
            assert len(values) == 2 and all(isinstance(v, float) and v > 0 for v in values), key
        assert r["first_token_attn"] == pytest.approx(sum(r["layers"]["first_token_attn"]) / 2)
        assert len(r["heads"]["value_norm_ratio"]) == 2 and all(len(h) == 2 for h in r["heads"]["value_norm_ratio"])
        assert len(r["channels"]) == 2
        for c, m_act in zip(r["channels"], r["layers"]["max_act"]):
            assert len(c["channels"]) == len(c["values"]) == TOP_CHANNELS and 0 <= c["top_channel"] < 32
            assert abs(c["values"][0]) <= m_act * (1 + 1e-6) and 0 < c["share"] <= 1 and 0 < c["top_channel_share"] <= 1
            assert 0 <= c["pos"] < 32


def test_the_first_record_of_each_command_names_the_code_that_ran(tiny_run):
    log = read_log(tiny_run)
    git = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True)
    commit = git.stdout.strip() if git.returncode == 0 else None
    assert log[0]["code"]["commit"] == commit  # None outside a git checkout: then nothing is claimed
    assert log[0]["code"]["dirty"] in ((True, False) if commit else (None,))
    assert all("code" not in r for r in log[1:])
    assert log[0]["device"] == device_name("cpu") and all("device" not in r for r in log[1:])  # whose tokens/s, MFU


@pytest.mark.parametrize("loss_chunk", [0, TrainConfig.loss_chunk])  # 0: resumed the other way; the default: the same
def test_resume_continues_the_run_exactly(stdlib_data, tmp_path, loss_chunk):
    """A run stopped and resumed ends where one straight run does; also when it resumes computing its loss another
    way (loss_chunk, a runtime flag: a run may change it): all at once (0) instead of the default's one chunk of the
    batch, which gives the same loss to fp32 rounding (in fp32: under bf16 autocast the two paths round the loss's
    gradient to bf16 at different points)."""
    common = TINY + [f"--data_dir={stdlib_data}", "--dropout=0.1", "--eval_interval=2", "--lr_decay_iters=8",
                     "--dtype=float32"]
    train.main(common + [f"--out_dir={tmp_path / 'straight'}", "--max_iters=8"])
    train.main(common + [f"--out_dir={tmp_path / 'split'}", "--max_iters=4"])
    train.main(common + [f"--out_dir={tmp_path / 'split'}", "--max_iters=8", "--init_from=resume",
                         f"--loss_chunk={loss_chunk}"])

    straight, split = read_log(tmp_path / "straight"), read_log(tmp_path / "split")
    assert [r["iter"] for r in split] == [r["iter"] for r in straight] == [0, 2, 4, 6, 8]
    for a, b in zip(straight, split):
        for key in ("train_loss", "val_loss", "lr", "max_act", "gate_mean", "tokens"):
            assert close(a[key], b[key], rel=1e-6), (a["iter"], key, a[key], b[key])
    _, ckpt_a = load_checkpoint(str(tmp_path / "straight" / "ckpt.pt"))
    _, ckpt_b = load_checkpoint(str(tmp_path / "split" / "ckpt.pt"))
    for name, tensor in ckpt_a["model"].items():  # chunks: the rounding of other sums, which Adam's steps carry on
        same = loss_chunk == TrainConfig.loss_chunk  # resumed the way it started
        torch.testing.assert_close(tensor, ckpt_b["model"][name], rtol=1e-6, atol=1e-7 if same else 2e-6)
    assert ckpt_b["model_args"]["loss_chunk"] == loss_chunk  # as the run went on: it resumes that way again


def test_tokens_count_what_each_command_trained_when_a_resume_changes_the_batch(stdlib_data, tmp_path):
    """log.jsonl's and the checkpoint's "tokens" sum what each command trained: a run resumed with another batch_size
    counts its earlier steps at their own size, not at the new one."""
    common = TINY + [f"--data_dir={stdlib_data}", "--eval_interval=2", f"--out_dir={tmp_path}"]
    train.main(common + ["--max_iters=2"])
    train.main([f"--out_dir={tmp_path}", "--init_from=resume", "--max_iters=4", "--batch_size=8"])
    assert [r["tokens"] for r in read_log(tmp_path)] == [0, 2 * 4 * 32, 2 * 4 * 32 + 2 * 8 * 32]
    assert load_checkpoint(str(tmp_path / "ckpt.pt"))[1]["tokens"] == 2 * 4 * 32 + 2 * 8 * 32


def test_a_checkpoint_runs_with_other_runtime_flags_only(tiny_run):
    """model_from_checkpoint may change how a model computes (model.RUNTIME_FLAGS), never what it is."""
    path = os.path.join(tiny_run, "ckpt.pt")
    _, checkpoint = load_checkpoint(path)
    model = model_from_checkpoint(checkpoint, path, attn_backend="torch", loss_chunk=7)
    assert (model.config.attn_backend, model.config.loss_chunk, model.config.n_layer) == ("torch", 7, 1)
    # those not given are GPTConfig's, not the run's: a run trained with the fused kernel on a GPU runs on a CPU
    on_gpu = dict(checkpoint, model_args=dict(checkpoint["model_args"], attn_backend="triton", loss_chunk=7))
    model = model_from_checkpoint(on_gpu, path)
    assert (model.config.attn_backend, model.config.loss_chunk) == (GPTConfig.attn_backend, 0) == ("auto", 0)
    with pytest.raises(TypeError, match=r"\['n_layer'\] are part of the model; runtime flags: \('attn_backend', 'loss_chunk'\)"):
        model_from_checkpoint(checkpoint, path, n_layer=2)
    # weights under other names (a nanoGPT checkpoint's): the keys missing are named, not only torch's heading
    renamed = dict(checkpoint, model={"x." + k: v for k, v in checkpoint["model"].items()})
    with pytest.raises(ValueError, match=r"does not match this model.py's GPT \(Error\(s\) in loading state_dict for "
                                         r"GPT: Missing key\(s\) in state_dict: \"transformer"):
        model_from_checkpoint(renamed, path)


# ----------------------------------------------------------------------------
# checkpoints survive crashes

def test_failed_checkpoint_write_keeps_the_previous_one(tiny_run, monkeypatch):
    path = os.path.join(tiny_run, "ckpt.pt")
    before, files = open(path, "rb").read(), sorted(os.listdir(tiny_run))
    _, checkpoint = load_checkpoint(path)

    def broken_save(obj, f):
        f.write(b"garbage, half a checkpoint")
        raise OSError("no space left on device")
    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="no space left"):
        save_checkpoint(checkpoint, path)
    assert open(path, "rb").read() == before and sorted(os.listdir(tiny_run)) == files
    assert load_checkpoint(path)[1]["iter_num"] == 6


def test_killed_while_saving_leaves_a_loadable_checkpoint(stdlib_data, tmp_path):
    out_dir = tmp_path / "run"
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--eval_interval=2"]
    train.main(args + ["--max_iters=2"])
    path = out_dir / "ckpt.pt"
    before = path.read_bytes()
    # a process that is SIGKILLed halfway through writing a checkpoint
    killed = subprocess.run([sys.executable, "-c", f"""
import os, signal, torch, runfolder
_, checkpoint = runfolder.load_checkpoint({str(path)!r})
def dying_save(obj, f):
    f.write(b"the first half of a checkpoint")
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)
torch.save = dying_save
runfolder.save_checkpoint(checkpoint, {str(path)!r})
"""], cwd=REPO, capture_output=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL
    assert path.read_bytes() == before
    assert [p.name for p in out_dir.iterdir() if p.name.endswith(".tmp")]  # its partial file, under another name
    train.main(args + ["--max_iters=4", "--init_from=resume"])  # resumes from the intact file, clears the debris
    assert sorted(p.name for p in out_dir.iterdir()) == [".lock", "best.pt", "ckpt.pt", "log.jsonl"]
    assert [r["iter"] for r in read_log(out_dir)] == [0, 2, 4]


# ----------------------------------------------------------------------------
# non-finite losses

def poison_forward(monkeypatch, bad_calls, break_weights_at=None):
    """Make training forward passes number bad_calls (1-based) return a NaN loss; at call break_weights_at,
    also put a NaN into the weights, as a diverged run would."""
    original, calls = model_py.GPT.forward, [0]

    def forward(self, idx, targets=None):
        out = original(self, idx, targets)
        if not self.training or targets is None:
            return out
        calls[0] += 1
        if calls[0] == break_weights_at:
            self.lm_head.weight.data[0, 0] = float("nan")  # .data: behind autograd's back, as an optimizer does
        if calls[0] in bad_calls:
            return out[0], out[1] * float("nan")
        return out
    monkeypatch.setattr(model_py.GPT, "forward", forward)


def test_nonfinite_steps_are_skipped_and_counted(stdlib_data, tmp_path, monkeypatch, capsys):
    poison_forward(monkeypatch, bad_calls={3, 5})  # the forward passes of iterations 2 and 4
    out_dir = tmp_path / "run"
    # log_interval=3: the steps' health is read at iterations 1 (the first step), 3, 4 (an eval), 6 and 8, so
    # both bad steps are found after later steps were queued, and still named by their own iteration
    train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--max_iters=8", "--eval_interval=4",
                       "--log_interval=3"])
    skipped = [line.split(":")[0] for line in capsys.readouterr().out.splitlines() if "step skipped" in line]
    assert skipped == ["iter 2", "iter 4"]
    log = read_log(out_dir)
    assert log[-1]["iter"] == 8 and log[-1]["nonfinite_steps"] == 2
    assert all(r["val_loss"] is not None for r in log) and log[-1]["train_loss"] is not None
    # an optimizer step with NaN gradients would have made every weight NaN
    _, checkpoint = load_checkpoint(str(out_dir / "ckpt.pt"))
    assert all(torch.isfinite(t).all() for t in checkpoint["model"].values())
    assert checkpoint["health"]["nonfinite_steps"] == 2


def test_a_diverged_run_stops_and_keeps_the_last_good_checkpoint(stdlib_data, tmp_path, monkeypatch, capsys):
    poison_forward(monkeypatch, bad_calls=set(range(7, 100)), break_weights_at=7)  # from step 6 on
    out_dir = tmp_path / "run"
    with pytest.raises(cli.Diverged, match=r"5 non-finite steps in a row \(max_nonfinite=5\).*last state saved "
                                           r"\(iter 6\) and best.pt the best \(iter 6\)"):
        train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--max_iters=30",
                           "--eval_interval=3", "--max_nonfinite=5"])
    assert "not saving" in capsys.readouterr().out  # the eval at iter 9 saw NaN weights
    log = read_log(out_dir)
    assert [r["iter"] for r in log] == [0, 3, 6, 9]
    assert log[-1]["val_loss"] is None and log[-1]["nonfinite_steps"] == 3
    _, checkpoint = load_checkpoint(str(out_dir / "ckpt.pt"))
    assert checkpoint["iter_num"] == 6
    assert all(torch.isfinite(t).all() for t in checkpoint["model"].values())


def test_an_exploded_runs_message_says_what_ckpt_pt_holds(stdlib_data, tmp_path, monkeypatch):
    """A run stopped for a validation loss far above its start: that state is finite, so ckpt.pt (iter 4, the last
    save) is not "the last finite state"; the message says what the file holds."""
    out_dir = tmp_path / "run"
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--eval_interval=2"]
    train.main(args + ["--max_iters=4"])
    monkeypatch.setattr(train, "DIVERGED_FACTOR", 0.1)  # every loss is "exploded": a finite state
    with pytest.raises(cli.Diverged) as stop:
        train.main(args + ["--max_iters=6", "--init_from=resume"])
    assert "last finite state" not in str(stop.value), stop.value
    assert re.search(rf"This state was not saved; {re.escape(str(out_dir / 'ckpt.pt'))} holds the last state saved "
                     r"\(iter 4\) and best.pt the best \(iter \d\)\.$", str(stop.value)), stop.value


def run_to_divergence(monkeypatch, capsys, data, out_dir, first_bad, match, args):
    """A 30-iteration TINY run whose steps from iteration first_bad on are NaN, stopped as diverged with a message
    matching `match`: what it printed."""
    poison_forward(monkeypatch, bad_calls=set(range(first_bad + 1, 100)))  # call n is iteration n - 1
    with pytest.raises(cli.Diverged, match=match):
        train.main(TINY + [f"--data_dir={data}", f"--out_dir={out_dir}", "--max_iters=30", *args])
    return capsys.readouterr().out


def test_a_state_whose_steps_are_skipped_never_becomes_best_pt(stdlib_data, tmp_path, monkeypatch, capsys):
    """A step can blow the weights up to a finite model that predicts uniformly, a loss below a random start's, whose
    every next step is NaN (learning_rate=1e4 did): an evaluation while steps are being skipped saves the state as
    the latest only. Here the steps from iteration 5 on are NaN, so the state evaluated at 8 is the one at 5, lower
    than 4's: before, it replaced best.pt."""
    out_dir = tmp_path / "run"
    out = run_to_divergence(monkeypatch, capsys, stdlib_data, out_dir, 5, r"last state saved \(iter 8\) and best.pt "
                            r"the best \(iter 4\)", ["--eval_interval=4", "--log_interval=4", "--max_nonfinite=6"])
    assert f"saved {out_dir / 'ckpt.pt'} (the latest state only: the last 3 steps from it were skipped as non-finite, " \
        "so it is no state to train on, however low its loss); best.pt keeps iter 4\n" in out, out
    val = {r["iter"]: r["val_loss"] for r in read_log(out_dir)}
    assert val[8] < val[4]  # else the test would show nothing
    assert load_checkpoint(str(out_dir / "best.pt"))[1]["iter_num"] == 4
    assert load_checkpoint(str(out_dir / "ckpt.pt"))[1]["iter_num"] == 8  # the latest, as always_save_checkpoint says
    best = (out_dir / "best.pt").read_bytes()
    # resumed (say at the lower learning rate the message advises), ckpt.pt's lower loss is not taken for a best
    # state a crash kept from best.pt: best.pt stays, also where nothing is left to train (settle_best)
    monkeypatch.undo()
    train.main(TINY + [f"--out_dir={out_dir}", "--init_from=resume", "--max_iters=8"])
    assert (out_dir / "best.pt").read_bytes() == best and "becomes best.pt" not in capsys.readouterr().out


def test_a_better_state_whose_steps_are_skipped_says_why_it_is_not_saved(stdlib_data, tmp_path, monkeypatch, capsys):
    """With always_save_checkpoint=False only a better state is saved: the state at 8 has a lower loss than 4's but
    its steps are skipped, so it is saved nowhere, and a line says so (before: nothing said why best.pt stayed)."""
    out_dir = tmp_path / "run"
    out = run_to_divergence(monkeypatch, capsys, stdlib_data, out_dir, 5, r"last state saved \(iter 4\) and best.pt "
                            r"the best \(iter 4\)", ["--eval_interval=4", "--log_interval=4", "--max_nonfinite=6",
                                            "--always_save_checkpoint=False"])
    val = {r["iter"]: r["val_loss"] for r in read_log(out_dir)}
    assert val[8] < val[4]  # else the test would show nothing
    assert (f"not saving iter 8 (val loss {val[8]:.4f}, the lowest yet): the last 3 steps from it were skipped as "
            "non-finite, so it is no state to train on, however low its loss; best.pt keeps iter 4\n") in out, out
    assert load_checkpoint(str(out_dir / "ckpt.pt"))[1]["iter_num"] == 4  # the better state, saved at 4
    assert load_checkpoint(str(out_dir / "best.pt"))[1]["iter_num"] == 4


def test_a_skipped_better_state_beside_an_unreadable_best_pt_is_said_so(stdlib_data, tmp_path, monkeypatch, capsys):
    """Resumed with a best.pt that cannot be read, and steps skipped as non-finite, a better state is saved nowhere:
    the line that says so said "there is no best.pt", beside the file."""
    out_dir = tmp_path / "run"
    run_to_divergence(monkeypatch, capsys, stdlib_data, out_dir, 5, r"last state saved \(iter 8\)",
                      ["--eval_interval=4", "--log_interval=4", "--max_nonfinite=6"])
    (out_dir / "best.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(cli.Diverged):  # its steps are still NaN: skipped, and the run stops as diverged
        train.main(TINY + [f"--out_dir={out_dir}", "--init_from=resume", "--max_iters=30",
                           "--always_save_checkpoint=False", "--eval_interval=4", "--log_interval=4",
                           "--max_nonfinite=9"])
    out = capsys.readouterr().out
    assert "were skipped as non-finite, so it is no state to train on, however low its loss; best.pt is not read as " \
        "this run's best (left as it is)\n" in out and "there is no best.pt" not in out, out
    assert (out_dir / "best.pt").read_bytes() == b"not a checkpoint"


def test_a_diverged_run_is_stopped_at_the_next_log_step(stdlib_data, tmp_path, monkeypatch, capsys):
    """The health of the queued steps is read at log and eval steps only, so a run that goes non-finite at
    iteration 4 with max_nonfinite=3 stops when the log step at iteration 8 reads steps 4..7, not later."""
    out = run_to_divergence(monkeypatch, capsys, stdlib_data, tmp_path / "run", 4, r"3 non-finite steps in a row "
                            r"\(max_nonfinite=3\)", ["--eval_interval=20", "--log_interval=4", "--max_nonfinite=3"])
    assert [line.split(":")[0] for line in out.splitlines() if "step skipped" in line] == ["iter 4", "iter 5", "iter 6"]
    assert "iter 4: loss" in out and "iter 8: loss" not in out  # the line at 4 read steps 1..3, all finite


def test_a_resumed_run_counts_the_nonfinite_steps_in_a_row_it_had(stdlib_data, tmp_path, monkeypatch, capsys):
    """A checkpoint saved while steps are being skipped keeps how many were skipped in a row, so a diverging run
    resumed from it stops after max_nonfinite in a row in all, not max_nonfinite more."""
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={tmp_path / 'run'}", "--eval_interval=4"]
    poison_forward(monkeypatch, bad_calls={3, 4})  # iterations 2 and 3, the last two before the save at 4
    train.main(args + ["--max_iters=4"])
    _, checkpoint = load_checkpoint(str(tmp_path / "run" / "ckpt.pt"))
    assert checkpoint["iter_num"] == 4 and checkpoint["health"]["nonfinite_in_a_row"] == 2
    capsys.readouterr()
    poison_forward(monkeypatch, bad_calls=set(range(1, 100)))  # every step after the resume
    with pytest.raises(cli.Diverged, match=r"3 non-finite steps in a row \(max_nonfinite=3\)"):
        train.main(args + ["--max_iters=12", "--init_from=resume", "--max_nonfinite=3"])
    assert [line.split(":")[0] for line in capsys.readouterr().out.splitlines() if "step skipped" in line] == ["iter 4"]


def queued_steps(steps, scale=None):
    """What Trainer.check_health reads: a run (max_nonfinite=2) that has queued steps, each (loss, gradient norm,
    taken) as optimizer_step returns them, with fp16's loss scaler at `scale` (None: no scaler, as bf16 and fp32)."""
    return types.SimpleNamespace(
        c=train.TrainConfig(max_nonfinite=2), health={"loss_ema": None, "loss_var": 0.0, "steps": 0, "in_spike": False,
                                                      "loss_spikes": 0, "nonfinite_steps": 0, "nonfinite_in_a_row": 0},
        scaler=torch.amp.GradScaler("cpu", init_scale=scale or 1.0, enabled=scale is not None), iter_num=len(steps),
        say=print, best_iter=None, folder=types.SimpleNamespace(what_is_kept=lambda best_iter: "kept"),
        pending=[torch.tensor(step) for step in steps])


def test_fp16_overflow_is_routine_only_while_the_loss_scale_is_at_least_one():
    """fp16: a step with a finite loss whose scaled gradients overflow is skipped without counting (the scaler
    halves its scale and the next step tries again). Below a scale of 1 the gradients overflow unscaled: such
    steps count towards max_nonfinite, or a diverging fp16 run would halve its scale for ever."""
    overflows = [(2.5, math.inf, 0.0), (2.25, math.inf, 0.0)]
    routine = queued_steps(overflows, scale=1.0)
    assert train.Trainer.check_health(routine) == [2.5, 2.25] and routine.health["nonfinite_steps"] == 0
    with pytest.raises(cli.Diverged, match=r"2 non-finite steps in a row \(max_nonfinite=2\)"):
        train.Trainer.check_health(queued_steps(overflows, scale=0.5))


def test_only_nonfinite_steps_in_a_row_stop_a_run_and_the_finite_ones_count_spikes():
    """A finite step starts the count of non-finite steps in a row again: max_nonfinite=2 of them in all, never in
    a row, stop nothing. The finite losses, and only they, make the spike statistics: one jump, one spike, as
    probe.count_spike counts it on those losses alone."""
    finite = [3.0] * 25 + [4.0] + [3.0] * 4
    steps = [(x, 1.0, 1.0) for x in finite]
    for at in (3, 10, 27):
        steps.insert(at, (math.nan, math.nan, 0.0))  # skipped steps: never two in a row
    run = queued_steps(steps)
    assert train.Trainer.check_health(run) == finite
    assert run.health["nonfinite_steps"] == 3 and run.health["nonfinite_in_a_row"] == 0
    assert run.health["loss_spikes"] == spikes_in(finite)[0] == 1


def test_the_training_loop_waits_for_the_device_only_at_log_and_eval_steps(stdlib_data, tmp_path, monkeypatch):
    """A step queues its work and returns: reading a tensor on the host (.item(), .tolist(), bool(), float(),
    formatting, .numpy(), .cpu(), .nonzero()) would make the CPU wait for the GPU every step. Here every such read
    inside train_step raises, and the reads that remain (check_health) happen at the first step, the log steps
    and before evals. Other waits (a copy to the CPU with .to, boolean-mask indexing) look alike on a CPU: the GPU
    tier's test_on_a_gpu_no_training_step_synchronises catches those."""
    in_step, drained_at, read = [False], [], []

    def guard(name):
        original = getattr(torch.Tensor, name)

        def read(self, *args, **kwargs):
            if in_step[0]:
                raise AssertionError(f"Tensor.{name} inside train_step: the host waits for the device")
            return original(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, read)
    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "__format__", "numpy", "cpu",
                 "nonzero"):
        guard(name)
    step, check, next_batch = train.Trainer.train_step, train.Trainer.check_health, train.TrainLoader.next_batch

    def train_step(self):
        in_step[0] = True
        try:
            step(self)
        finally:
            in_step[0] = False

    def host_batch(self):  # the loader works on the host by design (numpy and CPU tensors): its reads wait for nothing
        in_step[0] = False
        try:
            return next_batch(self)
        finally:
            in_step[0] = True

    def check_health(self):
        drained_at.append((self.iter_num, len(self.pending)))
        read.append(check(self))
        return read[-1]
    monkeypatch.setattr(train.Trainer, "train_step", train_step)
    monkeypatch.setattr(train.Trainer, "check_health", check_health)
    monkeypatch.setattr(train.TrainLoader, "next_batch", host_batch)
    train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={tmp_path / 'run'}", "--max_iters=12",
                       "--eval_interval=6", "--log_interval=4"])
    # (iteration, steps read): the first step alone, then up to each log step (4, 8, 12) or eval (6, 12)
    assert drained_at == [(1, 1), (4, 3), (6, 2), (8, 2), (12, 4)]
    record = read_log(tmp_path / "run")[-1]
    assert record["iter"] == 12 and record["tokens_per_s"] > 0
    assert record["train_loss"] == pytest.approx(sum(read[-2] + read[-1]) / 6)  # the mean of steps 7-12's losses


def test_the_first_line_names_the_variant_each_gate_flag_set_otherwise_included(stdlib_data, tmp_path, capsys):
    """A variant the parameter count cannot tell apart (--gate_act changes none) is named on the model line: the gate,
    the norm, and each gate flag not at its default; a run at the defaults names no more."""
    for flags, said in ((["--gate_act=ns_sigmoid", "--gate_input=none"], "gate=g1, norm=rmsnorm, "
                         "gate_act=ns_sigmoid, gate_input=none; "), (["--gate=none"], "gate=none, norm=rmsnorm; ")):
        train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={tmp_path / flags[0][2:]}", "--max_iters=1",
                           "--eval_interval=1", "--eval_iters=1", *flags])
        line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("model: "))
        assert f"M parameters, {said}device " in line, line


def test_log_lines_and_records_time_the_training_steps_only(stdlib_data, tmp_path, monkeypatch, capsys):
    """On a fake clock the first step takes 51 s (as compiling would), the next five 1 s each, the rest 2 s, and
    each eval 100 s. The log lines and records time the steps alone: a line covers all the steps since the
    previous line, an eval between them or not, and never the first step (128 tokens a step). The end-to-end
    throughput (tokens_per_s_wall, and the last line) counts everything: what a user planning a run divides by."""
    now = [0.0]
    monkeypatch.setattr(train.time, "perf_counter", lambda: now[0])
    step, log_and_save = train.Trainer.train_step, train.Trainer.log_and_save

    def train_step(self):
        now[0] += 51.0 if self.iter_num == 0 else 1.0 if self.iter_num < 6 else 2.0
        step(self)

    def slow_log_and_save(self, *args):
        now[0] += 100.0
        return log_and_save(self, *args)
    monkeypatch.setattr(train.Trainer, "train_step", train_step)
    monkeypatch.setattr(train.Trainer, "log_and_save", slow_log_and_save)
    train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={tmp_path / 'run'}", "--max_iters=12",
                       "--eval_interval=6", "--log_interval=4", "--eval_iters=1"])
    said = capsys.readouterr().out.splitlines()
    lines = [line for line in said if line.startswith("iter ")]
    # the line at 4: steps 1-3, 1 s each; at 8: steps 4-7, 6 s in all; at 12: steps 8-11, 2 s each
    assert len(lines) == 3
    for line, (ms, tokens) in zip(lines, ((1000, 128), (1500, 85), (2000, 64))):
        assert f"{ms} ms, {tokens} tokens/s" in line, line
    log = read_log(tmp_path / "run")  # evals at 6 (steps 1-5, 1 s each) and 12 (steps 6-11, 2 s each)
    assert [r["iter"] for r in log] == [0, 6, 12] and log[0]["tokens_per_s"] is None
    assert [r["tokens_per_s"] for r in log[1:]] == [pytest.approx(128.0), pytest.approx(64.0)]
    # End to end, everything counts: at iter 6, the first eval (100 s), steps 0-5 (51 + 5 s) and this eval
    # (100 s) for 6 x 128 tokens; at 12, six more steps (12 s) and one more eval
    assert log[0]["tokens_per_s_wall"] is None
    assert [r["tokens_per_s_wall"] for r in log[1:]] == [pytest.approx(768 / 256), pytest.approx(1536 / 368)]
    # the last line states both: 1536 tokens in 368 s; 11 timed steps (the first, compiling, is not) took 17 s;
    # the three evaluations 300 s
    done = [line for line in said if line.startswith("done:")]
    assert len(done) == 1 and done[0].startswith(
        "done: 12 iterations in 368 s, 4 tokens/s end to end (a training step alone: 83 tokens/s; evaluations and "
        "checkpoints took 300 s, 82% of the time)."), done
    assert "The val loss is over 1 validation batch, the rest" in done[0], done  # one batch, said as one


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])  # where fused AdamW skips a step on the device


def tiny_model_and_batch(device):
    torch.manual_seed(0)
    model = model_py.GPT(GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=64)).to(device)
    x = torch.randint(0, 64, (2, 17), device=device)
    return model, x[:, :-1], x[:, 1:]


def state_of(model, optimizer):
    return [t.clone() for t in model.parameters()] + [t.clone() for s in optimizer.state.values() for t in s.values()]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("grad_clip", [0.5, 0.0])  # 0: no clipping, not a clip to 0
def test_optimizer_step_skips_a_nonfinite_step_and_otherwise_is_clipped_adamw(fused, device, grad_clip):
    """train.optimizer_step (train.py's step): a finite step is exactly clip-then-AdamW (grad_clip=0: AdamW alone);
    a step whose loss or gradients are not finite changes nothing at all (weights, moments, step counts), decided on
    the device with fused AdamW and on the host with the plain one."""
    model, x, y = tiny_model_and_batch(device)
    reference = model_py.GPT(model.config).to(device)
    reference.load_state_dict(model.state_dict())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1, fused=fused)
    ref_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-2, weight_decay=0.1, foreach=False)
    scaler = torch.amp.GradScaler(device, enabled=False)
    for _ in range(2):  # two finite steps, against the textbook loop
        loss = model(x, y)[1]
        loss.backward()
        stats = train.optimizer_step(optimizer, scaler, model.parameters(), grad_clip, loss.detach())
        ref_loss = reference(x, y)[1]
        ref_loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), grad_clip or math.inf)
        ref_optimizer.step()
        ref_optimizer.zero_grad()
        assert stats.tolist() == pytest.approx([ref_loss.item(), norm.item(), 1.0], rel=1e-5)
        assert norm > 0.5  # the clipping (at 0.5) mattered
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
        assert all(p.grad is None for p in model.parameters())
    before = state_of(model, optimizer)
    for poison in ("loss", "grad"):
        loss = model(x, y)[1]
        loss.backward()
        if poison == "grad":
            next(model.parameters()).grad[0, 0] = float("inf")
        else:
            loss = loss.detach() * float("nan")
        stats = train.optimizer_step(optimizer, scaler, model.parameters(), grad_clip, loss.detach())
        assert stats[2] == 0 and not hasattr(optimizer, "found_inf")
        assert all(torch.equal(a, b) for a, b in zip(before, state_of(model, optimizer))), poison


@pytest.mark.parametrize("device", DEVICES)
def test_optimizer_step_with_fp16s_loss_scaler(device):
    """fp16 (a GPU without bf16) scales the loss; optimizer_step unscales before clipping, so a step equals the
    unscaled one, and when the scaled gradients overflow the step is skipped and the scale halved (the scaler's
    own update, with no scaler.step: the skip is optimizer_step's). On CPU through torch's CPU GradScaler."""
    model, x, y = tiny_model_and_batch(device)
    reference = model_py.GPT(model.config).to(device)
    reference.load_state_dict(model.state_dict())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    ref_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-2, foreach=False)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**10, growth_interval=1000)
    loss = model(x, y)[1]
    scaler.scale(loss).backward()
    stats = train.optimizer_step(optimizer, scaler, model.parameters(), 0.5, loss.detach())
    reference(x, y)[1].backward()
    norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
    ref_optimizer.step()
    assert stats[1].item() == pytest.approx(norm.item(), rel=1e-5) and stats[2] == 1
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    before = state_of(model, optimizer)
    loss = model(x, y)[1]
    scaler.scale(loss * 1e36).backward()  # finite loss, overflowing scaled gradients
    stats = train.optimizer_step(optimizer, scaler, model.parameters(), 0.5, loss.detach())
    assert stats[2] == 0 and scaler.get_scale() == 2.0**9
    assert all(torch.equal(a, b) for a, b in zip(before, state_of(model, optimizer)))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA's sync debug mode needs a GPU")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_on_a_gpu_no_training_step_synchronises(stdlib_data, tmp_path, monkeypatch, dtype):
    """On a GPU, torch's sync debug mode raises at any operation that makes the host wait for the device; it is
    on for every training step after the first (which may compile, autotune and allocate). One step's loss is
    NaN: it is skipped on the device and counted at the next read."""
    poison_forward(monkeypatch, bad_calls={4})
    step = train.Trainer.train_step

    def train_step(self):
        if self.iter_num > self.start_iter:
            torch.cuda.set_sync_debug_mode("error")
        try:
            step(self)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    monkeypatch.setattr(train.Trainer, "train_step", train_step)
    train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={tmp_path / 'run'}", "--device=cuda",
                       f"--dtype={dtype}", "--max_iters=8", "--eval_interval=8", "--log_interval=4"])
    record = read_log(tmp_path / "run")[-1]
    assert record["iter"] == 8 and record["nonfinite_steps"] == 1 and math.isfinite(record["train_loss"])
    _, checkpoint = load_checkpoint(str(tmp_path / "run" / "ckpt.pt"))
    assert all(torch.isfinite(t).all() for t in checkpoint["model"].values())


def test_a_checkpoint_of_the_plain_adamw_resumes_fused(stdlib_data, tmp_path):
    """Checkpoints written by the plain AdamW loop (train.py before it used the fused one on CPUs; an MPS run)
    say fused=None in their optimizer's groups. They resume into this machine's fused AdamW (whose skip of a
    non-finite step works only when fused) and continue exactly as the same checkpoint saved fused does."""
    args = TINY + [f"--data_dir={stdlib_data}", "--eval_interval=2"]
    fused, plain = tmp_path / "fused", tmp_path / "plain"
    train.main(args + [f"--out_dir={fused}", "--max_iters=2"])
    shutil.copytree(fused, plain)
    _, checkpoint = load_checkpoint(str(plain / "ckpt.pt"))
    for group in checkpoint["optimizer"]["param_groups"]:
        group["fused"] = None
    save_checkpoint(checkpoint, str(plain / "ckpt.pt"))
    for out_dir in (fused, plain):
        train.main(args + [f"--out_dir={out_dir}", "--max_iters=4", "--init_from=resume"])
    a, b = (load_checkpoint(str(out_dir / "ckpt.pt"))[1] for out_dir in (fused, plain))
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert all(group["fused"] for group in b["optimizer"]["param_groups"])


def test_resume_takes_the_commands_weight_decay_and_betas(stdlib_data, tmp_path, capsys, monkeypatch):
    """A change printed is a change made: the optimizer's saved groups held the run's weight decay and betas,
    and loading them used to put those back over the command's. A new seed changes nothing, and says so."""
    out_dir = tmp_path / "run"
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--eval_interval=2"]
    train.main(args + ["--max_iters=2", "--weight_decay=0.1", "--lr_decay_iters=4"])  # min_lr at 4, where it ends:
    capsys.readouterr()                                                               # no note on min_lr below
    clips, optimizer_step = [], train.optimizer_step  # the grad_clip each step is clipped at
    monkeypatch.setattr(train, "optimizer_step", lambda *args: (clips.append(args[3]), optimizer_step(*args))[1])
    train.main(args + ["--max_iters=4", "--init_from=resume", "--weight_decay=0.5", "--beta2=0.99", "--seed=7",
                       "--grad_clip=0.25"])
    printed = capsys.readouterr().out
    assert "note: resuming with weight_decay=0.5 (the run had 0.1)" in printed
    assert "note: resuming with grad_clip=0.25 (the run had 1.0)" in printed and clips == [0.25, 0.25]
    assert "note: seed=7 is ignored: a resumed run continues the random state it saved (seed=1337)" in printed
    _, checkpoint = load_checkpoint(str(out_dir / "ckpt.pt"))
    assert [(g["weight_decay"], g["betas"]) for g in checkpoint["optimizer"]["param_groups"]] == \
        [(0.5, (0.9, 0.99)), (0.0, (0.9, 0.99))]
    # and the learning rate the log reports, the schedule's (lr_at) at that step: the one the optimizer steps with
    lr = read_log(out_dir)[-1]["lr"]
    assert lr == train.lr_at(4, train.TrainConfig(**checkpoint["config"])) < checkpoint["config"]["learning_rate"]
    assert [g["lr"] for g in checkpoint["optimizer"]["param_groups"]] == [lr, lr]
    assert checkpoint["config"]["seed"] == 1337 and checkpoint["optimizer"]["state"]  # the moments were kept
    assert "validation windows" not in printed and "stays there" not in printed
    # other validation windows (data.shards.val_batches places batch_size x eval_iters of them): said
    train.main(args + ["--max_iters=6", "--init_from=resume", "--batch_size=2", "--gradient_accumulation_steps=2"])
    assert "note: batch_size x eval_iters = 4 validation windows (the run had 8): other windows" in \
        capsys.readouterr().out
    train.main(args + ["--max_iters=8", "--init_from=resume", "--batch_size=1", "--eval_iters=4"])  # 4 again
    assert "validation windows" not in capsys.readouterr().out
    # a run extended past its decay goes on at min_lr: said, unless lr_decay_iters is given with it
    train.main([f"--out_dir={out_dir}", "--init_from=resume", "--max_iters=9", "--lr_decay_iters=8",
                "--min_lr=1e-4"])
    assert "stays there" not in capsys.readouterr().out  # named with it: the user's schedule
    train.main([f"--out_dir={out_dir}", "--init_from=resume", "--max_iters=10"])
    assert "note: the learning rate reaches min_lr at lr_decay_iters=8 and stays there up to max_iters=10: give " \
        "--lr_decay_iters too" in capsys.readouterr().out
    assert read_log(out_dir)[-1]["lr"] == 1e-4


def test_the_learning_rate_warms_up_linearly_then_follows_a_cosine_down_to_min_lr():
    """train.lr_at: linear warmup that gives no step lr 0 ((it + 1) / (warmup_iters + 1) of learning_rate), the peak
    at warmup_iters, then half a cosine down to min_lr at lr_decay_iters (halfway, the mean of the two; a quarter of
    the way, above it), falling every step, and min_lr after; decay_lr=False: learning_rate throughout."""
    c = TrainConfig(learning_rate=1.0, min_lr=0.1, warmup_iters=4, lr_decay_iters=12)
    lrs = [train.lr_at(it, c) for it in range(16)]
    assert lrs[:5] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert lrs[6] == pytest.approx(0.1 + 0.9 * (1 + math.cos(math.pi / 4)) / 2) and lrs[8] == pytest.approx(0.55)
    assert all(a > b for a, b in zip(lrs[4:12], lrs[5:13])) and lrs[12:] == pytest.approx([0.1] * 4)
    assert train.lr_at(0, dataclasses.replace(c, warmup_iters=0)) == 1.0  # no warmup: the peak at once
    no_decay = dataclasses.replace(c, lr_decay_iters=4)  # lr_decay_iters = warmup_iters: the peak, then min_lr
    assert [train.lr_at(it, no_decay) for it in range(3, 7)] == pytest.approx([0.8, 1.0, 0.1, 0.1])
    assert {train.lr_at(it, dataclasses.replace(c, decay_lr=False)) for it in range(16)} == {1.0}


def test_gradient_accumulation_trains_as_one_batch_of_the_same_windows(stdlib_data, tmp_path):
    """2 micro-steps of 2 sequences train as 1 batch of 4 (the loader draws the same windows, and val_batches the same
    for the same batch_size x eval_iters): each micro-step's loss is divided by their number, so the gradient, the
    train loss and the tokens counted are the whole step's."""
    # no clipping (grad_clip=0), which would scale a gradient of the wrong size to the right one
    common = TINY + [f"--data_dir={stdlib_data}", "--max_iters=4", "--eval_interval=2", "--dtype=float32",
                     "--grad_clip=0"]
    train.main(common + [f"--out_dir={tmp_path / 'one'}", "--batch_size=4", "--eval_iters=2"])
    train.main(common + [f"--out_dir={tmp_path / 'accum'}", "--batch_size=2", "--gradient_accumulation_steps=2",
                         "--eval_iters=4"])
    one, accum = read_log(tmp_path / "one"), read_log(tmp_path / "accum")
    assert [r["iter"] for r in accum] == [0, 2, 4] and [r["tokens"] for r in accum] == [0, 256, 512]
    for a, b in zip(one, accum):
        for key in ("train_loss", "val_loss"):
            assert close(a[key], b[key], rel=1e-5), (a["iter"], key, a[key], b[key])
    a, b = (load_checkpoint(str(tmp_path / name / "ckpt.pt"))[1] for name in ("one", "accum"))
    # summed in another order, the gradients differ by rounding, which Adam (each update divided by the gradient's
    # own size) passes on: 1.1e-6 in a weight of 6e-3 with Python 3.13's text and one thread. A wrong step would
    # differ by about the learning rate (1e-3 to 3e-3 here)
    for name in a["model"]:
        torch.testing.assert_close(a["model"][name], b["model"][name], rtol=1e-5, atol=1e-5)
    # the gradients themselves, which the weights cannot show (Adam's update is the same for twice the gradient):
    # Adam's averages of them and of their squares, to rounding (a millionth or so of each tensor's largest entry)
    for state_a, state_b in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values()):
        for key in ("exp_avg", "exp_avg_sq"):
            assert (state_a[key] - state_b[key]).abs().max() <= 1e-4 * state_a[key].abs().max(), key


# ----------------------------------------------------------------------------
# clear errors

def test_config_files(tmp_path):
    good = tmp_path / "good.py"
    good.write_text("import math\nlearning_rate = 1\nn_layer = 2 * 3\ngate = 'g2'\n")
    config, given = configure(TrainConfig, [str(good), "--n_kv_head=2", "--mlp_hidden=None", "--compile"])
    assert given == {"learning_rate", "n_layer", "gate", "n_kv_head", "mlp_hidden", "compile"}  # a flag counts even at its default
    assert config.learning_rate == 1.0 and type(config.learning_rate) is float  # ints are fine for floats
    assert (config.n_layer, config.gate, config.n_kv_head, config.mlp_hidden) == (6, "g2", 2, None)
    assert config.compile is True  # a bare --flag sets a bool key
    quoted, _ = configure(TrainConfig, ["--gate='g3'", "--wandb_run_name=42", "--norm=dyt"])
    assert (quoted.gate, quoted.wandb_run_name, quoted.norm) == ("g3", "42", "dyt")  # quotes optional
    for name in os.listdir(os.path.join(REPO, "config")):  # the shipped configs name only real keys
        assert configure(TrainConfig, [f"config/{name}"])[0].dataset
    bad = tmp_path / "bad.py"
    bad.write_text("learning_rat = 1e-3\n")
    with pytest.raises(SystemExit, match="bad.py line 1: unknown key 'learning_rat'"):
        configure(TrainConfig, [str(bad)])
    with pytest.raises(SystemExit, match="--learning_rate: write --learning_rate=value"):
        configure(TrainConfig, ["--learning_rate"])  # only a bool key may be bare


def test_train_config_is_the_models_config_plus_the_runs_keys():
    """TrainConfig takes every model flag from GPTConfig (not a copy of them): same type, the model's default but the
    laptop run's sizes and its loss in chunks, and GPTConfig's checks run on it."""
    train_fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    sizes = {"block_size", "n_layer", "n_head", "n_embd", "loss_chunk"}  # the laptop run's own
    assert issubclass(TrainConfig, GPTConfig)
    for f in dataclasses.fields(GPTConfig):
        assert train_fields[f.name].type is f.type, f.name
        assert (train_fields[f.name].default == f.default) == (f.name not in sizes), f.name
    with pytest.raises(SystemExit, match="GPTConfig.gate='g7' is not valid"):
        configure(TrainConfig, ["--gate=g7"])


def test_missing_dataset_names_the_prepare_command(tmp_path):
    out = f"--out_dir={tmp_path / 'run'}"  # not the default out/, which holds a run once the README's first command ran
    with pytest.raises(SystemExit, match=r"not prepared.*Prepare it first: python data/openwebtext/prepare.py "
                                         f"--out_dir {tmp_path}$"):  # into the folder given, not data/openwebtext
        train.main([f"--data_dir={tmp_path}", "--dataset=openwebtext", out])
    with pytest.raises(SystemExit, match=f"data/textdir/prepare.py --src DIR --name mycode --out_dir {tmp_path}$"):
        train.main([f"--data_dir={tmp_path}", "--dataset=mycode", out])
    assert not (tmp_path / "run").exists()


def test_cli_errors_exit_nonzero_with_the_message():
    result = run_cli("train.py", "--batch_sise=4", check=False)
    assert result.returncode == 1 and "unknown key 'batch_sise' (did you mean 'batch_size'?)" in result.stderr
    assert "Traceback" not in result.stderr


# ----------------------------------------------------------------------------
# several processes

def test_ddp_on_cpu_with_gloo_matches_one_process(stdlib_data, tmp_path):
    """2 processes x 2 sequences must train exactly like 1 process x 4, each in 2 micro-steps: every rank takes its
    half of the same global batch, accumulates its micro-steps' gradients and averages them with the other rank's
    once per step, validation batches are shared out and the losses summed."""
    common = TINY + [f"--data_dir={stdlib_data}", "--max_iters=6", "--eval_interval=3"]
    (tmp_path / "tmp").mkdir()  # torchrun leaves a folder of its own in the temp folder: here, removed with tmp_path
    env = dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(tmp_path / "tmp"))
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             "train.py", *common, f"--out_dir={tmp_path / 'ddp'}", "--backend=gloo",
                             "--batch_size=2", "--gradient_accumulation_steps=4", "--eval_iters=4"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr  # torchrun: 0 only if both ranks exit 0
    assert result.stdout.count("done: 6 iterations") == 1  # only rank 0 prints...
    assert sorted(os.listdir(tmp_path / "ddp")) == [".lock", "best.pt", "ckpt.pt", "log.jsonl"]  # ...and writes
    train.main(common + [f"--out_dir={tmp_path / 'one'}", "--batch_size=4", "--gradient_accumulation_steps=2",
                         "--eval_iters=2"])

    ddp, one = read_log(tmp_path / "ddp"), read_log(tmp_path / "one")
    assert [r["iter"] for r in ddp] == [0, 3, 6]
    for a, b in zip(ddp, one):
        assert close(a["val_loss"], b["val_loss"], rel=1e-4) and close(a["train_loss"], b["train_loss"], rel=1e-4)
    assert ddp[-1]["val_loss"] < ddp[0]["val_loss"]


# train.py under torchrun with rank 0's checkpoint writes failing as on a full disk (a failure of rank 0 alone)
FULL_DISK_ON_RANK_0 = """import errno, os, runpy, sys
sys.path.insert(0, os.getcwd())
import runfolder
def full(checkpoint, path):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
if os.environ["RANK"] == "0":
    runfolder.save_checkpoint = full
runpy.run_path("train.py", run_name="__main__")
"""


@pytest.mark.parametrize("where", ["preparing the data", "saving"])
def test_what_fails_on_rank_0_alone_is_its_one_line_and_the_other_ranks_stop_without_a_traceback(
        where, stdlib_data, tmp_path):
    """Rank 0 alone prepares a dataset on first use, makes out_dir and saves. Where that failed, its one line was
    followed by rank 1's traceback from the collective it then met without rank 0 (gloo: "Connection closed by
    peer"; NCCL's barrier would wait instead): now rank 1 stops quietly (cli.on_rank_0), or, mid-run, with one line
    (cli.partner_lost)."""
    (tmp_path / "tmp").mkdir()
    (tmp_path / "file").write_text("a file, not a folder\n")
    (tmp_path / "full_disk.py").write_text(FULL_DISK_ON_RANK_0)
    script, data_dir = (("train.py", tmp_path / "file" / "pystdlib") if where == "preparing the data" else
                        (str(tmp_path / "full_disk.py"), stdlib_data))
    env = dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(tmp_path / "tmp"))
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             script, *TINY, f"--data_dir={data_dir}", f"--out_dir={tmp_path / 'run'}",
                             "--max_iters=2", "--gradient_accumulation_steps=2", "--backend=gloo"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    said = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    expected = "cannot prepare the dataset pystdlib" if where == "preparing the data" else "could not save a checkpoint"
    assert expected in said[0], result.stderr
    assert "[rank1]" not in result.stderr and "Connection closed" not in result.stderr, result.stderr
    # rank 1 stops with no line where rank 0's failure was shared with it, else (unless torchrun ended it first) one
    assert said[1:] in ([], ["error: rank 1 stopped: another process of this run ended (its own message says why)"])
    if where == "preparing the data":
        assert len(said) == 1, result.stderr


def test_eval_only_needs_no_accumulation_the_processes_can_share(monkeypatch):
    """eval_only takes no step: a run trained with gradient_accumulation_steps=1 (every CPU run's default) was refused
    evaluation under torchrun, for a setting it does not use."""
    class Building(Exception):
        pass

    def build_model(*args):
        raise Building  # past the check: enough

    monkeypatch.setattr(train.Trainer, "build_model", build_model)
    c = TrainConfig(gradient_accumulation_steps=1, eval_only=True, init_from="resume")
    with pytest.raises(Building):
        train.Trainer(c, 0, 2, "cpu", False, types.SimpleNamespace(ckpt_path="ckpt.pt"))


def test_gradient_accumulation_steps_the_processes_cannot_share_are_refused(monkeypatch):
    """gradient_accumulation_steps counts the micro-steps of all processes: 2 processes cannot share 3 (each would
    do 1, a step of 2 micro-steps). One line, before the model is built."""
    monkeypatch.setattr(train.Trainer, "build_model", lambda *a: pytest.fail("built the model before refusing"))
    with pytest.raises(SystemExit, match=r"gradient_accumulation_steps=3 must be a multiple of the 2 processes"):
        train.Trainer(TrainConfig(gradient_accumulation_steps=3), 0, 2, "cpu", False,
                      types.SimpleNamespace(ckpt_path="ckpt.pt"))


# ----------------------------------------------------------------------------
# sampling

def test_sample_is_deterministic_with_a_seed(tiny_run, tmp_path, capsys):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("def main(")
    args = [f"--out_dir={tiny_run}", "--num_samples=2", "--max_new_tokens=20", "--device=cpu"]
    from_file = run_cli("sample.py", *args, f"--start=FILE:{prompt}", "--seed=7").stdout

    sample.main(args + ["--start=def main(", "--seed=7"])
    same = capsys.readouterr().out
    sample.main(args + ["--start=def main(", "--seed=8"])
    other = capsys.readouterr().out

    assert from_file == same and same != other
    samples = same.split("-" * 40 + "\n")
    assert len(samples) == 3 and samples[2] == ""
    assert all(s.startswith("def main(") and len(s) > len("def main(\n") for s in samples[:2])
    # a prompt longer than the model's context: said, and the model reads its end
    sample.main([f"--out_dir={tiny_run}", "--num_samples=1", "--max_new_tokens=1", "--device=cpu",
                 "--start=" + "x = 1\n" * 40])
    assert re.search(r"^note: the prompt is 1\d\d tokens after <\|endoftext\|>, 1\d\d with it, more than the model's "
                     r"block_size, 32: "
                     r"it reads "
                     r"<\|endoftext\|> and the last 31$", capsys.readouterr().out, re.M)  # (a BOS run: kept first)


def test_sample_without_a_checkpoint(tmp_path):
    with pytest.raises(SystemExit, match=f"no ckpt.pt in {tmp_path}: train it first"):
        sample.main([f"--out_dir={tmp_path}"])


def test_a_missing_checkpoint_says_what_the_folder_holds(tmp_path):
    """The line for a run folder without the checkpoint asked for names what is there: the checkpoints (a name
    typed without .pt), the runs of a folder of runs, a folder of a similar name (a typo), else that it needs
    training."""
    for run, name in (("baseline", CHECKPOINT), ("g1", BEST)):
        (tmp_path / "lab" / run).mkdir(parents=True)
        (tmp_path / "lab" / run / name).write_bytes(b"")
    lab = tmp_path / "lab"
    assert no_checkpoint(str(lab / "g1"), "best") == \
        f"no best in {lab / 'g1'}: it has best.pt; choose one with --checkpoint=NAME"
    assert no_checkpoint(str(lab), CHECKPOINT) == (f"no ckpt.pt in {lab}: it is a folder of runs (baseline, g1); "
                                                   f"name a run's own folder, e.g. {lab / 'baseline'}")
    assert no_checkpoint(str(lab / "baselin"), CHECKPOINT) == \
        f"no ckpt.pt in {lab / 'baselin'}: there is no such folder; did you mean {lab / 'baseline'}?"
    assert no_checkpoint(str(tmp_path / "lb"), CHECKPOINT).endswith("did you mean " + str(lab) + "?")  # of runs
    (tmp_path / "out-eval").mkdir()  # results (lab.evaluate's out_dir, say), no run: never the one meant
    (tmp_path / "out-eval" / "summary.json").write_text("{}")
    assert no_checkpoint(str(tmp_path / "out-evl"), CHECKPOINT).endswith("train it first (python train.py "
                                                                         f"--out_dir={tmp_path / 'out-evl'} ...)")
    assert no_checkpoint(str(tmp_path / "elsewhere"), CHECKPOINT).endswith(
        f"train it first (python train.py --out_dir={tmp_path / 'elsewhere'} ...)")
    with pytest.raises(SystemExit, match="did you mean"):  # as sample.py says it
        sample.main([f"--out_dir={lab / 'baselin'}", "--device=cpu"])
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "meta.json").write_text("{}")
    assert no_checkpoint(str(tmp_path / "data"), CHECKPOINT) == (f"no ckpt.pt in {tmp_path / 'data'}: it holds a "
                                                                 "dataset, not a run; name a run's folder (the "
                                                                 "--out_dir train.py was given)")
    with pytest.raises(SystemExit, match=f"^error: init_from='resume' but there is no ckpt.pt in {lab}: it is a "
                                         "folder of runs"):  # not "the run stopped before its first checkpoint"
        train.main([f"--out_dir={lab}", "--init_from=resume", "--device=cpu"])


def test_ctrl_c_before_a_new_run_replaced_the_old_one_says_so(tiny_run, tmp_path, capsys):
    """--overwrite=True over a run, Ctrl-C before the new run began: ckpt.pt is still the old run's, so the line
    says to run the command again, not to resume the run it was replacing."""
    from runfolder import RunFolder
    shutil.copytree(tiny_run, tmp_path / "run")
    c, given = configure(TrainConfig, [f"--out_dir={tmp_path / 'run'}", "--overwrite=True", "--n_layer=2"])
    with pytest.raises(SystemExit):
        RunFolder(str(tmp_path / "run")).interrupted(c, given, 1, None, 0)
    assert capsys.readouterr().err == (f"interrupted while starting, before the new run replaced the one in "
                                       f"{tmp_path / 'run'} (ckpt.pt still holds its iter 6): run the command again "
                                       "to start over\n")


def test_ctrl_c_before_any_checkpoint_asks_for_overwrite_only_where_run_files_are(tmp_path, capsys):
    """Ctrl-C before the first checkpoint: the same command starts over where nothing of the run was written yet
    (the data still being prepared, say); where it left run files (log.jsonl), --overwrite=True is needed too."""
    from runfolder import RunFolder
    c, given = configure(TrainConfig, [f"--out_dir={tmp_path / 'run'}"])
    for leave, says in ((False, "run the command again to start over"),
                        (True, "run the command again (with --overwrite=True) to start over")):
        if leave:
            (tmp_path / "run").mkdir()
            (tmp_path / "run" / "log.jsonl").write_text("")
        with pytest.raises(SystemExit) as exit_info:
            RunFolder(str(tmp_path / "run")).interrupted(c, given, 1, None, 0)
        assert exit_info.value.code == 130 and capsys.readouterr().err == (
            f"interrupted while starting, before any ckpt.pt was saved in {tmp_path / 'run'}: {says}\n")
    # later, best.pt of the initial state saved (the first eval) and no ckpt.pt yet: said, not "no checkpoint"
    torch.save({"iter_num": 0, "val_loss": 10.5}, tmp_path / "run" / "best.pt")
    with pytest.raises(SystemExit):
        RunFolder(str(tmp_path / "run")).interrupted(c, given, 1, 27, 0)
    assert capsys.readouterr().err == (f"interrupted at iter 27, before any ckpt.pt was saved in {tmp_path / 'run'} "
                                       "(best.pt holds the state of iter 0): run the command again (with "
                                       "--overwrite=True) to start over\n")


# ----------------------------------------------------------------------------
# a careless user's mistakes: one clear line, nothing lost, no run folder changed by a command that fails

def test_a_diverging_run_never_replaces_the_best_checkpoint(stdlib_data, tmp_path, capsys, monkeypatch):
    """Below the rule that stops an exploded run (DIVERGED_FACTOR, switched off here: see
    test_an_exploding_run_stops_and_best_pt_is_never_worse_than_the_start), a worse state is saved as the latest only."""
    monkeypatch.setattr(train, "DIVERGED_FACTOR", math.inf)
    out_dir = tmp_path / "run"
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--eval_interval=3"]
    train.main(args + ["--max_iters=6"])
    best_before = (out_dir / "best.pt").read_bytes()
    _, best = load_checkpoint(str(out_dir / "best.pt"))
    assert best["val_loss"] == min(r["val_loss"] for r in read_log(out_dir)[1:])
    capsys.readouterr()
    # the user's mistake: resume at an absurd learning rate; the loss climbs far while staying finite
    train.main(args + ["--init_from=resume", "--max_iters=12", "--learning_rate=30.0", "--min_lr=30.0"])
    printed = capsys.readouterr().out
    log = read_log(out_dir)
    assert log[-1]["val_loss"] > best["val_loss"] + 1.0, [r["val_loss"] for r in log]
    assert "WARNING: the validation loss rose" in printed and "which best.pt keeps" in printed
    assert (out_dir / "best.pt").read_bytes() == best_before  # the good state is untouched
    _, latest = load_checkpoint(str(out_dir / "ckpt.pt"))  # the latest state (always_save_checkpoint)
    assert latest["iter_num"] == 12 and latest["best_iter"] == best["iter_num"]


def test_a_latest_state_that_ties_the_best_is_said_to_be_no_worse(tmp_path, capsys):
    """A tie (a learning rate of 0 past lr_decay_iters with min_lr=0) is no best, and no state whose steps were
    skipped either: its line says 0.000 worse."""
    checkpoint = {"iter_num": 9, "val_loss": 4.0, "best_iter": 6, "best_val_loss": 4.0,
                  "health": {"nonfinite_in_a_row": 0}}
    runfolder.RunFolder(str(tmp_path)).said_saved(checkpoint, is_best=False, latest=True, initial_val_loss=10.0)
    assert "its validation loss is 0.000 worse than the best, 4.0000 at iter 6" in capsys.readouterr().out


@pytest.mark.parametrize("rise, warned", [(0.9, False), (1.1, True)])
def test_a_latest_state_more_than_a_nat_worse_than_the_best_is_warned_of(tmp_path, capsys, rise, warned):
    """runfolder.VAL_RISE_WARNING: a latest state whose validation loss is more than 1 nat above best.pt's gets the
    warning that the run may be diverging; a smaller rise, noise, only its line."""
    checkpoint = {"iter_num": 9, "val_loss": 4.0 + rise, "best_iter": 6, "best_val_loss": 4.0}
    runfolder.RunFolder(str(tmp_path)).said_saved(checkpoint, is_best=False, latest=True, initial_val_loss=10.0)
    printed = capsys.readouterr().out
    assert f"its validation loss is {rise:.3f} worse than the best, 4.0000 at iter 6" in printed
    assert ("WARNING: the validation loss rose" in printed) == warned, printed


def test_without_always_save_a_worse_state_replaces_nothing(stdlib_data, tmp_path, monkeypatch):
    monkeypatch.setattr(train, "DIVERGED_FACTOR", math.inf)  # the worse state is saved, not stopped (above)
    out_dir = tmp_path / "run"
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--eval_interval=3"]
    train.main(args + ["--max_iters=6"])
    before = folder_state(out_dir)
    train.main(args + ["--init_from=resume", "--max_iters=9", "--learning_rate=30.0", "--min_lr=30.0",
                       "--always_save_checkpoint=False"])
    after = folder_state(out_dir)
    assert after["ckpt.pt"] == before["ckpt.pt"] and after["best.pt"] == before["best.pt"]
    assert [r["iter"] for r in read_log(out_dir)] == [0, 3, 6, 9]
    # resumed from ckpt.pt (iter 6), the log drops the record of the state no file kept: it reads as one run
    train.main(args + ["--init_from=resume", "--max_iters=9"])
    assert [(r["iter"], r["lr"] < 1) for r in read_log(out_dir)] == [(0, True), (3, True), (6, True), (9, True)]


def test_a_new_run_never_starts_over_an_existing_run(stdlib_data, tmp_path):
    out_dir = tmp_path / "run"
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--eval_interval=2"]
    train.main(args + ["--max_iters=2"])
    before = folder_state(out_dir)
    with pytest.raises(SystemExit, match=r"already holds a run .*--init_from=resume.*--overwrite=True"):
        train.main(args + ["--max_iters=4"])
    # told to overwrite, but failing before the first step (no such data): still nothing changed
    with pytest.raises(SystemExit, match="not prepared"):
        train.main(TINY + [f"--data_dir={tmp_path / 'empty'}", "--dataset=other", f"--out_dir={out_dir}",
                           "--overwrite=True"])
    # a resume that fails on its data changes nothing either (not even the log's trimming)
    with pytest.raises(SystemExit, match="not prepared"):
        train.main(TINY + [f"--data_dir={tmp_path / 'empty'}", "--dataset=other", f"--out_dir={out_dir}",
                           "--init_from=resume", "--max_iters=4"])
    assert folder_state(out_dir) == before
    train.main(args + ["--max_iters=3", "--eval_interval=3", "--overwrite=True"])  # asked for: a new run
    assert [r["iter"] for r in read_log(out_dir)] == [0, 3]
    assert load_checkpoint(str(out_dir / "best.pt"))[1]["iter_num"] == 3


@pytest.mark.parametrize("args, message", [
    (["--n_layers=3"], "unknown key 'n_layers' (did you mean 'n_layer'?)"),
    (["--n_layer=two"], "n_layer must be int, got 'two'"),
    (["--max_iters=1.5"], "max_iters must be int, got 1.5"),
    (["--compile=1"], "compile must be bool, got 1"),
    (["--compile_mode=fast"], "compile_mode='fast' is not valid; choose one of default, reduce-overhead"),
    (["--sdpa_backend=fa3"], "sdpa_backend='fa3' is not valid; choose one of default, cudnn, flash"),
    (["--backend=ncl"], "backend='ncl' is not valid; choose one of auto, nccl, gloo"),
    (["--n_layer"], "--n_layer: write --n_layer=value"),
    (["no/such/config.py"], "config file no/such/config.py not found (arguments are config files"),
    (["config/sinklab.py"], "config file config/sinklab.py not found; did you mean config/sink_lab.py? (arguments"),
    (["--gate=g7"], "GPTConfig.gate='g7' is not valid"),
    (["--gate=none", "--gate_act=silu"], "gate_act='silu' has no effect with gate='none'"),
    (["--init_from=gpt2"], "init_from='gpt2' is not valid"),
    (["--max_iters=-1"], "max_iters=-1 must be at least 1"),
    (["--eval_only=True"], "eval_only=True evaluates a trained run: add --init_from=resume"),
    (["--learning_rate=-0.1"], "learning_rate=-0.1 is not valid; it must be a positive number"),
    (["--min_lr=0.5"], "min_lr=0.5 is not valid; it must be between 0 and learning_rate"),
    (["--beta1=2.0"], "beta1=2.0 is not valid; it must be in [0, 1)"),
    (["--seed=-1"], "seed=-1 must be in 0.."),
    (["--lr_decay_iters=0"], "lr_decay_iters=0 must be at least 1 and at least warmup_iters=2"),
    (["--warmup_iters=-5"], "warmup_iters=-5 must be 0 or more"),
    (["--grad_clip=-1.0"], "grad_clip=-1.0 is not valid"),
    (["--device=gpu"], "device='gpu' is not valid"),
    (["--device=cuda:x"], "device='cuda:x' is not valid; choose 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'"),
    (["--dtype=bf16"], "dtype='bf16' is not valid; choose one of auto, float32, bfloat16, float16"),
    (["--vocab_size=1000"], "hold token id"),  # GPT-2 ids in the data, a model with 1000 tokens
    (["--block_size=1"], "block_size=1 is not valid; it must be at least 2 with bos=True"),  # windows of BOS alone
    (["--attn_window=8"], "attn_window=8 is a setting for a trained model, not for training"),  # the probe's
    (["--dtype=float16"], "dtype=float16 trains on a CUDA GPU only"),  # its loss scaling: CUDA's GradScaler
    (["--out_dir="], "--out_dir= is empty: name a folder"),
])
def test_mistaken_keys_and_meaningless_settings_are_refused_before_anything_is_written(stdlib_data, tmp_path, args, message):
    with pytest.raises(SystemExit) as exit_info:
        train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={tmp_path / 'run'}"] + args)
    assert message in str(exit_info.value.code)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("bad", ["--dtype=bf16", "--device=gpu", "--init_from=resum"])
def test_a_misspelled_value_is_named_before_what_the_folder_holds(stdlib_data, tmp_path, bad):
    """A folder that holds a run refuses a new one ('already holds a run'), but a misspelled value is said first:
    told only of the folder, a user adds --overwrite=True, and only then learns of the typo."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "ckpt.pt").write_bytes(b"a run's checkpoint")
    with pytest.raises(SystemExit) as exit_info:
        train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={tmp_path / 'run'}", bad])
    assert f"{bad[2:].split('=')[0]}=" in str(exit_info.value.code) and "is not valid" in str(exit_info.value.code)
    assert (tmp_path / "run" / "ckpt.pt").read_bytes() == b"a run's checkpoint"


@pytest.mark.parametrize("allowed, refused", [
    *[({key: 1}, {key: 0}) for key in ("batch_size", "eval_interval", "log_interval", "eval_iters",
                                       "gradient_accumulation_steps", "max_nonfinite", "max_iters")],
    ({"block_size": 2}, {"block_size": 1}),  # with bos=True: the BOS token, then text
    ({"weight_decay": 0.0}, {"weight_decay": -0.1}),
    ({"grad_clip": 0.0}, {"grad_clip": -1.0}),  # 0: no clipping
    ({"min_lr": 0.0}, {"min_lr": -1e-4}),
    ({"min_lr": 2e-3}, {"min_lr": 2.1e-3}),  # at most learning_rate=2e-3
    ({"beta1": 0.0}, {"beta1": 1.0}),
    ({"beta2": 0.0}, {"beta2": 1.0}),
    ({"warmup_iters": 0}, {"warmup_iters": -1}),
    ({"lr_decay_iters": 30}, {"lr_decay_iters": 29}),  # at least warmup_iters=30
    ({"decay_lr": False, "lr_decay_iters": 0}, {"lr_decay_iters": 0}),  # without decay it is never read
    ({"seed": 2**31 - 1}, {"seed": 2**31}),
])
def test_each_setting_is_refused_just_past_the_edge_of_what_is_allowed(allowed, refused):
    """check_settings at the edge of each range (from the defaults): the last value allowed passes, the first
    outside stops with one line naming the key and the value."""
    def settings(**changes):
        c = TrainConfig()
        for key, value in changes.items():
            setattr(c, key, value)  # past GPTConfig's own checks: check_settings is tested here
        return c
    train.check_settings(settings(**allowed))
    (key, value), = refused.items()
    with pytest.raises(SystemExit, match=rf"^error: {key}={re.escape(str(value))} (is not valid|must be)"):
        train.check_settings(settings(**refused))


@pytest.mark.skipif(kernels.triton_unavailable() is not None, reason="where Triton is missing or too old for the "
                    "kernel, that is refused first (test_a_triton_too_old_for_the_kernel_is_one_line_before_the_"
                    "run_folder)")
def test_the_fused_kernel_where_it_cannot_run_is_one_line_before_the_model(tmp_path, monkeypatch):
    """--attn_backend=triton on a CPU without Triton's interpreter (kernels' own check would raise at the first
    forward, a traceback after the run folder was made): one line first, with the two ways out."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(train, "Trainer", lambda *a, **k: pytest.fail("built the run before refusing the backend"))
    with pytest.raises(SystemExit) as exit_info:
        train.main(TINY + [f"--out_dir={tmp_path / 'run'}", "--attn_backend=triton", "--device=cpu"])
    message = str(exit_info.value.code)
    assert message.startswith("error: attn_backend='triton' ") and "TRITON_INTERPRET=1" in message and \
        "--attn_backend=torch" in message and "\n" not in message, message
    assert not (tmp_path / "run").exists()


def test_a_triton_too_old_for_the_kernel_is_one_line_before_the_run_folder(stdlib_data, tmp_path, monkeypatch):
    """--attn_backend=triton where Triton is older than the kernel needs (kernels.triton_unavailable): the model's
    config refuses it in one line with the upgrade, before a run folder is made; not a traceback at the first forward."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # past pick_device's check, which only knows whether Triton is there
    reason = "backend='triton' needs Triton 3.3 or newer, found 3.2.0 (pip install -U triton)"
    monkeypatch.setattr(kernels, "triton_unavailable", lambda: reason)
    with pytest.raises(SystemExit) as exit_info:
        train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={tmp_path / 'run'}", "--attn_backend=triton",
                           "--device=cpu"])
    assert str(exit_info.value.code) == f"error: {reason}; use attn_backend='auto' or 'torch'"
    assert not (tmp_path / "run").exists()


def test_a_vocabulary_without_room_for_the_bos_token_names_the_size_that_fits(stdlib_data, tmp_path):
    """With bos=True the BOS token is an id of the data too: the least vocab_size either message names fits it."""
    from data import bos_token, max_token_id
    least = max(max_token_id(str(stdlib_data)), bos_token(str(stdlib_data))) + 1
    for vocab in (10, least - 1):
        with pytest.raises(SystemExit) as exit_info:
            train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={tmp_path / 'run'}", f"--vocab_size={vocab}"])
        assert f"vocab_size must be at least {least}" in str(exit_info.value.code), exit_info.value.code


def test_wandb_missing_is_said_before_the_model_or_the_data(tmp_path, monkeypatch):
    """--wandb_log=True without wandb installed: one line before any model is built or data prepared (the data of
    a big run can take minutes), not after."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else find_spec(name, *a))
    monkeypatch.setattr(train, "Trainer", lambda *a, **k: pytest.fail("built the run before saying wandb is missing"))
    with pytest.raises(SystemExit) as exit_info:
        train.main(TINY + [f"--out_dir={tmp_path / 'run'}", "--wandb_log=True"])
    assert str(exit_info.value.code) == "error: wandb_log=True needs wandb: pip install wandb"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("text, message", [
    ("n_layer = 2\nlearning_rate = 1e-3 +\n", "line 2: invalid syntax"),
    ("n_layer = 2\n\nbatch_size = undefined_name\n", "line 3: NameError: name 'undefined_name' is not defined"),
    ("learning_rate = float('nan')\n", "learning_rate must be a finite number, got nan"),  # cli.py: no NaN key
])
def test_config_file_mistakes_name_the_file_and_line(tmp_path, text, message):
    path = tmp_path / "my_config.py"
    path.write_text(text)
    with pytest.raises(SystemExit) as exit_info:
        train.main([str(path), f"--out_dir={tmp_path / 'run'}"])
    assert "my_config.py" in str(exit_info.value.code)
    assert message in str(exit_info.value.code)


def test_resume_keeps_the_runs_own_data_and_settings(stdlib_data, tmp_path, capsys):
    out_dir = tmp_path / "run"
    train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--max_iters=2", "--eval_interval=2",
                       "--batch_size=3"])
    capsys.readouterr()
    # only what changes: the data, the model and batch_size come from the checkpoint, not from the defaults
    train.main([f"--out_dir={out_dir}", "--init_from=resume", "--max_iters=4", "--device=cpu"])
    printed = capsys.readouterr().out
    assert f"data: {stdlib_data}" in printed and "WARNING" not in printed
    assert "done: 4 iterations (2 by this command) in " in printed  # its time is this command's, not the run's
    assert [line for line in printed.splitlines() if line.startswith("note:")] == [
        "note: resuming with max_iters=4 (the run had 2)"]  # nothing spurious (n_kv_head, ...)
    _, checkpoint = load_checkpoint(str(out_dir / "ckpt.pt"))
    assert checkpoint["iter_num"] == 4 and checkpoint["config"]["batch_size"] == 3
    assert checkpoint["config"]["data_dir"] == str(stdlib_data)
    # other data only when asked for, and loudly
    other = tmp_path / "other"
    shutil.copytree(stdlib_data, other)
    train.main([f"--out_dir={out_dir}", "--init_from=resume", "--max_iters=6", f"--data_dir={other}", "--device=cpu"])
    assert "WARNING: this run was trained on" in capsys.readouterr().out
    # the precision is this command's (another machine may lack the run's), but a change is never silent
    train.main([f"--out_dir={out_dir}", "--init_from=resume", "--max_iters=7", "--dtype=float32", "--device=cpu"])
    assert "computes in dtype" not in capsys.readouterr().out  # named by the command: its own choice
    train.main([f"--out_dir={out_dir}", "--init_from=resume", "--max_iters=8", "--device=cpu"])
    printed = capsys.readouterr().out
    if cli.autocast_for("cpu", "auto")[1] == "float32":  # a CPU without bf16: the default computes as the run did
        assert "computes in" not in printed
    else:
        assert "note: this command computes in bfloat16 (dtype=auto, its default); the run was trained with " \
            "dtype=float32: give --dtype=float32 to continue in float32" in printed
    # the model cannot change under a resumed run
    before = folder_state(out_dir)
    with pytest.raises(SystemExit, match=r"n_layer=3 differs from the run .*\(n_layer=1\)"):
        train.main([f"--out_dir={out_dir}", "--init_from=resume", "--max_iters=9", "--n_layer=3"])
    assert folder_state(out_dir) == before


def test_default_dataset_is_never_prepared_into_a_folder_with_other_files(tmp_path):
    mine = tmp_path / "pystdlib"  # named for the dataset, so train.py would prepare it there (data.prepare_if_missing)
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's own file")
    before = folder_state(mine)
    with pytest.raises(SystemExit, match="notes.txt"):
        train.main([f"--data_dir={mine}", f"--out_dir={tmp_path / 'run'}", "--device=cpu"])
    assert folder_state(mine) == before and not (tmp_path / "run").exists()


def test_unreadable_files_are_one_clear_line(tiny_run, stdlib_data, tmp_path):
    # a truncated checkpoint: resume and sample.py say what it is, without a traceback
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    data = (run / "ckpt.pt").read_bytes()
    (run / "ckpt.pt").write_bytes(data[:len(data) // 2])
    with pytest.raises(SystemExit, match="is not a readable checkpoint.*best.pt"):
        train.main([f"--out_dir={run}", "--init_from=resume", "--max_iters=9", "--device=cpu"])
    result = run_cli("sample.py", f"--out_dir={run}", "--device=cpu", check=False)
    assert result.returncode == 1 and "is not a readable checkpoint" in result.stderr
    assert "Traceback" not in result.stderr
    # best.pt is a separate file and still whole
    assert run_cli("sample.py", f"--out_dir={run}", "--checkpoint=best.pt", "--device=cpu",
                   "--max_new_tokens=5", "--num_samples=1").returncode == 0

    # a malformed meta.json in the dataset
    data_dir = tmp_path / "data"
    shutil.copytree(stdlib_data, data_dir)
    (data_dir / "meta.json").write_text('{"name": "pystdlib", "vocab_')
    with pytest.raises(SystemExit, match="meta.json"):
        train.main(TINY + [f"--data_dir={data_dir}", f"--out_dir={tmp_path / 'new'}"])
    assert not (tmp_path / "new").exists()


def test_a_checkpoint_without_a_part_of_the_state_resume_reads_is_one_line(tiny_run, tmp_path):
    """A checkpoint that lacks any part of the state a resume reads (another trainer's, an older train.py's) is
    refused with one line that names it, before anything is built: not a KeyError where that part is read."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    _, checkpoint = load_checkpoint(str(run / "ckpt.pt"))
    for key in ("optimizer", "scaler", "iter_num", "val_loss", "config", "rng", "loader", "health"):
        save_checkpoint({k: v for k, v in checkpoint.items() if k != key}, str(run / "ckpt.pt"))
        with pytest.raises(SystemExit, match=rf"ckpt.pt cannot be resumed: it lacks \['{key}'\] \(only train.py's"):
            train.main([f"--out_dir={run}", "--init_from=resume", "--max_iters=9", "--device=cpu"])
    for key in ("optimizer", "loader", "health"):  # stripped for sharing, as nanoGPT's users do: sampled, not resumed
        save_checkpoint({**checkpoint, key: None}, str(run / "ckpt.pt"))
        assert load_checkpoint(str(run / "ckpt.pt"))[1][key] is None
        with pytest.raises(SystemExit, match=rf"ckpt.pt cannot be resumed: it lacks \['{key}'\] \(only train.py's"):
            train.main([f"--out_dir={run}", "--init_from=resume", "--max_iters=9", "--device=cpu"])


def test_run_files_get_the_permissions_of_any_new_file_not_those_of_a_temporary_one(tiny_run):
    """atomic_write writes a private temporary file (mkstemp's 0o600); the run file it becomes has the permissions
    any new file of the user gets (0o666 less the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    for name in ("ckpt.pt", "best.pt", "log.jsonl"):
        assert os.stat(os.path.join(tiny_run, name)).st_mode & 0o777 == 0o666 & ~mask, name


def test_an_out_dir_that_cannot_be_written(stdlib_data, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(SystemExit, match=r"--out_dir=.*run cannot be made: Not a directory"):
        train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={blocker / 'run'}", "--max_iters=2"])


def test_a_full_disk_stops_the_run_and_keeps_the_saved_state(stdlib_data, tmp_path, monkeypatch):
    out_dir = tmp_path / "run"
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--eval_interval=2"]
    train.main(args + ["--max_iters=2"])
    before = folder_state(out_dir)

    def full_disk(obj, f):
        f.write(b"part of a checkpoint")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(SystemExit, match="could not save a checkpoint .*No space left on device.*keep the states"):
        train.main(args + ["--max_iters=4", "--init_from=resume"])
    after = folder_state(out_dir)
    assert after["ckpt.pt"] == before["ckpt.pt"] and after["best.pt"] == before["best.pt"]
    assert not [name for name in after if name.endswith(".tmp")]


@pytest.mark.parametrize("args, message", [
    (["--start=FILE:/no/such/prompt.txt"], "cannot read the prompt file"),
    (["--top_k=-5"], "top_k=-5 must be 0"),
    (["--temperature=0.0"], "temperature=0.0 must be a positive number (1 = the model's own distribution); for "
                            "greedy decoding, always the likeliest token, use --top_k=1"),
    (["--num_samples=0"], "num_samples=0 must be at least 1"),
    (["--checkpoint=nothing.pt"], "no nothing.pt in"),
    (["--checkpoint=best"], "it has best.pt, ckpt.pt; choose one with --checkpoint=NAME"),
])
def test_sample_mistakes(tiny_run, args, message):
    with pytest.raises(SystemExit) as exit_info:
        sample.main([f"--out_dir={tiny_run}", "--device=cpu"] + args)
    assert message in str(exit_info.value.code)


# ----------------------------------------------------------------------------
# BOS windows, the trajectory's independence from evaluation, loss spikes

def test_bos_windows_anchor_every_training_and_validation_window(stdlib_data, tmp_path):
    """bos=True (the default): position 0 of every window the model trains and is evaluated on is <|endoftext|>,
    then block_size - 1 tokens of text, y still x shifted by one; the checkpoint records it."""
    out = str(tmp_path / "bos")
    seen = []
    real_forward = model_py.GPT.forward

    def recording_forward(self, idx, targets=None):
        seen.append((idx.clone(), None if targets is None else targets.clone()))
        return real_forward(self, idx, targets)
    model_py.GPT.forward = recording_forward
    try:
        train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out}", "--max_iters=2", "--eval_interval=2"])
    finally:
        model_py.GPT.forward = real_forward
    assert len(seen) > 4
    for idx, targets in seen:
        assert (idx[:, 0] == 50256).all()  # every window, training and validation, and the probe's batch
        if targets is not None:
            assert torch.equal(idx[:, 1:], targets[:, :-1])
    assert not (seen[0][0][:, 1:] == 50256).all()  # the rest is text
    assert load_checkpoint(os.path.join(out, "ckpt.pt"))[1]["config"]["bos"] is True
    # --bos=False: windows start anywhere (a document delimiter only where the text has one)
    from data.shards import TrainLoader
    x, _ = TrainLoader(stdlib_data, 32, 64, seed=0).next_batch()
    assert (x[:, 0] != 50256).float().mean() > 0.9


def test_bos_cannot_change_on_resume(tiny_run, capsys):
    with pytest.raises(SystemExit) as e:
        train.main([f"--out_dir={tiny_run}", "--init_from=resume", "--bos=False"])
    assert "bos=False differs from the run" in str(e.value.code) and "another out_dir" in str(e.value.code)


def test_generation_keeps_the_bos_at_position_0_when_the_text_outgrows_the_window():
    torch.manual_seed(0)
    m = model_py.GPT(GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=8, vocab_size=64)).eval()
    seen = []
    real = m._forward

    def spy(idx, start=0, cache=None):
        seen.append((idx.clone(), start))
        return real(idx, start=start, cache=cache)
    m._forward = spy
    start = torch.tensor([[63, 1, 2]])
    out = m.generate(start, max_new_tokens=10, keep_first=True)
    assert out[0, 0] == 63 and out.shape == (1, 13)
    full = [idx for idx, s in seen if s == 0 and idx.size(1) == 8]  # the recomputed, cropped contexts
    assert full and all(idx[0, 0] == 63 for idx in full)
    for idx in full:  # the BOS, then the last 7 tokens of the sequence so far
        assert any(torch.equal(idx[0, 1:], out[0, j:j + 7]) for j in range(1, out.size(1) - 6))
    seen.clear()
    m.generate(start, max_new_tokens=10)  # without keep_first the window slides past it
    assert any(idx.size(1) == 8 and idx[0, 0] != 63 for idx, s in seen if s == 0)


def test_the_trajectory_does_not_depend_on_evaluation_or_checkpointing(stdlib_data, tmp_path):
    """Two runs that differ only in eval_interval (so in how often they evaluate, probe and save) end with
    identical weights: evaluation consumes no random numbers and changes no state that training reads."""
    weights = []
    for interval in (2, 5):
        out = str(tmp_path / f"every{interval}")
        train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out}", "--max_iters=10",
                           f"--eval_interval={interval}"])
        weights.append(load_checkpoint(os.path.join(out, "ckpt.pt"))[1]["model"])
    assert weights[0].keys() == weights[1].keys()
    for k in weights[0]:
        assert torch.equal(weights[0][k], weights[1][k]), k


def spikes_in(losses, threshold=6.0):
    health = {"loss_ema": None, "loss_spikes": 0}
    flagged = [probe.count_spike(health, x, threshold) for x in losses]
    return health["loss_spikes"], flagged


def test_loss_spikes_are_what_a_reader_would_call_spikes():
    rng = torch.Generator().manual_seed(0)
    steps = torch.arange(3000, dtype=torch.float64)
    curve = 2 + 3 * torch.exp(-steps / 300)  # a falling loss
    noise = 0.03 * torch.randn(3000, generator=rng, dtype=torch.float64)
    quiet = (curve + noise).tolist()
    assert spikes_in(quiet)[0] == 0  # noise alone, however long the run: no spike
    spiky = list(quiet)
    for at, length in ((800, 1), (1500, 5), (2200, 30)):  # +0.5 nats for 1, 5 and 30 steps: three spikes
        for i in range(at, at + length):
            spiky[i] += 0.5
    count, flagged = spikes_in(spiky)
    assert count == 3 and flagged[800] and flagged[1500] and flagged[2200]
    # a jump to a plateau (the loss stalls far above where it was): one spike; a slow drift upwards: none
    assert spikes_in(quiet[:1000] + [x + 1.5 for x in quiet[1000:]])[0] == 1
    assert spikes_in([q + 1.5 * i / 3000 for i, q in enumerate(quiet)])[0] == 0
    # the first steps (the running variance is not yet meaningful) and tiny rises never count
    assert spikes_in([5.0] * 5 + [9.0] + [5.0] * 10)[0] == 0
    assert spikes_in([3.0 + 1e-4 * (i % 2) for i in range(200)] + [3.05] + [3.0] * 20)[0] == 0


@pytest.mark.parametrize("name", ["cudnn", "flash"])
def test_an_sdpa_preference_puts_one_kernel_first_and_keeps_the_rest(name):
    """sdpa_backend: SDPA tries that kernel first and every other after it, in PyTorch's own order and all enabled (inputs
    the first cannot take fall back as before); PyTorch's order comes back after. On a GPU the kernels it picks then
    compute the same attention."""
    from cli import sdpa_order, sdpa_preference
    first = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION"}[name]
    before = sdpa_order()
    dev, dtype = ("cuda", torch.bfloat16) if torch.cuda.is_available() else ("cpu", torch.float32)
    q, k, v = torch.randn(3, 2, 4, 128, 64, device=dev, dtype=dtype).unbind(0)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).float()
    with sdpa_preference(name):
        assert sdpa_order() == [first] + [b for b in before if b != first]
        assert all(f() for f in (torch.backends.cuda.flash_sdp_enabled, torch.backends.cuda.cudnn_sdp_enabled,
                                 torch.backends.cuda.mem_efficient_sdp_enabled, torch.backends.cuda.math_sdp_enabled))
        if dev == "cuda":  # another kernel, the same attention (bf16 rounding apart)
            got = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).float()
            assert (got - expected).abs().max() < 2e-2
    assert sdpa_order() == before
    with sdpa_preference("default"):
        assert sdpa_order() == before


def test_sdpa_order_names_each_kernel_once(monkeypatch):
    """PyTorch 2.6 and 2.7 report their default order with MATH twice and no OVERRIDEABLE: sdpa_order (recorded with
    every benchmark, and the order a preference keeps behind its first kernel) names each kernel once, in PyTorch's
    order, with the one missing last."""
    from cli import sdpa_order
    monkeypatch.setattr(torch._C, "_get_sdp_priority_order", lambda: [1, 2, 0, 3, 0])
    assert sdpa_order() == ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH", "CUDNN_ATTENTION", "OVERRIDEABLE"]
    monkeypatch.setattr(torch._C, "_get_sdp_priority_order", lambda: [3, 1, 2, 0, 4])
    assert sdpa_order() == ["CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH", "OVERRIDEABLE"]


def test_the_whole_run_trains_under_the_sdpa_preference(tmp_path, monkeypatch):
    """train.py --sdpa_backend=cudnn: the run (its compiling included) happens with cuDNN's attention first, and PyTorch's
    order is back afterwards. It is a per-command key: a resumed run takes it from its own command."""
    from cli import sdpa_order
    seen = []

    class Trainer:
        def __init__(self, c, *args):
            self.c = c

        def run(self):
            seen.append((self.c.sdpa_backend, sdpa_order()[0]))

    monkeypatch.setattr(train, "Trainer", Trainer)
    before = sdpa_order()
    train.main([f"--out_dir={tmp_path}", "--sdpa_backend=cudnn", "--device=cpu"])
    assert seen == [("cudnn", "CUDNN_ATTENTION")] and sdpa_order() == before
    assert "sdpa_backend" in runfolder.PER_COMMAND


# ----------------------------------------------------------------------------
# one run per folder, crashes between writes, divergence, interruptions, memory

HOLD = """
import sys, time, runfolder
lock = runfolder.claim_folder(sys.argv[1])
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_train_py_on_a_folder_in_use_stops_naming_the_holder(stdlib_data, tmp_path):
    out_dir = tmp_path / "run"
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--eval_interval=2"]
    train.main(args + ["--max_iters=2"])
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out_dir)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before, lock = folder_state(out_dir), (out_dir / ".lock").read_bytes()
        for more in (["--init_from=resume", "--max_iters=4"], ["--max_iters=4", "--overwrite=True"]):
            with pytest.raises(SystemExit, match=rf"{out_dir} is in use by another process \(pid {holder.pid}: "):
                train.main(args + more)
        # a new folder is claimed as it is made: the same refusal
        assert folder_state(out_dir) == before and (out_dir / ".lock").read_bytes() == lock
        # (b) a holder killed with SIGKILL holds nothing: the OS released its lock
        holder.kill()
        assert holder.wait(timeout=60) == -signal.SIGKILL
    finally:
        holder.kill()
        holder.stdout.close()
    train.main(args + ["--init_from=resume", "--max_iters=4"])
    assert [r["iter"] for r in read_log(out_dir)] == [0, 2, 4]
    assert f"pid {os.getpid()}:" in (out_dir / ".lock").read_text()  # this process claimed it last


def test_a_failed_command_leaves_a_folder_that_holds_no_run_as_it_was(stdlib_data, tmp_path):
    """--out_dir naming a folder of the user's own (no run in it) and a command that fails: no .lock is left behind
    in it; a folder that holds a run keeps its .lock, and a .lock that was there before is never taken away."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's own notes")
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={mine}"]
    with pytest.raises(SystemExit, match="max_iters=-1 must be at least 1"):
        train.main(args + ["--max_iters=-1"])
    assert os.listdir(mine) == ["notes.txt"]
    (mine / ".lock").write_text("pid 1: an earlier command\n")
    with pytest.raises(SystemExit, match="max_iters=-1 must be at least 1"):
        train.main(args + ["--max_iters=-1"])
    assert sorted(os.listdir(mine)) == [".lock", "notes.txt"]


def test_a_new_folder_is_claimed_when_it_is_made(stdlib_data, tmp_path, monkeypatch):
    """Two new runs into one folder that does not exist yet: the second to make it is refused by the claim."""
    out_dir = tmp_path / "new"
    made = runfolder.RunFolder.check_writable

    def someone_else_claims_first(self):
        made(self)
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out_dir)], cwd=REPO, stdout=subprocess.PIPE,
                                  text=True)
        assert holder.stdout.readline().strip() == "held"
        holders.append(holder)
    holders = []
    monkeypatch.setattr(runfolder.RunFolder, "check_writable", someone_else_claims_first)
    try:
        with pytest.raises(SystemExit, match=r"is in use by another process \(pid \d+"):
            train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--max_iters=2"])
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
            holder.stdout.close()
    assert folder_state(out_dir) == {}


def test_resume_trusts_what_best_pt_holds_not_what_ckpt_pt_says(stdlib_data, tmp_path, capsys, monkeypatch):
    """Killed between ckpt.pt's rename and best.pt's link: ckpt.pt is newer and better than best.pt, and its own
    record of the best (best_val_loss, best_iter) names a state best.pt does not hold. ckpt.pt's state is then the
    best, and becomes best.pt at the first evaluation, before anything can replace it (whatever follows: a worse
    state, a run that explodes, a run that saves only better states); so too where best.pt is gone. A ckpt.pt worse
    than the initial state never becomes best.pt. Nothing in the folder changes before the first evaluation."""
    monkeypatch.setattr(train, "DIVERGED_FACTOR", math.inf)  # a worse state below, saved as the latest only
    out_dir = tmp_path / "run"
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--eval_interval=3"]
    train.main(args + ["--max_iters=3"])
    iter3 = (out_dir / "ckpt.pt").read_bytes()
    train.main(args + ["--max_iters=6", "--init_from=resume"])
    iter6 = (out_dir / "ckpt.pt").read_bytes()
    _, ckpt = load_checkpoint(str(out_dir / "ckpt.pt"))
    assert ckpt["iter_num"] == 6 and ckpt["best_iter"] == 6

    def disagreeing_pair():
        (out_dir / "ckpt.pt").write_bytes(iter6)
        (out_dir / "best.pt").unlink(missing_ok=True)
        (out_dir / "best.pt").write_bytes(iter3)
    disagreeing_pair()
    _, best = load_checkpoint(str(out_dir / "best.pt"))
    assert best["iter_num"] == 3 and best["val_loss"] > ckpt["val_loss"]
    capsys.readouterr()
    worse = ["--init_from=resume", "--learning_rate=30.0", "--min_lr=30.0"]
    train.main(args + ["--max_iters=9"] + worse)
    printed = capsys.readouterr().out
    assert (f"{out_dir / 'best.pt'} holds iter 3 (val loss {best['val_loss']:.4f})" in printed and
            f"the best state is {out_dir / 'ckpt.pt'}'s (iter 6, val loss {ckpt['val_loss']:.4f})" in printed), printed
    assert f"{ckpt['val_loss']:.4f} at iter 6, which best.pt keeps" in printed, printed
    assert (out_dir / "best.pt").read_bytes() == iter6  # kept before iter 9, worse, replaced ckpt.pt
    assert load_checkpoint(str(out_dir / "ckpt.pt"))[1]["best_iter"] == 6
    # a run that saves only better states, and one that explodes at once: best.pt is iter 6 all the same, and the
    # explosion's message names it truly
    for extra, explodes in ((["--always_save_checkpoint=False"], False), (["--learning_rate=1e4"], True)):
        disagreeing_pair()
        monkeypatch.setattr(train, "DIVERGED_FACTOR", 1.0 if explodes else math.inf)
        if explodes:
            with pytest.raises(cli.Diverged, match=r"best.pt the best \(iter 6\)"):
                train.main(args + ["--max_iters=9", "--init_from=resume"] + extra)
        else:
            train.main(args + ["--max_iters=9"] + worse + extra)
        assert (out_dir / "best.pt").read_bytes() == iter6, extra
    monkeypatch.setattr(train, "DIVERGED_FACTOR", math.inf)
    # killed so at the run's last save: resumed, nothing is left to train and no evaluation comes, yet best.pt is
    # made of ckpt.pt's state all the same
    disagreeing_pair()
    capsys.readouterr()
    train.main(args + ["--max_iters=6", "--init_from=resume"])
    assert "nothing to do" in capsys.readouterr().out
    assert (out_dir / "best.pt").read_bytes() == iter6 and (out_dir / "ckpt.pt").read_bytes() == iter6

    # the user's mv best.pt ckpt.pt: no best.pt; ckpt.pt's state is the best, and becomes best.pt
    (out_dir / "ckpt.pt").write_bytes(iter6)
    (out_dir / "best.pt").unlink()
    capsys.readouterr()
    train.main(args + ["--max_iters=9"] + worse)
    printed = capsys.readouterr().out
    assert f"note: there is no {out_dir / 'best.pt'}; the best state is" in printed, printed
    assert (out_dir / "best.pt").read_bytes() == iter6
    assert load_checkpoint(str(out_dir / "ckpt.pt"))[1]["iter_num"] == 9
    # ... unless it is worse than the initial state: then no state worse than that ever becomes best.pt
    (out_dir / "best.pt").unlink()
    train.main(args + ["--max_iters=12"] + worse)
    printed = capsys.readouterr().out
    assert "is worse than the initial state" in printed and "worse than the initial validation loss" in printed
    assert not (out_dir / "best.pt").exists()


def test_a_diverged_run_exits_with_its_own_status_from_the_command_line(stdlib_data, tmp_path):
    """python train.py stops a run that diverged with the message and cli.DIVERGED_EXIT (3), so that a study can tell
    that result from a crash (1); any other refusal is still one line and status 1."""
    run = [sys.executable, os.path.join(REPO, "train.py"), *TINY, f"--data_dir={stdlib_data}", "--eval_interval=3"]
    exploded = subprocess.run(run + [f"--out_dir={tmp_path / 'run'}", "--learning_rate=100", "--max_iters=30"],
                              capture_output=True, text=True)
    assert exploded.returncode == cli.DIVERGED_EXIT == 3, exploded.stderr
    assert exploded.stderr.strip().splitlines()[-1].startswith("error: the run has diverged: validation loss")
    refused = subprocess.run(run + [f"--out_dir={tmp_path / 'other'}", "--max_iters=-1"], capture_output=True,
                             text=True)
    assert refused.returncode == 1 and refused.stderr.startswith("error: ") and "Traceback" not in refused.stderr


def test_an_exploding_run_stops_and_best_pt_is_never_worse_than_the_start(stdlib_data, tmp_path):
    out_dir = tmp_path / "run"
    with pytest.raises(cli.Diverged, match=r"the run has diverged: validation loss \S+ at iter 3, more than 2x the "
                                         r"\S+ it started from\. learning_rate=100 is too high for this model: try 10,"
                                         r".*This state was not saved; no ckpt.pt was saved; best.pt holds iter 0\.$"):
        train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--eval_interval=3",
                           "--max_iters=30", "--learning_rate=100"])
    log = read_log(out_dir)
    assert [r["iter"] for r in log] == [0, 3] and log[1]["val_loss"] > 2 * log[0]["val_loss"]
    _, best = load_checkpoint(str(out_dir / "best.pt"))
    assert best["iter_num"] == 0 and best["val_loss"] == pytest.approx(log[0]["val_loss"])
    assert not (out_dir / "ckpt.pt").exists()  # the diverged state is saved nowhere


def test_a_full_disk_reported_by_torch_or_ctrl_c_while_saving_is_one_line(stdlib_data, tmp_path, monkeypatch, capsys):
    out_dir = tmp_path / "run"
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--eval_interval=2"]
    train.main(args + ["--max_iters=2"])
    before = folder_state(out_dir)

    def full_disk(obj, f):  # what torch.save's zip writer raises when the disk fills
        f.write(b"part of a checkpoint")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1664 vs 1552")
    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(SystemExit, match=r"could not save a checkpoint in .*: \[enforce fail at inline_container.cc"
                                         r":672\] . unexpected pos 1664 vs 1552 \(is the disk full\?\)\. .*ckpt.pt and "
                                         r".*best.pt keep the states saved before"):
        train.main(args + ["--max_iters=4", "--init_from=resume"])
    after = folder_state(out_dir)  # the log has the eval's record; the checkpoints are as they were
    assert after["ckpt.pt"] == before["ckpt.pt"] and after["best.pt"] == before["best.pt"]
    assert not [name for name in after if name.endswith(".tmp")]

    def interrupted_save(obj, f):
        f.write(b"part of a checkpoint")
        raise KeyboardInterrupt
    monkeypatch.setattr(torch, "save", interrupted_save)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        train.main(args + ["--max_iters=4", "--init_from=resume"])
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == (f"interrupted at iter 4: {out_dir / 'ckpt.pt'} holds iter 2. Continue with: "
                                       f"python train.py --device=cpu --max_iters=4 --out_dir={out_dir} "
                                       "--init_from=resume\n")  # the checkpoint's run had max_iters=2
    after = folder_state(out_dir)
    assert after["ckpt.pt"] == before["ckpt.pt"] and after["best.pt"] == before["best.pt"]
    assert not [name for name in after if name.endswith(".tmp")]


def test_the_resume_command_pastes_into_a_shell_as_it_is():
    """A folder with a space (or a quote) in its name: the command printed on Ctrl-C gives back the same arguments."""
    import shlex
    from runfolder import resume_command
    c, given = configure(TrainConfig, ["--out_dir=runs/it's one", "--device=cpu"])
    command = resume_command(c, given, world_size=1)
    assert shlex.split(command) == ["python", "train.py", "--device=cpu", "--out_dir=runs/it's one",
                                    "--init_from=resume"], command
    # what this command changed from the checkpoint's settings comes along; a model key, which resume refuses, never
    c, given = configure(TrainConfig, ["--out_dir=r", "--n_layer=2", "--max_iters=9", "--learning_rate=3e-4"])
    saved = dataclasses.asdict(TrainConfig())  # the run was trained with the defaults
    assert resume_command(c, given, 1, saved) == "python train.py --learning_rate=0.0003 --max_iters=9 --out_dir=r " \
                                                 "--init_from=resume"


@pytest.mark.parametrize("stop, status, word", [(signal.SIGINT, 130, "interrupted"),
                                                 (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_ctrl_c_says_where_the_checkpoint_is_and_how_to_resume(stdlib_data, tmp_path, stop, status, word):
    """Ctrl-C, and SIGTERM (a scheduler's stop, `kill`; before, it ended the run with no line at all)."""
    out_dir = tmp_path / "run"
    # Ctrl-C as in a terminal: a suite started in the background (`cmd &` in a script) ignores SIGINT, its children
    # inherit that, and Python then never raises KeyboardInterrupt; the child takes the default back
    proc = subprocess.Popen([sys.executable, "train.py", *TINY, f"--data_dir={stdlib_data}", f"--out_dir={out_dir}",
                             "--eval_interval=2", "--max_iters=100000", "--lr_decay_iters=100000"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in proc.stdout:
            if line.startswith("saved") and "ckpt.pt" in line:  # the first log line after a checkpoint
                break
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == status, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and err.startswith(f"{word} at iter "), err
    saved = load_checkpoint(str(out_dir / "ckpt.pt"))[1]["iter_num"]
    command = f"python train.py --device=cpu --out_dir={out_dir} --init_from=resume"
    assert f": {out_dir / 'ckpt.pt'} holds iter {saved}. Continue with: {command}" in err, err
    # the command it gives continues the run (here only to the next eval)
    train.main(command.split()[2:] + [f"--max_iters={saved + 2}"])
    assert read_log(out_dir)[-1]["iter"] == saved + 2


def test_a_partial_torchrun_environment_is_one_line(stdlib_data, tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(SystemExit, match=r"the environment sets RANK=0 but not LOCAL_RANK, WORLD_SIZE(, MASTER_ADDR, "
                                         r"MASTER_PORT)?: torchrun sets all of RANK, LOCAL_RANK, WORLD_SIZE(, MASTER_ADDR, "
                                         r"MASTER_PORT)?\. For one process unset RANK"):
        train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={tmp_path / 'run'}", "--max_iters=2"])
    assert not (tmp_path / "run").exists()


def test_a_step_too_big_for_memory_is_refused_with_a_batch_size_that_fits(stdlib_data, tmp_path, monkeypatch):
    monkeypatch.setattr(runfolder, "free_memory", lambda device: 2**30)  # 1 GiB free
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={tmp_path / 'run'}", "--max_iters=2"]
    with pytest.raises(SystemExit) as exit_info:
        train.main(args + ["--batch_size=4096", "--gradient_accumulation_steps=3"])
    message = str(exit_info.value.code)
    assert message.startswith("error: batch_size=4096 x block_size=32 needs about ") and "1.0 GiB is free" in message
    fits = int(message.split("try --batch_size=")[1].split()[0])
    config = GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=32)
    n_params = sum(p.numel() for p in model_py.GPT(config).parameters())
    most = max(b for b in range(1, 4097) if runfolder.step_memory(b, config, n_params) <= 2**30)
    assert 1 < most < 4096
    # the largest that fits among the divisors of 4096, so that the same windows make up each step and evaluation
    assert fits == max(b for b in range(1, most + 1) if 4096 % b == 0)
    assert f"--gradient_accumulation_steps={3 * 4096 // fits} --eval_iters={2 * 4096 // fits} (the same run" in message
    with pytest.raises(SystemExit, match=r"block_size=100000 needs about .* even --batch_size=1 does not fit: lower "
                                         r"--block_size=100000"):
        train.main(args + ["--block_size=100000"])
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("dataset", ["", "..", "../../etc", "a/b"])
def test_a_dataset_that_is_a_path_is_refused_for_what_it_is(tmp_path, dataset):
    """--dataset names a folder of data/: a path (or nothing) is not advised to be prepared under that name."""
    with pytest.raises(SystemExit, match=rf"dataset={re.escape(repr(dataset))} is not a dataset's name: it names a "
                                         r"folder of data/ .*; a folder elsewhere is --data_dir=PATH"):
        train.main(TINY + [f"--dataset={dataset}", f"--out_dir={tmp_path / 'run'}"])
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("dataset, meant", [("pystlib", "pystdlib"), ("openwebtxt", "openwebtext"), ("zzz", None)])
def test_a_misspelled_dataset_is_told_the_one_meant(tmp_path, dataset, meant):
    """A name close to one of data/'s datasets is named in the refusal; with --data_dir the name only labels the
    folder given, so no other dataset is suggested there."""
    with pytest.raises(SystemExit) as exit_info:
        train.main(TINY + [f"--dataset={dataset}", f"--out_dir={tmp_path / 'run'}"])
    message = str(exit_info.value.code)
    assert f"dataset {dataset!r} is not prepared" in message
    assert (f"(did you mean --dataset={meant}?). Prepare it first:" in message) == (meant is not None), message
    with pytest.raises(SystemExit) as exit_info:
        train.main(TINY + [f"--dataset={dataset}", f"--data_dir={tmp_path / 'data'}", f"--out_dir={tmp_path / 'run'}"])
    assert "did you mean" not in str(exit_info.value.code)
    assert not (tmp_path / "run").exists() and not os.path.exists(os.path.join(REPO, "data", dataset))


def test_the_memory_estimate_counts_the_optimizers_state_and_the_logits_computed_at_once():
    """runfolder.step_memory: 16 bytes a parameter (weights, gradients, AdamW's two moments) before any sequence, and
    of the logits (3 floats a token and vocabulary entry) only the loss_chunk rows computed at once."""
    chunked = GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=32, loss_chunk=64)
    whole = dataclasses.replace(chunked, loss_chunk=0)
    assert runfolder.step_memory(0, whole, 1000) == 16 * 1000
    assert runfolder.step_memory(8, whole, 1000) - runfolder.step_memory(8, chunked, 1000) == \
        4 * 3 * (8 * 32 - 64) * whole.vocab_size


def test_a_model_larger_than_memory_is_one_line(stdlib_data, tmp_path, monkeypatch):
    """Built on the CPU first, a model whose tensors the allocator refuses (n_embd=10^6: a 12 TB c_attn) stops with
    one line, before any run folder is made (here where the free memory is not known, so check_fits cannot refuse
    it before it is built)."""
    monkeypatch.setattr(runfolder, "free_memory", lambda device: None)
    with pytest.raises(SystemExit, match=r"the model does not fit in this machine's memory \(one of its tensors "
                                         r"alone: \d+ bytes\): lower n_layer, n_embd"):
        train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={tmp_path / 'run'}", "--n_embd=1000000",
                           "--n_head=1"])
    assert not (tmp_path / "run").exists()


def test_a_model_of_many_small_layers_larger_than_memory_is_refused_before_it_is_built(stdlib_data, tmp_path,
                                                                                       monkeypatch):
    """--n_layer=1000000 (typed for 10): each tensor is small, so the allocator refuses none until the machine's
    memory is gone, minutes later (or the kernel kills the process, with no line at all); refused by its config."""
    monkeypatch.setattr(model_py, "Block", lambda *a, **k: pytest.fail("built a layer of a model that cannot fit"))
    with pytest.raises(SystemExit, match=r"^error: batch_size=4 x block_size=32 needs about [\d.]+ GiB .*even "
                                         r"--batch_size=1 does not fit: lower --block_size=32 or the model's size$"):
        train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={tmp_path / 'run'}", "--n_layer=1000000"])
    assert not (tmp_path / "run").exists()


def test_running_out_of_memory_in_a_step_is_one_line(stdlib_data, tmp_path, monkeypatch):
    """What the estimate misses: the allocator's failure at the first step becomes the same advice."""
    original = model_py.GPT.forward

    def forward(self, idx, targets=None):
        if self.training:
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:118] data. DefaultCPUAllocator: can't allocate memory: "
                               "you tried to allocate 68719476736 bytes. Error code 12 (Cannot allocate memory)")
        return original(self, idx, targets)
    monkeypatch.setattr(model_py.GPT, "forward", forward)
    with pytest.raises(SystemExit, match=r"out of memory at iter 0 \(\[enforce fail .*\)\. batch_size=4 x block_size="
                                         r"32 needs about .*: try --batch_size=2 --gradient_accumulation_steps=2 "
                                         r"--eval_iters=4 \(the same run"):
        train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={tmp_path / 'run'}", "--max_iters=2"])


def test_a_folder_without_a_checkpoint_says_what_it_holds_and_what_to_do(tiny_run, stdlib_data, tmp_path):
    args = TINY + [f"--data_dir={stdlib_data}", "--max_iters=9", "--eval_interval=3"]
    # only a log: a run stopped before its first checkpoint
    only_log = tmp_path / "only_log"
    only_log.mkdir()
    shutil.copy(os.path.join(tiny_run, "log.jsonl"), only_log)
    for more in ([], ["--init_from=resume"]):
        with pytest.raises(SystemExit) as exit_info:
            train.main(args + [f"--out_dir={only_log}"] + more)
        message = str(exit_info.value.code)
        assert (f"{only_log} holds log.jsonl and no ckpt.pt: there is no state to resume" in message
                and "--overwrite=True" in message and "Continue it with --init_from=resume" not in message), message
    # best.pt but no ckpt.pt: name best.pt's iter (read from it) and the commands that continue from it
    no_ckpt = tmp_path / "no_ckpt"
    shutil.copytree(tiny_run, no_ckpt)
    (no_ckpt / "ckpt.pt").unlink()
    best_iter = load_checkpoint(str(no_ckpt / "best.pt"))[1]["iter_num"]
    for more in ([], ["--init_from=resume"]):
        with pytest.raises(SystemExit) as exit_info:
            train.main(args + [f"--out_dir={no_ckpt}"] + more)
        message = str(exit_info.value.code)
        assert (f"holds log.jsonl, best.pt but no ckpt.pt; its best.pt is the state of iter {best_iter}" in message
                and f"cp {no_ckpt / 'best.pt'} {no_ckpt / 'ckpt.pt'}, then --init_from=resume" in message), message
    shutil.copy(no_ckpt / "best.pt", no_ckpt / "ckpt.pt")  # the advice works
    train.main(args + [f"--out_dir={no_ckpt}", "--init_from=resume"])
    assert read_log(no_ckpt)[-1]["iter"] == 9


def test_a_config_file_that_exits_is_refused_by_name(tmp_path):
    path = tmp_path / "my_config.py"
    path.write_text("n_layer = 2\nimport sys\nsys.exit(0)\n")
    with pytest.raises(SystemExit) as exit_info:
        train.main([str(path), f"--out_dir={tmp_path / 'run'}"])
    assert str(exit_info.value.code) == (f"error: config file {path} line 3 calls sys.exit(0): a config file only sets "
                                         "keys (key = value lines); remove the exit")
    assert not (tmp_path / "run").exists()


def test_auto_dtype_is_bf16_on_a_cpu_only_where_it_computes_bf16(monkeypatch):
    """dtype=auto: bf16 autocast on a CPU with bf16 matmuls in hardware, fp32 on one without (and on MPS);
    a dtype named is taken as named."""
    assert cli.cpu_computes_bf16() in (True, False)
    for hardware, expected in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(cli, "cpu_computes_bf16", lambda hardware=hardware: hardware)
        ctx, dtype = cli.autocast_for("cpu", "auto")
        assert dtype == expected
        with ctx:
            assert torch.is_autocast_enabled("cpu") == (expected == "bfloat16")
            assert torch.get_autocast_dtype("cpu") == torch.bfloat16 or expected == "float32"
        assert cli.autocast_for("cpu", "float32")[1] == "float32"  # named: as named, whatever the CPU
        assert cli.autocast_for("mps", "auto")[1] == "float32"
    with pytest.raises(SystemExit, match="'float64' is not valid; choose one of 'auto', 'float32'"):
        cli.autocast_for("cpu", "float64")


def test_a_cpu_told_to_use_avx2_at_most_trains_in_fp32():
    """ATEN_CPU_CAPABILITY=avx2 makes any CPU one without bf16 for dtype=auto (how the docs' no-bf16 timings are
    taken on a CPU that has it); without it, auto follows the hardware."""
    ask = ("import cli, torch; print(torch.backends.cpu.get_cpu_capability(), cli.cpu_computes_bf16(), "
           "cli.autocast_for('cpu', 'auto')[1])")
    said = subprocess.run([sys.executable, "-c", ask], cwd=REPO, capture_output=True, text=True, check=True,
                          env=dict(os.environ, ATEN_CPU_CAPABILITY="avx2")).stdout.split()
    if said[0] != "AVX2":
        pytest.skip(f"this CPU runs PyTorch's {said[0]} kernels, not AVX2")
    assert said[1:] == ["False", "float32"]


# ----------------------------------------------------------------------------
# the run folder under a careless user: files copied over, linked, replaced by folders; data changed under a run

def test_best_pt_is_its_own_file_so_a_file_copied_over_ckpt_pt_leaves_it(stdlib_data, tmp_path, monkeypatch):
    out_dir = tmp_path / "run"
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--eval_interval=2"]
    train.main(args + ["--max_iters=2"])  # iter 2 is the best: ckpt.pt and best.pt hold the same state
    ckpt, best = out_dir / "ckpt.pt", out_dir / "best.pt"
    assert ckpt.read_bytes() == best.read_bytes() and best.stat().st_nlink == 1 and not os.path.samefile(ckpt, best)
    best_before = best.read_bytes()
    shutil.copyfile(tmp_path / "run" / "log.jsonl", ckpt)  # cp other/ckpt.pt run/ckpt.pt writes into ckpt.pt's file
    assert best.read_bytes() == best_before
    # a folder of an older version, whose best.pt was a hard link to ckpt.pt: resuming gives best.pt its own file
    save_checkpoint(load_checkpoint(str(best))[1], str(ckpt))
    best.unlink()
    os.link(ckpt, best)
    folder = runfolder.RunFolder(str(out_dir))
    folder.start_iter = 2
    folder.log({"iter": 3})
    assert not os.path.samefile(ckpt, best) and best.read_bytes() == best_before
    # a full disk while best.pt is copied: best.pt keeps its state, and the line says what ckpt.pt now holds
    monkeypatch.setattr(shutil, "copyfileobj", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(SystemExit, match=r"No space left on device\. .*best.pt keeps the state saved before; "
                                         r".*ckpt.pt holds iter 4"):
        train.main(args + ["--max_iters=4", "--init_from=resume"])
    assert best.read_bytes() == best_before and not list(out_dir.glob(".*.tmp"))


def test_a_symlinked_lock_or_log_is_never_written_through(stdlib_data, tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("the user's own file")
    out_dir = tmp_path / "run"
    out_dir.mkdir()
    (out_dir / ".lock").symlink_to(precious)
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--max_iters=2", "--eval_interval=2"]
    with pytest.raises(SystemExit, match=r"\.lock is a symbolic link, not the lock file .* move it away"):
        train.main(args)
    assert precious.read_text() == "the user's own file" and os.listdir(out_dir) == [".lock"]
    (out_dir / ".lock").unlink()
    (out_dir / ".lock").mkdir()  # a folder in its place: the same one line, naming it
    with pytest.raises(SystemExit, match=r"\.lock is a folder, not the lock file"):
        train.main(args)
    # log.jsonl turned into a link while the run writes: the append refuses it and leaves the target alone
    folder = runfolder.RunFolder(str(tmp_path / "other"))
    os.makedirs(folder.out_dir)
    folder.log({"iter": 0})
    os.remove(folder.log_path)
    os.symlink(precious, folder.log_path)
    with pytest.raises(SystemExit, match=r"could not write .*log.jsonl: it is a symbolic link"):
        folder.log({"iter": 1})
    assert precious.read_text() == "the user's own file"


def test_every_checkpoint_records_its_run_and_data_and_a_resume_on_changed_data_stops(stdlib_data, tmp_path, capsys):
    from data.shards import dataset_fingerprint
    data, out_dir = tmp_path / "data", tmp_path / "run"
    shutil.copytree(stdlib_data, data)
    args = TINY + [f"--out_dir={out_dir}", "--eval_interval=2"]
    train.main(args + [f"--data_dir={data}", "--max_iters=2"])
    # a run that stops before its cosine decay ends (lr_decay_iters=300, the default) is told so at its start
    assert "note: the run ends at max_iters=2, before lr_decay_iters=300 where its learning rate reaches min_lr " \
        "(usually lr_decay_iters = max_iters)" in capsys.readouterr().out
    _, first = load_checkpoint(str(out_dir / "ckpt.pt"))
    assert first["data_fingerprint"] == dataset_fingerprint(str(data)) and len(first["run_id"]) == 16
    assert first["tokenizer"] == "gpt2"  # what sample.py decodes with, whatever the data folder holds later
    # and the command that made its data, which the data's meta.json keeps from its preparation
    assert first["data_prepare"] == json.loads((data / "meta.json").read_text())["prepare"]
    assert first["data_prepare"].startswith("python data/pystdlib/prepare.py")
    assert load_checkpoint(str(out_dir / "best.pt"))[1]["run_id"] == first["run_id"]
    train.main(args + ["--max_iters=4", "--init_from=resume"])  # the run's own data: resumes, keeps its run id
    assert load_checkpoint(str(out_dir / "ckpt.pt"))[1]["run_id"] == first["run_id"]
    # each command's first record names the run, so a measurement kept beside the log can be matched to it
    assert [r.get("run_id") for r in read_log(out_dir)] == [first["run_id"], None, first["run_id"]]
    before = folder_state(out_dir)
    change_a_token(data)
    now = dataset_fingerprint(str(data))
    with pytest.raises(SystemExit) as exit_info:
        train.main(args + ["--max_iters=6", "--init_from=resume"])
    message = str(exit_info.value.code)
    assert (f"the data in {data} is not what this run trained on: its val shards differ" in message
            and first["data_fingerprint"]["val"] in message and now["val"] in message
            and f"Prepare the data the run trained on again in {data} (it was made by: {first['data_prepare']}), or "
            "start a new run" in message and "--overwrite=True" in message
            and "\n" not in message), message
    assert folder_state(out_dir) == before
    # the command that started the run, given again with --init_from=resume, names the same folder: no consent to
    # its changed contents
    with pytest.raises(SystemExit) as exit_info:
        train.main(args + ["--max_iters=6", "--init_from=resume", f"--data_dir={data}"])
    assert "is not what this run trained on" in str(exit_info.value.code)
    assert folder_state(out_dir) == before
    # told to continue on other data (another folder): it does, says so, and records the new fingerprint
    capsys.readouterr()
    other = tmp_path / "other"
    shutil.copytree(data, other)
    train.main(args + ["--max_iters=6", "--init_from=resume", f"--data_dir={other}"])
    assert "note: the val shards in" in capsys.readouterr().out
    _, latest = load_checkpoint(str(out_dir / "ckpt.pt"))
    assert latest["data_fingerprint"] == now and latest["run_id"] == first["run_id"]
    # a checkpoint older than the fingerprint resumes as before
    del latest["data_fingerprint"], latest["run_id"]
    save_checkpoint(latest, str(out_dir / "ckpt.pt"))
    change_a_token(other)
    train.main(args + ["--max_iters=8", "--init_from=resume"])
    assert read_log(out_dir)[-1]["iter"] == 8


def test_a_run_continued_on_other_validation_shards_starts_its_best_again_and_keeps_the_old_best(stdlib_data,
                                                                                                 tmp_path, capsys):
    """Losses on two validation sets never compare: continued on other data (named), best.pt, measured on the old
    shards, is kept as best-before-iterN.pt and best.pt starts again from ckpt.pt's state evaluated on the new ones,
    the new start of the divergence rule too. The new shards here are random tokens, far harder than the text: a
    comparison with the old best would never replace it, and sample.py would read the old data's model. ckpt.pt
    records the new shards from their first evaluation, though the loss never improves on them: a later resume must
    not compare its loss on the old ones with best.pt's on the new."""
    import numpy as np
    from data.shards import HEADER_BYTES, dataset_fingerprint, find_shards
    out_dir, other = tmp_path / "run", tmp_path / "other"
    args = TINY + [f"--out_dir={out_dir}", "--eval_interval=2", "--always_save_checkpoint=False"]
    train.main(args + [f"--data_dir={stdlib_data}", "--max_iters=4"])
    old_best = (out_dir / BEST).read_bytes()
    _, ckpt = load_checkpoint(str(out_dir / CHECKPOINT))
    shutil.copytree(stdlib_data, other)
    tokens = np.memmap(find_shards(str(other), "val")[0], dtype=np.uint16, mode="r+", offset=HEADER_BYTES)
    tokens[:] = np.random.default_rng(0).integers(0, 50257, len(tokens))
    tokens.flush()
    del tokens
    capsys.readouterr()
    # no step changes a weight (a learning rate of 1e-30 is below their rounding), so the loss never improves on
    # these shards: ckpt.pt must record them from their first evaluation all the same
    train.main(args + [f"--data_dir={other}", "--max_iters=8", "--init_from=resume", "--learning_rate=1e-30",
                       "--min_lr=0"])
    out = capsys.readouterr().out
    it, aside = ckpt["iter_num"], out_dir / f"best-before-iter{ckpt['iter_num']}.pt"
    assert f"note: {out_dir / BEST} (iter {ckpt['best_iter']}, val loss {ckpt['best_val_loss']:.4f}) was measured " \
        f"on other validation shards: it is kept as {aside}, and best.pt starts again from ckpt.pt's state (iter " \
        f"{it}) evaluated on these shards" in out, out
    assert aside.read_bytes() == old_best  # the old data's best, whole
    records = [r for r in read_log(out_dir) if "val_loss" in r]
    at_switch = [r for r in records if r["iter"] == it]
    assert len(at_switch) == 2 and at_switch[1]["val_loss"] > at_switch[0]["val_loss"]  # the same state, twice
    after = [r["val_loss"] for r in records if r["iter"] > it]
    assert after == [at_switch[1]["val_loss"]] * 2  # never improved, so only the switch saved ckpt.pt
    _, best = load_checkpoint(str(out_dir / BEST))
    _, latest = load_checkpoint(str(out_dir / CHECKPOINT))
    assert best["data_fingerprint"] == latest["data_fingerprint"] == dataset_fingerprint(str(other))
    assert latest["iter_num"] == it and latest["config"]["data_dir"] == str(other)
    assert best["val_loss"] == min([at_switch[1]["val_loss"]] + after) > ckpt["best_val_loss"]  # never below it
    assert latest["initial_val_loss"] == at_switch[1]["val_loss"]  # the start on these shards
    # resumed again on the same shards: one record a command at its start, as before, and nothing set aside again
    train.main(args + [f"--data_dir={other}", "--max_iters=10", "--init_from=resume"])
    assert "was measured on other validation shards" not in capsys.readouterr().out
    assert sorted(p.name for p in out_dir.glob("best*.pt")) == [aside.name, BEST] and aside.read_bytes() == old_best
    assert [r["iter"] for r in read_log(out_dir) if "val_loss" in r].count(8) == 1
    # a new run in the folder replaces the old run's best states, the one set aside too
    train.main(args + [f"--data_dir={other}", "--max_iters=2", "--overwrite=True"])
    assert not aside.exists()


@pytest.mark.parametrize("fails", ["torch.save", "the log", "Ctrl-C", "the copy to best.pt"])
def test_a_run_continued_on_other_validation_shards_that_cannot_save_leaves_the_folder_as_it_was(
        stdlib_data, tmp_path, monkeypatch, fails):
    """Continued on other validation shards, a run moves best.pt aside at its first write (_start) and logs its first
    evaluation before saving it: a full disk then stopped the command with best.pt gone ('keep the states saved
    before', it said) and the log holding the other data's record at the checkpoint's iter, and a plain resume on
    the old data began with no best.pt. Now the folder is as it was, whichever write fails, or after Ctrl-C; but
    once ckpt.pt records the new shards (only the copy to best.pt failed), the old best stays aside, where a plain
    resume, now on the new shards, keeps it."""
    import numpy as np
    from data.shards import HEADER_BYTES, find_shards
    out_dir, other = tmp_path / "run", tmp_path / "other"
    args = TINY + [f"--out_dir={out_dir}", "--eval_interval=2"]
    train.main(args + [f"--data_dir={stdlib_data}", "--max_iters=4"])
    before = folder_state(out_dir)
    shutil.copytree(stdlib_data, other)
    tokens = np.memmap(find_shards(str(other), "val")[0], dtype=np.uint16, mode="r+", offset=HEADER_BYTES)
    tokens[:64] = 7  # other validation shards
    tokens.flush()
    del tokens

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")
    def ctrl_c(*a, **k):
        raise KeyboardInterrupt
    copy = runfolder.atomic_copy
    if fails in ("torch.save", "Ctrl-C"):
        monkeypatch.setattr(torch, "save", full_disk if fails == "torch.save" else ctrl_c)
    elif fails == "the log":
        monkeypatch.setattr(json, "dumps", lambda *a, **k: full_disk() if "val_loss" in a[0] else "{}")
    else:
        monkeypatch.setattr(runfolder, "atomic_copy", lambda src, dst: full_disk() if dst.endswith(BEST) else
                            copy(src, dst))
    with pytest.raises(SystemExit, match="No space left on device" if fails != "Ctrl-C" else None):
        train.main(args + [f"--data_dir={other}", "--max_iters=6", "--init_from=resume"])
    if fails == "the copy to best.pt":
        aside = out_dir / "best-before-iter4.pt"
        assert aside.read_bytes() == before[BEST] and not (out_dir / BEST).exists()
        monkeypatch.undo()
        train.main(args + ["--max_iters=6", "--init_from=resume"])  # on the new shards, as ckpt.pt records
        assert aside.read_bytes() == before[BEST]
        return
    assert folder_state(out_dir) == before
    monkeypatch.undo()
    train.main(args + ["--max_iters=6", "--init_from=resume"])  # a plain resume: on its own data, its best.pt
    assert [r["iter"] for r in read_log(out_dir)] == [0, 2, 4, 6]


def test_a_run_continued_on_other_validation_shards_killed_before_it_saved_keeps_its_best(stdlib_data, tmp_path):
    """Killed outright (SIGKILL, a power cut) after it moved best.pt aside (_start) and before its first checkpoint,
    a command that continued the run on other validation shards undoes nothing: the run's best is left as
    best-before-iterN.pt, measured on the shards ckpt.pt still records. A plain resume puts it back as best.pt; a
    worse ckpt.pt never becomes best.pt in its place."""
    import numpy as np
    from data.shards import HEADER_BYTES, find_shards
    out_dir, other = tmp_path / "run", tmp_path / "other"
    args = TINY + [f"--out_dir={out_dir}", "--eval_interval=2"]
    train.main(args + [f"--data_dir={stdlib_data}", "--max_iters=4"])
    checkpoint = torch.load(out_dir / CHECKPOINT, weights_only=True)
    checkpoint["val_loss"] = (checkpoint["val_loss"] + checkpoint["initial_val_loss"]) / 2  # worse than best.pt's
    save_checkpoint(checkpoint, str(out_dir / CHECKPOINT))
    best = (out_dir / BEST).read_bytes()
    shutil.copytree(stdlib_data, other)
    tokens = np.memmap(find_shards(str(other), "val")[0], dtype=np.uint16, mode="r+", offset=HEADER_BYTES)
    tokens[:64] = 7  # other validation shards
    tokens.flush()
    del tokens
    killed = subprocess.run([sys.executable, "-c", f"""
import os, signal, runfolder, train
runfolder.save_checkpoint = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
train.main({args + [f"--data_dir={other}", "--max_iters=6", "--init_from=resume"]!r})
"""], cwd=REPO, capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL and not (out_dir / BEST).exists()  # aside when it died
    train.main(args + ["--max_iters=4", "--init_from=resume"])  # a plain resume, with nothing left to train
    assert (out_dir / BEST).read_bytes() == best and not list(out_dir.glob("best-before-*"))


def test_a_full_disk_while_a_resume_with_nothing_to_train_writes_best_pt_is_one_line(stdlib_data, tmp_path,
                                                                                       monkeypatch):
    """A resume with nothing left to train makes best.pt of ckpt.pt where that holds the best state (settle_best,
    as after a run stopped between its two writes): a full disk there is one line, as at every other write, not a
    traceback, and leaves the folder as it was."""
    out_dir = tmp_path / "run"
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--eval_interval=2", "--max_iters=4"]
    train.main(args)
    best = torch.load(out_dir / BEST, weights_only=True)
    best["val_loss"] += 1.0  # ckpt.pt's state the better
    save_checkpoint(best, str(out_dir / BEST))
    before = folder_state(out_dir)

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(runfolder, "atomic_write", full_disk)
    with pytest.raises(SystemExit, match=f"^error: could not write {re.escape(str(out_dir / BEST))}: No space"):
        train.main(args + ["--init_from=resume"])
    assert folder_state(out_dir) == before


def test_a_run_on_a_relative_data_dir_resumes_from_another_working_folder(stdlib_data, tmp_path, monkeypatch):
    """The checkpoint records the data folder whole: from elsewhere, a relative data_dir would name another folder
    (where a dataset of data.ON_FIRST_USE would even be prepared anew, and trained on)."""
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    shutil.copytree(stdlib_data, tmp_path / "here" / "data")
    monkeypatch.chdir(tmp_path / "here")
    out_dir = tmp_path / "run"
    train.main(TINY + ["--data_dir=data", f"--out_dir={out_dir}", "--max_iters=2", "--eval_interval=2"])
    assert load_checkpoint(str(out_dir / "ckpt.pt"))[1]["config"]["data_dir"] == str(tmp_path / "here" / "data")
    monkeypatch.chdir(tmp_path / "elsewhere")
    train.main([f"--out_dir={out_dir}", "--init_from=resume", "--max_iters=4", "--device=cpu"])
    assert read_log(out_dir)[-1]["iter"] == 4 and os.listdir(tmp_path / "elsewhere") == []


def test_a_restored_run_and_a_path_typed_outside_the_root_are_named_as_such(tmp_path, monkeypatch):
    """A run folder that holds only a restored run's log and measurements (lab.repro restore) is not a run to train
    first nor one stopped before its first checkpoint; a relative --out_dir typed in another folder than the root,
    where the root holds that run, says so; the command printed on Ctrl-C names train.py from where it was run."""
    restored = tmp_path / "restored"
    restored.mkdir()
    for name in ("log.jsonl", "measured.json", "measured.npz"):
        (restored / name).write_text("{}")
    assert "only the measurements kept of a run whose checkpoint is gone" in no_checkpoint(str(restored), CHECKPOINT)
    assert "whose checkpoint is gone" in runfolder.RunFolder(str(restored)).describe()
    root = tmp_path / "root"  # a repository's root whose out/ holds a run
    (root / "out").mkdir(parents=True)
    (root / "out" / CHECKPOINT).write_bytes(b"")
    monkeypatch.setattr(runfolder, "REPO", str(root))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert no_checkpoint("out", CHECKPOINT).endswith(f"root has one: run the command from there, or give "
                                                     f"--out_dir={root / 'out'}")
    assert "train it first" in no_checkpoint("nothing-here", CHECKPOINT)
    monkeypatch.chdir(root)
    assert "train it first" in no_checkpoint("nothing-here", CHECKPOINT)  # at the root, as before
    assert runfolder.resume_command(*configure(TrainConfig, ["--out_dir=r"]), 1).startswith("python train.py ")
    monkeypatch.chdir(tmp_path / "elsewhere")
    c, given = configure(TrainConfig, ["--out_dir=r"])
    here = os.path.relpath(os.path.join(root, "train.py"))  # from this folder
    assert shlex.split(runfolder.resume_command(c, given, 1))[:2] == ["python", here]


def test_a_new_run_removes_the_old_runs_measurements_when_it_replaces_the_old_run(stdlib_data, tmp_path):
    out_dir = tmp_path / "run"
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--eval_interval=2", "--max_iters=2"]
    train.main(args)
    for name in ("measured.json", "measured.npz", "evaluated.json"):  # what lab/analyze.py and lab/evaluate.py keep
        (out_dir / name).write_text("the old run's measurement")
    before = folder_state(out_dir)
    with pytest.raises(SystemExit, match="not prepared"):  # failing while starting: nothing changes
        train.main(TINY + [f"--data_dir={tmp_path / 'empty'}", "--dataset=other", f"--out_dir={out_dir}",
                           "--overwrite=True"])
    assert folder_state(out_dir) == before
    train.main(args + ["--overwrite=True"])
    assert sorted(folder_state(out_dir)) == ["best.pt", "ckpt.pt", "log.jsonl"]
    # measurements alone are a record too: a new run replaces them only when told to
    only = tmp_path / "only_measured"
    only.mkdir()
    (only / "measured.json").write_text("{}")
    with pytest.raises(SystemExit, match=r"holds measured.json and no ckpt.pt: .*--overwrite=True"):
        train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={only}", "--max_iters=2"])
    assert folder_state(only) == {"measured.json": b"{}"}


def test_the_divergence_stop_needs_no_log(stdlib_data, tmp_path):
    """The initial validation loss is in the checkpoint: a run resumed without its log.jsonl still stops at
    DIVERGED_FACTOR times it."""
    out_dir = tmp_path / "run"
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--eval_interval=3"]
    train.main(args + ["--max_iters=3"])
    initial = read_log(out_dir)[0]["val_loss"]
    # a checkpoint older than that record: the log's iter-0 record has it (not its last, iter 3's)
    path = str(out_dir / "ckpt.pt")
    _, checkpoint = load_checkpoint(path)
    save_checkpoint({k: v for k, v in checkpoint.items() if k != "initial_val_loss"}, path)
    with pytest.raises(cli.Diverged, match=rf"the run has diverged: .* more than 2x the {initial:.4f} it started from"):
        train.main(args + ["--max_iters=30", "--init_from=resume", "--learning_rate=100"])
    save_checkpoint(checkpoint, path)
    (out_dir / "log.jsonl").unlink()
    with pytest.raises(cli.Diverged, match=rf"the run has diverged: .* more than 2x the {initial:.4f} it started from"):
        train.main(args + ["--max_iters=30", "--init_from=resume", "--learning_rate=100"])
    _, checkpoint = load_checkpoint(str(out_dir / "ckpt.pt"))
    assert checkpoint["iter_num"] == 3 and checkpoint["initial_val_loss"] == pytest.approx(initial)  # not replaced


def test_a_log_copied_in_from_another_run_is_never_read_as_this_ones(stdlib_data, tmp_path, capsys):
    """Run A's ckpt.pt with run B's log.jsonl beside it: the resumed log keeps none of B's records (whose losses and
    measurements are another run's), says so, and reads as A's alone."""
    args = TINY + [f"--data_dir={stdlib_data}", "--eval_interval=2"]
    for name, steps in (("a", 2), ("b", 4)):
        train.main(args + [f"--out_dir={tmp_path / name}", f"--max_iters={steps}"])
    run_a = load_checkpoint(str(tmp_path / "a" / "ckpt.pt"))[1]["run_id"]
    run_b = read_log(tmp_path / "b")[0]["run_id"]
    shutil.copy(tmp_path / "b" / "log.jsonl", tmp_path / "a" / "log.jsonl")
    capsys.readouterr()
    train.main(args + [f"--out_dir={tmp_path / 'a'}", "--max_iters=4", "--init_from=resume"])
    assert f"held records of another run ({run_b}): dropped" in capsys.readouterr().out
    log = read_log(tmp_path / "a")
    assert [r["iter"] for r in log] == [4] and {r.get("run_id") for r in log} == {run_a}


def test_a_log_with_undecodable_bytes_or_malformed_lines_still_resumes(stdlib_data, tmp_path, capsys):
    out_dir = tmp_path / "run"
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--eval_interval=2"]
    train.main(args + ["--max_iters=2"])
    with open(out_dir / "log.jsonl", "ab") as f:
        f.write(b'{"iter": 1, "note": "caf\xe9"}\n[1, 2]\n{"iter": "three"}\n\xff\xfe\x00\n{"iter": 4, "val_lo')
    assert [r["iter"] for r in runfolder.read_jsonl(str(out_dir / "log.jsonl"))] == [0, 2, "three"]
    capsys.readouterr()
    train.main(args + ["--max_iters=4", "--init_from=resume"])
    notes = [line for line in capsys.readouterr().out.splitlines() if "unreadable line" in line]
    assert len(notes) == 1 and "skipped 4 unreadable line(s)" in notes[0], notes
    assert [r["iter"] for r in read_log(out_dir)] == [0, 2, 4]


@pytest.mark.parametrize("name", ["ckpt.pt", "log.jsonl", "best.pt"])
def test_a_run_file_that_is_a_folder_is_one_line_before_any_work(tiny_run, tmp_path, name):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    (run / name).unlink()
    (run / name).mkdir()
    before = folder_state(run)
    for more in (["--init_from=resume", "--max_iters=9"], ["--overwrite=True", "--max_iters=3"]):
        with pytest.raises(SystemExit, match=rf"{run / name} is a folder .* where a run keeps a file: move it away"):
            train.main(TINY + [f"--out_dir={run}", "--device=cpu"] + more)
    assert folder_state(run) == before and (run / name).is_dir()


def test_resume_in_an_out_dir_that_is_a_file_says_so(tmp_path):
    path = tmp_path / "a_file"
    path.write_text("not a run")
    with pytest.raises(SystemExit, match=rf"no checkpoint at {path / 'ckpt.pt'}: {path} is a file, not a folder"):
        train.main([f"--out_dir={path}", "--init_from=resume", "--device=cpu"])


@pytest.mark.parametrize("eval_only", [False, True])
def test_a_resume_on_data_of_another_tokenizer_is_refused(tiny_run, tmp_path, eval_only):
    """Other data, named by the command, is a run's to continue on; data of another tokenizer is not: its ids are all
    below the model's vocab_size (the task's 65 symbols), so no other check sees them, each would mean another token,
    and the checkpoint would then claim the new tokenizer, which sample.py decodes the GPT-2 model's ids with."""
    from data.bigram_backcopy.prepare import prepare
    out_dir, task = tmp_path / "run", tmp_path / "task"
    shutil.copytree(tiny_run, out_dir)
    prepare(out_dir=str(task), train_tokens=20_000, val_tokens=5_000)
    before = folder_state(out_dir)
    more = ["--eval_only"] if eval_only else ["--max_iters=8"]
    with pytest.raises(SystemExit) as exit_info:
        train.main([f"--out_dir={out_dir}", "--init_from=resume", f"--data_dir={task}", "--device=cpu", *more])
    message = str(exit_info.value.code)
    assert message == (f"error: {out_dir / 'ckpt.pt'} was trained on token ids of the gpt2 tokenizer, but {task} holds "
                       "ids of symbols-64: each id would mean another token. Continue on data of gpt2 (leave "
                       "--dataset and --data_dir out for the run's own), or start a new run on this data in another "
                       "--out_dir"), message
    assert folder_state(out_dir) == before


def test_the_runs_own_data_prepared_again_with_another_tokenizer_names_the_command_that_made_it(tmp_path):
    """The run's own data, prepared again in place with another tokenizer, and a resume that names no data: the
    advice is to prepare the data the run trained on again (the command that made it), not to leave out
    --dataset and --data_dir, which this command did."""
    from data.bigram_backcopy.prepare import prepare
    data, out_dir = tmp_path / "data", tmp_path / "run"
    prepare(out_dir=str(data), train_tokens=20_000, val_tokens=5_000)
    train.main(TINY + [f"--data_dir={data}", f"--out_dir={out_dir}", "--max_iters=2", "--eval_interval=2"])
    prepare(out_dir=str(data), train_tokens=20_000, val_tokens=5_000, vocab=32)
    with pytest.raises(SystemExit) as exit_info:
        train.main([f"--out_dir={out_dir}", "--init_from=resume", "--max_iters=4", "--device=cpu"])
    message = str(exit_info.value.code)
    assert "leave --dataset and --data_dir out" not in message, message
    assert f"(it was made by: python data/bigram_backcopy/prepare.py --out_dir {data})" in message, message


@pytest.mark.parametrize("overwrite", [[], ["--overwrite=True"]])
def test_a_new_run_in_a_datasets_folder_is_refused(stdlib_data, tmp_path, overwrite):
    """--out_dir naming the data's folder (the --data_dir value given to both keys, say): the run's checkpoints and
    log went in among the shards, where a later preparation of the dataset refuses the folder for them. A resume
    there says the folder holds a dataset; a new run, even with --overwrite=True, is refused as early."""
    data = tmp_path / "data"
    shutil.copytree(stdlib_data, data)
    before = folder_state(data)
    with pytest.raises(SystemExit) as exit_info:
        train.main(TINY + [f"--data_dir={data}", f"--out_dir={data}", "--max_iters=1", *overwrite])
    message = str(exit_info.value.code)
    assert message.startswith(f"error: --out_dir={data} holds a dataset (its meta.json and shards): ") and \
        "--out_dir=out/NAME" in message and "\n" not in message, message
    assert folder_state(data) == before


def test_a_best_pt_of_another_run_is_refused_on_resume(tiny_run, stdlib_data, tmp_path):
    """best.pt copied in from another run (another model here): the run would measure itself against it and say
    best.pt keeps a state it never had."""
    other = tmp_path / "other"
    train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={other}", "--n_embd=64", "--max_iters=2",
                       "--eval_interval=2"])
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    shutil.copy(other / "best.pt", run / "best.pt")
    before = folder_state(run)
    with pytest.raises(SystemExit, match=rf"{run / 'best.pt'} is not a state of the run in {run / 'ckpt.pt'}: it has "
                                         r"run id \w+ \(this run: \w+\), n_embd=64 \(this run: 32\).*Move it away"):
        train.main([f"--out_dir={run}", "--init_from=resume", "--max_iters=9", "--device=cpu"])
    assert folder_state(run) == before
    # this run's own best.pt, saved while the run computed another way (model.RUNTIME_FLAGS, which a resume may
    # change): the same model, so the same run
    _, best = load_checkpoint(os.path.join(tiny_run, "best.pt"))
    best["model_args"].update(loss_chunk=0, attn_backend="torch")
    save_checkpoint(best, str(run / "best.pt"))
    folder = runfolder.RunFolder(str(run))
    folder.check_same_run(runfolder.saved_state(folder.best_path, whose=True), load_checkpoint(folder.ckpt_path)[1])


def test_ctrl_c_while_reading_the_checkpoint_is_the_ctrl_c_line(tiny_run, monkeypatch, capsys):
    def interrupted(path):
        raise KeyboardInterrupt
    monkeypatch.setattr(runfolder, "read_checkpoint", interrupted)
    with pytest.raises(BaseException) as exit_info:  # before: KeyboardInterrupt's traceback
        train.main([f"--out_dir={tiny_run}", "--init_from=resume", "--max_iters=9", "--device=cpu"])
    assert exit_info.type is SystemExit and exit_info.value.code == 130
    assert capsys.readouterr().err == (f"interrupted while starting: {tiny_run}/ckpt.pt holds iter 6. Continue with: "
                                       f"python train.py --device=cpu --max_iters=9 --out_dir={tiny_run} "
                                       "--init_from=resume\n")  # max_iters=9, not the run's 6: what was asked


def test_a_state_not_saved_for_nan_weights_says_what_is_kept_truly(stdlib_data, tmp_path, monkeypatch, capsys):
    """A new run whose weights went NaN before its first ckpt.pt: the line names best.pt's initial state, never a
    ckpt.pt that does not exist."""
    poison_forward(monkeypatch, bad_calls=set(), break_weights_at=1)
    out_dir = tmp_path / "run"
    train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--max_iters=2", "--eval_interval=2"])
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("not saving"))
    assert "no ckpt.pt was saved; best.pt holds iter 0" in line, line
    assert not (out_dir / "ckpt.pt").exists()


def test_weights_gone_nan_are_never_saved_even_where_the_val_loss_is_finite(stdlib_data, tmp_path, monkeypatch, capsys):
    """A NaN in a row of the token embedding that no token of the data reads (the last id; lm_head untied) leaves the
    validation loss finite: the state is not saved all the same, as no non-finite state ever is."""
    forward = model_py.GPT.forward

    def nan_row(self, idx, targets=None):
        if self.training:
            self.transformer.wte.weight.data[-1] = float("nan")
        return forward(self, idx, targets)
    monkeypatch.setattr(model_py.GPT, "forward", nan_row)
    out_dir = tmp_path / "run"
    train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--max_iters=2", "--eval_interval=2",
                       "--tie_embeddings=False"])
    assert [(r["iter"], r["val_loss"] is not None) for r in read_log(out_dir)] == [(0, True), (2, True)]
    assert "not saving: the validation loss or the weights are not finite" in capsys.readouterr().out
    assert not (out_dir / "ckpt.pt").exists() and load_checkpoint(str(out_dir / "best.pt"))[1]["iter_num"] == 0


def test_resume_and_overwrite_together_are_refused(tiny_run, tmp_path):
    """Continue the run, or replace it: told both, the command did one silently (it resumed)."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    before = folder_state(run)
    with pytest.raises(SystemExit, match=r"init_from='resume' continues the run .* overwrite=True replaces it .*: give "
                                         r"one of them"):
        train.main([f"--out_dir={run}", "--init_from=resume", "--overwrite=True", "--max_iters=9", "--device=cpu"])
    assert folder_state(run) == before


def test_a_results_folder_made_by_a_command_that_failed_is_taken_away(tmp_path):
    """runfolder.claimed (lab.analyze's and lab.evaluate's out_dir): a folder it made that holds only its lock when
    the command stops (offline, say, before anything was written) is gone; one that was there before is left as it
    was; one that holds results keeps them and its lock."""
    new, kept, old = tmp_path / "new", tmp_path / "kept", tmp_path / "old"
    old.mkdir()
    for folder, write in ((new, False), (kept, True), (old, False)):
        with pytest.raises(RuntimeError):
            with runfolder.claimed(str(folder)):
                if write:
                    (folder / "summary.json").write_text("{}")
                raise RuntimeError("the download failed")
    assert not new.exists() and sorted(os.listdir(kept)) == [".lock", "summary.json"] and os.listdir(old) == []


def test_a_lock_file_taken_away_while_it_was_being_locked_is_locked_again(tmp_path, monkeypatch):
    """A holds the folder and, failing, takes its .lock away; B had opened that .lock and gets its lock once A lets
    go: B must then lock the .lock now in the folder (which C would), or B and C would both own the folder."""
    import fcntl
    folder = tmp_path / "out"
    real, calls = fcntl.flock, []

    def flock(f, op):  # B's first lock: A removes the file B opened, just before B gets it
        if not calls:
            os.unlink(folder / ".lock")
            (folder / ".lock").write_text("")  # C's new lock file
        calls.append(op)
        return real(f, op)
    monkeypatch.setattr(fcntl, "flock", flock)
    lock = runfolder.claim_folder(str(folder))
    mine, there = os.fstat(lock.fileno()), os.stat(folder / ".lock")
    assert (mine.st_ino, mine.st_dev) == (there.st_ino, there.st_dev) and len(calls) == 2
    lock.close()

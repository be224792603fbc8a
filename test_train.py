"""Tests of train.py and sample.py on tiny models and a slice of real data (CPU, about a minute)."""

import json
import os
import signal
import subprocess
import sys

import pytest
import torch

import model as model_py
import sample
import train
from data.pystdlib.prepare import prepare as prepare_pystdlib

REPO = os.path.dirname(os.path.abspath(__file__))
TINY = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=4", "--eval_iters=2",
        "--log_interval=1", "--warmup_iters=2", "--learning_rate=3e-3", "--device=cpu"]
CKPT_KEYS = {"model", "optimizer", "scaler", "model_args", "iter_num", "val_loss", "best_val_loss", "config", "rng",
             "loader", "health"}


def run_cli(*args, check=True, timeout=300):
    """Run a script of the repo as a user would; returns the CompletedProcess."""
    result = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{args} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def read_log(out_dir):
    with open(os.path.join(out_dir, "log.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="session")
def stdlib_data(tmp_path_factory):
    """The first 150 files of the standard library, prepared as the default dataset is."""
    data_dir = str(tmp_path_factory.mktemp("pystdlib"))
    prepare_pystdlib(out_dir=data_dir, max_files=150, workers=2)
    return data_dir


@pytest.fixture(scope="session")
def tiny_run(stdlib_data, tmp_path_factory):
    """A finished 6-iteration run: its out_dir."""
    out_dir = str(tmp_path_factory.mktemp("tiny_run"))
    train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--max_iters=6", "--eval_interval=3"])
    return out_dir


# ----------------------------------------------------------------------------
# training end to end

def test_default_dataset_is_prepared_on_first_use_and_the_loss_falls(tmp_path):
    data_dir, out_dir = tmp_path / "pystdlib", tmp_path / "out"
    result = run_cli("train.py", f"--data_dir={data_dir}", f"--out_dir={out_dir}", "--n_layer=2", "--n_head=2",
                     "--n_embd=64", "--block_size=64", "--batch_size=8", "--max_iters=80", "--lr_decay_iters=80",
                     "--warmup_iters=10", "--learning_rate=3e-3", "--min_lr=3e-4", "--eval_interval=40", "--eval_iters=4")
    assert "preparing the default dataset" in result.stdout
    assert json.loads((data_dir / "meta.json").read_text())["train_tokens"] > 1_000_000

    log = read_log(out_dir)
    assert [r["iter"] for r in log] == [0, 40, 80]
    assert log[-1]["val_loss"] < log[0]["val_loss"] - 3.0, [r["val_loss"] for r in log]  # measured: 10.4 -> 4.1
    last = log[-1]
    assert 0 < last["first_token_attn"] < 1 and last["max_act"] > 0 and 0 < last["gate_mean"] < 1
    assert last["train_loss"] > 0 and last["tokens"] == 80 * 8 * 64 and last["tokens_per_s"] > 0
    assert last["mfu"] is None  # no known peak FLOP/s for a CPU
    assert last["loss_spikes"] >= 0 and last["nonfinite_steps"] == 0
    assert len(last["layers"]["max_act"]) == 2
    assert "done: 80 iterations" in result.stdout and "val loss" in result.stdout and "gate mean" in result.stdout

    model, checkpoint = train.load_checkpoint(str(out_dir / "ckpt.pt"))
    assert set(checkpoint) == CKPT_KEYS
    assert checkpoint["iter_num"] == 80 and checkpoint["config"]["max_iters"] == 80
    assert checkpoint["model_args"]["n_embd"] == 64 and model.config.gate == "g1"
    assert not any(k.startswith("_orig_mod.") for k in checkpoint["model"])


def test_resume_continues_the_run_exactly(stdlib_data, tmp_path):
    common = TINY + [f"--data_dir={stdlib_data}", "--dropout=0.1", "--eval_interval=2", "--lr_decay_iters=8"]
    train.main(common + [f"--out_dir={tmp_path / 'straight'}", "--max_iters=8"])
    train.main(common + [f"--out_dir={tmp_path / 'split'}", "--max_iters=4"])
    train.main(common + [f"--out_dir={tmp_path / 'split'}", "--max_iters=8", "--init_from=resume"])

    straight, split = read_log(tmp_path / "straight"), read_log(tmp_path / "split")
    assert [r["iter"] for r in split] == [r["iter"] for r in straight] == [0, 2, 4, 6, 8]
    for a, b in zip(straight, split):
        for key in ("train_loss", "val_loss", "lr", "max_act", "gate_mean"):
            assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-7), (a["iter"], key)
    _, ckpt_a = train.load_checkpoint(str(tmp_path / "straight" / "ckpt.pt"))
    _, ckpt_b = train.load_checkpoint(str(tmp_path / "split" / "ckpt.pt"))
    for name, tensor in ckpt_a["model"].items():
        torch.testing.assert_close(tensor, ckpt_b["model"][name], rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------------------
# checkpoints survive crashes

def test_failed_checkpoint_write_keeps_the_previous_one(tiny_run, monkeypatch):
    path = os.path.join(tiny_run, "ckpt.pt")
    before, files = open(path, "rb").read(), sorted(os.listdir(tiny_run))
    _, checkpoint = train.load_checkpoint(path)

    def broken_save(obj, f):
        f.write(b"garbage, half a checkpoint")
        raise OSError("no space left on device")
    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="no space left"):
        train.save_checkpoint(checkpoint, path)
    assert open(path, "rb").read() == before and sorted(os.listdir(tiny_run)) == files
    assert train.load_checkpoint(path)[1]["iter_num"] == 6


def test_killed_while_saving_leaves_a_loadable_checkpoint(stdlib_data, tmp_path):
    out_dir = tmp_path / "run"
    args = TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--eval_interval=2"]
    train.main(args + ["--max_iters=2"])
    path = out_dir / "ckpt.pt"
    before = path.read_bytes()
    # a process that is SIGKILLed halfway through writing a checkpoint
    killed = subprocess.run([sys.executable, "-c", f"""
import os, signal, torch, train
_, checkpoint = train.load_checkpoint({str(path)!r})
def dying_save(obj, f):
    f.write(b"the first half of a checkpoint")
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)
torch.save = dying_save
train.save_checkpoint(checkpoint, {str(path)!r})
"""], cwd=REPO, capture_output=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL
    assert path.read_bytes() == before
    assert [p.name for p in out_dir.iterdir() if p.name.endswith(".tmp")]  # its partial file, under another name
    train.main(args + ["--max_iters=4", "--init_from=resume"])  # resumes from the intact file, clears the debris
    assert sorted(p.name for p in out_dir.iterdir()) == ["ckpt.pt", "log.jsonl"]
    assert [r["iter"] for r in read_log(out_dir)] == [0, 2, 4]


# ----------------------------------------------------------------------------
# non-finite losses

def poison_forward(monkeypatch, bad_calls, break_weights_at=None):
    """Make training forward passes number bad_calls (1-based) return a NaN loss; at call break_weights_at,
    also put a NaN into the weights, as a diverged run would."""
    original, calls = model_py.GPT.forward, [0]

    def forward(self, idx, targets=None, return_stats=False):
        out = original(self, idx, targets, return_stats)
        if not self.training or targets is None:
            return out
        calls[0] += 1
        if calls[0] == break_weights_at:
            self.lm_head.weight.data[0, 0] = float("nan")  # .data: behind autograd's back, as an optimizer does
        if calls[0] in bad_calls:
            return out[0], out[1] * float("nan")
        return out
    monkeypatch.setattr(model_py.GPT, "forward", forward)


def test_nonfinite_steps_are_skipped_and_counted(stdlib_data, tmp_path, monkeypatch):
    poison_forward(monkeypatch, bad_calls={3, 5})
    out_dir = tmp_path / "run"
    train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--max_iters=8", "--eval_interval=4"])
    log = read_log(out_dir)
    assert log[-1]["iter"] == 8 and log[-1]["nonfinite_steps"] == 2
    assert all(r["val_loss"] is not None for r in log) and log[-1]["train_loss"] is not None
    # an optimizer step with NaN gradients would have made every weight NaN
    _, checkpoint = train.load_checkpoint(str(out_dir / "ckpt.pt"))
    assert all(torch.isfinite(t).all() for t in checkpoint["model"].values())
    assert checkpoint["health"]["nonfinite_steps"] == 2


def test_a_diverged_run_stops_and_keeps_the_last_good_checkpoint(stdlib_data, tmp_path, monkeypatch, capsys):
    poison_forward(monkeypatch, bad_calls=set(range(7, 100)), break_weights_at=7)  # from step 6 on
    out_dir = tmp_path / "run"
    with pytest.raises(SystemExit, match=r"5 non-finite steps in a row \(max_nonfinite=5\).*last good state"):
        train.main(TINY + [f"--data_dir={stdlib_data}", f"--out_dir={out_dir}", "--max_iters=30",
                           "--eval_interval=3", "--max_nonfinite=5"])
    assert "not saving" in capsys.readouterr().out  # the eval at iter 9 saw NaN weights
    log = read_log(out_dir)
    assert [r["iter"] for r in log] == [0, 3, 6, 9]
    assert log[-1]["val_loss"] is None and log[-1]["nonfinite_steps"] == 3
    _, checkpoint = train.load_checkpoint(str(out_dir / "ckpt.pt"))
    assert checkpoint["iter_num"] == 6
    assert all(torch.isfinite(t).all() for t in checkpoint["model"].values())


# ----------------------------------------------------------------------------
# clear errors

@pytest.mark.parametrize("args, message", [
    (["--n_layers=3"], "unknown key 'n_layers' (did you mean 'n_layer'?)"),
    (["--n_layer=two"], "n_layer must be int, got 'two'"),
    (["--max_iters=1.5"], "max_iters must be int, got 1.5"),
    (["--compile=1"], "compile must be bool, got 1"),
    (["--n_layer"], "--n_layer: write --key=value"),
    (["no/such/config.py"], "config file no/such/config.py not found"),
    (["--gate=g7"], "GPTConfig.gate='g7' is not valid"),
    (["--gate=none", "--gate_act=silu"], "gate_act='silu' has no effect with gate='none'"),
    (["--init_from=gpt2"], "init_from='gpt2' is not valid"),
])
def test_bad_keys_and_values(args, message):
    with pytest.raises(SystemExit) as exit_info:
        train.main(args)
    assert message in str(exit_info.value.code)


def test_config_files(tmp_path):
    good = tmp_path / "good.py"
    good.write_text("import math\nlearning_rate = 1\nn_layer = 2 * 3\ngate = 'g2'\n")
    config = train.configure(train.DEFAULTS, [str(good), "--n_kv_head=2", "--mlp_hidden=None"], train.KEY_TYPES)
    assert config["learning_rate"] == 1.0 and type(config["learning_rate"]) is float  # ints are fine for floats
    assert (config["n_layer"], config["gate"], config["n_kv_head"], config["mlp_hidden"]) == (6, "g2", 2, None)
    quoted = train.configure(train.DEFAULTS, ["--gate='g3'", "--wandb_run_name=42", "--norm=dyt"], train.KEY_TYPES)
    assert (quoted["gate"], quoted["wandb_run_name"], quoted["norm"]) == ("g3", "42", "dyt")  # quotes optional
    for name in os.listdir(os.path.join(REPO, "config")):  # the shipped configs name only real keys
        assert train.configure(train.DEFAULTS, [f"config/{name}"], train.KEY_TYPES)["dataset"]
    bad = tmp_path / "bad.py"
    bad.write_text("learning_rat = 1e-3\n")
    with pytest.raises(SystemExit, match="bad.py: unknown key 'learning_rat'"):
        train.configure(train.DEFAULTS, [str(bad)], train.KEY_TYPES)


def test_missing_dataset_names_the_prepare_command(tmp_path):
    with pytest.raises(SystemExit, match=r"not prepared.*Prepare it first: python data/openwebtext/prepare.py"):
        train.main([f"--data_dir={tmp_path}", "--dataset=openwebtext"])
    with pytest.raises(SystemExit, match="python data/textdir/prepare.py --src DIR --name mycode"):
        train.main([f"--data_dir={tmp_path}", "--dataset=mycode"])


def test_cli_errors_exit_nonzero_with_the_message():
    result = run_cli("train.py", "--batch_sise=4", check=False)
    assert result.returncode == 1 and "unknown key 'batch_sise' (did you mean 'batch_size'?)" in result.stderr
    assert "Traceback" not in result.stderr


# ----------------------------------------------------------------------------
# several processes

def test_ddp_on_cpu_with_gloo_matches_one_process(stdlib_data, tmp_path):
    """2 processes x 2 sequences must train exactly like 1 process x 4: every rank takes its half of the same
    global batch, gradients are averaged, validation batches are shared out and the losses summed."""
    common = TINY + [f"--data_dir={stdlib_data}", "--max_iters=6", "--eval_interval=3"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             "train.py", *common, f"--out_dir={tmp_path / 'ddp'}", "--backend=gloo",
                             "--batch_size=2", "--gradient_accumulation_steps=2", "--eval_iters=4"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr  # torchrun: 0 only if both ranks exit 0
    assert result.stdout.count("done: 6 iterations") == 1  # only rank 0 prints...
    assert sorted(os.listdir(tmp_path / "ddp")) == ["ckpt.pt", "log.jsonl"]  # ...and writes
    train.main(common + [f"--out_dir={tmp_path / 'one'}", "--batch_size=4", "--eval_iters=2"])

    ddp, one = read_log(tmp_path / "ddp"), read_log(tmp_path / "one")
    assert [r["iter"] for r in ddp] == [0, 3, 6]
    for a, b in zip(ddp, one):
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-4)
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
    assert ddp[-1]["val_loss"] < ddp[0]["val_loss"]


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


def test_sample_without_a_checkpoint(tmp_path):
    with pytest.raises(SystemExit, match="no checkpoint at"):
        sample.main([f"--out_dir={tmp_path}"])

"""
The sink lab: the Bigram-Backcopy task (data/bigram_backcopy/prepare.py), its symbol tokenizer, and the science
the lab exists to show, trained for real: on this task a baseline grows an attention sink on the BOS token and G1
does not. CPU only; the two trainings take about half a minute.

    python -m pytest -q tests/test_sink_lab.py
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import CORES
from data.bigram_backcopy.prepare import copies_next, ideal_loss, make_chain, pair_chain, prepare, window_ideal_loss
from data.shards import SymbolTokenizer, get_tokenizer, read_meta, read_shard
from probe import MECHANISM, SINK_HEAD_THRESHOLD

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above tests/


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """The task as config/sink_lab.py trains on it (the defaults), in a folder of its own."""
    out = tmp_path_factory.mktemp("bigram_backcopy")
    return str(out), prepare(out_dir=str(out))


def streams(data_dir):
    return {split: np.concatenate([read_shard(os.path.join(data_dir, name)) for name in meta_shards])
            for split, meta_shards in (("train", read_meta(data_dir)["train_shards"]),
                                       ("val", read_meta(data_dir)["val_shards"]))}


def test_the_text_follows_the_copy_rule_and_the_chain(task):
    """After a trigger that follows a non-trigger, the next symbol is the one before the trigger, always; everywhere
    else the next symbol follows the chain's row: the empirical bigram frequencies match the matrix."""
    data_dir, meta = task
    P, triggers = make_chain(64, 3, 0.1, 0)
    assert meta["triggers"] == triggers and meta["symbols"] == 64 and meta["tokenizer"] == "symbols-64"
    is_trigger = np.zeros(64, dtype=bool)
    is_trigger[triggers] = True
    x = streams(data_dir)["train"].astype(np.int64)
    assert x.max() < 64  # the BOS token (64) is never in the text: it only starts the windows
    t = np.arange(1, len(x) - 1)
    t = t[(t % 8192 != 0) & ((t + 1) % 8192 != 0)]  # written as walks of 8192 symbols: a rule never spans two
    copy = t[is_trigger[x[t]] & ~is_trigger[x[t - 1]]]
    assert len(copy) > 0.08 * len(x) and (x[copy + 1] == x[copy - 1]).all()
    chain = np.setdiff1d(t, copy)
    counts = np.zeros((64, 64))
    np.add.at(counts, (x[chain], x[chain + 1]), 1)
    seen = counts.sum(1) > 5000  # rows visited often enough to estimate
    assert seen.sum() >= 20
    freq = counts[seen] / counts[seen].sum(1, keepdims=True)
    assert np.abs(freq - P[seen]).max() < 0.02
    # the triggers are the symbols the chain alone visits most: its stationary distribution, by power iteration
    pi = np.full(64, 1 / 64)
    for _ in range(10_000):
        pi = pi @ P
    assert triggers == sorted(np.argsort(-pi)[:3].tolist())


def test_the_ideal_loss_is_what_the_true_chain_scores(task):
    """meta.json's ideal loss is the cross-entropy of the process's own next-symbol distribution on the val text:
    0 where a copy follows (the true model is certain), -log P[row] of the symbol the chain took elsewhere, which
    averages to the row's entropy."""
    data_dir, meta = task
    P, triggers = make_chain(64, 3, 0.1, 0)
    is_trigger = np.zeros(64, dtype=bool)
    is_trigger[triggers] = True
    walks = streams(data_dir)["val"].astype(np.int64).reshape(-1, 8192)
    follows = copies_next(walks, is_trigger)[:, :-1]
    scored = np.where(follows, 0.0, -np.log(P[walks[:, :-1], walks[:, 1:]]))
    assert meta["ideal_loss"] == pytest.approx(scored.mean(), rel=0.02)
    assert meta["ideal_loss"] == pytest.approx(ideal_loss(P, is_trigger, walks), rel=1e-12)
    assert meta["copy_share"] == pytest.approx(follows.mean(), rel=1e-12) and 0.05 < meta["copy_share"] < 0.2
    assert meta["trigger_share"] == pytest.approx(is_trigger[walks].mean(), rel=1e-12)


def test_the_task_is_fixed_by_its_settings(tmp_path):
    """The same settings give the same shards byte for byte; another chain seed another chain and other triggers."""
    a = prepare(out_dir=str(tmp_path / "a"), train_tokens=20_000, val_tokens=5_000)
    b = prepare(out_dir=str(tmp_path / "b"), train_tokens=20_000, val_tokens=5_000)
    c = prepare(out_dir=str(tmp_path / "c"), train_tokens=20_000, val_tokens=5_000, seed=1)
    assert (streams(str(tmp_path / "a"))["train"] == streams(str(tmp_path / "b"))["train"]).all()
    assert a["triggers"] == b["triggers"] and a["ideal_loss"] == b["ideal_loss"]
    assert (streams(str(tmp_path / "a"))["train"] != streams(str(tmp_path / "c"))["train"]).any()
    assert a["triggers"] != c["triggers"] and a["train_tokens"] == 20_000 and a["val_tokens"] == 5_000
    d = prepare(out_dir=str(tmp_path / "d"), train_tokens=5_000, val_tokens=5_000, alpha=0.5)
    assert (c["seed"], c["alpha"], d["seed"], d["alpha"]) == (1, 0.1, 0, 0.5)  # what rebuilds the chain (make_chain)
    # train and val are drawn with streams of their own: of the same length, they are other texts
    assert (streams(str(tmp_path / "d"))["train"] != streams(str(tmp_path / "d"))["val"]).mean() > 0.5
    # each setting out of range is refused by its own message (vocab=1 is also fewer than the 3 triggers)
    for bad, words in ((dict(triggers=64), "triggers=64 must be at least 1 and fewer than vocab=64"),
                       (dict(triggers=0), "triggers=0 must be at least 1"), (dict(alpha=0.0), "alpha=0.0"),
                       (dict(vocab=1), "vocab=1: the chain needs at least 2 symbols"),
                       (dict(val_tokens=1), "val_tokens=1 must be at least 2"),
                       (dict(train_tokens=1), "train_tokens=1 must be at least 2")):
        with pytest.raises(ValueError, match=words):
            prepare(out_dir=str(tmp_path / "bad"), **bad)
    assert not (tmp_path / "bad").exists()


def test_the_copy_rule_and_the_ideal_loss_on_a_text_by_hand():
    """s2 and s3 are triggers: a copy follows a trigger that follows a non-trigger (not one at the start, not one after
    another trigger); the ideal loss is 0 there and the entropy of the current symbol's row elsewhere, over all
    positions but the last (which predicts nothing). A row with zeros has a finite entropy."""
    is_trigger = np.array([False, False, True, True])
    x = np.array([[2, 0, 2, 0, 3, 2, 1, 1]])
    assert copies_next(x, is_trigger).tolist() == [[False, False, True, False, True, False, False, False]]
    P = np.array([[0.5, 0.5, 0, 0], [1, 0, 0, 0], [0.25, 0.25, 0.25, 0.25], [0.25, 0.25, 0.5, 0]])
    # positions 0..6 hold s2 s0 s2 s0 s3 s2 s1: ln4 + ln2 + 0 + ln2 + 0 + ln4 + 0 = 6 ln2, over 7
    assert ideal_loss(P, is_trigger, x) == pytest.approx(6 * np.log(2) / 7, rel=1e-12)


@pytest.mark.parametrize("bos", [True, False])
def test_a_windows_ideal_loss_is_the_best_predictor_of_every_sequence(bos):
    """window_ideal_loss against brute force on a small chain with a zero in P: every text of 6 symbols, drawn from
    the stationary text (pair_chain's pairs: stationary indeed), weighed by its probability; the window is BOS and the
    last 5 (or the last 5 alone), and each prediction is the true conditional distribution of the next symbol given
    every token the window shows, summed over all that it hides (the symbol before the window)."""
    import itertools
    P = np.array([[0.1, 0.6, 0.3], [0.5, 0.0, 0.5], [0.2, 0.2, 0.6]])
    is_trigger = np.array([False, True, False])
    following, pairs = pair_chain(P, is_trigger)
    assert pairs.sum() == pytest.approx(1) and np.einsum("ab,abc->bc", pairs, following) == pytest.approx(pairs)
    n = 6  # s0 (never shown) s1 ... s5
    prob = {}
    for text in itertools.product(range(3), repeat=n):
        p = pairs[text[0], text[1]] * np.prod([following[text[t - 2], text[t - 1], text[t]] for t in range(2, n)])
        prob[text] = p
    predictions = n - 1 - (not bos)  # BOS s1..s4 predicts s1..s5; without BOS, s1..s4 predicts s2..s5
    loss = 0.0
    for k in range(predictions):
        seen = slice(1, 1 + k + (not bos))  # the symbols the k-th prediction sees
        target = 1 + k + (not bos)
        joint, marginal = {}, {}
        for text, p in prob.items():
            key = text[seen]
            joint[key, text[target]] = joint.get((key, text[target]), 0) + p
            marginal[key] = marginal.get(key, 0) + p
        loss -= sum(p * np.log(p / marginal[key]) for (key, _), p in joint.items() if p > 0)
    assert window_ideal_loss(P, is_trigger, predictions, bos) == pytest.approx(loss / predictions, rel=1e-9)
    # a long window comes close to the text's entropy rate, and is always above it
    rate = window_ideal_loss(P, is_trigger, 10**9, bos)
    logs = np.log(np.where(following > 0, following, 1))  # 0 log 0 = 0
    assert window_ideal_loss(P, is_trigger, 64, bos) > rate and rate == pytest.approx(
        float(-(pairs[:, :, None] * following * logs).sum()), rel=1e-6)


def test_the_symbol_tokenizer():
    enc = get_tokenizer("symbols-64")
    assert isinstance(enc, SymbolTokenizer) and enc.n_vocab == 65 and enc.eot_token == 64
    assert enc.encode("<|endoftext|> s3  s17\ns0", allowed_special={"<|endoftext|>"}) == [64, 3, 17, 0]
    assert enc.decode([64, 3, 17, 63]) == "<|endoftext|> s3 s17 s63"
    assert enc.encode_ordinary(enc.decode([5, 9])) == [5, 9]
    for text in ("s64", "x3", "s", "<|endoftext|>"):  # out of range, not a symbol, special not allowed
        with pytest.raises(ValueError, match="is not a token of symbols-64"):
            enc.encode_ordinary(text)
    with pytest.raises(ValueError, match="symbols-N"):
        get_tokenizer("symbols-many")


# ----------------------------------------------------------------------------
# The science: the lab's recipe, trained with train.py as a user runs it

def start_training(data_dir, out_dir, *flags, threads):
    """config/sink_lab.py as `python train.py` runs it, evaluated at the start and the end only, on `threads` threads:
    the process, started."""
    cmd = [sys.executable, "train.py", "config/sink_lab.py", f"--data_dir={data_dir}", f"--out_dir={out_dir}",
           "--eval_interval=1000", "--eval_iters=4", *flags]
    return subprocess.Popen(cmd, cwd=REPO, env=dict(os.environ, OMP_NUM_THREADS=str(threads)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process, out_dir):
    """The last record of a training started by start_training, and what it printed, once it ends."""
    said, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, said + stderr
    with open(os.path.join(out_dir, "log.jsonl")) as f:
        return [json.loads(line) for line in f][-1], said


@pytest.fixture(scope="module")
def lab(tmp_path_factory, task):
    root = tmp_path_factory.mktemp("lab")
    data_dir = str(root / "bigram_backcopy")  # empty: the baseline's run generates the task there, as in data/
    # The two trainings are independent, so they run side by side, each on its share of the cores (on 2 cores: 29 s,
    # where one after the other on both took 35 s). G1 trains on the task fixture's copy of the same task (the same
    # defaults, so the same shards), not on the folder the baseline is still writing.
    threads = max(1, CORES // 2)  # CORES: this process's share (conftest.py; a pytest-xdist worker's)
    baseline = start_training(data_dir, str(root / "baseline"), "--gate=none", threads=threads)
    g1 = start_training(task[0], str(root / "g1"), threads=threads)  # G1 elementwise, the model's default gate
    baseline, said = finished(baseline, str(root / "baseline"))
    assert "preparing the dataset bigram_backcopy" in said
    g1, _ = finished(g1, str(root / "g1"))
    return baseline, g1, said, root


def test_the_baseline_grows_an_attention_sink_and_g1_does_not(lab):
    """The papers' central claim at laptop scale: the baseline's one head parks the attention of the positions that
    have nothing to do on the BOS token (a sink head by Gu et al.'s threshold), and still attends to the previous
    token where the copy needs it. G1's gate closes at those positions instead, so no sink forms; both learn the task
    (the same loss, near the task's ideal)."""
    baseline, g1, _, _ = lab
    assert baseline["iter"] == g1["iter"] == 2000
    # What holds at every seed of the lab's study (results/sink_lab/: the baseline's F-Attn 0.87-0.89 in 20 of 20
    # seeds, G1's never a sink head) with a wide margin, so that no seed and no CPU's rounding decides the test.
    # Uniform attention over a window of 64 would put about 0.06 on the first token; a sink puts most of it there.
    assert baseline["first_token_attn"] > 0.6 and baseline["sink_heads"] == 1.0
    assert baseline["first_token_attn_other"] > 0.6 and baseline["first_token_attn_trigger"] < 0.05
    assert baseline["layers"]["value_norm_ratio"][0] < 0.5  # the sink key's value is small: attending there adds little
    assert baseline["prev_attn_trigger"] > 0.8 and g1["prev_attn_trigger"] > 0.8
    # G1's attention elsewhere is free to wander while its gate is closed (0.02-0.18 over the study's seeds): no sink
    # head, and far less on the first token than the baseline
    assert g1["sink_heads"] == 0.0 and g1["first_token_attn"] < SINK_HEAD_THRESHOLD < baseline["first_token_attn"] / 2
    assert g1["gate_mean_other"] < 0.1 and g1["gate_mean_trigger"] > g1["gate_mean_other"] + 0.3
    assert abs(baseline["val_loss"] - g1["val_loss"]) < 0.02 and baseline["val_loss"] < 2.2


def test_train_prints_the_mechanism_of_the_lab(lab):
    """What a student reads at the end of the run: the sink's pieces, trigger positions against the others, each
    named and written as probe.MEASURES has it (G1's gate at the triggers and elsewhere too)."""
    baseline, g1, said, _ = lab
    done = [line for line in said.splitlines() if line.startswith("done:")][0]
    assert "; the mechanism: " in done
    for m in MECHANISM:
        if m.key.startswith("gate"):
            assert m.label not in done and baseline[m.key] is None  # the baseline has no gate
        else:
            assert f"{m.label} {m.format(baseline[m.key])}" in done, m.key
    assert {m.key for m in MECHANISM} <= set(g1) and g1["gate_mean_trigger"] is not None


def copy_accuracy(run_dir, data_dir, windows=64):
    """How often the model's greedy next token after a trigger is the copy the task asks for, over the trigger
    positions of `windows` validation windows as train.py builds them (BOS, then 63 symbols of the text)."""
    import torch

    from runfolder import load_checkpoint
    from probe import trigger_positions

    model, _ = load_checkpoint(os.path.join(run_dir, "ckpt.pt"))
    meta = read_meta(data_dir)
    text = np.asarray(read_shard(os.path.join(data_dir, meta["val_shards"][0]))[:windows * 63], dtype=np.int64)
    idx = torch.cat([torch.full((windows, 1), meta["eot_token"]), torch.from_numpy(text.reshape(windows, 63))], 1)
    with torch.no_grad():
        logits, _ = model(idx)
    where = trigger_positions(idx, meta["triggers"])[:, :-1]  # the last position has no next token to check
    predicted, wanted = logits[:, :-1].argmax(-1), idx[:, :-2]  # at position t the copy is x[t-1]
    return (predicted[:, 1:][where[:, 1:]] == wanted[where[:, 1:]]).float().mean().item(), int(where.sum())


def test_the_trained_models_copy_after_a_trigger(lab):
    """Both models learned the copy: after a trigger, their greedy next token is the symbol before the trigger at
    nearly every trigger position of the validation text (several hundred of them, so one borderline prompt cannot
    decide it, on any CPU). What the baseline's head does at the triggers, the gated one does too. sample.py reads
    the task's symbols and writes one of them after a prompt."""
    root = lab[3]
    data_dir = str(root / "bigram_backcopy")
    for run in ("baseline", "g1"):
        accuracy, positions = copy_accuracy(str(root / run), data_dir)
        assert positions > 300 and accuracy > 0.9, (run, accuracy, positions)
    trigger = read_meta(data_dir)["triggers"][0]
    result = subprocess.run([sys.executable, "sample.py", f"--out_dir={root / 'g1'}", f"--start=s1 s{trigger}",
                             "--num_samples=1", "--max_new_tokens=3", "--top_k=1"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    words = result.stdout.splitlines()[0].split()
    assert words[:2] == ["s1", f"s{trigger}"] and len(words) == 5
    assert all(w.startswith("s") and 0 <= int(w[1:]) < 64 for w in words[2:])


def test_meta_json_counts_the_val_text_that_was_written(tmp_path):
    """val_tokens not a multiple of the walks' 8192: meta.json's shares and ideal loss are those of the val text in the
    shards (one walk, cut short at 1000 symbols), not of the whole walk drawn."""
    meta = prepare(out_dir=str(tmp_path), train_tokens=3000, val_tokens=1000)
    P, triggers = make_chain(64, 3, 0.1, 0)
    is_trigger = np.zeros(64, dtype=bool)
    is_trigger[triggers] = True
    val = streams(str(tmp_path))["val"].astype(np.int64)[None]
    assert meta["trigger_share"] == pytest.approx(is_trigger[val].mean(), rel=1e-12)
    assert meta["copy_share"] == pytest.approx(copies_next(val, is_trigger)[:, :-1].mean(), rel=1e-12)
    assert meta["ideal_loss"] == pytest.approx(ideal_loss(P, is_trigger, val), rel=1e-12)


def test_the_copy_share_leaves_out_the_last_symbol_which_predicts_nothing(tmp_path):
    """The copy share is over the positions that predict a next symbol: a val text that ends on a trigger after a
    non-trigger (its copy would be the symbol after the end) counts no copy there."""
    meta = prepare(out_dir=str(tmp_path), train_tokens=3000, val_tokens=98)
    P, triggers = make_chain(64, 3, 0.1, 0)
    is_trigger = np.zeros(64, dtype=bool)
    is_trigger[triggers] = True
    val = streams(str(tmp_path))["val"].astype(np.int64)
    assert len(val) == 98 and is_trigger[val[-1]] and not is_trigger[val[-2]]  # the case this test is about
    copies = [t for t in range(1, 97) if is_trigger[val[t]] and not is_trigger[val[t - 1]]]
    assert meta["copy_share"] == pytest.approx(len(copies) / 97, rel=1e-12)

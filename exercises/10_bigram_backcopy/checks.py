"""Checks of exercise 10 (Bigram-Backcopy), in order. make_text: shape and dtype; the same seed gives the same text;
every position where the task's rule (data/bigram_backcopy/prepare.py's copies_next) says a copy follows holds the
copy; everywhere else no successor the chain forbids (P = 0), at the text's start and after two triggers too; the
successors' frequencies and the first symbol's against P and uniform. copy_positions: shape and dtype; hand-made
and random windows against probe.trigger_positions, with traps for the usual mistakes; training windows of a freshly
prepared dataset (TrainLoader, as train.py draws them). task_numbers: two finite floats; hand-made texts against
prepare.ideal_loss and copies_next, with traps; the val text of a freshly prepared dataset against its meta.json.

Every random number is seeded: the checks give the same verdict on every run. The statistical ones allow five
standard deviations, so a correct text drawn in another order than the reference's passes too."""

import contextlib
import io
import math
import tempfile

import numpy as np
import torch

import check
from check import Wrong

# A small chain with zeros, so that a symbol the rule does not allow shows as a transition of probability 0.
# Symbols s0..s7, triggers s2 and s5: s5 never follows itself nor leads to s2, and no trigger leads to s0.
_ROWS = {0: {1: .5, 2: .3, 6: .2}, 1: {3: .4, 4: .3, 5: .3}, 2: {1: .3, 5: .3, 7: .4}, 3: {0: .5, 2: .3, 4: .2},
         4: {0: .2, 3: .3, 5: .5}, 5: {3: .4, 6: .3, 7: .3}, 6: {1: .6, 2: .4}, 7: {0: .4, 4: .3, 6: .3}}
TRIGGERS = [2, 5]
V = 8
P = np.zeros((V, V))
for _a, _row in _ROWS.items():
    for _b, _p in _row.items():
        P[_a, _b] = _p
IS_TRIGGER = np.isin(np.arange(V), TRIGGERS)

N_LONG = 20_000  # one long text: the copies and the chain's frequencies
N_SHORT, SHORT = 1000, 4  # many short texts, each from its own seed: how texts start
SIGMAS = 5  # the statistical checks' tolerance, in standard deviations

_cache = {}


def _copies_next(x, is_trigger=IS_TRIGGER):
    """The project's rule on one text: for each position t, whether x[t+1] copies x[t-1]."""
    from data.bigram_backcopy.prepare import copies_next
    return copies_next(np.asarray(x)[None], is_trigger)[0]


def _text(student, n, seed):
    x = student.make_text(P.copy(), list(TRIGGERS), n, np.random.default_rng(check.seeded(seed)))
    if isinstance(x, torch.Tensor) or not isinstance(x, np.ndarray):
        raise Wrong(f"make_text should return a numpy array, got {type(x).__name__}.")
    if x.shape != (n,):
        raise Wrong(f"make_text(P, triggers, n={n}, rng) should have shape ({n},), got {x.shape}.")
    if not np.issubdtype(x.dtype, np.integer):
        raise Wrong(f"make_text should return integer symbols (an int64 array), got dtype {x.dtype}.")
    if n and (x.min() < 0 or x.max() >= V):
        raise Wrong(f"make_text returned symbols outside 0..{V - 1} for a chain of {V} symbols: is every entry of the "
                    "array written (an np.empty entry never written holds whatever was in memory)?")
    return x.astype(np.int64)


def _long(student):
    if "long" not in _cache:
        _cache["long"] = _text(student, N_LONG, 1)
    return _cache["long"]


def _short(student):
    if "short" not in _cache:
        _cache["short"] = np.stack([_text(student, SHORT, 100 + s) for s in range(N_SHORT)])
    return _cache["short"]


def _chain_positions(x):
    """Positions t >= 1 whose symbol the chain draws (no copy follows at t - 1)."""
    chain = np.zeros(len(x), dtype=bool)
    chain[1:] = ~_copies_next(x)[:-1]
    return chain


# -- gap 1: make_text -----------------------------------------------------------------------------------------------

def check_text_shape(student):
    """make_text returns a numpy integer array (n,) of symbols 0..V-1, for n = 1, 2 and 50"""
    for n in (1, 2, 50):
        _text(student, n, n)


def check_text_reproducible(student):
    """the same seed gives the same text, another seed another text: rng is the only source of randomness"""
    import random
    texts = []
    for other in range(6):  # the same rng seed each time, the global generators seeded differently
        random.seed(other)
        np.random.seed(other)
        torch.manual_seed(check.seeded(other))
        texts.append(_text(student, 300, 5))
    a = texts[0]
    if not all(np.array_equal(a, b) for b in texts):
        raise Wrong("two generators made with the same seed gave different texts: every random draw must come from "
                    "rng (not np.random's global functions, the random module or torch), so that a seed fixes the "
                    "text, as it fixes the sink lab's data.")
    if np.array_equal(a, _text(student, 300, 6)):
        raise Wrong("two generators with different seeds gave the same text: make_text ignores rng (a generator "
                    "made inside the function, or no randomness at all?).")


def check_text_copies(student):
    """every position where the rule says a copy follows holds the copy: the symbol before the trigger"""
    x = _long(student)
    copy = _copies_next(x)[:-1]  # t: x[t+1] must be x[t-1]
    t = np.flatnonzero(copy)
    if len(t) == 0:  # a text that copies after two triggers may loop between two of them: that check says so
        check_text_chain_elsewhere(student)
        raise Wrong("your text has no trigger with a non-trigger before it in 20000 symbols, so no copy to check: "
                    "is each next symbol drawn at random from the current symbol's row, with its probabilities?")
    wrong = x[t + 1] != x[t - 1]
    if not wrong.any():
        return
    if (x[t + 1] == x[t])[wrong].all():
        raise Wrong(f"after a trigger your text repeats the trigger itself ({int(wrong.sum())} of {len(t)} places): "
                    "the copy is the symbol before the trigger, one step further back.")
    raise Wrong(f"at {int(wrong.sum())} of the {len(t)} positions right after a trigger that follows a non-trigger, "
                "the symbol is not the one before the trigger: there the next symbol is a copy, not a draw from the "
                "chain. Re-check which step is the copy, and which symbol it copies.")


def check_text_chain_elsewhere(student):
    """everywhere else the chain goes on: no successor with P = 0, also at the text's start and after two triggers"""
    for x in [_long(student)] + list(_short(student)):
        chain = _chain_positions(x)
        t = np.flatnonzero(chain)
        bad = t[P[x[t - 1], x[t]] == 0]
        if len(bad) == 0:
            continue
        t = int(bad[0])
        # a cause is named only where every such successor of the text is of that kind: one drawn from a column
        # of P lands at the text's start and after two triggers too, but everywhere else as well
        if all(s == 1 and IS_TRIGGER[x[0]] for s in bad):
            raise Wrong("a text that starts with a trigger goes on with a symbol the chain never puts after it: a "
                        "trigger that starts the text has no symbol before it, so the chain goes on. (At t = 1, the "
                        "step two back is index -1, which numpy reads as the array's last entry.)")
        if all(s >= 2 and IS_TRIGGER[x[s - 1]] and IS_TRIGGER[x[s - 2]] and x[s] == x[s - 2] for s in bad):
            raise Wrong("after a trigger that follows another trigger, your text copies: such a trigger is followed "
                        "by the chain. (The copy would be a trigger, and the text would loop between two triggers.)")
        if x[t] == x[t - 2]:
            raise Wrong("your text copies the symbol two steps back where no copy is due: only right after a trigger "
                        "that follows a non-trigger. Everywhere else the next symbol is drawn from the chain.")
        raise Wrong("where the chain goes on, your text has a successor of probability 0 in P: the next symbol is "
                    "drawn from the row of the current symbol (P[a, b]: b after a), with that row's probabilities, "
                    "not from a column.")


def check_text_frequencies(student):
    """the chain's successors come with P's probabilities, and the first symbol is uniform over the V symbols"""
    x = _long(student)
    chain = _chain_positions(x)
    prev, nxt = x[:-1][chain[1:]], x[1:][chain[1:]]
    for a in range(V):
        after = nxt[prev == a]
        if len(after) < 400:  # the triggers' rows are drawn from only where a text starts
            continue
        freq = np.bincount(after, minlength=V) / len(after)
        if freq.max() == 1 and np.count_nonzero(P[a]) > 1:
            raise Wrong(f"s{a} is always followed by the same symbol where the chain goes on: the next symbol is drawn "
                        "at random from the row, not its most likely entry.")
        tol = SIGMAS * np.sqrt(P[a] * (1 - P[a]) / len(after)) + 1e-12
        if (np.abs(freq - P[a]) > tol).any():
            raise Wrong(f"the symbols that follow s{a} where the chain goes on ({len(after)} of them) do not come with "
                        f"the probabilities of P's row {a}: draw each from the current symbol's row with its "
                        "probabilities (P[a, b] is the probability of b after a), not uniformly or from a column.")
    first = np.bincount(_short(student)[:, 0], minlength=V)
    expected = N_SHORT / V
    if (np.abs(first - expected) > SIGMAS * math.sqrt(expected * (1 - 1 / V))).any():
        raise Wrong(f"over {N_SHORT} texts from {N_SHORT} seeds, the first symbol is not uniform over the {V} symbols "
                    f"(s{int(first.argmax())} came first {int(first.max())} times, s{int(first.argmin())} "
                    f"{int(first.min())} times): draw it uniformly from all V symbols.")


# -- gap 2: copy_positions -------------------------------------------------------------------------------------------

# Hand-made windows, BOS (64) first, triggers 5, 11 and 63 of 64 symbols: a trigger at position 1, triggers after
# triggers, the trigger 63 next to the BOS id 64, and copies near the end.
HAND_TRIGGERS = [5, 11, 63]
HAND = torch.tensor([[64, 5, 3, 5, 7, 11, 11, 2, 63, 1, 63, 5, 9, 0, 11, 4],
                     [64, 11, 5, 63, 0, 0, 5, 1, 2, 3, 4, 6, 7, 8, 63, 11]])


def _mask(student, idx, triggers):
    before = idx.clone()
    got = student.copy_positions(idx, list(triggers))
    if not torch.equal(idx, before):
        raise Wrong("copy_positions changed its input idx: work on a new tensor.")
    if not isinstance(got, torch.Tensor):
        raise Wrong(f"copy_positions should return a torch.Tensor, got {type(got).__name__}.")
    if tuple(got.shape) != tuple(idx.shape):
        raise Wrong(f"copy_positions should return one value per position, shape {tuple(idx.shape)}, got "
                    f"{tuple(got.shape)}.")
    if got.dtype != torch.bool:
        raise Wrong(f"copy_positions should return a bool tensor (True where the head has a token to fetch), got "
                    f"{got.dtype}.")
    return got


def _random_windows(seed, B=6, T=40, V_=8):
    """Windows of uniform random symbols 0..V_-1 after the BOS id V_: every pattern of triggers, often."""
    g = check.generator(seed)
    idx = torch.randint(0, V_, (B, T), generator=g)
    idx[:, 0] = V_
    return idx


def _diagnose(got, want, idx, triggers):
    from probe import trigger_positions
    if torch.equal(got, want):
        return
    if got[:, 0].any():
        raise Wrong("copy_positions marks position 0: it holds the BOS token, which is no trigger; it predicts the "
                    "window's first symbol, and no copy.")
    if (got & ~want)[:, 1].any():
        raise Wrong("copy_positions marks position 1: the symbol before it in the text was cut off by the window "
                    "(position 0 holds BOS, not that symbol), so the head has nothing there to fetch. The probe "
                    "counts from position 2 on.")
    if torch.equal(got, trigger_positions(idx, triggers[:1])):
        raise Wrong("copy_positions uses the first trigger only: triggers is a list of every trigger symbol.")
    if torch.equal(got, trigger_positions(idx, range(len(triggers)))):
        raise Wrong("copy_positions takes the symbols 0, 1, 2 ... as the triggers: triggers is the list of the "
                    "trigger symbols (meta.json's \"triggers\"), not how many there are.")
    hits, late = int((got & want).sum()), int((got[:, 1:] & want[:, :-1]).sum())
    if late > hits and late >= 0.8 * int(want[:, :-1].sum()):
        raise Wrong("copy_positions marks the position of the copied token, one step after the trigger. The query "
                    "that must look back is the one that predicts the copy: the trigger's own position (position t "
                    "predicts token t + 1).")
    is_trigger = sum(idx == s for s in triggers).bool()
    after_trigger = torch.zeros_like(is_trigger)
    after_trigger[:, 1:] = is_trigger[:, :-1]
    extra, missed = got & ~want, want & ~got
    if extra.any() and not missed.any() and (is_trigger & after_trigger)[extra].all():
        raise Wrong("copy_positions marks triggers that follow another trigger: such a trigger is followed by the "
                    "chain, not a copy (the copy would be a trigger, and the text would loop).")
    if missed.any() and not extra.any() and not missed[:, :-1].any():
        raise Wrong(f"copy_positions misses the last position ({int(missed.sum())} of {int(want.sum())} positions "
                    "where the next token copies the one before): the rule decides it from tokens t - 1 and t, which "
                    "the window shows, though it does not show token t + 1.")
    if missed.any() and not extra.any():
        raise Wrong(f"copy_positions misses {int(missed.sum())} of {int(want.sum())} positions where the next token "
                    "copies the one before: is every trigger symbol of the list counted, at every position from 2 on?")
    raise Wrong(f"copy_positions differs from the probe's trigger positions at {int((got != want).sum())} of "
                f"{got.numel()} positions ({int(extra.sum())} marked that should not be, {int(missed.sum())} "
                "missed). Re-check the rule at position t: its token, the token before it, and which positions can "
                "count at all.")


def check_mask_shape(student):
    """copy_positions returns a (B, T) bool tensor and leaves idx unchanged"""
    _mask(student, HAND.clone(), HAND_TRIGGERS)


def check_mask_rules(student):
    """hand-made and random windows against probe.trigger_positions (position 0 and 1, triggers after triggers)"""
    from probe import trigger_positions
    cases = [(HAND.clone(), HAND_TRIGGERS)] + [(_random_windows(s), TRIGGERS) for s in range(3)]
    cases.append((_random_windows(3, B=3, T=25, V_=5), [0, 1, 3]))
    for idx, triggers in cases:
        _diagnose(_mask(student, idx, triggers), trigger_positions(idx, triggers), idx, triggers)


def _dataset():
    """A freshly prepared small Bigram-Backcopy dataset (64 symbols, 3 triggers, chain seed 3), read into memory:
    its meta.json, its val text and a batch of training windows drawn as train.py draws them (config/sink_lab.py's
    block_size and batch_size, BOS first). About a tenth of a second."""
    if "data" not in _cache:
        from data.bigram_backcopy.prepare import prepare
        from data.shards import TrainLoader, bos_token, find_shards, read_shard
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as d:
            with contextlib.redirect_stdout(io.StringIO()):
                meta = prepare(out_dir=d, seed=3, train_tokens=8192, val_tokens=8192)
            loader = TrainLoader(d, block_size=64, batch_size=32, seed=0, bos=bos_token(d))
            windows = loader.next_batch()[0]
            text = np.array(read_shard(find_shards(d, "val")[0]), dtype=np.int64)
            del loader  # its memory maps, before the folder goes
        _cache["data"] = meta, windows, text
    return _cache["data"]


def check_mask_on_training_windows(student):
    """training windows of a fresh dataset, drawn as train.py draws them, against probe.trigger_positions"""
    from probe import trigger_positions
    meta, windows, _ = _dataset()
    triggers = list(meta["triggers"])
    _diagnose(_mask(student, windows.clone(), triggers), trigger_positions(windows, triggers), windows, triggers)


# -- gap 3: task_numbers ---------------------------------------------------------------------------------------------

# Hand-made texts of the small chain above. A: copies after position 1, 4 and 7, and a last symbol that is no
# trigger. B: starts with two triggers (neither is followed by a copy), then one copy. C: one copy, and a last
# symbol that is a trigger after a non-trigger (its copy would come after the text's end).
TEXT_A = np.array([6, 2, 6, 1, 5, 1, 3, 2, 3, 4, 0])
TEXT_B = np.array([2, 5, 7, 6, 2, 6, 1, 4, 0])
TEXT_C = np.array([6, 2, 6, 1, 3, 2])


def _numbers(student, P_, triggers, text):
    out = student.task_numbers(P_.copy(), list(triggers), np.array(text, dtype=np.int64))
    if not isinstance(out, tuple) or len(out) != 2:
        raise Wrong("task_numbers should return a tuple (copy_share, ideal_loss).")
    values = []
    for what, v in zip(("copy_share", "ideal_loss"), out):
        if isinstance(v, (torch.Tensor, np.ndarray)):
            if int(np.prod(v.shape)) != 1:
                raise Wrong(f"{what} should be one number, got an array of shape {tuple(v.shape)}: a mean over the "
                            "positions.")
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise Wrong(f"{what} should be a Python float, got {type(v).__name__}.")
        values.append(float(v))
    return values


def _ideal(P_, is_trigger, text):
    from data.bigram_backcopy.prepare import ideal_loss
    return ideal_loss(P_, is_trigger, np.asarray(text)[None])


def check_numbers_types(student):
    """task_numbers returns two finite floats: a share in [0, 1] and a loss >= 0 (P has zeros here)"""
    share, loss = _numbers(student, P, TRIGGERS, TEXT_A)
    if math.isnan(loss) or math.isinf(loss):
        raise Wrong("ideal_loss is NaN or inf: some entries of P are 0, and in floating point 0 * log(0) is NaN. In "
                    "an entropy an outcome of probability 0 contributes nothing: leave those entries out.")
    if not 0 <= share <= 1:
        raise Wrong(f"copy_share should be a fraction of positions, in [0, 1], got {share:g}.")
    if loss < 0:
        raise Wrong(f"ideal_loss should be an entropy, >= 0, got {loss:g}: mind the sign (log p <= 0).")


def check_numbers_rules(student):
    """hand-made texts against prepare.py's copies_next and ideal_loss: which positions copy, which count, in nats"""
    for name, text in (("A", TEXT_A), ("B", TEXT_B), ("C", TEXT_C)):
        n = len(text)
        share, loss = _numbers(student, P, TRIGGERS, text)
        copies = int(_copies_next(text)[:-1].sum())
        if not abs(share - copies / (n - 1)) <= 1e-7:
            if abs(share - copies / n) < 1e-7:
                raise Wrong("copy_share is divided by the text's length: the last symbol predicts nothing, so the "
                            "share is over the n - 1 positions that predict a next symbol.")
            if name == "A" and abs(share * (n - 1) - (copies - 1)) < 1e-6:
                raise Wrong("copy_share misses the copy after position 1 of a text whose position 1 is a trigger "
                            "after a non-trigger: in a text (unlike a window) the symbol before position 1 is there, "
                            "at position 0.")
            if name == "B" and share * (n - 1) > copies + 0.5:
                raise Wrong("text B starts with two triggers, and copy_share counts a copy there: the first starts "
                            "the text (nothing before it), the second follows a trigger; neither is followed by a "
                            "copy. (Wrapping around, as an index -1 does, puts the text's end before its start.)")
            if name == "C" and share * (n - 1) > copies + 0.5:
                raise Wrong("text C ends with a trigger after a non-trigger, and copy_share counts a copy there: its "
                            "copy would come after the text's end. The share is over positions 0..n-2, the ones "
                            "that predict a next symbol inside the text.")
            raise Wrong(f"copy_share is wrong for hand-made text {name}: re-check which positions t of the text are "
                        "followed by a copy (the trigger's position, not the copy's), and that the share is over the "
                        "positions that predict a next symbol.")
        want = _ideal(P, IS_TRIGGER, text)
        if abs(loss - want) <= 1e-6 * max(1.0, want):  # float32 arithmetic passes too
            continue
        if abs(loss - _ideal(P, np.zeros(V, dtype=bool), text)) < 1e-6:
            raise Wrong("ideal_loss counts the chain's uncertainty at every position, also where a copy follows: "
                        "how uncertain is the next symbol when the rule says it is a copy?")
        if abs(loss * math.log(2) - want) < 1e-6:
            raise Wrong("ideal_loss is in bits: the loss of train.py is in nats (natural logarithm).")
        last = _ideal(P, np.zeros(V, dtype=bool), [text[-1], text[-1]])  # the uncertainty after the last symbol
        if abs(loss - (want * (n - 1) + last) / n) < 1e-6:
            raise Wrong("ideal_loss counts the last symbol too: it predicts nothing, so the mean is over the n - 1 "
                        "positions that predict a next symbol.")
        raise Wrong(f"ideal_loss is wrong for hand-made text {name} (its copy_share is right): re-check, position by "
                    "position, what a model that knows P and the rule still cannot know about the next symbol, and "
                    "which row of P says so.")


def check_numbers_match_meta(student):
    """on the val text of a fresh dataset (64 symbols), copy_share and ideal_loss as its meta.json records them"""
    from data.bigram_backcopy.prepare import make_chain
    meta, _, text = _dataset()
    P_, triggers = make_chain(meta["symbols"], len(meta["triggers"]), meta["alpha"], meta["seed"])
    share, loss = _numbers(student, P_, triggers, text)
    if not abs(share - meta["copy_share"]) <= 1e-7:  # one position of the 8191 is 1.2e-4
        raise Wrong("copy_share of the dataset's val text differs from its meta.json's: re-check the rule on a long "
                    "text of the real chain (64 symbols, 3 triggers).")
    if not abs(loss - meta["ideal_loss"]) <= 1e-6 * meta["ideal_loss"]:
        raise Wrong("ideal_loss of the dataset's val text differs from its meta.json's, though the hand-made texts "
                    "passed: does anything assume the small chain (8 symbols, no entry near 0)?")

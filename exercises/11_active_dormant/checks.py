"""Checks of exercise 11 (active and dormant), in order: attention_probs returns one causal distribution per query,
per layer, and leaves no hook behind; its numbers against probe.attention_maps on small seeded GPTs; attention_split
returns three floats, then its numbers against probe.Probe's trigger statistics; gate_scores' shapes and range, then
its numbers against the scores the probe sees; gate_split against the probe's gate means; the two trained runs exist
and differ only in the gate; mechanism(run) against the probe on the same windows, for both runs; then a report of
what was measured, which never fails on the outcome.

The small GPTs have their attention weights scaled up, so that their heads attend sharply and their gates spread their
scores over (0, 1): on a model fresh from its initialisation every query attends almost evenly, and most mistakes
would go unseen. The runs are read from $EXERCISE_RUNS if set (CI points it at toy-size runs), else from
out/exercises/11/."""

import contextlib
import math
import os

import torch

import check
from check import Wrong, causal_probs, expect_close, expect_shape

TRIGGERS = (5, 17, 40)  # the small GPTs' "task": these tokens are triggers, 64 is the BOS token
BOS = 64
SHARPEN = 10.0  # the small GPTs' c_attn weights times this: sharp attention, gate scores spread over (0, 1)
VAL_BATCHES = 4  # as starter.py's validation_windows
SPLIT_NAMES = ("the attention on position 0 at the trigger positions", "the attention on position 0 elsewhere",
               "the attention on the previous token at the trigger positions")
KEYS = ("first_token_attn_trigger", "first_token_attn_other", "prev_attn_trigger", "gate_mean_trigger",
        "gate_mean_other")  # probe.TRIGGER_KEYS, in mechanism's dict
LABELS = {"first_token_attn_trigger": "attention on position 0 at triggers",
          "first_token_attn_other": "attention on position 0 elsewhere",
          "prev_attn_trigger": "attention on the previous token at triggers",
          "gate_mean_trigger": "gate score at triggers", "gate_mean_other": "gate score elsewhere"}

_measured = {}  # run name -> your mechanism(run), kept for the report


def runs_dir():
    return check.runs_dir("11")


def _small_gpt(seed, gate="g1", n_layer=2, n_head=2, **settings):
    import model
    torch.manual_seed(check.seeded(seed))
    config = model.GPTConfig(block_size=32, vocab_size=BOS + 1, n_layer=n_layer, n_head=n_head, n_embd=32, gate=gate,
                             attn_backend="torch", **settings)
    gpt = model.GPT(config).eval()
    with torch.no_grad():
        for block in gpt.transformer.h:
            block.attn.c_attn.weight.mul_(SHARPEN)
    return gpt


def _windows(seed, B=6, T=24):
    """B windows of T token ids: BOS first, then symbols, each window with its own share of triggers (so that a mean
    per window and a mean over all positions differ)."""
    g = check.generator(seed)
    idx = torch.randint(0, BOS, (B, T), generator=g)
    triggers = torch.tensor(TRIGGERS)[torch.randint(0, len(TRIGGERS), (B, T), generator=g)]
    share = torch.linspace(0.05, 0.5, B)[torch.randperm(B, generator=g)].unsqueeze(1)
    idx = torch.where(torch.rand(B, T, generator=g) < share, triggers, idx)
    idx[:, 0] = BOS
    return idx


def _trig(idx, triggers=TRIGGERS):
    from probe import trigger_positions
    return trigger_positions(idx, triggers)


def _probe(model, idx, triggers=TRIGGERS, maps=False):
    """What probe.py measures on this forward: (attention maps per layer or [], stats, gate scores per layer)."""
    from probe import Probe
    scores = []
    with torch.no_grad(), Probe(model, attention_maps=maps, triggers=triggers,
                                gate_scores=lambda s, trig: scores.append(s)) as probe:
        model(idx)
    return probe.attention_maps, probe.stats, scores


def _hooks_on(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@contextlib.contextmanager
def _own_work(student, what):
    """While the student's function runs, probe.Probe and probe.attention_maps refuse to: they are what the checks
    compare with, not a way to the answer."""
    import probe
    originals = (probe.Probe, probe.attention_maps)

    def refuse(*args, **kwargs):
        raise Wrong(f"{what} called probe.py's Probe or attention_maps: the exercise is to measure it yourself, with "
                    "your own hooks; probe.py is what the checks compare your numbers with.")

    patched = [(holder, name, value) for holder in (probe, student) for name, value in list(vars(holder).items())
               if any(value is o for o in originals)]
    for holder, name, _ in patched:
        setattr(holder, name, refuse)
    try:
        yield
    finally:
        for holder, name, value in patched:
            setattr(holder, name, value)


def _own_call(student, function, model, idx):
    """In the student's process: function(model, idx) under _own_work, and how many hooks it left on the model."""
    hooks = _hooks_on(model)
    with _own_work(student, function):
        value = getattr(student, function)(model, idx)
    return value, _hooks_on(model) - hooks


def _hooks_left_by_a_failed_forward(student, function, model, idx):
    """In the student's process: function(model, idx) on windows the model refuses (longer than its block_size),
    and how many hooks the failed call left on the model."""
    hooks = _hooks_on(model)
    try:
        with _own_work(student, function):
            getattr(student, function)(model, idx)
    except Exception:  # the forward's own error, as intended
        pass
    return _hooks_on(model) - hooks


def _no_hooks_left_when_the_forward_fails(student, function, model):
    too_long = _windows(99, B=2, T=model.config.block_size + 1)
    if student.in_child(_hooks_left_by_a_failed_forward, function, model, too_long):
        raise Wrong(f"{function} left hooks on the model when its forward failed (windows longer than block_size): "
                    "remove them in a finally: block, so that a failed forward leaves the model as it was and its "
                    "next forward runs no hook of yours.")


def _leaves_inputs(student, function, *inputs):
    """In the student's process: function(*inputs), and whether it left its inputs as they were."""
    kept = [x.clone() for x in inputs]
    value = getattr(student, function)(*inputs)
    return value, all(torch.equal(a, b) for a, b in zip(inputs, kept))


def _same_on_second_call(student, function, model, idx, first, kind):
    """The student's function (attention_probs or gate_scores) gives `first` again on the same model and windows."""
    second = _as_list(f"{function} (called again)", student.in_child(_own_call, function, model, idx)[0], len(first),
                      kind)
    if not all(isinstance(b, torch.Tensor) and b.shape == a.shape and torch.allclose(a, b) for a, b in
               zip(first, second)):
        raise Wrong(f"{function} gave something else on a second call with the same model and windows: does it "
                    f"keep {kind} from an earlier call (a list made once, outside the function)?")


def _as_list(what, got, n, kind):
    if not isinstance(got, (list, tuple)):
        raise Wrong(f"{what} should return a list with one tensor per layer, got {type(got).__name__}.")
    if len(got) != n:
        raise Wrong(f"{what} returned {len(got)} {kind} for a model of {n} layers: one per layer, in layer order. "
                    "(Twice as many: hooks on more modules than one per layer, or hooks left from an earlier call; "
                    "one: only the last layer kept.)")
    return list(got)


def _floats(what, got, n):
    if not isinstance(got, (tuple, list)) or len(got) != n:
        raise Wrong(f"{what} should return a tuple of {n} Python floats, got "
                    f"{type(got).__name__}{f' of {len(got)}' if isinstance(got, (tuple, list)) else ''}.")
    out = []
    for value in got:
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise Wrong(f"{what} returned a tensor of shape {tuple(value.shape)} where one number belongs: a "
                            "mean over every position of the kind (and every window and head), then .item().")
            value = value.item()
        if not isinstance(value, (float, int)) or isinstance(value, bool):
            raise Wrong(f"{what} should return Python floats, got {type(value).__name__}.")
        out.append(float(value))
    return out


def _close(a, b, tol=1e-4):
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= tol * (1 + abs(b))


def _pool(values, mask):
    """The mean of values (B, H, T) or (B, T) over the positions where mask (B, T) holds (probe.py's pooling)."""
    from probe import _pooled
    return _pooled(values, mask.unsqueeze(1) if values.dim() == 3 else mask)


def _per_window(values, mask):
    """The mean over each window's positions of the kind, then over the windows that have one."""
    if values.dim() == 3:
        values = values.mean(1)  # heads first: the same count of heads at every position
    means = [v[m].mean() for v, m in zip(values, mask) if m.any()]
    return torch.stack(means).mean().item()


# ----------------------------------------------------------------------------------------------------------------

def check_probs_shape(student):
    """attention_probs: one (B, H, T, T) tensor per layer, each row a distribution over the past, no hook left
    (also when the forward fails), and the same maps on a second call"""
    model, idx = _small_gpt(1), _windows(2)
    B, T = idx.shape
    H, n = model.config.n_head, model.config.n_layer
    first, hooks_left = student.in_child(_own_call, "attention_probs", model, idx)
    first = _as_list("attention_probs(model, idx)", first, n, "maps")
    if hooks_left:
        raise Wrong("attention_probs left hooks on the model: remove each one (the handle that register_forward_hook "
                    "returned) after the forward, in a finally: block, or every later forward keeps running them.")
    for layer, p in enumerate(first):
        expect_shape(f"attention_probs(...)[{layer}]", p, (B, H, T, T),
                     "One row per query and one column per key, for each window and head: (B, n_head, T, T).")
        p = p.detach().double()
        if not torch.isfinite(p).all():
            raise Wrong(f"layer {layer}'s probabilities hold NaN or inf: did a row lose every key to the mask (the "
                        "mask the wrong way round, hiding the past instead of the future)?")
        pt = p.transpose(-2, -1)
        if (p.triu(1).abs() > 1e-6).any() and not (pt.triu(1).abs() > 1e-6).any() and \
                torch.allclose(pt.sum(-1), torch.ones((), dtype=p.dtype), atol=1e-4):
            raise Wrong(f"layer {layer}: your maps are the right ones transposed, [b, head, key, query]: the rows "
                        "are keys. Index them [b, head, query, key]: row i is query i's distribution over keys 0..i.")
        if (p.triu(1).abs() > 1e-6).any():
            raise Wrong(f"layer {layer}: queries attend to keys after them. The model's attention is causal: query i "
                        "sees keys 0..i only. Hide the future before the softmax, not after.")
        if not torch.allclose(p.sum(-1), torch.ones((), dtype=p.dtype), atol=1e-4):
            if torch.allclose(p.sum(-2), torch.ones((), dtype=p.dtype), atol=1e-4):
                raise Wrong(f"layer {layer}: each column sums to 1, not each row: the softmax ran over the queries. "
                            "Each query spreads its attention over its keys.")
            raise Wrong(f"layer {layer}: the rows do not sum to 1. Each query's attention is a distribution over "
                        "keys 0..i: was the future zeroed after the softmax instead of hidden before it?")
    _same_on_second_call(student, "attention_probs", model, idx, first, "maps")
    _no_hooks_left_when_the_forward_fails(student, "attention_probs", model)


def _qk(model, idx, rope=True):
    """Each layer's q and k (B, H, T, D) as the model projects them, with or without the rotary embedding."""
    inputs = []
    hooks = [b.attn.register_forward_hook(lambda m, args, out: inputs.append(args)) for b in model.transformer.h]
    with torch.no_grad():
        model(idx)
    for hook in hooks:
        hook.remove()
    out = []
    for block, args in zip(model.transformer.h, inputs):
        with torch.no_grad():
            q, k = block.attn.project(args[0], args[1] if rope else None)[:2]
        out.append((q.transpose(1, 2), k.transpose(1, 2)))
    return out


def check_probs_vs_probe(student):
    """attention_probs matches probe.attention_maps, layer by layer, on two small seeded GPTs
    (one with G1 and RoPE, one without a gate and with QK-norm)"""
    for seed, gate, settings in ((3, "g1", {}), (4, "none", {"qk_norm": True})):
        model, idx = _small_gpt(seed, gate, **settings), _windows(seed + 10)
        got = _as_list("attention_probs(model, idx)", student.in_child(_own_call, "attention_probs", model, idx)[0],
                       model.config.n_layer, "maps")
        want, _, _ = _probe(model, idx, maps=True)
        for layer, (g, w) in enumerate(zip(got, want)):
            if isinstance(g, torch.Tensor) and g.shape == w.shape and torch.allclose(g.double(), w.double(), atol=2e-5,
                                                                                    rtol=1e-4):
                continue
            q, k = _qk(model, idx)[layer]
            q0, k0 = _qk(model, idx, rope=False)[layer]
            D = q.size(-1)
            known = [
                (causal_probs(q0, k0), "these are the probabilities of q and k before the rotary position embedding. "
                 "This model encodes positions with RoPE, applied to q and k inside the attention: take q and k as "
                 "the attention multiplies them, after the rotation."),
                (causal_probs(q * D ** 0.5, k), "the scores were not scaled: the model divides each q . k by the "
                 "square root of the head dimension before the softmax."),
                (causal_probs(q * D ** -0.5, k), "the scores were divided by the head dimension, not by its square "
                 "root."),
                (causal_probs(k, q), "queries and keys are swapped: row i must hold query i's scores against keys j "
                 "(query i times key j), not key i's against query j."),
            ]
            for wrong, why in known:
                if isinstance(g, torch.Tensor) and g.shape == wrong.shape and \
                        torch.allclose(g.double(), wrong, atol=2e-5, rtol=1e-4):
                    raise Wrong(f"gate={gate!r} model, layer {layer}: {why}")
            expect_close(f"attention_probs(...)[{layer}] of the gate={gate!r} model", g, w, atol=2e-5, rtol=1e-4,
                         hint="Re-check where you take q and k: exactly the tensors the attention multiplies, after "
                              "everything the attention's projection applies" +
                              (" (this model also normalises q and k: QK-norm)" if settings.get("qk_norm") else
                               " (its rotary position embedding)") +
                              ", one layer's each; and the scale of the scores.")


def check_split_returns_floats(student):
    """attention_split returns three Python floats in [0, 1] and leaves its inputs as they were"""
    model, idx = _small_gpt(5, n_layer=1), _windows(6)
    maps, _, _ = _probe(model, idx, maps=True)
    probs, trig = maps[0], _trig(idx)
    got, kept = student.in_child(_leaves_inputs, "attention_split", probs, trig)
    got = _floats("attention_split(probs, trig)", got, 3)
    if not kept:
        raise Wrong("attention_split changed its inputs (probs or trig) in place: work on a copy (an in-place "
                    "assignment or a method ending in _ changes the caller's tensor).")
    for value, name in zip(got, SPLIT_NAMES):
        if math.isnan(value):
            raise Wrong(f"{name} is NaN: a mean over no entries (0/0)? A window without such positions gives one if "
                        "you average each window first: the probe pools all the positions of all the windows.")
        if not (math.isfinite(value) and -1e-6 <= value <= 1 + 1e-6):
            raise Wrong(f"{name} is {value:.4g}: an average of probabilities lies in [0, 1]. A sum instead of a mean?")
    if got[0] < 1e-6 and got[1] < 1e-6 and probs[..., 1:, 0].mean() > 0.01:
        raise Wrong("both attentions on position 0 are 0: you read row 0 (what query 0 gives each key; it sees only "
                    "itself), not column 0 (what each query gives key 0).")


def check_split_vs_probe(student):
    """attention_split matches the probe's first_token_attn_trigger, first_token_attn_other, prev_attn_trigger
    (layer by layer, on two small seeded GPTs)"""
    for seed, layers, heads in ((7, 1, 1), (8, 2, 2)):
        model, idx = _small_gpt(seed, n_layer=layers, n_head=heads), _windows(seed + 20)
        maps, stats, _ = _probe(model, idx, maps=True)
        trig = _trig(idx)
        for layer, probs in enumerate(maps):
            got = _floats("attention_split(probs, trig)", student.attention_split(probs.clone(), trig.clone()), 3)
            want = [stats[key][layer] for key in KEYS[:3]]
            if all(_close(g, w) for g, w in zip(got, want)):
                continue
            col0, T = probs[..., 0], trig.size(1)
            other = ~trig
            other[:, :1] = False
            everywhere = ~trig
            own = torch.einsum("bhii->bhi", probs)  # each query's attention on itself
            where = f"{layers}-layer, {heads}-head GPT, layer {layer}"
            if _close(got[0], want[1]) and _close(got[1], want[0]):
                raise Wrong(f"{where}: the first two values are swapped: first the attention on position 0 at the "
                            "trigger positions, then elsewhere.")
            for i in (0, 1):
                if _close(got[i], _per_window(col0, (trig, other)[i])):
                    raise Wrong(f"{where}: {SPLIT_NAMES[i]} is a mean per window, then over the windows. The probe "
                                "pools: one mean over every (window, head, position) of the kind, so a window with "
                                "more trigger positions weighs more, as each position counts once.")
                if _close(got[i], _pool(col0, (trig, other)[i]) * (trig, other)[i].float().mean().item()):
                    raise Wrong(f"{where}: {SPLIT_NAMES[i]} is divided by every position, not by the number of "
                                "positions of the kind: average over the positions the mask selects only.")
            if _close(got[1], _pool(col0, everywhere)):
                raise Wrong(f"{where}: 'elsewhere' includes position 0. Query 0 can only attend to itself, so it "
                            "always gives position 0 a 1 and says nothing about the head: elsewhere means the "
                            "positions 1..T-1 that are not triggers.")
            if _close(got[1], stats["first_token_attn"][layer]):
                raise Wrong(f"{where}: 'elsewhere' includes the trigger positions (this is F-Attn over every query "
                            "1..T-1). Elsewhere means the positions 1..T-1 that are not triggers.")
            if not _close(got[2], want[2]):
                if _close(got[2], _pool(own, trig)):
                    raise Wrong(f"{where}: the previous-token attention is each trigger query's attention on itself "
                                "(key i), not on the position before it (key i - 1).")
                if abs(got[2]) < 1e-6 < want[2]:
                    raise Wrong(f"{where}: the previous-token attention is 0: key i + 1, the position after the "
                                "query, which the causal mask hides? The previous position is key i - 1.")
                before = torch.stack([probs[:, :, i, i - 1] for i in range(1, T)], -1)  # (B, H, T-1)
                if _close(got[2], _pool(before, trig[:, :-1])):
                    raise Wrong(f"{where}: the previous-token attention is misaligned by one position: at each "
                                "trigger position i you took what query i + 1 gives key i (the trigger itself). "
                                "Line the values up with the positions they belong to: query i's attention on key "
                                "i - 1, selected where trig[:, i] holds.")
                if _close(got[2], _per_window(before, trig[:, 1:])):
                    raise Wrong(f"{where}: {SPLIT_NAMES[2]} is a mean per window, then over the windows. The probe "
                                "pools: one mean over every (window, head, trigger position).")
            bad = next(i for i, (g, w) in enumerate(zip(got, want)) if not _close(g, w))
            raise Wrong(f"{where}: {SPLIT_NAMES[bad]} is off (yours {got[bad]:.5g}). Re-check which positions count "
                        "(trigger positions: trig; elsewhere: positions 1..T-1 that are not triggers), which key "
                        "(position 0; the previous position, i - 1), and that the mean runs over every window, head "
                        "and position of the kind at once.")


def check_gate_scores_shape(student):
    """gate_scores: one (B, T, groups, width) tensor of scores in [0, 1] per layer, no hook left (also when the
    forward fails; elementwise and headwise G1; the same scores on a second call)"""
    for seed, settings in ((9, {}), (10, {"gate_granularity": "headwise"})):
        model, idx = _small_gpt(seed, **settings), _windows(seed)
        n, shape = model.config.n_layer, (*idx.shape, *model.config.gate_shape())
        first, hooks_left = student.in_child(_own_call, "gate_scores", model, idx)
        first = _as_list("gate_scores(model, idx)", first, n, "tensors")
        if hooks_left:
            raise Wrong("gate_scores left hooks on the model: remove each one after the forward, in a finally: block.")
        for layer, s in enumerate(first):
            expect_shape(f"gate_scores(...)[{layer}] of a {settings.get('gate_granularity', 'elementwise')} gate", s,
                         shape, "(B, T, groups, width): the layout the gate uses, model.GPTConfig.gate_shape().")
            if not torch.isfinite(s).all() or (s < 0).any() or (s > 1).any():
                raise Wrong(f"layer {layer}'s scores have values outside [0, 1]. A score is the gate activation's "
                            "output, the factor the gate multiplies by: did you keep the logits (before the "
                            "sigmoid), or the gate's output (the head's output times the scores)?")
        _same_on_second_call(student, "gate_scores", model, idx, first, "tensors")
    _no_hooks_left_when_the_forward_fails(student, "gate_scores", model)


def check_gate_scores_vs_probe(student):
    """gate_scores matches the scores probe.Probe sees, layer by layer (G1 elementwise and headwise GPTs)"""
    for seed, settings in ((11, {}), (12, {"gate_granularity": "headwise"})):
        model, idx = _small_gpt(seed, **settings), _windows(seed)
        got = _as_list("gate_scores(model, idx)", student.in_child(_own_call, "gate_scores", model, idx)[0],
                       model.config.n_layer, "tensors")
        _, _, want = _probe(model, idx)
        what = settings.get("gate_granularity", "elementwise")
        for layer, (g, w) in enumerate(zip(got, want)):
            if isinstance(g, torch.Tensor) and g.shape == w.shape and torch.allclose(g.double(), 1 - w.double(),
                                                                                    atol=1e-5):
                raise Wrong(f"{what} gate, layer {layer}: your scores are 1 minus the gate's: a score near 1 lets "
                            "the head's output through, near 0 closes it.")
            expect_close(f"gate_scores(...)[{layer}] of a {what} gate", g, w, atol=1e-5, rtol=1e-4,
                         hint="Record the scores each layer's gate multiplies by, as the model computed them in this "
                              "forward, one tensor per layer in layer order.")


def check_gate_split_vs_probe(student):
    """gate_split matches the probe's gate_mean_trigger and gate_mean_other, layer by layer
    (G1 elementwise and headwise GPTs)"""
    for seed, settings in ((13, {}), (14, {"gate_granularity": "headwise"})):
        model, idx = _small_gpt(seed, **settings), _windows(seed + 30)
        _, stats, scores = _probe(model, idx)
        trig = _trig(idx)
        for layer, s in enumerate(scores):
            got, kept = student.in_child(_leaves_inputs, "gate_split", s, trig)
            got = _floats("gate_split(scores, trig)", got, 2)
            if not kept:
                raise Wrong("gate_split changed its inputs (scores or trig) in place: work on a copy.")
            want = [stats["gate_mean_trigger"][layer], stats["gate_mean_other"][layer]]
            if all(_close(g, w) for g, w in zip(got, want)):
                continue
            where = f"{settings.get('gate_granularity', 'elementwise')} gate, layer {layer}"
            per_position = s.mean(dim=(2, 3))  # (B, T)
            other = ~trig
            other[:, :1] = False
            if _close(got[0], want[1]) and _close(got[1], want[0]):
                raise Wrong(f"{where}: the two values are swapped: first the mean score at the trigger positions, "
                            "then elsewhere.")
            for i, mask in enumerate((trig, other)):
                if _close(got[i], _per_window(per_position, mask)):
                    raise Wrong(f"{where}: a mean per window, then over the windows. The probe pools: one mean over "
                                "every (window, position) of the kind, each position counting once.")
                if _close(got[i], _pool(per_position, mask) * mask.float().mean().item()):
                    raise Wrong(f"{where}: divided by every position, not by the number of positions of the kind.")
            if _close(got[1], _pool(per_position, ~trig)):
                raise Wrong(f"{where}: 'elsewhere' includes position 0, the BOS token. It is the positions 1..T-1 "
                            "that are not triggers, as for the attention: position 0 is no query with work to do "
                            "or not.")
            if _close(got[1], per_position[:, 1:].mean().item()):
                raise Wrong(f"{where}: 'elsewhere' includes the trigger positions: it is the positions 1..T-1 that "
                            "are not triggers.")
            bad = next(i for i, (g, w) in enumerate(zip(got, want)) if not _close(g, w))
            raise Wrong(f"{where}: the mean score {('at the trigger positions', 'elsewhere')[bad]} is off (yours "
                        f"{got[bad]:.5g}). Every score of a position counts (all its heads and channels), and the "
                        "mean runs over every window and position of the kind at once.")


def check_runs_exist_and_match(student):
    """the two trained sink-lab runs exist (baseline/ and g1/, each with ckpt.pt) and differ only in the gate"""
    check.expect_trained_runs("11", "the task")


def _oracle(run_dir):
    """The probe's mechanism statistics of a run's layer 0, on the windows of starter.py's validation_windows."""
    from data.shards import read_meta
    model, data_dir, batches = check.run_batches(run_dir, VAL_BATCHES)
    idx = torch.cat([x for x, _ in batches])
    _, stats, _ = _probe(model, idx, triggers=read_meta(data_dir)["triggers"])
    return {key: (None if stats[key] is None else stats[key][0]) for key in KEYS}


def check_mechanism_vs_probe(student):
    """mechanism(run_dir) matches the probe's trigger statistics on the same windows, for both runs"""
    for name in ("baseline", "g1"):
        got = student.mechanism(os.path.join(runs_dir(), name))
        want = _oracle(os.path.join(runs_dir(), name))
        if not isinstance(got, dict) or set(got) != set(KEYS):
            raise Wrong(f"mechanism({name}) should return a dict with the keys {', '.join(KEYS)} (the given "
                        "mechanism does: keep it as it is).")
        for key in KEYS:
            if want[key] is None:
                if got[key] is not None:
                    raise Wrong(f"mechanism({name})[{key!r}] should be None: this run has no gate.")
                continue
            try:
                value = float(got[key])
            except (TypeError, ValueError, RuntimeError):
                raise Wrong(f"mechanism({name})[{key!r}] should be a float, got {type(got[key]).__name__}.") from None
            if not _close(value, want[key]):
                raise Wrong(f"mechanism({name}): the {LABELS[key]} is off (yours {value:.5g}) on the trained run's "
                            "windows, though your functions passed on the small GPTs: is mechanism as given, on "
                            "validation_windows(checkpoint) and the run's own triggers, layer 0?")
        _measured[name] = got


def check_report(student):
    """what you measured on the two runs (this check never fails on the outcome)"""
    import textwrap
    for name in ("baseline", "g1"):
        if name not in _measured:  # run alone: measure again
            _measured[name] = student.mechanism(os.path.join(runs_dir(), name))
    base, g1 = _measured["baseline"], _measured["g1"]
    cell = lambda v: "     -" if v is None else f"{float(v):6.3f}"  # noqa: E731
    table = [f"{'':45s}  baseline      G1"]
    table += [f"{LABELS[key]:45s}    {cell(base[key])}  {cell(g1[key])}" for key in KEYS]
    dormant, active = base["first_token_attn_other"], base["prev_attn_trigger"]
    if dormant > 0.5 and base["first_token_attn_trigger"] < 0.1 and active > 0.5:
        words = [f"The baseline's head is active at the triggers (it attends to the previous token) and dormant "
                 f"elsewhere, where it parks {dormant:.0%} of its attention on the BOS token: Guo et al.'s "
                 "active-dormant head, with a sink."]
    else:
        words = [f"The baseline's head parks {dormant:.0%} of its attention on position 0 where it has nothing to do: "
                 "no clear sink here (a short run, or a seed without one? README.md, 'What to make of it')."]
    closed, opened = g1["gate_mean_other"], g1["gate_mean_trigger"]
    if closed < 0.5 * opened:
        words.append(f"G1's gate is {opened / max(closed, 1e-9):.0f} times more open at the triggers than elsewhere: "
                     f"it closes where the head has nothing to do, and there the head parks "
                     f"{g1['first_token_attn_other']:.0%} of its attention on position 0.")
    else:
        words.append("G1's gate is about as open elsewhere as at the triggers: it has not (yet) learned to close "
                     "where the head has nothing to do.")
    words.append("This check passes whatever the numbers say: it reports them.")
    lines = table + [""] + [line for text in words for line in textwrap.wrap(text, 108)]
    print("\n".join("      " + line if line else "" for line in lines))

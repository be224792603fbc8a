"""Checks of exercise 07 (find the sink), in order: received_attention's shape, range and numbers against
probe.received_attention (an even and an odd T); sink's shape, a planted sink at key 5, random numbers against the
probe; sink_heads' fraction against probe.SINK_HEAD_THRESHOLD (any
shape), then strictly above a threshold (a head exactly at it is no sink; values just either side of 0.3)."""

import torch

import check
from check import Wrong, causal_probs, expect_close, expect_shape, random_qk, same


def _planted(sink_at=5, B=2, H=3, T=16, D=8, seed=1):
    """q, k where key `sink_at` attracts every query that sees it: k_sink = 6u and every q has +3u, u a unit vector
    per head, so the score on it is about 6 / sqrt(D) * 3 above the rest."""
    q, k = random_qk(B, H, T, D, seed)
    u = torch.randn(1, H, 1, D, generator=check.generator(seed + 1), dtype=torch.float64)
    u = u / u.norm(dim=-1, keepdim=True)
    q = q + 3 * u
    k[:, :, sink_at] = 6 * u[:, :, 0]
    return q, k


def _as_float(what, got):
    if isinstance(got, torch.Tensor):
        if got.numel() != 1:
            raise Wrong(f"{what} should be one number, got a tensor of shape {tuple(got.shape)}: the fraction over "
                        "all the heads given, then .item()")
        got = got.item()
    if not isinstance(got, (float, int)) or isinstance(got, bool):
        raise Wrong(f"{what} should be a Python float, got {type(got).__name__}")
    return float(got)


def check_received_shape(student):
    """received_attention returns (B, H, T//2) in probs' dtype (T = 9: 4 early keys, 5 late queries)"""
    probs = causal_probs(*random_qk(2, 3, 9, 8)).float()
    r = student.received_attention(probs)
    if isinstance(r, torch.Tensor) and tuple(r.shape) == (2, 3, 5) and same(r, probs[..., 5:, :5].mean(-2), 1e-6):
        raise Wrong("received_attention has shape (2, 3, 5) for T = 9: it keeps 5 early keys, (T + 1) // 2, where "
                    "the early keys are j < T//2, 4 of them at T = 9 (the late queries, from T//2 on, are 5).")
    if isinstance(r, torch.Tensor) and tuple(r.shape) == (2, 3, 5):
        raise Wrong("received_attention has shape (2, 3, 5) for T = 9: one value per late query, so the mean ran "
                    "over the keys. r keeps one value per early key (T//2 = 4 of them): the queries are what the "
                    "mean removes.")
    expect_shape("received_attention(probs) for probs of shape (2, 3, 9, 9)", r, (2, 3, 4),
                 "One value per early key j < T//2: the late queries are averaged away.")
    if r.dtype != probs.dtype:
        raise Wrong(f"received_attention should keep probs' dtype ({probs.dtype}), got {r.dtype}.")


def check_received_in_range(student):
    """each r is in [0, 1] and the r of one window and head sum to at most 1"""
    r = student.received_attention(causal_probs(*random_qk(2, 3, 12, 8, seed=2)))
    if not torch.isfinite(r).all() or (r < 0).any() or (r > 1 + 1e-6).any():
        raise Wrong("received_attention has values outside [0, 1]: it is an average of probabilities. Summing over "
                    "the late queries instead of averaging gives values above 1.")
    if (r.sum(-1) > 1 + 1e-6).any():
        raise Wrong("the r of one window and head sum to more than 1: each late query spreads a total of 1 over "
                    "all its keys, so the early keys get at most 1 on average: a sum over the queries, not a mean?")


def check_received_matches_probe(student):
    """received_attention matches probe.received_attention(q, k) on the same q, k"""
    from probe import received_attention
    for T in (14, 9):  # an odd T too: 4 early keys, 5 late queries
        q, k = random_qk(2, 3, T, 8, seed=3)
        probs = causal_probs(q, k)
        r = student.received_attention(probs)
        n = probs.size(-1) // 2
        every_query = probs[..., :n].mean(-2)
        if r.shape == every_query.shape and torch.allclose(r, every_query.to(r.dtype), atol=1e-6):
            raise Wrong("you averaged over every query, not just the late ones i >= T//2. An early query i sees only "
                        "keys 0..i, so it gives the first keys a larger share just because it has fewer keys: that "
                        "bias toward position 0 is what the late half avoids.")
        expect_close(f"received_attention(probs) at T = {T}", r, received_attention(q, k), atol=1e-5, rtol=1e-4,
                     hint="Re-check which block of probs you average: its rows are the queries (only the late ones, "
                          "i >= T//2, count) and its columns the keys (only the early ones, j < T//2)." +
                          (" T = 14 passed: with an odd T the late queries (T - T//2 of them) outnumber the early "
                           "keys (T//2): which do you start from, and which count divides?" if T % 2 else ""))


def check_sink_shape(student):
    """sink returns (share, pos): (B, H) each, share a float tensor, pos an integer tensor"""
    out = student.sink(causal_probs(*random_qk(2, 3, 10, 8, seed=4)))
    if not isinstance(out, tuple) or len(out) != 2:
        raise Wrong("sink should return a tuple (share, pos).")
    share, pos = out
    expect_shape("share", share, (2, 3), "One value per window and head: the max over the keys of received_attention.")
    expect_shape("pos", pos, (2, 3), "One position per window and head: the argmax over the keys.")
    if not share.is_floating_point() or pos.is_floating_point() or pos.dtype == torch.bool:
        raise Wrong("share should be a float tensor (the largest r) and pos an integer tensor (the key's position, "
                    "usable as an index).")


def check_sink_finds_planted_sink(student):
    """a planted sink at key 5 (every query that sees it attends to it) is found: pos == 5, share as the probe's"""
    from probe import received_attention
    q, k = _planted(sink_at=5)
    share, pos = student.sink(causal_probs(q, k))
    if (pos == 0).all():
        raise Wrong("pos is 0 everywhere, but the sink in this test is key 5: the sink is not always the first "
                    "token. Search for it among the early keys.")
    if (pos != 5).any():
        raise Wrong(f"the planted sink is key 5 in every window and head; your pos is 5 in {int((pos == 5).sum())} of "
                    f"{pos.numel()}. Re-check the axis you search along: the keys (received_attention's last axis), "
                    "not the windows or the heads.")
    expect_close("share for a planted sink", share, received_attention(q, k).amax(-1), atol=1e-5, rtol=1e-4,
                 hint="share is received_attention's value at the sink, the max over the keys.")


def check_sink_matches_probe(student):
    """share and pos match the largest share probe.received_attention gives each head, and its key, on random q, k"""
    from probe import received_attention
    for T in (20, 9):
        q, k = random_qk(3, 4, T, 8, seed=5)
        share, pos = student.sink(causal_probs(q, k))
        top, where = received_attention(q, k).max(-1)
        expect_close(f"share at T = {T}", share, top, atol=1e-5, rtol=1e-4,
                     hint="share is the max over the keys of received_attention.")
        if (pos.long() != where).any():
            raise Wrong(f"T = {T}: pos differs from the probe's top key in {int((pos.long() != where).sum())} of "
                        f"{pos.numel()} (window, head) pairs: pos is the argmax over the keys of received_attention.")


def check_sink_heads_fraction(student):
    """sink_heads gives the fraction of heads above probe.SINK_HEAD_THRESHOLD (Gu et al.'s 0.3), as a Python float"""
    from probe import SINK_HEAD_THRESHOLD
    f = torch.tensor([[0.05, 0.45, 0.29, 0.9], [0.35, 0.1, 0.2, 0.25]])  # (n_layer, n_head), none near 0.3
    above = [v > SINK_HEAD_THRESHOLD for row in f.tolist() for v in row]  # 3 of the 8 heads: 2 and 1 by layer
    want = sum(above) / len(above)
    got = _as_float("sink_heads(f)", student.sink_heads(f))
    if got == sum(above):
        raise Wrong("sink_heads returned the number of sink heads: return the fraction (count / number of heads).")
    if not abs(got - want) <= 1e-6:
        raise Wrong(f"sink_heads(f) for 8 heads in 2 layers, 3 of them above {SINK_HEAD_THRESHOLD}, gave {got:g}: "
                    "the fraction of all the given entries (any shape) whose F-Attn is above the threshold.")
    f3 = torch.stack([f, 1 - f])  # (2, 2, 4): any shape; 3 + 7 of its 16 entries above 0.3
    got = _as_float("sink_heads(f3)", student.sink_heads(f3))
    if not abs(got - 10 / 16) <= 1e-6:
        raise Wrong("sink_heads of a 3-D tensor is wrong: the fraction of all its entries above the threshold, "
                    "whatever the shape.")
    got = _as_float("sink_heads(f[0])", student.sink_heads(f[0]))
    if not abs(got - sum(above[:4]) / 4) <= 1e-6:
        raise Wrong("sink_heads of a 1-D tensor (one layer's heads) is wrong: the fraction of its entries above "
                    "the threshold.")


def check_sink_heads_strictly_above(student):
    """sink_heads counts heads strictly above the threshold: a head exactly at it is no sink head"""
    f = torch.tensor([0.1, 0.4, 0.5, 0.75, 0.5, 1.0])  # 0.5 is exact in every float format: no rounding question
    got = _as_float("sink_heads(f, threshold=0.5)", student.sink_heads(f, threshold=0.5))
    if abs(got - 4 / 6) < 1e-6:
        raise Wrong("sink_heads counts the heads exactly at the threshold: Gu et al.'s sink head has F-Attn that "
                    "exceeds epsilon: strictly above it. A head exactly at the threshold is no sink head.")
    if not abs(got - 2 / 6) <= 1e-6:
        raise Wrong(f"sink_heads(f, threshold=0.5) gave {got:g}: is the threshold argument used (not a fixed 0.3)?")
    near = torch.tensor([0.3 + 1e-9, 0.3004, 0.2999, 0.3 - 1e-9], dtype=torch.float64)  # F-Attn just either side
    got = _as_float("sink_heads(f near 0.3)", student.sink_heads(near, threshold=0.3))
    if not abs(got - 2 / 4) <= 1e-6:
        raise Wrong(f"for F-Attn values just above and below 0.3 (float64: 0.3 + 1e-9, 0.3004, 0.2999, 0.3 - 1e-9) "
                    f"sink_heads gave {got:g}, not 2/4: compare the values as they are, with no rounding or cast to "
                    "a lower precision first.")

"""probe.py: the sink-anywhere statistic (received_attention), sink heads, the per-head and per-window values, and
M-Act per window. Each is checked against an explicit float64 T x T softmax or a model built to have a known
answer. CPU only."""

import json
import math
from collections import Counter

import pytest
import numpy as np
import torch

from runfolder import finite_or_none
from model import GPT, GPTConfig
import probe  # noqa: I001
from probe import (GATE_KEYS, Probe, SINK_HEAD_THRESHOLD, STAT_KEYS, TRIGGER_KEYS, WINDOW_KEYS, massive_channels,
    previous_token_attention, received_attention, sink_keys, value_norm_ratio)

C, H, HKV, D, VOCAB = 32, 4, 2, 8, 97
BASE = dict(block_size=24, vocab_size=VOCAB, n_layer=2, n_head=H, n_kv_head=HKV, n_embd=C, attn_backend="torch")
SINK_KEYS = ("sink_share", "sink_heads", "sink_pos", "sink_pos_share", "sink_token", "sink_token_share")


def tokens(B=3, T=20, seed=1, high=VOCAB):
    return torch.randint(0, high, (B, T), generator=torch.Generator().manual_seed(seed))


def reference_received(q, k, keys=None):
    """r (B, H, keys) from the explicit causal softmax, in float64: keys repeated per query head, then the mean of
    each early key's probability over the late queries (keys: the first T//2 by default)."""
    q, k = q.double(), k.double().repeat_interleave(q.size(1) // k.size(1), dim=1)
    T, n = q.size(2), q.size(2) // 2
    s = (q @ k.transpose(-2, -1)) * q.size(-1) ** -0.5
    p = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    return p[:, :, n:, :n if keys is None else keys].mean(2)


# ----------------------------------------------------------------------------
# received_attention, the pure function

@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize("T", [2, 7, 32])
def test_received_attention_matches_the_explicit_softmax(heads, kv_heads, T):
    g = torch.Generator().manual_seed(T * 10 + kv_heads)
    q = 2 * torch.randn(2, heads, T, D, generator=g, dtype=torch.float64)  # scores of order 1: far from uniform
    k = 2 * torch.randn(2, kv_heads, T, D, generator=g, dtype=torch.float64)
    expected = reference_received(q, k)
    late = T - T // 2
    # chunks that divide the late queries' count and chunks that do not, one query at a time, all at once
    for chunk in sorted({1, 2, 3, 5, late, 128}):
        r = received_attention(q, k, chunk=chunk)
        assert r.shape == (2, heads, T // 2) and r.dtype == torch.float32
        torch.testing.assert_close(r.double(), expected, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(r, received_attention(q, k, chunk=1), rtol=1e-5, atol=1e-7)
    # the scale is the model's, head_dim ** -0.5, unless given
    torch.testing.assert_close(received_attention(q, k, scale=0.1).double(), reference_received(q * 0.1 * D ** 0.5, k),
                               rtol=1e-5, atol=1e-6)
    # fewer candidate keys (the probe's sink_keys): the same shares of the first ones
    for keys in sorted({0, sink_keys(T), T // 2}):
        r = received_attention(q, k, chunk=3, keys=keys)
        assert r.shape == (2, heads, keys)
        torch.testing.assert_close(r.double(), expected[..., :keys], rtol=1e-5, atol=1e-6)


def test_received_attention_is_float32_under_autocast():
    """The probe runs inside the evaluation's autocast: the scores must not drop to bfloat16."""
    g = torch.Generator().manual_seed(0)
    q, k = 2 * torch.randn(2, 4, 32, D, generator=g), 2 * torch.randn(2, 2, 32, D, generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        r = received_attention(q, k)
    torch.testing.assert_close(r.double(), reference_received(q, k), rtol=1e-5, atol=1e-6)


def test_first_token_attention_is_float32_under_autocast():
    """F-Attn's own softmax (kernels.first_token_attention, PyTorch's path) runs inside the evaluation's autocast
    too: in bfloat16 its per-query values were off by up to a fifth."""
    import kernels
    g = torch.Generator().manual_seed(0)
    q, k = (4 * torch.randn(2, 4, 64, D, generator=g)).bfloat16(), (4 * torch.randn(2, 2, 64, D, generator=g))
    k = k.bfloat16()  # the model's q and k under autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        p0 = kernels.first_token_attention(q, k, backend="torch")
    s = (q.double() @ k.double().repeat_interleave(2, 1).transpose(-2, -1)) * D ** -0.5  # query head h: KV head h // 2
    s = s.masked_fill(torch.ones(64, 64, dtype=torch.bool).triu(1), float("-inf"))
    assert p0.dtype == torch.float32
    torch.testing.assert_close(p0.double(), s.softmax(-1)[..., 0], rtol=1e-5, atol=1e-6)


def test_received_attention_reads_each_query_heads_own_kv_head():
    """GQA: query heads 2h and 2h+1 share KV head h (the model's grouping), not heads h and h + H/2."""
    q = torch.zeros(1, 4, 8, D)
    q[..., 0] = 5.0
    k = torch.zeros(1, 2, 8, D)
    k[0, 0, 1, 0] = 1.0  # KV head 0: key 1 stands out; KV head 1: key 2
    k[0, 1, 2, 0] = 1.0
    pos = received_attention(q, k).argmax(-1)[0]
    assert pos.tolist() == [1, 1, 2, 2]


def test_received_attention_short_and_bad_inputs():
    q, k = torch.randn(2, 4, 1, D), torch.randn(2, 2, 1, D)
    assert received_attention(q, k).shape == (2, 4, 0)  # T = 1: no late query sees an earlier key
    q, k = torch.randn(1, 2, 2, D), torch.randn(1, 2, 2, D)
    torch.testing.assert_close(received_attention(q, k), reference_received(q, k).float())  # T = 2: query 1 on key 0
    for bad_q, bad_k in [(torch.randn(1, 3, 4, D), torch.randn(1, 2, 4, D)),  # 3 heads cannot share 2 KV heads
                         (torch.randn(1, 2, 4, D), torch.randn(1, 2, 5, D)),  # different lengths
                         (torch.randn(2, 4, D), torch.randn(2, 4, D))]:  # not (B, H, T, D)
        with pytest.raises(ValueError):
            received_attention(bad_q, bad_k)
    with pytest.raises(ValueError, match="chunk"):  # the probe's own line, not range()'s "arg 3 must not be zero"
        received_attention(q, k, chunk=0)
    for keys in (-1, 2):  # T = 2: key 0 is the only candidate
        with pytest.raises(ValueError):
            received_attention(q, k, keys=keys)


def planted_share(a, T):
    """The share a key gets from the late queries when each query's score on it is a and on every other key 0:
    query i sees i + 1 keys, so p_i = e^a / (e^a + i)."""
    return sum(math.exp(a) / (math.exp(a) + i) for i in range(T // 2, T)) / (T - T // 2)


@pytest.mark.parametrize("p", [0, 3, 7])
def test_received_attention_finds_a_planted_sink(p):
    """Every query scores a on key p and 0 elsewhere: r_p is the analytic share, every other key gets
    mean_i 1 / (e^a + i) (about 2/T here), and the top key is p, wherever p is in the first half."""
    T, a = 16, 2.0
    q = torch.zeros(2, 4, T, D, dtype=torch.float64)
    q[..., 0] = 1.0
    k = torch.zeros(2, 2, T, D, dtype=torch.float64)
    k[:, :, p, 0] = a * D ** 0.5  # scores q.k / sqrt(D) = a on key p
    r = received_attention(q, k)
    other = sum(1 / (math.exp(a) + i) for i in range(T // 2, T)) / (T - T // 2)
    expected = torch.full((2, 4, T // 2), other, dtype=torch.float64)
    expected[..., p] = planted_share(a, T)
    torch.testing.assert_close(r.double(), expected, rtol=1e-6, atol=1e-7)
    top, pos = r.max(-1)
    assert (pos == p).all() and top.min() > 0.35 > 5 * other


# ----------------------------------------------------------------------------
# The probe on a model built to have a sink: known answers

SINK = 5  # the sink token's id


def sink_model(a, T, kv_heads=HKV):
    """One layer, no RoPE, whose attention has a known answer: the token SINK embeds as 10 e_0, every other token as
    10 e_1; after the RMSNorm, head h's query is a_h * sqrt(D) / C * x_1 on channel 0 and each key is x_0 on channel
    0. So a query of any other token scores a_h on each SINK key and 0 on the rest; a SINK query scores 0 on all."""
    cfg = GPTConfig(**{**BASE, "block_size": T, "n_layer": 1, "n_kv_head": kv_heads, "pos_emb": "learned",
                       "gate": "none"})
    model = GPT(cfg).double().eval()
    with torch.no_grad():
        model.transformer.wpe.weight.zero_()
        wte = model.transformer.wte.weight
        wte.zero_()
        wte[:, 1] = 10.0
        wte[SINK] = 0.0
        wte[SINK, 0] = 10.0
        w = model.transformer.h[0].attn.c_attn.weight
        w.zero_()
        for h, ah in enumerate(torch.as_tensor(a, dtype=torch.float64).expand(H).tolist()):
            w[h * D, 1] = ah * D ** 0.5 / C  # q_h[0] = a_h sqrt(D) / C * x[1], and x[1] = sqrt(C) for other tokens
        for j in range(kv_heads):
            w[H * D + j * D, 0] = 1.0  # k[0] = x[0] = sqrt(C) for SINK, 0 for the others
    return model


def windows_with_sink(positions, T):
    idx = tokens(B=len(positions), T=T, high=SINK)  # ids below SINK: no other sink
    for b, p in enumerate(positions):
        idx[b, p] = SINK
    return idx


def first_token_attention_with_sink_at(p, a, T):
    """F-Attn of a window whose SINK is at p (queries 1..T-1): before p and at p (a SINK query) attention is
    uniform; after p, the key at 0 gets 1 / (e^a + i), or e^a / (e^a + i) when p = 0."""
    def p0(i):
        if p == 0:
            return math.exp(a) / (math.exp(a) + i)
        return 1 / (i + 1) if i <= p else 1 / (math.exp(a) + i)
    return sum(p0(i) for i in range(1, T)) / (T - 1)


def test_probe_finds_a_sink_token_anywhere():
    """SINK sits at position 3 in two windows and at 5 (the last candidate key at T = 16) in the third: every head's
    top key is the SINK, so sink_share is the analytic share, sink_pos is 3 in 2 of 3 windows, sink_token is SINK in
    all."""
    T, a = 16, 2.0
    positions = [3, 5, 3]
    assert sink_keys(T) == 6
    model = sink_model(a, T)
    with Probe(model) as probe:
        model(windows_with_sink(positions, T))
    stats = probe.stats
    share = planted_share(a, T)
    assert stats["sink_share"] == pytest.approx([share], abs=1e-6)
    torch.testing.assert_close(probe.windows["sink_share"][0], torch.full((3,), share, dtype=torch.float64),
                               rtol=0, atol=1e-6)
    assert probe.heads["sink_share"] == [pytest.approx([share] * H, abs=1e-6)]
    assert stats["sink_pos"] == [3] and stats["sink_pos_share"] == [pytest.approx(2 / 3)]
    assert stats["sink_token"] == [SINK] and stats["sink_token_share"] == [1.0]
    f_attn = [first_token_attention_with_sink_at(p, a, T) for p in positions]
    torch.testing.assert_close(probe.windows["first_token_attn"][0], torch.tensor(f_attn, dtype=torch.float64),
                               rtol=0, atol=1e-6)
    assert stats["first_token_attn"] == pytest.approx([sum(f_attn) / 3], abs=1e-6)
    assert max(f_attn) < SINK_HEAD_THRESHOLD and stats["sink_heads"] == [0.0]  # a sink, but not on position 0


def f_attn_of(a, T):
    return first_token_attention_with_sink_at(0, a, T)


def score_for(f_attn, T):
    """The score a on key 0 that gives F-Attn f_attn (bisection: F-Attn grows with a)."""
    lo, hi = -20.0, 20.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f_attn_of(mid, T) < f_attn else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize("n_sink", [0, 1, 3, 4])
def test_sink_heads_counts_the_heads_above_the_threshold(n_sink):
    """The first n_sink heads put F-Attn 0.31 on the first token, the others 0.29: just either side of Gu et
    al.'s 0.3, so sink_heads is n_sink / H, while the mean over heads says nothing about how many."""
    assert SINK_HEAD_THRESHOLD == 0.3  # Gu et al.'s epsilon
    T = 16
    above, below = score_for(0.31, T), score_for(0.29, T)
    model = sink_model([above] * n_sink + [below] * (H - n_sink), T, kv_heads=1)
    with Probe(model) as probe:
        model(windows_with_sink([0, 0], T))
    per_head = [0.31] * n_sink + [0.29] * (H - n_sink)
    assert probe.heads["first_token_attn"] == [pytest.approx(per_head, abs=1e-6)]
    assert probe.stats["sink_heads"] == [n_sink / H]
    assert probe.heads["sink_share"] == [pytest.approx([planted_share(above, T)] * n_sink +
                                                       [planted_share(below, T)] * (H - n_sink), abs=1e-6)]
    assert probe.stats["sink_pos"] == [0] and probe.stats["sink_token"] == [SINK]


# ----------------------------------------------------------------------------
# The probe on generic models, against the explicit float64 softmax

def make(seed=0, **kw):
    """A float64 model whose queries and keys are scaled up, so attention is far from uniform (and the top key
    of each window and head is well separated), with its constant-initialised parameters perturbed."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**{**BASE, **kw})).double().eval()
    with torch.no_grad():
        for block in model.transformer.h:
            attn = block.attn
            attn.c_attn.weight[:(attn.n_head + attn.n_kv_head) * attn.head_dim].mul_(8)
        for name, p in model.named_parameters():
            if "gate_param" in name or name.endswith("weight") and p.dim() == 1:
                p.add_(0.3 * torch.randn_like(p))
    return model


def reference(model, idx):
    """Per layer, from the attention's input captured here: the float64 attention probabilities (B, H, T, T), and
    the gate scores (B, T, groups, width) for every token, or None without a gate."""
    inputs = []
    hooks = [b.attn.register_forward_hook(lambda m, args, out: inputs.append(args)) for b in model.transformer.h]
    with torch.no_grad():
        model(idx)
    for hook in hooks:
        hook.remove()
    B, T = idx.shape
    layers = []
    for block, args in zip(model.transformer.h, inputs):
        attn = block.attn
        with torch.no_grad():
            q, k, _, g = attn.project(*args[:2])  # Block calls attn(x, rope, cache)
        q, k = q.double().transpose(1, 2), k.double().transpose(1, 2).repeat_interleave(H // attn.n_kv_head, dim=1)
        s = (q @ k.transpose(-2, -1)) * attn.head_dim ** -0.5
        maps = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        scores = None if attn.gate is None else attn.gate.score(g).double().expand(B, T, *g.shape[2:])
        layers.append((maps, scores))
    return layers


def most_often(values):
    counts = Counter(values)
    best = max(counts.values())
    return min(v for v, c in counts.items() if c == best), best / len(values)


CONFIGS = {
    "gqa_g1": dict(gate="g1"),
    "no_gate": dict(gate="none"),
    "input_independent": dict(gate="g1", gate_input="none"),
    "mqa_headwise": dict(gate="g1", n_kv_head=1, gate_granularity="headwise"),
    "mha_g2": dict(gate="g2", n_kv_head=H),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_probe_matches_the_explicit_softmax(name):
    model = make(**CONFIGS[name])
    B, T = 4, 20
    idx = tokens(B=B, T=T)
    with Probe(model) as probe:
        model(idx)
    n, m = T // 2, sink_keys(T)
    for layer, (maps, scores) in enumerate(reference(model, idx)):
        p0 = maps[:, :, 1:, 0]  # (B, H, T-1)
        r = maps[:, :, n:, :m].mean(2)  # (B, H, m): the late queries' attention on the candidate keys
        top2 = r.topk(2, dim=-1).values
        assert (top2[..., 0] - top2[..., 1]).min() > 1e-5  # a top key well defined: float32 finds the same one
        top, pos = r.max(-1)
        f_head = p0.mean((0, 2))
        assert probe.heads["first_token_attn"][layer] == pytest.approx(f_head.tolist(), abs=1e-6)
        assert probe.heads["sink_share"][layer] == pytest.approx(top.mean(0).tolist(), abs=1e-6)
        torch.testing.assert_close(probe.windows["first_token_attn"][layer], p0.mean((1, 2)), rtol=0, atol=1e-6)
        torch.testing.assert_close(probe.windows["sink_share"][layer], top.mean(1), rtol=0, atol=1e-6)
        assert probe.stats["sink_heads"][layer] == sum(f > SINK_HEAD_THRESHOLD for f in f_head.tolist()) / H
        pairs = [(b, h) for b in range(B) for h in range(H)]
        sink_pos, pos_share = most_often([pos[b, h].item() for b, h in pairs])
        sink_token, token_share = most_often([idx[b, pos[b, h]].item() for b, h in pairs])
        assert probe.stats["sink_pos"][layer] == sink_pos and probe.stats["sink_pos_share"][layer] == pos_share
        assert probe.stats["sink_token"][layer] == sink_token and probe.stats["sink_token_share"][layer] == token_share
        if scores is None:
            assert probe.windows["gate_mean"] is None
        else:
            torch.testing.assert_close(probe.windows["gate_mean"][layer], scores.flatten(1).mean(1), rtol=0, atol=1e-6)
            for limit in (0.1, 0.5):  # sparsity: the fraction of every score of the batch below the limit
                below = (scores < limit).double().mean().item()
                assert probe.stats[f"gate_below_{limit}"][layer] == pytest.approx(below, abs=1e-6), limit


@pytest.mark.parametrize("name", list(CONFIGS))
def test_windows_average_to_the_stats(name):
    """stats[key][layer] is the mean of windows[key][layer] (B,) for the per-window keys; lists are per layer, heads
    per layer and head; without a gate the gate keys are None; values are JSON-friendly."""
    model = make(**CONFIGS[name])
    B, T = 5, 18
    with Probe(model) as probe:
        model(tokens(B=B, T=T))
    gated = CONFIGS[name]["gate"] != "none"
    assert set(probe.stats) == set(STAT_KEYS) and set(probe.windows) == set(WINDOW_KEYS)
    for key in WINDOW_KEYS:
        if key == "gate_mean" and not gated:
            assert probe.windows[key] is None and probe.stats[key] is None
            continue
        assert len(probe.windows[key]) == len(probe.stats[key]) == 2
        for w, stat in zip(probe.windows[key], probe.stats[key]):
            assert w.shape == (B,) and w.dtype == torch.float64 and w.device.type == "cpu"
            # windows differ, so a mean over them is a statement; an input-independent gate is the same for all
            assert (w.std() == 0) == (key == "gate_mean" and name == "input_independent")
            assert stat == pytest.approx(w.mean().item(), rel=1e-12)
    for key in GATE_KEYS:
        assert (probe.stats[key] is None) == (not gated)
    for key, n in (("first_token_attn", H), ("sink_share", H), ("value_norm_ratio", model.config.n_kv_head)):
        assert len(probe.heads[key]) == 2 and all(len(v) == n and all(type(x) is float for x in v)
                                                  for v in probe.heads[key])
    for layer, ratios in enumerate(probe.heads["value_norm_ratio"]):  # windows, then heads: the same mean
        assert probe.stats["value_norm_ratio"][layer] == pytest.approx(sum(ratios) / len(ratios), rel=1e-9)
    for key in SINK_KEYS:
        assert len(probe.stats[key]) == 2
    assert all(type(v) is int for v in probe.stats["sink_pos"] + probe.stats["sink_token"])
    assert all(0 <= v < sink_keys(T) for v in probe.stats["sink_pos"])
    assert len(probe.channels) == 2 and len(probe.massive) == 2
    json.dumps(probe.channels, allow_nan=False)
    json.dumps({k: v and [finite_or_none(x) for x in v] for k, v in probe.stats.items()}, allow_nan=False)


def test_gate_sparsity_counts_the_scores_strictly_below_each_limit():
    """An input-independent gate whose 32 scores are 0.05, 0.1, 0.5 and 0.9, eight of each: a quarter of them lie
    below 0.1 and half below 0.5; a score equal to the limit is not below it."""
    model = make(gate="g1", gate_input="none")
    scores = torch.tensor([0.05, 0.1, 0.5, 0.9], dtype=torch.float64).repeat(8)
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.gate.gate_param.copy_(torch.logit(scores))
    with Probe(model) as probe:
        model(tokens(B=2, T=8))
    assert probe.stats["gate_below_0.1"] == [0.25, 0.25] and probe.stats["gate_below_0.5"] == [0.5, 0.5]
    assert probe.stats["gate_mean"] == pytest.approx([scores.mean().item()] * 2, abs=1e-7)


def test_the_summary_is_the_layer_mean_and_peak_act_the_largest_layer_of_each_window():
    """probe.summary: each measure averaged over layers (NaN layers skipped, a measure the model lacks None), and
    peak_act each window's largest |h| over every layer, averaged over windows: not the mean over layers."""
    model = make(gate="none")
    per_window = []
    hooks = [b.register_forward_hook(lambda m, a, out: per_window.append(out.abs().amax((1, 2))))
             for b in model.transformer.h]
    with Probe(model) as p:
        model(tokens(B=4, T=12))
    for h in hooks:
        h.remove()
    summary = p.summary()
    peak = torch.stack(per_window).amax(0)
    assert summary["peak_act"] == pytest.approx(peak.mean().item(), rel=1e-12)
    assert summary["peak_act"] > torch.stack(per_window).mean(0).mean().item() * (1 + 1e-3)  # layers differ
    assert summary["max_act"] == pytest.approx(sum(p.stats["max_act"]) / 2, rel=1e-12) and summary["gate_mean"] is None
    assert probe.summarize({"first_token_attn": [0.2, float("nan"), 0.4]}, None) == \
        {**{m.key: None for m in probe.MEASURES if m.key in STAT_KEYS}, "first_token_attn": pytest.approx(0.3),
         "peak_act": None}
    assert probe.layer_mean([float("nan")]) is None and probe.layer_mean(None) is None


def test_max_act_is_the_per_window_max_averaged_over_windows():
    """M-Act does not grow with the batch: each window's max |h|, averaged; not the largest over the batch."""
    model = make(gate="none")
    per_window, batch_max = [], []

    def hook(m, args, out):
        per_window.append(out.abs().amax((1, 2)))
        batch_max.append(out.abs().max().item())

    hooks = [b.register_forward_hook(hook) for b in model.transformer.h]
    with Probe(model) as probe:
        model(tokens(B=4, T=12))
    for h in hooks:
        h.remove()
    for layer in range(2):
        assert torch.equal(probe.windows["max_act"][layer], per_window[layer])
        assert probe.stats["max_act"][layer] == pytest.approx(per_window[layer].mean().item(), rel=1e-12)
        assert probe.stats["max_act"][layer] < batch_max[layer] * (1 - 1e-3)


def test_act_ratio_is_each_windows_max_over_its_median():
    """act_ratio: per window, max |h| / median |h| of the block output (numpy's median, an independent count),
    averaged over windows; a planted outlier multiplies it."""
    model = make(gate="none")
    outs = []
    hooks = [b.register_forward_hook(lambda m, a, out: outs.append(out.detach().abs().flatten(1).numpy()))
             for b in model.transformer.h]
    idx = tokens(B=3, T=11)  # 11 x 32 values per window: an even count, where numpy averages the two middle ones
    with Probe(model) as probe:
        model(idx)
    for layer, a in enumerate(outs):
        want = a.max(1) / np.sort(a, 1)[:, a.shape[1] // 2 - 1]  # torch's median: the lower of the middle two
        np.testing.assert_allclose(probe.windows["act_ratio"][layer].numpy(), want, rtol=1e-6)
        assert probe.stats["act_ratio"][layer] == pytest.approx(want.mean(), rel=1e-6)
    with torch.no_grad():
        model.transformer.h[1].mlp.c_proj.bias = None
        model.transformer.h[1].mlp.c_proj.weight[5] *= 0  # channel 5 of the last block's MLP output ...
        model.transformer.h[1].mlp.c_proj.weight[5, 0] = 1e4  # ... becomes one huge value for most tokens
    for h in hooks:
        h.remove()
    with Probe(model) as planted:
        model(idx)
    assert planted.stats["act_ratio"][1] > 20 * probe.stats["act_ratio"][1]


def test_act_ratio_of_a_bfloat16_model_is_computed_in_float32():
    """A bfloat16 block output: its max and median are exact bfloat16 values, their ratio is taken in float32
    (in bfloat16 it would keep 3 significant digits)."""
    model = make(gate="none").bfloat16()
    outs = []
    hooks = [b.register_forward_hook(lambda m, a, out: outs.append(out.detach().abs().flatten(1).float()))
             for b in model.transformer.h]
    with Probe(model) as probe:
        model(tokens(B=3, T=11))
    for h in hooks:
        h.remove()
    for layer, a in enumerate(outs):
        want = a.amax(1) / a.median(1).values
        torch.testing.assert_close(probe.windows["act_ratio"][layer], want.double(), rtol=1e-6, atol=0)


def test_probe_reads_the_ids_however_the_model_is_called_and_leaves_no_hook():
    model = make()
    idx = tokens(B=2, T=12)
    plain = model(idx)[0]
    with Probe(model) as by_name:
        logits = model(idx=idx)[0]
    assert torch.equal(plain, logits)  # the probe changes nothing
    with Probe(model) as positional:
        model(idx, idx)
    for key in STAT_KEYS:
        assert by_name.stats[key] == pytest.approx(positional.stats[key]), key
    assert all(0 <= t < VOCAB for t in by_name.stats["sink_token"])
    with Probe(model) as unseen:  # not through forward: the ids are unknown
        model._forward(idx)
    assert unseen.stats["sink_token"] == [None, None] and all(math.isnan(s) for s in unseen.stats["sink_token_share"])
    assert unseen.stats["sink_share"] == pytest.approx(by_name.stats["sink_share"])
    with Probe(model) as after:  # nor after a forward of other ids: those are forgotten when their forward ends
        model(tokens(B=2, T=12, seed=2))
        model._forward(idx)
    assert after.stats["sink_token"][2:] == [None, None]
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_one_token_windows_have_no_sink_statistics():
    model = make()
    with Probe(model) as probe:
        model(tokens(B=3, T=1))
    for key in ("first_token_attn", "sink_share", "sink_heads", "sink_pos_share", "sink_token_share"):
        assert all(math.isnan(v) for v in probe.stats[key]), key
    assert probe.stats["sink_pos"] == [None, None] and probe.stats["sink_token"] == [None, None]
    assert all(w.shape == (3,) and w.isnan().all() for w in probe.windows["sink_share"])
    assert all(math.isnan(x) for v in probe.heads["first_token_attn"] for x in v)
    assert all(math.isfinite(v) for v in probe.stats["max_act"] + probe.stats["gate_mean"])
    assert all(math.isnan(v) for v in probe.stats["value_norm_ratio"])  # no position besides 0 to compare with
    assert all(c["pos"] == 0 and c["pos_share"] == 1.0 for c in probe.channels)
    with Probe(model) as probe:  # two tokens: query 1 on key 0 is the only candidate
        model(tokens(B=3, T=2))
    assert probe.stats["sink_pos"] == [0, 0] and probe.stats["sink_pos_share"] == [1.0, 1.0]
    assert probe.stats["sink_share"] == pytest.approx(probe.stats["first_token_attn"], abs=1e-6)


# ----------------------------------------------------------------------------
# The Bigram-Backcopy task's mechanism statistics, and where the massive activation sits

@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize("T", [2, 9, 40])
def test_previous_token_attention_matches_the_explicit_softmax(heads, kv_heads, T):
    g = torch.Generator().manual_seed(T + kv_heads)
    q = 2 * torch.randn(2, heads, T, D, generator=g, dtype=torch.float64)
    k = 2 * torch.randn(2, kv_heads, T, D, generator=g, dtype=torch.float64)
    kk = k.repeat_interleave(heads // kv_heads, dim=1)
    s = (q @ kk.transpose(-2, -1)) * D ** -0.5
    p = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    expected = torch.stack([p[:, :, i, i - 1] for i in range(1, T)], -1)
    for chunk in (1, 3, 128):
        got = previous_token_attention(q, k, chunk=chunk)
        assert got.shape == (2, heads, T) and got.dtype == torch.float32 and got[:, :, 0].isnan().all()
        torch.testing.assert_close(got[:, :, 1:].double(), expected, rtol=1e-5, atol=1e-6)


def trigger_positions(idx, triggers):
    """The copy rule's positions, written out with loops: from 2 on, a trigger that does not follow a trigger."""
    where = torch.zeros_like(idx, dtype=torch.bool)
    for b in range(idx.size(0)):
        for i in range(2, idx.size(1)):
            where[b, i] = idx[b, i].item() in triggers and idx[b, i - 1].item() not in triggers
    return where


@pytest.mark.parametrize("name", ["gqa_g1", "no_gate", "mqa_headwise", "input_independent"])
def test_mechanism_statistics_match_the_explicit_softmax(name):
    """At trigger positions and the others: attention on position 0, on the previous position, the gate's mean
    score, each pooled over windows, heads and positions of the kind; and the max |h| at position 0 and elsewhere."""
    model = make(**CONFIGS[name])
    B, T = 4, 20
    idx = tokens(B=B, T=T, high=8)  # 8 symbols, 2 triggers: many trigger positions, some following each other
    triggers = [1, 5]
    outputs = []
    hooks = [b.register_forward_hook(lambda m, a, out: outputs.append(out.detach())) for b in model.transformer.h]
    with Probe(model, triggers=triggers) as probe:
        model(idx)
    for h in hooks:
        h.remove()
    trig = trigger_positions(idx, triggers)
    assert trig.any() and (~trig[:, 1:]).any()
    assert any(idx[b, i] in triggers and idx[b, i - 1] in triggers for b in range(B) for i in range(2, T))  # excluded
    other = ~trig
    other[:, 0] = False
    for layer, (maps, scores) in enumerate(reference(model, idx)):
        p0, prev = maps[..., 0], torch.zeros(B, H, T, dtype=torch.float64)
        prev[..., 1:] = torch.stack([maps[:, :, i, i - 1] for i in range(1, T)], -1)
        pooled = lambda values, mask: values[mask.unsqueeze(1).expand_as(values)].mean().item()  # noqa: E731
        assert probe.stats["first_token_attn_trigger"][layer] == pytest.approx(pooled(p0, trig), abs=1e-6)
        assert probe.stats["first_token_attn_other"][layer] == pytest.approx(pooled(p0, other), abs=1e-6)
        assert probe.stats["prev_attn_trigger"][layer] == pytest.approx(pooled(prev, trig), abs=1e-6)
        if scores is None:
            assert probe.stats["gate_mean_trigger"] is None and probe.stats["gate_mean_other"] is None
        else:
            per_position = scores.flatten(2).mean(-1)  # (B, T)
            assert probe.stats["gate_mean_trigger"][layer] == pytest.approx(per_position[trig].mean().item(), abs=1e-6)
            assert probe.stats["gate_mean_other"][layer] == pytest.approx(per_position[other].mean().item(), abs=1e-6)
        a = outputs[layer].abs().amax(-1)  # (B, T)
        torch.testing.assert_close(probe.windows["max_act_first"][layer], a[:, 0], rtol=0, atol=0)
        torch.testing.assert_close(probe.windows["max_act_rest"][layer], a[:, 1:].amax(1), rtol=0, atol=0)
        assert max(probe.stats["max_act_first"][layer], probe.stats["max_act_rest"][layer]) <= \
            probe.stats["max_act"][layer] + 1e-12


def test_mechanism_statistics_need_triggers_and_ids():
    """Without triggers, or when the probe never saw the ids (the model called on embeddings), the trigger keys are
    None; max_act_first and max_act_rest are always there."""
    model = make(gate="g1")
    idx = tokens(B=2, T=10)
    for kwargs in ({}, {"triggers": [1, 2]}):
        with Probe(model, **kwargs) as probe:
            model(idx)
        assert all((probe.stats[key] is None) == ("triggers" not in kwargs) for key in TRIGGER_KEYS)
        assert len(probe.stats["max_act_first"]) == len(probe.stats["max_act_rest"]) == 2
    with Probe(model, triggers=[1, 2]) as probe:  # not through forward: the ids are unknown
        model._forward(idx)
    assert all(probe.stats[key] is None for key in TRIGGER_KEYS)


def test_a_measure_added_to_the_registry_reaches_the_eval_line_the_analysis_table_and_the_study_report(monkeypatch):
    """probe.MEASURES is the one list of what the project reports: one more entry (here the M-Act over the median, a
    statistic the probe takes per layer) shows in train.py's eval line (probe.describe of probe.summary, which its
    log record holds), in lab/analyze.py's summary table and in the study report's table, with no other change: the
    report gives it no paper's number and would compare it as a ratio until lab/report.py says otherwise."""
    import sys

    import lab.analyze as analyze
    import lab.report as report
    extra = probe.Measure("act_ratio", "M-Act / median", ".1f", "lower")
    measures = probe.MEASURES + (extra,)
    by_key = {m.key: m for m in measures}
    originals = (probe.MEASURES, probe.MEASURE)
    # as if probe.py's MEASURES had the entry: every importer sees it. Each module's own names, read from its
    # __dict__: a getattr would make a lazy module (transformers') import what it names, which may not be installed
    for module in list(sys.modules.values()):
        names = getattr(module, "__dict__", {})
        if names.get("MEASURES") is originals[0]:
            monkeypatch.setattr(module, "MEASURES", measures)
        if names.get("MEASURE") is originals[1]:
            monkeypatch.setattr(module, "MEASURE", by_key)
    model = make()
    with Probe(model) as p:
        model(torch.randint(0, VOCAB, (2, 24)))
    record = {"val_loss": 3.0, "loss_spikes": 0, **p.summary()}
    assert record["act_ratio"] == pytest.approx(sum(p.stats["act_ratio"]) / len(p.stats["act_ratio"]))
    assert f"M-Act / median {record['act_ratio']:.1f}" in probe.describe(record)
    assert "mechanism" not in probe.describe(record)  # measured without the task's triggers: no mechanism words
    with Probe(model, triggers=[3, 5]) as p:
        model(torch.tensor([[0, 7, 3, 9, 5, 2, 3, 8] * 3] * 2))
    assert "; the mechanism: F-Attn at triggers" in probe.describe({**record, **p.summary()})
    # a validation loss that was not finite (logged as None) is said, never dropped from the line; a gate's measure
    # that a run has none of (None) is left out
    line = probe.describe({**record, "val_loss": None, "gate_mean": None})
    assert line.startswith("val loss not finite, F-Attn ") and "gate mean" not in line
    summary = {"device": "CPU", "date": "today", "measured_on": {"CPU, today": 1}, "checkpoint": "ckpt.pt",
               "runs": [{"label": "run", "lr": 1e-3, **record}],
               "validation": {"batches": 1, "batch_size": 2, "source": "test"}}
    header = next(line for line in analyze.summary_table(summary).splitlines() if line.startswith("| run |"))
    assert header.endswith("| M-Act / median |")
    runs = [{"lr": 1e-3, "iter": 1, "max_iters": 1, "exit_code": 0, "nonfinite_steps": 0, **record}] * 3  # 3 seeds
    over = {m.key: report.over_seeds([r.get(m.key) for r in runs]) for m in measures}  # mean ± half-width
    table = "\n".join(report.measured_section({"run": runs}, {"run": over}))
    assert "M-Act / median |" in table and f"{record['act_ratio']:.1f} ± 0.0" in table
    assert report.paper_numbers(extra.key) == () and report.comparison(extra.key) == "ratio"


# ----------------------------------------------------------------------------
# The sink share's candidate keys: a gap before the late queries, so recency is no sink

def one_hot_qk(T, scores):
    """q (1, 1, T, T) and k (1, 1, T, T) whose scaled score q_i . k_j / sqrt(T) is scores(i) [j] (a float64 (T,)
    vector per query i): the keys one-hot, the queries carrying the scores."""
    k = torch.eye(T, dtype=torch.float64).view(1, 1, T, T) * T ** 0.5
    q = torch.stack([scores(i) for i in range(T)]).view(1, 1, T, T)
    return q, k


def local_and_parked(T, park, a, b=8.0):
    """Each query scores b on the position just before it and a on key `park` (0 elsewhere)."""
    def scores(i):
        s = torch.zeros(T, dtype=torch.float64)
        s[park] += a
        if i > 0:
            s[i - 1] += b
        return s
    return one_hot_qk(T, scores)


def test_sink_keys_leave_a_gap_of_an_eighth_of_the_window():
    assert [sink_keys(T) for T in (2, 7, 8, 16, 64, 512)] == [1, 3, 3, 6, 24, 192]  # T = 512: keys 0..191


@pytest.mark.parametrize("T", [64, 512])
def test_sink_share_of_a_local_head_is_small_and_of_a_parked_one_large(T):
    """A purely local head (each query on the token before it) gives no candidate key a share: under the old
    measure, every key before the late half, its top key was T//2 - 1, beside the first late query (the artefact at
    position 255 of T = 512). A head that also parks on a key in the middle of the candidates gives that key about
    half of every late query's attention, wherever the window's length puts it: the same share at T = 64 and 512."""
    q, k = local_and_parked(T, park=0, a=-30.0)  # local only: key 0 scores -30
    top, pos = received_attention(q, k, keys=sink_keys(T)).max(-1)
    assert top.item() < 1e-3
    old_top, old_pos = received_attention(q, k).max(-1)  # every key before the late half
    assert old_pos.item() == T // 2 - 1 and old_top.item() > 0.9 * 2 / T
    middle = sink_keys(T) // 2
    q, k = local_and_parked(T, park=middle, a=8.0)  # a key the late queries give as much as their previous token
    r = received_attention(q, k, keys=sink_keys(T))
    torch.testing.assert_close(r.double(), reference_received(q, k, sink_keys(T)), rtol=1e-5, atol=1e-6)
    top, pos = r.max(-1)
    assert pos.item() == middle and 0.45 < top.item() < 0.5  # e^8 / (2 e^8 + i - 1) for each late query i


# ----------------------------------------------------------------------------
# The sink's value norm, and the channels of the massive activation

def test_value_norm_ratio_by_hand():
    g = torch.Generator().manual_seed(0)
    v = torch.randn(3, 10, 2, D, generator=g, dtype=torch.float64)
    v[:, 0, 1] *= 0.01  # KV head 1: position 0's value nearly switched off
    norms = v.norm(dim=-1)
    want = norms[:, 0] / norms[:, 1:].mean(1)
    ratio = value_norm_ratio(v)
    assert ratio.shape == (3, 2) and ratio.dtype == torch.float64  # float32 for float32 or bfloat16 values
    torch.testing.assert_close(ratio, want, rtol=1e-12, atol=0)
    assert value_norm_ratio(v.bfloat16()).dtype == torch.float32
    assert (ratio[:, 1] < 0.05).all() and (ratio[:, 0] > 0.3).all()
    assert value_norm_ratio(v[:, :1]).isnan().all()  # one position: nothing to compare with


def bos_model(**kw):
    """Learned positions set to 0 and token 0's embedding 0: at position 0 the token 0 gives a zero hidden state in
    every layer (no biases; RMSNorm of 0 is 0, attention of a query that sees only itself returns its own value 0,
    the MLP of 0 is 0), so its value vector is exactly 0."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**{**BASE, "pos_emb": "learned", **kw})).double().eval()
    with torch.no_grad():
        model.transformer.wpe.weight.zero_()
        model.transformer.wte.weight[0].zero_()
    return model


@pytest.mark.parametrize("gate", ["none", "g1", "g2"])
def test_value_norm_ratio_is_zero_for_a_zero_value_at_position_0_and_one_for_equal_values(gate):
    model = bos_model(gate=gate)
    idx = tokens(B=3, T=12)
    idx[:, 1:] = idx[:, 1:].clamp_min(1)
    idx[:, 0] = 0
    with Probe(model) as probe:
        model(idx)
    assert probe.stats["value_norm_ratio"] == [0.0, 0.0]
    assert probe.heads["value_norm_ratio"] == [[0.0] * HKV] * 2
    assert all(w.shape == (3,) and (w == 0).all() for w in probe.windows["value_norm_ratio"])
    with Probe(model) as probe:  # every position the same token: every value the same (positions are zero)
        model(torch.full((2, 12), 7))
    assert probe.stats["value_norm_ratio"] == pytest.approx([1.0, 1.0], rel=1e-9)


def test_massive_channels_finds_a_planted_channel():
    """Windows whose hidden state has one huge channel (-500 at channel 7) at their max position: it is the top
    channel in every window, its mean h is the planted value, and it holds almost all of the squared norm."""
    g = torch.Generator().manual_seed(0)
    h = torch.randn(6, 32, generator=g)
    h[:, 7] = -500.0
    h[:, 3] = 40.0 * torch.arange(1, 7)  # the next largest, growing over the windows
    pos = torch.tensor([0, 0, 0, 0, 5, 5])
    c = massive_channels(pos, h)
    assert c["channels"][:2] == [7, 3] and c["values"][:2] == pytest.approx([-500.0, 140.0])
    assert c["top_channel"] == 7 and c["top_channel_share"] == 1.0
    assert c["pos"] == 0 and c["pos_share"] == pytest.approx(4 / 6)
    energy = h.pow(2)
    want = (energy[:, c["channels"]].sum(1) / energy.sum(1)).mean().item()
    assert c["share"] == pytest.approx(want, rel=1e-6) and c["share"] > 0.99
    assert massive_channels(pos, h, k=1)["channels"] == [7]
    assert len(massive_channels(pos[:1], h[:1, :2])["channels"]) == 2  # k is at most the channels there are
    assert massive_channels(pos[:0], h[:0]) is None
    json.dumps(c, allow_nan=False)


def test_the_probe_finds_the_channel_of_a_planted_massive_activation():
    """The last block's MLP writes 1e4 x (its input's channel 0) into channel 5 (as in the act_ratio test): the
    probe names channel 5 in that layer, in every window; and each window's kept hidden state is the block's
    output at the position of its max |h|."""
    model = make(gate="none")
    outs = []
    hooks = [b.register_forward_hook(lambda m, a, out: outs.append(out.detach())) for b in model.transformer.h]
    with torch.no_grad():
        model.transformer.h[1].mlp.c_proj.weight[5] *= 0
        model.transformer.h[1].mlp.c_proj.weight[5, 0] = 1e4
    idx = tokens(B=4, T=12)
    with Probe(model) as probe:
        model(idx)
    for h in hooks:
        h.remove()
    for layer, out in enumerate(outs):
        flat = out.abs().flatten(1).argmax(1)
        pos = flat // C
        assert torch.equal(probe.massive[layer]["pos"], pos)
        torch.testing.assert_close(probe.massive[layer]["h"].double(), out[torch.arange(4), pos], rtol=1e-6, atol=0)
    c = probe.channels[1]
    assert c["channels"][0] == 5 and c["top_channel"] == 5 and c["top_channel_share"] == 1.0 and c["share"] > 0.99
    assert abs(c["values"][0]) > 20 * probe.stats["max_act"][0]  # the layer before has no such channel


# ----------------------------------------------------------------------------
# Loss spikes and the peak FLOP/s table

def reference_spikes(losses, threshold):
    """count_spike written out: the exponentially weighted mean m and variance v of the earlier losses (m' = e m +
    (1 - e) x, v' = e (v + (1 - e) (x - m)^2)); a step spikes, from step SPIKE_WARMUP on, when x - m exceeds both
    threshold * sqrt(v) and SPIKE_MIN_NATS; a run of spiking steps counts once."""
    e, m, v, count, flags = probe.SPIKE_EMA, None, 0.0, 0, []
    for i, x in enumerate(losses):
        spiking = m is not None and i >= probe.SPIKE_WARMUP and x - m > max(threshold * v ** 0.5, probe.SPIKE_MIN_NATS)
        count += spiking and not (flags and flags[-1])
        flags.append(spiking)
        m, v = (x, 0.0) if m is None else (e * m + (1 - e) * x, e * (v + (1 - e) * (x - m) ** 2))
    return count, flags, m, v


def test_count_spike_follows_the_running_mean_and_variance_and_counts_a_run_once():
    assert (probe.SPIKE_EMA, probe.SPIKE_WARMUP, probe.SPIKE_MIN_NATS) == (0.95, 20, 0.1)
    noisy = [3.0 + (0.1 if i % 2 else -0.1) for i in range(60)]  # sd about 0.1: 6 sd (0.6) beats the 0.1 floor
    m, v = reference_spikes(noisy, 6.0)[2:]
    cases = [([3.0] * 19 + [3.5], 6.0, 0),  # the 20th step is still in the warmup
             ([3.0] * 20 + [3.5], 6.0, 1),  # the 21st, with 20 losses behind it, is the first that can count
             ([3.0] * 30 + [3.09], 6.0, 0), ([3.0] * 30 + [3.11], 6.0, 1),  # a quiet loss: the 0.1 nats floor decides
             (noisy + [m + 0.99 * 6 * v ** 0.5], 6.0, 0), (noisy + [m + 1.01 * 6 * v ** 0.5], 6.0, 1),  # about 6 sd
             ([3.0] * 30 + [4.0] * 5 + [3.0] * 100 + [4.0] * 5, 1.0, 2)]  # two runs of spiking steps: two spikes
    for losses, threshold, spikes in cases:
        health = {"loss_ema": None, "loss_spikes": 0}
        flags = [probe.count_spike(health, x, threshold) for x in losses]
        count, want, m, v = reference_spikes(losses, threshold)
        assert (health["loss_spikes"], flags) == (count, want) and count == spikes
        assert (health["loss_ema"], health["loss_var"]) == pytest.approx((m, v), rel=1e-12, abs=1e-15)
    assert sum(want) > 2 * spikes  # the last case's spikes each last several steps


def test_each_listed_gpu_gets_its_own_peak(monkeypatch):
    """PEAK_FLOPS matches by substring, the longest key first: a name that holds another key (H200 NVL holds H200,
    GH200 H200, L40 L4) gets its own entry's peak, whatever the table's order. Each entry is told apart by a peak of
    its own here (GH200's and H200's real ones are equal). A CPU run on a machine with a GPU has no peak."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for key, flops in probe.PEAK_FLOPS:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None, n=f"NVIDIA {key}": n)
        assert probe.peak_flops() == flops, key
    monkeypatch.setattr(probe, "PEAK_FLOPS", [(key, float(i + 1)) for i, (key, _) in enumerate(probe.PEAK_FLOPS)])
    for i, (key, _) in enumerate(probe.PEAK_FLOPS):
        for name in (f"NVIDIA {key}", f"NVIDIA {key} 80GB"):
            monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None, n=name: n)
            assert probe.peak_flops() == i + 1, name
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: pytest.fail("asked a CPU for a GPU name"))
    assert probe.peak_flops("cpu") is None and probe.peak_flops(torch.device("cpu")) is None

"""Checks of exercise 03 (F-Attn from attention probabilities), in order: shapes, invariants (rows sum to 1, no
attention to the future), numbers against PyTorch's SDPA and kernels.first_token_attention, then F-Attn of a
small GPT against the project's probe."""

import math

import torch
import torch.nn.functional as F

import check
from check import Wrong, expect_close, expect_shape, random_qk, same


def _reference_probs(q, k, scale=None):
    """Causal attention probabilities from PyTorch's SDPA: with v the identity, softmax(...) @ v is the matrix
    itself."""
    B, H, T, _ = q.shape
    eye = torch.eye(T, dtype=q.dtype).expand(B, H, T, T)
    return F.scaled_dot_product_attention(q, k, eye, is_causal=True, scale=scale)


def _as_float(what, got):
    if isinstance(got, torch.Tensor):
        if got.numel() != 1:
            raise Wrong(f"{what} should be one number, got a tensor of shape {tuple(got.shape)}: average over "
                        "windows and heads as well.")
        raise Wrong(f"{what} should return a Python float, got a one-element tensor: a tensor, even of one element, "
                    "is not a float; convert it.")
    if isinstance(got, bool) or not isinstance(got, (float, int)):
        raise Wrong(f"{what} should be a Python float, got {type(got).__name__}")
    return float(got)


def check_probs_shape(student):
    """attention_probs returns (B, H, T, T) in q's dtype, float32 or float64"""
    for dtype in (torch.float32, torch.float64):  # a computation in float32 keeps float32 only: both are asked
        q, k = random_qk(2, 3, 5, 4, dtype=dtype)
        probs = student.attention_probs(q, k)
        expect_shape("attention_probs(q, k) for q, k of shape (2, 3, 5, 4)", probs, (2, 3, 5, 5),
                     "One row per query, one column per key: check which axes of q and k your product contracts.")
        if probs.dtype != q.dtype:
            raise Wrong(f"attention_probs should keep q's dtype ({q.dtype}), got {probs.dtype}: is a step converting "
                        "to another dtype?")


def check_probs_rows_sum_to_one(student):
    """each query's row sums to 1 (a softmax over the keys), no NaN"""
    q, k = random_qk()
    probs = student.attention_probs(q, k)
    if torch.isnan(probs).any():
        raise Wrong("attention_probs has NaN values: a row whose scores are all hidden gives NaN after softmax. Is "
                    "your mask inverted (hiding the past and the diagonal instead of the future)? Query i must "
                    "see keys 0..i, its own included.")
    rows = probs.sum(-1)
    if not torch.allclose(rows, torch.ones_like(rows), atol=1e-6):
        if torch.allclose(probs.sum(-2), torch.ones_like(rows), atol=1e-6):
            raise Wrong("the columns of attention_probs sum to 1, not the rows: your softmax runs over the queries. "
                        "Each query spreads its attention over the keys: normalise along the keys' axis.")
        raise Wrong("the rows of attention_probs (one per query) do not sum to 1. The softmax over the keys must be "
                    "the last step: is it taken over another axis, or is something applied after it?")


def check_probs_causal(student):
    """no attention to the future: every entry above the diagonal (key j > query i) is exactly 0"""
    q, k = random_qk()
    probs = student.attention_probs(q, k)
    T = probs.size(-1)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    if (probs[..., future] != 0).any():
        scores = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(q.size(-1))
        zero_filled = scores.masked_fill(future, 0.0).softmax(-1)
        if same(probs, zero_filled):
            raise Wrong("keys after the query get weight: the future's scores were set to 0 (or zeroed by tril) "
                        "before the softmax, and exp(0) = 1 is not 'no weight'. Which score does the softmax turn "
                        "into exactly 0?")
        raise Wrong("some entries above the diagonal (key j > query i) are not 0: query i may only see keys "
                    "0..i. Hide the future before the softmax, so that it gets exactly 0 weight, and check which "
                    "entries your mask covers (key j > query i, the diagonal excluded).")


def check_probs_match_reference(student):
    """the probabilities match PyTorch's scaled_dot_product_attention, in float64"""
    q, k = random_qk(T=10, D=16, seed=1)
    probs = student.attention_probs(q, k)
    if same(probs, _reference_probs(q, k, scale=1.0)):
        raise Wrong("your probabilities are softmax(q k^T) without the 1/sqrt(D) scale, D the head dimension (q's "
                    "last axis): the scores are scaled before the softmax.")
    if same(probs, _reference_probs(q, k, scale=1.0 / q.size(-1))):
        raise Wrong("your scores are divided by D, not by sqrt(D).")
    expect_close("attention_probs(q, k) in float64", probs, _reference_probs(q, k), atol=1e-10, rtol=1e-8,
                 hint="Likely causes: the scale, the product of q and k (every query against every key, summed "
                      "over D), or a computation in float32 (keep q's dtype).")


def check_first_token_shape(student):
    """first_token_attention returns (B, H), each value in [0, 1]"""
    probs = _reference_probs(*random_qk(2, 3, 9, 8, seed=2))
    p0 = student.first_token_attention(probs)
    expect_shape("first_token_attention(probs) for probs of shape (2, 3, 9, 9)", p0, (2, 3),
                 "One number per window and head: the queries are averaged away.")
    if not torch.isfinite(p0).all() or (p0 < 0).any() or (p0 > 1 + 1e-9).any():
        raise Wrong("first_token_attention has values outside [0, 1]: it is an average of probabilities. "
                    "Summing over the queries instead of averaging gives values above 1.")


def check_first_token_matches_reference(student):
    """first_token_attention matches kernels.first_token_attention averaged over the queries 1..T-1"""
    from kernels import first_token_attention as per_query  # each query's probability on key 0, (B, H, T)
    q, k = random_qk(2, 3, 12, 8, seed=3)
    probs = _reference_probs(q, k)
    p0 = student.first_token_attention(probs)
    if same(p0, probs[..., :, 0].mean(-1)):
        raise Wrong("you averaged over every query, query 0 included. Query 0 sees only key 0, so it always gives "
                    "it probability 1 and inflates F-Attn: average over the queries 1..T-1 only.")
    if same(p0, torch.full_like(p0, 1.0 / probs.size(-1))):  # = probs[..., i, :].mean(-1) for any row i
        raise Wrong("every value of first_token_attention is 1/T: you averaged over the keys (the last axis, j), "
                    "and each query's row sums to 1, so that mean is 1/T whatever the attention does. Take each "
                    "query's probability on key 0 first, then average over the queries.")
    if same(p0, probs[..., 0][..., 1:].sum(-1) / probs.size(-1)):  # key 0's column, queries 1..T-1, over T
        raise Wrong("you divided the sum over the queries 1..T-1 by T: there are T-1 of them, so every value is "
                    "(T-1)/T of their mean. Divide by the number of queries you summed (or take their mean).")
    if same(p0, probs[..., 0, 1:].mean(-1)):
        raise Wrong("you read row 0 (what query 0 gives each key) instead of column 0 (what each query gives key 0): "
                    "probs[b, h, i, j] is query i's weight on key j, so the key is the last index.")
    expect_close("first_token_attention(probs)", p0, per_query(q, k, backend="torch")[..., 1:].mean(-1),
                 atol=1e-5, rtol=1e-4, hint="Re-check which entries you average: the probability on key 0, of "
                                            "the queries 1..T-1, in each window and head.")


def check_f_attn_is_the_mean_over_windows_and_heads(student):
    """f_attn returns a Python float: first_token_attention averaged over windows and heads"""
    from kernels import first_token_attention as per_query
    q, k = random_qk(3, 4, 10, 8, seed=4)
    got = _as_float("f_attn(probs)", student.f_attn(_reference_probs(q, k)))
    want = per_query(q, k, backend="torch")[..., 1:].mean().item()
    if not abs(got - want) <= 1e-5:
        raise Wrong(f"f_attn is off by {abs(got - want):.3g}: it is the mean of first_token_attention(probs) over "
                    "windows and heads (a plain mean: every (window, head) has the same T-1 queries).")


def check_f_attn_matches_probe(student):
    """F-Attn of each layer of a small seeded GPT equals probe.Probe's stats["first_token_attn"]"""
    from model import GPT, GPTConfig
    from probe import Probe
    with torch.random.fork_rng():
        torch.manual_seed(check.seeded(0))
        model = GPT(GPTConfig(block_size=24, vocab_size=97, n_layer=2, n_head=4, n_embd=32,
                              attn_backend="torch")).eval()
        idx = torch.randint(0, 97, (3, 24))
    with torch.no_grad(), Probe(model, attention_maps=True) as probe:
        model(idx)
    got = [_as_float(f"f_attn(layer {i}'s attention map)", student.f_attn(maps))
           for i, maps in enumerate(probe.attention_maps)]
    for layer, (g, want) in enumerate(zip(got, probe.stats["first_token_attn"])):
        if not abs(g - want) <= 1e-5:
            raise Wrong(f"layer {layer}: your F-Attn is off by {abs(g - want):.3g} from the probe's on the same "
                        "model and tokens. The maps are (B, n_head, T, T) float32 causal softmaxes; f_attn should "
                        "average key 0's probability over queries 1..T-1, heads and windows.")

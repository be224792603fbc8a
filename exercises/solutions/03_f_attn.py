"""
Exercise 03: F-Attn from attention probabilities.

F-Attn (GA Table 4) measures the attention sink on the first token: the attention probability that queries put
on position 0, averaged over the query positions 1..T-1, the heads and the windows of a batch, per layer; the
paper then averages it over layers (baseline 0.467, G1 gate 0.048).

  gap 1: attention_probs(q, k)         q, k (B, H, T, D) -> causal softmax(q k^T / sqrt(D)), (B, H, T, T)
  gap 2: first_token_attention(probs)  each window's and head's probability on key 0, averaged over queries
                                       1..T-1, (B, H)
  gap 3: f_attn(probs)                 one layer's F-Attn, a Python float

Check your file with:  python exercises/check.py 03
"""

import torch


def attention_probs(q, k):
    """q, k: (B, H, T, D) -> the causal attention probabilities (B, H, T, T), same dtype as q.

    probs[b, h, i, j] is the weight query i gives key j: softmax over j of q_i . k_j / sqrt(D), where query i sees
    keys 0..i only (keys j > i get exactly 0). Each row i sums to 1."""
    T, D = q.size(-2), q.size(-1)
    scores = (q @ k.transpose(-2, -1)) * D ** -0.5  # (B, H, T, T): row i is query i, column j is key j
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)  # True where key j > query i
    scores = scores.masked_fill(future, float("-inf"))  # exp(-inf) = 0: the future gets no weight at all
    return scores.softmax(dim=-1)  # over the keys: each query's row sums to 1


def first_token_attention(probs):
    """probs: (B, H, T, T) causal attention probabilities, T >= 2 -> (B, H): the probability on key 0, averaged
    over the queries 1..T-1. Query 0 is left out: it sees only key 0, so its probability there is always 1."""
    return probs[..., 1:, 0].mean(-1)  # column 0 (key 0), rows 1..T-1 (the queries that have a choice)


def f_attn(probs):
    """probs: (B, H, T, T) of one layer -> F-Attn, a Python float: first_token_attention averaged over windows
    and heads."""
    return first_token_attention(probs).mean().item()  # every window and head has the same number of queries


# known mistakes, for CI: (the check that must catch it, text in this file, the mistaken text)
MUTANTS = [
    ("probs_shape", "return scores.softmax(" "dim=-1)", "return scores.float().softmax(dim=-1)"),  # float32 always
    ("probs_match_reference", "return scores.softmax(" "dim=-1)",
     "return scores.float().softmax(dim=-1).to(q.dtype)"),  # float32's precision, returned in q's dtype
    ("probs_rows_sum_to_one", "scores.softmax(" "dim=-1)", "scores.softmax(dim=-2)"),  # softmax over the queries
    ("probs_causal", "masked_fill(future, " 'float("-inf"))', "masked_fill(future, 0.0)"),  # 0 is not "no weight"
    ("probs_match_reference", "(q @ k.transpose(-2, -1)) " "* D ** -0.5", "(q @ k.transpose(-2, -1))"),  # no 1/sqrt(D)
    ("first_token_matches_reference", "probs[..., 1:, " "0]", "probs[..., :, 0]"),  # query 0 counted
    ("first_token_matches_reference", "return probs[..., 1:, " "0].mean(-1)",
     "return probs[..., 1:, :].mean(-1).mean(-1)"),  # averaged over the keys: 1/T, whatever the attention does
    ("first_token_matches_reference", "return probs[..., 1:, " "0].mean(-1)",
     "return probs[..., 1:, " "0].sum(-1) / probs.size(-1)"),  # the T-1 queries' sum divided by T
    ("f_attn_is_the_mean_over_windows_and_heads", "first_token_attention(probs).mean()" ".item()",
     "first_token_attention(probs).mean()"),  # a one-element tensor, not a Python float
]

# the answer's key fragments: they appear in hints.md (not in its first hint), never in the statement, the starter,
# the checks, or anything the checker prints for the starter or a mutant (some split in two literals, as in MUTANTS)
GIVEAWAYS = ["q @ k.transpose(-2, -1)", "masked_fill(future, " 'float("-inf"))', "softmax(dim=-1)",
             "probs[..., 1:, " "0]", "first_token_attention(probs).mean()" ".item()"]

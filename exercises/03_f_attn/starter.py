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
    # TODO(03-gap1): the causal attention probabilities: each row a softmax over the keys its query may see, the
    #                future exactly 0
    raise NotImplementedError("03-gap1: write attention_probs")


def first_token_attention(probs):
    """probs: (B, H, T, T) causal attention probabilities, T >= 2 -> (B, H): the probability on key 0, averaged
    over the queries 1..T-1. Query 0 is left out: it sees only key 0, so its probability there is always 1."""
    # TODO(03-gap2): for each window and head, the probability on key 0 averaged over the queries 1..T-1
    raise NotImplementedError("03-gap2: write first_token_attention")


def f_attn(probs):
    """probs: (B, H, T, T) of one layer -> F-Attn, a Python float: first_token_attention averaged over windows
    and heads."""
    # TODO(03-gap3): first_token_attention averaged over windows and heads, as a Python float
    raise NotImplementedError("03-gap3: write f_attn")

"""
Exercise 01: the G1 gate.

Multi-head causal self-attention with the gate of the Gated Attention paper (GA) at position G1: each head's
SDPA output Y is multiplied by gate scores sigmoid(X W_theta), where X is the block's input after the
pre-attention norm (the tensor that feeds Q, K and V), before the heads are concatenated and mixed by W_O.

  gap 1: g1_gate(y, x, w_gate, granularity)             Y' = Y * sigmoid(X W_theta), per head
  gap 2: attention_block(x, w_qkv, w_gate, w_o, n_head)  q, k, v -> causal attention -> G1 gate -> W_O

causal_attention is given. Check your file with:  python exercises/check.py 01
"""

import math

import torch


def causal_attention(q, k, v):
    """q, k, v: (B, H, T, D) -> (B, H, T, D): softmax(q k^T / sqrt(D)) v, where query t sees keys 0..t only."""
    T, D = q.size(-2), q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)  # (B, H, T, T): query t's score for key j
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)  # True where key j > query t
    scores = scores.masked_fill(future, float("-inf"))  # exp(-inf) = 0: no weight on the future
    return torch.softmax(scores, dim=-1) @ v


def g1_gate(y, x, w_gate, granularity="elementwise"):
    """The G1 gate: y * sigmoid(x @ w_gate.T), the scores laid out per head.

    y:      (B, T, H, D) each head's SDPA output
    x:      (B, T, C)    the block's input after the pre-attention norm (what Q, K, V are computed from)
    w_gate: (H*D, C) for granularity "elementwise" (one score per channel of each head; row h*D + d is head h's
            channel d) or (H, C) for "headwise" (one score per head, shared by the head's D channels)
    returns (B, T, H, D); any other granularity raises ValueError.
    """
    # TODO(01-gap1): compute the gate logits from x, squash them into (0, 1), shape the scores as (B, T, H, D)
    #                (elementwise) or (B, T, H, 1) (headwise), and multiply y by them
    raise NotImplementedError("01-gap1: write g1_gate: y * sigmoid(x @ w_gate.T), scores shaped per head")


def attention_block(x, w_qkv, w_gate, w_o, n_head, granularity="elementwise"):
    """Causal self-attention with the G1 gate, no biases, no position encoding.

    x: (B, T, C); w_qkv: (3C, C), rows [q; k; v]: x @ w_qkv.T is q, then k, then v, each (B, T, C), whose channels
    are the heads in order (head h: channels h*D .. h*D + D - 1, D = C // n_head); w_gate: as in g1_gate;
    w_o: (C, C), the output projection W_O. Returns (B, T, C).
    """
    # TODO(01-gap2): q, k, v from x @ w_qkv.T; split into heads (B, H, T, D); causal_attention; back to
    #                (B, T, H, D); the G1 gate (g1_gate) on each head's output; heads concatenated; @ w_o.T
    raise NotImplementedError("01-gap2: write attention_block: qkv -> heads -> causal attention -> G1 gate -> W_O")

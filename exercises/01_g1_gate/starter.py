"""
Exercise 01: the G1 gate.

Multi-head causal self-attention with the gate of the Gated Attention paper (GA) at position G1: each head's
SDPA output Y is multiplied by gate scores sigmoid(X W_theta), where X is the block's input after the
pre-attention norm (the tensor that feeds Q, K and V), before the heads are concatenated and mixed by W_O.

  gap 1: g1_gate(y, x, w_gate, granularity)             each head's output, gated by scores computed from x
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
    """The G1 gate: y times GA's gate scores sigmoid(X W_theta), one score per channel or one per head.

    y:      (B, T, H, D) each head's SDPA output
    x:      (B, T, C)    the block's input after the pre-attention norm (what Q, K, V are computed from)
    w_gate: W_theta, stored like an nn.Linear weight (out_features, C): (H*D, C) for "elementwise" (one score per
            channel of each head; row h*D + d scores head h's channel d) or (H, C) for "headwise" (one score per
            head, shared by the head's D channels; row h scores head h)
    returns (B, T, H, D), in y's dtype; any other granularity raises ValueError.
    """
    # TODO(01-gap1): y gated by its scores: each score in (0, 1), computed from x, multiplying its channel(s) of y
    raise NotImplementedError("01-gap1: write g1_gate")


def attention_block(x, w_qkv, w_gate, w_o, n_head, granularity="elementwise"):
    """Causal self-attention with the G1 gate, no biases, no position encoding.

    x: (B, T, C), the block's input after the norm. w_qkv: (3C, C), stored like an nn.Linear weight: rows 0..C-1
    project x to q, the next C rows to k, the last C to v; the channels of q, k and v are the heads in order (head h:
    channels h*D .. h*D + D - 1, D = C // n_head). w_gate: as in g1_gate. w_o: (C, C), the output projection W_O,
    stored like an nn.Linear weight, applied to the heads concatenated in order. Returns (B, T, C).
    """
    # TODO(01-gap2): the block's output: each head's causal attention (causal_attention), gated by g1_gate with
    #                scores from x, then the heads concatenated and mixed by W_O
    raise NotImplementedError("01-gap2: write attention_block")

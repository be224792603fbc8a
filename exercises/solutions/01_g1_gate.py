"""
Exercise 01: the G1 gate.

Multi-head causal self-attention with the gate of the Gated Attention paper (GA) at position G1: each head's
SDPA output Y is multiplied by gate scores sigmoid(X W_theta), where X is the block's input after the
pre-attention norm (the tensor that feeds Q, K and V), before the heads are concatenated and mixed by W_O.

  gap 1: g1_gate(y, x, w_gate, granularity)             each head's output, gated by scores computed from x
  gap 2: attention_block(x, w_qkv, w_gate, w_o, n_head)  q, k, v -> causal attention -> G1 gate -> W_O

causal_attention is given. This is the reference solution:
    python exercises/check.py 01 --file=exercises/solutions/01_g1_gate.py
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
    B, T, H, D = y.shape
    scores = torch.sigmoid(x @ w_gate.T)  # (B, T, H*D) or (B, T, H): each score in (0, 1), computed from x, not y
    if granularity == "elementwise":
        scores = scores.view(B, T, H, D)  # row h*D + d of w_gate scores head h's channel d
    elif granularity == "headwise":
        scores = scores.view(B, T, H, 1)  # one score per head, broadcast over the head's D channels
    else:
        raise ValueError(f"granularity must be 'elementwise' or 'headwise', got {granularity!r}")
    return y * scores  # a score near 0 silences that head (or channel) for this token: it can output nothing


def attention_block(x, w_qkv, w_gate, w_o, n_head, granularity="elementwise"):
    """Causal self-attention with the G1 gate, no biases, no position encoding.

    x: (B, T, C), the block's input after the norm. w_qkv: (3C, C), stored like an nn.Linear weight: rows 0..C-1
    project x to q, the next C rows to k, the last C to v; the channels of q, k and v are the heads in order (head h:
    channels h*D .. h*D + D - 1, D = C // n_head). w_gate: as in g1_gate. w_o: (C, C), the output projection W_O,
    stored like an nn.Linear weight, applied to the heads concatenated in order. Returns (B, T, C).
    """
    B, T, C = x.shape
    q, k, v = (x @ w_qkv.T).split(C, dim=-1)  # each (B, T, C)
    q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
    y = causal_attention(q, k, v).transpose(1, 2)  # (B, T, H, D): each head's SDPA output
    y = g1_gate(y, x, w_gate, granularity)  # G1: gate each head's output, with scores computed from x
    return y.reshape(B, T, C) @ w_o.T  # heads concatenated, then mixed by W_O


# known mistakes, for CI: (the check that must catch it, text of this file, the mistake). Each text is split into
# two literals so that it occurs once in this file: in the code above, not here.
MUTANTS = [
    ("gate_scores_in_0_1", "torch.sigmoid(" "x @ w_gate.T)", "(x @ w_gate.T)"),  # no sigmoid: an identity "gate"
    ("gate_scores_in_0_1", "torch.sigmoid(" "x @ w_gate.T)",  # a hard gate: the scores rounded to 0 or 1
     "(torch.sigmoid(" "x @ w_gate.T) > 0.5).to(y.dtype)"),
    ("gate_scores_in_0_1", "torch.sigmoid(" "x @ w_gate.T)", "torch.sigmoid(-(x @ w_gate.T))",  # a sign flipped
     "check the sign"),
    ("gate_scores_in_0_1", "return y * " "scores", "return y", "does not act on y"),  # no gate at all
    ("g1_gate_numbers", "torch.sigmoid(" "x @ w_gate.T)", "(torch.tanh(x @ w_gate.T) + 1) / 2",  # another squashing
     "not the sigmoid of them"),
    ("g1_gate_numbers", "torch.sigmoid(" "x @ w_gate.T)", "torch.nn.functional.hardsigmoid(x @ w_gate.T)",
     "not the sigmoid of them"),
    ("g1_gate_numbers", "torch.sigmoid(" "x @ w_gate.T)", "torch.sigmoid(x.float() @ w_gate.float().T)",  # float32
     "float64's precision"),
    ("headwise_one_score_per_head", "scores.view(" "B, T, H, 1)", "scores.view(B, T, 1, H)"),  # over heads, not D
    ("g1_gate_numbers", "raise " "ValueError(f\"granularity", "print(f\"granularity"),  # an unknown one let through
    ("trap_gate_after_wo",  # G5: each head's output mixed by W_O first, then gated
     "y = g1_gate(" "y, x, w_gate, granularity)  # G1: gate each head's output, with scores computed from x\n"
     "    return y.reshape(" "B, T, C) @ w_o.T",
     "y = y.reshape(B, T, C) @ w_o.T\n"
     "    return g1_gate(y.view(B, T, n_head, -1), x, w_gate, granularity).reshape(B, T, C)"),
    ("attention_block_vs_model",  # G2: the values gated before attention
     "y = causal_attention(" "q, k, v).transpose(1, 2)  # (B, T, H, D): each head's SDPA output\n"
     "    y = g1_gate(" "y, x, w_gate, granularity)",
     "v = g1_gate(v.transpose(1, 2), x, w_gate, granularity).transpose(1, 2)\n"
     "    y = causal_attention(q, k, v).transpose(1, 2)", "you gated the values"),
    ("trap_self_gating",  # the gate logits from the attention output instead of the block's input
     "y = g1_gate(y, " "x, w_gate, granularity)", "y = g1_gate(y, y.reshape(B, T, C), w_gate, granularity)"),
    ("trap_self_gating",  # the gate logits from the queries, "the current token's" too, but through W_Q
     "y = g1_gate(y, " "x, w_gate, granularity)", "y = g1_gate(y, q.transpose(1, 2).reshape(B, T, C), w_gate, "
     "granularity)", "computed from q, a projection of x"),
    ("trap_self_gating", "y = g1_gate(y, " "x, w_gate, granularity)",  # from the values
     "y = g1_gate(y, v.transpose(1, 2).reshape(B, T, C), w_gate, granularity)", "computed from v"),
]

# the answer's key fragments: they appear in hints.md (not in its first hint), never in the statement, the starter,
# the checks, or anything the checker prints for the starter or a mutant
GIVEAWAYS = ["sigmoid(x @ w_gate.T)", "view(B, T, H, 1)", "view(B, T, H, D)", "transpose(1, 2)", "split(C, dim=-1)"]

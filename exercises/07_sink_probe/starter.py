"""
Exercise 07: find the sink, the most-attended key.

F-Attn (exercise 03) looks only at position 0. A sink can sit anywhere, though: on a delimiter, on the first
token of a document inside the window. Here you find it wherever it is, as probe.py does (sink_share, sink_pos):
take the attention each early key j < T//2 receives from the late queries i in [T//2, T) (each of them sees every
such key, so the keys compete on equal terms), and pick the largest. Then count the sink heads of Gu et al.
(ICLR 2025, "When attention sink emerges in language models"): the heads whose F-Attn exceeds epsilon = 0.3.

  gap 1: received_attention(probs)   probs (B, H, T, T) -> r (B, H, T//2): key j's attention, averaged over
                                     the late queries
  gap 2: sink(probs)                 -> (share, pos), (B, H) each: the largest r of each window and head and
                                     the key where it is
  gap 3: sink_heads(f_attn_per_head, threshold=0.3)  -> the fraction of heads whose F-Attn exceeds threshold

Check your file with:  python exercises/check.py 07
"""

import torch


def received_attention(probs):
    """probs: (B, H, T, T) causal attention probabilities (probs[b, h, i, j]: query i's weight on key j) ->
    r (B, H, T//2): r[b, h, j] = the mean of probs[b, h, i, j] over the late queries i = T//2 .. T-1, for the
    early keys j = 0 .. T//2 - 1."""
    # TODO(07-gap1): r (B, H, T//2) in probs' dtype: each early key's probability, averaged over the late queries
    raise NotImplementedError("07-gap1: write received_attention")


def sink(probs):
    """probs: (B, H, T, T) -> (share, pos), (B, H) each: for each window and head, the largest r of
    received_attention(probs) (a float) and the position of that key (an integer tensor; on a tie, any of the
    tied keys: the checks' inputs have none)."""
    # TODO(07-gap2): (share, pos), (B, H) each: the most-attended early key's r, and its position (integers)
    raise NotImplementedError("07-gap2: write sink")


def sink_heads(f_attn_per_head, threshold=0.3):
    """f_attn_per_head: a tensor of F-Attn values, one per head (any shape, e.g. (n_head,) or (n_layer, n_head)) ->
    a Python float: the fraction of those heads whose F-Attn is strictly greater than threshold (Gu et al.'s
    sink heads; their epsilon is 0.3)."""
    # TODO(07-gap3): the fraction of all the given heads whose F-Attn exceeds threshold, as a Python float
    raise NotImplementedError("07-gap3: write sink_heads")

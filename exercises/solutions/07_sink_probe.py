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
    n = probs.size(-1) // 2
    # rows: the late queries, which all see every early key; columns: the early keys. An early query would
    # favour the first keys only because it has fewer keys to choose from.
    return probs[..., n:, :n].mean(dim=-2)


def sink(probs):
    """probs: (B, H, T, T) -> (share, pos), (B, H) each: for each window and head, the largest r of
    received_attention(probs) (a float) and the position of that key (an integer tensor; on a tie, any of the
    tied keys: the checks' inputs have none)."""
    r = received_attention(probs)  # (B, H, T//2)
    share, pos = r.max(dim=-1)  # over the keys: the most-attended early key, wherever it is
    return share, pos


def sink_heads(f_attn_per_head, threshold=0.3):
    """f_attn_per_head: a tensor of F-Attn values, one per head (any shape, e.g. (n_head,) or (n_layer, n_head)) ->
    a Python float: the fraction of those heads whose F-Attn is strictly greater than threshold (Gu et al.'s
    sink heads; their epsilon is 0.3)."""
    return (f_attn_per_head > threshold).float().mean().item()  # "exceeds": strictly greater


# known mistakes, for CI: (the check that must catch it, text in this file, the mistaken text)
MUTANTS = [
    ("received_shape", ".mean(" "dim=-2)", ".mean(dim=-1)"),  # averaged over the keys instead of the queries
    ("received_matches_probe", "probs[..., n:, " ":n]", "probs[..., :, :n]"),  # every query, not only the late ones
    # "the sink is the first token": position 0 assumed instead of searched for
    ("sink_finds_planted_sink", "share, pos = r.max(" "dim=-1)",
     "share, pos = r[..., 0], torch.zeros(r.shape[:-1], dtype=torch.long)"),
    ("sink_heads_strictly_above", "(f_attn_per_head > " "threshold)", "(f_attn_per_head >= threshold)"),
    # the late queries counted from the middle rounded up: one query short at an odd T
    ("received_matches_probe", "probs[..., n:, " ":n]", "probs[..., (probs.size(-1) + 1) // 2:, :n]"),
    ("sink_heads_fraction", "return (f_attn_per_head > " "threshold).float().mean().item()",  # one layer's fraction
     "return (f_attn_per_head > " "threshold).float().reshape(-1, f_attn_per_head.shape[-1])[0].mean().item()"),
    ("sink_heads_strictly_above", "return (f_attn_per_head > " "threshold)",  # rounded before the comparison
     "return (f_attn_per_head.round(decimals=2) > threshold)"),
    ("received_shape", "n = probs.size(-1) " "// 2", "n = (probs.size(-1) + 1) // 2",  # the early keys rounded up
     "it keeps 5 early keys"),
]

# the answer's key fragments: none may appear in the statement, the starter, the checks or the checker's messages,
# only in hints.md's later hints (split so that each occurs once in the code above, as MUTANTS' texts must)
GIVEAWAYS = ["probs[..., n:" ", :n].me" "an(dim=-2)", "share, pos = r.max(" "dim=-1)",
             "(f_attn_per_head > thr" "eshold).float().mean()"]

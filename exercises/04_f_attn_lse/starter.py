"""
Exercise 04: F-Attn without the T x T matrix.

The probability that query i puts on key 0 is a softmax entry, p_i0 = exp(s_i0) / (sum over j <= i of exp(s_ij)),
where s_ij = q_i . k_j / sqrt(D). Only its denominator needs the whole row, and its log, the row's log-sum-exp
lse_i = log(sum over j <= i of exp(s_ij)), is one number per query. So F-Attn needs one number per row, not the
(T, T) matrix: a flash-attention kernel keeps exactly that number (kernels.py returns it), and so does the online
log-sum-exp you write here, which reads the keys `chunk` at a time and keeps a running max and sum.

  gap 1: row_logsumexp(q, k, chunk)      the log-sum-exp of each query's causal, scaled scores, (B, H, T),
                                         computed chunk keys at a time (memory O(T * chunk), never T x T)
  gap 2: first_token_probs(q, k, chunk)  p_i0 for every query, from row_logsumexp, (B, H, T)

chunk_scores is given. Check your file with:  python exercises/check.py 04
"""

import torch


def chunk_scores(q, k, j0, j1):
    """q, k: (B, H, T, D) -> the scores of every query against the keys j0..j1-1, (B, H, T, j1 - j0):
    q_i . k_j / sqrt(D), and -inf where key j > query i (the future: exp(-inf) = 0)."""
    T, D = q.size(2), q.size(3)
    s = (q @ k[:, :, j0:j1].transpose(-2, -1)) * D ** -0.5
    future = torch.arange(j0, j1, device=q.device)[None, :] > torch.arange(T, device=q.device)[:, None]  # (T, j1 - j0)
    return s.masked_fill(future, float("-inf"))


def row_logsumexp(q, k, chunk=64):
    """q, k: (B, H, T, D) -> (B, H, T): lse_i = log(sum over keys j <= i of exp(q_i . k_j / sqrt(D))), computed
    from chunk_scores(q, k, j0, j1) for the key chunks [0, chunk), [chunk, 2 chunk), ..., keeping per query the
    running max m of the scores seen so far and the running sum l of exp(score - m) over them. Never builds a
    (T, T) tensor."""
    # TODO(04-gap1): lse (B, H, T), from the key chunks one at a time, m and l kept up to date after each chunk
    raise NotImplementedError("04-gap1: write row_logsumexp")


def first_token_probs(q, k, chunk=64):
    """q, k: (B, H, T, D) -> (B, H, T): p_i0, each query's attention probability on key 0 (every query sees key 0;
    query 0 sees only it, so p_00 = 1), from row_logsumexp: never the (T, T) matrix."""
    # TODO(04-gap2): each query's probability on key 0, from its score on key 0 (chunk_scores can give it) and
    #                row_logsumexp
    raise NotImplementedError("04-gap2: write first_token_probs")

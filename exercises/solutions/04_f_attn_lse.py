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
    B, H, T, _ = q.shape
    m = q.new_full((B, H, T), float("-inf"))  # running max of each query's scores so far
    l = q.new_zeros((B, H, T))  # running sum of exp(score - m): every term <= 1, so no overflow
    for j0 in range(0, T, chunk):
        s = chunk_scores(q, k, j0, min(j0 + chunk, T))  # (B, H, T, c): only this chunk is ever in memory
        # The first chunk holds key 0, which every query sees, so m is finite from then on and exp(m - m_new)
        # never meets -inf - (-inf); a row that sees none of a later chunk has s.amax = -inf and keeps its m.
        m_new = torch.maximum(m, s.amax(-1))
        # the old terms were exp(s - m): bring them to the new max by exp(m - m_new) <= 1, then add the chunk's
        l = l * torch.exp(m - m_new) + torch.exp(s - m_new.unsqueeze(-1)).sum(-1)
        m = m_new
    return m + torch.log(l)  # log(sum exp(s)) = m + log(sum exp(s - m))


def first_token_probs(q, k, chunk=64):
    """q, k: (B, H, T, D) -> (B, H, T): p_i0, each query's attention probability on key 0 (every query sees key 0;
    query 0 sees only it, so p_00 = 1), from row_logsumexp: never the (T, T) matrix."""
    s0 = chunk_scores(q, k, 0, 1)[..., 0]  # (B, H, T): each query's score on key 0, never masked
    return torch.exp(s0 - row_logsumexp(q, k, chunk))  # s0 <= lse: p in (0, 1], no overflow


# known mistakes, for CI: (the check that must catch it, text in this file, the mistaken text)
MUTANTS = [
    # the running sum kept at the old max: right while the max stays put, wrong once a later chunk raises it
    ("lse_chunked", "l * torch.exp(" "m - m_new) + ", "l + "),
    # exp before subtracting the max: fine for small scores, inf once a score passes ~88 (float32)
    ("lse_large_logits", "l = l * torch.exp(m - " "m_new) + torch.exp(s - m_new.unsqueeze(-1)).sum(-1)\n        m = m_new",
     "l = l + torch.exp(s).sum(-1)\n        m = torch.zeros_like(m_new)"),
    # the diagonal score q_i . k_i instead of the score on key 0
    ("probs_match_reference", "s0 = chunk_scores(" "q, k, 0, 1)[..., 0]", "s0 = (q * k).sum(-1) * q.size(-1) ** -0.5"),
    # the whole (T, T) score matrix at once: right numbers, T x T memory
    ("memory", "return m + " "torch.log(l)", "return chunk_scores(q, k, 0, T).logsumexp(-1)"),
    # the whole (T, T) score matrix at once in NumPy, which torch's dispatch mode does not see: right numbers
    ("memory", "return m + " "torch.log(l)",
     "import numpy as np\n    a = (q.numpy() @ np.swapaxes(k.numpy(), -1, -2)) * q.size(3) ** -0.5\n"
     "    a[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] = -np.inf\n"
     "    return torch.from_numpy(np.logaddexp.reduce(a, axis=-1))"),
    # the chunk ignored: chunks of T / 3 keys, under T x T / 2 but more than twice a chunk of scores
    ("memory", "return torch.exp(s0 - row_logsumexp(" "q, k, chunk))", "return torch.exp(s0 - row_logsumexp(q, k, "
     "max(1, q.size(2) // 3)))"),
    # the chunk hard-coded to the default: every merge check (T = 11) then runs as one chunk and passes
    ("memory", "for j0 in range(0, T, " "chunk):\n        s = chunk_scores(q, k, j0, min(j0 + chunk, T))",
     "for j0 in range(0, T, 64):\n        s = chunk_scores(q, k, j0, min(j0 + 64, T))", "use the chunk it is given"),
    # the chunk not passed on: row_logsumexp at its default whatever first_token_probs is given
    ("memory", "return torch.exp(s0 - row_logsumexp(" "q, k, chunk))", "return torch.exp(s0 - row_logsumexp(q, k))",
     "pass it on to row_logsumexp"),
    # a loop that drops the ragged last chunk (range(T // chunk)): with chunk >= T it visits none
    ("lse_single_chunk", "for j0 in range(0, " "T, chunk):", "for j0 in range(0, T - T % chunk, chunk):",
     "never updated"),
    # every score of every query in gap 2, to take key 0's: T x T memory, with row_logsumexp within a chunk
    ("memory", "s0 = chunk_scores(" "q, k, 0, 1)[..., 0]  # (B, H, T)",
     "s0 = chunk_scores(q, k, 0, q.size(2))[..., 0]  # (B, H, T)", "in first_token_probs itself"),
    # p as a ratio of two exps: right for moderate scores, inf / inf = NaN once a score passes ~88 (float32)
    ("probs_large_logits", "return torch.exp(s0 - row_logsumexp(" "q, k, chunk))",
     "return torch.exp(s0) / torch.exp(row_logsumexp(q, k, chunk))"),
]

# the answer's key fragments: they appear in hints.md (not in its first hint), never in the statement, the starter,
# the checks, or anything the checker prints for the starter or a mutant
GIVEAWAYS = ["exp(m - m_new)", "m + torch.log(l)", "m + log(l)", "chunk_scores(q, k, 0, 1)", "exp(s_i0 - lse_i)"]

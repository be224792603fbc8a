"""Checks of exercise 04 (F-Attn without the T x T matrix), in order: shapes, the log-sum-exp against
torch.logsumexp of the explicit float64 score matrix (one chunk, then many), large logits, the probabilities on
key 0 against kernels.first_token_attention and at large logits, and the memory (watched in the student's
process): no tensor of T x T / 2 elements or more, nor more than twice a chunk of scores."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from check import Wrong, expect_close, expect_shape, random_qk, same


def _scores(q, k):
    """The explicit causal score matrix (B, H, T, T) in float64, -inf above the diagonal."""
    q, k = q.double(), k.double()
    T = q.size(2)
    s = (q @ k.transpose(-2, -1)) * q.size(-1) ** -0.5
    return s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))


def _reference_lse(q, k):
    return torch.logsumexp(_scores(q, k), dim=-1)


def _lse_without_rescale(q, k, chunk):
    """The known mistake: the running sum is never brought to the new max when a chunk raises it. Each chunk's terms
    then stay relative to the max as it was after that chunk, below the final max by `lag`: the result is the
    log-sum-exp of the scores each raised by its chunk's lag."""
    s = _scores(q, k)
    T = s.size(-1)
    maxes = torch.stack([s[..., j0:j0 + chunk].amax(-1) for j0 in range(0, T, chunk)], -1)  # (B, H, T, chunks)
    after = maxes.cummax(-1).values  # the running max after each chunk (finite: chunk 0 holds key 0)
    lag = (after[..., -1:] - after).repeat_interleave(chunk, -1)[..., :T]  # per key, (B, H, T, T)
    return torch.logsumexp(s + lag, -1)


def check_lse_shape(student):
    """row_logsumexp returns (B, H, T) in q's dtype"""
    q, k = random_qk(2, 3, 10, 8, dtype=torch.float32)
    lse = student.row_logsumexp(q, k, chunk=4)
    expect_shape("row_logsumexp(q, k, chunk=4) for q, k of shape (2, 3, 10, 8)", lse, (2, 3, 10),
                 "One number per query: reduce each chunk's scores over the keys (the last axis).")
    if lse.dtype != q.dtype:
        raise Wrong(f"row_logsumexp should keep q's dtype ({q.dtype}), got {lse.dtype}.")


def check_lse_single_chunk(student):
    """with one chunk (chunk >= T), row_logsumexp equals torch.logsumexp of the causal scores (float64)"""
    q, k = random_qk(T=11, seed=1)
    for chunk in (11, 16):
        got = student.row_logsumexp(q, k, chunk)
        if same(got, _reference_lse(q, k), 1e-5) and not same(got, _reference_lse(q, k), 1e-9):
            raise Wrong(f"row_logsumexp(q, k, chunk={chunk}) is right to about 1e-7 but not to float64's precision: "
                        "part of your arithmetic ran in float32 (a .float(), a float32 tensor you made, such as the "
                        "running max or sum). Keep q's dtype: the maths is right.")
        if torch.isneginf(got).all():  # m and l as they started: no chunk was ever added
            raise Wrong(f"row_logsumexp(q, k, chunk={chunk}) with T = 11 is -inf everywhere: m and l were never "
                        "updated. Does your loop visit the chunk that holds key 0 when chunk >= T, and the last, "
                        "shorter chunk when chunk does not divide T?")
        expect_close(f"row_logsumexp(q, k, chunk={chunk}) with T = 11 (one chunk)", got,
                     _reference_lse(q, k), atol=1e-9, rtol=1e-9,
                     hint="With a single chunk there is nothing to merge: m is the row's max and l its sum of "
                          "exp(s - m). Re-check how lse follows from m and l (write log of the sum of exp(s) with m "
                          "taken out of it), and the axis you reduce over. NaN or inf here: every exp must subtract "
                          "the new max, the one after this chunk (m starts at -inf): the factor that brings l to it "
                          "(at most 1, and 0 on the first chunk), and the chunk's own terms.")


def check_lse_chunked(student):
    """with many chunks (1, 3, 4 keys each, a ragged last chunk), row_logsumexp still equals torch.logsumexp"""
    q, k = random_qk(T=11, seed=2)
    want = _reference_lse(q, k)
    for chunk in (1, 3, 4):
        got = student.row_logsumexp(q, k, chunk)
        if same(got, _lse_without_rescale(q, k, chunk)) and not same(got, want):
            raise Wrong(f"with chunk={chunk} your running sum is not rescaled when the max changes: the terms in l "
                        "were taken relative to the old max. When a chunk raises the max, bring them to the new max "
                        "before you add the chunk's terms.")
        expect_close(f"row_logsumexp(q, k, chunk={chunk}) with T = 11", got, want, atol=1e-9, rtol=1e-9,
                     hint="Right with one chunk, wrong with several: the merge of the chunks is off. Check that "
                          "every key chunk is visited, the last, shorter one too, and how l and m are updated when "
                          "a chunk raises the max.")


def check_lse_large_logits(student):
    """large logits (scores near +-1000, float32) neither overflow nor underflow"""
    q, k = random_qk(1, 2, 32, 16, dtype=torch.float32, seed=3)
    q = q * 1000.0
    got = student.row_logsumexp(q, k, chunk=8)
    if torch.isnan(got).any() or (got == float("inf")).any():
        raise Wrong("row_logsumexp gives inf or NaN for large scores: exp(1000) overflows (float32 overflows past "
                    "exp(88)). Every exp should see a score minus the running max, a number <= 0.")
    if (got == float("-inf")).any():
        raise Wrong("row_logsumexp gives -inf for some rows whose scores are all very negative: exp(s - m) "
                    "underflowed to 0 for every key. Is the running max started at 0 instead of -inf? It must "
                    "become the row's real max, which can be far below 0.")
    expect_close("row_logsumexp(1000 * q, k, chunk=8) in float32", got, _reference_lse(q, k), atol=1e-3, rtol=1e-5,
                 hint="Every exp should see a score minus the running max, and the max must start below any "
                      "score.")


def check_probs_range(student):
    """first_token_probs returns (B, H, T), values in [0, 1], and p_00 = 1 (query 0 sees only key 0)"""
    q, k = random_qk(2, 3, 10, 8, dtype=torch.float32, seed=4)
    p = student.first_token_probs(q, k, chunk=4)
    expect_shape("first_token_probs(q, k, chunk=4) for q, k of shape (2, 3, 10, 8)", p, (2, 3, 10),
                 "One probability per query. A (B, H, T, T) result comes from broadcasting a (B, H, T, 1) score on "
                 "key 0 against the (B, H, T) log-sum-exp: drop the score's last axis first.")
    if not torch.allclose(p[..., 0], torch.ones_like(p[..., 0]), 1e-5):
        raise Wrong("p_00 (query 0's probability on key 0) should be 1: query 0 sees only key 0, so s_00 = lse_0. "
                    "Is the score on key 0 scaled the same way as the scores inside the log-sum-exp (by 1/sqrt(D))?")
    if not torch.isfinite(p).all() or (p < 0).any() or (p > 1 + 1e-5).any():
        raise Wrong("first_token_probs has values outside [0, 1], but they are probabilities; note that "
                    "s_i0 <= lse_i. Is a subtraction the wrong way round?")


def check_probs_match_reference(student):
    """first_token_probs matches kernels.first_token_attention (and softmax of the explicit float64 scores)"""
    from kernels import first_token_attention
    q, k = random_qk(2, 3, 12, 8, dtype=torch.float32, seed=5)
    p = student.first_token_probs(q, k, chunk=5)
    s = _scores(q, k)
    if same(p, torch.exp(s.diagonal(dim1=-2, dim2=-1) - _reference_lse(q, k)), 1e-5):
        raise Wrong("your p_i is query i's probability on its own key i (the diagonal, q_i . k_i), not on key 0: "
                    "the score you need is q_i . k_0 * scale, the same key 0 for every query.")
    if same(p, torch.exp(s[..., 0] * q.size(-1) ** 0.5 - _reference_lse(q, k)), 1e-5):
        raise Wrong("your score on key 0 is not scaled by 1/sqrt(D), while the log-sum-exp's scores are.")
    expect_close("first_token_probs(q, k, chunk=5)", p, first_token_attention(q, k, backend="torch"), atol=1e-5,
                 rtol=1e-4, hint="row_logsumexp passed its checks, so look at the score on key 0 and how it "
                                 "combines with lse into a probability.")
    expect_close("first_token_probs(q, k, chunk=5)", p, s.softmax(-1)[..., 0], atol=1e-5, rtol=1e-4)


def check_probs_large_logits(student):
    """first_token_probs stays finite and in [0, 1] for large logits (scores near +-1000, float32)"""
    q, k = random_qk(1, 2, 32, 16, dtype=torch.float32, seed=7)
    q = q * 1000.0
    p = student.first_token_probs(q, k, chunk=8)
    if isinstance(p, torch.Tensor) and not torch.isfinite(p).all():
        raise Wrong("first_token_probs gives NaN or inf for large scores, though row_logsumexp passed on them: "
                    "exp(s_i0) and exp(lse_i) each overflow (inf / inf is NaN). Take the exp of one difference, "
                    "s_i0 - lse_i, a number <= 0.")
    expect_close("first_token_probs(1000 * q, k, chunk=8) in float32", p, _scores(q, k).softmax(-1)[..., 0],
                 atol=2e-3, rtol=0, hint="Take the exp of one difference, a number <= 0.")


class _LargestTensor(TorchDispatchMode):
    """Records the largest tensor any op makes while it is active, and which op made it."""

    @classmethod
    def _should_skip_dynamo(cls):  # nothing is compiled here: skip the import of torch._dynamo (seconds) on first use
        return False

    def __init__(self):
        super().__init__()
        self.numel, self.op = 0, None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.numel() > self.numel:
                self.numel, self.op = t.numel(), str(func)
        return out


def _largest_in_call(student, q, k, chunk, function="first_token_probs"):
    """In the student's process: function(q, k, chunk) (first_token_probs, or row_logsumexp) watched by _LargestTensor:
    its result, the element count of the largest tensor an op made and that op, and the most bytes allocated outside
    torch at once (NumPy's arrays and Python's objects, which tracemalloc traces; torch's tensors it does not)."""
    import tracemalloc
    ours = not tracemalloc.is_tracing()  # (PYTHONTRACEMALLOC=1, a profiler: theirs to keep on)
    if ours:
        tracemalloc.start()
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]  # what was held before the call is not the call's
    try:
        with _LargestTensor() as mode:
            p = getattr(student, function)(q, k, chunk=chunk)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        if ours:
            tracemalloc.stop()
    return p, mode.numel, mode.op, peak


def check_memory(student):
    """memory: at T = 1024, chunk = 24, no op makes a tensor of T * T / 2 elements or more, nor more than twice a
    chunk of scores"""
    T, chunk = 1024, 24  # not the default (64), so that a function that ignores its chunk is seen; a ragged last one
    q, k = random_qk(1, 1, T, 16, dtype=torch.float32, seed=6)
    p, numel, op, peak = student.in_child(_largest_in_call, q, k, chunk)
    if peak >= T * T * 4 or numel >= T * T // 2:  # the whole matrix: in row_logsumexp, or in gap 2 itself?
        _, lse_numel, _, lse_peak = student.in_child(_largest_in_call, q, k, chunk, "row_logsumexp")
        if lse_peak < T * T * 4 and lse_numel <= 2 * T * chunk:
            raise Wrong(f"first_token_probs(q, k, chunk={chunk}) with B = H = 1, T = {T} made a tensor of "
                        f"{max(numel, peak // 4)} elements or more (op {op}; T x T is {T * T}), while row_logsumexp "
                        "alone keeps to a chunk of scores: the big one is made in first_token_probs itself, which "
                        "needs each query's score on key 0 only, besides row_logsumexp's result.")
    if peak >= T * T * 4:  # a T x T float32 matrix's bytes, in NumPy arrays (the watch above sees torch's ops only)
        raise Wrong(f"first_token_probs(q, k, chunk={chunk}) with B = H = 1, T = {T} held {peak / 2**20:.1f} MiB "
                    f"outside torch at once (NumPy arrays?); T x T float32 is {T * T * 4 / 2**20:.0f} MiB. Keep only "
                    "one chunk of scores at a time, in torch or NumPy: loop over the key chunks with the running max "
                    "and sum, never the whole matrix.")
    if numel >= T * T // 2:
        raise Wrong(f"first_token_probs(q, k, chunk={chunk}) with B = H = 1, T = {T} made a tensor of {numel} "
                    f"elements (op {op}); T x T is {T * T}. Keep only one chunk of scores, (B, H, T, chunk), at a "
                    "time: loop over the key chunks with the running max and sum, never the whole matrix, a "
                    "(T, T) mask or torch.logsumexp over all keys at once.")
    if numel > 2 * T * chunk:
        raise Wrong(f"first_token_probs(q, k, chunk={chunk}) with B = H = 1, T = {T} made a tensor of {numel} "
                    f"elements (op {op}), more than twice a chunk of scores (T x chunk = {T * chunk}): does it use "
                    "the chunk it is given, for every chunk of keys (and pass it on to row_logsumexp)?")
    expect_close(f"first_token_probs(q, k, chunk={chunk}) at T = {T}", p, _scores(q, k).softmax(-1)[..., 0],
                 atol=1e-5, rtol=1e-4)

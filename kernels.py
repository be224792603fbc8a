"""
Attention with the GA paper's sigmoid output gate: y = sigmoid(gate) * softmax(q k^T * scale + mask) v.

`gated_attention` is what model.py calls; `use_triton` says which path a call takes. Backends:
  'torch'  -- PyTorch SDPA, then the gate as a separate elementwise op (runs anywhere)
  'triton' -- a fused flash-attention kernel with the gate in its epilogue (CUDA, or CPU with TRITON_INTERPRET=1)
  'auto'   -- torch, for now: Triton for CUDA tensors it supports once FUSED_BY_DEFAULT is True (see there)
At the end, `AlignedLinear`: model.py's c_attn with its output rows kept aligned on a GPU; and `chunked_loss`:
model.py's training loss (GPTConfig.loss_chunk) a chunk of logits at a time.

The Triton path is FlashAttention-2 laid out like Triton's tutorial "Fused Attention"
(python/tutorials/06-fused-attention.py), plus the gate. The gate adds 44 lines to a flash-attention
kernel (counting its launch code, buffers, input checks and the torch path): each has a comment that starts
with `# [gate]`, and deleting them all leaves a working ungated kernel (tests/test_kernels.py checks the count and
that). Not marked: the `gate` argument that Python functions take and pass on (None for plain attention), its
gradient's slot in the autograd Function, and comments or docstrings that mention the gate.

  tutorial                    here                    what it is
  _attn_fwd                   (same)                  forward kernel: one program per (query block, batch*head)
  _attn_fwd_inner             _fwd_inner              online softmax over a range of key blocks
  STAGE 1 / 2 (off/on-band)   MASKED=False / True     blocks that need no mask / diagonal and ragged blocks
  causal_start, lo, hi        _key_range              where the unmasked stage ends (split) and the masked one (hi)
  _attn_bwd_preprocess        _bwd_pre                delta per row (here also dO and dGate)
  _attn_bwd                   _dkdv_kernel, _bwd_dq   the backward: dK/dV, then dQ apart or added atomically (below)
  _attn_bwd_dkdv, MASK        _dkdv_inner, MASKED     dK, dV of one key block, looping over query blocks (+ dQ adds)
  _attn_bwd_dq, MASK          _dq_inner, MASKED       dQ of one query block, looping over key blocks
  _attention                  _FlashGatedAttention    the torch.autograd.Function
  acc, l_i, m_i               (same)                  unnormalized output, row sum of exp2, running row max
  M                           LSE, lse2               log-sum-exp of each row in base 2: m_i + log2(l_i)
  Delta (D in the backward)   DELTA, delta            rowsum(dO * O), one per query row
  sm_scale                    scale                   softmax scale, HEAD_DIM ** -0.5 by default
  qk_scale                    scale2                  scale * log2(e): scores in base-2 units, exp2 instead of exp
  RCP_LN2 (1.44269504)        LOG2E                   log2(e) = 1 / ln(2)
  LN2                         --                      the tutorial pre-scales K, then rescales dQ; here dK, dQ *= scale
  Z, H, N_CTX                 B, H, T                 batch, query heads, tokens
  off_hz, off_z, off_h        bh, b, h                the program's batch*head, batch, head (bhk, hk: a kv head)
  stride_qz .. stride_qk      sqb, sqh, sqt, sqd      Q's strides over (batch, head, token, dim); sk*, sv*, ... alike
  start_m, start_n            (same)                  a query / key block: its index, or its first row in a loop
  offs_m, offs_n, offs_k      offs_m, offs_n, offs_d  query rows, key rows, head-dim lanes
  BLOCK_M, BLOCK_N, HEAD_DIM  (same)                  rows per query block, rows per key block, head dim
  BLOCK_M1/N1, BLOCK_M2/N2    BLOCK_M, BLOCK_N        of _bwd_dkdv (_dq), of _bwd_dq (each autotuned here)
  BLK_SLICE_FACTOR            --                      the diagonal uses the same blocks as the rest
  PRE_BLOCK                   _PRE_BLOCK_M            rows per preprocess program
  K_block_ptr, kT_ptrs        kt_ptrs (from _tile)    pointers to a K^T tile
  qkT, pT, dpT, dsT           st, pt, dpt, dst        the transposed tiles of the dK/dV loop
  O / Out, DO                 Y, DY (and DO)          output and its gradient; here Y is gated and DO = dY * s

What it does that the tutorial does not, and why (the gate in the epilogue, a backward from the gated output, GQA
in place, two ways to get dQ, any strides and any T, custom ops for torch.compile): docs/kernels.md.
"""

import math
import os
import re
import time
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

# The oldest Triton the kernel tests pass with, in its interpreter: 3.1's autotuner takes no timer of ours, and 3.2's
# drops it (the interpreter has no other). On a GPU, where Triton times configs itself, 3.2 may run the kernel, but no
# GPU has tried it (the H100 and H200 runs had 3.6), so the floor is the same there. With an older Triton this module
# loads, the torch backend works, and backend='triton' says what to do.
MIN_TRITON = (3, 3)
try:
    import triton
    import triton.language as tl
    HAS_TRITON = tuple(int(x) for x in re.findall(r"\d+", triton.__version__)[:2]) >= MIN_TRITON
except ImportError:  # the torch backend works without Triton; backend='triton' then raises
    triton = tl = None
    HAS_TRITON = False

BACKENDS = ("auto", "torch", "triton")
# The one policy for the fused kernel, for training and published models alike: backend='auto' (every model's
# default) runs it only if this is True. It is False until the kernel's GPU test tier (bash lab/gpu/kernels.sh) passes
# on an H100: so far it has not, and a result should not depend on a kernel whose tests fail. Until then the fused
# kernel runs where it is asked for by name (attn_backend='triton'), and 'auto' means PyTorch's SDPA.
FUSED_BY_DEFAULT = False
BACKWARDS = ("recompute", "atomic")  # how the Triton backward gets dQ: see choose_backward
LOG2E = 1.4426950408889634  # exp(x) == exp2(x * LOG2E): the kernels work in base 2
POISON_OUTPUTS = False  # tests set this: kernel outputs start as NaN, so an element never written shows up
MAX_GRID_Y = 65535  # a launch grid's second axis holds at most this many programs (CUDA's gridDim.y)


def _check(q, k, v, gate):
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be (B, H, T, D); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, H, T, D = q.shape
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D or not k.shape[1] or H % k.shape[1]:
        raise ValueError(f"k and v must be (B, Hkv, T, D) with H % Hkv == 0; got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    if gate is not None and (gate.dim() != 4 or tuple(gate.shape[:3]) != (B, H, T)  # [gate]
                             or gate.shape[3] not in (1, D)):  # [gate]
        raise ValueError("gate must be (B, H, T, D) elementwise or (B, H, T, 1) headwise logits; "  # [gate]
                         f"got {tuple(gate.shape)}")  # [gate]


def attention_torch(q, k, v, gate=None, causal=True, scale=None, mask=None):
    """Reference path: SDPA, then the gate as its own op (an extra read and write of the output). mask: a boolean
    (Tq, Tk) of the keys each query may see (True), in place of the causal one, e.g. model.window_mask's."""
    if causal and mask is None and q.size(2) != k.size(2):  # SDPA would align the rows at the top left
        raise ValueError(f"causal attention needs as many queries as keys (Tq={q.size(2)}, Tk={k.size(2)}): one "
                         "new query after a KV cache sees every key, causal=False (as model.py decodes); or a mask")
    if causal and mask is None and scale is not None and not scale > 0:  # SDPA's is_causal makes NaN rows then
        mask = torch.ones(q.size(2), k.size(2), dtype=torch.bool, device=q.device).tril()
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None, scale=scale,
                                       enable_gqa=q.size(1) != k.size(1))
    if gate is not None:  # [gate]
        y = (y * torch.sigmoid(gate)).to(y.dtype)  # [gate] in q's dtype whatever the gate's, as the kernel's Y
    return y


def _triton_unsupported(q, k, v, gate, scale, mask=None):
    """Why the Triton path cannot take these inputs (a string), or None if it can."""
    D = q.size(3)
    if mask is not None:
        return "the Triton path computes causal or full attention, not an arbitrary mask; use backend='torch'"
    if scale is not None and not scale > 0:
        return f"the Triton path needs scale > 0 (it takes row maxima of unscaled scores), got {scale}"
    if q.size(2) != k.size(2):
        return (f"the Triton path needs as many queries as keys (Tq={q.size(2)}, Tk={k.size(2)}); "
                "use backend='torch' for KV-cache decoding")
    if D < 16 or D > 256 or D & (D - 1):
        return f"the Triton path needs a power-of-two head dim in [16, 256], got D={D}"
    if q.size(0) * q.size(1) > MAX_GRID_Y:  # a GPU's limit, held under the interpreter too
        return (f"the Triton path launches a program per (batch, head) on its grid's second axis, at most "
                f"{MAX_GRID_Y:,}; got B x H = {q.size(0) * q.size(1):,}: use smaller batches or backend='torch'")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"the Triton path needs q, k, v of one dtype among fp16/bf16/fp32, got {q.dtype}, {k.dtype}, {v.dtype}"
    if gate is not None and not gate.is_floating_point():  # [gate]
        return f"gate must be floating point, got {gate.dtype}"  # [gate]
    if not (q.device == k.device == v.device):
        return f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}"
    if gate is not None and gate.device != q.device:  # [gate]
        return f"the gate must be on q's device {q.device}, got {gate.device}"  # [gate]
    return None


def triton_unavailable():
    """Why the fused kernel cannot run in this process (no Triton, or one older than MIN_TRITON), or None."""
    if HAS_TRITON:
        return None
    if triton is None:
        return "backend='triton' needs the triton package (pip install triton)"
    upgrade = "pip install -U torch: a CUDA build of torch brings its own" if torch.version.cuda else \
        "pip install -U triton"
    needed = ".".join(map(str, MIN_TRITON))
    return f"backend='triton' needs Triton {needed} or newer, found {triton.__version__} ({upgrade})"


def _require_triton(q):
    reason = triton_unavailable()
    if reason:
        raise RuntimeError(f"{reason}; use backend='torch'")
    if not q.is_cuda and not (_INTERPRET and os.environ.get("TRITON_INTERPRET") == "1"):  # set when triton.jit ran
        raise RuntimeError("backend='triton' on CPU tensors needs TRITON_INTERPRET=1 set before triton is "
                           "imported (Triton's interpreter); use CUDA tensors or backend='torch'")


def use_triton(backend, q, k, v, gate=None, scale=None, mask=None):
    """True if gated_attention(q, k, v, gate, scale=scale, backend=backend, mask=mask) runs the Triton kernel, False if
    it takes the PyTorch path. 'auto' picks Triton only where FUSED_BY_DEFAULT allows it, for CUDA tensors the kernel
    supports; 'triton' raises when the kernel cannot run (ValueError for inputs it does not take, RuntimeError without
    Triton MIN_TRITON or newer, or on CPU without TRITON_INTERPRET=1); an unknown backend raises ValueError. model.py
    uses it to choose between its fused branch (the kernel, gate in the epilogue) and its reference branch (SDPA, then
    the gate)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not valid; choose one of {list(BACKENDS)}")
    if backend == "auto":
        return FUSED_BY_DEFAULT and q.is_cuda and HAS_TRITON and _triton_unsupported(q, k, v, gate, scale, mask) is None
    if backend == "triton":
        reason = _triton_unsupported(q, k, v, gate, scale, mask)
        if reason:
            raise ValueError(reason)
        _require_triton(q)
    return backend == "triton"


def gated_attention(q, k, v, gate=None, causal=True, scale=None, backend="auto", mask=None):
    """q: (B, H, T, D); k, v: (B, Hkv, T, D), H % Hkv == 0; gate: None, (B, H, T, D) or (B, H, T, 1) logits.
    Inputs may have any strides (e.g. a gate expand()ed over heads); the gate's gradient has the gate's shape.
    causal: query i sees keys 0..i (as many queries as keys); mask: None, or a boolean (Tq, Tk) of the keys each
    query sees, in place of `causal` (PyTorch's path only). y has q's dtype on both paths, whatever the gate's."""
    _check(q, k, v, gate)
    if not use_triton(backend, q, k, v, gate, scale, mask):
        return attention_torch(q, k, v, gate, causal, scale, mask)
    scale = q.size(3) ** -0.5 if scale is None else float(scale)
    return _FlashGatedAttention.apply(*_interpretable(q, k, v, gate), bool(causal), scale).to(q.dtype)


def _interpretable(*tensors):
    """The tensors as the kernels may take them: on a CPU, bf16 as fp32 copies, since Triton's interpreter computes
    tl.dot wrongly on bf16 tiles (Triton 3.9: off by orders of magnitude, silently). Autograd sees the casts, so the
    gradients come back in bf16; the result is the more precise, not a GPU's bf16 rounding."""
    if tensors[0].is_cuda or tensors[0].dtype != torch.bfloat16:
        return tensors
    return tuple(None if t is None else t.float() for t in tensors)


@torch.no_grad()
def first_token_attention(q, k, causal=True, scale=None, chunk=256, backend="auto"):
    """Attention probability that each query puts on key 0, (B, H, Tq), computed from the log-sum-exp of
    each row, p0_i = exp(s_i0 - lse_i): on the Triton path the LSE comes from the flash forward (a whole attention's
    work, v = k, its output thrown away); otherwise a chunk of queries at a time (memory O(chunk * T)). Never
    T x T. With fewer queries than keys (a KV cache's), query i is aligned with key i + Tk - Tq."""
    _check(q, k, k, None)
    B, H, Tq, D = q.shape
    Hkv, Tk = k.size(1), k.size(2)
    if causal and Tq > Tk:
        raise ValueError(f"causal first_token_attention needs no more queries than keys (Tq={Tq}, Tk={Tk}): the "
                         "first queries would see no key")
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of queries, got {chunk}")
    scale = scale if scale is not None else D ** -0.5
    qg = q.float().unflatten(1, (Hkv, H // Hkv))  # (B, Hkv, G, Tq, D): query heads grouped by their KV head
    if use_triton(backend, q, k, k, scale=scale):
        _, lse2 = _flash_forward(*_interpretable(q, k, k), None, causal, scale)  # v = k: only the LSE is used
        s0 = (qg * k[:, :, None, :1].float()).sum(-1).flatten(1, 2) * scale  # (B, H, T) scores on key 0
        return torch.exp2(s0 * LOG2E - lse2)
    kf = k.float().unsqueeze(2)  # (B, Hkv, 1, Tk, D)
    out = []
    with torch.autocast(q.device.type, enabled=False):  # in float32 under a model's autocast too, as the Triton path
        for i0 in range(0, Tq, chunk):
            s = (qg[:, :, :, i0:i0 + chunk] @ kf.transpose(-2, -1)) * scale  # (B, Hkv, G, c, Tk)
            if causal:  # query i (aligned to the end of the keys) sees keys j <= i + Tk - Tq
                i = torch.arange(i0, i0 + s.size(3), device=q.device)[:, None] + (Tk - Tq)
                s = s.masked_fill(torch.arange(Tk, device=q.device)[None, :] > i, float("-inf"))
            out.append(torch.exp(s[..., 0] - torch.logsumexp(s, dim=-1)))
    return torch.cat(out, dim=-1).view(B, H, Tq) if out else torch.zeros(B, H, 0, device=q.device)


# ----------------------------------------------------------------------------
# Triton kernels. Every tensor is addressed through its four strides (b, h, t, d), so views such as a
# transposed q or a gate expanded over heads (head stride 0) need no copy. Scores are kept in base 2:
# s2 = q.k * scale * log2(e), p = exp2(s2 - lse2), where lse2 = log2 of the row's sum of exp2.

def _empty(shape, dtype, device):
    return torch.full(shape, float("nan"), dtype=dtype, device=device) if POISON_OUTPUTS else \
        torch.empty(shape, dtype=dtype, device=device)


def _empty_bthd(B, H, T, D, dtype, device):
    """A (B, H, T, D) view of a (B, T, H, D) buffer: model.py's `.transpose(1, 2)` and `reshape(B, T, H * D)` on
    the output (and the same transposes on the gradients) then cost no copy."""
    return _empty((B, T, H, D), dtype, device).transpose(1, 2)


def _prec(q):
    """tl.dot input precision: true fp32 products for fp32 inputs (as SDPA); no effect on fp16/bf16 inputs."""
    return "ieee" if q.dtype == torch.float32 else "tf32"


def _gate_args(gate, like):  # [gate] (pointer, strides, GATE) for the kernels; GATE 0 none, 1 elementwise, 2 headwise
    if gate is None:  # [gate]
        return like, (0, 0, 0, 0), 0  # [gate]
    return gate, gate.stride(), 2 if gate.size(3) == 1 else 1  # [gate]


if HAS_TRITON:
    _INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

    # The launch configs, (BLOCK_M, BLOCK_N, num_warps, num_stages) rows: the rows each kernel autotunes over
    # on a GPU, and the one row the interpreter runs (its speed says nothing about a GPU's, so it does not
    # tune). Guesses for H100/H200, to be chosen from what python -m lab.bench --kernels records each kernel picked
    # (its json's autotuned: no run has recorded it yet); the first, small row of each list fits an H100's
    # shared memory even for fp32 at D=256 (the autotuner skips rows that do not fit), though not a GPU's with
    # 99 KB a block (sm_89) for fp32 dQ at D=128, where Triton's own error says so: bf16 fits. Forward and dQ need
    # BLOCK_N | BLOCK_M (the diagonal stage is whole key blocks), dK/dV needs BLOCK_M | BLOCK_N.
    _FWD_ROWS = [(64, 32, 4, 2), (64, 64, 4, 3), (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 2)]
    _DKDV_ROWS = [(32, 32, 4, 2), (32, 64, 4, 3), (64, 64, 4, 3), (32, 128, 8, 3), (64, 128, 8, 3)]
    _DQ_ROWS = [(64, 32, 4, 2), (64, 32, 4, 3), (64, 64, 4, 3), (128, 32, 8, 3), (128, 64, 8, 3)]
    _FWD_INTERPRETER_ROW = (64, 32, 1, 1)  # the one row each kernel runs under the interpreter
    _DKDV_INTERPRETER_ROW = (32, 64, 1, 1)
    _DQ_INTERPRETER_ROW = (64, 32, 1, 1)
    _PRE_BLOCK_M = 64
    # What the best config depends on: the length (rounded up to a power of two, so one benchmark serves
    # every T in (T_KEY/2, T_KEY]), the head dim, causality and the query heads per kv head (dK/dV loops
    # over them); the autotuner adds the tensors' dtypes.
    _KEY = ["T_KEY", "HEAD_DIM", "CAUSAL", "GROUP"]
    # Every launch names fused multiply-adds, Triton's default so far and what each GPU run of the tests compiled:
    # Triton 3.9 warns at a process's first compile when this is left unset, and says 3.10 will turn it off.
    _FMA = {"enable_fp_fusion": True}

    def _wall_clock(kernel_call, quantiles):
        """The autotuner's timer under the interpreter, which has no GPU events: one timed call after one
        untimed. What it measures is the interpreter's speed, so it tests the autotuner's path, nothing else."""
        kernel_call()
        start = time.perf_counter()
        kernel_call()
        return [(time.perf_counter() - start) * 1e3] * len(quantiles)

    def _autotune(fn, reset_to_zero=None):  # its configs are set by choose_configs, at import and on request
        return triton.autotune(configs=[triton.Config({})], key=_KEY, reset_to_zero=reset_to_zero,
                               do_bench=_wall_clock if _INTERPRET else None)(fn)

    @triton.jit
    def _tile(X, b, h, sb, sh, s_row, s_col, rows, cols):
        """Pointers to a (len(rows), len(cols)) tile of X[b, h] with row stride s_row and column stride s_col:
        (t stride, d stride) gives X[b, h, rows, cols]; (d stride, t stride) a transposed tile such as K^T.
        Offsets in int64: within one batch entry they pass 2^31 elements once T * H * D does (a 512k-token window
        with H * D = 4096), and int32 arithmetic would wrap there and read another row's memory."""
        r, c = rows[:, None].to(tl.int64), cols[None, :].to(tl.int64)
        return X + b * sb + h.to(tl.int64) * sh + r * s_row + c * s_col

    @triton.jit
    def _key_range(start_m, T, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """(split, hi) for a query block: keys [0, split) need no mask, keys [split, hi) do. Causal: the keys
        left of the block are all visible and the diagonal block is masked; else whole key blocks, then the
        partial last one."""
        if CAUSAL:
            split, hi = start_m * BLOCK_M, tl.minimum((start_m + 1) * BLOCK_M, T)
        else:
            split, hi = (T // BLOCK_N) * BLOCK_N, T
        return split, hi

    @triton.jit
    def _fwd_inner(acc, l_i, m_i, q, kt_ptrs, v_ptrs, stride_kt, stride_vt, lo, hi, offs_m, offs_n, T, scale2,
                   MASKED: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr):
        """Online softmax over key blocks [lo, hi). MASKED=False blocks are known to be in range and fully
        visible, so they skip the mask (most of the work for long T)."""
        for start_n in range(lo, hi, BLOCK_N):
            n = start_n + offs_n
            kt_blk = kt_ptrs + tl.cast(start_n, tl.int64) * stride_kt  # int64, as _tile's offsets
            if MASKED:
                kt = tl.load(kt_blk, mask=n[None, :] < T, other=0.0)
            else:
                kt = tl.load(kt_blk)
            qk = tl.dot(q, kt, input_precision=PREC)  # (BLOCK_M, BLOCK_N), fp32 accumulator
            if MASKED:
                keep = n[None, :] < T
                if CAUSAL:
                    keep = keep & (offs_m[:, None] >= n[None, :])
                qk = tl.where(keep, qk, float("-inf"))  # every row has seen key 0 by now, so m_new is finite
            m_new = tl.maximum(m_i, tl.max(qk, 1) * scale2)  # row max in base-2 units (scale2 > 0)
            p = tl.math.exp2(qk * scale2 - m_new[:, None])  # one FMA per score
            alpha = tl.math.exp2(m_i - m_new)  # rescales what was accumulated under the old row max
            l_i = l_i * alpha + tl.sum(p, 1)
            v_blk = v_ptrs + tl.cast(start_n, tl.int64) * stride_vt  # at its load: not held over the softmax
            if MASKED:
                v = tl.load(v_blk, mask=n[:, None] < T, other=0.0)
            else:
                v = tl.load(v_blk)
            # acc = alpha * acc + P V (FlashAttention-2's diag(alpha) O + P V: tl.dot adds into its third argument);
            # P in v's dtype for the dot (bf16/fp16 operands, fp32 accumulator), while l_i summed it in fp32
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PREC)
            m_i = m_new
        return acc, l_i, m_i

    @_autotune
    @triton.jit
    def _attn_fwd(Q, K, V, Y, LSE,
                  sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, syb, syh, syt, syd,
                  H, T, GROUP, T_KEY, scale2,
                  G, sgb, sgh, sgt, sgd, GATE: tl.constexpr,  # [gate] the logits, their strides, their kind
                  HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PREC: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        tl.static_assert(BLOCK_M % BLOCK_N == 0)
        start_m = tl.num_programs(0) - 1 - tl.program_id(0)  # causal: the longest rows start first
        bh = tl.program_id(1)
        b, h = (bh // H).to(tl.int64), bh % H
        hk = h // GROUP  # GQA: this query head's kv head, read in place
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        rows = offs_m[:, None] < T
        q = tl.load(_tile(Q, b, h, sqb, sqh, sqt, sqd, offs_m, offs_d), mask=rows, other=0.0)
        kt_ptrs = _tile(K, b, hk, skb, skh, skd, skt, offs_d, offs_n)  # K^T tile (D, BLOCK_N)
        v_ptrs = _tile(V, b, hk, svb, svh, svt, svd, offs_n, offs_d)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        split, hi = _key_range(start_m, T, CAUSAL=CAUSAL, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, kt_ptrs, v_ptrs, skt, svt, 0, split, offs_m, offs_n, T, scale2,
                                   MASKED=False, CAUSAL=CAUSAL, BLOCK_N=BLOCK_N, PREC=PREC)
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, kt_ptrs, v_ptrs, skt, svt, split, hi, offs_m, offs_n, T, scale2,
                                   MASKED=True, CAUSAL=CAUSAL, BLOCK_N=BLOCK_N, PREC=PREC)
        # Saved for the backward: lse2 (B*H*T floats) lets it recompute P = exp2(S - lse2) block by block
        # instead of storing T x T probabilities.
        tl.store(LSE + bh.to(tl.int64) * T + offs_m, m_i + tl.math.log2(l_i), mask=offs_m < T)
        o = acc / l_i[:, None]
        g_ptrs = G + b * sgb + h.to(tl.int64) * sgh + offs_m[:, None].to(tl.int64) * sgt  # [gate]
        if GATE == 1:  # [gate] elementwise
            o = o * tl.sigmoid(tl.load(g_ptrs + offs_d[None, :].to(tl.int64) * sgd,  # [gate] int64: sgd may be large
                                       mask=rows, other=0.0).to(tl.float32))  # [gate]
        if GATE == 2:  # [gate] headwise: one logit per row, broadcast over D
            o = o * tl.sigmoid(tl.load(g_ptrs, mask=rows, other=0.0).to(tl.float32))  # [gate]
        tl.store(_tile(Y, b, h, syb, syh, syt, syd, offs_m, offs_d), o.to(Y.dtype.element_ty), mask=rows)

    @triton.jit
    def _bwd_pre(DY, Y, DELTA, sdyb, sdyh, sdyt, sdyd, syb, syh, syt, syd, H, T,
                 G, DO, DG, sgb, sgh, sgt, sgd, sob, soh, sot, sod, GATE: tl.constexpr,  # [gate] and outputs dO, dGate
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
        """With Y = O * s (s = sigmoid(gate)) only Y is needed, never O (no division by a small s):
        dO = dY * s, delta = rowsum(dO * O) = rowsum(dY * Y), dGate = dY * O * s(1 - s) = dY * Y * (1 - s).
        In fp16/bf16 the two sides of dP - delta carry different roundings (dO's here, Y's in the forward), so where
        they should cancel exactly (T = 1: P = 1, dQ = dK = 0) dS is rounding noise, |dS| <= eps * rowsum(|dY * Y|);
        only O itself (more memory) would remove it. tests/test_kernels.one_token_bounds holds the kernel to that.
        In fp16 a nearly closed gate (s < ~1e-4) makes Y subnormal, and dGate loses precision (docs/kernels.md)."""
        bh = tl.program_id(1)
        b, h = (bh // H).to(tl.int64), bh % H
        offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, HEAD_DIM)
        rows = offs_m[:, None] < T
        dy = tl.load(_tile(DY, b, h, sdyb, sdyh, sdyt, sdyd, offs_m, offs_d), mask=rows, other=0.0).to(tl.float32)
        y = tl.load(_tile(Y, b, h, syb, syh, syt, syd, offs_m, offs_d), mask=rows, other=0.0).to(tl.float32)
        tl.store(DELTA + bh.to(tl.int64) * T + offs_m, tl.sum(dy * y, 1), mask=offs_m < T)
        if GATE != 0:  # [gate]
            g_ptrs = G + b * sgb + h.to(tl.int64) * sgh + offs_m[:, None].to(tl.int64) * sgt  # [gate]
            if GATE == 1:  # [gate]
                s = tl.sigmoid(tl.load(g_ptrs + offs_d[None, :].to(tl.int64) * sgd,  # [gate]
                                       mask=rows, other=0.0).to(tl.float32))  # [gate]
                tl.store(DG + (bh.to(tl.int64) * T + offs_m[:, None]) * HEAD_DIM + offs_d[None, :],  # [gate]
                         (dy * y * (1.0 - s)).to(DG.dtype.element_ty), mask=rows)  # [gate]
            else:  # [gate]
                s = tl.sigmoid(tl.load(g_ptrs, mask=rows, other=0.0).to(tl.float32))  # [gate] (BLOCK_M, 1)
                dg = tl.sum(dy * y * (1.0 - s), 1)  # [gate] headwise: summed over the head's D channels
                tl.store(DG + bh.to(tl.int64) * T + offs_m, dg.to(DG.dtype.element_ty), mask=offs_m < T)  # [gate]
            tl.store(_tile(DO, b, h, sob, soh, sot, sod, offs_m, offs_d),  # [gate]
                     (dy * s).to(DO.dtype.element_ty), mask=rows)  # [gate]

    @triton.jit
    def _dkdv_inner(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, dq_ptrs, stride_qt, stride_dot, stride_dqt,
                    lo, hi, offs_n, offs_m, T, scale2, scale, MASKED: tl.constexpr, DQ_ATOMIC: tl.constexpr,
                    BLOCK_M: tl.constexpr, PREC: tl.constexpr):
        """Accumulate dK, dV of one key block over query blocks [lo, hi), working with transposed tiles
        (keys x queries). Query rows past T load lse = +inf, so their P^T column is exactly 0. DQ_ATOMIC: also
        add each query block's share of dQ, dS K, to the fp32 sum at dq_ptrs. Keys past T (loaded as 0) need
        P^T = 0 for that: the causal mask gives it on the diagonal, and the non-causal pass sets it."""
        for start_m in range(lo, hi, BLOCK_M):
            m = start_m + offs_m
            row = tl.cast(start_m, tl.int64)  # int64 offsets, as _tile's
            q = tl.load(q_ptrs + row * stride_qt, mask=m[:, None] < T, other=0.0)
            lse = tl.load(lse_ptr + m, mask=m < T, other=float("inf"))
            st = tl.dot(k, tl.trans(q), input_precision=PREC) * scale2  # S^T (BLOCK_N, BLOCK_M)
            pt = tl.math.exp2(st - lse[None, :])
            if MASKED:
                pt = tl.where(m[None, :] >= offs_n[:, None], pt, 0.0)
            elif DQ_ATOMIC:  # keys past T score 0, not -inf: their P^T rows must be 0 here, or dQ gets 0 * inf
                pt = tl.where(offs_n[:, None] < T, pt, 0.0)
            do = tl.load(do_ptrs + row * stride_dot, mask=m[:, None] < T, other=0.0)
            dv = tl.dot(pt.to(do.dtype), do, dv, input_precision=PREC)
            delta = tl.load(delta_ptr + m, mask=m < T, other=0.0)
            dpt = tl.dot(v, tl.trans(do), input_precision=PREC)
            dst = (pt * (dpt - delta[None, :])).to(q.dtype)  # dS^T = P^T * (dP^T - delta)
            dk = tl.dot(dst, q, dk, input_precision=PREC)
            if DQ_ATOMIC:  # other key blocks' programs add to the same rows: atomics, no ordering needed
                dq = tl.dot(tl.trans(dst), k, input_precision=PREC) * scale
                tl.atomic_add(dq_ptrs + row * stride_dqt, dq, mask=m[:, None] < T, sem="relaxed")
        return dk, dv

    @triton.jit
    def _dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, DQ,
                     sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, sob, soh, sot, sod, sdb, sdh, sdt, sdd,
                     sdqb, sdqh, sdqt, sdqd, H, T, GROUP, T_KEY, scale2, scale,
                     HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PREC: tl.constexpr, DQ_ATOMIC: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        tl.static_assert(BLOCK_N % BLOCK_M == 0)
        start_n = tl.program_id(0)  # causal: the first key blocks have the most queries and start first
        bhk = tl.program_id(1)
        Hkv = H // GROUP
        b, hk = (bhk // Hkv).to(tl.int64), bhk % Hkv
        offs_n = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_m = tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, HEAD_DIM)
        cols = offs_n[:, None] < T
        k = tl.load(_tile(K, b, hk, skb, skh, skt, skd, offs_n, offs_d), mask=cols, other=0.0)
        v = tl.load(_tile(V, b, hk, svb, svh, svt, svd, offs_n, offs_d), mask=cols, other=0.0)
        dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
        dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
        for g in range(GROUP):  # every query head that reads this kv head adds to the same dK, dV
            h = hk * GROUP + g
            q_ptrs = _tile(Q, b, h, sqb, sqh, sqt, sqd, offs_m, offs_d)
            do_ptrs = _tile(DO, b, h, sob, soh, sot, sod, offs_m, offs_d)
            lse_ptr = LSE + (b * H + h) * T
            delta_ptr = DELTA + (b * H + h) * T
            dq_ptrs = _tile(DQ, b, h, sdqb, sdqh, sdqt, sdqd, offs_m, offs_d)
            if CAUSAL:  # queries on the diagonal block need the mask, later ones see every key of the block
                diag = start_n * BLOCK_N
                dk, dv = _dkdv_inner(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, dq_ptrs, sqt, sot, sdqt,
                                     diag, tl.minimum(diag + BLOCK_N, T), offs_n, offs_m, T, scale2, scale,
                                     MASKED=True, DQ_ATOMIC=DQ_ATOMIC, BLOCK_M=BLOCK_M, PREC=PREC)
                lo = diag + BLOCK_N
            else:
                lo = 0
            dk, dv = _dkdv_inner(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, dq_ptrs, sqt, sot, sdqt, lo, T,
                                 offs_n, offs_m, T, scale2, scale, MASKED=False, DQ_ATOMIC=DQ_ATOMIC,
                                 BLOCK_M=BLOCK_M, PREC=PREC)
        tl.store(_tile(DK, b, hk, sdb, sdh, sdt, sdd, offs_n, offs_d), (dk * scale).to(DK.dtype.element_ty), mask=cols)
        tl.store(_tile(DV, b, hk, sdb, sdh, sdt, sdd, offs_n, offs_d), dv.to(DV.dtype.element_ty), mask=cols)

    # The dK/dV kernel under two autotuners, one per way of getting dQ: each keeps its own best configs. Every
    # trial run of the atomic one adds to DQ, so its autotuner zeroes DQ before each trial and once more after the
    # last, before the real run (that last reset is what keeps a first call right); _flash_backward zeroes DQ
    # before every call, which is all a call with a tuned config gets.
    _bwd_dkdv = _autotune(_dkdv_kernel)
    _bwd_dkdv_dq = _autotune(_dkdv_kernel, reset_to_zero=["DQ"])

    @triton.jit
    def _dq_inner(dq, q, do, lse, delta, kt_ptrs, vt_ptrs, stride_kt, stride_vt, lo, hi, offs_m, offs_n, T,
                  scale2, MASKED: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr):
        for start_n in range(lo, hi, BLOCK_N):
            n = start_n + offs_n
            kt_blk = kt_ptrs + tl.cast(start_n, tl.int64) * stride_kt  # int64, as _tile's offsets
            vt_blk = vt_ptrs + tl.cast(start_n, tl.int64) * stride_vt
            if MASKED:
                kt = tl.load(kt_blk, mask=n[None, :] < T, other=0.0)
                vt = tl.load(vt_blk, mask=n[None, :] < T, other=0.0)
            else:
                kt = tl.load(kt_blk)
                vt = tl.load(vt_blk)
            p = tl.math.exp2(tl.dot(q, kt, input_precision=PREC) * scale2 - lse[:, None])
            if MASKED:
                keep = n[None, :] < T
                if CAUSAL:
                    keep = keep & (offs_m[:, None] >= n[None, :])
                p = tl.where(keep, p, 0.0)
            ds = p * (tl.dot(do, vt, input_precision=PREC) - delta[:, None])
            dq = tl.dot(ds.to(kt.dtype), tl.trans(kt), dq, input_precision=PREC)
        return dq

    @_autotune
    @triton.jit
    def _bwd_dq(Q, K, V, DO, LSE, DELTA, DQ,
                sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, sob, soh, sot, sod, sdb, sdh, sdt, sdd,
                H, T, GROUP, T_KEY, scale2, scale,
                HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PREC: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        tl.static_assert(BLOCK_M % BLOCK_N == 0)
        start_m = tl.num_programs(0) - 1 - tl.program_id(0)
        bh = tl.program_id(1)
        b, h = (bh // H).to(tl.int64), bh % H
        hk = h // GROUP
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        rows = offs_m[:, None] < T
        q = tl.load(_tile(Q, b, h, sqb, sqh, sqt, sqd, offs_m, offs_d), mask=rows, other=0.0)
        do = tl.load(_tile(DO, b, h, sob, soh, sot, sod, offs_m, offs_d), mask=rows, other=0.0)
        lse = tl.load(LSE + bh.to(tl.int64) * T + offs_m, mask=offs_m < T, other=0.0)
        delta = tl.load(DELTA + bh.to(tl.int64) * T + offs_m, mask=offs_m < T, other=0.0)
        kt_ptrs = _tile(K, b, hk, skb, skh, skd, skt, offs_d, offs_n)  # K^T and V^T tiles (D, BLOCK_N)
        vt_ptrs = _tile(V, b, hk, svb, svh, svd, svt, offs_d, offs_n)
        dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        split, hi = _key_range(start_m, T, CAUSAL=CAUSAL, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
        dq = _dq_inner(dq, q, do, lse, delta, kt_ptrs, vt_ptrs, skt, svt, 0, split, offs_m, offs_n, T, scale2,
                       MASKED=False, CAUSAL=CAUSAL, BLOCK_N=BLOCK_N, PREC=PREC)
        dq = _dq_inner(dq, q, do, lse, delta, kt_ptrs, vt_ptrs, skt, svt, split, hi, offs_m, offs_n, T, scale2,
                       MASKED=True, CAUSAL=CAUSAL, BLOCK_N=BLOCK_N, PREC=PREC)
        tl.store(_tile(DQ, b, h, sdb, sdh, sdt, sdd, offs_m, offs_d), (dq * scale).to(DQ.dtype.element_ty), mask=rows)


CONFIG_CHOICES = ("autotune", "first", "0", "1", "2", "3", "4")  # 0..4: a row of the lists above (five each)


def tuned_kernels():
    """The autotuned kernels, each with the rows it tunes over and the row the interpreter runs; the atomic
    dK/dV pass (_bwd_dkdv_dq) takes the same rows as _bwd_dkdv."""
    return [(_attn_fwd, _FWD_ROWS, _FWD_INTERPRETER_ROW), (_bwd_dkdv, _DKDV_ROWS, _DKDV_INTERPRETER_ROW),
            (_bwd_dkdv_dq, _DKDV_ROWS, _DKDV_INTERPRETER_ROW), (_bwd_dq, _DQ_ROWS, _DQ_INTERPRETER_ROW)]


def tuned_configs():
    """{kernel: {autotune key: the config it chose}} of every tuned kernel, as text (what a benchmark records, so that
    the rows worth keeping are chosen from measurements): empty where it did not benchmark (one config)."""
    if not HAS_TRITON:
        return {}
    return {kernel.fn.__name__ + ("_dq" if kernel is _bwd_dkdv_dq else ""): {str(key): str(config)
            for key, config in kernel.cache.items()} for kernel, _, _ in tuned_kernels()}


def choose_configs(choice):
    """Which launch configs the tuned kernels (tuned_kernels()) use from now on:
      'autotune' -- benchmark every row of their lists on the first call for each key and keep the fastest
                    (the default on a GPU; under the interpreter, timed by a wall clock: a test of the path)
      'first'    -- one config and no benchmarking: the first row on a GPU (the GPU test tier: fast, and the
                    same config every run), the interpreter's own row under the interpreter (its default)
      '0'..'4'   -- row i of each list alone, to check each config against the reference
    The environment variable GATED_ATTENTION_CONFIGS sets the choice at import. Clears the tuned configs."""
    choice = str(choice)
    if choice not in CONFIG_CHOICES:
        raise ValueError(f"kernel configs {choice!r} (kernels.choose_configs, or the environment variable "
                         f"GATED_ATTENTION_CONFIGS): expected one of {', '.join(CONFIG_CHOICES)}")
    if not HAS_TRITON:
        return
    for kernel, rows, interpreter_row in tuned_kernels():
        if choice == "first":
            rows = [interpreter_row] if _INTERPRET else rows[:1]
        elif choice != "autotune":
            rows = [rows[int(choice)]]
        kernel.configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=st)
                          for m, n, w, st in rows]
        kernel.cache.clear()


DEFAULT_CONFIGS = os.environ.get("GATED_ATTENTION_CONFIGS", "first" if HAS_TRITON and _INTERPRET else "autotune")
try:
    choose_configs(DEFAULT_CONFIGS)
except ValueError as e:  # a bad environment variable: one line from every command that imports this, not a traceback
    raise SystemExit(f"error: {e}") from None


def choose_backward(mode):
    """How the Triton backward gets dQ from now on (see the module docstring): 'recompute', a kernel of its own
    that recomputes P and dP (the default; dQ the same on every run), or 'atomic', added to an fp32 sum in the
    dK/dV pass (FlashAttention-2's way: 5 block matmuls instead of 7, dQ varies in its last bits on a GPU).
    The environment variable GATED_ATTENTION_BACKWARD sets it at import; python -m lab.bench --kernels times both."""
    global BACKWARD
    if mode not in BACKWARDS:
        raise ValueError(f"backward {mode!r} (kernels.choose_backward, or the environment variable "
                         f"GATED_ATTENTION_BACKWARD): expected one of {', '.join(BACKWARDS)}")
    BACKWARD = mode


DEFAULT_BACKWARD = os.environ.get("GATED_ATTENTION_BACKWARD", "recompute")
try:
    choose_backward(DEFAULT_BACKWARD)
except ValueError as e:
    raise SystemExit(f"error: {e}") from None


def _t_key(T):
    """The autotune key's length (T_KEY, read by no kernel): T rounded up to a power of two, at least 64."""
    return max(64, 1 << (T - 1).bit_length())


def _forward_buffers(q):
    """y and lse2 of _flash_forward (also the fake tensors torch.compile plans with: same strides)."""
    B, H, T, D = q.shape
    return _empty_bthd(B, H, T, D, q.dtype, q.device), _empty((B, H, T), torch.float32, q.device)


def _backward_buffers(q, k, gate):
    """dq, dk, dv (same layout as y) and dgate (contiguous, the gate's shape, even for an expanded gate)."""
    B, H, T, D = q.shape
    dq = _empty_bthd(B, H, T, D, q.dtype, q.device)
    dk, dv = (_empty_bthd(B, k.size(1), T, D, k.dtype, q.device) for _ in range(2))
    grads = [dq, dk, dv]
    if gate is not None:  # [gate]
        grads.append(_empty(gate.shape, gate.dtype, q.device))  # [gate]
    return grads


def _flash_forward(q, k, v, gate, causal, scale):
    """Returns y (B, H, T, D) and lse2 (B, H, T) fp32, the base-2 log-sum-exp of each row's scores."""
    B, H, T, D = q.shape
    y, lse2 = _forward_buffers(q)
    g, g_strides, mode = _gate_args(gate, q)  # [gate]
    grid = lambda meta: (triton.cdiv(T, meta["BLOCK_M"]), B * H)  # noqa: E731
    _attn_fwd[grid](q, k, v, y, lse2, *q.stride(), *k.stride(), *v.stride(), *y.stride(),
                    H, T, H // k.size(1), _t_key(T), scale * LOG2E,
                    g, *g_strides, GATE=mode,  # [gate]
                    HEAD_DIM=D, CAUSAL=causal, PREC=_prec(q), **_FMA)
    return y, lse2


def _flash_backward(dy, q, k, v, gate, y, lse2, causal, scale):
    B, H, T, D = q.shape
    Hkv = k.size(1)
    grads = _backward_buffers(q, k, gate)
    if q.numel() == 0:  # no query row (B, H or T is 0): every gradient is 0 (H = 0: the dK/dV grid would divide by 0)
        return [t.zero_() for t in grads]
    dq, dk, dv = grads[:3]
    delta = _empty((B, H, T), torch.float32, q.device)
    do = dy  # the tutorial's dO, the gradient of the ungated output: dY itself (read only) with no gate
    g, g_strides, mode = _gate_args(gate, q)  # [gate]
    if gate is not None:  # [gate] dO = dY * s gets a buffer of its own; _bwd_pre writes it and dGate
        do = _empty_bthd(B, H, T, D, q.dtype, q.device)  # [gate]
    pre_out = (do, grads[3]) if gate is not None else (delta, delta)  # [gate] DO, DG (stand-ins if no gate)
    _bwd_pre[(triton.cdiv(T, _PRE_BLOCK_M), B * H)](
        dy, y, delta, *dy.stride(), *y.stride(), H, T,
        g, *pre_out, *g_strides, *do.stride(), GATE=mode,  # [gate]
        HEAD_DIM=D, BLOCK_M=_PRE_BLOCK_M, **_FMA)
    common = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    atomic = BACKWARD == "atomic"
    dq_sum = dq  # 'atomic': the fp32 sum the dK/dV pass adds to (dq itself when q is fp32); else not read
    if atomic:
        dq_sum = dq.zero_() if dq.dtype == torch.float32 else \
            torch.zeros((B, T, H, D), dtype=torch.float32, device=q.device).transpose(1, 2)
    (_bwd_dkdv_dq if atomic else _bwd_dkdv)[lambda meta: (triton.cdiv(T, meta["BLOCK_N"]), B * Hkv)](
        q, k, v, do, lse2, delta, dk, dv, dq_sum, *common, *dk.stride(), *dq_sum.stride(),
        H, T, H // Hkv, _t_key(T), scale * LOG2E, scale, HEAD_DIM=D, CAUSAL=causal, PREC=_prec(q), DQ_ATOMIC=atomic,
        **_FMA)
    if atomic:
        if dq_sum is not dq:
            dq.copy_(dq_sum)
    else:
        _bwd_dq[lambda meta: (triton.cdiv(T, meta["BLOCK_M"]), B * H)](
            q, k, v, do, lse2, delta, dq, *common, *dq.stride(), H, T, H // Hkv, _t_key(T), scale * LOG2E, scale,
            HEAD_DIM=D, CAUSAL=causal, PREC=_prec(q), **_FMA)
    return grads


# The kernels are wrapped as custom ops so that torch.compile treats them as opaque calls (it plans with
# the fake functions' shapes and strides) instead of tracing Triton launches and autotuning.
@torch.library.custom_op("gated_attention::forward", mutates_args=())
def _forward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gate: Optional[torch.Tensor], causal: bool,
                scale: float) -> Tuple[torch.Tensor, torch.Tensor]:
    return _flash_forward(q, k, v, gate, causal, scale)


@torch.library.custom_op("gated_attention::backward", mutates_args=())
def _backward_op(dy: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gate: Optional[torch.Tensor],
                 y: torch.Tensor, lse2: torch.Tensor, causal: bool, scale: float) -> List[torch.Tensor]:
    return _flash_backward(dy, q, k, v, gate, y, lse2, causal, scale)


_forward_op.register_fake(lambda q, k, v, gate, causal, scale: _forward_buffers(q))
_backward_op.register_fake(lambda dy, q, k, v, gate, y, lse2, causal, scale: _backward_buffers(q, k, gate))


class _FlashGatedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, gate, causal, scale):
        y, lse2 = _forward_op(q, k, v, gate, causal, scale)
        # The backward needs q, k, v and lse2 to recompute P block by block, and the gate for s. It takes
        # the gated output y rather than the ungated O: dGate and delta are exact from y (see _bwd_pre).
        ctx.save_for_backward(q, k, v, gate, y, lse2)
        ctx.causal, ctx.scale = causal, scale
        return y

    @staticmethod
    def backward(ctx, dy):
        q, k, v, gate, y, lse2 = ctx.saved_tensors
        grads = _backward_op(dy, q, k, v, gate, y, lse2, ctx.causal, ctx.scale)
        return *grads[:3], grads[3] if gate is not None else None, None, None


# ----------------------------------------------------------------------------
# c_attn's matmul with aligned rows. It writes each token's q, k, v and gate logits into one row; a headwise gate adds
# only a few logits (GPT-2 small: 12, so 3 * 768 + 12 = 2,316 outputs), which puts every other token's q, k and v
# (bf16) off the 16-byte alignment, and the row stride (2,316 elements) off the multiples of 8 elements (16 bytes)
# that cuBLAS's fast paths want and of 16 that Triton specialises its kernels for. Padding the rows, as nanoGPT pads
# GPT-2's vocabulary to 50304, keeps them on it (docs/training.md measures it).

class AlignedLinear(nn.Linear):
    """nn.Linear whose output rows start a multiple of `multiple` elements apart on the `devices` (a GPU): its weight
    padded with zero rows for the matmul, the padding cut off after it (a view at the padded stride: 2,316 outputs
    are read at a row stride of 2,368). The same parameters and state_dict as nn.Linear, and its results and
    gradients up to rounding (the wider matmul may run another kernel, which sums in another order); the padded
    weight is a copy made at each call. Elsewhere (a CPU), and for one token a sequence, it is nn.Linear."""
    multiple = 64  # 1: no padding
    devices = ("cuda",)

    def forward(self, x):
        # decoding with the KV cache (one token a sequence) stays a plain nn.Linear: there a copy of the weight at each
        # token would likely cost more than aligned rows save (not measured)
        pad = -self.out_features % self.multiple if x.device.type in self.devices and x.size(-2) > 1 else 0
        if not pad:
            return super().forward(x)
        bias = None if self.bias is None else F.pad(self.bias, (0, pad))
        return F.linear(x, F.pad(self.weight, (0, 0, 0, pad)), bias)[..., :self.out_features]


# ----------------------------------------------------------------------------
# The training loss a chunk of rows at a time (GPTConfig.loss_chunk). With GPT-2's vocabulary the logits are the
# largest tensor of a training step: GPT-2 small at B=16, T=1024 has 16k rows of 50304, 1.6 GB in bf16, twice that
# as the fp32 the loss is computed in, and their gradient on top. Chunks keep a chunk's worth or two.

class ChunkedCrossEntropy(torch.autograd.Function):
    """The mean cross-entropy of the logits x @ w^T (x: N rows of C, w: the V x C output matrix) against targets
    (N token ids; -1: not counted, as F.cross_entropy's ignore_index=-1; no target counted: NaN, as there),
    `chunk` rows at a time, for training. Training needs the loss's gradient, and a chunk's is known as soon as its
    logits are: d loss / d logits = (softmax - one_hot) / n. So the forward pass computes dx and dw chunk by chunk
    too, and the backward pass only scales them: the same three matmuls as the plain path, one chunk of logits held
    at a time. The cost: the forward pass does the backward's matmuls even when nothing calls backward, so
    chunked_loss uses this only where autograd will want them."""

    @staticmethod
    def forward(ctx, x, w, targets, chunk):
        valid = targets != -1
        # -1 becomes class 0 (its row is left out); any other id stays, so that -100 (PyTorch's usual ignore_index)
        # or an id past the vocabulary fails in gather, as F.cross_entropy fails, instead of counting as class 0
        safe = targets.masked_fill(~valid, 0)
        n = valid.sum()  # a tensor: the mean's count costs no wait for the GPU
        fp = torch.promote_types(x.dtype, torch.float32)  # the loss and the sums in fp32 (fp64 for fp64 inputs)
        total = torch.zeros((), dtype=fp, device=x.device)
        dx = torch.empty_like(x, dtype=fp)  # every row is written, chunk by chunk
        dw = torch.zeros_like(w, dtype=fp)
        # all three matmuls in autocast's dtype where it is on (bf16/fp16, as lm_head's forward and backward would
        # run), else in the inputs'; w cast once, not once a chunk
        mm_dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else x.dtype
        w_mm = w.to(mm_dtype)
        for i in range(0, x.size(0), chunk):
            xc, tc, vc = x[i:i + chunk], safe[i:i + chunk, None], valid[i:i + chunk, None]
            xc = xc.to(mm_dtype)  # for the logits' matmul and dw's
            logits = F.linear(xc, w_mm).to(fp)
            # Every pass over a chunk of logits below is in place, in their own memory: torch.logsumexp, or a
            # separate gradient, would make more chunks of temporaries, and on a CPU making and freeing them cost
            # more than the arithmetic. The log-sum-exp by hand: top + log(sum(exp(logit - top)))
            top = logits.amax(dim=-1, keepdim=True)
            picked = logits.gather(1, tc)
            sums = logits.sub_(top).exp_().sum(dim=-1, keepdim=True)  # logits now hold exp(logit - top)
            total = total + torch.where(vc, sums.log() + top - picked, 0).sum()  # where: an ignored row stays out
            # softmax - one_hot: exp(logit - top) / sums, minus 1 at the target; an ignored row's sum is made
            # infinite and its -1 a 0, so that its gradient is 0 without another pass over the chunk
            g = logits.div_(sums.masked_fill(~vc, math.inf)).scatter_add_(1, tc, -vc.to(fp))
            g = g.to(mm_dtype)  # divided by n only after the matmuls: fp16 would flush g / n to 0
            if g.dtype == dx.dtype:  # fp32 (or fp64): the matmuls write straight into dx and add into dw
                torch.mm(g, w_mm, out=dx[i:i + chunk])
                dw.addmm_(g.t(), xc)
            else:  # bf16/fp16 matmuls, their results kept in fp32
                dx[i:i + chunk] = g @ w_mm
                dw += g.t() @ xc
            del logits, g, top, picked, sums  # before the next chunk's are made: two chunks never live at once
        ctx.save_for_backward(dx.div_(n), dw.div_(n))
        ctx.dtypes = x.dtype, w.dtype
        return total / n

    @staticmethod
    @torch.autograd.function.once_differentiable  # its backward scales stored gradients: no second derivative
    def backward(ctx, dloss):  # dloss: the scale the caller put on the loss (gradient accumulation, fp16 scaling)
        dx, dw = ctx.saved_tensors
        return (dx * dloss).to(ctx.dtypes[0]), (dw * dloss).to(ctx.dtypes[1]), None, None


def chunked_loss(x, w, targets, chunk):
    """F.cross_entropy(x @ w^T, targets, ignore_index=-1), `chunk` rows of logits at a time: ChunkedCrossEntropy
    where gradients will be wanted, else F.cross_entropy on each chunk's logits (one matmul a chunk)."""
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad):
        return ChunkedCrossEntropy.apply(x, w, targets, chunk)
    fp = torch.promote_types(x.dtype, torch.float32)
    total = sum(F.cross_entropy(F.linear(x[i:i + chunk], w).to(fp), targets[i:i + chunk], ignore_index=-1,
                                reduction="sum") for i in range(0, x.size(0), chunk))
    return total / (targets != -1).sum()

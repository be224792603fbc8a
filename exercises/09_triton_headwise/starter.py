"""
Exercise 09: a headwise gate in a Triton flash-attention kernel.

Below is a complete, forward-only, causal flash-attention kernel in Triton (a teaching version of kernels.py's
_attn_fwd) and its launcher attention(q, k, v, gate). It already applies GA's elementwise G1 gate in its
epilogue: y = softmax(q k^T / sqrt(D)) v * sigmoid(gate), with gate logits of shape (B, H, T, D), one per output
element, so the gate costs no extra pass over the output. Extend it with a HEADWISE gate: logits (B, H, T, 1),
one per row (query token) of each head, broadcast over the head's D channels.

  gap 1: the launcher    accept a (B, H, T, 1) gate: pick the kernel's GATE mode and pass the gate's strides
  gap 2: the kernel      in the epilogue, each row of o scaled by the sigmoid of its own logit

No GPU? Triton's interpreter runs the kernel on the CPU (exercises/check.py sets TRITON_INTERPRET=1 before
triton is imported; to run this file yourself: TRITON_INTERPRET=1 python ...). It is slow, so keep the shapes
small. Check your file with:  python exercises/check.py 09
"""

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634  # exp(x) = exp2(x * log2(e)): the kernel works in base 2, exp2 is the cheap one
BLOCK_M = 32  # query rows per program
BLOCK_N = 32  # keys per step of the inner loop (one config, no autotuning: the interpreter cannot time any)
GATE_NONE, GATE_ELEMENTWISE, GATE_HEADWISE = 0, 1, 2  # the kernel's GATE modes


@triton.jit
def flash_attention_fwd(Q, K, V, Y, G,
                        stride_b, stride_h, stride_t,  # of q, k, v and y: contiguous (B, H, T, D), so d stride 1
                        g_stride_b, g_stride_h, g_stride_t, g_stride_d,  # of the gate logits: any layout
                        H, T, scale2,
                        GATE: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program: BLOCK_M query rows of one (batch, head). y = softmax(q k^T * scale, causal) v, computed one
    block of BLOCK_N keys at a time with an online softmax (never the T x T matrix), then gated."""
    start_m = tl.program_id(0)  # which block of query rows
    bh = tl.program_id(1)  # which (batch, head)
    b, h = bh // H, bh % H
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # this program's query rows
    offs_n = tl.arange(0, BLOCK_N)  # key rows within one key block
    offs_d = tl.arange(0, D)
    row_ok = offs_m < T  # the last block may hang over the end when T is not a multiple of BLOCK_M
    base = b * stride_b + h * stride_h  # this (batch, head)'s (T, D) matrix in q, k, v and y
    q = tl.load(Q + base + offs_m[:, None] * stride_t + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    q = q.to(tl.float32)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max of each row's scores (base-2 units)
    l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum of each row's exp2(score - m_i)
    acc = tl.zeros([BLOCK_M, D], tl.float32)  # running sum of exp2(score - m_i) * v: the unnormalised output
    hi = tl.minimum((start_m + 1) * BLOCK_M, T)  # causal: no row of this block sees a key past its last row
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < T
        k = tl.load(K + base + cols[:, None] * stride_t + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        v = tl.load(V + base + cols[:, None] * stride_t + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k.to(tl.float32)), input_precision="ieee") * scale2  # (BLOCK_M, BLOCK_N) scores
        visible = (cols[None, :] <= offs_m[:, None]) & col_ok[None, :]  # the causal mask, and no keys past T
        s = tl.where(visible, s, float("-inf"))  # key 0 is visible to every row, so each row's max is finite
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.math.exp2(m_i - m_new)  # rescales what was summed under the old max (0 on the first step)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision="ieee")
        m_i = m_new
    o = acc / l_i[:, None]  # softmax(q k^T * scale) v for these rows, (BLOCK_M, D), fp32

    # Epilogue: the G1 gate, applied while the output is still in registers.
    g_rows = G + b * g_stride_b + h * g_stride_h + offs_m * g_stride_t  # (BLOCK_M,) pointers: each row's first logit
    if GATE == 1:  # elementwise: logits (B, H, T, D), one per output element
        g = tl.load(g_rows[:, None] + offs_d[None, :] * g_stride_d, mask=row_ok[:, None], other=0.0)
        o = o * tl.sigmoid(g.to(tl.float32))
    if GATE == 2:  # headwise: logits (B, H, T, 1), one per row, shared by the row's D channels
        # TODO(09-gap2): o with each row scaled by the sigmoid of that row's logit (the same score for its D
        #                channels), computed in fp32; no logit read past the gate's rows
        raise NotImplementedError("09-gap2: write the headwise gate in flash_attention_fwd")
    tl.store(Y + base + offs_m[:, None] * stride_t + offs_d[None, :], o.to(Y.dtype.element_ty), mask=row_ok[:, None])


def attention(q, k, v, gate=None):
    """Causal attention with an optional sigmoid output gate, through the Triton kernel.

    q, k, v: (B, H, T, D) float tensors on one device (CUDA, or CPU under TRITON_INTERPRET=1), D a power of two
    >= 16. gate: None, elementwise logits (B, H, T, D) or headwise logits (B, H, T, 1), in any layout (a
    transposed or expanded view is fine: the kernel reads it through its strides). Returns y (B, H, T, D).
    """
    B, H, T, D = q.shape
    if D < 16 or D & (D - 1):
        raise ValueError(f"the kernel needs a power-of-two head dim >= 16 (tl.dot's minimum), got D={D}")
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # one set of strides for q, k, v and y
    y = torch.empty_like(q)
    if gate is None:
        mode, g, g_strides = GATE_NONE, q, (0, 0, 0, 0)  # any pointer will do: GATE=0 never reads it
    elif tuple(gate.shape) == (B, H, T, D):
        mode, g, g_strides = GATE_ELEMENTWISE, gate, gate.stride()
    elif tuple(gate.shape) == (B, H, T, 1):
        # TODO(09-gap1): mode, g and g_strides for headwise logits, read in whatever layout the caller's view has
        raise NotImplementedError("09-gap1: write the headwise case of attention")
    else:
        raise ValueError(f"gate must be (B, H, T, D) elementwise or (B, H, T, 1) headwise logits, got {tuple(gate.shape)}")
    grid = (triton.cdiv(T, BLOCK_M), B * H)  # one program per (query block, batch * head)
    # enable_fp_fusion=True: fused multiply-adds, Triton's default so far, named (Triton 3.9 warns when it is left out)
    flash_attention_fwd[grid](q, k, v, y, g, q.stride(0), q.stride(1), q.stride(2), *g_strides,
                              H, T, D ** -0.5 * LOG2E, GATE=mode, D=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                              enable_fp_fusion=True)
    return y

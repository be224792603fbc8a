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
        g = tl.load(g_rows, mask=row_ok, other=0.0).to(tl.float32)  # (BLOCK_M,): one load per row, not per element
        o = o * tl.sigmoid(g)[:, None]  # broadcast over D: the whole row (this head, this token) scaled at once
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
        # the gate's own strides: a view such as model.py's g.transpose(1, 2) is not contiguous, and a gate
        # expanded over heads has head stride 0. The d stride is never read in headwise mode.
        mode, g, g_strides = GATE_HEADWISE, gate, gate.stride()
    else:
        raise ValueError(f"gate must be (B, H, T, D) elementwise or (B, H, T, 1) headwise logits, got {tuple(gate.shape)}")
    grid = (triton.cdiv(T, BLOCK_M), B * H)  # one program per (query block, batch * head)
    # enable_fp_fusion=True: fused multiply-adds, Triton's default so far, named (Triton 3.9 warns when it is left out)
    flash_attention_fwd[grid](q, k, v, y, g, q.stride(0), q.stride(1), q.stride(2), *g_strides,
                              H, T, D ** -0.5 * LOG2E, GATE=mode, D=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                              enable_fp_fusion=True)
    return y


# known mistakes, for CI: (the check that must catch it, text of this file, the mistake). Each text is split into
# two literals so that it occurs once in this file: in the code above, not here.
MUTANTS = [
    ("headwise_zeroes_rows", "o = o * tl.sigmoid(" "g)[:, None]", "o = o * g[:, None]"),  # the sigmoid forgotten
    ("headwise_zeroes_rows", "o = o * tl.sigmoid(" "g)[:, None]", "o = o * (1 - tl.sigmoid(g))[:, None]"),  # inverted
    ("headwise_numbers",  # the elementwise branch copied: a (BLOCK_M, D) load with the d stride reads other rows
     "g = tl.load(g_rows, " "mask=row_ok, other=0.0).to(tl.float32)  # (BLOCK_M,): one load per row, not per element\n"
     "        o = o * tl.sigmoid(g)" "[:, None]",
     "g = tl.load(g_rows[:, None] + offs_d[None, :] * g_stride_d, mask=row_ok[:, None], other=0.0)\n"
     "        o = o * tl.sigmoid(g.to(tl.float32))"),
    ("headwise_strided_gate", "mode, g, g_strides = GATE_HEADWISE, " "gate, gate.stride()",
     "mode, g, g_strides = GATE_HEADWISE, gate, (H * T, T, 1, 1)"),  # strides of a contiguous gate, assumed
    ("headwise_gate_not_copied", "mode, g, g_strides = GATE_HEADWISE, " "gate, gate.stride()",
     "gate = gate.contiguous()\n        mode, g, g_strides = GATE_HEADWISE, " "gate, gate.stride()"),  # a copy
    ("headwise_load_masked", "tl.load(g_rows, " "mask=row_ok, other=0.0)", "tl.load(g_rows)"),  # reads past T
    # README's alternative, instead of the exercise: a headwise gate down the elementwise path, d stride 0
    ("headwise_runs_its_own_branch", "mode, g, g_strides = GATE_HEADWISE, " "gate, gate.stride()",
     "mode, g, g_strides = GATE_ELEMENTWISE, gate, (*gate.stride()[:3], 0)"),
    ("headwise_half_precision_gate", "g_rows, mask=row_ok, other=0.0).to(tl." "float32)",
     "g_rows, mask=row_ok, other=0.0)", "they take fp32"),  # no cast: tl.sigmoid of the gate's own dtype
    ("headwise_half_precision_gate",  # no cast, and the sigmoid written out: tl.exp of the gate's own dtype
     "g = tl.load(g_rows, " "mask=row_ok, other=0.0).to(tl.float32)  # (BLOCK_M,): one load per row, not per element\n"
     "        o = o * tl.sigmoid(g)" "[:, None]",
     "g = tl.load(g_rows, mask=row_ok, " "other=0.0)\n        o = o * (1 / (1 + tl.exp(-g)))[:, None]",
     "they take fp32"),
    # (BLOCK_M, D) times (BLOCK_M,): the kernel's own line named, not its launch
    ("headwise_shape", "o = o * tl.sigmoid(" "g)[:, None]", "o = o * tl.sigmoid(g)", ": o = o * tl.sigmoid(g)"),
    # the kernel's headwise load ignores the token stride it is given (a contiguous gate's 1, assumed)
    ("headwise_strided_gate", "tl.load(g_rows" ", mask=row_ok, other=0.0)",
     "tl.load(G + b * g_stride_b + h * g_stride_h + offs_m, mask=row_ok, other=0.0)", "the kernel does not follow"),
]

# the answer's key fragments: none may appear in the statement, the starter, the checks or the checker's messages,
# only in hints.md's later hints (split so that each occurs once in the code above, as MUTANTS' texts must)
GIVEAWAYS = ["GATE_HEADWISE, gate, " "gate.stride()", "tl.load(g_rows, mask=" "row_ok, other=0.0)",
             "tl.sigmoid(g)[:" ", None]"]

"""
Attention with the GA paper's sigmoid output gate: y = sigmoid(gate) * softmax(q k^T * scale + mask) v.

`gated_attention` is what model.py calls. Backends:
  'torch'  -- PyTorch SDPA, then the gate as a separate elementwise op (runs anywhere)
  'triton' -- a fused flash-attention kernel with the gate in its epilogue (CUDA, or CPU with TRITON_INTERPRET=1)
  'auto'   -- Triton for CUDA tensors when Triton imports, else torch
"""

import torch
import torch.nn.functional as F

BACKENDS = ("auto", "torch", "triton")


def _check(q, k, v, gate):
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be (B, H, T, D); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, H, T, D = q.shape
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D or H % k.shape[1]:
        raise ValueError(f"k and v must be (B, Hkv, T, D) with H % Hkv == 0; got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    if gate is not None and (gate.dim() != 4 or tuple(gate.shape[:3]) != (B, H, T) or gate.shape[3] not in (1, D)):
        raise ValueError(f"gate must be (B, H, T, D) elementwise or (B, H, T, 1) headwise logits; got {tuple(gate.shape)}")


def attention_torch(q, k, v, gate=None, causal=True, scale=None):
    """Reference path: SDPA, then the gate as its own op (an extra read and write of the output)."""
    y = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=q.size(1) != k.size(1))
    return y if gate is None else y * torch.sigmoid(gate)


def gated_attention(q, k, v, gate=None, causal=True, scale=None, backend="auto"):
    """q: (B, H, T, D); k, v: (B, Hkv, T, D), H % Hkv == 0; gate: None, (B, H, T, D) or (B, H, T, 1) logits."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not valid; choose one of {list(BACKENDS)}")
    _check(q, k, v, gate)
    return attention_torch(q, k, v, gate, causal, scale)


@torch.no_grad()
def first_token_attention(q, k, causal=True, scale=None, chunk=256):
    """Attention probability that each query puts on key 0, (B, H, Tq), computed from the log-sum-exp of
    each row, p0_i = exp(s_i0 - lse_i), a chunk of queries at a time: memory O(chunk * T), never T x T."""
    B, H, Tq, D = q.shape
    Hkv, Tk = k.size(1), k.size(2)
    scale = scale if scale is not None else D ** -0.5
    qg = q.float().view(B, Hkv, H // Hkv, Tq, D)  # query heads grouped by the KV head they share
    kf = k.float().view(B, Hkv, 1, Tk, D)
    out = []
    for i0 in range(0, Tq, chunk):
        s = (qg[:, :, :, i0:i0 + chunk] @ kf.transpose(-2, -1)) * scale  # (B, Hkv, G, c, Tk)
        if causal:  # query i (aligned to the end of the keys) sees keys j <= i + Tk - Tq
            i = torch.arange(i0, i0 + s.size(3), device=q.device)[:, None] + (Tk - Tq)
            s = s.masked_fill(torch.arange(Tk, device=q.device)[None, :] > i, float("-inf"))
        out.append(torch.exp(s[..., 0] - torch.logsumexp(s, dim=-1)))
    return torch.cat(out, dim=-1).view(B, H, Tq)

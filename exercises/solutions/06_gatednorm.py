"""
Exercise 06: RMSNorm and GatedNorm, by hand.

RMSNorm divides each token's vector by its root mean square, then scales each channel by a learned gain.
GatedNorm (the GN paper) follows it with a small learned gate: a rank-r bottleneck computes, from the
normalised vector itself, one score in (0, 1) per channel, and multiplies the vector by it. That is an explicit,
input-dependent rescaling: what a plain RMSNorm network can only get by growing a massive activation.

  gap 1: rms_norm(x, weight, eps)                  each token's vector at RMS 1, times the gain; eps placed
                                                   as F.rms_norm places it
  gap 2: gated_norm(x, weight, w_down, w_up, eps)  GN's y' = y * sigmoid(W_up SiLU(W_down y)), y = rms_norm(x)

Use tensor operations (torch.sigmoid and F.silu are fine; F.rms_norm is what the checks compare with, so do not
call it). Check your file with:  python exercises/check.py 06
"""

import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps=1e-6):
    """RMSNorm over the last axis.

    x: (..., C), one vector of C channels per token; weight: (C,), the learned gain, one per channel. Returns x's
    shape and dtype: each token's vector divided by its root mean square over its own C channels, then multiplied
    channel by channel by weight. eps guards the division for a near-zero vector, placed as F.rms_norm places it.
    """
    mean_square = x.pow(2).mean(dim=-1, keepdim=True)  # (..., 1): one number per token, broadcast over channels
    # eps inside the root: a near-zero vector stays near zero instead of having its noise blown up to RMS 1
    return x * torch.rsqrt(mean_square + eps) * weight


def gated_norm(x, weight, w_down, w_up, eps=1e-6):
    """GatedNorm (GN): RMSNorm, then a sigmoid gate computed from the normalised vector through a rank-r bottleneck.

    x: (..., C); weight: (C,), RMSNorm's gain; w_down: W_down, (r, C), and w_up: W_up, (C, r), stored like
    nn.Linear weights (out x in). Returns x's shape and dtype: y' = y * sigmoid(W_up SiLU(W_down y)) for each
    token, where y = rms_norm(x, weight, eps).
    """
    y = rms_norm(x, weight, eps)
    hidden = F.silu(y @ w_down.T)  # (..., r): the bottleneck, r << C, so the gate costs ~2rC weights per norm
    scores = torch.sigmoid(hidden @ w_up.T)  # (..., C): one score in (0, 1) per channel, depending on this token
    return y * scores  # the gate only shrinks: the model can scale a token down without an outlier doing it


# known mistakes, for CI: (the check that must catch it, text of this file, the mistake). Each text is split into
# two literals so that it occurs once in this file: in the code above, not here.
MUTANTS = [
    ("rms_norm_unit_rms", "x.pow(2).mean(" "dim=-1, keepdim=True)", "x.pow(2).mean(dim=1, keepdim=True)"),  # wrong axis
    ("rms_norm_unit_rms", "= x.pow(2)" ".mean(dim=-1, keepdim=True)", "= x.pow(2).sum(dim=-1, keepdim=True)"),  # a sum
    ("rms_norm_tiny_inputs", "x * torch.rsqrt(" "mean_square + eps) * weight",
     "x / (mean_square.sqrt() + eps) * weight"),  # eps outside the square root
    ("rms_norm_vs_model", "return x * torch.rsqrt(" "mean_square + eps) * weight",  # PyTorch's own, forbidden
     "return torch.nn.RMSNorm(x.size(-1), eps=eps, dtype=x.dtype)(x) * weight"),
    ("rms_norm_shape", "return x * torch.rsqrt(" "mean_square + eps) * weight",
     "return (x * torch.rsqrt(mean_square" " + eps) * weight).float()"),  # float32 always: float64 x comes back float32
    ("rms_norm_float64_precision", "return x * torch.rsqrt(" "mean_square + eps) * weight",
     "return x.float() * torch.rsqrt(mean_square.float() + eps) * weight"),  # float32, back to float64 by weight
    ("gated_norm_never_larger", "return y * " "scores", "return x * scores"),  # the gate on the input, not on y
    ("gated_norm_bottleneck_silu", "hidden = F.silu(" "y @ w_down.T)", "hidden = F.relu(y @ w_down.T)"),  # ReLU
    ("rms_norm_tiny_inputs", "x * torch.rsqrt(" "mean_square + eps) * weight",
     "x * torch.rsqrt(mean_square + 1e-6) * weight"),  # the default eps, whatever eps is passed
    ("gated_norm_vs_model", "    y = rms_norm(" "x, weight, eps)", "    y = rms_norm(x, weight)"),  # eps not passed on
    ("rms_norm_vs_model", "mean_square = x.pow(2)" ".mean(dim=-1, keepdim=True)",  # LayerNorm's centring first
     "x = x - x.mean(dim=-1, keepdim=True)\n    mean_square = x.pow(2)" ".mean(dim=-1, keepdim=True)", "centring"),
    ("rms_norm_unit_rms", "mean_square = x.pow(2)" ".mean(dim=-1, keepdim=True)",  # a variance: centred, over C - 1
     "mean_square = x.var(dim=-1, keepdim=True)", "root of its variance"),
    ("rms_norm_tiny_inputs", "x * torch.rsqrt(" "mean_square + eps) * weight",  # eps added to 1/RMS
     "x * (torch.rsqrt(mean_square) + eps) * weight", "sits where it does nothing"),
    ("rms_norm_vs_model", "return x * torch.rsqrt(" "mean_square + eps) * weight",  # x itself scaled, in place
     "return x.mul_(torch.rsqrt(mean_square + eps)).mul_(weight)", "changed its input x"),
    ("gated_norm_vs_model", "    y = rms_norm(" "x, weight, eps)",  # the normalised vector written over x
     "    y = x.copy_(rms_norm(x, weight, eps))", "changed one of its inputs"),
]

# the answer's key fragments: none may appear in the statement, the starter, the checks or the checker's messages,
# only in hints.md's later hints (split like MUTANTS' texts, so that each occurs once in the code above)
GIVEAWAYS = ["x.pow(2).mean(" "dim=-1, keepdim=True)", "torch.rsqrt(" "mean_square + eps)",
             "F.silu(" "y @ w_down.T)", "torch.sigmoid(" "hidden @ w_up.T)"]

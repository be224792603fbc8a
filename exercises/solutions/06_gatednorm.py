"""
Exercise 06: RMSNorm and GatedNorm, by hand.

RMSNorm divides each token's vector by its root mean square, then scales each channel by a learned gain.
GatedNorm (the GN paper) follows it with a small learned gate: a rank-r bottleneck computes, from the
normalised vector itself, one score in (0, 1) per channel, and multiplies the vector by it. That is an explicit,
input-dependent rescaling: what a plain RMSNorm network can only get by growing a massive activation.

  gap 1: rms_norm(x, weight, eps)                  x / sqrt(mean(x^2) + eps) * weight, over the last axis
  gap 2: gated_norm(x, weight, w_down, w_up, eps)  y = rms_norm(x, weight); y * sigmoid(SiLU(y W_down^T) W_up^T)

Use tensor operations (torch.sigmoid and F.silu are fine; F.rms_norm is what the checks compare with, so do not
call it). Check your file with:  python exercises/check.py 06
"""

import torch
import torch.nn.functional as F


def rms_norm(x, weight, eps=1e-6):
    """RMSNorm over the last axis.

    x: (..., C); weight: (C,), the learned gain. Returns x / sqrt(mean(x**2) + eps) * weight, where the mean is
    over the C channels of each token (the last axis), with x's shape and dtype.
    """
    mean_square = x.pow(2).mean(dim=-1, keepdim=True)  # (..., 1): one number per token, broadcast over channels
    # eps inside the root: a near-zero vector stays near zero instead of having its noise blown up to RMS 1
    return x * torch.rsqrt(mean_square + eps) * weight


def gated_norm(x, weight, w_down, w_up, eps=1e-6):
    """GatedNorm (GN): RMSNorm, then a sigmoid gate computed from the normalised vector through a rank-r bottleneck.

    x: (..., C); weight: (C,), RMSNorm's gain; w_down: (r, C) and w_up: (C, r), stored like nn.Linear weights
    (out x in), so y @ w_down.T is (..., r). Returns (..., C):
        y = rms_norm(x, weight)
        y * sigmoid(SiLU(y @ w_down.T) @ w_up.T)
    """
    y = rms_norm(x, weight, eps)
    hidden = F.silu(y @ w_down.T)  # (..., r): the bottleneck, r << C, so the gate costs ~2rC weights per norm
    scores = torch.sigmoid(hidden @ w_up.T)  # (..., C): one score in (0, 1) per channel, depending on this token
    return y * scores  # the gate only shrinks: the model can scale a token down without an outlier doing it


# known mistakes, for CI: (the check that must catch it, text of this file, the mistake). Each text is split into
# two literals so that it occurs once in this file: in the code above, not here.
MUTANTS = [
    ("rms_norm_unit_rms", "x.pow(2).mean(" "dim=-1, keepdim=True)", "x.pow(2).mean(dim=1, keepdim=True)"),  # wrong axis
    ("rms_norm_eps_inside_sqrt", "x * torch.rsqrt(" "mean_square + eps) * weight",
     "x / (mean_square.sqrt() + eps) * weight"),  # eps outside the square root
    ("gated_norm_never_larger", "return y * " "scores", "return x * scores"),  # the gate on the input, not on y
    ("gated_norm_bottleneck_silu", "hidden = F.silu(" "y @ w_down.T)", "hidden = F.relu(y @ w_down.T)"),  # ReLU
]

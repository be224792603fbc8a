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
    # TODO(06-gap1): the mean of x**2 over the last axis (keep that axis, so it broadcasts), eps added inside
    #                the square root, x divided by it, times weight
    raise NotImplementedError("06-gap1: write rms_norm: x / sqrt(mean(x**2, last axis) + eps) * weight")


def gated_norm(x, weight, w_down, w_up, eps=1e-6):
    """GatedNorm (GN): RMSNorm, then a sigmoid gate computed from the normalised vector through a rank-r bottleneck.

    x: (..., C); weight: (C,), RMSNorm's gain; w_down: (r, C) and w_up: (C, r), stored like nn.Linear weights
    (out x in), so y @ w_down.T is (..., r). Returns (..., C):
        y = rms_norm(x, weight)
        y * sigmoid(SiLU(y @ w_down.T) @ w_up.T)
    """
    # TODO(06-gap2): normalise x with your rms_norm, compute the gate from that normalised y through the
    #                bottleneck (down, SiLU, up, sigmoid), and multiply y by it
    raise NotImplementedError("06-gap2: write gated_norm: y = rms_norm(x, weight); "
                              "y * sigmoid(SiLU(y @ w_down.T) @ w_up.T)")

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
    # TODO(06-gap1): return x normalised to RMS 1 per token (over its C channels, eps as F.rms_norm uses it),
    #                times the gain weight; x's shape and dtype
    raise NotImplementedError("06-gap1: write rms_norm")


def gated_norm(x, weight, w_down, w_up, eps=1e-6):
    """GatedNorm (GN): RMSNorm, then a sigmoid gate computed from the normalised vector through a rank-r bottleneck.

    x: (..., C); weight: (C,), RMSNorm's gain; w_down: W_down, (r, C), and w_up: W_up, (C, r), stored like
    nn.Linear weights (out x in). Returns x's shape and dtype: y' = y * sigmoid(W_up SiLU(W_down y)) for each
    token, where y = rms_norm(x, weight, eps).
    """
    # TODO(06-gap2): return the normalised y (your rms_norm) scaled channel by channel by the gate's scores,
    #                which the bottleneck (W_down, SiLU, W_up, sigmoid) computes from that same y
    raise NotImplementedError("06-gap2: write gated_norm")

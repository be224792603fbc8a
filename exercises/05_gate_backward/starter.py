"""
Exercise 05: the gate's backward by hand.

The G1 gate multiplies each head's attention output y by scores s = sigmoid(g), g its logits:

    out = y * s,    s = sigmoid(g)

Given dout = dL/dout, the backward returns dy = dL/dy and dg = dL/dg. Elementwise logits g are (B, H, T, D), like
y; headwise logits are (B, H, T, 1), one per head and token, broadcast over the head's D channels.

  gap 1: gate_forward(y, g)          -> (out, saved)
  gap 2: gate_backward(dout, y, g)   -> (dy, dg), each with its input's shape, derived by hand
  gap 3: SigmoidGate, a torch.autograd.Function made of the two (checked against autograd's own gradients)

Check your file with:  python exercises/check.py 05
"""

import torch


def gate_forward(y, g):
    """y: (B, H, T, D); g: gate logits, (B, H, T, D) elementwise or (B, H, T, 1) headwise.
    Returns out = y * sigmoid(g), (B, H, T, D), and saved = (y, g): the tensors the backward reads (it recomputes
    s = sigmoid(g) rather than storing another tensor of y's size)."""
    # TODO(05-gap1): the gated output, and the tuple of tensors the backward needs
    raise NotImplementedError("05-gap1: write gate_forward")


def gate_backward(dout, y, g):
    """dout: dL/dout, (B, H, T, D); y, g: as given to gate_forward.
    Returns (dy, dg): dy = dL/dy with y's shape and dg = dL/dg with g's shape."""
    # TODO(05-gap2): dy and dg, derived by hand with the chain rule; plain tensor arithmetic, no autograd
    raise NotImplementedError("05-gap2: write gate_backward")


class SigmoidGate(torch.autograd.Function):
    """out = SigmoidGate.apply(y, g): the gate, with the hand-written forward and backward in place of autograd's."""

    @staticmethod
    def forward(ctx, y, g):
        # TODO(05-gap3): run gate_forward, keep its saved tensors for the backward (ctx.save_for_backward), return out
        raise NotImplementedError("05-gap3: write SigmoidGate.forward")

    @staticmethod
    def backward(ctx, dout):
        # TODO(05-gap3): the saved tensors back (ctx.saved_tensors), and gate_backward's gradients, one per input of
        #                forward, in forward's order
        raise NotImplementedError("05-gap3: write SigmoidGate.backward")

"""
Exercise 05: the gate's backward by hand.

The G1 gate multiplies each head's attention output y by scores s = sigmoid(g), g its logits:

    out = y * s,    s = sigmoid(g)

Given dout = dL/dout, the backward returns dy = dL/dy and dg = dL/dg. Elementwise logits g are (B, H, T, D), like
y; headwise logits are (B, H, T, 1), one per head and token, broadcast over the head's D channels.

  gap 1: gate_forward(y, g)          -> (out, saved)
  gap 2: gate_backward(dout, y, g)   -> (dy, dg), each with its input's shape, derived by hand
  gap 3: SigmoidGate, a torch.autograd.Function made of the two (checked against autograd's own gradients)

This is the reference solution:
    python exercises/check.py 05 --file=exercises/solutions/05_gate_backward.py
"""

import torch


def gate_forward(y, g):
    """y: (B, H, T, D); g: gate logits, (B, H, T, D) elementwise or (B, H, T, 1) headwise.
    Returns out = y * sigmoid(g), (B, H, T, D), and saved = (y, g): the tensors the backward reads (it recomputes
    s = sigmoid(g) rather than storing another tensor of y's size)."""
    out = y * torch.sigmoid(g)  # headwise: the (B, H, T, 1) scores broadcast over D
    return out, (y, g)


def gate_backward(dout, y, g):
    """dout: dL/dout, (B, H, T, D); y, g: as given to gate_forward.
    Returns (dy, dg): dy = dL/dy with y's shape and dg = dL/dg with g's shape."""
    s = torch.sigmoid(g)
    dy = dout * s  # out = y * s is linear in y: each y is scaled by its score
    dg = dout * y * s * (1 - s)  # d out / d s = y, and d s / d g = sigmoid'(g) = s * (1 - s)
    if g.size(-1) == 1:  # headwise: one logit fed all D channels of its head, so its gradient sums theirs
        dg = dg.sum(dim=-1, keepdim=True)
    return dy, dg


class SigmoidGate(torch.autograd.Function):
    """out = SigmoidGate.apply(y, g): the gate, with the hand-written forward and backward in place of autograd's."""

    @staticmethod
    def forward(ctx, y, g):
        out, saved = gate_forward(y, g)
        ctx.save_for_backward(*saved)  # tensors kept for the backward go through ctx, not plain attributes
        return out

    @staticmethod
    def backward(ctx, dout):
        y, g = ctx.saved_tensors
        return gate_backward(dout, y, g)  # one gradient per input of forward, in the same order


# known mistakes, for CI: (the check that must catch it, text of this file, the mistake). Each text is split into
# two literals so that it occurs once in this file: in the code above, not here.
MUTANTS = [
    ("backward_shapes", "dg = dg.sum(" "dim=-1, keepdim=True)", "dg = dg"),  # headwise dg not summed over D
    ("trap_dy_forgets_s", "dy = dout " "* s", "dy = dout"),  # as if the gate were not there
    ("trap_dg_missing_sigmoid_derivative", "dg = dout * y " "* s * (1 - s)", "dg = dout * y"),  # d out / d s only
    ("trap_dg_one_minus_s_only", "dg = dout * y " "* s * (1 - s)", "dg = dout * y * (1 - s)"),  # the kernel's, with y
    # the derivative through exp(-g): right for moderate g, NaN where the gate is shut (e^800 = inf, inf / inf)
    ("backward_where_the_gate_is_shut_or_wide_open", "dg = dout * y " "* s * (1 - s)",
     "dg = dout * y * torch.exp(-g) / (1 + torch.exp(-g)) ** 2"),
    ("backward_vs_autograd", "s = torch." "sigmoid(g)", "s = torch.sigmoid(g.float()).to(g.dtype)"),  # float32 inside
    ("backward_vs_autograd", "dy = dout " "* s", "dy = dout.mul_(s)", "changed dout in place"),  # not "re-derive"
    ("backward_vs_autograd", "s = torch." "sigmoid(g)",  # autograd inside, not the chain rule by hand
     "y, g = y.detach().requires_grad_(), g.detach().requires_grad_(); "
     "return torch.autograd.grad(y * torch.sigmoid(g), (y, g), dout)"),
    ("sigmoid_gate_gradcheck", "ctx.save_for_backward(" "*saved)", "ctx.save_for_backward(out, saved[1])",  # out for y
     "saved out where y belongs"),
]

# the answer's key fragments: they appear in hints.md (not in its first hint), never in the statement, the starter,
# the checks, or anything the checker prints for the starter or a mutant (some split in two literals, as in MUTANTS)
GIVEAWAYS = ["dout * y * s * (1 - s)", "s * (1 - s)", "s(1 - s)", "dy = dout " "* s", "sum(dim=-1, keepdim=True)"]

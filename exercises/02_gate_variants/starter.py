"""
Exercise 02: gate activations and the additive gate.

The Gated Attention paper (GA) varies the gate Y' = Y * act(X W_theta) to find out why it works: which
activation turns the logits s = X W_theta into scores, and whether the scores multiply Y or are added to it.

  gap 1: gate_activation(name, s)         the scores of "sigmoid", "silu", "ns_sigmoid" or "identity";
                                          any other name: ValueError
  gap 2: apply_gate(y, s, act, op)        op "mul": y * act(s); op "add": y + act(s); else ValueError

Check your file with:  python exercises/check.py 02
"""

import torch
import torch.nn.functional as F

ACTIVATIONS = ("sigmoid", "silu", "ns_sigmoid", "identity")  # the valid names, the paper's default first
OPS = ("mul", "add")


def gate_activation(name, s):
    """The gate scores act(s) for the logits s (any shape; returns s's shape and dtype):

    sigmoid     the logistic sigmoid 1 / (1 + exp(-s)), in (0, 1): the default gate
    silu        s * sigmoid(s) (SiLU, or swish): unbounded above, the paper's activation for the additive gate
    ns_sigmoid  the "non-sparse" sigmoid: the sigmoid's curve, scaled and shifted onto (0.5, 1)
    identity    s itself (the "additive identity" row of GA: X W_theta added as it is)

    Any other name raises ValueError, and its message lists the valid names.
    """
    # TODO(02-gap1): the scores for each of the four names, in s's shape and dtype; for any other name, a
    #                ValueError whose message lists ACTIVATIONS
    raise NotImplementedError("02-gap1: write gate_activation")


def apply_gate(y, s, act="sigmoid", op="mul"):
    """The gate with activation act (a name for gate_activation) applied to y, given its logits s (same shape as
    y, or broadcastable to it): op "mul" returns y * act(s), op "add" returns y + act(s); any other op raises
    ValueError, and its message lists the valid ops."""
    # TODO(02-gap2): y gated by the scores of activation act (gate_activation), multiplied ("mul") or added
    #                ("add"); for any other op, a ValueError whose message lists OPS
    raise NotImplementedError("02-gap2: write apply_gate")

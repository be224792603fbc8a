"""
Exercise 02: gate activations and the additive gate.

The Gated Attention paper (GA) varies the gate Y' = Y * act(X W_theta) to find out why it works: which
activation turns the logits s = X W_theta into scores, and whether the scores multiply Y or are added to it.

  gap 1: gate_activation(name, s)         the scores of "sigmoid", "silu", "ns_sigmoid" or "identity";
                                          any other name: ValueError
  gap 2: apply_gate(y, s, act, op)        op "mul": y * act(s); op "add": y + act(s); else ValueError

This is the reference solution:
    python exercises/check.py 02 --file=exercises/solutions/02_gate_variants.py
"""

import torch
import torch.nn.functional as F

ACTIVATIONS = ("sigmoid", "silu", "ns_sigmoid", "identity")  # the valid names, the paper's default first
OPS = ("mul", "add")


def gate_activation(name, s):
    """The gate scores act(s) for the logits s (any shape; returns s's shape and dtype):

    sigmoid     the logistic sigmoid 1 / (1 + exp(-s)), in (0, 1): the default gate
    silu        s * sigmoid(s) (SiLU, or swish): unbounded above, the paper's activation for the additive gate
    ns_sigmoid  the "non-sparse" sigmoid: the sigmoid's curve mapped affinely (a + b * sigmoid(s)) onto (0.5, 1)
    identity    s itself (the "additive identity" row of GA: X W_theta added as it is)

    Any other name raises ValueError, and its message lists the valid names.
    """
    if name == "sigmoid":
        return torch.sigmoid(s)  # (0, 1): a score near 0 shuts its channel, so the gate can be sparse
    if name == "silu":
        return F.silu(s)  # s * sigmoid(s): 0 at s = 0, about -0.28 at its lowest, unbounded above
    if name == "ns_sigmoid":
        return 0.5 + 0.5 * torch.sigmoid(s)  # a = b = 0.5: (0.5, 1), still non-linear, it can at most halve a channel
    if name == "identity":
        return s
    raise ValueError(f"unknown gate activation {name!r}; the valid names are {list(ACTIVATIONS)}")


def apply_gate(y, s, act="sigmoid", op="mul"):
    """The gate with activation act (a name for gate_activation) applied to y, given its logits s (same shape as
    y, or broadcastable to it): op "mul" returns y * act(s), op "add" returns y + act(s); any other op raises
    ValueError, and its message lists the valid ops."""
    if op == "mul":
        return y * gate_activation(act, s)  # the scores rescale y: with sigmoid, between 0 (shut) and 1 (open)
    if op == "add":
        return y + gate_activation(act, s)  # the scores shift y instead of rescaling it
    raise ValueError(f"unknown gate op {op!r}; the valid ops are {list(OPS)}")


# known mistakes, for CI: (the check that must catch it, text of this file, the mistake). Each text is split into
# two literals so that it occurs once in this file: in the code above, not here.
MUTANTS = [
    ("ns_sigmoid_range", "0.5 + 0.5 * " "torch.sigmoid(s)", "0.5 * torch.sigmoid(s)"),  # range (0, 0.5)
    ("ns_sigmoid_range", "0.5 + 0.5 * " "torch.sigmoid(s)", "torch.sigmoid(s) + 0.5", "yours is 1"),  # (0.5, 1.5)
    ("silu", "return F.silu" "(s)", "return torch.sigmoid(s)"),  # SiLU is s * sigmoid(s), not sigmoid(s)
    ("unknown_name_raises", 'if name == "identity"' ":", "if True:"),  # anything unknown passes as identity
    ("trap_add_is_not_mul", "return y + " "gate_activation(act, s)", "return y * gate_activation(act, s)"),
    # the scores cut off from the logits: right values, but the gate could not learn
    ("gradients_reach_the_logits", "torch.sigmoid(s)  # a = b " "= 0.5", "torch.sigmoid(s).detach()  # a = b = 0.5"),
    ("apply_gate_vs_model", "the valid ops are " "{list(OPS)}", "no such op"),  # the message names no valid op
    ("apply_gate_vs_model", "return y * " "gate_activation(act, s)  #", "return y.mul_(gate_activation(act, s))  #"),
]

# the answer's key fragments: they appear in hints.md (not in its first hint), never in the statement, the starter,
# the checks, or anything the checker prints for the starter or a mutant (some split in two literals, as in MUTANTS)
GIVEAWAYS = ["0.5 + 0.5 * " "torch.sigmoid(s)", "0.5 + 0.5 * sigmoid(s)", "F.silu(s)", "y * gate_activation(act, s)",
             "y + gate_activation(act, s)"]

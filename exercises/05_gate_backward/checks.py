"""Checks of exercise 05 (the gate's backward by hand), in order: the forward, the gradients' shapes, three traps
(dy as if there were no gate, dg that stops at the score or takes a wrong sigmoid derivative), the gradients
against torch autograd (and no autograd inside), the gradients where the gate is shut or wide open (|g| up to 800),
then the SigmoidGate Function: its output, and the gradients autograd gets from its backward, against autograd of
y * sigmoid(g) (what torch.autograd.gradcheck compares with finite differences)."""

import torch

import check
from check import Wrong, expect_close, expect_shape, same


def _inputs(granularity, seed, shape=(2, 3, 5, 4)):
    """y, g, dout in float64: y and dout (B, H, T, D), g (B, H, T, D) or (B, H, T, 1)."""
    gen = check.generator(seed)
    y = torch.randn(*shape, generator=gen, dtype=torch.float64)
    g_shape = shape if granularity == "elementwise" else (*shape[:3], 1)
    g = 2.0 * torch.randn(*g_shape, generator=gen, dtype=torch.float64)  # scores across (0, 1), not all near 0.5
    dout = torch.randn(*shape, generator=gen, dtype=torch.float64)
    return y, g, dout


def _autograd(y, g, dout):
    """dy, dg from torch autograd of out = y * sigmoid(g)."""
    y, g = y.clone().requires_grad_(), g.clone().requires_grad_()
    (y * torch.sigmoid(g)).backward(dout)
    return y.grad, g.grad


def _backward(student, dout, y, g):
    result = student.gate_backward(dout, y, g)  # answered by the student's process: tensors, copied back
    if not isinstance(result, tuple) or len(result) != 2:
        raise Wrong(f"gate_backward should return a tuple (dy, dg), got {type(result).__name__}.")
    return result


def check_forward(student):
    """gate_forward returns out = y * sigmoid(g) with y's shape, and saved = (y, g), elementwise and headwise"""
    for granularity in ("elementwise", "headwise"):
        y, g, _ = _inputs(granularity, seed=0)
        result = student.gate_forward(y, g)
        if not isinstance(result, tuple) or len(result) != 2:
            raise Wrong(f"gate_forward should return a tuple (out, saved), got {type(result).__name__}.")
        out, saved = result
        expect_close(f"gate_forward's out ({granularity})", out, y * torch.sigmoid(g), atol=1e-12, rtol=1e-12,
                     hint="out = y * sigmoid(g); headwise, the (B, H, T, 1) scores broadcast over D.")
        if not (isinstance(saved, (tuple, list)) and len(saved) == 2
                and same(saved[0], y, 0) and same(saved[1], g, 0)):
            raise Wrong("saved should be the tuple (y, g): the backward gets them back as gate_backward(dout, y, g) "
                        "and recomputes s = sigmoid(g) from g.")


def check_backward_shapes(student):
    """dy has y's shape; dg has g's shape: (B, H, T, D) elementwise, (B, H, T, 1) headwise"""
    for granularity in ("elementwise", "headwise"):
        y, g, dout = _inputs(granularity, seed=1)
        dy, dg = _backward(student, dout, y, g)
        expect_shape(f"dy ({granularity})", dy, y.shape, "dy = dL/dy has y's shape.")
        if granularity == "headwise" and isinstance(dg, torch.Tensor) and tuple(dg.shape) == tuple(y.shape):
            raise Wrong(f"Headwise, dg has shape {tuple(dg.shape)}, y's, but g is {tuple(g.shape)}: dg = dL/dg has "
                        "g's shape. One logit per head fed all D channels of that head (broadcasting): how does the "
                        "chain rule collect the gradient of a variable used several times?")
        if granularity == "headwise" and isinstance(dg, torch.Tensor) and tuple(dg.shape) == tuple(g.shape[:3]):
            raise Wrong(f"Headwise, dg has shape {tuple(dg.shape)} but g is {tuple(g.shape)}: you reduced the last "
                        "axis away; keep it, with size 1.")
        expect_shape(f"dg ({granularity})", dg, g.shape, "dg = dL/dg has g's shape.")


def check_trap_dy_forgets_s(student):
    """dy: the gradient reaching y goes through the gate, it is not passed on unchanged"""
    y, g, dout = _inputs("elementwise", seed=2)
    dy, _ = _backward(student, dout, y, g)
    if same(dy, dout):
        raise Wrong("Your dy is dout itself, as if the gate were not there. What is d out / d y, element by element? "
                    "(A shut gate stops the gradient to its head, as it stops the head's output.)")


def check_trap_dg_missing_sigmoid_derivative(student):
    """dg goes through the sigmoid: the chain rule from out to the score s, then from s to the logit g"""
    y, g, dout = _inputs("elementwise", seed=3)
    _, dg = _backward(student, dout, y, g)
    s = torch.sigmoid(g)
    if same(dg, dout * y):
        raise Wrong("Your dg is dout * y: that is dL/ds, the gradient with respect to the score s. The logit g is "
                    "one step further back: the chain rule goes on through s = sigmoid(g).")
    if same(dg, dout * y * s):
        raise Wrong("Your dg is dout * y * s, but the sigmoid's derivative is not s itself. Differentiate "
                    "1 / (1 + exp(-g)), then write the result with s.")


def check_trap_dg_one_minus_s_only(student):
    """dg: the sigmoid's whole derivative, not one factor of it"""
    y, g, dout = _inputs("elementwise", seed=4)
    _, dg = _backward(student, dout, y, g)
    if same(dg, dout * y * (1 - torch.sigmoid(g))):
        raise Wrong("Your dg is dout * y * (1 - s). Re-check the sigmoid's derivative: differentiate "
                    "1 / (1 + exp(-g)), then write the result with s. (kernels.py has a line like yours, but it "
                    "multiplies the GATED output, not y: README.md's last question is about exactly this.)")


def check_backward_vs_autograd(student):
    """dy and dg match torch autograd of y * sigmoid(g) in float64, elementwise and headwise"""
    for granularity in ("elementwise", "headwise"):
        y, g, dout = _inputs(granularity, seed=5)
        want_dy, want_dg = _autograd(y, g, dout)
        dy, dg = _backward(student, dout, y, g)
        compare = ("Compare with autograd yourself: y and g with requires_grad=True, "
                   "(y * torch.sigmoid(g)).backward(dout), then y.grad and g.grad.")
        try:
            for name, got, want in (("dy", dy, want_dy), ("dg", dg, want_dg)):
                if same(got, want, 1e-5) and not same(got, want, 1e-10):  # right, but rounded as float32 rounds
                    raise Wrong(f"{name} ({granularity}) is right to about 1e-7 but not to float64's precision: part "
                                "of your arithmetic ran in float32 (a .float(), a float32 tensor you made). Keep the "
                                "inputs' dtype: the maths is right.")
            expect_close(f"dy ({granularity})", dy, want_dy, atol=1e-12, rtol=1e-10,
                         hint="Re-derive d out / d y. " + compare)
            expect_close(f"dg ({granularity})", dg, want_dg, atol=1e-12, rtol=1e-10,
                         hint=("Elementwise passed, so look at how the gradients of a head's D channels reach its "
                               "one logit. " if granularity == "headwise" else
                               "Re-derive d out / d g, through the sigmoid. ") + compare)
            wrong = None
        except Wrong as e:  # a number off because dout was overwritten (dout *= s) is that, not the derivative
            wrong = e
        touched = student.in_child(_grads_touched, dout, y, g)
        if touched:
            raise Wrong(f"gate_backward {touched}: compute the gradients by hand, as plain tensors (no autograd "
                        "inside), and leave dout as it came (autograd may pass the same tensor elsewhere)"
                        + (", then see whether your numbers are right" if wrong else "") + ".")
        if wrong:
            raise wrong


def check_backward_where_the_gate_is_shut_or_wide_open(student):
    """dy and dg stay finite, and right, for logits far from 0 (|g| up to 800: a gate shut or wide open)"""
    y, g, dout = _inputs("elementwise", seed=7)
    g = g.clone()
    g.view(-1)[:8] = torch.tensor([-800.0, -100.0, -50.0, -20.0, 20.0, 50.0, 100.0, 800.0], dtype=g.dtype)
    dy, dg = _backward(student, dout, y, g)
    want_dy, want_dg = _autograd(y, g, dout)
    for name, got in (("dy", dy), ("dg", dg)):
        if isinstance(got, torch.Tensor) and not torch.isfinite(got).all():
            raise Wrong(f"{name} is NaN or inf where |g| is large (a shut or wide-open gate, which a trained G1 "
                        "gate has plenty of): an exp of -g overflowed there (e^800 is inf, and inf / inf is NaN). "
                        "Write the sigmoid's derivative with s = sigmoid(g) alone: it stays finite for any g.")
    expect_close("dy (large |g|)", dy, want_dy, atol=1e-12, rtol=1e-10, hint="Re-derive d out / d y.")
    expect_close("dg (large |g|)", dg, want_dg, atol=1e-12, rtol=1e-10,
                 hint="Write the sigmoid's derivative with s = sigmoid(g) alone.")


def _grads_touched(student, dout, y, g):
    """In the student's process: what gate_backward did that it must not (set .grad on its inputs, call autograd,
    change dout in place), as words, or None."""
    calls = []
    patched = [(torch.autograd, "grad"), (torch.autograd, "backward"), (torch.Tensor, "backward")]
    originals = [getattr(owner, name) for owner, name in patched]
    for (owner, name), original in zip(patched, originals):
        def spy(*args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)
        setattr(owner, name, spy)
    y, g, kept = y.clone().requires_grad_(), g.clone().requires_grad_(), dout.clone()
    try:
        student.gate_backward(dout, y, g)
    finally:
        for (owner, name), original in zip(patched, originals):
            setattr(owner, name, original)
    if calls:
        return f"called autograd ({calls[0]})"
    if y.grad is not None or g.grad is not None:
        return "changed its inputs' .grad"
    if not torch.equal(dout, kept):
        return "changed dout in place"
    return None


def _through_sigmoid_gate(student, y, g, dout):
    """In the student's process: SigmoidGate.apply(y, g), the name of its output's grad_fn, and the gradients that
    autograd gets for y and g from the Function's backward, given dout."""
    y, g = y.clone().requires_grad_(), g.clone().requires_grad_()
    out = student.SigmoidGate.apply(y, g)
    grad_fn = type(out.grad_fn).__name__ if getattr(out, "grad_fn", None) is not None else None
    if grad_fn is None or "SigmoidGate" not in grad_fn:
        return out, grad_fn, None, None
    try:
        dy, dg = torch.autograd.grad(out, (y, g), dout)
    except RuntimeError as e:  # e.g. backward returned tensors of the wrong shape, or too few
        raise Wrong(f"autograd could not run SigmoidGate's backward: {e}. backward must return (dy, dg), one "
                    "gradient per input of forward, each with its input's shape.") from None
    return out, grad_fn, dy, dg


def check_sigmoid_gate_gradcheck(student):
    """SigmoidGate.apply computes y * sigmoid(g), and autograd through it gives the gradients of y * sigmoid(g)
    (float64), both granularities"""
    for granularity in ("elementwise", "headwise"):
        y, g, dout = _inputs(granularity, seed=6, shape=(1, 2, 3, 4))
        out, grad_fn, dy, dg = student.in_child(_through_sigmoid_gate, y, g, dout)
        expect_close(f"SigmoidGate.apply(y, g) ({granularity})", out, y * torch.sigmoid(g), atol=1e-12, rtol=1e-12,
                     hint="forward returns gate_forward's out.")
        if dy is None:
            raise Wrong("SigmoidGate.apply's output does not come from SigmoidGate's backward (its grad_fn is "
                        f"{grad_fn}): return gate_forward's out from forward, unchanged.")
        want_dy, want_dg = _autograd(y, g, dout)
        if same(dy, want_dy, 1e-10) and same(dg, _autograd(out, g, dout)[1], 1e-10):  # dg from out, not y
            raise Wrong(f"({granularity}) SigmoidGate's backward computed dg as if y were the gated output: forward "
                        "saved out where y belongs. The backward needs the inputs, gate_forward's saved = (y, g).")
        if not (same(dy, want_dy, 1e-10) and same(dg, want_dg, 1e-10)):
            raise Wrong(f"({granularity}) the gradients autograd gets from SigmoidGate's backward are not those of "
                        "y * sigmoid(g) (torch.autograd.gradcheck would fail too: it compares them with finite "
                        "differences of the forward). Does backward read ctx.saved_tensors in the order forward "
                        "saved them and return gate_backward's (dy, dg) in the order of forward's inputs (y, g)?")

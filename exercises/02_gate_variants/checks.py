"""Checks of exercise 02 (gate activations, the additive gate), in order: each activation's range and analytic
values (with the known mistakes), the ValueError, numbers against model.gate_activation, then apply_gate."""

import torch

import check
from check import Wrong, expect_close, expect_shape, same

NAMES = ("sigmoid", "silu", "ns_sigmoid", "identity")


def _logits(seed=0, shape=(2, 5, 3, 4), scale=4.0):
    """Random logits in float64 spanning both signs and both tails of the sigmoid."""
    return scale * torch.randn(*shape, generator=check.generator(seed), dtype=torch.float64)


def _grid():
    """Logits from -30 to 30, 0 included: far enough into both tails that the sigmoid is 0 or 1 to float32."""
    return torch.linspace(-30, 30, 601, dtype=torch.float64)


def _scores(student, name, s):
    out = student.gate_activation(name, s)
    expect_shape(f"gate_activation({name!r}, s)", out, s.shape, "The activation works elementwise: keep s's shape.")
    return out


def check_sigmoid(student):
    """sigmoid: scores in (0, 1), sigmoid(0) = 0.5, increasing"""
    s = _grid()
    out = _scores(student, "sigmoid", s)
    if not torch.isfinite(out).all() or out.min() < 0 or out.max() > 1:
        raise Wrong("sigmoid scores must lie in (0, 1), and yours leave it (or are not finite): re-check the "
                    "sigmoid's definition in README.md.")
    if not abs(out[300].item() - 0.5) <= 1e-12:  # s = 0
        raise Wrong("sigmoid(0) should be 0.5, and yours is not: re-check the sigmoid's definition in README.md.")
    if not (out[1:] >= out[:-1]).all() or out[-1] - out[0] < 0.99:
        raise Wrong("sigmoid should rise from ~0 (s = -30) to ~1 (s = 30), and yours does not.")


def check_ns_sigmoid_range(student):
    """ns_sigmoid is the sigmoid's curve moved onto (0.5, 1): ns_sigmoid(0) = 0.75, range (0.5, 1)"""
    s = _grid()
    out = _scores(student, "ns_sigmoid", s)
    if same(out, 0.5 * torch.sigmoid(s)):
        raise Wrong("Your ns_sigmoid is 0.5 * sigmoid(s): its range is (0, 0.5), so it is still sparse (it can shut a "
                    "channel completely) and only half as open. The non-sparse sigmoid's range is (0.5, 1): where "
                    "does your curve start, and where must it start?")
    if same(out, torch.sigmoid(s)):
        raise Wrong("Your ns_sigmoid is the plain sigmoid, range (0, 1): it can still shut a channel. The non-sparse "
                    "sigmoid is the same curve mapped onto (0.5, 1).")
    if not abs(out[300].item() - 0.75) <= 1e-12:  # s = 0
        raise Wrong("ns_sigmoid(0) should be 0.75, the middle of (0.5, 1) (as sigmoid(0) = 0.5 is the middle of "
                    f"(0, 1)); yours is {out[300].item():.6g}.")
    if out.min() < 0.5 - 1e-12 or out.max() > 1 + 1e-12:
        raise Wrong("ns_sigmoid scores must lie in (0.5, 1): the scores approach 0.5 as s -> -inf, so the gate can at "
                    "most halve a channel. Yours leave that range.")
    if out[0] > 0.5 + 1e-9 or out[-1] < 1 - 1e-9:
        raise Wrong("ns_sigmoid should reach 0.5 at s = -30 and 1 at s = 30 (to 1e-9), as the sigmoid reaches 0 and 1 "
                    "there, and yours does not.")


def check_silu(student):
    """silu: silu(0) = 0, negative for s < 0 (lowest about -0.278), unbounded above"""
    s = _grid()
    out = _scores(student, "silu", s)
    if same(out, torch.sigmoid(s)):
        raise Wrong("Your silu is the sigmoid. SiLU (swish) is 0 at s = 0, slightly negative for s < 0 and about s "
                    "for large s: see its definition in README.md.")
    if not abs(out[300].item()) <= 1e-12:  # s = 0
        raise Wrong("silu(0) should be 0, and yours is not: re-check SiLU's definition in README.md.")
    if out.min() > -0.27 or out.min() < -0.28:
        raise Wrong("silu should dip below 0 for s < 0, to a lowest value of about -0.278 (at s = -1.28); yours does "
                    "not. Re-check SiLU's definition in README.md.")
    if not abs(out[-1].item() - 30.0) <= 1e-9:
        raise Wrong("silu(30) should be 30 (to 1e-9): SiLU grows like s for large s, it is not bounded by 1.")


def check_identity(student):
    """identity returns the logits unchanged"""
    s = _logits(1)
    out = _scores(student, "identity", s)
    if not same(out, s, 0.0):
        raise Wrong("gate_activation('identity', s) should return s unchanged.")


def check_unknown_name_raises(student):
    """an unknown activation name raises ValueError, and the message lists the valid names"""
    for name in ("tanh", "Sigmoid", ""):
        try:
            student.gate_activation(name, _logits(2))
        except ValueError as e:
            missing = [n for n in NAMES if n not in str(e)]
            if missing:
                raise Wrong(f"gate_activation({name!r}, s) raised ValueError, but its message does not list the valid "
                            f"names ({', '.join(missing)} missing): a user who mistypes a name should see the choices.")
        else:
            raise Wrong(f"gate_activation({name!r}, s) should raise ValueError (an unknown name); yours returned a "
                        "value. A silent fallback (say, to identity) hides a typo in a config and trains the wrong "
                        "model.")


def check_numbers_vs_model(student):
    """every activation matches model.gate_activation (float64, random logits) and keeps float32 as float32"""
    import model
    s = _logits(3)
    for name in NAMES:
        expect_close(f"gate_activation({name!r}, s)", _scores(student, name, s), model.gate_activation(name, s),
                     atol=1e-12, rtol=1e-12)
        out32 = student.gate_activation(name, s.float())
        if out32.dtype != torch.float32:
            raise Wrong(f"gate_activation({name!r}, s) turned float32 logits into {out32.dtype}: keep s's dtype.")


def _gradients(student, name, s):
    """In the student's process: the gradient that autograd gets for s through gate_activation(name, s)."""
    s = s.clone().requires_grad_()
    out = student.gate_activation(name, s)
    if not (isinstance(out, torch.Tensor) and out.requires_grad):
        return None
    out.sum().backward()
    return s.grad


def check_gradients_reach_the_logits(student):
    """every activation passes gradients back to the logits, as autograd's own (the gate is trained through it)"""
    import model
    s = _logits(10)
    for name in NAMES:
        grad = student.in_child(_gradients, name, s)
        if grad is None:
            raise Wrong(f"gate_activation({name!r}, s) on logits that require gradients returned a tensor with none "
                        "(torch.no_grad(), .detach(), or a tensor built anew): the gate is trained through this "
                        "function, so its scores must stay connected to s.")
        x = s.clone().requires_grad_()
        model.gate_activation(name, x).sum().backward()
        expect_close(f"the gradient of gate_activation({name!r}, s).sum() with respect to s", grad, x.grad,
                     atol=1e-10, rtol=1e-10, hint="Part of the computation is cut off from s (a .detach() or a "
                                                  ".item() inside?): the gate learns through every part of it.")


def check_apply_gate_mul(student):
    """apply_gate with op 'mul' returns y * act(s), for every activation"""
    y, s = _logits(4, scale=1.0), _logits(5)
    for name in NAMES:
        out = student.apply_gate(y, s, name, "mul")
        expect_close(f"apply_gate(y, s, {name!r}, 'mul')", out, y * student.gate_activation(name, s),
                     atol=1e-12, rtol=1e-12, hint="gate_activation passed its checks, so look at apply_gate: 'mul' "
                                                  "multiplies y by the scores of activation act.")


def check_trap_add_is_not_mul(student):
    """apply_gate with op 'add' adds the scores to y, it does not multiply by them"""
    y, s = _logits(6, scale=1.0), _logits(7)
    out = student.apply_gate(y, s, "silu", "add")
    expect_shape("apply_gate(y, s, 'silu', 'add')", out, y.shape)
    if same(out, y * torch.nn.functional.silu(s)):
        raise Wrong("Your 'add' gate multiplies: apply_gate(y, s, 'silu', 'add') returned y * silu(s). The additive "
                    "gate shifts y by the scores; it does not rescale y.")


def check_apply_gate_vs_model(student):
    """apply_gate matches model.Gate for every activation and op; an unknown op raises ValueError"""
    import model
    y = _logits(8, shape=(2, 5, 3, 4), scale=1.0)
    s = _logits(9, shape=(2, 5, 3, 4))
    for op in ("mul", "add"):
        for name in NAMES:
            gate = model.Gate(model.GPTConfig(n_embd=12, n_head=3, gate="g1", gate_act=name, gate_op=op,
                                              pos_emb="learned"))
            expect_close(f"apply_gate(y, s, {name!r}, {op!r})", student.apply_gate(y, s, name, op), gate(y, s),
                         atol=1e-12, rtol=1e-12, hint="gate_activation passed its checks, so look at how apply_gate "
                                                      "combines y with the scores for this op.")
    headwise = s[..., :1]  # (B, T, H, 1): one logit per head, broadcast over the head's channels
    expect_close("apply_gate(y, s_headwise, 'sigmoid', 'mul')", student.apply_gate(y, headwise, "sigmoid", "mul"),
                 y * torch.sigmoid(headwise), atol=1e-12, rtol=1e-12,
                 hint="Let broadcasting spread a (B, T, H, 1) score over y's last axis.")
    try:
        student.apply_gate(y, s, "sigmoid", "div")
    except ValueError as e:
        if not all(op in str(e) for op in ("mul", "add")):
            raise Wrong(f"apply_gate(y, s, 'sigmoid', 'div') raised ValueError, but its message does not list the "
                        f"valid ops: {str(e)!r}. Name them ('mul', 'add'), so the user learns what to write.") from None
    else:
        raise Wrong("apply_gate(y, s, 'sigmoid', 'div') should raise ValueError: 'mul' and 'add' are the only ops.")
    for op in ("mul", "add"):
        if not student.in_child(_leaves_y, y, s, op):
            raise Wrong(f"apply_gate(y, s, 'sigmoid', {op!r}) changed y in place: return a new tensor. The model's y "
                        "is the attention's output, which autograd still needs for the backward.")


def _leaves_y(student, y, s, op):
    """In the student's process: whether apply_gate(y, s, 'sigmoid', op) left y as it was."""
    kept = y.clone()
    student.apply_gate(y, s, "sigmoid", op)
    return torch.equal(y, kept)

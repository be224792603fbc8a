"""Checks of exercise 06 (RMSNorm and GatedNorm), in order. rms_norm: shape and dtype, scale invariance, unit RMS
per row, numbers against model.RMSNorm (and no call of PyTorch's own), then the epsilon trap at tiny inputs (the
only place it shows), then float64's precision.
gated_norm: shape, the gate's range (never larger than the RMSNorm output), the bottleneck's activation (a trap,
checked just before the model comparison so that it gets its own message), numbers against model.GatedNorm."""

import torch
import torch.nn.functional as F

import check
from check import Wrong, expect_close, expect_shape, same


def _randn(*shape, seed, scale=1.0):
    return torch.randn(*shape, generator=check.generator(seed), dtype=torch.float64) * scale


def _gain(C, seed):
    """A positive gain that is not all ones (a missing or misplaced weight must show)."""
    return 0.5 + torch.rand(C, generator=check.generator(seed), dtype=torch.float64)


def _model_rms_norm(x, weight, eps=1e-6):
    import model
    norm = model.RMSNorm(x.size(-1), eps=eps).double()
    with torch.no_grad():
        norm.weight.copy_(weight)
        return norm(x)


def _gated_inputs(seed, C=16, r=4, scale=1.0):
    """x (3, 5, C), weight (C,), w_down (r, C), w_up (C, r): large enough that the gate's scores spread over (0, 1)."""
    x = _randn(3, 5, C, seed=seed, scale=scale)
    w_down = _randn(r, C, seed=seed + 1, scale=2.0 / C ** 0.5)
    w_up = _randn(C, r, seed=seed + 2, scale=2.0 / r ** 0.5)
    return x, _gain(C, seed + 3), w_down, w_up


def _gate(y, w_down, w_up, act=F.silu):
    """GN's gate scores sigmoid(W_up act(W_down y)), through F.linear (weights stored (out, in), as nn.Linear's), with
    a choice of the bottleneck's activation: how the traps recognise a known wrong answer."""
    return torch.sigmoid(F.linear(act(F.linear(y, w_down)), w_up))


def _rms(x):
    """Each token's root mean square over its C channels (..., 1), without eps: for recognising wrong answers."""
    return torch.linalg.vector_norm(x, dim=-1, keepdim=True) * x.size(-1) ** -0.5


# ----------------------------------------------------------------------------------------------------------------
# rms_norm

def check_rms_norm_shape(student):
    """rms_norm returns x's shape and dtype (3-D and 2-D inputs; float32 and float64, weight in x's dtype)"""
    for shape, dtype in (((2, 3, 8), torch.float32), ((5, 8), torch.float32), ((5, 8), torch.float64)):
        x = torch.randn(*shape, generator=check.generator(0), dtype=dtype)
        out = student.rms_norm(x, torch.ones(8, dtype=dtype))
        expect_shape(f"rms_norm(x of shape {shape}, weight)", out, shape,
                     "The norm rescales each token's vector: the output has x's shape, and one token's RMS "
                     "must line up with that token's C channels.")
        if out.dtype != x.dtype:
            raise Wrong(f"rms_norm turned {dtype} inputs into {out.dtype}: keep x's dtype (is a step converting "
                        "to another?).")


def check_rms_norm_scale_invariance(student):
    """rms_norm(c * x) == rms_norm(x): dividing by the RMS removes any overall scale of a token's vector"""
    x, w = _randn(3, 4, 16, seed=1), _gain(16, 2)
    base = student.rms_norm(x, w)
    for c in (0.1, 7.0):
        out = student.rms_norm(c * x, w)
        expect_shape(f"rms_norm({c:g} * x, weight)", out, x.shape)
        if not torch.allclose(out, base, atol=1e-6, rtol=1e-3):
            ratio = (out.norm() / base.norm()).item()
            how = (f"it is {ratio:.3g} times as large" if abs(ratio - 1) > 0.01 else
                   f"it differs at {int((~torch.isclose(out, base, atol=1e-6, rtol=1e-3)).sum())} of {out.numel()} "
                   "entries")
            raise Wrong(f"rms_norm({c:g} * x) is not rms_norm(x) ({how}): the output should not depend on the "
                        "input's scale. If it scales like 1/c (10 times as large for c = 0.1), what you divide by "
                        "grows like c**2 (the mean square), not like c (its root); if only some entries differ, is "
                        "the mean over each token's channels?")


def check_rms_norm_unit_rms(student):
    """with weight = 1, every token's output vector has RMS 1 (over its C channels), whatever the input's scale"""
    x = _randn(4, 6, 32, seed=3)
    x = x * 10 ** (2 * torch.rand(4, 6, 1, generator=check.generator(4), dtype=torch.float64) - 1)
    out = student.rms_norm(x, torch.ones(32, dtype=torch.float64))
    expect_shape("rms_norm(x, ones)", out, x.shape)
    rms = _rms(out).squeeze(-1)  # (4, 6): one RMS per token
    bad = (rms - 1).abs() > 1e-3
    if bad.any() and torch.allclose(rms, torch.full_like(rms, 32 ** -0.5), rtol=1e-3):
        raise Wrong("with weight = 1, every token's output has RMS 1/sqrt(32), for C = 32 channels: you divide by "
                    "the root of the SUM of the squares, a vector's length. The RMS takes their mean.")
    for unbiased in (False, True):  # a variance's root: each token's mean subtracted (and torch's .var: C - 1)
        if bad.any() and same(out, x / (x.var(-1, keepdim=True, unbiased=unbiased) + 1e-6).sqrt()):
            raise Wrong("with weight = 1 your output is x divided by the root of its variance over the channels: a "
                        "variance subtracts each token's mean first (and torch's .var divides by C - 1). RMSNorm "
                        "divides x by the root of the mean of the squares of x itself: no mean subtracted, over C.")
    if bad.any():
        where = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise Wrong(f"with weight = 1, token {where} has RMS {rms[where].item():.4g}, not 1 ({int(bad.sum())} of "
                    f"{rms.numel()} tokens are off). Is your mean over each token's own C channels (the last axis)? A "
                    "mean over another axis (the tokens, the batch) mixes different tokens' scales.")


def check_rms_norm_vs_model(student):
    """rms_norm matches model.RMSNorm (F.rms_norm) with a random gain, float64"""
    x, w = _randn(3, 5, 16, seed=5), _gain(16, 6)
    out = student.rms_norm(x, w)
    centred = x - x.mean(-1, keepdim=True)
    if same(out, _model_rms_norm(centred, w)):  # LayerNorm's centring: its output has unit RMS, and any scale
        raise Wrong("Your rms_norm subtracts each token's mean before it divides (LayerNorm's centring). RMSNorm does "
                    "not centre: it divides x itself by its RMS. The unit-RMS and scale checks passed because a "
                    "centred vector divided by its own RMS passes them too.")
    # rtol 1e-5: loose enough for eps in the wrong place (off by ~1e-6 here), caught at tiny inputs next
    expect_close("rms_norm(x, weight)", out, _model_rms_norm(x, w), atol=1e-8, rtol=1e-5,
                 hint="Shape, scale and unit RMS are right, so re-check the gain: weight holds one factor per "
                      "channel, applied to the normalised vector; and that x itself is what is divided (no mean "
                      "subtracted).")
    if not student.in_child(_leaves_inputs, "rms_norm", x, w):
        raise Wrong("rms_norm changed its input x (or weight) in place: in a model x is the residual stream, which "
                    "the block adds the layer's output to afterwards. Compute the result as a new tensor (an "
                    "in-place method ending in _, or an assignment into x, changes the caller's tensor).")
    called = student.in_child(_norms_called, x, w)
    if called:
        raise Wrong(f"rms_norm calls {called}, the function the checks compare with: the exercise is to write it "
                    "yourself, with tensor operations (see gap 1 of the statement).")


def _leaves_inputs(student, function, *inputs):
    """In the student's process: whether function(*inputs) left its inputs as they were."""
    kept = [t.clone() for t in inputs]
    getattr(student, function)(*inputs)
    return all(torch.equal(a, b) for a, b in zip(inputs, kept))


def _norms_called(student, x, w):
    """In the student's process: the name of PyTorch's own RMSNorm if rms_norm calls it (F.rms_norm, torch.rms_norm,
    nn.RMSNorm: a torch function mode sees each, however the student's file named it), else None."""
    from torch.overrides import TorchFunctionMode
    seen = []

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in (F.rms_norm, torch.rms_norm):
                seen.append(f"{'F' if func is F.rms_norm else 'torch'}.rms_norm")
            return func(*args, **(kwargs or {}))

    with Watch():
        student.rms_norm(x, w)
    return seen[0] if seen else None


def check_rms_norm_tiny_inputs(student):
    """trap: rms_norm still matches the model at tiny inputs (|x| ~ 1e-4: a mean square ~ 1e-8, below eps = 1e-6)"""
    x, w = _randn(3, 5, 16, seed=7, scale=1e-4), _gain(16, 8)
    out = student.rms_norm(x, w)
    want = _model_rms_norm(x, w)
    rms = _rms(x)
    if same(out, x / (rms + 1e-6) * w):
        raise Wrong("At tiny inputs your rms_norm divides by RMS + eps: your epsilon is added after the square "
                    "root, not where F.rms_norm (and Llama, Qwen) add it. At normal scales the two agree to "
                    "~1e-6, but where the mean square is near eps they differ by a factor of ~10 here.")
    if same(out, x / rms * w):
        raise Wrong("At tiny inputs your rms_norm still gives outputs of RMS ~1: eps is missing, is not the one "
                    "passed in, or sits where it does nothing at this scale (it belongs with the mean square, under "
                    "the root, as F.rms_norm has it). With it, a near-zero vector stays near zero instead of having "
                    "its noise blown up "                    "to unit size.")
    expect_close("rms_norm(1e-4-scale x, weight)", out, want, atol=1e-8, rtol=1e-5,
                 hint="Normal inputs pass but tiny ones do not: re-check where eps enters (F.rms_norm's convention) "
                      "and that it is the eps argument (default 1e-6).")
    out = student.rms_norm(x, w, eps=1e-7)  # another eps than the default: the argument must be the one used
    if not same(out, _model_rms_norm(x, w, eps=1e-7), tol=1e-5):
        raise Wrong("rms_norm(x, weight, eps=1e-7) gives what eps=1e-6 gives, or something else: use the eps "
                    "argument passed in, not a fixed value.")


def check_rms_norm_float64_precision(student):
    """rms_norm computes in x's precision: in float64 it matches F.rms_norm to ~1e-15, not float32's ~1e-7"""
    x, w = _randn(3, 5, 16, seed=9), _gain(16, 10)
    out = student.rms_norm(x, w)
    want = _model_rms_norm(x, w)
    # the earlier comparisons allow rtol 1e-5 (for the eps trap's sake); eps is right by now, so this can be tight
    if not torch.allclose(out, want, atol=1e-12, rtol=1e-10):
        worst = ((out - want).abs() / want.abs().clamp_min(1e-12)).max().item()
        raise Wrong(f"in float64, rms_norm differs from F.rms_norm by up to {worst:.1g} (relative): float32's "
                    "precision, not float64's. Does a step compute in float32 (x.float(), say), "
                    "with the float64 gain bringing the result back to float64? Keep x's dtype throughout.")


# ----------------------------------------------------------------------------------------------------------------
# gated_norm

def check_gated_norm_shape(student):
    """gated_norm returns x's shape and dtype (float32 and float64)"""
    for dtype in (torch.float32, torch.float64):
        x, w, w_down, w_up = (t.to(dtype) for t in _gated_inputs(seed=10))
        out = student.gated_norm(x, w, w_down, w_up)
        expect_shape("gated_norm(x, weight, w_down, w_up)", out, x.shape,
                     "w_down is (r, C) and w_up (C, r), stored like nn.Linear weights (out x in): the bottleneck "
                     "goes from C channels to r and back to C, one gate score per channel.")
        if out.dtype != x.dtype:
            raise Wrong(f"gated_norm turned {dtype} inputs into {out.dtype}: keep x's dtype (is a step converting "
                        "to another?).")


def check_gated_norm_never_larger(student):
    """the gate only shrinks: |gated_norm(x)| <= |RMSNorm(x)| with the same sign, channel by channel (scores in (0, 1))"""
    x, w, w_down, w_up = _gated_inputs(seed=11, scale=3.0)  # tokens of RMS ~3, so x and its normalised y differ
    out = student.gated_norm(x, w, w_down, w_up)
    expect_shape("gated_norm(x, weight, w_down, w_up)", out, x.shape)
    y = _model_rms_norm(x, w)
    ok = (out * y >= -1e-12) & (out.abs() <= y.abs() + 1e-9)
    if ok.all():
        return
    if same(out, x * _gate(y, w_down, w_up)) or same(out, x * _gate(x, w_down, w_up)):
        raise Wrong("Your output is x times the gate: the gate must rescale y = rms_norm(x, weight), the normalised "
                    "vector, not the input x. GatedNorm is a norm followed by a rescaling of its output; gating the "
                    "raw x would undo the normalisation.")
    y1 = _model_rms_norm(x, torch.ones_like(w))
    if same(out, y1 * _gate(y1, w_down, w_up)):
        raise Wrong("Your output is RMSNorm without its gain, gated: y is rms_norm(x, weight), the gain included, "
                    "and the gate reads that same y.")
    raise Wrong(f"{int((~ok).sum())} of {ok.numel()} outputs are larger in magnitude than RMSNorm's output, or of the "
                "other sign: the gate's scores must lie in (0, 1) and multiply y. Re-check the gate's outer "
                "activation (GN's definition) and that the scores multiply y rather than add to it.")


def check_gated_norm_bottleneck_silu(student):
    """trap: the bottleneck's activation is SiLU (not ReLU, sigmoid, GELU or none)"""
    x, w, w_down, w_up = _gated_inputs(seed=12)
    out = student.gated_norm(x, w, w_down, w_up)
    y = _model_rms_norm(x, w)
    if same(out, y * _gate(y, w_down, w_up)):
        return
    for name, act in (("ReLU", F.relu), ("sigmoid", torch.sigmoid), ("GELU", F.gelu), ("no activation", lambda t: t)):
        if same(out, y * _gate(y, w_down, w_up, act)):
            raise Wrong(f"Your bottleneck uses {name} between W_down and W_up; GatedNorm uses SiLU there (GN's "
                        "definition in README.md). SiLU is smooth and lets small negative values through, unlike "
                        "ReLU; the outer sigmoid is the gate itself.")


def check_gated_norm_vs_model(student):
    """gated_norm matches model.GatedNorm with the same weights, float64"""
    import model
    C, r = 16, 4
    x, w, w_down, w_up = _gated_inputs(seed=13, C=C, r=r, scale=2.0)
    norm = model.GatedNorm(C, r).double()
    with torch.no_grad():
        norm.norm.weight.copy_(w)
        norm.down.weight.copy_(w_down)
        norm.up.weight.copy_(w_up)
        want = norm(x)
    out = student.gated_norm(x, w, w_down, w_up)
    expect_close("gated_norm(x, weight, w_down, w_up)", out, want, atol=1e-8, rtol=1e-5,
                 hint="Re-check gap 2 against GN's definition: the gate reads the normalised y (gain included), "
                      "applies W_down before W_up (each stored out x in, as nn.Linear's weight), and its scores "
                      "multiply that same y.")
    xs = x * 1e-4  # tiny inputs, where eps shows: gated_norm must hand its eps on to rms_norm
    norm.norm.eps = 1e-7
    with torch.no_grad():
        want = norm(xs)
    expect_close("gated_norm(1e-4-scale x, weight, w_down, w_up, eps=1e-7)", student.gated_norm(xs, w, w_down, w_up,
                 eps=1e-7), want, atol=1e-8, rtol=1e-5, hint="The default eps passes: does gated_norm pass its eps "
                 "argument on to rms_norm?")
    if not student.in_child(_leaves_inputs, "gated_norm", x, w, w_down, w_up):
        raise Wrong("gated_norm changed one of its inputs (x or a weight) in place: in a model x is the residual "
                    "stream, which the block adds the layer's output to afterwards. Compute the result as a new "
                    "tensor.")

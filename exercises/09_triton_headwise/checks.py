"""Checks of exercise 09 (a headwise gate in the Triton kernel), in order: a headwise gate is accepted and gives
the right shape; the elementwise gate and no gate still match the oracle (nothing broken); very negative headwise
logits zero whole rows and very positive ones leave the attention as it is (the sigmoid); headwise numbers against
kernels.attention_torch at a T that is a multiple of the block and at a ragged T; a headwise gate runs the
kernel's GATE == 2 branch (by recording the launch's GATE), and a float16 one gets its sigmoid in fp32; headwise
gates in other layouts (a transposed view, as model.py passes it, and one expanded over heads); the gate view read
in place, not copied, and no logit loaded past its rows at a ragged T (under the interpreter, by recording the
addresses the kernel loads; on a GPU, from the source as a last resort).

Without a GPU the kernel runs in Triton's interpreter (check.py sets TRITON_INTERPRET=1): small shapes only.
Every headwise gate here is a view into a larger buffer, so that a read at the wrong place lands in memory the
check owns (wrong numbers, named below) rather than outside it."""

import ast
import os
import re
import textwrap

import torch

import check
from check import Wrong, expect_close, expect_shape, same

PAD = 1024  # extra elements after every gate buffer (see above)
TOL = dict(atol=1e-4, rtol=1e-4)  # fp32 in, fp32 accumulation; the oracle is PyTorch's SDPA in fp32


def _device():
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    return "cuda" if torch.cuda.is_available() and not interpreted else "cpu"


def _qkv(T, D, seed, B=1, H=2):
    gen = check.generator(seed)
    return [torch.randn(B, H, T, D, generator=gen).to(_device()) for _ in range(3)]


def _headwise_gate(B, H, T, seed, layout="contiguous", fill=None):
    """Headwise logits (B, H, T, 1) as a view into a buffer PAD elements longer than needed. layout: 'contiguous';
    'transposed' (a (B, T, H, 1) tensor seen as (B, H, T, 1), as model.py's g.transpose(1, 2)); 'expanded' (one
    logit per token, shared by the heads: head stride 0)."""
    n = B * T if layout == "expanded" else B * H * T
    gen = check.generator(seed)
    buf = torch.full((n + PAD,), float(fill)) if fill is not None else 2 * torch.randn(n + PAD, generator=gen)
    buf = buf.to(_device())
    if layout == "contiguous":
        return buf[:n].view(B, H, T, 1)
    if layout == "transposed":
        return buf[:n].view(B, T, H, 1).transpose(1, 2)
    return buf[:n].view(B, T, 1, 1).transpose(1, 2).expand(B, H, T, 1)


def _oracle(q, k, v, gate=None):
    import kernels
    return kernels.attention_torch(q.float(), k.float(), v.float(), None if gate is None else gate.float(), causal=True)


def _attention(student, q, k, v, gate):
    """student.attention, with an unfilled gap 2 reported as such (inside a kernel, its NotImplementedError
    arrives wrapped by Triton's interpreter, or as a compilation error on a GPU)."""
    try:
        return student.attention(q, k, v, gate)
    except NotImplementedError:
        raise
    except Exception as e:
        found = re.search(r"09-gap2[^'\"\n]*", str(e))
        if found:
            raise NotImplementedError(found.group(0)) from None
        raise


def check_headwise_shape(student):
    """a headwise gate (B, H, T, 1) is accepted; the output is (B, H, T, D), float32, finite"""
    q, k, v = _qkv(48, 16, seed=0)
    y = _attention(student, q, k, v, _headwise_gate(1, 2, 48, seed=1))
    expect_shape("attention(q, k, v, headwise gate)", y, q.shape,
                 "The gate scales the output; it does not change its shape: one logit per row, broadcast over D.")
    if y.dtype != torch.float32:
        raise Wrong(f"the output is {y.dtype} for float32 inputs: store o cast to Y's element type.")
    if not torch.isfinite(y).all():
        raise Wrong(f"the output has {int((~torch.isfinite(y)).sum())} NaN or inf values: is the headwise load "
                    "masked, with a finite value for the rows it skips, and cast to fp32 before the sigmoid? And "
                    "does it read each row's own logit, inside the gate (the strides the launcher passes, in the "
                    "kernel's order b, h, t, d, and the pointers the load adds up)?")


def check_elementwise_still_matches(student):
    """the elementwise gate (B, H, T, D) and no gate still match kernels.attention_torch (nothing broken)"""
    q, k, v = _qkv(64, 16, seed=2)
    gen = check.generator(3)
    gate = torch.randn(1, 2, 64, 16, generator=gen).to(_device())
    expect_close("attention(q, k, v, elementwise gate)", _attention(student, q, k, v, gate), _oracle(q, k, v, gate),
                 **TOL, hint="The elementwise path worked in the starter: did an edit change its branch in the "
                             "launcher or the GATE == 1 branch of the kernel?")
    expect_close("attention(q, k, v) with no gate", _attention(student, q, k, v, None), _oracle(q, k, v), **TOL,
                 hint="With gate=None the kernel must run with GATE=0 and read no gate at all.")


def check_headwise_zeroes_rows(student):
    """headwise logits of -30 zero every row (sigmoid -> 0); logits of +30 leave the attention unchanged (sigmoid -> 1)"""
    q, k, v = _qkv(32, 16, seed=4)
    y = _attention(student, q, k, v, _headwise_gate(1, 2, 32, seed=5, fill=-30.0))
    expect_shape("attention(q, k, v, headwise gate)", y, q.shape)
    if not (y.abs() < 1e-6).all():
        scaled = same(y, -30 * _oracle(q, k, v), tol=1e-3)
        if same(y, _oracle(q, k, v), 1e-4):
            opened = _attention(student, q, k, v, _headwise_gate(1, 2, 32, seed=5, fill=30.0))
            if isinstance(opened, torch.Tensor) and (opened.abs() < 1e-6).all():
                raise Wrong("logits of -30 leave the attention as it is and logits of +30 zero it: your score is "
                            "1 - sigmoid(logit), the gate the wrong way round. A large logit opens the gate: the "
                            "score is sigmoid(logit) itself.")
        raise Wrong("with every headwise logit at -30 the output should be all zeros (sigmoid(-30) ~ 1e-13: every "
                    "head shut), and it is not" +
                    (": it is -30 times the attention, so the sigmoid is missing: each row is scaled by its raw "
                     "logit, not by the logit's sigmoid." if scaled else
                     ". Re-check that the GATE == 2 branch changes o, and that the launcher selects the headwise "
                     "mode for a (B, H, T, 1) gate."))
    y = _attention(student, q, k, v, _headwise_gate(1, 2, 32, seed=5, fill=30.0))
    expect_close("attention(q, k, v, headwise logits all +30)", y, _oracle(q, k, v), **TOL,
                 hint="sigmoid(+30) = 1 in float32: a fully open gate must leave the attention output as it is.")


def _read_as_elementwise(q, k, v, gate):
    """What a kernel computes that loads the headwise logits like elementwise ones (g_rows[:, None] + offs_d *
    g_stride_d, with g_stride_d = 1): output element (t, d) gets the logit stored d elements after row t's."""
    B, H, T, D = q.shape
    flat = torch.as_strided(gate, (gate.untyped_storage().nbytes() // gate.element_size(),), (1,), 0)  # + padding
    rows = (torch.arange(B * H, device=flat.device)[:, None, None] * T + torch.arange(T, device=flat.device)[None, :, None]
            + torch.arange(D, device=flat.device)[None, None, :])
    return _oracle(q, k, v) * torch.sigmoid(flat[rows].view(B, H, T, D))


def check_headwise_numbers(student):
    """headwise gate vs kernels.attention_torch: T = 64 (a multiple of the block) and T = 80 (a ragged last block)"""
    for T in (64, 80):
        q, k, v = _qkv(T, 32, seed=6 + T)
        gate = _headwise_gate(1, 2, T, seed=7 + T)
        y = _attention(student, q, k, v, gate)
        want = _oracle(q, k, v, gate)
        if same(y, want, 1e-4):
            continue
        expect_shape(f"attention(q, k, v, headwise gate), T={T}", y, q.shape)
        if same(y, _oracle(q, k, v), 1e-4):
            raise Wrong(f"T={T}: your output is the attention without the gate: the GATE == 2 branch does not "
                        "change o (or the launcher does not pass GATE=2 for a (B, H, T, 1) gate).")
        if same(y, _read_as_elementwise(q, k, v, gate), 1e-4):
            raise Wrong(f"T={T}: your kernel reads the headwise logits with the elementwise branch's addressing "
                        "(a (BLOCK_M, D) tile of pointers that walks the d stride): column d of row t gets the "
                        "logit stored d places after row t's, i.e. row t + d's. A headwise gate has one logit per "
                        "row, shared by the row's D channels: re-check the pointers the GATE == 2 branch loads "
                        "from, and that the launcher selects the headwise mode.")
        expect_close(f"attention(q, k, v, headwise gate), T={T}", y, want, **TOL,
                     hint="Re-check which logit each row of o is scaled with (g_rows points at each row's own) and "
                          "that the scale is its sigmoid." +
                          (" T=64 passes but the ragged T=80 does not: re-check the rows past T." if T == 80 else ""))


def _launches(student, seed=40, layout="contiguous"):
    """In the student's process: for every launch of flash_attention_fwd while attention runs on a headwise gate in
    this layout, its GATE (None where the launcher passed it otherwise than as GATE=...) and the gate strides it was
    given (the launch's 9th to 12th arguments, or its g_stride_* keywords); and the gate's own strides."""
    kernel, launched = student.flash_attention_fwd, []

    class Recorder:  # stands in for the kernel: kernel[grid](...) records GATE and the strides, then launches
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                strides = tuple(args[8:12]) if len(args) >= 12 else tuple(kwargs.get(f"g_stride_{a}") for a in "bhtd")
                launched.append((kwargs.get("GATE"), strides))
                return kernel[grid](*args, **kwargs)
            return launch

    q, k, v = _qkv(48, 16, seed=seed)
    gate = _headwise_gate(1, 2, 48, seed=seed + 1, layout=layout)
    student.flash_attention_fwd = Recorder()
    try:
        _attention(student, q, k, v, gate)
    finally:
        student.flash_attention_fwd = kernel
    return launched, tuple(gate.stride())


def check_headwise_runs_its_own_branch(student):
    """a headwise gate runs the kernel's GATE == 2 branch, not the elementwise one"""
    modes = [mode for mode, _ in student.in_child(_launches)[0]]
    if modes and all(mode == 1 for mode in modes):
        raise Wrong("a (B, H, T, 1) gate reaches the kernel as GATE=1, the elementwise branch (with a d stride of 0, "
                    "every column reads the row's one logit). The numbers come out right, but the exercise is the "
                    "GATE == 2 branch: the launcher passes GATE=2 for a headwise gate, and that branch loads one "
                    "logit per row. (README.md's last paragraph asks what the stride-0 way costs, once it passes.)")
    if modes != [2]:
        raise Wrong(f"for a headwise gate attention launched the kernel with GATE={modes} (as keyword arguments "
                    "of the launch, as the starter does): it should launch it once, with GATE=2.")


def check_headwise_half_precision_gate(student):
    """a float16 headwise gate (with float32 q, k, v): the sigmoid computed in fp32"""
    q, k, v = _qkv(40, 16, seed=42)
    gate = _headwise_gate(1, 2, 40, seed=43).half()
    try:
        y = _attention(student, q, k, v, gate)
    except Exception as e:
        if "Expected dtype" in str(e) and "fp32" in str(e):
            raise Wrong("with a float16 headwise gate the kernel fails in one of Triton's math functions "
                        "(tl.sigmoid, tl.exp, ...: they take fp32 or fp64 only): cast the loaded logits to fp32 "
                        "before the sigmoid, as the elementwise branch does.") from None
        raise
    expect_close("attention(q, k, v, float16 headwise gate)", y, _oracle(q, k, v, gate), **TOL,
                 hint="The float32 gates pass: compute the score from the logits cast to fp32.")


def check_headwise_strided_gate(student):
    """headwise gates in other layouts: a transposed view (as model.py passes it) and one expanded over heads"""
    for layout in ("transposed", "expanded"):
        q, k, v = _qkv(48, 16, seed=20)
        gate = _headwise_gate(1, 2, 48, seed=21, layout=layout)
        y, want = _attention(student, q, k, v, gate), _oracle(q, k, v, gate)
        hint = ""
        if not (y.shape == want.shape and torch.allclose(y, want, **TOL)):  # which side reads the layout wrongly
            launches, own = student.in_child(_launches, 20, layout)
            launched = [strides for _, strides in launches]
            hint = ("Contiguous headwise gates pass, and the launcher passes this gate's own strides "
                    f"{own}, so the kernel does not follow them: does the headwise load address each row through "
                    "the b, h and t strides it is given (g_rows), not through offsets worked out as if the gate "
                    "were contiguous?" if launched and all(s == own for s in launched) else
                    "Contiguous headwise gates pass, but " +
                    (f"the launcher passes the kernel the strides {launched[0]} for a gate whose strides are {own}"
                     if len(launched) == 1 else "this layout is read at the wrong places") +
                    ": pass the gate's own strides. Strides worked out from the shape are those of a contiguous "
                    "tensor; a transposed view or an expand() has others (model.py's fused path passes exactly such "
                    "views, with no copy).")
        expect_close(f"attention(q, k, v, {layout} headwise gate with strides {tuple(gate.stride())})", y, want,
                     **TOL, hint=hint)


def _gate_loads(student, T=40):
    """In the student's process: run the kernel on a transposed headwise gate (a view that is not contiguous) at a
    ragged T, recording the address of every element the kernel loads (mask on) -- through Triton's interpreter, or
    None on a GPU. Returns the gate's shape and strides, the loaded addresses inside the gate's buffer, and the
    addresses of the gate's elements (sorted)."""
    if _device() != "cpu":
        return None
    import numpy as np
    from triton.runtime import interpreter
    q, k, v = _qkv(T, 16, seed=30)
    gate = _headwise_gate(1, 2, T, seed=31, layout="transposed")
    loaded = []
    builder = interpreter.InterpreterBuilder
    original = builder.create_masked_load

    def recording(self, ptrs, mask, *args, **kwargs):
        addresses = np.asarray(ptrs.data).astype("uint64").reshape(-1)
        loaded.append(addresses[np.broadcast_to(mask.data, np.shape(ptrs.data)).reshape(-1).astype(bool)])
        return original(self, ptrs, mask, *args, **kwargs)

    builder.create_masked_load = recording
    try:
        _attention(student, q, k, v, gate)
    finally:
        builder.create_masked_load = original
    addresses = np.concatenate([a.reshape(-1).astype("uint64") for a in loaded]) if loaded else np.zeros(0, "uint64")
    start = gate.untyped_storage().data_ptr()
    in_buffer = addresses[(addresses >= start) & (addresses < start + gate.untyped_storage().nbytes())]
    b, h, t = torch.meshgrid(*(torch.arange(n) for n in gate.shape[:3]), indexing="ij")
    offsets = gate.storage_offset() + b * gate.stride(0) + h * gate.stride(1) + t * gate.stride(2)
    valid = sorted(set((start + gate.element_size() * offsets.reshape(-1)).tolist()))
    return tuple(gate.shape), tuple(gate.stride()), in_buffer, valid


def check_headwise_gate_not_copied(student):
    """a transposed headwise gate view is read in place: the kernel loads the caller's gate, not a copy"""
    run = student.in_child(_gate_loads)
    if run is None:  # on a GPU, without the interpreter's hook: the launcher's source, as a last resort
        if re.search(r"gate\s*\.\s*(contiguous|clone)\s*\(", student.source_of("attention")):
            raise Wrong("the launcher copies the gate (gate.contiguous() or .clone()): the statement asks for no "
                        "copy. The kernel can read the view itself, through its strides.")
        return
    _, stride, in_buffer, _ = run
    if len(in_buffer) == 0:
        raise Wrong(f"the kernel never loaded from the headwise gate passed in (a transposed view, strides "
                    f"{stride}): the launcher hands it a copy, e.g. gate.contiguous(). The statement "
                    "asks for no copy (it costs a pass over the logits): the kernel can read the view itself, "
                    "through its strides.")


def _unmasked_headwise_loads(source):
    """How many tl.load calls inside an `if GATE == 2:` block of the kernel's source have no mask (neither mask=
    nor a second positional argument, tl.load's mask), however the call is laid out over lines."""
    count = 0
    for node in ast.walk(ast.parse(textwrap.dedent(source))):
        if isinstance(node, ast.If) and re.fullmatch(r"GATE\s*==\s*2", ast.unparse(node.test).strip()):
            for call in (n for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.Call)):
                if ast.unparse(call.func) == "tl.load" and len(call.args) < 2 and not any(
                        kw.arg == "mask" for kw in call.keywords):
                    count += 1
    return count


def check_headwise_load_masked(student):
    """at a ragged T, the headwise load reads no logit past the gate's rows (the load is masked)"""
    run = student.in_child(_gate_loads)
    if run is None:  # on a GPU, without the interpreter's hook: the GATE == 2 branch's source, as a last resort
        if _unmasked_headwise_loads(student.source_of("flash_attention_fwd")):
            raise Wrong("the headwise tl.load has no mask: at a ragged T the last block's rows past T read past "
                        "the gate's end. Guard it as the kernel's other loads are guarded.")
        return
    shape, _, in_buffer, valid = run
    valid = set(valid)
    outside = [a for a in in_buffer.tolist() if a not in valid]
    if outside:
        raise Wrong(f"at T={shape[2]} (not a multiple of BLOCK_M) the kernel loaded {len(outside)} gate "
                    "element(s) past the gate's rows: the headwise tl.load is not masked. The numbers still come "
                    "out right (those rows are never stored), but on a GPU it reads past the tensor's end, which "
                    "can fault. Guard it as the kernel's other loads are guarded (the elementwise branch's too).")

"""
Tests for kernels.py: the fused Triton gated attention against a float64 reference, and the model on both
backends. Without a GPU the kernels run in Triton's interpreter (conftest.py sets TRITON_INTERPRET=1).

    python -m pytest -q tests/test_kernels.py
"""

import importlib.util
import io
import math
import os
import re
import subprocess
import sys
import tokenize

import pytest
import torch

import kernels
from kernels import first_token_attention, gated_attention
from model import GPT, GPTConfig

CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"
needs_triton = pytest.mark.skipif(not (kernels.HAS_TRITON and (CUDA or os.environ.get("TRITON_INTERPRET") == "1")),
                                  reason="needs Triton with CUDA, or TRITON_INTERPRET=1")
needs_cuda = pytest.mark.skipif(not CUDA, reason="the bf16 and fp16 sweep needs a GPU (a CPU runs bf16 as fp32 copies)")

# fp32 kernel vs float64 reference. The interpreter's tl.dot is an fp32 numpy matmul and the GPU path uses
# input_precision='ieee' for fp32, so the only error is fp32 rounding over sums of <= T*D terms: measured
# ~3e-7 at T=130; 1e-5 leaves 30x headroom yet catches any masking or indexing mistake (those give > 1e-2).
TOL = 1e-5


def reference(q, k, v, gate=None, causal=True, scale=None, mask=None):
    """float64, explicit softmax, k/v repeated for GQA; mask: the keys each query sees (True), instead of causal."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = (q @ k.transpose(-2, -1)) * (scale if scale is not None else q.size(-1) ** -0.5)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    elif causal:
        T = q.size(2)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    y = s.softmax(-1) @ v
    return y if gate is None else y * torch.sigmoid(gate.double())


def rel_err(a, b):
    """||a - b|| / ||b||; the denominator is clamped at 1 for an all-zero reference (dq, dk when T=1)."""
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1.0)).item()


def leaf(*shape, gen, dtype=torch.float32, transposed=True):
    """A random leaf tensor; transposed=True gives a (B, H, T, D) view of a (B, T, H, D) buffer, as model.py
    passes q, k, v and the gate (the kernels must honour the strides)."""
    if transposed:
        x = torch.randn(shape[0], shape[2], shape[1], shape[3], generator=gen).transpose(1, 2)
    else:
        x = torch.randn(*shape, generator=gen)
    return x.to(device=DEV, dtype=dtype).requires_grad_()


def make_inputs(B, H, Hkv, T, D, gate, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (leaf(B, h, T, D, gen=gen, dtype=dtype) for h in (H, Hkv, Hkv))
    g = None if gate is None else leaf(B, H, T, D if gate == "elementwise" else 1, gen=gen, dtype=dtype,
                                       transposed=gate == "elementwise")
    dy = torch.randn(B, H, T, D, generator=gen).to(device=DEV, dtype=dtype)
    return q, k, v, g, dy


def outputs_and_grads(fn, q, k, v, g, dy):
    """y and the gradients of sum(y * dy) with respect to every input."""
    inputs = [t for t in (q, k, v, g) if t is not None]
    y = fn(q, k, v, g)
    return [y, *torch.autograd.grad(y, inputs, dy)]


def assert_close_to_reference(q, k, v, g, dy, causal, tol=TOL, scale=None, backend="triton"):
    got = outputs_and_grads(lambda *a: gated_attention(*a, causal=causal, scale=scale, backend=backend), q, k, v, g, dy)
    ref = outputs_and_grads(lambda *a: reference(*a, causal=causal, scale=scale), q, k, v, g, dy)
    names = ["y", "dq", "dk", "dv", "dgate"]
    for name, a, b in zip(names, got, ref):
        assert a.shape == b.shape and a.dtype == q.dtype, name
        assert torch.isfinite(a).all(), f"{name} has non-finite values"
        err = rel_err(a, b)
        assert err < tol, f"{name}: relative error {err:.2e} >= {tol:.0e}"
    return got


# ----------------------------------------------------------------------------
# the fused kernel against float64

# every head layout and D = 32, 64 at T = 1 and 37 (less than a block); T = 130 spans three query blocks with a
# ragged last one (interpreter blocks are 64 x 32, so the causal diagonal stage takes several key blocks), with 2
# query heads per KV head and D = 32 (a GPU adds 64): the blocks depend on neither, each T = 130 case costs ~5 s in
# the interpreter, and test_each_config_alone_matches_reference runs every autotuner config on such a T
SHAPES = [(T, H, Hkv, D) for T in (1, 37) for H, Hkv in ((4, 4), (4, 2), (4, 1)) for D in (32, 64)] + \
    [(130, 4, 2, D) for D in ((32, 64) if CUDA else (32,))]


@needs_triton
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("gate", [None, "elementwise", "headwise"])
@pytest.mark.parametrize("T,H,Hkv,D", SHAPES)
def test_matches_float64_reference(T, H, Hkv, D, gate, causal):
    assert_close_to_reference(*make_inputs(2, H, Hkv, T, D, gate), causal=causal)


@needs_triton
def test_head_dim_128_and_custom_scale():
    q, k, v, g, dy = make_inputs(1, 2, 1, 37, 128, "elementwise", seed=1)
    assert_close_to_reference(q, k, v, g, dy, causal=True, scale=0.3)


@needs_triton
@pytest.mark.parametrize("backward", kernels.BACKWARDS)
def test_the_largest_head_dim(backward, choose_backward):
    """D = 256, the largest the kernel takes (Qwen3-Next's heads): the biggest tiles, in registers and in shared
    memory (on a GPU, the tier's one config per kernel must fit them), through both ways of getting dQ."""
    choose_backward(backward)
    assert_close_to_reference(*make_inputs(1, 2, 1, 37, 256, "elementwise", seed=4), causal=True)


@needs_triton
@pytest.mark.parametrize("causal", [True, False])
def test_a_length_that_fills_whole_blocks(causal):
    """T a multiple of every block (64 here: one query block of the interpreter's 64 x 32, two key blocks), as a
    training window's 1024 is on a GPU: no ragged block, so every masked load and the diagonal meet no edge."""
    assert_close_to_reference(*make_inputs(1, 2, 1, 64, 16, "elementwise", seed=2), causal=causal)


@needs_triton
def test_bf16_on_a_cpu_is_computed_in_fp32():
    """Triton's interpreter computes tl.dot wrongly on bf16 tiles (off by orders of magnitude): on a CPU the kernels
    take fp32 copies, and the result and gradients come back in bf16, within bf16's rounding of the float64 answer
    on the same bf16 values. (On a GPU test_low_precision_cuda covers bf16.)"""
    if CUDA:
        pytest.skip("the interpreter's bf16: a CPU's")
    q, k, v, g, dy = make_inputs(1, 4, 2, 20, 32, "elementwise", dtype=torch.bfloat16, seed=3)
    assert_close_to_reference(q, k, v, g, dy, causal=True, tol=1e-2)  # bf16's unit roundoff: 2**-8 = 4e-3


@pytest.fixture
def choose_configs():
    """kernels.choose_configs for one test; the session's choice (kernels.DEFAULT_CONFIGS) comes back after it."""
    yield kernels.choose_configs
    kernels.choose_configs(kernels.DEFAULT_CONFIGS)


@pytest.fixture
def choose_backward():
    """kernels.choose_backward for one test; the session's choice (kernels.DEFAULT_BACKWARD) comes back after it."""
    yield kernels.choose_backward
    kernels.choose_backward(kernels.DEFAULT_BACKWARD)


# The atomic dQ (FlashAttention-2's one pass) against float64: several key blocks and the query heads of a GQA group
# add to the same dQ rows, with every gate and both masks; T = 1 has a single query row, T = 37 one partial block.
ATOMIC_SHAPES = [(1, 4, 2, 32), (37, 4, 1, 32), (130, 4, 2, 32)] + ([(130, 4, 2, 64), (300, 4, 4, 128)] if CUDA else [])


@needs_triton
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("gate", [None, "elementwise", "headwise"])
@pytest.mark.parametrize("T,H,Hkv,D", ATOMIC_SHAPES)
def test_atomic_dq_matches_float64_reference(T, H, Hkv, D, gate, causal, choose_backward, monkeypatch):
    monkeypatch.setattr(kernels, "POISON_OUTPUTS", True)  # the fp32 sum starts at zero however dq's buffer starts
    choose_backward("atomic")
    assert_close_to_reference(*make_inputs(2, H, Hkv, T, D, gate, seed=T), causal=causal)


@needs_triton
@pytest.mark.parametrize("backward", kernels.BACKWARDS)
def test_each_backward_mode_launches_its_own_kernels(backward, choose_backward, monkeypatch):
    """'atomic' never runs _bwd_dq and 'recompute' never the atomic pass: a stub that raises stands in for the
    kernel the mode must not launch (so the atomic tests above really test the atomic pass)."""
    class NotLaunched:
        def __getitem__(self, grid):
            raise AssertionError(f"backward={backward!r} launched a kernel of the other mode")
    monkeypatch.setattr(kernels, "_bwd_dq" if backward == "atomic" else "_bwd_dkdv_dq", NotLaunched())
    choose_backward(backward)
    assert_close_to_reference(*make_inputs(1, 4, 2, 37, 32, "elementwise"), causal=True)


@needs_triton
@pytest.mark.parametrize("backward", kernels.BACKWARDS)
def test_every_launch_names_fused_multiply_adds(backward, choose_backward, monkeypatch):
    """Each kernel is compiled with enable_fp_fusion=True given, not left to the installed Triton's default (which
    Triton 3.9 warns about at the first compile, and says 3.10 will turn off): a spy on each JIT function's run
    records what every launch, the autotuner's trial runs included, asked for."""
    asked = {}
    for fn in {kernels._attn_fwd.fn, kernels._bwd_pre, kernels._bwd_dkdv.fn, kernels._bwd_dq.fn}:
        def spy(*args, _run=fn.run, _name=fn.fn.__name__, **kwargs):
            asked.setdefault(_name, []).append(kwargs.get("enable_fp_fusion"))
            return _run(*args, **kwargs)
        monkeypatch.setattr(fn, "run", spy)
    choose_backward(backward)
    assert_close_to_reference(*make_inputs(1, 4, 2, 37, 32, "headwise"), causal=True)
    launched = {"_attn_fwd", "_bwd_pre", "_dkdv_kernel"} | ({"_bwd_dq"} if backward == "recompute" else set())
    assert set(asked) == launched, asked
    assert all(fusion == [True] * len(fusion) for fusion in asked.values()), asked


@needs_triton
@pytest.mark.parametrize("backward", kernels.BACKWARDS)
@pytest.mark.parametrize("causal", [True, False])
# the interpreter's numpy warns about the overflow in the rows of keys past T, which are never stored
@pytest.mark.filterwarnings("ignore:overflow encountered in exp2", "ignore:invalid value encountered in matmul")
def test_scores_far_below_zero_with_a_ragged_last_key_block(backward, causal, choose_backward):
    """Every score about -125 (each query points away from every key) and T = 40, less than a key block: the keys
    past T are loaded as zeros, so they score 0, far above the row's log-sum-exp, and exp2(0 - lse) overflows.
    Their dK and dV rows are never stored, but the atomic dQ sums over them: their P must be zeroed first, or
    0 * inf makes NaN."""
    choose_backward(backward)
    gen = torch.Generator().manual_seed(9)
    B, H, T, D = 1, 2, 40, 16
    direction = torch.randn(D, generator=gen)
    direction = direction / direction.norm()
    k = (direction + 0.05 * torch.randn(B, H, T, D, generator=gen)) * 4
    q = -(direction + 0.05 * torch.randn(B, H, T, D, generator=gen)) * 160
    scores = q @ k.transpose(-2, -1) * D ** -0.5
    assert scores.max() < -100
    q, k, v = (t.to(DEV).requires_grad_() for t in (q, k, torch.randn(B, H, T, D, generator=gen)))
    assert_close_to_reference(q, k, v, None, torch.randn(B, H, T, D, generator=gen).to(DEV), causal=causal, tol=1e-4)


@needs_triton
@pytest.mark.parametrize("backward", kernels.BACKWARDS)
def test_contiguous_bhtd_inputs(backward, choose_backward):
    """q, k, v, gate and dY laid out (B, H, T, D) (the other tests pass (B, T, H, D) views, as model.py does): each
    kernel reads every tensor, and writes dQ (the atomic fp32 sum included), through its own strides."""
    choose_backward(backward)
    gen = torch.Generator().manual_seed(10)
    q, k, v, g = (leaf(2, h, 45, 32, gen=gen, transposed=False) for h in (4, 2, 2, 4))
    assert q.is_contiguous() and g.is_contiguous()
    assert_close_to_reference(q, k, v, g, torch.randn(2, 4, 45, 32, generator=gen).to(DEV), causal=True)


@needs_triton
@pytest.mark.parametrize("backward", kernels.BACKWARDS)
def test_inputs_with_a_head_dim_stride_other_than_one(backward, choose_backward):
    """Every input, dY included, a view whose last dim has stride 2 (every other channel of a wider buffer): the other
    tests' inputs all have head-dim stride 1, so a kernel that ignored sqd, skd, svd, sgd or sdyd would pass them."""
    choose_backward(backward)
    gen = torch.Generator().manual_seed(12)
    wide = lambda h, d=32: torch.randn(2, 45, h, 2 * d, generator=gen).transpose(1, 2)[..., ::2]  # noqa: E731
    q, k, v, g = (wide(h).to(DEV).requires_grad_() for h in (4, 2, 2, 4))
    assert q.stride(3) == g.stride(3) == 2
    assert_close_to_reference(q, k, v, g, wide(4).to(DEV), causal=True)


def zeros_of_fp16(n, tmp_path):
    """n zeros of fp16 on DEV, for offsets past 2^31: on a CPU, the mapping of a sparse file, of which only the
    elements written take memory or disk."""
    if CUDA:
        return torch.zeros(n, dtype=torch.float16, device=DEV)
    with open(tmp_path / "sparse.bin", "wb") as f:
        f.truncate(2 * n)
    return torch.from_file(str(tmp_path / "sparse.bin"), shared=True, size=n, dtype=torch.float16)


@needs_triton
@pytest.mark.parametrize("gate,backward", [("elementwise", "recompute"), ("headwise", "atomic")])
def test_offsets_of_2_to_the_31_elements_and_more(gate, backward, choose_backward, tmp_path):
    """Inside one batch entry an element's offset passes 2^31 once T * H * D does (a 512k-token window with
    H * D = 4096); computed in int32 it wraps, and the kernels read another row. Here q, k, v, the gate and dY have
    rows 2^26 elements apart, so that row 32 starts 2^31 elements in, both within a tile and where a loop steps to a
    block at 32 (interpreter blocks: 64 x 32): one buffer of 8 GiB of fp16 (on a CPU, the mapping of a sparse file,
    of which only the rows written take memory or disk); a wrapped row reads its zeros."""
    choose_backward(backward)
    T, D, S, N = 33, 16, 2**26, 2**32 + 6 * 64
    buffer = zeros_of_fp16(N, tmp_path)
    gen = torch.Generator().manual_seed(13)

    def rows_far_apart(i, last):  # the i-th tensor: (1, 1, T, last), its rows S apart, from element 2^31 + 64 i on
        x = buffer[2**31 + 64 * i:].as_strided((1, 1, T, last), (0, 0, S, 1))
        x.copy_(torch.randn(1, 1, T, last, generator=gen).half())
        return x

    q, k, v = (rows_far_apart(i, D).requires_grad_() for i in range(3))
    g = rows_far_apart(3, D if gate == "elementwise" else 1).requires_grad_()
    assert q.stride(2) == S and q.storage_offset() + 32 * S == 2**32  # row 32: 2^31 elements past q's first
    assert_close_to_reference(q, k, v, g, rows_far_apart(4, D), causal=True, tol=1e-2)  # fp16's rounding: ~1e-3
    del buffer, q, k, v, g


@needs_triton
@pytest.mark.parametrize("backward", kernels.BACKWARDS)
def test_a_gate_whose_head_dim_stride_passes_2_to_the_31_over_its_channels(backward, choose_backward, tmp_path):
    """An elementwise gate whose channels lie S elements apart, so that channel 15's offset, 15 * S, is 2^31 + 7:
    the gate's channel offset must be int64 too (in int32 it wraps, and channel 15 reads another element, set
    to -20 here). One 8.6 GB buffer of fp16 (on a CPU, the mapping of a sparse file)."""
    choose_backward(backward)
    T, D = 5, 16
    S, base = -(-2**31 // (D - 1)), 2**31 + 64
    N = base + (D - 1) * S + 2 * T
    buffer = zeros_of_fp16(N, tmp_path)
    gen = torch.Generator().manual_seed(14)
    g = buffer[base:].as_strided((1, 1, T, D), (0, 0, 1, S))
    g.copy_(torch.randn(1, 1, T, D, generator=gen).half())
    wrapped = base + (D - 1) * S - 2**32  # where an int32 offset of channel 15 lands
    buffer[wrapped:wrapped + T] = -20.0
    q, k, v, dy = (torch.randn(1, 1, T, D, generator=gen).half().to(DEV) for _ in range(4))
    assert_close_to_reference(q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), g.requires_grad_(), dy,
                              causal=True, tol=1e-2)
    del buffer, g


@needs_triton
def test_atomic_dq_in_half_precision_is_copied_back(choose_backward, monkeypatch):
    """fp16 inputs (which the interpreter runs; its bf16 is not usable): the atomic pass sums dQ in an fp32 buffer
    of its own, then copies it into dq's fp16 buffer, which starts as NaN here. It must match the recompute mode
    within fp16 rounding."""
    monkeypatch.setattr(kernels, "POISON_OUTPUTS", True)
    inputs = make_inputs(1, 4, 2, 70, 32, "headwise", dtype=torch.float16, seed=11)
    runs = {}
    for backward in kernels.BACKWARDS:
        choose_backward(backward)
        runs[backward] = outputs_and_grads(lambda *a: gated_attention(*a, backend="triton"), *inputs)
    ref = outputs_and_grads(lambda *a: reference(*a), *inputs)
    for name, a, b, c in zip(["y", "dq", "dk", "dv", "dgate"], runs["atomic"], runs["recompute"], ref):
        assert a.dtype == torch.float16 and torch.isfinite(a).all(), name
        assert rel_err(a, c) < max(2 * rel_err(b, c), 1e-2), name


@pytest.mark.parametrize("backend", ["torch", pytest.param("triton", marks=needs_triton)])
def test_a_gate_in_another_dtype_gives_qs_dtype(backend):
    """fp16 q, k, v with an fp32 gate: y in q's dtype on both paths (the kernel stores Y in q's dtype; PyTorch would
    promote y * sigmoid(gate) to fp32), the gate's gradient in the gate's dtype, both near float64's answer."""
    q, k, v, g, dy = make_inputs(1, 4, 2, 20, 32, "headwise", dtype=torch.float16, seed=5)
    g = g.detach().float().requires_grad_()
    got = outputs_and_grads(lambda *a: gated_attention(*a, backend=backend), q, k, v, g, dy)
    ref = outputs_and_grads(reference, q, k, v, g, dy)
    assert [t.dtype for t in got] == [torch.float16] * 4 + [torch.float32]
    for name, a, b in zip(["y", "dq", "dk", "dv", "dgate"], got, ref):
        assert rel_err(a, b) < 1e-2, name


def test_choose_backward_names_the_choices(choose_backward):
    with pytest.raises(ValueError, match="GATED_ATTENTION_BACKWARD.*recompute, atomic"):
        choose_backward("fused")
    choose_backward("atomic")
    assert kernels.BACKWARD == "atomic"


# A ragged three-block T with two query heads per kv head. The interpreter takes one case per config (larger
# blocks are no slower there, they are just fewer programs); a GPU takes every gate, both masks, D = 64 and 128.
CONFIG_CASES = ([(150, D, gate, causal) for D in (64, 128) for gate in (None, "elementwise", "headwise")
                 for causal in (True, False)] if CUDA else [(150, 32, "elementwise", True)])


@needs_triton
@pytest.mark.parametrize("backward", kernels.BACKWARDS)
@pytest.mark.parametrize("row", range(len(kernels._FWD_ROWS) if kernels.HAS_TRITON else 1))
def test_each_config_alone_matches_reference(row, backward, choose_configs, choose_backward):
    """Every row of the autotuner's lists, run alone: any of them may be the one it picks on some GPU. A row too
    large for the GPU at some D (fp32 tiles at D=128) is one the autotuner skips too; it must fit at D=64."""
    from triton.runtime.errors import OutOfResources, PTXASError
    choose_configs(str(row))
    choose_backward(backward)
    for T, D, gate, causal in CONFIG_CASES:
        try:
            assert_close_to_reference(*make_inputs(1, 4, 2, T, D, gate, seed=row), causal=causal)
        except (OutOfResources, PTXASError):
            if D < 128:
                raise


@needs_triton
@pytest.mark.parametrize("backward", kernels.BACKWARDS)
def test_autotuned_first_call_matches_reference(backward, choose_configs, choose_backward):
    """The first call for a key benchmarks every config on the call's own buffers, then runs the fastest; that
    call's answers must be right (on an H100 they were not, 2026-11-22) and the same as the next call's (the same
    config then): bit for bit, except the atomic dQ on a GPU, whose adds come in a varying order. The atomic
    dK/dV pass adds to dQ in every trial run, so it is right only if the autotuner zeroes dQ before each."""
    choose_configs("autotune")
    choose_backward(backward)
    assert len(kernels._attn_fwd.configs) > 1
    cases = [(1, 64, None), (37, 64, "elementwise"), (300, 128, "headwise")] if CUDA else [(77, 32, "elementwise")]
    for T, D, gate in cases:
        inputs = make_inputs(1, 4, 2, T, D, gate, seed=T)
        first = assert_close_to_reference(*inputs, causal=True)
        chosen = {name: k.best_config.kwargs for name, k in (("fwd", kernels._attn_fwd), ("dkdv", kernels._bwd_dkdv),
                                                             ("dkdv_dq", kernels._bwd_dkdv_dq), ("dq", kernels._bwd_dq))
                  if getattr(k, "best_config", None)}
        again = assert_close_to_reference(*inputs, causal=True)
        # what a benchmark records of the choice (kernels.tuned_configs): the config each kernel chose for this key
        tuned = kernels.tuned_configs()
        used = ["_attn_fwd", "_dkdv_kernel_dq" if backward == "atomic" else "_dkdv_kernel"] + \
            (["_bwd_dq"] if backward == "recompute" else [])
        for name in used:
            key = f"({kernels._t_key(T)}, {D}, True, 2,"  # how the autotune key starts: T_KEY, D, causal, GROUP
            config = next(c for k, c in tuned[name].items() if k.startswith(key))
            assert "BLOCK_M: " in config and "num_warps: " in config, (name, config)
        for name, a, b in zip(["y", "dq", "dk", "dv", "dgate"], first, again):
            if CUDA and backward == "atomic" and name == "dq":
                assert rel_err(a, b) < TOL, f"T={T} D={D}: dq differs; configs {chosen}"
            else:
                assert torch.equal(a, b), f"T={T} D={D}: {name} differs between calls; configs {chosen}"


@pytest.mark.parametrize("triton_version,numpy_version,interpreting,refused", [
    ("3.6.0", "2.4.1", "1", True), ("3.6.0", "2.3.5", "1", False), ("3.7.0", "2.4.1", "1", False),
    ("3.10.0", "3.0.0", "1", False), ("3.6.0", "2.4.1", None, False)])
def test_an_interpreter_that_cannot_run_stops_the_suite_with_the_fix(triton_version, numpy_version, interpreting,
                                                                     refused, monkeypatch):
    """Triton < 3.7's interpreter fails with NumPy >= 2.4 (measured: 3.6.0 with 2.4.6 fails every kernel test, with
    2.3.5 passes); conftest.py stops the suite before it starts and names the two ways out. A GPU run is unaffected."""
    import importlib.metadata

    import conftest
    monkeypatch.setattr(importlib.metadata, "version", lambda name: {"triton": triton_version}[name])
    monkeypatch.setattr(conftest.np, "__version__", numpy_version)
    if interpreting:
        monkeypatch.setenv("TRITON_INTERPRET", interpreting)
    else:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    problem = conftest._interpreter_problem()
    assert (problem is not None) == refused
    if refused:
        assert f"Triton {triton_version}" in problem and f"NumPy {numpy_version}" in problem
        assert "pip install -U triton" in problem and "numpy<2.4" in problem


def test_choose_configs_names_the_choices(choose_configs):
    with pytest.raises(ValueError, match="GATED_ATTENTION_CONFIGS.*autotune, first, 0"):
        choose_configs("fastest")
    if not kernels.HAS_TRITON:
        return
    tuned = kernels.tuned_kernels()
    assert len(tuned) == 4 and all(len(rows) == len(kernels.CONFIG_CHOICES) - 2 for _, rows, _ in tuned)
    rows_of = lambda kernel: [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)  # noqa: E731
                              for c in kernel.configs]
    choose_configs("2")
    assert all(rows_of(kernel) == [rows[2]] for kernel, rows, _ in tuned)
    choose_configs("first")
    assert all(rows_of(kernel) == [interpreted if kernels._INTERPRET else rows[0]]
               for kernel, rows, interpreted in tuned)
    for kernel, _, _ in tuned:  # a choice an earlier autotuning left: the next choice must forget it
        kernel.cache[("stale",)] = kernel.configs[0]
    choose_configs("autotune")
    assert all(rows_of(kernel) == rows for kernel, rows, _ in tuned)
    assert all(not kernel.cache for kernel, _, _ in tuned) and not any(kernels.tuned_configs().values())
    assert kernels._t_key(1) == 64 and kernels._t_key(130) == kernels._t_key(256) == 256


@needs_triton
def test_every_output_element_written(monkeypatch):
    monkeypatch.setattr(kernels, "POISON_OUTPUTS", True)
    assert torch.isnan(kernels._empty((3,), torch.float32, DEV)).all()  # the poison is really there
    for gate, causal in (("elementwise", True), ("headwise", False), (None, True)):  # a gate adds dO, dGate
        q, k, v, g, dy = make_inputs(2, 4, 2, 70, 32, gate, seed=2)
        assert_close_to_reference(q, k, v, g, dy, causal=causal)  # asserts every output is finite
    y, lse2 = kernels._flash_forward(q.detach(), k.detach(), v.detach(), None, False, 32 ** -0.5)
    assert torch.isfinite(y).all() and torch.isfinite(lse2).all()  # lse2 is not checked above


@needs_triton
@pytest.mark.parametrize("gate,backward", [("headwise", "recompute"), ("elementwise", "atomic")])
def test_no_kernel_writes_past_its_buffers(gate, backward, choose_backward, monkeypatch):
    """Every buffer the kernels write (y, lse2, delta, dO, each gradient) is followed by a guard of as many elements,
    which must keep its values: a store masked with `<= T` for `< T` writes the last head's row T past the end (and
    the other heads' into the next head's row 0, which the interpreter's program order may overwrite, a GPU's not)."""
    guards = []

    def guarded(shape, dtype, device):
        n = math.prod(shape)
        buffer = torch.full((2 * n,), float("nan"), dtype=dtype, device=device)
        buffer[n:] = 7.0  # the guard
        guards.append(buffer[n:])
        return buffer[:n].view(shape)
    monkeypatch.setattr(kernels, "_empty", guarded)
    choose_backward(backward)
    assert_close_to_reference(*make_inputs(2, 4, 2, 37, 32, gate, seed=13), causal=True)
    assert len(guards) >= 7  # y, lse2, dq, dk, dv, dgate, delta (and dO)
    for guard in guards:
        assert (guard == 7.0).all()


@needs_triton
@pytest.mark.parametrize("gate", [None, "elementwise", "headwise"])
def test_torch_and_triton_backends_agree(gate):
    q, k, v, g, dy = make_inputs(2, 4, 2, 45, 32, gate, seed=3)
    for causal in (True, False):
        run = {b: outputs_and_grads(lambda *a: gated_attention(*a, causal=causal, backend=b), q, k, v, g, dy)
               for b in ("torch", "triton")}
        for a, b in zip(run["triton"], run["torch"]):
            assert rel_err(a, b) < TOL


def test_auto_backend_on_cpu_is_torch():
    if CUDA:
        pytest.skip("a CPU's 'auto' (on CUDA it picks Triton once kernels.FUSED_BY_DEFAULT is True)")
    q, k, v, g, _ = make_inputs(1, 2, 2, 9, 16, "elementwise")
    assert torch.equal(gated_attention(q, k, v, g, backend="auto"), kernels.attention_torch(q, k, v, g))


@needs_triton
def test_head_shared_gate_as_expanded_view():
    """model.py passes a head-shared gate as logits (B, T, 1, D) -> transpose -> expand over H (stride 0)."""
    B, H, Hkv, T, D = 2, 4, 2, 40, 32
    q, k, v, _, dy = make_inputs(B, H, Hkv, T, D, None, seed=4)
    base = torch.randn(B, T, 1, D, device=DEV, requires_grad=True)
    grads = []
    for fn in (lambda g: gated_attention(q, k, v, g, backend="triton"), lambda g: reference(q, k, v, g)):
        g = base.transpose(1, 2).expand(B, H, T, D)
        assert g.stride(1) == 0
        g.retain_grad()
        y = fn(g)
        (y * dy).sum().backward()
        assert g.grad.shape == (B, H, T, D)  # the Function's gate gradient has the gate's (expanded) shape
        grads.append((y.detach(), g.grad.clone(), base.grad.clone()))
        base.grad = None
    for a, b in zip(*grads):
        assert rel_err(a, b) < TOL
    assert grads[0][2].shape == base.shape


@pytest.mark.parametrize("backend", ["torch", pytest.param("triton", marks=needs_triton)])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("H,Hkv,scale", [(4, 4, None), (4, 2, 0.3)])
def test_first_token_attention(backend, causal, H, Hkv, scale):
    q, k, _, _, _ = make_inputs(2, H, Hkv, 50, 32, None, seed=5)
    q, k = q * 2, k * 2  # sharper softmax, so p0 varies a lot between rows; q and k still require grad
    s = q.double() @ k.double().repeat_interleave(H // Hkv, 1).transpose(-2, -1) * (scale or 32 ** -0.5)
    if causal:
        s = s.masked_fill(torch.ones(50, 50, dtype=torch.bool, device=DEV).triu(1), float("-inf"))
    want = s.softmax(-1)[..., 0]
    # chunk: the torch path loops; a scale of its own: the LSE and the scores on key 0 must use the same one
    got = first_token_attention(q, k, causal=causal, scale=scale, chunk=16, backend=backend)
    assert got.shape == (2, H, 50)
    assert not got.requires_grad  # no graph: autograd would keep every chunk's scores, T x T in all
    assert rel_err(got, want) < TOL


@pytest.mark.parametrize("backend", ["torch", pytest.param("triton", marks=needs_triton)])
def test_first_token_attention_in_bf16_under_autocast(backend):
    """What the probe measures: the model's bf16 q and k, under the evaluation's autocast, on either path, against
    the float64 softmax of the same bf16 values (on a CPU the Triton path computes bf16 in fp32: the interpreter's
    bf16 dot is wrong)."""
    T = 300 if CUDA else 70
    q, k, _, _, _ = make_inputs(2, 4, 2, T, 64, None, dtype=torch.bfloat16, seed=9)
    q, k = q.detach() * 2, k.detach() * 2
    with torch.autocast(DEV, dtype=torch.bfloat16):
        got = first_token_attention(q, k, backend=backend)
    s = q.double() @ k.double().repeat_interleave(2, 1).transpose(-2, -1) * 64 ** -0.5
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=DEV).triu(1), float("-inf"))
    assert got.dtype == torch.float32 and rel_err(got, s.softmax(-1)[..., 0]) < 1e-3


def test_first_token_attention_decoding_step():
    """One query after cached keys (Tq=1 < Tk): the torch path aligns the query with the last key."""
    q, k, _, _, _ = make_inputs(1, 4, 2, 20, 32, None, seed=6)
    got = first_token_attention(q[:, :, -1:].detach(), k.detach(), causal=True)
    want = first_token_attention(q.detach(), k.detach(), causal=True, backend="torch")[:, :, -1:]
    assert rel_err(got, want) < TOL


@pytest.mark.parametrize("backend", ["torch", pytest.param("triton", marks=needs_triton)])
def test_first_token_attention_of_no_query_is_empty(backend):
    q, k, _, _, _ = make_inputs(1, 4, 2, 8, 32, None, seed=6)
    keys = 0 if backend == "triton" else 8  # the kernel takes as many queries as keys; the torch path cached keys too
    assert first_token_attention(q[:, :, :0].detach(), k[:, :, :keys].detach(), backend=backend).shape == (1, 4, 0)


def test_a_mask_runs_on_the_torch_path_and_the_kernel_refuses_it():
    """A sliding window (model.window_mask) with the first position kept, GQA and a gate: the float64 reference."""
    from model import window_mask
    q, k, v, g, _ = make_inputs(2, 4, 2, 12, 16, "elementwise", dtype=torch.float64)
    mask = window_mask(12, 12, 3, keep_first=1, device=q.device)
    y = gated_attention(q, k, v, gate=g, mask=mask, backend="auto")
    torch.testing.assert_close(y, reference(q, k, v, g, mask=mask))
    assert not torch.allclose(y, reference(q, k, v, g))
    with pytest.raises(ValueError, match="mask"):
        gated_attention(q, k, v, gate=g, mask=mask, backend="triton")


def test_bad_inputs_raise():
    q, k, v, _, _ = make_inputs(1, 4, 2, 8, 32, None)
    with pytest.raises(ValueError, match="backend"):
        gated_attention(q, k, v, backend="cuda")
    with pytest.raises(ValueError, match="backend"):
        first_token_attention(q, k, backend="flash")
    with pytest.raises(ValueError):
        gated_attention(q[0], k, v)  # 3-D q
    with pytest.raises(ValueError):
        gated_attention(q, k[:, :1].expand(1, 3, 8, 32), v[:, :1].expand(1, 3, 8, 32))  # 4 % 3 != 0
    with pytest.raises(ValueError):
        gated_attention(q, k, v[..., :16])  # v's D differs
    # k and v alike but not q's: SDPA would broadcast a batch of 1 silently, and raise its own error for another D
    for bad_k in (k.expand(2, 2, 8, 32), k[..., :16]):
        with pytest.raises(ValueError, match="k and v must be"):
            gated_attention(q, bad_k, bad_k)
    # another B or T than q's: a gate of 1 token or 1 batch row would broadcast silently on the torch path
    for bad_gate in (torch.zeros(1, 4, 8, 2), torch.zeros(1, 2, 8, 32), torch.zeros(4, 8, 32), torch.zeros(1, 4, 1, 32),
                     torch.zeros(2, 4, 8, 32)):
        with pytest.raises(ValueError, match="gate"):
            gated_attention(q, k, v, gate=bad_gate.to(DEV))
    # causal with fewer queries than keys: SDPA would let the last query see the first key only, silently
    for backend in ("torch", "triton"):
        with pytest.raises(ValueError, match="as many queries as keys"):
            gated_attention(q[:, :, -1:], k, v, causal=True, backend=backend)
    with pytest.raises(ValueError, match="causal=False"):  # the reference path itself, as lab.bench calls it
        kernels.attention_torch(q[:, :, -1:], k, v, causal=True)
    assert torch.allclose(gated_attention(q[:, :, -1:], k, v, causal=False), gated_attention(q, k, v)[:, :, -1:],
                          atol=1e-6)
    with pytest.raises(ValueError, match="H % Hkv == 0"):  # no KV head: the shape's message, not a ZeroDivisionError
        gated_attention(q, k[:, :0], v[:, :0])
    with pytest.raises(ValueError, match="the first queries would see no key"):  # their softmax: all -inf, NaN
        first_token_attention(q, k[:, :, :3])
    with pytest.raises(ValueError, match="chunk must be a positive number"):
        first_token_attention(q, k, chunk=0)
    # a scale of 0 or below: SDPA's is_causal gives NaN rows on some builds; the torch path uses its own causal mask
    for scale in (0.0, -0.5):
        want = reference(q, k, v, None, causal=True, scale=scale)
        assert torch.allclose(gated_attention(q, k, v, scale=scale, backend="torch").double(), want, atol=1e-5), scale


@needs_triton
def test_triton_rejects_what_it_cannot_run():
    q, k, v, _, _ = make_inputs(1, 4, 2, 8, 32, None)
    with pytest.raises(ValueError, match="queries as keys"):  # KV-cache decoding shape: model.py forces torch
        gated_attention(q[:, :, -1:], k, v, causal=False, backend="triton")
    for D in (8, 48, 512):  # below tl.dot's 16, not a power of two, above 256
        qd, kd, vd, _, _ = make_inputs(1, 2, 2, 8, D, None)
        with pytest.raises(ValueError, match="head dim"):
            gated_attention(qd, kd, vd, backend="triton")
    # a (batch, head) pair per program on the grid's second axis, which holds 65,535 on a GPU: past it, a launch fails
    wide = [torch.zeros(kernels.MAX_GRID_Y + 1, 1, 1, 16, device=DEV)] * 3
    with pytest.raises(ValueError, match="at most 65,535; got B x H = 65,536"):
        gated_attention(*wide, backend="triton")
    assert kernels.use_triton("triton", *(t[1:] for t in wide))  # 65,535 pairs: taken
    q48, k48, v48, _, _ = make_inputs(1, 2, 2, 8, 48, None)
    with pytest.raises(ValueError, match="floating point"):  # the torch path would take it; the kernel says so
        gated_attention(q, k, v, gate=torch.zeros(1, 4, 8, 1, dtype=torch.long, device=DEV), backend="triton")
    with pytest.raises(ValueError, match="dtype"):
        gated_attention(q, k.double(), v, backend="triton")
    with pytest.raises(ValueError, match="scale"):
        gated_attention(q, k, v, scale=-0.1, backend="triton")
    # 'auto' falls back to torch instead of raising (it never picks Triton on a CPU)
    assert torch.allclose(gated_attention(q48, k48, v48, backend="auto"), kernels.attention_torch(q48, k48, v48))


def test_use_triton_names_the_path(monkeypatch):
    """model.py asks use_triton which branch to take: the fused kernel, or SDPA then the gate."""
    q, k, v, g, _ = make_inputs(1, 4, 2, 8, 32, "headwise")
    assert kernels.use_triton("torch", q, k, v, g) is False
    # 'auto' is the one policy (kernels.FUSED_BY_DEFAULT): the fused kernel only where it is switched on, on CUDA
    assert kernels.use_triton("auto", q, k, v) is (kernels.FUSED_BY_DEFAULT and CUDA and kernels.HAS_TRITON)
    monkeypatch.setattr(kernels, "FUSED_BY_DEFAULT", True)
    assert kernels.use_triton("auto", q, k, v) is (CUDA and kernels.HAS_TRITON)
    with pytest.raises(ValueError, match="backend"):
        kernels.use_triton("flash", q, k, v)
    if kernels.HAS_TRITON and (CUDA or os.environ.get("TRITON_INTERPRET") == "1"):
        assert kernels.use_triton("triton", q, k, v, g, scale=0.5) is True
        with pytest.raises(ValueError, match="scale"):
            kernels.use_triton("triton", q, k, v, scale=0.0)


@needs_triton
def test_triton_on_cpu_needs_the_interpreter(monkeypatch):
    if CUDA:
        pytest.skip("CUDA tensors need no interpreter")
    monkeypatch.delenv("TRITON_INTERPRET")
    q, k, v, _, _ = make_inputs(1, 2, 2, 8, 32, None)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        gated_attention(q, k, v, backend="triton")


@needs_triton
def test_the_interpreter_asked_for_after_triton_was_imported_is_the_same_line(monkeypatch):
    """triton.jit chose to interpret or not when kernels.py was imported: TRITON_INTERPRET=1 set later (a notebook's
    cell after `import model`) would pass a check of the variable alone and fail deep in Triton ('0 active
    drivers')."""
    if CUDA:
        pytest.skip("CUDA tensors need no interpreter")
    monkeypatch.setattr(kernels, "_INTERPRET", False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    q, k, v, _, _ = make_inputs(1, 2, 2, 8, 32, None)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1 set before triton is imported"):
        gated_attention(q, k, v, backend="triton")


@pytest.mark.parametrize("variable,value", [("GATED_ATTENTION_BACKWARD", "fused"), ("GATED_ATTENTION_CONFIGS", "best")])
def test_a_misspelt_kernel_variable_is_one_line_from_every_command(variable, value):
    """Read when kernels.py is imported, before any command's own error handling: every tool would end in a
    traceback."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", "import kernels"], cwd=repo, capture_output=True, text=True,
                         timeout=120, env={**os.environ, variable: value})
    assert out.returncode == 1 and out.stderr.startswith("error: ") and out.stderr.count("\n") == 1, out.stderr
    assert repr(value) in out.stderr and variable in out.stderr


@pytest.mark.parametrize("triton_version", [None, "3.1.0", "3.2.0"])
def test_import_without_triton_or_with_one_too_old(triton_version, tmp_path):
    """Without Triton, or with one older than the kernel needs (a stand-in package of that version, as CUDA builds of
    torch 2.5 and 2.6 bring), kernels.py loads, the torch path works, and backend='triton' says what to do."""
    if triton_version is None:
        stub = "import sys; sys.modules['triton'] = None\n"  # makes `import triton` raise ImportError
        expected = "needs the triton package"
    else:  # Triton 3.1's autotune() takes no do_bench: loading the kernels' autotuners would raise a TypeError
        (tmp_path / "triton").mkdir()
        (tmp_path / "triton" / "__init__.py").write_text(f"__version__ = {triton_version!r}\n"
                                                         "def autotune(configs, key): raise TypeError('too old')\n")
        (tmp_path / "triton" / "language.py").write_text("")
        stub = f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        expected = f"needs Triton 3.3 or newer, found {triton_version}"
    code = (stub + "import torch, kernels\n"
            "assert not kernels.HAS_TRITON\n"
            "q = torch.randn(1, 2, 5, 16)\n"
            "assert torch.equal(kernels.gated_attention(q, q, q, backend='auto'), kernels.attention_torch(q, q, q))\n"
            "try:\n    kernels.gated_attention(q, q, q, backend='triton')\n"
            "except RuntimeError as e:\n    print(e)\n")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where kernels.py is, above tests/
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and expected in out.stdout and "use backend='torch'" in out.stdout, out.stderr


# ----------------------------------------------------------------------------
# kernels.py marks every line that is there only for the output gate with a comment that starts with `# [gate]`

def gate_lines():
    """kernels.py's source lines, and the numbers (1-based) of those whose comment starts with `# [gate]`."""
    with open(kernels.__file__) as f:
        src = f.read()
    marked = {tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(src).readline)
              if tok.type == tokenize.COMMENT and tok.string.startswith("# [gate]")}
    return src.splitlines(True), marked


def test_docstring_states_the_gate_line_count():
    _, marked = gate_lines()
    stated = re.search(r"adds (\d+) lines", kernels.__doc__)
    assert stated, "the module docstring should say how many lines the gate adds"
    assert int(stated[1]) == len(marked), f"{len(marked)} lines are marked # [gate]; the docstring says {stated[1]}"


@needs_triton
def test_without_the_gate_lines_it_is_plain_flash_attention(tmp_path):
    """Delete every `# [gate]` line and kernels.py must still import and compute ungated attention exactly:
    so no line the plain kernel needs is marked, and no line left refers to something only the gate defines."""
    lines, marked = gate_lines()
    src = "".join(line for i, line in enumerate(lines, 1) if i not in marked)
    src = src.replace('"gated_attention::', '"gated_attention_without_gate::')  # custom op names are global
    path = tmp_path / "kernels_without_gate.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("kernels_without_gate", path)
    plain = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plain)  # Triton reads the kernels' source from this file
    plain.POISON_OUTPUTS = True
    q, k, v, _, dy = make_inputs(2, 4, 2, 70, 32, None, seed=8)
    for causal in (True, False):
        got = outputs_and_grads(lambda *a: plain.gated_attention(*a, causal=causal, backend="triton"),
                                q, k, v, None, dy)
        want = outputs_and_grads(lambda *a: gated_attention(*a, causal=causal, backend="triton"), q, k, v, None, dy)
        for a, b in zip(got, want):  # bit for bit in the interpreter; on a GPU each module autotunes on its own
            assert torch.equal(a, b) if not CUDA else rel_err(a, b) < TOL


# ----------------------------------------------------------------------------
# the model gives the same logits and gradients on both backends

@needs_triton
@pytest.mark.parametrize("gate", [dict(), dict(gate_granularity="headwise"), dict(gate_shared=True),
                                  dict(gate_input="none"), dict(gate="none", n_kv_head=2)],
                         ids=["g1-elementwise", "g1-headwise", "g1-shared", "g1-input-independent", "none-gqa"])
def test_model_same_on_both_backends(gate):
    runs = []
    for backend in ("torch", "triton"):
        config = GPTConfig(block_size=64, vocab_size=96, n_layer=2, n_head=4, n_embd=128, attn_backend=backend, **gate)
        torch.manual_seed(0)
        model = GPT(config).to(DEV)
        if runs:
            model.load_state_dict(runs[0][0].state_dict())
        idx = torch.randint(0, 96, (2, 40), generator=torch.Generator().manual_seed(1)).to(DEV)
        logits, loss = model(idx, targets=idx.roll(-1, 1))
        loss.backward()
        runs.append((model, logits))
    (m_torch, l_torch), (m_triton, l_triton) = runs
    assert rel_err(l_triton, l_torch) < TOL
    grads = dict(m_torch.named_parameters())
    checked = 0
    for name, p in m_triton.named_parameters():
        assert p.grad is not None, name
        assert rel_err(p.grad, grads[name].grad) < 1e-4, name  # a few layers of fp32 rounding on top of TOL
        checked += 1
    assert checked == len(grads)


@needs_triton
def test_model_under_bf16_autocast_same_on_both_backends():
    """train.py's dtype=auto trains under bf16 autocast on a CPU that computes bf16, and on a GPU: the fused path's
    logits stay within bf16's rounding of the PyTorch path's (on a CPU the interpreter's bf16 dot was wrong)."""
    logits = []
    for backend in ("torch", "triton"):
        torch.manual_seed(0)
        model = GPT(GPTConfig(block_size=32, vocab_size=96, n_layer=2, n_head=4, n_embd=64, attn_backend=backend))
        idx = torch.randint(0, 96, (2, 24), generator=torch.Generator().manual_seed(1)).to(DEV)
        with torch.no_grad(), torch.autocast(DEV, dtype=torch.bfloat16):
            logits.append(model.to(DEV)(idx)[0].float())
    assert rel_err(logits[1], logits[0]) < 3e-2  # the interpreter's bf16 dot gave 1.2


@needs_triton
@pytest.mark.parametrize("gate", [None, "elementwise", "headwise", "shared"])
def test_custom_ops_opcheck(gate):
    """torch.library.opcheck: schema, autograd wiring, and fake (meta) outputs with the real outputs'
    shapes *and strides*, which torch.compile relies on."""
    B, H, Hkv, T, D = 2, 4, 2, 20, 32
    q, k, v, g, dy = make_inputs(B, H, Hkv, T, D, None if gate == "shared" else gate)
    if gate == "shared":
        g = torch.randn(B, T, 1, D, device=DEV).transpose(1, 2).expand(B, H, T, D)
    q, k, v, g = (None if t is None else t.detach() for t in (q, k, v, g))
    y, lse2 = torch.ops.gated_attention.forward(q, k, v, g, True, 0.2)
    assert y.transpose(1, 2).is_contiguous()  # a (B, T, H, D) buffer: model.py's reshape to (B, T, C) copies nothing
    torch.library.opcheck(torch.ops.gated_attention.forward.default, (q, k, v, g, True, 0.2))
    torch.library.opcheck(torch.ops.gated_attention.backward.default, (dy, q, k, v, g, y, lse2, True, 0.2))


@needs_triton
def test_model_under_torch_compile():
    """The kernels are custom ops, so torch.compile(fullgraph=True) captures the whole model around them
    (aot_eager: dynamo + AOT autograd with the ops' fake shapes/strides, without a slow codegen step)."""
    config = GPTConfig(block_size=64, vocab_size=96, n_layer=1, n_head=4, n_kv_head=2, n_embd=128,
                       gate_shared=True, attn_backend="triton")
    torch.manual_seed(0)
    model = GPT(config).to(DEV)
    idx = torch.randint(0, 96, (2, 40), generator=torch.Generator().manual_seed(1)).to(DEV)
    results = []
    for m in (model, torch.compile(model, backend="aot_eager", fullgraph=True)):
        logits, loss = m(idx, targets=idx)
        loss.backward()
        results.append((logits.detach(), [p.grad.clone() for p in model.parameters()]))
        model.zero_grad(set_to_none=True)
    assert rel_err(results[1][0], results[0][0]) < TOL
    for a, b in zip(results[1][1], results[0][1]):
        assert rel_err(a, b) < TOL


# ----------------------------------------------------------------------------
# 16-bit inputs: as accurate as SDPA + gate (bf16 and the fp16 sweep on a GPU; fp16 at T = 1 in the interpreter too)

def one_token_bounds(q, k, y, dy):
    """How large a correct fused kernel's dq and dk can be at T = 1 with a gate in a 16-bit dtype, where the exact
    ones are 0 (y: the reference's output). Each query sees one key, so P = 1 and dS = dP - delta, two equal sums
    that the kernel computes from different roundings: dP = rowsum(dO * V) with dO = dY * s rounded to the dtype
    (the buffer its dot products read), delta = rowsum(dY * Y) with Y = O * s as the forward rounded it (the
    backward has Y, never O: see kernels._bwd_pre). Each rounding is at most eps / 2 relative, so
    |dS| <= eps * rowsum(|dY * Y|) in each row; then dq = dS k * scale, and dk = dS q * scale summed over a kv
    head's query heads; 1.1 covers the roundings of dS, dq and dk themselves and the fp32 sums. SDPA + gate gets
    (close to) 0: its delta uses its own ungated O, which at T = 1 is V exactly; so does the kernel without a gate
    (Y = V, dO = dY: nothing is rounded).
    Measured (bf16 and fp16, D = 32..128, 20 seeds): the kernel's dq, dk (2e-2..5e-2 in bf16) stay 6x or more under
    this bound, while a dS of the order of the sums themselves (delta = 0, or delta without the gate) lands 5x or
    more over it."""
    scale = q.size(-1) ** -0.5
    group = q.size(1) // k.size(1)
    ds = 1.1 * torch.finfo(q.dtype).eps * (dy.double() * y.double()).abs().sum(-1)  # (B, H, 1): |dS| per row
    q_norm, k_norm = q.detach().double().norm(dim=-1), k.detach().double().norm(dim=-1).repeat_interleave(group, 1)
    return {"dq": (ds * k_norm * scale).norm().item(),
            "dk": (ds * q_norm * scale).unflatten(1, (k.size(1), group)).sum(2).norm().item()}


def assert_as_accurate_as_torch(q, k, v, g, dy, floor=1e-2):
    """The fused kernel against float64, each field within 2x of SDPA + gate's error in the same dtype, or `floor`
    (1e-2: bf16 has an 8-bit mantissa, ~4e-3 per rounding). With a gate at T = 1 the exact dq and dk are 0 (so that
    rule would be an absolute floor): there they must stay within one_token_bounds, the rounding noise of what
    cancels."""
    dtype = q.dtype
    ref = outputs_and_grads(lambda *a: reference(*a), q, k, v, g, dy)
    bounds = one_token_bounds(q, k, ref[0], dy) if q.size(2) == 1 and g is not None else {}
    for name, a, b, c in zip(["y", "dq", "dk", "dv", "dgate"],
                             outputs_and_grads(lambda *a: gated_attention(*a, backend="triton"), q, k, v, g, dy),
                             outputs_and_grads(lambda *a: gated_attention(*a, backend="torch"), q, k, v, g, dy), ref):
        assert a.dtype == dtype and torch.isfinite(a).all(), name
        if name in bounds:
            assert not c.any(), f"{name}: the reference is not 0 at T = 1"
            norm = a.double().norm().item()
            assert norm <= bounds[name], f"{name}: norm {norm:.2e} > {bounds[name]:.2e}, more than rounding noise"
        else:
            err, torch_err = rel_err(a, c), rel_err(b, c)
            assert err < max(2 * torch_err, floor), f"{name}: relative error {err:.2e} (SDPA + gate: {torch_err:.2e})"


@needs_triton
@pytest.mark.parametrize("gate", ["elementwise", "headwise"])
def test_half_precision_over_several_blocks(gate):
    """fp16 at T = 70 (two query blocks, a ragged one) on a CPU too: within 2x of SDPA + gate's error, or 2e-3 (fp16
    has an 11-bit mantissa; the kernel's error measured 2-7e-4), not the 1e-2 that bf16 needs."""
    assert_as_accurate_as_torch(*make_inputs(1, 4, 2, 70, 32, gate, dtype=torch.float16, seed=8), floor=2e-3)


@needs_triton
@pytest.mark.parametrize("backward", kernels.BACKWARDS)
@pytest.mark.parametrize("D", [32, 64])
@pytest.mark.parametrize("gate", [None, "elementwise", "headwise"])
def test_one_token_in_half_precision(gate, D, backward, choose_backward):
    """fp16 at T = 1, which the interpreter runs too (its bf16 is not usable): the GPU test below, on a CPU."""
    choose_backward(backward)
    assert_as_accurate_as_torch(*make_inputs(2, 4, 2, 1, D, gate, dtype=torch.float16, seed=7))


@needs_cuda
@needs_triton
@pytest.mark.parametrize("dtype,backward", [(torch.float16, "recompute"), (torch.bfloat16, "recompute"),
                                           (torch.bfloat16, "atomic")])  # training's dtype takes both dQ modes
@pytest.mark.parametrize("D", [32, 64, 128])
@pytest.mark.parametrize("T", [1, 37, 130, 1000])
@pytest.mark.parametrize("gate", [None, "elementwise", "headwise"])
def test_low_precision_cuda(dtype, D, T, gate, backward, choose_backward):
    """The fused kernel should be about as accurate as SDPA + gate in the same dtype (assert_as_accurate_as_torch).
    The atomic dQ sums in fp32 and rounds once, so it is held to the same bound."""
    choose_backward(backward)
    assert_as_accurate_as_torch(*make_inputs(2, 4, 2, T, D, gate, dtype=dtype, seed=7))


@needs_triton
@pytest.mark.parametrize("backward", kernels.BACKWARDS)
def test_no_query_head_gives_zero_kv_gradients(backward, choose_backward, monkeypatch):
    """H = 0 (zero-size, as B = 0 or T = 0): k and v are read by no query, so their gradients are 0, as on the torch
    path; the dK/dV grid (B * Hkv programs) must not run with H // Hkv = 0 query heads per kv head."""
    monkeypatch.setattr(kernels, "POISON_OUTPUTS", True)
    choose_backward(backward)
    q, k, v, g, dy = make_inputs(2, 0, 1, 8, 16, "elementwise")
    y = gated_attention(q, k, v, g, backend="triton")
    dk, dv = torch.autograd.grad(y, (k, v), dy)
    assert y.shape == (2, 0, 8, 16) and (dk == 0).all() and (dv == 0).all()

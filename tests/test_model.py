"""Properties of model.py, for every gate variant and norm type. CPU only, float64 where we compare numbers."""

import math
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

import probe
from cli import _source_lines
from conftest import fused_kernel_runs_on_the_cpu
from kernels import chunked_loss
from model import (VALID, DyT, GPT, GPTConfig, GatedNorm, PreAffine, RMSNorm, apply_rope, gate_activation, make_norm,
    rope_tables, window_mask)
from probe import Probe, attention_maps
from lab.variants import TEST_VARIANTS

# Small but not degenerate: 4 query heads sharing 2 KV heads (GQA), head_dim 8.
C, H, HKV, D, VOCAB = 32, 4, 2, 8, 97
BASE = dict(block_size=24, vocab_size=VOCAB, n_layer=2, n_head=H, n_kv_head=HKV, n_embd=C)

# Every variant of the registry (lab/variants.py), as test ids: the study's, the papers' other rows, and a few more
# configurations, which together set every value of every flag.
VARIANTS = list(TEST_VARIANTS.items())
# exact gate parameters per layer (PAPERS.md: d_model x scores per token; an input-independent gate: the scores)
GATE_PARAMS = {
    "baseline": 0, "g1_elementwise": C * H * D, "g1_headwise": C * H, "g1_head_shared": C * D,
    "g1_additive_silu": C * H * D, "g1_elementwise_silu": C * H * D, "g1_ns_sigmoid": C * H * D,
    "g1_additive_identity": C * H * D, "g1_input_independent": H * D, "g2_elementwise": C * HKV * D,
    "g2_headwise": C * HKV, "g2_head_shared": C * D, "g3": C * HKV * D, "g4": C * H * D, "g5": C * C,
}
# (a name TEST_VARIANTS lacks is left out here, and fails test_gate_params_names_variants_of_the_registry)
GATES = [(name, TEST_VARIANTS[name], n) for name, n in GATE_PARAMS.items() if name in TEST_VARIANTS]


def make(seed=0, dtype=torch.float64, **kw):
    torch.manual_seed(seed)
    cfg = GPTConfig(**{**BASE, "attn_backend": "torch", **kw})
    model = GPT(cfg).to(dtype).eval()
    # Perturb the parameters that start at exact constants (norm gains, zero-init gate, and any vector or scalar a
    # new flag adds: an equation that misuses a parameter left at 1 would pass), so the tests see a generic network
    # rather than the symmetric one at initialisation. The matrices start random already.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() <= 1:
                p.add_(0.3 * torch.randn_like(p))
    return model


def tokens(B=2, T=20, seed=1):
    return torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------
# Shapes, causality, gradients

@pytest.mark.parametrize("name,kw", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_shapes_causality_and_gradients(name, kw):
    model = make(**kw)
    idx = tokens()
    logits, loss = model(idx, idx)
    assert logits.shape == (2, 20, VOCAB) and loss.dim() == 0 and torch.isfinite(loss)

    # causality: changing token t changes no logits before t, and does change the logits at t
    t = 11
    idx2 = idx.clone()
    idx2[:, t] = (idx2[:, t] + 1) % VOCAB
    logits2, _ = model(idx2)
    torch.testing.assert_close(logits2[:, :t], logits[:, :t], rtol=0, atol=1e-12)
    assert (logits2[:, t] - logits[:, t]).abs().max() > 1e-6

    # every parameter, every gate parameter in particular, receives a finite, non-zero gradient
    loss.backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        if "gate" in pname:
            assert p.grad.abs().max() > 0, pname
    for block in model.transformer.h:  # W_theta: the gate's rows of c_attn, one row per gate score
        width = model.config.gate_logits_width()
        assert width == 0 or (block.attn.c_attn.weight.grad[-width:].abs().amax(1) > 0).all()


def test_normal_call_returns_two_values():
    model = make()
    out = model(tokens(), tokens())
    assert isinstance(out, tuple) and len(out) == 2


def test_dropout_on_the_embeddings_and_every_sublayer_output():
    """config.dropout: one nn.Dropout of that rate on the embeddings and on each sub-layer's output (attention, MLP),
    each on the forward pass's path: zeroing what it passes on changes the logits."""
    model, idx = make(dropout=0.25), tokens()
    drops = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    assert len(drops) == 1 + 2 * BASE["n_layer"] and all(m.p == 0.25 for m in drops)
    with torch.no_grad():
        logits = model(idx)[0]  # eval mode: every dropout passes its input on
        for m in drops:
            hook = m.register_forward_hook(lambda mod, args, out: torch.zeros_like(out))
            assert not torch.allclose(model(idx)[0], logits)
            hook.remove()
        assert not torch.allclose(model.train()(idx)[0], logits)


def test_the_plain_loss_is_fp32_and_leaves_out_targets_of_minus_one():
    """Without loss_chunk: the mean cross-entropy of the targets that are not -1, taken in fp32 from a bf16 model's
    logits (bf16's 8 bits of mantissa would round the loss itself)."""
    model, idx = make(dtype=torch.bfloat16), tokens()
    targets = idx.roll(-1, 1)
    targets[0, :6] = -1
    logits, loss = model(idx, targets)
    keep = targets != -1
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(F.cross_entropy(logits[keep].double(), targets[keep]).item(), rel=1e-6)


def test_the_plain_loss_of_a_float64_model_stays_float64():
    """fp32 is a floor, not a cast: a float64 model (gradcheck, a student's reference) keeps its loss in float64,
    as kernels.chunked_loss does, to the last bits of the direct float64 cross-entropy and its gradient."""
    for chunk in (0, 7):
        model, idx = make(loss_chunk=chunk), tokens()
        loss = model(idx, idx.roll(-1, 1))[1]
        assert loss.dtype == torch.float64
        (g,) = torch.autograd.grad(loss, model.lm_head.weight)
        model.config.loss_chunk = 0
        ref = F.cross_entropy(model(idx)[0].flatten(0, 1), idx.roll(-1, 1).flatten())
        (g_ref,) = torch.autograd.grad(ref, model.lm_head.weight)
        assert abs(loss.item() - ref.item()) < 1e-12
        torch.testing.assert_close(g, g_ref, rtol=1e-10, atol=1e-13)


def test_the_default_cpu_run_executes_the_reference_gate_line():
    """On a CPU the attention takes the reference branch: SDPA, then Gate.forward, once per layer."""
    model = make(dtype=torch.float32, attn_backend="auto")
    calls = []
    for block in model.transformer.h:
        block.attn.gate.register_forward_hook(lambda m, args, out: calls.append(args[0].shape))
    model(tokens())
    assert calls == [(2, 20, H, D)] * 2  # (B, T, heads, D): each head's SDPA output


# ----------------------------------------------------------------------------
# Parameter counts

@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("name,kw,expected", GATES, ids=[g[0] for g in GATES])
def test_gate_parameter_count(name, kw, expected, bias):
    if bias and kw.get("gate_input") != "none":  # a bias for each of W_theta's rows (C weights each)
        expected += expected // C
    model = GPT(GPTConfig(**BASE, **kw, bias=bias))
    baseline = GPT(GPTConfig(**BASE, gate="none", bias=bias))
    assert model.num_params() - baseline.num_params() == BASE["n_layer"] * expected
    # the gate's parameters: W_theta, the last rows of c_attn, or a learned parameter whose name says gate
    in_c_attn = sum(b.attn.c_attn.weight.size(0) - baseline.transformer.h[0].attn.c_attn.weight.size(0)
                    for b in model.transformer.h) * (C + bias)
    named_gate = sum(p.numel() for n, p in model.named_parameters() if "gate" in n)
    assert in_c_attn + named_gate == BASE["n_layer"] * expected
    assert model.config.gate_params_per_layer() == expected


@pytest.mark.parametrize("name,kw,expected", GATES[1:], ids=[g[0] for g in GATES[1:]])
@pytest.mark.parametrize("size", [dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50304, block_size=1024),
                                  dict(n_layer=4, n_head=4, n_kv_head=2, n_embd=128, vocab_size=VOCAB, mlp="gelu"),
                                  dict(n_layer=2, n_head=4, n_embd=64, vocab_size=VOCAB, bias=True)],
                         ids=["gpt2_small", "tiny_gqa_gelu", "tiny_bias"])
def test_match_params_within_one_percent(name, kw, expected, size):
    """Within 1%, and as close as whole hidden units allow: within half a hidden unit's parameters (measured, biases
    included) of the baseline in each layer."""
    with torch.device("meta"):  # count parameters without allocating them
        matched = GPT(GPTConfig(**{**size, **kw, "match_params": True})).num_params()
        plain = GPT(GPTConfig(**{**size, **kw})).num_params()
        baseline = GPT(GPTConfig(**{**size, "gate": "none"})).num_params()
        wider = GPTConfig(**{**size, "gate": "none"}).hidden_dim + 1
        per_unit = (GPT(GPTConfig(**{**size, "gate": "none", "mlp_hidden": wider})).num_params() - baseline) \
            / size["n_layer"]
    assert abs(matched - baseline) / baseline < 0.01
    assert abs(matched - baseline) <= size["n_layer"] * per_unit / 2
    if expected >= 3 * size["n_embd"]:  # the gate is worth at least one hidden unit: the MLP really shrank
        assert matched < plain


def test_kv_heads_and_head_dim_default_to_plain_multi_head_attention():
    """n_kv_head=None: a KV head for every query head (no GQA); head_dim=None: n_embd / n_head."""
    cfg = GPTConfig(**{**BASE, "n_kv_head": None})
    assert (cfg.n_kv_head, cfg.head_dim) == (H, C // H)
    assert GPT(cfg).transformer.h[0].attn.c_attn.out_features == 4 * C  # Q, K, V and G1's W_theta: C rows each


def test_config_round_trips_through_asdict():
    from dataclasses import asdict
    cfg = GPTConfig(**BASE, match_params=True, gate="g5")
    assert GPTConfig(**asdict(cfg)).hidden_dim == cfg.hidden_dim < GPTConfig(**BASE, gate="g5").hidden_dim


# ----------------------------------------------------------------------------
# The gate equations, against a direct float64 re-computation with explicit loops over heads

def reference_attention(attn, x, cfg, rope=None):
    """Y' = Y (*|+) act(X W_theta) at G1..G5, written out head by head from the module's weights; rope: the model's
    (cos, sin) tables, applied to q and k after the gates of G3/G4 and QK-norm."""
    B, T, _ = x.shape
    d, nh, nk = cfg.head_dim, cfg.n_head, cfg.n_kv_head
    Wq, Wk, Wv = attn.c_attn.weight[:(nh + 2 * nk) * d].split([nh * d, nk * d, nk * d])
    W_theta = attn.c_attn.weight[(nh + 2 * nk) * d:]  # the gate's rows, after Q, K and V's
    acts = {"sigmoid": torch.sigmoid, "silu": F.silu, "ns_sigmoid": lambda s: 0.5 + 0.5 * torch.sigmoid(s),
            "identity": lambda s: s}
    assert cfg.gate_act in acts, f"gate_act={cfg.gate_act!r}: write its score out here, in reference_attention's acts"
    act = acts[cfg.gate_act]
    combine = (lambda y, s: y * s) if cfg.gate_op == "mul" else (lambda y, s: y + s)

    def logits(rows):  # gate logits for the given rows of W_theta (or of the input-independent parameter)
        if cfg.gate_input == "none":
            return attn.gate.gate_param[rows].expand(B, T, -1)
        return x @ W_theta[rows].T

    def gate_rows(head):  # which score rows act on this head at G1/G2/G3/G4
        if cfg.gate_shared:
            return slice(0, d)
        if cfg.gate_granularity == "headwise":
            return slice(head, head + 1)
        return slice(head * d, (head + 1) * d)

    def rms(t, w):
        return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    heads = []
    for h in range(nh):
        j = h // (nh // nk)  # the KV head this query head reads
        q, k, v = x @ Wq[h * d:(h + 1) * d].T, x @ Wk[j * d:(j + 1) * d].T, x @ Wv[j * d:(j + 1) * d].T
        if cfg.gate == "g4":
            q = combine(q, act(logits(gate_rows(h))))
        if cfg.gate == "g3":
            k = combine(k, act(logits(gate_rows(j))))
        if cfg.gate == "g2":
            v = combine(v, act(logits(gate_rows(j))))
        if cfg.qk_norm:
            q, k = rms(q, attn.q_norm.weight), rms(k, attn.k_norm.weight)
        if rope is not None:  # channel i turns with channel i + d/2, by the position's angle
            cos, sin = rope
            q, k = (torch.cat([t[:, :, :d // 2] * cos - t[:, :, d // 2:] * sin,
                               t[:, :, :d // 2] * sin + t[:, :, d // 2:] * cos], -1) for t in (q, k))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        y = scores.softmax(-1) @ v
        if cfg.sdpa_nonlin == "rmsnorm":
            y = rms(y, attn.sdpa_norm.weight)
        elif cfg.sdpa_nonlin == "silu":
            y = F.silu(y)
        if cfg.gate == "g1":
            y = combine(y, act(logits(gate_rows(h))))
        heads.append(y)
    out = torch.cat(heads, dim=-1) @ attn.c_proj.weight.T
    if cfg.gate == "g5":
        out = combine(out, act(logits(slice(0, cfg.n_embd))))
    return out


ATTN_VARIANTS = [(n, kw) for n, kw, _ in GATES] + [
    ("sdpa_rmsnorm", TEST_VARIANTS["sdpa_rmsnorm"]),
    ("sdpa_silu", TEST_VARIANTS["sdpa_silu"]),
    ("sdpa_rmsnorm_plus_g1", dict(sdpa_nonlin="rmsnorm")),
    ("qk_norm_g3", dict(gate="g3", qk_norm=True)),
    ("qk_norm_g4", dict(gate="g4", qk_norm=True)),
    ("mha_g1_headwise", dict(n_kv_head=H, gate_granularity="headwise")),
]


@pytest.mark.parametrize("name,kw", ATTN_VARIANTS, ids=[v[0] for v in ATTN_VARIANTS])
def test_gate_equations_against_reference(name, kw):
    model = make(**kw, pos_emb="learned")  # no RoPE here: it is tested on its own below
    attn = model.transformer.h[0].attn
    x = torch.randn(2, 13, C, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(attn(x), reference_attention(attn, x, model.config), rtol=1e-10, atol=1e-12)


# The fused kernel on this file's CPU models: only through Triton's interpreter (on a machine with a GPU,
# tests/test_kernels.py runs it on the GPU's tensors)
kernel_on_the_cpu = pytest.mark.skipif(not fused_kernel_runs_on_the_cpu(),
                                       reason="needs Triton and TRITON_INTERPRET=1 (conftest.py sets it without a GPU)")


@kernel_on_the_cpu
@pytest.mark.parametrize("name,kw", [("silu", dict(gate_act="silu")), ("ns_sigmoid", dict(gate_act="ns_sigmoid")),
                                     ("additive", dict(gate_op="add")), ("sdpa_rmsnorm", dict(sdpa_nonlin="rmsnorm"))])
def test_a_g1_gate_the_kernel_does_not_fuse_is_applied_after_it(name, kw):
    """attn_backend='triton' fuses only a multiplicative sigmoid G1 gate into the kernel; any other G1 variant takes
    the kernel for attention alone and then its own gate line: the same output as PyTorch's path."""
    x = torch.randn(1, 8, C, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch_out, triton_out = (make(dtype=torch.float32, head_dim=16, pos_emb="learned", attn_backend=backend, **kw)
                                 .transformer.h[0].attn(x) for backend in ("torch", "triton"))
    torch.testing.assert_close(triton_out, torch_out, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("gate", ["g3", "g4"])
def test_g3_and_g4_gate_before_qk_norm_and_rope(gate):
    """GA's G3 and G4 gate the key and query projections' outputs: before QK-norm and RoPE, not after."""
    model = make(gate=gate, qk_norm=True)  # RoPE: the default
    attn, T = model.transformer.h[0].attn, 13
    x = torch.randn(2, T, C, dtype=torch.float64)
    rope = (model.rope_cos[:T], model.rope_sin[:T])
    with torch.no_grad():  # (apply_rope computes in float32, whatever the model's dtype)
        torch.testing.assert_close(attn(x, rope), reference_attention(attn, x, model.config, rope), rtol=1e-5,
                                   atol=1e-6)


def test_the_gate_equations_are_held_at_every_gate_value():
    """Every value of every gate flag in VALID reaches test_gate_equations_against_reference: a value added to VALID
    that no variant of GATE_PARAMS (or ATTN_VARIANTS) sets would be held by no float64 equation: a branch written
    wrong would train without a word."""
    for flag in ("gate", "gate_granularity", "gate_op", "gate_act", "gate_input", "sdpa_nonlin"):
        default = GPTConfig.__dataclass_fields__[flag].default
        seen = {default} | {kw[flag] for _, kw in ATTN_VARIANTS if flag in kw}
        assert seen == set(VALID[flag]), (f"{flag}={sorted(set(VALID[flag]) - seen)} is set by no variant of "
                                          "GATE_PARAMS (or ATTN_VARIANTS): add one, with its gate parameters per layer")
    assert any(kw.get("gate_shared") for _, kw in ATTN_VARIANTS)


def test_gate_params_names_variants_of_the_registry():
    """A GATE_PARAMS entry whose variant lab.variants does not name would drop out of GATES (and its equation test)
    without a word: it fails here instead, saying where the variant goes."""
    missing = sorted(set(GATE_PARAMS) - set(TEST_VARIANTS))
    assert not missing, f"GATE_PARAMS names {missing}, which lab.variants.VARIANTS does not: add each there"


def test_a_gate_activation_without_its_branch_is_refused():
    """gate_activation has a branch for every value of VALID['gate_act'] and raises for any other name: a value added
    to VALID without its branch would otherwise train as some other score."""
    s = torch.randn(5, dtype=torch.float64)
    for name in VALID["gate_act"]:
        assert gate_activation(name, s).shape == s.shape
    with pytest.raises(ValueError, match="no branch for gate_act='no_such_score'"):
        gate_activation("no_such_score", s)


def test_help_names_every_valid_value_of_a_flag():
    """`python train.py --help` shows each GPTConfig field's comment: a value added to VALID is named there too."""
    comment = {entry[1]: entry[2] for entry in _source_lines(GPTConfig) if entry[0] == "key"}
    for flag, valid in VALID.items():
        missing = [v for v in valid[1:] if not re.search(rf"\b{v}\b", comment[flag])]
        assert not missing, f"GPTConfig.{flag}'s comment (what --help shows) does not name {missing}"


def test_gate_activations():
    s = torch.linspace(-30, 30, 1001, dtype=torch.float64)
    ns = gate_activation("ns_sigmoid", s)
    assert ns.min() >= 0.5 and ns.max() <= 1.0 and ns.min() < 0.5 + 1e-9 and ns.max() > 1 - 1e-9
    torch.testing.assert_close(ns, 0.5 + 0.5 / (1 + torch.exp(-s)))
    torch.testing.assert_close(gate_activation("sigmoid", s), 1 / (1 + torch.exp(-s)))
    torch.testing.assert_close(gate_activation("silu", s), s / (1 + torch.exp(-s)))
    assert torch.equal(gate_activation("identity", s), s)
    # the model's NS-sigmoid gate scores stay in [0.5, 1] whatever the weights
    model = make(gate_act="ns_sigmoid")
    with torch.no_grad():
        model.transformer.h[0].attn.c_attn.weight[-H * D:].mul_(100)  # W_theta's rows: huge gate logits
    with Probe(model) as probe:
        model(tokens())
    assert all(0.5 <= g <= 1.0 for g in probe.stats["gate_mean"]) and probe.stats["gate_below_0.5"] == [0.0, 0.0]


def test_input_independent_gate_starts_at_one_half():
    cfg = GPTConfig(**BASE, gate_input="none")
    attn = GPT(cfg).transformer.h[0].attn
    assert attn.c_attn.out_features == (H + 2 * HKV) * D  # no W_theta: the gate does not read the input
    assert torch.equal(attn.gate.gate_param, torch.zeros(H * D))
    assert torch.equal(attn.gate.score(attn.gate.logits(torch.zeros(2, 5, 0))), torch.full((1, 1, H, D), 0.5))


# ----------------------------------------------------------------------------
# Norms on known inputs

def test_rmsnorm_and_layernorm():
    x = torch.tensor([[3.0, -4.0, 0.0, 0.0]], dtype=torch.float64)
    n = RMSNorm(4).double()
    torch.testing.assert_close(n(x), x / math.sqrt(25 / 4 + 1e-6))
    ln = make_norm(GPTConfig(**BASE, norm="layernorm"), 4).double()
    torch.testing.assert_close(ln(x), (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + ln.eps))


def test_dyt_equation():
    n = DyT(3).double()
    x = torch.tensor([[-2.0, 0.0, 4.0]], dtype=torch.float64)
    torch.testing.assert_close(n(x), torch.tanh(0.5 * x))  # alpha=0.5, gamma=1, beta=0 at init
    with torch.no_grad():
        n.alpha.fill_(0.2), n.weight.copy_(torch.tensor([1.0, 2.0, 3.0])), n.bias.fill_(0.5)
    torch.testing.assert_close(n(x), torch.tensor([1.0, 2.0, 3.0]).double() * torch.tanh(0.2 * x) + 0.5)
    assert n.alpha.dim() == 0  # one scalar alpha


def test_preaffine_equation():
    n = PreAffine(4).double()
    lam = torch.tensor([1.0, 10.0, 0.5, 2.0], dtype=torch.float64)
    with torch.no_grad():
        n.pre_scale.copy_(lam)
    x = torch.tensor([[1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    z = lam * x
    torch.testing.assert_close(n(x), z / torch.sqrt(z.pow(2).mean() + 1e-6))
    # PreAffine is not RMSNorm: scaling one channel changes every other channel's output
    assert not torch.allclose(n(x), RMSNorm(4).double()(x))


def test_gatednorm_equation():
    n = GatedNorm(8, rank=2).double()
    x = torch.randn(3, 8, dtype=torch.float64)
    y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    gate = torch.sigmoid(F.silu(y @ n.down.weight.T) @ n.up.weight.T)
    torch.testing.assert_close(n(x), y * gate)
    assert n.down.weight.shape == (2, 8) and n.up.weight.shape == (8, 2)
    # with W_up = 0 every gate is sigmoid(0) = 1/2 exactly
    with torch.no_grad():
        n.up.weight.zero_()
    torch.testing.assert_close(n(x), y / 2)


@pytest.mark.parametrize("norm,cls", [("rmsnorm", RMSNorm), ("layernorm", torch.nn.LayerNorm), ("dyt", DyT),
                                      ("preaffine", PreAffine), ("gatednorm", GatedNorm)])
def test_every_norm_in_the_model_is_the_configured_one(norm, cls):
    model = GPT(GPTConfig(**BASE, norm=norm, sandwich_norm=True))
    block = model.transformer.h[0]
    for n in (block.ln_1, block.ln_2, block.ln_attn_out, block.ln_mlp_out, model.transformer.ln_f):
        assert type(n) is cls
    if norm == "gatednorm":
        assert GPT(GPTConfig(**BASE, norm=norm, gatednorm_rank=5)).transformer.ln_f.down.out_features == 5


def test_sandwich_norm_normalises_sublayer_outputs():
    model = make(sandwich_norm=True)
    block = model.transformer.h[0]
    with torch.no_grad():
        block.ln_attn_out.weight.fill_(1.0)
        block.mlp.c_fc.weight.zero_()  # MLP output is zero, so the block adds only the normed attention
    x = torch.randn(1, 6, C, dtype=torch.float64)
    a = block.attn(block.ln_1(x))
    out = block(x)
    torch.testing.assert_close(out - x, a / torch.sqrt(a.pow(2).mean(-1, keepdim=True) + 1e-6))


def test_sandwich_norm_on_both_sublayers_with_every_gain_away_from_one():
    """CogView's sandwich norm: x + ln_attn_out(attn(ln_1(x))), then + ln_mlp_out(mlp(ln_2(.))), each sub-layer's
    output normed before it joins the residual stream; the MLP live, and each norm's own gain (make() perturbs them),
    so a norm in the wrong place, or one norm's gain read for another's, shows."""
    model = make(sandwich_norm=True)
    block = model.transformer.h[0]
    x = torch.randn(2, 7, C, dtype=torch.float64)

    def rms(t, w):
        return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    with torch.no_grad():
        h = x + rms(block.attn(rms(x, block.ln_1.weight)), block.ln_attn_out.weight)
        want = h + rms(block.mlp(rms(h, block.ln_2.weight)), block.ln_mlp_out.weight)
        torch.testing.assert_close(block(x), want, rtol=1e-12, atol=1e-12)


def test_gatednorm_gate_reads_y_with_the_norms_gain():
    """GN: y = RMSNorm(x) (its gain included), y' = y * sigmoid(W_up SiLU(W_down y)): the gate reads that same y."""
    n = GatedNorm(8, rank=2).double()
    with torch.no_grad():
        n.norm.weight.copy_(torch.linspace(0.2, 3.0, 8))
    x = torch.randn(3, 8, dtype=torch.float64)
    y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * n.norm.weight
    torch.testing.assert_close(n(x), y * torch.sigmoid(F.silu(y @ n.down.weight.T) @ n.up.weight.T))


def test_mlp_equations():
    for kind, act in [("swiglu", F.silu), ("glu", torch.sigmoid)]:
        mlp = make(mlp=kind).transformer.h[0].mlp
        x = torch.randn(4, C, dtype=torch.float64)
        value, gate = (x @ mlp.c_fc.weight.T).chunk(2, dim=-1)
        torch.testing.assert_close(mlp(x), (value * act(gate)) @ mlp.c_proj.weight.T)
    mlp = make(mlp="gelu").transformer.h[0].mlp
    assert mlp.c_fc.out_features == 4 * C
    torch.testing.assert_close(mlp(x), F.gelu(x @ mlp.c_fc.weight.T) @ mlp.c_proj.weight.T)
    mlp = make(mlp="gelu_tanh").transformer.h[0].mlp  # GPT-2's tanh form (apart from erf's by up to ~1e-3)
    h = x @ mlp.c_fc.weight.T
    tanh_gelu = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
    torch.testing.assert_close(mlp(x), tanh_gelu @ mlp.c_proj.weight.T)
    # the GLUs' default width: 8/3 * n_embd rounded up to a multiple of 64 (533.3 -> 576 at n_embd 200)
    assert GPTConfig(**{**BASE, "n_embd": 200}).hidden_dim == 576 and GPTConfig(**BASE, mlp_hidden=40).hidden_dim == 40


def test_every_norm_takes_norm_eps_and_its_default():
    """norm_eps reaches every norm that divides by a statistic (the residual stream's, QK-norm's, SDPA RMSNorm's);
    None gives 1e-6 for the RMSNorms, 1e-5 for LayerNorm (PyTorch's), whose beta exists only with bias=True."""
    def eps_of(norm):
        return (norm.norm if isinstance(norm, (PreAffine, GatedNorm)) else norm).eps
    for norm, default in [("rmsnorm", 1e-6), ("layernorm", 1e-5), ("preaffine", 1e-6), ("gatednorm", 1e-6)]:
        for eps, want in [(None, default), (0.25, 0.25)]:
            model = GPT(GPTConfig(**BASE, norm=norm, norm_eps=eps, qk_norm=True, sdpa_nonlin="rmsnorm",
                                  sandwich_norm=True))
            block, attn = model.transformer.h[0], model.transformer.h[0].attn
            norms = [block.ln_1, block.ln_2, block.ln_attn_out, block.ln_mlp_out, model.transformer.ln_f]
            assert all(eps_of(n) == want for n in norms), (norm, eps)
            want_rms = 1e-6 if eps is None else eps  # QK-norm's and SDPA RMSNorm's: RMSNorm whatever the norm
            assert attn.q_norm.eps == attn.k_norm.eps == attn.sdpa_norm.eps == want_rms, (norm, eps)
    assert GPT(GPTConfig(**BASE, norm="layernorm")).transformer.ln_f.bias is None
    assert GPT(GPTConfig(**BASE, norm="layernorm", bias=True)).transformer.ln_f.bias is not None


@pytest.mark.parametrize("gate", ["g1", "g2", "g3", "g4", "g5"])
def test_a_block_is_pre_norm_and_its_gate_reads_the_normed_input(gate):
    """x + attn(ln_1(x)), then + mlp(ln_2(.)): each norm before its sub-layer, none after; and the gate's logits at
    every position are X W_theta with X = ln_1(x), the tensor that feeds Q, K and V (not x, not the attention's
    output)."""
    model = make(gate=gate)
    block = model.transformer.h[0]
    x = torch.randn(2, 7, C, dtype=torch.float64)
    logits = []
    block.attn.gate.register_forward_hook(lambda m, args, out: logits.append(args[1]))
    with torch.no_grad():
        out = block(x)
        X = block.ln_1(x)
        h = x + block.attn(X)
        torch.testing.assert_close(out, h + block.mlp(block.ln_2(h)), rtol=1e-12, atol=1e-12)
        width = model.config.gate_logits_width()
        want = (X @ block.attn.c_attn.weight[-width:].T).view(2, 7, *model.config.gate_shape())
    torch.testing.assert_close(logits[0], want, rtol=1e-12, atol=1e-12)


def test_rope_rotates_by_relative_position():
    cos, sin = rope_tables(8, 32, 10000.0)
    q, k = torch.randn(1, 1, 1, 8).double(), torch.randn(1, 1, 1, 8).double()
    c, s = cos.double(), sin.double()

    def dot(m, n):  # q at position m, k at position n
        return (apply_rope(q, c[m:m + 1], s[m:m + 1]) * apply_rope(k, c[n:n + 1], s[n:n + 1])).sum()
    torch.testing.assert_close(dot(7, 3), dot(24, 20))  # depends only on m - n
    assert not torch.allclose(dot(7, 3), dot(7, 4))
    torch.testing.assert_close(apply_rope(q, c[5:6], s[5:6]).norm(), q.norm())  # a rotation


def yarn_reference(head_dim, length, base, s):
    """YaRN as Peng et al. 2023 write it, in float64: per pair d, the wavelength lambda_d = 2 pi / theta_d and
    r = L_trained / lambda_d; gamma(r) = 0 below alpha = 1, 1 above beta = 32, linear between; the new frequency
    (1 - gamma) theta_d / s + gamma theta_d; and sqrt(1/t) = 0.1 ln s + 1 on q and k."""
    angles = []
    for d in range(head_dim // 2):
        theta = base ** (-2 * d / head_dim)
        r = (length / s) / (2 * math.pi / theta)
        gamma = 0.0 if r < 1 else 1.0 if r > 32 else (r - 1) / 31
        angles.append((1 - gamma) * theta / s + gamma * theta)
    a = torch.outer(torch.arange(length, dtype=torch.float64), torch.tensor(angles, dtype=torch.float64))
    m = 0.1 * math.log(s) + 1
    return a.cos() * m, a.sin() * m


def test_rope_scalings():
    """Factor 1 is plain RoPE for every scaling; NTK-aware keeps the fastest pair (head_dim 2's only one) and slows the
    slowest by the factor; YaRN is the paper's formula (and its ramp has pairs on both sides at this size)."""
    D, L, base = 64, 2048, 10000.0
    plain = rope_tables(D, L, base)
    for scaling in ("ntk", "yarn"):
        for table, ref in zip(rope_tables(D, L, base, None, scaling, 1.0), plain):
            torch.testing.assert_close(table, ref, rtol=0, atol=0)
    for table, ref in zip(rope_tables(2, L, base, None, "ntk", 4.0), rope_tables(2, L, base)):  # one pair: the fastest
        torch.testing.assert_close(table, ref, rtol=0, atol=0)
    cos, sin = rope_tables(D, L, base, None, "ntk", 4.0)
    angle = torch.atan2(sin, cos).double()
    # at position 1 each pair's angle is its speed
    slow = base ** (-(D - 2) / D)
    assert angle[1, 0].item() == pytest.approx(1.0, rel=1e-6)
    assert angle[1, -1].item() == pytest.approx(slow / 4, rel=1e-5)
    for table, ref in zip(rope_tables(D, L, base, None, "yarn", 4.0), yarn_reference(D, L, base, 4.0)):
        torch.testing.assert_close(table.double(), ref, rtol=0, atol=2e-4)  # float32 angles up to 2048
    turns = (L / 4) * base ** (-torch.arange(0, D, 2) / D) / (2 * math.pi)
    assert (turns > 32).any() and (turns < 1).any() and ((turns > 1) & (turns < 32)).any()


def test_a_model_runs_past_its_trained_length_with_scaled_rope():
    """block_size 4x, YaRN: the rope tables the model holds are rope_tables' for that scaling, and GPT.with_weights
    gives the same weights a new config (shared, not copied)."""
    model = make(block_size=24)
    longer = GPT.with_weights(GPTConfig(**{**vars(model.config), "block_size": 96, "rope_scaling": "yarn",
                                           "rope_factor": 4.0}), model.state_dict())
    cos, _ = rope_tables(D, 96, 10000.0, None, "yarn", 4.0)
    torch.testing.assert_close(longer.rope_cos, cos)
    assert longer.lm_head.weight.data_ptr() == model.lm_head.weight.data_ptr() == longer.transformer.wte.weight.data_ptr()
    # tied: one Parameter again, counted once (as an optimiser would update it); in eval mode, whatever model's was
    assert longer.lm_head.weight is longer.transformer.wte.weight and longer.num_params() == model.num_params()
    assert not GPT.with_weights(longer.config, model.train().state_dict()).training
    logits, _ = longer.double()(tokens(T=96))
    assert logits.shape == (2, 96, VOCAB) and torch.isfinite(logits).all()


# ----------------------------------------------------------------------------
# Sliding-window attention

def test_window_mask_is_its_definition():
    for n_q, n_k, w, keep in [(7, 7, 3, 0), (7, 7, 3, 2), (1, 9, 4, 1), (3, 10, 1, 0), (5, 5, 8, 0)]:
        mask = window_mask(n_q, n_k, w, keep)
        for a in range(n_q):
            i = n_k - n_q + a  # the query's position
            for j in range(n_k):
                assert mask[a, j].item() == (j <= i and (i - j < w or j < keep)), (n_q, n_k, w, keep, a, j)


@pytest.mark.parametrize("kw", [dict(), dict(gate="g2", pos_emb="learned"), dict(gate="g1", gate_granularity="headwise")])
def test_a_window_as_long_as_the_block_is_full_attention(kw):
    model = make(**kw)
    full, _ = model(tokens(T=24))
    for keep in (0, 3):
        windowed = GPT.with_weights(GPTConfig(**{**vars(model.config), "attn_window": 24, "attn_keep_first": keep}),
                                    model.state_dict())
        torch.testing.assert_close(windowed(tokens(T=24))[0], full, rtol=1e-9, atol=1e-9)  # SDPA: mask vs is_causal


def test_a_one_layer_window_sees_only_its_last_keys():
    """One layer with RoPE (attention depends on relative positions only): position i's logits under a window of w
    are the full model's at the end of the w tokens ending at i; with the first position kept they differ."""
    model = make(n_layer=1)
    x, w = tokens(T=24), 5
    windowed = GPT.with_weights(GPTConfig(**{**vars(model.config), "attn_window": w}), model.state_dict())
    logits, _ = windowed(x)
    for i in (w, 11, 23):
        alone, _ = model(x[:, i - w + 1:i + 1])
        torch.testing.assert_close(logits[:, i], alone[:, -1], rtol=1e-9, atol=1e-9)
    sinks = GPT.with_weights(GPTConfig(**{**vars(model.config), "attn_window": w, "attn_keep_first": 1}),
                             model.state_dict())
    assert not torch.allclose(sinks(x)[0][:, 11], logits[:, 11])
    torch.testing.assert_close(sinks(x)[0][:, :w], logits[:, :w], rtol=0, atol=0)  # the window has not cut yet


def test_windowed_decoding_matches_the_full_forward():
    model = make(attn_window=6, attn_keep_first=2)
    idx = tokens(T=20)
    full, _ = model(idx)
    cache = [{} for _ in model.transformer.h]
    model._forward(idx[:, :9], cache=cache)
    for t in range(9, 20):
        step = model._forward(idx[:, t:t + 1], start=t, cache=cache)
        torch.testing.assert_close(step[:, 0], full[:, t], rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="attn_window"):
        Probe(model).__enter__()


# ----------------------------------------------------------------------------
# KV-cache generation equals recomputing the full sequence

@pytest.mark.parametrize("name,kw", [("g1", {}), ("g2_learned", dict(gate="g2", pos_emb="learned")),
                                     ("g5_gatednorm", dict(gate="g5", norm="gatednorm")),
                                     ("g3_qknorm", dict(gate="g3", qk_norm=True)), ("none", dict(gate="none"))])
def test_kv_cache_matches_full_recompute(name, kw):
    model = make(**kw)
    prompt = tokens(B=2, T=5)
    # 30 new tokens with block_size 24: the window slides past the block, where the context is cropped
    out = model.generate(prompt, 30, top_k=1)
    idx = prompt
    for _ in range(30):
        logits, _ = model(idx[:, -model.config.block_size:])
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, idx)
    # and the cached logits themselves equal the full forward's
    cache = [{} for _ in model.transformer.h]
    full, _ = model(idx[:, :12])
    model._forward(idx[:, :8], cache=cache)
    for t in range(8, 12):
        step = model._forward(idx[:, t:t + 1], start=t, cache=cache)
        torch.testing.assert_close(step[:, 0], full[:, t], rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="one token at a time"):  # two new queries would each see the other's key
        model._forward(idx[:, 12:14], start=12, cache=cache)


@pytest.mark.parametrize("keep_first", [False, True])
def test_generate_past_block_size_samples_from_the_model_on_the_cropped_context(keep_first):
    """Each step samples from exactly the logits of the model run on the last block_size tokens (keep_first: token 0,
    then the last block_size - 1), computed without an autograd graph."""
    model, T = make(), BASE["block_size"]
    seen = []
    hook = model.lm_head.register_forward_hook(lambda m, args, out: seen.append((out[:, -1], out.requires_grad)))
    torch.manual_seed(0)
    out = model.generate(tokens(B=2, T=5), 30, keep_first=keep_first)  # 35 tokens: cropped for the last 11 steps
    hook.remove()
    assert len(seen) == 30 and not any(grad for _, grad in seen)
    for n, (logits, _) in enumerate(seen):
        ctx = out[:, :5 + n]
        if ctx.size(1) > T:
            ctx = torch.cat([ctx[:, :1], ctx[:, -(T - 1):]], dim=1) if keep_first else ctx[:, -T:]
        torch.testing.assert_close(logits, model(ctx)[0][:, -1], rtol=1e-10, atol=1e-10, msg=f"step {n}")


def test_generate_samples_and_respects_top_k():
    model = make()
    torch.manual_seed(0)
    out = model.generate(tokens(B=3, T=4), 10, temperature=0.8, top_k=5)
    assert out.shape == (3, 14) and out.min() >= 0 and out.max() < VOCAB
    for t in range(4, 14):  # each new token among the 5 likeliest after the text before it
        logits, _ = model(out[:, :t])
        assert (logits[:, -1].topk(5).indices == out[:, t:t + 1]).any(-1).all(), t
    torch.manual_seed(0)
    no_top_k = model.generate(tokens(B=3, T=4), 10, top_k=0)  # 0: no top-k (sample.py's meaning), not an empty one
    torch.manual_seed(0)
    assert torch.equal(no_top_k, model.generate(tokens(B=3, T=4), 10))


def test_a_low_temperature_in_half_precision_is_greedy_not_nan():
    """Logits divided by a small temperature overflow fp16's 65504: generate divides in fp32, so a near-zero
    temperature gives the likeliest token (fp16 autocast: a GPU without bf16)."""
    model = make(dtype=torch.float16)
    x = tokens(B=2, T=5)
    with torch.no_grad():
        greedy = model(x)[0][:, -1].float().argmax(-1)
    torch.manual_seed(0)
    assert torch.equal(model.generate(x, 1, temperature=1e-6)[:, -1], greedy)


def test_rms_norm_computes_in_the_wider_dtype_of_input_and_gain():
    """q and k are bf16 under a CPU's autocast and the QK-norm's gain fp32: normalised in fp32, as CUDA's autocast
    does (its output fp32 too), without PyTorch's warning that the fused kernel cannot take mixed dtypes; and a
    float64 input is not cut to the gain's float32."""
    norm = RMSNorm(16)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(3, 16).to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = norm(x)
    assert y.dtype == torch.float32
    want = x.float() / torch.sqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * norm.weight
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-6)
    x64 = torch.randn(3, 16, dtype=torch.float64)
    want = x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * norm.weight.double()
    torch.testing.assert_close(norm(x64), want, rtol=1e-12, atol=1e-14)


# ----------------------------------------------------------------------------
# The measurements (GA Table 4): F-Attn, M-Act, gate score

def test_stats_on_uniform_attention():
    """With W_q = 0 every score is 0, so query i attends uniformly: p0 = 1/(i+1)."""
    model = make(gate="g1")
    T = 16
    for block in model.transformer.h:
        with torch.no_grad():
            block.attn.c_attn.weight[:H * D].zero_()
            block.attn.c_attn.weight[-H * D:].zero_()  # W_theta = 0: sigmoid(0) = 0.5 everywhere
    idx = tokens(T=T)
    with Probe(model) as probe:
        logits, loss = model(idx, idx)
    stats = probe.stats
    expected = sum(1 / (i + 1) for i in range(1, T)) / (T - 1)
    assert stats["first_token_attn"] == pytest.approx([expected] * 2, abs=1e-6)  # statistics are computed in float32
    assert stats["gate_mean"] == [0.5, 0.5]
    assert stats["gate_below_0.1"] == [0.0, 0.0] and stats["gate_below_0.5"] == [0.0, 0.0]
    plain_logits, plain_loss = model(idx, idx)
    assert torch.equal(plain_logits, logits) and torch.equal(plain_loss, loss)  # the probe changes nothing
    assert not any(m._forward_hooks for m in model.modules())  # and leaves no hook behind


def test_stats_on_a_sink_and_max_activation():
    """A huge key on token 0 makes every query attend to it: F-Attn -> 1. M-Act is max |h| of a block's output
    within each window, averaged over the windows."""
    model = make(gate="none")
    acts = []
    hooks = [b.register_forward_hook(lambda m, i, o: acts.append(o.abs().amax((1, 2)).mean().item()))
             for b in model.transformer.h]
    idx = tokens(T=10)
    with Probe(model) as probe:
        model(idx)
    stats = probe.stats
    for h in hooks:
        h.remove()
    assert stats["max_act"] == pytest.approx(acts, rel=1e-12)
    assert stats["gate_mean"] is None and stats["gate_below_0.1"] is None
    assert all(0 < p < 1 for p in stats["first_token_attn"])

    q = torch.randn(1, H, 10, D, dtype=torch.float64)
    k = torch.randn(1, HKV, 10, D, dtype=torch.float64)
    q[..., 0] = 1 + q[..., 0].abs()  # every query has a positive channel 0 ...
    k[:, :, 0] = 0
    k[:, :, 0, 0] = 1000  # ... and token 0's key is huge there: a sink
    from kernels import first_token_attention
    p0 = first_token_attention(q, k)
    assert p0[:, :, 1:].min() > 0.999 and (p0[:, :, 0] == 1).all()
    k[:, :, 0, 0] = -1000  # the opposite: nobody but token 0 itself looks at token 0
    p0 = first_token_attention(q, k)
    assert p0[:, :, 1:].max() < 1e-6 and (p0[:, :, 0] == 1).all()


def test_attention_maps_are_causal_distributions_consistent_with_stats():
    model = make()
    idx = tokens(B=1, T=12)
    maps = attention_maps(model, idx)
    with Probe(model) as probe:
        model(idx)
    stats = probe.stats
    assert len(maps) == 2 and maps[0].shape == (1, H, 12, 12)
    for layer, m in enumerate(maps):
        torch.testing.assert_close(m.sum(-1), torch.ones(1, H, 12, dtype=m.dtype))
        assert (m.triu(1) == 0).all()
        assert m[0, :, 1:, 0].mean().item() == pytest.approx(stats["first_token_attn"][layer], abs=1e-6)


# ----------------------------------------------------------------------------
# The loss in chunks (loss_chunk: kernels.chunked_loss)

def loss_and_grads(model, idx, targets, scale=1.0, loss=None):
    """The loss (the model's own, or loss(logits)) and the parameters' gradients of scale * loss (train.py scales
    the loss for gradient accumulation)."""
    model.zero_grad()
    logits, own = model(idx, targets)
    loss = own if loss is None else loss(logits)
    (scale * loss).backward()
    return logits, loss.detach(), {name.removeprefix("_orig_mod."): p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("chunk", [1, 7, 40, 1000])  # one row, a ragged last chunk, rows / chunk exact, one chunk
def test_chunked_loss_matches_float64_cross_entropy(chunk, tie):
    """loss_chunk: the loss and gradients of cross-entropy over the whole logits in float64, targets of -1 left out
    of the mean; scaled by what the loss was scaled by; no logits returned (they are never whole)."""
    idx = tokens()
    targets = idx.roll(-1, 1)
    targets[0, :6] = -1
    _, loss_ref, grads_ref = loss_and_grads(make(tie_embeddings=tie), idx, None, loss=lambda logits: F.cross_entropy(
        logits.flatten(0, 1), targets.flatten(), ignore_index=-1))
    assert loss_ref.dtype == torch.float64
    logits, loss, grads = loss_and_grads(make(tie_embeddings=tie, loss_chunk=chunk), idx, targets, scale=3.0)
    assert logits is None
    assert loss.dtype == torch.float64 and loss.item() == pytest.approx(loss_ref.item(), rel=1e-12)
    for name, g in grads.items():
        assert g.dtype == torch.float64
        torch.testing.assert_close(g, 3.0 * grads_ref[name], rtol=1e-8, atol=1e-9, msg=name)  # float64 sums in another order


def test_chunked_loss_under_bf16_autocast_is_as_accurate_as_the_plain_path():
    """Under autocast both paths take their matmuls in bf16 and the softmax in fp32: measured against float64, the
    chunked loss and its gradients are no further off than the plain path's (F.cross_entropy of the fp32 logits)."""
    gen = torch.Generator().manual_seed(3)
    x, w = torch.randn(60, 32, generator=gen), 0.3 * torch.randn(500, 32, generator=gen)
    t = torch.randint(0, 500, (60,), generator=gen)
    t[:7] = -1

    def loss_and_grads_of(fn, dtype):
        xl, wl = x.to(dtype, copy=True).requires_grad_(), w.to(dtype, copy=True).requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.float32):
            loss = fn(xl, wl)
        loss.backward()
        return [loss.detach().double(), xl.grad.double(), wl.grad.double()]

    def plain(xl, wl):
        return F.cross_entropy((xl @ wl.t()).float(), t, ignore_index=-1)
    ref = loss_and_grads_of(plain, torch.float64)
    errors = {name: [((a - b).norm() / b.norm()).item() for a, b in zip(loss_and_grads_of(fn, torch.float32), ref)]
              for name, fn in (("plain", plain), ("chunked", lambda xl, wl: chunked_loss(xl, wl, t, 16)))}
    for i, what in enumerate(["loss", "dx", "dw"]):
        assert errors["plain"][i] > 1e-5, what  # bf16 rounding is there to see
        assert errors["chunked"][i] < 1.5 * errors["plain"][i] + 1e-4, (what, errors)


class CreatedTensors:
    """A dispatch mode that records each tensor an op creates, (op name, shape), in the forward and backward pass
    (every op, below autograd and autocast)."""

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        created = self.created = []

        class Record(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in out if isinstance(out, (tuple, list)) else [out]:
                    if isinstance(t, torch.Tensor) and not func.is_view:  # a view (w.t()) makes no new tensor
                        created.append((func.overloadpacket.__name__, tuple(t.shape)))
                return out
        self.mode = Record()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def test_chunked_loss_never_holds_the_whole_logits():
    """The point of loss_chunk: no tensor of logits (or of their gradient) larger than a chunk's, rows x vocab, is
    made in the forward or backward pass; the plain path makes several of all rows."""
    vocab, B, T = 4096, 4, 24
    idx = tokens(B, T)
    for chunk in (0, 16):
        model = make(vocab_size=vocab, loss_chunk=chunk)
        with CreatedTensors() as ops:
            model(idx, idx.roll(-1, 1))[1].backward()
        rows = [math.prod(shape[:-1]) for _, shape in ops.created if len(shape) >= 2 and shape[-1] == vocab]
        assert max(rows) == (chunk or B * T), (chunk, sorted(set(rows)))


@pytest.mark.parametrize("bad", [-100, 50])
def test_chunked_loss_refuses_a_target_that_is_not_a_class_or_minus_1(bad):
    """As F.cross_entropy(ignore_index=-1): -100 (PyTorch's default ignore_index) or an id past the vocabulary is an
    error on both of chunked_loss's paths, not a row silently counted as class 0."""
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(6, 8, generator=gen, requires_grad=True), torch.randn(50, 8, generator=gen)
    t = torch.tensor([1, 2, bad, 3, -1, 4])
    for grad in (True, False):
        with torch.set_grad_enabled(grad), pytest.raises((IndexError, RuntimeError), match="out of bounds"):
            chunked_loss(x, w, t, 4)


def test_chunked_loss_without_gradients():
    """Under no_grad, or for inputs that need none, the loss alone: one matmul a chunk (the logits), not three."""
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(30, 8, generator=gen, dtype=torch.float64), torch.randn(50, 8, generator=gen, dtype=torch.float64)
    t = torch.randint(0, 50, (30,), generator=gen)
    expected = F.cross_entropy(x @ w.t(), t).item()

    def loss_and_matmuls():
        with CreatedTensors() as ops:
            loss = chunked_loss(x, w, t, 4)
        return loss, sum(name in ("mm", "addmm", "addmm_") for name, _ in ops.created)  # addmm_: into dw
    loss, matmuls = loss_and_matmuls()
    assert loss.item() == pytest.approx(expected, rel=1e-12) and matmuls == 8  # 8 chunks of 4 rows (the last of 2)
    x.requires_grad_()
    loss, matmuls = loss_and_matmuls()
    assert loss.requires_grad and matmuls == 3 * 8
    with torch.no_grad():
        loss, matmuls = loss_and_matmuls()
    assert not loss.requires_grad and loss.item() == pytest.approx(expected, rel=1e-12) and matmuls == 8
    # as F.cross_entropy: nothing to count gives NaN; an ignored row's non-finite logits stay out of the loss
    assert math.isnan(chunked_loss(x, w, torch.full_like(t, -1), 4).item())
    ignored = t.clone()
    ignored[3] = -1
    with torch.no_grad():
        x[3] = float("inf")
    assert chunked_loss(x[:8], w, ignored[:8], 4).item() == pytest.approx(
        F.cross_entropy(x[:8] @ w.t(), ignored[:8], ignore_index=-1).item(), rel=1e-12)


def test_chunked_loss_under_torch_compile():
    """torch.compile(fullgraph=True) traces the chunks and the precomputed gradients: the same loss and gradients."""
    idx = tokens()
    model = make(dtype=torch.float32, loss_chunk=16)
    _, loss, grads = loss_and_grads(model, idx, idx)
    _, loss_c, grads_c = loss_and_grads(torch.compile(model, backend="aot_eager", fullgraph=True), idx, idx)
    assert loss_c.item() == pytest.approx(loss.item(), rel=1e-6)
    for name, g in grads.items():
        torch.testing.assert_close(grads_c[name], g, rtol=1e-5, atol=1e-7, msg=name)


# ----------------------------------------------------------------------------
# Init, tying, optimiser, FLOPs

@pytest.mark.parametrize("backend", ["torch", pytest.param("triton", marks=kernel_on_the_cpu)])
def test_c_attns_aligned_rows_compute_what_an_nn_linear_computes(backend):
    """c_attn (kernels.AlignedLinear) with its output rows padded, as a GPU gets them (here on the CPU), gives the
    unpadded model's loss and gradients, with PyTorch's attention and with the fused kernel (which reads q, k, v and
    the gate logits at the padded stride), the same parameters and state_dict, hooks that fire, and each token's
    outputs a multiple of 64 elements apart (192): a headwise gate's 3 * 48 + 3 = 147 outputs no longer set the
    stride."""
    import copy
    torch.manual_seed(0)
    config = GPTConfig(block_size=16, vocab_size=64, n_layer=2, n_head=3, n_embd=48, bias=True, attn_backend=backend,
                       gate_granularity="headwise")
    plain = GPT(config)
    padded = copy.deepcopy(plain)
    for block in padded.transformer.h:
        block.attn.c_attn.devices = ("cpu",)  # a GPU's path, on this CPU
    c_attn, x = padded.transformer.h[0].attn.c_attn, torch.randn(2, 16, 48)
    assert isinstance(c_attn, torch.nn.Linear) and c_attn.weight.shape == (147, 48)
    seen = []
    hook = c_attn.register_forward_pre_hook(lambda module, args: seen.append(args[0].shape))  # lab/evaluate's kind
    out = c_attn(x)
    hook.remove()
    assert seen == [(2, 16, 48)] and out.shape == (2, 16, 147) and out.stride()[-2:] == (64 * 3, 1)
    torch.testing.assert_close(out, F.linear(x, c_attn.weight, c_attn.bias), rtol=1e-6, atol=1e-6)
    assert plain.transformer.h[0].attn.c_attn(x).stride()[-2:] == (147, 1)  # on a CPU: as nn.Linear
    assert c_attn(x[:, :1]).stride()[-2:] == (147, 1)  # one token a sequence (decoding): nothing to align
    idx = torch.randint(0, 64, (2, 17))
    losses = []
    for model in (plain, padded):
        _, loss = model(idx[:, :-1], idx[:, 1:])
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-6, atol=1e-6)
    grads = dict(padded.named_parameters())
    assert grads.keys() == dict(plain.named_parameters()).keys()
    assert padded.state_dict().keys() == plain.state_dict().keys()
    for name, p in plain.named_parameters():
        torch.testing.assert_close(grads[name].grad, p.grad, rtol=1e-5, atol=1e-6, msg=name)
    for model in (plain, padded):  # decoding with the KV cache reads the padded rows too
        model.eval()
    torch.manual_seed(1)
    a = plain.generate(idx[:, :4], 6, top_k=1)
    torch.manual_seed(1)
    assert torch.equal(padded.generate(idx[:, :4], 6, top_k=1), a)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="c_attn pads its rows on a GPU only")
def test_on_a_gpu_c_attn_pads_its_rows_by_default():
    """On CUDA, with no setting: GPT-2 small's headwise c_attn (2,316 outputs) is read at a row stride of 2,368, and
    in bf16 every token's row starts 16-byte aligned; one token a sequence (decoding) is left unpadded."""
    attn = GPT(GPTConfig(n_layer=1, gate_granularity="headwise")).cuda().transformer.h[0].attn
    x = torch.randn(2, 8, 768, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out, one = attn.c_attn(x), attn.c_attn(x[:, :1])
    assert out.shape[-1] == 2316 and out.stride()[-2:] == (2368, 1) and (out.stride(-2) * out.element_size()) % 16 == 0
    assert one.stride()[-2:] == (2316, 1)


def test_weight_tying_and_init():
    cfg = GPTConfig(n_layer=6, n_head=4, n_embd=256, vocab_size=1000, block_size=64)
    model = GPT(cfg)
    assert model.lm_head.weight is model.transformer.wte.weight
    attn = model.transformer.h[0].attn
    assert attn.c_attn.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert attn.c_attn.weight[-cfg.n_embd:].std().item() == pytest.approx(0.02, rel=0.05)  # W_theta
    for proj in (attn.c_proj, model.transformer.h[0].mlp.c_proj):  # residual projections scaled by depth
        assert proj.weight.std().item() == pytest.approx(0.02 / math.sqrt(2 * 6), rel=0.05)
    # untied and learned embeddings: N(0, 0.02) too (not nn.Embedding's N(0, 1)); every bias starts at 0
    model = GPT(GPTConfig(**{**vars(cfg), "tie_embeddings": False, "pos_emb": "learned", "bias": True}))
    for emb in (model.transformer.wte, model.transformer.wpe):
        assert emb.weight.std().item() == pytest.approx(0.02, rel=0.05)
    biases = [m.bias for m in model.modules() if isinstance(m, torch.nn.Linear) and m.bias is not None]
    assert biases and all(torch.equal(b, torch.zeros_like(b)) for b in biases)


def test_the_papers_initial_values():
    """What each paper starts from (make() perturbs these, so no other test sees them): PreAffine's lambda 1, DyT's
    alpha 0.5 with gamma 1 and beta 0, the input-independent gate's logits 0 (every score 0.5), RMSNorm's gain 1."""
    pre = GPT(GPTConfig(**BASE, norm="preaffine")).transformer.h[0].ln_1
    assert torch.equal(pre.pre_scale, torch.ones(C)) and torch.equal(pre.norm.weight, torch.ones(C))
    dyt = GPT(GPTConfig(**BASE, norm="dyt")).transformer.ln_f
    assert dyt.alpha.item() == 0.5 and torch.equal(dyt.weight, torch.ones(C)) and torch.equal(dyt.bias, torch.zeros(C))
    gate = GPT(GPTConfig(**BASE, gate_input="none")).transformer.h[0].attn.gate
    assert torch.equal(gate.gate_param, torch.zeros(H * D))


def test_configure_optimizers_decays_only_matrices():
    model = GPT(GPTConfig(**BASE, norm="dyt", gate_input="none"))
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    assert sum(p.numel() for g in opt.param_groups for p in g["params"]) == model.num_params()
    assert opt.defaults["fused"]  # CPU and CUDA have the fused kernel, which train.optimizer_step relies on
    # elsewhere (MPS, whose fused AdamW ignores found_inf; here the meta device stands in for it): the plain loop
    assert not GPT(GPTConfig(**BASE)).to("meta").configure_optimizers(0.1, 1e-3).defaults["fused"]
    ids = {id(p) for p in no_decay["params"]}
    attn = model.transformer.h[0].attn
    assert id(attn.gate.gate_param) in ids and id(model.transformer.h[0].ln_1.alpha) in ids


def test_flops_and_mfu(monkeypatch):
    model = GPT(GPTConfig(**BASE))
    N, T = model.num_params(), 24
    assert probe.flops_per_token(model, T) == 6 * N + 6 * 2 * H * D * T
    # untied, the token embedding is a second matrix but a lookup: the FLOPs are the tied model's
    untied = GPT(GPTConfig(**BASE, tie_embeddings=False))
    assert untied.num_params() == N + untied.transformer.wte.weight.numel()
    assert probe.flops_per_token(untied, T) == probe.flops_per_token(model, T)
    learned = GPT(GPTConfig(**BASE, pos_emb="learned"))  # its position embedding is left out, as in nanoGPT
    assert learned.num_params() == learned.num_params(non_embedding=False) - BASE["block_size"] * C
    # 10 sequences of T tokens in 0.5 s against a 1e9 FLOP/s peak
    assert probe.estimate_mfu(model, 10, 0.5, peak=1e9) == pytest.approx(probe.flops_per_token(model, T) * T * 10 / 0.5 / 1e9)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert probe.estimate_mfu(model, 10, 0.5) is None  # unknown peak on CPU: no made-up number
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for name, peak in [("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H100 NVL", 835e12),
                       ("NVIDIA H200", 989e12), ("NVIDIA GH200 480GB", 989e12), ("NVIDIA H800 PCIe", 756e12),
                       ("NVIDIA L40", 181e12), ("NVIDIA L40S", 362e12), ("NVIDIA L4", 121e12),
                       ("NVIDIA A100-SXM4-80GB", 312e12), ("Some Future GPU", None)]:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None, n=name: n)
        assert probe.peak_flops() == peak


# ----------------------------------------------------------------------------
# Invalid configs: a ValueError that names the field and lists the valid values

@pytest.mark.parametrize("kw,must_mention", [
    (dict(gate="g7"), ["gate", "'g1'", "'g5'"]),
    (dict(norm="batchnorm"), ["norm", "'dyt'", "'gatednorm'"]),
    (dict(mlp="relu"), ["mlp", "'swiglu'"]),
    (dict(pos_emb="alibi"), ["pos_emb", "'rope'"]),
    (dict(gate_act="softmax"), ["gate_act", "'ns_sigmoid'"]),
    (dict(gate_op="sub"), ["gate_op", "'add'"]),
    (dict(gate_input="attn"), ["gate_input", "'hidden'"]),
    (dict(gate_granularity="channel"), ["gate_granularity", "'headwise'"]),
    (dict(sdpa_nonlin="gelu"), ["sdpa_nonlin", "'rmsnorm'"]),
    (dict(attn_backend="cuda"), ["attn_backend", "'triton'"]),
    (dict(gate="g3", gate_granularity="headwise"), ["gate_granularity", "'g1'", "'g2'"]),
    (dict(gate="g5", gate_shared=True), ["gate_shared", "'g1'"]),
    (dict(gate_granularity="headwise", gate_shared=True), ["gate_shared", "elementwise"]),
    (dict(gate="none", gate_act="silu"), ["gate_act", "gate='none'"]),
    (dict(gatednorm_rank=4), ["gatednorm_rank=4", "norm='rmsnorm'", "16"]),  # a rank for a GatedNorm not built
    (dict(norm="layernorm", gatednorm_rank=4), ["gatednorm_rank", "norm='layernorm'"]),
    (dict(n_head=4, n_kv_head=3), ["n_head", "n_kv_head"]),
    (dict(n_embd=30), ["n_embd", "n_head"]),
    (dict(n_embd=12, n_head=4, n_kv_head=4), ["rope", "head_dim"]),
    (dict(dropout=1.5), ["dropout"]),
    (dict(dropout=1.0), ["dropout", "[0, 1)"]),  # every activation zeroed
    (dict(n_kv_head=0), ["n_kv_head", "positive"]),
    (dict(head_dim=0), ["head_dim", "positive"]),
    (dict(norm_eps=0.0), ["norm_eps", "positive"]),
    (dict(norm="dyt", norm_eps=1e-6), ["norm_eps", "dyt"]),
    (dict(gate="none", gate_shared=True), ["gate_shared", "gate='none'"]),
    (dict(gate="none", gate_input="none"), ["gate_input", "gate='none'"]),
    (dict(gate="g4", gate_granularity="headwise"), ["gate_granularity", "'g1'", "'g2'"]),
    (dict(gate="g5", gate_granularity="headwise"), ["gate_granularity", "'g1'", "'g2'"]),
    (dict(n_layer=0), ["n_layer"]),
    (dict(mlp_hidden=-3), ["mlp_hidden"]),
    (dict(gate="g5", match_params=True, mlp_hidden=4), ["match_params", "mlp_hidden"]),
    (dict(gate="g5", match_params=True, mlp_hidden=11), ["match_params", "mlp_hidden"]),  # G5 is worth 11 units
    (dict(rope_base=0.0), ["rope_base", "> 1"]),  # RoPE's angles would be NaN: a run of NaN losses, no word why
    (dict(rope_base=-10000.0), ["rope_base", "> 1"]),
    (dict(rope_base=float("inf")), ["rope_base", "> 1"]),
    (dict(rope_scaling="linear"), ["rope_scaling", "'yarn'"]),
    (dict(rope_factor=4.0), ["rope_factor", "rope_scaling", "'ntk'"]),
    (dict(rope_scaling="yarn", rope_factor=0.5), ["rope_factor", ">= 1"]),
    (dict(rope_scaling="yarn"), ["rope_factor=1.0", "rope_scaling='yarn'", "does nothing"]),  # plain RoPE
    (dict(rope_scaling="ntk", rope_factor=2.0, pos_emb="learned"), ["rope_scaling", "learned"]),
    (dict(rope_base=5e5, pos_emb="learned"), ["rope_base", "learned"]),
    (dict(attn_window=0), ["attn_window", "positive"]),
    (dict(attn_keep_first=4), ["attn_keep_first", "attn_window"]),
    (dict(attn_window=8, attn_keep_first=-1), ["attn_keep_first"]),
    (dict(attn_window=8, attn_backend="triton"), ["attn_window", "Triton", "'torch'"]),
    (dict(loss_chunk=-1), ["loss_chunk", ">= 0"]),
    (dict(loss_chunk=2.5), ["loss_chunk", "integer"]),
])
def test_invalid_config_raises_helpful_error(kw, must_mention):
    with pytest.raises(ValueError) as err:
        GPTConfig(**{**BASE, **kw})
    for word in must_mention:
        assert word in str(err.value)


def test_every_gate_flag_is_refused_without_a_gate():
    """Each gate_ flag at any value but its default does nothing with gate='none', so it is refused rather than
    mislead a sweep; the rule reads the dataclass, so a gate_ flag added later is held by it too."""
    fields = GPTConfig.__dataclass_fields__
    names = [name for name in fields if name.startswith("gate_")]
    assert len(names) >= 5, names
    for name in names:
        default = fields[name].default
        for value in [v for v in VALID.get(name, (not default,)) if v != default]:
            with pytest.raises(ValueError, match=re.escape(f"GPTConfig.{name}={value!r} has no effect with gate='none'")):
                GPTConfig(**{**BASE, "gate": "none", name: value})


def test_sequence_longer_than_block_size_raises():
    model = make()
    with pytest.raises(ValueError, match="block_size"):
        model(tokens(T=25))
    with pytest.raises(ValueError, match="block_size"):  # one token, but at position 24: past the block too
        model._forward(tokens(T=1), start=24)


def test_generate_never_samples_ids_at_or_past_n_vocab():
    """vocab_size's padding past the tokenizer's n_vocab has no text: even where the model puts most of its
    probability there (here: a large bias on the last 30 ids through the tied embedding's last rows) none is sampled,
    with or without top-k, and a top_k larger than n_vocab keeps every allowed id."""
    model = make()
    with torch.no_grad():
        model.lm_head.weight[VOCAB - 30:] *= 50  # the padding rows: their logits dwarf the others'
    for top_k in (None, 5, 1000):
        torch.manual_seed(0)
        out = model.generate(tokens(B=3, T=4), 20, top_k=top_k, n_vocab=VOCAB - 30)
        assert out[:, 4:].max() < VOCAB - 30, top_k

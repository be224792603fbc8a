"""
A compact GPT with a flag for every gate variant and norm type of two Qwen papers:
  GA: Gated Attention for Large Language Models: Non-linearity, Sparsity, and Attention-Sink-Free (arXiv 2505.06708)
  GN: A Unified View of Attention and Residual Sinks: Outlier-Driven Rescaling is Essential for Transformer Training
      (arXiv 2601.22966)

Read top to bottom: config -> gate -> norms -> RoPE -> attention -> MLP -> block -> GPT -> config checks (how the
attention and the loss are computed fast is kernels.py's part). The paper's G1 gate, Y' = Y * sigmoid(X W_theta):
  1. the gate_* fields of GPTConfig say where and how (gate="g1": on each head's SDPA output);
  2. CausalSelfAttention.__init__: W_theta is no module of its own but the last rows of c_attn, the matmul that
     computes Q, K and V from X (the block's input after the pre-attention norm); qkvg_sizes says how many;
  3. CausalSelfAttention.project splits c_attn(x) into q, k, v and g = X W_theta, and Gate.logits shapes g per head;
  4. Gate (its forward and score): Y * act(g), act the sigmoid by default;
  5. the line `y = self.gate(y, g)  # G1` in CausalSelfAttention.forward, on each head's SDPA output Y (the fused
     kernel of kernels.py does the same multiply in its epilogue, when asked for);
  6. c_proj (W_O) mixes the gated heads."""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

import kernels

# ----------------------------------------------------------------------------
# Config. Each flag's valid values are in VALID (bottom of the file); lab/variants.py says what each flag does, in
# the papers' terms, and which paper row it implements (docs/flags.md shows that as a table).
@dataclass
class GPTConfig:
    block_size: int = 1024  # the context length in tokens
    vocab_size: int = 50304  # GPT-2's 50257 padded up to a multiple of 64 for speed
    n_layer: int = 12  # transformer blocks
    n_head: int = 12  # query heads
    n_kv_head: int = None  # None -> n_head (plain multi-head attention); fewer -> GQA
    n_embd: int = 768  # the residual stream's width
    head_dim: int = None  # None -> n_embd // n_head; Qwen3 sets it apart, so n_head * head_dim may differ from n_embd
    dropout: float = 0.0  # on the embeddings and each sub-layer's output (not on attention probabilities)
    bias: bool = False  # biases in the linear layers and LayerNorm
    pos_emb: str = "rope"  # or learned
    rope_base: float = 10000.0  # RoPE's theta: the slowest pair turns once in 2 pi rope_base^(1 - 2/head_dim) tokens
    rope_scaling: str = "none"  # ntk, yarn: run past the trained length; see rope_tables
    rope_factor: float = 1.0  # rope_scaling's s: block_size is s times the length the model was trained on
    mlp: str = "swiglu"  # glu, gelu, gelu_tanh (GPT-2's tanh approximation of GELU)
    mlp_hidden: int = None  # None -> 4*n_embd for gelu, ~8/3*n_embd (multiple of 64) for GLUs; see hidden_dim
    norm: str = "rmsnorm"  # layernorm, dyt, preaffine, gatednorm: the residual stream's norms
    norm_eps: float = None  # None -> 1e-6 for RMSNorm and the norms built on it, 1e-5 for LayerNorm (PyTorch's)
    gatednorm_rank: int = 16  # with norm="gatednorm": the rank of its gate's bottleneck
    sandwich_norm: bool = False  # a norm on each sub-layer's output too, before the residual add
    qk_norm: bool = False  # RMSNorm on each head's queries and keys (Qwen3)
    gate: str = "g1"  # where: none, g1 (SDPA output), g2 (values), g3 (keys), g4 (queries), g5 (after W_O)
    gate_granularity: str = "elementwise"  # or headwise: one score per head
    gate_shared: bool = False  # one score vector shared by every head
    gate_op: str = "mul"  # or add: Y + act(XW)
    gate_act: str = "sigmoid"  # silu, ns_sigmoid, identity
    gate_input: str = "hidden"  # or none: learned scores that do not depend on the input
    sdpa_nonlin: str = "none"  # rmsnorm, silu: a non-linearity at G1, beside any gate (GA's rows: with gate='none')
    match_params: bool = False  # shrink the MLP so the total parameters match gate='none'
    attn_window: int = None  # sliding-window attention: each query sees its last attn_window keys (itself included)
    attn_keep_first: int = 0  # with attn_window: the first positions every query sees too (StreamingLLM's sinks)
    tie_embeddings: bool = True  # lm_head shares wte's weight matrix (GPT-2, nanoGPT); False: each its own
    attn_backend: str = "auto"  # auto (PyTorch's attention; kernels.FUSED_BY_DEFAULT), torch, triton (the fused kernel)
    loss_chunk: int = 0  # the training loss this many rows of logits at a time (0: all at once); kernels.chunked_loss

    def __post_init__(self):
        if self.n_kv_head is None:
            self.n_kv_head = self.n_head
        # the usual split of the width among the heads; left None, for check_config to say so, if it is not even
        if self.head_dim is None and all(isinstance(n, int) and n > 0 for n in (self.n_embd, self.n_head)) \
                and self.n_embd % self.n_head == 0:
            self.head_dim = self.n_embd // self.n_head
        check_config(self)

    def gate_shape(self):
        """Gate scores per token at this gate position: (groups, width), e.g. G1 elementwise -> (n_head, head_dim).
        A score broadcasts over a head's channels when width == 1 (headwise), over the heads when groups == 1."""
        if self.gate == "none":
            return None
        if self.gate == "g5":
            return (1, self.n_embd)
        heads = self.n_head if self.gate in ("g1", "g4") else self.n_kv_head  # G2, G3 gate values, keys: KV heads
        return (1 if self.gate_shared else heads, 1 if self.gate_granularity == "headwise" else self.head_dim)

    def gate_logits_width(self):
        """How many of c_attn's outputs are gate logits: one per score when the gate reads its input, else 0."""
        return 0 if self.gate == "none" or self.gate_input == "none" else math.prod(self.gate_shape())

    def gate_params_per_layer(self):
        if self.gate != "none" and self.gate_input == "none":
            return math.prod(self.gate_shape())  # the learned logits themselves
        return self.gate_logits_width() * (self.n_embd + self.bias)  # W_theta's rows of c_attn (and their biases)

    @property
    def hidden_dim(self):
        """The MLP width actually built: mlp_hidden (or its default), shrunk when match_params is set.
        Computed, not stored, so GPTConfig(**asdict(config)) rebuilds the same model."""
        glu = self.mlp in ("swiglu", "glu")
        hidden = self.mlp_hidden or (64 * math.ceil(8 * self.n_embd / 3 / 64) if glu else 4 * self.n_embd)
        if self.match_params and self.gate != "none":
            # GA keeps the parameter count by shrinking the FFN: a hidden unit has (3 if GLU else 2) * n_embd weights
            per_unit = (3 if glu else 2) * self.n_embd + ((2 if glu else 1) if self.bias else 0)
            shrink = round(self.gate_params_per_layer() / per_unit)
            if shrink >= hidden:
                raise ValueError(f"GPTConfig.match_params=True cannot absorb the {self.gate} gate's "
                                 f"{self.gate_params_per_layer()} parameters per layer into an MLP of width {hidden}; "
                                 "set a larger mlp_hidden or match_params=False")
            hidden -= shrink
        return hidden


# ----------------------------------------------------------------------------
# The gate (GA §2.2): Y' = Y * act(X W_theta), or Y + act(X W_theta) for gate_op='add'; s = X W_theta comes from
# c_attn, with Q, K and V. Scores per token are (groups, width) = config.gate_shape(): one module for all of G1..G5.
def gate_activation(name, s):
    if name == "sigmoid":
        return torch.sigmoid(s)
    if name == "silu":
        return F.silu(s)
    if name == "ns_sigmoid":  # "non-sparse" sigmoid: range [0.5, 1], keeps the non-linearity, removes sparsity
        return 0.5 + 0.5 * torch.sigmoid(s)
    if name != "identity":  # a value added to VALID without its branch here must not train as the identity
        raise ValueError(f"gate_activation has no branch for gate_act={name!r}: add one here")
    return s


class Gate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.act, self.op, self.shape = config.gate_act, config.gate_op, config.gate_shape()
        self.input_independent = config.gate_input == "none"
        if self.input_independent:  # one learned logit per score, zero-init: each token starts at act(0) (sigmoid: 0.5)
            self.gate_param = nn.Parameter(torch.zeros(math.prod(self.shape)))

    def logits(self, s):
        """c_attn's gate outputs s = X W_theta (B, T, groups*width) -> (B, T, groups, width); an input-independent
        gate ignores them (there are none) and returns its own learned logits, (1, 1, groups, width)."""
        if self.input_independent:
            return self.gate_param.view(1, 1, *self.shape)
        return s.view(*s.shape[:2], *self.shape)

    def score(self, s):
        return gate_activation(self.act, s)

    def forward(self, y, s):
        """y (B, T, heads or 1, width): the tensor at the gate position; s: its logits from self.logits."""
        return y * self.score(s) if self.op == "mul" else y + self.score(s)


# ----------------------------------------------------------------------------
# Norms (GN §2 and GA §4.3). `make_norm` is the one place a norm type is chosen.
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):  # in the wider dtype of the two, as CUDA's autocast does: bf16 q, k (qk_norm) in fp32
        dtype = torch.promote_types(x.dtype, self.weight.dtype)
        return F.rms_norm(x.to(dtype), (x.size(-1),), self.weight.to(dtype), self.eps)


class DyT(nn.Module):
    """Dynamic Tanh (Zhu et al. 2025): gamma * tanh(alpha * x) + beta. No statistics at all, so a
    massive activation cannot rescale the other features the way it does through RMSNorm."""
    def __init__(self, dim, alpha_init=0.5):
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(float(alpha_init)))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return self.weight * torch.tanh(self.alpha * x) + self.bias


class PreAffine(nn.Module):
    """RMSNorm(lambda * x): the learnable lambda (init 1) lets the model hold its rescaling 'outlier'
    in a weight instead of in a massive activation of the residual stream (GN)."""
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.pre_scale = nn.Parameter(torch.ones(dim))
        self.norm = RMSNorm(dim, eps)

    def forward(self, x):
        return self.norm(self.pre_scale * x)


class GatedNorm(nn.Module):
    """y = RMSNorm(x); y * sigmoid(W_up SiLU(W_down y)) with a rank-r bottleneck (GN): an explicit,
    input-dependent rescaling, so the network needs no outlier to shrink features."""
    def __init__(self, dim, rank, eps=1e-6):
        super().__init__()
        self.norm = RMSNorm(dim, eps)
        self.down = nn.Linear(dim, rank, bias=False)
        self.up = nn.Linear(rank, dim, bias=False)

    def forward(self, x):
        y = self.norm(x)
        return y * torch.sigmoid(self.up(F.silu(self.down(y))))


def make_norm(config, dim):
    if config.norm == "rmsnorm":
        return RMSNorm(dim, rms_eps(config))
    if config.norm == "layernorm":
        return nn.LayerNorm(dim, eps=1e-5 if config.norm_eps is None else config.norm_eps, bias=config.bias)
    if config.norm == "dyt":
        return DyT(dim)
    if config.norm == "preaffine":
        return PreAffine(dim, rms_eps(config))
    return GatedNorm(dim, config.gatednorm_rank, rms_eps(config))


def rms_eps(config):
    """The epsilon of every RMSNorm (the model's norms, and the per-head ones of qk_norm and sdpa_nonlin)."""
    return 1e-6 if config.norm_eps is None else config.norm_eps


# ----------------------------------------------------------------------------
# Rotary position embedding
YARN_RAMP = (1, 32)  # YaRN's alpha, beta: pairs that turn fewer than 1 / more than 32 times in the trained length


def rope_tables(head_dim, length, base, device=None, scaling="none", factor=1.0):
    """cos and sin (length, head_dim/2) of the angle each channel pair turns by at each position. To run a model
    trained on length / factor positions at `length` (GA Table 5 extends its context with YaRN), `scaling`:
      'none'  the trained angles, continued: positions past the trained length give the model angles it never saw
      'ntk'   NTK-aware: a larger base, which slows the slowest pair by `factor` and leaves the fastest as it was
      'yarn'  YaRN (Peng et al. 2023): pairs that turn more than 32 times in the trained length keep their speed,
              those that turn less than once are slowed by `factor` (interpolated), the blend linear in the turns
              between, as the paper writes it (transformers' and vLLM's code: linear in the pair's index, between
              the same two pairs rounded outwards); and every attention logit is multiplied by (0.1 ln factor + 1)^2
              (cos and sin scaled: q and k each take one). factor 1 gives the plain tables with every scaling."""
    pair = torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim
    if scaling == "ntk" and head_dim > 2:  # head_dim 2: its one pair turns at base^0, whatever the base
        base = base * factor ** (head_dim / (head_dim - 2))
    inv_freq = 1.0 / (base ** pair)
    scale = 1.0
    if scaling == "yarn" and factor != 1:  # (at factor 1 the blend below would only add rounding)
        turns = (length / factor) * inv_freq / (2 * math.pi)  # how often each pair turns within the trained length
        keep = ((turns - YARN_RAMP[0]) / (YARN_RAMP[1] - YARN_RAMP[0])).clamp(0, 1)  # 1: as trained, 0: interpolate
        inv_freq = inv_freq * keep + inv_freq / factor * (1 - keep)
        scale = 0.1 * math.log(factor) + 1
    angles = torch.outer(torch.arange(length, dtype=torch.float32, device=device), inv_freq)  # (T, D/2)
    return angles.cos() * scale, angles.sin() * scale


def rope_for(config, device=None):
    """The rope tables of a GPTConfig: its block_size positions, scaled as its rope_scaling says."""
    return rope_tables(config.head_dim, config.block_size, config.rope_base, device, config.rope_scaling,
                       config.rope_factor)


def apply_rope(x, cos, sin):
    """x: (B, T, H, D); rotate channel pairs (i, i + D/2) by position-dependent angles."""
    x1, x2 = x.float().chunk(2, dim=-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).type_as(x)


def window_mask(n_queries, n_keys, window, keep_first=0, device=None):
    """Sliding-window attention's mask (n_queries, n_keys), True where a query may attend: the queries are the last
    n_queries positions (decoding after a cache), each sees itself, its window - 1 predecessors and the first
    keep_first positions (StreamingLLM keeps those "attention sinks" in its cache)."""
    i = torch.arange(n_keys - n_queries, n_keys, device=device)[:, None]
    j = torch.arange(n_keys, device=device)[None, :]
    return (j <= i) & ((i - j < window) | (j < keep_first))


# ----------------------------------------------------------------------------
# Attention with the gate at one of G1..G5
class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.n_head, self.n_kv_head, self.head_dim = H, Hkv, D = config.n_head, config.n_kv_head, config.head_dim
        # one matmul for Q, K, V and the gate logits X W_theta (as the official Qwen code widens q_proj)
        self.qkvg_sizes = [H * D, Hkv * D, Hkv * D, config.gate_logits_width()]
        self.c_attn = kernels.AlignedLinear(config.n_embd, sum(self.qkvg_sizes), bias=config.bias)  # pads rows on a GPU
        self.c_proj = nn.Linear(H * D, config.n_embd, bias=config.bias)
        self.c_proj.RESIDUAL_PROJ = True
        self.resid_dropout = nn.Dropout(config.dropout)
        if config.qk_norm:  # per-head RMSNorm on q, k, whatever config.norm is (that is the residual stream's, GN's)
            self.q_norm, self.k_norm = RMSNorm(D, rms_eps(config)), RMSNorm(D, rms_eps(config))
        if config.sdpa_nonlin == "rmsnorm":  # GA Table 3 "SDPA RMSNorm": normalise each head's output on its own
            self.sdpa_norm = RMSNorm(D, rms_eps(config))
        self.gate = Gate(config) if config.gate != "none" else None
        # what the Triton kernel (kernels.py) can fuse: no gate, or a multiplicative sigmoid G1 gate in its epilogue
        self.fusable = config.gate in ("none", "g1") and config.gate_act == "sigmoid" and config.gate_op == "mul" \
            and config.sdpa_nonlin == "none" and config.attn_window is None

    def project(self, x, rope=None):
        """Q (B, T, H, D) and K, V (B, T, Hkv, D), gated here at G2-G4, with RoPE and QK-norm applied, and the
        gate logits (B, T, groups, width) ((1, 1, groups, width) for an input-independent gate), or None without one."""
        B, T, C = x.shape
        q, k, v, g = self.c_attn(x).split(self.qkvg_sizes, dim=-1)
        q, k, v = q.view(B, T, self.n_head, -1), k.view(B, T, self.n_kv_head, -1), v.view(B, T, self.n_kv_head, -1)
        g = self.gate.logits(g) if self.gate is not None else None
        if self.config.gate == "g2":
            v = self.gate(v, g)
        elif self.config.gate == "g3":
            k = self.gate(k, g)
        elif self.config.gate == "g4":
            q = self.gate(q, g)
        if self.config.qk_norm:
            q, k = self.q_norm(q).type_as(v), self.k_norm(k).type_as(v)  # one dtype for SDPA (CUDA's autocast: fp32)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        return q, k, v, g

    def forward(self, x, rope=None, cache=None):
        B, T, C = x.shape
        q, k, v, g = self.project(x, rope)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, T, D)
        causal, backend = True, self.config.attn_backend
        if cache is not None:
            if "k" in cache:  # decoding: the new token follows the cached ones
                if T != 1:
                    raise ValueError("the KV cache decodes one token at a time after a prefill")
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
                causal, backend = False, "torch"  # one query sees every cached key; no kernel needed
            cache["k"], cache["v"] = k, v
        mask = None
        if self.config.attn_window is not None:  # a sliding window: an explicit mask, on PyTorch's path
            mask = window_mask(q.size(2), k.size(2), self.config.attn_window, self.config.attn_keep_first, q.device)
        if self.fusable and kernels.use_triton(backend, q, k, v):
            # fused: one Triton kernel computes softmax(q k^T / sqrt(D)) v and multiplies it by sigmoid(g) (G1)
            # before writing it out; the gate logits are read in place: (B, T, groups, width) -> (B, H, T, width)
            gate = None if g is None else g.transpose(1, 2).expand(B, self.n_head, T, -1)
            y = kernels.gated_attention(q, k, v, gate=gate, causal=causal, backend="triton").transpose(1, 2)
        else:  # reference: attention, then the gate as a line of its own (this is what a CPU run executes)
            y = kernels.gated_attention(q, k, v, causal=causal, mask=mask, backend=backend).transpose(1, 2)  # (B,T,H,D)
            if self.config.sdpa_nonlin == "rmsnorm":
                y = self.sdpa_norm(y)
            elif self.config.sdpa_nonlin == "silu":
                y = F.silu(y)
            if self.config.gate == "g1":
                y = self.gate(y, g)  # G1: each head's SDPA output times its gate scores
        y = self.c_proj(y.reshape(B, T, self.n_head * self.head_dim))  # W_O: the heads concatenated and mixed
        if self.config.gate == "g5":
            y = self.gate(y.view(B, T, 1, C), g).view(B, T, C)
        return self.resid_dropout(y)


# ----------------------------------------------------------------------------
# MLP, block
class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.kind = config.mlp
        n_in = 2 if config.mlp in ("swiglu", "glu") else 1  # GLUs have a value and a gate half
        self.c_fc = nn.Linear(config.n_embd, n_in * config.hidden_dim, bias=config.bias)
        self.c_proj = nn.Linear(config.hidden_dim, config.n_embd, bias=config.bias)
        self.c_proj.RESIDUAL_PROJ = True
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        h = self.c_fc(x)
        if self.kind in ("gelu", "gelu_tanh"):
            h = F.gelu(h, approximate="tanh" if self.kind == "gelu_tanh" else "none")
        else:
            value, gate = h.chunk(2, dim=-1)
            h = value * (F.silu(gate) if self.kind == "swiglu" else torch.sigmoid(gate))
        return self.dropout(self.c_proj(h))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = make_norm(config, config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = make_norm(config, config.n_embd)
        self.mlp = MLP(config)
        if config.sandwich_norm:  # CogView: normalise each sub-layer's output before the residual add
            self.ln_attn_out, self.ln_mlp_out = make_norm(config, config.n_embd), make_norm(config, config.n_embd)
        self.sandwich = config.sandwich_norm

    def forward(self, x, rope=None, cache=None):
        a = self.attn(self.ln_1(x), rope, cache)
        x = x + (self.ln_attn_out(a) if self.sandwich else a)
        m = self.mlp(self.ln_2(x))
        return x + (self.ln_mlp_out(m) if self.sandwich else m)


# ----------------------------------------------------------------------------
# GPT
class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=make_norm(config, config.n_embd),
        ))
        if config.pos_emb == "learned":
            self.transformer.wpe = nn.Embedding(config.block_size, config.n_embd)
        else:  # RoPE's tables: buffers, so that .to(device) moves them; not saved (rope_for makes them again)
            for name, table in zip(("rope_cos", "rope_sin"), rope_for(config)):
                self.register_buffer(name, table, persistent=False)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.transformer.wte.weight = self.lm_head.weight  # weight tying: one matrix reads and writes tokens
        self.apply(self._init_weights)

    def _init_weights(self, module):
        # GPT-2 init: N(0, 0.02) for every nn.Linear (GatedNorm's too: its gate starts near 0.5, as G1's), residual
        # projections scaled by 1/sqrt(2 * n_layer) so the stream's variance does not grow with depth; norms keep theirs
        if isinstance(module, nn.Linear):
            std = 0.02 / math.sqrt(2 * self.config.n_layer) if getattr(module, "RESIDUAL_PROJ", False) else 0.02
            torch.nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self, non_embedding=True):
        """Parameter count; the token embedding is counted (once when tied to lm_head), learned position
        embeddings are not unless non_embedding=False, as in nanoGPT."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and self.config.pos_emb == "learned":
            n -= self.transformer.wpe.weight.numel()
        return n

    @classmethod
    def with_weights(cls, config, state_dict):
        """A GPT of `config` holding state_dict's tensors themselves (assigned, not copied, and no random init first),
        in eval mode on their device: how pretrained.py loads published weights, and how lab/evaluate.py runs a model's
        weights under another config (a sliding window, a longer block_size with scaled RoPE)."""
        with torch.device("meta"):
            model = cls(config)
        model.load_state_dict(state_dict, assign=True)
        if config.tie_embeddings:
            model.transformer.wte.weight = model.lm_head.weight  # one Parameter again (assign gave each its own)
        if config.pos_emb == "rope":  # non-persistent buffers, still on the meta device
            model.rope_cos, model.rope_sin = rope_for(config, model.lm_head.weight.device)
        return model.eval()

    def forward(self, idx, targets=None):
        """Logits (B, T, vocab) and, given targets, the mean cross-entropy. With config.loss_chunk and targets, the
        loss alone, computed in chunks, and None for the logits (never held whole). To measure attention sinks,
        massive activations and gate scores while it runs, attach a probe.Probe."""
        if targets is not None and self.config.loss_chunk:
            x = self._forward(idx, logits=False).flatten(0, 1)
            return None, kernels.chunked_loss(x, self.lm_head.weight, targets.flatten(), self.config.loss_chunk)
        logits = self._forward(idx)
        if targets is None:
            return logits, None
        flat = logits.flatten(0, 1).to(torch.promote_types(logits.dtype, torch.float32))  # fp32 at least; fp64 stays
        return logits, F.cross_entropy(flat, targets.reshape(-1), ignore_index=-1)

    def _forward(self, idx, start=0, cache=None, logits=True):
        """Logits (B, T, vocab); logits=False: the final norm's output, which lm_head reads."""
        B, T = idx.shape
        if start + T > self.config.block_size:
            raise ValueError(f"sequence of length {start + T} is longer than block_size={self.config.block_size}")
        x, rope = self.transformer.wte(idx), None
        if self.config.pos_emb == "learned":
            x = x + self.transformer.wpe(torch.arange(start, start + T, device=idx.device))
        else:
            rope = (self.rope_cos[start:start + T], self.rope_sin[start:start + T])
        x = self.transformer.drop(x)
        for i, block in enumerate(self.transformer.h):
            x = block(x, rope, cache[i] if cache is not None else None)
        x = self.transformer.ln_f(x)
        return self.lm_head(x) if logits else x

    def configure_optimizers(self, weight_decay, learning_rate, betas=(0.9, 0.95)):
        """AdamW; weight decay on matrices and embeddings (>= 2-D), not on gains, biases, DyT's alpha, 1-D gates."""
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        # The fused kernel updates every parameter in a few launches, and on CUDA and CPU it can skip a whole step on
        # the device (train.optimizer_step tells it to when the loss or the gradients are not finite), so training
        # never waits for the GPU to decide. MPS has a fused AdamW that ignores that flag: there, the plain loop.
        fused = all(p.device.type in ("cuda", "cpu") for p in params)
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=fused)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, keep_first=False, n_vocab=None):
        """Sample max_new_tokens tokens after idx (B, T). A KV cache makes each step one token's forward pass; past
        block_size the context is cropped and recomputed: exactly the model run on the last block_size tokens.
        keep_first: idx[:, 0] is a BOS token kept at position 0 when cropping (as train.py's bos=True trains).
        n_vocab: only ids below it are sampled (vocab_size pads the tokenizer's ids; the padding has no text)."""
        cache = None
        for _ in range(max_new_tokens):
            if cache is None:
                cache = [{} for _ in self.transformer.h]
                T = self.config.block_size
                ctx = idx[:, -T:]
                if keep_first and idx.size(1) > T:
                    ctx = torch.cat([idx[:, :1], idx[:, idx.size(1) - (T - 1):]], dim=1)
                logits = self._forward(ctx, start=0, cache=cache)
            else:
                logits = self._forward(idx[:, -1:], start=idx.size(1) - 1, cache=cache)
            logits = logits[:, -1, :n_vocab].float() / max(temperature, 1e-8)  # fp32: a low temperature overflows fp16
            if top_k:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("inf")
            idx_next = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
            if idx.size(1) > self.config.block_size:
                cache = None  # the window slides: recompute from the cropped context next step
        return idx


# ----------------------------------------------------------------------------
# Checking a config: a value or combination that would silently do nothing raises a ValueError naming the field
VALID = {  # each flag's valid values, the default first
    "pos_emb": ("rope", "learned"), "mlp": ("swiglu", "glu", "gelu", "gelu_tanh"),
    "norm": ("rmsnorm", "layernorm", "dyt", "preaffine", "gatednorm"),
    "gate": ("g1", "none", "g2", "g3", "g4", "g5"), "gate_granularity": ("elementwise", "headwise"),
    "gate_op": ("mul", "add"), "gate_act": ("sigmoid", "silu", "ns_sigmoid", "identity"),
    "gate_input": ("hidden", "none"), "sdpa_nonlin": ("none", "rmsnorm", "silu"),
    "rope_scaling": ("none", "ntk", "yarn"), "attn_backend": ("auto", "torch", "triton"),
}
# flags that say how the model computes, not what: a checkpoint runs, and a run resumes, with any value of them
RUNTIME_FLAGS = ("attn_backend", "loss_chunk")


def check_config(c):
    for name, valid in VALID.items():
        if getattr(c, name) not in valid:
            raise ValueError(f"GPTConfig.{name}={getattr(c, name)!r} is not valid; choose one of {list(valid)}")
    for name in ("block_size", "vocab_size", "n_layer", "n_head", "n_kv_head", "n_embd", "gatednorm_rank"):
        if not isinstance(getattr(c, name), int) or getattr(c, name) < 1:
            raise ValueError(f"GPTConfig.{name}={getattr(c, name)!r} must be a positive integer")
    if c.head_dim is None:  # __post_init__ leaves it unset only when the width does not split evenly
        raise ValueError(f"GPTConfig.n_embd={c.n_embd} must be divisible by n_head={c.n_head}, or set head_dim")
    if not isinstance(c.head_dim, int) or c.head_dim < 1:
        raise ValueError(f"GPTConfig.head_dim={c.head_dim!r} must be a positive integer or None")
    if c.norm_eps is not None and not (isinstance(c.norm_eps, (int, float)) and 0 < c.norm_eps < 1):
        raise ValueError(f"GPTConfig.norm_eps={c.norm_eps!r} must be a small positive number (e.g. 1e-6) or None")
    if c.norm_eps is not None and c.norm == "dyt" and not c.qk_norm and c.sdpa_nonlin != "rmsnorm":
        raise ValueError("GPTConfig.norm_eps has no effect with norm='dyt' (DyT divides by nothing) and no qk_norm or "
                         "sdpa_nonlin='rmsnorm'; leave it None")
    if c.n_head % c.n_kv_head:
        raise ValueError(f"GPTConfig.n_head={c.n_head} must be divisible by n_kv_head={c.n_kv_head} (GQA groups)")
    if c.pos_emb == "rope" and c.head_dim % 2:
        raise ValueError(f"GPTConfig.pos_emb='rope' needs an even head_dim, got head_dim={c.head_dim}")
    if not (isinstance(c.rope_factor, (int, float)) and c.rope_factor >= 1):
        raise ValueError(f"GPTConfig.rope_factor={c.rope_factor!r} must be >= 1 (times the trained block_size)")
    if not (isinstance(c.rope_base, (int, float)) and 1 < c.rope_base < math.inf):  # <= 0: NaN angles, no error
        raise ValueError(f"GPTConfig.rope_base={c.rope_base!r} must be a number > 1 (RoPE's theta, e.g. 10000)")
    if (c.rope_scaling == "none") != (c.rope_factor == 1):  # either alone is plain RoPE (rope_tables)
        raise ValueError(f"GPTConfig.rope_factor={c.rope_factor} with rope_scaling={c.rope_scaling!r} does nothing; "
                         f"set both (rope_scaling from {list(VALID['rope_scaling'][1:])}, rope_factor > 1) or neither")
    if c.pos_emb != "rope" and (c.rope_scaling != "none" or c.rope_base != GPTConfig.rope_base):
        raise ValueError(f"GPTConfig.rope_scaling and rope_base set rotary embeddings' angles; pos_emb={c.pos_emb!r}")
    if c.attn_window is not None and (not isinstance(c.attn_window, int) or c.attn_window < 1):
        raise ValueError(f"GPTConfig.attn_window={c.attn_window!r} must be a positive integer or None (full attention)")
    if not isinstance(c.loss_chunk, int) or c.loss_chunk < 0:
        raise ValueError(f"GPTConfig.loss_chunk={c.loss_chunk!r} must be an integer >= 0 (rows of logits at a time in "
                         "the training loss; 0: all at once)")
    if not isinstance(c.attn_keep_first, int) or c.attn_keep_first < 0:
        raise ValueError(f"GPTConfig.attn_keep_first={c.attn_keep_first!r} must be an integer >= 0")
    if c.attn_keep_first and c.attn_window is None:
        raise ValueError("GPTConfig.attn_keep_first keeps positions in a sliding window: set attn_window too")
    if c.attn_backend == "triton" and (c.attn_window is not None or kernels.triton_unavailable()):  # not at forward
        why = "GPTConfig.attn_window: the Triton kernel has no mask" if c.attn_window else kernels.triton_unavailable()
        raise ValueError(f"{why}; use attn_backend='auto' or 'torch'")
    if not 0.0 <= c.dropout < 1.0:
        raise ValueError(f"GPTConfig.dropout={c.dropout} must be in [0, 1)")
    if c.mlp_hidden is not None and (not isinstance(c.mlp_hidden, int) or c.mlp_hidden < 1):
        raise ValueError(f"GPTConfig.mlp_hidden={c.mlp_hidden!r} must be a positive integer or None")
    defaults = GPTConfig.__dataclass_fields__
    unused = [name for name in defaults if name.startswith("gate_")] if c.gate == "none" else []  # a new one too
    unused += ["gatednorm_rank"] if c.norm != "gatednorm" else []
    for name in unused:  # a flag that would silently do nothing: refused rather than mislead a sweep
        if getattr(c, name) != defaults[name].default:
            why = "gate='none'" if name.startswith("gate_") else f"norm={c.norm!r}"
            raise ValueError(f"GPTConfig.{name}={getattr(c, name)!r} has no effect with {why}; leave it at "
                             f"{defaults[name].default!r}")
    if c.gate_granularity == "headwise" and c.gate not in ("g1", "g2"):
        raise ValueError(f"GPTConfig.gate_granularity='headwise' is defined for gate in ['g1', 'g2'] only, "
                         f"got gate={c.gate!r}")
    if c.gate_shared and not (c.gate in ("g1", "g2") and c.gate_granularity == "elementwise"):
        raise ValueError("GPTConfig.gate_shared=True is defined for gate in ['g1', 'g2'] with gate_granularity="
                         f"'elementwise' only, got gate={c.gate!r}, gate_granularity={c.gate_granularity!r}")
    c.hidden_dim  # raises if match_params cannot be satisfied

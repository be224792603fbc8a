"""
A compact GPT with a flag for every gate variant and norm type of two Qwen papers:

  GA: Gated Attention for Large Language Models: Non-linearity, Sparsity, and
      Attention-Sink-Free (arXiv 2505.06708)
  GN: A Unified View of Attention and Residual Sinks: Outlier-Driven Rescaling is
      Essential for Transformer Training (arXiv 2601.22966)

Read top to bottom: config -> norms -> gate -> attention -> MLP -> block -> GPT.
The gate is `Y' = Y * act(X W)` (or `Y + act(X W)`), where X is the block's input
after the pre-attention norm, the same tensor that feeds Q/K/V, and Y is the tensor
at the gate's position (G1..G5).
"""

import inspect
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from kernels import first_token_attention, gated_attention

# ----------------------------------------------------------------------------
# Config

VALID = {
    "pos_emb": ("rope", "learned"),
    "mlp": ("swiglu", "glu", "gelu"),
    "norm": ("rmsnorm", "layernorm", "dyt", "preaffine", "gatednorm"),
    "gate": ("none", "g1", "g2", "g3", "g4", "g5"),
    "gate_granularity": ("elementwise", "headwise"),
    "gate_op": ("mul", "add"),
    "gate_act": ("sigmoid", "silu", "ns_sigmoid", "identity"),
    "gate_input": ("hidden", "none"),
    "sdpa_nonlin": ("none", "rmsnorm", "silu"),
    "attn_backend": ("auto", "torch", "triton"),
}


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304  # GPT-2's 50257 padded up to a multiple of 64 for speed
    n_layer: int = 12
    n_head: int = 12
    n_kv_head: int = None  # None -> n_head (plain multi-head attention); fewer -> GQA
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = False
    pos_emb: str = "rope"
    rope_base: float = 10000.0
    mlp: str = "swiglu"
    mlp_hidden: int = None  # None -> 4*n_embd for gelu, ~8/3*n_embd (multiple of 64) for GLUs; see hidden_dim
    norm: str = "rmsnorm"
    gatednorm_rank: int = 16
    sandwich_norm: bool = False
    qk_norm: bool = False
    gate: str = "g1"
    gate_granularity: str = "elementwise"
    gate_shared: bool = False
    gate_op: str = "mul"
    gate_act: str = "sigmoid"
    gate_input: str = "hidden"
    sdpa_nonlin: str = "none"
    match_params: bool = False
    attn_backend: str = "auto"  # kernels.gated_attention backend: auto = Triton on CUDA, else torch

    def __post_init__(self):
        if self.n_kv_head is None:
            self.n_kv_head = self.n_head
        for name, valid in VALID.items():
            value = getattr(self, name)
            if value not in valid:
                raise ValueError(f"GPTConfig.{name}={value!r} is not valid; choose one of {list(valid)}")
        for name in ("block_size", "vocab_size", "n_layer", "n_head", "n_kv_head", "n_embd", "gatednorm_rank"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"GPTConfig.{name}={getattr(self, name)!r} must be a positive integer")
        if self.n_embd % self.n_head:
            raise ValueError(f"GPTConfig.n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if self.n_head % self.n_kv_head:
            raise ValueError(f"GPTConfig.n_head={self.n_head} must be divisible by n_kv_head={self.n_kv_head} (GQA groups)")
        if self.pos_emb == "rope" and self.head_dim % 2:
            raise ValueError(f"GPTConfig.pos_emb='rope' needs an even head_dim, got n_embd/n_head={self.head_dim}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"GPTConfig.dropout={self.dropout} must be in [0, 1)")
        if self.mlp_hidden is not None and (not isinstance(self.mlp_hidden, int) or self.mlp_hidden < 1):
            raise ValueError(f"GPTConfig.mlp_hidden={self.mlp_hidden!r} must be a positive integer or None")
        defaults = GPTConfig.__dataclass_fields__
        if self.gate == "none":
            # gate_* flags would silently do nothing: refuse them rather than mislead a sweep
            for name in ("gate_granularity", "gate_shared", "gate_op", "gate_act", "gate_input"):
                if getattr(self, name) != defaults[name].default:
                    raise ValueError(f"GPTConfig.{name}={getattr(self, name)!r} has no effect with gate='none'; "
                                     f"leave it at {defaults[name].default!r} or pick a gate from {list(VALID['gate'])}")
        if self.gate_granularity == "headwise" and self.gate not in ("g1", "g2"):
            raise ValueError(f"GPTConfig.gate_granularity='headwise' is defined for gate in ['g1', 'g2'] only, got gate={self.gate!r}")
        if self.gate_shared and not (self.gate in ("g1", "g2") and self.gate_granularity == "elementwise"):
            raise ValueError("GPTConfig.gate_shared=True is defined for gate in ['g1', 'g2'] with "
                             f"gate_granularity='elementwise' only, got gate={self.gate!r}, gate_granularity={self.gate_granularity!r}")
        self.hidden_dim  # raises if match_params cannot be satisfied

    @property
    def head_dim(self):
        return self.n_embd // self.n_head

    def gate_shape(self):
        """Gate scores per token at this gate position: (groups, width), e.g. G1 elementwise -> (n_head, head_dim).
        Groups are heads (broadcast over the head's channels when width == 1, over heads when groups == 1)."""
        heads = {"g1": self.n_head, "g2": self.n_kv_head, "g3": self.n_kv_head, "g4": self.n_head}
        if self.gate == "none":
            return None
        if self.gate == "g5":
            return (1, self.n_embd)
        groups = 1 if self.gate_shared else heads[self.gate]
        width = 1 if self.gate_granularity == "headwise" else self.head_dim
        return (groups, width)

    def gate_params_per_layer(self):
        if self.gate == "none":
            return 0
        g, w = self.gate_shape()
        return g * w * (1 if self.gate_input == "none" else self.n_embd)

    @property
    def hidden_dim(self):
        """The MLP width actually built: mlp_hidden (or its default), shrunk when match_params is set.
        Computed, not stored, so GPTConfig(**asdict(config)) rebuilds the same model."""
        glu = self.mlp in ("swiglu", "glu")
        hidden = self.mlp_hidden or (64 * math.ceil(8 * self.n_embd / 3 / 64) if glu else 4 * self.n_embd)
        if self.match_params and self.gate != "none":
            # GA keeps total parameters equal by shrinking the FFN: each hidden unit costs
            # (3 if GLU else 2) * n_embd weights (+2 or +1 biases)
            per_unit = (3 if glu else 2) * self.n_embd + ((2 if glu else 1) if self.bias else 0)
            shrink = round(self.gate_params_per_layer() / per_unit)
            if shrink >= hidden:
                raise ValueError(f"GPTConfig.match_params=True cannot absorb the {self.gate} gate's "
                                 f"{self.gate_params_per_layer()} parameters per layer into an MLP of width {hidden}; "
                                 "set a larger mlp_hidden or match_params=False")
            hidden -= shrink
        return hidden


# ----------------------------------------------------------------------------
# Norms (GN §2 and GA §4.3). `make_norm` is the one place a norm type is chosen.

class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.rms_norm(x, (x.size(-1),), self.weight, self.eps)


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

    def __init__(self, dim):
        super().__init__()
        self.pre_scale = nn.Parameter(torch.ones(dim))
        self.norm = RMSNorm(dim)

    def forward(self, x):
        return self.norm(self.pre_scale * x)


class GatedNorm(nn.Module):
    """y = RMSNorm(x); y * sigmoid(W_up SiLU(W_down y)) with a rank-r bottleneck (GN): an explicit,
    input-dependent rescaling, so the network needs no outlier to shrink features."""

    def __init__(self, dim, rank):
        super().__init__()
        self.norm = RMSNorm(dim)
        self.down = nn.Linear(dim, rank, bias=False)
        self.up = nn.Linear(rank, dim, bias=False)

    def forward(self, x):
        y = self.norm(x)
        return y * torch.sigmoid(self.up(F.silu(self.down(y))))


def make_norm(config, dim):
    if config.norm == "rmsnorm":
        return RMSNorm(dim)
    if config.norm == "layernorm":
        return nn.LayerNorm(dim, bias=config.bias)
    if config.norm == "dyt":
        return DyT(dim)
    if config.norm == "preaffine":
        return PreAffine(dim)
    return GatedNorm(dim, config.gatednorm_rank)


# ----------------------------------------------------------------------------
# The gate (GA §2.2). Scores are laid out per token as (groups, width) = config.gate_shape(), so one
# module serves every position: a headwise score broadcasts over a head's channels, a head-shared
# score over the heads.

def gate_activation(name, s):
    if name == "sigmoid":
        return torch.sigmoid(s)
    if name == "silu":
        return F.silu(s)
    if name == "ns_sigmoid":  # "non-sparse" sigmoid: range [0.5, 1], keeps the non-linearity, removes sparsity
        return 0.5 + 0.5 * torch.sigmoid(s)
    return s  # identity


class Gate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.act, self.op = config.gate_act, config.gate_op
        self.shape = config.gate_shape()
        width = self.shape[0] * self.shape[1]
        if config.gate_input == "hidden":
            self.gate_proj = nn.Linear(config.n_embd, width, bias=False)  # W_theta, init N(0, 0.02) like every linear
        else:
            # input-independent gate: one learned score per channel, zero-init -> sigmoid = 0.5 for every token
            self.gate_param = nn.Parameter(torch.zeros(width))
            self.gate_proj = None

    def logits(self, x):
        """X W_theta for normed block input x (B, T, C) -> (B, T, groups, width) (or (1, 1, groups, width))."""
        s = self.gate_proj(x) if self.gate_proj is not None else self.gate_param.view(1, 1, -1)
        return s.view(*s.shape[:2], *self.shape)

    def score(self, x):
        return gate_activation(self.act, self.logits(x))

    def forward(self, y, x):
        """y: (B, T, groups*, width*) tensor at the gate position (broadcast-compatible with the scores)."""
        s = self.score(x)
        return y * s if self.op == "mul" else y + s


# ----------------------------------------------------------------------------
# Rotary position embedding

def rope_tables(head_dim, length, base, device=None):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    angles = torch.outer(torch.arange(length, dtype=torch.float32, device=device), inv_freq)  # (T, D/2)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """x: (B, T, H, D); rotate channel pairs (i, i + D/2) by position-dependent angles."""
    x1, x2 = x.float().chunk(2, dim=-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).type_as(x)


# ----------------------------------------------------------------------------
# Attention with the gate at one of G1..G5

class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.n_head, self.n_kv_head, self.head_dim = config.n_head, config.n_kv_head, config.head_dim
        self.c_attn = nn.Linear(config.n_embd, (config.n_head + 2 * config.n_kv_head) * config.head_dim, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.c_proj.RESIDUAL_PROJ = True
        self.resid_dropout = nn.Dropout(config.dropout)
        if config.qk_norm:  # per-head RMSNorm on q and k (always RMSNorm, whatever config.norm is)
            self.q_norm, self.k_norm = RMSNorm(self.head_dim), RMSNorm(self.head_dim)
        if config.sdpa_nonlin == "rmsnorm":  # GA Table 3 "SDPA RMSNorm": normalise each head's output on its own
            self.sdpa_norm = RMSNorm(self.head_dim)
        self.gate = Gate(config) if config.gate != "none" else None
        # G1 with a sigmoid multiplicative gate computed from the input can be fused into the attention kernel
        self.fused_gate = (config.gate == "g1" and config.gate_act == "sigmoid" and config.gate_op == "mul"
                           and config.gate_input == "hidden" and config.sdpa_nonlin == "none")

    def forward(self, x, rope=None, cache=None, stats=None):
        B, T, C = x.shape
        H, Hkv, D = self.n_head, self.n_kv_head, self.head_dim
        q, k, v = self.c_attn(x).split([H * D, Hkv * D, Hkv * D], dim=-1)
        q, k, v = q.view(B, T, H, D), k.view(B, T, Hkv, D), v.view(B, T, Hkv, D)
        gate_at = self.config.gate
        if gate_at == "g2":
            v = self.gate(v, x)
        elif gate_at == "g3":
            k = self.gate(k, x)
        elif gate_at == "g4":
            q = self.gate(q, x)
        if self.config.qk_norm:
            q, k = self.q_norm(q).type_as(v), self.k_norm(k).type_as(v)  # autocast runs norms in fp32
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, T, D)

        causal, backend = True, self.config.attn_backend
        if cache is not None:
            if "k" in cache:  # decoding: the new token(s) follow the cached ones
                if T != 1:
                    raise ValueError("the KV cache decodes one token at a time after a prefill")
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
                causal, backend = False, "torch"  # one query sees every cached key; no kernel needed
            cache["k"], cache["v"] = k, v

        gate_logits = None
        if self.fused_gate:  # (B, T, groups, width) -> (B, groups, T, width), broadcast over heads if shared
            gate_logits = self.gate.logits(x).transpose(1, 2).expand(B, H, T, -1)
        y = gated_attention(q, k, v, gate=gate_logits, causal=causal, backend=backend)  # (B, H, T, D)

        if self.config.sdpa_nonlin == "rmsnorm":
            y = self.sdpa_norm(y)
        elif self.config.sdpa_nonlin == "silu":
            y = F.silu(y)
        if gate_at == "g1" and not self.fused_gate:
            y = self.gate(y.transpose(1, 2), x).transpose(1, 2)
        y = y.transpose(1, 2).reshape(B, T, C)
        y = self.c_proj(y)
        if gate_at == "g5":
            y = self.gate(y.view(B, T, 1, C), x).view(B, T, C)

        if stats is not None:
            self._collect_stats(q, k, x, stats)
        return self.resid_dropout(y)

    @torch.no_grad()
    def _collect_stats(self, q, k, x, stats):
        Tq = q.size(2)
        if Tq > 1:  # the first query can only see itself: average over queries 1..T-1
            p0 = first_token_attention(q, k, causal=True, backend=self.config.attn_backend)  # (B, H, T), never T x T
            stats["first_token_attn"].append(p0[:, :, 1:].float().mean().item())
        else:
            stats["first_token_attn"].append(float("nan"))
        if self.gate is not None:
            s = self.gate.score(x).float()
            stats["gate_mean"].append(s.mean().item())
            stats["gate_below_0.1"].append((s < 0.1).float().mean().item())
            stats["gate_below_0.5"].append((s < 0.5).float().mean().item())
        if "attn_maps" in stats:  # explicit softmax for a heatmap of each head (small T only)
            kk = k.repeat_interleave(self.n_head // self.n_kv_head, dim=1)
            att = (q.float() @ kk.float().transpose(-2, -1)) * self.head_dim ** -0.5
            mask = torch.ones(Tq, kk.size(2), dtype=torch.bool, device=q.device).tril()
            stats["attn_maps"].append(att.masked_fill(~mask, float("-inf")).softmax(-1))


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
        if self.kind == "gelu":
            h = F.gelu(h)
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
            self.ln_attn_out = make_norm(config, config.n_embd)
            self.ln_mlp_out = make_norm(config, config.n_embd)
        self.sandwich = config.sandwich_norm

    def forward(self, x, rope=None, cache=None, stats=None):
        a = self.attn(self.ln_1(x), rope, cache, stats)
        x = x + (self.ln_attn_out(a) if self.sandwich else a)
        m = self.mlp(self.ln_2(x))
        return x + (self.ln_mlp_out(m) if self.sandwich else m)


# ----------------------------------------------------------------------------
# GPT

STAT_KEYS = ("first_token_attn", "max_act", "gate_mean", "gate_below_0.1", "gate_below_0.5")

# Dense bf16 tensor-core peak FLOP/s by device name (no sparsity). Matched by substring, first hit wins.
PEAK_FLOPS = [
    ("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("H800", 989e12), ("GH200", 989e12),
    ("B200", 2250e12), ("A100", 312e12), ("A800", 312e12), ("L40S", 362e12), ("L4", 121e12),
    ("A10G", 70e12), ("A10", 125e12), ("RTX 4090", 165e12), ("RTX 3090", 71e12), ("V100", 125e12), ("T4", 65e12),
]


def peak_flops(device=None):
    """Peak bf16 FLOP/s of a CUDA device, or None if unknown (CPU, MPS, an unlisted GPU)."""
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    return next((flops for key, flops in PEAK_FLOPS if key in name), None)


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
        else:
            cos, sin = rope_tables(config.head_dim, config.block_size, config.rope_base)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)

    def _init_weights(self, module):
        # GPT-2 init: N(0, 0.02), residual projections scaled by 1/sqrt(2 * n_layer) so the residual
        # stream's variance does not grow with depth. Norm/gate parameters keep their own inits.
        if isinstance(module, nn.Linear):
            std = 0.02 / math.sqrt(2 * self.config.n_layer) if getattr(module, "RESIDUAL_PROJ", False) else 0.02
            torch.nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self, non_embedding=True):
        """Parameter count; the (tied) token embedding is counted, learned position embeddings are not
        unless non_embedding=False, as in nanoGPT."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and self.config.pos_emb == "learned":
            n -= self.transformer.wpe.weight.numel()
        return n

    def forward(self, idx, targets=None, return_stats=False):
        stats = {key: [] for key in STAT_KEYS} if return_stats else None
        logits = self._forward(idx, stats=stats)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-1)
        if return_stats:
            if self.config.gate == "none":
                for key in ("gate_mean", "gate_below_0.1", "gate_below_0.5"):
                    stats[key] = None
            return logits, loss, stats
        return logits, loss

    def _forward(self, idx, start=0, cache=None, stats=None):
        B, T = idx.shape
        if start + T > self.config.block_size:
            raise ValueError(f"sequence of length {start + T} is longer than block_size={self.config.block_size}")
        x = self.transformer.wte(idx)
        rope = None
        if self.config.pos_emb == "learned":
            x = x + self.transformer.wpe(torch.arange(start, start + T, device=idx.device))
        else:
            rope = (self.rope_cos[start:start + T], self.rope_sin[start:start + T])
        x = self.transformer.drop(x)
        for i, block in enumerate(self.transformer.h):
            x = block(x, rope, cache[i] if cache is not None else None, stats)
            if stats is not None:
                stats["max_act"].append(x.detach().abs().max().item())  # massive activations (GA Table 4 M-Act)
        return self.lm_head(self.transformer.ln_f(x))

    @torch.no_grad()
    def attention_maps(self, idx):
        """Per-layer attention probabilities (B, n_head, T, T) for a short sequence, for heatmaps (GA Fig. 2)."""
        stats = {key: [] for key in STAT_KEYS} | {"attn_maps": []}
        self._forward(idx, stats=stats)
        return stats["attn_maps"]

    def configure_optimizers(self, weight_decay, learning_rate, betas=(0.9, 0.95), device_type="cpu"):
        # decay matrices and embeddings (>= 2-D), not gains, biases, DyT's alpha or the input-independent gate
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        fused = device_type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **({"fused": True} if fused else {}))

    def flops_per_token(self, seq_len=None):
        """Training FLOPs per token (forward + backward = 3x forward): 6 per weight of the matmuls, plus
        causal attention, which scores T/2 keys per query on average: 3 * 2 * 2 * L * H * D * T/2."""
        cfg, T = self.config, seq_len or self.config.block_size
        # num_params() counts the tied embedding once, which is the lm_head matmul's share
        return 6 * self.num_params() + 6 * cfg.n_layer * cfg.n_head * cfg.head_dim * T

    def estimate_mfu(self, fwdbwd_per_iter, dt, seq_len=None, device=None, peak=None):
        """Model FLOPs utilisation: achieved FLOP/s over the device's peak bf16 rate. fwdbwd_per_iter
        sequences of seq_len tokens took dt seconds. Returns None when the peak is unknown (e.g. CPU)."""
        peak = peak or peak_flops(device)
        if peak is None:
            return None
        T = seq_len or self.config.block_size
        return self.flops_per_token(T) * T * fwdbwd_per_iter / dt / peak

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        """Sample max_new_tokens tokens after idx (B, T). A KV cache makes each step cost one token's
        forward pass; once the sequence outgrows block_size the context is cropped and recomputed,
        which is exactly what running the model on the last block_size tokens would give."""
        cache = None
        for _ in range(max_new_tokens):
            if cache is None:
                cache = [{} for _ in self.transformer.h]
                ctx = idx[:, -self.config.block_size:]
                logits = self._forward(ctx, start=0, cache=cache)
            else:
                logits = self._forward(idx[:, -1:], start=idx.size(1) - 1, cache=cache)
            logits = logits[:, -1, :] / max(temperature, 1e-8)
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("inf")
            idx_next = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
            if idx.size(1) > self.config.block_size:
                cache = None  # the window slides: recompute from the cropped context next step
        return idx

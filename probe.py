"""
What the papers measure (GA §4.3, Table 4), taken from a GPT while it runs, without changing its forward:

    with Probe(model) as probe:
        logits, loss = model(x, y)
    probe.stats["first_token_attn"]   # one float per layer

  first_token_attn  F-Attn: attention probability on position 0, averaged over heads and query positions
                    1..T-1, computed from each row's log-sum-exp (never the T x T matrix)
  max_act           M-Act: max |h| of the hidden states each block outputs
  gate_mean         the mean gate score (the activation's output); None without a gate
  gate_below_0.1    the fraction of gate scores below 0.1 (sparsity), and below 0.5
  gate_below_0.5

The probe hooks each block (its output) and each attention layer (its input), and recomputes that layer's
queries, keys and gate logits from the input with CausalSelfAttention.project: one extra matmul per layer,
so it is meant for evaluation batches, not for every training step.
"""

import torch

from kernels import first_token_attention

STAT_KEYS = ("first_token_attn", "max_act", "gate_mean", "gate_below_0.1", "gate_below_0.5")
GATE_KEYS = ("gate_mean", "gate_below_0.1", "gate_below_0.5")


class Probe:
    def __init__(self, model, attention_maps=False, gate_scores=None):
        """attention_maps: also keep each layer's attention probabilities (B, H, T, T), for heatmaps (small T
        only). gate_scores: a function called with each layer's gate scores (a tensor), e.g. to sample them."""
        self.model, self.keep_maps, self.gate_scores = model, attention_maps, gate_scores
        self.stats = {key: [] for key in STAT_KEYS}
        self.attention_maps = []
        self.hooks = []

    def __enter__(self):
        for block in self.model.transformer.h:
            self.hooks.append(block.attn.register_forward_hook(self._attention))
            self.hooks.append(block.register_forward_hook(self._block_output))
        return self

    def __exit__(self, *exc):
        for hook in self.hooks:
            hook.remove()
        self.hooks = []
        if self.model.config.gate == "none":
            for key in GATE_KEYS:
                self.stats[key] = None

    @torch.no_grad()
    def _block_output(self, block, args, x):
        self.stats["max_act"].append(x.abs().max().item())  # massive activations

    @torch.no_grad()
    def _attention(self, attn, args, output):
        x, rope = args[0], (args[1] if len(args) > 1 else None)
        q, k, _, g = attn.project(x, rope)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, heads, T, D)
        T = q.size(2)
        if T > 1:  # the first query can only see itself: average over queries 1..T-1
            p0 = first_token_attention(q, k, causal=True, backend=attn.config.attn_backend)  # (B, H, T)
            self.stats["first_token_attn"].append(p0[:, :, 1:].float().mean().item())
        else:
            self.stats["first_token_attn"].append(float("nan"))
        if attn.gate is not None:
            s = attn.gate.score(g).float()
            self.stats["gate_mean"].append(s.mean().item())
            self.stats["gate_below_0.1"].append((s < 0.1).float().mean().item())
            self.stats["gate_below_0.5"].append((s < 0.5).float().mean().item())
            if self.gate_scores is not None:
                self.gate_scores(s.expand(*x.shape[:2], *s.shape[2:]))  # an input-independent gate: per token too
        if self.keep_maps:  # explicit softmax, T x T
            kk = k.repeat_interleave(attn.n_head // attn.n_kv_head, dim=1)
            att = (q.float() @ kk.float().transpose(-2, -1)) * attn.head_dim ** -0.5
            mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
            self.attention_maps.append(att.masked_fill(~mask, float("-inf")).softmax(-1))


@torch.no_grad()
def attention_maps(model, idx):
    """Per-layer attention probabilities (B, n_head, T, T) of a short sequence, for heatmaps (GA Fig. 2)."""
    with Probe(model, attention_maps=True) as probe:
        model(idx)
    return probe.attention_maps

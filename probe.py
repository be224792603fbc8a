"""
What the papers measure (GA §4.3, Table 4; Gu et al., ICLR 2025), taken from a GPT while it runs, without
changing its forward:

    with Probe(model) as probe:
        logits, loss = model(x, y)
    probe.stats["first_token_attn"]   # one float per layer

probe.stats: one value per layer, in layer order (a layer measured on a batch of B windows of T tokens):

  first_token_attn  F-Attn: attention probability on position 0, averaged over windows, heads and query positions
                    1..T-1, computed from each row's log-sum-exp (never the T x T matrix)
  max_act           M-Act: max |h| of the hidden states the block outputs, taken within each window, averaged over
                    the windows (the max over the whole batch would grow with the batch size)
  max_act_first     the same max |h| at position 0 alone (the BOS token of BOS windows), and at positions 1..T-1:
  max_act_rest      where the massive activation sits
  act_ratio         that max |h| over the median |h| of the same window's block output, averaged over the windows:
                    Sun et al. (2024) call an activation massive when it is ~1000x the median; a scale-free M-Act
  gate_mean         the mean gate score (the activation's output); None without a gate
  gate_below_0.1    the fraction of gate scores below 0.1 (sparsity), and below 0.5; None without a gate
  gate_below_0.5
  sink_share        a sink anywhere: r_j, the attention key j receives, averaged over the late queries T//2..T-1
                    (each sees every candidate key; received_attention), for the candidate keys j < T//2 - T//8
                    (sink_keys: a gap of T//8 positions between the last candidate and the first late query); the
                    top share max_j r_j of each window and head, averaged over both. A key that every late query
                    gives p scores p; a key that only queries near it attend to (recency, a previous-token head)
                    scores ~0, as no late query is within T//8 of a candidate (without the gap, key T//2-1, beside
                    the first late query, topped gated models' windows at T = 512: recency, not a sink)
  sink_heads        the fraction of heads whose F-Attn (that head's, averaged over windows and queries 1..T-1)
                    exceeds SINK_HEAD_THRESHOLD = 0.3: Gu et al. call such a head a sink head and report this
                    fraction, their epsilon = 0.3 (an average over heads hides a few strong sink heads). Gu et al.
                    average over every query, query 0 (all on position 0) too: their 0.3 is (0.3 T - 1) / (T - 1)
                    on this average, 0.289 at T = 64
  value_norm_ratio  ||v_0|| / mean_j>0 ||v_j||: the norm of the value vector at position 0 over the mean value norm
                    at positions 1..T-1 (the V that attention mixes, after a G2 gate where there is one), per
                    window and KV head, averaged over both. A sink head does nothing by attending to a key whose
                    value is near zero: where the sink is on position 0 the ratio falls far below 1 (Gu et al. 2025
                    and Sun et al. 2024 both report the sink token's small value)
  sink_pos          the position of the top key most often over (window, head) pairs (an int), and the fraction
  sink_pos_share    of pairs whose top key is there
  sink_token        the token id most often at the top key over (window, head) pairs (an int), and that fraction;
  sink_token_share  None / NaN when the probe did not see the ids (the model was not called as model(idx, ...))

With trigger tokens (Probe(model, triggers=[...]), the Bigram-Backcopy task's, data/bigram_backcopy), the
mechanism of its sink, each pooled over windows, heads and the query positions of one kind: trigger positions
(from position 2 on, a trigger token that does not follow another: where the task's next token copies the one
before) and the other positions 1..T-1:
  first_token_attn_trigger   attention on position 0 from trigger positions, and from the others: a sink head parks
  first_token_attn_other     the queries that have nothing to do on position 0
  prev_attn_trigger          attention on the previous position from trigger positions (what the copy needs)
  gate_mean_trigger          the mean gate score at trigger positions, and at the others: a gate that closes where
  gate_mean_other            its head has nothing to do (None without a gate)
They are None without triggers (or when the probe did not see the ids), NaN where no position of the kind exists.

With T < 2 there are no queries after position 0: the attention values, value_norm_ratio and max_act_rest are NaN
(max_act, max_act_first, act_ratio, gate_mean and gate_below_* are still taken), sink_pos, sink_token and the
trigger statistics None (JSON writers turn NaN into null). Ties go to the lowest position or token id.

probe.heads: "first_token_attn" and "sink_share" per layer, as a list of n_head floats (per head, averaged over
windows), and "value_norm_ratio" as a list of n_kv_head floats (per KV head: the values belong to those).
probe.windows: "first_token_attn", "max_act", "max_act_first", "max_act_rest", "act_ratio", "sink_share", "gate_mean",
"value_norm_ratio" (WINDOW_KEYS) per layer, as a float64 CPU tensor (B,): each window's value (averaged over heads;
gate_mean over the window's tokens, None without a gate), for bootstrapping over windows; stats[key][layer] is
windows[key][layer].mean().

probe.channels: per layer, the channels that carry the massive activation (massive_channels: the hidden state's
channels with the largest |h| at the position where each window's max |h| sits, their share of that position's
norm, and how often the same channel and position come back over the windows), a dict of ints, floats and lists,
JSON-friendly; probe.massive holds what it is computed from, per layer {"pos": (B,) int64, "h": (B, C) float32}.

The probe hooks each block (its output), each attention layer (its input) and the model (its input ids), and
recomputes that layer's queries, keys and gate logits from the input with CausalSelfAttention.project: one extra
c_attn matmul per layer, then every query's scores again for F-Attn (a flash forward on the Triton path), the late
half's for sink_share and, with triggers, every query's once more for prev_attn_trigger (a chunk of queries at a
time, never T x T): more than the layer's own attention costs, so it is meant for evaluation batches, not for every
training step.
"""

import math
from dataclasses import dataclass

import torch

from kernels import first_token_attention

TRIGGER_KEYS = ("first_token_attn_trigger", "first_token_attn_other", "prev_attn_trigger", "gate_mean_trigger",
                "gate_mean_other")
STAT_KEYS = ("first_token_attn", "max_act", "max_act_first", "max_act_rest", "act_ratio", "gate_mean", "gate_below_0.1",
             "gate_below_0.5", "sink_share", "sink_heads", "sink_pos", "sink_pos_share", "sink_token",
             "sink_token_share", "value_norm_ratio") + TRIGGER_KEYS
GATE_KEYS = ("gate_mean", "gate_below_0.1", "gate_below_0.5")
HEAD_KEYS = ("first_token_attn", "sink_share", "value_norm_ratio")
WINDOW_KEYS = ("first_token_attn", "max_act", "max_act_first", "max_act_rest", "act_ratio", "sink_share", "gate_mean",
               "value_norm_ratio")
SINK_HEAD_THRESHOLD = 0.3  # Gu et al.'s epsilon: a head whose mean attention on the first token exceeds it is a sink
SINK_GAP = 8  # sink_share's candidate keys stop T // SINK_GAP positions before the first late query (sink_keys)
TOP_CHANNELS = 3  # massive_channels: how many of the hidden state's channels it names per layer


# -----------------------------------------------------------------------------
# The measurements the project reports, named once. train.py's eval line and log records, the lab's summary table
# (lab/analyze.py) and the study's report (lab/repro.py, lab/report.py) all read MEASURES, so a measurement added here
# (and computed by the Probe, or by summarize) appears in all of them. What the papers report for a measure, and how
# the study compares a variant with its reference on it, are the report's (lab/report.py: PAPERS, COMPARE).

@dataclass(frozen=True)
class Measure:
    key: str  # its key in probe.stats, train.py's log records, the lab's summary.json and the study's records
    label: str  # its name in the eval line and in the tables' headers
    spec: str  # how a value is written: a format spec
    better: str = None  # "lower" or "higher": the direction the papers count as an improvement; None: neither
    mechanism: bool = False  # part of the sink's mechanism on the Bigram-Backcopy task: None on other data

    def format(self, value):
        return "n/a" if value is None else format(value, self.spec)


MEASURES = (
    Measure("val_loss", "val loss", ".4f", "lower"),
    Measure("first_token_attn", "F-Attn", ".3f", "lower"),
    Measure("sink_share", "sink share", ".3f", "lower"),
    Measure("sink_heads", "sink heads", ".2f", "lower"),
    Measure("max_act", "M-Act", ".1f", "lower"),
    Measure("peak_act", "peak act", ".1f", "lower"),
    Measure("gate_mean", "gate mean", ".3f"),
    Measure("gate_below_0.1", "gate < 0.1", ".2f"),
    Measure("loss_spikes", "loss spikes", "g", "lower"),
    Measure("first_token_attn_trigger", "F-Attn at triggers", ".3f", mechanism=True),
    Measure("first_token_attn_other", "F-Attn elsewhere", ".3f", mechanism=True),
    Measure("prev_attn_trigger", "previous-token attn at triggers", ".3f", mechanism=True),
    Measure("gate_mean_trigger", "gate at triggers", ".3f", mechanism=True),
    Measure("gate_mean_other", "gate elsewhere", ".3f", mechanism=True),
    Measure("max_act_first", "M-Act at position 0", ".1f", mechanism=True),
    Measure("max_act_rest", "M-Act elsewhere", ".1f", mechanism=True),
)
MEASURE = {m.key: m for m in MEASURES}
MECHANISM = tuple(m for m in MEASURES if m.mechanism)
MECHANISM_NOTE = ("The sink's mechanism on the Bigram-Backcopy task: trigger positions are those where the next "
                  "token copies the one before (a trigger token, from position 2 on, not after another trigger); "
                  "elsewhere: the other positions 1..T-1. A sink head puts the attention of the positions that have "
                  "nothing to do on position 0 (F-Attn elsewhere) and attends to the previous token at the triggers; "
                  "a gate can close where its head has nothing to do instead.")


def layer_mean(values):
    """Mean over layers of a per-layer measurement, skipping NaN; None for one the model does not have (gates off)."""
    values = [v for v in values or [] if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else None


def summarize(stats, peak_per_window):
    """A model's headline numbers from per-layer statistics: each measure of MEASURES that the probe takes per layer,
    averaged over layers (GA Table 4's F-Attn and M-Act are), and peak_act, the residual stream's largest |h| in each
    window over all layers (GN's max activation), averaged over windows. stats: {key: [one value per layer] or None};
    peak_per_window: a (B,) tensor or None. A measure the model does not have (a gate's, without a gate) is None."""
    out = {m.key: layer_mean(stats.get(m.key)) for m in MEASURES if m.key in STAT_KEYS}
    out["peak_act"] = None if peak_per_window is None else float(peak_per_window.double().mean())
    return out


def describe(record):
    """A record's measurements as one line of words, in MEASURES' order: those it has, and the sink's mechanism where
    it was measured at trigger positions (the Bigram-Backcopy task). A validation loss recorded as None was not
    finite (runfolder.finite_or_none): said, never left out."""
    def words(ms):
        return ", ".join(f"{m.label} {m.format(record[m.key]) if record[m.key] is not None else 'not finite'}"
                         for m in ms if record.get(m.key) is not None or (m.key == "val_loss" and m.key in record))
    on_task = any(record.get(key) is not None for key in TRIGGER_KEYS)
    return words(m for m in MEASURES if not m.mechanism) + (f"; the mechanism: {words(MECHANISM)}" if on_task else "")


def sink_keys(T):
    """How many candidate keys sink_share weighs in a window of T tokens: keys [0, T//2 - T//SINK_GAP), so that a gap
    of T//8 positions (none below T = 8) separates the last of them from the first late query (T//2). Without the
    gap the last candidate, T//2 - 1, sits right beside the first late query, and a head that attends to its recent
    tokens (as gated heads do) gives it the top share at the half-window boundary: recency, not a sink. A fraction
    of T keeps the measure comparable across window lengths (at T = 512: keys 0..191, queries 256..511)."""
    return T // 2 - T // SINK_GAP


def causal_rows(q, k, i0, i1, scale):
    """The attention rows of queries [i0, i1) over keys [0, i1), (B, H, i1 - i0, i1) in float32:
    softmax_j<=i(q_i . k_j * scale), zero where j > i. q: (B, H, T, D); k: (B, Hkv, T, D), H a multiple of Hkv (GQA:
    query head h reads KV head h // (H // Hkv), grouped as kernels.first_token_attention does, no repeated copy of k).
    Float32 even where the model runs under autocast. The probe's every explicit softmax is this one."""
    B, H, _, D = q.shape
    Hkv, c = k.size(1), i1 - i0
    with torch.autocast(q.device.type, enabled=False):
        qg = q[:, :, i0:i1].float().reshape(B, Hkv, H // Hkv * c, D)  # (B, Hkv, G * c, D): heads grouped by KV head
        s = (qg @ k[:, :, :i1].float().transpose(-2, -1)).view(B, H, c, i1) * scale
        after = torch.arange(i1, device=q.device) > torch.arange(i0, i1, device=q.device)[:, None]  # key j > query i
        return s.masked_fill(after, float("-inf")).softmax(-1)


@torch.no_grad()
def received_attention(q, k, chunk=128, scale=None, keys=None):
    """The attention each early key receives from the late queries, r (B, H, keys) in float32:

        r[b, h, j] = mean over i in [T//2, T) of softmax_j'<=i(q_i . k_j' * scale)[j],   j in [0, keys)

    keys: how many (T//2 by default, every key before the late half; at most T//2; the probe's sink_share takes
    sink_keys(T)). Under the causal mask every late query sees every one of these keys, so r[..., j] is key j's
    share of the late half's attention. q: (B, H, T, D); k: (B, Hkv, T, D) with H a multiple of Hkv (GQA, as
    causal_rows). scale: D ** -0.5 by default, the model's. `chunk` late queries at a time: memory
    O(B * H * chunk * T), never T x T. T < 2 gives r with no keys, (B, H, 0)."""
    if q.dim() != 4 or k.dim() != 4 or k.size(0) != q.size(0) or k.shape[2:] != q.shape[2:] or q.size(1) % k.size(1):
        raise ValueError(f"q must be (B, H, T, D) and k (B, Hkv, T, D) with H % Hkv == 0; got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}")
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of queries, got {chunk}")
    B, H, T, D = q.shape
    if keys is not None and not 0 <= keys <= T // 2:
        raise ValueError(f"keys={keys}: the candidate keys are the first 0..{T // 2} of a window of {T}")
    n = T // 2  # late queries [n, T)
    m = n if keys is None else keys  # candidate keys [0, m)
    scale = D ** -0.5 if scale is None else float(scale)
    r = torch.zeros(B, H, m, dtype=torch.float32, device=q.device)
    if m:
        for i0 in range(n, T, chunk):
            r += causal_rows(q, k, i0, min(i0 + chunk, T), scale)[..., :m].sum(-2)
    return r / (T - n)


@torch.no_grad()
def previous_token_attention(q, k, chunk=128, scale=None):
    """p (B, H, T) in float32: p[b, h, i] = softmax_j<=i(q_i . k_j * scale)[i - 1], the attention query i gives the
    position just before it; NaN at i = 0, which has none. q: (B, H, T, D); k: (B, Hkv, T, D), H a multiple of Hkv
    (GQA). `chunk` queries at a time: memory O(B * H * chunk * T), never T x T."""
    B, H, T, D = q.shape
    scale = D ** -0.5 if scale is None else float(scale)
    p = torch.full((B, H, T), float("nan"), dtype=torch.float32, device=q.device)
    for i0 in range(1, T, chunk):
        i1 = min(i0 + chunk, T)
        rows = causal_rows(q, k, i0, i1, scale)  # (B, H, c, i1)
        p[:, :, i0:i1] = rows.diagonal(offset=i0 - 1, dim1=-2, dim2=-1)  # row i's entry i - 1
    return p


def trigger_positions(idx, triggers):
    """(B, T) bool for token ids idx (B, T): where the Bigram-Backcopy task's copy rule applies, from position 2 on
    (position 0 holds BOS, and position 1's previous symbol was cut off by the window): a trigger token that does
    not follow another trigger. Windows without BOS (bos=False) leave position 1 out too, though its previous symbol
    is there: one rule for every run (their kept measurements were taken by it), a copy at position 1 counted with
    the other positions."""
    is_trigger = torch.isin(idx, torch.as_tensor(list(triggers), dtype=idx.dtype, device=idx.device))
    where = torch.zeros_like(is_trigger)
    where[:, 2:] = is_trigger[:, 2:] & ~is_trigger[:, 1:-1]
    return where


def value_norm_ratio(v):
    """(B, Hkv): ||v_0|| / mean_j=1..T-1 ||v_j|| per window and KV head, for values v (B, T, Hkv, D) (as
    CausalSelfAttention.project returns them), in float32 (float64 for float64 values); NaN where T < 2.
    Why it matters: a head attends to a sink to do nothing, and it does nothing only when the value it reads there
    is small: a sink on position 0 with a value as large as the others' would write that value into every position
    that parks there. A ratio far below 1 is the sink's value vector switched off; a gated head, which can close
    its gate instead, has no need of it."""
    norms = v.detach().to(torch.promote_types(v.dtype, torch.float32)).norm(dim=-1)  # (B, T, Hkv)
    if norms.size(1) < 2:
        return torch.full((norms.size(0), norms.size(2)), float("nan"), dtype=norms.dtype, device=v.device)
    return norms[:, 0] / norms[:, 1:].mean(1).clamp_min(torch.finfo(torch.float32).tiny)


def massive_channels(pos, h, k=TOP_CHANNELS):
    """The channels that carry the massive activation, from each window's hidden state h (N, C) at the position
    pos (N,) where its max |h| sits (probe.massive holds them per layer; lab/analyze.py pools them over batches):
    a dict

        channels           the k channels with the largest mean |h| over the windows, largest first (ints)
        values             their mean h over the windows, signed (a massive activation keeps its sign)
        share              the share of the position's squared norm ||h||^2 those k channels hold, averaged over
                           the windows: near 1 when a handful of channels carry the whole state
        top_channel        the channel of the max |h| most often over the windows (an int), and the fraction of
        top_channel_share  windows it is: 1.0 when the same channel carries it in every window
        pos                the position of the max |h| most often (an int; usually 0, the BOS token), and the
        pos_share          fraction of windows it is

    None for no windows. Why it matters: Sun et al. (2024) find that the massive activations sit in a few fixed
    channels of a few tokens (the first) and act as a bias the attention reads: through RMSNorm a huge channel
    shrinks every other channel of that token, which can make the sink's key stand out and its value small; the
    same channel in every window is a learned mechanism, not noise. top_channel and pos: ties go to the lowest."""
    if h.size(0) == 0:
        return None
    h = h.detach().float().cpu()
    a = h.abs()
    k = min(k, h.size(1))
    channels = a.mean(0).topk(k).indices
    energy = h.pow(2)
    share = energy[:, channels].sum(1) / energy.sum(1).clamp_min(torch.finfo(torch.float32).tiny)
    top, top_share = most_often(a.argmax(1))
    where, where_share = most_often(pos.detach().cpu())
    return {"channels": channels.tolist(), "values": h[:, channels].mean(0).tolist(), "share": share.mean().item(),
            "top_channel": top, "top_channel_share": top_share, "pos": where, "pos_share": where_share}


def _pooled(values, mask):
    """The mean of values (..., B, T) over the positions where mask (B, T) holds, as a float; NaN where none does."""
    mask = mask.expand_as(values)
    return values[mask].float().mean().item() if mask.any() else float("nan")


def most_often(values):
    """The most frequent value of a 1-D integer tensor (the smallest on a tie) and the fraction it is."""
    uniq, counts = torch.unique(values, return_counts=True)  # sorted: argmax takes the first, smallest, on a tie
    top = counts.argmax()
    return int(uniq[top].item()), counts[top].item() / values.numel()


class Probe:
    def __init__(self, model, attention_maps=False, gate_scores=None, triggers=None):
        """attention_maps: also keep each layer's attention probabilities (B, H, T, T), for heatmaps (small T
        only). gate_scores: a function called with each layer's gate scores (a tensor (B, T, ...)) and the trigger
        positions (a bool tensor (B, T), or None without triggers), e.g. to sample them. triggers: the token ids
        of the Bigram-Backcopy task's triggers (its meta.json), for the mechanism statistics (module docstring).
        Results (module docstring): stats (per layer), heads (per layer and head), windows (per layer and window)."""
        self.model, self.keep_maps, self.gate_scores = model, attention_maps, gate_scores
        self.triggers = None if triggers is None else list(triggers)
        self.stats = {key: [] for key in STAT_KEYS}
        self.heads = {key: [] for key in HEAD_KEYS}
        self.windows = {key: [] for key in WINDOW_KEYS}
        self.attention_maps = []
        self.massive = []  # per layer: {"pos": (B,), "h": (B, C)}, each window's hidden state where its max |h| sits
        self.channels = []  # per layer: massive_channels of those, set on exit
        self.top_keys = []  # per layer: {"pos": (B, H) int64, "token": (B, H) int64 or None}, sink_share's top keys
        self.hooks = []
        self._idx = None  # the input ids of the model's current forward

    def __enter__(self):
        if self.model.config.attn_window is not None:  # its statistics assume every earlier key is in view
            raise ValueError(f"Probe measures causal attention over the whole window; this model has attn_window="
                             f"{self.model.config.attn_window}: measure it with attn_window=None")
        self.hooks.append(self.model.register_forward_pre_hook(self._input_ids, with_kwargs=True))
        # and forgotten after it: a later model._forward (which has no hook) must not read this call's ids
        self.hooks.append(self.model.register_forward_hook(lambda *_: setattr(self, "_idx", None)))
        for block in self.model.transformer.h:
            self.hooks.append(block.attn.register_forward_hook(self._attention))
            self.hooks.append(block.register_forward_hook(self._block_output))
        return self

    def __exit__(self, *exc):
        for hook in self.hooks:
            hook.remove()
        self.hooks, self._idx = [], None
        self.channels = [massive_channels(m["pos"], m["h"]) for m in self.massive]
        if not self.stats["prev_attn_trigger"]:  # no triggers given, or no ids seen
            for key in TRIGGER_KEYS:
                self.stats[key] = None
        if self.model.config.gate == "none":
            for key in GATE_KEYS + ("gate_mean_trigger", "gate_mean_other"):
                self.stats[key] = None
            self.windows["gate_mean"] = None

    def summary(self):
        """This probe's headline numbers (summarize): the measures averaged over layers, and peak_act."""
        peaks = self.windows["max_act"]
        return summarize(self.stats, torch.stack(peaks).amax(0) if peaks else None)

    def _input_ids(self, model, args, kwargs):  # GPT.forward(idx, targets=None)
        self._idx = args[0] if args else kwargs.get("idx")

    def _window_stat(self, key, per_window):
        """Record a layer's per-window values (B,) and their mean as the layer's statistic."""
        w = per_window.detach().double().cpu()
        self.windows[key].append(w)
        self.stats[key].append(w.mean().item())

    @torch.no_grad()
    def _block_output(self, block, args, x):
        a = x.detach().abs().flatten(1)
        a = a.to(torch.promote_types(a.dtype, torch.float32))  # bf16 -> fp32 for the median; fp64 stays
        peak, where = a.max(1)
        self._window_stat("max_act", peak)  # massive activations, per window
        # the hidden state at the position of each window's max |h|: which channels carry it (massive_channels)
        pos = where // x.size(-1)
        self.massive.append({"pos": pos.cpu(), "h": x.detach()[torch.arange(x.size(0), device=x.device), pos]
                             .float().cpu()})
        self._window_stat("act_ratio", peak / a.median(1).values.clamp_min(torch.finfo(torch.float32).tiny))
        by_position = x.detach().abs().amax(-1).to(a.dtype)  # (B, T): the largest |h| at each position
        self._window_stat("max_act_first", by_position[:, 0])
        rest = by_position[:, 1:]
        self._window_stat("max_act_rest",
                          rest.amax(1) if rest.size(1) else torch.full_like(by_position[:, 0], float("nan")))

    def _trigger_positions(self, B, T, device):
        """(B, T) bool: where the task's copy rule applies, or None without triggers or ids."""
        if self.triggers is None or not (isinstance(self._idx, torch.Tensor) and tuple(self._idx.shape) == (B, T)):
            return None
        return trigger_positions(self._idx.to(device), self.triggers)

    @torch.no_grad()
    def _attention(self, attn, args, output):
        x, rope = args[0], (args[1] if len(args) > 1 else None)
        q, k, v, g = attn.project(x, rope)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, heads, T, D)
        B, H, T, _ = q.shape
        trig = self._trigger_positions(B, T, q.device)
        ratio = value_norm_ratio(v).double().cpu()  # (B, Hkv): the value a query reads when it parks on position 0
        self._window_stat("value_norm_ratio", ratio.mean(1))
        self.heads["value_norm_ratio"].append(ratio.mean(0).tolist())
        if T > 1:
            self._sinks(attn, q, k, trig)
        else:  # the first query can only see itself: nothing to average over
            nan = torch.full((B,), float("nan"))
            self.top_keys.append({"pos": None, "token": None})
            for key in ("first_token_attn", "sink_share"):
                self._window_stat(key, nan)
                self.heads[key].append([float("nan")] * H)
            for key, value in (("sink_heads", float("nan")), ("sink_pos", None), ("sink_pos_share", float("nan")),
                               ("sink_token", None), ("sink_token_share", float("nan"))):
                self.stats[key].append(value)
        if attn.gate is not None:
            s = attn.gate.score(g).float()
            s = s.expand(B, T, *s.shape[2:])  # an input-independent gate: the same scores for every token
            self._window_stat("gate_mean", s.flatten(1).mean(1))
            nan = not bool(torch.isfinite(s).all())  # a NaN score is neither below nor above: NaN, as gate_mean
            self.stats["gate_below_0.1"].append(float("nan") if nan else (s < 0.1).float().mean().item())
            self.stats["gate_below_0.5"].append(float("nan") if nan else (s < 0.5).float().mean().item())
            if trig is not None:  # scores (B, T, H, D or 1), averaged per position first
                per_position = s.flatten(2).mean(-1)
                other = torch.ones_like(trig)
                other[:, 0] = False
                self.stats["gate_mean_trigger"].append(_pooled(per_position, trig))
                self.stats["gate_mean_other"].append(_pooled(per_position, other & ~trig))
            if self.gate_scores is not None:
                self.gate_scores(s, trig)
        if self.keep_maps:  # explicit softmax, T x T, in float32
            self.attention_maps.append(causal_rows(q, k, 0, T, attn.head_dim ** -0.5))

    def _sinks(self, attn, q, k, trig):
        """F-Attn and the sink-anywhere statistics of one layer, T > 1; with trig (the trigger positions, (B, T)),
        the mechanism statistics."""
        B, H, T, _ = q.shape
        # F-Attn: average over queries 1..T-1
        p0 = first_token_attention(q, k, causal=True, backend=attn.config.attn_backend)[:, :, 1:].float()  # (B, H, T-1)
        self._window_stat("first_token_attn", p0.mean((1, 2)))
        if trig is not None:
            later = trig[:, 1:].unsqueeze(1)  # (B, 1, T-1): queries 1..T-1, as p0
            self.stats["first_token_attn_trigger"].append(_pooled(p0, later))
            self.stats["first_token_attn_other"].append(_pooled(p0, ~later))
            prev = previous_token_attention(q, k, scale=attn.head_dim ** -0.5)
            self.stats["prev_attn_trigger"].append(_pooled(prev, trig.unsqueeze(1)))
        f_attn = p0.mean((0, 2))  # (H,)
        self.heads["first_token_attn"].append(f_attn.tolist())
        finite = bool(torch.isfinite(f_attn).all())  # a NaN head is no "no": the count is NaN, as F-Attn
        self.stats["sink_heads"].append((f_attn > SINK_HEAD_THRESHOLD).float().mean().item() if finite
                                        else float("nan"))
        # a sink anywhere: the key that receives the most of the late queries' attention, per window and head, among
        # the keys at least T//8 before the first late query (sink_keys: not the recent keys of a local head)
        top, pos = received_attention(q, k, scale=attn.head_dim ** -0.5, keys=sink_keys(T)).max(-1)  # (B, H) each
        self._window_stat("sink_share", top.mean(1))
        self.heads["sink_share"].append(top.mean(0).tolist())
        named = bool(torch.isfinite(top).all())  # the argmax of NaN names no key
        ids = isinstance(self._idx, torch.Tensor) and tuple(self._idx.shape) == (B, T)  # the tokens at those keys
        tokens = self._idx.to(pos.device).gather(1, pos) if named and ids else None
        self.top_keys.append({"pos": pos.cpu() if named else None, "token": None if tokens is None else tokens.cpu()})
        for key, top_keys in (("sink_pos", pos if named else None), ("sink_token", tokens)):
            value, share = (None, float("nan")) if top_keys is None else most_often(top_keys.flatten())
            self.stats[key].append(value)
            self.stats[key + "_share"].append(share)


@torch.no_grad()
def attention_maps(model, idx):
    """Per-layer attention probabilities (B, n_head, T, T) of a short sequence, for heatmaps (GA Fig. 2)."""
    with Probe(model, attention_maps=True) as probe:
        model(idx)
    return probe.attention_maps


# -----------------------------------------------------------------------------
# Loss spikes: the training loss's stability, counted as a reader of the curve would count them

SPIKE_EMA = 0.95  # decay of the running mean and variance that a loss spike is measured against (~20 steps)
SPIKE_WARMUP = 20  # steps before spikes are counted: the running variance needs a few steps to mean anything
SPIKE_MIN_NATS = 0.1  # a spike rises at least this far above the running mean, however quiet the loss was


def count_spike(health, loss, threshold):
    """Update the loss health with one finite step's loss; return True if the step is in a spike.
    A spike is what a reader of the loss curve would call one: a sudden rise far outside the recent noise,
    i.e. more than `threshold` standard deviations (and SPIKE_MIN_NATS) above the exponential moving
    average of the earlier losses. A spike that lasts several steps counts once; a slow drift upwards moves
    the average along with it and is no spike; a jump to a higher plateau is one spike."""
    mean, var, steps = health["loss_ema"], health.get("loss_var", 0.0), health.get("steps", 0)
    spiking = (mean is not None and steps >= SPIKE_WARMUP
               and loss - mean > max(threshold * math.sqrt(var), SPIKE_MIN_NATS))
    if spiking and not health.get("in_spike", False):
        health["loss_spikes"] += 1
    if mean is None:
        mean = loss
    else:  # exponentially weighted mean and variance, updated in place (Finch 2009)
        delta = loss - mean
        mean += (1 - SPIKE_EMA) * delta
        var = SPIKE_EMA * (var + (1 - SPIKE_EMA) * delta * delta)
    health.update(loss_ema=mean, loss_var=var, steps=steps + 1, in_spike=spiking)
    return spiking


# -----------------------------------------------------------------------------
# Speed: model FLOPs utilisation

# Dense bf16 tensor-core peak FLOP/s by device name (no sparsity). The longest key the name holds wins: "NVIDIA L40"
# holds L4 too, "NVIDIA GH200 480GB" H200, "NVIDIA H800 PCIe" H800.
PEAK_FLOPS = [
    ("H200 NVL", 835e12), ("H200", 989e12), ("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12),
    ("H800 PCIe", 756e12), ("H800", 989e12), ("GH200", 989e12), ("GB200", 2500e12), ("B200", 2250e12),
    ("A100", 312e12), ("A800", 312e12), ("L40S", 362e12), ("L40", 181e12), ("L4", 121e12), ("A10G", 70e12),
    ("A10", 125e12), ("RTX 4090", 165e12), ("RTX 3090 Ti", 80e12), ("RTX 3090", 71e12), ("V100", 125e12),
    ("T4", 65e12),
]


def peak_flops(device=None):
    """Peak bf16 FLOP/s of a CUDA device (dense, fp32 accumulation; fp16 for the V100 and T4, which have no bf16 and
    train in fp16 here), or None if unknown (CPU, MPS, an unlisted GPU; a CPU run on a machine with a GPU too)."""
    if not torch.cuda.is_available() or (device is not None and torch.device(device).type != "cuda"):
        return None
    name = torch.cuda.get_device_name(device)
    return max(((len(key), flops) for key, flops in PEAK_FLOPS if key in name), default=(0, None))[1]


def flops_per_token(model, seq_len=None):
    """Training FLOPs per token (forward + backward = 3x forward): 6 per weight of the matmuls, plus
    causal attention, which scores T/2 keys per query on average: 3 * 2 * 2 * L * H * D * T/2."""
    cfg, T = model.config, seq_len or model.config.block_size
    # num_params() counts the token embedding once: tied, that is the lm_head matmul's share; untied, the embedding's
    # own copy is a lookup, not a matmul, and costs no FLOPs
    weights = model.num_params() - (0 if cfg.tie_embeddings else model.transformer.wte.weight.numel())
    return 6 * weights + 6 * cfg.n_layer * cfg.n_head * cfg.head_dim * T


def estimate_mfu(model, fwdbwd_per_iter, dt, seq_len=None, device=None, peak=None):
    """Model FLOPs utilisation: achieved FLOP/s over the device's peak bf16 rate. fwdbwd_per_iter
    sequences of seq_len tokens took dt seconds. Returns None when the peak is unknown (e.g. CPU)."""
    peak = peak or peak_flops(device)
    if peak is None:
        return None
    T = seq_len or model.config.block_size
    return flops_per_token(model, T) * T * fwdbwd_per_iter / dt / peak

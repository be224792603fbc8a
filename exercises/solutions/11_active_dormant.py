"""
Exercise 11: active and dormant. Split a trained head's attention, and find where the gate closes.

On the sink lab's Bigram-Backcopy task (Guo et al. 2024, "Active-Dormant Attention Heads") the one head of the
baseline is needed only at the trigger positions, where the next symbol copies the one before the trigger: there
it is *active* and attends to the previous token. Everywhere else it is *dormant* and parks its attention on the
BOS token at position 0, the sink. With the G1 gate the head need not park: the gate can close instead. You
measure both, by hand, on the two trained runs, and compare your numbers with probe.py's.

  gap 1: attention_probs(model, idx)    per layer: the attention probabilities (B, H, T, T) the model's heads
                                        used on the windows idx (forward hooks)
  gap 2: attention_split(probs, trig)   one layer's probabilities, split by position kind: the attention on
                                        position 0 at the trigger positions and elsewhere, and the attention on
                                        the previous token at the trigger positions
  gap 3: gate_scores(model, idx)        per layer: the gate scores (B, T, groups, width) the G1 gate multiplied
                                        each head's output by (forward hooks)
  gap 4: gate_split(scores, trig)       one layer's gate scores: their mean at the trigger positions and elsewhere

Given: validation_windows and task_triggers (a run's windows and its task's trigger tokens), probe.py's
trigger_positions (where the copy rule applies), and mechanism(run_dir), which puts your four functions together
on a trained run. Train the two runs (README.md gives the commands; 20 to 80 seconds each on a 2-core CPU), then:
    python exercises/check.py 11
"""

import os

import torch

from cli import dataset_dir
from runfolder import CHECKPOINT, load_checkpoint
from data.shards import bos_token, read_meta, val_batches
from probe import trigger_positions

VAL_BATCHES = 4  # validation batches measured per run (each of the run's batch_size windows)


def validation_windows(checkpoint, batches=VAL_BATCHES):
    """Fixed validation windows for a trained run, as one (batches * batch_size, block_size) int64 tensor of token
    ids from the run's own dataset, each window starting with the BOS token <|endoftext|> when the run was trained
    that way (the sink lab's are). The same windows every time, for every run trained on the same data with the same
    sizes, so the baseline and the G1 run are measured on the same text."""
    cfg = checkpoint["config"]  # train.py's settings for this run
    data_dir = dataset_dir(cfg["dataset"], cfg.get("data_dir"))
    bos = bos_token(data_dir) if cfg.get("bos", False) else None
    block_size = checkpoint["model_args"]["block_size"]
    return torch.cat([x for x, _ in val_batches(data_dir, block_size, cfg["batch_size"], batches, bos=bos)])


def task_triggers(checkpoint):
    """The trigger token ids of the run's Bigram-Backcopy task (its meta.json, written by data/bigram_backcopy)."""
    cfg = checkpoint["config"]
    data_dir = dataset_dir(cfg["dataset"], cfg.get("data_dir"))
    triggers = (read_meta(data_dir) or {}).get("triggers")
    if not triggers:
        raise ValueError(f"{data_dir} is not a Bigram-Backcopy dataset (its meta.json names no triggers): "
                         "train the runs with config/sink_lab.py, as README.md says")
    return list(triggers)


@torch.no_grad()
def attention_probs(model, idx):
    """The attention probabilities of a model.GPT on the windows idx (B, T): a list with one float32 tensor
    (B, n_head, T, T) per layer, in layer order; [b, h, i, j] is the weight query i of window b gives key j in
    head h (0 for j > i: causal; each row sums to 1), as the model computed them in its forward. The models here
    have as many key heads as query heads and attend over the whole window. Leaves no hook behind."""
    maps = []

    def record(attn, args, output):
        x, rope = args[0], args[1]  # Block.forward calls attn(ln_1(x), rope, cache)
        q, k, _, _ = attn.project(x, rope)  # (B, T, H, D): as the attention uses them, RoPE (and QK-norm) applied
        q, k = q.transpose(1, 2).float(), k.transpose(1, 2).float()  # (B, H, T, D)
        T = q.size(2)
        scores = (q @ k.transpose(-2, -1)) * attn.head_dim ** -0.5  # (B, H, T, T): query i's score for key j
        future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)  # key j after query i
        maps.append(scores.masked_fill(future, float("-inf")).softmax(dim=-1))  # over the keys of each query

    hooks = [block.attn.register_forward_hook(record) for block in model.transformer.h]
    try:
        model(idx)
    finally:  # a hook left behind would keep recording on every later forward of this model
        for hook in hooks:
            hook.remove()
    return maps


def attention_split(probs, trig):
    """One layer's attention split by position kind. probs: (B, H, T, T) attention probabilities; trig: (B, T) bool,
    True at the trigger positions (probe.trigger_positions). Returns three Python floats:
      first_token_attn_trigger   the attention on position 0 (the BOS token) from the trigger positions
      first_token_attn_other     the attention on position 0 from the other positions 1..T-1
      prev_attn_trigger          the attention on the previous position from the trigger positions
    each pooled as probe.Probe pools them: one mean over every (window, head, position) of the kind."""
    B, H, T, _ = probs.shape
    first = probs[:, :, :, 0]  # (B, H, T): each query's attention on position 0
    prev = probs.diagonal(offset=-1, dim1=-2, dim2=-1)  # (B, H, T-1): query i's attention on key i-1, i = 1..T-1
    other = ~trig
    other[:, 0] = False  # query 0 sees only itself: its 1 says nothing about the head
    at = lambda mask, values: values[mask.unsqueeze(1).expand_as(values)].mean().item()  # noqa: E731
    return at(trig, first), at(other, first), at(trig[:, 1:], prev)


@torch.no_grad()
def gate_scores(model, idx):
    """The gate scores of a gated model.GPT (config.gate != "none") on the windows idx (B, T): a list with one
    float32 tensor (B, T, groups, width) per layer (model.GPTConfig.gate_shape(): for G1 elementwise, one score per
    channel of each head), the scores in (0, 1) that the gate multiplied by, as the model computed them in its
    forward. Leaves no hook behind."""
    scores = []

    def record(gate, args, output):
        y, logits = args  # Gate.forward(y, s): the tensor it gates and its logits (B, T, groups, width)
        scores.append(gate.score(logits).float())  # the activation's output, what y is multiplied by

    hooks = [block.attn.gate.register_forward_hook(record) for block in model.transformer.h]
    try:
        model(idx)
    finally:
        for hook in hooks:
            hook.remove()
    return scores


def gate_split(scores, trig):
    """One layer's gate scores (B, T, groups, width), split by position kind (trig (B, T) bool, as above). Returns two
    Python floats: the mean score at the trigger positions and at the other positions 1..T-1, each pooled as
    probe.Probe pools them: one mean over every (window, position) of the kind, of each position's mean score."""
    per_position = scores.flatten(2).mean(-1)  # (B, T): each token's mean score over heads and channels
    elsewhere = ~trig & (torch.arange(trig.size(1), device=trig.device) > 0)  # positions 1..T-1, no trigger
    return per_position[trig].mean().item(), per_position[elsewhere].mean().item()


def mechanism(run_dir):
    """A trained sink-lab run's mechanism, measured with your four functions on validation_windows: a dict with
    probe.TRIGGER_KEYS' names (the gate's two None for a model without a gate). The sink lab's model has one layer:
    layer 0."""
    model, checkpoint = load_checkpoint(os.path.join(run_dir, CHECKPOINT))  # eval mode, on the CPU
    idx = validation_windows(checkpoint)
    trig = trigger_positions(idx, task_triggers(checkpoint))
    first_trigger, first_other, prev_trigger = attention_split(attention_probs(model, idx)[0], trig)
    gate_trigger = gate_other = None
    if model.config.gate != "none":
        gate_trigger, gate_other = gate_split(gate_scores(model, idx)[0], trig)
    return {"first_token_attn_trigger": first_trigger, "first_token_attn_other": first_other,
            "prev_attn_trigger": prev_trigger, "gate_mean_trigger": gate_trigger, "gate_mean_other": gate_other}


# The answer's key fragments: none may appear in the statement, the starter, the checks or what they print.
GIVEAWAYS = [
    "attn.project(x, rope)",
    "masked_fill(future, float(\"-inf\")).softmax(dim=-1)",
    "diagonal(offset=-1, dim1=-2, dim2=-1)",
    "other[:, 0] = False",
    "gate.score(logits)",
    "scores.flatten(2).mean(-1)",
]

# known mistakes, for CI: (the check that must catch it, text of this file, the mistake). Each text is split into
# two literals so that it occurs once in this file: in the code above, not here.
MUTANTS = [
    ("probs_vs_probe", "x, rope = args[0], args[1]  # Block" ".forward", "x, rope = args[0], None  # Block.forward"),
    ("probs_shape", "maps.append(scores.masked_fill(" "future, float(\"-inf\")).softmax",
     "maps.append((scores).softmax"),  # no causal mask: the queries see the future
    ("split_vs_probe", "at(other, first), at(trig[:, " "1:], prev)",
     "at(other, first), at(trig[:, :-1], prev)"),  # the diagonal's entries misaligned with the positions by one
    ("split_vs_probe", "    other[:, 0] = " "False  # query 0", "    pass  # query 0"),
    ("gate_scores_shape", "scores.append(gate.score(" "logits).float())", "scores.append(logits.float())"),
    ("probs_shape", "softmax(dim=-1))  # over the keys " "of each query",  # the maps transposed: rows are keys
     "softmax(dim=-1).transpose(-2, -1))"),
    ("probs_shape", "    try:\n        model(idx)\n    finally:  # a hook left " "behind",  # no finally: a failed
     "    if True:\n        model(idx)\n    if True:  # a hook left behind"),  # forward leaves the hooks on
    ("gate_scores_shape", "    try:\n        model(idx)\n    finally:\n        for hook in hooks:\n        " "    hook.remove()\n    return scores",
     "    model(idx)\n    for hook in hooks:\n        hook.remove()\n    return scores"),
    ("gate_split_vs_probe", "return per_position[trig].mean().item(), " "per_position[elsewhere].mean().item()",
     "return (torch.stack([w[m].mean() for w, m in zip(per_position, trig)]).nanmean().item(), "
     "torch.stack([w[m].mean() for w, m in zip(per_position, elsewhere)]).nanmean().item())"),  # per window
    ("split_vs_probe", "    at = lambda mask, values: values[mask.unsqueeze(1).expand_as(" "values)].mean().item()",
     "    at = lambda mask, values: torch.stack([v[m.expand_as(v)].mean() for v, m in zip(values, mask.unsqueeze(1))])"
     ".mean().item()", "a mean per window"),  # a mean per window, then over the windows (NaN for a window without)
]

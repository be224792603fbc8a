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
    # TODO(11-gap1): run the model on idx and, for each layer, get hold of the queries and keys its attention used in
    #                this forward (forward hooks; read model.py's CausalSelfAttention to see where they are made and
    #                what happens to them before the attention), then turn them into the probabilities the attention
    #                computed: float32, (B, n_head, T, T), causal. Remove the hooks, even if the forward fails
    raise NotImplementedError("11-gap1: write attention_probs")


def attention_split(probs, trig):
    """One layer's attention split by position kind. probs: (B, H, T, T) attention probabilities; trig: (B, T) bool,
    True at the trigger positions (probe.trigger_positions). Returns three Python floats:
      first_token_attn_trigger   the attention on position 0 (the BOS token) from the trigger positions
      first_token_attn_other     the attention on position 0 from the other positions 1..T-1
      prev_attn_trigger          the attention on the previous position from the trigger positions
    each pooled as probe.Probe pools them: one mean over every (window, head, position) of the kind."""
    # TODO(11-gap2): from probs, the attention on position 0 and on the previous position; select the positions of
    #                each kind with trig (elsewhere: positions 1..T-1 that are not triggers); pool each as the probe
    #                does. Do not change probs or trig in place
    raise NotImplementedError("11-gap2: write attention_split")


@torch.no_grad()
def gate_scores(model, idx):
    """The gate scores of a gated model.GPT (config.gate != "none") on the windows idx (B, T): a list with one
    float32 tensor (B, T, groups, width) per layer (model.GPTConfig.gate_shape(): for G1 elementwise, one score per
    channel of each head), the scores in (0, 1) that the gate multiplied by, as the model computed them in its
    forward. Leaves no hook behind."""
    # TODO(11-gap3): run the model on idx and record, for each layer, the scores its gate multiplied by in this
    #                forward (forward hooks; read model.py's Gate and where CausalSelfAttention calls it), float32,
    #                (B, T, groups, width). Remove the hooks, even if the forward fails
    raise NotImplementedError("11-gap3: write gate_scores")


def gate_split(scores, trig):
    """One layer's gate scores (B, T, groups, width), split by position kind (trig (B, T) bool, as above). Returns two
    Python floats: the mean score at the trigger positions and at the other positions 1..T-1, each pooled as
    probe.Probe pools them: one mean over every (window, position) of the kind, of each position's mean score."""
    # TODO(11-gap4): the mean score of each position kind, pooled as the probe does (every score of a position
    #                counts). Do not change scores or trig in place
    raise NotImplementedError("11-gap4: write gate_split")


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

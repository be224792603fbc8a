"""
Exercise 08: predict, then measure. Does the G1 gate shrink the massive activations of a small GPT?

The Gated Attention paper (GA, Table 4) reports that G1 cuts M-Act, the largest |activation| each layer outputs
(averaged over layers), from 1053 to 94 in a 15B MoE model. Does that happen in the sink lab's one-layer model,
where G1 removes the attention sink? Say what you expect BEFORE you train, then measure it.

  gap 1: PREDICTION_MAX_ACT and REASON       your prediction, written before you train (the constants below)
  gap 2: max_activation(model, idx)          per layer: max |h| of the block's output in each window, averaged
                                             over the windows (forward hooks on model.transformer.h)
  gap 3: measure(run_dir)                    a trained run's M-Act: the mean over layers of max_activation on
                                             fixed validation windows (validation_windows below builds them)

Then train the two runs (README.md gives the commands; 20 to 80 seconds each on a 2-core CPU) and check:
    python exercises/check.py 08
"""

import os

import torch

from cli import dataset_dir
from runfolder import CHECKPOINT, load_checkpoint
from data.shards import bos_token, val_batches

# The prediction, written before training (here: the papers' finding, for the checks; yours may differ).
PREDICTION_MAX_ACT = "lower with G1"
REASON = ("The gate lets a head output ~0 for a token by itself, so the model has less need for an attention sink "
          "and for the massive activations that make the sink token stand out.")

VAL_BATCHES = 4  # validation batches measured per run (each of the run's batch_size windows)


def validation_windows(checkpoint, batches=VAL_BATCHES):
    """Fixed validation windows for a trained run: a list of `batches` (batch_size, block_size) int64 tensors of
    token ids, from the run's own dataset, block_size and batch_size; each window starts with <|endoftext|> when
    the run was trained that way (train.py's bos). The same windows every time, for every run trained on the
    same data with the same sizes, so a baseline and a G1 run are measured on the same text."""
    cfg = checkpoint["config"]  # train.py's settings for this run
    data_dir = dataset_dir(cfg["dataset"], cfg.get("data_dir"))
    bos = bos_token(data_dir) if cfg.get("bos", False) else None
    block_size = checkpoint["model_args"]["block_size"]
    return [x for x, _ in val_batches(data_dir, block_size, cfg["batch_size"], batches, bos=bos)]


@torch.no_grad()
def max_activation(model, idx):
    """M-Act per layer of a model.GPT on a batch of windows idx (B, T): for each block of model.transformer.h,
    the largest |h| over the block's output (B, T, C) within each window, averaged over the B windows. Returns a
    list of n_layer floats, in layer order. Leaves no hook behind on the model."""
    per_layer = []  # the hooks fire in layer order, each appending its layer's value

    def record(block, args, output):
        # output: (B, T, C), the residual stream after this block. One max |h| per window, then the mean over
        # windows: a max over the whole batch would grow with the batch size (more windows, more chances)
        per_layer.append(output.abs().flatten(1).amax(dim=1).mean().item())

    hooks = [block.register_forward_hook(record) for block in model.transformer.h]
    try:
        model(idx)
    finally:  # a hook left behind would keep recording on every later forward of this model
        for hook in hooks:
            hook.remove()
    return per_layer


def measure(run_dir):
    """A trained run's M-Act: load run_dir/ckpt.pt, compute max_activation on each batch of
    validation_windows(checkpoint), average each layer's value over the batches, then average over the layers.
    Returns one float."""
    model, checkpoint = load_checkpoint(os.path.join(run_dir, CHECKPOINT))  # eval mode, on the CPU
    per_batch = [max_activation(model, x) for x in validation_windows(checkpoint)]  # each: one value per layer
    per_layer = [sum(values) / len(values) for values in zip(*per_batch)]  # over batches (all the same size)
    return sum(per_layer) / len(per_layer)  # M-Act: the mean over layers, as GA reports it


# known mistakes, for CI: (the check that must catch it, text of this file, the mistake). Each text is split into
# two literals so that it occurs once in this file: in the code above, not here.
MUTANTS = [
    ("prediction", 'PREDICTION_MAX_ACT = "' 'lower with G1"', 'PREDICTION_MAX_ACT = "lower"'),  # not one of the three
    ("max_activation_vs_probe", "output.abs().flatten(1)" ".amax(dim=1).mean().item()",
     "output.abs().max().item()"),  # the max over the whole batch, not per window then averaged
    ("max_activation_vs_probe", "block.register_forward_hook(" "record) for block",
     "block.attn.register_forward_hook(record) for block"),  # the attention's output, not the block's
    ("measure_vs_probe", "return sum(per_layer) / " "len(per_layer)  # M-Act",
     "return max(per_layer)  # M-Act", "the largest"),  # the largest layer, not the mean over layers
    ("measure_vs_probe", "return sum(per_layer) / " "len(per_layer)  # M-Act",
     "return per_layer[-1]  # M-Act", "the last"),  # the last layer, not the mean over layers
    ("max_activation_shape", "    try:\n        model(idx)\n    finally:  # a hook left " "behind",  # no finally:
     "    if True:\n        model(idx)\n    if True:  # a hook left behind"),  # a failed forward leaves the hooks
]

# the answer's key fragments: none may appear in the statement, the starter, the checks or the checker's messages,
# only in hints.md's later hints (split so that each occurs once in the code above, as MUTANTS' texts must)
GIVEAWAYS = ["output.abs().flatten(1).amax(" "dim=1).mean()",
             "block.register_forward_hook(rec" "ord) for block in model.transformer.h",
             "[max_activation(model, x) for x in " "validation_windows(checkpoint)]", "zip(" "*per_batch)"]

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
from runfolder import load_checkpoint
from data.shards import bos_token, val_batches

# TODO(08-gap1): before you train, replace "" with one of "lower with G1", "about the same", "higher with G1":
#                how does the G1 run's M-Act compare with the baseline's? And say why, in one sentence.
PREDICTION_MAX_ACT = ""
REASON = ""

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
    # TODO(08-gap2): a list of n_layer floats, one per block of model.transformer.h, in order: the max |h| of the
    #                block's output within each window, averaged over the windows, seen through forward hooks;
    #                no hook may stay on the model, even if the forward raises
    raise NotImplementedError("08-gap2: write max_activation")


def measure(run_dir):
    """A trained run's M-Act: load run_dir/ckpt.pt, compute max_activation on each batch of
    validation_windows(checkpoint), average each layer's value over the batches, then average over the layers.
    Returns one float."""
    # TODO(08-gap3): one float: the run's M-Act, from max_activation on every batch of validation_windows, each
    #                layer averaged over the batches, then the layers averaged (runfolder.load_checkpoint returns
    #                (model, checkpoint), the model in eval mode on the CPU)
    raise NotImplementedError("08-gap3: write measure")

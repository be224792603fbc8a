"""Datasets as token shards: data/shards.py holds the format and the loader; each data/<name>/prepare.py
makes the shards of one dataset in data/<name>/."""

import importlib
import os

from cli import REPO, fail
from data.shards import bos_token, find_shards, max_token_id, read_meta

# The datasets that need no download, which train.py (and lab/repro.py) prepare themselves the first time a run asks
# for one whose folder holds no shards: how each is made.
ON_FIRST_USE = {
    "pystdlib": "tokenizing this Python's standard library",
    "bigram_backcopy": "generating the Bigram-Backcopy task",
}


def prepare_on_first_use(name, out_dir):
    """Prepare dataset `name` (one of ON_FIRST_USE) into out_dir with its prepare.py's defaults."""
    print(f"preparing the dataset {name} in {out_dir} (one time): {ON_FIRST_USE[name]}", flush=True)
    importlib.import_module(f"data.{name}.prepare").prepare(out_dir=out_dir)  # refuses a folder holding other files


def prepare_if_missing(name, data_dir):
    """A dataset of ON_FIRST_USE whose folder holds no training shards is prepared now (train.py, lab/repro.py)."""
    try:
        if name in ON_FIRST_USE and not find_shards(data_dir, "train"):
            prepare_on_first_use(name, data_dir)
    except (OSError, ValueError) as e:
        fail(f"cannot prepare the dataset {name} in {data_dir}: {e}")


def check_training_data(name, data_dir, vocab_size, bos):
    """Stop with one line unless data_dir holds shards a model of vocab_size can train on: prepared, readable, its
    token ids (and with bos=True its BOS token, which it returns; else None) inside the vocabulary."""
    if not find_shards(data_dir, "train") or not find_shards(data_dir, "val"):
        script = os.path.join("data", name, "prepare.py")
        how = (f"python {script}" if os.path.isfile(os.path.join(REPO, script))
               else f"python data/textdir/prepare.py --src DIR --name {name}")
        fail(f"dataset {name!r} is not prepared: no {name}_train_*.bin and _val_*.bin shards in "
             f"{data_dir}. Prepare it first: {how}")
    read_meta(data_dir)  # a malformed meta.json is reported here
    largest = max_token_id(data_dir)
    if largest >= vocab_size:
        fail(f"the shards in {data_dir} hold token id {largest} but the model has vocab_size={vocab_size}: "
             f"the data was made with another tokenizer, or vocab_size must be at least {largest + 1}")
    token = bos_token(data_dir) if bos else None
    if token is not None and token >= vocab_size:
        fail(f"bos=True anchors windows with token {token}, but the model has vocab_size={vocab_size}")
    return token

"""Datasets as token shards: data/shards.py holds the format and the loader; each data/<name>/prepare.py
makes the shards of one dataset in data/<name>/."""

import importlib

# The datasets that need no download, which train.py (and repro.py) prepare themselves the first time a run asks
# for one whose folder holds no shards: how each is made.
ON_FIRST_USE = {
    "pystdlib": "tokenizing this Python's standard library",
    "bigram_backcopy": "generating the Bigram-Backcopy task",
}


def prepare_on_first_use(name, out_dir):
    """Prepare dataset `name` (one of ON_FIRST_USE) into out_dir with its prepare.py's defaults."""
    print(f"preparing the dataset {name} in {out_dir} (one time): {ON_FIRST_USE[name]}", flush=True)
    importlib.import_module(f"data.{name}.prepare").prepare(out_dir=out_dir)  # refuses a folder holding other files

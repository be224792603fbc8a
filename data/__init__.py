"""Datasets as token shards: data/shards.py holds the format and the loader; each data/<name>/prepare.py
makes the shards of one dataset in data/<name>/."""

import argparse
import difflib
import importlib
import os
import sys

from cli import fail
from data.shards import (DATA_ROOT, bos_token, find_shards, hold_preparation, max_token_id, prepare_command, read_meta,
                         release_preparation)

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
    """A dataset of ON_FIRST_USE whose folder holds no training shards, or a preparation of its defaults that stopped
    part-way (a Ctrl-C on first use), is prepared now (train.py, lab/repro.py): seconds, and the preparation clears
    what the last one left. Only in a folder meant for it, data/<name>/ or one of another place named <name>: a
    --data_dir with a typo in it is refused, not filled with the default dataset. A preparation another process is
    running there is waited for (the folder's PREPARE_LOCK), never redone under it."""
    not_a_folder(data_dir)
    if name not in ON_FIRST_USE or _complete(data_dir):
        return
    try:
        if os.path.basename(os.path.abspath(data_dir)) != name:
            find_shards(data_dir, "train")  # a preparation stopped there: refused, with the command that finishes it
            fail(f"no {name} shards in {data_dir}: train.py prepares {name} by itself only in a folder named {name} "
                 f"(data/{name}/ when no --data_dir is given). Check the path, or prepare it there: "
                 f"{prepare_command(data_dir, name)}")
        took = hold_preparation(data_dir)  # another train.py preparing it: wait until it ends
        try:
            if _complete(data_dir):  # prepared by the process waited for
                return
            meta = read_meta(data_dir)  # a stopped preparation is redone only where it is known to be stopped (the
            if meta is not None and (took is None or meta.get("prepare") != prepare_command(data_dir, name)):
                find_shards(data_dir, "train")  # lock) and made with the defaults; else refused with its command
            prepare_on_first_use(name, data_dir)
        finally:
            if took:
                release_preparation(data_dir)
    except (OSError, ValueError) as e:
        fail(f"cannot prepare the dataset {name} in {data_dir}: {e}")


def not_a_folder(data_dir):
    """Stop with one line where data_dir is a file: no preparation can write a dataset there."""
    if os.path.exists(data_dir) and not os.path.isdir(data_dir):
        fail(f"{data_dir} is a file, not a folder: data_dir names the folder a dataset's shards are in "
             "(data/<name>/ when only --dataset is given)")


def _complete(data_dir):
    """Whether data_dir holds a complete dataset (a meta.json that says so, and training shards)."""
    try:
        return (read_meta(data_dir) or {}).get("complete") is not False and bool(find_shards(data_dir, "train"))
    except ValueError:
        return False


def known_datasets():
    """The datasets data/ knows: its folders with a prepare.py of their own or a prepared dataset's meta.json."""
    names = os.listdir(DATA_ROOT) if os.path.isdir(DATA_ROOT) else []
    return sorted(n for n in names if n != "textdir" and any(os.path.isfile(os.path.join(DATA_ROOT, n, f))
                                                            for f in ("prepare.py", "meta.json")))


def check_training_data(name, data_dir, vocab_size, bos):
    """Stop with one line unless data_dir holds shards a model of vocab_size can train on: prepared, readable, its
    token ids (and with bos=True its BOS token, which it returns; else None) inside the vocabulary."""
    not_a_folder(data_dir)
    if not find_shards(data_dir, "train") or not find_shards(data_dir, "val"):
        if not name or name in (os.curdir, os.pardir) or os.sep in name or (os.altsep or os.sep) in name:
            fail(f"dataset={name!r} is not a dataset's name: it names a folder of data/ (pystdlib, openwebtext, "
                 "...); a folder elsewhere is --data_dir=PATH")
        default = os.path.realpath(data_dir) == os.path.realpath(os.path.join(DATA_ROOT, name))  # no --data_dir
        others = [n for n in known_datasets() if n != name] if default else []
        near = difflib.get_close_matches(name, others, n=1, cutoff=0.75)  # a typo: pystlib for pystdlib
        fail(f"dataset {name!r} is not prepared: no {name}_train_*.bin and _val_*.bin shards in "
             f"{data_dir}" + (f" (did you mean --dataset={near[0]}?)" if near else "")
             + f". Prepare it first: {prepare_command(data_dir, name)}")
    read_meta(data_dir)  # a malformed meta.json is reported here
    largest = max_token_id(data_dir)
    token = bos_token(data_dir) if bos else None
    least = max(largest, -1 if token is None else token) + 1  # with bos=True, the BOS token is one of its ids too
    if largest >= vocab_size:
        fail(f"the shards in {data_dir} hold token id {largest} but the model has vocab_size={vocab_size}: "
             f"the data was made with another tokenizer, or vocab_size must be at least {least}"
             + (f" (the BOS token, {token}, included)" if least > largest + 1 else ""))
    if token is not None and token >= vocab_size:
        fail(f"bos=True anchors windows with token {token}, but the model has vocab_size={vocab_size}: vocab_size "
             f"must be at least {least}, or --bos=False")
    return token


# -----------------------------------------------------------------------------
# What every data/<name>/prepare.py's command line shares

class PrepareParser(argparse.ArgumentParser):
    """Every prepare.py's command line: argparse's, but a mistake is one line, as every other command's here (not
    the usage block before it), and no option is taken from its first letters (--max_file for --max_files)."""

    def __init__(self, description):
        super().__init__(description=description, allow_abbrev=False)

    def error(self, message):  # exit status 1, as every other command's refusal (argparse's is 2)
        sys.exit(f"error: {message}; --help lists the options")

    def parse_args(self, args=None, namespace=None):
        """argparse's, with an empty value refused (--src=, a shell variable left unset): it would stand for the
        working folder, or for nothing."""
        parsed = super().parse_args(args, namespace)
        empty = [key for key, value in vars(parsed).items() if value == ""]
        if empty:
            self.error(f"--{empty[0]}= is empty: name a value" + (f", or leave --{empty[0]} out for its default"
                                                                  if self.get_default(empty[0]) else ""))
        return parsed


def path_arg(text):
    """argparse's type for a folder or file option: a leading ~ is the home folder, as the shell makes it where it
    can (--out_dir ~/x), and does not in --out_dir=~/x or a quoted '~/x'."""
    return os.path.expanduser(text)


def check_count(name, value, least=1):
    """Refuse a count option below `least` (None: not given). A negative --max_files would otherwise drop files from
    the end ([:-1]) without a word."""
    if value is not None and value < least:
        raise ValueError(f"{name}={value}: must be at least {least}")


def check_out_dir(out_dir):
    """Refuse, before any work, a folder that cannot be made or written: a link to nothing, a path through a file, a
    folder we may not write in. (Writing can still fail later, where permissions do not bind root: run_preparation
    reports that too.)"""
    if not out_dir:  # --out_dir= (a value forgotten): it was "[Errno 2] No such file or directory: ''", after the work
        raise ValueError("--out_dir= is empty: name a folder, or leave --out_dir out for the dataset's own")
    if os.path.islink(out_dir) and not os.path.exists(out_dir):
        raise ValueError(f"{out_dir} is a symbolic link to {os.readlink(out_dir)}, which does not exist: make that "
                         "folder, or choose another --out_dir")
    path = os.path.abspath(out_dir)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        raise ValueError(f"cannot make the folder {out_dir}: {path} is a file. Choose another --out_dir")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write into {path}: permission denied. Choose a folder you may write to (--out_dir)")


def run_preparation(work, out_dir):
    """Run a prepare script's work (a function of no arguments) as its main does: a setting out of range, a folder
    that cannot be read or written, and Ctrl-C each stop with one line, never a traceback. Returns what work does."""
    try:
        check_out_dir(out_dir)
        return work()
    except KeyboardInterrupt:
        print(f"\nstopped (Ctrl-C): {_left_behind(out_dir)}", file=sys.stderr, flush=True)
        raise SystemExit(130)
    except OSError as e:
        fail(_os_error(e, out_dir))
    except (ValueError, MemoryError) as e:
        fail(e)


def _left_behind(out_dir):
    """What an interrupted preparation left in out_dir, in words."""
    try:
        unfinished = (read_meta(out_dir) or {}).get("complete") is False
    except (OSError, ValueError):
        unfinished = True
    if unfinished:
        return (f"the dataset in {out_dir} is not finished, and training refuses the folder until the same command, "
                "run again, prepares it")
    return f"{out_dir} is as it was; run the same command again to prepare the dataset"


def _os_error(e, out_dir):
    """One line for an OSError of a preparation: writing into out_dir (or making it), or reading elsewhere."""
    if not (e.filename and e.strerror):
        return str(e)
    path, out = os.path.abspath(e.filename), os.path.abspath(out_dir)
    if path == out or path.startswith(out + os.sep) or out.startswith(path + os.sep):
        return f"cannot write the dataset into {out_dir}: {e.strerror} ({e.filename}). Choose a folder you may write " \
               "to (--out_dir)"
    return f"cannot read {e.filename}: {e.strerror}"

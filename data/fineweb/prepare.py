"""
FineWeb-10B, already tokenized with GPT-2's BPE: the shards modded-nanogpt trains on, from the Hugging Face
dataset kjj0/fineweb10B-gpt2 (fineweb_val_000000.bin, then fineweb_train_000001.bin ... _000103.bin, about
100M tokens and 200 MB each):

    pip install huggingface_hub
    python data/fineweb/prepare.py --shards 8      # the val shard and the first 8 train shards

They are already in the format data/shards.py reads, so nothing is converted: this downloads, checks every
header and writes meta.json. Only the download needs the network; the rest is the tested shared code. A run
that was stopped resumes: whole shards already there are kept, and meta.json is written at the end, so the
folder is refused for training from the moment the first new shard moves in until then. A run that fails before
any shard arrived (no network) leaves the folder as it was: a complete dataset in it stays usable. Shards fetched
by other means (modded-nanogpt's script) into --out_dir are checked and kept the same way.
"""

import contextlib
import os
import socket
import sys
from urllib.parse import urlparse

# Runnable as `python data/fineweb/prepare.py` from anywhere: put the repo root on the path for `data`.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from data import PrepareParser, path_arg, run_preparation  # noqa: E402
from data.shards import (SHARD_NAME, check_prepare_folder, prepare_command, read_header,  # noqa: E402
                         repo_folder_files, start_preparation, write_meta)

DATA_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ID = "kjj0/fineweb10B-gpt2"
TRAIN_SHARDS = 103  # train shards on the hub


def shard_names(n_train):
    return ["fineweb_val_000000.bin"] + [f"fineweb_train_{i:06d}.bin" for i in range(1, n_train + 1)]


def is_complete(path):
    try:
        read_header(path)
        return True
    except (OSError, ValueError):
        return False


def fetch(name, folder):
    """Download one shard from the hub into folder (huggingface_hub keeps its partial file and bookkeeping in
    folder/.cache until the shard is whole); returns its path."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        sys.exit("error: downloading FineWeb needs huggingface_hub, which is not installed: "
                 "pip install huggingface_hub")
    return hf_hub_download(repo_id=REPO_ID, filename=name, repo_type="dataset", local_dir=folder)


def unreachable(endpoint="https://huggingface.co"):
    """Why the hub's host cannot be found, or None: said at once, where huggingface_hub would retry for half a minute
    and then blame the connection in its own words. Not asked with HF_HUB_OFFLINE (its cache alone) or a proxy (which
    finds the host itself)."""
    if any(os.environ.get(v) for v in ("HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    host = urlparse(os.environ.get("HF_ENDPOINT") or endpoint).hostname
    try:
        socket.getaddrinfo(host, 443)
    except OSError as e:
        return f"{host} cannot be found ({e.strerror or e}): no network here?"
    return None


def download(names, out_dir, command):
    """Fetch the named shards from the hub into out_dir, skipping those already there and whole. Each arrives whole
    in out_dir/.cache/incoming first and then moves in; the preparation is marked started (start_preparation, with
    the command that finishes it) just before the first one does, so that a download that fails before any shard
    arrived (no network, no huggingface_hub) leaves a complete dataset in out_dir as it was, and usable."""
    missing = [name for name in names if not is_complete(os.path.join(out_dir, name))]
    incoming = os.path.join(out_dir, ".cache", "incoming")  # beside huggingface_hub's bookkeeping: allowed there
    if missing:  # a folder it cannot write in is said first (as huggingface_hub's first write would), then no network
        made = [f for f in (incoming, os.path.dirname(incoming), out_dir) if not os.path.isdir(f)]
        os.makedirs(incoming, exist_ok=True)
        problem = unreachable()
        if problem:
            for folder in made:  # the folders made just now, emptiest first: no network leaves the folder as it was
                with contextlib.suppress(OSError):  # not empty (another command's file in it): kept
                    os.rmdir(folder)
            raise ValueError(f"cannot download {missing[0]}: {problem} FineWeb needs the network; on a machine "
                             f"without one, copy the shards into {out_dir} and run this again, or train on "
                             "data/pystdlib or data/textdir")
    for i, name in enumerate(missing):
        print(f"downloading {name} ...", flush=True)
        path = fetch(name, incoming)
        if i == 0:  # new data is here: from now until write_meta the folder is refused for training
            start_preparation(out_dir, "fineweb", command, keep_shards=True)
        os.replace(path, os.path.join(out_dir, name))  # in one step, over a broken earlier download if any


def main(argv=None):
    parser = PrepareParser("Download the GPT-2-tokenized FineWeb-10B shards.")
    parser.add_argument("--shards", type=int, default=8, help=f"train shards to fetch, 1..{TRAIN_SHARDS} (100M tokens each)")
    parser.add_argument("--out_dir", default=DATA_DIR, type=path_arg, help="where to write (default: data/fineweb)")
    args = parser.parse_args(argv)
    if not 1 <= args.shards <= TRAIN_SHARDS:
        sys.exit(f"error: --shards must be between 1 and {TRAIN_SHARDS}, got {args.shards}")
    run_preparation(lambda: prepare(args.out_dir, args.shards), args.out_dir)


def prepare(out_dir, shards):
    # huggingface_hub keeps its bookkeeping in out_dir/.cache; data/fineweb/ also keeps this script
    check_prepare_folder(out_dir, "fineweb", (".cache",) + repo_folder_files(out_dir))
    names = shard_names(shards)
    # shards of an earlier, larger --shards would be read too (training reads every shard in the folder): say so, and
    # delete nothing (each is 100M tokens to download again)
    present = os.listdir(out_dir) if os.path.isdir(out_dir) else []
    extra = sorted(set(n for n in present if SHARD_NAME.fullmatch(n)) - set(names))
    if extra:
        raise ValueError(f"{out_dir} holds {len(extra)} shard(s) beyond the {shards} train shard(s) asked for "
                         f"({extra[0]}{' ...' if len(extra) > 1 else ''}), which training would read too: delete them, "
                         f"or give this --shards a folder of its own (--out_dir)")
    command = prepare_command(out_dir, "fineweb", options=f" --shards {shards}")
    download(names, out_dir, command)
    for name in names:
        read_header(os.path.join(out_dir, name))  # a ValueError (or OSError) is run_preparation's one line
    # this command is the one meta.json names, even where nothing was fetched (shards copied in, or fewer than an
    # earlier command's); and a killed run's temporary files go
    start_preparation(out_dir, "fineweb", command, keep_shards=True)
    meta = write_meta(out_dir, "fineweb", source=f"huggingface.co/datasets/{REPO_ID}")
    print(f"{meta['train_tokens']:,} train and {meta['val_tokens']:,} val tokens in {out_dir}")


if __name__ == "__main__":
    main()

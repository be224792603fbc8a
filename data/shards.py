"""
Token shards in the llm.c / modded-nanogpt format, and the loaders that train from them.

A shard file is a header of 256 int32 -- magic 20240520, version 1, the token count, then zeros --
followed by that many uint16 tokens. Shards made for llm.c or modded-nanogpt (FineWeb's
fineweb_train_000001.bin, ...) work here unchanged.

A dataset is a folder of <name>_train_*.bin and <name>_val_*.bin shards plus a meta.json (tokenizer,
vocab_size, token counts, source). Training samples random windows of block_size + 1 tokens from a
seeded generator whose state goes into the checkpoint; validation always uses the same windows
(`val_batches`), so every eval, every run and any analysis script sees exactly the same text.
"""

import glob
import json
import os
import tempfile

import numpy as np
import torch

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
MAX_TOKEN = 2**16 - 1  # tokens are stored as uint16
SPLITS = ("train", "val")


# ----------------------------------------------------------------------------
# Writing files

def atomic_write(path, write):
    """Call write(f) on a temporary file beside `path`, then rename it over `path`. A crash or a kill at
    any moment leaves either the old file or the complete new one, never a half-written one: the rename
    is atomic because the temporary file lives in the same folder (same filesystem)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes the file private; give it the usual permissions
        os.replace(tmp, path)
    except BaseException:  # Ctrl-C included: take the partial file away, keep the old one
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    try:  # make the rename itself durable; folders cannot be opened on Windows, where this is skipped
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_tokens(tokens):
    """Return tokens as a uint16 array, refusing ids that do not fit in the format."""
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() > MAX_TOKEN):
        raise ValueError(f"token ids must lie in 0..{MAX_TOKEN} to be stored as uint16; got "
                         f"{tokens.min()}..{tokens.max()} (a tokenizer with a vocabulary over 65536 needs another format)")
    return tokens.astype(np.uint16, copy=False)


def write_shard(path, tokens):
    tokens = check_tokens(tokens)
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[:3] = MAGIC, VERSION, len(tokens)

    def write(f):
        f.write(header.tobytes())
        f.write(tokens.tobytes())
    atomic_write(path, write)


def shard_path(out_dir, name, split, index):
    return os.path.join(out_dir, f"{name}_{split}_{index:06d}.bin")


class ShardWriter:
    """Streams token arrays into out_dir/<name>_<split>_000000.bin, _000001.bin, ... of shard_tokens
    tokens each (the last one shorter). A document may continue into the next shard."""

    def __init__(self, out_dir, name, split, shard_tokens=100_000_000):
        self.out_dir, self.name, self.split = out_dir, name, split
        self.buffer = np.empty(shard_tokens, dtype=np.uint16)
        self.filled = 0
        self.paths = []

    def add(self, tokens):
        tokens = check_tokens(tokens)
        while len(tokens):
            take = min(len(self.buffer) - self.filled, len(tokens))
            self.buffer[self.filled:self.filled + take] = tokens[:take]
            self.filled += take
            tokens = tokens[take:]
            if self.filled == len(self.buffer):
                self._flush()

    def close(self):
        """Write what is left; returns the paths of all the shards written."""
        if self.filled:
            self._flush()
        return self.paths

    def _flush(self):
        path = shard_path(self.out_dir, self.name, self.split, len(self.paths))
        write_shard(path, self.buffer[:self.filled])
        self.paths.append(path)
        self.filled = 0


def write_dataset(out_dir, name, documents, source, shard_tokens=100_000_000, **extra):
    """documents: {split: iterable of token arrays, one a document} -> shards and meta.json in out_dir.
    Returns the meta dict."""
    remove_dataset(out_dir, name)
    for split, docs in documents.items():
        writer = ShardWriter(out_dir, name, split, shard_tokens)
        for tokens in docs:
            writer.add(tokens)
        writer.close()
    return write_meta(out_dir, name, source, **extra)


def remove_dataset(out_dir, name):
    """Delete the shards and meta.json of an earlier preparation, so that a smaller new one cannot be
    mixed with left-over shards (and a missing meta.json marks the folder as incomplete until the end)."""
    for path in glob.glob(os.path.join(out_dir, f"{name}_*_*.bin")) + [os.path.join(out_dir, "meta.json")]:
        if os.path.exists(path):
            os.remove(path)


# ----------------------------------------------------------------------------
# Tokenizing (GPT-2 BPE through tiktoken)

def get_tokenizer(name="gpt2"):
    import tiktoken  # imported here so that reading shards needs no tokenizer
    return tiktoken.get_encoding(name)


def encode_document(enc, text):
    """One document as uint16 tokens, <|endoftext|> first: the same layout as llm.c's FineWeb shards,
    so every document starts after a delimiter and the model sees where documents begin."""
    return check_tokens([enc.eot_token] + enc.encode_ordinary(text))


# ----------------------------------------------------------------------------
# meta.json

def write_meta(out_dir, name, source, tokenizer="gpt2", **extra):
    """Count the tokens of the shards in out_dir (from their headers) and record them with the tokenizer
    and where the data came from. Written last, so its presence marks a complete preparation."""
    enc = get_tokenizer(tokenizer)
    meta = {"name": name, "tokenizer": tokenizer, "vocab_size": enc.n_vocab, "eot_token": enc.eot_token, "source": source}
    for split in SPLITS:
        paths = find_shards(out_dir, split)
        meta[f"{split}_tokens"] = sum(read_header(p) for p in paths)
        meta[f"{split}_shards"] = [os.path.basename(p) for p in paths]
    meta.update(extra)
    text = json.dumps(meta, indent=2) + "\n"
    atomic_write(os.path.join(out_dir, "meta.json"), lambda f: f.write(text.encode()))
    return meta


def read_meta(data_dir):
    """meta.json of a dataset folder as a dict, or None if there is none."""
    path = os.path.join(data_dir, "meta.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


# ----------------------------------------------------------------------------
# Reading

def read_header(path):
    """Validate a shard's header and size; returns its token count."""
    size = os.path.getsize(path)
    if size < HEADER_BYTES:
        raise ValueError(f"{path} is truncated: {size} bytes, shorter than the {HEADER_BYTES}-byte header. "
                         "Delete it and prepare or download the dataset again.")
    header = np.fromfile(path, dtype=np.int32, count=HEADER_INTS)
    if header[0] != MAGIC:
        raise ValueError(f"{path} is not a token shard: magic number {header[0]}, expected {MAGIC} "
                         f"(llm.c / modded-nanogpt format: {HEADER_INTS} int32 header, then uint16 tokens)")
    if header[1] != VERSION:
        raise ValueError(f"{path} has shard format version {header[1]}; only version {VERSION} (uint16 tokens) is supported")
    count = int(header[2])
    expected = HEADER_BYTES + 2 * count
    if size != expected:
        state = "truncated" if size < expected else "corrupt (longer than its header says)"
        raise ValueError(f"{path} is {state}: its header says {count} tokens ({expected} bytes) but the file "
                         f"has {size} bytes. Delete it and prepare or download the dataset again.")
    return count


def read_shard(path):
    """The tokens of a shard as a read-only uint16 memory map (nothing is read until it is indexed)."""
    count = read_header(path)
    return np.memmap(path, dtype=np.uint16, mode="r", offset=HEADER_BYTES, shape=(count,))


def find_shards(data_dir, split):
    return sorted(glob.glob(os.path.join(data_dir, f"*_{split}_*.bin")))


class TokenWindows:
    """All the shards of one split, memory-mapped, seen as a numbered list of the windows of `length`
    consecutive tokens that lie inside one shard (a window never spans two shards)."""

    def __init__(self, data_dir, split, length):
        self.paths = find_shards(data_dir, split)
        if not self.paths:
            raise FileNotFoundError(f"no {split} shards (*_{split}_*.bin) in {data_dir}")
        self.length = length
        self.shards = [read_shard(p) for p in self.paths]
        starts = [max(len(s) - length + 1, 0) for s in self.shards]  # window starts in each shard
        self.ends = np.cumsum(starts)  # window i lies in the first shard with i < ends[shard]
        if len(self) == 0:
            raise ValueError(f"the {split} shards in {data_dir} hold {sum(len(s) for s in self.shards)} tokens; none "
                             f"holds a window of block_size + 1 = {length} tokens. Use a smaller block_size or more data.")

    def __len__(self):
        return int(self.ends[-1])

    def batch(self, indices):
        """Windows by number -> (x, y) int64 tensors of shape (len(indices), length - 1), y = x shifted by one."""
        rows = []
        for i in np.asarray(indices, dtype=np.int64):
            shard = int(np.searchsorted(self.ends, i, side="right"))
            start = i - (self.ends[shard - 1] if shard else 0)
            rows.append(self.shards[shard][start:start + self.length])
        windows = torch.from_numpy(np.stack(rows).astype(np.int64))
        return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


class TrainLoader:
    """Random training windows of block_size + 1 tokens from a seeded generator. Each step every rank
    draws the same global batch of batch_size * world_size windows and keeps its own rows, so each rank
    trains on different windows, and the generator's state (the same on every rank) is all a resume needs."""

    def __init__(self, data_dir, block_size, batch_size, seed, rank=0, world_size=1):
        self.windows = TokenWindows(data_dir, "train", block_size + 1)
        self.batch_size, self.rank, self.world_size = batch_size, rank, world_size
        self.generator = torch.Generator().manual_seed(seed)

    def next_batch(self):
        picks = torch.randint(len(self.windows), (self.batch_size * self.world_size,), generator=self.generator)
        mine = picks[self.rank * self.batch_size:(self.rank + 1) * self.batch_size]
        return self.windows.batch(mine.numpy())

    def state_dict(self):
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state):
        self.generator.set_state(state["generator"])


def val_batches(data_dir, block_size, batch_size, n_batches):
    """The fixed validation set: a list of n_batches (x, y) int64 CPU tensors, each (batch_size, block_size).
    Its batch_size * n_batches windows of block_size + 1 tokens are spread evenly over all the val shards
    (window k starts at valid start k * N // (batch_size * n_batches), N = the number of valid starts).
    No randomness: the same windows for every eval, every run, every rank and any analysis script that
    asks with the same data_dir, block_size and batch_size * n_batches."""
    windows = TokenWindows(data_dir, "val", block_size + 1)
    count = batch_size * n_batches
    picks = np.arange(count, dtype=np.int64) * len(windows) // count
    return [windows.batch(picks[i * batch_size:(i + 1) * batch_size]) for i in range(n_batches)]

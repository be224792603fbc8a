"""
Token shards in the llm.c / modded-nanogpt format, and the loaders that train from them.

A shard file is a header of 256 int32 -- magic 20240520, version 1, the token count, then zeros --
followed by that many uint16 tokens. Shards made for llm.c or modded-nanogpt (FineWeb's
fineweb_train_000001.bin, ...) work here unchanged.

A dataset is a folder of <name>_train_*.bin and <name>_val_*.bin shards plus a meta.json (tokenizer,
vocab_size, the shard files, token counts, largest token id, source), and nothing else: preparing refuses a
folder that holds other files, and reading refuses a folder with the shards of two datasets. A preparation
first turns meta.json into a marker that says it is under way and writes the complete meta.json last, so
a preparation killed at any moment leaves a folder that find_shards refuses (naming the command that
prepares it again) and that the next preparation cleans up. Shards from elsewhere (modded-nanogpt's
FineWeb) need a meta.json too: data/fineweb/prepare.py checks them and writes it. Training samples random
windows of block_size + 1 tokens from a seeded generator whose state goes into the checkpoint; validation
always uses the same windows (`val_batches`), so every eval, every run and any analysis script sees exactly
the same text.

The loaders import torch where they make tensors: preparing a dataset never loads it.
"""

import errno
import functools
import glob
import hashlib
import json
import os
import re
import shlex

import numpy as np

from runfolder import atomic_write

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
MAX_TOKEN = 2**16 - 1  # tokens are stored as uint16
SPLITS = ("train", "val")
SHARD_NAME = re.compile(r"(.*)_(train|val)_\d+\.bin")  # <name>_<split>_000000.bin -> name, split
# atomic_write's temporary files for a shard or meta.json: .<file>.<random>.tmp
TEMP_NAME = re.compile(r"\.((.*)_(?:train|val)_\d+\.bin|meta\.json)\.[^.]+\.tmp")
SCAN_TOKENS = 16 * 2**20  # max_token_id reads a shard in slices of this many tokens, never a whole 200 MB memmap
DATA_ROOT = os.path.dirname(os.path.abspath(__file__))  # this repo's data/ folder


# ----------------------------------------------------------------------------
# Writing files

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
        check_shard_tokens(shard_tokens)  # 0 would never fill a shard: add() would loop forever
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


def write_dataset(out_dir, name, documents, source, shard_tokens=100_000_000, allow=(), command=None, **extra):
    """documents: {split: iterable of token arrays, one a document} -> shards and meta.json in out_dir.
    allow: other names out_dir may hold (see check_prepare_folder); command: the command that prepares it again, with
    the options given (default: prepare_command's, with none). Returns the meta dict."""
    check_shard_tokens(shard_tokens)
    check_prepare_folder(out_dir, name, allow)
    start_preparation(out_dir, name, command or prepare_command(out_dir, name))
    for split, docs in documents.items():
        writer = ShardWriter(out_dir, name, split, shard_tokens)
        for tokens in docs:
            writer.add(tokens)
        writer.close()
    return write_meta(out_dir, name, source, **extra)


def check_shard_tokens(shard_tokens):
    if not 1 <= shard_tokens < 2**31:  # a shard's header holds its token count as an int32
        raise ValueError(f"shard_tokens must be at least 1 and below 2**31 (the tokens in each shard file, counted in "
                         f"its header's int32), got {shard_tokens}")


def check_val_fraction(val_fraction):
    if not 0 < val_fraction < 1:  # NaN fails this too
        raise ValueError(f"val_fraction must lie strictly between 0 and 1 (the share held out for validation), "
                         f"got {val_fraction}")


def is_own_shard(filename, name):
    """Whether filename is one of dataset `name`'s shards, <name>_train_000000.bin or <name>_val_000000.bin."""
    match = SHARD_NAME.fullmatch(filename)
    return bool(match) and match.group(1) == name


def repo_folder_files(out_dir):
    """The names a preparation may find beside its shards in one of this repo's own data/<x>/ folders: the
    prepare.py script kept there and Python's __pycache__. Nothing for a folder anywhere else."""
    if os.path.dirname(os.path.realpath(out_dir)) == os.path.realpath(DATA_ROOT):
        return ("prepare.py", "__pycache__")
    return ()


def check_prepare_folder(out_dir, name, allow=()):
    """Refuse to prepare dataset `name` into a folder that holds anything else: a preparation deletes the
    dataset's earlier shards and would be read together with whatever else is there. Fine: a missing or
    empty folder, or one holding only this dataset's shards, a meta.json of this dataset, our hidden
    temporary files (.*.tmp) and the names in `allow`."""
    if not os.path.exists(out_dir):
        return
    if not os.path.isdir(out_dir):
        raise ValueError(f"cannot prepare dataset {name!r} into {out_dir}: it is a file, not a folder. "
                         "Choose a folder.")
    others = []
    for entry in sorted(os.listdir(out_dir)):
        if is_own_shard(entry, name) or entry in allow + (PREPARE_LOCK,) or (entry.startswith(".") and
                                                                             entry.endswith(".tmp")):
            continue
        if entry == "meta.json" and os.path.isfile(os.path.join(out_dir, entry)):
            owner = read_meta(out_dir).get("name")
            if owner == name:
                continue
            entry = f"meta.json (of dataset {owner!r})"
        others.append(entry)
    if others:
        listing = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        raise ValueError(f"will not prepare dataset {name!r} into {out_dir}: it holds other files ({listing}). "
                         "Choose an empty folder (or the dataset's own), or move those files away.")


PREPARE_LOCK = ".prepare.lock"  # in a dataset's folder: held by the process preparing it (hold_preparation)
_held = {}  # the folders (absolute paths) this process holds PREPARE_LOCK of -> its descriptor


def hold_preparation(out_dir):
    """Make this process the one preparing out_dir, from the marker (start_preparation) to the complete meta.json
    (write_meta): an exclusive lock on out_dir/.prepare.lock, which the system releases when the process ends,
    however it ends, even while processes it forked live on. Another process's preparation of the folder is waited
    for, said once. Returns True if this call took the lock, False if this process holds it already, None where there
    is no fcntl (Windows: no lock)."""
    key = os.path.abspath(out_dir)
    if key in _held:
        return False
    try:
        import fcntl
    except ImportError:
        return None
    os.makedirs(out_dir, exist_ok=True)
    path, said = os.path.join(out_dir, PREPARE_LOCK), False
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    while True:
        fd = os.open(path, flags, 0o666)
        # a POSIX record lock (lockf), not flock: it belongs to this process alone, so the processes a preparation
        # forks (datasets' map workers), which outlive a kill -9 of it waiting for work, do not keep holding it
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EACCES, errno.EAGAIN):  # held by another process: wait; anything else is said
                raise
            if not said:
                print(f"waiting for the preparation of {out_dir} that another process is running", flush=True)
                said = True
            fcntl.lockf(fd, fcntl.LOCK_EX)
        try:  # the file its holder removed as it let go (release_preparation) is no lock: take the one there now
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    _held[key] = fd
    return True


def release_preparation(out_dir):
    """Let go of out_dir's PREPARE_LOCK, if this process holds it, and remove the file: a prepared folder holds
    the dataset alone."""
    fd = _held.pop(os.path.abspath(out_dir), None)
    if fd is not None:
        try:
            os.remove(os.path.join(out_dir, PREPARE_LOCK))
        except OSError:
            pass
        os.close(fd)


def start_preparation(out_dir, name, prepare, keep_shards=False):
    """Mark out_dir as a preparation under way (this process holding its PREPARE_LOCK), then clear what an earlier
    one left. meta.json becomes
    {"complete": false, "prepare": <command>} in one atomic step first, so that from this moment until
    write_meta the folder is refused for reading, with the command that finishes it. Then the temporary
    files of a killed run go, and (unless keep_shards, for a download that resumes) the old shards, so that
    a smaller new preparation cannot be mixed with left-over ones."""
    hold_preparation(out_dir)
    try:
        before = read_meta(out_dir) or {}
    except ValueError:  # a malformed meta.json: replaced below, as before
        before = {}
    if before.get("complete") and before.get("prepare") and before["prepare"] != prepare:  # other options: other data
        print(f"note: replacing the dataset in {out_dir}, made by `{before['prepare']}`: runs trained on it will "
              f"refuse this one (that command makes it again)", flush=True)
    marker = json.dumps({"name": name, "complete": False, "prepare": prepare}, indent=2) + "\n"
    atomic_write(os.path.join(out_dir, "meta.json"), lambda f: f.write(marker.encode()))
    remove_dataset(out_dir, name, keep_shards)


def remove_dataset(out_dir, name, keep_shards=False):
    """Delete dataset `name`'s shards in out_dir (unless keep_shards) and the temporary files a killed
    preparation left (ours only: .<name>_<split>_N.bin.*.tmp and .meta.json.*.tmp). meta.json stays: see
    start_preparation."""
    if not os.path.isdir(out_dir):
        return
    for entry in os.listdir(out_dir):
        temp = TEMP_NAME.fullmatch(entry)
        own_temp = bool(temp) and (temp.group(1) == "meta.json" or temp.group(2) == name)
        if own_temp or (not keep_shards and is_own_shard(entry, name)):
            os.remove(os.path.join(out_dir, entry))


def given_options(parser, args, leave_out=("out_dir",)):
    """The options of a prepare script's command line (its argparse parser and parsed args) that differ from their
    defaults, as prepare_command's `options`: a killed preparation is finished by a command that makes the same
    dataset, not the default one. leave_out: options prepare_command writes itself, or that change no token."""
    text = ""
    for action in parser._actions:
        value = getattr(args, action.dest, None)
        if not action.option_strings or action.dest in leave_out + ("help",) or value == action.default:
            continue
        flag = action.option_strings[0]
        text += f" {flag}" if action.nargs == 0 else f" {flag} {shlex.quote(str(value))}"
    return text


def out_dir_option(out_dir, name):
    """The --out_dir option of prepare_command: none for the dataset's own data/<name>/."""
    if os.path.realpath(out_dir) == os.path.realpath(os.path.join(DATA_ROOT, name)):
        return ""
    return f" --out_dir {shlex.quote(os.path.abspath(out_dir))}"


def recorded_command(data_dir, name, meta):
    """The command meta.json records as the one that prepared data_dir (its options and source: --shards N, --src
    DIR), where it prepares this very folder (not one the dataset was copied from); else prepare_command's."""
    recorded, where = meta.get("prepare"), out_dir_option(data_dir, name)
    if isinstance(recorded, str) and (recorded.endswith(where) if where else " --out_dir " not in recorded):
        return recorded
    return prepare_command(data_dir, name)


def prepare_command(out_dir, name, src=None, options=""):
    """The command line that prepares dataset `name` into out_dir: its own data/<name>/prepare.py when there
    is one, else data/textdir/prepare.py on src (DIR when not known)."""
    where = out_dir_option(out_dir, name)
    if name != "textdir" and os.path.isfile(os.path.join(DATA_ROOT, name, "prepare.py")):
        return f"python data/{name}/prepare.py{options}{where}"
    source = shlex.quote(os.path.abspath(src)) if src else "DIR"
    return f"python data/textdir/prepare.py --src {source} --name {shlex.quote(name)}{options}{where}"


# ----------------------------------------------------------------------------
# Tokenizing (GPT-2 BPE through tiktoken, from the copy of GPT-2's encoder.json in data/gpt2_bpe/)

GPT2_ENCODER = os.path.join(DATA_ROOT, "gpt2_bpe", "encoder.json")
GPT2_ENCODER_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
# GPT-2's pre-tokenizer: text is cut into these pieces first, and BPE merges happen only inside a piece
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT2_EOT = "<|endoftext|>"
GPT2_EOT_ID = 50256


def get_tokenizer(name="gpt2"):
    """A tiktoken Encoding, built once per process. "gpt2" comes from the file in this repo, with no
    network and no cache; "symbols-N" is a synthetic task's (SymbolTokenizer); any other name is tiktoken's
    own, which downloads its BPE file the first time."""
    if name == "gpt2":
        return load_gpt2(GPT2_ENCODER)
    if name.startswith(SymbolTokenizer.PREFIX):
        return SymbolTokenizer.named(name)
    import tiktoken  # imported here so that reading shards needs no tokenizer
    try:
        return tiktoken.get_encoding(name)  # tiktoken keeps the encodings it built
    except ValueError:  # tiktoken's "Unknown encoding" and the plugins it found, over several lines: one here
        raise ValueError(f"tokenizer {name!r} is neither 'gpt2', a synthetic task's 'symbols-N' nor one of tiktoken's "
                         f"({', '.join(tiktoken.list_encoding_names())})") from None
    except OSError as e:  # requests' connection errors are OSErrors too
        url = getattr(getattr(e, "request", None), "url", None) or "openaipublic.blob.core.windows.net"
        raise RuntimeError(f"tokenizer {name!r} needs tiktoken's BPE file from {url}, and downloading it failed "
                           f"({type(e).__name__}): it needs internet once, then tiktoken keeps it in its cache "
                           "(TIKTOKEN_CACHE_DIR). Or use tokenizer 'gpt2', which ships with this repo.") from e


@functools.lru_cache(maxsize=None)  # one Encoding per process (and per path): building it takes 0.2 s
def load_gpt2(path):
    """GPT-2's BPE as a tiktoken Encoding, from GPT-2's encoder.json alone. GPT-2 merges in the order of
    its token ids (tiktoken checks this), so encoder.json's ids are the merge ranks and vocab.bpe is not needed."""
    import tiktoken
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} is missing: GPT-2's BPE ships with this repo. Restore it from the "
                                "repository (git checkout -- data/gpt2_bpe)")
    with open(path, "rb") as f:
        data = f.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != GPT2_ENCODER_SHA256:
        raise ValueError(f"{path} is not GPT-2's encoder.json (sha256 {digest}, expected {GPT2_ENCODER_SHA256}): "
                         "it was changed or is corrupt. Restore it from the repository (git checkout -- data/gpt2_bpe)")

    # encoder.json writes each token's bytes as a string, one character a byte: a printable byte other
    # than space stands for itself, and the others (space, control bytes, ...) take the characters
    # chr(256), chr(257), ... in byte order. Invert that table to get the bytes back.
    char_to_byte, shifted = {}, 0
    for b in range(256):
        if chr(b).isprintable() and chr(b) != " ":
            char_to_byte[chr(b)] = b
        else:
            char_to_byte[chr(256 + shifted)] = b
            shifted += 1
    ranks = {bytes(char_to_byte[c] for c in token): rank
             for token, rank in json.loads(data).items() if token != GPT2_EOT}  # a special token, not a merge
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={GPT2_EOT: GPT2_EOT_ID}, explicit_n_vocab=50257)


class SymbolTokenizer:
    """The tokenizer of a synthetic task over n symbols (data/bigram_backcopy): token i is written "s<i>", tokens
    are separated by spaces, and token n is <|endoftext|>, the BOS token that anchors the task's windows. It has
    the tiktoken methods the scripts call (encode, encode_ordinary, decode, eot_token, n_vocab), so sample.py and
    the reports read a synthetic run as they read a text run: `python sample.py --start="s3 s17"`."""
    PREFIX = "symbols-"

    def __init__(self, n):
        if not 1 <= n <= MAX_TOKEN:  # the BOS token, id n, must fit in a uint16 shard too
            raise ValueError(f"a symbol tokenizer needs 1 to {MAX_TOKEN} symbols, got {n}")
        self.name, self.n_symbols = f"{self.PREFIX}{n}", n
        self.eot_token, self.n_vocab = n, n + 1

    @classmethod
    def named(cls, name):
        count = name[len(cls.PREFIX):]
        if not count.isdigit():
            raise ValueError(f"tokenizer {name!r}: write {cls.PREFIX}N, N the number of symbols (e.g. {cls.PREFIX}64)")
        return cls(int(count))

    def encode_ordinary(self, text):
        return self.encode(text, allowed_special=set())

    def encode(self, text, allowed_special=frozenset()):
        ids = []
        for word in text.split():
            if word == GPT2_EOT and GPT2_EOT in allowed_special:
                ids.append(self.eot_token)
            elif word[:1] == "s" and word[1:].isdigit() and int(word[1:]) < self.n_symbols:
                ids.append(int(word[1:]))
            else:
                raise ValueError(f"{word!r} is not a token of {self.name}: write s0 ... s{self.n_symbols - 1}, "
                                 f"separated by spaces" + (f", or {GPT2_EOT}" if allowed_special else ""))
        return ids

    def decode(self, ids):
        return " ".join(GPT2_EOT if i == self.eot_token else f"s{i}" for i in ids)


def encode_document(enc, text):
    """One document as uint16 tokens, <|endoftext|> first: the same layout as llm.c's FineWeb shards,
    so every document starts after a delimiter and the model sees where documents begin."""
    return check_tokens([enc.eot_token] + enc.encode_ordinary(text))


# ----------------------------------------------------------------------------
# meta.json

def write_meta(out_dir, name, source, tokenizer="gpt2", **extra):
    """Count the tokens of the shards in out_dir (from their headers), find their largest token id, and
    record them with the tokenizer (a get_tokenizer name), where the data came from and the command that made it
    (start_preparation's marker says it; checkpoints keep it). Written last, so its presence marks a complete
    preparation."""
    enc = get_tokenizer(tokenizer)
    meta = {"name": name, "complete": True, "tokenizer": tokenizer, "vocab_size": enc.n_vocab,
            "eot_token": enc.eot_token, "source": source, "prepare": (read_meta(out_dir) or {}).get("prepare")}
    paths = list_shards(out_dir)
    for split in SPLITS:
        meta[f"{split}_tokens"] = sum(read_header(p) for p in paths[split])
        meta[f"{split}_shards"] = [os.path.basename(p) for p in paths[split]]
    # for the reader: training scans the shards again (max_token_id; at 0.6 s a GB read cold, as a 2-core test
    # machine did, some 10 s a process for OpenWebText's 18 GB),
    # since a shard edited after its preparation keeps its length, and this number with it
    meta["max_token"] = scan_max_token(paths["train"] + paths["val"])
    if meta["max_token"] >= enc.n_vocab:  # shards made with another tokenizer (hand-copied ones): never complete
        raise ValueError(f"the shards in {out_dir} hold token id {meta['max_token']}, past the vocabulary of tokenizer "
                         f"{tokenizer!r} (ids 0..{enc.n_vocab - 1}): they were made with another tokenizer, or are "
                         "corrupt. Replace them with shards of this tokenizer")
    meta.update(extra)
    text = json.dumps(meta, indent=2) + "\n"
    atomic_write(os.path.join(out_dir, "meta.json"), lambda f: f.write(text.encode()))
    release_preparation(out_dir)  # complete: the next process to prepare it need not wait
    return meta


def read_meta(data_dir):
    """meta.json of a dataset folder as a dict, or None if there is none."""
    path = os.path.join(data_dir, "meta.json")
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except ValueError as e:  # not JSON, truncated, not UTF-8 (JSONDecodeError and UnicodeDecodeError both)
        problem = f"not valid JSON ({e})"
    else:
        if isinstance(meta, dict):
            return meta
        problem = f"a JSON {type(meta).__name__}, not an object"
    raise ValueError(f"{path} is malformed: {problem}. Delete it and prepare the dataset again.")


def max_token_id(data_dir):
    """The largest token id in all the train and val shards of data_dir (-1 if they hold no tokens), to
    compare with the model's vocab_size. Read from the shards (once per process, see shard_max), not taken
    from meta.json: a shard changed after its preparation keeps its length, and meta.json's max_token with it."""
    return max([shard_max(p) for split in SPLITS for p in find_shards(data_dir, split)], default=-1)


_shard_maxes = {}  # (path, size, mtime, inode) -> the shard's largest token


def shard_max(path):
    """The largest token of one shard (-1 if empty), read once per process for each version of the file:
    about a second a GB, paid when a dataset is first opened."""
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _shard_maxes:
        _shard_maxes[key] = scan_max_token([path])
    return _shard_maxes[key]


def scan_max_token(paths):
    """The largest token in the shards at paths (-1 if none), read a slice at a time so that memory stays small."""
    top = -1
    for path in paths:
        tokens = read_shard(path)
        for start in range(0, len(tokens), SCAN_TOKENS):
            top = max(top, int(tokens[start:start + SCAN_TOKENS].max()))
        del tokens  # close the memory map now (Windows keeps a mapped file locked)
    return top


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
    """The sorted paths of the split's shards (*_<split>_*.bin) in data_dir, the one way a dataset is opened
    for reading: [] for a folder without shards or meta.json (not prepared), and a ValueError naming the
    command that prepares it again for a dataset that is not complete (see check_complete)."""
    paths = list_shards(data_dir)
    check_complete(data_dir, paths)
    return paths[split]


def list_shards(data_dir):
    """{split: sorted shard paths} in data_dir, complete or not. Refuses a folder holding the shards of more
    than one dataset, which would otherwise be read as one."""
    # each file's split is the last _<split>_ of its name: a dataset named wiki_train_small has its validation shards
    # in wiki_train_small_val_000000.bin, which a pattern such as *_train_*.bin would count as training data
    bins = glob.glob(os.path.join(glob.escape(str(data_dir)), "*.bin"))
    found = [(p, SHARD_NAME.fullmatch(os.path.basename(p))) for p in bins]
    paths = {s: sorted(p for p, m in found if m and m.group(2) == s) for s in SPLITS}
    names = {dataset_name(p) for p in paths["train"] + paths["val"]}
    if len(names) > 1:
        raise ValueError(f"{data_dir} holds the shards of {len(names)} datasets ({', '.join(sorted(names))}): keep one "
                         "dataset per folder, and move the others' shards to folders of their own")
    return paths


def dataset_name(path):
    match = SHARD_NAME.fullmatch(os.path.basename(path))
    return match.group(1) if match else os.path.basename(path)


def check_complete(data_dir, paths):
    """Refuse a dataset that a preparation did not finish, or that changed since: complete means a meta.json
    that says so, lists exactly the shard files present, records their token counts, and a vocabulary that
    holds every token id in them. Every refusal names the command that prepares the dataset again."""
    shards = paths["train"] + paths["val"]
    meta = read_meta(data_dir)
    if meta is None:
        if not shards:
            return  # nothing here: the caller reports a dataset that is not prepared
        name = dataset_name(shards[0])
        raise ValueError(f"{data_dir} holds {len(shards)} shards of dataset {name!r} but no meta.json, which a "
                         "preparation writes last: it was stopped part-way (or the shards were copied without it). "
                         f"Prepare it again: {prepare_command(data_dir, name)}")
    name = meta.get("name") or (dataset_name(shards[0]) if shards else os.path.basename(os.path.normpath(data_dir)))
    command = recorded_command(data_dir, name, meta)
    again = f"Prepare it again: {command}"
    if meta.get("complete") is False:
        raise ValueError(f"the preparation of dataset {name!r} in {data_dir} did not finish (meta.json says it is "
                         f"under way; if none is running, it was stopped). Run it again: {command}")
    # A meta.json from before the "complete" flag was recorded is accepted with the checks below: it was
    # written last then too, so its presence already meant a finished preparation, and redoing a dataset
    # that is fine (hours for OpenWebText) would be a cost with no gain. One without token counts is refused.
    for split in SPLITS:
        present = [os.path.basename(p) for p in paths[split]]
        listed = meta.get(f"{split}_shards")
        if listed is not None and listed != present:
            missing, extra = sorted(set(listed) - set(present)), sorted(set(present) - set(listed))
            problem = f"{missing[0]} is missing" if missing else f"{extra[0]} is not one of its shards" if extra \
                else "the shards are in another order"
            raise ValueError(f"{data_dir} does not hold the dataset its meta.json describes: {problem} "
                             f"({len(present)} {split} shards on disk, {len(listed)} in meta.json). {again}")
        recorded = meta.get(f"{split}_tokens")
        if not isinstance(recorded, int):
            raise ValueError(f"{data_dir}/meta.json records no {split}_tokens, so its shards cannot be checked "
                             f"(a meta.json made by hand or by a much older version). {again}")
        tokens = sum(read_header(p) for p in paths[split])
        if tokens != recorded:
            raise ValueError(f"the {split} shards in {data_dir} hold {tokens:,} tokens but its meta.json records "
                             f"{recorded:,}: a shard was replaced or changed after the preparation. {again}")
    vocab = meta.get("vocab_size")
    if isinstance(vocab, int):  # else train.py still compares max_token_id with the model's vocab_size
        for path in shards:
            top = shard_max(path)
            if top >= vocab:
                raise ValueError(f"{path} holds token id {top}, past the vocabulary of tokenizer "
                                 f"{meta.get('tokenizer')!r} (ids 0..{vocab - 1}): the shard was changed after its "
                                 f"preparation, or is corrupt. {again}")


class TokenWindows:
    """All the shards of one split, memory-mapped, seen as a numbered list of the windows of `length`
    consecutive tokens that lie inside one shard (a window never spans two shards).

    bos: a token id (GPT-2's <|endoftext|>, see bos_token) to anchor every window with: the window is then
    that token followed by length - 1 tokens of text, so position 0 always holds the same token, as it does
    for a model trained on documents that each start with a beginning-of-sequence token. Without it
    (bos=None) position 0 holds whatever token the window happens to start at."""

    def __init__(self, data_dir, split, length, bos=None):
        self.paths = find_shards(data_dir, split)
        if not self.paths:
            raise FileNotFoundError(f"no {split} shards (*_{split}_*.bin) in {data_dir}")
        self.length, self.bos = length, bos
        self.text_length = length - (bos is not None)  # tokens read from the shards per window
        self.shards = [read_shard(p) for p in self.paths]
        starts = [max(len(s) - self.text_length + 1, 0) for s in self.shards]  # window starts in each shard
        self.ends = np.cumsum(starts, dtype=np.int64)  # window i lies in the first shard with i < ends[shard]
        if len(self) == 0:
            raise ValueError(f"the {split} shards in {data_dir} hold {sum(len(s) for s in self.shards)} tokens; none "
                             f"holds a window of {self.text_length} tokens (block_size + 1"
                             f"{' - 1 for the BOS token' if bos is not None else ''}). Use a smaller block_size or more data.")

    def __len__(self):
        return int(self.ends[-1])

    def batch(self, indices):
        """Windows by number -> (x, y) int64 tensors of shape (len(indices), length - 1), y = x shifted by one."""
        import torch
        rows = []
        for i in np.asarray(indices, dtype=np.int64):
            shard = int(np.searchsorted(self.ends, i, side="right"))
            start = i - (self.ends[shard - 1] if shard else 0)
            rows.append(self.shards[shard][start:start + self.text_length])
        windows = torch.from_numpy(np.stack(rows).astype(np.int64))
        if self.bos is not None:
            windows = torch.cat([torch.full((len(rows), 1), self.bos, dtype=torch.int64), windows], dim=1)
        return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


class TrainLoader:
    """Random training windows of block_size + 1 tokens from a seeded generator. Each step every rank
    draws the same global batch of batch_size * world_size windows and keeps its own rows, so each rank
    trains on different windows, and the generator's state (the same on every rank) is all a resume needs.
    bos: see TokenWindows."""

    def __init__(self, data_dir, block_size, batch_size, seed, rank=0, world_size=1, bos=None):
        import torch
        self.windows = TokenWindows(data_dir, "train", block_size + 1, bos)
        self.batch_size, self.rank, self.world_size = batch_size, rank, world_size
        self.generator = torch.Generator().manual_seed(seed)

    def next_batch(self):
        import torch
        picks = torch.randint(len(self.windows), (self.batch_size * self.world_size,), generator=self.generator)
        mine = picks[self.rank * self.batch_size:(self.rank + 1) * self.batch_size]
        return self.windows.batch(mine.numpy())

    def state_dict(self):
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state):
        self.generator.set_state(state["generator"])


def bos_token(data_dir):
    """The id that anchors BOS windows: the dataset's end-of-text token (meta.json's eot_token, which
    prepare wrote before every document), or GPT-2's 50256 for shards without a meta.json (llm.c's
    FineWeb shards are GPT-2 tokens with 50256 between documents)."""
    meta = read_meta(data_dir) or {}
    return int(meta.get("eot_token", GPT2_EOT_ID))


FINGERPRINT_BYTES = 2**20  # a shard's fingerprint reads its first and last MiB, not the whole 200 MB file


def dataset_fingerprint(data_dir):
    """{"train": ..., "val": ...}: a short hash of each split's shards (their names, sizes, and the first and last
    MiB of each), what a checkpoint records so that resuming or measuring it on other data is noticed. Re-preparing
    a dataset in place with other text or settings changes it where a shard's name, size, first or last MiB changes;
    a change that keeps every shard's length and lies between (a word edited in a file tokenized into the middle of a
    shard over 2 MiB) is not seen. Preparing the same tokens again does not change it (meta.json, which holds
    commands, is left out). Reads at most 2 MiB a shard: a second or so for OpenWebText."""
    paths = find_shards(data_dir, "train"), find_shards(data_dir, "val")
    fingerprint = {}
    for split, shards in zip(SPLITS, paths):
        digest = hashlib.sha256()
        for path in shards:
            size = os.path.getsize(path)
            digest.update(f"{os.path.basename(path)}:{size}:".encode())
            with open(path, "rb") as f:
                digest.update(f.read(FINGERPRINT_BYTES))
                if size > FINGERPRINT_BYTES:
                    f.seek(max(FINGERPRINT_BYTES, size - FINGERPRINT_BYTES))
                    digest.update(f.read())
        fingerprint[split] = digest.hexdigest()[:16]
    return fingerprint


def val_windows_apart(data_dir, block_size, bos=None):
    """How many validation windows of block_size (+ 1) tokens val_batches can spread without any two overlapping:
    asked for more, it gives overlapping ones (with one val shard; with several, more may happen not to overlap),
    which make intervals over windows too narrow."""
    room = TokenWindows(data_dir, "val", block_size + 1, bos)
    return len(room) // room.text_length


def val_batches(data_dir, block_size, batch_size, n_batches, bos=None, say=None):
    """The fixed validation set: a list of n_batches (x, y) int64 CPU tensors, each (batch_size, block_size).
    Its batch_size * n_batches windows of block_size + 1 tokens are spread evenly over all the val shards
    (window k starts at valid start k * N // (batch_size * n_batches), N = the number of valid starts).
    No randomness: the same windows for every eval, every run, every rank and any analysis script that
    asks with the same data_dir, block_size, batch_size * n_batches and bos (see TokenWindows). say: where
    more windows are asked for than the split holds apart (val_windows_apart), a note to it (train.py's print)."""
    windows = TokenWindows(data_dir, "val", block_size + 1, bos)
    count, apart = batch_size * n_batches, len(windows) // windows.text_length  # apart: val_windows_apart's
    if say and count > apart:  # a small val split: the loss weighs some of its text twice
        say(f"note: batch_size x eval_iters = {count} validation windows, but the val split holds {apart} apart "
            "(data.shards.val_windows_apart): the val loss may be over overlapping (or repeated) windows; fewer "
            "eval_iters or a larger val split keeps them apart")
    picks = np.arange(count, dtype=np.int64) * len(windows) // count
    return [windows.batch(picks[i * batch_size:(i + 1) * batch_size]) for i in range(n_batches)]

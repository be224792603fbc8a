"""
Any folder of text or source files as a dataset:

    python data/textdir/prepare.py --src DIR [--name NAME] [--exts .py,.txt,.md]

writes data/NAME/NAME_train_*.bin, NAME_val_*.bin and meta.json (NAME defaults to the folder's name);
then train with `python train.py --dataset=NAME`.

Each file is one document. Files are taken in sorted order; a file whose bytes equal an earlier file's is
skipped (content hash), and so is a file that is not UTF-8, and anything that is not a regular readable file
(a FIFO, which would wait for a writer forever, a socket or device, a broken symlink, a file we may not
read). A symlink to a regular file is read like the file, and one to a folder like the folder (a link to a folder
above it, a loop, is not followed). The split is by whole files: a file goes to
validation when a hash of its path (relative to DIR) falls below val_fraction, so the split is the same
on every run, and a file stays on its side when other files are added or removed -- unless no file's hash
falls below val_fraction (likely in a folder of fewer than 1 / val_fraction files): then the file of lowest
hash is validation, and a file added with a lower hash takes its place.
"""

import hashlib
import os
import signal
import stat
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

# Runnable as `python data/textdir/prepare.py` from anywhere: put the repo root on the path for `data.shards`.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from data import PrepareParser, check_count, path_arg, run_preparation  # noqa: E402
from data.shards import (SPLITS, ShardWriter, check_prepare_folder, check_shard_tokens,  # noqa: E402
                         check_val_fraction, encode_document, get_tokenizer, given_options, prepare_command,
                         repo_folder_files, start_preparation, write_meta)

DATA_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def list_files(src, exts, skip_dirs=()):
    """(paths relative to src ('/'-separated, sorted) of the regular readable files ending in one of exts,
    {reason_skipped: count} for the others with such names). Folders named in skip_dirs, hidden folders and
    __pycache__ are not entered."""
    found, skipped = [], {"broken_links_skipped": 0, "special_skipped": 0, "unreadable_skipped": 0}
    above = {}  # folder -> the (device, inode) of it and the folders above it: a link to one of them is a loop
    for folder, dirs, files in os.walk(src, followlinks=True):  # a link to a folder is read like the folder
        chain = (above.pop(folder, None) or outside(src)) | {folder_id(folder)}  # outside: src and the folders above
        dirs[:] = [d for d in dirs if d not in skip_dirs and d != "__pycache__" and not d.startswith(".")
                   and folder_id(os.path.join(folder, d)) not in chain]
        above.update((os.path.join(folder, d), chain) for d in dirs)
        rel = os.path.relpath(folder, src)
        for name in files:
            if name.endswith(tuple(exts)):
                reason = why_not_readable(os.path.join(folder, name))
                if reason:
                    skipped[reason] += 1
                else:
                    found.append(os.path.normpath(os.path.join(rel, name)).replace(os.sep, "/"))
    return sorted(found), skipped


def outside(src):
    """The (device, inode) of src and of every folder above it: a link to one of them leads out of src, or round."""
    ids, path = set(), os.path.realpath(src)
    while True:
        ids.add(folder_id(path))
        if os.path.dirname(path) == path:
            return frozenset(ids)
        path = os.path.dirname(path)


def folder_id(path):
    """(device, inode) of a folder, through links; None if it cannot be read (os.walk then skips it)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def why_not_readable(path):
    """None for a regular file we may read (through symlinks), else the counter it is skipped under. Decided
    from os.stat, never by opening: opening a FIFO waits for a writer forever."""
    try:
        mode = os.stat(path).st_mode  # follows symlinks
    except FileNotFoundError:
        return "broken_links_skipped"  # a symlink to nothing (or a file deleted since the listing)
    except OSError:
        return "unreadable_skipped"  # e.g. a symlink loop, or a folder we may not search
    if not stat.S_ISREG(mode):
        return "special_skipped"
    return None if os.access(path, os.R_OK) else "unreadable_skipped"


def path_hash(relpath):
    """A number in [0, 1) fixed by the path alone: the same on every machine and every run."""
    return int.from_bytes(hashlib.sha256(relpath.encode()).digest()[:8], "big") / 2**64


def split_files(files, val_fraction):
    """{relpath: 'train' or 'val'}. At least one file is validation, the one with the lowest hash, and at least one
    is training, the one with the highest (a few files and a large val_fraction could otherwise put them all in val)."""
    val = {f for f in files if path_hash(f) < val_fraction} or {min(files, key=path_hash)}
    if len(val) == len(files):
        val.discard(max(files, key=path_hash))
    return {f: "val" if f in val else "train" for f in files}


def _inspect_file(path):
    """(sha256 of the file's bytes, whether it is UTF-8 text), or None if it cannot be read after all."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:  # removed or made unreadable since the listing
        return None
    try:
        data.decode("utf-8")
        return hashlib.sha256(data).hexdigest(), True
    except UnicodeDecodeError:
        return hashlib.sha256(data).hexdigest(), False


_enc = None  # one tokenizer per worker process


def _encode_file(path):
    global _enc
    if _enc is None:
        _enc = get_tokenizer()
    with open(path, encoding="utf-8", newline="") as f:  # newline="": the text exactly as stored, \r\n too
        return encode_document(_enc, f.read())


def quiet_worker():
    """Each worker of the pool: Ctrl-C is the preparation's to handle (it then ends the workers, end_workers), and a
    worker whose preparation is gone (killed) ends soon and in silence. An orphan would otherwise finish its batch
    and print a BrokenPipeError traceback into the user's terminal when it could not hand it back: with SIGPIPE at
    the system's default, writing to the dead preparation's pipe ends the worker quietly instead, and a thread ends
    an orphan that is still working."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGPIPE"):  # not on Windows
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)

    parent = os.getppid()  # the preparation (fork, spawn), or the forkserver (Python 3.14), which ends with it

    def watch():
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(0)
    threading.Thread(target=watch, daemon=True).start()


def end_workers(pool):
    """Terminate a ProcessPoolExecutor's workers (Python 3.14's pool.terminate_workers; before it, no public way)."""
    if hasattr(pool, "terminate_workers"):
        pool.terminate_workers()
        return
    manager = getattr(pool, "_executor_manager_thread", None)
    if manager is not None and sys.version_info < (3, 12):  # its pool, broken, sets an error on the futures Ctrl-C
        hook = threading.excepthook                        # cancelled: a traceback in Python before 3.12, not ours
        threading.excepthook = lambda a: None if a.thread is manager and a.exc_type.__name__ == "InvalidStateError" \
            else hook(a)
    workers = list((getattr(pool, "_processes", None) or {}).values())
    for worker in workers:
        worker.terminate()
    # A worker ended while it sent a result back leaves half a message in the pool's pipe, and the pool's thread then
    # waits in recv for the rest, for ever (and pool.shutdown(wait=True) with it). Once the workers are gone, closing
    # this process's writing end, the last one open, lets that thread read end-of-file and stop.
    for worker in workers:
        worker.join()
    queue = getattr(pool, "_result_queue", None)
    if queue is not None:
        queue._writer.close()


def check_name(name):
    """A dataset's name is a plain file name: its shards are <name>_train_000000.bin, in one folder."""
    if not name or name.startswith(".") or "/" in name or (os.altsep or "/") in name or os.sep in name:
        raise ValueError(f"dataset name {name!r} must be a plain name, without '/' and not starting with '.' (it "
                         "names the shard files, which a hidden name would hide, and data/NAME/): give one with --name")


def check_not_the_repos(name):
    """A name of one of this repo's data/ folders (e.g. --src ~/fineweb) would write into it: that dataset is its
    own prepare.py's to make (data/pystdlib/prepare.py calls prepare() directly), and gpt2_bpe holds the tokenizer."""
    if name in ("gpt2_bpe", "__pycache__") or (name != "textdir" and
                                               os.path.isfile(os.path.join(DATA_ROOT, name, "prepare.py"))):
        raise ValueError(f"{name!r} is the name of this repo's folder data/{name}/, which this would write into: "
                         "give yours another name (--name)")


def prepare(src, out_dir, name, exts=(".txt",), skip_dirs=(), max_files=None, val_fraction=0.02,
            shard_tokens=100_000_000, workers=None, source=None, command=None):
    """Tokenize the files under src into shards and a meta.json in out_dir; returns the meta dict.
    out_dir must be empty or hold only an earlier preparation of `name` (see check_prepare_folder); in
    one of this repo's data/<x>/ folders its prepare.py and __pycache__ may stay beside the shards."""
    if not os.path.isdir(src):
        raise FileNotFoundError(f"{src} is not a folder")
    check_name(name)
    if not exts:
        raise ValueError("exts names no file ending: give some, e.g. --exts .txt,.md")
    check_count("max_files", max_files)
    check_count("workers", workers)
    check_val_fraction(val_fraction)
    check_shard_tokens(shard_tokens)
    check_prepare_folder(out_dir, name, allow=repo_folder_files(out_dir))
    get_tokenizer()  # a missing or corrupt encoder.json is said now, before the folder's old dataset is cleared
    files, unread = list_files(src, exts, skip_dirs)
    files = files[:max_files]
    print(f"reading {len(files)} files from {src} ...", flush=True)
    # an executor, not a multiprocessing.Pool: a worker killed (out of memory on a huge file) breaks it, where a Pool
    # would wait forever for the files that worker held
    pool = ProcessPoolExecutor(workers, initializer=quiet_worker)
    try:
        # pass 1: drop duplicates and non-UTF-8 files, so that the split is made among the files kept
        counts = {"duplicates_skipped": 0, "not_utf8_skipped": 0, **unread}
        kept, seen, not_utf8 = [], set(), []
        for rel, found in zip(files, pool.map(_inspect_file, [os.path.join(src, f) for f in files], chunksize=64)):
            digest, utf8 = found or (None, None)
            if found is None:
                counts["unreadable_skipped"] += 1
            elif not utf8:
                counts["not_utf8_skipped"] += 1
                not_utf8.append(rel)
            elif digest in seen:
                counts["duplicates_skipped"] += 1
            else:
                seen.add(digest)
                kept.append(rel)
        if len(kept) < 2:
            among = f" among the first {max_files} (--max_files)" if max_files is not None else ""
            skipped = (f" ({counts['not_utf8_skipped']} not UTF-8, e.g. {not_utf8[0]}: convert them, e.g. iconv -f "
                       "latin1 -t utf-8)") if not_utf8 else ""
            raise ValueError(f"found {len(kept)} distinct UTF-8 file(s) ending in {' '.join(exts)} under {src}{among}"
                             f"{skipped}; need at least 2 (one for training, one for validation)")
        split = split_files(kept, val_fraction)

        # pass 2: tokenize, in sorted order (map keeps it), into each split's shards
        # the old dataset is gone from here on; command: the one that prepares it again (given_options), if given
        start_preparation(out_dir, name, command or prepare_command(out_dir, name, src))
        writers = {s: ShardWriter(out_dir, name, s, shard_tokens) for s in SPLITS}
        for rel, tokens in zip(kept, pool.map(_encode_file, [os.path.join(src, f) for f in kept], chunksize=16)):
            writers[split[rel]].add(tokens)
    except BrokenProcessPool:
        raise ValueError(f"a worker process died while reading the files under {src} (killed: out of memory on a "
                         "very large file?); run the same command again, with fewer --workers if memory ran out") \
            from None
    except BaseException:  # Ctrl-C or a failure: the workers end now, not after the files they hold
        end_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    for writer in writers.values():
        writer.close()
    for s in SPLITS:
        counts[f"{s}_files"] = sum(1 for f in kept if split[f] == s)
    meta = write_meta(out_dir, name, source or os.path.abspath(src), exts=list(exts), val_fraction=val_fraction,
                      max_files=max_files, **counts)
    not_read = ""
    if counts["broken_links_skipped"] + counts["special_skipped"] + counts["unreadable_skipped"]:
        b, s = counts["broken_links_skipped"], counts["special_skipped"]
        not_read = (f"; not regular readable files: {b} broken link{'s' * (b != 1)}, {s} special "
                    f"file{'s' * (s != 1)} (not a regular file), {counts['unreadable_skipped']} unreadable")
    print(f"wrote {meta['train_tokens']:,} train tokens ({counts['train_files']} files) and {meta['val_tokens']:,} "
          f"val tokens ({counts['val_files']} files) to {out_dir}; skipped {counts['duplicates_skipped']} "
          f"duplicate and {counts['not_utf8_skipped']} non-UTF-8 files{not_read}", flush=True)
    if not_utf8:  # named, so that one meant to be read can be converted (e.g. iconv -f latin1 -t utf-8) and read
        more = f" and {len(not_utf8) - 5} more" if len(not_utf8) > 5 else ""
        print(f"not UTF-8, so not read: {', '.join(not_utf8[:5])}{more}", flush=True)
    share = meta["val_tokens"] / max(1, meta["train_tokens"] + meta["val_tokens"])
    if not val_fraction / 3 <= share <= 3 * val_fraction:  # whole files are split, and a few large ones sway it
        print(f"warning: validation holds {share:.1%} of the tokens, not the {val_fraction:.1%} asked for "
              f"(val_fraction is a share of files, {counts['val_files']} of {len(kept)} here): with a few large files, "
              "split them into smaller ones, or choose val_fraction knowing this", flush=True)
    return meta


def main(argv=None):
    parser = PrepareParser("Tokenize a folder of text files into train/val shards.")
    parser.add_argument("--src", required=True, type=path_arg, help="folder to read (recursively)")
    parser.add_argument("--name", help="dataset name (default: the folder's name); shards go to data/NAME/")
    parser.add_argument("--exts", default=".txt,.md,.py", help="comma-separated file endings to read")
    parser.add_argument("--out_dir", type=path_arg, help="where to write (default: data/NAME)")
    parser.add_argument("--max_files", type=int, help="read only the first N files (sorted)")
    parser.add_argument("--val_fraction", type=float, default=0.02, help="share of files held out for validation")
    parser.add_argument("--shard_tokens", type=int, default=100_000_000, help="tokens per shard file")
    parser.add_argument("--workers", type=int, help="tokenizer processes (default: all cores)")
    args = parser.parse_args(argv)
    name = args.name or os.path.basename(os.path.normpath(os.path.abspath(args.src)))
    exts = tuple(e.strip() for e in args.exts.split(",") if e.strip())
    out_dir = args.out_dir or os.path.join(DATA_ROOT, name)
    again = prepare_command(out_dir, name, args.src, given_options(parser, args, ("src", "name", "out_dir", "workers")))

    def work():
        check_not_the_repos(name)
        return prepare(args.src, out_dir, name, exts, max_files=args.max_files, val_fraction=args.val_fraction,
                       shard_tokens=args.shard_tokens, workers=args.workers, command=again)
    run_preparation(work, out_dir)


if __name__ == "__main__":
    main()

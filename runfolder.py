"""
A run's folder: what train.py writes in out_dir and every other script reads, and the guards around it, so that
nothing is lost. train.py meets it as one object, RunFolder.

  the files              LOG, CHECKPOINT, BEST (train.py's), MEASURED and EVALUATED (the lab's), named once
  writing                atomic_write, atomic_copy, write_text, write_json: a kill or a full disk leaves the old file
                         whole, and no file is written through a symbolic link; result_set: files that belong
                         together replace the old set as one; claim_folder, claimed: one process at a time writes a
                         folder; writable_folder: checked before work
  checkpoints            save_checkpoint, read_checkpoint, model_from_checkpoint, load_checkpoint; no_checkpoint:
                         what to say of a folder without the one asked for
  records                read_jsonl, code_version (which commit made a result), finite_or_none
  the run                RunFolder: claiming out_dir, starting a new run or resuming one (its settings, its id and
                         data, the best state so far), the log and the checkpoints, and the Ctrl-C line;
                         saved_state, rng_state, step_memory and memory_advice (a step that cannot fit is refused
                         before it is tried)
torch is imported inside the functions that use it: the data preparation scripts write their files with atomic_write
and never load torch (a second to import, and some 200 MB in each worker where workers are spawned, as on macOS).
"""

import contextlib
import dataclasses
import difflib
import glob
import json
import math
import os
import pickle
import random
import secrets
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import warnings

import numpy as np

from cli import REPO, autocast_for, configure, dataset_dir, fail, free_memory, pick_device

# The files of a run's folder (train.py's out_dir)
LOG = "log.jsonl"  # one JSON record per evaluation
CHECKPOINT = "ckpt.pt"  # the latest state: what --init_from=resume continues
BEST = "best.pt"  # the state with the lowest validation loss
BEST_BEFORE = "best-before-iter{}.pt"  # best.pt of the validation shards a run trained on until iter {} (best_state)
# What lab/analyze.py and lab/evaluate.py measured on a checkpoint, kept beside it, so that a run whose checkpoint is
# gone (left on a GPU machine that was given back) can still take its place in a study: a run folder that holds these
# and its log is a complete record of the run. Used only where the checkpoint itself is absent.
MEASURED = "measured"  # lab/analyze.py: measured.json (its record of the run) and measured.npz (the per-window arrays)
EVALUATED = "evaluated.json"  # lab/evaluate.py: its record of the run, with the settings it was measured under
MEASUREMENTS = (MEASURED + ".json", MEASURED + ".npz", EVALUATED)  # a run's measured files, gone with the run
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # a run folder's files are never written through a symbolic link (not Windows)


def claim_folder(folder, tries=10):
    """Make this process the one owner of `folder` (created if need be) until it exits: an exclusive lock on
    folder/.lock, which the operating system releases when the process ends, however it ends, so a crash cannot
    leave it held. If another process holds it, stop with one line naming that process. Keep the returned file
    open for as long as the claim should last (on a system without fcntl, Windows, it claims nothing). A .lock
    that is a symbolic link, a folder or anything but a plain file is refused, never followed: writing the pid
    through a link would truncate whatever file it points at. A lock on a .lock that was taken away meanwhile (a
    failed command's, RunFolder.__exit__, claimed) is no claim: the lock is taken again on the file now there."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, ".lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError:
        if not (os.path.islink(path) or os.path.isdir(path)):
            raise
        fd = None
    if fd is None or not stat.S_ISREG(os.fstat(fd).st_mode):
        if fd is not None:
            os.close(fd)
        what = "a symbolic link" if os.path.islink(path) else "a folder" if os.path.isdir(path) else "not a plain file"
        fail(f"{path} is {what}, not the lock file this project keeps there (it is never followed or written "
             f"through): move it away (mv {path} {path}.old) and run again")
    lock = os.fdopen(fd, "r+")
    try:
        import fcntl
    except ImportError:
        return lock
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "a process that has not yet said which"
        lock.close()
        fail(f"{folder} is in use by another process ({holder}): wait for it to end, or choose another folder")
    try:  # the lock file may have been taken away (a failed command's) between our open and our lock: try again
        here = os.lstat(path)
    except OSError:
        here = None
    mine = os.fstat(lock.fileno())
    if here is None or (here.st_dev, here.st_ino) != (mine.st_dev, mine.st_ino):
        lock.close()
        if tries <= 1:  # a filesystem whose file identities do not hold still (some network ones)
            fail(f"{path} changed each time it was locked: choose a folder on a local disk")
        return claim_folder(folder, tries - 1)
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()}: {' '.join([os.path.basename(sys.executable)] + sys.argv)}\n")
    lock.flush()
    return lock


def release_folder(folder, lock, made_lock, untouched, made=False):
    """End a claim_folder claim. Where the claim made the .lock and the command left the folder untouched (it
    failed before it wrote), take the .lock away first, while it is still held (so no other process has locked that
    file: claim_folder checks the file it locked is the one there), and the folder too if this command made it."""
    with contextlib.suppress(OSError):
        if made_lock and untouched():
            os.unlink(os.path.join(folder, ".lock"))
            if made:
                os.rmdir(folder)
    lock.close()


@contextlib.contextmanager
def claimed(folder, made=None):
    """claim_folder for a with-block (a results folder's one writer while it writes): the claim ends with the block.
    A folder that holds nothing but the lock the claim made at the end (the command failed before it wrote) is left
    as it was: the lock taken away, and the folder too if this command made it (made: writable_folder's answer;
    None: whether the claim makes it)."""
    made = not os.path.lexists(folder) if made is None else made
    made_lock = not os.path.lexists(os.path.join(folder, ".lock"))
    lock = claim_folder(folder)
    try:
        yield
    finally:
        release_folder(folder, lock, made_lock, lambda: os.listdir(folder) == [".lock"], made)


def writable_folder(folder, key="--out_dir"):
    """Make `folder` (and its parents) and check this process can write in it, before any work whose results go
    there: a path that is a file, lies under a file or is not writable stops with one line, not after the work. An
    empty new folder changes no run. Writability is tried, not read from the permissions, which a read-only disk
    or a network filesystem can belie. Returns whether it made the folder (for claimed)."""
    if not folder:
        fail(f"{key}= is empty: name a folder, e.g. {key}=out/NAME")
    made = not os.path.isdir(folder)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:  # FileExistsError (a file), NotADirectoryError (under a file), PermissionError
        fail(f"{key}={folder} cannot be made: {e.strerror or e} (choose another folder)")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        fail(f"{key}={folder} is not writable by this user ({e.strerror or e}): choose another folder, or make it "
             "writable")
    return made


def write_text(path, text):
    """Write a result file atomically (atomic_write): a full disk or a kill leaves the previous file
    whole, never a part of the new one."""
    data = text.encode("utf-8")
    atomic_write(path, lambda f: f.write(data))


def write_json(path, value):
    """`value` as JSON (indented, for people to read), written atomically as write_text writes."""
    write_text(path, json.dumps(value, indent=1))


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
    _sync_folder(folder)  # make the rename itself durable


def _sync_folder(folder):
    try:  # folders cannot be opened on Windows, where this is skipped
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


@contextlib.contextmanager
def result_set(folder, names, last=("summary.json",)):
    """Write files that belong together (a summary.json, the table and the plots made from the same numbers) so
    that the folder never shows one set's summary beside another's files. The block writes them into the staging
    folder it is given, inside `folder`. Then the old `last` files go first, every other file of `names` (all a tool
    ever writes there) that the new set lacks goes (a plot of an earlier analysis would describe other runs), the
    new files are renamed into place and `last` last. An error or Ctrl-C in the block leaves the folder as it was;
    one in the renames (milliseconds) leaves it without a `last` file, never with a mixed set."""
    os.makedirs(folder, exist_ok=True)
    staging = tempfile.mkdtemp(dir=folder, prefix=".incoming-")
    try:
        yield staging
        new = os.listdir(staging)
        for name in list(last) + [n for n in names if n not in new]:
            if os.path.lexists(os.path.join(folder, name)):
                os.remove(os.path.join(folder, name))
        for name in sorted(new, key=lambda n: (n in last, last.index(n) if n in last else 0, n)):
            os.replace(os.path.join(staging, name), os.path.join(folder, name))
        _sync_folder(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -----------------------------------------------------------------------------
# Checkpoints

def save_checkpoint(checkpoint, path):
    """Atomic: a crash or kill while saving leaves the previous file whole (atomic_write)."""
    import torch
    atomic_write(path, lambda f: torch.save(checkpoint, f))


def in_repo_root():
    """Whether this process runs in the repository's root, where the docs' commands are typed."""
    return os.path.realpath(os.getcwd()) == os.path.realpath(REPO)


def no_checkpoint(folder, name):
    """One line for a run folder that holds no checkpoint `name`: the checkpoints it has, the runs it holds (a folder
    of runs), that it is a dataset's folder, a folder of a similar name beside it (a typo), or else that it needs
    training."""
    if os.path.isdir(folder):
        have = sorted(f for f in os.listdir(folder) if f.endswith(".pt"))
        if have:
            return f"no {name} in {folder}: it has {', '.join(have)}; choose one with --checkpoint=NAME"
        runs = sorted(d for d in os.listdir(folder)
                      if glob.glob(os.path.join(glob.escape(os.path.join(folder, d)), "*.pt")))
        if runs:
            listed = ", ".join(runs[:6]) + (", ..." if len(runs) > 6 else "")
            return (f"no {name} in {folder}: it is a folder of runs ({listed}); name a run's own folder, e.g. "
                    f"{os.path.join(folder, runs[0])}")
        if os.path.isfile(os.path.join(folder, MEASUREMENTS[0])):
            return (f"no {name} in {folder}: it holds only the measurements kept of a run whose checkpoint is gone "
                    f"(as lab.repro restore leaves them), which python -m lab.analyze reads; to sample or resume, "
                    f"train the run again (python train.py ... --out_dir={folder} --overwrite=True)")
        if os.path.isfile(os.path.join(folder, "config.json")):
            return (f"no {name} in {folder}: it holds a published checkpoint (config.json), not a run; sample or "
                    f"measure it with --pretrained={folder}")
        if os.path.isfile(os.path.join(folder, "meta.json")) or glob.glob(os.path.join(glob.escape(folder), "*.bin")):
            return (f"no {name} in {folder}: it holds a dataset, not a run; name a run's folder (the --out_dir "
                    "train.py was given)")
    elif os.path.isfile(folder):  # the checkpoint itself given as the folder
        parent, base = os.path.dirname(folder.rstrip(os.sep)) or ".", os.path.basename(folder)
        return (f"{folder} is a file, not a run's folder: --out_dir names the folder and --checkpoint the file in it "
                f"(--out_dir={parent} --checkpoint={base})")
    elif not os.path.exists(folder):
        parent = os.path.dirname(folder.rstrip(os.sep)) or "."
        def has_runs(d):  # a run's folder (a checkpoint in it) or a folder of runs: worth naming, not one of results
            d = glob.escape(os.path.join(parent, d))
            return glob.glob(os.path.join(d, "*.pt")) or glob.glob(os.path.join(d, "*", "*.pt"))
        beside = sorted(filter(has_runs, os.listdir(parent))) if os.path.isdir(parent) else []
        near = difflib.get_close_matches(os.path.basename(folder.rstrip(os.sep)), beside, n=1)
        if near:
            return f"no {name} in {folder}: there is no such folder; did you mean {os.path.join(parent, near[0])}?"
    at_root = os.path.join(REPO, folder)
    if not os.path.isabs(folder) and not in_repo_root() and os.path.isfile(os.path.join(at_root, name)):
        return (f"no {name} in {folder} (relative to this folder, {os.getcwd()}); the repository's root has one: "
                f"run the command from there, or give --out_dir={at_root}")  # a relative path typed elsewhere
    return f"no {name} in {folder}: train it first (python train.py --out_dir={folder} ...)"


def read_checkpoint(path):
    """A checkpoint file as a dict. A missing file raises FileNotFoundError, an unreadable one ValueError,
    each with a message for the user."""
    import torch
    if not os.path.isfile(path):
        raise FileNotFoundError(no_checkpoint(os.path.dirname(path) or ".", os.path.basename(path)))
    try:
        with warnings.catch_warnings():  # torch's notes on a foreign pickle's protocol: the message below says it
            warnings.simplefilter("ignore")
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated zip, a file that is not a checkpoint, an unpicklable object, ...
        with open(path, "rb") as f:
            head = f.read(4)
        archive = head == b"PK\x03\x04"  # torch.save writes a zip archive (an older torch.save, a bare pickle)
        if not archive or isinstance(e, pickle.UnpicklingError):
            # never torch's advice to load it with weights_only=False: that runs whatever code the file holds
            what = "holds Python objects other than tensors and plain values" if archive or head[:1] == b"\x80" \
                else "is not a file torch.save wrote"
            raise ValueError(f"{path} is not a checkpoint of this project: it {what}. The scripts read the ckpt.pt "
                             f"or {BEST} that train.py writes in a run's out_dir (python train.py --out_dir=...)") \
                from None
        reason = (str(e).strip() or type(e).__name__).splitlines()[0].split(". ")[0]  # torch's reason, not its advice
        raise ValueError(f"{path} is not a readable checkpoint ({reason[:200]}): it is truncated, corrupt or not "
                         f"from train.py. Its folder's {BEST} (the best earlier state) may still be whole.") from None
    if not isinstance(checkpoint, dict) or not {"model", "model_args"} <= checkpoint.keys():
        raise ValueError(f"{path} is not a train.py checkpoint (no model weights and model_args in it)")
    wrong = [f"{key} is {type(checkpoint[key]).__name__}, not {' or '.join(k.__name__ for k in kinds)}"
             for key, kinds in CHECKPOINT_TYPES.items()
             if key in checkpoint and not (isinstance(checkpoint[key], kinds) and type(checkpoint[key]) is not bool)]
    if wrong:  # written by another program, or edited: read on, it would fail far from here
        raise ValueError(f"{path} is not a train.py checkpoint: its {'; '.join(wrong[:3])}")
    return checkpoint


# what train.py's checkpoints hold of these keys (those present; older checkpoints lack some); None where a user
# stripped a checkpoint for sharing (optimizer=None, as nanoGPT's users do): it samples and is measured, not resumed
CHECKPOINT_TYPES = {"model": (dict,), "model_args": (dict,), "config": (dict,), "iter_num": (int,),
                    "optimizer": (dict, type(None)), "health": (dict, type(None)), "loader": (dict, type(None))}


def steps_skipped(checkpoint):
    """How many steps in a row were skipped as non-finite when the checkpoint was saved (0 for an older one)."""
    return (checkpoint.get("health") or {}).get("nonfinite_in_a_row") or 0


def model_from_checkpoint(checkpoint, path, device="cpu", **runtime):
    """The GPT a checkpoint holds, in eval mode on device; runtime: flags of model.RUNTIME_FLAGS to run it with
    (e.g. attn_backend='torch'). Those not given take GPTConfig's defaults, not the run's: how a run computed on its
    machine is no part of the model (one trained with attn_backend='triton' on a GPU samples on a CPU), and
    loss_chunk=0 makes model(x, y) return the logits with the loss."""
    from model import GPT, RUNTIME_FLAGS, GPTConfig  # here, not above: data preparation writes through this module
    unknown = set(runtime) - set(RUNTIME_FLAGS)
    if unknown:
        raise TypeError(f"model_from_checkpoint: {sorted(unknown)} are part of the model; runtime flags: "
                        f"{RUNTIME_FLAGS}")
    args = {**checkpoint["model_args"], **{key: getattr(GPTConfig, key) for key in RUNTIME_FLAGS}, **runtime}
    try:
        model = GPT(GPTConfig(**args))
        # a model saved from torch.compile's wrapper has its keys prefixed with _orig_mod.
        model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in checkpoint["model"].items()})
    except (TypeError, ValueError, RuntimeError) as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]  # load_state_dict's: a heading first
        raise ValueError(f"{path} does not match this model.py's GPT ({' '.join(lines[:2])[:300]})") from None
    return model.to(device).eval()


def load_checkpoint(path, device="cpu"):
    """The one place a checkpoint file becomes a model: returns (GPT in eval mode on device, checkpoint dict).
    Raises FileNotFoundError or ValueError with a message for the user."""
    checkpoint = read_checkpoint(path)
    return model_from_checkpoint(checkpoint, path, device), checkpoint


def read_jsonl(path):
    """The records (JSON objects) of a JSON-lines file such as log.jsonl ([] if there is none). A line that is not
    one, cut short by a crash or holding bytes that are not UTF-8, is skipped, with one note for all of them."""
    if not os.path.isfile(path):
        return []
    records, bad = [], 0
    with open(path, "rb") as f:  # bytes: one undecodable byte spoils its line, never the file
        for line in f:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
                record = None
            if isinstance(record, dict):
                records.append(record)
            else:
                bad += 1
    if bad:
        print(f"note: skipped {bad} unreadable line(s) of {path} (cut short by a crash, or not JSON records)")
    return records


def code_version():
    """Which code made a result: the git commit and whether tracked files differed from it (None outside git)."""
    def git(*args):
        try:
            out = subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}

def finite_or_none(x):
    """JSON has no NaN or infinity: write them as null."""
    return x if x is None or math.isfinite(x) else None


def saved_state(path, whose=False, settings=False):
    """(iter_num, val_loss) of the checkpoint at path, read from the file itself (memory-mapped: its tensors are
    not read), or None if there is none; ValueError if it cannot be read. What a message says of a file
    comes from here, never from what another file claims about it. whose: also (run_id, model_args,
    data_fingerprint), which say whose state it is and which data measured it (None in a checkpoint older than
    these); settings: also the config it was saved with."""
    import torch
    if not os.path.isfile(path):
        return None
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        state = int(checkpoint["iter_num"]), float(checkpoint["val_loss"])
        state += (checkpoint.get("run_id"), dict(checkpoint["model_args"]), checkpoint.get("data_fingerprint")) \
            if whose else ()
        return state + (dict(checkpoint.get("config") or {}),) if settings else state
    except Exception as e:  # truncated, not a checkpoint, not train.py's
        raise ValueError(f"{path} is not a readable train.py checkpoint ({type(e).__name__})") from None


def describe_fingerprint_change(recorded, current):
    """'' when the dataset fingerprint a checkpoint recorded (data.shards.dataset_fingerprint; None in a checkpoint
    older than fingerprints) matches the data's now, else what changed ("train and val shards")."""
    if not isinstance(recorded, dict):
        return ""
    changed = [split for split in current if recorded.get(split) != current[split]]
    return " and ".join(changed) + " shards" if changed else ""


def atomic_copy(source, path):
    """A copy of the file source as path, written as atomic_write writes: its own file, never a link to source."""
    with open(source, "rb") as f:
        atomic_write(path, lambda out: shutil.copyfileobj(f, out, 2**24))


def rng_state():
    """Every random generator's state, for a resumed run to draw exactly what the uninterrupted one would have."""
    import torch
    np_state = np.random.get_state()
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            # plain lists and numbers, so torch.load(weights_only=True) can read them back
            "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
            "python": random.getstate()}


def restore_rng(state, rank=0):
    """rng_state's generators back, on rank 0: the state saved is rank 0's. Another rank keeps its own seed, so its
    dropout still differs from rank 0's, though not as it would have uninterrupted."""
    import torch
    if rank:
        return
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    kind, key, *rest = state["numpy"]
    np.random.set_state((kind, np.array(key, dtype=np.uint32), *rest))
    random.setstate(state["python"])


# -----------------------------------------------------------------------------
# Memory: a step that cannot fit is refused before it is tried, with a batch_size that would fit

def step_memory(batch_size, config, n_params):
    """Rough bytes the first training step needs: the weights, gradients and AdamW's two moments (16 bytes a
    parameter), the activations autograd keeps (about ACT_FLOATS floats per token, per layer, per unit of width:
    the block's saved inputs, attention output, MLP hidden) and the logits with their softmax and gradient
    (3 floats per token per vocabulary entry, for the rows computed at once). Deliberately a low estimate, so a
    run it refuses surely does not fit."""
    ACT_FLOATS = 16
    tokens = batch_size * config.block_size
    logit_rows = min(tokens, config.loss_chunk) if config.loss_chunk else tokens
    activations = ACT_FLOATS * tokens * config.n_layer * config.n_embd
    return 16 * n_params + 4 * (activations + 3 * logit_rows * config.vocab_size)


def batch_that_fits(config, n_params, available):
    """The largest batch_size whose step (step_memory) fits in available bytes; 0 or less: not even one sequence."""
    per_seq = step_memory(1, config, n_params) - step_memory(0, config, n_params)
    return int((available - step_memory(0, config, n_params)) // per_seq)


def memory_need(batch_size, config, n_params, device):
    """The start of memory_advice's line, which lab/bench.py's --step says too: the estimate, in words."""
    need = step_memory(batch_size, config, n_params)
    amount = f"{need / 2**30:.1f} GiB" if need >= 0.1 * 2**30 else f"{need / 2**20:.0f} MiB"  # never "0.0 GiB"
    return (f"batch_size={batch_size} x block_size={config.block_size} needs about {amount} for one training step on "
            f"{device} (runfolder.step_memory's estimate)")


def params_at_least(config):
    """A low count of a model's parameters from its config alone: the token embedding and each layer's query and
    output projections, which every variant has. check_fits takes it before the model is built, which for an
    --n_layer=1000000 typed for 10 would take minutes and then the machine's memory, with no line at all."""
    return config.vocab_size * config.n_embd + 2 * config.n_layer * config.n_embd * config.n_head * config.head_dim


def check_fits(c, config, n_params, device, batch_size=None):
    """Stop with memory_advice's line where the first step of batch_size (step_memory, for n_params; None:
    c.batch_size; 0: the weights, gradients and AdamW's moments alone) needs more than the device has free."""
    need = step_memory(c.batch_size if batch_size is None else batch_size, config, n_params)
    available = free_memory(device)
    if available is not None and need > available:
        fail(memory_advice(c, config, n_params, device, available))


def memory_advice(c, config, n_params, device, available):
    """One line: the estimate, what is free, and a batch_size (or block_size) that would fit."""
    fits = batch_that_fits(config, n_params, available) if available is not None else 0
    free = f"{available / 2**30:.1f} GiB is free" if available is not None else "it does not fit"
    if fits >= c.batch_size:  # the estimate said it fits, yet the allocator failed: the estimate is low here
        fits = max(1, c.batch_size // 2)
    if fits >= 1 and fits < c.batch_size:  # a divisor of batch_size, so that the windows stay the same
        smaller = max(b for b in range(1, fits + 1) if c.batch_size % b == 0)
        k = c.batch_size // smaller
        how = (f"try --batch_size={smaller} --gradient_accumulation_steps={c.gradient_accumulation_steps * k} "
               f"--eval_iters={c.eval_iters * k} (the same run: the same windows in every step and evaluation)")
    else:
        how = f"even --batch_size=1 does not fit: lower --block_size={config.block_size} or the model's size"
    return f"{memory_need(c.batch_size, config, n_params, device)}; {free}: {how}"


# -----------------------------------------------------------------------------
# The run folder, as train.py meets it

# keys that belong to one command, not to the run: a resumed run takes them from this command, never
# from the checkpoint (a run trained on one machine may be resumed on another)
PER_COMMAND = ("out_dir", "init_from", "eval_only", "overwrite", "device", "dtype", "compile", "compile_mode",
               "sdpa_backend", "backend")
DATA_KEYS = ("dataset", "data_dir")
RESUME_KEYS = {"model", "optimizer", "scaler", "model_args", "iter_num", "val_loss", "best_val_loss", "config", "rng",
               "loader", "health"}
VAL_RISE_WARNING = 1.0  # nats: a validation loss this far above the best one gets a warning


class RunFolder:
    """Everything a run keeps in out_dir, and the guards that keep it: log.jsonl, ckpt.pt (the latest state) and
    best.pt (the state with the lowest validation loss), claimed by one train.py at a time (out_dir/.lock).
    Nothing in the folder changes before the first log record, so a command that fails while starting (bad data,
    bad flags) leaves an earlier run's folder as it was. Used as `with RunFolder(...) as folder:`, which claims an
    existing out_dir before anything in it is read and lets it go at the end."""

    RUN_FILES = (LOG, CHECKPOINT, BEST)

    def __init__(self, out_dir, writer=True):
        self.out_dir, self.writer = out_dir, writer  # writer: this process writes the folder (rank 0, not eval_only)
        self.log_path, self.ckpt_path, self.best_path = (os.path.join(out_dir, n) for n in self.RUN_FILES)
        self.start_iter, self.started, self.lock, self.made_lock = 0, False, None, False
        # what every checkpoint records of the run (check_data): its id, and the fingerprint of the data it trains on
        self.run_id, self.fingerprint, self.data_named = None, None, False
        self.best_in_ckpt = False  # best_state: ckpt.pt holds the best state; _start makes it best.pt
        # check_data: this command continues the run on other validation shards; best_state: the path _start
        # moves best.pt to, measured on the earlier ones
        self.val_changed, self.aside = False, None
        self.aside_back = None  # best_state: best.pt as such a command moved it aside, to be put back by _start
        self.log_before, self.saved = None, False  # _start's undo (undo_start): the log as it was; a save done

    def __enter__(self):
        # a new folder is claimed when it is made (claim_new), so a command that fails before leaves none behind
        if self.writer and os.path.isdir(self.out_dir):
            self.claim()
        return self

    def __exit__(self, *exc):
        if self.lock is not None:  # the OS would release it at exit; a test calling train.main() twice needs it now
            # as it was: nothing written by this command (it failed before its first write), or no run files
            release_folder(self.out_dir, self.lock, self.made_lock, lambda: not self.started or not self.held())
            self.lock = None

    def claim(self):
        """This process becomes out_dir's one writer (claim_folder); a second train.py stops, naming the first.
        A run file that is a folder (or anything but a file) stops it too, now, not at the first write."""
        self.made_lock = not os.path.lexists(os.path.join(self.out_dir, ".lock"))  # __exit__ takes away its own
        try:
            self.lock = claim_folder(self.out_dir)
        except OSError as e:
            fail(f"out_dir={self.out_dir!r} cannot be written: {e.strerror or e}; choose another --out_dir")
        for name in self.RUN_FILES + MEASUREMENTS:
            self.check_is_file(os.path.join(self.out_dir, name))

    @staticmethod
    def check_is_file(path):
        if os.path.exists(path) and not os.path.isfile(path):
            fail(f"{path} is a folder (or another thing that is not a file) where a run keeps a file: move it away "
                 f"(mv {path} {path}.old) and run again, or choose another --out_dir")

    def claim_new(self, c):
        """Claim the folder check_writable just made, and look again: another command may have put a run there."""
        if self.writer and self.lock is None:
            self.claim()
            self.check_new_run(c)

    def held(self):
        """The run files and measurements in out_dir: a new run replaces them only when told to (--overwrite=True)."""
        return [n for n in self.RUN_FILES + MEASUREMENTS if os.path.exists(os.path.join(self.out_dir, n))]

    # -- starting: a new run, or a resumed one -----------------------------------------------------------------

    def check_new_run(self, c):
        """A new run never replaces a run already in out_dir unless told to; the message says what the folder holds
        and which commands fit it. A command told both to continue the run and to replace it does neither."""
        if c.init_from == "resume" and c.overwrite:
            fail("init_from='resume' continues the run in out_dir and overwrite=True replaces it with a new one: give "
                 "one of them (--init_from=resume to continue, --overwrite=True alone to start over)")
        if c.init_from == "scratch" and (os.path.isfile(os.path.join(self.out_dir, "meta.json")) or
                                         glob.glob(os.path.join(glob.escape(self.out_dir), "*_train_*.bin"))):
            fail(f"--out_dir={self.out_dir} holds a dataset (its meta.json and shards): a run's files would go in "
                 "among them. Name a folder of its own for the run, e.g. --out_dir=out/NAME (--data_dir names the "
                 "data)")
        held = self.held()
        if c.init_from != "scratch" or not held or c.overwrite:
            return
        if CHECKPOINT in held:
            fail(f"{self.out_dir} already holds a run ({', '.join(held)}). Continue it with --init_from=resume, "
                 "choose another --out_dir, or replace it with --overwrite=True.")
        fail(f"a new run would replace what is there. {self.describe()}")

    def describe(self):
        """What out_dir holds and the commands that fit it, for a folder that has no ckpt.pt to resume from."""
        try:
            best = saved_state(self.best_path)
        except ValueError as e:
            best, unreadable = None, str(e)
        else:
            unreadable = None
        held = self.held()
        if best is not None:
            return (f"{self.out_dir} holds {', '.join(held)} but no {CHECKPOINT}; its {BEST} is the state of iter "
                    f"{best[0]} (val loss {best[1]:.4f}). To continue from it: cp {shlex.quote(self.best_path)} "
                    f"{shlex.quote(self.ckpt_path)}, then --init_from=resume; or start a new run there with "
                    "--overwrite=True, or choose another --out_dir")
        what = f"{', '.join(held)} and no {CHECKPOINT}" if held else "no run files"
        if unreadable:
            what += f" ({unreadable})"
        why = ("the measurements of a run whose checkpoint is gone, as lab.repro restore leaves them"
               if set(held) & set(MEASUREMENTS) else "the run stopped before its first checkpoint")
        return (f"{self.out_dir} holds {what}: there is no state to resume ({why}). Start a new run there with "
                "--overwrite=True, or choose another --out_dir")

    def checkpoint_to_resume(self):
        """ckpt.pt, read whole, for --init_from=resume; anything that cannot be resumed stops with one line."""
        self.check_is_file(self.ckpt_path)
        if not os.path.isfile(self.ckpt_path):
            if os.path.isdir(self.out_dir) and not self.held() and not glob.glob(
                    os.path.join(glob.escape(self.out_dir), "*.pt")):  # no run here: a folder of runs, a dataset, new
                fail(f"init_from='resume' but there is {no_checkpoint(self.out_dir, CHECKPOINT)}")
            where = (self.describe() if os.path.isdir(self.out_dir) else f"{self.out_dir} is a file, not a folder"
                     if os.path.exists(self.out_dir) else "the folder does not exist")
            fail(f"init_from='resume' but there is no checkpoint at {self.ckpt_path}: {where}")
        try:
            checkpoint = read_checkpoint(self.ckpt_path)
        except ValueError as e:
            fail(e)
        missing = sorted(RESUME_KEYS - checkpoint.keys()) + [k for k in ("optimizer", "loader", "health")
                                                             if k in checkpoint and checkpoint[k] is None]  # stripped
        if missing:
            fail(f"{self.ckpt_path} cannot be resumed: it lacks {missing} (only train.py's own checkpoints, whole, "
                 "can)")
        return checkpoint

    def resume_settings(self, keys, argv, checkpoint):
        """A resumed run continues with its own settings: the checkpoint's, changed only by what this command sets
        (keys: train.py's dataclass of keys). Model flags cannot change; other changes are announced, data changes
        loudly. Returns (config, given, notes)."""
        from model import RUNTIME_FLAGS  # these say how the model computes, not what: they may change
        names = {f.name for f in dataclasses.fields(keys)}
        saved = {k: v for k, v in checkpoint["config"].items() if k in names and k not in PER_COMMAND}
        c, given = configure(keys, argv, defaults=saved)
        notes = []
        trained_in = checkpoint["config"].get("dtype")  # per command (another machine may lack it), but never silently
        if "dtype" not in given and trained_in not in (None, c.dtype):
            device = pick_device(c.device)  # what each resolves to on this machine (auto: bf16 where it computes it)
            now, then = autocast_for(device, c.dtype)[1], autocast_for(device, trained_in)[1]
            if now != then:
                notes.append(f"note: this command computes in {now} (dtype={c.dtype}, its default); the run was "
                             f"trained with dtype={trained_in}: give --dtype={trained_in} to continue in {then}")
        for key in sorted(given):
            value = getattr(c, key)
            if key in PER_COMMAND or key not in saved or value == saved[key]:
                continue
            if key in checkpoint["model_args"] and key not in RUNTIME_FLAGS:
                fail(f"{key}={value!r} differs from the run in {self.ckpt_path} ({key}={saved[key]!r}): a resumed "
                     "run keeps its model. Start a new run in another out_dir to change the model.")
            if key == "bos":
                fail(f"bos={value!r} differs from the run in {self.ckpt_path} (bos={saved[key]!r}): a resumed run "
                     "keeps what its windows start with. Start a new run in another out_dir to change it.")
            if key == "seed":  # the loader's and the RNGs' states come from the checkpoint: a seed would set nothing
                notes.append(f"note: seed={value!r} is ignored: a resumed run continues the random state it saved "
                             f"(seed={saved[key]!r})")
                c.seed = saved[key]
            elif key not in DATA_KEYS:
                notes.append(f"note: resuming with {key}={value!r} (the run had {saved[key]!r})")
        if c.max_iters != saved["max_iters"] and "lr_decay_iters" not in given and c.decay_lr and \
                c.max_iters > c.lr_decay_iters:
            notes.append(f"note: the learning rate reaches min_lr at lr_decay_iters={c.lr_decay_iters} and stays there "
                         f"up to max_iters={c.max_iters}: give --lr_decay_iters too to decay over the longer run")
        if c.batch_size * c.eval_iters != saved["batch_size"] * saved["eval_iters"]:  # data.shards.val_batches
            notes.append(f"note: batch_size x eval_iters = {c.batch_size * c.eval_iters} validation windows (the run "
                         f"had {saved['batch_size'] * saved['eval_iters']}): other windows, so its val losses before "
                         "and after compare only roughly; keep the product to keep them")
        old = os.path.abspath(dataset_dir(saved.get("dataset", ""), saved.get("data_dir", "")))
        new = os.path.abspath(dataset_dir(c.dataset, c.data_dir))
        self.data_named = old != new  # this command names other data: check_data lets it differ (naming the same
        if old != new:                # folder again is no consent to its changed contents)
            notes.append(f"WARNING: this run was trained on {old}; it now continues on {new}, because this command "
                         "says so (--dataset/--data_dir). Leave both out to continue on the run's own data.")
        return c, given, notes

    def best_state(self, checkpoint, say=print):
        """(iter, val loss) of the best state so far, read from best.pt itself: ckpt.pt's own record of it is wrong
        after a crash between the two writes, or after the user moved the files. Where best.pt is missing, unreadable
        or worse than ckpt.pt, ckpt.pt's state is the best (unless it is worse than the initial state), and _start
        makes it best.pt at the first evaluation, before anything can replace it. A best.pt of another run (another
        run id, or another model) stops the command: it is no state of this run, and the run would measure itself
        against it, or replace it."""
        if not self.writer:  # eval_only (or a rank that says nothing): its notes on what becomes best.pt are untrue
            say = lambda *args, **kwargs: None  # noqa: E731  (the same state is read, but nothing is written)
        if self.val_changed:
            return self.best_on_other_val(checkpoint, say)
        it, loss = checkpoint["iter_num"], checkpoint["val_loss"]
        try:
            best = saved_state(self.best_path, whose=True)
            why = None if best else f"there is no {self.best_path}"
        except ValueError as e:
            best, why = None, str(e)
        if best is None and not os.path.lexists(self.best_path):
            best = self.moved_aside(checkpoint, say)
        skipped = steps_skipped(checkpoint)  # no best then either (Trainer.save)
        if best is not None:
            self.check_same_run(best, checkpoint)
            if not loss < best[1] or skipped:
                return best[:2]
            why = (f"{self.best_path} holds iter {best[0]} (val loss {best[1]:.4f}): a run stopped between saving the "
                   "two, or the files were moved")
        if skipped or not loss <= checkpoint.get("initial_val_loss", math.inf):  # nor a state worse than the start
            what = "was saved while its steps were skipped as non-finite" if skipped else \
                "is worse than the initial state"
            say(f"note: {why}; {self.ckpt_path} (iter {it}) {what}, so it never becomes {BEST}: the next evaluation's "
                "state does, if it is a better one")
            return None, math.inf
        self.best_in_ckpt = True
        say(f"note: {why}; the best state is {self.ckpt_path}'s (iter {it}, val loss {loss:.4f}), which becomes "
            f"{BEST} at the next evaluation, before anything replaces it")
        return it, loss

    def moved_aside(self, checkpoint, say):
        """best.pt where a command that continued the run on other validation shards moved it (best_on_other_val)
        and was killed before its first checkpoint: best-before-iterN.pt of ckpt.pt's iter, measured on the shards
        ckpt.pt records, is the run's best on them; _start (or settle_best) puts it back. Else None."""
        path = os.path.join(self.out_dir, BEST_BEFORE.format(checkpoint["iter_num"]))
        try:
            best = saved_state(path, whose=True)
        except ValueError:
            return None
        recorded = (checkpoint.get("data_fingerprint") or {}).get("val")
        if not best or not recorded or (best[4] or {}).get("val") != recorded:
            return None
        self.aside_back = path
        say(f"note: there is no {self.best_path}, but {path} holds this run's best state on these validation shards "
            f"(iter {best[0]}, val loss {best[1]:.4f}; moved aside by a command that stopped before it saved): it "
            f"becomes {BEST} again")
        return best

    def put_back_aside(self):
        """best.pt back where moved_aside found it, as _start and settle_best make best.pt."""
        if self.aside_back:
            os.replace(self.aside_back, self.best_path)
            self.aside_back = None

    def best_on_other_val(self, checkpoint, say):
        """best_state where this command continues the run on other validation shards (check_data): losses on
        those and on these never compare. best.pt stays the best if these measured it (an earlier command that
        named them stopped before its first checkpoint); otherwise _start moves it to best-before-iterN.pt (N:
        ckpt.pt's iter), and the run's first evaluation, of ckpt.pt's state on these shards, starts best.pt again."""
        it = checkpoint["iter_num"]
        try:
            best = saved_state(self.best_path, whose=True)
        except ValueError:
            best = ()  # unreadable: moved aside all the same, never deleted
        if best:
            self.check_same_run(best, checkpoint)
        if best and (best[4] or {}).get("val") == self.fingerprint["val"]:
            return best[:2]
        if best is not None:
            self.aside = os.path.join(self.out_dir, BEST_BEFORE.format(it))
            held = f"(iter {best[0]}, val loss {best[1]:.4f}) was measured on other validation shards" if best \
                else "is unreadable"
            say(f"note: {self.best_path} {held}: it is kept as {self.aside}, and {BEST} starts again from "
                f"{CHECKPOINT}'s state (iter {it}) evaluated on these shards (losses on different shards do not "
                "compare)")
        return None, math.inf

    def settle_best(self):
        """Make best.pt of ckpt.pt now where best_state found ckpt.pt's state the best: a command with nothing left
        to train writes no evaluation, so _start, which would do it, never comes."""
        try:
            self.put_back_aside()
            if self.best_in_ckpt:
                atomic_copy(self.ckpt_path, self.best_path)
                self.best_in_ckpt = False
                print(f"wrote {self.best_path}: the best state, {self.ckpt_path}'s", flush=True)
        except OSError as e:  # a full disk: one line, as at every write; atomic_copy left best.pt as it was
            fail(f"could not write {self.best_path}: {e.strerror or e}. The run's files are as they were: run the "
                 "same command again once the disk has room")

    def check_same_run(self, best, checkpoint):
        """Stop, with one line, where best.pt (saved_state(whose=True)) is not a state of ckpt.pt's run."""
        from model import RUNTIME_FLAGS  # these may change within a run
        run_id, model_args = best[2:4]
        other = [f"{k}={model_args[k]!r} (this run: {v!r})" for k, v in checkpoint["model_args"].items()
                 if k in model_args and k not in RUNTIME_FLAGS and model_args[k] != v]  # older: fewer keys
        if run_id and checkpoint.get("run_id") and run_id != checkpoint["run_id"]:
            other.insert(0, f"run id {run_id} (this run: {checkpoint['run_id']})")
        if other:
            fail(f"{self.best_path} is not a state of the run in {self.ckpt_path}: it has {', '.join(other[:3])}. "
                 f"Was it copied in from another run? Move it away (mv {self.best_path} {self.best_path}.other) and "
                 f"resume again: the next evaluation's state becomes {BEST}")

    def initial_val_loss(self, checkpoint):
        """The validation loss the run started from: the checkpoint's record of it, or for a checkpoint older than
        that record, the log's iter-0 record; None if neither has it, or if this command continues on other
        validation shards (check_data): its first evaluation, on these, is the start then."""
        if self.val_changed:
            return None
        if isinstance(checkpoint.get("initial_val_loss"), (int, float)):
            return checkpoint["initial_val_loss"]
        start = [r for r in read_jsonl(self.log_path) if r.get("iter") == 0]
        return start[0]["val_loss"] if start and isinstance(start[0].get("val_loss"), (int, float)) else None

    def check_data(self, c, checkpoint, data_dir, fingerprint, meta, say=print):
        """What every checkpoint records of the run (save): its run_id, made when the run starts and kept on every
        resume, and the fingerprint of the data it trains on; c.data_dir is made absolute, so that a resume from
        another working folder finds the same data. A resumed run whose data is not what it trained on (the dataset
        prepared again in place, say) stops with one line, unless this command names the data (--dataset/--data_dir).
        fingerprint: data.shards.dataset_fingerprint of data_dir; an older checkpoint recorded none. meta: data_dir's
        meta.json ({} if none), whose tokenizer must be the one the checkpoint records."""
        c.data_dir = os.path.abspath(c.data_dir) if c.data_dir else c.data_dir
        self.fingerprint = fingerprint
        had, has = (checkpoint or {}).get("tokenizer"), meta.get("tokenizer", "gpt2")
        if had and had != has:  # ids within vocab_size, so no other check sees it: each id would mean another token
            made = (checkpoint or {}).get("data_prepare")  # its own data prepared again: the command that made it
            fix = (f"Continue on data of {had} (leave --dataset and --data_dir out for the run's own)"
                   if self.data_named else f"Was it prepared again? Prepare it with {had} again"
                   + (f" (it was made by: {made})" if made else ""))
            fail(f"{self.ckpt_path} was trained on token ids of the {had} tokenizer, but {data_dir} holds ids of "
                 f"{has}: each id would mean another token. {fix}, or start a new run on this data in another "
                 "--out_dir")
        recorded = (checkpoint or {}).get("data_fingerprint")
        self.run_id = (checkpoint or {}).get("run_id") or secrets.token_hex(8)
        changed = describe_fingerprint_change(recorded, fingerprint)
        if not changed:
            return
        prints = (f"(recorded in {self.ckpt_path}: train {recorded.get('train')}, val {recorded.get('val')}; now: "
                  f"train {self.fingerprint['train']}, val {self.fingerprint['val']})")
        if self.data_named:
            say(f"note: the {changed} in {data_dir} are not those the run trained on {prints}: it continues on them, "
                "as this command names the data")
            # its losses so far are of other validation shards: the first evaluation measures ckpt.pt's state on
            # these (unless there is nothing left to train, or nothing is written), and best_state starts again
            self.val_changed = (recorded.get("val") != fingerprint["val"] and not c.eval_only
                                and checkpoint["iter_num"] < c.max_iters)
            return
        made = checkpoint.get("data_prepare")  # the command that prepared its data (checkpoints since 2026-12-01)
        fail(f"the data in {data_dir} is not what this run trained on: its {changed} differ {prints}; was the dataset "
             f"prepared again? Prepare the data the run trained on again in {data_dir}"
             + (f" (it was made by: {made})" if made else "") + ", or start a new run on this "
             "data (--overwrite=True, or another --out_dir); to continue this run on other data, put that data in "
             "a folder of its own and name it (--data_dir=...)")

    # -- writing -------------------------------------------------------------------------------------------------

    def check_writable(self):
        writable_folder(self.out_dir)

    def _start(self):
        """The first write of this command: a new run replaces the old files, measurements included (--overwrite=True
        was given, or there were none); a resumed run drops the records after its checkpoint (and any of another
        run), so the log reads as one run, and makes best.pt of ckpt.pt where that holds the best state (best_state)."""
        for stale in glob.glob(os.path.join(self.out_dir, ".*.tmp")):
            os.remove(stale)  # the partial file of a run killed while saving (the named files are whole)
        if self.start_iter == 0:
            for name in (CHECKPOINT, BEST) + MEASUREMENTS:
                if os.path.lexists(os.path.join(self.out_dir, name)):
                    os.remove(os.path.join(self.out_dir, name))
            for aside in glob.glob(os.path.join(glob.escape(self.out_dir), BEST_BEFORE.format("*"))):
                os.remove(aside)  # the old run's best states on other data (best_on_other_val)
            keep = []
        else:
            if os.path.isfile(self.log_path) and not os.path.islink(self.log_path):
                with open(self.log_path, "rb") as f:
                    self.log_before = f.read()
            keep, run, others = [], None, set()  # run: the id of the run whose records these are (its first names it)
            for r in read_jsonl(self.log_path):
                run = r.get("run_id") or run
                if run not in (None, self.run_id):  # a log copied in from another run: never read as this one's
                    others.add(run)
                elif isinstance(r.get("iter"), (int, float)) and r["iter"] <= self.start_iter:
                    keep.append(r)
            if others:
                print(f"note: {self.log_path} held records of another run ({', '.join(sorted(others))}): dropped, so "
                      f"that the log reads as this run's ({self.run_id})", flush=True)
            self.put_back_aside()  # first: then compared with ckpt.pt's state as before
            both = all(map(os.path.isfile, (self.ckpt_path, self.best_path)))
            if self.aside and not os.path.lexists(self.aside):  # best_on_other_val (where one of this iter is kept
                os.replace(self.best_path, self.aside)  # already, best.pt holds ckpt.pt's state: replaced next)
            elif self.best_in_ckpt or both and os.path.samefile(self.ckpt_path, self.best_path):
                # ckpt.pt holds the best state (best_state), or an older version linked the two: best.pt its own copy
                atomic_copy(self.ckpt_path, self.best_path)
                self.best_in_ckpt = False
        self.started = True
        text = "".join(json.dumps(r) + "\n" for r in keep)
        atomic_write(self.log_path, lambda f: f.write(text.encode()))

    def undo_start(self):
        """A resumed run whose first save (or log write) fails, or that is interrupted before it, leaves the folder as
        it was: best.pt back from where _start moved it (best_on_other_val), the log as it was. The same command
        again, or a plain resume, then sees the run as before. (A new run's _start removed the old run's files:
        nothing to give back.)"""
        if not self.started or self.start_iter == 0 or self.saved:  # (once ckpt.pt records new shards, best.pt
            return                                                      # stays aside, and the log is the run's)
        try:
            if self.aside and os.path.isfile(self.aside) and not os.path.lexists(self.best_path):
                os.replace(self.aside, self.best_path)
            if self.log_before is not None:
                atomic_write(self.log_path, lambda f: f.write(self.log_before))
        except OSError:
            pass  # the folder cannot be written at all: best-before-iterN.pt still holds the old best

    def log(self, record):
        try:
            if not self.started:
                self._start()
            # appended, never through a symbolic link (atomic_write above replaces a link, never follows it)
            with os.fdopen(os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW, 0o666), "a") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as e:
            why = "it is a symbolic link, never written through" if os.path.islink(self.log_path) else e.strerror or e
            self.undo_start()
            fail(f"could not write {self.log_path}: {why}. {self.ckpt_path} keeps the last saved state.")

    def save(self, checkpoint, is_best, latest=True, initial_val_loss=None):
        """ckpt.pt <- checkpoint (if latest); best.pt <- the same state too when it is the best so far, as its own
        file (a copy of ckpt.pt, written atomically: a file copied over ckpt.pt can never change best.pt), or
        written on its own when there is no latest to save (the initial state of a new run). Then one line says
        what was saved."""
        latest_saved = False
        try:
            if latest:
                save_checkpoint(checkpoint, self.ckpt_path)
                latest_saved = self.saved = True
            if is_best and latest:
                atomic_copy(self.ckpt_path, self.best_path)
            elif is_best:
                save_checkpoint(checkpoint, self.best_path)
        except (OSError, RuntimeError) as e:
            # a full disk reaches torch.save's zip writer as RuntimeError ("[enforce fail at inline_container.cc]
            # ... unexpected pos"), elsewhere as OSError; atomic_write has taken the partial file away
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e).strip().splitlines()[0][:200]
            full = "" if isinstance(e, OSError) else " (is the disk full?)"
            kept = (f"{self.best_path} keeps the state saved before; {self.ckpt_path} holds iter "
                    f"{checkpoint['iter_num']}" if latest_saved else f"{self.ckpt_path} and {self.best_path} keep the "
                    "states saved before")
            self.undo_start()
            fail(f"could not save a checkpoint in {self.out_dir}: {reason}{full}. {kept}.")
        self.saved = True
        self.said_saved(checkpoint, is_best, latest, initial_val_loss)

    def said_saved(self, checkpoint, is_best, latest, initial_val_loss):
        if not latest:
            print(f"saved {self.best_path} (the initial state: best.pt never holds a worse one)", flush=True)
            return
        if is_best:
            print(f"saved {self.ckpt_path} and best.pt (the best validation loss so far)", flush=True)
            return
        best_iter, best = checkpoint["best_iter"], checkpoint["best_val_loss"]
        start = math.inf if initial_val_loss is None else initial_val_loss
        worse = checkpoint["val_loss"] - (start if best_iter is None else best)
        skipped = steps_skipped(checkpoint)
        if skipped and worse <= 0:  # lower, but reached while steps were skipped as non-finite (Trainer.save): no best
            print(f"saved {self.ckpt_path} (the latest state only: the last {skipped} steps from it were skipped as "
                  f"non-finite, so it is no state to train on, however low its loss)"
                  + (f"; best.pt keeps iter {best_iter}" if best_iter is not None else ""), flush=True)
            return
        if best_iter is None:
            print(f"saved {self.ckpt_path} (the latest state); it is worse than the initial validation loss "
                  f"{initial_val_loss:.4f}, so it is not saved as best.pt", flush=True)
            return
        print(f"saved {self.ckpt_path} (the latest state); its validation loss is {worse:.3f} worse than the best, "
              f"{best:.4f} at iter {best_iter}, which best.pt keeps", flush=True)
        if worse > VAL_RISE_WARNING:
            print(f"WARNING: the validation loss rose by {worse:.2f} nats: the run may be diverging "
                  "(a lower learning_rate, or resume from best.pt: copy it to ckpt.pt)", flush=True)

    def said_skipped(self, iter_num, val_loss, skipped, best_iter):
        """always_save_checkpoint=False saves a better state only: one whose last steps were skipped is not one,
        however low its loss (Trainer.save), and this line says why it was not saved."""
        best = (f"{BEST} keeps iter {best_iter}" if best_iter is not None else  # (an unreadable best.pt: best_state)
                f"{BEST} is not read as this run's best (left as it is)" if os.path.lexists(self.best_path) else
                f"there is no {BEST}")
        print(f"not saving iter {iter_num} (val loss {val_loss:.4f}, the lowest yet): the last {skipped} steps from it "
              f"were skipped as non-finite, so it is no state to train on, however low its loss; {best}", flush=True)

    def what_is_kept(self, best_iter):
        """What the folder keeps of a run that diverged, in words: said of ckpt.pt only after looking at it (a new
        run may not have saved one yet)."""
        best = f" and best.pt the best (iter {best_iter})" if best_iter is not None else ""
        try:
            saved = saved_state(self.ckpt_path)
        except ValueError:
            saved = None
        return (f"{self.ckpt_path} holds the last state saved (iter {saved[0]}){best}" if saved else
                f"no {CHECKPOINT} was saved" + (f"; best.pt holds iter {best_iter}" if best else ""))

    # -- Ctrl-C ----------------------------------------------------------------------------------------------------

    def interrupted(self, c, given, world_size, iter_num, rank, stop=None):
        """Ctrl-C: one line saying where the last checkpoint is (read from the file, which an interrupted save left
        whole) and the command that continues from it; exit status 130, as a shell gives a command ended by
        Ctrl-C. stop: the KeyboardInterrupt; SIGTERM's (cli.Terminated) is said so, with exit status 143."""
        word = getattr(stop, "name", "interrupted")
        if rank == 0:
            self.undo_start()  # before its first save: the folder as it was
            try:
                saved = saved_state(self.ckpt_path, settings=True)  # (iter, val loss, config)
            except ValueError as e:
                saved, why = None, f" ({e})"
            else:
                why = ""
            at = "while starting" if iter_num is None else f"at iter {iter_num}"
            if c.eval_only:
                print(f"{word} {at}; nothing was written", file=sys.stderr)
            elif saved is not None and c.overwrite and c.init_from == "scratch" and iter_num is None:
                print(f"{word} {at}, before the new run replaced the one in {self.out_dir} ({CHECKPOINT} still "
                      f"holds its iter {saved[0]}): run the command again to start over", file=sys.stderr)
            elif saved is None:
                again = " (with --overwrite=True)" if self.held() else ""  # the run files this one left in the way
                try:  # best.pt is written first, of the initial state: said, so that "no ckpt.pt" is not misread
                    best = saved_state(self.best_path)
                except ValueError:
                    best = None
                kept = f" ({BEST} holds the state of iter {best[0]})" if best else ""
                print(f"{word} {at}, before any {CHECKPOINT} was saved in {self.out_dir}{why}{kept}: run the "
                      f"command again{again} to start over", file=sys.stderr)
            else:
                print(f"{word} {at}: {self.ckpt_path} holds iter {saved[0]}. Continue with: "
                      f"{resume_command(c, given, world_size, saved[2])}", file=sys.stderr)
        raise SystemExit(getattr(stop, "exit_status", 130))


def resume_command(c, given, world_size, saved=None):
    """The command that continues this run: the checkpoint brings the run's settings; this command's per-machine
    keys (device, dtype, ...) do not travel in it, so they are repeated, and so is each key this command set to other
    than the checkpoint's settings (saved: its config), such as a resumed run's longer max_iters."""
    keep = [f"--{k}={getattr(c, k)}" for k in PER_COMMAND
            if k in given and k not in ("out_dir", "init_from", "overwrite", "eval_only")]
    from model import RUNTIME_FLAGS, GPTConfig
    fixed = {f.name for f in dataclasses.fields(GPTConfig)} - set(RUNTIME_FLAGS) | {"bos"}  # resume refuses a change
    keep += [f"--{k}={getattr(c, k)}" for k in sorted(given) if k not in PER_COMMAND and k not in fixed
             and saved is not None and k in saved and saved[k] != getattr(c, k)]
    # from the root, as the docs run it; elsewhere train.py's path from this folder
    script = "train.py" if in_repo_root() else shlex.quote(os.path.relpath(os.path.join(REPO, "train.py")))
    launcher = (f"torchrun --standalone --nproc_per_node={world_size} {script}" if world_size > 1 else
                f"python {script}")
    return f"{launcher} {shlex.join([*keep, f'--out_dir={c.out_dir}', '--init_from=resume'])}"  # pasteable as it is

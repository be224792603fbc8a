"""
A run's folder: what train.py writes in out_dir and every other script reads, and the guards around it, so that
nothing is lost. train.py meets it as one object, RunFolder.

  the files              LOG, CHECKPOINT, BEST (train.py's), MEASURED and EVALUATED (the lab's), named once
  writing                atomic_write, write_text, write_json: a kill or a full disk leaves the old file whole;
                         claim_folder: one process at a time writes a folder; writable_folder: checked before work
  checkpoints            save_checkpoint, read_checkpoint, model_from_checkpoint, load_checkpoint
  records                read_jsonl, code_version (which commit made a result), finite_or_none
"""

import json
import math
import os
import pickle
import subprocess
import sys
import tempfile
import warnings

import torch

from cli import REPO, fail

# The files of a run's folder (train.py's out_dir)
LOG = "log.jsonl"  # one JSON record per evaluation
CHECKPOINT = "ckpt.pt"  # the latest state: what --init_from=resume continues
BEST = "best.pt"  # the state with the lowest validation loss
# What analyze.py and evaluate.py measured on a checkpoint, kept beside it, so that a run whose checkpoint is gone
# (left on a GPU machine that was given back) can still take its place in a study: a run folder that holds these
# and its log is a complete record of the run. Used only where the checkpoint itself is absent.
MEASURED = "measured"  # analyze.py: measured.json (its record of the run) and measured.npz (the per-window arrays)
EVALUATED = "evaluated.json"  # evaluate.py: its record of the run, with the settings it was measured under


def claim_folder(folder):
    """Make this process the one owner of `folder` (created if need be) until it exits: an exclusive lock on
    folder/.lock, which the operating system releases when the process ends, however it ends, so a crash cannot
    leave it held. If another process holds it, stop with one line naming that process. Keep the returned file
    open for as long as the claim should last (on a system without fcntl, Windows, it claims nothing)."""
    os.makedirs(folder, exist_ok=True)
    lock = open(os.path.join(folder, ".lock"), "a+")
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
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()}: {' '.join([os.path.basename(sys.executable)] + sys.argv)}\n")
    lock.flush()
    return lock


def writable_folder(folder, key="--out_dir"):
    """Make `folder` (and its parents) and check this process can write in it, before any work whose results go
    there: a path that is a file, lies under a file or is not writable stops with one line, not after the work."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:  # FileExistsError (a file), NotADirectoryError (under a file), PermissionError
        fail(f"{key}={folder} cannot be made: {e.strerror or e} (choose another folder)")
    if not os.access(folder, os.W_OK | os.X_OK):
        fail(f"{key}={folder} is not writable by this user: choose another folder, or make it writable")


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


# -----------------------------------------------------------------------------
# Checkpoints

def save_checkpoint(checkpoint, path):
    """Atomic: a crash or kill while saving leaves the previous file whole (atomic_write)."""
    atomic_write(path, lambda f: torch.save(checkpoint, f))


def read_checkpoint(path):
    """A checkpoint file as a dict. A missing file raises FileNotFoundError, an unreadable one ValueError,
    each with a message for the user."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint at {path}: train one first (python train.py --out_dir=...)")
    try:
        with warnings.catch_warnings():  # torch's notes on a foreign pickle's protocol: the message below says it
            warnings.simplefilter("ignore")
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated zip, a file that is not a checkpoint, an unpicklable object, ...
        with open(path, "rb") as f:
            archive = f.read(4) == b"PK\x03\x04"  # torch.save writes a zip archive
        if not archive or isinstance(e, pickle.UnpicklingError):
            # never torch's advice to load it with weights_only=False: that runs whatever code the file holds
            what = "holds Python objects other than tensors and plain values" if archive or \
                isinstance(e, pickle.UnpicklingError) else "is not a file torch.save wrote"
            raise ValueError(f"{path} is not a checkpoint of this project: it {what}. The scripts read the ckpt.pt "
                             f"or {BEST} that train.py writes in a run's out_dir (python train.py --out_dir=...)") from None
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{path} is not a readable checkpoint ({reason[:200]}): it is truncated, corrupt or not "
                         f"from train.py. Its folder's {BEST} (the best earlier state) may still be whole.") from None
    if not isinstance(checkpoint, dict) or not {"model", "model_args"} <= checkpoint.keys():
        raise ValueError(f"{path} is not a train.py checkpoint (no model weights and model_args in it)")
    return checkpoint


def model_from_checkpoint(checkpoint, path, device="cpu", **runtime):
    """The GPT a checkpoint holds, in eval mode on device; runtime: flags of model.RUNTIME_FLAGS to run it with
    instead of its own (e.g. attn_backend='torch'). loss_chunk is 0 unless given, so that model(x, y) returns the
    logits with the loss whatever the run trained with."""
    from model import GPT, RUNTIME_FLAGS, GPTConfig  # here, not above: data preparation writes through this module
    unknown = set(runtime) - set(RUNTIME_FLAGS)
    if unknown:
        raise TypeError(f"model_from_checkpoint: {sorted(unknown)} are part of the model; runtime flags: {RUNTIME_FLAGS}")
    args = dict(checkpoint["model_args"], **{"loss_chunk": 0, **runtime})
    try:
        model = GPT(GPTConfig(**args))
        # a model saved from torch.compile's wrapper has its keys prefixed with _orig_mod.
        model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in checkpoint["model"].items()})
    except (TypeError, ValueError, RuntimeError) as e:
        raise ValueError(f"{path} does not match this model.py's GPT ({str(e).splitlines()[0]})") from None
    return model.to(device).eval()


def load_checkpoint(path, device="cpu"):
    """The one place a checkpoint file becomes a model: returns (GPT in eval mode on device, checkpoint dict).
    Raises FileNotFoundError or ValueError with a message for the user."""
    checkpoint = read_checkpoint(path)
    return model_from_checkpoint(checkpoint, path, device), checkpoint


def read_jsonl(path):
    """The records of a JSON-lines file such as log.jsonl ([] if there is none); a line that a crash cut short
    is skipped with a note."""
    if not os.path.isfile(path):
        return []
    records, bad = [], 0
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except ValueError:
                bad += 1
    if bad:
        print(f"note: skipped {bad} unreadable line(s) of {path} (cut short by a crash?)")
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

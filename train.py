"""
Train a gated-attention GPT:

    python train.py [config/file.py ...] [--key=value ...]

With no arguments it trains a small G1-gated model (4 layers, 128 wide) on the Python standard library's
own source for a few minutes on a laptop CPU, preparing data/pystdlib on first use, and ends by printing
what it measured. The files in config/ give the GPU runs; several GPUs (or CPU processes) through torchrun:

    torchrun --standalone --nproc_per_node=8 train.py config/train_fineweb.py

Every key below can be set by a config file (plain Python assignments, run in the order given) or by
--key=value (read as a Python literal and checked against the default's type). The model flags are the
fields of model.GPTConfig (gate, gate_granularity, norm, ...), at the defaults model.py gives them.

Writes out_dir/log.jsonl (one JSON record per eval), out_dir/ckpt.pt (the latest state) and out_dir/best.pt
(the state with the lowest validation loss: a worse or diverged state never replaces it). `--init_from=resume`
continues from ckpt.pt exactly where the run left off (same data, same random numbers, same settings unless a
flag changes them). A new run never starts over an existing run's folder unless --overwrite=True, and nothing
in out_dir changes until the first evaluation, so a command that fails early leaves the folder as it was.
"""

import ast
import builtins  # this file's `compile` is a config key
import ctypes
import dataclasses
import difflib
import glob
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
import types
from contextlib import nullcontext

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from data.shards import TrainLoader, atomic_write, find_shards, max_token_id, read_meta, val_batches
from model import GPT, GPTConfig

# -----------------------------------------------------------------------------
# Defaults: the laptop-CPU run. Every name here is a config key.

# I/O
out_dir = "out"
eval_interval = 50
log_interval = 10
eval_iters = 20  # validation batches per eval: the same windows every time (data.shards.val_batches)
eval_only = False  # evaluate a trained run once (with init_from='resume') and exit; writes nothing
always_save_checkpoint = True  # ckpt.pt gets the latest state at every eval; else only when the val loss improves
init_from = "scratch"  # 'scratch' or 'resume' (from out_dir/ckpt.pt, with that run's settings)
overwrite = False  # let a new run (init_from='scratch') replace the run already in out_dir
# wandb logging (pip install wandb)
wandb_log = False
wandb_project = "gated-attention"
wandb_run_name = "run"
# data
dataset = "pystdlib"  # a folder under data/ with <name>_train_*.bin and <name>_val_*.bin shards
data_dir = ""  # where its shards are, if not data/<dataset>
gradient_accumulation_steps = 1  # summed over all processes, as in nanoGPT
batch_size = 8  # sequences per micro-step per process
block_size = 128
# model: these sizes, then every other GPTConfig field at model.py's default (gate='g1' elementwise, ...)
n_layer = 4
n_head = 4
n_embd = 128
dropout = 0.0
bias = False
# AdamW with linear warmup and cosine decay to min_lr
learning_rate = 2e-3
max_iters = 300
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0  # clip the gradient norm to this; 0 = no clipping
decay_lr = True
warmup_iters = 30
lr_decay_iters = 300  # usually = max_iters
min_lr = 2e-4  # usually learning_rate / 10
# loss health
max_nonfinite = 10  # this many non-finite steps in a row stop the run
spike_threshold = 1.0  # a loss spike: a step's loss this many nats above the EMA of the earlier steps' losses
# (keep it above the step-to-step noise: about 0.5 nats (std) for the default 8 x 128-token batches)
# system
backend = "auto"  # DDP: 'nccl' on CUDA, 'gloo' otherwise
device = "auto"  # 'cuda', 'cuda:1', 'mps', 'cpu'; auto: the first of cuda, mps, cpu that is available
dtype = "auto"  # 'float32', 'bfloat16', 'float16'; auto: bf16 on GPUs that have it, else fp16, fp32 off CUDA
compile = False  # torch.compile the model (GPU runs: faster after a minute of compiling)
seed = 1337

for _field in dataclasses.fields(GPTConfig):  # the remaining model flags, defined once, in model.py
    globals().setdefault(_field.name, _field.default)
DEFAULTS = {k: v for k, v in globals().items()
            if not k.startswith("_") and isinstance(v, (bool, int, float, str, type(None)))}
# a key whose default is None (n_kv_head, mlp_hidden) takes the type GPTConfig declares for it
KEY_TYPES = {k: type(v) if v is not None else GPTConfig.__dataclass_fields__[k].type for k, v in DEFAULTS.items()}

# -----------------------------------------------------------------------------

REPO = os.path.dirname(os.path.abspath(__file__))
SPIKE_EMA = 0.95  # decay of the running mean that a loss spike is measured against (about 20 steps)
CHECKPOINT = "ckpt.pt"  # the latest state: what --init_from=resume continues
BEST = "best.pt"  # the state with the lowest validation loss: never replaced by a worse one


def fail(message):
    """Stop with a message and a non-zero exit status (no traceback: it is the user's input)."""
    raise SystemExit(f"error: {message}")


def _typed(key, value, where, defaults, key_types):
    want = key_types[key]
    if want is float and type(value) is int:
        value = float(value)
    if value is None and defaults[key] is None:
        return value
    if type(value) is not want:
        fail(f"{where}: {key} must be {want.__name__}, got {value!r} ({type(value).__name__})")
    return value


def _unknown(key, where, defaults):
    close = difflib.get_close_matches(key, defaults, n=1)
    fail(f"{where}: unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "") +
         "; the keys are the names at the top of the script")


def configure(defaults, argv, key_types=None):
    """nanoGPT's configurator: a copy of `defaults` changed by config files (Python run with the current
    values as globals) and --key=value overrides, applied in the order given. Unknown keys, values of the
    wrong type and errors inside a config file stop with a message naming them (file and line).
    Returns (config, given): given is the set of keys that a file or a flag set."""
    key_types = key_types or {k: type(v) for k, v in defaults.items()}
    config, given = dict(defaults), set()
    for arg in argv:
        if not arg.startswith("--"):
            path = arg if os.path.isfile(arg) else os.path.join(REPO, arg)
            if not os.path.isfile(path):
                fail(f"config file {arg} not found (arguments are config files or --key=value)")
            scope = dict(config)
            run_config_file(arg, path, scope)
            for key, value in scope.items():
                if key.startswith("_") or isinstance(value, types.ModuleType) or callable(value):
                    continue  # imports and helpers a config file may use
                if key not in defaults:
                    _unknown(key, arg, defaults)
                value = _typed(key, value, arg, defaults, key_types)
                if value != config[key]:  # what the file changed (a file cannot be seen assigning a value unchanged)
                    config[key] = value
                    given.add(key)
            continue
        key, eq, text = arg[2:].partition("=")
        if not eq:
            fail(f"{arg}: write --key=value")
        if key not in defaults:
            _unknown(key, arg, defaults)
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        if key_types[key] is str and not isinstance(value, str):
            value = text  # strings need no quotes: --gate=g1 as well as --gate='g1'
        elif key_types[key] is not str and value is text:
            fail(f"{arg}: {key} must be {key_types[key].__name__}, got {text!r}")
        config[key] = _typed(key, value, arg, defaults, key_types)
        given.add(key)
    return config, given


def run_config_file(arg, path, scope):
    """exec a config file into scope; a mistake in it becomes one line naming the file and the line."""
    try:
        with open(path, encoding="utf-8") as f:
            code = builtins.compile(f.read(), path, "exec")  # under its own name, so errors point into it
        exec(code, scope)
    except SyntaxError as e:
        fail(f"{arg} line {e.lineno}: {e.msg} (a config file is Python: key = value lines)")
    except (OSError, UnicodeDecodeError) as e:
        fail(f"config file {arg} cannot be read: {e}")
    except Exception as e:  # NameError, ZeroDivisionError, ... raised by the file's own code
        lines = [frame.lineno for frame in traceback.extract_tb(e.__traceback__) if frame.filename == path]
        fail(f"{arg} line {lines[-1] if lines else '?'}: {type(e).__name__}: {e}")


def dataset_dir(dataset, data_dir=""):
    """Where a dataset's shards are: data_dir if given, else data/<dataset> in this repo."""
    return data_dir or os.path.join(REPO, "data", dataset)


def pick_device(name, local_rank=None):
    """'auto' -> cuda, else mps, else cpu. Under torchrun each process takes the GPU of its local rank."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    if name == "cuda" and local_rank is not None:
        name = f"cuda:{local_rank}"
    try:
        kind = torch.device(name).type
    except (RuntimeError, ValueError):
        kind = None
    if kind not in ("cpu", "cuda", "mps"):
        fail(f"device={name!r} is not valid; choose 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'")
    if kind == "cuda" and not torch.cuda.is_available():
        fail(f"device={name!r} but CUDA is not available here; use --device=cpu (or auto)")
    if kind == "mps" and not torch.backends.mps.is_available():
        fail(f"device={name!r} but MPS (Apple GPU) is not available here; use --device=cpu (or auto)")
    return name


def autocast_for(device, dtype):
    """(autocast context, resolved dtype name). bf16 where the GPU has it, fp16 on older GPUs, fp32 elsewhere."""
    device_type = device.split(":")[0]
    if dtype == "auto":
        dtype = "float32" if device_type != "cuda" else "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    if dtype not in ("float32", "bfloat16", "float16"):
        fail(f"dtype={dtype!r} is not valid; choose one of 'auto', 'float32', 'bfloat16', 'float16'")
    if dtype == "float32":
        return nullcontext(), dtype
    return torch.autocast(device_type=device_type, dtype=getattr(torch, dtype)), dtype


def keep_freed_memory():
    """CPU runs on Linux: glibc hands every large freed block straight back to the OS, so each step
    page-faults its activations in again; on a 2-core VM that was ~40% of the default run's step time.
    Raising glibc's thresholds makes it reuse the memory instead. A no-op where glibc is not the allocator."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: keep up to 1 GiB of free memory in the process
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: serve large blocks from that memory, not fresh mappings
    except (OSError, AttributeError):
        pass


def lr_at(it, c):
    """Linear warmup to learning_rate, then cosine decay to min_lr at lr_decay_iters, then min_lr."""
    if not c.decay_lr:
        return c.learning_rate
    if it < c.warmup_iters:
        return c.learning_rate * (it + 1) / (c.warmup_iters + 1)
    if it >= c.lr_decay_iters:
        return c.min_lr
    progress = (it - c.warmup_iters) / max(1, c.lr_decay_iters - c.warmup_iters)
    return c.min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (c.learning_rate - c.min_lr)


def layer_mean(values):
    """Mean over layers of a per-layer stat (None for a stat the model does not have, e.g. gates off)."""
    values = [v for v in values or [] if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else None


def finite_or_none(x):
    """JSON has no NaN or infinity: write them as null."""
    return x if x is None or math.isfinite(x) else None


def describe(record):
    """The measurements of an eval record in words (layer averages)."""
    def number(key, spec):
        return "n/a" if record[key] is None else format(record[key], spec)
    return (f"val loss {number('val_loss', '.4f')}, first-token attention {number('first_token_attn', '.3f')}, "
            f"max activation {number('max_act', '.1f')}, gate mean {number('gate_mean', '.3f')}")


# -----------------------------------------------------------------------------
# Settings: checked before anything is read or written, so a mistake costs nothing

POSITIVE_INTS = ("batch_size", "block_size", "eval_interval", "log_interval", "eval_iters",
                 "gradient_accumulation_steps", "max_nonfinite", "max_iters")
# keys that belong to one command, not to the run: a resumed run takes them from this command, never
# from the checkpoint (a run trained on one machine may be resumed on another)
PER_COMMAND = ("out_dir", "init_from", "eval_only", "overwrite", "device", "dtype", "compile", "backend")
DATA_KEYS = ("dataset", "data_dir")
RESUME_KEYS = {"model", "optimizer", "scaler", "model_args", "iter_num", "val_loss", "best_val_loss", "config", "rng",
               "loader", "health"}


def check_settings(c):
    """Refuse meaningless settings with one line naming the key and what is allowed."""
    if c.init_from not in ("scratch", "resume"):
        fail(f"init_from={c.init_from!r} is not valid; choose 'scratch' or 'resume'")
    for key in POSITIVE_INTS:
        if getattr(c, key) < 1:
            fail(f"{key}={getattr(c, key)} must be at least 1")
    if c.eval_only and c.init_from != "resume":
        fail("eval_only=True evaluates a trained run: add --init_from=resume (a new model would be random)")
    ranges = {  # key: (the test a value must pass, what is allowed); NaN and infinity never pass
        "learning_rate": (lambda x: x > 0, "a positive number"),
        "min_lr": (lambda x: 0 <= x <= c.learning_rate, f"between 0 and learning_rate={c.learning_rate}"),
        "weight_decay": (lambda x: x >= 0, "0 or more"),
        "grad_clip": (lambda x: x >= 0, "0 (no clipping) or more"),
        "beta1": (lambda x: 0 <= x < 1, "in [0, 1)"),
        "beta2": (lambda x: 0 <= x < 1, "in [0, 1)"),
        "spike_threshold": (lambda x: x > 0, "a positive number of nats"),
    }
    for key, (ok, allowed) in ranges.items():
        value = getattr(c, key)
        if not (math.isfinite(value) and ok(value)):
            fail(f"{key}={value} is not valid; it must be {allowed}")
    if c.warmup_iters < 0:
        fail(f"warmup_iters={c.warmup_iters} must be 0 or more")
    if c.decay_lr and c.lr_decay_iters < max(1, c.warmup_iters):
        fail(f"lr_decay_iters={c.lr_decay_iters} must be at least 1 and at least warmup_iters={c.warmup_iters} "
             "(the cosine decay follows the warmup; usually lr_decay_iters = max_iters)")
    if not 0 <= c.seed < 2**31:
        fail(f"seed={c.seed} must be in 0..{2**31 - 1}")


def resume_settings(argv, checkpoint, ckpt_path):
    """A resumed run continues with its own settings: the checkpoint's, changed only by what this command
    sets. Model flags cannot change; other changes are announced, data changes loudly."""
    saved = {k: v for k, v in checkpoint["config"].items() if k in DEFAULTS and k not in PER_COMMAND}
    config, given = configure({**DEFAULTS, **saved}, argv, KEY_TYPES)
    notes = []
    for key in sorted(given):
        if key in PER_COMMAND or key not in saved or config[key] == saved[key]:
            continue
        if key in checkpoint["model_args"] and key != "attn_backend":  # the backend is not part of the model
            fail(f"{key}={config[key]!r} differs from the run in {ckpt_path} ({key}={saved[key]!r}): a resumed run "
                 "keeps its model. Start a new run in another out_dir to change the model.")
        if key not in DATA_KEYS:
            notes.append(f"note: resuming with {key}={config[key]!r} (the run had {saved[key]!r})")
    old = os.path.abspath(dataset_dir(saved.get("dataset", ""), saved.get("data_dir", "")))
    new = os.path.abspath(dataset_dir(config["dataset"], config["data_dir"]))
    if old != new:
        notes.append(f"WARNING: this run was trained on {old}; it now continues on {new}, because this command "
                     "says so (--dataset/--data_dir). Leave both out to continue on the run's own data.")
    return config, notes


# -----------------------------------------------------------------------------
# Checkpoints and the run folder

def rng_state():
    np_state = np.random.get_state()
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            # plain lists and numbers, so torch.load(weights_only=True) can read them back
            "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
            "python": random.getstate()}


def restore_rng(state):
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    kind, key, *rest = state["numpy"]
    np.random.set_state((kind, np.array(key, dtype=np.uint32), *rest))
    random.setstate(state["python"])


def save_checkpoint(checkpoint, path):
    """Atomic: a crash or kill while saving leaves the previous file whole (data.shards.atomic_write)."""
    atomic_write(path, lambda f: torch.save(checkpoint, f))


def read_checkpoint(path):
    """A checkpoint file as a dict. A missing file raises FileNotFoundError, an unreadable one ValueError,
    each with a message for the user."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint at {path}: train one first (python train.py --out_dir=...)")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated zip, a file that is not a checkpoint, an unpicklable object, ...
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{path} is not a readable checkpoint ({reason[:200]}): it is truncated, corrupt or not "
                         f"from train.py. Its folder's {BEST} (the best earlier state) may still be whole.") from None
    if not isinstance(checkpoint, dict) or not {"model", "model_args"} <= checkpoint.keys():
        raise ValueError(f"{path} is not a train.py checkpoint (no model weights and model_args in it)")
    return checkpoint


def model_from_checkpoint(checkpoint, path, device="cpu", attn_backend=None):
    """The GPT a checkpoint holds, in eval mode on device (attn_backend: run it with another attention backend)."""
    args = dict(checkpoint["model_args"], **({"attn_backend": attn_backend} if attn_backend else {}))
    try:
        model = GPT(GPTConfig(**args))
        # a model saved from torch.compile's wrapper has its keys prefixed with _orig_mod.
        model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in checkpoint["model"].items()})
    except (TypeError, ValueError, RuntimeError) as e:
        raise ValueError(f"{path} does not match this model.py's GPT ({str(e).splitlines()[0]})") from None
    return model.to(device).eval()


def load_checkpoint(path, device="cpu"):
    """The one place a checkpoint file becomes a model: returns (GPT in eval mode on device, checkpoint dict).
    Used by sample.py and the analysis scripts; raises FileNotFoundError or ValueError with a user message."""
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


class RunFolder:
    """Everything a run writes to out_dir: log.jsonl, ckpt.pt (the latest state) and best.pt (the state
    with the lowest validation loss). Nothing in the folder changes before the first log record, so a
    command that fails while starting (bad data, bad flags) leaves an earlier run's folder as it was."""

    RUN_FILES = ("log.jsonl", CHECKPOINT, BEST)

    def __init__(self, out_dir, start_iter):
        self.out_dir, self.start_iter, self.started = out_dir, start_iter, False
        self.log_path, self.ckpt_path, self.best_path = (os.path.join(out_dir, n) for n in self.RUN_FILES)

    @staticmethod
    def holds_a_run(out_dir):
        return [n for n in RunFolder.RUN_FILES if os.path.exists(os.path.join(out_dir, n))]

    def check_writable(self):
        """Make out_dir (an empty new folder changes no run) and make sure files can be written there."""
        try:
            os.makedirs(self.out_dir, exist_ok=True)
            with tempfile.TemporaryFile(dir=self.out_dir):
                pass
        except OSError as e:
            fail(f"out_dir={self.out_dir!r} cannot be written: {e.strerror or e}; choose another --out_dir")

    def _start(self):
        """The first write of this command: a new run replaces the old files (--overwrite=True was given,
        or there were none); a resumed run drops the records after its checkpoint, so the log reads as one run."""
        for stale in glob.glob(os.path.join(self.out_dir, ".*.tmp")):
            os.remove(stale)  # the partial file of a run killed while saving (the named files are whole)
        if self.start_iter == 0:
            for name in (CHECKPOINT, BEST):
                if os.path.exists(os.path.join(self.out_dir, name)):
                    os.remove(os.path.join(self.out_dir, name))
            keep = []
        else:
            keep = [r for r in read_jsonl(self.log_path) if r.get("iter", math.inf) <= self.start_iter]
        text = "".join(json.dumps(r) + "\n" for r in keep)
        atomic_write(self.log_path, lambda f: f.write(text.encode()))
        self.started = True

    def log(self, record):
        try:
            if not self.started:
                self._start()
            with open(self.log_path, "a") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as e:
            fail(f"could not write {self.log_path}: {e.strerror or e}. {self.ckpt_path} keeps the last saved state.")

    def save(self, checkpoint, is_best):
        """ckpt.pt <- checkpoint; best.pt <- the same file too when it is the best so far (a hard link:
        ckpt.pt is always replaced by a rename, so best.pt keeps its bytes when ckpt.pt moves on)."""
        try:
            save_checkpoint(checkpoint, self.ckpt_path)
            if is_best:
                tmp = os.path.join(self.out_dir, f".{BEST}.link.tmp")
                if os.path.exists(tmp):
                    os.remove(tmp)
                try:
                    os.link(self.ckpt_path, tmp)
                except OSError:  # a filesystem without hard links: copy
                    shutil.copyfile(self.ckpt_path, tmp)
                os.replace(tmp, self.best_path)
        except OSError as e:
            fail(f"could not save a checkpoint in {self.out_dir}: {e.strerror or e}. {self.ckpt_path} and "
                 f"{self.best_path} keep the states saved before.")


# -----------------------------------------------------------------------------

def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    config, _ = configure(DEFAULTS, argv, KEY_TYPES)
    ckpt_path = os.path.join(config["out_dir"], CHECKPOINT)
    checkpoint, notes = None, []
    if config["init_from"] == "resume":
        if not os.path.isfile(ckpt_path):
            fail(f"init_from='resume' but there is no checkpoint at {ckpt_path}")
        try:
            checkpoint = read_checkpoint(ckpt_path)
        except ValueError as e:
            fail(e)
        missing = RESUME_KEYS - checkpoint.keys()
        if missing:
            fail(f"{ckpt_path} cannot be resumed: it lacks {sorted(missing)} (only train.py's own checkpoints can)")
        config, notes = resume_settings(argv, checkpoint, ckpt_path)
    c = types.SimpleNamespace(**config)
    check_settings(c)
    if c.init_from == "scratch" and RunFolder.holds_a_run(c.out_dir) and not c.overwrite:
        fail(f"{c.out_dir} already holds a run ({', '.join(RunFolder.holds_a_run(c.out_dir))}). Continue it with "
             "--init_from=resume, choose another --out_dir, or replace it with --overwrite=True.")

    # processes: one, or one per GPU under torchrun (which sets RANK, LOCAL_RANK, WORLD_SIZE)
    ddp = "RANK" in os.environ
    rank, local_rank, world_size = 0, 0, 1
    if ddp:
        rank, local_rank, world_size = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    device = pick_device(c.device, local_rank if ddp else None)
    device_type = device.split(":")[0]
    if device_type == "cpu" and sys.platform.startswith("linux"):
        keep_freed_memory()
    if ddp:
        if device_type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend=c.backend if c.backend != "auto" else "nccl" if device_type == "cuda" else "gloo")
    try:
        if rank == 0:
            for note in notes:
                print(note)
        train(c, config, rank, world_size, device, ddp, checkpoint)
    finally:
        if ddp:
            dist.destroy_process_group()


def prepare_data(c, block, vocab_size, rank, world_size, ddp):
    """The training loader and the fixed validation batches, the default dataset prepared on first use.
    Every problem with the data stops here, before the run folder is touched."""
    data_dir = dataset_dir(c.dataset, c.data_dir)
    try:
        if c.dataset == "pystdlib" and rank == 0 and not find_shards(data_dir, "train"):
            print(f"preparing the default dataset in {data_dir} (one time): tokenizing this Python's standard library")
            from data.pystdlib.prepare import prepare as prepare_pystdlib
            prepare_pystdlib(out_dir=data_dir)  # refuses a folder that holds other files
    except (OSError, ValueError) as e:
        fail(f"cannot prepare the default dataset in {data_dir}: {e}")
    if ddp:
        dist.barrier()  # the other ranks wait for rank 0's preparation
    try:
        if not find_shards(data_dir, "train") or not find_shards(data_dir, "val"):
            script = os.path.join("data", c.dataset, "prepare.py")
            how = (f"python {script}" if os.path.isfile(os.path.join(REPO, script))
                   else f"python data/textdir/prepare.py --src DIR --name {c.dataset}")
            fail(f"dataset {c.dataset!r} is not prepared: no {c.dataset}_train_*.bin and _val_*.bin shards in "
                 f"{data_dir}. Prepare it first: {how}")
        read_meta(data_dir)  # a malformed meta.json is reported here
        largest = max_token_id(data_dir)
        if largest >= vocab_size:
            fail(f"the shards in {data_dir} hold token id {largest} but the model has vocab_size={vocab_size}: "
                 f"the data was made with another tokenizer, or vocab_size must be at least {largest + 1}")
        loader = TrainLoader(data_dir, block, c.batch_size, seed=c.seed, rank=rank, world_size=world_size)
        val = val_batches(data_dir, block, c.batch_size, c.eval_iters)
    except (OSError, ValueError) as e:
        fail(e)
    return data_dir, loader, val


def train(c, config, rank, world_size, device, ddp, checkpoint=None):
    master = rank == 0  # the one process that prints, logs and saves
    say = print if master else (lambda *args, **kwargs: None)
    device_type = device.split(":")[0]
    if c.gradient_accumulation_steps % world_size:
        fail(f"gradient_accumulation_steps={c.gradient_accumulation_steps} must be a multiple of the "
             f"{world_size} processes (it counts micro-steps summed over all of them)")
    accum = c.gradient_accumulation_steps // world_size
    ctx, dtype = autocast_for(device, c.dtype)
    torch.manual_seed(c.seed + rank)  # ranks differ in dropout; the weights are rank 0's (DDP copies them)
    np.random.seed(c.seed + rank)
    random.seed(c.seed + rank)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    ckpt_path = os.path.join(c.out_dir, CHECKPOINT)

    # the model: from the flags, or from the checkpoint on resume (its flags, this command's attention backend)
    if checkpoint is not None:
        try:
            raw_model = model_from_checkpoint(checkpoint, ckpt_path, attn_backend=c.attn_backend)
        except ValueError as e:
            fail(e)
        gptconf = raw_model.config
    else:
        try:
            gptconf = GPTConfig(**{f.name: config[f.name] for f in dataclasses.fields(GPTConfig)})
        except ValueError as e:
            fail(e)
        raw_model = GPT(gptconf)
    config.update({k: v for k, v in dataclasses.asdict(gptconf).items() if k in config})  # as built (n_kv_head)
    block = gptconf.block_size
    tokens_per_iter = c.gradient_accumulation_steps * c.batch_size * block
    data_dir, loader, val = prepare_data(c, block, gptconf.vocab_size, rank, world_size, ddp)

    raw_model.to(device).train()
    optimizer = raw_model.configure_optimizers(c.weight_decay, c.learning_rate, (c.beta1, c.beta2), device_type)
    scaler = torch.amp.GradScaler("cuda" if device_type == "cuda" else "cpu", enabled=dtype == "float16" and device_type == "cuda")
    iter_num, best_val_loss, best_iter = 0, float("inf"), None
    health = {"loss_ema": None, "loss_spikes": 0, "nonfinite_steps": 0}
    if checkpoint is not None:
        optimizer.load_state_dict(checkpoint["optimizer"])
        if checkpoint["scaler"] is not None:
            scaler.load_state_dict(checkpoint["scaler"])
        loader.load_state_dict(checkpoint["loader"])
        restore_rng(checkpoint["rng"])
        iter_num, best_val_loss, health = checkpoint["iter_num"], checkpoint["best_val_loss"], checkpoint["health"]
        best_iter = checkpoint.get("best_iter", iter_num if best_val_loss == checkpoint["val_loss"] else None)
        say(f"resuming from {ckpt_path} at iter {iter_num}")
    checkpoint = None  # free the memory
    model = torch.compile(raw_model) if c.compile else raw_model  # for evaluation: no DDP, no collectives
    train_model = DDP(model, device_ids=[torch.cuda.current_device()] if device_type == "cuda" else None) if ddp else model

    folder = RunFolder(c.out_dir, iter_num)
    use_wandb = master and c.wandb_log and not c.eval_only
    if master and not c.eval_only:  # eval_only reports and changes nothing in out_dir
        folder.check_writable()
        if use_wandb:
            try:
                import wandb
            except ImportError:
                fail("wandb_log=True needs wandb: pip install wandb")
            wandb.init(project=c.wandb_project, name=c.wandb_run_name, config=config)
    say(f"model: {raw_model.num_params() / 1e6:.2f}M parameters, gate={gptconf.gate}, norm={gptconf.norm}; "
        f"device {device}, {dtype}, {world_size} process(es)")
    say(f"data: {data_dir}, {len(loader.windows):,} training windows; {tokens_per_iter:,} tokens per iteration")

    @torch.no_grad()
    def evaluate():
        """Mean loss over the fixed validation batches (shared out among the ranks), and the model's
        attention/activation/gate statistics on the first one."""
        model.eval()
        total = torch.zeros(2, device=device)  # summed loss, batches
        for x, y in val[rank::world_size]:
            with ctx:
                _, loss = model(x.to(device), y.to(device))
            total += torch.stack([loss.float(), torch.ones((), device=device)])
        if ddp:
            dist.all_reduce(total)
        x, y = val[0]
        with ctx:
            _, _, stats = raw_model(x.to(device), y.to(device), return_stats=True)
        model.train()
        return (total[0] / total[1]).item(), stats

    def save(val_loss):
        """ckpt.pt takes the latest state (always_save_checkpoint) or only a better one; best.pt only a
        better one. A non-finite state is never saved: it would be useless to resume from."""
        nonlocal best_val_loss, best_iter
        if not (math.isfinite(val_loss) and all(torch.isfinite(p).all() for p in raw_model.parameters())):
            print(f"not saving: the validation loss or the weights are not finite; {ckpt_path} keeps the last "
                  f"finite state" + (f", best.pt the best (iter {best_iter})" if best_iter is not None else ""))
            return
        is_best = val_loss < best_val_loss
        if not (is_best or c.always_save_checkpoint):
            return
        if is_best:
            best_val_loss, best_iter = val_loss, iter_num
        folder.save({
            "model": raw_model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict() if scaler.is_enabled() else None,
            "model_args": dataclasses.asdict(gptconf),
            "iter_num": iter_num,
            "val_loss": val_loss,
            "best_val_loss": best_val_loss,
            "best_iter": best_iter,
            "config": config,
            "rng": rng_state(),
            "loader": loader.state_dict(),
            "health": health,
        }, is_best)
        if is_best:
            print(f"saved {ckpt_path} and best.pt (the best validation loss so far)", flush=True)
        else:
            worse = val_loss - best_val_loss
            print(f"saved {ckpt_path} (the latest state); its validation loss is {worse:.3f} worse than the best, "
                  f"{best_val_loss:.4f} at iter {best_iter}, which best.pt keeps", flush=True)
            if worse > c.spike_threshold:
                print(f"WARNING: the validation loss rose by {worse:.2f} nats: the run may be diverging "
                      "(a lower learning_rate, or resume from best.pt: copy it to ckpt.pt)", flush=True)

    # -------------------------------------------------------------------------
    # the loop: evaluate (and save) every eval_interval iterations and at the end, else one optimizer step
    start_iter, t_start = iter_num, time.time()
    train_losses, train_time, timed_iters, record = [], 0.0, 0, None
    nonfinite_in_a_row, t_last = 0, time.time()
    if start_iter >= c.max_iters and not c.eval_only:
        say(f"nothing to do: the checkpoint is at iter {start_iter} and max_iters={c.max_iters}")
    while True:
        lr = lr_at(iter_num, c)
        for group in optimizer.param_groups:
            group["lr"] = lr

        resumed_here = iter_num == start_iter and start_iter > 0 and not c.eval_only  # its eval is in the log
        if (iter_num % c.eval_interval == 0 or iter_num >= c.max_iters or c.eval_only) and not resumed_here:
            val_loss, stats = evaluate()
            record = {
                "iter": iter_num,
                "train_loss": sum(train_losses) / len(train_losses) if train_losses else None,  # steps since last eval
                "val_loss": finite_or_none(val_loss),
                "lr": lr,
                "tokens": iter_num * tokens_per_iter,
                "tokens_per_s": tokens_per_iter * timed_iters / train_time if timed_iters else None,
                "mfu": raw_model.estimate_mfu(c.batch_size * accum, train_time / timed_iters, device=device) if timed_iters else None,
                "first_token_attn": layer_mean(stats["first_token_attn"]),
                "max_act": layer_mean(stats["max_act"]),
                "gate_mean": layer_mean(stats["gate_mean"]),
                "loss_spikes": health["loss_spikes"],
                "nonfinite_steps": health["nonfinite_steps"],
                "time_s": time.time() - t_start,
                "layers": {k: v and [finite_or_none(x) for x in v] for k, v in stats.items()},  # per-layer values
            }
            train_losses, train_time, timed_iters = [], 0.0, 0
            say(f"eval iter {iter_num}: {describe(record)}", flush=True)
            if master and not c.eval_only:
                folder.log(record)
                if use_wandb:
                    wandb.log({k: v for k, v in record.items() if k != "layers"}, step=iter_num)
                if iter_num > start_iter:
                    save(val_loss)
            t_last = time.time()  # evaluation time is not training time
        if c.eval_only or iter_num >= c.max_iters:
            break

        # one optimizer step: accum micro-batches on each rank, gradients averaged over all of them
        step_loss = torch.zeros((), device=device)
        for micro_step in range(accum):
            x, y = loader.next_batch()
            if device_type == "cuda":
                x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
            else:
                x, y = x.to(device), y.to(device)
            if ddp:  # synchronise gradients on the last micro-step only
                train_model.require_backward_grad_sync = micro_step == accum - 1
            with ctx:
                _, loss = train_model(x, y)
                loss = loss / accum
            step_loss += loss.detach()
            scaler.scale(loss).backward()
        if ddp:  # every rank sees the same loss, so every rank takes the same decision below
            dist.all_reduce(step_loss)
            step_loss /= world_size
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), c.grad_clip if c.grad_clip > 0 else math.inf)
        loss_value = step_loss.item()
        # fp16's scaler skips steps with overflowing gradients by itself; anything else non-finite is ours to skip
        if not math.isfinite(loss_value) or (not scaler.is_enabled() and not torch.isfinite(grad_norm)):
            health["nonfinite_steps"] += 1
            nonfinite_in_a_row += 1
            optimizer.zero_grad(set_to_none=True)
            if scaler.is_enabled():
                scaler.update()
            say(f"iter {iter_num}: non-finite loss {loss_value} or gradient norm {grad_norm.item()}: step skipped "
                f"({nonfinite_in_a_row} in a row, {health['nonfinite_steps']} in all)")
            if nonfinite_in_a_row >= c.max_nonfinite:
                fail(f"{nonfinite_in_a_row} non-finite steps in a row (max_nonfinite={c.max_nonfinite}): the run has "
                     f"diverged. {ckpt_path} holds the last finite state"
                     + (f" and best.pt the best (iter {best_iter})" if best_iter is not None else "")
                     + "; try a lower learning_rate or more warmup_iters.")
        else:
            nonfinite_in_a_row = 0
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            ema = health["loss_ema"]
            if ema is not None and loss_value > ema + c.spike_threshold:
                health["loss_spikes"] += 1
            health["loss_ema"] = loss_value if ema is None else SPIKE_EMA * ema + (1 - SPIKE_EMA) * loss_value
            train_losses.append(loss_value)
        iter_num += 1

        t_now = time.time()
        dt, t_last = t_now - t_last, t_now
        if iter_num > start_iter + 1:  # the first step pays for warm-up (and compiling): leave it out of the speed
            train_time += dt
            timed_iters += 1
        if iter_num % c.log_interval == 0:
            mfu = raw_model.estimate_mfu(c.batch_size * accum, dt, device=device)
            say(f"iter {iter_num}: loss {loss_value:.4f}, lr {lr:.2e}, {dt * 1000:.0f} ms, "
                f"{tokens_per_iter / dt:,.0f} tokens/s" + (f", MFU {mfu * 100:.1f}%" if mfu else ""), flush=True)

    if record is not None and not c.eval_only:
        say(f"done: {iter_num} iterations in {time.time() - t_start:.0f} s. {describe(record)} "
            f"(averages over layers); log in {folder.log_path}")
    if use_wandb:
        wandb.finish()


if __name__ == "__main__":
    main()

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

Writes out_dir/log.jsonl (one JSON record per eval) and out_dir/ckpt.pt; `--init_from=resume` continues
from ckpt.pt exactly where the run left off (same data, same random numbers).
"""

import ast
import ctypes
import dataclasses
import difflib
import glob
import json
import math
import os
import random
import sys
import time
import types
from contextlib import nullcontext

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from data.shards import TrainLoader, atomic_write, find_shards, read_meta, val_batches
from model import GPT, GPTConfig

# -----------------------------------------------------------------------------
# Defaults: the laptop-CPU run. Every name here is a config key.

# I/O
out_dir = "out"
eval_interval = 50
log_interval = 10
eval_iters = 20  # validation batches per eval: the same windows every time (data.shards.val_batches)
eval_only = False  # evaluate once and exit
always_save_checkpoint = True  # else only when the validation loss improves
init_from = "scratch"  # 'scratch' or 'resume' (from out_dir/ckpt.pt)
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
CHECKPOINT = "ckpt.pt"


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
    values as globals) and --key=value overrides, applied in the order given. Unknown keys and values of
    the wrong type stop with a message naming them."""
    key_types = key_types or {k: type(v) for k, v in defaults.items()}
    config = dict(defaults)
    for arg in argv:
        if not arg.startswith("--"):
            path = arg if os.path.isfile(arg) else os.path.join(REPO, arg)
            if not os.path.isfile(path):
                fail(f"config file {arg} not found (arguments are config files or --key=value)")
            scope = dict(config)
            with open(path) as f:
                exec(f.read(), scope)
            for key, value in scope.items():
                if key.startswith("_") or isinstance(value, types.ModuleType) or callable(value):
                    continue  # imports and helpers a config file may use
                if key not in defaults:
                    _unknown(key, arg, defaults)
                config[key] = _typed(key, value, arg, defaults, key_types)
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
    return config


def dataset_dir(dataset, data_dir=""):
    """Where a dataset's shards are: data_dir if given, else data/<dataset> in this repo."""
    return data_dir or os.path.join(REPO, "data", dataset)


def pick_device(name, local_rank=None):
    """'auto' -> cuda, else mps, else cpu. Under torchrun each process takes the GPU of its local rank."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    if name == "cuda" and local_rank is not None:
        name = f"cuda:{local_rank}"
    if name.startswith("cuda") and not torch.cuda.is_available():
        fail(f"device={name!r} but CUDA is not available here; use --device=cpu (or auto)")
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
# Checkpoints

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


def load_checkpoint(path, device="cpu"):
    """The one place a checkpoint becomes a model: returns (GPT in eval mode on device, checkpoint dict).
    Used by training's resume, sample.py and analysis scripts."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint at {path}: train one first (python train.py --out_dir=...)")
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    try:
        config = GPTConfig(**checkpoint["model_args"])
    except TypeError as e:
        raise ValueError(f"{path} does not match this model.py's GPTConfig ({e})") from None
    model = GPT(config)
    # a model saved from torch.compile's wrapper has its keys prefixed with _orig_mod.
    model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in checkpoint["model"].items()})
    return model.to(device).eval(), checkpoint


def trim_log(path, last_iter):
    """On resume: keep the log's records up to the checkpoint, so the log reads as one run."""
    if not os.path.isfile(path):
        return
    keep = []
    with open(path) as f:
        for line in f:
            try:
                if json.loads(line)["iter"] <= last_iter:
                    keep.append(line)
            except (ValueError, KeyError):
                pass  # a line cut short by a crash
    atomic_write(path, lambda f: f.write("".join(keep).encode()))


# -----------------------------------------------------------------------------

def main(argv=None):
    config = configure(DEFAULTS, sys.argv[1:] if argv is None else argv, KEY_TYPES)
    c = types.SimpleNamespace(**config)
    if c.init_from not in ("scratch", "resume"):
        fail(f"init_from={c.init_from!r} is not valid; choose 'scratch' or 'resume'")
    for key in ("batch_size", "block_size", "eval_interval", "log_interval", "eval_iters",
                "gradient_accumulation_steps", "max_nonfinite"):
        if config[key] < 1:
            fail(f"{key}={config[key]} must be at least 1")

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
        train(c, config, rank, world_size, device, ddp)
    finally:
        if ddp:
            dist.destroy_process_group()


def train(c, config, rank, world_size, device, ddp):
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
    log_path = os.path.join(c.out_dir, "log.jsonl")

    # the model: from the flags, or from the checkpoint on resume (its flags win)
    checkpoint = None
    if c.init_from == "resume":
        if not os.path.isfile(ckpt_path):
            fail(f"init_from='resume' but there is no checkpoint at {ckpt_path}")
        raw_model, checkpoint = load_checkpoint(ckpt_path)
        gptconf = raw_model.config
        for key, value in checkpoint["config"].items():
            if key in config and config[key] != value and key not in ("init_from", "max_iters", "eval_only"):
                say(f"note: resuming a run that had {key}={value!r}; now {key}={config[key]!r}"
                    + (" is ignored (model flags come from the checkpoint)" if key in checkpoint["model_args"] else ""))
        config.update({k: v for k, v in checkpoint["model_args"].items() if k in config})
    else:
        try:
            gptconf = GPTConfig(**{f.name: config[f.name] for f in dataclasses.fields(GPTConfig)})
        except ValueError as e:
            fail(e)
    block = gptconf.block_size
    tokens_per_iter = c.gradient_accumulation_steps * c.batch_size * block

    # the data: prepared shards, the default dataset prepared on first use
    data_dir = dataset_dir(c.dataset, c.data_dir)
    if c.dataset == "pystdlib":
        if master and not (find_shards(data_dir, "train") and read_meta(data_dir)):
            print(f"preparing the default dataset in {data_dir} (one time): tokenizing this Python's standard library")
            from data.pystdlib.prepare import prepare as prepare_pystdlib
            prepare_pystdlib(out_dir=data_dir)
        if ddp:
            dist.barrier()  # the other ranks wait for rank 0's preparation
    if not find_shards(data_dir, "train") or not find_shards(data_dir, "val"):
        script = os.path.join("data", c.dataset, "prepare.py")
        how = (f"python {script}" if os.path.isfile(os.path.join(REPO, script))
               else f"python data/textdir/prepare.py --src DIR --name {c.dataset}")
        fail(f"dataset {c.dataset!r} is not prepared: no {c.dataset}_train_*.bin and _val_*.bin shards in {data_dir}. "
             f"Prepare it first: {how}")
    meta = read_meta(data_dir) or {}
    if meta.get("vocab_size", 0) > gptconf.vocab_size:
        fail(f"the {c.dataset} tokenizer has {meta['vocab_size']} tokens but vocab_size={gptconf.vocab_size}; raise vocab_size")
    try:
        loader = TrainLoader(data_dir, block, c.batch_size, seed=c.seed, rank=rank, world_size=world_size)
        val = val_batches(data_dir, block, c.batch_size, c.eval_iters)
    except ValueError as e:
        fail(e)

    if checkpoint is None:
        raw_model = GPT(gptconf)
    raw_model.to(device).train()
    optimizer = raw_model.configure_optimizers(c.weight_decay, c.learning_rate, (c.beta1, c.beta2), device_type)
    scaler = torch.amp.GradScaler("cuda" if device_type == "cuda" else "cpu", enabled=dtype == "float16" and device_type == "cuda")
    iter_num, best_val_loss = 0, float("inf")
    health = {"loss_ema": None, "loss_spikes": 0, "nonfinite_steps": 0}
    if checkpoint is not None:
        optimizer.load_state_dict(checkpoint["optimizer"])
        if checkpoint["scaler"] is not None:
            scaler.load_state_dict(checkpoint["scaler"])
        loader.load_state_dict(checkpoint["loader"])
        restore_rng(checkpoint["rng"])
        iter_num, best_val_loss, health = checkpoint["iter_num"], checkpoint["best_val_loss"], checkpoint["health"]
        say(f"resuming from {ckpt_path} at iter {iter_num}")
    checkpoint = None  # free the memory
    model = torch.compile(raw_model) if c.compile else raw_model  # for evaluation: no DDP, no collectives
    train_model = DDP(model, device_ids=[torch.cuda.current_device()] if device_type == "cuda" else None) if ddp else model

    use_wandb = master and c.wandb_log and not c.eval_only
    if master and not c.eval_only:  # eval_only reports and changes nothing in out_dir
        os.makedirs(c.out_dir, exist_ok=True)
        for stale in glob.glob(os.path.join(c.out_dir, f".{CHECKPOINT}.*.tmp")):
            os.remove(stale)  # the partial file of a run killed while saving (ckpt.pt itself is whole)
        if iter_num == 0:
            open(log_path, "w").close()  # a new run, a new log
        else:
            trim_log(log_path, iter_num)
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
                with open(log_path, "a") as f:
                    f.write(json.dumps(record) + "\n")
                if use_wandb:
                    wandb.log({k: v for k, v in record.items() if k != "layers"}, step=iter_num)
                if iter_num > start_iter and (val_loss < best_val_loss or c.always_save_checkpoint):
                    # never let a diverged state replace a good checkpoint
                    if not (math.isfinite(val_loss) and all(torch.isfinite(p).all() for p in raw_model.parameters())):
                        print("not saving: the validation loss or the weights are not finite; "
                              f"{ckpt_path} keeps the last good state")
                    else:
                        best_val_loss = min(best_val_loss, val_loss)
                        save_checkpoint({
                            "model": raw_model.state_dict(),
                            "optimizer": optimizer.state_dict(),
                            "scaler": scaler.state_dict() if scaler.is_enabled() else None,
                            "model_args": dataclasses.asdict(gptconf),
                            "iter_num": iter_num,
                            "val_loss": val_loss,
                            "best_val_loss": best_val_loss,
                            "config": config,
                            "rng": rng_state(),
                            "loader": loader.state_dict(),
                            "health": health,
                        }, ckpt_path)
                        print(f"saved {ckpt_path}", flush=True)
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
                     f"diverged. {ckpt_path} holds the last good state; try a lower learning_rate or more warmup_iters.")
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
            f"(averages over layers); log in {log_path}")
    if use_wandb:
        wandb.finish()


if __name__ == "__main__":
    main()

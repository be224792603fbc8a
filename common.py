"""
What the scripts (train.py, sample.py, analyze.py, evaluate.py, repro.py, bench.py) share, so that none imports
another:

  fail, configure        the one command-line convention: config files and --key=value, checked against a
                         dataclass of keys (a bool key may be given as a bare --key, a list key as a,b,c);
                         --help lists the keys with their defaults, types and comments
  pick_device, autocast  where and in which precision to run, device_name
  the run folder         LOG, CHECKPOINT, BEST: the files train.py writes in out_dir, named once; claim_folder:
                         one process at a time writes a folder; writable_folder: an out_dir checked before the work
  results                write_text, write_json: a result file written atomically (the old one or the new one)
  checkpoints            read_checkpoint, model_from_checkpoint, load_checkpoint, save_checkpoint
  the training step      optimizer_step (train.py trains with it, bench.py --train times it); keep_freed_memory
                         (the CPU allocator setting train.py runs under and bench.py --step measures)
  runs and logs          dataset_dir, read_jsonl, code_version, finite_or_none, markdown_table
  results                writable_folder (checked before the work), write_text and write_json (atomic: a kill or a
                         full disk leaves the previous file); free_memory (what a run may use)
  plots                  pyplot (matplotlib, or None with a note), save_figure (atomic too)
  speed                  peak_flops, flops_per_token, estimate_mfu; COMPILE_MODES, SDPA_BACKENDS,
                         sdpa_preference and sdpa_order (the choices train.py and bench.py share)
"""

import ast
import builtins
import ctypes
import dataclasses
import difflib
import inspect
import json
import math
import os
import pickle
import platform
import subprocess
import sys
import textwrap
import tokenize
import traceback
import types
import typing
import warnings
from contextlib import nullcontext

import torch

from data.shards import atomic_write
from model import GPT, RUNTIME_FLAGS, GPTConfig

REPO = os.path.dirname(os.path.abspath(__file__))
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
    """Write a result file atomically (data.shards.atomic_write): a full disk or a kill leaves the previous file
    whole, never a part of the new one."""
    data = text.encode("utf-8")
    atomic_write(path, lambda f: f.write(data))


def write_json(path, value):
    """`value` as JSON (indented, for people to read), written atomically as write_text writes."""
    write_text(path, json.dumps(value, indent=1))


def fail(message):
    """Stop with a message and a non-zero exit status (no traceback: it is the user's input)."""
    raise SystemExit(f"error: {message}")


# -----------------------------------------------------------------------------
# The command line: `python script.py [config/file.py ...] [--key=value ...]`, applied in the order given

def config_path(name):
    """Where the config file `name` is: as given (from the working directory), else inside the repository, so that
    config/... works from any directory; None where it is neither."""
    return next((path for path in (name, os.path.join(REPO, name)) if os.path.isfile(path)), None)


def configure(keys, argv, defaults=None):
    """Fill the dataclass `keys` from config files (plain Python run with the current values as globals) and
    --key=value overrides. Values are read as Python literals (strings need no quotes) and must have the
    field's type; a bool key may be written --key for --key=True; a list key (a field typed tuple[int, ...],
    tuple[str, ...]) is written a,b,c. An unknown key, a value of the wrong type or a mistake in a config file stops
    with one line naming it (and the file and line). --help (or -h) prints the script's usage and every key, and
    exits. `defaults` (a dict) replaces some of the dataclass's defaults, e.g. a resumed run's own settings.
    Returns (config, given): given is the set of keys a file or a flag set."""
    if "--help" in argv or "-h" in argv:
        print(usage(keys))
        raise SystemExit(0)
    fields = {f.name: f for f in dataclasses.fields(keys)}
    values = {name: f.default for name, f in fields.items()} | dict(defaults or {})
    given = set()
    for arg in argv:
        if not arg.startswith("--"):
            path = config_path(arg)
            if path is None:
                fail(f"config file {arg} not found (arguments are config files or --key=value; --help lists the keys)")
            scope = dict(values)
            run_config_file(arg, path, scope)
            for key, value in scope.items():
                if key.startswith("_") or isinstance(value, types.ModuleType) or callable(value):
                    continue  # imports and helpers a config file may use
                value = _typed(key, value, arg, fields)
                if value != values[key]:  # what the file changed (a file cannot be seen assigning a value unchanged)
                    values[key] = value
                    given.add(key)
            continue
        key, eq, text = arg[2:].partition("=")
        _known(key, arg, fields)
        want = fields[key].type
        if not eq:
            if want is not bool:
                fail(f"{arg}: write --{key}=value")
            text = "True"  # a bare --flag sets a bool key
        if _item_type(want):
            value = text  # a list key: a,b,c (parsed by _typed)
        else:
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                value = text
            if want is str and not isinstance(value, str):
                value = text  # strings need no quotes: --gate=g1 as well as --gate='g1'
            elif want is not str and value is text:
                fail(f"{arg}: {key} must be {_type_name(want)}, got {text!r}")
        values[key] = _typed(key, value, arg, fields)
        given.add(key)
    try:
        return keys(**values), given
    except ValueError as e:  # a check of the dataclass itself, e.g. GPTConfig's on the model's flags
        fail(e)


def _item_type(want):
    """The item type of a list key's type tuple[X, ...], else None."""
    args = typing.get_args(want)
    return args[0] if typing.get_origin(want) is tuple and len(args) == 2 and args[1] is Ellipsis else None


def _type_name(want):
    item = _item_type(want)
    return f"list of {item.__name__}" if item else want.__name__


def _known(key, where, fields):
    if key not in fields:
        close = difflib.get_close_matches(key, fields, n=1)
        fail(f"{where}: unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "") +
             "; --help lists the keys")


def _items(value, item):
    """A list key's value as a tuple of `item`s: from "a,b,c" (the command line, or a config file), a list or tuple
    (a config file) or a single value. Each must be an item as it is (an int for int, a number for float): 1.5 is
    no int and True no number. Raises ValueError (SyntaxError for text that is no literal) otherwise."""
    if isinstance(value, str):
        value = [text.strip() for text in value.split(",") if text.strip()]
    elif not isinstance(value, (list, tuple)):
        value = [value]
    items = []
    for v in value:
        if isinstance(v, str) and item is not str:
            v = ast.literal_eval(v)
        number = item in (int, float) and type(v) in ((int,) if item is int else (int, float))
        if not (number or item is str and isinstance(v, str)):
            raise ValueError(f"{v!r} is no {item.__name__}")
        items.append(item(v))
    return tuple(items)


def _typed(key, value, where, fields):
    _known(key, where, fields)
    want = fields[key].type
    item = _item_type(want)
    if item is not None:
        try:
            return _items(value, item)
        except (ValueError, SyntaxError):
            fail(f"{where}: {key} must be a {_type_name(want)}, written a,b,c; got {value!r}")
    if want is float and type(value) is int:
        value = float(value)
    if value is None and fields[key].default is None:  # n_kv_head=None, mlp_hidden=None: "the default rule"
        return value
    if type(value) is not want:
        fail(f"{where}: {key} must be {want.__name__}, got {value!r} ({type(value).__name__})")
    return value


def _source_lines(cls):
    """A dataclass's body as [("comment", text) or ("key", name, its line's comment)], in source order: what --help
    shows of it."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return [("key", f.name, "") for f in dataclasses.fields(cls) if f.name in cls.__annotations__]
    by_line = {}
    for tok in tokenize.generate_tokens(iter(source.splitlines(keepends=True)).__next__):
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            by_line.setdefault(tok.start[0], []).append(tok)
    out = []
    for number in sorted(by_line)[1:]:  # after the `class` line
        toks = by_line[number]
        if toks[0].type == tokenize.COMMENT:
            out.append(("comment", toks[0].string.lstrip("#").strip()))
        elif len(toks) >= 2 and toks[0].type == tokenize.NAME and toks[1].string == ":" and \
                toks[0].string in cls.__annotations__:
            out.append(("key", toks[0].string, " ".join(t.string.lstrip("#").strip() for t in toks
                                                      if t.type == tokenize.COMMENT)))
    return out


def usage(keys):
    """What --help prints: the script's docstring (its module's), then every key of `keys` with its default, type and
    comment, in the order and under the comments of its source. A base dataclass's keys (TrainConfig's from
    GPTConfig) follow the last of them the class itself declares."""
    fields = {f.name: f for f in dataclasses.fields(keys)}
    bases = [b for b in keys.__mro__[1:] if dataclasses.is_dataclass(b)]
    inherited = [entry for b in reversed(bases) for entry in _source_lines(b) if entry[0] == "key"]
    comment_of = {entry[1]: entry[2] for entry in inherited}
    lines = []

    def key_line(name, comment):
        f = fields[name]
        default = ",".join(map(str, f.default)) if _item_type(f.type) else repr(f.default)
        text = f"  --{name}={default}  ({_type_name(f.type)})" + (f"  {comment}" if comment else "")
        lines.extend(textwrap.wrap(text, 116, subsequent_indent="        ", break_on_hyphens=False))

    own = _source_lines(keys)
    own_keys = [entry[1] for entry in own if entry[0] == "key"]
    rest = [(name, comment) for _, name, comment in inherited if name not in own_keys]  # the base's, not redeclared
    redeclared = [name for name in own_keys if name in comment_of]
    for entry in own:
        if entry[0] == "comment":
            lines.append(f"  # {entry[1]}")
            continue
        key_line(entry[1], entry[2] or comment_of.get(entry[1], ""))
        if redeclared and entry[1] == redeclared[-1]:  # the base's other keys beside the ones the class redeclares
            for name, comment in rest:
                key_line(name, comment)
    if not redeclared:
        for name, comment in rest:
            key_line(name, comment)
    doc = (inspect.getmodule(keys).__doc__ or "").strip("\n")
    return "\n".join([doc, "", "Keys, with their defaults (a config file or --key=value sets one; a bool also --key):",
                       *lines])


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
    except (Exception, SystemExit) as e:  # NameError, ZeroDivisionError, sys.exit(), ... from the file's own code
        lines = [frame.lineno for frame in traceback.extract_tb(e.__traceback__) if frame.filename == path]
        where = f"{arg} line {lines[-1] if lines else '?'}"
        if isinstance(e, SystemExit):  # else the script would end with the file's exit status, and no word of why
            fail(f"config file {where} calls sys.exit({e.code!r}): a config file only sets keys (key = value lines); "
                 "remove the exit")
        fail(f"{where}: {type(e).__name__}: {e}")


# -----------------------------------------------------------------------------
# Device and precision

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


def free_memory(device):
    """Bytes free for a run or a measurement on device now: a GPU's own; the machine's otherwise (MPS shares it),
    counting the caches the system would give up; None where the system cannot tell."""
    if str(device).startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[0]
    try:
        import psutil
        return psutil.virtual_memory().available
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as f:  # Linux: MemAvailable counts the page cache it would give up
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # Windows, macOS: no such sysconf
        return None


def device_name(device):
    """What a result was measured on, in words: the GPU's name, or the CPU's."""
    return torch.cuda.get_device_name(device) if str(device).startswith("cuda") else \
        f"CPU ({platform.processor() or platform.machine()})"


def places_text(places):
    """Where results were measured, {"<device>, <date>": number of runs}, in words: the one place, or each with its
    runs (runs measured in an earlier session keep the place they were measured in)."""
    if len(places) == 1:
        return next(iter(places))
    return "; ".join(f"{p} ({n} run{'s' * (n > 1)})" for p, n in places.items())


def cpu_computes_bf16():
    """Whether this CPU multiplies bf16 matrices in hardware (AVX512-BF16, as on AMD Zen 4 and later, or Intel's
    AMX): there a bf16 matmul runs about twice as fast as an fp32 one; elsewhere bf16 is emulated, and slower."""
    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:  # a PyTorch without these checks: assume not
        return False


def autocast_for(device, dtype):
    """(autocast context, resolved dtype name). auto: bf16 where the GPU has it, fp16 on older GPUs; on a CPU, bf16
    where it computes bf16 in hardware (the output layer's matmuls, most of a small model's step, take about half
    the time); fp32 elsewhere."""
    device_type = device.split(":")[0]
    if dtype == "auto":
        if device_type == "cuda":
            dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
        else:
            dtype = "bfloat16" if device_type == "cpu" and cpu_computes_bf16() else "float32"
    if dtype not in ("float32", "bfloat16", "float16"):
        fail(f"dtype={dtype!r} is not valid; choose one of 'auto', 'float32', 'bfloat16', 'float16'")
    if dtype == "float32":
        return nullcontext(), dtype
    return torch.autocast(device_type=device_type, dtype=getattr(torch, dtype)), dtype


# torch.compile's modes (its `mode=`): 'reduce-overhead' replays the compiled forward and backward as CUDA graphs,
# so the CPU no longer launches each kernel; 'max-autotune' also benchmarks matmul and Triton configurations while
# compiling, and '-no-cudagraphs' does that without the graphs. train.py and bench.py take one as compile_mode.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

# Which kernel F.scaled_dot_product_attention (the 'torch' attention path) tries first. PyTorch's own order puts
# FlashAttention-2 first; on Hopper GPUs cuDNN's attention kernels are reported faster for training shapes. 'cudnn'
# and 'flash' put that kernel first and keep every other behind it, so inputs it cannot take fall back as before.
# It changes which kernel computes, not what. train.py and bench.py take one as sdpa_backend.
SDPA_BACKENDS = ("default", "cudnn", "flash")


def _sdpa_priority():
    """SDPA's kernels (SDPBackend) in the order it tries them now: PyTorch's own, or a preference's."""
    from torch.nn.attention import SDPBackend
    return [SDPBackend(i) for i in torch._C._get_sdp_priority_order()]  # what sdpa_kernel itself reads


def sdpa_order():
    """The names of SDPA's kernels in the order it tries them now (recorded with the benchmarks)."""
    return [backend.name for backend in _sdpa_priority()]


def sdpa_preference(name):
    """A context in which SDPA tries the kernel `name` (one of SDPA_BACKENDS) first, then every other in the order it
    had (PyTorch's own: FlashAttention, memory-efficient, math, cuDNN in PyTorch 2.13); 'default' changes nothing."""
    if name not in SDPA_BACKENDS:
        raise ValueError(f"sdpa_backend={name!r} is not valid; choose one of {', '.join(SDPA_BACKENDS)}")
    if name == "default":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    first = SDPBackend.CUDNN_ATTENTION if name == "cudnn" else SDPBackend.FLASH_ATTENTION
    try:
        return sdpa_kernel([first] + [b for b in _sdpa_priority() if b != first], set_priority=True)  # all enabled
    except (AttributeError, TypeError):  # an older PyTorch, whose sdpa_kernel cannot set an order
        raise RuntimeError(f"sdpa_backend={name!r} needs a PyTorch whose torch.nn.attention.sdpa_kernel takes "
                           "set_priority; upgrade PyTorch or use sdpa_backend='default'") from None


# -----------------------------------------------------------------------------
# Checkpoints

def save_checkpoint(checkpoint, path):
    """Atomic: a crash or kill while saving leaves the previous file whole (data.shards.atomic_write)."""
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


# -----------------------------------------------------------------------------
# The training step

def optimizer_step(optimizer, scaler, params, grad_clip, loss):
    """Finish one optimizer step whose gradients are in place: unscale (fp16), clip, step, zero the gradients.
    A step whose loss or gradient norm is not finite is skipped, and the skip is decided on the device: fused
    AdamW (CUDA, CPU) takes a `found_inf` flag, the protocol torch's GradScaler uses, and leaves the weights, its
    moments and its step count as they were. So this never waits for the GPU, and the host can queue the next
    step while this one runs. Returns (loss, gradient norm, taken) as one float tensor on the device, for
    train.py's check_health to read later. train.py trains with this step and bench.py --train times it."""
    scaler.unscale_(optimizer)  # fp16 only: the gradients as they really are, before clipping
    grad_norm = torch.nn.utils.clip_grad_norm_(params, grad_clip if grad_clip > 0 else math.inf)
    taken = torch.isfinite(loss) & torch.isfinite(grad_norm)
    if all(group.get("fused") for group in optimizer.param_groups):
        # read by AdamW.step as GradScaler sets it (torch/amp/grad_scaler.py, _maybe_opt_step): 1 = skip the step
        optimizer.found_inf = (~taken).float()
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf
    elif taken.item():  # the plain loop (MPS) can only be told from the host: one synchronisation a step
        optimizer.step()
    if scaler.is_enabled():
        scaler.update()  # lowers the loss scale after an fp16 overflow (the check unscale_ made), raises it after a run
    optimizer.zero_grad(set_to_none=True)
    return torch.stack([loss.float(), grad_norm.float(), taken.float()])


def keep_freed_memory(device_type="cpu"):
    """On a CPU under Linux, make glibc's malloc keep the memory a training step frees, for the next step to reuse.
    By default every block above a few MB is a fresh mapping, handed back to the system when freed, and the freed
    top of the heap is handed back too; a step that frees 1-3 GB then page-faults all of it in again on the next
    step. On a 2-core machine that was 30-40% of a step's time, spent in the kernel (bench.py --step measures it).
    Set once per process, before the first step: every block up to 1 GiB from the heap (M_MMAP_THRESHOLD), and the
    heap never trimmed (M_TRIM_THRESHOLD -1). Returns whether it was set: not off a CPU, off Linux, or where the C
    library is not glibc (musl has no mallopt)."""
    if device_type != "cpu" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        # mallopt returns 1 when it took the value; both take an int, and -1 for the threshold means "never"
        return libc.mallopt(-3, 1 << 30) == 1 and libc.mallopt(-1, -1) == 1  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        return False


# -----------------------------------------------------------------------------
# Runs and logs

def dataset_dir(dataset, data_dir=""):
    """Where a dataset's shards are: data_dir if given, else data/<dataset> in this repo."""
    return data_dir or os.path.join(REPO, "data", dataset)


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


def markdown_table(header, rows):
    """A markdown table's lines: the header, the rule, one line a row (None written as –)."""
    return ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"] + \
        ["| " + " | ".join("–" if c is None else str(c) for c in row) + " |" for row in rows]


def pyplot():
    """matplotlib.pyplot drawing into files (the Agg backend), or None, after a note, where matplotlib is missing
    (pip install -r requirements.txt brings it): the scripts then write their numbers and skip the plots."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is not installed, so no plots (pip install matplotlib); the numbers are written")
        return None
    return plt


def save_figure(fig, path, dpi=120):
    """Write a figure to path, atomically (data.shards.atomic_write), and free it; returns the file's name."""
    import matplotlib.pyplot as plt
    kind = os.path.splitext(path)[1][1:] or "png"  # a file object has no name to tell the format by
    try:
        atomic_write(path, lambda f: fig.savefig(f, dpi=dpi, format=kind))
    finally:
        plt.close(fig)
    return os.path.basename(path)


def finite_or_none(x):
    """JSON has no NaN or infinity: write them as null."""
    return x if x is None or math.isfinite(x) else None


# -----------------------------------------------------------------------------
# Speed: model FLOPs utilisation

# Dense bf16 tensor-core peak FLOP/s by device name (no sparsity). Matched by substring, first hit wins.
PEAK_FLOPS = [
    ("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("H800", 989e12), ("GH200", 989e12),
    ("B200", 2250e12), ("A100", 312e12), ("A800", 312e12), ("L40S", 362e12), ("L4", 121e12),
    ("A10G", 70e12), ("A10", 125e12), ("RTX 4090", 165e12), ("RTX 3090", 71e12), ("V100", 125e12), ("T4", 65e12),
]


def peak_flops(device=None):
    """Peak bf16 FLOP/s of a CUDA device, or None if unknown (CPU, MPS, an unlisted GPU)."""
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    return next((flops for key, flops in PEAK_FLOPS if key in name), None)


def flops_per_token(model, seq_len=None):
    """Training FLOPs per token (forward + backward = 3x forward): 6 per weight of the matmuls, plus
    causal attention, which scores T/2 keys per query on average: 3 * 2 * 2 * L * H * D * T/2."""
    cfg, T = model.config, seq_len or model.config.block_size
    # num_params() counts the tied embedding once, which is the lm_head matmul's share
    return 6 * model.num_params() + 6 * cfg.n_layer * cfg.n_head * cfg.head_dim * T


def estimate_mfu(model, fwdbwd_per_iter, dt, seq_len=None, device=None, peak=None):
    """Model FLOPs utilisation: achieved FLOP/s over the device's peak bf16 rate. fwdbwd_per_iter
    sequences of seq_len tokens took dt seconds. Returns None when the peak is unknown (e.g. CPU)."""
    peak = peak or peak_flops(device)
    if peak is None:
        return None
    T = seq_len or model.config.block_size
    return flops_per_token(model, T) * T * fwdbwd_per_iter / dt / peak

"""
The set-up check: run it first, right after installing, from the repository's root.

    python -m lab.setup_check [--skip_train=True] [--smoke_iters=100] [--smoke_timeout=300]

It checks, in order, what the tutorial and the main job need, one line each (ok, FAIL, note, or skip when a check it
needs failed): the Python version; torch (2.6 or newer) and its build (CPU or CUDA) and whether a GPU is present;
numpy, tiktoken, matplotlib, and triton (optional on a CPU; 3.3 or newer for the fused kernel); the GPT-2 BPE, read
offline from data/gpt2_bpe/; a forward and backward of a tiny G1-gated model.GPT in the precision train.py picks
(dtype=auto), finite and close to fp32; and a smoke run of the sink lab through train.py itself (config/sink_lab.py,
a few seconds, in a temporary folder that is deleted afterwards: nothing is left in the repository), whose step time
gives an estimate of how long the full sink lab and the main job take here (said to be slower than idle when other
processes kept half a core or more busy while it timed, read from Linux's /proc/stat). It ends with "ready" and the
next command, or a numbered list of what to fix; the exit status is 0 when ready, 1 otherwise.
"""

import importlib
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # the project's modules (cli, model, train, data), also when run as python lab/setup_check.py
PIP = "pip install -r requirements.txt"
TORCH_PIP = ("pip install torch --index-url https://download.pytorch.org/whl/cpu (CPU only; "
             "with an NVIDIA GPU: pip install torch)")
# The oldest torch the project runs on (requirements.txt says the same): torch 2.5's SDPA cannot be told which kernel to
# try first (train.py's sdpa_backend, lab.bench's records) and its torch.compile cannot compile the chunked loss.
TORCH_MIN = (2, 6)
TRIAL = ("python train.py config/sink_lab.py --max_iters=50 --overwrite=True --out_dir=out/setup-check "
         "(the smoke run, to see all it says)")


@dataclass
class Keys:
    skip_train: bool = False  # skip the sink-lab smoke run and the time estimates: a quick check
    smoke_iters: int = 100  # training steps of the smoke run (about 10 s on a laptop CPU); at least 20
    smoke_timeout: int = 300  # seconds the smoke run may take before it is stopped and reported as failing


class Problem(Exception):
    """A check that failed: what is wrong (one line) and the command that fixes it."""
    def __init__(self, detail, fix):
        super().__init__(detail)
        self.fix = fix


CHECKS = []  # (name, function, the checks it needs, the fix when it fails unexpectedly), in the order they run


def check(name, needs=(), fix=None):
    def register(function):
        CHECKS.append((name, function, needs, fix))
        return function
    return register


def version_of(text):
    """(major, minor) of a version string such as '2.13.0+cpu'."""
    return tuple(int(x) for x in re.findall(r"\d+", text)[:2])


@check("python")
def python_version(found, keys):
    version = platform.python_version()
    if sys.version_info < (3, 10):
        raise Problem(f"Python {version}, and the project needs 3.10 or newer", "install Python 3.10 or newer, "
                      "then make the venv with it: python3.11 -m venv .venv (README: Set up)")
    return "ok", f"{version} ({sys.executable})"


@check("torch", fix=TORCH_PIP)
def torch_build(found, keys):
    try:
        import torch
    except ImportError as e:
        raise Problem(f"torch is not installed ({e})", TORCH_PIP)
    if version_of(torch.__version__) < TORCH_MIN:  # the same build, newer: a CUDA one stays CUDA, a CPU one CPU
        raise Problem(f"{torch.__version__}: the project needs torch {'.'.join(map(str, TORCH_MIN))} or newer",
                      "pip install -U torch" if torch.version.cuda else
                      "pip install -U torch --index-url https://download.pytorch.org/whl/cpu")
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    build = f"a CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU build"
    if not gpu and not torch.version.cuda and shutil.which("nvidia-smi"):
        return "note", (f"{torch.__version__}, a CPU build, but this machine has an NVIDIA GPU (nvidia-smi): "
                        "pip install torch (the CUDA build) to use it")
    where = f"GPU: {gpu}" if gpu else "Apple GPU (mps)" if torch.backends.mps.is_available() else \
        "no GPU: everything runs on the CPU, as the tutorial expects"
    return "ok", f"{torch.__version__}, {build}; {where}"


@check("packages", fix=PIP)
def packages(found, keys):
    versions, missing = [], []
    for name in ("numpy", "tiktoken", "matplotlib"):
        try:
            versions.append(f"{name} {importlib.import_module(name).__version__}")
        except Exception as e:  # ImportError, or a broken install raising something else
            missing.append(f"{name} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
    if missing:
        raise Problem(f"cannot import {', '.join(missing)}", PIP)
    return "ok", ", ".join(versions)


@check("triton", needs=("torch",))
def triton(found, keys):
    import torch
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")  # as kernels.py expects on a CPU, before triton is imported
    try:
        import triton
    except ImportError:
        return "note", ("not installed: optional here; without it only the fused kernel is lost (TUTORIAL §7, "
                        "exercise 09, its tests); pip install triton (Linux)")
    import kernels
    too_old = kernels.triton_unavailable()  # the version it needs and the upgrade for this build, said where kernels.py
    if too_old:                             # refuses backend='triton'
        return "note", f"{too_old}: only the fused kernel is lost (TUTORIAL §7, lab.bench's timings of it, its tests)"
    how = "on the GPU" if torch.cuda.is_available() else "in Triton's interpreter on the CPU (slow: small shapes)"
    return "ok", f"{triton.__version__}: the fused kernel runs {how}"


@check("tokenizer", needs=("torch", "packages"), fix="git checkout -- data/gpt2_bpe")
def tokenizer(found, keys):
    from data.shards import get_tokenizer
    enc, text = get_tokenizer("gpt2"), "Hello, gated attention!"
    ids = enc.encode_ordinary(text)
    if enc.decode(ids) != text:
        raise Problem(f"the GPT-2 BPE does not decode {text!r} back", "git checkout -- data/gpt2_bpe")
    return "ok", f"GPT-2 BPE from data/gpt2_bpe/ (offline): {text!r} -> {len(ids)} tokens -> the same text"


@check("compute", needs=("torch",), fix="pip install --upgrade torch")
def compute(found, keys):
    import copy
    import torch
    from cli import autocast_for, cpu_computes_bf16, pick_device
    from model import GPT, GPTConfig
    device = pick_device("auto")
    ctx, dtype = autocast_for(device, "auto")
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=32, vocab_size=65, n_layer=2, n_head=2, n_embd=64, gate="g1")).to(device)
    x, y = (torch.randint(65, (4, 32), device=device) for _ in range(2))

    def loss_and_grads(m, context):
        with context:
            loss = m(x, y)[1]
        loss.backward()
        return loss.item(), torch.cat([p.grad.float().flatten() for p in m.parameters() if p.grad is not None])

    ref_loss, ref_grad = loss_and_grads(copy.deepcopy(model), autocast_for(device, "float32")[0])
    loss, grad = loss_and_grads(model, ctx)
    if not (math.isfinite(loss) and torch.isfinite(grad).all()):
        raise Problem(f"a tiny model's loss or gradients are not finite in {dtype}", "pip install --upgrade torch "
                      "(or train with --dtype=float32)")
    cosine = torch.nn.functional.cosine_similarity(grad, ref_grad, dim=0).item()
    if abs(loss - ref_loss) > 0.02 * abs(ref_loss) or cosine < 0.99:
        raise Problem(f"{dtype} disagrees with fp32 (loss {loss:.4f} vs {ref_loss:.4f}, gradient cosine "
                      f"{cosine:.4f})", "train with --dtype=float32, and pip install --upgrade torch")
    found["device"] = device
    if device == "cpu":
        why = ("CPU with bf16 in hardware" if cpu_computes_bf16() else
               "CPU without bf16 in hardware (there bf16 is emulated, and slower)")
    else:
        why = device
    agree = "" if dtype == "float32" else f" (fp32 {ref_loss:.4f})"
    return "ok", f"{why}: training uses {dtype}; a tiny G1 model's loss {loss:.4f}{agree}, grads finite"


@check("sink lab", needs=("torch", "packages", "compute"), fix=TRIAL)
def sink_lab(found, keys):
    from cli import dataset_dir
    from data.shards import find_shards
    n, tmp = keys.smoke_iters, tempfile.mkdtemp(prefix="setup-check-")
    args = ["config/sink_lab.py", f"--max_iters={n}", f"--lr_decay_iters={n}", f"--warmup_iters={n // 10}",
            f"--eval_interval={n}", f"--log_interval={n}", f"--out_dir={os.path.join(tmp, 'run')}"]
    prepared = find_shards(dataset_dir("bigram_backcopy"), "train")
    if not prepared:  # generated on first use: here in the temporary folder, so data/ stays as it was
        args.append(f"--data_dir={os.path.join(tmp, 'bigram_backcopy')}")  # named so: train.py prepares it there
    try:
        start, before = time.perf_counter(), cpu_seconds()
        try:
            done = subprocess.run([sys.executable, "train.py", *args], cwd=REPO, capture_output=True, text=True,
                                  timeout=keys.smoke_timeout)
        except subprocess.TimeoutExpired:
            raise Problem(f"{n} steps took more than {keys.smoke_timeout} s", TRIAL) from None
        wall = time.perf_counter() - start
        found["others"] = others_cores(before, wall)  # other work beside it, for the timings' note
        lines = (done.stdout + done.stderr).strip().splitlines()
        if done.returncode:
            raise Problem(f"train.py stopped (exit {done.returncode}): {lines[-1] if lines else 'no output'}", TRIAL)
        with open(os.path.join(tmp, "run", "log.jsonl")) as f:
            records = [json.loads(line) for line in f]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    first, last = records[0], records[-1]
    if last["iter"] != n or first["val_loss"] is None or last["val_loss"] is None or last["nonfinite_steps"]:
        raise Problem(f"the run did not end at step {n} with a finite loss", TRIAL)
    if last["val_loss"] > first["val_loss"] - 0.3:
        raise Problem(f"the loss did not fall: val loss {first['val_loss']:.2f} -> {last['val_loss']:.2f}", TRIAL)
    step = last["tokens"] / last["iter"] / last["tokens_per_s"]
    found.update(step=step, eval_s=first["time_s"], startup=wall - last["time_s"])
    data = "" if prepared else " (task made in a temp folder)"
    return "ok", (f"train.py config/sink_lab.py{data}: {n} steps in {wall:.0f} s, {step * 1000:.0f} ms a step; "
                  f"val loss {first['val_loss']:.2f} -> {last['val_loss']:.2f}, finite")


@check("timings", needs=("sink lab",))
def timings(found, keys):
    import torch
    from cli import autocast_for, configure, keep_freed_memory
    from model import GPT, GPTConfig
    from train import MODEL_KEYS, TrainConfig, optimizer_step
    lab = configure(TrainConfig, ["config/sink_lab.py"])[0]  # its steps as the smoke run's; its evals as its first
    evals = lab.max_iters // lab.eval_interval + 1
    lab_s = found["startup"] + lab.max_iters * found["step"] + evals * found["eval_s"]
    # The main job's model is 100 times the lab's, whose small steps are mostly overhead: time two of its steps; an
    # eval batch is a forward pass, about a third of a step
    c, device = configure(TrainConfig, [])[0], found["device"]
    model = GPT(GPTConfig(**{key: getattr(c, key) for key in MODEL_KEYS})).to(device)
    optimizer = model.configure_optimizers(c.weight_decay, c.learning_rate, (c.beta1, c.beta2))
    scaler = torch.amp.GradScaler(device.split(":")[0], enabled=False)
    x, y = (torch.randint(c.vocab_size, (c.batch_size, c.block_size), device=device) for _ in range(2))
    keep_freed_memory(device.split(":")[0])  # as train.py runs
    seconds, before = [], cpu_seconds()
    for _ in range(3):  # the first allocates: not counted
        start = time.perf_counter()
        with autocast_for(device, c.dtype)[0]:
            loss = model(x, y)[1]
        loss.backward()
        optimizer_step(optimizer, scaler, model.parameters(), c.grad_clip, loss.detach())[0].item()
        seconds.append(time.perf_counter() - start)
    step = min(seconds[1:])
    main_s = found["startup"] + c.max_iters * step + (c.max_iters // c.eval_interval + 1) * c.eval_iters * step / 3
    found["main_s"] = main_s
    others = [x for x in (found.get("others"), others_cores(before, sum(seconds))) if x is not None]
    others = max(others) if others else None  # the busier of the two timings (the smoke run's, these steps' if 1 s)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # its own
    return "note", (f"estimated from the steps timed here: sink lab ~{minutes(lab_s)} a model ({lab.max_iters} steps), "
                    f"main job ~{minutes(main_s)} ({c.max_iters} steps){busy_note(load, cores, others)}")


def cpu_seconds():
    """(the busy seconds of the CPUs this process may run on, the CPU seconds of this process and its ended
    children) so far, from Linux's /proc/stat (its per-CPU lines: a container's or a batch job's CPUs, not the
    host's); None elsewhere."""
    try:
        import resource
        mine, busy = {f"cpu{i}" for i in os.sched_getaffinity(0)}, 0
        with open("/proc/stat", encoding="utf-8") as f:
            for line in f:
                name, *fields = line.split()
                if name in mine:
                    ticks = [int(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal
                    busy += sum(ticks) - ticks[3] - ticks[4]
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        own = time.process_time() + children.ru_utime + children.ru_stime
        return busy / os.sysconf("SC_CLK_TCK"), own
    except (ImportError, OSError, ValueError, IndexError, AttributeError):
        return None


def others_cores(before, wall):
    """How many cores' worth of work other processes did on this process's CPUs in the `wall` seconds since
    `before` (cpu_seconds()); None where it cannot be read, or over less than a second (the counters tick in
    hundredths of a second). Measured while the steps were timed, as a load average (the last minute's) is not."""
    after = cpu_seconds() if before is not None and wall >= 1 else None
    if after is None:
        return None
    return max(0.0, (after[0] - before[0]) - (after[1] - before[1])) / wall


def busy_note(load, cores, others=None, env=os.environ):
    """What the timings note adds when other work shared the CPUs as the steps were timed (others: cores' worth, half
    a core or more is busy), or, where that cannot be measured, on a machine whose load is above its cores. PyTorch
    runs a thread per core in every process, so trainings side by side (a class on one server) wait on each other's
    threads; one thread each is several times faster (tests/time_sharing.py's pages, docs/timings.md)."""
    if others is not None and others < 0.5 or others is None and load <= cores:
        return ""
    threads = "" if "OMP_NUM_THREADS" in env else (
        "; beside other trainings, OMP_NUM_THREADS=1 before each command makes each several times faster "
        "(docs/timings.md, 'A CPU shared by several trainings')")
    what = f"load {load:.1f} on {cores} cores" if others is None else \
        f"other work kept {others:.1f} of {cores} cores busy as it timed"
    return f"; busy now ({what}): less when idle{threads}"


def minutes(seconds):
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def run(keys):
    """Every check in order, one line each; returns the fixes of those that failed."""
    found, status, fixes = {}, {}, []
    print(f"set-up check of {REPO} ({platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores)")
    for name, function, needs, fix in CHECKS:
        blocked = [need for need in needs if status.get(need) not in ("ok", "note")]
        if name in ("sink lab", "timings") and keys.skip_train:
            status[name], word, detail = "skip", "skip", "--skip_train=True"
        elif blocked:
            status[name], word, detail = "skip", "skip", f"needs {', '.join(blocked)}, which did not pass"
        else:
            try:
                word, detail = function(found, keys)
            except Problem as e:
                word, detail = "FAIL", str(e)
                fixes.append((f"{name}: {detail}", e.fix))
            except (Exception, SystemExit) as e:  # never a traceback: its one line, and the usual fix
                text = str(e).strip().splitlines()
                word, detail = "FAIL", f"{type(e).__name__}: {text[0] if text else ''}"
                fixes.append((f"{name}: {detail}", fix or "pip install -r requirements.txt"))
            status[name] = word
        print(f"  {word:<5} {name:<10} {detail}", flush=True)
    return fixes, found


def main(argv):
    try:
        from cli import configure
        keys = configure(Keys, argv)[0]
    except ImportError:  # cli needs torch: the torch check says what to do, with the default keys
        if "--help" in argv or "-h" in argv:
            raise SystemExit(print(__doc__))
        keys = Keys(skip_train="--skip_train=True" in argv or "--skip_train" in argv)
    if keys.smoke_iters < 20:
        raise SystemExit(f"error: --smoke_iters={keys.smoke_iters}: at least 20 steps, for the loss to fall")
    if keys.smoke_timeout < 1:  # 0 would report a working machine as broken
        raise SystemExit(f"error: --smoke_timeout={keys.smoke_timeout}: seconds the smoke run may take, at least 1")
    fixes, found = run(keys)
    if not fixes:
        time_it = f", ~{minutes(found['main_s'])} here" if "main_s" in found else ""
        print(f"ready: this machine runs the project. Next: python train.py (the main job{time_it}), then "
              "TUTORIAL.md from §1")
        return 0
    print("not ready: fix these, then run python -m lab.setup_check again")
    seen = []
    for problem, fix in fixes:
        if fix not in seen:  # one pip command for every missing package
            seen.append(fix)
            print(f"  {len(seen)}. {problem}\n     fix: {fix}")
    return 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # the smoke run's temporary folder is deleted on the way out
        sys.exit("interrupted")

"""
Train a gated-attention GPT:

    python train.py [config/file.py ...] [--key=value ...]
    torchrun --standalone --nproc_per_node=8 train.py config/train_fineweb.py     # several GPUs

With no arguments it trains a small G1-gated model (4 layers, 128 wide) on the Python standard library's own source
for two to six minutes on a 2-core CPU (docs/timings.md), preparing data/pystdlib on first use, and prints
what it measured; config/ holds the GPU runs. `python train.py --help` lists every key (TrainConfig:
model.GPTConfig's flags and the run's). It writes out_dir/log.jsonl (a record per eval), ckpt.pt (the state at the
last eval) and best.pt (the lowest validation loss; a worse or diverged state never replaces it; a diverged run exits
with status 3, cli.DIVERGED_EXIT); --init_from=resume continues from ckpt.pt as the run would have. Every guard on
the folder (one train.py at a time, nothing changed before the first eval, no run overwritten without
--overwrite=True, the Ctrl-C line, a step too big for memory refused) is runfolder.py's.

Read top to bottom: the keys -> main (config, then the Trainer: __init__ builds the model, data and optimizer, run is
the loop) -> build_model, build_optimizer -> the loop's steps (train_step, check_health, evaluate, log_and_save,
save) -> the schedule and the optimizer step -> the checks on the keys and the data. The loop waits for the GPU only
after the first step, at log steps and before evals: each step is queued; check_health reads their losses then.
"""

import importlib.util
import math
import random
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, fields

# cli before torch: its excepthook (cli.one_line_interrupt) makes Ctrl-C while torch loads one line, not a traceback
from cli import (COMPILE_MODES, DDP_BACKENDS, DTYPES, SDPA_BACKENDS, autocast_for, check_choice, check_device_name,
                 configure, dataset_dir, device_name, fail, free_memory, init_processes, keep_freed_memory, on_rank_0,
                 partner_lost, pick_device, processes, run_main, sdpa_preference, terminate_as_interrupt)
import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from data import check_training_data, prepare_if_missing
from data.shards import TrainLoader, dataset_fingerprint, read_meta, val_batches
from model import GPT, RUNTIME_FLAGS, GPTConfig
from probe import Probe, count_spike, describe, estimate_mfu
from runfolder import (RunFolder, check_fits, code_version, finite_or_none, memory_advice, model_from_checkpoint,
                       params_at_least, restore_rng, rng_state)


@dataclass
class TrainConfig(GPTConfig):
    """Every key of train.py: the model's (GPTConfig's, checked as it checks them) and the run's. The defaults are
    the laptop-CPU run."""
    # I/O
    out_dir: str = "out"  # the run's folder: log.jsonl, ckpt.pt, best.pt
    eval_interval: int = 50  # evaluate (and save) every this many iterations, and at the end
    log_interval: int = 10  # print the training loss and speed every this many iterations
    eval_iters: int = 20  # validation batches per eval: the same windows every time (data.shards.val_batches)
    eval_only: bool = False  # evaluate a trained run once (with init_from='resume') and exit; writes nothing
    always_save_checkpoint: bool = True  # ckpt.pt gets the latest state at every eval; else only when val loss improves
    init_from: str = "scratch"  # 'scratch' or 'resume' (from out_dir/ckpt.pt, with that run's settings)
    overwrite: bool = False  # let a new run (init_from='scratch') replace the run already in out_dir
    wandb_log: bool = False  # pip install wandb
    wandb_project: str = "gated-attention"  # with wandb_log
    wandb_run_name: str = "run"  # with wandb_log
    # data
    dataset: str = "pystdlib"  # a folder under data/ with <name>_train_*.bin and <name>_val_*.bin shards
    data_dir: str = ""  # where its shards are, if not data/<dataset>
    # BOS-anchored windows: <|endoftext|> at position 0, then block_size - 1 tokens of text, as the papers' models
    # always see a BOS token at 0. The sink forms on it: without a fixed token there, a small model grows almost none.
    bos: bool = True  # start every window with the dataset's <|endoftext|> (above); False: windows start anywhere
    gradient_accumulation_steps: int = 1  # summed over all processes, as in nanoGPT
    batch_size: int = 8  # sequences per micro-step per process
    # the model: every key of model.GPTConfig, at its default but these sizes, made for a laptop CPU
    block_size: int = 128  # the context length in tokens
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # query heads
    n_embd: int = 128  # the residual stream's width
    # kernels.chunked_loss makes the loss's gradient in the logits' own memory: one copy on a CPU, not the plain
    # path's several, and a heap that does not fragment under cli.keep_freed_memory. The GPU configs set 0 (all at once)
    loss_chunk: int = 4096  # the loss over this many rows of logits at a time (0: all at once)
    # AdamW with linear warmup and cosine decay to min_lr
    learning_rate: float = 2e-3  # the peak, after warmup
    max_iters: int = 300  # optimizer steps in all
    weight_decay: float = 0.1  # on matrices and embeddings, not on gains, biases or other 1-D parameters
    beta1: float = 0.9  # AdamW's
    beta2: float = 0.95  # AdamW's
    grad_clip: float = 1.0  # clip the gradient norm to this; 0 = no clipping
    decay_lr: bool = True  # False: learning_rate throughout
    warmup_iters: int = 30  # steps of linear warmup
    lr_decay_iters: int = 300  # usually = max_iters
    min_lr: float = 2e-4  # usually learning_rate / 10
    # loss health
    max_nonfinite: int = 10  # this many non-finite steps in a row stop the run (seen at the next log or eval step)
    # a loss spike: a step's loss more than spike_threshold standard deviations (of the recent steps' losses)
    # above their running mean, and at least probe.SPIKE_MIN_NATS above it; see probe.count_spike
    spike_threshold: float = 6.0  # standard deviations above the running mean that make a loss spike (above)
    # system
    backend: str = "auto"  # DDP: 'nccl' on CUDA, 'gloo' otherwise; or one of cli.DDP_BACKENDS
    device: str = "auto"  # 'cuda', 'cuda:1', 'mps', 'cpu'; auto: the first of cuda, mps, cpu that is available
    dtype: str = "auto"  # 'float32', 'bfloat16', 'float16'; auto: bf16 where the GPU or CPU computes it, else fp16/fp32
    compile: bool = False  # torch.compile the model (GPU runs: faster after a minute of compiling)
    compile_mode: str = "default"  # with compile=True, torch.compile's mode: one of cli.COMPILE_MODES
    sdpa_backend: str = "default"  # the kernel PyTorch's attention tries first: one of cli.SDPA_BACKENDS
    seed: int = 1337  # the weights, the data order and dropout (each process adds its rank for dropout only)


MODEL_KEYS = [f.name for f in fields(GPTConfig)]  # the keys TrainConfig takes from GPTConfig
# A run has exploded, and stops, when its val loss exceeds DIVERGED_FACTOR times its first (iter 0's: about
# ln(vocab_size), a uniform guess), far worse than guessing: no merely noisy run gets there (lr=100 reaches thousands).
DIVERGED_FACTOR = 2.0


def main(argv=None):
    # config: the command line; a resumed run's own settings, changed only by what this command sets
    argv = sys.argv[1:] if argv is None else argv
    c, given = configure(TrainConfig, argv)
    ddp, rank, local_rank, world_size = processes()
    with RunFolder(c.out_dir, writer=rank == 0 and not c.eval_only) as folder, terminate_as_interrupt(not ddp):
        trainer = None  # RunFolder claims an existing out_dir; SIGTERM raises KeyboardInterrupt, except under torchrun
        try:  # Ctrl-C or SIGTERM at any moment, reading the checkpoint included, ends with runfolder's one line
            checkpoint, notes = None, []
            if c.init_from == "resume":
                checkpoint = folder.checkpoint_to_resume()
                c, given, notes = folder.resume_settings(TrainConfig, argv, checkpoint)
            check_settings(c)
            folder.check_new_run(c)
            device = pick_device(c.device, local_rank if ddp else None, c.attn_backend)  # under torchrun: one a GPU
            device_type = device.split(":")[0]
            keep_freed_memory(device_type)  # a CPU run reuses the memory each step frees (cli.keep_freed_memory)
            if ddp:
                if device_type == "cuda":
                    torch.cuda.set_device(device)
                init_processes(c.backend if c.backend != "auto" else "nccl" if device_type == "cuda" else "gloo",
                               rank, world_size)
            try:
                for note in notes if rank == 0 else []:
                    print(note)
                with sdpa_preference(c.sdpa_backend):  # around compiling too: the compiled graph keeps the kernel
                    trainer = Trainer(c, rank, world_size, device, ddp, folder, checkpoint)  # model, data, optimizer
                    folder.claim_new(c)  # a new out_dir, made by the Trainer (check_writable), is claimed now
                    trainer.run()  # the loop
            finally:
                if ddp:
                    dist.destroy_process_group()
        except KeyboardInterrupt as e:
            folder.interrupted(c, given, world_size, trainer and trainer.iter_num, rank, e)
        except RuntimeError as e:  # a collective without the process that stopped (and said why): one line here too
            partner_lost(e, rank, ddp)


# -----------------------------------------------------------------------------
# The run

class Trainer:
    """One training run as named steps: build (data, model, optimizer) -> run, the loop, which calls train_step
    and check_health, and every eval_interval iterations evaluate -> log_and_save -> save."""

    def __init__(self, c, rank, world_size, device, ddp, folder, checkpoint=None):
        self.c, self.rank, self.world_size, self.device, self.ddp = c, rank, world_size, device, ddp
        self.folder, self.ckpt_path = folder, folder.ckpt_path
        self.master = rank == 0  # the one process that prints, logs and saves
        self.device_type = device.split(":")[0]
        if c.gradient_accumulation_steps % world_size and not c.eval_only:  # eval_only: no step to share out
            fail(f"gradient_accumulation_steps={c.gradient_accumulation_steps} must be a multiple of the "
                 f"{world_size} processes (it counts micro-steps summed over all of them)")
        self.accum = max(1, c.gradient_accumulation_steps // world_size)
        self.ctx, self.dtype = autocast_for(device, c.dtype)
        if self.dtype == "float16" and self.device_type != "cuda":  # fp16's loss scaling runs on CUDA only here
            fail(f"dtype=float16 trains on a CUDA GPU only; on {self.device_type} use --dtype=bfloat16 or float32")
        torch.manual_seed(c.seed + rank)  # ranks differ in dropout; the weights are rank 0's (DDP copies them)
        np.random.seed(c.seed + rank)
        random.seed(c.seed + rank)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        # the model, first: a step that cannot fit in memory is refused before the data is read
        self.build_model(checkpoint)
        # the data: a sampler of training windows, and the same validation batches at every eval
        self.tokens_per_iter = c.gradient_accumulation_steps * c.batch_size * self.gptconf.block_size
        self.data_dir, self.loader, self.val = prepare_data(c, self.gptconf.block_size, self.gptconf.vocab_size,
                                                            rank, world_size, device if ddp else None)
        self.meta = read_meta(self.data_dir) or {}  # its tokenizer (kept in checkpoints) and a task's "triggers"
        folder.check_data(c, checkpoint, self.data_dir, dataset_fingerprint(self.data_dir), self.meta, self.say)
        # the optimizer, and on resume every piece of state the run had
        self.build_optimizer(checkpoint)
        folder.start_iter = self.iter_num
        self.wandb = None  # the wandb module, where this process logs to it
        if not c.eval_only:  # eval_only reports and changes nothing in out_dir; rank 0 makes it (or says why not)
            on_rank_0(folder.check_writable, rank, device if ddp else None)
            if self.master and c.wandb_log:
                import wandb  # there: check_settings said so before any work
                wandb.init(project=c.wandb_project, name=c.wandb_run_name, config=asdict(c))
                self.wandb = wandb

    def say(self, *args, **kwargs):
        if self.master:
            print(*args, **kwargs)

    def run(self):
        """The loop: evaluate (and save) every eval_interval iterations and at the end, else one train_step."""
        c = self.c
        g = self.gptconf  # gate and norm, then each gate flag not at its default (gate_act=silu, match_params=True)
        flags = "".join(f", {k}={getattr(g, k)}" for k in MODEL_KEYS if k.startswith(("gate_", "sdpa_", "match_"))
                        and getattr(g, k) != getattr(GPTConfig, k))
        ends_early = c.decay_lr and c.max_iters < c.lr_decay_iters and self.iter_num == 0 and not c.eval_only
        self.say(f"model: {self.raw_model.num_params() / 1e6:.2f}M parameters, gate={g.gate}, norm={g.norm}{flags}; "
                 f"device {self.device}, {self.dtype}, {self.world_size} process(es)\n"
                 f"data: {self.data_dir}, {len(self.loader.windows):,} training windows"
                 f"{' (each starts with the BOS token <|endoftext|>)' if c.bos else ''}; "
                 f"{self.tokens_per_iter:,} tokens per iteration"
                 + (f"\nnote: the run ends at max_iters={c.max_iters}, before lr_decay_iters={c.lr_decay_iters} where "
                    "its learning rate reaches min_lr (usually lr_decay_iters = max_iters)" if ends_early else ""))
        self.start_iter, self.t_start, self.t_loop = self.iter_num, time.time(), time.perf_counter()
        record, since_log, since_eval, since_start = None, Span(), Span(), Span()
        eval_seconds = 0.0  # spent in evaluations and checkpoints
        t_read, iter_read = time.perf_counter(), self.iter_num  # the host's last wait for the device, and its iter
        if self.start_iter >= c.max_iters and not c.eval_only:
            self.say(f"nothing to do: the checkpoint is at iter {self.start_iter} and max_iters={c.max_iters}")
            if self.master:  # best.pt as best_state found it, since no evaluation follows to write it
                self.folder.settle_best()
        try:  # an allocator failure becomes memory_advice's one line; the loop itself is unchanged
            while True:
                lr = lr_at(self.iter_num, c)
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
                resumed_here = self.iter_num == self.start_iter > 0 and not c.eval_only  # its eval is in the log
                if self.eval_due() and not resumed_here or self.folder.val_changed and self.iter_num == self.start_iter:
                    t_eval = time.perf_counter()
                    record = self.log_and_save(lr, since_eval)
                    since_eval = Span()
                    t_read, iter_read = time.perf_counter(), self.iter_num  # evaluation time is not training time
                    eval_seconds += t_read - t_eval
                if c.eval_only or self.iter_num >= c.max_iters:
                    break
                self.train_step()
                self.iter_num += 1
                first_step = self.iter_num == self.start_iter + 1  # compiles and allocates: never timed
                log_step = self.iter_num % c.log_interval == 0
                if not (first_step or log_step or self.eval_due()):
                    continue  # the host goes straight on to queue the next step while the device works
                # wait for the queued steps, read their losses and time them (as lab/bench.py --train times a step)
                losses = self.check_health()
                t_now = time.perf_counter()
                seconds, steps = t_now - t_read, self.iter_num - iter_read
                t_read, iter_read = t_now, self.iter_num
                for span in (since_log, since_eval, since_start):
                    span.add(losses, seconds, steps, timed=not first_step)
                if log_step:
                    self.say_progress(lr, since_log.step_time() or seconds, since_log.mean_loss(), first_step)
                    since_log = Span()
        except RuntimeError as e:  # torch.OutOfMemoryError is one; so is the CPU allocator's failure
            if isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e) or "can't allocate memory" in str(e):
                self.out_of_memory(e)
            raise
        if record is not None and not c.eval_only:
            self.say_done(record, since_start.step_time(), eval_seconds)
        if self.wandb:
            self.wandb.finish()

    def say_progress(self, lr, dt, loss, first_step):
        """The log line: the loss of the steps since the last one, and a step's time (dt: the first step alone when
        log_interval=1)."""
        mfu = estimate_mfu(self.raw_model, self.c.batch_size * self.accum, dt, device=self.device)
        self.say(f"iter {self.iter_num}: loss {'non-finite' if loss is None else f'{loss:.4f}'}, lr {lr:.2e}, "
                 f"{dt * 1000:.0f} ms, {self.tokens_per_iter / dt:,.0f} tokens/s"
                 + (f", MFU {mfu * 100:.1f}%" if mfu else "")
                 + (" (the first step: compiling, allocating)" if first_step else ""), flush=True)

    def say_done(self, record, dt, eval_seconds):
        wall, rate, ran = time.perf_counter() - self.t_loop, self.wall_tokens_per_s(), self.iter_num - self.start_iter
        speed = (f", {rate:,.0f} tokens/s end to end (a training step alone: "
                 f"{self.tokens_per_iter / dt:,.0f} tokens/s; evaluations and checkpoints took {eval_seconds:.0f} s,"
                 f" {eval_seconds / wall:.0%} of the time)" if rate and dt else "")
        self.say(f"done: {self.iter_num} iterations{f' ({ran} by this command)' if ran < self.iter_num else ''} in "
                 f"{wall:.0f} s{speed}. {describe(record)}. The val loss is over {self.c.eval_iters} validation batch"
                 f"{'es' * (self.c.eval_iters != 1)}, the rest are layer averages on the first ({self.c.batch_size}"
                 f" windows; python -m lab.analyze measures them all). Log in {self.folder.log_path}")

    def eval_due(self):
        return self.iter_num % self.c.eval_interval == 0 or self.iter_num >= self.c.max_iters or self.c.eval_only

    def build_model(self, checkpoint):
        """The model from the flags, or from the checkpoint on resume (its flags, this command's RUNTIME_FLAGS)."""
        try:
            if checkpoint is not None:
                self.raw_model = model_from_checkpoint(checkpoint, self.ckpt_path,
                                                       **{key: getattr(self.c, key) for key in RUNTIME_FLAGS})
            else:
                config = GPTConfig(**{key: getattr(self.c, key) for key in MODEL_KEYS})
                check_fits(self.c, config, params_at_least(config), self.device, batch_size=0)  # before it is built
                self.raw_model = GPT(config)
        except (ValueError, RuntimeError) as e:  # a flag it refuses; a model larger than the machine's memory
            if not isinstance(e, ValueError) and "can't allocate memory" not in str(e):
                raise
            fail(e if isinstance(e, ValueError) else "the model does not fit in this machine's memory (one of its "
                 f"tensors alone: {str(e).split('tried to allocate ')[-1].split('.')[0][:60]}): lower n_layer, n_embd, "
                 "vocab_size or block_size")
        self.gptconf = self.raw_model.config
        for key in MODEL_KEYS:  # the config as built (n_kv_head=None -> n_head), as the checkpoint records it
            setattr(self.c, key, getattr(self.gptconf, key))
        self.n_params = sum(p.numel() for p in self.raw_model.parameters())  # for the memory estimate, here and below
        check_fits(self.c, self.gptconf, self.n_params, self.device)  # before the model moves there: a GPU too
        self.raw_model.to(self.device).train()
        # eval uses self.model: no DDP, so no collectives
        self.model = torch.compile(self.raw_model, mode=self.c.compile_mode) if self.c.compile else self.raw_model
        self.train_model = self.model
        if self.ddp:
            ids = [torch.cuda.current_device()] if self.device_type == "cuda" else None
            self.train_model = DDP(self.model, device_ids=ids)

    def build_optimizer(self, checkpoint):
        """AdamW, the fp16 gradient scaler, and on resume every piece of state the run had."""
        c = self.c
        self.optimizer = self.raw_model.configure_optimizers(c.weight_decay, c.learning_rate, (c.beta1, c.beta2))
        self.scaler = torch.amp.GradScaler(self.device_type, enabled=self.dtype == "float16")  # fp16: CUDA only
        self.iter_num, self.best_val_loss, self.best_iter, self.tokens_start = 0, float("inf"), None, 0
        self.initial_val_loss = None  # the iter-0 evaluation's: no best state is worse, and far above it is divergence
        self.health = {"loss_ema": None, "loss_var": 0.0, "steps": 0, "in_spike": False, "loss_spikes": 0,
                       "nonfinite_steps": 0, "nonfinite_in_a_row": 0}  # saved: a resumed run counts on
        self.pending = []  # each step's (loss, gradient norm, taken) on the device, until check_health reads them
        if checkpoint is None:
            return
        # The saved moments and step counts, with this command's settings: weight decay and betas as given (a change
        # was printed), fused AdamW or not as this machine chooses (a checkpoint of a Mac's plain loop resumes fused).
        saved = checkpoint["optimizer"]
        saved["param_groups"] = [{**group, **{k: v for k, v in now.items() if k != "params"}}
                                 for group, now in zip(saved["param_groups"], self.optimizer.param_groups, strict=True)]
        self.optimizer.load_state_dict(saved)
        if checkpoint["scaler"] is not None:
            self.scaler.load_state_dict(checkpoint["scaler"])
        self.loader.load_state_dict(checkpoint["loader"])
        restore_rng(checkpoint["rng"], self.rank)
        self.iter_num, self.health = checkpoint["iter_num"], {"nonfinite_in_a_row": 0, **checkpoint["health"]}
        self.tokens_start = checkpoint.get("tokens", self.iter_num * self.tokens_per_iter)  # trained before, in all
        self.say(f"resuming from {self.ckpt_path} at iter {self.iter_num}")
        self.best_iter, self.best_val_loss = self.folder.best_state(checkpoint, say=self.say)
        self.initial_val_loss = self.folder.initial_val_loss(checkpoint)

    def out_of_memory(self, e):
        """The same one line for an allocator failure the estimate did not foresee."""
        fail(f"out of memory at iter {self.iter_num} ({str(e).strip().splitlines()[0][:120]}). " + memory_advice(
            self.c, self.gptconf, self.n_params, self.device, free_memory(self.device)))

    def train_step(self):
        """One optimizer step: accum micro-batches on each rank, gradients averaged over all of them. It never
        waits for the device: the step's (loss, gradient norm, taken) join self.pending, which check_health
        reads at the next log or eval step."""
        step_loss = torch.zeros((), device=self.device)
        for micro_step in range(self.accum):
            x, y = self.loader.next_batch()
            pin = self.device_type == "cuda"  # from pinned memory, the copy to the GPU overlaps its work
            x, y = ((t.pin_memory() if pin else t).to(self.device, non_blocking=pin) for t in (x, y))
            if self.ddp:  # synchronise gradients on the last micro-step only
                self.train_model.require_backward_grad_sync = micro_step == self.accum - 1
            with self.ctx:
                loss = self.train_model(x, y)[1] / self.accum  # with loss_chunk, the logits let go at once
            step_loss += loss.detach()
            self.scaler.scale(loss).backward()
        if self.ddp:  # every rank sees the same loss and gradients, so every rank skips the same steps
            dist.all_reduce(step_loss)
            step_loss /= self.world_size
        self.pending.append(optimizer_step(self.optimizer, self.scaler, self.raw_model.parameters(),
                                           self.c.grad_clip, step_loss))

    def check_health(self):
        """Loss health of the steps queued since the last check, read in one synchronisation (the only place
        training waits for the device). A non-finite step was skipped (optimizer_step); here it is counted, and
        max_nonfinite in a row stop the run. Finite losses update the running statistics that spikes are
        counted against. Returns the finite losses, for the logs."""
        if not self.pending:
            return []
        steps, self.pending = torch.stack(self.pending).tolist(), []
        losses = []
        # fp16's gradients overflowing the loss scale are routine (skipped, the scaler lowers the scale) while the
        # scale is >= 1; below it they overflow unscaled. Any other skipped step is a sign of divergence
        overflow_is_routine = self.scaler.is_enabled() and self.scaler.get_scale() >= 1
        for it, (loss, grad_norm, taken) in enumerate(steps, start=self.iter_num - len(steps)):
            if taken or (overflow_is_routine and math.isfinite(loss)):
                self.health["nonfinite_in_a_row"] = 0
                count_spike(self.health, loss, self.c.spike_threshold)
                losses.append(loss)
                continue
            self.health["nonfinite_steps"] += 1
            self.health["nonfinite_in_a_row"] += 1
            in_a_row = self.health["nonfinite_in_a_row"]
            self.say(f"iter {it}: non-finite loss {loss} or gradient norm {grad_norm}: step skipped "
                     f"({in_a_row} in a row, {self.health['nonfinite_steps']} in all)")
            if in_a_row >= self.c.max_nonfinite:
                fail(f"{in_a_row} non-finite steps in a row (max_nonfinite={self.c.max_nonfinite}): "
                     f"the run has diverged. {self.folder.what_is_kept(self.best_iter)}; try a lower learning_rate "
                     f"(learning_rate={self.c.learning_rate:g}) or more warmup_iters.", diverged=True)
        return losses

    @torch.no_grad()
    def evaluate(self):
        """Mean loss over the fixed validation batches (shared out among the ranks), and the probe's
        attention/activation/gate measurements on the first one (batch_size windows: the probe costs more than a
        forward; lab/analyze.py measures them over all eval_iters batches). That batch runs once, with the probe on
        the uncompiled model (its hooks need the modules), and gives its loss too."""
        self.model.eval()
        total = torch.zeros(2, device=self.device)  # summed loss, batches
        probe = Probe(self.raw_model, triggers=self.meta.get("triggers"))  # rank 0's is reported: its first is val[0]
        for i, (x, y) in enumerate(self.val[self.rank::self.world_size]):
            with self.ctx, probe if i == 0 else nullcontext():
                _, loss = (self.raw_model if i == 0 else self.model)(x.to(self.device), y.to(self.device))
            total += torch.stack([loss.float(), torch.ones((), device=self.device)])
        if self.ddp:
            dist.all_reduce(total)
        self.model.train()
        return (total[0] / total[1]).item(), probe

    def log_and_save(self, lr, since_eval):
        """Evaluate, write the record to log.jsonl (and wandb), and save the checkpoints. since_eval: the Span of
        training since the last eval."""
        val_loss, probe = self.evaluate()
        dt = since_eval.step_time()
        record = {
            "iter": self.iter_num, "train_loss": since_eval.mean_loss(), "val_loss": finite_or_none(val_loss), "lr": lr,
            "tokens": self.tokens(), "tokens_per_s": self.tokens_per_iter / dt if dt else None,  # a step's: steps alone
            "tokens_per_s_wall": self.wall_tokens_per_s(),  # end to end: evaluations and checkpoints included
            "mfu": estimate_mfu(self.raw_model, self.c.batch_size * self.accum, dt, device=self.device) if dt else None,
            **probe.summary(),  # MEASURES (probe.py): each averaged over layers, on the first validation batch
            "loss_spikes": self.health["loss_spikes"], "nonfinite_steps": self.health["nonfinite_steps"],
            "time_s": time.time() - self.t_start,
            # per-layer values (probe.stats: F-Attn, M-Act, the sink's value norm ratio, ...): the sink's emergence
            "layers": {k: v and [finite_or_none(x) for x in v] for k, v in probe.stats.items()},
            "heads": {k: [[finite_or_none(x) for x in layer] for layer in v] for k, v in probe.heads.items()},
            # per layer, the channels that carry the massive activation (probe.massive_channels)
            "channels": [c and {k: [finite_or_none(x) for x in v] if isinstance(v, list) else finite_or_none(v)
                                for k, v in c.items()} for c in probe.channels],
        }
        if not self.folder.started:  # each command's first record: which code, run and device (its tokens/s, MFU)
            record.update(code=code_version(), run_id=self.folder.run_id, device=device_name(self.device))
        self.say(f"eval iter {self.iter_num}: {describe(record)}", flush=True)
        if self.master and not self.c.eval_only:
            self.folder.log(record)
            if self.wandb:
                self.wandb.log({k: v for k, v in record.items() if k not in ("layers", "channels", "code")},
                               step=self.iter_num)
        if self.iter_num == self.start_iter and not self.c.eval_only:  # a new run's, or the first on other val
            self.initial_val_loss = val_loss  # shards (runfolder: val_changed), which measures ckpt.pt's state
        self.stop_if_exploded(val_loss)  # on every rank (each has the same val_loss), before the state is saved
        if self.master and not self.c.eval_only:
            # a new run's initial state goes to best.pt only (ckpt.pt at iter 0 would read as a new run); the state
            # first measured on other val shards to ckpt.pt too, so that it records them even if no loss improves
            self.save(val_loss, latest=self.iter_num > self.start_iter or self.folder.val_changed)
        return record

    def tokens(self):  # trained by the run, all its commands together: a resume may have changed the step's size
        return self.tokens_start + (self.iter_num - self.start_iter) * self.tokens_per_iter

    def wall_tokens_per_s(self):
        """Tokens trained by this command per second of its wall clock since the loop began: evaluations,
        checkpoints, compiling and loading batches included. What a user planning a run should divide by."""
        trained = (self.iter_num - self.start_iter) * self.tokens_per_iter
        return trained / (time.perf_counter() - self.t_loop) if trained else None

    def stop_if_exploded(self, val_loss):
        """Stop a run whose validation loss is above DIVERGED_FACTOR x its initial one (rule above): it has
        diverged, and more steps only waste time. Its state is not saved; best.pt stays the best it saw. (A NaN
        validation loss is not saved either; max_nonfinite stops the run on the non-finite steps.)"""
        initial = self.initial_val_loss
        if self.c.eval_only or initial is None or not val_loss > DIVERGED_FACTOR * initial:
            return
        fail(f"the run has diverged: validation loss {val_loss:.4g} at iter {self.iter_num}, more than "
             f"{DIVERGED_FACTOR:g}x the {initial:.4f} it started from. learning_rate={self.c.learning_rate:g} is too "
             f"high for this model: try {self.c.learning_rate / 10:g}, or more warmup_iters (now "
             f"{self.c.warmup_iters}). This state was not saved; {self.folder.what_is_kept(self.best_iter)}.",
             diverged=True)

    def save(self, val_loss, latest=True):
        """ckpt.pt takes the latest state (always_save_checkpoint) or only a better one; best.pt only a better one.
        A non-finite state is never saved: it would be useless to resume from. latest=False: the initial state of a
        new run, to best.pt only (ckpt.pt at iter 0 would read as a new run)."""
        if not (math.isfinite(val_loss) and all(torch.isfinite(p).all() for p in self.raw_model.parameters())):
            print(f"not saving: the validation loss or the weights are not finite; "
                  f"{self.folder.what_is_kept(self.best_iter)}")
            return
        # never worse than the start (also where a resumed run found no best.pt), nor a state whose steps are skipped
        # as non-finite: a step that blows the weights up can leave uniform predictions, a low loss, and NaN steps
        initial = math.inf if self.initial_val_loss is None else self.initial_val_loss
        better, skipped = val_loss < self.best_val_loss and val_loss <= initial, self.health["nonfinite_in_a_row"]
        is_best = better and not skipped
        if not (is_best or self.c.always_save_checkpoint and latest):  # better but skipped: the line that says so
            return self.folder.said_skipped(self.iter_num, val_loss, skipped, self.best_iter) if better else None
        if is_best:
            self.best_val_loss, self.best_iter = val_loss, self.iter_num
        self.folder.save({
            "model": self.raw_model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
            "model_args": asdict(self.gptconf), "iter_num": self.iter_num, "val_loss": val_loss,
            "best_val_loss": self.best_val_loss, "best_iter": self.best_iter,
            "config": asdict(self.c), "rng": rng_state(), "loader": self.loader.state_dict(), "health": self.health,
            "initial_val_loss": self.initial_val_loss,  # what a diverged run is measured against
            "tokens": self.tokens(),  # trained, in all (a resume continues the count)
            "run_id": self.folder.run_id, "data_fingerprint": self.folder.fingerprint,  # whose run, on which data
            "tokenizer": self.meta.get("tokenizer", "gpt2"), "data_prepare": self.meta.get("prepare"),
        }, is_best, latest, self.initial_val_loss)


# -----------------------------------------------------------------------------
# The schedule and the optimizer step

def lr_at(it, c):
    """Linear warmup to learning_rate, then cosine decay to min_lr at lr_decay_iters, then min_lr."""
    if not c.decay_lr:
        return c.learning_rate
    if it < c.warmup_iters:
        return c.learning_rate * (it + 1) / (c.warmup_iters + 1)
    progress = min(1.0, (it - c.warmup_iters) / max(1, c.lr_decay_iters - c.warmup_iters))  # 1: min_lr from there on
    return c.min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (c.learning_rate - c.min_lr)


def optimizer_step(optimizer, scaler, params, grad_clip, loss):
    """Finish one optimizer step whose gradients are in place: unscale (fp16), clip, step, zero the gradients.
    A step whose loss or gradient norm is not finite is skipped, and the skip is decided on the device: fused
    AdamW (CUDA, CPU) takes a `found_inf` flag, the protocol torch's GradScaler uses, and leaves the weights, its
    moments and its step count as they were. So this never waits for the GPU, and the host can queue the next
    step while this one runs. Returns (loss, gradient norm, taken) as one float tensor on the device, for
    train.py's check_health to read later. train.py trains with this step and lab/bench.py --train times it."""
    scaler.unscale_(optimizer)  # fp16 only: the gradients as they really are, before clipping
    grad_norm = torch.nn.utils.clip_grad_norm_(params, grad_clip if grad_clip > 0 else math.inf)
    taken = torch.isfinite(loss) & torch.isfinite(grad_norm)
    if all(group.get("fused") for group in optimizer.param_groups):
        # read by AdamW.step as GradScaler sets it (torch/amp/grad_scaler.py, GradScaler.step): 1 = skip the step
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


# -----------------------------------------------------------------------------
# Settings and data: checked before anything is written, so a mistake costs nothing

POSITIVE_INTS = ("batch_size", "block_size", "eval_interval", "log_interval", "eval_iters",
                 "gradient_accumulation_steps", "max_nonfinite", "max_iters")


def check_settings(c):
    """Refuse meaningless settings with one line naming the key and what is allowed."""
    for key in POSITIVE_INTS:
        if getattr(c, key) < 1:
            fail(f"{key}={getattr(c, key)} must be at least 1")
    if c.eval_only and c.init_from != "resume":
        fail("eval_only=True evaluates a trained run: add --init_from=resume (a new model would be random)")
    if c.wandb_log and not c.eval_only and importlib.util.find_spec("wandb") is None:  # before the model and data
        fail("wandb_log=True needs wandb: pip install wandb")
    if c.attn_window is not None:  # the evaluations measure attention over every earlier key (probe.Probe)
        fail(f"attn_window={c.attn_window} is a setting for a trained model, not for training: measure a trained run "
             "under a sliding window with python -m lab.evaluate --runs=OUT_DIR --modes=stream")
    ranges = {  # key: (the test a value must pass, what is allowed); NaN and infinity never pass
        "learning_rate": (lambda x: x > 0, "a positive number"),
        "min_lr": (lambda x: 0 <= x <= c.learning_rate, f"between 0 and learning_rate={c.learning_rate}"),
        "weight_decay": (lambda x: x >= 0, "0 or more"),
        "grad_clip": (lambda x: x >= 0, "0 (no clipping) or more"),
        "beta1": (lambda x: 0 <= x < 1, "in [0, 1)"),
        "beta2": (lambda x: 0 <= x < 1, "in [0, 1)"),
        "spike_threshold": (lambda x: x > 0, "a positive number of standard deviations"),
        "block_size": (lambda x: x > c.bos, "at least 2 with bos=True: a window is the BOS token, then text"),
    }
    for key, (ok, allowed) in ranges.items():
        value = getattr(c, key)
        if not (math.isfinite(value) and ok(value)):
            fail(f"{key}={value} is not valid; it must be {allowed}")
    for key, choices in (("init_from", ("scratch", "resume")), ("compile_mode", COMPILE_MODES), ("dtype", DTYPES),
                         ("sdpa_backend", SDPA_BACKENDS), ("backend", DDP_BACKENDS)):
        check_choice(key, getattr(c, key), choices)
    check_device_name(c.device)  # its spelling; whether this machine has it: pick_device
    if c.warmup_iters < 0:
        fail(f"warmup_iters={c.warmup_iters} must be 0 or more")
    if c.decay_lr and c.lr_decay_iters < max(1, c.warmup_iters):
        fail(f"lr_decay_iters={c.lr_decay_iters} must be at least 1 and at least warmup_iters={c.warmup_iters} "
             "(the cosine decay follows the warmup; usually lr_decay_iters = max_iters)")
    if not 0 <= c.seed < 2**31:
        fail(f"seed={c.seed} must be in 0..{2**31 - 1}")


def prepare_data(c, block, vocab_size, rank, world_size, device=None):
    """The training loader and the fixed validation batches, a dataset of data.ON_FIRST_USE prepared on first use
    (by rank 0, the others waiting: cli.on_rank_0; device, where the processes' collectives run, None for one).
    Every problem with the data stops here, before the run folder is touched."""
    data_dir = dataset_dir(c.dataset, c.data_dir)
    on_rank_0(lambda: prepare_if_missing(c.dataset, data_dir), rank, device)
    try:
        bos = check_training_data(c.dataset, data_dir, vocab_size, c.bos)
        loader = TrainLoader(data_dir, block, c.batch_size, seed=c.seed, rank=rank, world_size=world_size, bos=bos)
        val = val_batches(data_dir, block, c.batch_size, c.eval_iters, bos=bos, say=print if rank == 0 else None)
    except (OSError, ValueError) as e:
        fail(e)
    return data_dir, loader, val


@dataclass
class Span:
    """Training since the last log line or eval: the finite steps' losses, and the time and number of the steps
    timed (not evaluations, nor the first step, which compiles)."""
    losses: list = field(default_factory=list)
    seconds: float = 0.0
    steps: int = 0

    def add(self, losses, seconds, steps, timed=True):
        self.losses += losses
        if timed:
            self.seconds += seconds
            self.steps += steps

    def mean_loss(self):
        return sum(self.losses) / len(self.losses) if self.losses else None

    def step_time(self):
        """Seconds a timed step, or None before any step was timed."""
        return self.seconds / self.steps if self.steps else None


if __name__ == "__main__":
    run_main(main)  # (cli.run_main: a diverged run exits with cli.DIVERGED_EXIT)

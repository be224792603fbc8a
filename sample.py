"""
Sample from a model trained by train.py, or from a published checkpoint:

    python sample.py --out_dir=out --start="def parse(" --num_samples=3 --max_new_tokens=200
    python sample.py --start=FILE:prompt.txt
    python sample.py --pretrained=gpt2 --start="The attention sink"     # a published checkpoint (pretrained.py)

Its keys are the fields of SampleConfig below, set as in every script here (--key=value, or a config file).
Generation uses the model's KV cache; the text is decoded with the tokenizer the checkpoint records (train.py's do
since 2026-12-01), else with the one named in the meta.json of the run's dataset, which must then be here (a run's ids
mean nothing without it: the command that prepares it is named). A model trained with BOS windows (train.py's
bos=True, the default) gets <|endoftext|> before the prompt, as at every training window's position 0, and keeps it
there when the text outgrows block_size.
"""

import math
import os
import sys
from dataclasses import dataclass

# cli before torch: its excepthook (cli.one_line_interrupt) makes Ctrl-C while torch loads one line, not a traceback
from cli import autocast_for, configure, dataset_dir, fail, pick_device, run_main
import torch

import pretrained
from runfolder import CHECKPOINT, describe_fingerprint_change, load_checkpoint
from data.shards import dataset_fingerprint, get_tokenizer, prepare_command, read_meta


@dataclass
class SampleConfig:
    """Every key of sample.py."""
    out_dir: str = "out"  # the folder with the run's checkpoints
    pretrained: str = ""  # a published checkpoint instead: gpt2, gated-1b-elementwise, ... (pretrained.HUB) or a folder
    checkpoint: str = CHECKPOINT  # ckpt.pt: the run's latest state; best.pt: its lowest validation loss
    start: str = "<|endoftext|>"  # the prompt, or FILE:path to read it from a file; <|endoftext|> = a new document
    num_samples: int = 3  # how many samples, one after another
    max_new_tokens: int = 200  # tokens generated per sample
    temperature: float = 0.8  # < 1 sharpens the distribution, > 1 flattens it
    top_k: int = 200  # sample among the k likeliest tokens only; 0 = all tokens
    seed: int = 1337  # the same seed, model and prompt give the same samples
    device: str = "auto"  # 'cuda', 'cuda:1', 'mps', 'cpu'; auto: the first of cuda, mps, cpu that is available
    dtype: str = "auto"  # 'float32', 'bfloat16', 'float16'; auto: bf16 where the GPU or CPU computes it, else fp16/fp32


def check_settings(c):
    for key in ("num_samples", "max_new_tokens"):
        if getattr(c, key) < 1:
            fail(f"{key}={getattr(c, key)} must be at least 1")
    if not 0 < c.temperature < math.inf:  # NaN fails this too
        fail(f"temperature={c.temperature} must be a positive number (1 = the model's own distribution); for "
             "greedy decoding, always the likeliest token, use --top_k=1")
    if c.top_k < 0:
        fail(f"top_k={c.top_k} must be 0 (all tokens) or a positive number of tokens")
    if not 0 <= c.seed < 2**63:  # within torch.manual_seed's range (which reaches 2**64 - 1)
        fail(f"seed={c.seed} must be in 0..{2**63 - 1}")


def read_prompt(start):
    if not start.startswith("FILE:"):
        return start
    path = os.path.expanduser(start[len("FILE:"):])  # FILE:~/prompt.txt, as a shell would read it
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        fail(f"--start=FILE:{path}: cannot read the prompt file ({e.strerror if isinstance(e, OSError) else e})")


def load(c, dev):
    """(model, tokenizer, the run's training keys) of a run's checkpoint or a published one; what cannot be sampled
    from stops with one line: a missing or broken file, a missing dataset (for a checkpoint that records no
    tokenizer), weights that are not finite (every probability would be NaN)."""
    try:
        if c.pretrained:
            published = pretrained.locate(c.pretrained)
            model, enc = pretrained.load_model(published, dev), pretrained.load_tokenizer(published)
            run = {"bos": published.bos}
        else:
            path = os.path.join(c.out_dir, c.checkpoint)
            if os.path.isdir(path):
                fail(f"{path} is a folder: --out_dir names the run's folder and --checkpoint a file in it "
                     f"({CHECKPOINT} or best.pt)")
            model, ckpt = load_checkpoint(path, dev)
            run = ckpt.get("config", {})  # the training run's keys: where its data, and so its tokenizer, is
            enc = get_tokenizer(ckpt.get("tokenizer") or run_tokenizer(run, path, ckpt.get("data_fingerprint")))
            if enc.n_vocab > model.config.vocab_size and not (ckpt.get("tokenizer") or run.get("dataset")):
                fail(f"{path} records no tokenizer and names no dataset, and its {model.config.vocab_size} token ids "
                     f"are fewer than GPT-2's {enc.n_vocab}: there is nothing to decode them with")
            elif enc.n_vocab > model.config.vocab_size:  # the dataset prepared again, with another tokenizer
                fail(f"{path} was trained with {model.config.vocab_size} token ids, but its dataset's tokenizer now "
                     f"has {enc.n_vocab}: the dataset was prepared again with another tokenizer since. Prepare it "
                     "as it was, or sample from a run trained on it as it is")
    except (FileNotFoundError, ValueError, RuntimeError, ImportError) as e:  # RuntimeError: no network to download
        fail(e)
    bad = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        fail(f"the model in {c.pretrained or path} is not finite (NaN or infinite weights in {len(bad)} tensor(s), "
             f"e.g. {bad[0]}): it cannot be sampled from; the run diverged before this state was saved (its best.pt "
             "may be finite: --checkpoint=best.pt)")
    return model, enc, run


def run_tokenizer(run, path, recorded=None):
    """The tokenizer's name a run was trained with, for a checkpoint that does not record it (train.py's do since
    2026-12-01): its dataset's meta.json's. A dataset folder that is missing or
    not prepared stops with one line naming it and the command that prepares it: another tokenizer's text would be
    wrong, or its ids out of the model's range. recorded: the data's fingerprint the checkpoint recorded (since
    2026-11-27); data prepared again since then gets a note, as its tokenizer may be another."""
    name = run.get("dataset", "")
    if not name:  # not train.py's checkpoint (no run settings): GPT-2's BPE, this project's default
        print(f"note: {path} names no dataset, so no tokenizer: decoding with GPT-2's BPE", flush=True)
        return "gpt2"
    data_dir = dataset_dir(name, run.get("data_dir", ""))
    meta = read_meta(data_dir)  # a malformed one raises ValueError, which says what to do
    if meta is None:
        what = "is missing" if not os.path.isdir(data_dir) else "holds no prepared dataset (no meta.json)"
        fail(f"the dataset folder of {path}, {data_dir}, {what}: its meta.json names the tokenizer the model's ids "
             f"are decoded with. Prepare it: {prepare_command(data_dir, name)}")
    changed = describe_fingerprint_change(recorded, dataset_fingerprint(data_dir))
    if changed:  # the same tokenizer over more text, or another one: a smaller vocabulary would sample silently
        print(f"note: the {changed} in {data_dir} changed since {path} was trained: decoding with the tokenizer its "
              f"meta.json names now, {meta.get('tokenizer', 'gpt2')}; if the data was prepared with another tokenizer "
              "since, the text is wrong", flush=True)
    return meta.get("tokenizer", "gpt2")


def prompt_ids(prompt, enc, bos):
    """The prompt's token ids, with <|endoftext|> first for a model trained on BOS windows (it always saw one at
    position 0): (ids, whether one was added)."""
    try:
        ids = enc.encode(prompt, allowed_special={"<|endoftext|>"})
    except ValueError as e:  # a synthetic task's tokenizer knows its symbols only
        fail(f"--start: {e}")
    if not ids:
        fail("the prompt is empty; give some text with --start=... (or --start='<|endoftext|>')")
    added = bos and ids[0] != enc.eot_token
    return ([enc.eot_token] + ids if added else ids), added


def main(argv=None):
    c, given = configure(SampleConfig, sys.argv[1:] if argv is None else argv)
    check_settings(c)
    if c.pretrained and given & {"out_dir", "checkpoint"}:
        fail(f"--pretrained={c.pretrained} samples a published model; --out_dir and --checkpoint name a run's: give "
             "one or the other")
    prompt = read_prompt(c.start)
    dev = pick_device(c.device)
    ctx, _ = autocast_for(dev, c.dtype)
    model, enc, run = load(c, dev)
    # a model trained on BOS windows always saw <|endoftext|> at position 0: give it one, and keep it there
    bos = run.get("bos", False)
    ids, added = prompt_ids(prompt, enc, bos)
    T = model.config.block_size
    if len(ids) > T:
        read = f"<|endoftext|> and the last {T - 1}" if bos else f"the last {T}"
        # counted without an added <|endoftext|>; with it, a prompt of block_size tokens is one too many
        after = f" after <|endoftext|>, {len(ids)} with it," if added else ","
        print(f"note: the prompt is {len(ids) - added} tokens{after} more than the model's block_size, {T}: it reads "
              f"{read}", flush=True)
    x = torch.tensor([ids], dtype=torch.long, device=dev)

    torch.manual_seed(c.seed)  # the same seed gives the same samples
    with torch.no_grad(), ctx:
        for _ in range(c.num_samples):
            # n_vocab: the ids past the tokenizer's (the padding up to vocab_size) have no text, so none is sampled
            y = model.generate(x, c.max_new_tokens, temperature=c.temperature, top_k=c.top_k or None, keep_first=bos,
                               n_vocab=enc.n_vocab)
            print(enc.decode(y[0, int(added):].tolist()))
            print("-" * 40, flush=True)


if __name__ == "__main__":
    run_main(main)  # Ctrl-C: one line, exit status 130

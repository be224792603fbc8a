"""
OpenWebText (an open reproduction of GPT-2's WebText, about 8M web pages, about 9B GPT-2 tokens) from the
Hugging Face hub, tokenized in parallel and written as shards of 100M tokens (about 18 GB in all, 2 bytes
a token) plus meta.json:

    pip install datasets
    python data/openwebtext/prepare.py [--num_proc 8]

Hugging Face keeps its own copy of the download in its cache (~/.cache/huggingface; nanoGPT's README puts it at
about 54 GB for this dataset) and of the tokens (about 2 bytes a token, as the shards), so a first run needs about
90 GB free in all. With datasets 2.20-3.x add --trust_remote_code: the hub's repository reads the dataset with a
loading script, which datasets runs only when allowed. Not run in this
repo's CI (it needs the network): everything after the download -- tokenizing a document, writing the
shards and meta.json -- is the shared code in data/shards.py that the tests exercise.
"""

import os
import sys

# Runnable as `python data/openwebtext/prepare.py` from anywhere: put the repo root on the path for `data`.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from data import PrepareParser, check_count, path_arg, run_preparation  # noqa: E402
from data.shards import (check_prepare_folder, check_shard_tokens, check_val_fraction, encode_document,  # noqa: E402
                         get_tokenizer, given_options, prepare_command, repo_folder_files, write_dataset)

DATA_DIR = os.path.dirname(os.path.abspath(__file__))
NAME = "openwebtext"
SPLIT_SEED = 1234  # the validation documents are a fixed random sample of the one split the hub provides
DOCUMENTS = 8_013_769  # Skylion007/openwebtext's documents: fewer means part of the corpus (a partial Parquet copy)


def check_documents(hf_name, documents):
    """A warning (a line, or None) when the default dataset came with another number of documents than it has: the
    hub's automatic Parquet copy of a large dataset can hold only its first part, and that would be a smaller corpus
    and another validation split, with nothing else to tell."""
    if hf_name == "Skylion007/openwebtext" and documents != DOCUMENTS:
        return (f"warning: {hf_name} gave {documents:,} documents, not its {DOCUMENTS:,}: this is "
                f"{'part of ' if documents < DOCUMENTS else 'not '}the corpus (a partial Parquet copy?); meta.json "
                "records the number, and results on it are not OpenWebText's")
    return None


def load_splits(hf_name, hf_revision, val_fraction, num_proc, trust_remote_code=False):
    """The download: {'train': Dataset, 'val': Dataset} of documents with a 'text' column. trust_remote_code: let
    datasets < 4 run the loading script the hub's repository holds (it asks first, or refuses without a terminal)."""
    try:
        from datasets import load_dataset
    except ImportError:
        sys.exit("error: OpenWebText is read through Hugging Face datasets, which is not installed: pip install datasets")
    trust = {"trust_remote_code": True} if trust_remote_code else {}
    try:
        ds = load_dataset(hf_name, split="train", revision=hf_revision, num_proc=num_proc, **trust)
    except RuntimeError as e:
        if "scripts are no longer supported" not in str(e):
            raise
        sys.exit(f"error: {e}\ndatasets >= 4 cannot run the hub's loading script; use the hub's Parquet copy with "
                 "--hf_revision=refs/convert/parquet (which may hold only part of a large dataset: the count of "
                 "documents is checked), or pip install 'datasets<4' and add --trust_remote_code")
    except ValueError as e:
        if "trust_remote_code" not in str(e) or trust_remote_code:  # (given, and still refused: datasets says why)
            raise
        sys.exit(f"error: {hf_name} is read by a loading script the hub's repository holds, which datasets runs only "
                 "when allowed: add --trust_remote_code to run it (code from the hub), or use the hub's Parquet copy "
                 "with --hf_revision=refs/convert/parquet")
    warning = check_documents(hf_name, len(ds))
    if warning:
        print(warning, flush=True)
    parts = ds.train_test_split(test_size=val_fraction, seed=SPLIT_SEED, shuffle=True)
    return {"train": parts["train"], "val": parts["test"]}


_enc = None  # one tokenizer per worker process


def tokenize_batch(batch):
    """datasets.map function: {'text': [str, ...]} -> {'ids': [tokens of each document, <|endoftext|> first]}."""
    global _enc
    if _enc is None:
        _enc = get_tokenizer()
    return {"ids": [encode_document(_enc, text) for text in batch["text"]]}


def tokenized_documents(ds, num_proc):
    """Tokenize a split in num_proc processes, then hand out the documents' tokens in order, as NumPy arrays (Python
    lists of 9B ints would cost minutes)."""
    try:
        tokenized = ds.map(tokenize_batch, batched=True, remove_columns=ds.column_names, num_proc=num_proc,
                           desc="tokenizing")
    except Exception as e:
        if isinstance(e.__context__, KeyboardInterrupt):  # Ctrl-C, which datasets' pool turns into a TimeoutError
            raise KeyboardInterrupt from None
        if not (isinstance(e, RuntimeError) and "abruptly died" in str(e)):  # a killed worker (out of memory?) is
            raise  # one line, not datasets' traceback
        raise ValueError(f"a tokenizing process died ({str(e).splitlines()[0]}): out of memory? Run the same "
                         "command with a smaller --num_proc; what was tokenized is kept in the Hugging Face cache") \
            from None
    for batch in tokenized.with_format("numpy").iter(batch_size=1024):
        yield from batch["ids"]


def main(argv=None):
    parser = PrepareParser("Download and tokenize OpenWebText into train/val shards.")
    parser.add_argument("--out_dir", default=DATA_DIR, type=path_arg, help="where to write (default: data/openwebtext)")
    parser.add_argument("--num_proc", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                        help="processes for the download and tokenizer (default: half the cores)")
    parser.add_argument("--val_fraction", type=float, default=0.0005, help="share of documents held out (about 4000)")
    parser.add_argument("--shard_tokens", type=int, default=100_000_000, help="tokens per shard file")
    parser.add_argument("--hf_name", default="Skylion007/openwebtext", help="dataset name on the Hugging Face hub")
    parser.add_argument("--hf_revision", default=None, help="hub revision, e.g. refs/convert/parquet")
    parser.add_argument("--trust_remote_code", action="store_true",
                        help="let datasets < 4 run the dataset's loading script from the hub without asking")
    args = parser.parse_args(argv)
    again = prepare_command(args.out_dir, NAME, options=given_options(parser, args, ("out_dir", "num_proc")))
    run_preparation(lambda: prepare(args, again), args.out_dir)


def prepare(args, command=None):
    # the settings and the folder are checked before the hours of download and tokenizing, not after
    allow = repo_folder_files(args.out_dir)  # data/openwebtext/ keeps this script beside the shards
    check_count("num_proc", args.num_proc)
    check_val_fraction(args.val_fraction)
    check_shard_tokens(args.shard_tokens)
    check_prepare_folder(args.out_dir, NAME, allow)
    get_tokenizer()  # a missing or corrupt encoder.json: said now, not after the download and the old shards' removal

    splits = load_splits(args.hf_name, args.hf_revision, args.val_fraction, args.num_proc, args.trust_remote_code)
    documents = {split: tokenized_documents(ds, args.num_proc) for split, ds in splits.items()}
    meta = write_dataset(args.out_dir, NAME, documents, source=f"huggingface.co/datasets/{args.hf_name}",
                         shard_tokens=args.shard_tokens, allow=allow, val_fraction=args.val_fraction,
                         split_seed=SPLIT_SEED, hf_name=args.hf_name, hf_revision=args.hf_revision,
                         hf_documents=sum(len(ds) for ds in splits.values()), command=command)
    print(f"wrote {meta['train_tokens']:,} train and {meta['val_tokens']:,} val tokens to {args.out_dir}")


if __name__ == "__main__":
    main()

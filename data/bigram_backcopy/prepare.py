"""
Bigram-Backcopy, a synthetic task on which an attention sink forms in minutes on a laptop CPU (Guo et al. 2024,
"Active-Dormant Attention Heads: Mechanistically Demystifying Extreme-Token Phenomena in LLMs"):

    python data/bigram_backcopy/prepare.py [--vocab=64] [--triggers=3] [--alpha=0.1] [--seed=0]
                                           [--train_tokens=2000000] [--val_tokens=131072] [--out_dir=...]

The text is a walk on a fixed random bigram chain over `vocab` symbols s0, s1, ...: each row of the transition
matrix is drawn from Dirichlet(alpha), so with a small alpha each symbol has a few likely successors. The `triggers`
symbols the chain alone visits most often (its stationary distribution: in the text, the copies shift the
frequencies) are the triggers: right after a trigger, the next symbol is a copy of the symbol before the trigger
("s7 s2 s7" when s2 is a trigger). Everywhere else the chain goes on. (A trigger that follows another trigger, or
starts the text, is followed by the chain too, so copies never loop.) The text is written as walks of CHAIN_LENGTH
symbols laid end to end, with no separator: at each seam (one position in 8192) the next walk starts from a uniform
symbol, not the chain's row, and a trigger that ends a walk is followed by no copy. meta.json's numbers count within
walks; a training window of 64 crosses a seam once in about 128.

Why a sink forms on it: a one-layer model needs its attention head only at the trigger positions, to fetch the
symbol before. Everywhere else the current symbol tells the model all the chain can, and the head should add
nothing. A softmax head cannot attend to nothing: it learns to put its attention on the BOS token at position 0
and to make that token's value small. That is the attention sink. A sigmoid gate after the head (G1) can close
the head instead, and the sink has no reason to form.

train.py prepares this dataset with the defaults on first use (`--dataset=bigram_backcopy`, config/sink_lab.py). The
chain and the triggers depend only on vocab, triggers, alpha and seed; the train and val texts are drawn from it
with their own random streams. meta.json records the settings, the triggers, the share of positions where a copy
follows, and the ideal loss: the task's entropy in nats per token (0 where a copy follows, the entropy of the
chain's row elsewhere), the loss a perfect model would reach on the text read whole. A training window cannot reach
it: its first prediction sees only BOS, and its second cannot see the symbol that a trigger there would copy, so a
perfect model's loss on 64-token windows is higher (window_ideal_loss says how much; exercise 10 asks for an
estimate). The text uses the symbol tokenizer (data.shards.SymbolTokenizer): token i is s<i>, and token `vocab` is
<|endoftext|>, the BOS token, which the text itself never holds.
"""

import os
import sys

import numpy as np

# Runnable as `python data/bigram_backcopy/prepare.py` from anywhere: put the repo root on the path for `data`.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from data import PrepareParser, path_arg, run_preparation  # noqa: E402
from data.shards import (MAX_TOKEN, SymbolTokenizer, given_options, prepare_command, repo_folder_files,  # noqa: E402
                         write_dataset)

DATA_DIR = os.path.dirname(os.path.abspath(__file__))
NAME = "bigram_backcopy"
CHAIN_LENGTH = 8192  # the text is written as walks of this many symbols, drawn side by side (fast in numpy)


def make_chain(vocab, triggers, alpha, seed):
    """(transition matrix (vocab, vocab), the trigger symbols, sorted): the rows drawn from Dirichlet(alpha), the
    triggers the `triggers` symbols of highest stationary probability."""
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.full(vocab, alpha), size=vocab)
    # the stationary distribution: the left eigenvector of P for eigenvalue 1
    values, vectors = np.linalg.eig(P.T)
    pi = np.abs(np.real(vectors[:, np.argmin(np.abs(values - 1))]))
    pi /= pi.sum()
    return P, sorted(int(t) for t in np.argsort(-pi, kind="stable")[:triggers])


def copies_next(x, is_trigger):
    """For each position t of the walks x (chains, T): whether x[t+1] is a copy of x[t-1] by the task's rule."""
    follows = np.zeros_like(x, dtype=bool)
    follows[:, 1:] = is_trigger[x[:, 1:]] & ~is_trigger[x[:, :-1]]
    return follows


def walk(P, is_trigger, n_tokens, rng):
    """Walks of CHAIN_LENGTH symbols (the last one shorter), drawn side by side, as one uint16 array each."""
    n_chains = -(-n_tokens // CHAIN_LENGTH)
    cumulative = P.cumsum(1)
    cumulative[:, -1] = 1.0  # a row's sum can round just below 1
    x = np.empty((n_chains, CHAIN_LENGTH), dtype=np.int64)
    x[:, 0] = rng.integers(len(P), size=n_chains)
    for t in range(1, CHAIN_LENGTH):
        step = (cumulative[x[:, t - 1]] < rng.random(n_chains)[:, None]).sum(1)
        if t >= 2:  # the copy rule: after a trigger that follows a non-trigger, the symbol before the trigger
            copy = is_trigger[x[:, t - 1]] & ~is_trigger[x[:, t - 2]]
            step = np.where(copy, x[:, t - 2], step)
        x[:, t] = step
    flat = x.reshape(-1)[:n_tokens].astype(np.uint16)
    return [flat[i:i + CHAIN_LENGTH] for i in range(0, n_tokens, CHAIN_LENGTH)], x


def entropy(p, axis=-1):
    """The entropy (nats) of distributions p along axis, 0 log 0 taken as 0."""
    return -(p * np.log(np.where(p > 0, p, 1))).sum(axis)


def ideal_loss(P, is_trigger, x):
    """The task's entropy per predicted token (nats) on walks x: 0 where a copy follows, the entropy of the current
    symbol's row elsewhere; the last position of each walk predicts nothing."""
    predicting = x[:, :-1]
    return float(np.where(copies_next(x, is_trigger)[:, :-1], 0.0, entropy(P)[predicting]).mean())


def pair_chain(P, is_trigger):
    """The text as a Markov chain on its pairs of consecutive symbols (a, b): (the next symbol's distribution given
    them (V, V, V): a copy of a after a trigger b that follows a non-trigger a, b's row of P elsewhere; the pairs'
    stationary distribution (V, V): how often each pair occurs in text far from a walk's start)."""
    V = len(P)
    copy = ~is_trigger[:, None] & is_trigger[None, :]  # (a, b): a copy of a comes next
    following = np.where(copy[:, :, None], np.eye(V)[:, None, :], P[None, :, :])
    pairs = np.full((V, V), 1.0 / V**2)
    for _ in range(100_000):  # the lazy chain (stay with probability 1/2): the same stationary state, never periodic
        pairs, before = 0.5 * pairs + 0.5 * np.einsum("ab,abc->bc", pairs, following), pairs
        if np.abs(pairs - before).sum() < 1e-13:
            break
    return following, pairs


def window_ideal_loss(P, is_trigger, block_size, bos=True):
    """The loss (nats a prediction) of a perfect model on a training window of block_size predictions taken from a
    random place in the text: with bos, the first prediction sees only BOS and can do no better than the symbols'
    frequencies, and the second sees one symbol but not the one before it, which a trigger there would copy; without
    BOS only that second case comes first. Every later prediction sees the two symbols before it, which tell it all
    the text does: the text's entropy rate (ideal_loss measures the same on a text, where the walks' starts count)."""
    following, pairs = pair_chain(P, is_trigger)
    frequency = pairs.sum(0)  # how often each symbol b occurs
    rate = float((pairs * entropy(following)).sum())
    # one symbol b seen, the one before it not: the next symbol c comes as the pair (b, c) does after b, p(c | b)
    blind = pairs / np.where(frequency > 0, frequency, 1)[:, None]
    one_seen = float((frequency * entropy(blind)).sum())
    first = [float(entropy(frequency)), one_seen] if bos else [one_seen]
    first = first[:block_size]
    return (sum(first) + (block_size - len(first)) * rate) / block_size


def prepare(out_dir=DATA_DIR, vocab=64, triggers=3, alpha=0.1, seed=0, train_tokens=2_000_000, val_tokens=131_072,
            command=None):
    if not 2 <= vocab <= MAX_TOKEN:  # the BOS token, id vocab, is stored as a uint16 too
        raise ValueError(f"vocab={vocab}: the chain needs at least 2 symbols and at most {MAX_TOKEN}")
    if not 1 <= triggers < vocab:
        raise ValueError(f"triggers={triggers} must be at least 1 and fewer than vocab={vocab}")
    if not 0 < alpha < float("inf"):  # NaN fails too
        raise ValueError(f"alpha={alpha} must be a positive number (Dirichlet concentration; 0.1: a few likely "
                         "successors)")
    if seed < 0:
        raise ValueError(f"seed={seed} must be 0 or more")
    for name, n in (("train_tokens", train_tokens), ("val_tokens", val_tokens)):
        if n < 2:
            raise ValueError(f"{name}={n} must be at least 2")
    try:
        return _prepare(out_dir, vocab, triggers, alpha, seed, train_tokens, val_tokens, command)
    except MemoryError:
        walks = -(-max(train_tokens, val_tokens) // CHAIN_LENGTH) * CHAIN_LENGTH
        need = max(8 * vocab * vocab, 8 * walks) / 2**30  # the float64 matrix, or the int64 walks
        raise MemoryError(f"out of memory: vocab={vocab} and {max(train_tokens, val_tokens):,} tokens need about "
                          f"{need:.1f} GiB at once; use a smaller --vocab or fewer tokens") from None


def _prepare(out_dir, vocab, triggers, alpha, seed, train_tokens, val_tokens, command=None):
    P, trigger_ids = make_chain(vocab, triggers, alpha, seed)
    is_trigger = np.zeros(vocab, dtype=bool)
    is_trigger[trigger_ids] = True
    documents, walks = {}, {}
    for split, n, stream in (("train", train_tokens, 1), ("val", val_tokens, 2)):
        documents[split], walks[split] = walk(P, is_trigger, n, np.random.default_rng([seed, stream]))
    written = [w.astype(np.int64)[None] for w in documents["val"]]  # the last walk cut short, as written
    predicting = sum(w.shape[1] - 1 for w in written)
    source = f"Bigram-Backcopy: {vocab} symbols, rows ~ Dirichlet({alpha:g}), {triggers} triggers, chain seed {seed}"
    meta = write_dataset(out_dir, NAME, documents, source, allow=repo_folder_files(out_dir), command=command,
                         tokenizer=f"{SymbolTokenizer.PREFIX}{vocab}", task="bigram_backcopy", symbols=vocab,
                         alpha=alpha, seed=seed, triggers=trigger_ids,
                         trigger_share=float(sum(is_trigger[w].sum() for w in written) / val_tokens),
                         copy_share=float(sum(copies_next(w, is_trigger)[:, :-1].sum() for w in written) / predicting),
                         ideal_loss=sum(ideal_loss(P, is_trigger, w) * (w.shape[1] - 1) for w in written) / predicting)
    print(f"wrote {meta['train_tokens']:,} train and {meta['val_tokens']:,} val tokens of Bigram-Backcopy to "
          f"{out_dir}: triggers {', '.join(f's{t}' for t in trigger_ids)} ({meta['trigger_share']:.1%} of positions; a copy "
          f"follows at {meta['copy_share']:.1%}), ideal loss {meta['ideal_loss']:.3f} nats", flush=True)
    return meta


def main(argv=None):
    parser = PrepareParser("Generate the Bigram-Backcopy task as train/val shards.")
    parser.add_argument("--out_dir", default=DATA_DIR, type=path_arg,
                        help="where to write (default: data/bigram_backcopy)")
    parser.add_argument("--vocab", type=int, default=64, help="symbols of the chain (the BOS token comes after them)")
    parser.add_argument("--triggers", type=int, default=3,
                        help="how many symbols are triggers: those the chain alone visits most often")
    parser.add_argument("--alpha", type=float, default=0.1, help="Dirichlet concentration of the chain's rows")
    parser.add_argument("--seed", type=int, default=0, help="the chain's seed (its rows, so its triggers)")
    parser.add_argument("--train_tokens", type=int, default=2_000_000)
    parser.add_argument("--val_tokens", type=int, default=131_072)
    args = parser.parse_args(argv)
    again = prepare_command(args.out_dir, NAME, options=given_options(parser, args))
    run_preparation(lambda: prepare(args.out_dir, args.vocab, args.triggers, args.alpha, args.seed,
                                    args.train_tokens, args.val_tokens, again), args.out_dir)


if __name__ == "__main__":
    main()

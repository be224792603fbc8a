"""
Exercise 10: Bigram-Backcopy, the sink lab's task: make it, and say where the head is needed.

The sink lab (TUTORIAL.md section 2) trains one head on a text that is a walk on a random bigram chain with one
twist: right after a trigger symbol, the next symbol copies the one before the trigger (Guo et al. 2024,
"Active-Dormant Attention Heads"). You write the text, find the positions of a training window where the head has
a token to fetch, and measure how rare they are: the reason a sink forms.

  gap 1: make_text(P, triggers, n, rng)     -> a text of n symbols by the task's rule (numpy int64, (n,))
  gap 2: copy_positions(idx, triggers)      windows (B, T) as train.py feeds them -> (B, T) bool: the query
                                            positions whose next token copies the token before them
  gap 3: task_numbers(P, triggers, text)    -> (copy_share, ideal_loss): how often a copy follows, and the loss a
                                            perfect model reaches, in nats per token

show() is given. Check your file with:  python exercises/check.py 10
"""

import numpy as np
import torch


def show(text, triggers, limit=24):
    """The first `limit` symbols of a text (or of one window) as words, the triggers in brackets: "s7 [s2] s7 s4".
    A window's BOS token shows as s<V>, the id past the chain's symbols."""
    triggers = {int(t) for t in triggers}
    return " ".join(f"[s{s}]" if s in triggers else f"s{s}" for s in np.asarray(text).reshape(-1)[:limit].tolist())


def make_text(P, triggers, n, rng):
    """A text of the Bigram-Backcopy task: a numpy int64 array (n,) of symbols 0 .. V-1.

    P:        (V, V) numpy float array, the chain: P[a, b] is the probability that symbol b follows symbol a
              (each row sums to 1; some entries may be 0)
    triggers: the trigger symbols, a list of ints
    n:        the text's length, at least 1
    rng:      a numpy Generator (np.random.default_rng(seed)), the only source of randomness: the same seed gives
              the same text
    The first symbol is drawn uniformly from the V symbols. Each next symbol is drawn from the current symbol's row
    of P, except right after a trigger that has a symbol before it which is not itself a trigger: there the next
    symbol copies the symbol before the trigger.
    """
    V = len(P)
    is_trigger = np.zeros(V, dtype=bool)
    is_trigger[list(triggers)] = True
    x = np.zeros(n, dtype=np.int64)
    x[0] = rng.integers(V)
    for t in range(1, n):
        # a trigger at t-1 with a non-trigger before it: copy that symbol. A trigger that starts the text has
        # nothing before it, and one after a trigger would copy a trigger and loop: both go on with the chain.
        if t >= 2 and is_trigger[x[t - 1]] and not is_trigger[x[t - 2]]:
            x[t] = x[t - 2]
        else:
            x[t] = rng.choice(V, p=P[x[t - 1]])
    return x


def copy_positions(idx, triggers):
    """idx: (B, T) int64 tensor of training windows as train.py feeds them: position 0 holds the BOS token
    (<|endoftext|>, which is no symbol of the chain), positions 1 .. T-1 consecutive symbols of the text.
    triggers: the trigger symbols, a list of ints (meta.json's "triggers").
    -> (B, T) bool tensor: True at the query positions t whose next token is a copy of the token at t - 1 by the
    task's rule, and that token is in the window: where the head has a token to fetch.
    """
    is_trigger = torch.isin(idx, torch.tensor(list(triggers), dtype=idx.dtype, device=idx.device))
    # position 0 is BOS; position 1's symbol before it was cut off by the window: the head has nothing to fetch
    after_symbol = torch.zeros_like(is_trigger)
    after_symbol[:, 2:] = ~is_trigger[:, 1:-1]
    return is_trigger & after_symbol


def task_numbers(P, triggers, text):
    """P, triggers: as make_text's; text: a 1-D numpy integer array of n >= 2 symbols, a text of the task.
    -> (copy_share, ideal_loss), two Python floats, over the n - 1 positions that predict a next symbol (all but the
    last): copy_share, the fraction of them whose next symbol is a copy by the task's rule; ideal_loss, the mean over
    them of the entropy (nats) of the next symbol given the text up to that position: the cross-entropy a model that
    knows P and the rule reaches, and none can beat. meta.json records both for the val text.
    """
    x = np.asarray(text, dtype=np.int64)
    is_trigger = np.zeros(len(P), dtype=bool)
    is_trigger[list(triggers)] = True
    predicting = x[:-1]  # the last symbol predicts nothing
    copy = np.zeros(len(predicting), dtype=bool)
    copy[1:] = is_trigger[x[1:-1]] & ~is_trigger[x[:-2]]  # in a text, position 1 has position 0 before it
    logP = np.log(np.where(P > 0, P, 1.0))  # 0 log 0 counts as 0
    H = -(P * logP).sum(1)  # each row's entropy: the uncertainty of the chain's next symbol
    loss = np.where(copy, 0.0, H[predicting])  # a copy is certain
    return float(copy.mean()), float(loss.mean())


if __name__ == "__main__":
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from data.bigram_backcopy.prepare import make_chain
    P, triggers = make_chain(64, 3, 0.1, 0)  # the sink lab's chain
    try:
        text = make_text(P, triggers, 100_000, np.random.default_rng(0))
        print(show(text, triggers))
        print("copy share %.4f, ideal loss %.4f nats" % task_numbers(P, triggers, text))
    except NotImplementedError as e:  # a gap still to write: one line, not a traceback
        sys.exit(f"not filled yet: {e}")


# The answer's key code (what no statement, starter or check message may show; hints.md's last hint does). The
# strings are split so that each MUTANTS text occurs once in this file.
GIVEAWAYS = [
    "is_trigger[x[t - 1]] and not " "is_trigger[x[t - 2]]",
    "x[t] = x[t " "- 2]",
    "~is_trigger[:, " "1:-1]",
    "copy[1:] = is_trigger[x[1:-1]] " "& ~is_trigger[x[:-2]]",
    "np.where(copy, 0.0, " "H[predicting])",
]

# known mistakes, for CI: (the check that must catch it, text in this file, the mistaken text)
MUTANTS = [
    # copies the trigger itself, not the symbol before it
    ("text_copies", "x[t] = x[t " "- 2]\n", "x[t] = x[t - 1]\n"),
    # copies after every trigger, even one that follows a trigger: the text loops between two triggers
    ("text_chain_elsewhere", "and not is_trigger[x[t " "- 2]]:", ":", "follows another trigger"),
    # the successor drawn from a column of P (renormalised, after numpy refuses a column that does not sum to 1)
    ("text_chain_elsewhere", "x[t] = rng.choice(" "V, p=P[x[t - 1]])",
     "x[t] = rng.choice(V, p=P[:, x[t - 1]] / P[:, x[t - 1]].sum())", "from a column"),
    # the text's start not guarded: at t = 1 the symbol two back is x[-1], the array's last entry
    ("text_chain_elsewhere", "if t >= 2 and " "is_trigger[x[t - 1]]", "if is_trigger[x[t - 1]]",
     "starts with a trigger"),
    # np.random's global generator, not rng: the same seed no longer gives the same text
    ("text_reproducible", "x[0] = rng." "integers(V)", "x[0] = np.random.randint(V)"),
    # marks the position of the copied token (t + 1), not the query that must fetch it
    ("mask_rules", "return is_trigger " "& after_symbol",
     "copied = torch.zeros_like(is_trigger)\n    copied[:, 1:] = (is_trigger & after_symbol)[:, :-1]\n    return copied"),
    # counts position 1, whose symbol before it was cut off (position 0 holds BOS)
    ("mask_rules", "after_symbol[:, 2:] = " "~is_trigger[:, 1:-1]", "after_symbol[:, 1:] = ~is_trigger[:, :-1]"),
    # the last position left out, as if its next token had to be in the window to decide it
    ("mask_rules", "return is_trigger " "& after_symbol",
     "marked = is_trigger & after_symbol\n    marked[:, -1] = False\n    return marked", "misses the last position"),
    # the chain's entropy everywhere, as if no copy were certain
    ("numbers_rules", "loss = np.where(copy, " "0.0, H[predicting])", "loss = H[predicting]"),
    # the copies counted at positions 1..n-1, one too far: the last symbol, a trigger, counted; position 0 not
    ("numbers_rules", "return float(copy." "mean()), float(loss.mean())",
     "return float(np.mean(is_trigger[x[1:]] & ~is_trigger[x[:-1]])), float(loss.mean())"),
]

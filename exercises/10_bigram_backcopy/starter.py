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
    # TODO(10-gap1): the first symbol, then one symbol at a time by the rule above; every draw from rng
    raise NotImplementedError("10-gap1: write make_text")


def copy_positions(idx, triggers):
    """idx: (B, T) int64 tensor of training windows as train.py feeds them: position 0 holds the BOS token
    (<|endoftext|>, which is no symbol of the chain), positions 1 .. T-1 consecutive symbols of the text.
    triggers: the trigger symbols, a list of ints (meta.json's "triggers").
    -> (B, T) bool tensor: True at the query positions t whose next token is a copy of the token at t - 1 by the
    task's rule, and that token is in the window: where the head has a token to fetch.
    """
    # TODO(10-gap2): True where the window's token t is followed by a copy of token t - 1 that the window holds
    raise NotImplementedError("10-gap2: write copy_positions")


def task_numbers(P, triggers, text):
    """P, triggers: as make_text's; text: a 1-D numpy integer array of n >= 2 symbols, a text of the task.
    -> (copy_share, ideal_loss), two Python floats, over the n - 1 positions that predict a next symbol (all but the
    last): copy_share, the fraction of them whose next symbol is a copy by the task's rule; ideal_loss, the mean over
    them of the entropy (nats) of the next symbol given the text up to that position: the cross-entropy a model that
    knows P and the rule reaches, and none can beat. meta.json records both for the val text.
    """
    # TODO(10-gap3): per predicting position: is the next symbol a copy, and how uncertain is it; then the means
    raise NotImplementedError("10-gap3: write task_numbers")


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


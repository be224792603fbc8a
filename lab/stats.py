"""
The statistics of the reproduction study (lab/repro.py): one estimand per claim, its interval over seeds, and a verdict
by a fixed rule (RULE) that says no more than the seeds can.

Seeds are the unit of replication. Each run gives one value per measure (its mean over the validation windows);
everything below that decides a claim is computed from those per-seed values, never from the windows, because a
second run of the same variant differs from the first by much more than a second draw of windows would.

  betainc(a, b, x)           the regularized incomplete beta function I_x(a, b), by its continued fraction
  t_quantile(df, level)      the two-sided Student-t critical value for any df > 0, fractional too (12.706 for 1,
                             4.303 for 2, 6.017 for 1.5; the normal's 1.960 for df = inf)
  beta_quantile(p, a, b)     the p-quantile of the Beta(a, b) distribution
  mean_ci(values)            a mean and its t-interval (mean ± t·sd/√n, df = n - 1)
  welch(ref, var, stat)      the claim's estimate and Welch's interval over the per-seed values, with the
                             Welch-Satterthwaite degrees of freedom as they are, not rounded. stat "diff": the
                             difference of the means; "ratio": the ratio of the geometric means, its interval
                             Welch's on the log scale, exponentiated, so that estimate and interval are one estimand.
                             ref may be a number (a fixed value): then the one-sample t-interval of var against it
  compare(ref, var, stat)    what the report uses: welch of the per-seed values ((seeds, windows) arrays are
                             averaged over windows first), with the seeds counted for RULE
  verdict(lo, hi, ...)       RULE on an interval: "reproduced", "not reproduced", "inconclusive", or "too few seeds"
                             below MIN_SEEDS a side, whatever the interval
  direction_word, size_word  whether an estimate points the paper's way, and whether its size is within
                             SIZE_FACTOR of the paper's: descriptions of the point estimate that decide nothing
  clopper_pearson(k, n)      the exact 95% interval of a rate from k of n (seeds that grew a sink head)
  smallest_fisher_p(n, m)    the smallest p Fisher's test can give with n seeds against m
  fisher_one_sided(...)      Fisher's exact test on two counts, one-sided; count_verdict: COUNT_RULE on it

Both rules decide each direction at ALPHA = 2.5% (one side of a two-sided 95% interval), each claim on its own.

Only numpy and the standard library. (The paired bootstrap over windows the report once used is gone: given the
seeds it measured window noise only, and decided nothing.)
"""

import functools
import math
from statistics import NormalDist

import numpy as np

MIN_SEEDS = 3  # seeds a side (of the variant, against a fixed value) that a verdict needs
ALPHA = 0.025  # each direction's level: a 95% interval lies on one side of no change with probability 2.5% by chance
SIZE_FACTOR = 2.0  # our effect is "the same size" as the paper's when between 1/SIZE_FACTOR and SIZE_FACTOR times it
VERDICTS = ("reproduced", "not reproduced", "inconclusive", "too few seeds")

RULE = (f"Seeds are the unit of replication: each run gives one value per measure (its mean over the validation "
        f"windows). A difference is the variant's mean over seeds minus the reference's; a ratio is the ratio of their "
        f"geometric means over seeds. Its 95% interval is Welch's t-interval over the per-seed values (for a ratio, on "
        f"the log scale, then exponentiated), with the Welch-Satterthwaite degrees of freedom as they are, not "
        f"rounded. A claim is reproduced when the interval lies entirely on the paper's side of no change (0 for a "
        f"difference, 1 for a ratio), not reproduced when it lies entirely on the other side, and inconclusive when "
        f"it contains no change. Each direction is decided at {ALPHA:.1%} (one side of the 95% interval): where a "
        f"variant truly changes nothing, its claim still reads \"reproduced\" with probability about {ALPHA:.1%} "
        f"(Welch's interval is approximate with few seeds), and as often \"not reproduced\". Each claim is decided "
        f"on its own, with no correction for the number of claims, several of which share runs: where nothing "
        f"truly changes, each verdict is wrong with probability about {2 * ALPHA:.0%}, so among 20 such verdicts "
        f"one is expected to be wrong, and the chance that some verdict is wrong is far higher than "
        f"{2 * ALPHA:.0%} ({1 - (1 - 2 * ALPHA) ** 20:.0%} for 20 independent ones). A verdict needs at least "
        f"{MIN_SEEDS} seeds on each side ({MIN_SEEDS} of the variant against a fixed value); with fewer it is "
        f"\"too few seeds\", whatever the interval. Beside the verdict, "
        f"\"direction\" says whether our estimate points the paper's way (same direction or opposite), and \"size\", "
        f"where the paper gives a number for the same quantity, whether our effect lies between half and twice the "
        f"paper's (within a factor of {SIZE_FACTOR:g}): same size, smaller or larger. The effect is the difference, "
        f"or the log of the ratio (a loose standard for a ratio: ×0.25 against the paper's ×0.09 is the same size, "
        f"their logs -1.39 and -2.41); against GA's perplexities, the log of the perplexity ratio, which is a loss "
        f"difference in nats. Direction and size describe the point estimate; they decide nothing.")

COUNT_RULE = (f"A yes/no outcome of a run (did it grow a sink head?) is counted over seeds: k of n, with its exact "
              f"(Clopper-Pearson) 95% interval for the rate. A claim on such counts is decided by a one-sided Fisher's "
              f"exact test of the variant's count against the reference's, at the level of the rule for means: "
              f"reproduced when the test in the paper's direction gives p < {ALPHA:g}, not reproduced when the test in "
              f"the opposite direction does, inconclusive otherwise. It is \"too few seeds\" with fewer than "
              f"{MIN_SEEDS} seeds on either side, and also where even the most extreme counts (every seed of one "
              f"side, none of the other's) could not give p < {ALPHA:g}: 3 seeds against 3 cannot (their best p is "
              f"1/20), 4 against 4 can (1/70). \"Reproduced\" on a claim that a variant removes the sink says that it "
              f"grows a sink head in fewer seeds than its reference, not in none: its k of n says how many.")


# -----------------------------------------------------------------------------
# Distributions: the incomplete beta function, the t and beta quantiles

def _beta_fraction(a, b, x):
    """The continued fraction of I_x(a, b) (modified Lentz), which converges fast for x < (a + 1) / (a + b + 2)."""
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        for coefficient in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),  # the even step, then the odd
                            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + coefficient * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + coefficient / c
            c = c if abs(c) > tiny else tiny
            h *= c * d
        if abs(c * d - 1.0) < eps:
            return h
    raise ArithmeticError(f"the incomplete beta fraction did not converge for a={a}, b={b}, x={x}")


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b) = P(X <= x) for X ~ Beta(a, b); a, b > 0."""
    if a <= 0 or b <= 0:
        raise ValueError(f"betainc needs a > 0 and b > 0, not a={a}, b={b}")
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b  # I_x(a, b) = 1 - I_{1-x}(b, a), where it converges


def t_tail(t, df):
    """P(T > t) for Student's t with df > 0 degrees of freedom (fractional too); df = inf: the normal."""
    if math.isinf(df):
        return 1.0 - NormalDist().cdf(t)
    tail = 0.5 * betainc(df / 2, 0.5, df / (df + t * t))  # P(|T| > |t|) / 2
    return tail if t >= 0 else 1.0 - tail


def _bisect(f, lo, hi, iterations=200):
    """The root of an increasing f on [lo, hi] (f(lo) <= 0 <= f(hi)), to the floats' precision."""
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)


@functools.lru_cache(maxsize=4096)
def t_quantile(df, level=0.95):
    """The t value of a two-sided interval at `level` with `df` > 0 degrees of freedom, fractional df included
    (Welch's): the (1 + level) / 2 quantile of Student's t. df = inf gives the normal's (1.960 at 95%)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1, not {level}")
    if not df > 0:  # also a NaN
        raise ValueError(f"t_quantile needs degrees of freedom > 0, not {df}")
    tail = (1 - level) / 2
    if math.isinf(df):
        return NormalDist().inv_cdf(1 - tail)
    if df > 1e5:  # lgamma's differences in betainc lose digits at such df: the Cornish-Fisher series, exact here
        z = NormalDist().inv_cdf(1 - tail)
        return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2) + \
            (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3)
    hi = 2.0
    while t_tail(hi, df) > tail:
        hi *= 2
    return _bisect(lambda t: tail - t_tail(t, df), 0.0, hi)


def beta_quantile(p, a, b):
    """The p-quantile of Beta(a, b): the x with I_x(a, b) = p."""
    if not 0 <= p <= 1:
        raise ValueError(f"p must be in [0, 1], not {p}")
    if p in (0, 1):
        return float(p)
    return _bisect(lambda x: betainc(a, b, x) - p, 0.0, 1.0)


# -----------------------------------------------------------------------------
# Intervals over seeds

def _finite(values, name):
    """`values` as a float array; a None or a non-finite value (a diverged run) is an error, never dropped."""
    values = np.asarray(values, dtype=object)
    if values.size == 0:
        raise ValueError(f"{name} is empty")
    if any(v is None for v in values.flat):
        raise ValueError(f"{name} holds a None (a run without this value): report it, do not average it away")
    values = values.astype(float)
    bad = ~np.isfinite(values)
    if bad.any():  # where, not every value: a (seeds, windows) array has thousands
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        at = f" at index {first if len(first) > 1 else first[0]}" if first else ""  # () for a single number
        raise ValueError(f"{name} holds {int(bad.sum())} non-finite value(s) of {values.size}, the first "
                         f"{values[first]}{at} (a diverged run?)")
    return values


def mean_ci(values, level=0.95):
    """(mean, lo, hi) with the t-interval mean ± t·sd/√n, df = n - 1; (x, None, None) for a single value."""
    x = _finite(values, "mean_ci values").ravel()
    mean = float(x.mean())
    if x.size == 1:
        return mean, None, None  # one run says nothing about run-to-run spread
    half = t_quantile(x.size - 1, level) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return mean, mean - half, mean + half


def _log_if(values, stat, name):
    if stat not in ("diff", "ratio"):
        raise ValueError(f"stat must be 'diff' or 'ratio', not {stat!r}")
    if stat == "diff":
        return values
    if (values <= 0).any():
        raise ValueError(f"a ratio needs positive values: {name} holds {values.tolist()}")
    return np.log(values)


def welch(ref, var, stat="diff", level=0.95):
    """The claim's estimate and Welch's interval from per-seed values: {"estimate", "lo", "hi", "df"}.

    stat "diff": mean(var) - mean(ref); "ratio": geometric mean(var) / geometric mean(ref), the interval computed
    on the log scale and exponentiated. ref may be a number (a fixed value): the one-sample t-interval of var against
    it (df = n - 1). The degrees of freedom are Welch-Satterthwaite's, fractional as they come. lo, hi and df are None
    when a side has one seed (nothing says how much runs differ). Per-seed values only: compare averages a
    (seeds, windows) array first; here its windows would count as seeds."""
    fixed = np.ndim(ref) == 0 and ref is not None
    for name, x in (("var", var), ("ref", None if fixed else ref)):
        if x is not None and np.ndim(x) != 1:
            raise ValueError(f"welch takes one value per seed: {name} has shape {np.shape(x)} (stats.compare "
                             "averages a (seeds, windows) array over its windows first)")
    b = _log_if(_finite(var, "var"), stat, "var")
    a = _log_if(_finite([ref] if fixed else ref, "ref"), stat, "ref")
    d = float(b.mean() - a.mean())
    estimate = math.exp(d) if stat == "ratio" else d
    out = {"estimate": estimate, "lo": None, "hi": None, "df": None}
    if b.size < 2 or (not fixed and a.size < 2):
        return out
    vb = float(b.var(ddof=1)) / b.size
    va = 0.0 if fixed else float(a.var(ddof=1)) / a.size
    se = math.sqrt(va + vb)
    if fixed:
        df = b.size - 1.0
    elif se > 0:
        df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    else:  # every seed alike on both sides: no spread to weigh, the interval is the point
        df = a.size + b.size - 2.0
    half = t_quantile(df, level) * se
    lo, hi = d - half, d + half
    if stat == "ratio":
        if hi > 709:  # math.exp overflows past 709.78: an OverflowError would be a traceback
            raise ValueError(f"the ratio's interval spans e^{lo:.0f} to e^{hi:.0f}: the per-seed values lie too "
                             "many orders of magnitude apart for a ratio")
        lo, hi = math.exp(lo), math.exp(hi)
    return {**out, "lo": float(lo), "hi": float(hi), "df": float(df)}


def per_seed(values, name="values"):
    """Per-seed values from a (seeds, windows) array (each run's mean over its windows), or a 1-D array as it is."""
    x = _finite(values, name)
    if x.ndim == 2:
        return x.mean(axis=1)
    if x.ndim == 1:
        return x
    raise ValueError(f"values must be per-seed (1-D) or (seeds, windows), not of shape {x.shape}")


def compare(ref, var, stat="diff", level=0.95):
    """A variant against its reference (or a fixed value, a number) as RULE decides it: welch's estimate and
    interval over the per-seed values ((seeds, windows) arrays are averaged over windows first), the per-seed values
    themselves, the null value, and "seeds": the fewest seeds on a side that RULE counts (the variant's alone
    against a fixed value)."""
    fixed = np.ndim(ref) == 0 and ref is not None
    b = per_seed(var, "the variant's values")
    a = float(ref) if fixed else per_seed(ref, "the reference's values")
    out = welch(a, b, stat, level)
    return {**out, "stat": stat, "null": 1.0 if stat == "ratio" else 0.0,
            "ref_seeds": None if fixed else a.tolist(), "var_seeds": b.tolist(),
            "n_seeds_ref": None if fixed else int(a.size), "n_seeds_var": int(b.size),
            "seeds": int(b.size if fixed else min(a.size, b.size))}


def verdict(lo, hi, direction, null=0.0, seeds=MIN_SEEDS):
    """RULE applied to the interval [lo, hi]; direction -1 (+1): the paper says the value is below (above) null;
    seeds: the fewest seeds on a side. Below MIN_SEEDS, or without an interval: "too few seeds"."""
    if direction not in (-1, 1):
        raise ValueError(f"direction must be -1 (paper: below the null) or +1 (above), not {direction}")
    if seeds < MIN_SEEDS or lo is None or hi is None:
        return "too few seeds"
    if (direction < 0 and hi < null) or (direction > 0 and lo > null):
        return "reproduced"
    if (direction < 0 and lo > null) or (direction > 0 and hi < null):
        return "not reproduced"
    return "inconclusive"


def decide(c, direction):
    """verdict of a compare result."""
    return verdict(c["lo"], c["hi"], direction, c["null"], c["seeds"])


def effect(c):
    """The size of a compare result on the scale it is decided on: the difference, or the log of the ratio."""
    return math.log(c["estimate"]) if c["stat"] == "ratio" else c["estimate"]


def direction_word(our_effect, direction):
    """Whether our effect (a difference, or a log ratio) points the paper's way: "same direction" or "opposite"."""
    if our_effect == 0:
        return "no change"
    return "same direction" if (our_effect > 0) == (direction > 0) else "opposite"


def size_word(our_effect, paper_effect, factor=SIZE_FACTOR):
    """Our effect beside the paper's for the same quantity (both differences, or both log ratios): "same size (within
    ×2)" when it lies between paper/factor and paper·factor, else "smaller than the paper's" or "larger than the
    paper's"; "opposite to the paper's" when they differ in sign; None without a paper number."""
    if paper_effect is None:
        return None
    if paper_effect == 0 or our_effect == 0 or (our_effect > 0) != (paper_effect > 0):
        return "opposite to the paper's" if our_effect * paper_effect < 0 else "no change to compare"
    r = our_effect / paper_effect
    if r < 1 / factor:
        return "smaller than the paper's"
    if r > factor:
        return "larger than the paper's"
    return f"same size (within ×{factor:g})"


# -----------------------------------------------------------------------------
# Counts over seeds: a rate's exact interval, and Fisher's exact test of two counts

def clopper_pearson(k, n, level=0.95):
    """The exact (Clopper-Pearson) interval (lo, hi) of a rate from k successes in n trials."""
    if not (isinstance(k, int) and isinstance(n, int) and 0 <= k <= n and n >= 1):
        raise ValueError(f"need whole numbers 0 <= k <= n, n >= 1, not k={k}, n={n}")
    alpha = 1 - level
    lo = 0.0 if k == 0 else beta_quantile(alpha / 2, k, n - k + 1)
    hi = 1.0 if k == n else beta_quantile(1 - alpha / 2, k + 1, n - k)
    return lo, hi


def fisher_one_sided(k_ref, n_ref, k_var, n_var, alternative):
    """Fisher's exact test of the 2x2 table (k of n for the reference and for the variant), one-sided: the
    probability, with the margins fixed (hypergeometric), of a variant count at most k_var (alternative "less": the
    variant's rate is lower) or at least k_var ("greater")."""
    for k, n in ((k_ref, n_ref), (k_var, n_var)):
        if not (isinstance(k, int) and isinstance(n, int) and 0 <= k <= n and n >= 1):
            raise ValueError(f"need whole numbers 0 <= k <= n, n >= 1, not k={k}, n={n}")
    if alternative not in ("less", "greater"):
        raise ValueError(f"alternative must be 'less' or 'greater', not {alternative!r}")
    total, successes = n_ref + n_var, k_ref + k_var
    lowest, highest = max(0, successes - n_ref), min(successes, n_var)
    ks = range(lowest, k_var + 1) if alternative == "less" else range(k_var, highest + 1)
    p = sum(math.comb(n_var, k) * math.comb(n_ref, successes - k) for k in ks) / math.comb(total, successes)
    return min(1.0, float(p))


def smallest_fisher_p(n_ref, n_var):
    """The smallest one-sided p Fisher's test can give with these seeds: every seed of one side against none of the
    other's, 1 / C(n_ref + n_var, n_ref). Below ALPHA only from 4 seeds against 4 (or 3 against 5) on."""
    return 1 / math.comb(n_ref + n_var, n_ref)


def count_verdict(k_ref, n_ref, k_var, n_var, direction, alpha=ALPHA):
    """COUNT_RULE on two counts: {"p": the one-sided Fisher p in the paper's direction (-1: the variant's rate is
    lower), "p_opposite", "p_smallest": the smallest p these seeds could give (smallest_fisher_p), "verdict"}."""
    if direction not in (-1, 1):
        raise ValueError(f"direction must be -1 (paper: the variant's rate is lower) or +1 (higher), not {direction}")
    paper, opposite = ("less", "greater") if direction < 0 else ("greater", "less")
    p = fisher_one_sided(k_ref, n_ref, k_var, n_var, paper)
    q = fisher_one_sided(k_ref, n_ref, k_var, n_var, opposite)
    smallest = smallest_fisher_p(n_ref, n_var)
    if min(n_ref, n_var) < MIN_SEEDS or smallest >= alpha:  # no count these seeds could show would decide
        word = "too few seeds"
    elif p < alpha:
        word = "reproduced"
    elif q < alpha:
        word = "not reproduced"
    else:
        word = "inconclusive"
    return {"p": p, "p_opposite": q, "p_smallest": smallest, "verdict": word}


if __name__ == "__main__":  # run by mistake: say what uses the rule, rather than exit 0 having done nothing
    from cli import fail
    fail("lab/stats.py is a library with no command line: `python -m lab.repro report` decides a study's claims by "
         "its rule (RULE, COUNT_RULE in this file)")

"""
The statistics of the reproduction study (repro.py): an interval for every number, and a verdict by a fixed rule.

  t_quantile(df)             the two-sided Student-t critical value (2.776 for 4 degrees of freedom at 95%)
  mean_ci(values)            a metric over training seeds: its mean and a t-interval. Seeds are independent
                             runs, so their spread is the run-to-run noise; with few seeds the t value (not
                             1.96) widens the interval to account for estimating that spread from so few
  paired_bootstrap(ref, var) a variant against a reference, both evaluated on the same validation windows:
                             the difference (or ratio) of their mean losses and a percentile bootstrap interval.
                             Each draw resamples the windows once and uses the same windows for both runs:
                             that is the pairing. A hard window is hard for both, so its difficulty cancels in
                             the difference, and the interval reflects how the two models differ, not which
                             windows happened to be drawn. The seeds (rows) of each side are resampled too,
                             independently, because different seeds are different runs. With one seed per side
                             there is nothing to resample: the interval then covers window noise only, and says
                             nothing about whether another seed would have come out the other way. With
                             few seeds (3) and a seed-to-seed spread larger than the window noise, the interval
                             is somewhat too narrow (a resample of 3 runs varies less than runs do): simulated
                             coverage of a 95% interval falls to about 85%; mean_ci of the per-seed means,
                             whose t value allows for this, is the cross-check
  welch_interval(ref, var)   the same difference (ratio: on a log scale) from the per-seed means alone, with
                             Welch's t-interval: the seed-to-seed spread, allowing for how few seeds there are
  compare(ref, var)          what the report uses: the bootstrap interval, widened to the Welch interval where
                             that is wider. It needs at least two seeds per side to count as conclusive:
                             one run of each cannot tell a real difference from training noise (changing
                             nothing but eval_interval moved one GPU run's loss by 0.046 nats)
  verdict(lo, hi, direction) "reproduced", "not reproduced" or "inconclusive" by RULE, decided before the runs

Only numpy and the standard library.
"""

import math

import numpy as np

RULE = ("A claim is reproduced when the 95% confidence interval of the variant's difference from (or ratio to) "
        "its reference lies entirely on the paper's side of the null value (0 for a difference, 1 for a ratio), "
        "not reproduced when it lies entirely on the other side, and inconclusive when it contains the null value "
        "or when either side has fewer than two seeds. The interval is the paired bootstrap over validation windows "
        "and seeds, widened to Welch's t-interval over the per-seed means where that is wider.")

# Two-sided 95% critical values of Student's t (the 0.975 quantile) for 1..30 degrees of freedom.
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
       2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_quantile(df, level=0.95):
    """The t value for a two-sided interval at `level` with `df` degrees of freedom (only level 0.95)."""
    if level != 0.95:
        raise ValueError(f"t_quantile supports level=0.95 only, not {level}")
    if df < 1 or df != int(df):
        raise ValueError(f"t_quantile needs a whole number of degrees of freedom >= 1, not {df}")
    # beyond 30 the t distribution is close to the normal (2.042 at 30, 1.960 in the limit)
    return T95[int(df) - 1] if df <= 30 else 1.960


def _finite(values, name):
    """`values` as a float array; a None or a non-finite value (a diverged run) is an error, never dropped."""
    values = np.asarray(values, dtype=object)
    if values.size == 0:
        raise ValueError(f"{name} is empty")
    if any(v is None for v in values.flat):
        raise ValueError(f"{name} holds a None (a run without this value): report it, do not average it away")
    values = values.astype(float)
    if not np.isfinite(values).all():
        raise ValueError(f"{name} holds a non-finite value (a diverged run?): {values.tolist()}")
    return values


def mean_ci(values, level=0.95):
    """(mean, lo, hi) over seeds with the t-interval mean ± t·sd/√n; (x, None, None) for a single seed."""
    x = _finite(values, "mean_ci values").ravel()
    mean = float(x.mean())
    if x.size == 1:
        return mean, None, None  # one run says nothing about run-to-run spread
    half = t_quantile(x.size - 1, level) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return mean, mean - half, mean + half


def _counts(rng, n_draws, n):
    """How often each of n items is drawn in each of n_draws resamples of n with replacement: (n_draws, n)."""
    # offset each draw's indices into its own block of n, so one bincount counts all draws at once
    idx = rng.integers(0, n, size=(n_draws, n)) + n * np.arange(n_draws)[:, None]
    return np.bincount(idx.ravel(), minlength=n_draws * n).reshape(n_draws, n).astype(float)


def _resampled_means(x, window_counts, rng):
    """The mean of x (seeds, windows) in each bootstrap draw: the window counts given, the seed rows drawn here."""
    n_seeds, n_windows = x.shape
    per_seed = window_counts @ x.T  # (draws, seeds): each seed's sum over the drawn windows
    # with one seed the only row is always drawn once: nothing is resampled, only window noise remains
    seed_counts = _counts(rng, len(window_counts), n_seeds)
    return (seed_counts * per_seed).sum(axis=1) / (n_seeds * n_windows)


def paired_bootstrap(ref, var, stat="diff", n_boot=2000, level=0.95, seed=0):
    """mean(var) - mean(ref) (or /, stat="ratio") and its paired, hierarchical percentile bootstrap interval."""
    ref, var = _finite(ref, "ref"), _finite(var, "var")
    if ref.ndim != 2 or var.ndim != 2 or ref.shape[1] != var.shape[1]:
        raise ValueError(f"ref and var must be (seeds, windows) with the same windows: shapes {ref.shape} and "
                         f"{var.shape}")
    if stat not in ("diff", "ratio"):
        raise ValueError(f"stat must be 'diff' or 'ratio', not {stat!r}")
    if not 0 < level < 1 or n_boot < 1:
        raise ValueError(f"need 0 < level < 1 and n_boot >= 1, not level={level}, n_boot={n_boot}")
    combine = np.subtract if stat == "diff" else np.divide
    rng, n_windows = np.random.default_rng(seed), ref.shape[1]
    draws = []
    # draws in blocks, so that the (draws, windows) count matrix stays small however many windows there are
    block = max(1, min(n_boot, 2**22 // n_windows))
    for start in range(0, n_boot, block):
        b = min(block, n_boot - start)
        counts = _counts(rng, b, n_windows)  # one resample of the windows per draw, shared by ref and var
        # seeds are resampled separately for each side: the two sides' runs are independent of each other
        draws.append(combine(_resampled_means(var, counts, rng), _resampled_means(ref, counts, rng)))
    lo, hi = np.percentile(np.concatenate(draws), [50 * (1 - level), 50 * (1 + level)])
    return {"estimate": float(combine(var.mean(), ref.mean())), "lo": float(lo), "hi": float(hi),
            "n_seeds_ref": ref.shape[0], "n_seeds_var": var.shape[0], "n_windows": n_windows}


def verdict(lo, hi, direction, null=0.0):
    """RULE applied to the interval [lo, hi]; direction -1 (+1): the paper says the value is below (above) null."""
    if direction not in (-1, 1):
        raise ValueError(f"direction must be -1 (paper: below the null) or +1 (above), not {direction}")
    if lo is None or hi is None:
        return "inconclusive"
    if (direction < 0 and hi < null) or (direction > 0 and lo > null):
        return "reproduced"
    if (direction < 0 and lo > null) or (direction > 0 and hi < null):
        return "not reproduced"
    return "inconclusive"


def welch_interval(ref_means, var_means, stat="diff", level=0.95):
    """(lo, hi) for mean(var) - mean(ref) from per-seed means (two or more per side), by Welch's t-interval;
    stat="ratio": the interval of the log ratio, exponentiated (ratios of positive means only)."""
    a, b = _finite(ref_means, "ref_means").ravel(), _finite(var_means, "var_means").ravel()
    if min(a.size, b.size) < 2:
        raise ValueError(f"Welch's interval needs two or more seeds per side, not {a.size} and {b.size}")
    if stat == "ratio":
        if (a <= 0).any() or (b <= 0).any():
            raise ValueError("a ratio interval needs positive per-seed means")
        a, b = np.log(a), np.log(b)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    # Welch-Satterthwaite degrees of freedom, rounded down (a wider interval, never a narrower one)
    df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1)) if se > 0 else a.size + b.size - 2
    half = t_quantile(max(1, math.floor(df)), level) * se
    d = b.mean() - a.mean()
    lo, hi = d - half, d + half
    return (math.exp(lo), math.exp(hi)) if stat == "ratio" else (float(lo), float(hi))


def compare(ref, var, stat="diff", n_boot=2000, level=0.95, seed=0):
    """paired_bootstrap's dict, its interval widened to welch_interval's where that is wider (two or more
    seeds per side), plus "conclusive": whether both sides have the two seeds RULE asks for."""
    out = paired_bootstrap(ref, var, stat, n_boot, level, seed)
    out["conclusive"] = min(out["n_seeds_ref"], out["n_seeds_var"]) >= 2
    if out["conclusive"]:
        lo, hi = welch_interval(np.asarray(ref, float).mean(1), np.asarray(var, float).mean(1), stat, level)
        out["lo"], out["hi"] = min(out["lo"], lo), max(out["hi"], hi)
    return out

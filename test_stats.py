"""stats.py: t values, intervals over seeds, the paired bootstrap (pairing, seed resampling, coverage), the verdict."""

import math

import numpy as np
import pytest

from stats import RULE, compare, mean_ci, paired_bootstrap, t_quantile, verdict, welch_interval


def test_t_quantile_table_and_normal_limit():
    assert t_quantile(1) == 12.706 and t_quantile(2) == 4.303 and t_quantile(10) == 2.228
    assert t_quantile(30) == 2.042 and t_quantile(31) == 1.960 and t_quantile(10_000) == 1.960
    assert all(a > b for a, b in zip(map(t_quantile, range(1, 31)), map(t_quantile, range(2, 32))))  # decreasing


@pytest.mark.parametrize("df, level, words", [(0, 0.95, ">= 1"), (-3, 0.95, ">= 1"), (1.5, 0.95, "whole number"),
                                              (5, 0.9, "0.95 only")])
def test_t_quantile_errors_say_what_is_supported(df, level, words):
    with pytest.raises(ValueError, match=words):
        t_quantile(df, level)


def test_mean_ci_by_hand():
    mean, lo, hi = mean_ci([1, 2, 3])  # sd 1, n 3, df 2
    half = 4.303 / math.sqrt(3)
    assert mean == 2 and lo == pytest.approx(2 - half) and hi == pytest.approx(2 + half)
    mean, lo, hi = mean_ci(np.array([3.0, 3.0]))
    assert (mean, lo, hi) == (3.0, 3.0, 3.0)


def test_mean_ci_single_seed_has_no_interval():
    assert mean_ci([2.5]) == (2.5, None, None)


@pytest.mark.parametrize("values, words", [([1.0, None, 2.0], "None"), ([1.0, float("nan")], "non-finite"),
                                           ([1.0, float("inf")], "non-finite"), ([], "empty")])
def test_mean_ci_refuses_missing_or_diverged_values(values, words):
    with pytest.raises(ValueError, match=words):
        mean_ci(values)


def test_constant_difference_one_seed_pairing_removes_window_noise():
    rng = np.random.default_rng(0)
    ref = rng.normal(3.0, 1.0, size=(1, 2048))  # very different windows
    var = ref + 0.1
    r = paired_bootstrap(ref, var)
    assert r["estimate"] == pytest.approx(0.1, abs=1e-12)
    assert r["lo"] == pytest.approx(0.1, abs=1e-12) and r["hi"] == pytest.approx(0.1, abs=1e-12)
    assert (r["n_seeds_ref"], r["n_seeds_var"], r["n_windows"]) == (1, 1, 2048)
    # the same numbers with var's windows shuffled: no longer paired, the window noise (sd 1) comes back
    unpaired = paired_bootstrap(ref, var[:, rng.permutation(2048)])
    assert unpaired["estimate"] == pytest.approx(0.1, abs=1e-12)
    assert unpaired["hi"] - unpaired["lo"] > 0.05  # about 2 * 1.96 * sqrt(2) / sqrt(2048) = 0.12


def test_one_seed_half_width_matches_the_normal_approximation():
    rng = np.random.default_rng(1)
    n = 4000
    ref, var = rng.normal(0, 1, size=(1, n)), rng.normal(0.2, 1, size=(1, n))
    r = paired_bootstrap(ref, var)
    expected = 1.96 * np.std(var - ref, ddof=1) / math.sqrt(n)
    assert (r["hi"] - r["lo"]) / 2 == pytest.approx(expected, rel=0.15)
    assert r["lo"] < r["estimate"] < r["hi"]


def test_seeds_are_resampled_per_variant():
    rng = np.random.default_rng(2)
    ref = rng.normal(3.0, 1.0, size=(1, 500))
    var = ref + np.array([[0.1], [0.2], [0.3]])  # three runs of the variant, no window noise in the difference
    r = paired_bootstrap(ref, var)
    # every draw is the mean of three offsets drawn from {0.1, 0.2, 0.3}: the run-to-run spread is the interval
    assert r["estimate"] == pytest.approx(0.2)
    assert 0.1 - 1e-9 <= r["lo"] < 0.15 and 0.25 < r["hi"] <= 0.3 + 1e-9


def test_coverage_of_small_studies():
    """3 seeds a side, a seed effect, shared window difficulty and per-run window noise; the true difference -0.05."""
    covered = 0
    for i in range(200):
        rng = np.random.default_rng(1000 + i)
        difficulty = rng.normal(0, 1, size=200)  # the same windows for every run: pairing cancels it
        runs = [mu + difficulty + rng.normal(0, 0.03, size=(3, 1)) + rng.normal(0, 0.3, size=(3, 200))
                for mu in (3.0, 2.95)]
        r = paired_bootstrap(*runs, n_boot=400, seed=i)
        covered += r["lo"] <= -0.05 <= r["hi"]
    assert 0.85 * 200 <= covered <= 0.99 * 200


def test_ratio():
    rng = np.random.default_rng(3)
    ref = rng.uniform(1, 5, size=(2, 300))
    var = rng.uniform(1, 5, size=(3, 300))
    r = paired_bootstrap(ref, var, stat="ratio")
    assert r["estimate"] == pytest.approx(var.mean() / ref.mean(), rel=1e-12) and r["lo"] < r["estimate"] < r["hi"]
    exact = paired_bootstrap(ref[:1], 0.9 * ref[:1], stat="ratio")  # one seed each, every window 10% lower
    assert exact["estimate"] == pytest.approx(0.9) and exact["lo"] == pytest.approx(0.9)
    assert exact["hi"] == pytest.approx(0.9)


def test_errors():
    with pytest.raises(ValueError, match=r"\(2, 10\).*\(2, 11\)"):
        paired_bootstrap(np.ones((2, 10)), np.ones((2, 11)))
    with pytest.raises(ValueError, match="shapes"):
        paired_bootstrap(np.ones(10), np.ones(10))  # 1-D: which axis is seeds?
    bad = np.ones((2, 10))
    bad[1, 3] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        paired_bootstrap(np.ones((2, 10)), bad)
    with pytest.raises(ValueError, match="stat"):
        paired_bootstrap(np.ones((1, 5)), np.ones((1, 5)), stat="median")


def test_same_seed_same_result():
    rng = np.random.default_rng(4)
    ref, var = rng.normal(size=(3, 100)), rng.normal(size=(2, 100))
    assert paired_bootstrap(ref, var, seed=7) == paired_bootstrap(ref, var, seed=7)
    assert paired_bootstrap(ref, var, seed=7)["lo"] != paired_bootstrap(ref, var, seed=8)["lo"]


@pytest.mark.parametrize("lo, hi, direction, null, expected", [
    (-0.03, -0.01, -1, 0.0, "reproduced"),  # paper: the loss goes down, and it does
    (0.01, 0.03, -1, 0.0, "not reproduced"),
    (-0.01, 0.01, -1, 0.0, "inconclusive"),
    (0.01, 0.03, 1, 0.0, "reproduced"),  # paper: the value goes up
    (-0.03, -0.01, 1, 0.0, "not reproduced"),
    (-0.01, 0.01, 1, 0.0, "inconclusive"),
    (0.0, 0.02, 1, 0.0, "inconclusive"),  # touching the null is not strictly on one side
    (0.90, 0.97, -1, 1.0, "reproduced"),  # a ratio below 1
    (1.02, 1.10, -1, 1.0, "not reproduced"),
    (0.95, 1.05, -1, 1.0, "inconclusive"),
    (1.02, 1.10, 1, 1.0, "reproduced"),
    (None, None, -1, 0.0, "inconclusive"),  # one seed: no interval
    (-0.02, None, -1, 0.0, "inconclusive"),
])
def test_verdict(lo, hi, direction, null, expected):
    assert verdict(lo, hi, direction, null) == expected


def test_verdict_rejects_a_direction_and_rule_is_a_sentence():
    with pytest.raises(ValueError, match="direction"):
        verdict(-1, 1, 0)
    assert isinstance(RULE, str) and len(RULE.split()) > 10 and RULE.rstrip().endswith(".")
    assert "reproduced" in RULE and "inconclusive" in RULE


# ----------------------------------------------------------------------------
# Welch's interval over per-seed means, and compare (what the report uses)

def test_welch_interval_known_case():
    # equal sizes and variances: the pooled t-interval; here by hand: se = sqrt(1/3 + 1/3), df = 4
    lo, hi = welch_interval([1.0, 2.0, 3.0], [2.0, 3.0, 4.0])
    half = 2.776 * math.sqrt(2 / 3)
    assert (lo, hi) == pytest.approx((1 - half, 1 + half))
    lo, hi = welch_interval([1.0, 2.0, 4.0], [2.0, 4.0, 8.0], stat="ratio")  # exactly x2 per seed
    assert lo < 2 < hi and lo * hi == pytest.approx(4.0)  # symmetric on the log scale around log 2
    with pytest.raises(ValueError, match="two or more seeds"):
        welch_interval([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        welch_interval([1.0, -1.0], [1.0, 2.0], stat="ratio")


def test_compare_needs_two_seeds_and_widens_to_welch():
    rng = np.random.default_rng(3)
    windows = rng.normal(0, 1, 500)
    one = compare(windows[None] + 1, windows[None] + 1.2)
    assert not one["conclusive"] and one["estimate"] == pytest.approx(0.2)  # one seed: no verdict by RULE
    # three seeds with a large seed effect and no window noise left after pairing: the bootstrap of 3 runs is too
    # narrow, Welch's interval (t with few degrees of freedom) is wider and is the one reported
    seeds_ref, seeds_var = np.array([0.0, 0.3, -0.3]), np.array([0.25, 0.55, -0.05])
    ref, var = windows[None] + seeds_ref[:, None], windows[None] + seeds_var[:, None]
    boot = paired_bootstrap(ref, var)
    both = compare(ref, var)
    assert both["conclusive"]
    assert (both["lo"], both["hi"]) == pytest.approx(welch_interval(ref.mean(1), var.mean(1)))
    assert both["hi"] - both["lo"] > 1.5 * (boot["hi"] - boot["lo"])
    assert verdict(both["lo"], both["hi"], +1) == "inconclusive"  # 0.25 apart, seeds spread by 0.3

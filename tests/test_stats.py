"""lab/stats.py: the incomplete beta function and the t and beta quantiles (fractional degrees of freedom), Welch's
interval over seeds with one estimand (ratios of geometric means, on the log scale), the verdict with its minimum of
seeds, direction and size against the paper, counts (Clopper-Pearson, Fisher's exact test), and that the rule names
no paired bootstrap (window noise only; it is gone)."""

import math

import numpy as np
import pytest

from lab.stats import (ALPHA, COUNT_RULE, MIN_SEEDS, RULE, SIZE_FACTOR, beta_quantile, betainc, clopper_pearson,
    compare, count_verdict, decide, direction_word, effect, fisher_one_sided, mean_ci, size_word, smallest_fisher_p,
    t_quantile, t_tail, verdict, welch)


# ----------------------------------------------------------------------------
# Distributions

def t_density(t, df):
    return math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi) * \
        (1 + t * t / df) ** (-(df + 1) / 2)


def t_mass(q, df, n=20_000):
    """P(0 < T < q) by Simpson's rule on the density: a reference that shares no code with lab/stats.py."""
    x = np.linspace(0.0, q, n + 1)
    y = np.array([t_density(t, df) for t in x])
    return (q / n) * (y[0] + y[-1] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum()) / 3


@pytest.mark.parametrize("df, expected", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (30, 2.0423), (1e6, 1.95996),
                                          (math.inf, 1.95996)])
def test_t_quantile_known_values(df, expected):
    assert t_quantile(df) == pytest.approx(expected, abs=5e-5)


def test_t_quantile_other_levels():
    assert t_quantile(4, 0.99) == pytest.approx(4.6041, abs=5e-5)
    assert t_quantile(10, 0.90) == pytest.approx(1.8125, abs=5e-5)
    assert t_quantile(math.inf, 0.90) == pytest.approx(1.64485, abs=5e-5)


@pytest.mark.parametrize("df", [0.7, 1.5, 2.7, 7.3, 41.5])
def test_t_quantile_of_fractional_df_matches_the_integrated_density(df):
    """Welch's degrees of freedom are fractional: the quantile leaves 2.5% above it, by integration of the density
    (t(1.5) = 6.0167, between t(1) = 12.71 and t(2) = 4.30)."""
    q = t_quantile(df)
    assert t_mass(q, df) == pytest.approx(0.475, abs=1e-6)
    assert t_tail(q, df) == pytest.approx(0.025, abs=1e-12)
    assert t_quantile(math.floor(df) or 0.5) > q > t_quantile(math.ceil(df))  # between its whole neighbours
    if df == 1.5:
        assert q == pytest.approx(6.0167, abs=5e-4)


def test_t_quantile_decreases_with_df_towards_the_normal():
    dfs = [0.5, 1, 1.2, 1.5, 2, 3, 5, 10, 30, 100, 1e4, math.inf]
    qs = [t_quantile(df) for df in dfs]
    assert all(a > b for a, b in zip(qs, qs[1:]))


@pytest.mark.parametrize("df, level, words", [(0, 0.95, "> 0"), (-3, 0.95, "> 0"), (math.nan, 0.95, "> 0"),
                                              (5, 1.0, "level"), (5, 0.0, "level")])
def test_t_quantile_errors_say_what_is_wrong(df, level, words):
    with pytest.raises(ValueError, match=words):
        t_quantile(df, level)


@pytest.mark.parametrize("df", [0.7, 3, 41.5, math.inf])
def test_t_tail_below_zero_is_the_mirror_image(df):
    """Student's t is symmetric: P(T > -t) = 1 - P(T > t), and P(T > 0) = 1/2."""
    for t in (0.3, 1.0, 2.5):
        assert t_tail(-t, df) == pytest.approx(1 - t_tail(t, df), abs=1e-12) and t_tail(-t, df) > 0.5
    assert t_tail(0.0, df) == pytest.approx(0.5, abs=1e-15)


def binomial_tail(a, b, x):
    """I_x(a, b) for whole a, b: P(Binomial(a + b - 1, x) >= a)."""
    n = a + b - 1
    return sum(math.comb(n, k) * x ** k * (1 - x) ** (n - k) for k in range(a, n + 1))


@pytest.mark.parametrize("a, b", [(1, 1), (2, 3), (5, 1), (1, 7), (10, 4), (20, 20), (3, 50)])
def test_betainc_matches_the_binomial_tail_for_whole_parameters(a, b):
    for x in (0.01, 0.2, 0.4, 0.5, 0.77, 0.99):
        assert betainc(a, b, x) == pytest.approx(binomial_tail(a, b, x), abs=1e-12)


def test_betainc_closed_forms_symmetry_and_edges():
    for x in (0.1, 0.5, 0.9):
        assert betainc(0.5, 1, x) == pytest.approx(math.sqrt(x), abs=1e-13)  # I_x(a, 1) = x^a
        assert betainc(1, 2.5, x) == pytest.approx(1 - (1 - x) ** 2.5, abs=1e-13)  # I_x(1, b) = 1 - (1-x)^b
        assert betainc(0.5, 0.5, x) == pytest.approx(2 / math.pi * math.asin(math.sqrt(x)), abs=1e-12)  # arcsine
        assert betainc(2.3, 0.7, x) == pytest.approx(1 - betainc(0.7, 2.3, 1 - x), abs=1e-13)
    assert betainc(2, 3, 0) == 0 and betainc(2, 3, 1) == 1
    with pytest.raises(ValueError, match="a > 0"):
        betainc(0, 1, 0.5)


def test_beta_quantile_inverts_betainc():
    for a, b in ((1, 20), (19, 2), (0.5, 0.5), (3.5, 7.25)):
        for p in (0.025, 0.5, 0.975):
            assert betainc(a, b, beta_quantile(p, a, b)) == pytest.approx(p, abs=1e-12)
    assert beta_quantile(0, 2, 3) == 0 and beta_quantile(1, 2, 3) == 1


# ----------------------------------------------------------------------------
# Intervals over seeds

def test_mean_ci_by_hand():
    mean, lo, hi = mean_ci([1, 2, 3])  # sd 1, n 3, df 2
    half = 4.302653 / math.sqrt(3)
    assert mean == 2 and lo == pytest.approx(2 - half, abs=1e-6) and hi == pytest.approx(2 + half, abs=1e-6)
    mean, lo, hi = mean_ci(np.array([3.0, 3.0]))
    assert (mean, lo, hi) == (3.0, 3.0, 3.0)


def test_mean_ci_single_seed_has_no_interval():
    assert mean_ci([2.5]) == (2.5, None, None)


@pytest.mark.parametrize("values, words", [([1.0, None, 2.0], "None"), ([1.0, float("nan")], "non-finite"),
                                           ([1.0, float("inf")], "non-finite"), ([], "empty")])
def test_mean_ci_refuses_missing_or_diverged_values(values, words):
    with pytest.raises(ValueError, match=words):
        mean_ci(values)


def test_welch_equal_sizes_and_spreads_is_the_pooled_interval():
    w = welch([1.0, 2.0, 3.0], [2.0, 3.0, 4.0])  # se = sqrt(1/3 + 1/3), df = 4
    half = 2.776445 * math.sqrt(2 / 3)
    assert w["estimate"] == pytest.approx(1.0) and w["df"] == pytest.approx(4.0)
    assert (w["lo"], w["hi"]) == pytest.approx((1 - half, 1 + half), abs=1e-6)


def test_welch_keeps_its_fractional_degrees_of_freedom():
    """ref: variance 1 over 3 seeds, var: variance 8 over 2; Welch-Satterthwaite df = 1.17, not rounded down to 1
    (t = 12.7 there; the interval would be wider by rounding alone)."""
    a, b = [1.0, 2.0, 3.0], [0.0, 4.0]
    va, vb = 1 / 3, 8 / 2
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 1)
    w = welch(a, b)
    assert w["df"] == pytest.approx(df) and 1 < df < 2
    half = t_quantile(df) * math.sqrt(va + vb)
    assert (w["lo"], w["hi"]) == pytest.approx((0 - half, 0 + half))
    assert t_quantile(df) < t_quantile(1) * 0.85  # what rounding down would have added


def test_a_ratio_is_of_geometric_means_with_its_interval_on_the_log_scale():
    ref, var = [1.0, 2.0, 4.0], [2.0, 4.0, 8.0, 16.0]
    w = welch(ref, var, stat="ratio")
    geometric = math.exp(np.mean(np.log(var))) / math.exp(np.mean(np.log(ref)))
    assert w["estimate"] == pytest.approx(geometric) and geometric != pytest.approx(np.mean(var) / np.mean(ref))
    assert w["lo"] < w["estimate"] < w["hi"] and w["lo"] * w["hi"] == pytest.approx(w["estimate"] ** 2)
    logs = welch(np.log(ref), np.log(var))  # the same interval as Welch's of the logs, exponentiated
    assert (w["lo"], w["hi"]) == pytest.approx((math.exp(logs["lo"]), math.exp(logs["hi"])))
    for bad in ([1.0, -1.0], [1.0, 0.0]):  # a zero has no log: refused, not a -inf that turns into a ratio of 0
        with pytest.raises(ValueError, match="positive"):
            welch(bad, [1.0, 2.0], stat="ratio")


def test_welch_takes_one_value_per_seed():
    """A (seeds, windows) array would make each window a seed (df in the hundreds): welch refuses it, and compare
    averages the windows first."""
    windows = np.arange(12.0).reshape(3, 4)
    with pytest.raises(ValueError, match="one value per seed"):
        welch(windows, windows + 1)
    with pytest.raises(ValueError, match="one value per seed"):
        welch([1.0, 2.0, 3.0], windows)
    assert compare(windows, windows + 1)["df"] == pytest.approx(4.0)


def test_welch_with_one_seed_or_a_fixed_value():
    one = welch([1.0], [2.0, 3.0])
    assert one["estimate"] == 1.5 and one["lo"] is one["hi"] is one["df"] is None  # one run: no spread known
    fixed = welch(0.5, [0.2, 0.3, 0.4])  # one sample against a fixed value: mean_ci's interval, shifted
    mean, lo, hi = mean_ci([0.2, 0.3, 0.4])
    assert fixed["df"] == 2 and (fixed["estimate"], fixed["lo"], fixed["hi"]) == pytest.approx((mean - 0.5, lo - 0.5,
                                                                                                 hi - 0.5))


def test_welch_of_seeds_that_agree_is_the_point_with_the_pooled_degrees_of_freedom():
    """No spread on either side: Welch-Satterthwaite's df is 0/0, so the interval is the point and df the pooled
    t-test's n_ref + n_var - 2."""
    w = welch([1.0, 1.0, 1.0], [1.5, 1.5, 1.5, 1.5])
    assert w == {"estimate": 0.5, "lo": 0.5, "hi": 0.5, "df": 5.0}


def test_welch_covers_the_true_difference_with_three_seeds_a_side():
    """Per-seed values with unequal spreads, 3 seeds a side, the true difference 0.05: about 95% of the intervals
    cover it (Welch's interval is approximate: 95.6% here)."""
    rng = np.random.default_rng(0)
    trials, covered = 1000, 0
    for _ in range(trials):
        w = welch(rng.normal(1.0, 0.02, 3), rng.normal(1.05, 0.05, 3))
        covered += w["lo"] <= 0.05 <= w["hi"]
    assert 0.93 * trials <= covered <= 0.975 * trials


def test_compare_averages_each_seed_over_its_windows_and_counts_the_seeds():
    rng = np.random.default_rng(3)
    windows = rng.uniform(1, 2, 400)
    ref = windows[None] * np.array([[1.0], [1.1], [0.9]])
    var = windows[None] * np.array([[0.5], [0.6], [0.55], [0.45]])
    c = compare(ref, var, stat="ratio")
    assert c["var_seeds"] == pytest.approx(var.mean(1).tolist()) and c["n_seeds_ref"] == 3 and c["n_seeds_var"] == 4
    assert c["estimate"] == pytest.approx(welch(ref.mean(1), var.mean(1), "ratio")["estimate"])
    assert c["seeds"] == 3 and c["null"] == 1.0 and effect(c) == pytest.approx(math.log(c["estimate"]))
    assert decide(c, -1) == "reproduced" and decide(c, +1) == "not reproduced"
    two = compare(ref[:2], var)  # an interval from two seeds a side, but no verdict
    assert two["lo"] is not None and two["hi"] < 0 and two["seeds"] == 2 and decide(two, -1) == "too few seeds"
    fixed = compare(0.5, [[0.2, 0.2], [0.3, 0.3], [0.25, 0.25]])  # against a fixed value: the variant's seeds count
    assert fixed["seeds"] == 3 and fixed["ref_seeds"] is None and decide(fixed, -1) == "reproduced"
    assert decide(compare(0.5, [[0.2], [0.3]]), -1) == "too few seeds"


@pytest.mark.parametrize("lo, hi, direction, null, seeds, expected", [
    (-0.03, -0.01, -1, 0.0, 3, "reproduced"),  # paper: the loss goes down, and it does
    (0.01, 0.03, -1, 0.0, 3, "not reproduced"),
    (-0.01, 0.01, -1, 0.0, 3, "inconclusive"),
    (0.01, 0.03, 1, 0.0, 5, "reproduced"),  # paper: the value goes up
    (-0.03, -0.01, 1, 0.0, 3, "not reproduced"),
    (0.0, 0.02, 1, 0.0, 3, "inconclusive"),  # touching the null is not strictly on one side, in either direction
    (-0.02, 0.0, 1, 0.0, 3, "inconclusive"),
    (-0.02, 0.0, -1, 0.0, 3, "inconclusive"),
    (0.0, 0.02, -1, 0.0, 3, "inconclusive"),
    (0.9, 1.0, -1, 1.0, 3, "inconclusive"),
    (0.90, 0.97, -1, 1.0, 3, "reproduced"),  # a ratio below 1
    (1.02, 1.10, -1, 1.0, 3, "not reproduced"),
    (0.95, 1.05, -1, 1.0, 3, "inconclusive"),
    (-0.03, -0.01, -1, 0.0, 2, "too few seeds"),  # a clear interval from two seeds: still no verdict
    (0.01, 0.03, -1, 0.0, 1, "too few seeds"),
    (None, None, -1, 0.0, 3, "too few seeds"),  # no interval
])
def test_verdict(lo, hi, direction, null, seeds, expected):
    assert verdict(lo, hi, direction, null, seeds) == expected


def test_verdict_rejects_a_direction_and_the_rules_say_what_they_decide():
    with pytest.raises(ValueError, match="direction"):
        verdict(-1, 1, 0)
    for words in ("Welch", "geometric means", "log scale", "not rounded", "too few seeds", "inconclusive",
                  f"at least {MIN_SEEDS} seeds", f"factor of {SIZE_FACTOR:g}", "decide nothing"):
        assert words in RULE, words
    assert "bootstrap" not in RULE  # it decides nothing, so the rule does not name it
    for words in ("Clopper-Pearson", "Fisher", f"p < {ALPHA:g}", "too few seeds", "the most extreme counts"):
        assert words in COUNT_RULE, words
    # both rules decide a direction at the same level: one side of the 95% interval, and Fisher's p below ALPHA
    assert ALPHA == pytest.approx((1 - 0.95) / 2) and f"{ALPHA:.1%}" in RULE and "no correction" in RULE
    # the counts COUNT_RULE gives as examples are what smallest_fisher_p says
    assert smallest_fisher_p(3, 3) == pytest.approx(1 / 20) and "their best p is 1/20" in COUNT_RULE
    assert smallest_fisher_p(4, 4) == pytest.approx(1 / 70) and "4 against 4 can (1/70)" in COUNT_RULE


def test_direction_and_size_against_the_paper():
    assert direction_word(-0.03, -1) == "same direction" and direction_word(0.2, -1) == "opposite"
    assert direction_word(math.log(1.3), +1) == "same direction"
    assert direction_word(0.0, -1) == direction_word(0.0, +1) == "no change"  # neither way, whatever the paper says
    assert size_word(-0.03, -0.045) == "same size (within ×2)"  # 2/3 of the paper's
    assert size_word(-0.02, -0.045) == "smaller than the paper's"  # under half
    assert size_word(math.log(0.36), math.log(0.10)) == "smaller than the paper's"  # ×0.36 against ×0.10
    assert size_word(0.1, 0.045) == "larger than the paper's" and size_word(0.09, 0.045) == "same size (within ×2)"
    assert size_word(0.05, -0.1) == "opposite to the paper's" and size_word(0.05, None) is None
    assert size_word(-0.25, -0.5) == "same size (within ×2)"  # exactly half: between half and twice, as twice is
    assert size_word(0.0, -0.1) == size_word(0.1, 0.0) == "no change to compare"  # no sign to be opposite to


# ----------------------------------------------------------------------------
# Counts over seeds

@pytest.mark.parametrize("k, n, lo, hi", [(0, 20, 0.0, 0.1684), (19, 20, 0.7513, 0.9987), (10, 20, 0.2720, 0.7280),
                                          (20, 20, 0.8316, 1.0), (1, 3, 0.0084, 0.9057)])
def test_clopper_pearson_known_values(k, n, lo, hi):
    assert clopper_pearson(k, n) == pytest.approx((lo, hi), abs=1e-4)


def test_clopper_pearson_covers_every_rate_at_least_95_percent():
    """Exact: for any true rate, the probability that k of n gives an interval holding it is at least 95%."""
    n = 12
    intervals = [clopper_pearson(k, n) for k in range(n + 1)]
    for p in np.linspace(0.001, 0.999, 97):
        coverage = sum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k, (lo, hi) in enumerate(intervals)
                       if lo <= p <= hi)
        assert coverage >= 0.95 - 1e-9, p
    with pytest.raises(ValueError, match="0 <= k <= n"):
        clopper_pearson(3, 2)


def test_fisher_one_sided_known_values_and_exactness():
    assert fisher_one_sided(4, 5, 0, 5, "less") == pytest.approx(0.0238, abs=1e-4)  # 5 / 210
    assert fisher_one_sided(0, 5, 4, 5, "greater") == pytest.approx(5 / 210)
    assert fisher_one_sided(19, 20, 0, 20, "less") == pytest.approx(20 / math.comb(40, 19))
    assert fisher_one_sided(4, 5, 0, 5, "greater") == 1.0
    # the two one-sided p's overlap in exactly the observed table's probability
    k_ref, n_ref, k_var, n_var = 6, 10, 3, 9
    point = math.comb(n_var, k_var) * math.comb(n_ref, k_ref) / math.comb(n_ref + n_var, k_ref + k_var)
    assert fisher_one_sided(k_ref, n_ref, k_var, n_var, "less") + \
        fisher_one_sided(k_ref, n_ref, k_var, n_var, "greater") == pytest.approx(1 + point)
    with pytest.raises(ValueError, match="alternative"):
        fisher_one_sided(1, 3, 1, 3, "two-sided")


def test_count_verdict():
    assert count_verdict(4, 5, 0, 5, -1) == {"p": pytest.approx(5 / 210), "p_opposite": 1.0,
                                             "p_smallest": pytest.approx(1 / 252), "verdict": "reproduced"}
    assert count_verdict(4, 5, 0, 5, +1)["verdict"] == "not reproduced"
    assert count_verdict(2, 5, 1, 5, -1)["verdict"] == "inconclusive"
    assert count_verdict(2, 2, 0, 2, -1)["verdict"] == "too few seeds"
    assert count_verdict(0, 20, 19, 20, +1)["verdict"] == "reproduced"
    # 3 seeds a side: even 3 of 3 against 0 of 3 gives p = 1/20, so no count could decide: too few seeds, not
    # "inconclusive" (which would say that the seeds could have decided and did not); 4 a side can, 3 against 4 not
    assert count_verdict(3, 3, 0, 3, -1)["verdict"] == "too few seeds"
    assert count_verdict(3, 3, 0, 4, -1) == {"p": pytest.approx(1 / 35), "p_opposite": 1.0,
                                             "p_smallest": pytest.approx(1 / 35), "verdict": "too few seeds"}
    assert count_verdict(4, 4, 0, 4, -1)["verdict"] == "reproduced"
    assert count_verdict(4, 4, 1, 4, -1) == {"p": pytest.approx(4 / 56), "p_opposite": 1.0,
                                             "p_smallest": pytest.approx(1 / 70), "verdict": "inconclusive"}
    # fewer than MIN_SEEDS on one side is too few, however many the other side has (2 against 20 could give 1/231)
    assert count_verdict(2, 2, 0, 20, -1)["verdict"] == "too few seeds"
    # at a level of its own: p must be below alpha, not equal to it; and with 3 a side at alpha = 1/20, the best
    # p these seeds can give (1/20) is not below it either: too few seeds
    assert count_verdict(4, 4, 1, 4, -1, alpha=4 / 56)["verdict"] == "inconclusive"
    assert count_verdict(4, 4, 1, 4, -1, alpha=4 / 56 + 1e-9)["verdict"] == "reproduced"
    assert count_verdict(3, 3, 0, 3, -1, alpha=1 / 20)["verdict"] == "too few seeds"
    # each direction at ALPHA = 0.025: 4 of 5 against 0 of 5 (p = 5/210 = 0.024) decides, 5 of 6 against 1 of 6
    # (p = 37/924 = 0.040) does not
    assert count_verdict(5, 6, 1, 6, -1)["p"] == pytest.approx(37 / 924)
    assert count_verdict(5, 6, 1, 6, -1)["verdict"] == "inconclusive"


def test_a_non_finite_window_is_named_in_one_short_line():
    """A (seeds, windows) array with one NaN: where it is, not every value (the report stops on it in one line)."""
    windows = np.ones((3, 2048))
    windows[1, 5] = np.nan
    with pytest.raises(ValueError, match=r"1 non-finite value\(s\) of 6144, the first nan at index \(1, 5\)") as e:
        compare(np.ones((3, 2048)), windows)
    assert len(str(e.value)) < 200
    with pytest.raises(ValueError, match=r"the first inf at index 1 \(a diverged run\?\)"):  # one seed's index
        compare([1.0, 2.0, 3.0], [1.0, math.inf, 2.0])
    with pytest.raises(ValueError, match=r"the first nan \(a diverged run\?\)"):  # a single number: no index
        mean_ci(math.nan)


def test_t_quantile_at_huge_df_is_the_normal_s_plus_its_correction():
    """lgamma's differences lose digits at df ~ 1e9 and up (2.25 for 2.576 at 1e15): scipy's quantiles."""
    for df, level, expected in ((1e15, 0.99, 2.5758293035489), (1e10, 0.95, 1.9599639847), (1e6, 0.95, 1.9599663566)):
        assert t_quantile(df, level) == pytest.approx(expected, rel=1e-9)


def test_a_ratio_whose_interval_overflows_is_one_line():
    with pytest.raises(ValueError, match="orders of magnitude"):
        compare([1e-300, 0.5, 0.4], [0.5, 0.5, 0.6], "ratio")

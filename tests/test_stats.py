"""The one statistics module (trainers.stats): L5 without update 0, AUC, paired t, MDE."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from trainers.stats import l5, mde, normalized_auc, seeds_needed


def test_l5_skips_update_zero_and_takes_the_last_five() -> None:
    # evaluations at 0, 5, ..., 30: update 0 (0.9) never counts; the last five of
    # [.1, .2, .3, .4, .5, .6] are .2..6, mean 0.4
    updates = [0, 5, 10, 15, 20, 25, 30]
    assert l5(updates, [0.9, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]) == pytest.approx(0.4)
    # fewer than five scheduled evaluations: all of them, still without update 0
    assert l5([0, 3, 6], [1.0, 0.5, 0.0]) == pytest.approx(0.25)
    # order of the records does not matter
    assert l5([6, 0, 3], [0.0, 1.0, 0.5]) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="after update 0"):
        l5([0], [0.3])


def test_normalized_auc_by_hand() -> None:
    # trapezoid over updates [0, 5, 10, 20] with success [0, .2, .4, .4]:
    # areas 5·0.1 + 5·0.3 + 10·0.4 = 6; span 20 → 0.3
    assert normalized_auc([0, 5, 10, 20], [0, 0.2, 0.4, 0.4]) == pytest.approx(0.3)
    assert normalized_auc([3], [0.7]) == pytest.approx(0.7)
    with pytest.raises(ValueError, match="increasing"):
        normalized_auc([0, 5, 5], [0, 1, 1])


def test_mde_matches_the_textbook_approximation_and_a_simulation() -> None:
    sd, n = 10.0, 12
    d = mde(sd, n)
    # the usual approximation (t_{1-α/2} + t_{power}) · sd / √n, df = n − 1
    approx = (sps.t.ppf(0.975, n - 1) + sps.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)
    assert d == pytest.approx(approx, rel=0.02)
    # at that true difference a paired two-sided t-test rejects 80 % of the time
    rng = np.random.default_rng(0)
    diffs = rng.normal(d, sd, size=(40_000, n))
    t = diffs.mean(axis=1) / (diffs.std(axis=1, ddof=1) / math.sqrt(n))
    power = float(np.mean(np.abs(t) > sps.t.ppf(0.975, n - 1)))
    assert power == pytest.approx(0.8, abs=0.01)
    assert mde(0.0, 5) == 0.0 and math.isnan(mde(float("nan"), 5)) and math.isnan(mde(3.0, 1))


def test_seeds_needed_inverts_mde() -> None:
    n = seeds_needed(sd=10.0, delta=5.0)
    assert mde(10.0, n) <= 5.0 < mde(10.0, n - 1)
    assert n == 34  # and the "~40 seeds" for a paired SD of 11 points:
    assert seeds_needed(sd=11.0, delta=5.0) == 40


def test_wilson_bounds_are_exact_at_none_and_all() -> None:
    """0 of 6 gave a lower bound of 2.78e-17 (and 10 of 10 an upper bound of 1 − 1e-16), which
    results.json carried; Wilson's interval is exactly 0 (1) there."""
    from trainers.stats import proportion_interval

    for n in range(1, 60):
        assert proportion_interval(0, n)[0] == 0.0 and proportion_interval(n, n)[1] == 1.0
    assert proportion_interval(0, 6)[1] == pytest.approx(0.390334, abs=1e-6)
    assert 0 < proportion_interval(1, 6)[0] < proportion_interval(1, 6)[1] < 1


def test_reports_write_results_json_without_float_noise() -> None:
    from trainers.report import clean_floats

    assert clean_floats({"lo": 2.7755575615628914e-17, "hi": 0.9999999999999999, "d": [0.1 + 0.2, -1e-15]}) == {
        "lo": 0.0, "hi": 1.0, "d": [0.3, 0.0]}
    assert math.isnan(clean_floats(float("nan")))

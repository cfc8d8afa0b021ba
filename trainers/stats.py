"""The statistics of every report (SPEC §6): L5, normalised AUC, paired Student-t
intervals and the minimum detectable difference, on scipy.

* **L5** = mean of the last five *scheduled* evaluations [MCGPO Eq. 14]; the evaluation
  before training (update 0) is not a scheduled one and never counts, so two methods that
  share their start are not pulled together by it.
* **Normalised AUC** = trapezoid area under the success curve (update 0 included) over its
  span of updates [MCGPO Eq. 15]: the mean success over training.
* **Paired interval**: mean, sample SD and the Student-t interval (df = n − 1) of paired
  differences (pairs = training seeds).
* **Minimum detectable difference** (MDE): the smallest true mean difference a paired
  two-sided t-test at level α detects with the given power, at the observed SD of the
  differences and n pairs, from the noncentral t distribution (exact, not the normal
  approximation).  ``seeds_needed`` inverts it.

Example:
    >>> round(l5([0, 5, 10, 15, 20, 25, 30], [0.9, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]), 3)
    0.4
    >>> round(normalized_auc([0, 5, 10], [0.0, 0.5, 1.0]), 3)
    0.5
    >>> m, sd, lo, hi = paired_interval([0.1, 0.2, 0.3])
    >>> round(m, 3), round(sd, 3), round(lo, 3), round(hi, 3)   # t(0.975, 2) = 4.3027
    (0.2, 0.1, -0.048, 0.448)
    >>> round(mde(sd=10.0, n=10), 2)   # ≈ (t_.975,9 + t_.8,9)·10/√10 = (2.262 + 0.883)·3.162 = 9.95
    9.96
    >>> seeds_needed(sd=10.0, delta=5.0)
    34
    >>> [round(x, 4) for x in proportion_interval(7, 10)]   # Wilson: (7 + 1.92 ± 1.96·√(2.1 + 0.96)) / 13.84
    [0.3968, 0.8922]
    >>> [round(x, 3) for x in mean_interval([1.0, 2.0, 3.0])]
    [-0.484, 4.484]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["l5", "mde", "mean_interval", "normalized_auc", "paired_interval", "proportion_interval", "seeds_needed"]


def l5(updates: Sequence[float], values: Sequence[float], window: int = 5) -> float:
    """Mean of the last ``window`` evaluations after update 0 [MCGPO Eq. 14].

    Raises:
        ValueError: different lengths, or no evaluation after update 0.
    """
    x = np.asarray(updates, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError("l5 needs equally long updates and values")
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    scheduled = y[x > 0]
    if scheduled.size == 0:
        raise ValueError("l5 needs at least one evaluation after update 0")
    return float(scheduled[-window:].mean())


def normalized_auc(updates: Sequence[float], values: Sequence[float]) -> float:
    """Trapezoidal area under the curve divided by the span of ``updates`` (0–1 for success).

    A single evaluation has no span; its value is returned.
    """
    x = np.asarray(updates, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    if x.shape != y.shape or x.size == 0:
        raise ValueError("normalized_auc needs equally long, non-empty updates and values")
    if x.size == 1 or x[-1] == x[0]:
        return float(y.mean())
    if np.any(np.diff(x) <= 0):
        raise ValueError("updates must be strictly increasing")
    area = float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2.0)
    return area / float(x[-1] - x[0])


def paired_interval(diffs: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float, float]:
    """Mean, sample SD and the Student-t interval (df = n − 1) of paired differences.

    With one difference the SD and the interval are NaN.
    """
    from scipy import stats

    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0:
        raise ValueError("paired_interval needs at least one difference")
    mean = float(d.mean())
    if d.size < 2:
        return mean, float("nan"), float("nan"), float("nan")
    sd = float(d.std(ddof=1))
    half = float(stats.t.ppf(0.5 + confidence / 2.0, d.size - 1)) * sd / math.sqrt(d.size)
    return mean, sd, mean - half, mean + half


def _power(delta: float, sd: float, n: int, alpha: float) -> float:
    from scipy import stats

    df = n - 1
    crit = float(stats.t.ppf(1.0 - alpha / 2.0, df))
    nc = delta / (sd / math.sqrt(n))
    p = float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))
    if math.isnan(p):  # scipy's noncentral t underflows far in the tail
        return 1.0 if nc > crit else 0.0
    return p


def mde(sd: float, n: int, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Minimum detectable mean difference of a paired two-sided t-test.

    Args:
        sd: SD of the paired differences (same unit as the result).
        n: Number of pairs (seeds), ≥ 2.
        alpha: Test level.
        power: Required power.

    Returns:
        The difference detected with probability ``power``; NaN when ``sd`` is NaN or n < 2.
    """
    from scipy import optimize

    if n < 2 or not math.isfinite(sd):
        return float("nan")
    if sd == 0:
        return 0.0
    hi = sd
    while _power(hi, sd, n, alpha) < power:
        hi *= 2.0
    return float(optimize.brentq(lambda d: _power(d, sd, n, alpha) - power, 0.0, hi, xtol=1e-10 * sd))


def seeds_needed(sd: float, delta: float, *, alpha: float = 0.05, power: float = 0.8, limit: int = 10_000) -> int:
    """The fewest pairs whose :func:`mde` is at most ``delta`` (``limit`` if none below it)."""
    if delta <= 0 or not math.isfinite(sd):
        raise ValueError("seeds_needed needs delta > 0 and a finite sd")
    n = 2
    while n < limit and mde(sd, n, alpha=alpha, power=power) > delta:
        n += 1
    return n


def proportion_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a success rate (sound at 0 and n successes, unlike Wald's)."""
    from scipy import stats as st

    if n <= 0:
        return (float("nan"), float("nan"))
    z = float(st.norm.ppf(0.5 + confidence / 2))
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # at 0 (n) successes the bound is exactly 0 (1); centre − half only rounds to it (2.8e-17)
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return (lo, hi)


def mean_interval(values: Sequence[float], confidence: float = 0.95,
                  bounds: tuple[float, float] | None = None) -> tuple[float, float]:
    """Student-t interval of a mean (df = n − 1; NaN for a single value), clipped to the
    metric's ``bounds`` when given (a rate's t interval can otherwise reach below 0).

    >>> [round(x, 3) for x in mean_interval([0.0] * 9 + [1.0], bounds=(0.0, 1.0))]
    [0.0, 0.326]
    """
    _m, _sd, lo, hi = paired_interval(values, confidence)
    if bounds is not None and not math.isnan(lo):
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return (lo, hi)

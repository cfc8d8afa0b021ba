"""Evaluation summaries (SPEC §6; MCGPO App. C): episode metrics, L5, normalised AUC and
paired Student-t intervals across seeds.

Example:
    >>> round(l5([(0, 0.0), (5, 0.2), (10, 0.4), (15, 0.4), (20, 0.5), (25, 0.5)]), 3)
    0.4
    >>> normalized_auc([(0, 0.0), (10, 1.0)])  # trapezoid area 5 over a span of 10
    0.5
    >>> mean, sd, lo, hi = paired_interval([1.0, 2.0, 3.0], [0.0, 1.0, 1.0])
    >>> round(mean, 4), round(lo, 4), round(hi, 4)
    (1.3333, -0.1009, 2.7676)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["episode_metrics", "l5", "normalized_auc", "paired_interval", "t_quantile_975"]

# two-sided 95 % Student-t quantiles t_{0.975, df} for df = 1..30
_T975 = [12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
         2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
         2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423]


def t_quantile_975(df: int) -> float:
    """t_{0.975, df}: exact table up to df = 30, then a Cornish-Fisher expansion."""
    if df < 1:
        raise ValueError("df must be ≥ 1")
    if df <= 30:
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def episode_metrics(episodes: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Success, score, invalid-action rate, mean steps and per-task-type success.

    Args:
        episodes: dicts with ``success`` (bool), ``score`` (float), ``steps`` (int),
            ``invalid`` (int) and optionally ``task_type`` and ``rubric`` (the final rubric
            channel values; averaged into ``rubric/<channel>``, e.g. the share of episodes
            that ever held the target).
    """
    n = len(episodes)
    if n == 0:
        return {"episodes": 0}
    steps = sum(e["steps"] for e in episodes)
    out: dict[str, float] = {
        "episodes": n,
        "success": sum(bool(e["success"]) for e in episodes) / n,
        "score": sum(float(e["score"]) for e in episodes) / n,
        "mean_steps": steps / n,
        "invalid_rate": sum(e["invalid"] for e in episodes) / max(1, steps),
    }
    types: dict[str, list[bool]] = {}
    for e in episodes:
        if e.get("task_type") is not None:
            types.setdefault(str(e["task_type"]), []).append(bool(e["success"]))
    for t, v in sorted(types.items()):
        out[f"success/{t}"] = sum(v) / len(v)
    channels: dict[str, list[float]] = {}
    for e in episodes:
        for name, value in (e.get("rubric") or {}).items():
            channels.setdefault(str(name), []).append(float(value))
    for name, v in sorted(channels.items()):
        out[f"rubric/{name}"] = sum(v) / len(v)
    return out


def l5(curve: Sequence[tuple[float, float]]) -> float:
    """Mean of the last five scheduled evaluations [MCGPO Eq. 14] (fewer if fewer exist)."""
    if not curve:
        return float("nan")
    last = sorted(curve)[-5:]
    return sum(v for _, v in last) / len(last)


def normalized_auc(curve: Sequence[tuple[float, float]]) -> float:
    """Trapezoid area under the success curve divided by its update span [MCGPO Eq. 15]."""
    pts = sorted(curve)
    if len(pts) < 2:
        return pts[0][1] if pts else float("nan")
    area = sum((x1 - x0) * (y0 + y1) / 2 for (x0, y0), (x1, y1) in zip(pts, pts[1:]))
    span = pts[-1][0] - pts[0][0]
    return area / span if span > 0 else pts[-1][1]


def paired_interval(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float, float]:
    """Mean, sample SD and 95 % paired Student-t interval (df = n − 1) of ``a − b``."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError("paired_interval needs two sequences of the same length ≥ 2")
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return mean, sd, mean - half, mean + half

"""Evaluation summaries of trainer runs (SPEC §6; MCGPO App. C): episode metrics, and
L5 / normalised AUC / paired intervals of ``(update, success)`` curves — thin adapters over
:mod:`trainers.stats`, the statistics of every report (L5 never counts update 0).

Example:
    >>> round(l5([(0, 0.9), (5, 0.2), (10, 0.4), (15, 0.4), (20, 0.5), (25, 0.5)]), 3)
    0.4
    >>> normalized_auc([(0, 0.0), (10, 1.0)])  # trapezoid area 5 over a span of 10
    0.5
    >>> mean, sd, lo, hi = paired_interval([1.0, 2.0, 3.0], [0.0, 1.0, 1.0])
    >>> round(mean, 4), round(lo, 4), round(hi, 4)
    (1.3333, -0.1009, 2.7676)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainers import stats

__all__ = ["episode_metrics", "l5", "normalized_auc", "paired_interval"]

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
    """Mean of the last five scheduled evaluations after update 0 [MCGPO Eq. 14] (NaN if none)."""
    if not any(u > 0 for u, _ in curve):
        return float("nan")
    return stats.l5([u for u, _ in curve], [v for _, v in curve])


def normalized_auc(curve: Sequence[tuple[float, float]]) -> float:
    """Trapezoid area under the success curve divided by its update span [MCGPO Eq. 15]."""
    if not curve:
        return float("nan")
    pts = sorted(curve)
    return stats.normalized_auc([u for u, _ in pts], [v for _, v in pts])


def paired_interval(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float, float]:
    """Mean, sample SD and 95 % paired Student-t interval (df = n − 1) of ``a − b``."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError("paired_interval needs two sequences of the same length ≥ 2")
    return stats.paired_interval([x - y for x, y in zip(a, b)])

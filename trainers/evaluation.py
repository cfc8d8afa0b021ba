"""The metrics of one validation's episodes (SPEC §6): success, score, steps, invalid-action
rate, per-task-type success and rubric progress.  Curves over updates (L5, normalised AUC,
paired intervals) are :mod:`trainers.stats`, read by :func:`trainers.report.readouts`.

Example:
    >>> m = episode_metrics([{"success": True, "score": 1.0, "steps": 4, "invalid": 1, "task_type": "clean"},
    ...                      {"success": False, "score": 0.0, "steps": 6, "invalid": 0, "task_type": "clean"}])
    >>> m["success"], m["mean_steps"], m["invalid_rate"], m["success/clean"]
    (0.5, 5.0, 0.1, 0.5)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["episode_metrics"]

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

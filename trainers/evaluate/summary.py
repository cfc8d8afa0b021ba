"""An eval run's summary (``results.json``, the printed table, ``--json``) and its per-task
files (``tasks.jsonl``, ``tasks.csv``).

The summary holds success (Wilson 95 % interval), score and steps (Student-t 95 % intervals,
clipped to [0, 1] and to the steps observed), the invalid-action rate; success, score and steps
per task type; the mean final rubric channels with their unit (``units``: a ``bool`` channel's
mean is the share of episodes that ended with it true, a ``count`` channel's is a mean count,
a ``graded`` one's a mean in [0, 1]); token totals (and their cost at the prices per million
tokens the caller gives); seconds per decision (mean, median, 95th percentile, max) and per
episode; agent errors; the panel's name and hash.

Example:
    >>> rubric_unit("alfworld", "target_acquired"), rubric_unit("alfworld", "solved")
    ('mean count', 'share of episodes')
    >>> episode_cost(1_000_000, 200_000, (0.5, 2.0))   # USD: 1M prompt at 0.5 + 0.2M at 2.0
    0.9
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trainers import stats
from trainers.evaluate.folder import EpisodeResult
from trainers.evaluation import episode_metrics

__all__ = ["TASK_COLUMNS", "episode_cost", "rubric_unit", "summarize", "task_rows", "tasks_csv"]

_UNITS = {"bool": "share of episodes", "count": "mean count", "graded": "mean, 0-1"}

#: The columns of ``tasks.csv`` before the rubric channels (``rubric/<name>``).
TASK_COLUMNS = ("index", "task_id", "task_type", "success", "score", "steps", "invalid", "truncated", "error",
                "prompt_tokens", "completion_tokens", "cost_usd", "wall_s", "latency_mean_s")


def rubric_unit(env: str, channel: str) -> str:
    """What the mean of a final rubric channel over episodes is (``"mean"`` for an unknown one)."""
    from rubrics.channels import channel_schema

    try:  # an environment id's first part ("ALFWorld-Rubric-v0") or the environment's name
        schema = channel_schema(env.split("-", 1)[0])
    except ValueError:
        return "mean"
    return _UNITS.get(schema[channel].kind, "mean") if channel in schema else "mean"


def episode_cost(prompt_tokens: int | None, completion_tokens: int | None,
                 prices: tuple[float, float] | None) -> float | None:
    """USD of an episode's tokens at ``prices`` (prompt, completion) per million tokens."""
    if prices is None or (prompt_tokens is None and completion_tokens is None):
        return None
    return round(((prompt_tokens or 0) * prices[0] + (completion_tokens or 0) * prices[1]) / 1e6, 9)


def _finite(values: Sequence[float]) -> list[float | None]:
    return [x if not math.isnan(x) else None for x in values]


def summarize(results: Sequence[EpisodeResult], panel: Any, *, prices: tuple[float, float] | None = None,
              wall_s: float | None = None, played: int | None = None) -> dict[str, Any]:
    """The summary of ``results`` on ``panel`` (module doc).

    Args:
        prices: USD per million prompt and completion tokens (adds ``cost_usd``).
        wall_s, played: Seconds this invocation took and the episodes it played (resumed ones
            are not played again).
    """
    n = len(results)
    out: dict[str, Any] = {"panel": panel.name, "hash": panel.hash, "episodes": n,
                           "errors": sum(r.error is not None for r in results)}
    if wall_s is not None:
        out.update(wall_s=round(wall_s, 3), played=played)
    if not n:
        return out
    rows = [{"success": r.success, "score": r.score, "steps": r.steps, "invalid": r.invalid,
             "task_type": r.task_type, "rubric": r.rubric} for r in results]
    out.update(episode_metrics(rows))
    out["success_ci"] = list(stats.proportion_interval(sum(r.success for r in results), n))
    steps = [r.steps for r in results]
    out["score_ci"] = _finite(stats.mean_interval([r.score for r in results], bounds=(0.0, 1.0)))
    out["steps_ci"] = _finite(stats.mean_interval(steps, bounds=(min(steps), max(steps))))
    out.update(_per_type(results))
    env = getattr(getattr(panel, "spec", None), "env_id", "") or ""
    out["units"] = {k: rubric_unit(env, k.split("/", 1)[1]) for k in out if k.startswith("rubric/")}
    out.update(_tokens(results, prices))
    out.update(_timings(results))
    return out


def _per_type(results: Sequence[EpisodeResult]) -> dict[str, float]:
    """Episodes, mean score and mean steps per task type (success per type: episode_metrics)."""
    types: dict[str, list[EpisodeResult]] = {}
    for r in results:
        if r.task_type is not None:
            types.setdefault(r.task_type, []).append(r)
    out: dict[str, float] = {}
    for t, rs in sorted(types.items()):
        out[f"episodes/{t}"] = len(rs)
        out[f"score/{t}"] = sum(r.score for r in rs) / len(rs)
        out[f"steps/{t}"] = sum(r.steps for r in rs) / len(rs)
    return out


def _tokens(results: Sequence[EpisodeResult], prices: tuple[float, float] | None) -> dict[str, Any]:
    counted = [r for r in results if r.prompt_tokens is not None or r.completion_tokens is not None]
    if not counted:
        return {}
    prompt = sum(r.prompt_tokens or 0 for r in counted)
    completion = sum(r.completion_tokens or 0 for r in counted)
    out: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion, "token_episodes": len(counted),
                           "tokens_per_episode": (prompt + completion) / len(counted)}
    if prices is not None:
        cost = episode_cost(prompt, completion, prices)
        out.update(price_per_1m_tokens={"prompt": prices[0], "completion": prices[1]}, cost_usd=cost,
                   cost_per_episode_usd=round(cost / len(counted), 9))
    return out


def _timings(results: Sequence[EpisodeResult]) -> dict[str, Any]:
    latencies = np.asarray([x for r in results for x in r.latency_s], dtype=np.float64)
    walls = [r.wall_s for r in results if r.wall_s is not None]
    out: dict[str, Any] = {}
    if latencies.size:
        out.update(decisions_timed=int(latencies.size), latency_mean_s=round(float(latencies.mean()), 4),
                   latency_p50_s=round(float(np.percentile(latencies, 50)), 4),
                   latency_p95_s=round(float(np.percentile(latencies, 95)), 4),
                   latency_max_s=round(float(latencies.max()), 4))
    if walls:
        out["episode_wall_mean_s"] = round(sum(walls) / len(walls), 4)
    return out


def task_rows(results: Sequence[EpisodeResult], prices: tuple[float, float] | None = None) -> list[dict[str, Any]]:
    """One row per episode (``tasks.jsonl``): :data:`TASK_COLUMNS` and its final ``rubric``."""
    rows = []
    for r in results:
        mean = round(sum(r.latency_s) / len(r.latency_s), 4) if r.latency_s else None
        rows.append({"index": r.index, "task_id": r.task_id, "task_type": r.task_type, "success": r.success,
                     "score": r.score, "steps": r.steps, "invalid": r.invalid, "truncated": r.truncated,
                     "error": r.error, "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
                     "cost_usd": episode_cost(r.prompt_tokens, r.completion_tokens, prices), "wall_s": r.wall_s,
                     "latency_mean_s": mean, "rubric": dict(r.rubric)})
    return rows


def tasks_jsonl(rows: Sequence[Mapping[str, Any]]) -> str:
    """``tasks.jsonl``: one JSON object per episode."""
    return "".join(json.dumps(row) + "\n" for row in rows)


def tasks_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """``tasks.csv``: :data:`TASK_COLUMNS`, then one ``rubric/<name>`` column per channel (empty:
    unknown or not recorded)."""
    channels = sorted({name for row in rows for name in row["rubric"]})
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*TASK_COLUMNS, *(f"rubric/{c}" for c in channels)])
    for row in rows:
        cells = [row[c] for c in TASK_COLUMNS] + [row["rubric"].get(c) for c in channels]
        writer.writerow(["" if v is None else v for v in cells])
    return buf.getvalue()


def write_task_files(out: Path, results: Sequence[EpisodeResult], prices: tuple[float, float] | None) -> None:
    """Write ``tasks.jsonl`` and ``tasks.csv`` (atomically) into the run folder ``out``."""
    from trainers.report import write_text_atomic

    rows = task_rows(results, prices)
    write_text_atomic(out / "tasks.jsonl", tasks_jsonl(rows))
    write_text_atomic(out / "tasks.csv", tasks_csv(rows))

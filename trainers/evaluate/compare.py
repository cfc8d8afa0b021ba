"""``rubricgym eval compare DIR...``: eval runs of one panel, paired task by task.

The first folder is the baseline; every other run is paired with it on the tasks both finished
(without an agent error), and for success, score and steps the mean paired difference (run −
baseline) gets its Student-t 95 % interval and the minimum detectable difference at 80 % power
(:func:`trainers.stats.paired_interval`, :func:`trainers.stats.mde`): the tasks are the pairs,
so the task-to-task spread that both runs share cancels.  Success also gets the tasks only the
run solved and only the baseline solved.  Runs played with different settings (a step limit,
the prompt, the action format) are compared with a warning.

Runs are paired only on the same panel hash (the same games, goals and engine): folders of
different hashes are refused, naming each folder's panel and hash.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainers import stats
from trainers.evaluate.folder import EpisodeResult, RunFolderError, load_run

__all__ = ["METRICS", "compare_runs"]

#: The per-task metrics compared.
METRICS = ("success", "score", "steps")
#: The settings that change what an agent is asked (a comparison warns when runs differ in them).
PLAY_SETTINGS = ("max_steps", "style", "history_length", "list_actions", "action_format", "system")


def _none_if_nan(x: float) -> float | None:
    return None if math.isnan(x) else x


def _run_row(path: Path, header: dict[str, Any], results: Sequence[EpisodeResult]) -> dict[str, Any]:
    n = len(results)
    settings = header.get("settings") if isinstance(header.get("settings"), dict) else {}
    row: dict[str, Any] = {"dir": str(path), "agent": header["agent"]["name"], "tasks": header["tasks"],
                           "finished": n, "play": {k: settings.get(k) for k in PLAY_SETTINGS}}
    for metric in METRICS:
        row[metric] = sum(float(getattr(r, metric)) for r in results) / n if n else None
    counted = [r for r in results if r.prompt_tokens is not None or r.completion_tokens is not None]
    if counted:
        row["tokens_per_episode"] = sum((r.prompt_tokens or 0) + (r.completion_tokens or 0) for r in counted) / len(counted)
    return row


def _paired(base: dict[str, EpisodeResult], run: Sequence[EpisodeResult], metric: str) -> dict[str, Any]:
    pairs = [(base[r.task_id], r) for r in run if r.task_id in base]
    x = [float(getattr(b, metric)) for b, _ in pairs]
    y = [float(getattr(r, metric)) for _, r in pairs]
    mean, sd, lo, hi = stats.paired_interval([b - a for a, b in zip(x, y)])
    return {"metric": metric, "baseline": sum(x) / len(x), "run": sum(y) / len(y), "diff": mean,
            "ci": [_none_if_nan(lo), _none_if_nan(hi)], "sd": _none_if_nan(sd),
            "mde": _none_if_nan(stats.mde(sd, len(pairs)))}


def _comparison(base: dict[str, EpisodeResult], path: Path, run: Sequence[EpisodeResult]) -> dict[str, Any]:
    pairs = [(base[r.task_id], r) for r in run if r.task_id in base]
    return {"dir": str(path), "pairs": len(pairs),
            "unpaired": len(base) + len(run) - 2 * len(pairs),
            "only_run_solved": sum(r.success and not b.success for b, r in pairs),
            "only_baseline_solved": sum(b.success and not r.success for b, r in pairs),
            "metrics": [_paired(base, run, m) for m in METRICS]}


def _check_hashes(runs: Sequence[tuple[Path, dict[str, Any], list[EpisodeResult]]]) -> None:
    if len({header["hash"] for _, header, _ in runs}) > 1:
        listed = "; ".join(f"{path}: {header['panel']} hash {header['hash'][:12]}" for path, header, _ in runs)
        raise RunFolderError(f"these runs were played on different panel hashes and cannot be paired task by "
                             f"task ({listed}); compare runs of one panel hash")


def compare_runs(dirs: Sequence[str | Path]) -> dict[str, Any]:
    """The baseline (first folder) and every other run paired with it (module doc).

    Raises:
        RunFolderError: a folder is not an eval run or is damaged, the panel hashes differ, or
            a run shares no finished task with the baseline.
        ValueError: fewer than two folders.
    """
    if len(dirs) < 2:
        raise ValueError(f"compare needs two run folders or more (the first is the baseline), got {len(dirs)}")
    runs = [(Path(d), *load_run(Path(d))) for d in dirs]
    _check_hashes(runs)
    base_path, header, base_results = runs[0]
    base = {r.task_id: r for r in base_results}
    out: dict[str, Any] = {"panel": header["panel"], "hash": header["hash"],
                           "runs": [_run_row(p, h, rs) for p, h, rs in runs], "comparisons": []}
    plays = {json.dumps(row["play"], sort_keys=True) for row in out["runs"]}
    out["warnings"] = ([] if len(plays) == 1 else
                       [f"the runs were played with different settings ({', '.join(PLAY_SETTINGS)}): see runs[].play"])
    for path, _header, results in runs[1:]:
        if not any(r.task_id in base for r in results):
            raise RunFolderError(f"{path} and {base_path} have no finished task in common; nothing to pair")
        out["comparisons"].append(_comparison(base, path, results))
    return out

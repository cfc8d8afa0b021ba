"""How much of an arena comparison's noise is validation noise, and what removes it per CPU-second?

Reads arena folders whose runs validated with several episodes per task
(``--val-episodes k``) and often (``--eval-every e``): every run's ``eval`` records keep the
success rate of each episode index (``success_by_episode``), and episode 0 of a k-episode
validation draws the noise a one-episode validation draws.  So one folder answers, for every
*scheme* (episodes per task used, which validations L5 averages), what the paired SD of
``method − baseline`` L5 would have been, and what a run of that scheme costs:

    cost = training CPU-s + validation CPU-s × (episodes the scheme plays / episodes played)

(validation seconds are scaled by episodes; memo hits make that an estimate).  A folder of
greedy runs (``--eval-temperature 0``) of the same setting and seeds adds the greedy schemes.
``d`` is the standardised effect (mean / SD: the power to see *this* difference, whatever the
scale of the points), ``seeds@5`` the seeds a 5-point MDE needs at that SD
(``trainers.stats.seeds_needed``) and ``CPU-s@5`` the CPU-seconds of that many runs of one method.

Usage (the folders of docs/results/arena-validation.md)::

    rubricgym arena --estimators grpo,gigpo --variants '' --seeds 16 --val-episodes 4 --eval-every 2 -o noiseK
    rubricgym arena --estimators grpo,gigpo --variants '' --seeds 16 --eval-temperature 0 --eval-every 2 -o noiseG
    python bench/arena_eval_noise.py noiseK --greedy noiseG --method gigpo --baseline grpo
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def _load(folder: Path, method: str) -> dict[int, list[dict]]:
    """seed -> the run's records (in the metric schema), for every run of ``method``."""
    out = {}
    for path in sorted((folder / "runs").glob(f"{method}__seed*/metrics.jsonl")):
        seed = int(path.parent.name.rsplit("seed", 1)[1])
        out[seed] = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return out


def _l5(records: list[dict], updates: set[int], episodes: int) -> float:
    """L5 (``trainers.stats.l5``: every scheme averages at most five) of the validations at
    ``updates``, each using its first ``episodes`` episodes per task."""
    from trainers.stats import l5

    chosen = [r for r in records if r["phase"] == "eval" and r["update"] in updates]
    if len(chosen) != len(updates) or len(updates) > 5:
        raise SystemExit(f"a run lacks validations at updates {sorted(updates)}, or they are more than five")
    vals = [float(np.mean(r.get("success_by_episode", [r["success"]])[:episodes])) for r in chosen]
    return 100.0 * l5([r["update"] for r in chosen], vals)


def _cost(records: list[dict], updates: set[int], episodes: int) -> float:
    """CPU-s estimate of a run under the scheme (see the module docstring)."""
    evals = [r for r in records if r["phase"] == "eval"]
    end = records[-1]
    eval_s = sum(r.get("eval_s", 0.0) for r in evals)
    played = sum(r.get("episodes", 0) for r in evals) or 1
    per_episode = eval_s / played
    train_s = end["seconds"] - eval_s
    cpu_per_wall = end.get("cpu_seconds", end["seconds"]) / end["seconds"]
    wanted = sum(r["episodes"] / len(r.get("success_by_episode", [0])) * episodes for r in evals
                 if r["update"] in updates or r["update"] == 0)
    return cpu_per_wall * (train_s + per_episode * wanted)


def schemes(updates: list[int], k: int, eval_every: int) -> list[tuple[str, set[int], int]]:
    """(name, validations averaged, episodes per task) of the schemes a folder can answer."""
    last = max(updates)
    today = {u for u in updates if u % 4 == 0 and u > 0}  # the default setting: every 4 updates
    every = sorted(u for u in updates if u > 0)
    out = []
    for e in sorted({1, 2, k}):
        if e <= k:
            out.append((f"every 4, {e} ep", today, e))
            out.append((f"every {eval_every}, last 5, {e} ep", set(every[-5:]), e))
            out.append((f"final only, {e} ep", {last}, e))
    return out


def main() -> None:
    from trainers.stats import mde, paired_interval, seeds_needed

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="arena folder of multi-episode runs")
    ap.add_argument("--greedy", type=Path, help="arena folder of greedy runs of the same setting and seeds")
    ap.add_argument("--method", default="gigpo")
    ap.add_argument("--baseline", default="grpo")
    args = ap.parse_args()
    rows = []
    for label, folder in (("T=0.4", args.folder), ("greedy", args.greedy)):
        if folder is None:
            continue
        a, b = _load(folder, args.method), _load(folder, args.baseline)
        seeds = sorted(set(a) & set(b))
        first = a[seeds[0]]
        evals = [r for r in first if r["phase"] == "eval"]
        ups = [r["update"] for r in evals]
        k = len(evals[0].get("success_by_episode", [0]))
        every = ups[1] - ups[0]
        for name, chosen, ep in schemes(ups, k, every):
            diffs = [_l5(a[s], chosen, ep) - _l5(b[s], chosen, ep) for s in seeds]
            mean, sd, lo, hi = paired_interval(diffs)
            cost = float(np.mean([_cost(r[s], chosen, ep) for r in (a, b) for s in seeds]))
            need = seeds_needed(sd, 5.0)
            rows.append((f"{label}: {name}", len(seeds), mean, lo, hi, sd, mde(sd, len(seeds)), cost, cost * need, need))
    head = f"{'scheme':36s} {'n':>3s} {'mean':>6s} {'95% CI':>15s} {'SD':>5s} {'d':>5s} {'MDE':>5s} {'CPU-s/run':>9s} " \
           f"{'CPU-s@5':>8s} {'seeds@5':>7s}"
    lines = [f"paired L5 differences, {args.method} - {args.baseline} (points)", head]
    for name, n, mean, lo, hi, sd, m, cost, total, need in rows:
        lines.append(f"{name:36s} {n:3d} {mean:+6.1f} [{lo:+6.1f},{hi:+6.1f}] {sd:5.1f} {mean / sd:5.2f} {m:5.1f} {cost:9.1f} "
                     f"{total:8.0f} {need:7d}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

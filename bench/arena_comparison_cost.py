"""Benchmark: CPU seconds per run of an ALFWorld arena comparison, averaged over its runs, for
the text policy of this checkout beside the rubric policy of another checkout.

A comparison runs its runs in worker processes (``-j 2``) whose caches warm up run after run,
so the cost per run that a user sees is the average over a whole comparison, not one run in a
fresh process (``bench/arena_alfworld_run.py`` measures that).  This script runs the same
comparison command (``python -m trainers.cli arena --env alfworld-generated --estimators E
--variants "" --seeds S -j 2``) once per configuration and round, each in a fresh output
folder, and reads every run's ``cpu_seconds`` (its worker's CPU time for that run) from the
records; rounds interleave the configurations, and each ratio is taken within its round.

Configurations: ``text`` (this checkout, ``--policy text``), ``rubric`` (this checkout, the
default policy) and, with ``--baseline DIR``, ``base`` (DIR's checkout, its default policy:
e.g. a ``git worktree`` of the commit whose cost a change must not exceed).  Ratios are to
``base`` when given, else to ``rubric``.

Usage::

    python bench/arena_comparison_cost.py --baseline ../wt-old              # 5 estimators x 4 seeds, 2 rounds
    python bench/arena_comparison_cost.py --baseline ../wt-old --seeds 0-7 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import provenance  # bench/provenance.py (this folder is on sys.path)

HERE = Path(__file__).resolve().parent.parent


def comparison_cpu(tree: Path, policy: str | None, estimators: str, seeds: str, workers: int) -> list[float]:
    """``cpu_seconds`` of every run of one comparison played by the checkout at ``tree``."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "trainers.cli", "arena", "--env", "alfworld-generated", "--estimators",
               estimators, "--variants", "", "--seeds", seeds, "-j", str(workers), "-o", out]
        if policy is not None:
            cmd += ["--policy", policy]
        env = dict(os.environ, PYTHONPATH=str(tree))
        subprocess.run(cmd, cwd=tree, env=env, check=True, capture_output=True, text=True)
        cpu = []
        for metrics in sorted(Path(out, "runs").glob("*/metrics.jsonl")):
            end = json.loads(metrics.read_text().strip().splitlines()[-1])
            cpu.append(float(end["cpu_seconds"]))
        return cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="another checkout whose default (rubric) policy is the reference")
    parser.add_argument("--estimators", default="grpo,rloo,gigpo,graphgpo,mcgpo")
    parser.add_argument("--seeds", default="0-3")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("-j", "--workers", type=int, default=2)
    args = parser.parse_args()
    configs = {"text": (HERE, "text"), "rubric": (HERE, None)}
    if args.baseline is not None:
        configs["base"] = (args.baseline.resolve(), None)
    reference = "base" if args.baseline is not None else "rubric"
    means: dict[str, list[float]] = {name: [] for name in configs}
    ratios: dict[str, list[float]] = {name: [] for name in configs}
    for r in range(args.rounds):
        round_means = {}
        for name, (tree, policy) in configs.items():
            cpu = comparison_cpu(tree, policy, args.estimators, args.seeds, args.workers)
            round_means[name] = statistics.mean(cpu)
            print(f"round {r + 1}: {name:7s} {len(cpu)} runs, {round_means[name]:.1f} CPU-s per run "
                  f"(min {min(cpu):.1f}, max {max(cpu):.1f})", flush=True)
        for name in configs:
            means[name].append(round_means[name])
            ratios[name].append(round_means[name] / round_means[reference])
    print(f"{'configuration':14s} {'CPU-s per run':>14s} {'x ' + reference:>8s}  rounds")
    for name in configs:
        per_round = ", ".join(f"{x:.2f}" for x in ratios[name])
        print(f"{name:14s} {statistics.median(means[name]):14.1f} {statistics.median(ratios[name]):8.2f}  ({per_round})")
    base = f" beside {provenance.commit(args.baseline)} (base)" if args.baseline is not None else ""
    print(f"commit {provenance.commit(HERE)}{provenance.dirty(HERE)}{base}; arena --env alfworld-generated --estimators {args.estimators} "
          f"--variants '' --seeds {args.seeds} -j {args.workers}; {args.rounds} round(s), medians; "
          f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()

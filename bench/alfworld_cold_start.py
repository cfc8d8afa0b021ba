"""Benchmark: the first reset of ``ALFWorld-Rubric-v0`` on a cold generated-games cache.

Each repetition runs in a fresh interpreter with an empty ``RUBRICGYM_CACHE`` (a temporary
folder), makes ``gym.make("ALFWorld-Rubric-v0", split="generated")`` and times, from before
``import agent_envs`` to the return of the first ``reset(seed=...)``:

* ``first_reset_s``: the user's first reset (it generates only its task type's games);
* ``rest_s`` (``--all``): then ``env.unwrapped.task_ids()``, which generates the others.

It also checks that the caller's ``sys.argv`` is the same list, unchanged, afterwards.
Nothing here runs in the test suite (tests never assert times).

Usage::

    python bench/alfworld_cold_start.py                 # 3 repetitions, seeds 0..2
    python bench/alfworld_cold_start.py --repeats 1 --all
    python bench/alfworld_cold_start.py --json          # one JSON object on stdout
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r"""
import json, sys, time
sys.argv = ["x.py", "--out", "o"]
argv = sys.argv
t0 = time.perf_counter()
import gymnasium as gym
import agent_envs  # noqa: F401
env = gym.make("ALFWorld-Rubric-v0", split="generated", generated_n=N_GAMES)
obs, info = env.reset(seed=SEED)
t1 = time.perf_counter()
out = {"first_reset_s": t1 - t0, "task": info["task"]["id"],
       "argv_untouched": sys.argv is argv and argv == ["x.py", "--out", "o"]}
if ALL:
    out["n"] = len(env.unwrapped.task_ids())
    out["rest_s"] = time.perf_counter() - t1
env.close()
sys.stdout.write(json.dumps(out))
"""


def run_once(seed: int, n_games: int, every: bool) -> dict[str, object]:
    """One cold-cache measurement in a fresh interpreter."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="rubricgym-cold-") as cache:
        env = dict(os.environ, RUBRICGYM_CACHE=cache)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
        code = (_CHILD.replace("N_GAMES", str(n_games)).replace("SEED", str(seed))
                .replace("ALL", "True" if every else "False"))
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"the cold-start run failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=3, help="fresh-interpreter runs (seeds 0..)")
    parser.add_argument("--games", type=int, default=60, help="generated_n (the default is 60)")
    parser.add_argument("--all", action="store_true", help="also time generating the rest")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    runs = [run_once(seed, args.games, args.all) for seed in range(args.repeats)]
    firsts = [float(r["first_reset_s"]) for r in runs]
    result = {
        "bench": "alfworld_cold_start",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "games": args.games,
        "runs": runs,
        "first_reset_median_s": statistics.median(firsts),
        "first_reset_max_s": max(firsts),
        "argv_untouched": all(bool(r["argv_untouched"]) for r in runs),
    }
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
        return
    for seed, r in enumerate(runs):
        rest = f", the other games {r['rest_s']:.1f} s" if "rest_s" in r else ""
        sys.stdout.write(f"seed {seed}: first reset {r['first_reset_s']:.1f} s ({r['task']}){rest}\n")
    sys.stdout.write(
        f"first reset on a cold cache: median {result['first_reset_median_s']:.1f} s, "
        f"max {result['first_reset_max_s']:.1f} s over {len(runs)} run(s), {result['cpus']} CPUs, "
        f"1-min load {result['load_avg_1m']:.2f}; sys.argv untouched: {result['argv_untouched']}\n"
    )


if __name__ == "__main__":
    main()

"""Benchmark: concurrent ALFWorld episodes stepped off the event loop (agent_envs.pool).

64 concurrent ALFWorld-generated episodes (16 games x 4 siblings, horizon 30) with an instant
policy (a seeded random admissible action, answered at once) are played by
``GroupRunner.arun`` over an :class:`~agent_envs.pool.EnvPool` of 1 and of 2 worker processes,
side by side in one run.  Printed per setting:

* steps/s (decisions / wall seconds of the whole ``arun``, resets included; the games were
  grounded in a warm-up round first, as a long training run's are);
* the ideal: ``workers / step time``, the step time being the environment's own mean step time
  measured in one process (the lock-step ``GroupRunner.run``, no workers; in a child process,
  so that this process, like a trainer, holds no engine objects) — so "efficiency" is
  the share of the cores' worth of steps that reached the caller through the pool;
* this process's own CPU per step (the I/O threads, the coroutines, ``step_from_info``, the
  ticker below): what a trainer pays for stepping through the pool;
* the event loop's longest stall while the episodes ran: a ticker coroutine sleeps 1 ms at a
  time and records how late it wakes (max and 99th percentile).

The engine's transition memo (``agent_envs.alfworld.engine``) is off in every process unless
``--memo``: the warm-up round would otherwise answer the measured round's steps from memory,
and the figures would measure a dictionary lookup instead of the engine.

Targets (issue #20): 2 workers >= 1.8x 1 worker, >= 90 % of ideal; longest stall <= 5 ms.

Usage::

    python bench/env_concurrency.py                 # 16 games x 4 siblings, horizon 30
    python bench/env_concurrency.py --games 8 --group-size 8 --workers 1 2
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import random
import time
from datetime import date


def make_env(env_kwargs: dict, memo: bool):
    """The environment, made in whichever process hosts it (module level: picklable)."""
    import gymnasium as gym

    import agent_envs  # noqa: F401
    from agent_envs.alfworld import engine

    engine.transition_memo().enabled = memo
    return gym.make("ALFWorld-Rubric-v0", **env_kwargs)


def _choice(turn) -> str:
    return random.Random(7919 * turn.group + 101 * turn.slot + turn.t).choice(list(turn.info["admissible_actions"]))


async def _instant(turn) -> str:
    return _choice(turn)


async def _ticker(stop: asyncio.Event, lateness: list[float], period: float = 0.001) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(period)
        lateness.append(time.perf_counter() - t - period)


async def _timed_arun(runner, tasks, group_size: int) -> tuple[float, list[float], int]:
    stop, lateness = asyncio.Event(), []
    tick = asyncio.ensure_future(_ticker(stop, lateness))
    t0 = time.perf_counter()
    groups = await runner.arun(tasks, _instant, group_size=group_size, seeds=list(range(len(tasks))))
    wall = time.perf_counter() - t0
    stop.set()
    await tick
    return wall, lateness, sum(len(t) for g in groups for t in g)


def _in_process_step_s(factory, tasks, group_size: int, horizon: int) -> float:
    """The environment's mean step time, measured in this process (no workers, no IPC)."""
    from agent_envs.rollout import GroupRunner

    with GroupRunner(factory, max_steps=horizon) as runner:
        policy = lambda turns: [_choice(t) for t in turns]
        runner.run(tasks, policy, group_size=group_size, seeds=list(range(len(tasks))))  # warm-up: grounding
        runner.run(tasks, policy, group_size=group_size, seeds=list(range(len(tasks))))
        return runner.stats["env_s"] / runner.stats["decisions"]


def _pooled(factory, tasks, group_size: int, horizon: int, workers: int) -> dict:
    from agent_envs.pool import EnvPool
    from agent_envs.rollout import GroupRunner

    with EnvPool(factory, workers=workers) as pool:
        runner = GroupRunner(pool, max_steps=horizon)
        asyncio.run(_timed_arun(runner, tasks, group_size))  # warm-up: each worker grounds its games
        cpu0, own0 = pool.worker_cpu_seconds(), time.process_time()
        wall, lateness, steps = asyncio.run(_timed_arun(runner, tasks, group_size))
        cpu, own = pool.worker_cpu_seconds() - cpu0, time.process_time() - own0
    late = sorted(lateness)
    return {"workers": workers, "steps": steps, "wall_s": wall, "steps_per_s": steps / wall,
            "worker_cpu_s": cpu, "caller_cpu_ms_per_step": 1000 * own / steps, "stall_max_ms": 1000 * late[-1],
            "stall_p99_ms": 1000 * late[int(0.99 * (len(late) - 1))], "ticks": len(late)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", type=int, default=16, help="games (task groups)")
    parser.add_argument("--group-size", type=int, default=4, help="siblings per game")
    parser.add_argument("--horizon", type=int, default=30, help="decisions per episode at most")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to compare")
    parser.add_argument("--memo", action="store_true", help="leave the engine's transition memo on")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    env_kwargs = {"split": "generated", "generated_n": max(args.games, 60), "max_steps": args.horizon}
    factory = functools.partial(make_env, env_kwargs, args.memo)
    tasks = list(range(args.games))
    # measured in a child process, so this process (the "trainer") holds no engine objects and
    # its garbage collections stay short, as a trainer's would
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as ex:
        step_s = ex.submit(_in_process_step_s, factory, tasks, args.group_size, args.horizon).result()
    rows = [_pooled(factory, tasks, args.group_size, args.horizon, w) for w in args.workers]
    base = rows[0]["steps_per_s"]
    print(f"{args.games * args.group_size} concurrent ALFWorld-generated episodes ({args.games} games x "
          f"{args.group_size}), horizon {args.horizon}, instant policy; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, transition memo {'on' if args.memo else 'off'}, {date.today()}")
    print(f"environment step in this process: {1000 * step_s:.2f} ms (ideal: workers / step time)")
    print(f"{'workers':>7} {'steps':>6} {'wall s':>7} {'steps/s':>8} {'vs first':>8} {'ideal':>7} {'eff':>5} "
          f"{'stall max':>9} {'p99':>6} {'caller CPU/step':>15}")
    for r in rows:
        ideal = min(r["workers"], os.cpu_count() or 1) / step_s
        r.update(ideal_steps_per_s=ideal, efficiency=r["steps_per_s"] / ideal, speedup=r["steps_per_s"] / base)
        print(f"{r['workers']:>7} {r['steps']:>6} {r['wall_s']:>7.2f} {r['steps_per_s']:>8.1f} {r['speedup']:>7.2f}x "
              f"{ideal:>7.1f} {r['efficiency']:>5.0%} {r['stall_max_ms']:>7.2f}ms {r['stall_p99_ms']:>4.2f}ms "
              f"{r['caller_cpu_ms_per_step']:>13.3f}ms")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"step_s": step_s, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()

"""Benchmark: concurrent ALFWorld episodes stepped off the event loop (agent_envs.pool).

64 concurrent ALFWorld-generated episodes (16 games x 4 siblings, horizon 30) with an instant
policy (a seeded random admissible action, answered at once) are played by
``GroupRunner.arun`` over an :class:`~agent_envs.pool.EnvPool` of 1 and of 2 worker processes,
side by side in one run.  Printed per setting:

* steps/s (decisions / wall seconds of the whole ``arun``, resets included; the games were
  grounded in a warm-up round first, as a long training run's are), measured in a run without
  the stall probe below (its 1 kHz wake-ups cost this process 0.2-0.5 ms of CPU per step,
  which the workers would lose);
* two references for W workers: the issue's ideal, ``W / step time`` (the environment's own
  mean step time measured in one process: the lock-step ``GroupRunner.run``, no workers, in a
  child process), and "parallel": W child processes each stepping its share of the games
  in-process at the same time (no pool, no IPC) — what W busy cores of this machine deliver,
  which on a virtual machine can be less than W times one (cores that share a host core, a
  memory bus).  "eff" is steps/s over the ideal, "vs par" over the parallel reference: the
  share of the cores' worth of steps that reached the caller through the pool.  Both
  references are measured minutes apart from the pool on a machine whose speed drifts, so
  also "busy": the workers' CPU seconds over W cores x the pool's wall time, measured during
  the same run (the share of the cores the workers spent stepping: idle waiting for the
  caller, or descheduled for it, lowers it);
* "vs first at equal cost": the speed-up over the first setting with each run's steps/s
  divided by the steps its workers made per CPU-second in that same run, i.e. the ratio of the
  cores' worth of stepping each pool kept busy (``W x busy``).  The plain ratio ("vs first")
  also carries the machine's drift between the two runs (seen here: a step's cost moving by
  +-25 % within an hour); this one assumes a step costs a worker as much at W workers as at 1,
  which the parallel reference checks;
* this process's own CPU per step (reading the replies, the coroutines, ``step_from_info``): what a
  trainer pays for stepping through the pool;
* the event loop's longest stall and its 99th percentile while the episodes ran (a second run,
  with a ticker coroutine that sleeps 1 ms at a time and records how late it wakes), next to
  the **floor**: the same ticker alone in this process while W processes, as nice as the
  pool's workers, spin on the cores (what the operating system and the machine impose on any
  event loop beside W busy processes), and this process's longest garbage collection during the probed run (a stall
  no pool can prevent: the caller's own heap), in wall time and in the CPU time it used (the rest is the
  collector waiting for a core).

The engine's transition memo (``agent_envs.alfworld.engine``) is off in every process unless
``--memo``: the warm-up round would otherwise answer the measured round's steps from memory,
and the figures would measure a dictionary lookup instead of the engine.

Every figure is measured once per round, all settings side by side in each round (this
machine's speed drifts from minute to minute on a shared host), and summarised as the median
and range over ``--rounds`` rounds of the ratios measured within one round.

Targets: 2 workers >= 1.8x 1 worker, >= 90 % of ideal; longest stall <= 5 ms.

Usage::

    python bench/env_concurrency.py                 # 16 games x 4 siblings, horizon 30, 3 rounds (~6 min)
    python bench/env_concurrency.py --games 8 --group-size 8 --workers 1 2
    python bench/env_concurrency.py --worker-nice 10   # also each worker count with nicer workers
    python bench/env_concurrency.py --worker-idle      # ... with SCHED_IDLE workers
    python bench/env_concurrency.py --worker-nice 10 --gc-freeze   # ... and each with the caller's heap frozen
    python bench/env_concurrency.py --resume-all   # ... against a batch's episodes all resumed at once
    python bench/env_concurrency.py --gc-cost      # only: one full collection of the caller's heap, frozen or not
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import multiprocessing as mp
import os
import platform
import random
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import date
from typing import NamedTuple


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


def _stall(lateness: list[float]) -> tuple[float, float]:
    """Longest and 99th-percentile lateness, in ms."""
    late = sorted(lateness) or [0.0]
    return 1000 * late[-1], 1000 * late[int(0.99 * (len(late) - 1))]


async def _timed_arun(runner, tasks, group_size: int, probe: bool) -> tuple[float, list[float], int]:
    stop, lateness = asyncio.Event(), []
    tick = asyncio.ensure_future(_ticker(stop, lateness) if probe else stop.wait())
    t0 = time.perf_counter()
    groups = await runner.arun(tasks, _instant, group_size=group_size, seeds=list(range(len(tasks))))
    wall = time.perf_counter() - t0
    stop.set()
    await tick
    return wall, lateness, sum(len(t) for g in groups for t in g)


def _in_process(factory, tasks, group_size: int, horizon: int, barrier=None) -> tuple[float, int, float]:
    """``(env seconds, decisions, wall seconds)`` of the lock-step loop in this process (no
    workers, no IPC), after a warm-up round; ``barrier``: wait for the other children first."""
    from agent_envs.rollout import GroupRunner

    seeds = list(tasks)
    with GroupRunner(factory, max_steps=horizon) as runner:
        policy = lambda turns: [_choice(t) for t in turns]
        runner.run(tasks, policy, group_size=group_size, seeds=seeds)  # warm-up: grounding
        if barrier is not None:
            barrier.wait()
        t0 = time.perf_counter()
        runner.run(tasks, policy, group_size=group_size, seeds=seeds)
        return runner.stats["env_s"], int(runner.stats["decisions"]), time.perf_counter() - t0


def _parallel_one(factory, tasks, group_size: int, horizon: int) -> tuple[float, int, float]:
    """:func:`_in_process` in one child process."""
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as ex:
        return ex.submit(_in_process, factory, tasks, group_size, horizon).result()


def _child(out, *args) -> None:
    out.put(_in_process(*args))


def _parallel_steps_per_s(factory, tasks, group_size: int, horizon: int, workers: int) -> float:
    """Steps/s of ``workers`` child processes stepping their share of the games at the same time."""
    ctx = mp.get_context("spawn")
    out, barrier = ctx.Queue(), ctx.Barrier(workers)
    procs = [ctx.Process(target=_child, args=(out, factory, tasks[w::workers], group_size, horizon, barrier))
             for w in range(workers)]
    for proc in procs:
        proc.start()
    done = [out.get() for _ in procs]
    for proc in procs:
        proc.join()
    return sum(d for _env, d, _wall in done) / max(wall for _env, _d, wall in done)


def _spin(seconds: float, nice: int = 0, idle: bool = False) -> None:
    os.nice(nice)
    if idle:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _stall_floor(busy: int, nice: int = 0, idle: bool = False, seconds: float = 4.0) -> tuple[float, float]:
    """The ticker alone in this process while ``busy`` processes spin on the cores, as nice as
    the pool's workers (or as idle)."""
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_spin, args=(seconds + 1.0, nice, idle)) for _ in range(busy)]
    for proc in procs:
        proc.start()
    time.sleep(0.5)  # the spinners are running

    async def ticks() -> list[float]:
        stop, lateness = asyncio.Event(), []
        tick = asyncio.ensure_future(_ticker(stop, lateness))
        await asyncio.sleep(seconds)
        stop.set()
        await tick
        return lateness

    lateness = asyncio.run(ticks())
    for proc in procs:
        proc.join()
    return _stall(lateness)


class _GcPauses:
    """This process's garbage collections while active: the longest, in ms of wall time and of
    CPU time of the thread that ran it (the difference: the collector waiting for a core)."""

    def __enter__(self):
        self.longest, self.longest_cpu, self._t, self._cpu = 0.0, 0.0, 0.0, 0.0
        gc.callbacks.append(self._on)
        return self

    def _on(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t, self._cpu = time.perf_counter(), time.thread_time()
        else:
            self.longest = max(self.longest, 1000 * (time.perf_counter() - self._t))
            self.longest_cpu = max(self.longest_cpu, 1000 * (time.thread_time() - self._cpu))

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._on)


class Setting(NamedTuple):
    """One pool measured: its workers, their niceness, whether this process's heap is frozen
    (``gc.freeze()`` after the warm-up, as a trainer may do once its model is loaded) and
    whether a batch's replies resume all their episodes in one turn of the event loop (what
    ``asyncio.wrap_future`` did before the pool resumed them a slice at a time)."""

    workers: int
    nice: int = 0
    freeze: bool = False
    resume_all: bool = False
    idle: bool = False

    def label(self) -> str:
        return (f"{self.workers} worker{'s' if self.workers > 1 else ''}" + (f", nice {self.nice}" if self.nice else "")
                + (", SCHED_IDLE" if self.idle else "")
                + (", caller's heap frozen" if self.freeze else "") + (", all resumed at once" if self.resume_all else ""))

    def short(self) -> str:
        return (f"{self.workers}" + (f" n{self.nice}" if self.nice else "") + (" i" if self.idle else "")
                + (" f" if self.freeze else "") + (" a" if self.resume_all else ""))


def _pooled(factory, tasks, group_size: int, horizon: int, setting: Setting) -> dict:
    """The pool's figures for ``setting`` (the heap unfrozen and the slice restored afterwards)."""
    from agent_envs import pool as pool_module

    slice_ = pool_module._RESUME_SLICE
    if setting.resume_all:
        pool_module._RESUME_SLICE = 1 << 30
    try:
        row = _pool_figures(factory, tasks, group_size, horizon, setting)
    finally:
        pool_module._RESUME_SLICE = slice_
        gc.unfreeze()
    return row


def _pool_figures(factory, tasks, group_size: int, horizon: int, setting: Setting) -> dict:
    from agent_envs.pool import EnvPool
    from agent_envs.rollout import GroupRunner

    with EnvPool(factory, workers=setting.workers, worker_nice=setting.nice, worker_idle=setting.idle) as pool:
        runner = GroupRunner(pool, max_steps=horizon)
        asyncio.run(_timed_arun(runner, tasks, group_size, probe=False))  # warm-up: each worker grounds its games
        if setting.freeze:
            gc.collect()
            gc.freeze()
        cpu0, own0 = pool.worker_cpu_seconds(), time.process_time()
        wall, _, steps = asyncio.run(_timed_arun(runner, tasks, group_size, probe=False))
        cpu, own = pool.worker_cpu_seconds() - cpu0, time.process_time() - own0
        with _GcPauses() as gcs:
            probed_wall, lateness, _ = asyncio.run(_timed_arun(runner, tasks, group_size, probe=True))
    stall_max, stall_p99 = _stall(lateness)
    return {**setting._asdict(), "steps": steps, "wall_s": wall, "steps_per_s": steps / wall,
            "worker_cpu_s": cpu, "caller_cpu_ms_per_step": 1000 * own / steps, "stall_max_ms": stall_max,
            "stall_p99_ms": stall_p99, "ticks": len(lateness), "probed_steps_per_s": steps / probed_wall,
            "gc_max_ms": gcs.longest, "gc_cpu_max_ms": gcs.longest_cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", type=int, default=16, help="games (task groups)")
    parser.add_argument("--group-size", type=int, default=4, help="siblings per game")
    parser.add_argument("--horizon", type=int, default=30, help="decisions per episode at most")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to compare")
    parser.add_argument("--memo", action="store_true", help="leave the engine's transition memo on")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of side-by-side measurements")
    parser.add_argument("--worker-nice", type=int, default=0,
                        help="also measure every worker count with workers this much nicer (EnvPool(worker_nice=))")
    parser.add_argument("--worker-idle", action="store_true",
                        help="also measure every worker count with SCHED_IDLE workers (EnvPool(worker_idle=True))")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="also measure every setting with this process's heap frozen (gc.freeze()) after the warm-up")
    parser.add_argument("--resume-all", action="store_true",
                        help="also measure every setting with a batch's replies resuming all their episodes at once "
                             "(the pool before it resumed them a slice at a time)")
    parser.add_argument("--gc-cost", action="store_true",
                        help="only measure what one full collection of this process's heap costs after an arun "
                             "(1 worker), before and after gc.freeze()")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    env_kwargs = {"split": "generated", "generated_n": max(args.games, 60), "max_steps": args.horizon}
    factory = functools.partial(make_env, env_kwargs, args.memo)
    tasks = list(range(args.games))
    if args.gc_cost:
        _print_gc_cost(factory, tasks, args.group_size, args.horizon)
        return
    rounds = [_round(factory, tasks, args, r) for r in range(args.rounds)]
    print(f"{args.games * args.group_size} concurrent ALFWorld-generated episodes ({args.games} games x "
          f"{args.group_size}), horizon {args.horizon}, instant policy; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, transition memo {'on' if args.memo else 'off'}, {date.today()}; "
          f"{args.rounds} rounds, each measuring every setting side by side")
    print(f"{'round':>5} {'step ms':>7} {'workers':>7} {'steps/s':>8} {'vs first':>8} {'same cost':>9} {'ideal':>7} {'eff':>5} "
          f"{'parallel':>8} {'vs par':>6} {'busy':>5} {'stall max':>9} {'p99':>6} {'floor max':>9} {'p99':>6} {'gc max':>7} {'cpu':>6} "
          f"{'caller CPU/step':>15}")
    for r, rows in enumerate(rounds):
        for row in rows:
            label = Setting(row["workers"], row["nice"], row["freeze"], row["resume_all"], row["idle"]).short()
            print(f"{r:>5} {1000 * row['step_s']:>7.2f} {label:>7} {row['steps_per_s']:>8.1f} "
                  f"{row['speedup']:>7.2f}x {row['cost_speedup']:>8.2f}x {row['ideal_steps_per_s']:>7.1f} {row['efficiency']:>5.0%} "
                  f"{row['parallel_steps_per_s']:>8.1f} {row['vs_parallel']:>6.0%} {row['busy']:>5.0%} "
                  f"{row['stall_max_ms']:>7.2f}ms "
                  f"{row['stall_p99_ms']:>4.2f}ms {row['floor_max_ms']:>7.2f}ms {row['floor_p99_ms']:>4.2f}ms "
                  f"{row['gc_max_ms']:>5.1f}ms {row['gc_cpu_max_ms']:>4.1f}ms {row['caller_cpu_ms_per_step']:>13.3f}ms")
    print("median [min, max] over rounds:")
    for i, setting in enumerate(_settings(args)):
        rows = [rows[i] for rows in rounds]
        parts = [f"{key} {_spread([row[key] for row in rows], fmt)}" for key, fmt in
                 (("speedup", "{:.2f}x"), ("cost_speedup", "{:.2f}x"), ("efficiency", "{:.0%}"), ("vs_parallel", "{:.0%}"), ("busy", "{:.0%}"),
                  ("stall_max_ms", "{:.1f} ms"), ("stall_p99_ms", "{:.2f} ms"), ("floor_max_ms", "{:.1f} ms"),
                  ("floor_p99_ms", "{:.2f} ms"), ("gc_max_ms", "{:.1f} ms"), ("gc_cpu_max_ms", "{:.1f} ms"))]
        print(f"  {setting.label()}: " + "; ".join(parts))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"rounds": rounds}, fh, indent=2)


def _full_collection_ms() -> float:
    """CPU milliseconds of one full collection (the fastest of three)."""
    times = []
    for _ in range(3):
        t = time.thread_time()
        gc.collect()
        times.append(1000 * (time.thread_time() - t))
    return min(times)


def _print_gc_cost(factory, tasks, group_size: int, horizon: int) -> None:
    from agent_envs.pool import EnvPool
    from agent_envs.rollout import GroupRunner

    with EnvPool(factory, workers=1) as pool:
        asyncio.run(_timed_arun(GroupRunner(pool, max_steps=horizon), tasks, group_size, probe=False))
        objects, full = len(gc.get_objects()), _full_collection_ms()
        gc.freeze()
        frozen = _full_collection_ms()
        gc.unfreeze()
    print(f"this process after an arun of {len(tasks) * group_size} episodes: {objects} tracked objects; "
          f"one full collection {full:.2f} ms of CPU, {frozen:.3f} ms after gc.freeze()")


def _round(factory, tasks, args, r: int) -> list[dict]:
    """Every setting once, side by side: the one-process step time, then per worker count the
    pool (throughput, probed stall), the parallel in-process reference and the stall floor.
    The one-process reference runs in a child, so this process (the "trainer") holds no
    engine objects and its garbage collections stay short, as a trainer's would."""
    env_s, decisions, _wall = _parallel_one(factory, tasks, args.group_size, args.horizon)
    step_s = env_s / decisions
    rows = []
    for setting in _settings(args):
        w = setting.workers
        row = _pooled(factory, tasks, args.group_size, args.horizon, setting)
        row["parallel_steps_per_s"] = _parallel_steps_per_s(factory, tasks, args.group_size, args.horizon, w)
        row["floor_max_ms"], row["floor_p99_ms"] = _stall_floor(w, setting.nice, setting.idle)
        ideal = min(w, os.cpu_count() or 1) / step_s
        row.update(round=r, step_s=step_s, ideal_steps_per_s=ideal, efficiency=row["steps_per_s"] / ideal,
                   vs_parallel=row["steps_per_s"] / row["parallel_steps_per_s"],
                   busy=row["worker_cpu_s"] / (min(w, os.cpu_count() or 1) * row["wall_s"]))
        rows.append(row)
    for row in rows:
        row["speedup"] = row["steps_per_s"] / rows[0]["steps_per_s"]
        row["cost_speedup"] = (row["worker_cpu_s"] / row["wall_s"]) / (rows[0]["worker_cpu_s"] / rows[0]["wall_s"])
    return rows


def _settings(args) -> list[Setting]:
    """Every pool measured, in order."""
    priorities = [(0, False)] + ([(args.worker_nice, False)] if args.worker_nice else []) + (
        [(0, True)] if args.worker_idle else [])
    freezes = [False] + ([True] if args.gc_freeze else [])
    resumes = [False] + ([True] if args.resume_all else [])
    return [Setting(w, nice, freeze, resume_all, idle) for w in args.workers for nice, idle in priorities
            for freeze in freezes for resume_all in resumes]


def _spread(values: list[float], fmt: str) -> str:
    v = sorted(values)
    return f"{fmt.format(statistics.median(v))} [{fmt.format(v[0])}, {fmt.format(v[-1])}]"


if __name__ == "__main__":
    main()

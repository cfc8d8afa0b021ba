"""Many arena runs: every (method, seed) of a comparison, in worker processes, then the report.

:func:`run_arena` runs each seed's methods in one worker process (:func:`_run_seed_affine`;
they share the warm start, the first validation and the memo tables there), skips the runs
already finished in the output folder (:func:`~trainers.arena.run.completed_run`), and writes
the report (:mod:`trainers.arena.report`).  Each run is independent and deterministic, so the
number of workers changes the time, never the numbers.

Example (a tiny comparison on generated ALFWorld games; takes about a minute):
    >>> from trainers.arena.config import ArenaConfig   # doctest: +SKIP
    >>> cfg = ArenaConfig.of(env="alfworld-generated", updates=4, groups_per_update=2, group_size=4)  # doctest: +SKIP
    >>> summary = run_arena(cfg, methods=["grpo", "mcgpo"], seeds=[0, 1], out_dir="arena_out")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trainers.arena.config import ArenaConfig
from trainers.arena.envs import prepare_generated_games
from trainers.arena.report import write_report
from trainers.arena.run import completed_run, run_one
from trainers.arena.variants import resolve_method

__all__ = ["run_arena"]

log = logging.getLogger(__name__)


def run_arena(
    cfg: ArenaConfig,
    methods: Sequence[str],
    seeds: Sequence[int],
    out_dir: str | os.PathLike[str],
    *,
    workers: int = 1,
    baseline: str | None = None,
    progress: Callable[[str, int, dict[str, Any]], None] | None = None,
    title: str | None = None,
    command: str | None = None,
) -> dict[str, Any]:
    """Run every (method, seed), then write the report; returns the summary.

    A (method, seed) whose finished run of the same setting is already in ``out_dir`` is not
    run again (:func:`completed_run`): an interrupted comparison continues, and seeds can be
    added to a folder later; the report covers every finished run in the folder.

    Args:
        cfg: The arena setting.
        methods: Method strings (``estimator`` or ``estimator:variant``).
        seeds: Training seeds (paired across methods).
        out_dir: Output folder (``config.json``, ``runs/``, ``results.md``, PNGs).
        workers: Parallel processes (each run is independent, so results do not depend
            on this number); each runs whole seeds (every method of a seed), which share
            work.
        baseline: Method for paired differences (default: the first method).
        progress: Called after each finished run with ``(method, seed, end record)``.
        title: Title of the results table.
        command: The command line to record in the report.

    Raises:
        ValueError: no methods or seeds, duplicates, or an unknown method (checked before
            any run starts).
    """
    methods = _checked(cfg, methods, seeds, baseline)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(
        json.dumps({"arena": cfg.to_dict(), "methods": methods, "seeds": list(seeds), "command": command},
                   indent=2, default=str),
        encoding="utf-8",
    )
    seed_jobs = [[(cfg.to_dict(), m, int(s), str(out)) for m in methods] for s in seeds]
    t0 = time.perf_counter()
    prepare_generated_games(cfg, seeds)  # once, here, before any worker process needs the games
    if workers <= 1:
        for job in (job for jobs in seed_jobs for job in jobs):
            method, seed, end = _run_job(job)
            if progress:
                progress(method, seed, end)
    else:
        _run_seed_affine(seed_jobs, workers, progress)
    wall = time.perf_counter() - t0
    summary = write_report(out, baseline=baseline or methods[0], title=title or f"Arena: {cfg.env}",
                           preamble=_preamble(cfg, seeds, wall, workers, command))
    summary["wall_seconds"] = wall
    return summary


def _checked(cfg: ArenaConfig, methods: Sequence[str], seeds: Sequence[int], baseline: str | None) -> list[str]:
    """The methods, stripped, once every method builds and nothing repeats (before any work)."""
    methods = [m.strip() for m in methods]
    if not methods or not seeds:
        raise ValueError("run_arena needs at least one method and one seed")
    if len(set(methods)) != len(methods) or len(set(seeds)) != len(seeds):
        raise ValueError("methods and seeds must not repeat")
    for m in methods:  # fail before any work
        resolve_method(m, cfg.preset.family, cfg.estimator_params, scpo_scorer=cfg.scpo_scorer).build()
    if baseline is not None and baseline not in methods:
        raise ValueError(f"baseline {baseline!r} is not among the methods {methods}")
    return methods


def _preamble(cfg: ArenaConfig, seeds: Sequence[int], wall: float, workers: int, command: str | None) -> str:
    """The report's opening lines: the command, the setting, the seeds and the wall time."""
    preamble = (
        f"Environment `{cfg.env}`; {cfg.schedule.updates} updates x {cfg.rollout.groups_per_update} tasks x "
        f"{cfg.rollout.group_size} siblings; {cfg.schedule.val_tasks} validation tasks every {cfg.schedule.eval_every} updates "
        f"({_validation_mode(cfg)}); "
        f"seeds {', '.join(map(str, seeds))}; wall time {wall / 60:.1f} min with {workers} worker(s)."
    )
    if command:
        preamble = f"Command: `{command}`\n\n" + preamble
    return preamble


def _validation_mode(cfg: ArenaConfig) -> str:
    """How the validation plays, in words (for the report)."""
    if cfg.rollout.val_temperature == 0:
        return "greedy"
    episodes = f"{cfg.val_episodes} episodes per task, " if cfg.val_episodes > 1 else ""
    return f"{episodes}T = {cfg.rollout.val_temperature:g}"


def _run_job(args: tuple[dict[str, Any], str, int, str]) -> tuple[str, int, dict[str, Any]]:
    cfg_dict, method, seed, out_dir = args
    cfg = ArenaConfig.from_dict(cfg_dict)
    done = completed_run(cfg, method, seed, out_dir)
    if done is not None:
        log.info("%s seed %d: finished run found in %s, not run again", method, seed, out_dir)
        return method, seed, done
    return method, seed, run_one(cfg, method, seed, out_dir)


def _run_seed_affine(seed_jobs: Sequence[Sequence[tuple[dict[str, Any], str, int, str]]], workers: int,
                     progress: Callable[[str, int, dict[str, Any]], None] | None) -> None:
    """Run each seed's jobs (one per method) in one worker process, ``workers`` at a time.

    A worker that finishes a seed takes the next one.  Every method of a seed then runs in
    the process that already holds what they share (the first validation, the first
    update's episodes in the memo table, the engine's transition memo); which process runs
    a job never changes its numbers, only the time.
    """
    import multiprocessing as mp
    from collections import deque
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    todo = deque(seed_jobs)
    pools = [ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"),
                                 initializer=_worker_init, initargs=(os.getpid(),))
             for _ in range(min(workers, len(todo)))]
    running: dict[Any, int] = {}  # future -> index of the pool running it
    left = [0] * len(pools)  # jobs of the pool's current seed not yet finished

    def feed(i: int) -> None:
        jobs = todo.popleft() if todo else ()
        for job in jobs:
            running[pools[i].submit(_run_job, job)] = i
        left[i] = len(jobs)

    try:
        for i in range(len(pools)):
            feed(i)
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                i = running.pop(fut)
                method, seed, end = fut.result()
                if progress:
                    progress(method, seed, end)
                left[i] -= 1
                if left[i] == 0:
                    feed(i)
    finally:
        for pool in pools:
            pool.shutdown(cancel_futures=True)


def _worker_init(parent: int) -> None:
    """Set up a spawned worker: logging (never configured in the caller's process), and exit
    when the comparison's process is gone (a killed comparison leaves no workers running)."""
    logging.basicConfig(level=logging.WARNING)
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()


def _exit_with_parent(parent: int, poll: float = 1.0) -> None:
    while os.getppid() == parent:
        time.sleep(poll)
    os._exit(1)

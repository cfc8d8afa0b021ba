"""The arena's environments and tasks: one pool of environments per setting and process, and
the task lists of a run.

A run's training pool, validation set and warm-start tasks are disjoint positions of the
splits' fixed order (:mod:`agent_envs.tasks`, the trainer's rule too); with ``fresh_games``
each seed draws its own games (:func:`~trainers.arena.config.game_draw`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_envs.rollout import EnvPool
from agent_envs.tasks import select_tasks, train_val_tasks
from trainers.arena.config import ArenaConfig, game_draw
from trainers.arena.memo import EpisodeMemo, MemoTable

__all__ = ["arena_envs", "make_arena_env", "prepare_generated_games", "task_draw", "task_sets", "warm_start_tasks"]

_ENV_CACHE: dict[str, EnvPool] = {}


def arena_envs(cfg: ArenaConfig, seed: int | None = None) -> EnvPool:
    """The environments of ``cfg`` (of a run of ``seed``: with ``cfg.fresh_games`` a generated
    environment generates that seed's games): an in-process :class:`~agent_envs.rollout.EnvPool`, one
    per (environment, arguments) per process, reused across runs (an environment's episodes
    depend only on the task and the actions).

    Its environments are made on first use: the ``G`` siblings of a group play in lock step
    on environments ``0..G-1``, validation in chunks of at most ``G`` tasks, so a process
    holds ``max(G)`` environments of a kind.  With ``cfg.memo`` every one is wrapped in an
    :class:`~trainers.arena.memo.EpisodeMemo` and all share one
    :class:`~trainers.arena.memo.MemoTable`.
    """
    preset = cfg.preset
    kwargs = dict(preset.make_kwargs)
    kwargs["max_steps"] = cfg.horizon
    if preset.generated_n is not None:
        kwargs["generated_n"] = max(preset.generated_n, cfg.n_tasks_needed)
        if game_draw(cfg, seed) is not None:
            kwargs["generated_seed"] = game_draw(cfg, seed)
    if cfg.task_types is not None and "task_types" not in preset.env_settings:
        raise ValueError(f"ArenaConfig.task_types does not apply to {preset.env_id} (its arena preset does not "
                         "pass task types)")
    for name, kwarg in preset.env_settings.items():
        value = getattr(cfg, name)
        if value is not None:
            kwargs[kwarg] = list(value) if isinstance(value, (list, tuple)) else value
    key = json.dumps([preset.env_id, kwargs, cfg.memo], sort_keys=True, default=str)
    pool = _ENV_CACHE.get(key)
    if pool is None:
        table = MemoTable() if cfg.memo else None

        def make() -> Any:
            from agent_envs import make_env

            env = make_env(preset.env_id, kwargs)
            return EpisodeMemo(env, table=table) if table is not None else env

        make.__name__ = preset.env_id
        pool = _ENV_CACHE[key] = EnvPool(make)
    return pool


def make_arena_env(cfg: ArenaConfig, seed: int | None = None) -> Any:
    """Environment 0 of :func:`arena_envs` (for the task lists)."""
    pool = arena_envs(cfg, seed)
    if 0 not in pool.local:  # an in-process pool makes its environments on first use
        pool.local[0] = pool.env()
    return pool.local[0]


def prepare_generated_games(cfg: ArenaConfig, seeds: Sequence[int] = ()) -> list[Path]:
    """Generate (or find) the game cache a generated-ALFWorld setting plays, in this process.

    Call it in the parent before worker processes start: otherwise every worker would
    generate the same cache at once on first use.  Uses the same ``n``, seed and task types
    as :func:`make_arena_env` passes to the environment (with ``cfg.fresh_games``, every one
    of ``seeds``' generator seeds); returns ``[]`` for other environments.
    """
    preset = cfg.preset
    if preset.generated_n is None:
        return []
    from agent_envs.alfworld.generator import ensure_generated

    n = max(preset.generated_n, cfg.n_tasks_needed)
    draws = sorted({game_draw(cfg, s) for s in seeds} - {None}) if cfg.fresh_games else [0]
    return [Path(p) for d in draws for p in ensure_generated(n=n, seed=d, task_types=cfg.task_types)]


def task_sets(env: Any, cfg: ArenaConfig, seed: int | None = None) -> tuple[list[Any], list[Any], str | None]:
    """(training pool, validation tasks, validation split) of a run of ``seed``."""
    preset, draw = cfg.preset, task_draw(cfg, seed)
    if cfg.validate_on_train:
        if cfg.schedule.val_tasks > cfg.schedule.train_tasks:
            raise ValueError("validate_on_train needs val_tasks <= train_tasks")
        train_pool = select_tasks(env, preset.train_split, cfg.schedule.train_tasks, draw=draw)
        return train_pool, train_pool[: cfg.schedule.val_tasks], preset.train_split
    train_pool, val = train_val_tasks(env, preset.train_split, preset.val_split, train_n=cfg.schedule.train_tasks,
                                      val_n=cfg.schedule.val_tasks, draw=draw)
    return train_pool, val, preset.val_split


def warm_start_tasks(env: Any, cfg: ArenaConfig, seed: int | None = None) -> list[Any]:
    """The ``cfg.warm_start.warm_start_tasks`` behaviour-cloning tasks: the positions of the training split
    after the RL pool (and after the validation set when it shares the split), so cloned
    tasks are never trained on with RL nor validated on."""
    preset = cfg.preset
    offset = cfg.schedule.train_tasks + (cfg.schedule.val_tasks if preset.val_split == preset.train_split else 0)
    return select_tasks(env, preset.train_split, cfg.warm_start.warm_start_tasks, offset, draw=task_draw(cfg, seed))


def task_draw(cfg: ArenaConfig, seed: int | None) -> int | None:
    """The ``draw`` of the task order (:func:`game_draw`; ``None`` for generated games, whose
    draw is the generator seed)."""
    return None if cfg.preset.generated_n is not None else game_draw(cfg, seed)

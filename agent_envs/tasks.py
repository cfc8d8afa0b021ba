"""The one task-selection rule: which tasks of a split a run trains, validates and warm-starts on.

Both the trainer (``trainers/trainer.py``) and the arena (``trainers/arena/envs.py``) take
their tasks from here, so the same split and sizes give the same task sets in both.

* :func:`task_pool` puts a split's tasks in a fixed order that does not depend on the
  training seed: environments that list ``task_ids(split)`` (ALFWorld: ids sorted by folder,
  hence grouped by task type) are shuffled with :data:`TASK_ORDER_SEED`, so any prefix mixes
  the task types; ``split_range(split)`` (WebShop: goal indices, already shuffled upstream)
  and ``num_tasks(split)`` keep their order.
* :func:`select_tasks` takes positions ``offset .. offset + n - 1`` of that order.
* ``draw=k`` (every function) permutes that order once more with its own generator
  (``[TASK_ORDER_SEED, k]``): a run that draws its tasks per seed (the arena's fresh games)
  takes another sample of the split for every ``k``, the same one for the same ``k``.
* :func:`train_val_tasks` lays a run out: the training pool first, the validation set next
  (after the pool when both come from one split, so they never overlap); anything else a
  run needs (the arena's warm-start walkthroughs) comes after both.

Example:
    >>> class Toy:
    ...     def task_ids(self, split):
    ...         return [f"{split}-{k}" for k in range(6)]
    >>> select_tasks(Toy(), "train", 2) == task_pool(Toy(), "train")[:2]
    True
    >>> train, val = train_val_tasks(Toy(), "train", "train", train_n=0, val_n=2)
    >>> len(train), len(val), set(train) & set(val)
    (4, 2, set())
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["TASK_ORDER_SEED", "select_tasks", "task_pool", "train_val_tasks"]

#: Seed of the fixed order of splits listed by ``task_ids`` (the same for every run).
TASK_ORDER_SEED = 20_240_601


def task_pool(env: Any, split: str | None, draw: int | None = None) -> list[Any] | None:
    """Every task of ``split`` in the fixed order (permuted by ``draw`` when given), or ``None``
    when the environment cannot list them."""
    pool = _fixed_pool(env, split)
    if pool is None or draw is None:
        return pool
    order = np.random.default_rng([TASK_ORDER_SEED, int(draw) & 0xFFFFFFFF]).permutation(len(pool))
    return [pool[int(k)] for k in order]


def _fixed_pool(env: Any, split: str | None) -> list[Any] | None:
    base = getattr(env, "unwrapped", env)
    if callable(getattr(base, "task_ids", None)):
        ids = list(base.task_ids(split) if split is not None else base.task_ids())
        order = np.random.default_rng(TASK_ORDER_SEED).permutation(len(ids))
        return [ids[int(k)] for k in order]
    if split is not None and callable(getattr(base, "split_range", None)):
        return [int(k) for k in base.split_range(split)]
    if split is not None and callable(getattr(base, "num_tasks", None)):
        return list(range(int(base.num_tasks(split))))
    return None


def select_tasks(env: Any, split: str | None, n: int, offset: int = 0, draw: int | None = None) -> list[Any]:
    """The tasks at positions ``offset .. offset + n - 1`` of :func:`task_pool` (positions
    themselves when the environment cannot list its tasks).

    Raises:
        ValueError: the split holds fewer than ``offset + n`` tasks.
    """
    pool = task_pool(env, split, draw)
    if pool is None:
        if draw is not None:
            raise ValueError(f"split {split!r} does not list its tasks: it cannot be drawn per seed")
        return [offset + k for k in range(n)]
    return _take(pool, split, n, offset)


def train_val_tasks(env: Any, train_split: str | None, val_split: str | None, *, train_n: int,
                    val_n: int, draw: int | None = None) -> tuple[list[Any], list[Any]]:
    """``(training pool, validation set)``: the first ``train_n`` tasks of ``train_split``
    (``0``: all of them, less the validation set when it shares the split) and the next
    ``val_n`` of ``val_split`` (the first ``val_n`` when the splits differ).

    Raises:
        ValueError: a split holds too few tasks, or ``train_n`` is 0 for an environment that
            cannot list its tasks.
    """
    pool = task_pool(env, train_split, draw)
    if train_n == 0:
        if pool is None:
            raise ValueError(f"split {train_split!r} does not list its tasks: give the number of training tasks")
        train_n = len(pool) - (val_n if val_split == train_split else 0)
        if train_n < 1:
            raise ValueError(f"{val_n} validation tasks leave no training tasks in split {train_split!r}")
    train = select_tasks(env, train_split, train_n, draw=draw)
    val = select_tasks(env, val_split, val_n, offset=train_n if val_split == train_split else 0, draw=draw)
    return train, val


def _take(pool: Sequence[Any], split: str | None, n: int, offset: int) -> list[Any]:
    if offset + n > len(pool):
        raise ValueError(f"split {split!r} has {len(pool)} tasks; {offset + n} were asked for")
    return list(pool[offset : offset + n])

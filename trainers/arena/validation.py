"""The arena's validation: every validation task played by the current policy, summarised.

Validation draws at ``val_temperature`` (SPEC §6: 0.4; 0 is greedy), ``val_episodes``
episodes per task, each from its own generator keyed by (seed, update, task, episode), so
every method of a seed meets the same noise.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from agent_envs.rollout import EnvPool
from trainers.arena.agent import ArenaPolicy, keyed_rng, play_groups
from trainers.arena.config import ArenaConfig
from trainers.arena.policy import Featurizer, LinearSoftmaxPolicy

__all__ = ["evaluate"]


def evaluate(
    envs: EnvPool, cfg: ArenaConfig, val_set: Sequence[Any], val_split: str | None, policy: LinearSoftmaxPolicy,
    featurizer: Featurizer, seed: int, update: int,
) -> dict[str, Any]:
    """``cfg.val_episodes`` rollouts of every validation task (task ``k``: reset seed ``k``;
    episode ``j`` of it draws from ``keyed_rng(seed, 1_000_003, update, k)`` for ``j = 0``, from
    ``keyed_rng(seed, 1_000_003, update, k, j)`` after), in lock-step chunks of at most
    ``cfg.rollout.group_size`` environments on ``envs``."""
    k_ep = cfg.val_episodes
    succ = np.zeros((len(val_set), k_ep))
    score, steps, invalid = [], [], 0
    per_type: dict[str, list[float]] = defaultdict(list)
    chunk_n = max(1, cfg.rollout.group_size // k_ep)

    def rng(g: int, slot: int, start: int) -> np.random.Generator:
        key = (seed, 1_000_003, update, start + g) + ((slot,) if slot else ())
        return keyed_rng(*key)

    for start in range(0, len(val_set), chunk_n):
        chunk = list(val_set[start : start + chunk_n])
        arena = ArenaPolicy(policy, featurizer, temperature=cfg.rollout.val_temperature, coupled=cfg.sampling == "coupled",
                            rng=lambda g, slot, start=start: rng(g, slot, start))
        groups = play_groups(envs, arena, chunk, range(start, start + len(chunk)), split=val_split, group_size=k_ep)
        for g, group in enumerate(groups):
            for j, traj in enumerate(group):
                succ[start + g, j] = float(traj.success)
                score.append(float(traj.score))
                steps.append(len(traj.steps))
                invalid += sum(not s.valid for s in traj.steps)
                per_type[arena.task_types[(g, j)]].append(float(traj.success))
    return {
        "update": update,
        "phase": "eval",
        "success": float(succ.mean()),
        "score": float(np.mean(score)),
        "invalid_rate": invalid / max(1, sum(steps)),
        "mean_steps": float(np.mean(steps)),
        **{f"success/{t}": float(np.mean(v)) for t, v in sorted(per_type.items())},
        "success_by_episode": succ.mean(axis=0).tolist(),
        "episodes": succ.size,
    }

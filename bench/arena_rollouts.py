"""Record real rollouts for the credit benchmark: the arena's untrained policy on an arena
environment, ``--groups`` tasks x ``--group-size`` siblings, saved as JSONL
(:func:`rubrics.trajectory.save_jsonl`) for ``python bench/credit.py --rollouts FILE``.

    python bench/arena_rollouts.py rollouts.jsonl                      # ALFWorld-generated, 16 x 8
    python bench/credit.py --versus hgpo gigpo --rollouts rollouts.jsonl

On ALFWorld-generated the untrained policy plays every episode to the 30-step horizon, so the
default is the 16 x 8 x 30 batch of the credit benchmark's target, with the observations (and
their repeats) of real games.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from rubrics.trajectory import save_jsonl
    from trainers.arena.agent import ArenaPolicy, keyed_rng, play_groups
    from trainers.arena.config import ArenaConfig
    from trainers.arena.envs import arena_envs, make_arena_env, prepare_generated_games, task_sets
    from trainers.arena.policy import Featurizer, LinearSoftmaxPolicy

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the JSONL file to write")
    ap.add_argument("--env", default="alfworld-generated")
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cfg = ArenaConfig.for_env(args.env)
    prepare_generated_games(cfg)
    envs, env = arena_envs(cfg), make_arena_env(cfg)
    train_pool, _, _ = task_sets(env, cfg)
    featurizer, policy = Featurizer(cfg.dim), LinearSoftmaxPolicy(cfg.dim)
    t0 = time.perf_counter()
    trajs = []
    try:
        for pick in range(args.groups):
            arena = ArenaPolicy(policy, featurizer, temperature=cfg.rollout.temperature, coupled=False,
                                  rng=lambda _g, slot, pick=pick: keyed_rng(args.seed, pick, slot))
            (group,) = play_groups(envs, arena, [train_pool[pick]], [pick], split=cfg.preset.train_split,
                                     group_size=args.group_size)
            trajs += group
    finally:
        envs.close()
    save_jsonl(args.out, trajs)
    steps = sum(len(t.steps) for t in trajs)
    print(f"{len(trajs)} trajectories, {steps} steps, {sum(t.success for t in trajs)} successes, "
          f"{time.perf_counter() - t0:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()

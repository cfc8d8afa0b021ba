"""The arena's behaviour-cloning warm start generalises to held-out generated ALFWorld games.

The untrained (uniform) softmax policy never wins a generated game at horizon 30: with
10-25 admissible actions per step it must find the target, take it and put it in the right
receptacle by chance.  The warm start clones the walkthroughs of 36 games that are neither
RL training games nor validation games (positions 24-59 of the split's fixed order; RL
trains on 0-11, validation is 12-23), then three GRPO updates run.  The policy's role
features (take the *target*, go to / move into the *destination* once it is in hand, do not
revisit receptacles, ...) name no game, so what is cloned carries over to the 12 held-out
games.

What this test shows is the warm start and the pipeline, not RL: the asserted rise is
measured at update 0, after cloning and before any RL update.  (The claim that RL improves
a policy is tested on WebShop from the uniform policy, with its control, in
``tests/test_arena_learning.py``.)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent_envs.tasks import select_tasks
from trainers.arena.config import ArenaConfig
from trainers.arena.envs import arena_envs, make_arena_env, warm_start_tasks
from trainers.arena.policy import Featurizer, LinearSoftmaxPolicy
from trainers.arena.run import run_one
from trainers.arena.validation import evaluate

CFG = dict(
    max_steps=30, updates=3, tasks_per_update=2, group_size=4, train_tasks=12, val_tasks=12,
    eval_every=3, warm_start=36, warm_start_epochs=3,
)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_warm_start_generalises_to_held_out_generated_alfworld(tmp_path: Path) -> None:
    cfg = ArenaConfig.of(env="alfworld-generated", **CFG)
    env = make_arena_env(cfg)
    # The held-out games: positions 12..23 of the split's fixed order; cloned: 24..59.
    val = select_tasks(env, "generated", cfg.schedule.val_tasks, offset=cfg.schedule.train_tasks)
    train = select_tasks(env, "generated", cfg.schedule.train_tasks)
    cloned = warm_start_tasks(env, cfg)
    assert len(cloned) == 36 and not (set(val) & set(train) or set(cloned) & (set(val) | set(train)))

    untrained = evaluate(arena_envs(cfg), cfg, val, "generated", LinearSoftmaxPolicy(cfg.dim), Featurizer(cfg.dim),
                          0, 0)
    assert untrained["success"] <= 1 / 12

    run_one(cfg, "grpo", 0, tmp_path)
    recs = [json.loads(line) for line in (tmp_path / "runs" / "grpo__seed0" / "metrics.jsonl").open()]
    evals = [r for r in recs if r["phase"] == "eval"]
    trains = [r for r in recs if r["phase"] == "train"]
    assert [r["update"] for r in evals] == [0, 3]  # after the warm start, after the updates
    config = next(r for r in recs if r["phase"] == "run")
    # 36 walkthroughs of 4-8 steps each: well over 100 cloned decisions
    assert config["warm_start"]["demo_rows"] > 100
    # the estimator sees wins: at least one group per update has a successful sibling
    assert all(r["train/groups_with_success"] >= 1 for r in trains)
    cloned_success = evals[0]["success"]
    # at least 3 more held-out wins out of 12 than the untrained policy, before any RL update
    assert cloned_success - untrained["success"] >= 3 / 12 - 1e-9
    assert np.isfinite(evals[-1]["invalid_rate"]) and evals[-1]["invalid_rate"] == 0.0

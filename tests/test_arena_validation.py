"""The arena's validation: several episodes per task and greedy validation.

* with ``val_episodes=k`` every validation task is played k times; episode 0 draws exactly
  the noise a one-episode validation draws, so its success rates equal that run's, and the
  training (which never sees validation) is the same;
* ``eval_temperature=0`` validates greedily: the first of the highest-scoring actions,
  whatever the generator;
* bad combinations are refused by the config, naming the field.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from agent_envs.rollout import Turn
from trainers.arena.agent import ArenaPolicy
from trainers.arena.config import ArenaConfig
from trainers.arena.policy import Featurizer, LinearSoftmaxPolicy
from trainers.arena.run import run_one

SMALL = dict(updates=2, tasks_per_update=2, group_size=4, train_tasks=6, val_tasks=6, eval_every=1, dim=2**12)


def _records(out: Path, method: str, seed: int) -> list[dict]:
    path = out / "runs" / f"{method}__seed{seed}" / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_episode_zero_of_a_multi_episode_validation_is_the_single_episode_validation(tmp_path: Path) -> None:
    one = ArenaConfig.for_env("webshop-generated", **SMALL)
    three = replace(one, val_episodes=3)
    run_one(one, "grpo", 1, tmp_path / "one")
    run_one(three, "grpo", 1, tmp_path / "three")
    a, b = _records(tmp_path / "one", "grpo", 1), _records(tmp_path / "three", "grpo", 1)
    evals_a = [r for r in a if r["phase"] == "eval"]
    evals_b = [r for r in b if r["phase"] == "eval"]
    assert [e["update"] for e in evals_b] == [0, 1, 2]
    for ea, eb in zip(evals_a, evals_b):
        assert ea["success_by_episode"] == [ea["success"]]
        assert eb["success_by_episode"][0] == ea["success"]
        assert len(eb["success_by_episode"]) == 3
        assert eb["success"] == pytest.approx(float(np.mean(eb["success_by_episode"])))
    train_a = [r["opt/delta_norm"] for r in a if r["phase"] == "train"]
    train_b = [r["opt/delta_norm"] for r in b if r["phase"] == "train"]
    assert train_a == train_b and all(x > 0 for x in train_a)  # the same updates, and they moved


def test_greedy_validation_plays_the_highest_scoring_action_whatever_the_generator() -> None:
    policy = LinearSoftmaxPolicy(2**10, np.random.default_rng(0).normal(0, 1.0, 2**10))
    feat = Featurizer(2**10)
    info = {"admissible_actions": ["look", "inventory", "go to desk 1", "open drawer 1"],
            "task": {"goal": "find a mug", "type": "demo"}}
    decision = feat.decision(goal="find a mug", task_type="demo", observation="A kitchen.",
                             actions=info["admissible_actions"], history=[], task=info["task"])
    best = info["admissible_actions"][int(np.argmax(policy.scores(decision)))]
    chosen = set()
    for seed in range(20):
        for coupled in (False, True):
            arena = ArenaPolicy(policy, feat, temperature=0.0, coupled=coupled,
                                rng=lambda g, s, seed=seed: np.random.default_rng([seed, g, s]))
            chosen |= set(arena([Turn(0, 0, 0, "A kitchen.", info)]))
            (rec,) = arena.records[(0, 0)]
            assert rec.old_logp == pytest.approx(float(policy.log_probabilities(decision)[rec.chosen]))
    assert chosen == {best}
    sampled = {ArenaPolicy(policy, feat, temperature=1.0, rng=lambda g, s, seed=seed: np.random.default_rng(seed))(
        [Turn(0, 0, 0, "A kitchen.", info)])[0] for seed in range(40)}
    assert len(sampled) > 1  # the same policy at temperature 1 does not always pick it


def test_validation_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="val_episodes"):
        ArenaConfig.of(eval_temperature=0.0, val_episodes=2)
    for bad in (-0.1, float("nan"), True):
        with pytest.raises(ValueError, match="val_temperature"):
            ArenaConfig.of(eval_temperature=bad)
    with pytest.raises(ValueError, match="val_episodes"):
        ArenaConfig.of(val_episodes=0)
    assert ArenaConfig.of(eval_temperature=0).rollout.val_temperature == 0

"""The arena plays through the project's one episode loop.

* Every arena episode is played by :class:`agent_envs.rollout.GroupRunner` and every step
  is built by :func:`rubrics.trajectory.step_from_info`: a small WebShop run counts the
  calls against the steps its metrics report, and the old loop is gone.
* Each episode ``(group, slot)`` draws from its own generator, so a group played in lock
  step takes exactly the actions of its siblings played one by one (and the memo, shared
  by the siblings' environments, changes nothing); the control, one generator shared by
  all siblings, does depend on the order of play.
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import agent_envs  # noqa: F401  (registers the environments)
from agent_envs import rollout
from agent_envs.rollout import EnvPool, GroupRunner
from trainers.arena import agent, run, validation
from trainers.arena.agent import ArenaPolicy, play_groups
from trainers.arena.config import ENV_PRESETS, ArenaConfig, EnvPreset
from trainers.arena.memo import EpisodeMemo, MemoTable
from trainers.arena.policy import Featurizer, LinearSoftmaxPolicy
from trainers.arena.run import run_one

#: A small generated catalogue: environments made in well under a second.
SHOP = dict(catalogue="generated", num_products=150, tagger="lexicon")
DIM = 2**14


def _shop(memo: MemoTable | None = None):
    def make():
        env = gym.make("WebShop-Rubric-v0", **SHOP, max_steps=8)
        return EpisodeMemo(env, table=memo) if memo is not None else env

    return make


def _policy() -> LinearSoftmaxPolicy:
    policy = LinearSoftmaxPolicy(DIM)
    policy.weights[:] = np.random.default_rng(0).normal(0.0, 0.3, DIM)
    return policy


def _keyed(slot_offset: int = 0):
    return lambda group, slot: np.random.default_rng([5, group, slot + slot_offset])


def test_the_arena_plays_every_step_through_group_runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(ENV_PRESETS, "webshop-generated",
                        EnvPreset("WebShop-Rubric-v0", "webshop", SHOP, "train", "eval", max_steps=8))
    runs, steps = [], []
    real_run, real_step = GroupRunner.run, rollout.step_from_info

    def spy_run(self, tasks, policy, **kw):
        runs.append((len(tasks), kw["group_size"], type(policy).__name__))
        return real_run(self, tasks, policy, **kw)

    def spy_step(*args, **kw):
        steps.append(1)
        return real_step(*args, **kw)

    monkeypatch.setattr(GroupRunner, "run", spy_run)
    monkeypatch.setattr(rollout, "step_from_info", spy_step)
    cfg = ArenaConfig.of(env="webshop-generated", updates=2, tasks_per_update=2, group_size=3, train_tasks=4,
                      val_tasks=4, eval_every=2, epochs=1, minibatch=16)
    run_one(cfg, "grpo", 0, tmp_path)
    recs = [json.loads(line) for line in (tmp_path / "runs" / "grpo__seed0" / "metrics.jsonl").open()]
    evals = [r for r in recs if r["phase"] == "eval"]
    trains = [r for r in recs if r["phase"] == "train"]
    # 2 validations (updates 0 and 2) of 4 tasks in chunks of G=3 (3 + 1 tasks, one rollout
    # each); 2 updates of 2 groups played one group at a time, G=3 siblings in lock step
    eval_calls, train_calls = [(3, 1, "ArenaPolicy"), (1, 1, "ArenaPolicy")], [(1, 3, "ArenaPolicy")] * 2
    assert runs == eval_calls + train_calls * 2 + eval_calls
    played = sum(r["episodes"] * r["mean_steps"] for r in evals)
    played += sum(r["train/episodes"] * r["train/mean_steps"] for r in trains)
    assert len(steps) == round(played) > 0
    assert [r["train/episodes"] for r in trains] == [6, 6]
    assert not any(hasattr(m, "play_episode") for m in (agent, run, validation))  # no second episode loop


def _play_lockstep(pool: EnvPool, policy: LinearSoftmaxPolicy, rng, task: int, g: int):
    agent = ArenaPolicy(policy, Featurizer(DIM), temperature=1.0, rng=rng)
    (group,) = play_groups(pool, agent, [task], [task], split="train", group_size=g)
    return group, [agent.records[(0, s)] for s in range(g)]


def _play_one_by_one(pool: EnvPool, policy: LinearSoftmaxPolicy, rng_of_slot, task: int, g: int):
    group, records = [], []
    for slot in range(g):  # slot s alone (group 0, slot 0 of its call) with slot s's generator
        agent = ArenaPolicy(policy, Featurizer(DIM), temperature=1.0, rng=rng_of_slot(slot))
        (trajs,) = play_groups(pool, agent, [task], [task], split="train", group_size=1)
        group += trajs
        records.append(agent.records[(0, 0)])
    return group, records


def test_keyed_generators_give_the_same_actions_in_lock_step_or_one_by_one() -> None:
    policy, g = _policy(), 4
    table = MemoTable()
    with EnvPool(_shop()) as plain, EnvPool(_shop(table)) as memo:
        task = int(plain.local.setdefault(0, plain.env()).unwrapped.split_range("train")[3])
        lock, lock_recs = _play_lockstep(plain, policy, _keyed(), task, g)
        alone, alone_recs = _play_one_by_one(plain, policy, _keyed, task, g)
        memoised, memo_recs = _play_lockstep(memo, policy, _keyed(), task, g)
        # the control: one generator shared by all siblings depends on the order of play
        shared = np.random.default_rng(5)
        shared_lock, _ = _play_lockstep(plain, policy, lambda group, slot: shared, task, g)
        shared = np.random.default_rng(5)
        shared_alone, _ = _play_one_by_one(plain, policy, lambda slot: lambda group, s: shared, task, g)
    actions = [[s.action for s in t.steps] for t in lock]
    assert len({tuple(a) for a in actions}) > 1  # the siblings do differ
    assert [[s.action for s in t.steps] for t in alone] == actions
    for a, b in ((lock, alone), (lock, memoised)):
        assert [t.steps for t in a] == [t.steps for t in b]
        assert [(t.score, t.success, t.truncated) for t in a] == [(t.score, t.success, t.truncated) for t in b]
    for recs in (alone_recs, memo_recs):
        assert [[(r.chosen, r.old_logp) for r in rs] for rs in recs] == \
            [[(r.chosen, r.old_logp) for r in rs] for rs in lock_recs]
    assert [len(rs) for rs in lock_recs] == [len(t.steps) for t in lock]  # one record per step
    assert table.hits > 0  # the siblings' environments answered each other from the shared memo
    assert [[s.action for s in t.steps] for t in shared_lock] != [[s.action for s in t.steps] for t in shared_alone]

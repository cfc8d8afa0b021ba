"""The arena's text-only policy and its fresh games per seed.

* ``policy="text"`` reads what an LLM agent's prompt shows and nothing else: the features of
  every decision of a real generated ALFWorld episode are unchanged when the rubric status,
  the matching keys, the task's parsed spec and the engine's state in ``info`` are replaced by
  garbage, and when history older than the prompt's two turns is replaced; under the rubric
  policy (the control) the same garbage changes them.  What the prompt shows (goal,
  observation, recent actions) does change them.
* ``fresh_games=True`` gives every seed its own games (generated games keyed by the seed on
  ALFWorld, a seed's own draw of goals on WebShop): two seeds differ, one seed repeats.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from agent_envs import make_env
from agent_envs.alfworld.data import task_walkthrough
from agent_envs.rollout import Turn
from trainers.arena import config
from trainers.arena.agent import ArenaPolicy
from trainers.arena.config import ArenaConfig
from trainers.arena.envs import make_arena_env, task_sets, warm_start_tasks
from trainers.arena.policy import DecisionFeatures, Featurizer, LinearSoftmaxPolicy, make_featurizer
from trainers.arena.text_features import HISTORY_LENGTH, TextFeaturizer

DIM = 2**14


def _episode(steps: int = 6) -> list[tuple[Turn, dict]]:
    """Turns of a generated ALFWorld game played along its walkthrough (with the task dict)."""
    env = make_env("ALFWorld-Rubric-v0", {"split": "generated", "generated_n": 60})
    for k in range(60):  # the first game whose walkthrough is that long (a clean/heat/cool/two-object task)
        obs, info = env.reset(seed=0, options={"task": k, "split": "generated"})
        if len(plan := task_walkthrough(info)) >= steps:
            break
    task, out, history = dict(info["task"]), [], []
    assert len(plan) >= steps
    for t, action in enumerate(plan[:steps]):
        out.append((Turn(0, 0, t, obs, dict(info), tuple(history)), task))
        history.append((obs, action))
        obs, _r, _term, _trunc, info = env.step(action)
    env.close()
    return out


def _garbled(turn: Turn, task: dict) -> tuple[Turn, dict]:
    """The turn with everything an LLM prompt does not show replaced by garbage (goal kept)."""
    info = dict(turn.info)
    info["rubric"] = {k: (not v if isinstance(v, bool) else 7) for k, v in (info.get("rubric") or {}).items()}
    info["keys"] = {"exact": ("junk",), "coarse": ("junk", 3), "signature": ("zz",)}
    junk_task = {"goal": task["goal"], "type": "pick_two_obj_and_place", "target": "fridge",
                 "destination": "apple", "lamp": "sinkbasin", "required": 2, "id": "junk"}
    info["task"] = junk_task
    info.update(location="garbagecan 9", holding="mug 3", state_key="junk", signature=("A", "B"))
    return dataclasses.replace(turn, info=info), junk_task


def _features(feat, turn: Turn, task: dict) -> DecisionFeatures:
    return feat.turn_decision(turn, goal=task["goal"], actions=turn.info["admissible_actions"], task=task,
                              task_type=str(task.get("type", "-")))


def _same(a: DecisionFeatures, b: DecisionFeatures) -> bool:
    return (a.actions == b.actions and np.array_equal(a.indices, b.indices) and np.array_equal(a.values, b.values)
            and np.array_equal(a.owner, b.owner))


def test_text_features_ignore_rubric_keys_task_spec_and_engine_state_and_rubric_features_do_not() -> None:
    turns = _episode()
    text, rubric = TextFeaturizer(DIM), Featurizer(DIM)
    changed = 0
    for turn, task in turns:
        bad_turn, bad_task = _garbled(turn, task)
        assert _same(_features(text, turn, task), _features(text, bad_turn, bad_task))
        changed += not _same(_features(rubric, turn, task), _features(rubric, bad_turn, bad_task))
    assert changed == len(turns)  # the control: the rubric policy reads what was garbled, at every turn


def test_text_features_read_the_prompt_and_only_its_last_turns() -> None:
    turns = _episode()
    text = TextFeaturizer(DIM)
    turn, task = turns[-1]
    assert len(turn.history) > HISTORY_LENGTH
    base = _features(text, turn, task)
    # history older than the prompt's last HISTORY_LENGTH turns is never shown: replacing it changes nothing
    old = tuple(("You see nothing.", "look") for _ in turn.history[:-HISTORY_LENGTH]) + turn.history[-HISTORY_LENGTH:]
    assert _same(base, _features(text, dataclasses.replace(turn, history=old), task))
    # what the prompt shows does change the features: the recent turns, the observation, the goal
    assert not _same(base, _features(text, dataclasses.replace(turn, history=turn.history[:-1]), task))
    assert not _same(base, _features(text, dataclasses.replace(turn, observation="Nothing happens."), task))
    assert not _same(base, _features(text, turn, {**task, "goal": "put a mug in sinkbasin."}))


def test_a_long_goal_sentence_weighs_as_much_as_a_short_one() -> None:
    # Sokoban's goal is a 23-word legend every level shares: one unscaled feature per goal word
    # made it a 23-fold bias of each direction, and the text policy learned nothing there
    env = make_env("Sokoban-Rubric-v0")
    grid, info = env.reset(seed=0)
    env.close()
    text, moves = TextFeaturizer(DIM), ["up", "down", "left", "right"]

    def norms(goal: str) -> np.ndarray:
        d = text.decision(goal=goal, observation=grid, actions=moves)
        return np.bincount(d.owner, weights=d.values**2)

    short, long = norms("Push the box onto the target."), norms(info["task"]["goal"])
    assert len(info["task"]["goal"].split()) > 30
    # the crosses and the goal-role features weigh one unit each however long the goal is; the
    # long goal also names the moves, which adds the goal-overlap features' unit
    assert np.all(long <= short + 1.0 + 1e-9), (short, long)


def test_the_arena_policy_acts_the_same_on_garbled_info_with_the_text_policy() -> None:
    turns = _episode()
    pol = LinearSoftmaxPolicy(DIM, np.random.default_rng(0).normal(0, 1.0, DIM))
    acts = {}
    for garble in (False, True):
        agent = ArenaPolicy(pol, make_featurizer("text", DIM), temperature=1.0, coupled=True,
                            rng=lambda _g, slot: np.random.default_rng(slot))
        acts[garble] = [agent([_garbled(turn, task)[0] if garble else turn])[0] for turn, task in turns]
        logps = [r.old_logp for r in agent.records[(0, 0)]]
        acts[garble].append(logps)
    assert acts[False] == acts[True]


def test_fresh_games_on_webshop_differ_between_seeds_and_repeat_for_a_seed() -> None:
    cfg = ArenaConfig.for_env("webshop", train_tasks=8, val_tasks=6, fresh_games=True)
    fixed = ArenaConfig.for_env("webshop", train_tasks=8, val_tasks=6)
    sets = {s: task_sets(make_arena_env(cfg, s), cfg, s)[:2] for s in (0, 1)}
    again = task_sets(make_arena_env(cfg, 0), cfg, 0)[:2]
    assert sets[0] == again
    assert sets[0][0] != sets[1][0] and sets[0][1] != sets[1][1]
    for s in (0, 1):  # training and validation goals stay disjoint within a seed
        assert set(sets[s][0]).isdisjoint(sets[s][1])
    # without the option every seed plays the fixed goals
    assert task_sets(make_arena_env(fixed, 0), fixed, 0)[:2] == task_sets(make_arena_env(fixed, 1), fixed, 1)[:2]


@pytest.mark.slow
def test_fresh_generated_alfworld_games_differ_between_seeds_and_repeat_for_a_seed(monkeypatch) -> None:
    """Four games per seed (the preset's 60 made small here, so the test generates 12 games)."""
    small = dataclasses.replace(config.ENV_PRESETS["alfworld-generated"], generated_n=4)
    monkeypatch.setitem(config.ENV_PRESETS, "alfworld-generated", small)
    cfg = ArenaConfig.of(env="alfworld-generated", train_tasks=2, val_tasks=1, warm_start_tasks=1,
                         tasks_per_update=1, fresh_games=True)
    games = {}
    for s in (0, 1, 0):
        env = make_arena_env(cfg, s)
        train, val, _split = task_sets(env, cfg, s)
        files = {t: env.unwrapped._catalogue("generated")[1][t] for t in [*train, *val, *warm_start_tasks(env, cfg, s)]}
        texts = tuple(Path(files[t]).read_bytes() for t in sorted(files))
        assert s not in games or games[s] == texts  # the same seed: the same games, byte for byte
        games[s] = texts
    assert set(games[0]).isdisjoint(games[1])  # another seed: other games

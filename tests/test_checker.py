"""`check_rubric_env`: the SPEC §2 `info` contract, on our environments and on broken toys."""

from __future__ import annotations

import random

import gymnasium as gym
import pytest

import agent_envs
from agent_envs.checker import CONTRACT, INVALID_PROBES, RubricEnvError, check_rubric_env


class Toy(gym.Env):
    """Count to 3 with "up"; "wait" does nothing; anything else is invalid (-0.1).

    ``patch(info, env)`` may edit every info; the ``bad_*`` switches break other clauses."""

    observation_space = gym.spaces.Text(max_length=10_000, charset="".join(map(chr, range(32, 127))))

    def __init__(self, patch=None, **bad):
        self.patch, self.bad = patch, bad
        self.n = self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n = self.t = 0
        return self._obs(), self._info(True, 0.0, 0.0)

    def step(self, action):
        if not isinstance(action, str):
            if self.bad.get("accepts_ints"):
                action = str(action)
            else:
                raise TypeError(f"actions are str, got {type(action).__name__}")
        if self.bad.get("crash_on_empty") and not action:
            raise ValueError("empty action")
        valid = action in ("up", "wait") or bool(self.bad.get("everything_valid"))
        if action == "up":
            self.n += 1
        self.t += 1
        task_reward = 10.0 if self.n == 3 and action == "up" else 0.0
        penalty = 0.0 if valid else -0.1
        reward = task_reward + penalty + (1.0 if self.bad.get("reward_off") else 0.0)
        if self.bad.get("random_start") and self.t == 1:
            self.n += random.randint(0, 1)
        return self._obs(), reward, self.n >= 3, self.t >= 10, self._info(valid, task_reward, penalty)

    def _obs(self):
        return f"count {self.n}" + ("\u2603" if self.bad.get("snowman") else "")

    def _info(self, valid, task_reward, penalty):
        info = {
            "admissible_actions": ["up", "wait"],
            "task": {"id": "toy/0", "goal": "count to 3", "type": "toy"},
            "rubric": {"progress": self.n / 3},
            "keys": {"exact": self.n, "coarse": self.n > 0, "signature": (frozenset(), frozenset({"progress"}))},
            "state_key": self.n,
            "won": self.n >= 3,
            "score": float(self.n >= 3),
            "valid": valid,
            "task_reward": task_reward,
            "penalty": penalty,
        }
        if self.patch is not None:
            self.patch(info, self)
        return info


def test_a_correct_toy_passes_and_every_clause_is_stated():
    check_rubric_env(Toy())
    check_rubric_env(Toy(), steps=20, choose=lambda obs, info, t: "up")
    assert {"info.task", "reward", "invalid", "determinism", "type_error"} <= set(CONTRACT)
    assert "" in INVALID_PROBES and max(map(len, INVALID_PROBES)) > 100_000


def _set(path, value):
    def patch(info, env):
        target = info
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return patch


def _drop(path):
    def patch(info, env):
        target = info
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return patch


@pytest.mark.parametrize(
    ("env", "clause", "detail"),
    [
        (Toy(_drop(["rubric"])), "info.rubric", "info has no 'rubric'"),
        (Toy(_drop(["task", "goal"])), "info.task", "info['task']['goal'] is '<missing>'"),
        (Toy(_set(["task", "id"], None)), "info.task", "info['task']['id'] is None"),
        (Toy(_set(["admissible_actions"], ("up", "wait"))), "info.admissible_actions", "got ('up', 'wait')"),
        (Toy(_set(["admissible_actions"], ["up", 3])), "info.admissible_actions", "got ['up', 3]"),
        (Toy(_set(["admissible_actions"], [])), "info.admissible_actions", "no action is admissible"),
        (Toy(_set(["rubric", "progress"], [0.5])), "info.rubric", "channel 'progress' has value [0.5]"),
        (Toy(_drop(["keys", "coarse"])), "info.keys", "info['keys'] has no 'coarse'"),
        (Toy(_set(["keys", "exact"], ["list"])), "info.keys", "info['keys']['exact'] is not hashable"),
        (Toy(_set(["keys", "signature"], "AH")), "info.keys", "not a pair (C, F)"),
        (Toy(_set(["state_key"], {"n": 0})), "info.state_key", "got {'n': 0}"),
        (Toy(_set(["state_key"], None)), "info.state_key", "got None"),
        (Toy(_set(["won"], 0)), "info.won", "got 0"),
        (Toy(_set(["score"], float("nan"))), "info.score", "got nan"),
        (Toy(_set(["score"], True)), "info.score", "got True"),
        (Toy(_set(["valid"], "yes")), "info.valid", "got 'yes'"),
        (Toy(_drop(["task_reward"])), "info.task_reward", "info has no 'task_reward'"),
        (Toy(_set(["penalty"], None)), "info.penalty", "got None"),
    ],
)
def test_a_broken_info_names_the_clause(env, clause, detail):
    with pytest.raises(RubricEnvError) as err:
        check_rubric_env(env)
    assert err.value.clause == clause
    message = str(err.value)
    assert message.startswith(f"[{clause}] Toy, after reset: ") and detail in message
    assert message.endswith(f"(SPEC §2: {CONTRACT[clause]})")


def test_broken_transitions_name_the_clause_and_the_step():
    cases = [
        (Toy(reward_off=True), "reward", "[reward] Toy, after step 0 ('up'): reward 1.0 != task_reward 0.0 + penalty 0.0"),
        (Toy(crash_on_empty=True), "invalid", "[invalid] Toy, invalid action '': raised ValueError: empty action"),
        (Toy(everything_valid=True), "invalid", "[invalid] Toy, invalid action '': info['valid'] is True"),
        (Toy(accepts_ints=True), "type_error", "[type_error] Toy, step(12345): did not raise"),
        (Toy(snowman=True), "observation_space", "characters outside the charset: ['\u2603']"),
        (Toy(_task_changes), "task.constant", "[task.constant] Toy, after step 0 ('up'): info['task'] changed"),
        (Toy(_wait_is_invalid), "admissible", "[admissible] Toy, after step 1 ('wait'): info['valid'] is False"),
    ]
    old_api = Toy()
    old_api.reset = lambda seed=None, options=None: "count 0"
    four = Toy()
    four.step = lambda action: ("count 0", 0.0, False, {})
    cases += [
        (old_api, "reset", "[reset] Toy, after reset: returned 'count 0', not (observation, info)"),
        (four, "step", "[step] Toy, after step 0 ('up'): returned ('count 0', 0.0, False, {}), not a 5-tuple"),
    ]
    for env, clause, start in cases:
        with pytest.raises(RubricEnvError) as err:
            check_rubric_env(env)
        assert err.value.clause == clause and start in str(err.value), str(err.value)


def _task_changes(info, env):
    info["task"] = dict(info["task"], goal=f"count to 3 (step {env.t})")


def _wait_is_invalid(info, env):
    info["valid"] = info["valid"] and env.t != 2  # the second action ("wait") is rejected
    info["penalty"] = 0.0 if info["valid"] else info["penalty"]


def test_nondeterminism_is_reported_with_the_first_difference():
    random.seed(1)  # the toy's first step adds 0 or 1 at random; a few tries show both
    messages = set()
    for _ in range(20):
        try:
            check_rubric_env(Toy(random_start=True), steps=3)
        except RubricEnvError as err:
            assert err.clause == "determinism"
            messages.add(str(err).split(" (SPEC")[0])
    assert messages and all(m.startswith("[determinism] Toy, after step 0 ('up'): the observation was 'count ")
                            for m in messages), messages


def test_webshop_keeps_the_contract():
    env = gym.make("WebShop-Rubric-v0", catalogue="generated", num_products=300, tagger="lexicon")
    try:
        check_rubric_env(env, options={"task": 3}, steps=8)
        check_rubric_env(env, seed=5)
    finally:
        env.close()


@pytest.mark.slow
def test_alfworld_generated_keeps_the_contract():
    assert "ALFWorld-Rubric-v0" in agent_envs.ENV_IDS
    env = gym.make("ALFWorld-Rubric-v0", split="generated", max_steps=8)
    try:
        check_rubric_env(env, options={"task": 0}, steps=10)
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.alfworld_data
def test_alfworld_real_games_keep_the_contract(alfworld_data):
    env = gym.make("ALFWorld-Rubric-v0", split="valid_seen", data_root=str(alfworld_data), max_steps=6)
    try:
        check_rubric_env(env, options={"task": 0}, steps=8)
    finally:
        env.close()


def test_every_typed_field_has_a_clause_and_both_envs_build_it(mini_dir) -> None:
    """One contract: the TypedDict's fields are the checker's info clauses, and both
    environments' info starts with exactly those fields, in order (agent_envs.info.rubric_info)."""
    from agent_envs.info import CONTRACT_FIELDS

    assert {f"info.{f}" for f in CONTRACT_FIELDS} <= set(CONTRACT)
    for env in (gym.make("ALFWorld-Rubric-v0", split="generated"),
                gym.make("WebShop-Rubric-v0", catalogue=str(mini_dir), verify=False, tagger="lexicon")):
        _, info = env.reset(seed=0)
        _, _, _, _, after = env.step(info["admissible_actions"][0])
        for i in (info, after):
            assert tuple(i)[:len(CONTRACT_FIELDS)] == CONTRACT_FIELDS
            assert type(i["won"]) is bool and type(i["score"]) is float and type(i["penalty"]) is float
        env.close()

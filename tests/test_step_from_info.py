"""`step_from_info` and `hashable`: the one place an env's `info` becomes a `Step` (issue 13)."""

from __future__ import annotations

import numpy as np
import pytest

from rubrics.trajectory import Trajectory, hashable, load_jsonl, save_jsonl, step_from_info

C, F = frozenset({"target_acquired"}), frozenset({"target_placed"})


def pre_info(**kw):
    info = {"state_key": "s0", "rubric": {"target_acquired": 0}, "keys": {"exact": ("e",), "coarse": ("c",)},
            "signature": ["A", "L"]}
    info.update(kw)
    return info


def test_canonical_action_and_environment_keys_are_used():
    # ALFWorld echoes its canonical command in info["action"]
    s = step_from_info("obs", pre_info(), "  Go To Desk 1 ", "You arrive.", 0.0,
                       {"action": "go to desk 1", "task_reward": 0.0, "penalty": 0.0, "state_key": "s1"})
    assert (s.action, s.action_key) == ("go to desk 1", "go to desk 1")
    assert (s.state_key, s.next_state_key, s.observation, s.feedback) == ("s0", "s1", "obs", "You arrive.")
    # keys without a signature get info["signature"] (matching_keys)
    assert s.rubric == {"target_acquired": 0}
    assert s.keys == {"exact": ("e",), "coarse": ("c",), "signature": ("A", "L")}
    assert s.extra == {"signature": ["A", "L"]}
    # an empty or non-string echo falls back to the action sent
    assert step_from_info("o", {}, "look", "o", 0.0, {"action": ""}).action == "look"
    assert step_from_info("o", {}, "look", "o", 0.0, {"action": 3}).action == "look"


def test_action_key_precedence_keeps_falsy_keys():
    table = {"click[b01]": 0, "click[b02]": 2}
    # the post-step key wins, even when it is falsy (the trainer used to drop 0 and "")
    assert step_from_info("o", {"action_keys": table}, "click[b02]", "o", 0.0, {"action_key": ""}).action_key == ""
    assert step_from_info("o", {"action_keys": table}, "click[b01]", "o", 0.0, {}).action_key == 0
    assert step_from_info("o", {"action_keys": table}, "click[b02]", "o", 0.0, {"action_key": None}).action_key == 2
    # looked up by the canonical action first, then by the action sent
    s = step_from_info("o", {"action_keys": {"look": "L", "Look": "raw"}}, "Look", "o", 0.0, {"action": "look"})
    assert s.action_key == "L"
    s = step_from_info("o", {"action_keys": {"Look": "raw"}}, "Look", "o", 0.0, {"action": "look"})
    assert s.action_key == "raw"
    # no key anywhere: the canonical action
    assert step_from_info("o", {"action_keys": "not a table"}, "x", "o", 0.0, {}).action_key == "x"
    # unhashable keys are frozen, not replaced
    assert step_from_info("o", {}, "x", "o", 0.0, {"action_key": ["nav", 1]}).action_key == ("nav", 1)


@pytest.mark.parametrize(
    ("reward", "info", "task_reward", "penalty"),
    [
        (9.9, {"task_reward": 10.0, "penalty": -0.1}, 10.0, -0.1),  # both given: taken as they are
        (-0.1, {}, -0.1, 0.0),  # neither: all of it is task reward
        (-0.1, {"penalty": -0.1}, 0.0, -0.1),  # task reward = reward - penalty
        (10.05, {"task_reward": 10.0}, 10.0, 10.05 - 10.0),  # penalty = reward - task reward
        (0.0, {"task_reward": None, "penalty": None}, 0.0, 0.0),
    ],
)
def test_reward_split_always_adds_up_to_the_gymnasium_reward(reward, info, task_reward, penalty):
    s = step_from_info("o", {}, "a", "o", reward, info)
    assert (s.reward, s.penalty) == (task_reward, penalty)
    assert s.row_reward == pytest.approx(reward)


def test_missing_fields_fall_back_to_observations_and_defaults():
    s = step_from_info("before", {}, "a", 7, np.float32(0.5), {})
    assert (s.state_key, s.next_state_key, s.feedback) == ("before", "7", "7")
    assert (s.valid, s.rubric, s.keys, s.extra, s.reward) == (True, {}, {}, {}, 0.5)
    s = step_from_info("o", {"keys": {"exact": 1}, "signature": (C, F)}, "a", "o", 0.0, {"valid": np.bool_(False)})
    assert s.valid is False and s.keys == {"exact": 1, "signature": (C, F)}
    # the caller's extra is added to (and may override) the signature
    s = step_from_info("o", {"signature": ["A"]}, "a", "o", 0.0, {}, extra={"response": "<action>a</action>"})
    assert s.extra == {"signature": ["A"], "response": "<action>a</action>"}


def test_hashable_freezes_equal_values_to_equal_keys():
    assert hashable(None, "fallback") == "fallback" and hashable(None) is None
    assert hashable(("a", 1)) == ("a", 1) and hashable(0, "x") == 0 and hashable("", "x") == ""
    assert hashable([1, [2, {3}]]) == (1, (2, frozenset({3})))
    assert hashable({"b": [1], "a": 2}) == hashable({"a": 2, "b": [1]}) == frozenset({("a", 2), ("b", (1,))})
    assert hashable({"a": 1}) != hashable({"a": 2})
    assert hashable(np.array([[1, 2], [3, 4]])) == ((1, 2), (3, 4))

    class Unhashable:
        __hash__ = None

        def __repr__(self) -> str:
            return "<U>"

    assert hashable(Unhashable()) == "<U>"


def test_steps_with_frozen_keys_round_trip_through_jsonl(tmp_path):
    s = step_from_info("o", {"state_key": {"room": "kitchen", "held": ["apple"]}}, "a", "o", 0.0,
                       {"state_key": [1, 2]})
    hash(s.state_key), hash(s.next_state_key)
    path = tmp_path / "r.jsonl"
    save_jsonl(path, [Trajectory("t", 0, [s])])
    assert load_jsonl(path)[0].steps[0] == s

"""RubricShaping [MCGPO Eq. 18] on a scripted transition sequence."""

from __future__ import annotations

import gymnasium as gym
import pytest

from wrappers import RubricShaping, shaping_term


class ScriptedRubricEnv(gym.Env):
    """A tiny real environment whose rubric follows a fixed script (test fixture)."""

    observation_space = gym.spaces.Text(64)
    action_space = gym.spaces.Text(64)

    def __init__(self, script, rewards):
        self.script, self.rewards, self.t = script, rewards, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return "start", {"rubric": self.script[0], "penalty": 0.0}

    def step(self, action):
        self.t += 1
        done = self.t == len(self.script) - 1
        info = {"rubric": self.script[self.t], "penalty": -0.1 if action == "bad" else 0.0}
        return f"obs{self.t}", self.rewards[self.t - 1], done, False, info


def test_shaping_values_on_scripted_sequence() -> None:
    script = [
        {"target_acquired": 0, "target_in_hand": False, "goal_progress": 0, "invalid_actions": 0},
        {"target_acquired": 1, "target_in_hand": True, "goal_progress": 0, "invalid_actions": 0},  # +2
        {"target_acquired": 1, "target_in_hand": True, "goal_progress": 0, "invalid_actions": 1},  # diag only: 0
        {"target_acquired": 1, "target_in_hand": False, "goal_progress": 1, "invalid_actions": 1},  # +1 -1 = 0
        {"target_acquired": 1, "target_in_hand": False, "goal_progress": 0.5, "invalid_actions": 1},  # -1
        {"target_acquired": 2, "target_in_hand": True, "goal_progress": 2, "solved": True, "invalid_actions": 1},  # +4
    ]
    env = RubricShaping(ScriptedRubricEnv(script, [0, -0.1, 0, 0, 10]), coef=0.05)
    env.reset()
    rewards, shaping, penalties = [], [], []
    for action in ["a", "bad", "a", "a", "a"]:
        _, r, _, _, info = env.step(action)
        rewards.append(r)
        shaping.append(info["shaping"])
        penalties.append(info["penalty"])
    assert shaping == pytest.approx([0.10, 0.0, 0.0, -0.05, 0.20])
    assert rewards == pytest.approx([0.10, -0.1, 0.0, -0.05, 10.20])
    assert penalties == pytest.approx([0.10, -0.1, 0.0, -0.05, 0.20])


def test_shaping_term_coefficient_and_missing_channels() -> None:
    # 'a' rises 0 -> 1, 'b' appears only after (missing counts as 0): two increases
    assert shaping_term({"a": 0}, {"a": 1, "b": 0.3}, coef=1.0) == 2.0
    assert shaping_term({"a": "x"}, {"a": 1}, coef=1.0) == 0.0  # non-numeric skipped


def test_shaping_needs_rubric_and_valid_coef() -> None:
    with pytest.raises(TypeError, match="coef must be a finite number"):
        RubricShaping(ScriptedRubricEnv([{}], []), coef=float("nan"))

    class NoRubric(ScriptedRubricEnv):
        def reset(self, *, seed=None, options=None):
            return "start", {}

    with pytest.raises(KeyError, match="needs info\\['rubric'\\]"):
        RubricShaping(NoRubric([{}], [])).reset()


def test_the_wrapper_is_recorded_in_the_spec() -> None:
    """Gymnasium's RecordConstructorArgs: env.spec lists RubricShaping and its coef, so
    gym.make(env.spec) rebuilds the shaped environment."""
    import gymnasium as gym

    import agent_envs  # noqa: F401

    env = RubricShaping(gym.make("ALFWorld-Rubric-v0", split="generated"), coef=0.1)
    (spec,) = [w for w in env.spec.additional_wrappers if w.name == "RubricShaping"]
    assert spec.kwargs == {"coef": 0.1} and spec.entry_point == "wrappers.shaping:RubricShaping"
    again = gym.make(env.spec)
    assert isinstance(again, RubricShaping) and again.coef == 0.1
    env.close()
    again.close()

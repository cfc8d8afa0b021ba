"""Shared bookkeeping (SPEC §4 preamble), GRPO/RLOO (§4.1) and input validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rubrics.trajectory import Step, Trajectory
from wrappers.credit import CreditInputError, available_estimators, get_estimator
from wrappers.credit.common import normalize, outcomes, row_scores, step_returns, task_norm

EPS = 1e-6


def tr(slot: int, rewards: list[float], penalties: list[float] | None = None, task: str = "T") -> Trajectory:
    penalties = penalties or [0.0] * len(rewards)
    steps = [Step(f"s{k}", "a", reward=r, penalty=p) for k, (r, p) in enumerate(zip(rewards, penalties))]
    return Trajectory(task, slot, steps, success=sum(rewards) > 0)


# ---- bookkeeping -----------------------------------------------------------------------

def test_outcome_row_score_and_step_return() -> None:
    t = tr(0, [0.0, 0.0, 10.0], [-0.1, 0.0, 0.05])
    assert outcomes([t]).tolist() == [10.0]
    # Z = O + penalty_t
    np.testing.assert_allclose(row_scores([t])[0], [9.9, 10.0, 10.05])
    # R_t = Σ γ^{k−t} reward_k + penalty_t (γ = 0.5): [2.5 − 0.1, 5, 10 + 0.05]
    np.testing.assert_allclose(step_returns(t, 0.5), [2.4, 5.0, 10.05])


def test_normalize_modes_and_singletons() -> None:
    # [1, 2, 6]: mean 3, devs −2, −1, 3, sample var (4 + 1 + 9)/2 = 7
    np.testing.assert_allclose(normalize(np.array([1.0, 2, 6]), "mean_std"), np.array([-2, -1, 3]) / (math.sqrt(7) + EPS))
    np.testing.assert_allclose(normalize(np.array([1.0, 2, 6]), "mean"), [-2, -1, 3])
    # singletons: step groups -> 0; task groups -> mean 0, scale 1 (the value itself)
    assert normalize(np.array([4.0]), "mean_std").tolist() == [0.0]
    assert normalize(np.array([4.0]), "mean_std", singleton="identity").tolist() == [4.0]


def test_task_norm_rows_weigh_longer_trajectories() -> None:
    g = [tr(0, [0.0, 10.0]), tr(1, [0.0])]
    # rows: Z = 10, 10, 0 -> mean 20/3; devs 10/3, 10/3, −20/3; var (100/9·2 + 400/9)/2 = 100/3
    sd = math.sqrt(100 / 3)
    out = task_norm(g, "mean_std")
    np.testing.assert_allclose(out[0], [10 / 3 / (sd + EPS)] * 2)
    np.testing.assert_allclose(out[1], [-20 / 3 / (sd + EPS)])
    # over trajectories: O = [10, 0] -> ±5/(10/√2 + 1e-6)
    out = task_norm(g, "mean_std", over="trajectories")
    np.testing.assert_allclose(out[0], [5 / (10 / math.sqrt(2) + EPS)] * 2)
    with pytest.raises(ValueError, match="episode_norm"):
        task_norm(g, "mean_std", over="tokens")


# ---- GRPO and RLOO ---------------------------------------------------------------------

def test_grpo_by_hand() -> None:
    g = [tr(0, [0.0, 10.0], [0.0, -0.1]), tr(1, [0.0, 0.0])]
    res = get_estimator("grpo", norm="mean")([g])[0]
    # Z rows: [10, 9.9], [0, 0]; mean 19.9/4 = 4.975
    np.testing.assert_allclose(res.advantages[0], [5.025, 4.925])
    np.testing.assert_allclose(res.advantages[1], [-4.975, -4.975])


def test_grpo_singleton_task_group_is_identity() -> None:
    # one trajectory with one row: Norm_task keeps (mean 0, scale 1) -> Z itself [MCGPO A.3]
    res = get_estimator("grpo")([[tr(0, [10.0])]])[0]
    assert res.advantages[0].tolist() == [10.0]


def test_rloo_by_hand() -> None:
    g = [tr(0, [0.0, 10.0], [0.0, -0.1]), tr(1, [0.0]), tr(2, [0.0])]
    res = get_estimator("rloo")([g])[0]
    # A_{i,t} = Z_{i,t} − mean_{j≠i} O_j: τ0: [10 − 0, 9.9 − 0]; τ1: 0 − (10 + 0)/2 = −5
    np.testing.assert_allclose(res.advantages[0], [10.0, 9.9])
    np.testing.assert_allclose(res.advantages[1], [-5.0])
    # a singleton group has no baseline: 0
    assert get_estimator("rloo")([[tr(0, [10.0])]])[0].advantages[0].tolist() == [0.0]


# ---- validation ------------------------------------------------------------------------

def test_registry_lists_builtins_and_rejects_unknowns() -> None:
    names = available_estimators()
    for name in ("grpo", "rloo", "gigpo", "graphgpo", "milegpo"):
        assert name in names
    with pytest.raises(ValueError, match="unknown estimator 'ppo'.*graphgpo"):
        get_estimator("ppo")
    with pytest.raises(TypeError, match="unknown parameter\\(s\\) gama.*gamma"):
        get_estimator("gigpo", gama=0.9)


@pytest.mark.parametrize("make, error, match", [
    (lambda: [[tr(0, [1.0]), tr(1, [0.0], task="U")]], CreditInputError, "group 0, trajectory 1: task id 'U'"),
    (lambda: [[tr(0, [1.0])], [tr(3, [1.0]), tr(3, [0.0])]], CreditInputError, "group 1, trajectory 1: duplicate slot 3"),
    (lambda: [[tr(0, [float("nan")])]], CreditInputError, "group 0, trajectory 0, step 0: reward is not finite"),
    (lambda: [[tr(0, [0.0, 1.0], [0.0, float("inf")])]], CreditInputError, "step 1: penalty is not finite"),
    (lambda: [[Trajectory("T", 0, [Step(["list"], "a")])]], CreditInputError, "state_key is not hashable"),
    (lambda: [[Trajectory("T", 0, [Step("s", "a", next_state_key={"d": 1})])]], CreditInputError,
     "next_state_key is not hashable"),
    (lambda: [[Trajectory("T", 0, [Step("s", "a", action_key=[1])])]], CreditInputError, "action_key is not hashable"),
    (lambda: [[Trajectory("T", 0, [], score=float("nan"))]], CreditInputError, "score is not finite"),
    (lambda: [[]], CreditInputError, "group 0 is empty"),
    (lambda: [tr(0, [1.0])], TypeError, "group 0 must be a sequence of Trajectory"),
    (lambda: "abc", TypeError, "groups must be a sequence"),
    (lambda: [[tr(0, [1.0]), "x"]], TypeError, "group 0, trajectory 1: expected a Trajectory"),
])
@pytest.mark.parametrize("name", ["grpo", "rloo", "gigpo", "graphgpo", "milegpo"])
def test_malformed_input_names_group_and_trajectory(name: str, make, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        get_estimator(name)(make())

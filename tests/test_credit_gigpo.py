"""GiGPO (SPEC §4.2): hand-computed anchor-group credit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rubrics.trajectory import Step, Trajectory
from wrappers.credit import get_estimator
from wrappers.credit.gigpo import gigpo_step_advantages

EPS = 1e-6


def group() -> list[Trajectory]:
    # τ0 wins in 3 steps, with an invalid action (penalty −0.1) at t=1;
    # τ1 fails, with an invalid action at t=2.  Both pass s0 and s1.
    t0 = Trajectory("T", 0, [Step("s0", "a"), Step("s1", "x", valid=False, penalty=-0.1),
                             Step("s2", "c", reward=10.0)], score=1, success=True)
    t1 = Trajectory("T", 1, [Step("s0", "d"), Step("s1", "e"), Step("s3", "f", valid=False, penalty=-0.1)])
    return [t0, t1]


# R_t = Σ_{k≥t} γ^{k−t} reward_k + penalty_t, γ = 0.95 (the penalty is NOT discounted back):
#   τ0: t2 = 10, t1 = 0.95·10 − 0.1 = 9.4, t0 = 0.95²·10 = 9.025
#   τ1: t0 = 0, t1 = 0, t2 = −0.1
# Anchor groups: s0 {9.025, 0}, s1 {9.4, 0}, s2 {10} and s3 {−0.1} singletons -> 0.
# Z_{i,t} = O_i + penalty: τ0 [10, 9.9, 10], τ1 [0, 0, −0.1]; mean over 6 rows = 29.8/6.


def test_gigpo_mean_mode_by_hand() -> None:
    res = get_estimator("gigpo", norm="mean")([group()])[0]
    zbar = 29.8 / 6
    # mean mode: two-member group -> ±half the difference
    np.testing.assert_allclose(res.advantages[0], [10 - zbar + 9.025 / 2, 9.9 - zbar + 9.4 / 2, 10 - zbar], rtol=1e-12)
    np.testing.assert_allclose(res.advantages[1], [0 - zbar - 9.025 / 2, 0 - zbar - 9.4 / 2, -0.1 - zbar], rtol=1e-12)


def test_gigpo_mean_std_by_hand() -> None:
    steps, stats = gigpo_step_advantages(group(), 0.95, "mean_std")
    # a two-member group normalises to ±(d/2)/(|d|/√2 + 1e-6)
    s0 = (9.025 / 2) / (9.025 / math.sqrt(2) + EPS)
    s1 = (9.4 / 2) / (9.4 / math.sqrt(2) + EPS)
    np.testing.assert_allclose(steps[0], [s0, s1, 0.0], rtol=1e-12)
    np.testing.assert_allclose(steps[1], [-s0, -s1, 0.0], rtol=1e-12)
    # 4 anchor groups; 2 of the 6 rows are singletons; mean anchor size 6/4
    assert stats == {"anchor_groups": 4, "singleton_share": pytest.approx(2 / 6), "mean_anchor_size": 1.5}


def test_gigpo_weights_and_gamma() -> None:
    # ω = 0 -> the episode term alone, which is GRPO's row-normalised Z
    a = get_estimator("gigpo", step_weight=0.0)([group()])[0].advantages
    b = get_estimator("grpo")([group()])[0].advantages
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-12)
    # γ = 0: R_t = reward_t + penalty_t, so τ0's s0 row has 0 = τ1's: the s0 group ties -> 0
    steps, _ = gigpo_step_advantages(group(), 0.0, "mean_std")
    assert steps[0][0] == 0.0 and steps[1][0] == 0.0
    # s1 group {−0.1, 0}: ∓(0.05)/(0.1/√2 + 1e-6)
    assert steps[0][1] == pytest.approx(-0.05 / (0.1 / math.sqrt(2) + EPS), rel=1e-12)


def test_gigpo_singleton_anchor_groups_give_zero() -> None:
    t = Trajectory("T", 0, [Step("s0", "a"), Step("s1", "b", reward=10.0)], success=True)
    steps, _ = gigpo_step_advantages([t], 0.95, "mean_std")
    assert np.array_equal(steps[0], np.zeros(2))


def test_gigpo_episode_norm_over_trajectories() -> None:
    res = get_estimator("gigpo", episode_norm="trajectories", step_weight=0.0)([group()])[0]
    # O = [10, 0] -> ±(5)/(10/√2 + 1e-6), broadcast (penalties ignored in this mode)
    v = 5 / (10 / math.sqrt(2) + EPS)
    np.testing.assert_allclose(res.advantages[0], [v] * 3, rtol=1e-12)
    np.testing.assert_allclose(res.advantages[1], [-v] * 3, rtol=1e-12)


def test_gigpo_custom_returns_shape_checked() -> None:
    with pytest.raises(ValueError, match="returns\\[1\\]"):
        gigpo_step_advantages(group(), 0.95, "mean", returns=[np.zeros(3), np.zeros(2)])


@pytest.mark.parametrize("kwargs, match", [({"gamma": -0.1}, "gamma"), ({"norm": "l2"}, "norm"),
                                           ({"episode_norm": "x"}, "episode_norm")])
def test_gigpo_bad_parameters(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        get_estimator("gigpo", **kwargs)

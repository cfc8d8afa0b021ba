"""HGPO: hand-derived advantages, the depth weights, the base item, both norms, the flat rows,
and a from-scratch transcription of verl-agent's ``recipe/hgpo`` semantics on random batches."""

from __future__ import annotations

import math
import random
from collections import defaultdict

import numpy as np
import pytest

from rubrics.trajectory import Step, Trajectory
from wrappers.credit import available_estimators, get_estimator
from wrappers.credit.flat import flat_advantages, flat_credit
from wrappers.credit.hgpo import HGPO

EPS = 1e-6
SQ2 = math.sqrt(2.0)


def traj(slot: int, obs: str, rewards: dict[int, float] | None = None, invalid: tuple[int, ...] = (),
         task: str = "t") -> Trajectory:
    """A trajectory visiting the observations ``obs`` (one character each)."""
    rewards = rewards or {}
    steps = [Step(o, f"a{t}", reward=rewards.get(t, 0.0), penalty=-0.1 if t in invalid else 0.0,
                  valid=t not in invalid) for t, o in enumerate(obs)]
    return Trajectory(task, slot, steps, score=float(bool(rewards)), success=bool(rewards))


def advantages(groups, **params) -> list[list[float]]:
    return [a.tolist() for res in get_estimator("hgpo", **params)(groups) for a in res.advantages]


# --- hand-derived -------------------------------------------------------------------------------

def inconsistent_group() -> list[Trajectory]:
    """Three reach "y"; the winner and the third from "x", the second from "z"."""
    return [traj(0, "xy", {1: 10.0}), traj(1, "zy"), traj(2, "xy")]


def test_two_visits_after_different_histories_differ() -> None:
    """At "y": depth 1 holds returns (10, 0, 0): (20/3, -10/3, -10/3)/(10/3·√2 + ε); depth 2
    (x, y) holds the winner and the third: ±5/(5 + ε); weights 2 and 3.  GiGPO's step term
    gives the second and third the same advantage; HGPO does not."""
    s1 = 10 / 3 * SQ2 + EPS
    a1 = (20 / 3 / s1, -10 / 3 / s1, -10 / 3 / s1)
    a2 = 5 / (5 + EPS)
    first = 4.75 / (4.75 + EPS)  # "x" at step 0: returns 9.5 and 0
    want = [[2 * first / (2 + EPS), (2 * a1[0] + 3 * a2) / (5 + EPS)],
            [0.0, 2 * a1[1] / (2 + EPS)],
            [-2 * first / (2 + EPS), (2 * a1[2] - 3 * a2) / (5 + EPS)]]
    got = advantages([inconsistent_group()], history_length=1)
    np.testing.assert_allclose(np.concatenate(got), np.concatenate(want), rtol=0, atol=1e-12)
    assert got[1][1] == pytest.approx(-0.70711, abs=1e-5) and got[2][1] == pytest.approx(-0.88284, abs=1e-5)
    gigpo = get_estimator("gigpo", episode_weight=0.0)([inconsistent_group()])[0].advantages
    assert gigpo[1][1] == gigpo[2][1] and got[1][1] != got[2][1]


def weights_group() -> list[Trajectory]:
    """At "c" (step 2) the winner shares depth 1 with all four, depth 2 (b, c) with three,
    depth 3 (a, b, c) with one: returns 10 vs 0 everywhere."""
    return [traj(0, "abc", {2: 10.0}), traj(1, "abc"), traj(2, "dbc"), traj(3, "efc")]


@pytest.mark.parametrize(("alpha", "weights"), [(1.0, (2, 3, 4)), (0.0, (1, 1, 1)), (2.0, (4, 9, 16))])
def test_depth_weights_at_k_1_2_3(alpha: float, weights: tuple[int, int, int]) -> None:
    """``norm="mean"``: the winner's items at "c" are 10 − 2.5, 10 − 10/3 and 10 − 5."""
    items = (7.5, 20 / 3, 5.0)
    want = sum(w * a for w, a in zip(weights, items)) / (sum(weights) + EPS)
    got = advantages([weights_group()], norm="mean", alpha=alpha)
    assert got[0][2] == pytest.approx(want, rel=1e-13)
    if alpha == 1.0:
        assert got[0][2] == pytest.approx(55 / 9, rel=1e-6)


def test_depth_weights_mean_std() -> None:
    """``norm="mean_std"``, population std: depth 1 (10, 0, 0, 0) gives 7.5/(√18.75 + ε), depth 2
    (10, 0, 0) (20/3)/(10/3·√2 + ε), depth 3 (10, 0) 5/(5 + ε)."""
    items = (7.5 / (math.sqrt(18.75) + EPS), 20 / 3 / (10 / 3 * SQ2 + EPS), 5 / (5 + EPS))
    want = (2 * items[0] + 3 * items[1] + 4 * items[2]) / (9 + EPS)
    assert advantages([weights_group()])[0][2] == pytest.approx(want, rel=1e-13)


def test_a_step_with_no_cluster_of_two_gets_zero() -> None:
    """The fourth trajectory's "e" and "f" are nobody else's (0); at "c" it has only depth 1
    (its (f, c) is alone): −2.5·2/(2 + ε)."""
    res = get_estimator("hgpo", norm="mean")([weights_group()])[0]
    assert res.advantages[3].tolist()[:2] == [0.0, 0.0]
    assert res.advantages[3][2] == pytest.approx(-2.5 * 2 / (2 + EPS), rel=1e-13)
    assert res.stats["ungrouped_share"] == pytest.approx(3 / 12)  # d, e, f
    assert (res.stats["clusters_k1"], res.stats["clusters_k2"], res.stats["clusters_k3"]) == (3, 2, 1)
    assert res.stats["mean_cluster_size_k1"] == 3.0  # a: 2, b: 3, c: 4
    assert res.stats["grouped_share_k3"] == pytest.approx(2 / 12)


def test_equal_returns_give_exact_zeros_that_weigh_nothing() -> None:
    """At "c" the second and third share (b, c) with equal returns 0: that depth-2 item is
    exactly 0 and left out, so depth 1 alone gives their advantage (weight 2/(2 + ε), not 2/5)."""
    group = [traj(0, "ac", {1: 10.0}), traj(1, "bc"), traj(2, "bc")]
    res = get_estimator("hgpo")([group])[0]
    a1 = -10 / 3 / (10 / 3 * SQ2 + EPS)
    assert res.advantages[1][1] == pytest.approx(2 * a1 / (2 + EPS), rel=1e-13)
    assert res.advantages[1][0] == 0.0 and res.advantages[2][0] == 0.0  # "b" (0, 0): exact zero
    lost = [traj(0, "ab"), traj(1, "ab"), traj(2, "ab", invalid=(0,))]
    res = get_estimator("hgpo", base_group=True)([lost[:2]])[0]
    assert all(a.tolist() == [0.0, 0.0] for a in res.advantages)


def test_base_group_adds_the_episode_advantage_as_k0() -> None:
    """Z = (10, 10, 0, 0, 0, 0) over the task's six rows: mean 10/3, sample std √(80/3): the base
    item is (20/3)/(√(80/3) + ε) for the winner, −(10/3)/(√(80/3) + ε) for the others, weight 1."""
    sd = math.sqrt(80 / 3) + EPS
    b_win, b_lose = 20 / 3 / sd, -10 / 3 / sd
    s1 = 10 / 3 * SQ2 + EPS
    got = advantages([inconsistent_group()], history_length=1, base_group=True)
    assert got[1][0] == pytest.approx(b_lose / (1 + EPS), rel=1e-13)  # "z": the base item alone
    assert got[1][1] == pytest.approx((b_lose + 2 * (-10 / 3 / s1)) / (3 + EPS), rel=1e-13)
    want = (b_win + 2 * (20 / 3 / s1) + 3 * 5 / (5 + EPS)) / (6 + EPS)
    assert got[0][1] == pytest.approx(want, rel=1e-13)
    mean = advantages([inconsistent_group()], history_length=1, base_group=True, norm="mean")
    assert mean[1][0] == pytest.approx(-10 / 3 / (1 + EPS), rel=1e-13)
    assert mean[0][1] == pytest.approx((20 / 3 + 2 * 20 / 3 + 3 * 5) / (6 + EPS), rel=1e-13)


def test_base_group_of_one_row_keeps_z_over_1_plus_eps() -> None:
    """A task group of one row: mean 0 and std 1 (then the ε) in "mean_std", Z itself in "mean"."""
    one = [[traj(0, "x", {0: 10.0})]]
    assert advantages(one, base_group=True) == [[pytest.approx(10 / (1 + EPS) / (1 + EPS), rel=1e-15)]]
    assert advantages(one, base_group=True, norm="mean") == [[pytest.approx(10 / (1 + EPS), rel=1e-15)]]
    assert advantages(one) == [[0.0]]


def test_penalty_enters_the_step_return_undiscounted() -> None:
    """An invalid first step: R_0 = 0.95·10 − 0.1 = 9.4 vs 0 at the shared "x" (``norm="mean"``)."""
    group = [traj(0, "xy", {1: 10.0}, invalid=(0,)), traj(1, "xz")]
    got = advantages([group], norm="mean")
    assert got[0][0] == pytest.approx(4.7 * 2 / (2 + EPS), rel=1e-13)


def test_history_length_zero_is_gigpos_step_term_in_mean_mode() -> None:
    groups = random_groups(random.Random(3), 4)
    hgpo = np.concatenate(advantages(groups, history_length=0, norm="mean"))
    gigpo = get_estimator("gigpo", norm="mean", episode_weight=0.0)(groups)
    want = np.concatenate([a for r in gigpo for a in r.advantages]) * 2 / (2 + EPS)
    np.testing.assert_allclose(hgpo, want, rtol=0, atol=1e-12)


def test_parameters_are_checked() -> None:
    assert "hgpo" in available_estimators()
    assert HGPO().params() == {"gamma": 0.95, "history_length": 2, "norm": "mean_std", "alpha": 1.0,
                               "base_group": False}
    for bad in ({"history_length": -1}, {"history_length": 1.5}, {"gamma": 1.5}, {"norm": "mean_std_norm"},
                {"alpha": math.inf}):
        with pytest.raises(ValueError):
            get_estimator("hgpo", **bad)
    with pytest.raises(TypeError, match="base_group"):
        get_estimator("hgpo", base_group="yes")


# --- the reference semantics, transcribed from scratch ------------------------------------------

def reference(group: list[Trajectory], gamma: float, history_length: int, mode: str, alpha: float,
              base_group: bool) -> list[list[float]]:
    """verl-agent ``recipe/hgpo`` on one task group, in loops and float64, exact zeros where a
    cluster's values are all equal."""
    returns = []
    for t in group:
        acc, out = 0.0, [0.0] * len(t.steps)
        for j in range(len(t.steps) - 1, -1, -1):
            acc = t.steps[j].reward + gamma * acc
            out[j] = acc + t.steps[j].penalty
        returns.append(out)
    clusters: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for i, t in enumerate(group):
        obs = [s.state_key for s in t.steps]
        for j in range(len(obs)):
            for k in range(1, min(history_length + 1, j + 1) + 1):
                clusters[(k, tuple(obs[j - k + 1:j + 1]))].append((i, j))
    items: dict[tuple[int, int], list[tuple[int, float]]] = defaultdict(list)
    for (k, _), members in clusters.items():
        if len(members) < 2:
            continue
        for m, a in zip(members, norm_values([returns[i][j] for i, j in members], mode, ddof=0)):
            items[m].append((k, a))
    if base_group:
        z = [sum(s.reward for s in t.steps) + s.penalty for t in group for s in t.steps]
        base = iter(norm_values(z, mode, ddof=1) if len(z) > 1 else
                    [z[0] / (1 + EPS) if mode == "mean_std" else z[0]])
        for i, t in enumerate(group):
            for j in range(len(t.steps)):
                items[(i, j)].insert(0, (0, next(base)))
    out = []
    for i, t in enumerate(group):
        row = []
        for j in range(len(t.steps)):
            kept = [(k, a) for k, a in items.get((i, j), []) if a != 0]
            total = sum((k + 1) ** alpha for k, _ in kept)
            row.append(sum((k + 1) ** alpha / (total + EPS) * a for k, a in kept))
        out.append(row)
    return out


def norm_values(values: list[float], mode: str, ddof: int) -> list[float]:
    if all(v == values[0] for v in values):
        return [0.0] * len(values)
    mean = sum(values) / len(values)
    if mode == "mean":
        return [v - mean for v in values]
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - ddof))
    return [(v - mean) / (std + EPS) for v in values]


def random_groups(rng: random.Random, n_groups: int, alphabet: str = "abcd") -> list[list[Trajectory]]:
    groups = []
    for g in range(n_groups):
        group = []
        for slot in range(rng.randint(1, 6)):
            n = rng.randint(1, 8)
            obs = "".join(rng.choice(alphabet) for _ in range(n))
            rewards = {n - 1: 10.0} if rng.random() < 0.4 else {}
            if rng.random() < 0.3:
                rewards[rng.randrange(n)] = rewards.get(n - 1, 0.0) + rng.choice([1.0, 0.5])
            invalid = tuple(t for t in range(n) if rng.random() < 0.2)
            group.append(traj(slot, obs, rewards, invalid, task=f"task{g}"))
        groups.append(group)
    return groups


@pytest.mark.parametrize("seed", range(12))
def test_equals_the_reference_semantics_on_random_batches(seed: int) -> None:
    rng = random.Random(seed)
    groups = random_groups(rng, 5, alphabet="abcd"[: 2 + seed % 3])
    params = {"gamma": rng.choice([0.95, 0.9, 1.0]), "history_length": seed % 5, "norm": ("mean_std", "mean")[seed % 2],
              "alpha": (1.0, 0.0, 0.5, 2.0)[seed % 4], "base_group": seed % 3 == 0}
    got = advantages(groups, **params)
    want = [row for g in groups for row in reference(g, params["gamma"], params["history_length"], params["norm"],
                                                      params["alpha"], params["base_group"])]
    np.testing.assert_allclose(np.concatenate(got), np.concatenate(want), rtol=0, atol=1e-9)
    assert np.abs(np.concatenate(got)).max() > 0


# --- the flat rows and the adapters -------------------------------------------------------------

def test_flat_rows_equal_the_grouped_call_in_any_row_order() -> None:
    groups = random_groups(random.Random(7), 6)
    rows = [(f"g{g}", (g, t.slot), j, s) for g, group in enumerate(groups) for t in group
            for j, s in enumerate(t.steps)]
    random.Random(0).shuffle(rows)
    cols = dict(group_id=[r[0] for r in rows], traj_id=[r[1] for r in rows], step_index=[r[2] for r in rows],
                state_key=[r[3].state_key for r in rows], reward=[r[3].reward for r in rows],
                penalty=[r[3].penalty for r in rows])
    params = {"history_length": 3, "base_group": True}
    credit = flat_credit("hgpo", params=params, **cols)
    assert credit.batch._groups is None  # compute_rows ran on the columns, no Step was built
    direct = get_estimator("hgpo", **params)(groups)
    by_row = {(f"g{g}", (g, groups[g][i].slot), j): a for g, res in enumerate(direct)
              for i, adv in enumerate(res.advantages) for j, a in enumerate(adv)}
    want = [by_row[(r[0], r[1], r[2])] for r in rows]
    np.testing.assert_allclose(credit.advantages, want, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(flat_advantages("hgpo", params=params, **cols), credit.advantages)


def test_trl_step_level_trainer_takes_it_by_name() -> None:
    """``RubricGRPOTrainer(estimator="hgpo", estimator_params=...)`` builds HGPO before anything
    else (here it then stops for want of a rollout function)."""
    trl_grpo = pytest.importorskip("wrappers.integrations.trl_grpo",
                                   reason="TRL is not installed: pip install -e '.[trl]'")
    with pytest.raises(ValueError, match="rollout_func"):
        trl_grpo.RubricGRPOTrainer(None, estimator="hgpo", estimator_params={"history_length": 4})
    with pytest.raises(TypeError, match="accepted: gamma, history_length"):
        trl_grpo.RubricGRPOTrainer(None, estimator="hgpo", estimator_params={"length_weight_alpha": 1.0})


def test_arena_runs_it_with_the_references_defaults() -> None:
    from trainers.arena.variants import arena_estimators, resolve_method

    assert "hgpo" in arena_estimators()
    for family in ("alfworld", "webshop"):
        est = resolve_method("hgpo", family).build()
        assert isinstance(est, HGPO) and (est.gamma, est.history_length, est.alpha) == (0.95, 2, 1.0)


def test_the_arena_runs_hgpo_with_verl_agents_settings_per_environment() -> None:
    from trainers.arena.variants import estimator_defaults

    assert estimator_defaults("hgpo", "webshop") == {"norm": "mean"}  # verl-agent's WebShop runs
    assert estimator_defaults("hgpo", "alfworld") == {}  # the reference's defaults

"""Flat step-row interface (wrappers.credit.flat): same credit as the grouped API, any row order."""

from __future__ import annotations

import numpy as np
import pytest

from rubrics.trajectory import Step, Trajectory
from wrappers.credit import CreditInputError, get_estimator
from wrappers.credit.flat import flat_advantages, flat_batch, flat_credit


def groups() -> list[list[Trajectory]]:
    a = [
        Trajectory("A", 0, [Step("s0", "a"), Step("s1", "b"), Step("s3", "c", reward=10.0)], score=1.0, success=True),
        Trajectory("A", 1, [Step("s0", "a"), Step("s1", "d", valid=False, penalty=-0.1), Step("s2", "e")]),
        Trajectory("A", 2, [Step("s0", "f"), Step("s4", "g", next_state_key="s3")]),
    ]
    b = [
        Trajectory("B", 0, [Step("k0", "x"), Step("k1", "y")]),
        Trajectory("B", 1, [Step("k0", "z", reward=10.0)], score=1.0, success=True),
    ]
    return [a, b]


def to_columns(gs: list[list[Trajectory]]) -> dict[str, list]:
    cols: dict[str, list] = {k: [] for k in ("group_id", "traj_id", "step_index", "state_key", "next_state_key",
                                            "action", "reward", "penalty", "valid", "score", "slot")}
    for g in gs:
        for t in g:
            for k, s in enumerate(t.steps):
                cols["group_id"].append(t.task_id)
                cols["traj_id"].append(f"{t.task_id}/{t.slot}")
                cols["step_index"].append(k)
                cols["state_key"].append(s.state_key)
                cols["next_state_key"].append(s.next_state_key)
                cols["action"].append(s.action)
                cols["reward"].append(s.reward)
                cols["penalty"].append(s.penalty)
                cols["valid"].append(s.valid)
                cols["score"].append(t.score)
                cols["slot"].append(t.slot)
    return cols


@pytest.mark.parametrize("name", ["grpo", "rloo", "gigpo", "graphgpo", "milegpo"])
def test_flat_equals_grouped_in_any_row_order(name: str) -> None:
    gs = groups()
    expect = np.concatenate([a for r in get_estimator(name)(gs) for a in r.advantages])
    cols = to_columns(gs)
    got = flat_advantages(name, **cols)
    np.testing.assert_array_equal(got, expect)
    # shuffle the rows: the advantages follow their rows
    perm = np.random.default_rng(0).permutation(len(cols["group_id"]))
    shuffled = {k: [v[i] for i in perm] for k, v in cols.items()}
    np.testing.assert_array_equal(flat_advantages(name, **shuffled), expect[perm])


def test_defaults_success_from_reward_and_order_of_appearance() -> None:
    # No step_index, slot, score or success: order of appearance, slots 0.., success = Σ reward > 0
    b = flat_batch(group_id=["g", "g", "g"], traj_id=[7, 7, 8], state_key=["s", "t", "s"],
                   reward=[0.0, 10.0, 0.0])
    (grp,) = b.groups
    assert [t.slot for t in grp] == [0, 1]
    assert [t.success for t in grp] == [True, False] and [t.score for t in grp] == [1.0, 0.0]
    assert [s.state_key for s in grp[0].steps] == ["s", "t"] and grp[0].task_id == "g"
    assert [r.tolist() for r in b.rows[0]] == [[0, 1], [2]]


def test_numpy_object_and_string_columns() -> None:
    cols = to_columns(groups())
    np_cols = {k: np.array(v, dtype=object) if k in ("state_key", "next_state_key") else np.array(v)
               for k, v in cols.items()}
    np.testing.assert_array_equal(flat_advantages("graphgpo", **np_cols), flat_advantages("graphgpo", **cols))


def test_shaped_rewards_and_params() -> None:
    cols = to_columns(groups())
    fc = flat_credit("graphgpo", params={"gamma": 0.5}, **cols)
    # group A, τ0 rows: 10·0.5^D(s′) with D(s1) = 2, D(s3) = 1, D(SUCCESS) = 0
    np.testing.assert_allclose(fc.shaped_rewards[:3], [2.5, 5.0, 10.0])
    assert fc.pairs.shape == (0, 2) and fc.pair_weights.shape == (0,)
    with pytest.raises(TypeError, match="params"):
        flat_credit(get_estimator("grpo"), params={"norm": "mean"}, **cols)


@pytest.mark.parametrize("change, error, match", [
    (lambda c: c.update(reward=c["reward"][:-1]), ValueError, "column 'reward' has 10 rows, expected 11"),
    (lambda c: c["reward"].__setitem__(4, float("nan")), CreditInputError, "row 4: reward is not finite"),
    (lambda c: c["step_index"].__setitem__(1, 0), ValueError, "trajectory 'A/0'.*not 0..2"),
    (lambda c: c["score"].__setitem__(1, 0.5), CreditInputError, "row 1: score 0.5 differs from 1.0 at row 0"),
    (lambda c: c["group_id"].__setitem__(0, "B"), CreditInputError, "trajectory 'A/0' appears in groups"),
    (lambda c: c["state_key"].__setitem__(2, ["x"]), CreditInputError, "group 0, trajectory 0, step 2: state_key"),
    (lambda c: c["traj_id"].__setitem__(2, {"x": 1}), CreditInputError, "row 2: traj_id is not hashable"),
    (lambda c: c.update(state_key="abc"), TypeError, "column 'state_key' must be a sequence"),
    (lambda c: c["reward"].__setitem__(3, "10"), CreditInputError, "row 3: reward must be a number, got str"),
    (lambda c: c["penalty"].__setitem__(0, None), CreditInputError, "row 0: penalty must be a number"),
    (lambda c: c.update(reward=[[r] for r in c["reward"]]), CreditInputError,
     r"reward must be one number per row \(a 1-D column\), got shape \(11, 1\)"),
    (lambda c: c["reward"].__setitem__(1, 1e308), CreditInputError, "row 1: reward is 1e.308, beyond"),
])
def test_flat_errors_name_the_row(change, error: type, match: str) -> None:
    cols = to_columns(groups())
    change(cols)
    with pytest.raises(error, match=match):
        flat_advantages("graphgpo", **cols)


def test_verl_agent_style_batch() -> None:
    # A batch laid out like verl-agent's non_tensor_batch (uid = group, traj_uid, anchor_obs).
    nb = {
        "uid": np.array(["u1"] * 5 + ["u2"] * 2),
        "traj_uid": np.array(["t0", "t0", "t1", "t1", "t1", "t2", "t3"]),
        "anchor_obs": np.array(["o0", "o1", "o0", "o2", "o2", "p0", "p0"], dtype=object),
        "rewards": np.array([0, 10, 0, 0, 0, 10, 0], dtype=float),
        "is_action_valid": np.array([1, 1, 1, 0, 1, 1, 1], dtype=bool),
    }
    adv = flat_advantages("gigpo", params={"norm": "mean"}, group_id=nb["uid"], traj_id=nb["traj_uid"],
                          state_key=nb["anchor_obs"], reward=nb["rewards"], valid=nb["is_action_valid"],
                          penalty=np.where(nb["is_action_valid"], 0.0, -0.1))
    # group u1: Z rows [10, 10 | 0, −0.1, 0], mean 19.9/5 = 3.98; anchor o0: R {0.95·10, 0} -> ±4.75
    # (o1 and p0-less singletons -> 0; o2: {−0.1, 0} -> ∓0.05)
    np.testing.assert_allclose(adv[:5], [10 - 3.98 + 4.75, 10 - 3.98, -3.98 - 4.75, -0.1 - 3.98 - 0.05, -3.98 + 0.05])
    # group u2: Z [10 | 0] -> ±5; anchor p0: R {10, 0} -> ±5
    np.testing.assert_allclose(adv[5:], [10.0, -10.0])


def rich_groups() -> list[list[Trajectory]]:
    """Every Step and Trajectory field set, so equality checks all of them."""
    def step(k: int, t: int, **kw) -> Step:
        return Step(state_key=("room", k % 3), action=f"act {k}", action_key=("cls", k % 2), observation=f"obs {k}",
                    feedback=f"fb {k}", rubric={"stage": k}, keys={"exact": ("e", k), "coarse": k % 2},
                    next_state_key=("room", 9) if t == 1 else None, extra={"i": k}, **kw)
    a = [Trajectory("A", 1, [step(0, 0), step(1, 1, reward=10.0)], score=1.0, success=True, truncated=False),
         Trajectory("A", 0, [step(2, 0, penalty=-0.1, valid=False), step(3, 1)], score=0.0, truncated=True)]
    b = [Trajectory("B", 0, [step(4, 0)], score=0.25)]
    return [a, b]


def rich_columns(gs: list[list[Trajectory]]) -> dict:
    cols: dict = {k: [] for k in ("group_id", "traj_id", "step_index", "state_key", "next_state_key", "action",
                                  "action_key", "reward", "penalty", "valid", "score", "success", "slot", "task_id",
                                  "truncated", "observation", "feedback", "rubric", "extra")}
    keys: dict = {"exact": [], "coarse": []}
    for g in gs:
        for t in g:
            for k, s in enumerate(t.steps):
                for name, v in (("group_id", t.task_id), ("traj_id", (t.task_id, t.slot)), ("step_index", k),
                                ("score", t.score), ("success", t.success), ("slot", t.slot), ("task_id", t.task_id),
                                ("truncated", t.truncated)):
                    cols[name].append(v)
                for name in ("state_key", "next_state_key", "action", "action_key", "reward", "penalty", "valid",
                             "observation", "feedback", "rubric", "extra"):
                    cols[name].append(getattr(s, name))
                for name, column in keys.items():
                    column.append(s.keys[name])
    cols["keys"] = keys
    return cols


def test_flat_groups_equal_the_original_field_by_field() -> None:
    gs = rich_groups()
    cols = rich_columns(gs)
    perm = np.random.default_rng(1).permutation(len(cols["group_id"]))
    shuffled = {k: [v[i] for i in perm] for k, v in cols.items() if k != "keys"}
    shuffled["keys"] = {k: [v[i] for i in perm] for k, v in cols["keys"].items()}
    for c in (cols, shuffled):
        b = flat_batch(**c)
        # groups in order of first appearance; group A's trajectories in slot order (slot 0 first)
        want = {"A": sorted(gs[0], key=lambda t: t.slot), "B": gs[1]}
        assert {g[0].task_id: g for g in b.groups} == want
        assert [g[0].task_id for g in b.groups] == list(dict.fromkeys(c["group_id"]))
        s = {g[0].task_id: g for g in b.groups}["A"][0].steps[0]
        assert type(s) is Step and s.rubric is not c["rubric"][0] and s.keys == {"exact": ("e", 2), "coarse": 0}
        assert b.table.n_rows == 5 and b.consistent
    # a missing action key defaults to the action, as Step() does
    b = flat_batch(group_id=["g"], traj_id=[0], state_key=["s"], reward=[0.0], action=["go"], action_key=[None])
    assert b.groups[0][0].steps[0] == Step("s", "go")


@pytest.mark.parametrize("name", ["grpo", "rloo", "gigpo", "graphgpo", "milegpo"])
def test_row_level_estimators_skip_the_steps_and_agree_in_full(name: str) -> None:
    gs = rich_groups()
    native = get_estimator(name)([sorted(g, key=lambda t: t.slot) for g in gs])  # (flat orders by slot)
    fc = flat_credit(name, **rich_columns(gs))
    assert fc.batch._groups is None, "the row-level path built Step objects"
    for got, want in zip(fc.results, native):
        assert len(got.advantages) == len(want.advantages)
        for x, y in zip(got.advantages, want.advantages):
            np.testing.assert_array_equal(x, y)
        if want.shaped_rewards is not None:
            for x, y in zip(got.shaped_rewards, want.shaped_rewards):
                np.testing.assert_array_equal(x, y)
        assert got.stats.keys() == want.stats.keys()
        np.testing.assert_equal(got.stats, want.stats)


def test_mcgpo_skips_the_steps_and_its_pairs_name_input_rows() -> None:
    gs = groups()
    cols = to_columns(gs)
    native = get_estimator("mcgpo")(gs)
    fc = flat_credit("mcgpo", **cols)
    assert fc.batch._groups is None, "MCGPO's row-level path built Step objects"
    np.testing.assert_array_equal(fc.advantages, np.concatenate([a for r in native for a in r.advantages]))
    # preferences name input rows: row = the position of (group, trajectory, step) in the columns
    index = {(cols["traj_id"][r], cols["step_index"][r]): r for r in range(len(cols["group_id"]))}
    want = [(index[(f"{gs[g][p.preferred[0]].task_id}/{gs[g][p.preferred[0]].slot}", p.preferred[1])],
             index[(f"{gs[g][p.rejected[0]].task_id}/{gs[g][p.rejected[0]].slot}", p.rejected[1])])
            for g, r in enumerate(native) for p in r.pairs]
    assert fc.pairs.tolist() == [list(w) for w in want]


@pytest.mark.parametrize("name", ["gigpo", "grpo"])
def test_row_level_path_raises_validate_groups_errors(name: str) -> None:
    cols = to_columns(groups())
    cols["slot"] = [0 if s == 2 else s for s in cols["slot"]]  # trajectories A/0 and A/2 both in slot 0
    with pytest.raises(CreditInputError, match="duplicate slot 0"):
        flat_advantages(name, **cols)
    cols = to_columns(groups())
    cols["next_state_key"][3] = {"unhashable": 1}
    with pytest.raises(CreditInputError, match="step 0: next_state_key is not hashable"):
        flat_advantages(name, **cols)


def test_a_subclass_overriding_compute_is_called() -> None:
    from wrappers.credit.gigpo import GiGPO

    class Doubled(GiGPO):
        def compute(self, gs):
            return [type(r)([2 * a for a in r.advantages]) for r in super().compute(gs)]

    cols = to_columns(groups())
    np.testing.assert_array_equal(flat_advantages(Doubled(), **cols), 2 * flat_advantages("gigpo", **cols))


@pytest.mark.parametrize("name", ["grpo", "rloo", "gigpo", "graphgpo", "milegpo", "scpo", "mcgpo"])
def test_huge_rewards_are_refused_and_the_largest_allowed_give_finite_credit(name: str) -> None:
    """Rewards of 1e308 made every estimator's variance overflow (NaN advantages, no error);
    the bound ±1e150 is refused beyond it, and at it every estimator stays finite."""
    from wrappers.credit.base import MAX_MAGNITUDE

    big = [[Trajectory(t.task_id, t.slot, [Step(s.state_key, s.action, reward=s.reward * MAX_MAGNITUDE / 10,
                                                 next_state_key=s.next_state_key) for s in t.steps],
                       success=t.success) for t in g] for g in groups()]
    for res in get_estimator(name)(big):
        assert all(np.isfinite(a).all() for a in res.advantages)
    over = [[Trajectory(t.task_id, t.slot, [Step(s.state_key, s.action, reward=s.reward * 1e307,
                                                  next_state_key=s.next_state_key) for s in t.steps],
                        success=t.success) for t in g] for g in groups()]
    with pytest.raises(CreditInputError, match="beyond the"):
        get_estimator(name)(over)

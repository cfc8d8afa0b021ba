"""The arena's calibration controls and its coupled sampling.

* ``:shuffle<k>`` permutes the advantages of k % of an update's rows among themselves,
  ``:step_shuffle`` each trajectory's among its own steps, ``:no_rl`` never updates;
* every report pairs each control with the method it degrades and says whether the setting
  resolves the loss;
* coupled sampling (Gumbel-max with action-keyed noise) draws from the softmax, and two
  policies that agree choose alike, whatever order the actions come in.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from trainers.arena.policy import Featurizer, LinearSoftmaxPolicy
from trainers.arena.variants import CONTROLS, available_methods, degrade_advantages, resolve_method
from trainers.cli import app


def test_controls_parse_for_any_estimator_and_are_listed() -> None:
    assert resolve_method("grpo:shuffle15", "alfworld").degrade == (("shuffle", 0.15),)
    assert resolve_method("gigpo:step_shuffle", "webshop").degrade == (("step_shuffle", 0.0),)
    spec = resolve_method("graphgpo:no_rl", "alfworld")
    assert spec.rl is False and spec.degrade == () and spec.estimator == "graphgpo"
    assert resolve_method("mcgpo:uniform_weights+shuffle50", "alfworld").degrade == (("shuffle", 0.5),)
    for bad in ("grpo:shuffle0", "grpo:shuffle101"):
        with pytest.raises(ValueError, match="0 < k <= 100"):
            resolve_method(bad, "alfworld")
    assert set(CONTROLS) <= set(available_methods())
    result = CliRunner().invoke(app, ["arena", "--list"])
    assert result.exit_code == 0
    for method in CONTROLS:
        assert method in result.output
    assert "--no-rl" in result.output


def test_shuffle_moves_exactly_that_share_of_rows_and_keeps_the_values() -> None:
    parts = [np.arange(10, dtype=float) + 100 * i for i in range(10)]  # 100 distinct values
    out = degrade_advantages(parts, (("shuffle", 0.15),), np.random.default_rng(3))
    flat, before = np.concatenate(out), np.concatenate(parts)
    assert sorted(flat.tolist()) == sorted(before.tolist())
    moved = int(np.sum(flat != before))
    assert 2 <= moved <= 15  # 15 rows drawn; a permutation may leave some in place
    assert [len(p) for p in out] == [10] * 10
    assert np.array_equal(parts[0], np.arange(10.0))  # the inputs are untouched
    every = np.concatenate(degrade_advantages(parts, (("shuffle", 1.0),), np.random.default_rng(3)))
    assert int(np.sum(every != before)) > 90  # all rows drawn: nearly all move


def test_step_shuffle_keeps_each_trajectory_and_leaves_episode_credit_alone() -> None:
    rng = np.random.default_rng(0)
    parts = [np.array([3.0, 1.0, 2.0, 5.0]), np.array([-1.0, 0.5])]
    out = degrade_advantages(parts, (("step_shuffle", 0.0),), rng)
    assert [sorted(p.tolist()) for p in out] == [sorted(p.tolist()) for p in parts]
    assert any(not np.array_equal(a, b) for a, b in zip(out, parts))
    # GRPO's advantages are constant within a trajectory: step-shuffling them is the identity
    grpo = [np.full(4, 0.7), np.full(3, -0.2)]
    assert all(np.array_equal(a, b) for a, b in zip(degrade_advantages(grpo, (("step_shuffle", 0.0),), rng), grpo))


def test_coupled_sampling_draws_from_the_softmax_and_couples_agreeing_policies() -> None:
    feat = Featurizer(2**10)
    d = feat.decision(goal="put a mug in the sink", task_type="pick", observation="a kitchen",
                      actions=["go to sink 1", "take mug 1 from desk 1", "look"])
    pol = LinearSoftmaxPolicy(2**10)
    pol.weights[:] = np.random.default_rng(1).normal(0, 0.5, 2**10)
    probs = pol.probabilities(d, temperature=0.7)
    picks = np.bincount([pol.sample_coupled(d, key, 0.7)[0] for key in range(20_000)], minlength=3) / 20_000
    assert np.abs(picks - probs).max() < 0.015
    # the same noise per action text: a reordered menu picks the same action
    r = feat.decision(goal="put a mug in the sink", task_type="pick", observation="a kitchen",
                      actions=["look", "go to sink 1", "take mug 1 from desk 1"])
    for key in range(200):
        assert d.actions[pol.sample_coupled(d, key)[0]] == r.actions[pol.sample_coupled(r, key)[0]]
    # a slightly different policy makes the same choice far more often than chance
    other = LinearSoftmaxPolicy(2**10, pol.weights + np.random.default_rng(2).normal(0, 0.05, 2**10))
    same = np.mean([pol.sample_coupled(d, k)[0] == other.sample_coupled(d, k)[0] for k in range(2000)])
    assert same > 0.9 > float(np.sum(probs**2)) + 0.2


@pytest.mark.slow
def test_the_report_says_which_controls_the_setting_resolves(tmp_path: Path) -> None:
    out = tmp_path / "arena"
    args = ["arena", "--env", "webshop", "--estimators", "grpo", "--variants", "grpo:no_rl,grpo:shuffle50",
            "--seeds", "3", "--updates", "6", "-P", "2", "-G", "4", "--train-tasks", "6", "--val-tasks", "6",
            "--eval-every", "3", "-j", "1", "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "results.json").read_text())
    cal = summary["calibration"]
    assert set(cal) == {"grpo:no_rl", "grpo:shuffle50"}
    assert all(c["parent"] == "grpo" and c["n"] == 3 for c in cal.values())
    for label, c in cal.items():
        diffs = np.subtract(summary["methods"][label]["L5"]["per_seed"], summary["methods"]["grpo"]["L5"]["per_seed"])
        assert c["mean"] == pytest.approx(float(diffs.mean()))
        assert c["resolved"] == (c["hi"] < 0)
    md = (out / "results.md").read_text()
    assert "Calibration" in md and "| grpo:no_rl | grpo |" in md
    recs = [json.loads(line) for line in (out / "runs" / "grpo:no_rl__seed0" / "metrics.jsonl").open()]
    assert all("opt/delta_norm" not in r for r in recs if r["phase"] == "train")  # never updated

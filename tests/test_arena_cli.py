"""``rubricgym arena`` end to end: the table with its MDE column, and the rescaling control."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainers.cli import app


@pytest.mark.slow
def test_arena_cli_prints_the_mde_and_rescaled_advantages_train_identically(tmp_path: Path) -> None:
    out = tmp_path / "arena"
    args = ["arena", "--env", "webshop", "--estimators", "rloo", "--variants", "rloo:x0.25,rloo:x4",
            "--seeds", "2", "--updates", "6", "-P", "4", "-G", "8", "--train-tasks", "8", "--val-tasks", "6",
            "--eval-every", "3", "-j", "1", "--save-rollouts", "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "MDE (L5)" in result.output  # every comparison prints its minimum detectable difference
    summary = json.loads((out / "results.json").read_text())
    per_seed = {m: summary["methods"][m]["L5"]["per_seed"] for m in ("rloo", "rloo:x0.25", "rloo:x4")}
    assert per_seed["rloo:x0.25"] == per_seed["rloo"] == per_seed["rloo:x4"]
    paired = summary["paired"]["rloo:x4"]["L5"]
    assert paired["mean"] == 0.0 and paired["sd"] == 0.0 and paired["mde"] == 0.0
    # the advantages did differ by the factor: the metric files record their raw RMS
    rms = {}
    for m in ("rloo", "rloo:x4"):
        recs = [json.loads(line) for line in (out / "runs" / f"{m}__seed0" / "metrics.jsonl").open()]
        rms[m] = [r["opt/adv_rms"] for r in recs if r["phase"] == "train"]
    assert any(x > 0 for x in rms["rloo"])
    assert rms["rloo:x4"] == pytest.approx([4 * x for x in rms["rloo"]], rel=1e-12)
    # equal runs prove the units only if the updates moved the policy: rloo:no_rl (never
    # updated, the same draws) must play other episodes than rloo after the first update
    frozen = tmp_path / "frozen"
    result = CliRunner().invoke(app, [*args[:args.index("--variants")], "--variants", "rloo:no_rl",
                                      *args[args.index("--seeds"):-1], str(frozen)])
    assert result.exit_code == 0, result.output
    actions = {}
    for m, folder in (("rloo", out), ("rloo:no_rl", frozen)):
        actions[m] = [[[s["action"] for s in json.loads(line)["steps"]] for line in path.open()]
                      for path in sorted((folder / "runs" / f"{m}__seed0" / "rollouts").glob("update_*.jsonl"))]
    assert len(actions["rloo"]) == 6 and actions["rloo"][0] == actions["rloo:no_rl"][0]  # the same start
    assert actions["rloo"][1:] != actions["rloo:no_rl"][1:]  # after an update the policy acts differently


@pytest.mark.slow
def test_arena_cli_no_rl_never_moves_the_policy(tmp_path: Path) -> None:
    out = tmp_path / "control"
    args = ["arena", "--env", "webshop", "--estimators", "grpo", "--seeds", "1", "--updates", "3", "-P", "2",
            "-G", "4", "--train-tasks", "6", "--val-tasks", "6", "--eval-every", "3", "-j", "1", "--no-rl",
            "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    recs = [json.loads(line) for line in (out / "runs" / "grpo__seed0" / "metrics.jsonl").open()]
    assert next(r for r in recs if r["phase"] == "run")["config"]["update"]["rl_update"] is False
    trains = [r for r in recs if r["phase"] == "train"]
    # no update ran: of the update rule's diagnostics only the advantages' RMS (and the row counts)
    assert len(trains) == 3 and all({k for k in r if k.startswith("opt/")} == {
        "opt/adv_rms", "opt/adv_rms_scaled", "opt/rows", "opt/pairs", "opt/optimize_s"} for r in trains)

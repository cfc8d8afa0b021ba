"""``rubricgym train`` on Sokoban-Rubric-v0, as a user runs it: flags over the default preset
(no Sokoban preset), the tiny random model, a warm start on the family's expert, two updates.

Nothing in the trainer names Sokoban: the environment, its expert (the warm start's
walkthroughs), its rubric channels (the shaping and the metrics) and its matching keys (the
credit) all come through the family registry.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from typer.testing import CliRunner

from agent_envs.sokoban.room import solve
from rubrics.trajectory import load_jsonl
from trainers.checkpoint import MARKER, latest_checkpoint
from trainers.cli import app
from trainers.metrics import read_metrics

HORIZON = 8
CHANNELS = {"box_pushable", "boxes_on_target", "box_deadlocked", "solved", "invalid_actions"}
# the default preset is the ALFWorld demo: its env_kwargs, splits and system prompt are replaced,
# the training pool is bounded (the demo's eval_train_games plays every training game)
SOKOBAN = ["--env-id", "Sokoban-Rubric-v0", "--env-kwargs", "{}", "--train-split", "train", "--val-split", "eval",
           "--max-steps", str(HORIZON), "--train-tasks", "4", "--val-tasks", "2",
           "--system-prompt", "You push boxes in a Sokoban level."]
TINY = ["--model", "tiny-llama", "--trainable-layers", "0", "--groups-per-update", "2", "--group-size", "2",
        "--updates", "2", "--eval-every", "1", "--save-every", "2", "--warm-start-tasks", "2",
        "--estimator", "graphgpo", "--estimator-params", "{gamma: 0.8}", "--env-workers", "0", "--torch-threads", "1",
        "--micro-batch-rows", "4", "--max-train-rows", "0", "--no-skip-zero-advantage-rows", "--no-progress",
        "--no-tensorboard"]


def _expert_moves(index: int) -> int:
    """The shortest solution's length of training level ``index`` at the run's horizon."""
    import gymnasium as gym

    env = gym.make("Sokoban-Rubric-v0", max_steps=HORIZON)
    level = env.unwrapped.level(index)
    env.close()
    return len(solve(level.room, level.start))


@pytest.mark.slow
def test_rubricgym_train_runs_sokoban_from_flags(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["train", *SOKOBAN, *TINY, "--output-dir", str(tmp_path), "--run-name", "sokoban"])
    assert result.exit_code == 0, result.output[-3000:]
    run = tmp_path / "sokoban"
    assert "trainer run on Sokoban-Rubric-v0, estimator graphgpo" in result.output
    records = read_metrics(run)
    assert [r["phase"] for r in records] == ["run", "eval", "warm_start", "eval_warm_start", "eval_train_before",
                                             "train", "eval", "train", "eval", "eval_train_after", "end"]
    # the warm start cloned the family's expert: one choice row per move of the shortest
    # solutions of the pool's first two levels (levels 0 and 1 of the train split)
    (warm,) = [r for r in records if r["phase"] == "warm_start"]
    assert warm["tasks"] == 2 and warm["rows"] == _expert_moves(0) + _expert_moves(1)
    for u in (1, 2):
        trajs = load_jsonl(run / "rollouts" / f"update_{u:05d}.jsonl")
        train = next(r for r in records if r["phase"] == "train" and r["update"] == u)
        assert len(trajs) == 4 == train["train/episodes"]
        assert train["opt/rows"] == sum(len(t.steps) for t in trajs)  # every decision is a row
        assert {t.task_id for t in trajs} <= {f"sokoban/6x6-1box/{k}" for k in range(4)}
        for t in trajs:
            assert 1 <= len(t.steps) <= HORIZON and t.truncated == (not t.success and len(t.steps) == HORIZON)
            for s in t.steps:  # choose mode plays only the four moves; the family's channels and keys
                assert s.valid and s.action in ("up", "down", "left", "right")
                assert set(s.rubric) == CHANNELS and s.keys["exact"] is not None and s.keys["coarse"] is not None
    val = load_jsonl(run / "rollouts" / "eval_00002.jsonl")
    assert sorted(t.task_id for t in val) == ["sokoban/6x6-1box/10000", "sokoban/6x6-1box/10001"]  # the eval split
    evals = [r for r in records if r["phase"] == "eval"]
    assert [e["update"] for e in evals] == [0, 1, 2] and all("rubric/boxes_on_target" in e for e in evals)
    ckpt = latest_checkpoint(run / "checkpoints")
    assert ckpt is not None and ckpt.name == "update_000002" and (ckpt / MARKER).is_file()
    assert (run / "summary.txt").is_file() and (run / "summary.json").is_file()

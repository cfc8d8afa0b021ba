"""The trainer takes an environment family's estimator settings from the registry, as the arena
does (one path: :meth:`agent_envs.family.Family.estimator_params`), with the user's
``estimator_params`` on top: GraphGPO's γ = 0.8 on Sokoban, 0.2 on WebShop."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from agent_envs.family import families
from trainers.arena.variants import estimator_defaults
from trainers.config import load_config
from trainers.metrics import read_metrics
from trainers.trainer import Trainer

SOKOBAN = ["env_id=Sokoban-Rubric-v0", "env_kwargs={}", "train_split=train", "val_split=eval", "max_steps=3"]


def _overrides(tmp_path: Path, estimator: str, params: str, extra: tuple[str, ...] = ()) -> list[str]:
    return [
        "model=tiny-llama", "groups_per_update=1", "group_size=2", "val_tasks=1", "updates=1", "eval_every=1",
        f"output_dir={tmp_path}", f"run_name={estimator}", "progress=false", "tensorboard=false",
        "max_response_tokens=8", "micro_batch_rows=4", "env_workers=0", "mixed_precision=no", "torch_threads=1",
        "warm_start_tasks=0", "trainable_layers=0", "eval_train_games=false", "eval_at_start=false",
        "rubric_shaping=0.0", f"estimator={estimator}", f"estimator_params={params}", *SOKOBAN, *extra,
    ]


def test_the_config_takes_every_familys_settings_as_the_arena_does(tmp_path):
    checked = 0
    for fam in families():
        env_id = next(iter(fam.arena.values())).env_id if fam.arena else next(iter(fam.envs))
        for estimator, declared in fam.estimators.items():
            cfg = load_config("demo", [f"env_id={env_id}", f"estimator={estimator}", "estimator_params={}"])
            arena = estimator_defaults(estimator, fam.name)
            arena.pop("scorer", None)  # the arena's own choice of SCPO scorer (the fast lexical one)
            assert cfg.estimator_params() == arena == dict(declared), (fam.name, estimator)
            checked += 1
    assert checked >= 15
    sokoban = load_config("demo", _overrides(tmp_path, "graphgpo", "{}"))
    assert sokoban.estimator_params() == {"gamma": 0.8}  # GraphGPO's Sokoban setting, not the estimator's 0.1
    mine = load_config("demo", _overrides(tmp_path, "graphgpo", "{gamma: 0.5, success_reward: 9.5}"))
    assert mine.estimator_params() == {"gamma": 0.5, "success_reward": 9.5}  # the user's win
    assert load_config("demo", _overrides(tmp_path, "grpo", "{}")).estimator_params() == {}


def test_the_trainer_credits_sokoban_with_graphgpos_sokoban_gamma(tmp_path):
    cfg = load_config("demo", _overrides(tmp_path, "graphgpo", "{}"))
    trainer = Trainer(cfg)
    assert trainer.estimator.gamma == 0.8
    trainer.train()
    [run] = [r for r in read_metrics(tmp_path / "graphgpo") if r["phase"] == "run"]
    assert run["estimator_params"] == {"gamma": 0.8} and run["config"]["credit"]["estimator_params"] == {}
    override = Trainer(load_config("demo", _overrides(tmp_path, "graphgpo", "{gamma: 0.3}", ("run_name=own",))))
    assert override.estimator.gamma == 0.3

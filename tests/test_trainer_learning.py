"""The trainer learns in ``choose`` mode, and the same run with the update switched off does not.

Issue 11, item 3: a test of learning must fail when RL does nothing, so it runs its own control.
The tiny random model (``tiny-llama``) on a fixed task of the two-room game of
``tests/doors_env.py`` (multi-turn, reward only at the end, every action the same length, so
the untrained choose policy is close to uniform and wins about 1 episode in 9), no warm start,
GRPO credit, the shared update rule (``trainers/update_rule.py``) with its trust region.
Both runs have the same seed, so their first rollouts are identical; after that only the
update differs.

Measured on the 2-core VM (torch 2.13.0, 20 updates of 2 groups x 8 siblings): training success
over the last 5 updates 0.38 with the update, 0.07 without (every update of the control
between 0.00 and 0.25).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

import doors_env  # tests/ is on sys.path: registers rubricgym_tests/Doors-v0

from trainers.config import load_config
from trainers.metrics import read_metrics
from trainers.trainer import Trainer

UPDATES = 20


def _training_success(tmp_path: Path, rl: bool) -> list[float]:
    cfg = load_config("demo", [
        f"env_id={doors_env.ENV_ID}", "env_kwargs={answers: [[1, 2], [0, 0]], train: 1}",
        "train_split=train", "val_split=eval", "val_tasks=1", "train_tasks=0", "max_steps=3",
        "model=tiny-llama", "estimator=grpo", "estimator_params={}", "groups_per_update=2", "group_size=8",
        f"updates={UPDATES}", f"eval_every={UPDATES}", f"save_every={UPDATES}", "learning_rate=100",
        "target_kl=0.1", "ppo_epochs=4", "max_train_rows=0", "micro_batch_rows=8", "warm_start_tasks=0",
        "eval_train_games=false", "trainable_layers=0", "rubric_shaping=0.0", "env_workers=0",
        "mixed_precision=no", "torch_threads=1", "progress=false", "tensorboard=false",
        f"rl_update={'true' if rl else 'false'}", f"output_dir={tmp_path}", f"run_name={'rl' if rl else 'control'}",
    ])
    Trainer(cfg).train()
    (run,) = [p for p in tmp_path.iterdir() if p.name.startswith(cfg.output.run_name)]
    train = [r for r in read_metrics(run) if r["phase"] == "train"]
    assert [r["update"] for r in train] == list(range(1, UPDATES + 1))
    return [r["train/success"] for r in train]


def test_the_game_keeps_the_rubric_contract_and_its_actions_have_one_length():
    from agent_envs import check_rubric_env

    check_rubric_env(doors_env.DoorsEnv())
    assert len({len(a) for a in doors_env.DOORS}) == 1


@pytest.mark.slow
def test_the_trainer_learns_in_choose_mode_and_its_control_does_not(tmp_path):
    on = _training_success(tmp_path, rl=True)
    off = _training_success(tmp_path, rl=False)
    assert on[0] == off[0] <= 0.2  # same seed, same first rollouts, before any update
    last_on, last_off = statistics.mean(on[-5:]), statistics.mean(off[-5:])
    assert last_on >= 0.3, on
    assert last_off <= 0.15 and max(off) <= 0.3, off  # the untrained policy wins ~1/9
    assert last_on - last_off >= 0.2, (on, off)

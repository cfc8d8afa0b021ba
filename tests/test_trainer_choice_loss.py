"""``rl_loss = "choice"``: PPO on the choose policy's own log-probability of each decision.

The choose policy samples an action from softmax(scores / T) over the admissible actions'
response log-probabilities; with ``rl_loss = "choice"`` the ratio, KL and entropy are those of
that distribution (one "token" per decision) instead of the chosen response's tokens.
Also ``trainable_layers`` (only the top blocks train), the demo's other CPU lever.
"""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from trainers.batching import TrainRow
from trainers.config import ConfigError, load_config
from trainers.generation import score_candidates
from trainers.lm_policy import RolloutSettings, TaskRef, collect_rollouts
from trainers.models import load_policy, train_top_layers
from trainers.trainer import Trainer

BASE = [
    "model=tiny-llama", "groups_per_update=2", "group_size=2", "val_tasks=2", "updates=1", "progress=false",
    "tensorboard=false", "env_workers=0", "torch_threads=1", "mixed_precision=no", "warm_start_tasks=0",
    "env_id=WebShop-Rubric-v0", "env_kwargs={catalogue: generated, num_products: 60, tagger: lexicon}",
    "train_split=train", "val_split=eval", "max_steps=3", "rubric_shaping=0.0", "max_train_rows=0",
    "action_mode=choose", "rl_loss=choice", "temperature=0.7", "estimator=grpo", "estimator_params={}",
    "trainable_layers=0", "eval_train_games=false",
]

# one prompt, four candidate responses sharing prefixes (as `<action>…` candidates do)
PROMPT = [5, 17, 23, 9, 41]
CANDS = [[3, 7, 2], [3, 7, 11, 2], [3, 8, 2], [30, 2]]


@pytest.fixture()
def trainer(tmp_path):
    t = Trainer(load_config("demo", [*BASE, f"output_dir={tmp_path}", "run_name=choice", "kl_coef=0.0",
                                     "learning_rate=0.1", "entropy_coef=0.0"]))
    yield t
    t.pool.close()


def _choice_probs(trainer) -> torch.Tensor:
    with torch.no_grad():
        s = score_candidates(trainer.policy.unwrapped, [PROMPT], [CANDS], pad_id=trainer.policy.tokenizer.pad_token_id)[0]
    return torch.softmax(s.double() / trainer.cfg.rollout.temperature, dim=0)


def test_choice_logprob_and_entropy_are_those_of_the_choose_policy(trainer):
    rows = [TrainRow(PROMPT, CANDS[j], 0.0, 0, 0, 0, CANDS, j) for j in range(len(CANDS))]
    logp, ent = trainer.policy.choice_logprobs(trainer.policy.unwrapped, rows, with_entropy=True)
    p = _choice_probs(trainer)  # softmax(score / T) with T = 0.7, as the rollouts sample
    assert logp.shape == (4, 1) and ent.shape == (4, 1)
    assert torch.allclose(logp[:, 0].double(), p.log(), atol=1e-4)
    assert torch.allclose(ent[:, 0].double(), -(p * p.log()).sum().expand(4), atol=1e-4)
    assert torch.allclose(logp.exp().sum().double(), torch.tensor(1.0, dtype=torch.float64), atol=1e-4)
    # a generated decision (no candidate set) cannot be trained on its choice: a clear error
    with pytest.raises(ValueError, match="rl_loss='tokens'"):
        trainer.policy.choice_logprobs(trainer.policy.unwrapped, [TrainRow(PROMPT, CANDS[0], 1.0, 0, 0, 0)], with_entropy=False)
    # the no-grad path (old / reference log-probs) gives the same numbers
    old = trainer.policy.logprobs(rows, reference=False)
    assert [v.shape for v in old] == [(1,)] * 4
    assert torch.allclose(torch.cat(old), logp[:, 0].detach(), atol=1e-5)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_one_update_moves_the_chosen_actions_probability_with_its_advantage(trainer, sign):
    p0 = _choice_probs(trainer)
    rows = [TrainRow(PROMPT, CANDS[1], sign, 0, 0, 0, CANDS, 1)]
    trainer.update_rule = dataclasses.replace(trainer.update_rule, epochs=1)  # one SGD step
    stats = trainer.optimize(rows, [], update=0)
    p1 = _choice_probs(trainer)
    # π_old is computed before the step, by the same scorer: the step's ratio is 1
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-6) and stats["rows"] == 1.0
    # the loss of one on-policy decision is −A (ρ = 1)
    assert stats["pg_loss"] == pytest.approx(-sign, abs=1e-6)
    # (the random tiny model puts almost all mass on the short candidate 3: compare log-probs)
    assert (p1[1].log() - p0[1].log()) * sign > 0.1, (p0, p1)
    # the choice distribution stays normalised; the other actions share the change
    assert float(p1.sum()) == pytest.approx(1.0)


def test_rollout_rows_carry_the_scored_candidates_and_the_choice(trainer):
    settings = RolloutSettings.from_config(trainer.cfg)
    tasks = [TaskRef(t, "train", 100 + k) for k, t in enumerate(trainer.train_task_ids[:2])]
    result = collect_rollouts(trainer.policy.unwrapped, trainer.policy.tokenizer, None, trainer.pool, tasks, 2, settings)
    n = 0
    for group in result.rows:
        for traj in group:
            for row in traj:
                assert 0 <= row.chosen < len(row.candidates)
                assert row.candidates[row.chosen] == row.response_ids
                n += 1
    assert n == sum(len(t.steps) for g in result.groups for t in g) > 0


def test_choice_loss_with_kl_to_a_reference_and_entropy(tmp_path):
    t = Trainer(load_config("demo", [*BASE, f"output_dir={tmp_path}", "run_name=kl", "kl_coef=0.1",
                                     "entropy_coef=0.01", "learning_rate=1e-3", "ppo_epochs=1"]))
    try:
        rows = [TrainRow(PROMPT, CANDS[j], a, 0, 0, 0, CANDS, j) for j, a in ((0, 1.0), (3, -1.0))]
        p = _choice_probs(t)
        first = t.optimize(rows, [], update=0)
        # the reference is the starting policy: KL 0 at the first step; the entropy is the choice's
        assert first["kl_ref"] == pytest.approx(0.0, abs=1e-6)
        assert first["entropy"] == pytest.approx(float(-(p * p.log()).sum()), abs=1e-4)
        second = t.optimize(rows, [], update=1)
        assert second["kl_ref"] > 0.0
    finally:
        t.pool.close()


def test_choice_loss_needs_choose_mode():
    with pytest.raises(ConfigError, match="rl_loss='choice' needs action_mode='choose'"):
        load_config("demo", ["action_mode=generate", "rl_loss=choice"])
    with pytest.raises(ConfigError, match="rl_loss must be one of 'auto', 'tokens', 'choice'"):
        load_config("demo", ["rl_loss=sequence"])


@pytest.mark.parametrize("mode, expected", [("choose", "choice"), ("generate", "tokens")])
def test_auto_is_the_choice_loss_in_choose_mode_only(tmp_path, mode, expected):
    ov = [*BASE, f"output_dir={tmp_path}", f"run_name={mode}", f"action_mode={mode}", "rl_loss=auto", "prompt_style=action_only"]
    t = Trainer(load_config("demo", ov))
    t.pool.close()
    assert t.policy.loss_unit == expected


# --- trainable_layers ---------------------------------------------------------------------

def test_an_update_changes_only_the_top_block_and_the_final_norm(tmp_path):
    t = Trainer(load_config("demo", [*BASE, f"output_dir={tmp_path}", "run_name=top1", "trainable_layers=1", "kl_coef=0.1",
                                     "learning_rate=1e-2"]))
    try:
        before = {k: v.detach().clone() for k, v in t.policy.unwrapped.named_parameters()}
        cands = [[3, 7, 2], [3, 8, 2], [30, 2]]
        rows = [TrainRow([5, 17, 23], cands[j], a, 0, 0, 0, cands, j) for j, a in ((0, 1.0), (2, -1.0))]
        t.optimize(rows, [], update=0)
        changed = {k for k, v in t.policy.unwrapped.named_parameters() if not torch.equal(v, before[k])}
        # tiny-llama has 2 blocks: block 1 and the final norm train; embeddings (tied head) and block 0 do not
        assert changed and all(k.startswith(("model.layers.1.", "model.norm.")) for k in changed), sorted(changed)
        assert any(k.startswith("model.layers.1.") for k in changed)
        # only trainable weights are optimised, and the KL reference is a full frozen copy
        n_opt = sum(p.numel() for g in t.policy.optimizer.param_groups for p in g["params"])
        assert n_opt == sum(p.numel() for p in t.policy.unwrapped.parameters() if p.requires_grad)
        assert not any(p.requires_grad for p in t.policy.ref_model.parameters())
    finally:
        t.pool.close()


def test_train_top_layers_counts_and_rejects_bad_values():
    model, _ = load_policy("tiny-llama", seed=0)
    total = sum(p.numel() for p in model.parameters())
    one, two = train_top_layers(model, 1), train_top_layers(model, 2)
    assert 0 < one < two < total  # two blocks still leave the embeddings frozen
    assert two == total - model.get_input_embeddings().weight.numel()
    # a preset sized for a deeper model still runs: more blocks than the model has = all blocks
    assert train_top_layers(model, 30) == two
    with pytest.raises(ValueError, match="≥ 1"):
        train_top_layers(model, 0)
    with pytest.raises(ConfigError, match="trainable_layers must be 0 when lora=true"):
        load_config("demo", ["trainable_layers=4", "lora=true"])
    with pytest.raises(ConfigError, match="trainable_layers must be an integer ≥ 0"):
        load_config("demo", ["trainable_layers=-1"])

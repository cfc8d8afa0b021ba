"""TRL integration: one real ``GRPOTrainer.train()`` step on WebShop with the tiny model, the
multi-turn rollout with ``env_mask``, and the (B, T) advantages TRL's loss receives equal to
rubricgym's estimator, token by token."""

from __future__ import annotations

import os
from typing import ClassVar

import pytest

pytest.importorskip("trl", reason="TRL is not installed: pip install 'trl>=1.16,<1.17' jmespath (or pip install -e '.[trl]')")

import torch

from agent_envs.agent.prompts import NO_ACTION
from wrappers.credit import get_estimator
from wrappers.integrations import trl_grpo

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def hash_parser(response: str, info) -> str:
    """Maps whatever the random tiny model wrote onto an admissible action, or an invalid one:
    the choice depends on the generated text, so siblings differ (a real model would write
    ``<action>…</action>``; the default parser reads that)."""
    adm = [a.replace("<your query>", "running shoes") for a in info.get("admissible_actions") or []]
    k = sum(map(ord, response)) % (len(adm) + 1)
    return adm[k] if k < len(adm) else NO_ACTION


class Recording(trl_grpo.RubricGRPOTrainer):
    """Records what TRL's private loss receives."""

    seen: ClassVar[list] = []

    def _compute_loss(self, model, inputs):
        self.seen.append({k: inputs[k].detach().clone() for k in ("advantages", "completion_ids", "tool_mask", "completion_mask")})
        return super()._compute_loss(model, inputs)


def _train(out_dir, mini_dir, **rollout_options):
    from trl import GRPOConfig

    from trainers.models import load_policy

    model, tok = load_policy("tiny-llama", seed=0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = GRPOConfig(output_dir=str(out_dir), per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=6, max_steps=1, learning_rate=1e-2, beta=0.0, report_to="none",
                      use_cpu=True, seed=3, save_strategy="no", logging_steps=1, temperature=1.0)
    rollout = trl_grpo.env_rollout("WebShop-Rubric-v0", {"catalogue": mini_dir, "verify": False, "tagger": "lexicon",
                                                         "goal_kind": "synthetic"},
                                   max_turns=3, parser=hash_parser, **rollout_options)
    Recording.seen = []
    trainer = Recording(model, args=args, processing_class=tok, estimator="gigpo", estimator_params={"gamma": 0.9},
                        train_dataset=trl_grpo.task_dataset([0, 1], seed=0), rollout_func=rollout)
    trainer.train()
    trainer.env_worker_cpu_s = rollout.pool.worker_cpu_seconds()
    trainer.env_worker_policies = [os.sched_getscheduler(p.pid) for p in rollout.pool.procs]
    rollout.close()
    return trainer, before, tok


@pytest.fixture(scope="module")
def trained(tmp_path_factory, mini_dir):
    return _train(tmp_path_factory.mktemp("trl"), mini_dir)


def test_environments_in_worker_processes_give_the_same_step(trained, tmp_path, mini_dir) -> None:
    """``env_workers=2``: each turn's steps run in two worker processes, in parallel (under
    SCHED_IDLE, ``env_pool_options``); the episodes, their credit and the updated weights are
    those of the in-process rollout."""
    trainer, _, _ = trained
    pooled, _, _ = _train(tmp_path, mini_dir, env_workers=2, env_pool_options={"worker_idle": True})
    assert pooled.env_worker_policies == [os.SCHED_IDLE] * 2
    assert pooled.env_worker_cpu_s > 0 and trainer.env_worker_cpu_s == 0  # the workers did play
    assert pooled.last_credit["groups"] == trainer.last_credit["groups"]
    assert pooled.last_credit["completion_ids"] == trainer.last_credit["completion_ids"]
    for (name, p), q in zip(trainer.model.named_parameters(), pooled.model.parameters()):
        assert torch.equal(p.detach(), q.detach()), name


def test_one_real_train_step(trained) -> None:
    trainer, before, _ = trained
    assert trainer.state.global_step == 1
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert changed, "the optimiser step changed no weight"


def test_loss_receives_the_estimators_advantages_per_token(trained) -> None:
    trainer = trained[0]
    groups = trainer.last_credit["groups"]
    assert [len(g) for g in groups] == [2, 2] and all(len(t.steps) >= 1 for g in groups for t in g)
    # two different tasks: each group holds the two siblings of one of them, never a mix
    tasks = [{t.task_id for t in g} for g in groups]
    assert all(len(ts) == 1 for ts in tasks) and len(set.union(*tasks)) == 2, tasks
    # the estimator run independently on the recorded sibling groups
    ref = get_estimator("gigpo", gamma=0.9)(groups)
    step_adv = [a for r in ref for a in r.advantages]
    assert any(abs(x) > 1e-6 for a in step_adv for x in a), "all advantages are 0: the test would prove nothing"
    (seen,) = trainer.seen
    adv, ids, env_mask = seen["advantages"], seen["completion_ids"], seen["tool_mask"]
    assert adv.dim() == 2 and adv.shape == ids.shape and adv.abs().max() > 0
    # TRL may shuffle the rows: match each row to its sample by the completion tokens
    spans = trainer.last_credit["spans"]
    completions = trainer.last_credit["completion_ids"]
    for b in range(ids.shape[0]):
        k = next(j for j, c in enumerate(completions) if ids[b, :len(c)].tolist() == c)
        want = torch.zeros(ids.shape[1])
        for a, (s, e) in zip(step_adv[k], spans[k]):
            want[s:e] = float(a)
            assert env_mask[b, s:e].eq(1).all()  # response tokens are trained
        assert torch.allclose(adv[b], want, atol=1e-6, rtol=0)
        # between responses lie the environment's turns: masked out, advantage 0
        inside = torch.zeros(len(completions[k]), dtype=torch.bool)
        for s, e in spans[k]:
            inside[s:e] = True
        assert env_mask[b, :len(completions[k])][~inside].eq(0).all() and adv[b, :len(completions[k])][~inside].eq(0).all()


def test_environment_turns_are_the_chat_template(trained) -> None:
    trainer, _, tok = trained
    k = max(range(4), key=lambda j: len(trainer.last_credit["spans"][j]))
    spans, comp = trainer.last_credit["spans"][k], trainer.last_credit["completion_ids"][k]
    assert len(spans) > 1, "no multi-turn episode in the batch"
    between = tok.decode(comp[spans[0][1]:spans[1][0]])
    assert "<|im_start|>user\nYou control an agent" in between
    assert "Now (turn 2) you see:" in between and between.endswith("<|im_start|>assistant\n")
    traj = [t for g in trainer.last_credit["groups"] for t in g][k]
    assert len(traj.steps) == len(spans) <= 3


def test_rollout_and_trainer_refuse_bad_setups() -> None:
    with pytest.raises(ValueError, match="max_turns"):
        trl_grpo.env_rollout("WebShop-Rubric-v0", max_turns=0)
    with pytest.raises(ValueError, match="needs rollout_func"):
        trl_grpo.RubricGRPOTrainer("unused-model")
    with pytest.raises(ValueError, match="groups of num_generations"):
        trl_grpo._sibling_groups([None] * 3, 2)


def test_docstring_example_runs() -> None:
    import doctest

    assert doctest.testmod(trl_grpo).failed == 0


def test_success_and_invalid_share_go_through_trls_log_metric(trained) -> None:
    trainer = trained[0]
    trajs = [t for g in trainer.last_credit["groups"] for t in g]
    steps = [s for t in trajs for s in t.steps]
    logged = next(h for h in trainer.state.log_history if "rubricgym/success" in h)
    assert logged["rubricgym/success"] == pytest.approx(sum(t.success for t in trajs) / len(trajs))
    assert logged["rubricgym/invalid_share"] == pytest.approx(sum(not s.valid for s in steps) / len(steps))
    assert not any(k.startswith("rubricgym/") for k in trainer._metrics["train"])  # nothing written there directly


def test_episodes_are_bounded_in_tokens_by_default(tmp_path, mini_dir) -> None:
    """The default ``max_tokens`` (8192) and the model's context (tiny-llama: 4096) bound an
    episode; a bound below one turn's prompt + completion ends every episode after its first turn."""
    rollout = trl_grpo.env_rollout("WebShop-Rubric-v0", {"catalogue": mini_dir})
    assert rollout.max_tokens == trl_grpo.DEFAULT_MAX_TOKENS == 8192
    from types import SimpleNamespace

    trainer = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=4096)))
    assert rollout.token_limit(trainer) == 4096
    rollout.max_tokens = 1000
    assert rollout.token_limit(trainer) == 1000
    rollout.close()
    with pytest.raises(ValueError, match="max_tokens"):
        trl_grpo.env_rollout("WebShop-Rubric-v0", max_tokens=0)
    capped, _, _ = _train(tmp_path, mini_dir, max_tokens=64)
    assert all(len(t.steps) == 1 for g in capped.last_credit["groups"] for t in g)


def test_rollout_tasks_are_the_splits(mini_dir) -> None:
    rollout = trl_grpo.env_rollout("WebShop-Rubric-v0", {"catalogue": mini_dir, "verify": False, "tagger": "lexicon",
                                                         "goal_kind": "synthetic"})
    tasks = rollout.tasks()
    assert tasks and all(isinstance(t, int) for t in tasks)
    rows = trl_grpo.task_dataset(tasks, seed=0)
    assert len(rows) == len(tasks)
    with pytest.raises(ValueError, match=f"has {len(tasks)} tasks, not {len(tasks) + 1}"):
        rollout.tasks(len(tasks) + 1)
    rollout.close()


@pytest.mark.slow
def test_the_documented_alfworld_generated_setup_trains_a_step(tmp_path) -> None:
    """The documented form on ALFWorld-generated: ``task_dataset(rollout.tasks())`` names only
    the split's games (``range(2000)`` on 60 games failed inside TRL on the first batch:
    ``task index 1542 out of range``)."""
    pytest.importorskip("alfworld", reason="pip install -e '.[alfworld]'")
    from trl import GRPOConfig

    from trainers.models import load_policy

    model, tok = load_policy("tiny-llama", seed=0)
    rollout = trl_grpo.env_rollout("ALFWorld-Rubric-v0", {"split": "generated", "generated_n": 4,
                                                          "generated_cache_dir": str(tmp_path / "games")},
                                   max_turns=2, parser=hash_parser)
    tasks = rollout.tasks()
    assert len(tasks) == 4
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=6, max_steps=1, learning_rate=1e-2, beta=0.0, report_to="none",
                      use_cpu=True, seed=3, save_strategy="no", logging_steps=1)
    trainer = trl_grpo.RubricGRPOTrainer(model, args=args, processing_class=tok, estimator="graphgpo",
                                         train_dataset=trl_grpo.task_dataset(tasks, seed=0), rollout_func=rollout)
    trainer.train()
    rollout.close()
    assert trainer.state.global_step == 1
    played = {t.task_id for g in trainer.last_credit["groups"] for t in g}
    assert len(played) == 2 and played <= {f"alfworld/generated/{t}" for t in tasks} | set(tasks)

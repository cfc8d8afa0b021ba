"""Warm start (behaviour cloning on stored walkthroughs) with the tiny model on generated ALFWorld."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from agent_envs.agent.prompts import format_action
from agent_envs.alfworld.data import task_walkthrough
from agent_envs.rollout import EnvPool
from trainers.config import ConfigError, load_config
from trainers.generation import candidate_logprobs, score_candidates
from trainers.lm_policy import RolloutSettings, TaskRef, collect_rollouts
from trainers.metrics import read_metrics
from trainers.models import load_policy
from trainers.trainer import Trainer
from trainers.warm_start import behaviour_clone, expert_rows

ENV_KWARGS = {"generated_n": 12, "task_types": ["look_at_obj_in_light", "pick_and_place_simple"]}


@pytest.fixture(scope="module")
def pool():
    with EnvPool("ALFWorld-Rubric-v0", ENV_KWARGS, 4, workers=1) as p:
        yield p


def _walkthroughs(pool, refs):
    infos = pool.reset([(k, r.seed, {"task": r.task, "split": r.split}) for k, r in enumerate(refs)])
    return [task_walkthrough(info) for _obs, info in infos]


def test_expert_rows_are_the_rollout_prompts_with_the_walkthrough_actions(pool):
    from accelerate import Accelerator

    model, tok = load_policy("tiny-llama", seed=0)
    settings = RolloutSettings(action_mode="choose", prompt_style="action_only", compact_prompt=True,
                               system_prompt="Be brief.", max_steps=50, max_prompt_tokens=768)
    refs = [TaskRef(k, "generated", 100 + k) for k in (0, 1, 2)]
    walks = _walkthroughs(pool, refs)
    assert all(len(w) >= 3 for w in walks)
    rows = expert_rows(pool, tok, refs, settings)
    # one row per expert decision; each response is the action in choose mode's format
    assert len(rows) == sum(len(w) for w in walks)
    expected = [a for w in walks for a in w]
    assert [tok.decode(r.response_ids) for r in rows] == [format_action(a) + tok.eos_token for a in expected]
    # the step-0 prompt is byte-identical to the one a rollout builds for the same task and seed
    result = collect_rollouts(model, tok, None, pool, refs[:1], 1, RolloutSettings(**{**settings.__dict__, "max_steps": 1}))
    assert rows[0].prompt_ids == result.rows[0][0][0].prompt_ids
    # each row also holds every admissible action's response and the expert's index among them
    assert all(tok.decode(r.candidates[r.chosen]) == tok.decode(r.response_ids) for r in rows)
    # the horizon caps a replay
    short = expert_rows(pool, tok, refs, RolloutSettings(**{**settings.__dict__, "max_steps": 2}))
    assert len(short) == 2 * len(refs)

    # behaviour cloning: the NLL falls and choose mode ranks the expert actions higher
    infos = []  # each decision's admissible actions, from a second replay
    for ref, walk in zip(refs, walks):
        (_obs, info), = pool.reset([(0, ref.seed, {"task": ref.task, "split": ref.split})])
        for action in walk:
            infos.append(info)
            (_o, _r, _t, _tr, info), = pool.step([(0, action)])
    cands = [[tok.encode(format_action(a), add_special_tokens=False) + [tok.eos_token_id]
              for a in info["admissible_actions"]] for info in infos]
    acc = Accelerator(cpu=True)
    model = acc.prepare(model)

    def expert_ranks() -> list[int]:
        with torch.no_grad():
            scores = score_candidates(acc.unwrap_model(model), [r.prompt_ids for r in rows], cands, pad_id=tok.pad_token_id)
        return [int((s > s[info["admissible_actions"].index(a)]).sum()) for info, a, s in zip(infos, expected, scores)]

    before = expert_ranks()
    stats = behaviour_clone(model, acc, rows, pad_id=tok.pad_token_id, lr=1e-2, epochs=10, batch_rows=8,
                            micro_rows=4, seed=0)
    assert stats["rows"] == len(rows) and stats["steps"] == 10 * -(-len(rows) // 8)
    assert stats["nll_last"] < 0.5 * stats["nll_first"]
    behaviour_clone(model, acc, rows, pad_id=tok.pad_token_id, lr=1e-3, epochs=30, batch_rows=8, micro_rows=4, seed=0)
    after = expert_ranks()
    # measured (deterministic: seeded, one thread): mean rank 10.0 -> 3.3 among 11-19 actions
    assert sum(after) <= 0.5 * sum(before) and sum(r == 0 for r in after) >= 4, (before, after)


def test_choice_loss_scores_are_the_choose_mode_scores_with_gradients(pool):
    from accelerate import Accelerator

    model, tok = load_policy("tiny-llama", seed=1)
    settings = RolloutSettings(action_mode="choose", prompt_style="action_only", max_steps=50)
    refs = [TaskRef(k, "generated", 200 + k) for k in (3, 4)]
    rows = expert_rows(pool, tok, refs, settings)
    with torch.no_grad():
        plain = score_candidates(model, [r.prompt_ids for r in rows[:3]], [r.candidates for r in rows[:3]], pad_id=tok.pad_token_id)
    graded = candidate_logprobs(model, [r.prompt_ids for r in rows[:3]], [r.candidates for r in rows[:3]], pad_id=tok.pad_token_id)
    for a, b in zip(plain, graded):
        assert torch.allclose(a, b.detach().cpu(), atol=1e-4)
    (-torch.log_softmax(graded[0], 0)[rows[0].chosen]).backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    model.zero_grad()
    # cloning the choice: the expert's rank among the admissible actions falls to the top
    acc = Accelerator(cpu=True)
    model = acc.prepare(model)

    def ranks() -> list[int]:
        with torch.no_grad():
            s = score_candidates(acc.unwrap_model(model), [r.prompt_ids for r in rows], [r.candidates for r in rows],
                                 pad_id=tok.pad_token_id)
        return [int((x > x[r.chosen]).sum()) for x, r in zip(s, rows)]

    before = ranks()
    stats = behaviour_clone(model, acc, rows, pad_id=tok.pad_token_id, lr=1e-2, epochs=10, batch_rows=8, micro_rows=4,
                            seed=0, loss="choice")
    after = ranks()
    assert stats["nll_last"] < 0.5 * stats["nll_first"]
    # measured (seeded, one thread): summed rank 96 -> 46 over the walkthroughs' decisions
    assert sum(after) <= 0.5 * sum(before) and sum(r == 0 for r in after) >= 2, (before, after)
    with pytest.raises(ValueError, match="loss must be"):
        behaviour_clone(model, acc, rows, pad_id=tok.pad_token_id, lr=1e-2, epochs=1, batch_rows=8, micro_rows=4,
                        seed=0, loss="kl")


def test_trainer_warm_start_runs_before_the_first_update_and_is_reported(tmp_path):
    ov = ["model=tiny-llama", "groups_per_update=2", "group_size=2", "val_tasks=2", "updates=1", "eval_every=1",
          "save_every=1", f"output_dir={tmp_path}", "run_name=warm", "progress=false", "tensorboard=false",
          "env_workers=1", "torch_threads=1", "mixed_precision=no", "max_steps=4", "max_train_rows=4",
          f"env_kwargs={{generated_n: 12, task_types: [{', '.join(ENV_KWARGS['task_types'])}]}}",
          "warm_start_tasks=3", "warm_start_epochs=2", "warm_start_lr=1e-3", "kl_coef=0.01",
          "trainable_layers=0", "eval_train_games=false"]
    trainer = Trainer(load_config("demo", ov))
    before = [p.detach().clone() for p in trainer.policy.ref_model.parameters()]
    trainer.warm_start()
    # the KL reference is now the warm-started policy (it was the initial one)
    for r, p, b in zip(trainer.policy.ref_model.parameters(), trainer.policy.unwrapped.parameters(), before):
        assert torch.equal(r, p.detach())
    assert any(not torch.equal(r, b) for r, b in zip(trainer.policy.ref_model.parameters(), before))
    trainer.pool.close()
    trainer = Trainer(load_config("demo", [*ov, "run_name=warm2"]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = trainer.train()
    # the schedule counts updates: torch's per-step warning (this update steps no optimizer) stays out
    assert not [w for w in caught if "lr_scheduler.step()" in str(w.message)]
    records = read_metrics(summary["run_dir"])
    phases = [r["phase"] for r in records]
    # the run's identity, validation before the warm start, the warm start, validation after it, the update
    assert phases[:5] == ["run", "eval", "warm_start", "eval_warm_start", "train"] and phases[-1] == "end"
    warm = summary["warm_start"]
    assert warm["tasks"] == 3 and 3 * 3 <= warm["rows"] <= 3 * 4 and warm["steps"] == 2 * -(-warm["rows"] // 8)
    assert 0.0 <= warm["val_success"] <= 1.0 and summary["warm_start_eval"]["episodes"] == 2
    from rubrics.trajectory import load_jsonl

    assert len(load_jsonl(Path(summary["run_dir"]) / "rollouts" / "eval_warm_start_00000.jsonl")) == 2
    text = (Path(summary["run_dir"]) / "summary.txt").read_text()
    assert "warm start (behaviour cloning, before update 1)" in text


def test_warm_start_settings_are_validated():
    with pytest.raises(ConfigError, match="warm_start_tasks"):
        load_config("demo", ["warm_start_tasks=-1"])
    with pytest.raises(ConfigError, match="warm_start_lr"):
        load_config("demo", ["warm_start_lr=0"])

"""End-to-end trainer runs with the tiny random model on the real environments.

One full update (rollouts → credit → objective → checkpoint) in both action modes; exact
resume after an interrupted run; a 2-process DDP run (the demo's path: warm start, choice loss)
with identical weights afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from rubrics.trajectory import load_jsonl
from trainers.checkpoint import MARKER, latest_checkpoint
from trainers.config import load_config
from trainers.metrics import read_metrics
from trainers.trainer import Trainer

ALFWORLD = ["env_id=ALFWorld-Rubric-v0", "env_kwargs={}", "train_split=generated", "val_split=generated", "max_steps=3"]
WEBSHOP = [
    "env_id=WebShop-Rubric-v0",
    "env_kwargs={catalogue: generated, num_products: 120, tagger: lexicon}",
    "train_split=train", "val_split=eval", "max_steps=4",
]


def _overrides(tmp_path: Path, name: str, extra: list[str]) -> list[str]:
    return [
        "model=tiny-llama", "groups_per_update=2", "group_size=2", "val_tasks=2", "updates=1",
        "eval_every=1", "save_every=1", f"output_dir={tmp_path}", f"run_name={name}",
        "learning_rate=1e-3", "progress=false", "tensorboard=false", "max_response_tokens=12",
        "micro_batch_rows=4", "estimator_params={}", "skip_zero_advantage_rows=false", "env_workers=0",
        "mixed_precision=no", "rubric_shaping=0.0", "max_train_rows=0", "torch_threads=1", "warm_start_tasks=0",
        "trainable_layers=0", "eval_train_games=false", *WEBSHOP, *extra,
    ]


def _check_run(run: Path, cfg, all_rows: bool = True) -> list:
    trajs = load_jsonl(run / "rollouts" / "update_00001.jsonl")
    assert len(trajs) == cfg.rollout.groups_per_update * cfg.rollout.group_size
    # validation episodes are kept too, one per validation task and evaluation
    assert [len(load_jsonl(run / "rollouts" / f"eval_{u:05d}.jsonl")) for u in (0, 1)] == [cfg.schedule.val_tasks] * 2
    assert sorted({t.slot for t in trajs}) == list(range(cfg.rollout.group_size))
    records = read_metrics(run)
    train = [r for r in records if r["phase"] == "train"]
    evals = [r for r in records if r["phase"] == "eval"]
    assert len(train) == 1 and [e["update"] for e in evals] == [0, 1]
    steps = sum(len(t.steps) for t in trajs)
    if all_rows:
        assert train[0]["opt/rows"] == steps  # every decision is one training row
    assert train[0]["train/episodes"] == len(trajs)
    ckpt = latest_checkpoint(run / "checkpoints")
    assert ckpt is not None and (ckpt / MARKER).is_file()
    assert (run / "summary.txt").is_file() and (run / "curves.png").is_file()
    return trajs


@pytest.mark.slow
def test_one_update_choose_mode_webshop(tmp_path):
    cfg = load_config("demo", _overrides(tmp_path, "choose", ["action_mode=choose", "estimator=mcgpo"]))
    summary = Trainer(cfg).train()
    trajs = _check_run(Path(summary["run_dir"]), cfg)
    # the run folder records the precision and threads it actually used (overrides: mixed_precision=no)
    (cpu,) = summary["cpu"]
    assert cpu["mixed_precision"] == "no" and cpu["rollout_dtype"] == "float32" and cpu["torch_threads"] == 1
    saved = json.loads((Path(summary["run_dir"]) / "summary.json").read_text())
    assert saved["cpu"][0]["mixed_precision"] == "no"
    # choose mode only ever plays admissible actions
    assert all(s.valid for t in trajs for s in t.steps)
    assert all(s.extra["response"].startswith("<action>") for t in trajs for s in t.steps)
    train = next(r for r in read_metrics(summary["run_dir"]) if r["phase"] == "train")
    assert train["opt/pairs_colocated"] == train["opt/pairs"]
    # the update rule's record: KL(old → new) within the trust region, ‖Δθ‖, epochs, backtracks, RMS
    if train["opt/rows"]:
        assert 0.0 <= train["opt/kl"] <= cfg.update.target_kl and train["opt/delta_norm"] >= 0.0
        assert 1 <= train["opt/epochs_run"] <= cfg.update.ppo_epochs and train["opt/backtracks"] >= 0
        assert 0.0 <= train["opt/clip_fraction"] <= 1.0 and train["opt/adv_rms"] >= 0.0 <= train["opt/adv_rms_scaled"]


@pytest.mark.slow
def test_one_update_generate_mode_webshop_with_lora(tmp_path):
    cfg = load_config("demo", _overrides(tmp_path, "gen", ["action_mode=generate", "prompt_style=think",
                                                          "lora=true", "lora_r=4", "kl_coef=0.01",
                                                          "estimator=grpo", "env_workers=2"]))
    trainer = Trainer(cfg)
    assert trainer.pool.timeout == cfg.env.env_timeout == 600.0  # a worker that never answers stops the run
    before = {k: v.clone() for k, v in trainer.policy.unwrapped.named_parameters() if "lora_B" in k}
    summary = trainer.train()
    trajs = _check_run(Path(summary["run_dir"]), cfg)
    # a random tiny model writes no <action> block: those steps are invalid, with the penalty
    for t in trajs:
        for s in t.steps:
            if "<action>" not in s.extra["response"].lower():
                assert not s.valid and s.penalty == pytest.approx(-0.1)
    after = dict(trainer.policy.unwrapped.named_parameters())
    assert any(not torch.equal(before[k], after[k]) for k in before)  # the adapters trained
    assert (Path(summary["run_dir"]) / "policy" / "adapter_config.json").is_file()


def test_lora_reference_is_the_base_model_with_adapters_disabled():
    from trainers.models import apply_lora, load_policy
    from trainers.objective import pack_rows, sequence_logprobs

    base, tok = load_policy("tiny-llama", seed=5)
    batch = pack_rows([[5, 6, 7]], [[8, 9, 10]], tok.pad_token_id)
    with torch.no_grad():
        ref, _ = sequence_logprobs(base, batch)
    model = apply_lora(base, r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(0.5)  # make the adapters change the policy
        pol, _ = sequence_logprobs(model, batch)
        with model.disable_adapter():
            off, _ = sequence_logprobs(model, batch)
    assert not torch.allclose(pol, ref)
    torch.testing.assert_close(off, ref)


@pytest.mark.slow
def test_resume_reproduces_the_uninterrupted_next_update(tmp_path):
    extra = ["action_mode=generate", "prompt_style=action_only", "estimator=grpo", "updates=2",
             "kl_coef=0.01", "mini_batches=2"]
    full = Trainer(load_config("demo", _overrides(tmp_path, "full", extra))).train()
    Trainer(load_config("demo", _overrides(tmp_path, "cut", extra)), stop_after=1).train()
    cut = tmp_path / "cut"
    # simulate a crash while writing the next checkpoint: a temp folder and a folder
    # without the completion marker must both be ignored
    (cut / "checkpoints" / ".tmp-update_000002").mkdir()
    half = cut / "checkpoints" / "update_000002"
    half.mkdir()
    (half / "trainer_state.json").write_text(json.dumps({"update": 2}))
    assert latest_checkpoint(cut / "checkpoints").name == "update_000001"
    resumed = Trainer(load_config(cut / "config.yaml"), cut, resume=True).train()
    assert resumed["resumed_from"].endswith("update_000001")
    assert resumed["weights_digest"] == full["weights_digest"]
    a = (tmp_path / "full" / "rollouts" / "update_00002.jsonl").read_text()
    b = (cut / "rollouts" / "update_00002.jsonl").read_text()
    assert a == b
    with pytest.raises(FileExistsError, match="--resume"):
        Trainer(load_config(cut / "config.yaml"), cut)


DDP_SCRIPT = """
import json, sys
from trainers.config import load_config
from trainers.trainer import Trainer
if __name__ == "__main__":
    cfg = load_config("demo", json.loads(sys.argv[1]))
    t = Trainer(cfg)
    s = t.train()
    open(sys.argv[2] + f"/digest{t.rank}.json", "w").write(json.dumps(
        {"digest": s["weights_digest"], "identical": s["weights_identical_across_processes"],
         "world": t.world, "groups": t.groups_here}))
    t.accelerator.end_training()  # destroys the process group (as `rubricgym train` does)
"""


@pytest.mark.slow
def test_two_process_cpu_run_keeps_identical_weights(tmp_path):
    script = tmp_path / "ddp_run.py"
    script.write_text(textwrap.dedent(DDP_SCRIPT))
    # the demo's path under DDP: generated ALFWorld, a choice-loss warm start on walkthroughs
    # (every process takes its share of each warm-start batch), then choice-loss updates
    ov = _overrides(tmp_path, "ddp", [*ALFWORLD, "env_kwargs={generated_n: 12, task_types: [look_at_obj_in_light, pick_and_place_simple]}",
                                      "groups_per_update=3", "action_mode=choose", "estimator=grpo", "micro_batch_rows=3",
                                      "rl_loss=choice", "warm_start_tasks=3", "warm_start_lr=1e-3", "warm_start_batch_rows=4"])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    # accelerate 1.x: `--cpu` alone runs one process unless an MPI hostfile is given;
    # `--multi_gpu` on a machine without CUDA starts torchrun workers that use gloo on CPU.
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", "29517", str(script), json.dumps(ov), str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    d0 = json.loads((tmp_path / "digest0.json").read_text())
    d1 = json.loads((tmp_path / "digest1.json").read_text())
    assert d0["world"] == d1["world"] == 2
    assert (d0["groups"], d1["groups"]) == (2, 1)  # whole task groups per process
    assert d0["digest"] == d1["digest"] and d0["identical"] and d1["identical"]
    assert sorted(p.name for p in (tmp_path / "ddp" / "rollouts").glob("update_*")) == [
        "update_00001.rank0.jsonl", "update_00001.rank1.jsonl"]
    phases = [r["phase"] for r in read_metrics(tmp_path / "ddp")]
    assert phases[:5] == ["run", "eval", "warm_start", "eval_warm_start", "train"] and phases[-1] == "end"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["choose", "generate"])
def test_one_update_on_generated_alfworld(tmp_path, mode):
    # env_workers: engines live in worker processes (a fresh ALFWorld engine made in a process
    # whose earlier engines were garbage-collected can segfault, see the report)
    # choose mode also runs the demo's CPU options: rubric shaping, compact prompts with a
    # system message, at most 5 sampled training rows, a bf16 rollout copy
    demo_opts = ["rubric_shaping=0.05", "compact_prompt=true", "system_prompt=Be brief.", "max_train_rows=5",
                 "rollout_dtype=bfloat16", "estimator_params={}", "estimator=graphgpo"]
    ov = _overrides(tmp_path, mode, [*ALFWORLD, f"action_mode={mode}", "estimator=grpo", "env_workers=2",
                                     *(demo_opts if mode == "choose" else [])])
    cfg = load_config("demo", ov)
    trainer = Trainer(cfg)
    assert not set(trainer.val_task_ids) & set(trainer.train_task_ids)  # validation held out
    summary = trainer.train()
    trajs = _check_run(Path(summary["run_dir"]), cfg, all_rows=mode != "choose")
    # rl_loss = auto: the choose policy's choice log-probability in choose mode, tokens otherwise
    rl_loss = "choice" if mode == "choose" else "tokens"
    assert summary["rl_loss"] == rl_loss and f"rl_loss {rl_loss})" in (Path(summary["run_dir"]) / "summary.txt").read_text()
    if mode == "choose":
        assert trainer.policy.rollout_model is not None and next(trainer.policy.rollout_model.parameters()).dtype == torch.bfloat16
        # the rollout copy holds the trained weights (rounded to bf16) after the update
        for a, b in zip(trainer.policy.rollout_model.parameters(), trainer.policy.unwrapped.parameters()):
            assert torch.equal(a, b.detach().to(torch.bfloat16))
        train = next(r for r in read_metrics(summary["run_dir"]) if r["phase"] == "train")
        assert train["opt/rows"] <= 5
        # shaping: a step's penalty is 0.05 × (rubric channels that rose − fell); choose mode is always valid
        for t in trajs:
            for s in t.steps:
                assert s.penalty == pytest.approx(round(s.penalty / 0.05) * 0.05, abs=1e-9)
        assert "rubric/target_acquired" in [r for r in read_metrics(summary["run_dir"]) if r["phase"] == "eval"][-1]
    for t in trajs:
        assert 1 <= len(t.steps) <= 3
        assert t.task_id in trainer.train_task_ids
        for s in t.steps:
            assert s.keys["exact"] is not None and s.keys["coarse"] is not None
            if mode == "choose":
                assert s.valid
    evals = [r for r in read_metrics(summary["run_dir"]) if r["phase"] == "eval"]
    assert evals[-1]["episodes"] == 2 and any(k.startswith("success/") for k in evals[-1])


def test_the_training_game_evaluation_is_paired_and_the_deal_covers_every_game(tmp_path):
    """``eval_train_games`` plays every training game with the same seeds each time, so the
    before/after difference is the policy's alone (the control of the demo's RL-phase
    measurement: without an update, "after" replays "before" action by action); and the
    sampler deals each training game once per pass."""
    cfg = load_config("demo", _overrides(tmp_path, "paired", ["train_tasks=4", "groups_per_update=3"]))
    trainer = Trainer(cfg)
    first = trainer.evaluate(0, tag="first", training_games=True)
    again = trainer.evaluate(0, tag="again", training_games=True)
    assert {k: v for k, v in first.items() if k != "eval_s"} == {k: v for k, v in again.items() if k != "eval_s"}
    plays = [[(t.task_id, [s.action for s in t.steps]) for t in load_jsonl(Path(trainer.run_dir) / "rollouts" / f"{tag}_00000.jsonl")]
             for tag in ("first", "again")]
    assert plays[0] == plays[1] and len(plays[0]) == 4
    dealt = [ref.task for u in range(4) for ref in trainer.sample_tasks(u)]  # 12 slots: 3 passes
    assert [sorted(dealt[4 * k:4 * k + 4]) for k in range(3)] == [sorted(trainer.train_task_ids)] * 3
    assert dealt[:4] != dealt[4:8]  # each pass is its own shuffle


@pytest.mark.slow
def test_progress_names_each_phase_and_a_large_folder_is_reported(tmp_path, monkeypatch, caplog):
    """The bar used to sit at 0/N with no phase name through the validations, and
    nobody was told that the run folder holds two copies of the model."""
    import logging

    from trainers import trainer as trainer_mod

    phases = []
    real_phase, real_note = trainer_mod._Progress.phase, trainer_mod.run_folder_note
    monkeypatch.setattr(trainer_mod._Progress, "phase", lambda self, name: (phases.append(name), real_phase(self, name)))
    monkeypatch.setattr(trainer_mod, "run_folder_note", lambda run_dir: real_note(run_dir, threshold_bytes=1))
    cfg = load_config("demo", _overrides(tmp_path, "phases", ["progress=true", "eval_train_games=true"]))
    with caplog.at_level(logging.WARNING, logger="trainers.trainer"):
        Trainer(cfg).train()
    assert phases == ["validation before training (2 tasks)", "training games before RL",
                      "update 1: rollouts, credit, optimizer", "validation after update 1", "checkpoint 1",
                      "training games after RL", "saving the policy and the report"]
    (note,) = [r.getMessage() for r in caplog.records if "the run folder" in r.getMessage()]
    assert "policy/" in note and "checkpoints/" in note and "--resume" in note

"""Training configuration: presets, files, overrides and validation before any work."""

from __future__ import annotations

import dataclasses

import pytest

from trainers.config import (
    ConfigError,
    TrainConfig,
    apply_overrides,
    available_presets,
    config_help,
    load_config,
)


def test_every_setting_has_help_text_and_every_section_a_heading():
    sections = [getattr(TrainConfig(), f.name) for f in dataclasses.fields(TrainConfig)]
    leaves = [f for s in sections for f in dataclasses.fields(s)]
    for f in leaves:
        assert len(f.metadata.get("help", "")) > 10, f.name
    assert all(len(type(s).__doc__ or "") > 10 for s in sections)
    assert [row[1] for row in config_help()] == [f.name for f in leaves]


def test_presets_load_and_follow_the_papers_recipe():
    assert {"alfworld", "webshop", "demo"} <= set(available_presets())
    alf = load_config("alfworld")
    # SPEC §5: 16 × 8, T=1.0 (val 0.4), lr 1e-6, wd 0.01, ≤512 tokens, 2 history pairs, every 5
    assert (alf.rollout.groups_per_update, alf.rollout.group_size, alf.env.max_steps) == (16, 8, 50)
    assert (alf.rollout.temperature, alf.rollout.val_temperature, alf.update.learning_rate, alf.update.weight_decay) == (1.0, 0.4, 0.5, 0.0)
    assert (alf.update.ppo_epochs, alf.update.mini_batches, alf.update.target_kl, alf.update.adv_norm) == (1, 4, 0.05, "running_rms")
    assert (alf.prompt.max_response_tokens, alf.prompt.history_length, alf.schedule.eval_every, alf.update.lr_schedule) == (512, 2, 5, "constant")
    assert alf.policy.gradient_checkpointing and alf.prompt.action_mode == "generate"
    assert (alf.objective.clip_low, alf.objective.clip_high, alf.objective.dual_clip, alf.objective.kl_coef, alf.objective.entropy_coef, alf.objective.pair_coef) == (0.2, 0.2, 3.0, 0.01, 0.001, 0.05)
    web = load_config("webshop")
    assert (web.env.env_id, web.env.max_steps, web.prompt.max_prompt_tokens) == ("WebShop-Rubric-v0", 15, 5120)
    demo = load_config("demo")
    assert demo.prompt.action_mode == "choose" and demo.env.train_split == "generated" and demo.policy.model == "smollm2"
    assert (demo.warm_start.warm_start_tasks, demo.env.max_steps, demo.schedule.updates) == (8, 10, 4)


@pytest.mark.parametrize(
    "override, message",
    [
        ("action_mode=shout", "action_mode must be one of 'generate', 'choose'; got 'shout'"),
        ("group_size=1", "group_size must be an integer ≥ 2; got 1"),
        ("estimator=nope", "estimator must be one of"),
        ("estimator_params={bogus: 1}", "estimator_params"),
        ("top_p=1.5", "top_p must be a number in (0, 1]; got 1.5"),
        ("lr_schedule=step", "lr_schedule must be one of 'constant', 'linear', 'cosine'"),
        ("learning_rate=fast", "learning_rate must be of type float"),
        ("grop_size=3", "unknown field 'grop_size'"),
        ("dual_clip=0.5", "dual_clip must be a number > 1"),
        ("env_timeout=-1", "env_timeout must be a number ≥ 0; got -1.0"),
        ("env_kwargs={max_steps: 50}", "env_kwargs max_steps 50 differs from max_steps 10: the run has one horizon"),
    ],
)
def test_invalid_configuration_names_field_and_allowed_values(override, message):
    with pytest.raises(ConfigError) as err:
        load_config("demo", [override])
    assert message in str(err.value)


def test_overrides_parse_yaml_values_and_dict_keys():
    cfg = load_config("demo", ["learning_rate=1e-5", "lora=true", "trainable_layers=0", "estimator_params={episode_norm: trajectories}",
                               "env_kwargs.generated_n=9", "lora_target_modules=[q_proj, v_proj]"])
    assert cfg.update.learning_rate == 1e-5 and cfg.policy.lora is True
    assert cfg.credit.estimator_params == {"episode_norm": "trajectories"}
    assert cfg.env.env_kwargs["generated_n"] == 9
    assert cfg.policy.lora_target_modules == ["q_proj", "v_proj"]
    with pytest.raises(ConfigError, match="field=value"):
        apply_overrides(TrainConfig(), ["lora"])


def test_files_round_trip_and_can_start_from_a_preset(tmp_path):
    toml = tmp_path / "mine.toml"
    toml.write_text('preset = "webshop"\ngroup_size = 4\n')
    cfg = load_config(toml)
    assert cfg.env.env_id == "WebShop-Rubric-v0" and cfg.rollout.group_size == 4
    cfg.save(tmp_path / "saved.yaml")
    assert load_config(tmp_path / "saved.yaml") == cfg
    bad = tmp_path / "bad.toml"
    bad.write_text("group_size = [")
    with pytest.raises(ConfigError, match="bad.toml could not be parsed"):
        load_config(bad)
    with pytest.raises(ConfigError, match="neither a file nor a preset"):
        load_config("no-such-preset")


def test_a_flat_config_written_before_the_sections_reads_as_the_same_configuration(tmp_path):
    """Run folders written before the sections hold a flat config.yaml (``clip_ratio``, the
    dropped ``backend``): ``--resume`` of such a folder starts from the same configuration."""
    import yaml

    from trainers.train_cli import parse_train_args

    cfg = load_config("demo", ["clip_low=0.3", "clip_high=0.3", "updates=9"])
    saved = yaml.safe_load(yaml.safe_dump(cfg.to_dict()))
    assert set(saved) == {f.name for f in dataclasses.fields(TrainConfig)}  # written by section
    flat = cfg.flat()
    flat["clip_ratio"] = flat.pop("clip_low")
    del flat["clip_high"]
    flat["backend"] = "transformers"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(flat))
    resumed, run_dir = parse_train_args(["--resume", str(tmp_path)])
    assert run_dir == tmp_path and resumed == cfg
    flat["backend"] = "vllm"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(flat))
    with pytest.raises(ConfigError, match="backend='vllm' was removed"):
        parse_train_args(["--resume", str(tmp_path)])


def test_busy_cores_reads_the_kernel_counters(tmp_path, monkeypatch):
    import os

    from trainers import trainer

    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal: 300 busy and 100 idle ticks in between
    stat.write_text("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 ...\n")
    monkeypatch.setattr(trainer.time, "sleep", lambda _s: stat.write_text("cpu  300 0 200 880 20 0 0 0 0 0\n"))
    assert trainer.busy_cores(stat=str(stat)) == pytest.approx(0.75 * (os.cpu_count() or 1))
    assert trainer.busy_cores(stat=str(tmp_path / "missing")) is None
    stat.write_text("intr 1 2 3\n")
    assert trainer.busy_cores(stat=str(stat)) is None


def test_torch_threads_auto_requested_and_environment(monkeypatch):
    from trainers.trainer import cpu_threads

    monkeypatch.delenv("RUBRICGYM_TORCH_THREADS", raising=False)
    assert cpu_threads(3) == 3
    cores = len(__import__("os").sched_getaffinity(0))
    monkeypatch.setattr("trainers.trainer.busy_cores", lambda: 0.0)
    monkeypatch.setattr("os.getloadavg", lambda: (cores + 5.0, 0.0, 0.0))  # an install just ended
    assert cpu_threads(0) == cores  # idle now: every core, whatever the last minute's load
    monkeypatch.setattr("trainers.trainer.busy_cores", lambda: cores + 5.0)
    assert cpu_threads(0) == 1  # busy: one thread
    monkeypatch.setattr("trainers.trainer.busy_cores", lambda: None)  # no /proc/stat
    assert cpu_threads(0) == 1  # the load average decides
    monkeypatch.setattr("os.getloadavg", lambda: (0.0, 0.0, 0.0))
    assert cpu_threads(0) == cores
    monkeypatch.setenv("RUBRICGYM_TORCH_THREADS", "2")
    assert cpu_threads(0) == 2 and cpu_threads(5) == 2
    with pytest.raises(ConfigError, match="torch_threads must be an integer ≥ 0"):
        load_config("demo", ["torch_threads=-1"])
    with pytest.raises(ConfigError, match="rubric_shaping must be a number ≥ 0"):
        load_config("demo", ["rubric_shaping=-0.5"])


def test_episode_metrics_average_rubric_channels_and_the_summary_shows_them(tmp_path):
    import json

    from trainers.evaluation import episode_metrics
    from trainers.report import load_run, summary_text

    eps = [
        {"success": True, "score": 1.0, "steps": 4, "invalid": 0, "task_type": "pick", "rubric": {"target_acquired": 1.0, "solved": 1.0}},
        {"success": False, "score": 0.0, "steps": 12, "invalid": 2, "task_type": "pick", "rubric": {"target_acquired": 1.0, "solved": 0.0}},
        {"success": False, "score": 0.0, "steps": 12, "invalid": 0, "task_type": "look", "rubric": {"target_acquired": 0.0, "solved": 0.0}},
        {"success": False, "score": 0.0, "steps": 12, "invalid": 0, "task_type": "look"},  # no rubric: not averaged
    ]
    m = episode_metrics(eps)
    # success 1/4; steps 40 with 2 invalid: 2/40 = 0.05; acquired (1 + 1 + 0) / 3; solved 1/3
    assert m["success"] == 0.25 and m["mean_steps"] == 10.0 and m["invalid_rate"] == 0.05
    assert m["success/pick"] == 0.5 and m["success/look"] == 0.0
    assert m["rubric/target_acquired"] == pytest.approx(2 / 3) and m["rubric/solved"] == pytest.approx(1 / 3)
    run = tmp_path / "run"
    run.mkdir()
    recs = [{"update": 0, "phase": "eval", **m}, {"update": 2, "phase": "eval", **m, "rubric/target_acquired": 1.0},
            {"update": 1, "phase": "train", "train/success": 0.5, "time/update_s": 10.0}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (run / "summary.json").write_text(json.dumps({"seconds": 100.0, "cpu": [{
        "trainer_s": 80.0, "env_workers_s": 15.0, "torch_threads": 1, "mixed_precision": "no", "rollout_dtype": "float32"}],
        "phases_s": {"eval": 30.0, "rollout": 50.0}}))
    text = summary_text(load_run(run))
    assert "target_acquired 0.67 → 1.00" in text
    # the precision and threads actually used are part of what a run reports
    assert ("100 s wall, 95 s CPU (trainer 80 s with 1 torch thread(s), mixed precision no, rollouts in float32, "
            "env workers 15 s)") in text
    assert "phases: eval 30 s, rollout 50 s" in text


def test_one_horizon_reaches_the_environment():
    """The demo caps decisions at 10; its environment used to keep ALFWorld's 50, so the coarse
    key's step budget (MCGPO's matching) always fell in the same bin. Now gym.make gets max_steps."""
    import gymnasium as gym

    import agent_envs  # noqa: F401

    cfg = load_config("demo")
    kwargs = cfg.env_make_kwargs()
    assert kwargs["max_steps"] == cfg.env.max_steps == 10 and "max_steps" not in cfg.env.env_kwargs
    env = gym.make(cfg.env.env_id, **kwargs)
    _, info = env.reset(seed=0, options={"task": 0, "split": "generated"})
    assert info["remaining_steps"] == 10
    env.close()
    other = load_config("demo", ["env_id=CartPole-v1", "env_kwargs={}"], validate=False)
    assert other.env_make_kwargs() == {}  # not a rubricgym id: its kwargs untouched

"""The command lines of ``rubricgym train`` and ``rubricgym arena`` are generated from their
configuration dataclasses by tyro (``trainers.typed_cli``): every field is a flag with its help,
choices come from ``Literal`` types, and nothing is copied by hand."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from trainers.arena.command import ArenaCommand
from trainers.arena.runner import ENV_PRESETS, ArenaConfig, ArenaEnv
from trainers.arena_cli import parse_arena_args
from trainers.config import ConfigError, TrainConfig, field_choices, load_config
from trainers.train_cli import parse_train_args


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _help(capsys: pytest.CaptureFixture[str], parse: typing.Callable[[list[str]], object], args: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        parse([*args, "--help"])
    assert exit_info.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # rich wraps lines; compare on words


def test_train_help_has_a_flag_and_the_help_text_of_every_field(capsys):
    text = _help(capsys, parse_train_args, ["demo"])
    for f in dataclasses.fields(TrainConfig):
        assert _flag(f.name) in text, f.name
        assert " ".join(f.metadata["help"].split()[:4]) in text, f.name  # its help text
    assert "{generate,choose}" in text  # choices from the Literal type


def test_train_flags_set_every_kind_of_field_over_the_preset():
    cfg, run_dir = parse_train_args([
        "webshop", "--estimator", "mcgpo", "--updates", "7", "--lora", "--no-progress",
        "--lora-target-modules", "q_proj", "v_proj", "--estimator-params", "{gamma: 0.9}",
        "--env-kwargs", "{catalogue: generated}", "--mixed-precision", "no", "-o", "out",
    ])
    assert run_dir is None
    assert (cfg.preset, cfg.estimator, cfg.updates, cfg.lora, cfg.progress) == ("webshop", "mcgpo", 7, True, False)
    assert cfg.lora_target_modules == ["q_proj", "v_proj"] and cfg.estimator_params == {"gamma": 0.9}
    assert cfg.env_kwargs == {"catalogue": "generated"} and cfg.mixed_precision == "no" and cfg.output_dir == "out"
    # everything not given is the preset's
    preset = load_config("webshop")
    assert (cfg.group_size, cfg.max_steps, cfg.learning_rate) == (preset.group_size, preset.max_steps, preset.learning_rate)


def test_train_resume_starts_from_the_run_folder_config(tmp_path):
    load_config("demo", ["updates=9", "estimator=rloo", "estimator_params={}"]).save(tmp_path / "config.yaml")
    cfg, run_dir = parse_train_args(["--resume", str(tmp_path), "--updates", "12"])
    assert run_dir == tmp_path and (cfg.estimator, cfg.updates) == ("rloo", 12)
    with pytest.raises(ConfigError, match="no config.yaml"):
        parse_train_args(["--resume", str(tmp_path / "missing")])


def test_train_bad_flags_exit_2_and_old_overrides_say_what_to_write(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_train_args(["demo", "--action-mode", "shout"])
    assert exit_info.value.code == 2 and "shout" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_train_args(["demo", "--no-such-field", "1"])
    with pytest.raises(ConfigError, match="--estimator mcgpo"):
        parse_train_args(["demo", "estimator=mcgpo"])
    with pytest.raises(ConfigError, match="dual_clip must be > 1"):  # the dataclass's own validation
        parse_train_args(["demo", "--dual-clip", "0.5"])


def test_literal_choices_are_what_validation_checks():
    assert field_choices("action_mode") == ("generate", "choose")
    with pytest.raises(ConfigError, match="action_mode must be one of 'generate', 'choose'"):
        load_config("demo", ["action_mode=shout"])
    assert field_choices("updates") is None


def test_arena_help_has_a_flag_for_every_setting_and_option(capsys):
    text = _help(capsys, parse_arena_args, [])
    for f in dataclasses.fields(ArenaConfig):
        assert _flag(f.name) in text, f.name
    for f in dataclasses.fields(ArenaCommand):
        if f.name not in ("setting", "list_methods"):
            assert _flag(f.name) in text, f.name
    assert "--list" in text and "-P INT" in text and "--no-rl" in text
    assert typing.get_args(ArenaEnv) == tuple(ENV_PRESETS)  # the env choices are the presets


def test_arena_flags_start_from_the_env_defaults():
    cmd = parse_arena_args(["--env", "webshop", "--estimators", "grpo", "-P", "2", "-G", "4", "--no-rl",
                            "--scorer", "auto", "--estimator-params", "{gamma: 0.5}", "-j", "1", "-o", "x"])
    web = ArenaConfig.for_env("webshop")
    s = cmd.setting
    assert (s.env, s.tasks_per_update, s.group_size, s.rl, s.scpo_scorer) == ("webshop", 2, 4, False, "auto")
    assert s.estimator_params == {"gamma": 0.5} and (s.updates, s.train_tasks) == (web.updates, web.train_tasks)
    assert (cmd.estimators, cmd.workers, str(cmd.output_dir), cmd.seeds) == ("grpo", 1, "x", None)
    # the ALFWorld setting's defaults differ (the same flags, another starting point)
    alf = parse_arena_args(["-e", "alfworld-generated"]).setting
    assert alf == ArenaConfig.for_env("alfworld-generated")
    with pytest.raises(ValueError, match="exceeds train_tasks"):
        parse_arena_args(["--env", "webshop", "-P", "100"])

"""The command lines of ``rubricgym train`` and ``rubricgym arena`` are generated from their
configuration dataclasses by tyro (``trainers.typed_cli``): every field is a flag with its help,
choices come from ``Literal`` types, and nothing is copied by hand."""

from __future__ import annotations

import dataclasses
import re
import typing

import pytest

from trainers.arena.command import ArenaCommand
from trainers.arena.config import ENV_PRESETS, ArenaConfig, ArenaEnv
from trainers.arena_cli import parse_arena_args
from trainers.config import ConfigError, TrainConfig, field_choices, load_config
from trainers.settings import ObjectiveConfig, Rollouts, Schedule, Updates, WarmStart, flatten
from trainers.train_cli import parse_train_args


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _help(capsys: pytest.CaptureFixture[str], parse: typing.Callable[[list[str]], object], args: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        parse([*args, "--help"])
    assert exit_info.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # rich wraps lines; compare on words


def test_train_help_has_a_flag_and_the_help_text_of_every_field_grouped_by_section(capsys):
    text = _help(capsys, parse_train_args, ["demo"])
    sections = [f.name for f in dataclasses.fields(TrainConfig)]
    headings = [re.search(rf"(?<![\w-]){name.replace('_', '-')} options", text).start() for name in sections]
    assert headings == sorted(headings)  # one group per section, in the dataclass's order
    for name, start, end in zip(sections, headings, [*headings[1:], len(text)]):
        block = text[start:end]
        for f in dataclasses.fields(getattr(TrainConfig(), name)):
            assert re.search(re.escape(_flag(f.name)) + r"[ ,]", block), f.name  # flat flag, in its group
            assert " ".join(f.metadata["help"].split()[:4]) in block, f.name  # its help text
    assert "{generate,choose}" in text  # choices from the Literal type


def test_train_flags_set_every_kind_of_field_over_the_preset():
    cfg, run_dir = parse_train_args([
        "webshop", "--estimator", "mcgpo", "--updates", "7", "--lora", "--no-progress",
        "--lora-target-modules", "q_proj", "v_proj", "--estimator-params", "{gamma: 0.9}",
        "--env-kwargs", "{catalogue: generated}", "--mixed-precision", "no", "-o", "out",
    ])
    assert run_dir is None
    assert (cfg.output.preset, cfg.credit.estimator, cfg.schedule.updates, cfg.policy.lora, cfg.output.progress) == ("webshop", "mcgpo", 7, True, False)
    assert cfg.policy.lora_target_modules == ["q_proj", "v_proj"] and cfg.credit.estimator_params == {"gamma": 0.9}
    assert cfg.env.env_kwargs == {"catalogue": "generated"} and cfg.policy.mixed_precision == "no" and cfg.output.output_dir == "out"
    # everything not given is the preset's
    preset = load_config("webshop")
    assert (cfg.rollout.group_size, cfg.env.max_steps, cfg.update.learning_rate) == (preset.rollout.group_size, preset.env.max_steps, preset.update.learning_rate)


def test_train_resume_starts_from_the_run_folder_config(tmp_path):
    load_config("demo", ["updates=9", "estimator=rloo", "estimator_params={}"]).save(tmp_path / "config.yaml")
    cfg, run_dir = parse_train_args(["--resume", str(tmp_path), "--updates", "12"])
    assert run_dir == tmp_path and (cfg.credit.estimator, cfg.schedule.updates) == ("rloo", 12)
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
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:  # the section's own validation, named by tyro
        parse_train_args(["demo", "--dual-clip", "0.5"])
    assert exit_info.value.code == 2 and "dual_clip must be a number > 1; got 0.5" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="group_size must be an integer ≥ 2; got 1"):  # validated after parsing
        parse_train_args(["demo", "--group-size", "1"])


def test_literal_choices_are_what_validation_checks():
    assert field_choices("action_mode") == ("generate", "choose")
    with pytest.raises(ConfigError, match="action_mode must be one of 'generate', 'choose'"):
        load_config("demo", ["action_mode=shout"])
    assert field_choices("updates") is None


def test_arena_help_has_a_flag_for_every_setting_and_option(capsys):
    text = _help(capsys, parse_arena_args, [])
    for name in flatten(ArenaConfig()):
        assert _flag(name) in text, name
    for f in dataclasses.fields(ArenaCommand):
        if f.name not in ("setting", "list_methods"):
            assert _flag(f.name) in text, f.name
    assert "--list" in text and "-P INT" in text and "--no-rl" in text
    assert typing.get_args(ArenaEnv) == tuple(ENV_PRESETS)  # the env choices are the presets


def test_the_trainer_and_the_arena_share_one_name_help_and_bound_per_common_knob(capsys):
    shared = {"rollout": Rollouts, "objective": ObjectiveConfig, "update": Updates, "warm_start": WarmStart,
              "schedule": Schedule}
    for section, cls in shared.items():
        assert isinstance(getattr(TrainConfig(), section), cls) and isinstance(getattr(ArenaConfig(), section), cls)
    arena_help = _help(capsys, parse_arena_args, [])
    train_help = _help(capsys, parse_train_args, ["demo"])
    for cls in shared.values():
        for f in dataclasses.fields(cls):
            for text in (arena_help, train_help):
                assert _flag(f.name) in text and " ".join(f.metadata["help"].split()[:5]) in text, f.name
    # the names each used before the sections are flags of both (and read from old files)
    for old in ("--lr", "--epochs", "--tasks-per-update", "--eval-temperature", "--warm-start"):
        assert old in arena_help and old in train_help, old
    cmd = parse_arena_args(["--env", "webshop", "--lr", "3", "--epochs", "2", "--eval-temperature", "0"])
    cfg, _ = parse_train_args(["demo", "--learning-rate", "3", "--ppo-epochs", "2"])
    assert (cmd.setting.update.learning_rate, cmd.setting.update.ppo_epochs) == (cfg.update.learning_rate, cfg.update.ppo_epochs) == (3.0, 2)
    with pytest.raises(ValueError, match="group_size must be an integer ≥ 2; got 1"):
        ArenaConfig.of(group_size=1)
    with pytest.raises(ConfigError, match="group_size must be an integer ≥ 2; got 1"):
        load_config("demo", ["group_size=1"])


def test_arena_flags_start_from_the_env_defaults():
    cmd = parse_arena_args(["--env", "webshop", "--estimators", "grpo", "-P", "2", "-G", "4", "--no-rl",
                            "--scorer", "auto", "--estimator-params", "{gamma: 0.5}", "-j", "1", "-o", "x"])
    web = ArenaConfig.for_env("webshop")
    s = cmd.setting
    assert (s.env, s.rollout.groups_per_update, s.rollout.group_size, s.update.rl_update, s.scpo_scorer) == ("webshop", 2, 4, False, "auto")
    assert s.estimator_params == {"gamma": 0.5} and (s.schedule.updates, s.schedule.train_tasks) == (web.schedule.updates, web.schedule.train_tasks)
    assert (cmd.estimators, cmd.workers, str(cmd.output_dir), cmd.seeds) == ("grpo", 1, "x", None)
    # the ALFWorld setting's defaults differ (the same flags, another starting point)
    alf = parse_arena_args(["-e", "alfworld-generated"]).setting
    assert alf == ArenaConfig.for_env("alfworld-generated")
    with pytest.raises(ValueError, match="exceeds train_tasks"):
        parse_arena_args(["--env", "webshop", "-P", "100"])


def test_the_run_summary_is_printed_as_written_off_a_terminal(tmp_path):
    """Off a terminal rich wraps at 80 columns: the summary's long lines (and a path longer than
    80 columns) must come out whole, and text in brackets is not markup."""
    import io

    from rich.console import Console

    from trainers.train_cli import print_run_summary

    run = tmp_path / ("a-run-folder-name-that-is-long-" * 3)
    run.mkdir()
    lines = ["time: 584 s wall, 1152 s CPU (trainer 1145 s with 2 torch thread(s), mixed precision no, rollouts in float32)",
             "rubric progress [first → last]: target_acquired 0.00 → 0.25, target_in_hand 0.00 → 0.25, goal_progress 0.00"]
    (run / "summary.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = io.StringIO()
    print_run_summary(Console(file=out, width=80, force_terminal=False), run)
    printed = out.getvalue().splitlines()
    assert printed[0] == f"done: run folder {run}" and printed[1:] == lines


def test_optional_flags_show_their_type_not_tyros_none_choice(capsys):
    """`rubricgym arena --help` showed `--seeds {None}|STR` and `-j {None}|INT`."""
    text = _help(capsys, parse_arena_args, [])
    assert "{None}" not in text
    assert "--seeds STR" in text and "--baseline STR" in text and "-j INT, --workers INT" in text
    assert "--max-steps INT" in text
    cmd = parse_arena_args(["--seeds", "0-2", "-j", "2", "--max-steps", "7"])
    assert (cmd.seeds, cmd.workers, cmd.setting.max_steps) == ("0-2", 2, 7)
    assert parse_arena_args([]).seeds is None  # not given: the default


def test_every_command_takes_h_and_rubricgym_alone_prints_help():
    """`rubricgym -h` and `rubricgym eval -h` said "No such option: -h" (train -h worked), and
    `rubricgym` alone printed the help and exited 2."""
    from typer.testing import CliRunner

    from trainers.cli import app

    runner = CliRunner()
    for args in ([], ["-h"], ["--help"], ["eval", "-h"], ["report", "-h"], ["data", "-h"], ["train", "-h"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
        assert "Usage" in result.output or "usage" in result.output, (args, result.output)
    top = runner.invoke(app, []).output
    assert "train" in top and "arena" in top and "eval" in top  # the commands are listed

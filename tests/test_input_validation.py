"""Constructor arguments of both environments under bad input (issue 23), each reproduced first.

Every refusal names the argument; nothing is built before the arguments are checked (a
``num_products`` of 10**9 used to start generating a catalogue whose memory grew without end).
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import agent_envs  # noqa: F401 - registers the environments
from agent_envs.webshop import generator
from agent_envs.webshop.catalogue import CatalogueSpec
from agent_envs.webshop.env import WebShopRubricEnv

SMALL = {"catalogue": "generated", "num_products": 120, "tagger": "lexicon"}


@pytest.fixture()
def no_generation(monkeypatch):
    """Fail loudly if a catalogue would be generated (a refusal must come before any work)."""

    def refuse(*_args, **_kwargs):
        raise AssertionError("generate_raw was called: the arguments were not checked first")

    monkeypatch.setattr(generator, "generate_raw", refuse)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_products": 10**9}, r"num_products must be an integer from 1 to 100_000, got 1000000000"),
    ({"num_products": 0}, r"num_products must be an integer from 1 to 100_000, got 0"),
    ({"num_products": "abc"}, r"num_products must be an integer .*got 'abc' \(str\)"),
    ({"num_products": True}, r"num_products must be an integer .*got True \(bool\)"),
    ({"num_products": 120.0}, r"num_products must be an integer .*got 120.0 \(float\)"),
    ({"limit": "3"}, r"limit must be an integer >= 1, got '3' \(str\)"),
    ({"limit": -1}, r"limit must be an integer >= 1, got -1"),
    ({"limit": 0}, r"limit must be an integer >= 1, got 0"),
    ({"catalogue_seed": "0"}, r"catalogue_seed must be an integer, got '0' \(str\)"),
    ({"max_steps": True}, r"max_steps must be an integer >= 1, got True \(bool\)"),
    ({"max_steps": 0}, r"max_steps must be an integer >= 1, got 0"),
    ({"invalid_penalty": "x"}, r"invalid_penalty must be a finite number, got 'x' \(str\)"),
    ({"success_reward": math.nan}, r"success_reward must be a finite number, got nan"),
    ({"success_reward": math.inf}, r"success_reward must be a finite number, got inf"),
    ({"success_reward": -np.inf}, r"success_reward must be a finite number, got -inf"),
    ({"invalid_penalty": False}, r"invalid_penalty must be a finite number, got False \(bool\)"),
])
def test_webshop_refuses_bad_arguments_by_name(no_generation, kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make("WebShop-Rubric-v0", **{**SMALL, **kwargs})


def test_the_catalogue_spec_checks_its_own_fields():
    """``get_catalogue(CatalogueSpec(...))`` is the other way in; it checks the same bounds."""
    with pytest.raises(ValueError, match="num_products must be an integer from 1 to 100_000"):
        CatalogueSpec(num_products=10**9)
    with pytest.raises(ValueError, match="limit must be an integer >= 1, got -1"):
        CatalogueSpec(limit=-1)
    assert CatalogueSpec(num_products=np.int64(120), limit=np.int32(5)) == CatalogueSpec(num_products=120, limit=5)
    assert generator.MAX_PRODUCTS == 100_000


def test_generate_raw_refuses_more_than_its_bound():
    with pytest.raises(ValueError, match="num_products must be an integer from 1 to 100_000"):
        generator.generate_raw(generator.MAX_PRODUCTS + 1)


def test_webshop_takes_numpy_numbers():
    env = WebShopRubricEnv(**{**SMALL, "num_products": np.int64(120)}, max_steps=np.int64(3),
                           invalid_penalty=np.float32(-0.5), success_reward=np.int64(7))
    assert (env.max_steps, env.invalid_penalty, env.success_reward) == (3, -0.5, 7.0)
    assert type(env.max_steps) is int and env.spec_catalogue.num_products == 120
    env.reset(options={"task": 0})
    _obs, reward, *_ = env.step("click[nonexistent]")
    assert reward == -0.5  # the inadmissible action pays the given penalty, a plain float
    assert type(reward) is float
    env.close()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_steps": True}, r"max_steps must be a positive int, got True"),
    ({"success_reward": math.nan}, r"success_reward must be a finite number, got nan"),
    ({"invalid_penalty": "x"}, r"invalid_penalty must be a finite number, got 'x'"),
])
def test_alfworld_refuses_bad_arguments_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make("ALFWorld-Rubric-v0", split="generated", **kwargs)


# ------------------------------------------------------------------------------- the command line
def _cli_cases(tmp_path):
    """``(arguments, exit code, start of the error line)``; a file stands where a folder should."""
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder\n")
    run = tmp_path / "runs" / "grpo0"
    run.mkdir(parents=True)
    from trainers.metrics import format_record, run_identity

    run.joinpath("metrics.jsonl").write_text(
        format_record(0, "run", run_identity("trainer", "E-v0", "grpo", "", 0, {"updates": 1}))
        + format_record(0, "eval", {"success": 0.0}) + format_record(1, "eval", {"success": 0.5})
        + format_record(1, "end", {"seconds": 1.0}))
    return [
        (["data", "generate-webshop", "--out", str(a_file / "x"), "--num-products", "50"], 1,
         f"error: --out {a_file / 'x'}: [Errno 20] Not a directory"),
        (["data", "generate-alfworld", "--out", str(a_file / "x"), "--n", "1"], 1,
         f"error: --out {a_file / 'x'}: [Errno 20] Not a directory"),
        (["report", str(tmp_path / "runs"), "--out", str(a_file)], 1,
         f"error: cannot write the report: [Errno 17] File exists: '{a_file}'"),
        (["arena", "-o", str(a_file), "--estimators", "grpo", "--seeds", "1", "--updates", "1"], 1,
         f"error: --output-dir {a_file}: [Errno 17] File exists"),
        (["alfworld-tasks", "--split", "generated", "--task-type", "bogus"], 1,
         "error: unknown task types ['bogus']; choose from pick_and_place_simple"),
        (["train", "--env-id", "Nope-v0", "--output-dir", str(tmp_path / "train")], 2,
         "invalid configuration: env_id 'Nope-v0': Environment `Nope` doesn't exist."),
        (["train", "--env-kwargs", "{foo: 1}", "--output-dir", str(tmp_path / "train")], 2,
         "invalid configuration: env_kwargs {'foo': 1}: ALFWorldRubricEnv.__init__() got an unexpected keyword"),
        # missing games: before the fix this made a run folder (config.yaml, rollouts/) first
        (["train", "--env-kwargs", f"{{data_root: {tmp_path / 'no_games'}}}", "--train-split", "train",
          "--output-dir", str(tmp_path / "train")], 2,
         f"error: ALFWorld split 'train' not found at {tmp_path / 'no_games'}"),
        # last: before the bound, this one generated products until memory ran out
        (["data", "generate-webshop", "--out", str(tmp_path / "shop"), "--num-products", "1000000000"], 2,
         "error: --num-products: num_products must be an integer from 1 to 100_000, got 1000000000"),
    ]


def test_cli_user_errors_are_one_line_not_a_traceback(tmp_path):
    """Each used to end in a traceback (ValueError, NotADirectoryError, FileExistsError,
    gymnasium's NameNotFound, TypeError); now one line on the CLI's error path and a non-zero
    exit, and a bad environment leaves no run folder behind."""
    from typer.testing import CliRunner

    from trainers.cli import app

    for args, code, message in _cli_cases(tmp_path):
        result = CliRunner().invoke(app, args)
        assert isinstance(result.exception, SystemExit), (args, result.exception)
        assert result.exit_code == code and "Traceback" not in result.output, (args, result.output)
        assert result.output.strip().splitlines()[-1].startswith(message), (args, result.output)
    assert not (tmp_path / "train").exists()

"""ALFWorld-Rubric-v0 under bad input and corrupt files (issue 14's defects).

Every test here reproduced its defect on the code before the fix: a corrupt game poisoning
the engine, a failed reset switching the split, the first step after a failed first reset
raising Gymnasium's TypeError, ``reset(options=[1, 2])`` and a 300-character task string
raising Python's own errors.  All games are generated ones (no download needed).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("textworld")  # the `alfworld` extra; CI installs it (strict skips)
pytest.importorskip("alfworld")

import agent_envs  # noqa: F401  (registers the ids)
from agent_envs.alfworld.engine import GameFileError
from agent_envs.alfworld.generator import ensure_generated


@pytest.fixture(scope="module")
def games(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two generated pick_and_place_simple games."""
    root = tmp_path_factory.mktemp("faults") / "c"
    return ensure_generated(n=2, seed=3, cache_dir=root, task_types=["pick_and_place_simple"], workers=1)


@pytest.fixture
def env(games: list[Path]):
    e = gym.make("ALFWorld-Rubric-v0", split="generated", generated_n=2, generated_seed=3,
                 generated_cache_dir=str(games[0].parents[2]), task_types=["pick_and_place_simple"])
    yield e
    e.close()


def _corrupt_copy(game: Path, dest: Path) -> Path:
    """``game`` whose goal names an object type no object of the problem has."""
    data = json.loads(game.read_text())
    goal = data["pddl_problem"][data["pddl_problem"].index("(:goal"):]
    target = re.search(r"\(objectType \?o (\w+)\)", goal).group(1)
    data["pddl_problem"] = data["pddl_problem"].replace(
        f"(objectType ?o {target})", "(objectType ?o UnicornType)"
    )
    path = dest / "trial_0" / "game.tw-pddl"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    return path


def test_a_corrupt_game_does_not_poison_the_engine(env, games: list[Path], tmp_path: Path) -> None:
    obs0, info0 = env.reset(seed=0, options={"task": 0})
    bad = _corrupt_copy(games[0], tmp_path / "corrupt")
    with pytest.raises(GameFileError, match=re.escape(str(bad))):
        env.reset(options={"task": str(bad)})
    # the env can play the previous game again, exactly as before (was: KeyError('val1'))
    obs, info = env.reset(seed=0, options={"task": 0})
    assert obs == obs0 and info["admissible_actions"] == info0["admissible_actions"]
    walkthrough = json.loads(Path(info["task"]["gamefile"]).read_text())["walkthrough"]
    for action in walkthrough:
        obs, reward, terminated, _truncated, info = env.step(action)
    assert terminated and reward == 10.0 and info["won"]
    # and another game, and the corrupt one still fails the same way
    assert env.reset(options={"task": 1})[1]["task"]["index"] == 1
    with pytest.raises(GameFileError, match=re.escape(str(bad))):
        env.reset(options={"task": str(bad)})


def test_an_engine_whose_load_failed_says_so_and_loads_again(games: list[Path], tmp_path: Path) -> None:
    from agent_envs.alfworld import engine

    eng = engine.make_engine()
    try:
        eng.load(str(games[0]))
        eng.reset()
        with pytest.raises(GameFileError):
            eng.load(str(_corrupt_copy(games[0], tmp_path / "corrupt")))
        with pytest.raises(RuntimeError, match="the last load failed"):
            eng.reset()
        eng.load(str(games[1]))
        assert eng.reset()["admissible_commands"]
    finally:
        eng.close()


def test_after_a_failed_load_step_names_the_failed_reset(env, games: list[Path], tmp_path: Path) -> None:
    env.reset(seed=0, options={"task": 0})
    bad = _corrupt_copy(games[0], tmp_path / "corrupt")
    with pytest.raises(GameFileError):
        env.reset(options={"task": str(bad)})
    with pytest.raises(RuntimeError, match=r"the last reset\(\) failed \(GameFileError: .*call reset\(\) again"):
        env.step("look")
    env.reset(options={"task": 1})
    assert env.step("look")[4]["steps"] == 1


def test_a_failed_reset_changes_nothing(games: list[Path], tmp_path: Path) -> None:
    env = gym.make("ALFWorld-Rubric-v0", split="generated", generated_n=2, generated_seed=3,
                   generated_cache_dir=str(games[0].parents[2]), task_types=["pick_and_place_simple"],
                   data_root=str(tmp_path / "no-real-games"))
    _, info = env.reset(seed=5, options={"task": 1})
    state = env.unwrapped.np_random.bit_generator.state
    # was: the env then played (here: failed to find) valid_seen games on every later reset
    with pytest.raises(FileNotFoundError, match="rubricgym data alfworld"):
        env.reset(options={"split": "valid_seen", "task": 10**6})
    assert env.unwrapped.split == "generated"
    assert env.unwrapped.np_random.bit_generator.state == state
    with pytest.raises(ValueError, match="out of range: split 'generated' has 2 tasks"):
        env.reset(seed=123, options={"task": 10**6})
    assert env.unwrapped.np_random.bit_generator.state == state  # not even re-seeded
    # the episode in progress goes on (the failed resets loaded nothing)
    assert env.step(info["admissible_actions"][0])[4]["steps"] == 1
    # a reset without options draws from the env's own split, as without the failed ones
    assert env.reset()[1]["task"]["split"] == "generated"
    env.close()


def test_split_option_applies_to_one_reset_only(games: list[Path], alfworld_data: Path) -> None:
    """options["split"] does not persist (as WebShop's): the next reset uses the env's split."""
    env = gym.make("ALFWorld-Rubric-v0", split="generated", generated_n=2, generated_seed=3,
                   generated_cache_dir=str(games[0].parents[2]), task_types=["pick_and_place_simple"],
                   data_root=str(alfworld_data))
    assert env.reset(options={"split": "valid_seen", "task": 0})[1]["task"]["split"] == "valid_seen"
    assert env.unwrapped.split == "generated"
    assert env.reset(seed=1)[1]["task"]["split"] == "generated"
    env.close()


def test_reset_options_must_be_a_mapping(env) -> None:
    # was: TypeError "cannot convert dictionary update sequence element #0 to a sequence"
    with pytest.raises(TypeError, match=r"reset options must be a dict such as \{'task': 0.*got list"):
        env.reset(options=[1, 2])
    with pytest.raises(ValueError, match=r"unknown reset options \['taks'\]"):
        env.reset(options={"taks": 0})


def test_a_300_character_task_string_is_an_unknown_task(env) -> None:
    # was: OSError: [Errno 36] File name too long
    with pytest.raises(ValueError, match=r"unknown ALFWorld task .xxx.*\(300 characters\).*\(2 tasks\)"):
        env.reset(options={"task": "x" * 300})


def test_numpy_ints_are_task_indices(env) -> None:
    assert env.reset(options={"task": np.int64(1)})[1]["task"]["index"] == 1


def test_first_step_after_a_failed_first_reset(games: list[Path]) -> None:
    """Gymnasium 1.4's PassiveEnvChecker keeps no reset data when the first reset raises, and
    its first step then fails with TypeError; gym.make adds no env checker to our ids
    (``agent_envs.registration``), so the second reset and the step just work."""
    env = gym.make("ALFWorld-Rubric-v0", split="generated", generated_n=2, generated_seed=3,
                   generated_cache_dir=str(games[0].parents[2]), task_types=["pick_and_place_simple"])
    try:
        with pytest.raises(ValueError):
            env.reset(options={"task": 99})
        with pytest.raises(RuntimeError, match=r"call reset\(\) before step\(\)"):
            env.step("look")
        _, info = env.reset(options={"task": 0})
        obs, *_, info = env.step(info["admissible_actions"][0])
        assert info["steps"] == 1 and isinstance(obs, str)
    finally:
        env.close()

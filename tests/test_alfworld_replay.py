"""Stored walkthroughs win through ``gym.make("ALFWorld-Rubric-v0")`` with the rubric at its maximum.

Fast suite: one real game per task type and six generated games (one per type).
Slow suite: all 274 ``valid_seen`` + ``valid_unseen`` games and 240 generated games.
"""

from __future__ import annotations

import json
from collections import Counter

import gymnasium as gym
import pytest

import agent_envs  # noqa: F401
from agent_envs.alfworld.data import task_walkthrough
from agent_envs.alfworld.game import FAMILY_MAX_PROGRESS, TASK_TYPES


def _replay(env, task) -> tuple[str, dict]:
    """Play the stored walkthrough of ``task``; returns (task type, final info)."""
    _obs, info = env.reset(options={"task": task})
    walkthrough = task_walkthrough(info)
    assert walkthrough, info["task"]["id"]
    for k, action in enumerate(walkthrough):
        assert action in info["admissible_actions"], (info["task"]["id"], k, action)
        _obs, reward, terminated, truncated, info = env.step(action)
        last = k == len(walkthrough) - 1
        assert info["valid"] and terminated is last and not truncated, (info["task"]["id"], k, action)
        assert reward == (10.0 if last else 0.0)
    return info["task"]["type"], info


def _check_final(task_type: str, info: dict) -> None:
    rubric = info["rubric"]
    r = 2 if task_type == "pick_two_obj_and_place" else 1
    family_max = r if task_type.startswith("pick_two") or task_type == "pick_and_place_simple" else None
    if family_max is None:
        family_max = FAMILY_MAX_PROGRESS["look" if task_type.startswith("look") else "clean"]
    assert info["won"] and info["score"] == 1.0 and rubric["solved"] is True, info["task"]["id"]
    assert rubric["goal_progress"] == family_max, (info["task"]["id"], rubric)
    assert rubric["target_acquired"] == r and rubric["invalid_actions"] == 0


def _first_per_type(ids: list[str]) -> list[str]:
    chosen: dict[str, str] = {}
    for t in ids:
        chosen.setdefault(t.split("-", 1)[0], t)
    assert sorted(chosen) == sorted(TASK_TYPES)
    return [chosen[k] for k in TASK_TYPES]


def test_walkthroughs_win_one_real_game_per_type(alfworld_data):
    env = gym.make("ALFWorld-Rubric-v0", split="valid_unseen", data_root=str(alfworld_data))
    for task in _first_per_type(env.unwrapped.task_ids()):
        task_type, info = _replay(env, task)
        _check_final(task_type, info)
    env.close()


def _replay_chunk(env_kwargs: dict, tasks: list[str]) -> list[str]:
    """Replay ``tasks`` in an env made with ``env_kwargs`` in this (worker) process; returns
    their task types."""
    env = gym.make("ALFWorld-Rubric-v0", **env_kwargs)
    types = []
    for task in tasks:
        task_type, info = _replay(env, task)
        _check_final(task_type, info)
        types.append(task_type)
    env.close()
    return types


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_walkthroughs_win_all_274_validation_games(alfworld_data):
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    won: Counter[str] = Counter()
    # Two worker processes (the engine is not thread-safe), each replaying every other game.
    with ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as pool:
        jobs = {}
        for split in ("valid_seen", "valid_unseen"):
            ids = gym.make("ALFWorld-Rubric-v0", split=split, data_root=str(alfworld_data)).unwrapped.task_ids()
            for half in (ids[0::2], ids[1::2]):
                jobs[pool.submit(_replay_chunk, {"split": split, "data_root": str(alfworld_data)}, half)] = split
        for job, split in jobs.items():
            won[split] += len(job.result())
    assert won == {"valid_seen": 140, "valid_unseen": 134}


@pytest.fixture(scope="session")
def six_generated(tmp_path_factory):
    """Six generated games (one per task type) in a private cache."""
    return tmp_path_factory.mktemp("alfworld-generated") / "six"


def test_generated_split_plays_with_no_data_installed(six_generated, tmp_path):
    from gymnasium.utils.env_checker import check_env

    env = gym.make(
        "ALFWorld-Rubric-v0", split="generated", generated_n=6, generated_cache_dir=str(six_generated),
        data_root=str(tmp_path / "no-alfworld-data-here"),
    )
    ids = env.unwrapped.task_ids()
    assert sorted(t.split("-", 1)[0] for t in ids) == sorted(TASK_TYPES)
    for task in ids:
        task_type, info = _replay(env, task)
        _check_final(task_type, info)
        assert info["task"]["split"] == "generated"
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.slow
@pytest.mark.timeout(3600)  # ~5 min on 2 free cores; far longer on a machine shared by many
def test_240_generated_games_verify_first_time_and_replay_to_a_win(tmp_path):
    """Generation (engine-verified, two workers) then a replay of every walkthrough in the env.

    Every game is the first draw for its index (the scripted solver never needed a resample),
    all four rooms occur, and the env's rubric ends each replay solved at full progress.
    """
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from agent_envs.alfworld.generator import ensure_generated

    cache = tmp_path / "generated-0-240"
    ensure_generated(n=240, seed=0, cache_dir=cache, workers=2)
    manifest = json.loads((cache / "manifest.json").read_text())
    entries = manifest["games"]
    assert len(entries) == 240 and all(e["attempt"] == 0 for e in entries)
    assert Counter(e["task_type"] for e in entries) == {t: 40 for t in TASK_TYPES}
    assert {e["room"] for e in entries} == {"kitchen", "livingroom", "bedroom", "bathroom"}

    kwargs = {"split": "generated", "generated_n": 240, "generated_seed": 0, "generated_cache_dir": str(cache)}
    ids = gym.make("ALFWorld-Rubric-v0", **kwargs).unwrapped.task_ids()
    with ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as pool:
        parts = pool.map(_replay_chunk, [kwargs] * 2, [ids[0::2], ids[1::2]])
        counts = Counter(t for part in parts for t in part)
    assert counts == {t: 40 for t in TASK_TYPES}

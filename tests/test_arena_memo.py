"""EpisodeMemo answers repeated histories without changing any result (real WebShop engine)."""

from __future__ import annotations

import random

import gymnasium as gym
import pytest

import agent_envs  # noqa: F401
from trainers.arena.agent import expand_actions
from trainers.arena.memo import EpisodeMemo


@pytest.fixture(scope="module")
def shop() -> tuple[gym.Env, gym.Env]:
    kw = dict(catalogue="generated", num_products=150, tagger="lexicon", max_steps=6)
    return gym.make("WebShop-Rubric-v0", **kw), gym.make("WebShop-Rubric-v0", **kw)


def _episode(env, task: int, choices: list[int]) -> list:
    obs, info = env.reset(seed=0, options={"task": task, "split": "all"})
    out = [(obs, info["admissible_actions"], info["keys"], info["rubric"])]
    for c in choices:
        acts = expand_actions(info["admissible_actions"], info["task"]["goal"])
        obs, r, term, trunc, info = env.step(acts[c % len(acts)])
        out.append((obs, r, term, trunc, info["keys"], info["rubric"], info["score"], info["valid"]))
        if term or trunc:
            break
    return out


def test_memoised_episodes_equal_direct_ones(shop) -> None:
    direct, wrapped = shop
    memo = EpisodeMemo(wrapped)
    rng = random.Random(0)
    # Shared prefixes, divergences, exact repeats and task switches, in a mixed order.
    scripts = [(0, [0, 2, 1, 3]), (0, [0, 2, 1, 3]), (0, [0, 2, 4]), (1, [1, 1]), (0, [0, 2, 1, 5]),
               (0, [0, 3])] + [(rng.randrange(3), [rng.randrange(6) for _ in range(5)]) for _ in range(12)]
    for task, choices in scripts:
        assert _episode(memo, task, choices) == _episode(direct, task, choices)
    s = memo.stats()
    # the second script is an exact repeat: its reset and all its steps were hits
    assert s["memo_hits"] >= 5
    assert s["memo_misses"] > 0 and s["memo_replayed"] > 0
    with pytest.raises(RuntimeError, match="reset"):
        EpisodeMemo(direct).step("click[buy now]")


def test_memo_bound_only_limits_memory(shop) -> None:
    direct, wrapped = shop
    memo = EpisodeMemo(wrapped, max_entries=3)
    for _ in range(2):
        assert _episode(memo, 2, [0, 1, 2, 3]) == _episode(direct, 2, [0, 1, 2, 3])
    assert len(memo) == 3

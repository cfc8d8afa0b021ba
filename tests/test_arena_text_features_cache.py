"""The text-only policy's caches change time, never features: a featurizer that has seen many
decisions (its whole-decision, head and tail caches warm, some of them full) gives every
decision of real episodes exactly the features a fresh featurizer gives it, and a decision it
hands out again cannot be written to."""

from __future__ import annotations

import random

import numpy as np
import pytest

from agent_envs import make_env
from trainers.arena import text_features
from trainers.arena.text_features import TextFeaturizer


def _decisions() -> list[dict]:
    """Decisions of random-ish play on generated ALFWorld games, with repeats of the last action
    (the tail's repeat flags) and of whole episodes (the decision cache)."""
    env = make_env("ALFWorld-Rubric-v0", {"split": "generated", "generated_n": 4})
    rng, out = random.Random(3), []
    for task in (0, 1, 2, 3, 0):
        obs, info = env.reset(seed=0, options={"task": task, "split": "generated"})
        goal, history = info["task"]["goal"], []
        for _ in range(10):
            actions = list(info["admissible_actions"])
            out.append({"goal": goal, "observation": obs, "actions": actions, "history": list(history)})
            repeat = history and history[-1][1] in actions and rng.random() < 0.3
            action = history[-1][1] if repeat else actions[rng.randrange(len(actions))]
            history.append((obs, action))
            obs, _r, term, trunc, info = env.step(action)
            if term or trunc:
                break
    env.close()
    return out


def test_warm_caches_give_a_fresh_featurizers_features(monkeypatch):
    monkeypatch.setattr(text_features, "_DECISIONS", 8)  # the decision cache fills and forgets
    decisions = _decisions()
    warm = TextFeaturizer(dim=2**14)
    for d in decisions:  # twice: the second pass is answered from the caches
        warm.decision(**d)
    for d in decisions:
        got, want = warm.decision(**d), TextFeaturizer(dim=2**14).decision(**d)
        assert got.actions == want.actions
        for a, b in ((got.indices, want.indices), (got.values, want.values), (got.owner, want.owner)):
            np.testing.assert_array_equal(a, b)
    again = warm.decision(**decisions[-1])
    assert again is warm.decision(**decisions[-1])
    with pytest.raises(ValueError, match="read-only"):
        again.values[0] = 9.0

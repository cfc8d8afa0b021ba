"""Rubric event shaping [MCGPO Eq. 18, SPEC §3.3].

:class:`RubricShaping` adds ``coef * (N_increase - N_decrease)`` to the step reward, where
the counts are the rubric channels (``info["rubric"]``) whose value rose or fell in the
transition: boolean, count and graded channels alike; diagnostic channels are ignored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from rubrics.channels import diagnostic_channels

__all__ = ["RubricShaping", "make_shaped", "shaping_term"]


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def shaping_term(before: Mapping[str, Any], after: Mapping[str, Any], coef: float = 0.05) -> float:
    """``coef * (N_increase - N_decrease)`` between two rubric statuses.

    A channel missing from one side counts as 0 there; non-numeric or non-finite values and
    diagnostic channels are skipped.

    Example:
        >>> shaping_term({"target_acquired": 0, "target_in_hand": False},
        ...              {"target_acquired": 1, "target_in_hand": True})
        0.1
    """
    skip = diagnostic_channels()
    up = down = 0
    for name in set(before) | set(after):
        if name in skip:
            continue
        a, b = _as_number(before.get(name, 0)), _as_number(after.get(name, 0))
        if a is None or b is None:
            continue
        up += b > a
        down += b < a
    return coef * (up - down)


class RubricShaping(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Adds rubric event shaping to the reward of an environment that reports ``info["rubric"]``.

    The shaping term of each step is stored in ``info["shaping"]`` and also added to
    ``info["penalty"]`` (the row-local part of the reward, SPEC §1), so rollouts that build
    :class:`rubrics.trajectory.Step` objects from ``info`` account for it.

    Args:
        env: An environment whose ``info`` carries a ``"rubric"`` status after reset and step.
        coef: Reward per channel increase (and minus per decrease); 0.05 in MCGPO.

    Example:
        >>> import gymnasium as gym
        >>> import agent_envs
        >>> env = RubricShaping(gym.make("ALFWorld-Rubric-v0", split="generated"), coef=0.05)  # doctest: +SKIP
        >>> obs, info = env.reset(seed=0)  # doctest: +SKIP
    """

    def __init__(self, env: gym.Env, coef: float = 0.05) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, coef=coef)  # env.spec lists the wrapper and its coef
        gym.Wrapper.__init__(self, env)
        if isinstance(coef, bool) or not isinstance(coef, (int, float)) or not math.isfinite(coef):
            raise TypeError(f"coef must be a finite number, got {coef!r}")
        self.coef = float(coef)
        self._status: Mapping[str, Any] = {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._status = self._rubric(info)
        return obs, info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        status = self._rubric(info)
        delta = shaping_term(self._status, status, self.coef)
        self._status = status
        info = dict(info)
        info["shaping"] = delta
        info["penalty"] = float(info.get("penalty", 0.0)) + delta
        return obs, float(reward) + delta, terminated, truncated, info

    @staticmethod
    def _rubric(info: Mapping[str, Any]) -> Mapping[str, Any]:
        status = info.get("rubric")
        if status is None:
            raise KeyError("RubricShaping needs info['rubric'] from the wrapped environment")
        if not isinstance(status, Mapping):
            raise TypeError(f"info['rubric'] must be a mapping, got {type(status).__name__}")
        return dict(status)


def make_shaped(env_id: str, coef: float, **env_kwargs: Any) -> RubricShaping:
    """``RubricShaping(gym.make(env_id, **env_kwargs), coef)``: a factory that pickles, for
    environments made in worker processes (bind it with ``functools.partial``).

    Example:
        >>> from functools import partial
        >>> from agent_envs.rollout import EnvPool
        >>> factory = partial(make_shaped, "ALFWorld-Rubric-v0", 0.05, split="generated")  # doctest: +SKIP
        >>> pool = EnvPool(factory, n=8, workers=2)                                           # doctest: +SKIP
    """
    try:
        import agent_envs  # noqa: F401  (registers the rubricgym ids; absent for foreign ids)
    except ImportError:  # pragma: no cover
        pass
    return RubricShaping(gym.make(env_id, **env_kwargs), coef=coef)

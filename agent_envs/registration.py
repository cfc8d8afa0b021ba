"""Registers the rubricgym environments with Gymnasium (on ``import agent_envs``), and
:func:`make_env`, the one way the trainer, the arena, ``rubricgym eval``, the panels, the
environment pools and every RL-library adapter make an environment.

Entry points are strings, so registering imports no game engine; the engine is imported
when an environment is made.

Example:
    >>> env = make_env("WebShop-Rubric-v0", {"num_products": 50})
    >>> make_env(env) is env, make_env(lambda: env) is env   # an env, or a zero-argument factory
    (True, True)
    >>> env.close()
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

__all__ = ["ENV_IDS", "make_env", "register_envs"]

#: Environment id -> entry point.
ENV_IDS: dict[str, str] = {
    "ALFWorld-Rubric-v0": "agent_envs.alfworld.env:ALFWorldRubricEnv",
    "WebShop-Rubric-v0": "agent_envs.webshop.env:WebShopRubricEnv",
}


def register_envs() -> None:
    """Register every environment id once (idempotent).

    The environments enforce their own horizon (``max_steps``), so no ``TimeLimit`` is
    added by Gymnasium.  Nor is Gymnasium's ``PassiveEnvChecker``: when the first reset
    raises (an unknown task, say), Gymnasium 1.4's checker keeps no reset data and its first
    step then fails with ``TypeError: cannot unpack non-iterable NoneType object``.  The test
    suite runs Gymnasium's full ``check_env`` on both environments instead; pass
    ``gym.make(..., disable_env_checker=False)`` to add the passive checker anyway.
    """
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, disable_env_checker=True)


def make_env(env: Any, env_kwargs: Mapping[str, Any] | None = None) -> Any:
    """An environment from a Gymnasium id (``gym.make(env, **env_kwargs)``, the rubricgym ids
    registered first), a zero-argument factory (called), or an environment (returned as is).

    Raises:
        TypeError: ``env`` is none of the three.
    """
    if isinstance(env, str):
        register_envs()
        return gym.make(env, **dict(env_kwargs or {}))
    if hasattr(env, "reset") and hasattr(env, "step") and not isinstance(env, type):
        return env
    if callable(env):  # a factory (an environment class is one)
        return env()
    raise TypeError(f"env must be a Gymnasium id, a factory or an environment, got {type(env).__name__}")

"""Registers the rubricgym environment families and their Gymnasium ids (on ``import
agent_envs``; :mod:`agent_envs.family`), and
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

__all__ = ["ENTRY_POINT_GROUP", "ENV_IDS", "FAMILY_MODULES", "make_env", "register_envs"]

#: The built-in environment families (``agent_envs.family.Family`` records), registered in
#: this order; each is declared in its own package.
FAMILY_MODULES: tuple[str, ...] = (
    "agent_envs.alfworld.family:FAMILY",
    "agent_envs.webshop.family:FAMILY",
    "agent_envs.sokoban.family:FAMILY",
)

#: The entry-point group under which another distribution declares its families
#: (``[project.entry-points."rubricgym.families"] name = "package.module:FAMILY"``).
ENTRY_POINT_GROUP = "rubricgym.families"

#: Environment id -> entry point, of every registered family (filled as families register).
ENV_IDS: dict[str, str] = {}

#: ``"started"`` once :func:`register_envs` began (it runs once per process).
_STATE: set[str] = set()


def register_envs() -> None:
    """Register every environment family once (idempotent): the built-in ones
    (:data:`FAMILY_MODULES`) and those other distributions declare under
    :data:`ENTRY_POINT_GROUP` (:func:`agent_envs.family.register_family`).

    The environments enforce their own horizon (``max_steps``), so no ``TimeLimit`` is
    added by Gymnasium.  Nor is Gymnasium's ``PassiveEnvChecker``: when the first reset
    raises (an unknown task, say), Gymnasium 1.4's checker keeps no reset data and its first
    step then fails with ``TypeError: cannot unpack non-iterable NoneType object``.  The test
    suite runs Gymnasium's full ``check_env`` on the environments instead; pass
    ``gym.make(..., disable_env_checker=False)`` to add the passive checker anyway.
    """
    if "started" in _STATE:
        return
    import importlib.metadata

    from agent_envs.family import load_entry, register_family

    _STATE.add("started")
    specs = list(FAMILY_MODULES) + [ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)]
    for spec in specs:
        register_family(load_entry(spec))


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

"""Registers the rubricgym environments with Gymnasium (on ``import agent_envs``).

Entry points are strings, so registering imports no game engine; the engine is imported
when an environment is made.
"""

from __future__ import annotations

import gymnasium as gym

__all__ = ["ENV_IDS", "register_envs"]

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

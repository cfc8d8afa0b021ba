"""ALFWorld on the real TextWorld/PDDL engine, with rubric channels (``ALFWorld-Rubric-v0``).

Modules (nothing here imports textworld or alfworld until an environment is used):

* :mod:`~agent_envs.alfworld.env` — :class:`ALFWorldRubricEnv`, the Gymnasium environment;
* :mod:`~agent_envs.alfworld.engine` — the engine driver with the fast, exact reset;
* :mod:`~agent_envs.alfworld.rubric` — channels (MCGPO Table 15) and matching keys (Table 5);
* :mod:`~agent_envs.alfworld.game` — task family and target types parsed from a game's goal;
* :mod:`~agent_envs.alfworld.data` — where the games live, task ids, install and verify;
* :mod:`~agent_envs.alfworld.generator` — seeded generated games (the embedded default).

Example:
    >>> import gymnasium as gym, agent_envs
    >>> env = gym.make("ALFWorld-Rubric-v0", split="generated")   # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)                              # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

__all__ = ["ALFWorldRubricEnv", "list_tasks"]


def __getattr__(name: str) -> Any:
    if name == "ALFWorldRubricEnv":
        from agent_envs.alfworld.env import ALFWorldRubricEnv

        return ALFWorldRubricEnv
    if name == "list_tasks":
        from agent_envs.alfworld.data import list_tasks

        return list_tasks
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

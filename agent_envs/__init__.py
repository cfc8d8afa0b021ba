"""Gymnasium environments with rubric channels for long-horizon LLM agents.

Importing this package registers ``ALFWorld-Rubric-v0`` and ``WebShop-Rubric-v0`` with
Gymnasium (no engine is imported until an environment is made).

Example:
    >>> import gymnasium as gym
    >>> import agent_envs
    >>> "ALFWorld-Rubric-v0" in gym.registry and "WebShop-Rubric-v0" in gym.registry
    True
"""

from agent_envs.checker import RubricEnvError, check_rubric_env
from agent_envs.registration import ENV_IDS, make_env, register_envs
from rubrics.trajectory import (
    Step,
    Trajectory,
    TrajectoryFormatError,
    load_jsonl,
    save_jsonl,
    step_from_info,
)

register_envs()

__all__ = [
    "ENV_IDS",
    "RubricEnvError",
    "Step",
    "Trajectory",
    "TrajectoryFormatError",
    "check_rubric_env",
    "load_jsonl",
    "make_env",
    "register_envs",
    "save_jsonl",
    "step_from_info",
]

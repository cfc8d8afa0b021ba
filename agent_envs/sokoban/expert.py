"""Sokoban's expert: the shortest solution of the level an episode starts on.

The family's expert (:attr:`agent_envs.family.Family.expert`) reads the level from the first
``info`` (``info["task"]["room"]``, the start grid) and solves it by breadth-first search
(:func:`agent_envs.sokoban.room.solve`); warm starts clone it, and ``rubricgym eval --model
walkthrough`` replays it as the upper bound.

Example:
    >>> plan({"task": {"id": "sokoban/6x6-1box/0", "room": "######\\n#PX_O#\\n######"}})
    ['right', 'right']
    >>> plan({"task": {"id": 3}})        # another family's task
    []
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_envs.sokoban.room import parse_grid, solve

__all__ = ["plan"]


def plan(info: Mapping[str, Any]) -> list[str]:
    """The shortest solution of the level in ``info["task"]["room"]`` (``[]`` for a task that is
    not a Sokoban level).

    Raises:
        ValueError: the level has no solution.
    """
    task = info.get("task") or {}
    if not str(task.get("id", "")).startswith("sokoban/") or not isinstance(task.get("room"), str):
        return []
    room, state = parse_grid(task["room"])
    return solve(room, state)

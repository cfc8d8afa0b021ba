"""The typed ``info`` of a rubricgym environment (SPEC §2): what every step and reset returns.

:class:`RubricInfo` names the fields the rollouts (:func:`~rubrics.trajectory.step_from_info`),
the credit estimators, the trainer and the arena read; :func:`rubric_info` is the one builder
both environments call (it checks the field types as it builds, so a wrong type fails where it
is made), and :func:`~agent_envs.checker.check_rubric_env` checks any environment against the
same fields.  An environment adds its own fields after these (ALFWorld's ``location``,
WebShop's ``page``, ...: see each environment's docstring).

Example:
    >>> info = rubric_info(admissible_actions=["look"], task=TaskInfo(id="t/0", goal="find a mug", type="demo"),
    ...                    rubric={"solved": False}, keys=StateKeys(exact=("hall",), coarse="hall",
    ...                    signature=(frozenset(), frozenset({"solved"}))), state_key="hall", won=False,
    ...                    score=0.0, valid=True, task_reward=0.0, penalty=0.0, steps=0)
    >>> list(info)[:3], info["steps"]
    (['admissible_actions', 'task', 'rubric'], 0)
    >>> rubric_info(**{**info, "won": 1})
    Traceback (most recent call last):
    ...
    TypeError: info['won'] must be a bool, got int 1
"""

from __future__ import annotations

import numbers
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypedDict

import numpy as np

__all__ = ["CONTRACT_FIELDS", "RubricInfo", "StateKeys", "TaskInfo", "rubric_info"]


class TaskInfo(TypedDict, total=False):
    """``info["task"]``: constant within an episode.  ``id``, ``goal`` and ``type`` are
    required; an environment may add more (ALFWorld: ``gamefile``, ``split``, ``index``, ...)."""

    id: Hashable
    goal: str
    type: str


class StateKeys(TypedDict):
    """``info["keys"]``: the matching keys of the state (SPEC §3.4)."""

    exact: Hashable
    coarse: Hashable
    signature: tuple[frozenset[str], frozenset[str]]


class RubricInfo(TypedDict):
    """The fields of the contract, in the order the builder writes them."""

    admissible_actions: list[str]
    task: TaskInfo
    rubric: dict[str, bool | int | float | str]
    keys: StateKeys
    state_key: Hashable
    won: bool
    score: float
    valid: bool
    task_reward: float
    penalty: float


#: The contract's fields, in order (the checker's ``info.<field>`` clauses).
CONTRACT_FIELDS: tuple[str, ...] = tuple(RubricInfo.__annotations__)


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"info[{name!r}] must be a number, got {type(value).__name__} {value!r}")
    return float(value)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"info[{name!r}] must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def rubric_info(*, admissible_actions: Sequence[str], task: Mapping[str, Any], rubric: Mapping[str, Any],
                keys: Mapping[str, Any], state_key: Hashable, won: bool, score: float, valid: bool,
                task_reward: float, penalty: float, **extra: Any) -> dict[str, Any]:
    """The ``info`` dict: the contract's fields (copied, numbers as float, flags as bool) and
    then the environment's own ``extra`` fields.

    Raises:
        TypeError: a flag that is not a bool or a number that is not a real number (named).
    """
    return {
        "admissible_actions": [str(a) for a in admissible_actions],
        "task": dict(task),
        "rubric": dict(rubric),
        "keys": dict(keys),
        "state_key": state_key,
        "won": _flag("won", won),
        "score": _number("score", score),
        "valid": _flag("valid", valid),
        "task_reward": _number("task_reward", task_reward),
        "penalty": _number("penalty", penalty),
        **extra,
    }

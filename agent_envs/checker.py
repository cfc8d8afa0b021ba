"""The ``info`` contract of a rubricgym environment (SPEC §2), stated and checked.

:func:`check_rubric_env` does for the rubric contract what Gymnasium's ``check_env`` does for
the Gymnasium API (the fields are typed in :class:`agent_envs.info.RubricInfo`): it plays a few short episodes on any environment (ours or a user's) and
raises :class:`RubricEnvError` naming the first clause of :data:`CONTRACT` that is violated,
where (after reset, after step *t*) and with what value.  Everything downstream — the
rollouts' :func:`~rubrics.trajectory.step_from_info`, the credit estimators, the trainer
and the arena — relies on these clauses.

Example:
    >>> import gymnasium as gym
    >>> class NoRubric(gym.Env):
    ...     def reset(self, *, seed=None, options=None):
    ...         return "start", {"admissible_actions": ["wait"]}
    >>> check_rubric_env(NoRubric())
    Traceback (most recent call last):
    ...
    agent_envs.checker.RubricEnvError: [info.task] NoRubric, after reset: info has no 'task' (SPEC §2: info['task'] is a mapping with 'id' (hashable, not None), 'goal' (str) and 'type' (str))
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from agent_envs.info import CONTRACT_FIELDS
from rubrics.trajectory import step_from_info

__all__ = ["CONTRACT", "INVALID_PROBES", "RubricEnvError", "check_rubric_env"]

#: The clauses :func:`check_rubric_env` checks, by name (SPEC §2).
CONTRACT: dict[str, str] = {
    "reset": "reset(seed=..., options=...) returns (observation: str, info: dict)",
    "step": "step(action: str) returns (observation: str, reward: number, terminated: bool, "
            "truncated: bool, info: dict), and the transition builds a Step (step_from_info)",
    "info.admissible_actions": "info['admissible_actions'] is a list of str, non-empty while the episode runs",
    "info.task": "info['task'] is a mapping with 'id' (hashable, not None), 'goal' (str) and 'type' (str)",
    "info.rubric": "info['rubric'] maps channel names (str) to bool, int, float or str values",
    "info.keys": "info['keys'] is a mapping with hashable 'exact' and 'coarse' state summaries and "
                 "'signature', a pair (C, F) of hashable channel sets",
    "info.state_key": "info['state_key'] is hashable and not None",
    "info.won": "info['won'] is a bool",
    "info.score": "info['score'] is a finite number (not a bool)",
    "info.valid": "info['valid'] is a bool (the last action was admissible)",
    "info.task_reward": "info['task_reward'] is a finite number",
    "info.penalty": "info['penalty'] is a finite number",
    "reward": "the step reward equals info['task_reward'] + info['penalty']",
    "task.constant": "info['task'] does not change within an episode",
    "admissible": "stepping an admissible action gives info['valid'] = True",
    "invalid": "a string that is not admissible (empty, 100 kB, unicode, control characters) does not "
               "raise; it gives info['valid'] = False and info['task_reward'] = 0",
    "type_error": "a non-string action raises TypeError",
    "observation_space": "every observation is in env.observation_space (when the env has one)",
    "determinism": "the same seed and options, then the same actions, give the same observations, "
                   "rewards and info fields",
}

#: The non-admissible strings the ``invalid`` clause sends (any that happen to be admissible
#: are skipped).
INVALID_PROBES: tuple[str, ...] = (
    "",
    "   ",
    "\x00\x07\x1b[31m\r\n\t",
    "ünïcødé ✓ 日本語 🙂",
    "no such action " + "x" * 100_000,
)

#: The typed fields (:class:`agent_envs.info.RubricInfo`), each an ``info.<field>`` clause.
_INFO_FIELDS = CONTRACT_FIELDS

#: Chooses the action of decision ``t`` from ``(observation, info, t)``.
ActionChooser = Callable[[str, Mapping[str, Any], int], str]


class RubricEnvError(AssertionError):
    """An environment breaks a clause of :data:`CONTRACT`; ``clause`` names it."""

    def __init__(self, clause: str, where: str, problem: str) -> None:
        self.clause = clause
        super().__init__(f"[{clause}] {where}: {problem} (SPEC §2: {CONTRACT[clause]})")


def _default_chooser(obs: str, info: Mapping[str, Any], t: int) -> str:
    actions = info["admissible_actions"]
    return actions[(7 * t) % len(actions)]


def check_rubric_env(
    env: Any,
    *,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    steps: int = 6,
    choose: ActionChooser | None = None,
) -> None:
    """Check that ``env`` keeps the rubricgym ``info`` contract (:data:`CONTRACT`).

    Plays one episode of at most ``steps`` decisions (``choose`` picks each action; the
    default walks through the admissible actions), replays it after a second reset with the
    same ``seed`` and ``options`` (determinism), sends :data:`INVALID_PROBES` and a
    non-string action.  The environment is reset several times and left mid-episode.

    Args:
        env: A Gymnasium environment (e.g. ``gym.make("WebShop-Rubric-v0")``).
        seed: Reset seed of every episode.
        options: Reset options (``{"task": ..., "split": ...}``).
        steps: Most decisions of the checked episode.
        choose: ``choose(observation, info, t) -> action``.

    Raises:
        RubricEnvError: the first violated clause, where, and the offending value.
    """
    name = type(getattr(env, "unwrapped", env)).__name__
    first = _play(env, name, seed, options, steps, choose or _default_chooser)
    actions = [row[0] for row in first[1:]]
    again = _play(env, name, seed, options, len(actions), lambda obs, info, t: actions[t])
    for t, (a, b) in enumerate(zip(first, again)):
        if a != b:
            where = f"{name}, {'after reset' if t == 0 else f'after step {t - 1} ({_short(actions[t - 1])})'}"
            raise RubricEnvError("determinism", where, _difference(a, b))
    if len(again) != len(first):
        raise RubricEnvError("determinism", f"{name}, replay", f"the episode lasted {len(first) - 1} steps, "
                             f"then {len(again) - 1}")
    _check_invalid_actions(env, name, seed, options)
    _reset(env, name, seed, options)
    try:
        env.step(12345)
    except TypeError:
        pass
    except Exception as exc:  # any other exception is the violation
        raise RubricEnvError("type_error", f"{name}, step(12345)", f"raised {type(exc).__name__}: {exc}") from exc
    else:
        raise RubricEnvError("type_error", f"{name}, step(12345)", "did not raise")


def _reset(env: Any, name: str, seed: int, options: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    out = env.reset(seed=seed, options=dict(options) if options is not None else None)
    where = f"{name}, after reset"
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RubricEnvError("reset", where, f"returned {_short(out)}, not (observation, info)")
    obs, info = out
    if not isinstance(obs, str):
        raise RubricEnvError("reset", where, f"the observation is {type(obs).__name__}, not str")
    if not isinstance(info, dict):
        raise RubricEnvError("reset", where, f"info is {type(info).__name__}, not dict")
    _check_observation(env, where, obs)
    _check_info(where, info, running=True)
    return obs, info


def _play(env: Any, name: str, seed: int, options: Mapping[str, Any] | None, steps: int,
          choose: ActionChooser) -> list[tuple]:
    """One checked episode: ``[(None, obs, info fields)]`` for the reset, then
    ``(action, obs, reward, terminated, truncated, info fields)`` per step."""
    obs, info = _reset(env, name, seed, options)
    rows: list[tuple] = [(None, obs, _fields(info))]
    task = info["task"]
    for t in range(steps):
        action = choose(obs, info, t)
        where = f"{name}, after step {t} ({_short(action)})"
        next_obs, reward, term, trunc, next_info = _step(env, where, action)
        if action in info["admissible_actions"] and not next_info["valid"]:
            raise RubricEnvError("admissible", where, "info['valid'] is False")
        if next_info["task"] != task:
            raise RubricEnvError("task.constant", where,
                                 f"info['task'] changed from {_short(task)} to {_short(next_info['task'])}")
        try:
            step_from_info(obs, info, action, next_obs, reward, next_info)
        except (TypeError, ValueError) as exc:
            raise RubricEnvError("step", where, f"step_from_info failed: {exc}") from exc
        rows.append((action, next_obs, reward, term, trunc, _fields(next_info)))
        obs, info = next_obs, next_info
        if term or trunc:
            break
    return rows


def _check_invalid_actions(env: Any, name: str, seed: int, options: Mapping[str, Any] | None) -> None:
    _obs, info = _reset(env, name, seed, options)
    for probe in INVALID_PROBES:
        if probe in info["admissible_actions"]:
            continue
        where = f"{name}, invalid action {_short(probe)}"
        _obs, _reward, term, trunc, info = _step(env, where, probe, clause="invalid")
        if info["valid"]:
            raise RubricEnvError("invalid", where, "info['valid'] is True")
        if float(info["task_reward"]) != 0.0:
            raise RubricEnvError("invalid", where, f"info['task_reward'] is {info['task_reward']!r}, not 0")
        if term or trunc:
            _obs, info = _reset(env, name, seed, options)


def _step(env: Any, where: str, action: str, clause: str = "step") -> tuple[str, float, bool, bool, dict[str, Any]]:
    try:
        out = env.step(action)
    except Exception as exc:  # the contract: no string makes step raise
        raise RubricEnvError(clause, where, f"raised {type(exc).__name__}: {exc}") from exc
    if not (isinstance(out, tuple) and len(out) == 5):
        raise RubricEnvError("step", where, f"returned {_short(out)}, not a 5-tuple")
    obs, reward, term, trunc, info = out
    if not isinstance(obs, str):
        raise RubricEnvError("step", where, f"the observation is {type(obs).__name__}, not str")
    if not _is_number(reward):
        raise RubricEnvError("step", where, f"the reward is {_short(reward)}, not a number")
    for flag, value in (("terminated", term), ("truncated", trunc)):
        if not _is_bool(value):
            raise RubricEnvError("step", where, f"{flag} is {_short(value)}, not a bool")
    if not isinstance(info, dict):
        raise RubricEnvError("step", where, f"info is {type(info).__name__}, not dict")
    _check_observation(env, where, obs)
    _check_info(where, info, running=not (term or trunc))
    total = float(info["task_reward"]) + float(info["penalty"])
    if not math.isclose(float(reward), total, rel_tol=1e-9, abs_tol=1e-9):
        raise RubricEnvError("reward", where, f"reward {float(reward)!r} != task_reward {info['task_reward']!r} "
                             f"+ penalty {info['penalty']!r}")
    return obs, float(reward), bool(term), bool(trunc), info


def _check_info(where: str, info: Mapping[str, Any], *, running: bool) -> None:
    """Every ``info.*`` clause of :data:`CONTRACT`."""
    for key in _INFO_FIELDS:
        if key not in info:
            raise RubricEnvError(f"info.{key}", where, f"info has no {key!r}")
    adm = info["admissible_actions"]
    if not isinstance(adm, list) or not all(isinstance(a, str) for a in adm):
        raise RubricEnvError("info.admissible_actions", where, f"got {_short(adm)}")
    if running and not adm:
        raise RubricEnvError("info.admissible_actions", where, "the episode runs but no action is admissible")
    task = info["task"]
    if not isinstance(task, Mapping):
        raise RubricEnvError("info.task", where, f"got {_short(task)}")
    for key, ok in (("id", lambda v: v is not None and _is_hashable(v)), ("goal", lambda v: isinstance(v, str)),
                    ("type", lambda v: isinstance(v, str))):
        if key not in task or not ok(task[key]):
            raise RubricEnvError("info.task", where, f"info['task'][{key!r}] is {_short(task.get(key, '<missing>'))}")
    rubric = info["rubric"]
    if not isinstance(rubric, Mapping):
        raise RubricEnvError("info.rubric", where, f"got {_short(rubric)}")
    for channel, value in rubric.items():
        if not isinstance(channel, str) or not (_is_bool(value) or _is_number(value) or isinstance(value, str)):
            raise RubricEnvError("info.rubric", where, f"channel {channel!r} has value {_short(value)}")
    _check_keys(where, info["keys"])
    if info["state_key"] is None or not _is_hashable(info["state_key"]):
        raise RubricEnvError("info.state_key", where, f"got {_short(info['state_key'])}")
    for key in ("won", "valid"):
        if not _is_bool(info[key]):
            raise RubricEnvError(f"info.{key}", where, f"got {_short(info[key])}")
    for key in ("score", "task_reward", "penalty"):
        if not _is_number(info[key]) or not math.isfinite(float(info[key])):
            raise RubricEnvError(f"info.{key}", where, f"got {_short(info[key])}")


def _check_keys(where: str, keys: Any) -> None:
    if not isinstance(keys, Mapping):
        raise RubricEnvError("info.keys", where, f"got {_short(keys)}")
    for key in ("exact", "coarse", "signature"):
        if key not in keys:
            raise RubricEnvError("info.keys", where, f"info['keys'] has no {key!r}")
        if not _is_hashable(keys[key]):
            raise RubricEnvError("info.keys", where, f"info['keys'][{key!r}] is not hashable: {_short(keys[key])}")
    sig = keys["signature"]
    if not (isinstance(sig, tuple) and len(sig) == 2):
        raise RubricEnvError("info.keys", where, f"info['keys']['signature'] is {_short(sig)}, not a pair (C, F)")


def _check_observation(env: Any, where: str, obs: str) -> None:
    space = getattr(env, "observation_space", None)
    if space is not None and hasattr(space, "contains") and not space.contains(obs):
        bad = sorted(set(obs) - set(getattr(space, "character_set", obs)))[:5]
        detail = f" (characters outside the charset: {bad!r})" if bad else f" (length {len(obs)})"
        raise RubricEnvError("observation_space", where, f"the observation is not in {space}{detail}")


def _fields(info: Mapping[str, Any]) -> dict[str, Any]:
    return {key: info[key] for key in _INFO_FIELDS}


def _difference(a: tuple, b: tuple) -> str:
    labels = ("action", "observation", "reward", "terminated", "truncated", "info")
    if len(a) == 3:
        labels = ("action", "observation", "info")
    for label, x, y in zip(labels, a, b):
        if x == y:
            continue
        if label == "info":
            key = next(k for k in x if x[k] != y[k])
            return f"info[{key!r}] was {_short(x[key])}, then {_short(y[key])}"
        return f"the {label} was {_short(x)}, then {_short(y)}"
    return "the transitions differ"  # pragma: no cover


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not _is_bool(value)


def _is_hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"

"""The shared data model: :class:`Step` and :class:`Trajectory` (SPEC §1).

Everything downstream of an environment speaks this small vocabulary, so that the
credit estimators in :mod:`wrappers.credit` can be fed from any RL library without
importing torch, Gymnasium or a game engine.  It lives in the bottom layer (``rubrics``),
below the environments that produce it (``agent_envs``, which re-exports it) and the
estimators that read it.

Trajectories round-trip through JSON Lines (one trajectory per line).  Keys are often
tuples or frozensets (matching keys, rubric signatures); :func:`save_jsonl` encodes them
with small tagged objects so that :func:`load_jsonl` gives back equal, hashable values.

Example:
    >>> import tempfile, os
    >>> step = Step(state_key=("kitchen", None), action="go to fridge 1", reward=0.0,
    ...             keys={"exact": ("look", frozenset({"apple 1"}))})
    >>> traj = Trajectory(task_id="t0", slot=0, steps=[step], score=0.0, success=False)
    >>> path = os.path.join(tempfile.mkdtemp(), "rollouts.jsonl")
    >>> save_jsonl(path, [traj])
    >>> load_jsonl(path) == [traj]
    True
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = ["Step", "Trajectory", "TrajectoryFormatError", "hashable", "load_jsonl", "matching_keys", "save_jsonl",
           "step_from_info"]


@dataclass
class Step:
    """One decision of an agent.

    Attributes:
        state_key: Hashable pre-action state, the *anchor* used for grouping (by default the
            observation without history).
        action: Canonical action string that was executed (or attempted).
        action_key: Hashable action class used by MCGPO; ``None`` means "same as ``action``".
        reward: Environment task reward of this step (10 on the success step, else 0).
        penalty: Row-local additive terms (-0.1 for an invalid action, event shaping).
        valid: Whether the action was admissible.
        observation: Text the agent saw before acting.
        feedback: Text the environment returned after the action.
        rubric: Pre-action rubric status (channel name -> bool/int/float), SPEC §3.
        keys: Matching keys, e.g. ``{"exact": ..., "coarse": ...}``, SPEC §3.4.
        next_state_key: Post-action canonical state.
        extra: Free-form additional data (must itself be JSON-encodable).
    """

    state_key: Hashable
    action: str
    action_key: Hashable = None
    reward: float = 0.0
    penalty: float = 0.0
    valid: bool = True
    observation: str = ""
    feedback: str = ""
    rubric: dict[str, Any] = field(default_factory=dict)
    keys: dict[str, Any] = field(default_factory=dict)
    next_state_key: Hashable = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.action, str):
            raise TypeError(f"Step.action must be a str, got {type(self.action).__name__}")
        if self.action_key is None:
            self.action_key = self.action
        for name in ("reward", "penalty"):
            value = getattr(self, name)
            # numbers.Real admits numpy's scalars (np.float32, np.int64 ...), which rollouts
            # built from arrays hand over; bools are refused (numpy's bool_ is not Real)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"Step.{name} must be a number, got {type(value).__name__}")
            setattr(self, name, float(value))

    @property
    def row_reward(self) -> float:
        """The reward a Gymnasium loop saw for this step: task reward + penalty."""
        return self.reward + self.penalty


@dataclass
class Trajectory:
    """One episode of one rollout slot inside a sibling group.

    Attributes:
        task_id: Identifier of the task (all siblings of a group share it).
        slot: Rollout slot ``0..G-1`` inside the group (MCGPO's folds are built from it).
        steps: The decisions, in order.
        score: Raw terminal score (WebShop in [0, 1], ALFWorld 0/1).
        success: Whether the episode was solved.
        truncated: Whether the episode hit the step limit.
    """

    task_id: Hashable
    slot: int
    steps: list[Step] = field(default_factory=list)
    score: float = 0.0
    success: bool = False
    truncated: bool = False

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def outcome(self) -> float:
        """O_i = sum of the task rewards of the trajectory (SPEC §4)."""
        return float(sum(s.reward for s in self.steps))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-encodable dict (tuples/frozensets/sets are tagged, see module doc)."""
        return {
            "task_id": _encode(self.task_id),
            "slot": self.slot,
            "score": self.score,
            "success": self.success,
            "truncated": self.truncated,
            "steps": [{f.name: _encode(getattr(s, f.name)) for f in fields(Step)} for s in self.steps],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trajectory:
        """Inverse of :meth:`to_dict`.

        Raises:
            TypeError: ``data`` or one of its steps is not a mapping.
            ValueError: unknown step fields, or ``task_id``/``slot`` missing.
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"a trajectory must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(Step)}
        steps = []
        for k, raw in enumerate(data.get("steps", [])):
            if not isinstance(raw, Mapping):
                raise TypeError(f"step {k} must be a JSON object")
            unknown = set(raw) - known
            if unknown:
                raise ValueError(f"step {k} has unknown fields {sorted(unknown)}")
            steps.append(Step(**{name: _decode(value) for name, value in raw.items()}))
        missing = {"task_id", "slot"} - set(data)
        if missing:
            raise ValueError(f"missing fields {sorted(missing)}")
        return cls(
            task_id=_decode(data["task_id"]),
            slot=int(data["slot"]),
            steps=steps,
            score=float(data.get("score", 0.0)),
            success=bool(data.get("success", False)),
            truncated=bool(data.get("truncated", False)),
        )


def hashable(value: Any, fallback: Hashable = None) -> Hashable:
    """``value`` as a hashable key: ``None`` gives ``fallback``; a hashable value is kept;
    lists and tuples become tuples, sets frozensets and mappings frozensets of ``(key, value)``
    pairs (recursively, so equal values give equal keys); numpy arrays go through
    ``tolist()``; anything else unhashable becomes its ``repr``.

    Example:
        >>> hashable(None, "obs"), hashable("room"), hashable([1, [2, 3]])
        ('obs', 'room', (1, (2, 3)))
        >>> hashable({"a": [1], "b": {2}}) == hashable({"b": {2}, "a": [1]})
        True
    """
    if value is None:
        return fallback
    try:
        hash(value)
        return value
    except TypeError:
        pass
    if isinstance(value, Mapping):
        return frozenset((hashable(k), hashable(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(hashable(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(hashable(v) for v in value)
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy arrays
        return hashable(value.tolist())
    return repr(value)


def matching_keys(info: Mapping[str, Any]) -> dict[str, Any]:
    """Matching keys of a decision in the layout MCGPO reads (:mod:`wrappers.credit.mcgpo`).

    Both environments report ``{"exact": h_exact, "coarse": h_coarse, "signature": (C, F)}``
    (state summaries without the signature); the dict is copied.  An environment that
    reports its signature only as ``info["signature"]`` has it filled in.

    Example:
        >>> C, F = frozenset({"target_acquired"}), frozenset({"target_placed"})
        >>> matching_keys({"keys": {"exact": ("pick", "desk 1")}, "signature": (C, F)})["signature"] == (C, F)
        True
    """
    keys = dict(info.get("keys") or {})
    if "signature" not in keys and info.get("signature") is not None:
        keys["signature"] = tuple(info["signature"])
    return keys


def step_from_info(
    obs: Any,
    info: Mapping[str, Any],
    action: str,
    next_obs: Any,
    reward: float,
    next_info: Mapping[str, Any],
    *,
    extra: Mapping[str, Any] | None = None,
) -> Step:
    """The :class:`Step` of one transition, filled from the environment's ``info`` (SPEC §1–§2).

    ``obs``/``info`` are what the policy saw before acting, ``action`` what it sent, and
    ``next_obs, reward, next_info`` what ``env.step(action)`` returned.  This is the one place
    rollouts (:class:`agent_envs.rollout.GroupRunner`, the trainer, the arena) build steps:

    ===================  =====================================================================
    Step field           source
    ===================  =====================================================================
    state_key            ``info["state_key"]`` (``None``: the observation), via :func:`hashable`
    action               ``next_info["action"]`` when a non-empty string (the environment's
                         canonical command, e.g. ALFWorld's), else ``action``
    action_key           ``next_info["action_key"]``, else ``info["action_keys"]`` of the
                         canonical (or the sent) action, else the canonical action; any
                         non-``None`` key counts, ``0`` and ``""`` included
    reward / penalty     ``next_info["task_reward"]`` / ``next_info["penalty"]``; a missing
                         part is ``reward`` minus the other (both missing: all task reward)
    valid                ``next_info["valid"]`` (default ``True``)
    observation          ``obs``; ``feedback`` is ``next_obs``
    rubric, keys         pre-action ``info["rubric"]`` and :func:`matching_keys` of ``info``
    next_state_key       ``next_info["state_key"]`` (``None``: ``next_obs``)
    extra                ``{"signature": list(info["signature"])}`` when the environment
                         reports one, updated with ``extra``
    ===================  =====================================================================

    Example:
        >>> s = step_from_info("You are in a room.", {"state_key": "r0", "rubric": {"a": 0}},
        ...                    "Look", "Nothing here.", -0.1,
        ...                    {"action": "look", "valid": False, "penalty": -0.1, "state_key": "r0"})
        >>> (s.action, s.action_key, s.reward, s.penalty, s.valid, s.next_state_key)
        ('look', 'look', 0.0, -0.1, False, 'r0')
    """
    obs, next_obs = str(obs), str(next_obs)
    canonical = next_info.get("action")
    if not isinstance(canonical, str) or not canonical:
        canonical = action
    action_key = next_info.get("action_key")
    if action_key is None:
        table = info.get("action_keys")
        if isinstance(table, Mapping):
            action_key = table.get(canonical, table.get(action))
    reward = float(reward)
    task_reward, penalty = next_info.get("task_reward"), next_info.get("penalty")
    if task_reward is None:
        task_reward = reward - float(penalty or 0.0)
    if penalty is None:
        penalty = reward - float(task_reward)
    out_extra: dict[str, Any] = {}
    if info.get("signature") is not None:
        out_extra["signature"] = list(info["signature"])
    out_extra.update(extra or {})
    return Step(
        state_key=hashable(info.get("state_key"), obs),
        action=canonical,
        action_key=hashable(action_key, canonical),
        reward=float(task_reward),
        penalty=float(penalty),
        valid=bool(next_info.get("valid", True)),
        observation=obs,
        feedback=next_obs,
        rubric=dict(info.get("rubric") or {}),
        keys=matching_keys(info),
        next_state_key=hashable(next_info.get("state_key"), next_obs),
        extra=out_extra,
    )


class TrajectoryFormatError(ValueError):
    """A JSON Lines file does not hold valid trajectories; the message names file and line."""


# --- tagged JSON encoding -------------------------------------------------------------
# JSON has no tuples, sets or non-string dict keys.  They are written as one-key objects
# whose key starts with "$"; a plain dict that could be confused with a tag is wrapped too.
_TAGS = ("$tuple", "$frozenset", "$set", "$dict", "$float")


def _encode(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        # NaN and infinities are not JSON; keep them exact through a tag.
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v) for v in value]}
    if isinstance(value, (frozenset, set)):
        items = sorted((_encode(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
        return {"$frozenset" if isinstance(value, frozenset) else "$set": items}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, Mapping):
        plain = all(isinstance(k, str) for k in value) and not (
            len(value) == 1 and next(iter(value)) in _TAGS
        )
        if plain:
            return {k: _encode(v) for k, v in value.items()}
        return {"$dict": [[_encode(k), _encode(v)] for k, v in value.items()]}
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _encode(value.item())
    raise TypeError(f"cannot encode a value of type {type(value).__name__} as JSON: {value!r}")


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1:
            (tag, payload), = value.items()
            if tag == "$tuple":
                return tuple(_decode(v) for v in payload)
            if tag == "$frozenset":
                return frozenset(_decode(v) for v in payload)
            if tag == "$set":
                return {_decode(v) for v in payload}
            if tag == "$dict":
                return {_decode(k): _decode(v) for k, v in payload}
            if tag == "$float":
                return float(payload)
        return {k: _decode(v) for k, v in value.items()}
    return value


def save_jsonl(path: str | os.PathLike[str], trajectories: Iterable[Trajectory]) -> None:
    """Write trajectories to ``path``, one JSON object per line (atomically)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for traj in trajectories:
            if not isinstance(traj, Trajectory):
                raise TypeError(f"save_jsonl expects Trajectory objects, got {type(traj).__name__}")
            fh.write(json.dumps(traj.to_dict(), ensure_ascii=False, allow_nan=False))
            fh.write("\n")
    os.replace(tmp, path)


def load_jsonl(path: str | os.PathLike[str]) -> list[Trajectory]:
    """Read trajectories written by :func:`save_jsonl`.

    Raises:
        TrajectoryFormatError: a line is not UTF-8, not JSON (or nested too deeply), or not a
            trajectory (e.g. ``"slot": 1e999``); the message names the file and the line.
        OSError: the file cannot be opened.
    """
    out: list[Trajectory] = []
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TrajectoryFormatError(f"{path}:{lineno}: not valid UTF-8 ({exc})") from None
            if not line.strip():
                continue
            try:
                out.append(Trajectory.from_dict(json.loads(line)))
            except RecursionError:  # not a ValueError
                raise TrajectoryFormatError(f"{path}:{lineno}: not a valid trajectory: JSON nested too deeply") from None
            except (ValueError, TypeError, KeyError, OverflowError) as exc:  # OverflowError: int(1e999)
                raise TrajectoryFormatError(f"{path}:{lineno}: not a valid trajectory: {exc}") from exc
    return out

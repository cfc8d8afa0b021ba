"""The estimator interface: results, preferences, the registry and input validation.

Every estimator is a callable object built by :func:`get_estimator` from keyword
parameters; called on a sequence of groups (each a sequence of sibling
:class:`~rubrics.trajectory.Trajectory` objects of one task) it returns one
:class:`CreditResult` per group, in order.  Estimators are pure: no torch, no engine,
deterministic given their inputs.

Writing your own:

    >>> import numpy as np
    >>> @register_estimator("constant")
    ... class Constant(Estimator):
    ...     '''Gives every step the same advantage.'''
    ...     def __init__(self, *, value: float = 1.0) -> None:
    ...         self.value = value
    ...     def compute_group(self, group):
    ...         return CreditResult([np.full(len(t.steps), self.value) for t in group])
    >>> "constant" in available_estimators()
    True
    >>> unregister_estimator("constant")
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rubrics.trajectory import Trajectory

__all__ = [
    "CreditInputError",
    "CreditResult",
    "Estimator",
    "Preference",
    "available_estimators",
    "get_estimator",
    "register_estimator",
    "unregister_estimator",
    "validate_groups",
]


@dataclass(frozen=True)
class Preference:
    """One MCGPO preference between two decision rows of a group.

    Attributes:
        preferred: ``(trajectory_index, step_index)`` of the preferred row (p+).
        rejected: ``(trajectory_index, step_index)`` of the rejected row (p-).
        weight: Evidence weight c = |û|·n*/(n*+κ)·q_ℓ [MCGPO Eq. 4].
        level: Matching level, ``"exact"`` or ``"coarse"``.
        contrast: û, the (oriented, so non-negative) outcome contrast [MCGPO Eq. 3].
        support: n*, the balanced evidence support.
        fold: The candidate fold (0 or 1) the two rows come from.
    """

    preferred: tuple[int, int]
    rejected: tuple[int, int]
    weight: float
    level: str
    contrast: float
    support: int
    fold: int


@dataclass
class CreditResult:
    """Credit for one group.

    Attributes:
        advantages: One float64 array per trajectory, one value per step.
        shaped_rewards: Optional per-step shaped rewards (SCPO's R̃, MileGPO's r^M ...).
        pairs: Preference pairs (MCGPO; empty otherwise).
        stats: Diagnostics (SPEC §4 names them per method).
    """

    advantages: list[np.ndarray]
    shaped_rewards: list[np.ndarray] | None = None
    pairs: list[Preference] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


class CreditInputError(ValueError):
    """Malformed rollouts; the message names the group, trajectory and step."""


class Estimator:
    """Base class: override :meth:`compute_group`, or :meth:`compute` for batch-level work.

    An estimator that needs only step rows may also define ``compute_rows(rows)`` on a
    :class:`~wrappers.credit.graph.RowTable` and make :meth:`compute` call it on
    ``RowTable(groups)``: :mod:`wrappers.credit.flat` then runs it on tables built straight
    from an RL library's columns, without making any Step (every built-in estimator does;
    MCGPO and SCPO read their extra step fields through ``flat.StepRows``).  ``name`` is set
    by :func:`register_estimator`.
    """

    name: str = ""

    def __call__(self, groups: Sequence[Sequence[Trajectory]]) -> list[CreditResult]:
        validate_groups(groups)
        results = self.compute(groups)
        for g, (group, res) in enumerate(zip(groups, results)):
            if len(res.advantages) != len(group):
                raise AssertionError(f"{self.name}: group {g}: wrong number of advantage arrays")
        return results

    def compute(self, groups: Sequence[Sequence[Trajectory]]) -> list[CreditResult]:
        """Credit for validated groups; by default group by group."""
        return [self.compute_group(group) for group in groups]

    def compute_group(self, group: Sequence[Trajectory]) -> CreditResult:  # pragma: no cover
        raise NotImplementedError

    def params(self) -> dict[str, Any]:
        """The keyword parameters this estimator was built with."""
        sig = inspect.signature(type(self).__init__)
        return {k: getattr(self, k) for k in sig.parameters if k != "self" and hasattr(self, k)}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"


_REGISTRY: dict[str, type[Estimator]] = {}


def register_estimator(name: str) -> Callable[[type[Estimator]], type[Estimator]]:
    """Class decorator that makes an :class:`Estimator` subclass available by ``name``."""
    if not isinstance(name, str) or not name:
        raise TypeError("register_estimator needs a non-empty name")

    def deco(cls: type[Estimator]) -> type[Estimator]:
        if not (isinstance(cls, type) and issubclass(cls, Estimator)):
            raise TypeError(f"@register_estimator({name!r}) must decorate an Estimator subclass")
        old = _REGISTRY.get(name)
        if old is not None and old.__qualname__ != cls.__qualname__:
            raise ValueError(f"an estimator named {name!r} is already registered")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def unregister_estimator(name: str) -> None:
    """Remove a registered estimator (mainly for tests and notebooks)."""
    _REGISTRY.pop(name, None)


def available_estimators() -> list[str]:
    """Names accepted by :func:`get_estimator`."""
    from wrappers.credit import _load_builtin

    _load_builtin()
    return sorted(_REGISTRY)


def get_estimator(name: str, **params: Any) -> Estimator:
    """Build the estimator ``name`` with keyword parameters (SPEC defaults otherwise).

    Raises:
        ValueError: unknown name (the message lists the known ones).
        TypeError: an unknown parameter (the message lists the accepted ones).
    """
    known = available_estimators()
    if name not in _REGISTRY:
        raise ValueError(f"unknown estimator {name!r}; available: {', '.join(known)}")
    cls = _REGISTRY[name]
    sig = inspect.signature(cls.__init__)
    accepted = [k for k in sig.parameters if k != "self"]
    unknown = [k for k in params if k not in accepted]
    if unknown:
        raise TypeError(
            f"estimator {name!r} got unknown parameter(s) {', '.join(unknown)}; "
            f"accepted: {', '.join(accepted)}"
        )
    return cls(**params)


def _check_hashable(value: Any, what: str) -> None:
    if not isinstance(value, Hashable):
        raise CreditInputError(f"{what} is not hashable ({type(value).__name__}): {value!r}")
    try:
        hash(value)
    except TypeError as exc:
        raise CreditInputError(f"{what} is not hashable: {exc}") from None


#: The largest |reward|, |penalty| or |score| the estimators take: their squares and the sums of
#: millions of them stay finite in float64, so no variance overflows to inf and no advantage to NaN.
MAX_MAGNITUDE = 1e150


def _check_finite(value: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise CreditInputError(f"{what} must be a number, got {type(value).__name__}")
    if not math.isfinite(float(value)):
        raise CreditInputError(f"{what} is not finite ({value})")
    if abs(float(value)) > MAX_MAGNITUDE:
        raise CreditInputError(f"{what} is {value}, beyond the ±{MAX_MAGNITUDE:g} the estimators take "
                               "(rescale the rewards)")


def validate_groups(groups: Sequence[Sequence[Trajectory]]) -> None:
    """Check rollouts before any credit is computed.

    Raises:
        CreditInputError: mixed task ids in a group, duplicate slots, NaN/inf rewards,
            penalties or scores, unhashable keys; naming group ``g`` and trajectory ``i``.
        TypeError: ``groups`` is not a sequence of sequences of :class:`Trajectory`.
    """
    if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence):
        raise TypeError(f"groups must be a sequence of groups, got {type(groups).__name__}")
    for g, group in enumerate(groups):
        if isinstance(group, Trajectory) or not isinstance(group, Sequence):
            raise TypeError(
                f"group {g} must be a sequence of Trajectory objects, got {type(group).__name__}"
                " (pass a list of groups, e.g. [[traj0, traj1, ...]])"
            )
        if len(group) == 0:
            raise CreditInputError(f"group {g} is empty")
        slots: dict[int, int] = {}
        task_id = None
        for i, traj in enumerate(group):
            where = f"group {g}, trajectory {i}"
            if not isinstance(traj, Trajectory):
                raise TypeError(f"{where}: expected a Trajectory, got {type(traj).__name__}")
            if i == 0:
                task_id = traj.task_id
            elif traj.task_id != task_id:
                raise CreditInputError(
                    f"{where}: task id {traj.task_id!r} differs from the group's {task_id!r}"
                    " (a group holds siblings of one task)"
                )
            if traj.slot in slots:
                raise CreditInputError(
                    f"{where}: duplicate slot {traj.slot} (also trajectory {slots[traj.slot]})"
                )
            slots[traj.slot] = i
            _check_finite(traj.score, f"{where}: score")
            if not _steps_look_valid(traj):
                for t, step in enumerate(traj.steps):  # slow path: name the first bad step
                    at = f"{where}, step {t}"
                    _check_finite(step.reward, f"{at}: reward")
                    _check_finite(step.penalty, f"{at}: penalty")
                    _check_hashable(step.state_key, f"{at}: state_key")
                    _check_hashable(step.action_key, f"{at}: action_key")
                    _check_hashable(step.next_state_key, f"{at}: next_state_key")


def _steps_look_valid(traj: Trajectory) -> bool:
    """Fast check of a whole trajectory; ``False`` sends the caller to the naming slow path.

    A sum of rewards and penalties is finite only if every term is (and the largest term
    bounds them all); hashing one tuple of all keys fails if any key is unhashable.
    """
    steps = traj.steps
    try:
        total = math.fsum(s.reward for s in steps) + math.fsum(s.penalty for s in steps)
        largest = max((max(abs(s.reward), abs(s.penalty)) for s in steps), default=0.0)
        hash(tuple((s.state_key, s.action_key, s.next_state_key) for s in steps))
    except (TypeError, ValueError, OverflowError):
        return False
    return math.isfinite(total) and largest <= MAX_MAGNITUDE and all(
        type(s.reward) is float and type(s.penalty) is float for s in steps
    )

"""The settings the trainer and the arena share, one dataclass per concern.

A training run of either kind is configured by sections: how rollouts are sampled
(:class:`Rollouts`), the per-decision objective (:class:`ObjectiveConfig`), how far one update
moves the policy (:class:`Updates`), the behaviour-cloning warm start (:class:`WarmStart`) and
the schedule (:class:`Schedule`).  :class:`trainers.config.TrainConfig` and
:class:`trainers.arena.config.ArenaConfig` nest these same classes (the trainer extends some
with fields only a language model needs), so a knob has one name, one help text and one
constraint in both.  On the command line the sections' fields keep flat flags
(``--group-size``, ``--learning-rate``; tyro's ``OmitArgPrefixes``) and ``--help`` groups them
by section.

Every field declares its help and its bounds where it is defined (:func:`setting`), and
:func:`check` validates a whole configuration from those declarations.  Leaf names are unique
across the sections of a configuration, so a flat mapping (an old flat ``config.yaml``, a
``field=value`` override) places each value by its name alone (:func:`nest`); names the
arena or the trainer used before the sections existed are translated (:data:`RENAMED`).

Example:
    >>> from dataclasses import dataclass, field
    >>> @dataclass
    ... class Run:
    ...     rollout: Section[Rollouts] = field(default_factory=Rollouts)
    ...     update: Section[Updates] = field(default_factory=Updates)
    >>> run = nest({"group_size": 4, "lr": 0.5}, Run)      # 'lr' is the arena's old name
    >>> run.rollout.group_size, run.update.learning_rate
    (4, 0.5)
    >>> flatten(run)["learning_rate"]
    0.5
    >>> check(nest({"group_size": 1}, Run))
    Traceback (most recent call last):
    ...
    ValueError: group_size must be an integer ≥ 2; got 1
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

import tyro

from trainers.update_rule import UpdateRuleConfig

__all__ = [
    "RENAMED",
    "ObjectiveConfig",
    "Rollouts",
    "Schedule",
    "Section",
    "Updates",
    "WarmStart",
    "check",
    "flatten",
    "leaf_paths",
    "nest",
    "setting",
]

T = TypeVar("T")

#: A nested section whose fields are flags without a prefix (``--group-size``, not
#: ``--rollout.group-size``); ``--help`` still lists them under the section's heading.
Section = Annotated[T, tyro.conf.OmitArgPrefixes]

#: Names of settings before the shared sections, and the setting each one is now.  A value
#: under an old name (an old run's ``config.yaml`` or arena record, a script's override)
#: is read as the new one.  ``clip_ratio`` (the trainer's symmetric clip) sets both clips.
RENAMED: dict[str, tuple[str, ...]] = {
    "tasks_per_update": ("groups_per_update",),
    "eval_temperature": ("val_temperature",),
    "lr": ("learning_rate",),
    "epochs": ("ppo_epochs",),
    "rl": ("rl_update",),
    "warm_start": ("warm_start_tasks",),
    "clip_ratio": ("clip_low", "clip_high"),
}


def setting(default: Any, help: str, *, ge: float | None = None, gt: float | None = None,
            lt: float | None = None, le: float | None = None) -> Any:
    """A dataclass field with its help text and bounds (``ge``/``gt``/``lt``/``le``), which
    :func:`check` enforces (extra flags go in the type: ``tyro.conf.arg(aliases=...)``)."""
    meta = {"help": help, "bounds": {k: v for k, v in (("ge", ge), ("gt", gt), ("lt", lt), ("le", le)) if v is not None}}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda d=default: json.loads(json.dumps(d)), metadata=meta)
    return field(default=default, metadata=meta)


# ---------------------------------------------------------------------------------------------
# the shared sections (defaults: SPEC §5/§6, the papers' ALFWorld recipe)


@dataclass
class Rollouts:
    """How rollouts are sampled: P groups of G siblings per update."""

    groups_per_update: Annotated[int, tyro.conf.arg(aliases=("-P", "--tasks", "--tasks-per-update"))] = setting(
        16, "P: task groups per update (each task is played by group_size siblings).", ge=1)
    group_size: Annotated[int, tyro.conf.arg(aliases=("-G",))] = setting(
        8, "G: sibling rollouts per task group (siblings are compared, so at least 2).", ge=2)
    temperature: float = setting(1.0, "Rollout sampling temperature (SPEC §5: 1.0).", gt=0)
    val_temperature: Annotated[float, tyro.conf.arg(aliases=("--eval-temperature",))] = setting(
        0.4, "Validation sampling temperature (SPEC §6: 0.4); the arena takes 0 as greedy validation.", ge=0)


@dataclass
class ObjectiveConfig:
    """Coefficients of the per-decision objective (SPEC §5): the dual-clip PPO ratio loss, the
    k3 KL to the reference policy, the entropy bonus and MCGPO's pairwise loss."""

    clip_low: float = setting(0.2, "ε_low: the PPO ratio is clipped below at 1 − ε_low.", ge=0, lt=1)
    clip_high: float = setting(0.2, "ε_high: the PPO ratio is clipped above at 1 + ε_high.", ge=0)
    dual_clip: float = setting(3.0, "Dual-clip constant c: for A < 0 the loss is at most −c·A.", gt=1)
    kl_coef: float = setting(0.01, "Weight of the k3 KL estimate to the frozen reference policy (0 = no reference).", ge=0)
    kl_clip: float = setting(10.0, "The k3 estimate is clipped to [−kl_clip, kl_clip].", ge=0)
    entropy_coef: float = setting(0.001, "Weight of the entropy bonus.", ge=0)
    pair_coef: float = setting(0.05, "λ_pair: weight of MCGPO's pairwise loss (used when the estimator returns pairs; 0 = off).", ge=0)

    def __post_init__(self) -> None:
        check(self)


@dataclass
class Updates:
    """How far one update moves the policy (:mod:`trainers.update_rule`)."""

    learning_rate: Annotated[float, tyro.conf.arg(aliases=("--lr",))] = setting(
        0.01, "Step size of the RL updates' plain SGD (no momentum, no Adam: all-zero advantages leave the "
              "weights where they are), on advantages in units of their running RMS (adv_norm); the trust "
              "region (target_kl) bounds how far one update moves the policy whatever the step size.", gt=0)
    ppo_epochs: Annotated[int, tyro.conf.arg(aliases=("--epochs",))] = setting(
        4, "At most this many passes of SGD steps over each update's rows; after each, KL(π_old ‖ π_new) is "
           "measured and the update stops at the trust region (target_kl).", ge=1)
    target_kl: float = setting(
        0.05, "Trust region of one update: the mean KL(π_old ‖ π_new) over its decisions (nats). When an epoch "
              "ends above it, θ − θ_old is halved until it is within (TRPO's backtracking line search) and the "
              "update stops. 0 = no trust region.", ge=0)
    adv_norm: Literal["running_rms", "none"] = setting(
        "running_rms", "'running_rms': divide the advantages by the bias-corrected running RMS of the non-zero "
                       "advantages seen so far (multiplying every advantage by a constant changes nothing); "
                       "'none': use them as the estimator returns them. Either way |A| ≤ 1e-9 counts as 0.")
    rl_update: Annotated[bool, tyro.conf.arg(aliases=("--rl",))] = setting(
        True, "Apply the policy update. false = the control run of a learning claim: rollouts, credit, metrics "
              "and validations as usual, the weights never move.")

    def rule(self) -> UpdateRuleConfig:
        """The update rule's settings (:class:`~trainers.update_rule.UpdateRuleConfig`)."""
        return UpdateRuleConfig(epochs=self.ppo_epochs, target_kl=float(self.target_kl), adv_norm=self.adv_norm)


@dataclass
class WarmStart:
    """Behaviour cloning on stored walkthroughs before the first RL update."""

    warm_start_tasks: Annotated[int, tyro.conf.arg(aliases=("--warm-start",))] = setting(
        0, "Behaviour-clone the stored walkthroughs of this many training tasks before the first update "
           "(ALFWorld games store one; WebShop has none; 0 = off).", ge=0)
    warm_start_epochs: int = setting(1, "Passes over the walkthrough rows.", ge=1)
    warm_start_lr: float = setting(1e-4, "Learning rate of the warm start (its own optimiser).", gt=0)


@dataclass
class Schedule:
    """What a run trains and validates on, and for how long."""

    updates: int = setting(250, "Number of policy updates.", ge=1)
    eval_every: int = setting(5, "Validate every N updates (and before the first and after the last).", ge=1)
    train_tasks: int = setting(0, "Size of the fixed training pool: task indices 0..N-1 of the training split "
                                  "(the trainer takes 0 as every task of the split).", ge=0)
    val_tasks: int = setting(128, "Size of the fixed validation set (the first N task indices of the validation "
                                  "split; the arena needs at least 1).", ge=0)


# ---------------------------------------------------------------------------------------------
# one configuration's sections: walking, checking, reading flat mappings


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """The resolved field types of a settings class (computed once per class)."""
    return typing.get_type_hints(cls)


def _is_section(tp: Any) -> bool:
    return dataclasses.is_dataclass(tp) and isinstance(tp, type)


def leaf_paths(cls: type) -> dict[str, tuple[str, ...]]:
    """``{leaf name: (section, ..., leaf name)}`` for every non-section field of ``cls``.

    Raises:
        TypeError: two sections define the same leaf name (flags and flat files need them unique).
    """
    out: dict[str, tuple[str, ...]] = {}
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        inner = leaf_paths(tp) if _is_section(tp) else {f.name: ()}
        for leaf, path in inner.items():
            if leaf in out:
                raise TypeError(f"{cls.__name__}: setting {leaf!r} is defined twice ({'.'.join(out[leaf])})")
            out[leaf] = (f.name, *path) if _is_section(tp) else (f.name,)
    return out


def flatten(obj: Any) -> dict[str, Any]:
    """``{leaf name: value}`` of a configuration (its sections dissolved)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        out.update(flatten(value) if dataclasses.is_dataclass(value) else {f.name: value})
    return out


def nest(data: Mapping[str, Any], cls: type[T], base: T | None = None, *, source: str = "config") -> T:
    """``base`` (default: ``cls()``) with the values of ``data``, a flat or nested mapping.

    A key is a leaf name, an old name (:data:`RENAMED`) or a section name holding a mapping;
    values are set as given (:func:`check` validates them).

    Raises:
        ValueError: an unknown key, named with ``source`` and the closest names.
    """
    obj = base if base is not None else cls()
    paths = leaf_paths(cls)
    sections = {f.name for f in dataclasses.fields(cls) if _is_section(_hints(cls)[f.name])}
    for key, value in data.items():
        if key in sections and isinstance(value, Mapping):
            nest(value, type(getattr(obj, key)), getattr(obj, key), source=f"{source}: {key}")
            continue
        for name in RENAMED.get(key, (key,)) if key not in paths else (key,):
            if name not in paths:
                close = sorted(n for n in paths if n.split("_")[0] == key.split("_")[0])
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                raise ValueError(f"{source}: unknown field {key!r}{hint}")
            *head, leaf = paths[name]
            target = obj
            for part in head:
                target = getattr(target, part)
            setattr(target, leaf, value)
    return obj


def check(obj: Any) -> None:
    """Check every field of ``obj`` and its sections against its declared type and bounds.

    Raises:
        ValueError: the first bad field, named, with what it must be.
    """
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        value, tp = getattr(obj, f.name), hints[f.name]
        if _is_section(tp):
            check(value)
            continue
        _check_type(f.name, value, tp)
        bounds = f.metadata.get("bounds", {})
        if not all(_within(value, op, bound) for op, bound in bounds.items()):
            raise ValueError(f"{f.name} must be {_describe(tp, bounds)}; got {value!r}")


def _describe(tp: Any, bounds: Mapping[str, float]) -> str:
    """``"an integer ≥ 1"``, ``"a number in (0, 1]"``: what the bounds allow, in words."""
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    kind = "an integer" if tp is int else "a number"
    low = next(((op, bounds[op]) for op in ("ge", "gt") if op in bounds), None)
    high = next(((op, bounds[op]) for op in ("le", "lt") if op in bounds), None)
    if low and high:
        return (f"{kind} in {'[' if low[0] == 'ge' else '('}{low[1]:g}, {high[1]:g}"
                f"{']' if high[0] == 'le' else ')'}")
    op, bound = low or high  # type: ignore[misc]
    return f"{kind} {_WORDS[op]} {bound:g}"


_WORDS = {"ge": "≥", "gt": ">", "lt": "<", "le": "≤"}


def _within(value: Any, op: str, bound: float) -> bool:
    if value is None:
        return True  # an optional field left unset
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return {"ge": value >= bound, "gt": value > bound, "lt": value < bound, "le": value <= bound}[op]


def _check_type(name: str, value: Any, tp: Any) -> None:
    origin = typing.get_origin(tp) or tp
    if origin is Annotated:
        return _check_type(name, value, typing.get_args(tp)[0])
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
        return None
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if origin is typing.Union or type(tp).__name__ == "UnionType":
        if value is None:
            return None
        return _check_type(name, value, args[0]) if len(args) == 1 else None
    ok = {bool: lambda v: isinstance(v, bool),
          int: lambda v: isinstance(v, int) and not isinstance(v, bool),
          float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)}.get(origin)
    if ok is None and origin in (dict, list, str):
        ok = lambda v: isinstance(v, origin)
    if ok is not None and not ok(value):
        raise ValueError(f"{name} must be of type {getattr(origin, '__name__', origin)}; got {value!r}")
    return None

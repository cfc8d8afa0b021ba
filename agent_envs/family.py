"""Environment families: everything rubricgym knows about an environment, declared in one place.

A :class:`Family` is a frozen record that an environment's own package declares (for example
``agent_envs/alfworld/family.py``): its Gymnasium ids and their entry points, the default
keyword arguments, the rubric channel schema and dependency templates, what its matching keys
are, its actions as function-calling tool kinds, its evaluation panels, its expert (the plan
that warm starts clone and that the eval's ``walkthrough`` agent replays as an upper bound),
its arena presets and the papers' estimator settings for it.  Every other module asks this
registry (:func:`get_family`, :func:`family_of`, :func:`families`) instead of branching on an
environment's name.

Registration works as Gymnasium's does: ``import agent_envs`` calls
:func:`agent_envs.registration.register_envs`, which imports each built-in family module
(:data:`agent_envs.registration.FAMILY_MODULES`) and every module another distribution declares
under the ``rubricgym.families`` entry-point group; each calls :func:`register_family`, which
registers the family's ids with Gymnasium (entry points are strings: no engine is imported
until an environment is made) and fills the rubric layer's registries.

The layers stay as they are: :mod:`rubrics` and :mod:`wrappers` never import ``agent_envs``.
The rubric layer holds its own small registries (:func:`rubrics.channels.register_schema`,
:func:`rubrics.templates.register_templates`), with the papers' two environments built in so
that ``import rubrics`` alone knows them; a family *references* those (ALFWorld, WebShop) or
hands over its own, and :func:`register_family` fills them.  The estimators of
:mod:`wrappers.credit` take the settings a family declares as keyword parameters
(``estimators``); MileGPO's table of paper recipes stays with the estimator, and a family names
the recipe it uses.

Example:
    >>> import agent_envs
    >>> fam = family_of("WebShop-Rubric-v0")
    >>> fam.name, fam.tool_names
    ('webshop', ('search', 'click'))
    >>> [f.name for f in families()][:2]
    ['alfworld', 'webshop']
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rubrics.channels import Channel

__all__ = [
    "ArenaPreset",
    "Family",
    "ToolKind",
    "estimator_params",
    "families",
    "family_of",
    "family_of_task",
    "get_family",
    "load_entry",
    "register_family",
]

#: ``(tool name, action template, description)``: ``{slot}`` in the template are its arguments.
ToolKind = tuple[str, str, str]


@dataclass(frozen=True)
class ArenaPreset:
    """How ``rubricgym arena --env NAME`` uses an environment.

    Attributes:
        env_id: Gymnasium id.
        family: The family's name (its estimator settings).
        make_kwargs: Keyword arguments of ``gym.make``.
        train_split: ``options["split"]`` of training resets (``None``: the env's own).
        val_split: ``options["split"]`` of validation resets.  When it equals ``train_split``
            the validation tasks are the ones after the training pool in the fixed task order,
            so the two sets are disjoint.
        generated_n: For environments that generate their tasks on demand: pass
            ``generated_n`` = max(this, training pool + validation set) to ``gym.make``.
        max_steps: Arena default horizon (the environment's ``max_steps``).
        settings: Defaults of the other arena settings for this environment (measured; see
            docs/arena.md), flat ``setting=value``.
        seeds: Seeds of a comparison without ``--seeds``.
        methods: ``(--estimators, --variants)`` of a comparison without them (``None``: every
            registered estimator, no variants).
        env_settings: Arena settings passed on to ``gym.make``: setting name -> keyword (a
            setting not listed here is refused when set).
    """

    env_id: str
    family: str
    make_kwargs: Mapping[str, Any] = field(default_factory=dict)
    train_split: str | None = None
    val_split: str | None = None
    generated_n: int | None = None
    max_steps: int = 20
    settings: Mapping[str, Any] = field(default_factory=dict)
    seeds: int = 3
    methods: tuple[str, str] | None = None
    env_settings: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Family:
    """An environment family, declared once in its own package.

    Attributes:
        name: Lower-case name (``"alfworld"``): the rubric schema's and the estimator
            settings' key.
        envs: Gymnasium id -> entry point (``"module:Class"``; imported when an env is made).
        env_kwargs: Gymnasium id -> default keyword arguments of ``gym.make``.
        channels: The rubric channel schema (SPEC §3.1), in table order.
        templates: The dependency templates: a folder of ``<family>.toml`` files, or template
            family -> the mapping a TOML file parses to (SPEC §3.2).
        task_types: Task type -> the template family that serves it.
        keys: What the matching keys of ``info["keys"]`` are (``exact``, ``coarse``; SPEC §3.4).
        tool_kinds: The actions as function-calling tools (:data:`ToolKind`).
        panels: The family's evaluation panels (:class:`agent_envs.panels.PanelSpec`).
        panel_tasks: ``"module:function"``: ``(env, spec) -> (tasks, task_ids, contents,
            extra)``, the ordered reset tasks of a panel, their ids, each task's content bytes
            and extra bytes of the hash (:func:`agent_envs.panels.resolve_panel`).
        versions: Distributions whose installed versions enter a panel's hash.
        data_root_kwarg: The ``gym.make`` keyword that ``--data-root`` sets (``None``: none).
        expert: ``"module:function"``: ``info -> plan``, the expert's actions for the task the
            first ``info`` of an episode describes (``[]`` for a task without one).
        oracle: ``"module:function"``: ``unwrapped env -> action``, the expert's next action
            from the environment's state, for a family whose plan is not known from its first
            ``info`` (played on a private copy of the environment).
        arena: ``rubricgym arena --env`` name -> :class:`ArenaPreset`.
        estimators: Estimator name -> its keyword parameters in the papers' setting for this
            environment (SPEC §4).
        observation_features: ``"module:function"``: ``(observation, actions) -> [named
            features of each action]`` (``{name: value}`` per action, in order), what an agent
            can read off the observation text about each action; the arena's linear policy
            adds them to its own features (``None``: none).
    """

    name: str
    envs: Mapping[str, str]
    channels: tuple[Channel, ...]
    templates: str | Path | Mapping[str, Mapping[str, Any]]
    env_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    task_types: Mapping[str, str] = field(default_factory=dict)
    keys: Mapping[str, str] = field(default_factory=dict)
    tool_kinds: tuple[ToolKind, ...] = ()
    panels: tuple[Any, ...] = ()
    panel_tasks: str | None = None
    versions: tuple[str, ...] = ()
    data_root_kwarg: str | None = None
    expert: str | None = None
    oracle: str | None = None
    arena: Mapping[str, ArenaPreset] = field(default_factory=dict)
    estimators: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    observation_features: str | None = None

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The names of :attr:`tool_kinds`, in order."""
        return tuple(k[0] for k in self.tool_kinds)

    def expert_plan(self, info: Mapping[str, Any]) -> list[str]:
        """The expert's plan for the task of an episode's first ``info`` (``[]``: none)."""
        return list(load_entry(self.expert)(info)) if self.expert else []

    def estimator_params(self, estimator: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``estimator``'s keyword parameters in the papers' setting for this family
        (:attr:`estimators`; ``{}`` when it declares none), with ``overrides`` (the user's) on top."""
        return {**self.estimators.get(estimator, {}), **(overrides or {})}


_FAMILIES: dict[str, Family] = {}
_BY_ENV: dict[str, str] = {}


def load_entry(spec: str) -> Callable[..., Any]:
    """The object a ``"module:attribute"`` string names (imported now)."""
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ValueError(f"an entry point is 'module:attribute', got {spec!r}")
    return getattr(importlib.import_module(module), attr)


def _check(family: Family) -> None:
    if not family.name or family.name != family.name.lower():
        raise ValueError(f"a family name is a non-empty lower-case str, got {family.name!r}")
    if not family.envs:
        raise ValueError(f"family {family.name!r} declares no environment")
    for env_id, owner in ((e, _BY_ENV.get(e)) for e in family.envs):
        if owner is not None and owner != family.name:
            raise ValueError(f"{env_id!r} is already declared by family {owner!r}")
    for name, preset in family.arena.items():
        if preset.env_id not in family.envs:
            raise ValueError(f"arena preset {name!r} of {family.name!r} names {preset.env_id!r}, "
                             f"not one of the family's environments")
        for other in _FAMILIES.values():
            if other.name != family.name and name in other.arena:
                raise ValueError(f"arena preset {name!r} is already declared by family {other.name!r}")


def register_family(family: Family) -> Family:
    """Register ``family``: its ids with Gymnasium, its schema and templates with
    :mod:`rubrics`; idempotent for the same record.

    Raises:
        ValueError: another family already declares one of its ids or arena presets, the
            name is taken by a different record, or its schema or templates conflict.
    """
    import gymnasium as gym

    from agent_envs.registration import ENV_IDS
    from rubrics.channels import register_schema
    from rubrics.templates import register_templates

    if family.name in _FAMILIES:
        if _FAMILIES[family.name] != family:
            raise ValueError(f"family {family.name!r} is already registered with another record")
        return family
    _check(family)
    register_schema(family.name, family.channels)
    register_templates(family.name, family.templates, family.task_types)
    for env_id, entry_point in family.envs.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, disable_env_checker=True)
        _BY_ENV[env_id] = family.name
    ENV_IDS.update(family.envs)
    _FAMILIES[family.name] = family
    return family


def families() -> tuple[Family, ...]:
    """Every registered family, in registration order (the built-in ones registered first)."""
    from agent_envs.registration import register_envs

    register_envs()
    return tuple(_FAMILIES.values())


def get_family(name: str) -> Family:
    """The family named ``name``.

    Raises:
        ValueError: no such family (the message lists the registered ones).
    """
    known = {f.name: f for f in families()}
    if name not in known:
        raise ValueError(f"unknown environment family {name!r}; registered: {', '.join(known)}")
    return known[name]


def estimator_params(env: Any, estimator: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The keyword parameters of ``estimator`` on ``env`` (a Gymnasium id or an environment made
    from one): its family's (:meth:`Family.estimator_params`), ``overrides`` on top; only
    ``overrides`` for an environment of no registered family.

    >>> estimator_params("Sokoban-Rubric-v0", "graphgpo"), estimator_params("Sokoban-Rubric-v0", "graphgpo", {"gamma": 0.5})
    ({'gamma': 0.8}, {'gamma': 0.5})
    >>> estimator_params("CartPole-v1", "graphgpo")
    {}
    """
    fam = family_of(env)
    return fam.estimator_params(estimator, overrides) if fam is not None else dict(overrides or {})


def family_of(env: Any) -> Family | None:
    """The family of a Gymnasium id (or an environment made from one), ``None`` for any other
    environment."""
    families()
    env_id = env if isinstance(env, str) else getattr(getattr(env, "spec", None), "id", None)
    name = _BY_ENV.get(env_id) if env_id is not None else None
    return _FAMILIES[name] if name is not None else None


def family_of_task(task_type: str) -> Family | None:
    """The family whose tasks carry the type ``task_type`` (``info["task"]["type"]``): the family
    of that name, or the one declaring it among its :attr:`Family.task_types`; ``None`` for any
    other."""
    for fam in families():
        if task_type == fam.name or task_type in fam.task_types:
            return fam
    return None

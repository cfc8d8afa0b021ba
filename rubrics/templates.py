"""Dependency templates: task rules as data, and the frontier they induce (SPEC §3.2).

A template is a directed graph over one task family's channels with three relations:

* ``requires_ever`` (E): the source must have been active at some decision so far;
* ``requires_current`` (C): the source must be active now;
* ``blocks``: while the source is active the target is not enabled, and blocking sources
  are never in the frontier themselves.

Templates live as TOML files, one folder per environment: the papers' two environments ship
theirs in ``rubrics/templates/<env>/<family>.toml``; an environment family of
:mod:`agent_envs` registers its own folder (and task-type aliases) with
:func:`register_templates` when ``agent_envs`` registers its environments.  They are loaded
by :func:`load_template`.  The frontier of an active set C is [MCGPO Eq. 8]::

    F(C) = { j in V \\ (C ∪ V_block) : P(j) ⊆ C, B(j) ∩ C = ∅ }

where "P(j) ⊆ C" is tested per edge: E edges against ``ever``, C edges against ``current``.

Example:
    >>> t = load_template("alfworld", "pick_clean_then_place_in_recep")
    >>> sorted(t.frontier(frozenset(), frozenset()))
    ['target_acquired']
    >>> sorted(t.frontier({"target_acquired", "target_in_hand"}, {"target_acquired", "target_in_hand"}))
    ['target_processed']
"""

from __future__ import annotations

import graphlib
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from rubrics.channels import channel_schema

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "ALFWORLD_TASK_TYPES",
    "RELATIONS",
    "Edge",
    "Template",
    "TemplateError",
    "available_templates",
    "load_template",
    "parse_template",
    "register_templates",
]

RELATIONS = ("requires_ever", "requires_current", "blocks")

#: The six ALFWorld task types and the template family each one uses.
ALFWORLD_TASK_TYPES: dict[str, str] = {
    "pick_and_place_simple": "pick",
    "pick_two_obj_and_place": "pick",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "look_at_obj_in_light": "look",
}


class TemplateError(ValueError):
    """A template file is malformed: unknown channel or relation, a cycle, bad structure."""


@dataclass(frozen=True)
class Edge:
    """One dependency: ``target`` depends on ``source`` through ``relation``."""

    source: str
    target: str
    relation: str


@dataclass(frozen=True)
class Template:
    """A validated dependency template of one task family.

    Attributes:
        env: Environment name (``alfworld`` / ``webshop``).
        family: Task family name (``pick``, ``clean``, ..., ``webshop``).
        task_types: Task types that use this template.
        edges: All edges, in file order.
        vocabulary: V, the channels the edges mention (in schema order).
        description: Free text from the file.
    """

    env: str
    family: str
    task_types: tuple[str, ...]
    edges: tuple[Edge, ...]
    vocabulary: tuple[str, ...]
    description: str = ""

    def __post_init__(self) -> None:
        ever: dict[str, list[str]] = {v: [] for v in self.vocabulary}
        current: dict[str, list[str]] = {v: [] for v in self.vocabulary}
        blockers: dict[str, list[str]] = {v: [] for v in self.vocabulary}
        table = {"requires_ever": ever, "requires_current": current, "blocks": blockers}
        for e in self.edges:
            table[e.relation][e.target].append(e.source)
        freeze = lambda d: {k: frozenset(v) for k, v in d.items()}
        object.__setattr__(self, "_ever", freeze(ever))
        object.__setattr__(self, "_current", freeze(current))
        object.__setattr__(self, "_blockers", freeze(blockers))
        object.__setattr__(
            self, "_block_sources", frozenset(e.source for e in self.edges if e.relation == "blocks")
        )

    def prerequisites(self, channel: str) -> tuple[frozenset[str], frozenset[str]]:
        """(requires_ever sources, requires_current sources) of ``channel``."""
        return self._ever[channel], self._current[channel]  # type: ignore[attr-defined]

    def frontier(self, current: Iterable[str], ever: Iterable[str]) -> frozenset[str]:
        """F(C): inactive, unblocked channels whose prerequisites are met [MCGPO Eq. 8].

        Args:
            current: The active set C of this decision.
            ever: Channels active at any decision so far (``current`` is added to it).
        """
        current = frozenset(current)
        ever = frozenset(ever) | current
        out = []
        for j in self.vocabulary:
            if j in current or j in self._block_sources:  # type: ignore[attr-defined]
                continue
            if not self._ever[j] <= ever:  # type: ignore[attr-defined]
                continue
            if not self._current[j] <= current:  # type: ignore[attr-defined]
                continue
            if self._blockers[j] & current:  # type: ignore[attr-defined]
                continue
            out.append(j)
        return frozenset(out)

    def symbols(self, channels: Iterable[str]) -> str:
        """Compact symbol string of a channel set, in vocabulary order (e.g. ``"AH"``)."""
        schema = channel_schema(self.env)
        chosen = set(channels)
        return "".join(schema[c].symbol for c in self.vocabulary if c in chosen)


def _as_list(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    raise TemplateError(f"{where}: expected a channel name or a non-empty list of names, got {value!r}")


def parse_template(data: Mapping[str, Any], source: str = "<template>") -> Template:
    """Validate a template given as a mapping (the parsed TOML) and build it.

    Raises:
        TemplateError: with ``source`` and the offending edge in the message.
    """
    if not isinstance(data, Mapping):
        raise TemplateError(f"{source}: a template must be a table, got {type(data).__name__}")
    for key in ("env", "family", "edges"):
        if key not in data:
            raise TemplateError(f"{source}: missing required key {key!r}")
    env = data["env"]
    try:
        schema = channel_schema(env)
    except (ValueError, TypeError) as exc:
        raise TemplateError(f"{source}: {exc}") from None
    if not isinstance(data["edges"], list) or not data["edges"]:
        raise TemplateError(f"{source}: 'edges' must be a non-empty array of tables")
    edges: list[Edge] = []
    for k, raw in enumerate(data["edges"]):
        where = f"{source}: edge {k}"
        if not isinstance(raw, Mapping):
            raise TemplateError(f"{where}: must be a table")
        extra = set(raw) - {"relation", "from", "to"}
        if extra:
            raise TemplateError(f"{where}: unknown keys {sorted(extra)}")
        relation = raw.get("relation")
        if relation not in RELATIONS:
            raise TemplateError(
                f"{where}: unknown relation {relation!r}; expected one of {', '.join(RELATIONS)}"
            )
        for side in ("from", "to"):
            if side not in raw:
                raise TemplateError(f"{where}: missing {side!r}")
        for src in _as_list(raw["from"], where):
            for dst in _as_list(raw["to"], where):
                for name in (src, dst):
                    if name not in schema:
                        raise TemplateError(
                            f"{where}: unknown channel {name!r} for env {env!r}; "
                            f"known: {', '.join(schema)}"
                        )
                    if schema[name].diagnostic:
                        raise TemplateError(f"{where}: {name!r} is a diagnostic channel")
                if src == dst:
                    raise TemplateError(f"{where}: self-loop on {src!r}")
                edges.append(Edge(src, dst, relation))
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.target, set()).add(e.source)
        graph.setdefault(e.source, set())
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        cycle = " -> ".join(reversed(exc.args[1]))
        raise TemplateError(f"{source}: dependency cycle {cycle}") from None
    mentioned = {e.source for e in edges} | {e.target for e in edges}
    vocabulary = tuple(name for name in schema if name in mentioned)
    task_types = data.get("task_types", [data["family"]])
    return Template(
        env=env,
        family=str(data["family"]),
        task_types=tuple(_as_list(task_types, f"{source}: task_types")),
        edges=tuple(edges),
        vocabulary=vocabulary,
        description=str(data.get("description", "")),
    )


def _template_dir() -> Path:
    return Path(str(resources.files("rubrics") / "templates"))


#: env -> (template folder, task type -> template family); the built-in environments' folders
#: are ``rubrics/templates/<env>``.
_FOLDERS: dict[str, tuple[Path, dict[str, str]]] = {
    "alfworld": (_template_dir() / "alfworld", dict(ALFWORLD_TASK_TYPES)),
    "webshop": (_template_dir() / "webshop", {}),
}
#: env -> (template family -> parsed template, task type -> template family): templates given as data.
_GIVEN: dict[str, tuple[dict[str, Template], dict[str, str]]] = {}


def register_templates(env: str, source: str | Path | Mapping[str, Mapping[str, Any]],
                       task_types: Mapping[str, str] | None = None) -> None:
    """Register the dependency templates of environment ``env`` (its schema registered first:
    :func:`rubrics.channels.register_schema`).

    Args:
        env: The environment name.
        source: A folder of ``<family>.toml`` files, or the templates as data: template family ->
            the mapping a TOML file would parse to (validated now, by :func:`parse_template`).
        task_types: Task-type names -> the template family that serves them
            (``load_template(env, task_type)``).

    Raises:
        ValueError: an unknown environment, a folder that does not exist, or ``env`` already
            registered with other templates.
        TemplateError: a template given as data is malformed.
    """
    channel_schema(env)  # unknown env -> ValueError
    aliases = dict(task_types or {})
    if isinstance(source, Mapping):
        parsed = {name: parse_template(data, source=f"<{env} template {name}>") for name, data in source.items()}
        entry: Any = (parsed, aliases)
        table: dict[str, Any] = _GIVEN
    else:
        path = Path(source)
        if not path.is_dir():
            raise ValueError(f"template folder {path} of {env!r} does not exist")
        entry, table = (path, aliases), _FOLDERS
    if env in _FOLDERS or env in _GIVEN:
        if table.get(env) != entry:
            raise ValueError(f"environment {env!r} already has other registered templates")
        return
    table[env] = entry


def available_templates() -> dict[str, list[str]]:
    """Families with a template, per environment."""
    out = {env: sorted(p.stem for p in folder.glob("*.toml")) for env, (folder, _aliases) in _FOLDERS.items()}
    return out | {env: sorted(given) for env, (given, _aliases) in _GIVEN.items()}


def load_template(env: str, family: str) -> Template:
    """Load and validate the template of a task family.

    Args:
        env: ``"alfworld"``, ``"webshop"`` or a registered environment.
        family: A template family (ALFWorld: ``pick``, ``clean``, ``heat``, ``cool``,
            ``look``; WebShop: ``"webshop"``) or a task type the environment maps to one
            (ALFWorld's six, e.g. ``"pick_two_obj_and_place"``).
    """
    if not isinstance(env, str) or not isinstance(family, str):
        raise TypeError("load_template(env, family) expects two strings")
    env = env.lower()
    channel_schema(env)  # unknown env -> ValueError
    if env in _GIVEN:
        given, aliases = _GIVEN[env]
        found = given.get(aliases.get(family, family))
    elif env in _FOLDERS:
        folder, aliases = _FOLDERS[env]
        path = folder / f"{aliases.get(family, family)}.toml"
        found = _load_file(path, env) if path.is_file() else None
    else:
        raise ValueError(f"environment {env!r} has no registered templates")
    if found is None:
        known = list(aliases) + available_templates()[env]
        raise ValueError(f"no template for {env!r} family {family!r}; known: {', '.join(known)}")
    return found


@cache
def _load_file(path: Path, env: str) -> Template:
    """Parse and validate one template file (cached: templates are immutable)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TemplateError(f"{path}: not valid TOML: {exc}") from None
    template = parse_template(data, source=str(path))
    if template.env != env:
        raise TemplateError(f"{path}: declares env {template.env!r}, expected {env!r}")
    return template

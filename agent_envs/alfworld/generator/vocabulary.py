"""The generator's vocabulary and the logic files it writes games over.

* :data:`TASK_TYPES`: the six ALFWorld task types.
* :func:`load_vocabulary`: ``agent_envs/alfworld/scenes.json``: the type constants the alfred
  domain names, object affordances (pickupable, cleanable, heatable, ...), which receptacle
  types can hold which object types (as in ALFRED), room compositions, the targets and
  destinations of each task type per room, and the task sentences.
* :func:`logic_files`: ``alfred.pddl`` and ``alfred.twl2`` as shipped in the alfworld wheel.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = [
    "GENERATOR_VERSION",
    "TASK_TYPES",
    "VOCABULARY_PATH",
    "Vocabulary",
    "load_vocabulary",
    "logic_files",
]

#: Bumped whenever the same seed would produce different games; stored in the cache manifest.
GENERATOR_VERSION = 1

#: The six ALFWorld task types, in the order generated games cycle through them.
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "pick_two_obj_and_place",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "look_at_obj_in_light",
)

#: The vocabulary file shipped with the package.
VOCABULARY_PATH = Path(__file__).resolve().parents[1] / "scenes.json"


@dataclass(frozen=True)
class Vocabulary:
    """The generator's data: type constants, affordances, rooms, task targets and sentences."""

    object_types: tuple[str, ...]
    receptacle_types: tuple[str, ...]
    object_properties: Mapping[str, tuple[str, ...]]
    can_contain: Mapping[str, frozenset[str]]
    openable: Mapping[str, float]
    capacity: Mapping[str, int]
    paired_scenery: Mapping[str, str]
    rooms: Mapping[str, Mapping[str, Any]]
    tasks: Mapping[str, Mapping[str, Mapping[str, tuple[str, ...]]]]
    sentences: Mapping[str, tuple[str, ...]]
    lamp: str


@lru_cache(maxsize=4)
def load_vocabulary(path: Path | str | None = None) -> Vocabulary:
    """Load and check the generator vocabulary (default: :data:`VOCABULARY_PATH`).

    Raises:
        ValueError: the file is not valid JSON or is inconsistent; the message names the file.
    """
    path = Path(path) if path is not None else VOCABULARY_PATH
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read the ALFWorld generator vocabulary {path}: {exc}") from exc
    try:
        vocab = Vocabulary(
            object_types=tuple(raw["object_types"]),
            receptacle_types=tuple(raw["receptacle_types"]),
            object_properties={k: tuple(v) for k, v in raw["object_properties"].items()},
            can_contain={k: frozenset(v) for k, v in raw["can_contain"].items()},
            openable={k: float(v) for k, v in raw["openable"].items()},
            capacity={k: int(v) for k, v in raw["capacity"].items()},
            paired_scenery=dict(raw["paired_scenery"]),
            rooms=raw["rooms"],
            tasks={
                t: {room: {k: tuple(v) for k, v in spec.items()} for room, spec in rooms.items()}
                for t, rooms in raw["tasks"].items()
            },
            sentences={k: tuple(v) for k, v in raw["sentences"].items()},
            lamp=str(raw["lamp"]),
        )
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"malformed ALFWorld generator vocabulary {path}: {exc!r}") from exc
    _check_vocabulary(vocab, path)
    return vocab


def _check_vocabulary(vocab: Vocabulary, path: Path) -> None:
    """Cross-check the vocabulary so that a bad edit fails loudly, naming the file."""
    problems: list[str] = []
    otypes, rtypes = set(vocab.object_types), set(vocab.receptacle_types)
    for rtype, contained in vocab.can_contain.items():
        if rtype not in rtypes:
            problems.append(f"can_contain: unknown receptacle type {rtype!r}")
        problems += [f"can_contain[{rtype}]: unknown object type {o!r}" for o in contained - otypes]
    for room, spec in vocab.rooms.items():
        for rtype in spec["receptacles"]:
            if rtype not in rtypes:
                problems.append(f"rooms[{room}]: unknown receptacle type {rtype!r}")
        for otype in list(spec["objects"]) + list(spec["scenery"]):
            if otype not in otypes:
                problems.append(f"rooms[{room}]: unknown object type {otype!r}")
    for task_type in TASK_TYPES:
        if task_type not in vocab.tasks or task_type not in vocab.sentences:
            problems.append(f"no targets or sentences for task type {task_type!r}")
            continue
        for room, spec in vocab.tasks[task_type].items():
            if room not in vocab.rooms:
                problems.append(f"tasks[{task_type}]: unknown room {room!r}")
            for otype in spec["targets"]:
                if "pickupable" not in vocab.object_properties.get(otype, ()):
                    problems.append(
                        f"tasks[{task_type}][{room}]: target {otype!r} is not pickupable"
                    )
    if problems:
        raise ValueError(
            f"inconsistent ALFWorld generator vocabulary {path}: " + "; ".join(problems)
        )


@lru_cache(maxsize=1)
def logic_files() -> tuple[str, str]:
    """The PDDL domain and the text grammar shipped inside the alfworld wheel."""
    spec = importlib.util.find_spec("alfworld")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "generating ALFWorld games needs the alfworld package (its alfred.pddl and "
            "alfred.twl2); install it with `pip install 'rubricgym[alfworld]'`"
        )
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    try:
        domain = (data / "alfred.pddl").read_text(encoding="utf-8")
        grammar = (data / "alfred.twl2").read_text(encoding="utf-8")
    except OSError as exc:
        raise FileNotFoundError(
            f"the alfworld wheel lacks its logic files under {data}: {exc}"
        ) from exc
    if "UNKNOWN GOAL" not in grammar:
        raise ValueError(f"{data / 'alfred.twl2'} has no 'UNKNOWN GOAL' placeholder for the task")
    return domain, grammar

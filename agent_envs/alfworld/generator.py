"""Seeded generator of solvable ALFWorld games: the embedded default that needs no download.

Every generated game is a ``game.tw-pddl`` JSON file exactly like the ones of the official
ALFWorld data set (``{"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}``),
written over the PDDL domain (``alfred.pddl``) and the text grammar (``alfred.twl2``) that ship
inside the ``alfworld`` wheel, so the real TextWorld PDDL engine plays it unchanged.

A game is a room (kitchen, living room, bedroom or bathroom) with receptacles at their own
locations (some of them closed: cabinets, drawers, fridge, microwave, safe), target objects,
distractor objects (other types, and extra instances of the destination type), non-pickupable
scenery, and one of the six ALFWorld task types. A scripted solver writes the walkthrough over
the scene it just built, and :func:`verify_game` replays that walkthrough in the real engine
(textworld ``PddlEnv`` + alfworld's ``AlfredDemangler(shuffle=False)`` and ``AlfredInfos``):
every command must be admissible, the game must not be won before the last command and must
be won after it. Games that fail are rejected and resampled.

:func:`ensure_generated` builds a balanced, deterministic set of games into a cache on first
use and returns their paths; the layout mirrors the real data
(``<cache>/<task_type>-<Obj>-None-<Recep>-<index>/trial_0/game.tw-pddl``), so the task type,
target and destination can be read from the folder name.

Example:
    >>> from agent_envs.alfworld.generator import generate_game
    >>> game = generate_game(0, "pick_heat_then_place_in_recep")
    >>> sorted(game)
    ['grammar', 'pddl_domain', 'pddl_problem', 'solvable', 'walkthrough']
    >>> game["walkthrough"][-1].startswith("move ")
    True
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import random
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = [
    "GENERATOR_VERSION",
    "TASK_TYPES",
    "GameVerificationError",
    "GeneratedGame",
    "Verifier",
    "build_game",
    "default_cache_dir",
    "demangled_names",
    "ensure_generated",
    "generate_game",
    "load_vocabulary",
    "verify_game",
]

logger = logging.getLogger(__name__)

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

MANIFEST_NAME = "manifest.json"
GAME_FILE_NAME = "game.tw-pddl"
_VOCABULARY_PATH = Path(__file__).with_name("scenes.json")
_MAX_SCENE_TRIES = 200  # structural resamples inside one game (deterministic, cheap)
_MAX_VERIFY_TRIES = 10  # engine-rejected resamples per game index before giving up


class GameVerificationError(RuntimeError):
    """A generated game's walkthrough did not win in the real engine (names the failing step)."""


# --------------------------------------------------------------------------------------------
# Vocabulary (agent_envs/alfworld/scenes.json)
# --------------------------------------------------------------------------------------------


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
    """Load and check the generator vocabulary (default: the ``scenes.json`` beside this module).

    Raises:
        ValueError: the file is not valid JSON or is inconsistent; the message names the file.
    """
    path = Path(path) if path is not None else _VOCABULARY_PATH
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
            tasks={t: {room: {k: tuple(v) for k, v in spec.items()} for room, spec in rooms.items()}
                   for t, rooms in raw["tasks"].items()},
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
                    problems.append(f"tasks[{task_type}][{room}]: target {otype!r} is not pickupable")
    if problems:
        raise ValueError(f"inconsistent ALFWorld generator vocabulary {path}: " + "; ".join(problems))


@lru_cache(maxsize=1)
def _logic_files() -> tuple[str, str]:
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
        raise FileNotFoundError(f"the alfworld wheel lacks its logic files under {data}: {exc}") from exc
    if "UNKNOWN GOAL" not in grammar:
        raise ValueError(f"{data / 'alfred.twl2'} has no 'UNKNOWN GOAL' placeholder for the task")
    return domain, grammar


# --------------------------------------------------------------------------------------------
# Names: ALFRED-style ids and the names the engine's demangler shows for them
# --------------------------------------------------------------------------------------------


def _mangle(text: str) -> str:
    """ALFRED id mangling: ``Apple|-00.14|+00.96`` -> ``Apple_bar__minus_00_dot_14_bar__plus_00_dot_96``."""
    for old, new in (("|", "_bar_"), ("-", "_minus_"), ("+", "_plus_"), (".", "_dot_")):
        text = text.replace(old, new)
    return text


def demangled_names(ids: Sequence[str]) -> dict[str, str]:
    """The display names the engine gives entity ids, e.g. ``"apple 2"`` or ``"sinkbasin 1"``.

    Mirrors what alfworld's ``AlfredDemangler(shuffle=False)`` does on the engine's (lowercased)
    ids: the text before the first ``_bar_`` is the name (with ``basin`` appended when the id
    contains ``basin``: the naming trap that turns ``Sink_bar_..._bar_SinkBasin`` into
    ``sinkbasin``); within one name, ids in sorted order are numbered from the count down to 1.
    Ids without ``_bar_`` keep their text (``agent1``). The generator uses this to write
    walkthroughs; :func:`verify_game` checks the result in the real engine.

    >>> demangled_names(["Mug_bar__plus_01", "Mug_bar__minus_02", "Sink_bar_1_bar_SinkBasin"])
    {'mug_bar__plus_01': 'mug 1', 'mug_bar__minus_02': 'mug 2', 'sink_bar_1_bar_sinkbasin': 'sinkbasin 1'}
    """
    lowered = sorted({i.lower() for i in ids})
    groups: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    for ident in lowered:
        head, sep, _ = ident.partition("_bar_")
        if not sep:
            names[ident] = ident
            continue
        if "basin" in ident:
            head += "basin"
        groups.setdefault(head, []).append(ident)
    for head, members in groups.items():
        for rank, ident in enumerate(members):
            names[ident] = f"{head} {len(members) - rank}"
    return {ident: names[ident] for ident in (i.lower() for i in ids)}


# --------------------------------------------------------------------------------------------
# Scenes
# --------------------------------------------------------------------------------------------


@dataclass
class _Receptacle:
    rid: str
    rtype: str
    location: str
    openable: bool
    contents: list[str] = field(default_factory=list)


@dataclass
class _Object:
    oid: str
    otype: str
    location: str
    receptacle: str | None  # None: scenery standing at a location
    properties: tuple[str, ...]


@dataclass
class _Scene:
    room: str
    task_type: str
    target: str
    destination: str  # receptacle type, or the lamp type for look_at_obj_in_light
    sentence: str
    start: str
    receptacles: dict[str, _Receptacle]
    objects: dict[str, _Object]
    locations: list[str]


class _Resample(Exception):
    """The sampled scene cannot host the task; draw again from the same rng."""


class _Ids:
    """Unique ALFRED-looking ids with random coordinates."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def _coord(self, lo: float, hi: float) -> str:
        return f"{self.rng.uniform(lo, hi):+06.2f}"

    def entity(self, type_name: str, suffix: str = "") -> str:
        while True:
            raw = f"{type_name}|{self._coord(-4, 4)}|{self._coord(0, 2.2)}|{self._coord(-1, 6)}"
            ident = _mangle(raw) + suffix
            if ident.lower() not in self.used:
                self.used.add(ident.lower())
                return ident

    def location(self) -> str:
        rng = self.rng
        while True:
            raw = f"loc|{rng.randint(-14, 14)}|{rng.randint(-2, 20)}|{rng.randint(0, 3)}|{rng.choice((-30, 0, 15, 30, 45, 60))}"
            ident = _mangle(raw)
            if ident not in self.used:
                self.used.add(ident)
                return ident


def _as_rng(rng_or_seed: random.Random | int | str) -> random.Random:
    if isinstance(rng_or_seed, random.Random):
        return rng_or_seed
    if isinstance(rng_or_seed, bool) or not isinstance(rng_or_seed, (int, str)):
        raise TypeError(
            f"rng_or_seed must be a random.Random, an int or a str, not {type(rng_or_seed).__name__}"
        )
    return random.Random(f"rubricgym-alfworld:{rng_or_seed}")


def _check_task_type(task_type: object) -> str:
    if not isinstance(task_type, str) or task_type not in TASK_TYPES:
        raise ValueError(f"unknown ALFWorld task type {task_type!r}; expected one of {', '.join(TASK_TYPES)}")
    return task_type


def _sample_scene(rng: random.Random, vocab: Vocabulary, task_type: str) -> _Scene:
    rooms = sorted(vocab.tasks[task_type])
    room = rng.choice(rooms)
    room_spec = vocab.rooms[room]
    task_spec = vocab.tasks[task_type][room]
    target = rng.choice(task_spec["targets"])
    look = task_type == "look_at_obj_in_light"
    if look:
        destination = vocab.lamp
    else:
        options = [d for d in task_spec["destinations"] if target in vocab.can_contain.get(d, ())]
        if not options:
            raise _Resample
        destination = rng.choice(options)

    # -- receptacle counts, then what the task needs --
    counts = {rtype: rng.randint(lo, hi) for rtype, (lo, hi) in room_spec["receptacles"].items()}
    required = {
        "pick_clean_then_place_in_recep": "SinkBasin",
        "pick_heat_then_place_in_recep": "Microwave",
        "pick_cool_then_place_in_recep": "Fridge",
    }.get(task_type)
    if required:
        counts[required] = max(1, counts.get(required, 0))
    if not look:
        counts[destination] = max(1, counts.get(destination, 0))
    lamp_holder_types = [r for r in room_spec["lamp_holders"] if counts.get(r, 0) > 0]
    has_lamp = bool(room_spec["lamp_holders"]) and (look or rng.random() < 0.6)
    if has_lamp and not lamp_holder_types:
        holder = rng.choice(room_spec["lamp_holders"])
        counts[holder] = 1
        lamp_holder_types = [holder]

    ids = _Ids(rng)
    receptacles: dict[str, _Receptacle] = {}
    objects: dict[str, _Object] = {}
    locations: list[str] = []
    for rtype in sorted(counts):
        for _ in range(counts[rtype]):
            paired = vocab.paired_scenery.get(rtype)
            loc = ids.location()
            locations.append(loc)
            if paired in ("Sink", "Bathtub"):
                # ALFRED names a basin after its sink: Sink_bar_<xyz>_bar_SinkBasin displays as
                # "sinkbasin N" (the demangler appends "basin"); the sink itself is scenery.
                sink = ids.entity(paired)
                rid = f"{sink}_bar_{rtype}"
                ids.used.add(rid.lower())
                objects[sink] = _Object(sink, paired, loc, None, ())
            else:
                rid = ids.entity(rtype)
                if paired:
                    knob = ids.entity(paired)
                    objects[knob] = _Object(knob, paired, loc, None, ())
            openable = rng.random() < vocab.openable.get(rtype, 0.0)
            receptacles[rid] = _Receptacle(rid, rtype, loc, openable)

    def place(otype: str, forbid_types: Sequence[str] = (), prefer_closed: bool = False) -> _Object:
        options = [
            r for r in receptacles.values()
            if otype in vocab.can_contain.get(r.rtype, ())
            and r.rtype not in forbid_types
            and len(r.contents) < vocab.capacity.get(r.rtype, 3)
        ]
        if not options:
            raise _Resample
        if prefer_closed and any(r.openable for r in options):
            options = [r for r in options if r.openable]
        rec = rng.choice(options)
        oid = ids.entity(otype)
        obj = _Object(oid, otype, rec.location, rec.rid, vocab.object_properties.get(otype, ("pickupable",)))
        rec.contents.append(oid)
        objects[oid] = obj
        return obj

    # -- the lamp --
    if has_lamp:
        holder_type = rng.choice(lamp_holder_types)
        holders = [r for r in receptacles.values() if r.rtype == holder_type]
        rec = rng.choice(holders)
        lamp = ids.entity(vocab.lamp)
        objects[lamp] = _Object(lamp, vocab.lamp, rec.location, rec.rid, ("toggleable",))
        rec.contents.append(lamp)

    # -- targets: never already in a destination-type receptacle; hidden away a third of the time --
    n_targets = rng.randint(2, 3) if task_type == "pick_two_obj_and_place" else rng.randint(1, 2)
    forbid = () if look else (destination,)
    for _ in range(n_targets):
        place(target, forbid, prefer_closed=rng.random() < 0.35)

    # -- distractors (other types; never more target instances) and scenery --
    pool = [o for o in room_spec["objects"] if o != target]
    for _ in range(rng.randint(8, 18)):
        otype = rng.choice(pool)
        try:
            place(otype)
        except _Resample:
            continue
    anchors = [r.location for r in receptacles.values()]
    for otype, (lo, hi) in sorted(room_spec["scenery"].items()):
        for _ in range(rng.randint(lo, hi)):
            oid = ids.entity(otype)
            objects[oid] = _Object(oid, otype, rng.choice(anchors), None, ())

    start = ids.location()
    locations.append(start)
    template = rng.choice(vocab.sentences[task_type])
    sentence = template.format(obj=target.lower(), recep=destination.lower())
    return _Scene(room, task_type, target, destination, sentence, start, receptacles, objects, locations)


# --------------------------------------------------------------------------------------------
# Walkthrough (scripted solver over the scene)
# --------------------------------------------------------------------------------------------


class _Plan:
    def __init__(self, scene: _Scene, names: Mapping[str, str]) -> None:
        self.scene = scene
        self.names = names
        self.at = scene.start
        self.opened: set[str] = set()
        self.commands: list[str] = []

    def name(self, ident: str) -> str:
        return self.names[ident.lower()]

    def go(self, rec: _Receptacle) -> None:
        if self.at != rec.location:
            self.commands.append(f"go to {self.name(rec.rid)}")
            self.at = rec.location

    def open(self, rec: _Receptacle) -> None:
        if rec.openable and rec.rid not in self.opened:
            self.commands.append(f"open {self.name(rec.rid)}")
            self.opened.add(rec.rid)

    def take(self, obj: _Object) -> None:
        assert obj.receptacle is not None
        rec = self.scene.receptacles[obj.receptacle]
        self.go(rec)
        self.open(rec)
        self.commands.append(f"take {self.name(obj.oid)} from {self.name(rec.rid)}")

    def put(self, obj: _Object, rec: _Receptacle) -> None:
        self.go(rec)
        self.open(rec)
        self.commands.append(f"move {self.name(obj.oid)} to {self.name(rec.rid)}")

    def process(self, verb: str, obj: _Object, rec: _Receptacle) -> None:
        self.go(rec)
        self.commands.append(f"{verb} {self.name(obj.oid)} with {self.name(rec.rid)}")


def _solve(rng: random.Random, scene: _Scene, names: Mapping[str, str]) -> list[str]:
    plan = _Plan(scene, names)
    targets = [o for o in scene.objects.values() if o.otype == scene.target and o.receptacle]
    rng.shuffle(targets)
    by_type = lambda t: [r for r in scene.receptacles.values() if r.rtype == t]  # noqa: E731
    if scene.task_type == "look_at_obj_in_light":
        lamp = next(o for o in scene.objects.values() if o.otype == scene.destination)
        assert lamp.receptacle is not None
        plan.take(targets[0])
        plan.go(scene.receptacles[lamp.receptacle])
        plan.commands.append(f"use {plan.name(lamp.oid)}")
        return plan.commands
    destination = rng.choice(by_type(scene.destination))
    appliance = {
        "pick_clean_then_place_in_recep": ("clean", "SinkBasin"),
        "pick_heat_then_place_in_recep": ("heat", "Microwave"),
        "pick_cool_then_place_in_recep": ("cool", "Fridge"),
    }.get(scene.task_type)
    for obj in targets[: 2 if scene.task_type == "pick_two_obj_and_place" else 1]:
        plan.take(obj)
        if appliance:
            plan.process(appliance[0], obj, rng.choice(by_type(appliance[1])))
        plan.put(obj, destination)
    return plan.commands


# --------------------------------------------------------------------------------------------
# PDDL problem
# --------------------------------------------------------------------------------------------

_GOALS = {
    "pick_and_place_simple": """(:goal
    (and
        (exists (?r - receptacle)
            (exists (?o - object)
                (and
                    (inReceptacle ?o ?r)
                    (objectType ?o {obj}Type)
                    (receptacleType ?r {recep}Type)
                )
            )
        )
    )
)""",
    "pick_two_obj_and_place": """(:goal
    (and
        (exists (?r - receptacle)
            (exists (?o1 - object)
                (and
                    (objectType ?o1 {obj}Type)
                    (receptacleType ?r {recep}Type)
                    (inReceptacle ?o1 ?r)
                    (exists (?o2 - object)
                        (and
                            (not (= ?o1 ?o2))
                            (objectType ?o2 {obj}Type)
                            (receptacleType ?r {recep}Type)
                            (inReceptacle ?o2 ?r)
                        )
                    )
                )
            )
        )
    )
)""",
    "look_at_obj_in_light": """(:goal
    (and
        (exists (?ot - object
                 ?r - receptacle
                 ?a - agent
                 ?l - location)
            (and
                (objectType ?ot {recep}Type)
                (toggleable ?ot)
                (isToggled ?ot)
                (receptacleAtLocation ?r ?l)
                (atLocation ?a ?l)
                (inReceptacle ?ot ?r)
            )
        )
        (exists (?o - object
                 ?a - agent)
            (and
                (objectType ?o {obj}Type)
                (holds ?a ?o)
            )
        )
    )
)""",
}
_PROCESSED_GOAL = """(:goal
    (and
        (exists (?r - receptacle)
            (exists (?o - object)
                (and
                    ({able} ?o)
                    (objectType ?o {{obj}}Type)
                    (receptacleType ?r {{recep}}Type)
                    ({state} ?o)
                    (inReceptacle ?o ?r)
                )
            )
        )
    )
)"""
_GOALS["pick_clean_then_place_in_recep"] = _PROCESSED_GOAL.format(able="cleanable", state="isClean")
_GOALS["pick_heat_then_place_in_recep"] = _PROCESSED_GOAL.format(able="heatable", state="isHot")
_GOALS["pick_cool_then_place_in_recep"] = _PROCESSED_GOAL.format(able="coolable", state="isCool")


def _problem(scene: _Scene, vocab: Vocabulary, name: str) -> str:
    ind = "        "
    decl = ["agent1 - agent"]
    decl += [f"{t}Type - otype" for t in vocab.object_types]
    decl += [f"{t}Type - rtype" for t in vocab.receptacle_types]
    decl += [f"{o} - object" for o in sorted(scene.objects)]
    decl += [f"{r} - receptacle" for r in sorted(scene.receptacles)]
    decl += [f"{loc} - location" for loc in sorted(scene.locations)]

    init = [f"(atLocation agent1 {scene.start})"]
    recs = [scene.receptacles[r] for r in sorted(scene.receptacles)]
    objs = [scene.objects[o] for o in sorted(scene.objects)]
    init += [f"(receptacleType {r.rid} {r.rtype}Type)" for r in recs]
    init += [f"(openable {r.rid})" for r in recs if r.openable]
    init += [f"(receptacleAtLocation {r.rid} {r.location})" for r in recs]
    for o in objs:
        init.append(f"(objectType {o.oid} {o.otype}Type)")
        init += [f"({p} {o.oid})" for p in o.properties]
    init += [f"(inReceptacle {o.oid} {o.receptacle})" for o in objs if o.receptacle]
    init += [f"(objectAtLocation {o.oid} {o.location})" for o in objs]
    present = {o.otype for o in objs}  # like the real data: only types present in the scene
    for rtype in sorted({r.rtype for r in recs}):
        allowed = vocab.can_contain.get(rtype, frozenset()) & present
        init += [f"(canContain {rtype}Type {otype}Type)" for otype in sorted(allowed)]
    goal = _GOALS[scene.task_type].format(obj=scene.target, recep=scene.destination)
    return (
        f"(define (problem {name})\n(:domain alfred)\n(:objects\n"
        + "".join(f"{ind}{d}\n" for d in decl)
        + ")\n(:init\n"
        + "".join(f"{ind}{f}\n" for f in init)
        + ")\n"
        + goal
        + "\n)\n"
    )


# --------------------------------------------------------------------------------------------
# Games
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GeneratedGame:
    """One generated game: the ``game.tw-pddl`` JSON plus what the folder name and manifest need."""

    game: dict[str, Any]
    task_type: str
    target: str
    destination: str
    room: str
    sentence: str

    def folder_name(self, index: int) -> str:
        """``<task_type>-<Obj>-None-<Recep>-<index>``, the layout of the real data."""
        return f"{self.task_type}-{self.target}-None-{self.destination}-{index}"


def build_game(rng_or_seed: random.Random | int | str, task_type: str) -> GeneratedGame:
    """Build one solvable game of ``task_type`` (not yet engine-verified; see :func:`verify_game`).

    Args:
        rng_or_seed: a ``random.Random`` (advanced in place) or an int/str seed.
        task_type: one of :data:`TASK_TYPES`.

    Raises:
        ValueError: unknown task type.
        TypeError: ``rng_or_seed`` of the wrong type.
    """
    task_type = _check_task_type(task_type)
    rng = _as_rng(rng_or_seed)
    vocab = load_vocabulary()
    domain, grammar = _logic_files()
    for _ in range(_MAX_SCENE_TRIES):
        try:
            scene = _sample_scene(rng, vocab, task_type)
        except _Resample:
            continue
        every_id = ["agent1", *scene.objects, *scene.receptacles, *scene.locations]
        names = demangled_names(every_id)
        walkthrough = _solve(rng, scene, names)
        name = f"rubricgym_{task_type}_{rng.getrandbits(48):012x}"
        game = {
            "pddl_domain": domain,
            "grammar": grammar.replace("UNKNOWN GOAL", scene.sentence),
            "pddl_problem": _problem(scene, vocab, name),
            "solvable": True,
            "walkthrough": walkthrough,
        }
        return GeneratedGame(game, task_type, scene.target, scene.destination, scene.room, scene.sentence)
    raise RuntimeError(f"could not sample a scene for {task_type} in {_MAX_SCENE_TRIES} tries (vocabulary too tight?)")


def generate_game(rng_or_seed: random.Random | int | str, task_type: str) -> dict[str, Any]:
    """The ``game.tw-pddl`` JSON (as a dict) of one generated game; see :func:`build_game`."""
    return build_game(rng_or_seed, task_type).game


# --------------------------------------------------------------------------------------------
# Verification in the real engine
# --------------------------------------------------------------------------------------------


class Verifier:
    """Replays walkthroughs in the real engine: textworld ``PddlEnv`` wrapped in alfworld's
    ``AlfredDemangler(shuffle=False)`` and ``AlfredInfos``. One instance can verify many games.
    """

    def __init__(self) -> None:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
        from textworld.envs.pddl import PddlEnv

        infos = textworld.EnvInfos(
            won=True, admissible_commands=True, facts=True, extras=["gamefile", "walkthrough"]
        )
        self._env = AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))

    def verify(self, game: Mapping[str, Any], label: str = "game") -> int:
        """Replay ``game["walkthrough"]``; returns its length.

        Raises:
            GameVerificationError: a command was not admissible, the game was won too early,
                or not won after the last command. The message names ``label`` and the step.
        """
        walkthrough = list(game.get("walkthrough") or [])
        if not walkthrough:
            raise GameVerificationError(f"{label}: no walkthrough stored")
        self._env.load(dict(game))
        state = self._env.reset()
        if state["won"]:
            raise GameVerificationError(f"{label}: already won before the first command")
        for step, command in enumerate(walkthrough):
            admissible = state["admissible_commands"]
            if command not in admissible:
                raise GameVerificationError(
                    f"{label}: walkthrough step {step} {command!r} is not admissible; "
                    f"admissible: {sorted(admissible)}"
                )
            state, _, _ = self._env.step(command)
            if state["won"] and step != len(walkthrough) - 1:
                raise GameVerificationError(f"{label}: won early at step {step} {command!r}")
        if not state["won"]:
            raise GameVerificationError(f"{label}: not won after the last walkthrough command")
        return len(walkthrough)


def verify_game(game: Mapping[str, Any] | str | os.PathLike[str], verifier: Verifier | None = None) -> int:
    """Replay a game's stored walkthrough in the real engine (a dict or a ``game.tw-pddl`` path).

    Returns the walkthrough length; raises :class:`GameVerificationError` naming the failing step.
    """
    label = "game"
    if not isinstance(game, Mapping):
        label = str(game)
        try:
            game = json.loads(Path(game).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise GameVerificationError(f"cannot read game file {label}: {exc}") from exc
    return (verifier or Verifier()).verify(game, label)


# --------------------------------------------------------------------------------------------
# The cache
# --------------------------------------------------------------------------------------------


def _canonical_task_types(task_types: Sequence[str] | None) -> tuple[str, ...]:
    if task_types is None:
        return TASK_TYPES
    if isinstance(task_types, str):
        raise TypeError(f"task_types must be a sequence of task-type names, not the string {task_types!r}")
    chosen = list(task_types)
    if not chosen:
        raise ValueError(f"task_types is empty; choose from {', '.join(TASK_TYPES)}")
    for t in chosen:
        _check_task_type(t)
    return tuple(t for t in TASK_TYPES if t in set(chosen))


def default_cache_dir(n: int = 60, seed: int = 0, task_types: Sequence[str] | None = None) -> Path:
    """``$RUBRICGYM_CACHE/alfworld/generated-<seed>-<n>`` (``RUBRICGYM_CACHE`` defaults to
    ``~/.cache/rubricgym``); a subset of task types adds a short hash of their names."""
    root = Path(os.environ.get("RUBRICGYM_CACHE") or Path.home() / ".cache" / "rubricgym").expanduser()
    types = _canonical_task_types(task_types)
    name = f"generated-{seed}-{n}"
    if types != TASK_TYPES:
        name += "-" + hashlib.sha1(",".join(types).encode()).hexdigest()[:8]
    return root / "alfworld" / name


def _game_seed(seed: int, index: int, attempt: int) -> str:
    return f"rubricgym-alfworld:{seed}:{index}:{attempt}"


def _read_manifest(cache: Path) -> dict[str, Any] | None:
    path = cache / MANIFEST_NAME
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _complete(cache: Path, manifest: Mapping[str, Any] | None, expect: Mapping[str, Any]) -> list[Path] | None:
    """The game paths of a finished cache matching ``expect``, else None."""
    if manifest is None or any(manifest.get(k) != v for k, v in expect.items()):
        return None
    games = manifest.get("games") or []
    if len(games) != expect["n"]:
        return None
    paths = []
    for entry in games:
        try:
            path = cache / entry["path"]
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except (OSError, KeyError, TypeError):
            return None
        if digest != entry.get("sha256"):
            return None
        paths.append(path)
    return sorted(paths)


def ensure_generated(
    n: int = 60,
    seed: int = 0,
    cache_dir: Path | None = None,
    task_types: Sequence[str] | None = None,
    *,
    workers: int | None = None,
) -> list[Path]:
    """Sorted paths of ``n`` generated ``game.tw-pddl`` files, generating them on first use.

    Games cycle through the task types (counts differ by at most one), are deterministic in
    ``seed`` (same seed: byte-identical files) and each one's walkthrough is verified in the real
    engine before it is kept. Generation writes into a temporary directory beside the cache and
    renames it into place, so a partly generated cache is never seen; a finished cache is
    recognised by its ``manifest.json`` and reused.

    Args:
        n: number of games (>= 1).
        seed: generator seed (int).
        cache_dir: where the games live (default :func:`default_cache_dir`).
        task_types: subset of :data:`TASK_TYPES` (default: all six).
        workers: processes that build and verify games in parallel (the engine is not
            thread-safe). Default: ``min(4, cpu count)`` for 16 or more games, else 1. The
            files do not depend on it.

    Raises:
        TypeError / ValueError: bad arguments, or ``cache_dir`` exists and is not a generator
            cache (the message names it).

    Example:
        >>> paths = ensure_generated(n=6, seed=0)                        # doctest: +SKIP
        >>> paths[0].parent.parent.name                                  # doctest: +SKIP
        'look_at_obj_in_light-Pillow-None-DeskLamp-5'
    """
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"n must be an int, not {type(n).__name__}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, not {type(seed).__name__}")
    types = _canonical_task_types(task_types)
    if workers is None:
        workers = min(4, os.cpu_count() or 1) if n >= 16 else 1
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir(n, seed, types)
    expect = {"generator_version": GENERATOR_VERSION, "seed": seed, "n": n, "task_types": list(types)}

    if cache.exists():
        if not cache.is_dir():
            raise ValueError(f"ALFWorld game cache {cache} exists and is not a directory")
        manifest = _read_manifest(cache)
        if manifest is None and any(cache.iterdir()):
            raise ValueError(
                f"{cache} exists but is not a generated-games cache (no readable {MANIFEST_NAME}); "
                "choose another cache_dir or remove it"
            )
        if manifest is not None and manifest.get("kind") != "rubricgym-alfworld-generated":
            raise ValueError(f"{cache / MANIFEST_NAME} is not a rubricgym generated-games manifest")
        found = _complete(cache, manifest, expect)
        if found is not None:
            return found
        logger.warning("regenerating the ALFWorld game cache %s (stale or damaged)", cache)

    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{cache.name}.tmp-", dir=cache.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary directory
        entries = _generate_into(tmp, n, seed, types, workers)
        manifest = {"kind": "rubricgym-alfworld-generated", **expect, "games": entries}
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        _publish(tmp, cache)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    found = _complete(cache, _read_manifest(cache), expect)
    if found is None:  # another process published something else meanwhile
        raise RuntimeError(f"the ALFWorld game cache {cache} changed while it was being generated")
    return found


def _publish(tmp: Path, cache: Path) -> None:
    """Move a finished temp cache into place atomically (replacing a stale one of ours)."""
    try:
        os.rename(tmp, cache)
        return
    except OSError:
        if not cache.exists():
            raise
    # The target exists: an empty dir, a stale cache of ours, or one a concurrent process won.
    if _complete(cache, _read_manifest(cache), _read_manifest(tmp) or {}) is not None:
        return  # a concurrent process published the same games; keep theirs
    stale = cache.with_name(f".{cache.name}.stale-{os.getpid()}-{time.monotonic_ns()}")
    os.rename(cache, stale)
    os.rename(tmp, cache)
    shutil.rmtree(stale, ignore_errors=True)


def _generate_into(root: Path, n: int, seed: int, types: Sequence[str], workers: int) -> list[dict[str, Any]]:
    started = time.perf_counter()
    jobs = [(index, types[index % len(types)]) for index in range(n)]
    if workers <= 1 or n < 2:
        entries = _generate_chunk(str(root), seed, jobs)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        chunks = [jobs[k::workers] for k in range(workers) if jobs[k::workers]]
        context = multiprocessing.get_context("spawn")  # never fork a process that runs an engine
        with ProcessPoolExecutor(len(chunks), mp_context=context) as pool:
            parts = pool.map(_generate_chunk, [str(root)] * len(chunks), [seed] * len(chunks), chunks)
            entries = sorted((e for part in parts for e in part), key=lambda e: e["index"])
    elapsed = time.perf_counter() - started
    logger.info(
        "generated and verified %d ALFWorld games in %.1f s (%.0f ms/game, %d worker(s))",
        n, elapsed, 1000 * elapsed / n, workers,
    )
    return entries


def _generate_chunk(root: str, seed: int, jobs: Sequence[tuple[int, str]]) -> list[dict[str, Any]]:
    """Build, verify and write the games ``jobs`` (index, task type) under ``root``."""
    verifier = Verifier()
    entries: list[dict[str, Any]] = []
    for index, task_type in jobs:
        for attempt in range(_MAX_VERIFY_TRIES):
            built = build_game(random.Random(_game_seed(seed, index, attempt)), task_type)
            folder = built.folder_name(index)
            try:
                steps = verifier.verify(built.game, label=f"{folder} (attempt {attempt})")
            except GameVerificationError as exc:
                logger.warning("rejected a generated game: %s", exc)
                continue
            break
        else:
            raise RuntimeError(
                f"no verifiable {task_type} game for index {index} after {_MAX_VERIFY_TRIES} attempts"
            )
        text = json.dumps(built.game, indent=2) + "\n"
        rel = Path(folder) / "trial_0" / GAME_FILE_NAME
        (Path(root) / rel).parent.mkdir(parents=True)
        (Path(root) / rel).write_text(text, encoding="utf-8")
        entries.append({
            "index": index,
            "path": rel.as_posix(),
            "task_type": task_type,
            "target": built.target,
            "destination": built.destination,
            "room": built.room,
            "goal": built.sentence,
            "walkthrough_length": steps,
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        })
    return entries

"""Sampling a room for one task: receptacles at their locations, targets, distractors, scenery.

A scene is pure data (no engine): :func:`sample_scene` draws it from a ``random.Random`` and the
vocabulary; the PDDL writer and the walkthrough solver read it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from agent_envs.alfworld.generator.naming import mangle
from agent_envs.alfworld.generator.vocabulary import Vocabulary

__all__ = ["Resample", "Scene", "SceneObject", "SceneReceptacle", "sample_scene"]


@dataclass
class SceneReceptacle:
    """A receptacle instance at its own location."""

    rid: str
    rtype: str
    location: str
    openable: bool
    contents: list[str] = field(default_factory=list)


@dataclass
class SceneObject:
    """An object instance: in a receptacle, or scenery standing at a location."""

    oid: str
    otype: str
    location: str
    receptacle: str | None  # None: scenery standing at a location
    properties: tuple[str, ...]


@dataclass
class Scene:
    """One sampled room with its task."""

    room: str
    task_type: str
    target: str
    destination: str  # receptacle type, or the lamp type for look_at_obj_in_light
    sentence: str
    start: str
    receptacles: dict[str, SceneReceptacle]
    objects: dict[str, SceneObject]
    locations: list[str]


class Resample(Exception):
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
            ident = mangle(raw) + suffix
            if ident.lower() not in self.used:
                self.used.add(ident.lower())
                return ident

    def location(self) -> str:
        rng = self.rng
        while True:
            x, z, rotation = rng.randint(-14, 14), rng.randint(-2, 20), rng.randint(0, 3)
            horizon = rng.choice((-30, 0, 15, 30, 45, 60))
            raw = f"loc|{x}|{z}|{rotation}|{horizon}"
            ident = mangle(raw)
            if ident not in self.used:
                self.used.add(ident)
                return ident


def sample_scene(rng: random.Random, vocab: Vocabulary, task_type: str) -> Scene:
    """Draw a room that can host ``task_type``; raises :class:`Resample` when it cannot."""
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
            raise Resample
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
    receptacles: dict[str, SceneReceptacle] = {}
    objects: dict[str, SceneObject] = {}
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
                objects[sink] = SceneObject(sink, paired, loc, None, ())
            else:
                rid = ids.entity(rtype)
                if paired:
                    knob = ids.entity(paired)
                    objects[knob] = SceneObject(knob, paired, loc, None, ())
            openable = rng.random() < vocab.openable.get(rtype, 0.0)
            receptacles[rid] = SceneReceptacle(rid, rtype, loc, openable)

    def place(
        otype: str, forbid_types: Sequence[str] = (), prefer_closed: bool = False
    ) -> SceneObject:
        options = [
            r
            for r in receptacles.values()
            if otype in vocab.can_contain.get(r.rtype, ())
            and r.rtype not in forbid_types
            and len(r.contents) < vocab.capacity.get(r.rtype, 3)
        ]
        if not options:
            raise Resample
        if prefer_closed and any(r.openable for r in options):
            options = [r for r in options if r.openable]
        rec = rng.choice(options)
        oid = ids.entity(otype)
        obj = SceneObject(
            oid, otype, rec.location, rec.rid, vocab.object_properties.get(otype, ("pickupable",))
        )
        rec.contents.append(oid)
        objects[oid] = obj
        return obj

    # -- the lamp --
    if has_lamp:
        holder_type = rng.choice(lamp_holder_types)
        holders = [r for r in receptacles.values() if r.rtype == holder_type]
        rec = rng.choice(holders)
        lamp = ids.entity(vocab.lamp)
        objects[lamp] = SceneObject(lamp, vocab.lamp, rec.location, rec.rid, ("toggleable",))
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
        except Resample:
            continue
    anchors = [r.location for r in receptacles.values()]
    for otype, (lo, hi) in sorted(room_spec["scenery"].items()):
        for _ in range(rng.randint(lo, hi)):
            oid = ids.entity(otype)
            objects[oid] = SceneObject(oid, otype, rng.choice(anchors), None, ())

    start = ids.location()
    locations.append(start)
    template = rng.choice(vocab.sentences[task_type])
    sentence = template.format(obj=target.lower(), recep=destination.lower())
    return Scene(
        room, task_type, target, destination, sentence, start, receptacles, objects, locations
    )

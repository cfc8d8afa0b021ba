"""Sampling a room for one task: receptacles at their locations, targets, distractors, scenery.

A scene is pure data (no engine): :func:`sample_scene` draws it from a ``random.Random`` and the
vocabulary; the PDDL writer and the walkthrough solver read it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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


#: The appliance each task needs in the room.
_REQUIRED_RECEPTACLE = {
    "pick_clean_then_place_in_recep": "SinkBasin",
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
}


@dataclass
class _Room:
    """A room being filled: its receptacles, objects and locations, drawn from one rng."""

    rng: random.Random
    vocab: Vocabulary
    ids: _Ids
    receptacles: dict[str, SceneReceptacle] = field(default_factory=dict)
    objects: dict[str, SceneObject] = field(default_factory=dict)
    locations: list[str] = field(default_factory=list)

    def add_receptacles(self, counts: dict[str, int]) -> None:
        """``counts[rtype]`` receptacles of each type (sorted by type), each at its own location."""
        for rtype in sorted(counts):
            for _ in range(counts[rtype]):
                paired = self.vocab.paired_scenery.get(rtype)
                loc = self.ids.location()
                self.locations.append(loc)
                if paired in ("Sink", "Bathtub"):
                    # ALFRED names a basin after its sink: Sink_bar_<xyz>_bar_SinkBasin displays as
                    # "sinkbasin N" (the demangler appends "basin"); the sink itself is scenery.
                    sink = self.ids.entity(paired)
                    rid = f"{sink}_bar_{rtype}"
                    self.ids.used.add(rid.lower())
                    self.objects[sink] = SceneObject(sink, paired, loc, None, ())
                else:
                    rid = self.ids.entity(rtype)
                    if paired:
                        knob = self.ids.entity(paired)
                        self.objects[knob] = SceneObject(knob, paired, loc, None, ())
                openable = self.rng.random() < self.vocab.openable.get(rtype, 0.0)
                self.receptacles[rid] = SceneReceptacle(rid, rtype, loc, openable)

    def place(self, otype: str, forbid_types: Sequence[str] = (), prefer_closed: bool = False) -> SceneObject:
        """One ``otype`` object in a receptacle that can take it; :class:`Resample` when none can."""
        vocab = self.vocab
        options = [
            r
            for r in self.receptacles.values()
            if otype in vocab.can_contain.get(r.rtype, ())
            and r.rtype not in forbid_types
            and len(r.contents) < vocab.capacity.get(r.rtype, 3)
        ]
        if not options:
            raise Resample
        if prefer_closed and any(r.openable for r in options):
            options = [r for r in options if r.openable]
        rec = self.rng.choice(options)
        oid = self.ids.entity(otype)
        obj = SceneObject(
            oid, otype, rec.location, rec.rid, vocab.object_properties.get(otype, ("pickupable",))
        )
        rec.contents.append(oid)
        self.objects[oid] = obj
        return obj

    def add_lamp(self, holder_types: Sequence[str]) -> None:
        holder_type = self.rng.choice(holder_types)
        holders = [r for r in self.receptacles.values() if r.rtype == holder_type]
        rec = self.rng.choice(holders)
        lamp = self.ids.entity(self.vocab.lamp)
        self.objects[lamp] = SceneObject(lamp, self.vocab.lamp, rec.location, rec.rid, ("toggleable",))
        rec.contents.append(lamp)

    def add_distractors(self, pool: Sequence[str]) -> None:
        """8-18 tries at placing an object of a random type of ``pool`` (full rooms skip some)."""
        for _ in range(self.rng.randint(8, 18)):
            otype = self.rng.choice(pool)
            try:
                self.place(otype)
            except Resample:
                continue

    def add_scenery(self, scenery: Mapping[str, tuple[int, int]]) -> None:
        """Scenery objects standing next to random receptacles."""
        anchors = [r.location for r in self.receptacles.values()]
        for otype, (lo, hi) in sorted(scenery.items()):
            for _ in range(self.rng.randint(lo, hi)):
                oid = self.ids.entity(otype)
                self.objects[oid] = SceneObject(oid, otype, self.rng.choice(anchors), None, ())


def _choose_task(rng: random.Random, vocab: Vocabulary, task_type: str) -> tuple[str, Mapping[str, Any], str, str]:
    """(room, its spec, target type, destination type) of a ``task_type`` task; :class:`Resample`
    when the drawn target fits no destination."""
    rooms = sorted(vocab.tasks[task_type])
    room = rng.choice(rooms)
    room_spec = vocab.rooms[room]
    task_spec = vocab.tasks[task_type][room]
    target = rng.choice(task_spec["targets"])
    if task_type == "look_at_obj_in_light":
        return room, room_spec, target, vocab.lamp
    options = [d for d in task_spec["destinations"] if target in vocab.can_contain.get(d, ())]
    if not options:
        raise Resample
    return room, room_spec, target, rng.choice(options)


def _receptacle_counts(
    rng: random.Random, room_spec: Mapping[str, Any], task_type: str, destination: str
) -> tuple[dict[str, int], list[str], bool]:
    """(receptacles per type, lamp-holder types present, whether the room has a lamp): the room's
    random counts, raised to what the task needs (its appliance, destination and lamp holder)."""
    look = task_type == "look_at_obj_in_light"
    counts = {rtype: rng.randint(lo, hi) for rtype, (lo, hi) in room_spec["receptacles"].items()}
    required = _REQUIRED_RECEPTACLE.get(task_type)
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
    return counts, lamp_holder_types, has_lamp


def sample_scene(rng: random.Random, vocab: Vocabulary, task_type: str) -> Scene:
    """Draw a room that can host ``task_type``; raises :class:`Resample` when it cannot."""
    room, room_spec, target, destination = _choose_task(rng, vocab, task_type)
    counts, lamp_holder_types, has_lamp = _receptacle_counts(rng, room_spec, task_type, destination)
    built = _Room(rng, vocab, _Ids(rng))
    built.add_receptacles(counts)
    if has_lamp:
        built.add_lamp(lamp_holder_types)

    # -- targets: never already in a destination-type receptacle; hidden away a third of the time --
    look = task_type == "look_at_obj_in_light"
    n_targets = rng.randint(2, 3) if task_type == "pick_two_obj_and_place" else rng.randint(1, 2)
    forbid = () if look else (destination,)
    for _ in range(n_targets):
        built.place(target, forbid, prefer_closed=rng.random() < 0.35)

    # -- distractors (other types; never more target instances) and scenery --
    built.add_distractors([o for o in room_spec["objects"] if o != target])
    built.add_scenery(room_spec["scenery"])

    start = built.ids.location()
    built.locations.append(start)
    template = rng.choice(vocab.sentences[task_type])
    sentence = template.format(obj=target.lower(), recep=destination.lower())
    return Scene(
        room, task_type, target, destination, sentence, start, built.receptacles, built.objects,
        built.locations,
    )

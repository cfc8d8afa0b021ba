"""A scripted solver: the walkthrough of a scene, in the engine's command language."""

from __future__ import annotations

import random
from collections.abc import Mapping

from agent_envs.alfworld.generator.scenes import Scene, SceneObject, SceneReceptacle

__all__ = ["solve"]


class _Plan:
    def __init__(self, scene: Scene, names: Mapping[str, str]) -> None:
        self.scene = scene
        self.names = names
        self.at = scene.start
        self.opened: set[str] = set()
        self.commands: list[str] = []

    def name(self, ident: str) -> str:
        return self.names[ident.lower()]

    def go(self, rec: SceneReceptacle) -> None:
        if self.at != rec.location:
            self.commands.append(f"go to {self.name(rec.rid)}")
            self.at = rec.location

    def open(self, rec: SceneReceptacle) -> None:
        if rec.openable and rec.rid not in self.opened:
            self.commands.append(f"open {self.name(rec.rid)}")
            self.opened.add(rec.rid)

    def take(self, obj: SceneObject) -> None:
        assert obj.receptacle is not None
        rec = self.scene.receptacles[obj.receptacle]
        self.go(rec)
        self.open(rec)
        self.commands.append(f"take {self.name(obj.oid)} from {self.name(rec.rid)}")

    def put(self, obj: SceneObject, rec: SceneReceptacle) -> None:
        self.go(rec)
        self.open(rec)
        self.commands.append(f"move {self.name(obj.oid)} to {self.name(rec.rid)}")

    def process(self, verb: str, obj: SceneObject, rec: SceneReceptacle) -> None:
        self.go(rec)
        self.commands.append(f"{verb} {self.name(obj.oid)} with {self.name(rec.rid)}")


def solve(rng: random.Random, scene: Scene, names: Mapping[str, str]) -> list[str]:
    """Commands that win ``scene`` from its start (``names``: id -> display name)."""
    plan = _Plan(scene, names)
    targets = [o for o in scene.objects.values() if o.otype == scene.target and o.receptacle]
    rng.shuffle(targets)
    by_type = lambda t: [r for r in scene.receptacles.values() if r.rtype == t]
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

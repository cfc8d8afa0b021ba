"""Sokoban's rubric channels, dependency template and matching keys (SPEC §3).

Channels, after each transition:

========================  ======  =====  ==============================================
``box_pushable``          ``P``   bool   the player stands next to a box off its target
                                         and pushing it moves it one push closer to a
                                         target (:func:`~agent_envs.sokoban.room.push_distances`)
``boxes_on_target``       ``B``   count  boxes on targets
``box_deadlocked``        ``D``   bool   a box off its target is on a dead square: the
                                         level cannot be solved any more
``solved``                ``S``   bool   every box is on a target
``invalid_actions``       ``X``   count  invalid actions so far (diagnostic)
========================  ======  =====  ==============================================

The template: placing a box needs a box to have been pushable toward a target (E P→B),
solving needs the boxes on their targets now (C B→S), and a dead-locked box blocks all three
(so D is never a frontier goal, and nothing is enabled while it holds: the level is lost).

Keys (SPEC §3.4): ``exact`` is the state itself (player and boxes); ``coarse`` is what the
channels say plus the boxes' summed push distance to the targets and whether the player
touches a box.

Example:
    >>> from agent_envs.sokoban.room import parse_grid
    >>> room, state = parse_grid("######\\n#PX_O#\\n######")
    >>> status(room, state, invalid=0)
    {'box_pushable': True, 'boxes_on_target': 0, 'box_deadlocked': False, 'solved': False, 'invalid_actions': 0}
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from agent_envs.sokoban.room import ACTIONS, Room, State, push_distances
from rubrics.channels import Channel

__all__ = ["CHANNELS", "TEMPLATES", "coarse_key", "exact_key", "status"]

CHANNELS: tuple[Channel, ...] = (
    Channel("box_pushable", "P", "bool", False,
            "the player is next to a box off its target and pushing it brings it one push closer to a target"),
    Channel("boxes_on_target", "B", "count", False, "number of boxes on targets"),
    Channel("box_deadlocked", "D", "bool", False,
            "a box off its target is on a dead square (no pushes can bring it to a target)"),
    Channel("solved", "S", "bool", False, "every box is on a target"),
    Channel("invalid_actions", "X", "count", True, "number of invalid actions so far"),
)

#: The dependency template, as the mapping a TOML file would parse to (rubrics.parse_template).
TEMPLATES: dict[str, dict[str, Any]] = {
    "sokoban": {
        "env": "sokoban",
        "family": "sokoban",
        "description": "push a box toward a target (P), boxes on targets (B), solved (S); a dead-locked box (D) "
                       "blocks progress",
        "edges": [
            {"relation": "requires_ever", "from": "box_pushable", "to": "boxes_on_target"},
            {"relation": "requires_current", "from": "boxes_on_target", "to": "solved"},
            {"relation": "blocks", "from": "box_deadlocked", "to": ["box_pushable", "boxes_on_target", "solved"]},
        ],
    },
}

_DISTANCES: dict[Room, dict[tuple[int, int], int]] = {}


def _distances(room: Room) -> dict[tuple[int, int], int]:
    """:func:`push_distances` of ``room``, memoised for the last few rooms of the process."""
    found = _DISTANCES.get(room)
    if found is None:
        if len(_DISTANCES) > 256:
            _DISTANCES.clear()
        found = _DISTANCES[room] = push_distances(room)
    return found


def _pushable(room: Room, state: State) -> bool:
    dist = _distances(room)
    for dr, dc in ACTIONS.values():
        box = (state.player[0] + dr, state.player[1] + dc)
        if box not in state.boxes or box in room.targets:
            continue
        to = (box[0] + dr, box[1] + dc)
        if room.free(to) and to not in state.boxes and to in dist and dist[to] < dist.get(box, 1 << 30):
            return True
    return False


def status(room: Room, state: State, invalid: int) -> dict[str, Any]:
    """The channels of ``state`` (with ``invalid`` invalid actions so far)."""
    on = sum(b in room.targets for b in state.boxes)
    return {
        "box_pushable": _pushable(room, state),
        "boxes_on_target": on,
        "box_deadlocked": any(b in room.dead for b in state.boxes),
        "solved": on == len(state.boxes),
        "invalid_actions": int(invalid),
    }


def exact_key(state: State) -> tuple[Hashable, ...]:
    """``(player, boxes)``: the whole state."""
    return (state.player, state.boxes)


def coarse_key(room: Room, state: State, channels: Mapping[str, Any]) -> tuple[Hashable, ...]:
    """``(boxes on target, pushable, dead-locked, summed push distance, player touches a box)``."""
    dist = _distances(room)
    far = sum(dist.get(b, len(dist) + 1) for b in state.boxes)
    touching = any((state.player[0] + dr, state.player[1] + dc) in state.boxes for dr, dc in ACTIONS.values())
    return (channels["boxes_on_target"], channels["box_pushable"], channels["box_deadlocked"], far, touching)

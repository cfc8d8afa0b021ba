"""What an agent can read off a Sokoban observation: per-move features of the text grid.

The observation is the whole grid (:func:`~agent_envs.sokoban.room.render_text`), so an
agent that reads its prompt sees where the player, the boxes and the targets are.
:func:`grid_features` parses that text (:func:`~agent_envs.sokoban.room.parse_grid`) and
nothing else — no engine state, no ``info`` — and names, for every candidate move, what the
grid says the move would do.  The arena's linear policy adds them to its own features
(:attr:`agent_envs.family.Family.observation_features`); the names carry no direction, so a
weight learned for "push a box closer to a target" holds for every direction and level.

For a move (``d`` = the cell the player steps to, ``b`` = the cell behind it):

* ``sk|wall``: ``d`` is a wall (nothing happens); ``sk|stuck``: ``d`` holds a box and ``b``
  is a wall or another box (nothing happens); ``sk|walk``: the player steps onto ``d``;
  ``sk|push``: the box on ``d`` moves to ``b``.
* A push also gets ``sk|box_closer`` / ``sk|box_level`` / ``sk|box_farther`` (the pushed
  box's Manhattan distance to the nearest *free* target — one without another box on it —
  falls / stays / grows), ``sk|on_target`` / ``sk|off_target`` (the box reaches / leaves a
  target) and ``sk|dead`` (the box ends in a corner — a wall above or below *and* a wall to a
  side — that is not a target: it can never be moved onto one).
* A walk also gets ``sk|near_closer`` / ``sk|near_farther`` (the player's Manhattan distance
  to the nearest box not on a target falls / grows), ``sk|spot_closer`` / ``sk|spot_farther``
  (the player's walking distance, boxes blocking, to the nearest *push spot* falls / grows;
  a push spot is a free cell from which one push moves a box not on a target closer to a
  free target) and ``sk|at_spot`` (the player ends on a push spot).

Every feature is 1.0 when present and absent otherwise.

Example:
    >>> grid = "#####\\n#PXO#\\n#####"
    >>> feats = grid_features(grid, ("right", "left"))
    >>> sorted(feats[0]), sorted(feats[1])
    (['sk|box_closer', 'sk|on_target', 'sk|push'], ['sk|wall'])
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Sequence

from agent_envs.sokoban.room import ACTIONS, Room, State, parse_grid

__all__ = ["grid_features"]

Cell = tuple[int, int]


def grid_features(observation: str, actions: Sequence[str]) -> list[dict[str, float]]:
    """Named features of every move in ``actions``, read off the grid ``observation`` shows
    (see the module docstring).  An action that is not a move, or an observation that is not a
    grid, gets no feature (empty dicts): the policy then scores it by its other features."""
    return [dict(f) for f in _cached(str(observation), tuple(str(a) for a in actions))]


@functools.lru_cache(maxsize=1 << 14)
def _cached(observation: str, actions: tuple[str, ...]) -> tuple[tuple[tuple[str, float], ...], ...]:
    try:
        room, state = parse_grid(observation)
    except ValueError:
        return tuple(() for _ in actions)
    spots = _push_spots(room, state)
    here = _walk_distance(room, state, spots)
    out = []
    for action in actions:
        names = _move(room, state, action, spots, here) if action in ACTIONS else []
        out.append(tuple((name, 1.0) for name in names))
    return tuple(out)


def _add(a: Cell, d: Cell) -> Cell:
    return a[0] + d[0], a[1] + d[1]


def _manhattan(a: Cell, cells: Sequence[Cell] | frozenset[Cell]) -> int | None:
    return min((abs(a[0] - c[0]) + abs(a[1] - c[1]) for c in cells), default=None)


def _free_targets(room: Room, boxes: Sequence[Cell], box: Cell) -> frozenset[Cell]:
    """Targets not holding a box other than ``box``."""
    return frozenset(t for t in room.targets if t == box or t not in boxes)


def _open(room: Room, state: State, cell: Cell) -> bool:
    """Free floor without a box."""
    return room.free(cell) and cell not in state.boxes


def _corner(room: Room, cell: Cell) -> bool:
    """A wall above or below and a wall to the left or right."""
    walled = {name: not room.free(_add(cell, d)) for name, d in ACTIONS.items()}
    return (walled["up"] or walled["down"]) and (walled["left"] or walled["right"])


def _push_spots(room: Room, state: State) -> frozenset[Cell]:
    """Free cells from which one push moves a box not on a target closer to a free target."""
    spots = set()
    for box in state.boxes:
        if box in room.targets:
            continue
        targets = _free_targets(room, state.boxes, box)
        before = _manhattan(box, targets)
        for d in ACTIONS.values():
            to, stand = _add(box, d), _add(box, (-d[0], -d[1]))
            if before is not None and _open(room, state, to) and _open(room, state, stand) \
                    and _manhattan(to, targets) < before:
                spots.add(stand)
    return frozenset(spots)


def _walk_distance(room: Room, state: State, spots: frozenset[Cell], start: Cell | None = None) -> int | None:
    """Fewest player steps (boxes block) from ``start`` (the player) to a push spot."""
    start = state.player if start is None else start
    if not spots:
        return None
    seen, todo = {start: 0}, deque([start])
    while todo:
        cell = todo.popleft()
        if cell in spots:
            return seen[cell]
        for d in ACTIONS.values():
            nxt = _add(cell, d)
            if nxt not in seen and _open(room, state, nxt):
                seen[nxt] = seen[cell] + 1
                todo.append(nxt)
    return None


def _move(room: Room, state: State, action: str, spots: frozenset[Cell], here: int | None) -> list[str]:
    d = ACTIONS[action]
    to = _add(state.player, d)
    if not room.free(to):
        return ["sk|wall"]
    if to in state.boxes:
        beyond = _add(to, d)
        if not _open(room, state, beyond):
            return ["sk|stuck"]
        return ["sk|push", *_push(room, state, to, beyond)]
    return ["sk|walk", *_walk(room, state, to, spots, here)]


def _push(room: Room, state: State, box: Cell, to: Cell) -> list[str]:
    targets = _free_targets(room, state.boxes, box)
    before, after = _manhattan(box, targets), _manhattan(to, targets)
    names = [] if before is None else [
        "sk|box_closer" if after < before else "sk|box_farther" if after > before else "sk|box_level"]
    if to in room.targets and box not in room.targets:
        names.append("sk|on_target")
    if box in room.targets and to not in room.targets:
        names.append("sk|off_target")
    if to not in room.targets and _corner(room, to):
        names.append("sk|dead")
    return names


def _walk(room: Room, state: State, to: Cell, spots: frozenset[Cell], here: int | None) -> list[str]:
    names = []
    loose = [b for b in state.boxes if b not in room.targets]
    before, after = _manhattan(state.player, loose), _manhattan(to, loose)
    if before is not None and after != before:
        names.append("sk|near_closer" if after < before else "sk|near_farther")
    there = _walk_distance(room, state, spots, to)
    if here is not None and there is not None and there != here:
        names.append("sk|spot_closer" if there < here else "sk|spot_farther")
    if to in spots:
        names.append("sk|at_spot")
    return names

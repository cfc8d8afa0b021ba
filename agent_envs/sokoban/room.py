"""Sokoban rooms: generation by reverse play, the solver, dead squares and the text and image views.

A :class:`Room` is the fixed layout (walls, floor, targets) of a level; a :class:`State` is
where the player and the boxes are.  :func:`generate` builds a level clean-room in three
steps, each drawn from one ``random.Random`` seeded with an explicit integer (the same level
on every machine and Python version):

1. **Topology**: the border is wall; a random walk through the interior carves the floor
   for ``1.7 * (height + width)`` steps, opening a random small shape (a cell, a pair, an L or
   a 2x2 block) at each; it turns with probability 0.35 at each step.
2. **Targets and player**: ``num_boxes`` targets and the player on distinct floor cells.
3. **Reverse play**: the boxes start on their targets and the player *pulls* them: a
   breadth-first search over the reversed moves (a move, or a move that drags the box behind
   the player along), to at most ``search_depth`` moves.  Among the states it reaches, the
   level takes one whose boxes lie farthest (summed Manhattan distance to the nearest target)
   from their targets and, of those, the most reversed moves away; ties drawn at random.  A
   room whose boxes cannot get 2 cells away is dropped for a new topology.  Since every reversed move is a legal forward move played backwards,
   the level is solvable in at most that many moves; :func:`solve` then finds a shortest
   solution by breadth-first search over forward states (the expert's plan).

A box not on a target on a *dead square* — a cell from which no sequence of pushes can bring
a box to any target, even on an otherwise empty floor — can never be placed again
(:func:`dead_squares`, the classic "simple deadlock").

Example:
    >>> level = generate(seed=0, index=3)
    >>> plan = solve(level.room, level.start)
    >>> end = level.start
    >>> for action in plan:
    ...     end, _moved, _pushed = step(level.room, end, action)
    >>> is_solved(level.room, end), len(plan) <= 30
    (True, True)
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = [
    "ACTIONS",
    "LEGEND",
    "Level",
    "Room",
    "SokobanGenerationError",
    "State",
    "dead_squares",
    "generate",
    "is_solved",
    "parse_grid",
    "render_rgb",
    "render_text",
    "solve",
    "step",
]

Cell = tuple[int, int]

#: Action name -> (row, column) step.
ACTIONS: dict[str, Cell] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

#: Symbol -> meaning of the text grid (as verl-agent's text mode draws it).
LEGEND: dict[str, str] = {
    "#": "wall", "_": "floor", "O": "target", "√": "box on target", "X": "box", "P": "player",
    "S": "player on target",
}

#: Most search states of one generation or solution (a bound on time and memory).
MAX_STATES = 2_000_000


class SokobanGenerationError(RuntimeError):
    """No level with the asked-for parameters was found (too small a room for the boxes)."""


@dataclass(frozen=True)
class Room:
    """A level's fixed layout: ``walls`` (True: wall) and the ``targets``."""

    walls: tuple[tuple[bool, ...], ...]
    targets: frozenset[Cell]

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.walls), len(self.walls[0])

    def free(self, cell: Cell) -> bool:
        """Inside the room and not a wall."""
        r, c = cell
        h, w = self.shape
        return 0 <= r < h and 0 <= c < w and not self.walls[r][c]

    @cached_property
    def dead(self) -> frozenset[Cell]:
        """:func:`dead_squares` of this room (computed once)."""
        return dead_squares(self)


@dataclass(frozen=True)
class State:
    """Where the player and the boxes are (boxes as a sorted tuple: states compare by value)."""

    player: Cell
    boxes: tuple[Cell, ...]


@dataclass(frozen=True)
class Level:
    """A generated level: its room, its start and how it was made (depth of the reverse play)."""

    room: Room
    start: State
    reverse_moves: int


def _add(a: Cell, d: Cell) -> Cell:
    return a[0] + d[0], a[1] + d[1]


def step(room: Room, state: State, action: str) -> tuple[State, bool, tuple[Cell, Cell] | None]:
    """Play ``action`` (a key of :data:`ACTIONS`): ``(next state, the player moved, (box from,
    box to) when a box was pushed)``.  Walking into a wall, or pushing a box into a wall or
    another box, changes nothing."""
    d = ACTIONS[action]
    nxt = _add(state.player, d)
    if not room.free(nxt):
        return state, False, None
    if nxt not in state.boxes:
        return State(nxt, state.boxes), True, None
    beyond = _add(nxt, d)
    if not room.free(beyond) or beyond in state.boxes:
        return state, False, None
    boxes = tuple(sorted(beyond if b == nxt else b for b in state.boxes))
    return State(nxt, boxes), True, (nxt, beyond)


def is_solved(room: Room, state: State) -> bool:
    """Every box is on a target."""
    return all(b in room.targets for b in state.boxes)


def dead_squares(room: Room) -> frozenset[Cell]:
    """Free cells from which a lone box can never be pushed onto a target.

    Pulling a box away from every target (the player stands where the box moves to, and one
    cell further is free for them) reaches exactly the cells a box can be pushed back from;
    every other free cell is dead.
    """
    live = set(room.targets)
    todo = deque(room.targets)
    while todo:
        box = todo.popleft()
        for d in ACTIONS.values():
            to, player = _add(box, d), _add(box, (2 * d[0], 2 * d[1]))
            if room.free(to) and room.free(player) and to not in live:
                live.add(to)
                todo.append(to)
    h, w = room.shape
    return frozenset((r, c) for r in range(h) for c in range(w) if room.free((r, c)) and (r, c) not in live)


def push_distances(room: Room) -> dict[Cell, int]:
    """Fewest pushes of a lone box from each live cell to its nearest target (player moves free)."""
    dist = {t: 0 for t in room.targets}
    todo = deque(room.targets)
    while todo:
        box = todo.popleft()
        for d in ACTIONS.values():
            to, player = _add(box, d), _add(box, (2 * d[0], 2 * d[1]))
            if room.free(to) and room.free(player) and to not in dist:
                dist[to] = dist[box] + 1
                todo.append(to)
    return dist


def solve(room: Room, start: State, max_states: int = MAX_STATES) -> list[str]:
    """A shortest plan (action names) from ``start`` to a solved state (``[]`` if solved).

    Raises:
        ValueError: the level has no solution (or needs more than ``max_states`` states).
    """
    if is_solved(room, start):
        return []
    parent: dict[State, tuple[State, str] | None] = {start: None}
    todo = deque([start])
    while todo:
        state = todo.popleft()
        for action in ACTIONS:
            nxt, moved, pushed = step(room, state, action)
            if not moved or nxt in parent or (pushed and pushed[1] in room.dead):
                continue
            parent[nxt] = (state, action)
            if is_solved(room, nxt):
                return _path(parent, nxt)
            if len(parent) > max_states:
                raise ValueError(f"no solution within {max_states} states")
            todo.append(nxt)
    raise ValueError("the level has no solution")


def _path(parent: dict[State, tuple[State, str] | None], end: State) -> list[str]:
    out: list[str] = []
    link = parent[end]
    while link is not None:
        state, action = link
        out.append(action)
        link = parent[state]
    return out[::-1]


# ------------------------------------------------------------------------------- generation


#: The shapes the carving walk opens around its cell (offsets): a cell, a pair, an L or a block.
_MASKS: tuple[tuple[Cell, ...], ...] = (
    ((0, 0),), ((0, 0), (0, 1)), ((0, 0), (1, 0)), ((0, 0), (0, 1), (1, 0)), ((0, 0), (0, 1), (1, 0), (1, 1)),
)


def _topology(rng: random.Random, height: int, width: int) -> list[list[bool]]:
    walls = [[True] * width for _ in range(height)]
    r, c = rng.randrange(1, height - 1), rng.randrange(1, width - 1)
    dirs = list(ACTIONS.values())
    d = rng.choice(dirs)
    for _ in range(int(1.7 * (height + width))):
        for dr, dc in rng.choice(_MASKS):
            if 1 <= r + dr < height - 1 and 1 <= c + dc < width - 1:
                walls[r + dr][c + dc] = False
        if rng.random() < 0.35:
            d = rng.choice(dirs)
        nr, nc = r + d[0], c + d[1]
        if 1 <= nr < height - 1 and 1 <= nc < width - 1:
            r, c = nr, nc
    return walls


def _reverse_moves(room: Room, state: State) -> Iterable[State]:
    """The states one reversed move before ``state``: the player steps back, dragging along a
    box that was in front of them (or not)."""
    for d in ACTIONS.values():
        back = _add(state.player, d)
        if not room.free(back) or back in state.boxes:
            continue
        yield State(back, state.boxes)
        front = _add(state.player, (-d[0], -d[1]))
        if front in state.boxes:
            yield State(back, tuple(sorted(state.player if b == front else b for b in state.boxes)))


def _reverse_play(rng: random.Random, room: Room, player: Cell, depth: int,
                  within: int) -> tuple[State, int] | None:
    start = State(player, tuple(sorted(room.targets)))
    seen = {start: 0}
    todo = deque([start])
    while todo:
        state = todo.popleft()
        if seen[state] >= depth:
            continue
        for prev in _reverse_moves(room, state):
            if prev not in seen and len(seen) < MAX_STATES:
                seen[prev] = seen[state] + 1
                todo.append(prev)
    targets = sorted(room.targets)

    def spread(s: State) -> int:
        return sum(min(abs(b[0] - t[0]) + abs(b[1] - t[1]) for t in targets) for b in s.boxes)

    scored = [((spread(s), moves), s) for s, moves in seen.items() if moves <= within and spread(s) >= 2]
    if not scored:
        return None
    best = max(score for score, _s in scored)
    choices = sorted((s for score, s in scored if score == best), key=lambda s: (s.player, s.boxes))
    chosen = choices[rng.randrange(len(choices))]
    return chosen, seen[chosen]


def generate(seed: int = 0, index: int = 0, *, dim: tuple[int, int] = (6, 6), num_boxes: int = 1,
             search_depth: int = 30, max_solution: int | None = None, max_tries: int = 200) -> Level:
    """The level ``index`` of generator ``seed``: a room of ``dim`` (border walls included) with
    ``num_boxes`` boxes, made by reverse play of at most ``search_depth`` moves (so solvable in
    at most that many moves); with ``max_solution``, a state at most that many reversed moves
    from the solution is taken (solvable in at most ``max_solution`` moves: an environment
    passes its horizon).

    Raises:
        ValueError: a bad parameter.
        SokobanGenerationError: no level was found in ``max_tries`` topologies.
    """
    height, width = dim
    if height < 3 or width < 3 or height * width > 400:
        raise ValueError(f"dim must be at least 3x3 and at most 400 cells, got {dim}")
    if num_boxes < 1 or search_depth < 1 or seed < 0 or index < 0 or (max_solution is not None and max_solution < 1):
        raise ValueError("num_boxes, search_depth and max_solution must be >= 1, seed and index >= 0")
    within = search_depth if max_solution is None else min(search_depth, max_solution)
    rng = random.Random((int(seed) << 32) | int(index))
    for _ in range(max_tries):
        walls = _topology(rng, height, width)
        floor = [(r, c) for r in range(height) for c in range(width) if not walls[r][c]]
        if len(floor) < num_boxes + 2:
            continue
        cells = rng.sample(floor, num_boxes + 1)
        room = Room(tuple(map(tuple, walls)), frozenset(cells[:num_boxes]))
        found = _reverse_play(rng, room, cells[-1], search_depth, within)
        if found is not None:
            return Level(room, found[0], found[1])
    raise SokobanGenerationError(f"no {height}x{width} level with {num_boxes} box(es) in {max_tries} tries")


# ------------------------------------------------------------------------------- views


def render_text(room: Room, state: State) -> str:
    """The grid, one line per row, in the symbols of :data:`LEGEND`."""
    rows = []
    for r, line in enumerate(room.walls):
        out = []
        for c, wall in enumerate(line):
            cell, target = (r, c), (r, c) in room.targets
            if wall:
                out.append("#")
            elif cell in state.boxes:
                out.append("√" if target else "X")
            elif cell == state.player:
                out.append("S" if target else "P")
            else:
                out.append("O" if target else "_")
        rows.append("".join(out))
    return "\n".join(rows)


def parse_grid(text: str) -> tuple[Room, State]:
    """The room and state a :func:`render_text` grid shows.

    Raises:
        ValueError: ragged rows, an unknown symbol, not exactly one player, or boxes and
            targets that differ in number.
    """
    rows = text.strip("\n").split("\n")
    if not rows or len({len(r) for r in rows}) != 1:
        raise ValueError("a Sokoban grid has rows of equal length")
    walls, targets, boxes, players = [], set(), [], []
    for r, line in enumerate(rows):
        walls.append(tuple(ch == "#" for ch in line))
        for c, ch in enumerate(line):
            if ch not in LEGEND:
                raise ValueError(f"unknown symbol {ch!r} at row {r}, column {c}")
            if ch in "O√S":
                targets.add((r, c))
            if ch in "X√":
                boxes.append((r, c))
            if ch in "PS":
                players.append((r, c))
    if len(players) != 1 or len(boxes) != len(targets) or not boxes:
        raise ValueError("a Sokoban grid has one player and as many boxes as targets (at least one)")
    return Room(tuple(walls), frozenset(targets)), State(players[0], tuple(sorted(boxes)))


#: RGB colours of the image view.
_COLOURS = {"wall": (90, 60, 40), "floor": (235, 225, 200), "target": (220, 60, 60), "box": (200, 150, 40),
            "box_on_target": (60, 170, 60), "player": (40, 80, 200)}


def render_rgb(room: Room, state: State, tile: int = 16) -> np.ndarray:
    """The level as an RGB image (``uint8``, ``tile`` pixels per cell): walls, floor, targets
    as a red square outline, boxes as squares (green on a target), the player as a disc."""
    h, w = room.shape
    img = np.zeros((h * tile, w * tile, 3), dtype=np.uint8)
    yy, xx = np.mgrid[0:tile, 0:tile]
    centre = (tile - 1) / 2
    disc = (yy - centre) ** 2 + (xx - centre) ** 2 <= (tile * 0.35) ** 2
    inner = (np.abs(yy - centre) <= tile * 0.36) & (np.abs(xx - centre) <= tile * 0.36)
    ring = inner & ~((np.abs(yy - centre) <= tile * 0.22) & (np.abs(xx - centre) <= tile * 0.22))
    for r in range(h):
        for c in range(w):
            block = img[r * tile:(r + 1) * tile, c * tile:(c + 1) * tile]
            block[:] = _COLOURS["wall" if room.walls[r][c] else "floor"]
            if (r, c) in room.targets:
                block[ring] = _COLOURS["target"]
            if (r, c) in state.boxes:
                block[inner] = _COLOURS["box_on_target" if (r, c) in room.targets else "box"]
            elif (r, c) == state.player:
                block[disc] = _COLOURS["player"]
    return img

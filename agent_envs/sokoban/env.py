"""``Sokoban-Rubric-v0``: generated Sokoban levels as a text environment with rubric channels (SPEC §2).

Each task is one level of the generator (:func:`agent_envs.sokoban.room.generate`: a room of
``dim`` cells, border walls included, ``num_boxes`` boxes, reverse play of ``search_depth``
moves; defaults 6×6, one box, depth 30, as verl-agent's Sokoban), numbered within three
disjoint splits (:data:`SPLITS`).  Every level is solvable within the horizon and its shortest
solution is known (the family's expert, :func:`agent_envs.sokoban.expert.plan`).

* Observation: the grid, one line per row (``#`` wall, ``_`` floor, ``O`` target, ``X`` box,
  ``√`` box on target, ``P`` player, ``S`` player on target); the goal sentence carries the
  legend.  ``render_mode="rgb_array"`` renders the level as an image (numpy only).
* Actions: ``up``, ``down``, ``left``, ``right`` (all four admissible at every step; walking
  into a wall or pushing a box into a wall or box is a legal move that changes nothing).
* Rewards (verl-agent's): −0.1 per step, +1 for a box pushed onto a target, −1 for one pushed
  off, +10 when every box is placed (then ``terminated``); any other string is an invalid
  action (``info["valid"] = False``, penalty −0.1, the step still counts).  Horizon 15
  actions (``truncated``).
* ``info["score"]``: the share of boxes on targets; ``info["won"]``: solved.

Reset: ``options={"task": index or "sokoban/6x6-1box/12", "split": "train"|"eval"|"test"}``;
without a task a level of the split is drawn with the seeded generator.  The seed decides
nothing else, so the siblings of a group start identically.

Example:
    >>> import gymnasium as gym, agent_envs
    >>> env = gym.make("Sokoban-Rubric-v0")
    >>> obs, info = env.reset(options={"task": 3})
    >>> print(obs)
    ######
    #____#
    #__X_#
    #O__##
    #P_###
    ######
    >>> info["admissible_actions"], info["task"]["id"]
    (['up', 'down', 'left', 'right'], 'sokoban/6x6-1box/3')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agent_envs.info import rubric_info
from agent_envs.sokoban import rubric as rb
from agent_envs.sokoban.room import (
    ACTIONS,
    LEGEND,
    Level,
    Room,
    State,
    generate,
    render_rgb,
    render_text,
    step,
)
from rubrics import SignatureTracker, load_template

__all__ = ["SPLITS", "SokobanRubricEnv"]

#: Split -> (first task index, number of tasks): disjoint ranges of the generator's levels.
SPLITS: dict[str, tuple[int, int]] = {"train": (0, 10_000), "eval": (10_000, 1_000), "test": (11_000, 1_000)}

STEP_REWARD = -0.1
BOX_ON_REWARD = 1.0
BOX_OFF_REWARD = -1.0
SOLVED_REWARD = 10.0
INVALID_PENALTY = -0.1

_CHARSET = "".join(LEGEND) + "\n"
_TASK_ID = re.compile(r"sokoban/(?P<tag>[^/]+)/(?P<index>[0-9]{1,9})")
_LEVELS: dict[tuple[Any, ...], Level] = {}


def _goal(num_boxes: int) -> str:
    legend = ", ".join(f"{k} {v}" for k, v in LEGEND.items())
    boxes = "the box" if num_boxes == 1 else f"all {num_boxes} boxes"
    return (f"Push {boxes} onto the target{'s' if num_boxes > 1 else ''}. You move up, down, left or right; "
            f"walking into a box pushes it one cell if the cell behind it is free (boxes cannot be pulled). "
            f"Legend: {legend}.")


class SokobanRubricEnv(gym.Env[str, str]):
    """Sokoban with rubric channels and matching keys (see the module docstring).

    Args:
        dim: Room height and width, border walls included.
        num_boxes: Boxes (and targets) per level.
        search_depth: Most reversed moves of the generator's reverse play.
        max_steps: Horizon in actions; every level is solvable within it.
        seed: The generator's seed: the levels are ``(seed, task index)``'s.
        split: The split of resets without a task.
        render_mode: ``"ansi"`` (the grid) or ``"rgb_array"`` (an image, ``tile`` pixels a cell).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(self, dim: tuple[int, int] | list[int] = (6, 6), num_boxes: int = 1, search_depth: int = 30,
                 max_steps: int = 15, seed: int = 0, split: str = "train", render_mode: str | None = None,
                 tile: int = 16) -> None:
        if len(tuple(dim)) != 2 or not all(isinstance(v, int) and v >= 3 for v in dim):
            raise ValueError(f"dim must be two integers >= 3, got {dim!r}")
        for name, value in (("num_boxes", num_boxes), ("search_depth", search_depth), ("max_steps", max_steps),
                            ("tile", tile)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.dim, self.num_boxes, self.search_depth = (int(dim[0]), int(dim[1])), num_boxes, search_depth
        self.max_steps, self.level_seed, self.split = max_steps, seed, split
        self.render_mode, self.tile = render_mode, tile
        self.tag = f"{self.dim[0]}x{self.dim[1]}-{num_boxes}box"
        self.observation_space = spaces.Text(max_length=(self.dim[1] + 1) * self.dim[0], min_length=1, charset=_CHARSET)
        self.action_space = spaces.Text(max_length=5, min_length=1, charset="abdefghilnoprtuw")
        self._tracker = SignatureTracker(load_template("sokoban", "sokoban"))
        self._room: Room | None = None
        self._state: State | None = None
        self._task: dict[str, Any] = {}

    # ------------------------------------------------------------------ tasks
    def split_range(self, split: str | None = None) -> range:
        """The task indices of ``split`` (default: the environment's)."""
        split = self.split if split is None else split
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
        first, n = SPLITS[split]
        return range(first, first + n)

    def level(self, index: int) -> Level:
        """Level ``index`` of this environment's generator (memoised in the process)."""
        key = (self.level_seed, index, self.dim, self.num_boxes, self.search_depth, self.max_steps)
        found = _LEVELS.get(key)
        if found is None:
            if len(_LEVELS) > 4096:
                _LEVELS.clear()
            found = _LEVELS[key] = generate(self.level_seed, index, dim=self.dim, num_boxes=self.num_boxes,
                                            search_depth=self.search_depth, max_solution=self.max_steps)
        return found

    def _resolve_task(self, task: Any) -> int:
        if isinstance(task, (int, np.integer)) and not isinstance(task, bool):
            index = int(task)
        elif isinstance(task, str) and (m := _TASK_ID.fullmatch(task)) is not None:
            if m["tag"] != self.tag:
                raise ValueError(f"task {task!r} is a {m['tag']} level, but this environment makes {self.tag} levels")
            index = int(m["index"])
        else:
            raise ValueError(f"task must be a level index or an id like 'sokoban/{self.tag}/12', got {task!r}")
        if not 0 <= index < max(first + n for first, n in SPLITS.values()):
            raise ValueError(f"task index {index} is outside every split")
        return index

    # ------------------------------------------------------------------ Gymnasium API
    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode on ``options["task"]`` (or a level of the split drawn with the seeded generator)."""
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"reset options must be a dict such as {{'task': 0}}, got {type(options).__name__}")
        options = dict(options or {})
        unknown = set(options) - {"task", "split"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(map(str, unknown))}; expected 'task', 'split'")
        split = options.get("split", self.split)
        if options.get("task") is not None:
            index = self._resolve_task(options["task"])
            super().reset(seed=seed)
        else:
            rng = self.split_range(split)
            super().reset(seed=seed)
            index = int(rng[int(self.np_random.integers(len(rng)))])
        level = self.level(index)
        self._room, self._state = level.room, level.start
        self._steps, self._invalid, self._done = 0, 0, False
        self._task = {"id": f"sokoban/{self.tag}/{index}", "goal": _goal(self.num_boxes), "type": "sokoban",
                      "index": index, "room": render_text(level.room, level.start)}
        self._tracker.reset()
        self._status = rb.status(self._room, self._state, 0)
        return self._obs(), self._info(valid=True, task_reward=0.0, penalty=0.0, feedback="")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Play one action (any string; one that is not a direction is an invalid action)."""
        if not isinstance(action, str):
            raise TypeError(f"Sokoban actions are strings ('up', 'down', 'left', 'right'), got {type(action).__name__}")
        if self._state is None or self._room is None:
            raise RuntimeError("call reset() before step()")
        if self._done or self._steps >= self.max_steps:
            raise RuntimeError("the episode has ended (terminated or truncated); call reset()")
        self._steps += 1
        name = action.strip().lower() if len(action) <= 64 else ""
        if name not in ACTIONS:
            self._invalid += 1
            task_reward, penalty, valid, feedback = 0.0, INVALID_PENALTY, False, "invalid action"
        else:
            task_reward, feedback = self._move(name)
            penalty, valid = 0.0, True
        self._status = rb.status(self._room, self._state, self._invalid)
        self._tracker.update(self._status)
        self._done = bool(self._status["solved"])
        truncated = not self._done and self._steps >= self.max_steps
        info = self._info(valid=valid, task_reward=task_reward, penalty=penalty, feedback=feedback)
        return self._obs(), task_reward + penalty, self._done, truncated, info

    def _move(self, name: str) -> tuple[float, str]:
        assert self._room is not None and self._state is not None
        self._state, moved, pushed = step(self._room, self._state, name)
        reward = STEP_REWARD
        if pushed is not None:
            was, now = pushed[0] in self._room.targets, pushed[1] in self._room.targets
            reward += BOX_ON_REWARD * (now and not was) + BOX_OFF_REWARD * (was and not now)
        if all(b in self._room.targets for b in self._state.boxes):
            reward += SOLVED_REWARD
        feedback = "pushed a box" if pushed else ("moved" if moved else "blocked")
        return round(reward, 10), feedback

    def render(self) -> str | np.ndarray | None:
        """The grid (``ansi``) or the image (``rgb_array``)."""
        if self._state is None or self._room is None or self.render_mode is None:
            return None
        if self.render_mode == "rgb_array":
            return render_rgb(self._room, self._state, self.tile)
        return self._obs()

    # ------------------------------------------------------------------ internals
    def _obs(self) -> str:
        assert self._room is not None and self._state is not None
        return render_text(self._room, self._state)

    def _info(self, *, valid: bool, task_reward: float, penalty: float, feedback: str) -> dict[str, Any]:
        assert self._room is not None and self._state is not None
        sig = self._tracker.signature()
        status = self._status
        return rubric_info(
            admissible_actions=[] if status["solved"] or self._steps >= self.max_steps else list(ACTIONS),
            task=self._task,
            rubric=status,
            keys={"exact": rb.exact_key(self._state), "coarse": rb.coarse_key(self._room, self._state, status),
                  "signature": sig.key()},
            state_key=str(rb.exact_key(self._state)),
            won=bool(status["solved"]),
            score=status["boxes_on_target"] / len(self._state.boxes),
            valid=valid,
            task_reward=task_reward,
            penalty=penalty,
            signature=sig.symbols,
            feedback=feedback,
            steps=self._steps,
        )

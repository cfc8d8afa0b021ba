"""A two-room text game for the trainer's learning test (``tests/test_trainer_learning.py``).

The tiny random test model cannot read a WebShop page or an ALFWorld room: its choice among
actions of different lengths is decided by their token counts, so on our engines it picks the
shortest action every time and no sibling ever differs.  This game keeps what the trainer needs
to be tested on — the whole ``info`` contract (:func:`agent_envs.check_rubric_env` passes),
multi-turn episodes, a fixed task set, the reward only at the end — and gives every action the
same length, so the untrained policy is close to uniform (it wins about one episode in nine).

Each room shows a sign naming the door that leads on; the wrong door ends the episode.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium as gym
from gymnasium import spaces

ROOMS = 2
DOORS = ("open door 1", "open door 2", "open door 3")
#: The right door of each room, per task (task id -> one door index per room).
ANSWERS = ((0, 1), (2, 0), (1, 2), (2, 2), (0, 0), (1, 0), (2, 1), (0, 2))
GOAL = "Reach the treasure: in each of the two rooms, open the door the sign names."
ENV_ID = "rubricgym_tests/Doors-v0"


class DoorsEnv(gym.Env):
    """Two rooms, three doors each.

    Args:
        answers: The right door (0, 1 or 2) of each room, one pair per task.
        train: How many of the tasks form split ``train``; the rest are split ``eval``.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, answers: Sequence[Sequence[int]] = ANSWERS, train: int = 4, split: str = "train") -> None:
        self.answers = [tuple(int(d) for d in a) for a in answers]
        self.splits = {"train": range(train), "eval": range(train, len(self.answers))}
        self.split = split
        self.observation_space = spaces.Text(max_length=200, min_length=0, charset=string.printable)
        self.action_space = spaces.Text(max_length=200, min_length=0, charset=string.printable)
        self._task = 0
        self._room = 0
        self._done = True

    def task_ids(self, split: str) -> list[int]:
        return list(self.splits[split])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        split = options.get("split", self.split)
        self._task = int(options.get("task", self.splits[split][0]))
        self._room, self._done = 0, False
        return self._obs(""), self._info(valid=True, task_reward=0.0, won=False)

    def step(self, action: str):
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}")
        if self._done or action not in DOORS:
            return self._obs("Nothing happens."), 0.0, self._done, False, self._info(valid=False, task_reward=0.0, won=False)
        if DOORS.index(action) != self.answers[self._task][self._room]:
            self._done = True
            return self._obs("The door was a trap. The game is over."), 0.0, True, False, self._info(True, 0.0, False)
        self._room += 1
        if self._room == ROOMS:
            self._done = True
            return self._obs("You found the treasure!"), 1.0, True, False, self._info(True, 1.0, True)
        return self._obs("The door opens onto the next room."), 0.0, False, False, self._info(True, 0.0, False)

    def _obs(self, feedback: str) -> str:
        if self._done:
            return feedback
        sign = self.answers[self._task][self._room] + 1
        return f"{feedback} Room {self._room + 1} of {ROOMS}. The sign reads: door {sign}.".strip()

    def _info(self, valid: bool, task_reward: float, won: bool) -> dict[str, Any]:
        state = (self._task, self._room, self._done)
        return {
            "admissible_actions": [] if self._done else list(DOORS),
            "task": {"id": self._task, "goal": GOAL, "type": "doors"},
            "rubric": {"rooms_passed": self._room},
            "keys": {"exact": state, "coarse": (self._room, self._done), "signature": (frozenset(), frozenset())},
            "state_key": state,
            "won": won,
            "score": float(won),
            "valid": valid,
            "task_reward": task_reward,
            "penalty": 0.0,
        }


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=DoorsEnv)

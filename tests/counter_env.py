"""A tiny text environment for rollout tests (``tests/`` is on ``sys.path``): count up to
``goal`` with the action ``"up"``; ``info`` is empty (no rubric contract) unless ``actions`` is
set, in which case it lists them as admissible and says whether the count was won."""

from __future__ import annotations

import gymnasium as gym


class CountTo(gym.Env):
    """Count to three (subclass and set ``goal`` / ``actions`` for other variants)."""

    observation_space = gym.spaces.Text(16)
    action_space = gym.spaces.Text(16)
    goal = 3
    actions: list[str] | None = None

    def _info(self) -> dict:
        return {} if self.actions is None else {"admissible_actions": list(self.actions), "won": self.n >= self.goal}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n = int((options or {}).get("task", 0))
        return str(self.n), self._info()

    def step(self, action):
        self.n += 1 if action == "up" else 0
        won = self.n >= self.goal
        return str(self.n), float(won), won, False, self._info()

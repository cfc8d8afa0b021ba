"""A tiny text environment whose step waits for a file to appear (up to ``wait`` seconds) and
pays 10 only if it did: a step run on the caller's event loop can never see the file that the
same loop creates while the step runs.  With this folder on ``sys.path`` (a worker process
started by ``spawn`` inherits it), ``gym.make("rubricgym_gated_env:Gated-v0", gate=PATH)``
imports this module wherever the environment is made."""

from __future__ import annotations

import time
from pathlib import Path

import gymnasium as gym


class Gated(gym.Env):
    observation_space = gym.spaces.Text(256)
    action_space = gym.spaces.Text(256)

    def __init__(self, gate: str, wait: float = 5.0) -> None:
        self.gate, self.wait = Path(gate), float(wait)

    def _info(self, won: bool = False) -> dict:
        return {"admissible_actions": ["wait"], "task": {"id": "gated", "goal": "wait for the gate"},
                "won": won, "score": float(won)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "The gate is closed.", self._info()

    def step(self, action):
        deadline = time.monotonic() + self.wait
        while not self.gate.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        won = self.gate.exists()
        return ("The gate opened." if won else "The gate stayed shut."), 10.0 * won, True, False, self._info(won)


if "Gated-v0" not in gym.registry:
    gym.register("Gated-v0", entry_point=Gated)


async def open_gate_when(started, gate: Path, delay: float = 0.2) -> None:
    """Create ``gate`` ``delay`` seconds after ``started()`` turns true (polled by the event
    loop: this coroutine can only run while the loop is not blocked by a step)."""
    import asyncio

    while not started():
        await asyncio.sleep(0.01)
    await asyncio.sleep(delay)  # the step is under way
    gate.touch()

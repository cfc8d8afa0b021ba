"""Replaying a game's walkthrough in the real engine.

The engine is textworld's ``PddlEnv`` wrapped in alfworld's ``AlfredDemangler(shuffle=False)``
and ``AlfredInfos``, asked for ``EnvInfos(won=True, admissible_commands=True, facts=True,
extras=["gamefile", "walkthrough"])``: the way the environment drives it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["GameVerificationError", "Verifier", "verify_game"]


class GameVerificationError(RuntimeError):
    """A game's walkthrough did not win in the real engine (the message names the failing step)."""


class Verifier:
    """Replays walkthroughs in the real engine, one instance for many games.

    Args:
        engine: ``"textworld"`` (default): textworld's ``PddlEnv`` wrapped in alfworld's
            ``AlfredDemangler(shuffle=False)`` and ``AlfredInfos``, exactly upstream's stack;
            ``"restorable"``: the environment's own engine
            (:class:`~agent_envs.alfworld.engine.RestorablePddlEnv` in the same wrappers),
            which behaves as a fresh ``PddlEnv`` load (the engine tests replay games through
            both) but translates each game once instead of four times.

    Either way the caller's ``sys.argv``, standard streams, working directory and logging
    handlers are left as they were (fast-downward's translator replaces ``sys.argv``).
    """

    def __init__(self, engine: str = "textworld") -> None:
        from agent_envs.alfworld import engine as alf_engine

        if engine not in ("textworld", "restorable"):
            raise ValueError(f"engine must be 'textworld' or 'restorable', got {engine!r}")
        with alf_engine.preserve_process_state():
            if engine == "restorable":
                self._env = alf_engine.make_engine()
            else:
                self._env = alf_engine.make_raw_engine()

    def close(self) -> None:
        """Release the engine (its copy of fast-downward's library goes back to the pool)."""
        env, self._env = getattr(self, "_env", None), None
        if env is not None:
            env.close()

    def verify(self, game: Mapping[str, Any], label: str = "game") -> int:
        """Replay ``game["walkthrough"]``; returns its length.

        Raises:
            GameVerificationError: a command was not admissible, the game was won too early,
                or not won after the last command. The message names ``label`` and the step.
        """
        walkthrough = list(game.get("walkthrough") or [])
        if not walkthrough:
            raise GameVerificationError(f"{label}: no walkthrough stored")
        from agent_envs.alfworld.engine import preserve_process_state

        if self._env is None:
            raise RuntimeError("this Verifier is closed")
        with preserve_process_state():  # textworld's PddlState runs fast-downward's translator
            return self._replay(game, walkthrough, label)

    def _replay(self, game: Mapping[str, Any], walkthrough: list[str], label: str) -> int:
        self._env.load(dict(game))
        state = self._env.reset()
        if state["won"]:
            raise GameVerificationError(f"{label}: already won before the first command")
        for step, command in enumerate(walkthrough):
            admissible = state["admissible_commands"]
            if command not in admissible:
                raise GameVerificationError(
                    f"{label}: walkthrough step {step} {command!r} is not admissible; "
                    f"admissible: {sorted(admissible)}"
                )
            state, _, _ = self._env.step(command)
            if state["won"] and step != len(walkthrough) - 1:
                raise GameVerificationError(f"{label}: won early at step {step} {command!r}")
        if not state["won"]:
            raise GameVerificationError(f"{label}: not won after the last walkthrough command")
        return len(walkthrough)


def verify_game(
    game: Mapping[str, Any] | str | os.PathLike[str], verifier: Verifier | None = None
) -> int:
    """Replay a game's stored walkthrough in the real engine (a dict or a ``game.tw-pddl`` path).

    Returns the walkthrough length; raises :class:`GameVerificationError` naming the failing step.
    """
    label = "game"
    if not isinstance(game, Mapping):
        label = str(game)
        try:
            game = json.loads(Path(game).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise GameVerificationError(f"cannot read game file {label}: {exc}") from exc
    return (verifier or Verifier()).verify(game, label)

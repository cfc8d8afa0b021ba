"""Building one game: scene -> PDDL problem + grammar with the task sentence + walkthrough."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from agent_envs.alfworld.generator.naming import demangled_names
from agent_envs.alfworld.generator.pddl import problem_text
from agent_envs.alfworld.generator.scenes import Resample, sample_scene
from agent_envs.alfworld.generator.solver import solve
from agent_envs.alfworld.generator.vocabulary import TASK_TYPES, load_vocabulary, logic_files

__all__ = ["GeneratedGame", "as_rng", "build_game", "check_task_type", "generate_game"]

_MAX_SCENE_TRIES = 200  # structural resamples inside one game (deterministic, cheap)


def as_rng(rng_or_seed: random.Random | int | str) -> random.Random:
    """A ``random.Random``: the one given, or one seeded from an int/str (stable across runs)."""
    if isinstance(rng_or_seed, random.Random):
        return rng_or_seed
    if isinstance(rng_or_seed, bool) or not isinstance(rng_or_seed, (int, str)):
        raise TypeError(
            "rng_or_seed must be a random.Random, an int or a str, "
            f"not {type(rng_or_seed).__name__}"
        )
    return random.Random(f"rubricgym-alfworld:{rng_or_seed}")


def check_task_type(task_type: object) -> str:
    """``task_type`` if it is one of :data:`TASK_TYPES`, else a ``ValueError`` listing them."""
    if not isinstance(task_type, str) or task_type not in TASK_TYPES:
        raise ValueError(
            f"unknown ALFWorld task type {task_type!r}; expected one of {', '.join(TASK_TYPES)}"
        )
    return task_type


@dataclass(frozen=True)
class GeneratedGame:
    """One generated game: the ``game.tw-pddl`` JSON plus what the folder name and manifest need."""

    game: dict[str, Any]
    task_type: str
    target: str
    destination: str
    room: str
    sentence: str

    def folder_name(self, index: int) -> str:
        """``<task_type>-<Obj>-None-<Recep>-<index>``, the layout of the real data."""
        return f"{self.task_type}-{self.target}-None-{self.destination}-{index}"


def build_game(rng_or_seed: random.Random | int | str, task_type: str) -> GeneratedGame:
    """Build one solvable game of ``task_type`` (not yet engine-verified; see :func:`verify_game`).

    Args:
        rng_or_seed: a ``random.Random`` (advanced in place) or an int/str seed.
        task_type: one of :data:`TASK_TYPES`.

    Raises:
        ValueError: unknown task type.
        TypeError: ``rng_or_seed`` of the wrong type.
    """
    task_type = check_task_type(task_type)
    rng = as_rng(rng_or_seed)
    vocab = load_vocabulary()
    domain, grammar = logic_files()
    for _ in range(_MAX_SCENE_TRIES):
        try:
            scene = sample_scene(rng, vocab, task_type)
        except Resample:
            continue
        every_id = ["agent1", *scene.objects, *scene.receptacles, *scene.locations]
        names = demangled_names(every_id)
        walkthrough = solve(rng, scene, names)
        name = f"rubricgym_{task_type}_{rng.getrandbits(48):012x}"
        game = {
            "pddl_domain": domain,
            "grammar": grammar.replace("UNKNOWN GOAL", scene.sentence),
            "pddl_problem": problem_text(scene, vocab, name),
            "solvable": True,
            "walkthrough": walkthrough,
        }
        return GeneratedGame(
            game, task_type, scene.target, scene.destination, scene.room, scene.sentence
        )
    raise RuntimeError(
        f"could not sample a scene for {task_type} in {_MAX_SCENE_TRIES} tries "
        "(vocabulary too tight?)"
    )


def generate_game(rng_or_seed: random.Random | int | str, task_type: str) -> dict[str, Any]:
    """The ``game.tw-pddl`` JSON (as a dict) of one generated game; see :func:`build_game`."""
    return build_game(rng_or_seed, task_type).game

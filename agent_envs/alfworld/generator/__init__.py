"""Seeded generator of solvable ALFWorld games: the embedded default that needs no download.

Every generated game is a ``game.tw-pddl`` JSON file exactly like the ones of the official
ALFWorld data set (``{"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}``),
written over the PDDL domain (``alfred.pddl``) and the text grammar (``alfred.twl2``) that ship
inside the ``alfworld`` wheel, so the real TextWorld PDDL engine plays it unchanged.

A game is a room (kitchen, living room, bedroom or bathroom) with receptacles at their own
locations (some of them closed: cabinets, drawers, fridge, microwave, safe), target objects,
distractor objects (other types, and extra instances of the destination type), non-pickupable
scenery, and one of the six ALFWorld task types. A scripted solver writes the walkthrough over
the scene it just built, and :func:`verify_game` replays that walkthrough in the real engine
(textworld ``PddlEnv`` + alfworld's ``AlfredDemangler(shuffle=False)`` and ``AlfredInfos``):
every command must be admissible, the game must not be won before the last command and must
be won after it. Games that fail are rejected and resampled.

:func:`ensure_generated` builds a balanced, deterministic set of games into a cache on first
use and returns their paths; :class:`GameSet` generates the same set lazily, one task type at a
time, as the environment needs it (the files are the same); the layout mirrors the real data
(``<cache>/<task_type>-<Obj>-None-<Recep>-<index>/trial_0/game.tw-pddl``), so the task type,
target and destination can be read from the folder name.

Example:
    >>> from agent_envs.alfworld.generator import generate_game
    >>> game = generate_game(0, "pick_heat_then_place_in_recep")
    >>> sorted(game)
    ['grammar', 'pddl_domain', 'pddl_problem', 'solvable', 'walkthrough']
    >>> game["walkthrough"][-1].startswith("move ")
    True

Modules: :mod:`.vocabulary` (task types, ``scenes.json``, the shipped logic files),
:mod:`.naming` (ids and demangled names), :mod:`.scenes` (sampling a room),
:mod:`.solver` (walkthroughs), :mod:`.pddl` (problem text and goals), :mod:`.games`
(one game), :mod:`.verify` (replay in the real engine), :mod:`.cache` (the on-disk set),
:mod:`.worker` (the subprocess that builds part of a set in parallel).
"""

from __future__ import annotations

from agent_envs.alfworld.generator.cache import GameSet, default_cache_dir, ensure_generated
from agent_envs.alfworld.generator.games import GeneratedGame, build_game, generate_game
from agent_envs.alfworld.generator.naming import demangled_names
from agent_envs.alfworld.generator.verify import GameVerificationError, Verifier, verify_game
from agent_envs.alfworld.generator.vocabulary import (
    GENERATOR_VERSION,
    TASK_TYPES,
    Vocabulary,
    load_vocabulary,
)

__all__ = [
    "GENERATOR_VERSION",
    "TASK_TYPES",
    "GameSet",
    "GameVerificationError",
    "GeneratedGame",
    "Verifier",
    "Vocabulary",
    "build_game",
    "default_cache_dir",
    "demangled_names",
    "ensure_generated",
    "generate_game",
    "load_vocabulary",
    "verify_game",
]

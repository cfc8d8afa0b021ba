"""``ALFWorld-Rubric-v0``: the real ALFWorld engine as a Gymnasium text environment.

The environment plays ALFWorld's TextWorld games (the PDDL engine of alfworld 0.4.2, see
:mod:`agent_envs.alfworld.engine`) and reports, besides the text, everything the credit
estimators of :mod:`wrappers.credit` need (SPEC §2–§3):

* ``info["rubric"]`` — the pre-action rubric status of the *next* decision (MCGPO Table 15,
  :mod:`agent_envs.alfworld.rubric`); all false/zero after ``reset``;
* ``info["keys"]`` — ``{"exact": ..., "coarse": ..., "signature": (C, F)}``: the state
  summaries of MCGPO Table 5 and, beside them, the rubric signature (C, F) of the task
  family's template (the layout :mod:`wrappers.credit.mcgpo` reads: g = (h, C, F));
* ``info["state_key"]`` — the anchor state (see *State keys* below);
* ``admissible_actions`` (without ``help``), ``task`` (``id``, ``goal``, ``type``,
  ``gamefile``, ...), ``won``, ``score``, ``valid``, ``task_reward``, ``penalty``.

Rewards follow the papers' 10-point scale: 10 on the step that wins, −0.1 for an invalid
action, else 0; the horizon is 50 steps (``max_steps``).  An action is *valid* when, after
lower-casing and collapsing white space, it is one of the admissible actions; anything else
(unparseable text, empty, 100 kB of noise, ``help``) is an invalid step: the engine's own
"Nothing happens." feedback, penalty −0.1, no state change (the engine itself changes nothing
for a command it cannot execute, so it is not called).  A non-string action raises
``TypeError``.

Observations: the reset observation is the engine's welcome text with the task sentence.
After each step the engine's feedback is kept verbatim and a line with the current location
and held object is appended (as the papers' augmented ALFWorld gives the agent)::

    You pick up the alarmclock 2 from the desk 1.

    Location: desk 1. Holding: alarmclock 2.

``augment_observation=False`` returns the bare feedback.

State keys (``state_key=``):

* ``"observation"`` (default) — the observation text without history, the anchor the papers'
  code groups GiGPO/GraphGPO states by;
* ``"feedback"`` — the engine's feedback only (without our location/holding line);
* ``"facts"`` — a canonical digest of the engine's full fact state (sha1 of the sorted
  positive PDDL facts): two decisions share it exactly when the world is in the same state,
  whatever text led there.

Tasks: ``reset(seed=..., options={"task": ..., "split": ...})`` where the task is an index
into the split's sorted task ids, a task id (the game folder relative to its split), or a
path to a ``game.tw-pddl`` (or its folder).  Without a task, one is drawn from the split
with the environment's seeded RNG.  Splits: ``train``, ``valid_seen``, ``valid_unseen`` (the
real games under ``$ALFWORLD_DATA``) and ``generated`` (the default: seeded games built by
:mod:`agent_envs.alfworld.generator` into a cache on first use, no download needed).  On a
cold cache a reset generates only the games of its task's type (ten of the default sixty, a
few seconds); the others are generated when a reset needs them, and :meth:`task_ids`
generates them all.  The games and the task order are the same either way.

``options["split"]`` applies to that reset only: later resets without it use the split the
environment was made with (``env.unwrapped.split``), as ``WebShop-Rubric-v0`` does.

A reset that fails (bad options, an unknown task, a game file that cannot be loaded) raises
and changes nothing: not the split, not the RNG, and, when it fails before a game is
loaded, not the episode in progress.  When the engine has already left the previous game
(the new one failed to load), that episode is over and :meth:`step` raises ``RuntimeError``
naming the failed reset until a reset succeeds.

Resetting to the game already loaded is fast: the grounded PDDL problem is kept and the
initial state restored exactly (no fast-downward translation); siblings of one game in one
process share the grounding.

Example:
    >>> import gymnasium as gym, agent_envs
    >>> env = gym.make("ALFWorld-Rubric-v0", split="valid_seen")              # doctest: +SKIP
    >>> obs, info = env.reset(seed=0, options={"task": 0})                    # doctest: +SKIP
    >>> info["task"]["type"], info["rubric"]["target_acquired"]               # doctest: +SKIP
    ('look_at_obj_in_light', 0)
    >>> obs, reward, terminated, truncated, info = env.step(info["admissible_actions"][0])  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import logging
import os
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agent_envs.alfworld import data as alf_data
from agent_envs.alfworld.game import TASK_TYPES, TaskSpec, parse_goal, task_sentence
from agent_envs.alfworld.rubric import (
    FactIndex,
    RubricTracker,
    Snapshot,
    coarse_key,
    exact_key,
    snapshot,
)
from agent_envs.info import rubric_info

__all__ = ["CHARSET", "STATE_KEYS", "ALFWorldRubricEnv", "normalize_action"]

logger = logging.getLogger(__name__)

#: Every character an observation can contain (the games are printable ASCII).
CHARSET: str = string.printable
STATE_KEYS: tuple[str, ...] = ("observation", "feedback", "facts")
INVALID_FEEDBACK = "Nothing happens."
_MAX_OBS_LEN = 16384
_MAX_ACTION_ECHO = 1000


def normalize_action(action: str) -> str:
    """Canonical form of a free-text action: lower case, white space collapsed.

    Example:
        >>> normalize_action("  Go to\\tDesk 1 ")
        'go to desk 1'
    """
    return " ".join(action.split()).lower()


@dataclass
class _Game:
    """A loaded game: where it is, what it asks, its static fact index."""

    task_id: str
    split: str | None
    index: int | None
    path: str
    spec: TaskSpec
    facts: FactIndex


class ALFWorldRubricEnv(gym.Env[str, str]):
    """The real ALFWorld engine with rubric channels, matching keys and fast resets.

    Args:
        split: ``"generated"`` (default, needs no download), ``"train"``, ``"valid_seen"``
            or ``"valid_unseen"``.
        data_root: ALFWorld data root (default ``$ALFWORLD_DATA`` or ``~/.cache/alfworld``).
        max_steps: Episode horizon (50 in the papers).
        success_reward: Task reward of the winning step (10 on the papers' scale).
        invalid_penalty: Penalty of an invalid action (-0.1).
        state_key: ``"observation"`` (default), ``"feedback"`` or ``"facts"`` (module doc).
        augment_observation: Append the location/holding line after each step.
        task_types: Restrict the split to these task types (default: all six).
        generated_n: Number of generated games (``split="generated"``).
        generated_seed: Generator seed.
        generated_cache_dir: Where generated games are cached (default: the generator's).
        render_mode: ``None`` or ``"ansi"`` (``render()`` returns the last observation).
        fast_grammar: Memoise TextWorld's grammar parsing in this process
            (:mod:`agent_envs.alfworld.fast_grammar`: steps 2-3x faster, identical outputs).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        split: str = "generated",
        *,
        data_root: str | os.PathLike[str] | None = None,
        max_steps: int = 50,
        success_reward: float = 10.0,
        invalid_penalty: float = -0.1,
        state_key: str = "observation",
        augment_observation: bool = True,
        task_types: Sequence[str] | None = None,
        generated_n: int = 60,
        generated_seed: int = 0,
        generated_cache_dir: str | os.PathLike[str] | None = None,
        render_mode: str | None = None,
        fast_grammar: bool = True,
    ) -> None:
        super().__init__()
        _check_split(split)
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        for name, value in (("success_reward", success_reward), ("invalid_penalty", invalid_penalty)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if state_key not in STATE_KEYS:
            raise ValueError(f"state_key must be one of {', '.join(STATE_KEYS)}, got {state_key!r}")
        if task_types is not None:
            if isinstance(task_types, str):
                raise TypeError("task_types must be a sequence of task-type names, not a string")
            unknown = [t for t in task_types if t not in TASK_TYPES]
            if unknown:
                raise ValueError(f"unknown task types {unknown}; choose from {', '.join(TASK_TYPES)}")
            task_types = tuple(task_types)
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        from agent_envs.alfworld.engine import require_engine

        require_engine()  # a missing extra is named now, not deep inside the first reset
        self.split = split
        self.data_root = alf_data.data_root(data_root)
        self.max_steps = max_steps
        self.success_reward = float(success_reward)
        self.invalid_penalty = float(invalid_penalty)
        self.state_key_mode = state_key
        self.augment_observation = bool(augment_observation)
        self.task_types = task_types
        self.generated_n = generated_n
        self.generated_seed = generated_seed
        self.generated_cache_dir = Path(generated_cache_dir).expanduser() if generated_cache_dir else None
        self.render_mode = render_mode
        if fast_grammar:
            from agent_envs.alfworld import fast_grammar as _fast_grammar

            _fast_grammar.enable()

        self.observation_space = spaces.Text(max_length=_MAX_OBS_LEN, min_length=0, charset=CHARSET)
        self.action_space = spaces.Text(max_length=256, min_length=0, charset=CHARSET)

        self._engine: Any = None
        self._game_set: Any = None  # the generated split's GameSet (made on first use)
        self._failed_reset: str | None = None
        self._game: _Game | None = None
        self._games: dict[str, _Game] = {}
        self._catalogues: dict[str, tuple[list[str], dict[str, str]]] = {}
        self._state: Any = None
        self._tracker: RubricTracker | None = None
        self._signatures: Any = None
        self._admissible: list[str] = []
        self._snapshot = Snapshot()
        self._location: str | None = None
        self._steps = 0
        self._done = True
        self._won = False
        self._goal = ""
        self._last_obs = ""

    # -- tasks ------------------------------------------------------------------------------

    def task_ids(self, split: str | None = None) -> list[str]:
        """Sorted task ids of a split (default: the current one); indices refer to this list."""
        return list(self._catalogue(split or self.split)[0])

    def _catalogue(self, split: str) -> tuple[list[str], dict[str, str]]:
        _check_split(split)
        if split not in self._catalogues:
            if split == "generated":
                ids, paths = self._generated_catalogue()
            else:
                ids = alf_data.list_tasks(split, self.data_root, self.task_types)
                base = alf_data.split_dir(split, self.data_root)
                paths = {t: str(base / t / alf_data.GAME_FILE) for t in ids}
            if not ids:
                raise alf_data.DataNotFoundError(
                    f"split {split!r} has no games of task types {list(self.task_types or TASK_TYPES)}"
                )
            self._catalogues[split] = (ids, paths)
        return self._catalogues[split]

    def _generated(self) -> Any:
        """The generated split's :class:`~agent_envs.alfworld.generator.GameSet`."""
        if self._game_set is None:
            from agent_envs.alfworld import generator  # lazy: the generator is only needed here

            self._game_set = generator.GameSet(
                n=self.generated_n,
                seed=self.generated_seed,
                cache_dir=self.generated_cache_dir,
                task_types=list(self.task_types) if self.task_types is not None else None,
            )
        return self._game_set

    def _generated_catalogue(self) -> tuple[list[str], dict[str, str]]:
        files = [Path(p) for p in self._generated().all()]
        paths = {_generated_id(p): str(p) for p in files}
        ids = sorted(paths)
        if self.task_types is not None:
            ids = [t for t in ids if alf_data.task_type_of(t) in set(self.task_types)]
        return ids, paths

    def _lazy(self, split: str) -> Any:
        """The generated split's GameSet while its full catalogue is not built, else None."""
        if split == "generated" and split not in self._catalogues:
            return self._generated()
        return None

    def _resolve(self, task: Any, split: str) -> tuple[str, str | None, int | None, str]:
        """(task id, split, index, game file path) of a task reference."""
        if isinstance(task, (bool, np.bool_)):
            raise TypeError("options['task'] must be an index, a task id or a game-file path, not a bool")
        if task is None or isinstance(task, (int, np.integer)):
            return self._resolve_index(task, split)
        if isinstance(task, os.PathLike):
            return self._path_task(Path(task), split)
        if not isinstance(task, str):
            raise TypeError(
                f"options['task'] must be an int index, a task id (str) or a path, got {type(task).__name__}"
            )
        key = task.strip().strip("/")
        if key.endswith("/" + alf_data.GAME_FILE):
            key = key[: -len(alf_data.GAME_FILE) - 1]
        found = self._find_id(key, split)
        if found is not None:
            return found
        candidate = Path(task).expanduser()
        try:
            exists = candidate.exists()
        except (OSError, ValueError):  # e.g. a name too long for the file system
            exists = False
        if exists:
            return self._path_task(candidate, split)
        lazy = self._lazy(split)
        size = lazy.n if lazy is not None else len(self._catalogue_or_empty(split)[0])
        shown = task if len(task) <= 120 else f"{task[:100]}... ({len(task)} characters)"
        raise ValueError(
            f"unknown ALFWorld task {shown!r} for split {split!r} ({size} tasks). Pass an index "
            f"0..{max(size - 1, 0)}, a game-file path, or a task id as listed by "
            f"`env.unwrapped.task_ids({split!r})` or `rubricgym alfworld-tasks --split {split}`"
        )

    def _resolve_index(self, task: int | None, split: str) -> tuple[str, str | None, int | None, str]:
        """A task index (or a seeded draw when ``task`` is None) of ``split``."""
        lazy = self._lazy(split)
        size = lazy.n if lazy is not None else len(self._catalogue(split)[0])
        if task is None:
            index = int(self.np_random.integers(size))
        else:
            index = int(task)
            if not 0 <= index < size:
                raise ValueError(
                    f"task index {index} out of range: split {split!r} has {size} tasks (0..{size - 1})"
                )
        if lazy is not None:  # generates only this task type's games
            path = lazy.path_at(index)
            return _generated_id(path), split, index, str(path)
        ids, paths = self._catalogue(split)
        return ids[index], split, index, paths[ids[index]]

    def _find_id(self, key: str, split: str) -> tuple[str, str | None, int | None, str] | None:
        """The task of id ``key`` in ``split``, or None."""
        lazy = self._lazy(split)
        if lazy is not None:
            task_type = alf_data.task_type_of(key)
            if task_type not in lazy.bounds:
                return None
            group = lazy.group(task_type)  # generates only this task type's games
            ids = [_generated_id(p) for p in group]
            if key not in ids:
                return None
            k = ids.index(key)
            return key, split, lazy.bounds[task_type][0] + k, str(group[k])
        ids, paths = self._catalogue_or_empty(split)
        if key in paths:
            return key, split, ids.index(key), paths[key]
        return None

    def _catalogue_or_empty(self, split: str) -> tuple[list[str], dict[str, str]]:
        try:
            return self._catalogue(split)
        except alf_data.DataNotFoundError:
            return [], {}

    def _path_task(self, path: Path, split: str) -> tuple[str, str | None, int | None, str]:
        game = path / alf_data.GAME_FILE if path.is_dir() else path
        if not game.is_file():
            raise ValueError(f"no ALFWorld game file at {path} (expected {alf_data.GAME_FILE})")
        game = game.resolve()
        # A path inside a known split keeps its task id; anything else is named by its path.
        for name in alf_data.REAL_SPLITS:
            base = alf_data.split_dir(name, self.data_root).resolve()
            if base in game.parents:
                task_id = game.parent.relative_to(base).as_posix()
                ids = self._catalogue_or_empty(name)[0]
                return task_id, name, (ids.index(task_id) if task_id in ids else None), str(game)
        return str(game.parent), None, None, str(game)

    # -- engine -----------------------------------------------------------------------------

    def _load(self, task_id: str, split: str | None, index: int | None, path: str) -> _Game:
        from agent_envs.alfworld import engine as alf_engine

        if self._engine is None:
            self._engine = alf_engine.make_engine()
        if self._game is not None and self._game.path == path:
            state = self._engine.reset()  # fast: restores the kept grounding
            game = self._game
            game.task_id, game.split, game.index = task_id, split, index
            return self._begin(game, state)
        self._game = None  # the engine leaves the previous game: never reset it "fast" again
        self._engine.load(path)
        state = self._engine.reset()
        game = self._games.get(path)
        if game is None:
            gamedata = self._engine._game_data
            try:
                spec = parse_goal(gamedata["pddl_problem"])
                names = {k: info.name for k, info in state["_entity_infos"].items()}
                index_ = FactIndex.build(state["_facts"], names, spec)
            except (ValueError, KeyError, TypeError) as exc:
                raise alf_engine.GameFileError(
                    f"ALFWorld game file {path}: {type(exc).__name__}: {exc}"
                ) from exc
            game = _Game(task_id, split, index, path, spec, index_)
            if len(self._games) > 64:
                self._games.clear()
            self._games[path] = game
        game.task_id, game.split, game.index = task_id, split, index
        self._game = game
        return self._begin(game, state)

    def _begin(self, game: _Game, state: Any) -> _Game:
        from rubrics import SignatureTracker, load_template

        self._state = state
        if self._tracker is None or self._tracker.spec != game.spec:
            self._tracker = RubricTracker(game.spec)
            self._signatures = SignatureTracker(load_template("alfworld", game.spec.task_type))
        self._snapshot = snapshot(state["_facts"], game.facts, game.spec)
        self._tracker.reset()
        self._signatures.reset()
        return game

    # -- Gymnasium API ------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode (see the module doc for ``options``; a failed reset changes nothing)."""
        options = _reset_options(options)
        split = options.get("split", self.split)  # this reset only (module doc)
        _check_split(split)
        saved_rng = _rng_state(self)
        super().reset(seed=seed)
        try:
            task_id, task_split, index, path = self._resolve(options.get("task"), split)
        except BaseException:
            _restore_rng(self, saved_rng)
            raise
        try:
            game = self._load(task_id, task_split, index, path)
        except BaseException as exc:
            _restore_rng(self, saved_rng)
            if self._game is None:  # the engine left the previous episode's game
                self._done = True
                self._failed_reset = f"{type(exc).__name__}: {exc}"[:500]
            raise
        self._failed_reset = None
        self._admissible = _admissible(self._state)
        self._location = None
        self._steps = 0
        self._done = False
        self._won = bool(self._state["won"])
        intro = self._state["feedback"]
        self._goal = task_sentence(intro)
        self._last_obs = intro
        info = self._info(game, intro, intro, valid=True, task_reward=0.0, penalty=0.0, action="")
        return intro, info

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        """Execute one free-text action (never raises for a string)."""
        if not isinstance(action, str):
            raise TypeError(f"ALFWorld actions must be str, got {type(action).__name__}")
        if self._failed_reset is not None:
            raise RuntimeError(
                f"the last reset() failed ({self._failed_reset}); call reset() again before step()"
            )
        if self._game is None or self._state is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the episode has ended (terminated or truncated); call reset()")
        game = self._game
        command = normalize_action(action)
        valid = command in self._admissible
        if valid:
            state, _score, _done = self._engine.step(command)
            self._state = state
            feedback = state["feedback"]
            self._snapshot = snapshot(state["_facts"], game.facts, game.spec)
            if command.startswith("go to "):
                self._location = command[len("go to "):]
            self._admissible = _admissible(state)
            newly_won = bool(state["won"]) and not self._won
            self._won = self._won or bool(state["won"])
        else:
            feedback = INVALID_FEEDBACK
            newly_won = False
        self._steps += 1
        assert self._tracker is not None
        self._tracker.update(self._snapshot, won=self._won, valid=valid, feedback=feedback)
        self._signatures.update(self._tracker.status)
        task_reward = self.success_reward if newly_won else 0.0
        penalty = 0.0 if valid else self.invalid_penalty
        terminated = self._won
        truncated = (not terminated) and self._steps >= self.max_steps
        self._done = terminated or truncated
        obs = self._observation(feedback)
        self._last_obs = obs
        echo = command if len(command) <= _MAX_ACTION_ECHO else command[:_MAX_ACTION_ECHO]
        info = self._info(game, obs, feedback, valid=valid, task_reward=task_reward, penalty=penalty, action=echo)
        return obs, task_reward + penalty, terminated, truncated, info

    def render(self) -> str | None:
        """The last observation (``render_mode="ansi"``)."""
        if self.render_mode == "ansi":
            return self._last_obs
        return None

    def close(self) -> None:
        """Release the engine (the game's fast-downward library stays with the process, shared)."""
        if self._engine is not None:
            try:
                self._engine.close()
            finally:
                self._engine = None
                self._game = None
                self._state = None
        super().close()

    # -- helpers ----------------------------------------------------------------------------

    def _observation(self, feedback: str) -> str:
        if not self.augment_observation:
            return feedback
        held = self._snapshot.held
        where = self._location or "the middle of the room"
        return f"{feedback}\n\nLocation: {where}. Holding: {held or 'nothing'}."

    def _state_key(self, obs: str, feedback: str) -> str:
        if self.state_key_mode == "observation":
            return obs
        if self.state_key_mode == "feedback":
            return feedback
        return self.facts_key()

    def facts_key(self) -> str:
        """Canonical digest of the engine's current fact state (sha1 of the sorted positive facts)."""
        if self._state is None:
            raise RuntimeError("call reset() first")
        facts = sorted(str(f) for f in self._state["_facts"] if not f.name.startswith("not_"))
        return hashlib.sha1("\n".join(facts).encode("utf-8")).hexdigest()

    def _info(
        self,
        game: _Game,
        obs: str,
        feedback: str,
        *,
        valid: bool,
        task_reward: float,
        penalty: float,
        action: str,
    ) -> dict[str, Any]:
        assert self._tracker is not None
        sig = self._signatures.signature()
        signature = (sig.active, sig.frontier)
        remaining = self.max_steps - self._steps
        spec = game.spec
        return rubric_info(
            admissible_actions=self._admissible,
            task={
                "id": game.task_id,
                "goal": self._goal,
                "type": spec.task_type,
                "gamefile": game.path,
                "split": game.split,
                "index": game.index,
                "target": spec.target,
                "destination": spec.destination,
                "lamp": spec.lamp,
                "required": spec.required,
            },
            rubric=self._tracker.status,
            keys={
                "exact": exact_key(spec, self._tracker, self._location),
                "coarse": coarse_key(spec, self._tracker, self._location, remaining, self.max_steps),
                "signature": signature,
            },
            state_key=self._state_key(obs, feedback),
            won=self._won,
            score=1.0 if self._won else 0.0,
            valid=valid,
            task_reward=task_reward,
            penalty=penalty,
            signature=sig.symbols,
            action=action,
            feedback=feedback,
            location=self._location,
            holding=self._snapshot.held,
            steps=self._steps,
            remaining_steps=remaining,
        )


def _generated_id(path: Path) -> str:
    """Task id of a generated game file: ``<task folder>/<trial>`` (the real data's layout)."""
    return f"{path.parent.parent.name}/{path.parent.name}"


def _reset_options(options: Any) -> dict[str, Any]:
    """``reset``'s options as a dict, checked (TypeError / ValueError naming the problem)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(
            "reset options must be a dict such as {'task': 0, 'split': 'generated'}, "
            f"got {type(options).__name__}"
        )
    options = dict(options)
    unknown = set(options) - {"task", "split"}
    if unknown:
        raise ValueError(
            f"unknown reset options {sorted(map(str, unknown))}; expected 'task' and/or 'split'"
        )
    return options


def _rng_state(env: gym.Env[Any, Any]) -> tuple[Any, Any, Any]:
    """The env's RNG (object, bit-generator state, seed), to undo a failed reset."""
    rng = env._np_random
    return rng, (rng.bit_generator.state if rng is not None else None), env._np_random_seed


def _restore_rng(env: gym.Env[Any, Any], saved: tuple[Any, Any, Any]) -> None:
    rng, state, seed = saved
    if rng is not None:
        rng.bit_generator.state = state
    env._np_random, env._np_random_seed = rng, seed


def _admissible(state: Any) -> list[str]:
    return [c for c in state["admissible_commands"] if c != "help"]


def _check_split(split: Any) -> None:
    if split not in alf_data.SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; choose one of {', '.join(alf_data.SPLITS)}")


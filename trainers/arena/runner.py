"""The arena's training loop: rollouts, credit, clipped updates, validation, metric files.

One *run* trains a fresh :class:`~trainers.arena.policy.LinearSoftmaxPolicy` with one
method (estimator, or estimator with an ablation) and one seed:

1. every update samples ``groups_per_update`` (P) tasks from a fixed training pool and plays
   ``group_size`` (G) siblings of each from identical start states (same task, same reset
   seed) at temperature 1, recording each decision's features and log π_old(a);
2. the estimator turns the P groups into per-step advantages (and MCGPO preferences);
3. the shared update rule (:mod:`trainers.update_rule`): advantages in units of their
   running RMS, up to ``ppo_epochs`` passes of pair-aware mini-batch SGD steps on the
   per-decision SPEC §5 objective (:mod:`trainers.arena.objective`) inside a KL trust
   region, the reference policy being the initial one;
4. every ``eval_every`` updates (and before the first) one rollout per validation task at
   temperature 0.4 (SPEC §6).

Everything is seeded from ``(seed, update, task, slot)``, and environment stepping is
deterministic given the task, so the same configuration gives the same numbers, whichever
worker process runs it and in whatever order.

Metric records (``runs/<method>__seed<k>/metrics.jsonl``) are built in the one schema of
:mod:`trainers.metrics` (the trainer's: ``run``, ``eval``, ``train`` and ``end`` records with
``train/``, ``credit/`` and ``opt/`` keys), so ``rubricgym report`` reads arena and trainer runs
alike.  Wall-clock times are the ``*_s`` fields and the ``end`` record's, apart
from the deterministic numbers.

Example (a tiny run on generated ALFWorld games; takes about a minute):
    >>> from trainers.arena.runner import ArenaConfig, run_arena   # doctest: +SKIP
    >>> cfg = ArenaConfig.of(env="alfworld-generated", updates=4, groups_per_update=2, group_size=4)  # doctest: +SKIP
    >>> summary = run_arena(cfg, methods=["grpo", "mcgpo"], seeds=[0, 1], out_dir="arena_out")  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import tyro

from agent_envs.agent.prompts import info_goal
from agent_envs.agent.walkthrough import replay_walkthroughs
from agent_envs.family import ArenaPreset, families
from agent_envs.rollout import EnvPool, GroupRunner, Turn, matching_keys
from agent_envs.tasks import select_tasks, train_val_tasks
from rubrics.trajectory import Trajectory
from trainers.arena.memo import EpisodeMemo, MemoTable
from trainers.arena.objective import Adam, decision_loss
from trainers.arena.policy import DecisionFeatures, Featurizer, LinearSoftmaxPolicy, make_featurizer
from trainers.arena.variants import MethodSpec, degrade_advantages, resolve_method
from trainers.metrics import run_identity, upgrade_record
from trainers.settings import (
    ObjectiveConfig,
    Rollouts,
    Schedule,
    Section,
    Updates,
    WarmStart,
    check,
    nest,
    setting,
)
from trainers.typed_cli import YamlDict
from trainers.update_rule import AdvantageScaler, UpdateRuleConfig, trust_region_update

__all__ = [
    "DEFAULT_METHODS",
    "DEFAULT_SEEDS",
    "ENV_PRESETS",
    "ArenaConfig",
    "ArenaPolicy",
    "DecisionRecord",
    "EnvPreset",
    "arena_envs",
    "completed_run",
    "expand_actions",
    "game_draw",
    "make_arena_env",
    "matching_keys",
    "play_groups",
    "prepare_generated_games",
    "run_arena",
    "run_dir_name",
    "run_one",
    "search_queries",
]

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------- environments


#: How the arena uses one environment: declared by its family (:class:`agent_envs.family.ArenaPreset`).
EnvPreset = ArenaPreset

#: Generator seed of seed 0's games with ``--fresh-games`` (seed k: this + k; the fixed games are
#: generator seed 0's).
FRESH_GAMES_SEED = 1000

#: Named environments of ``rubricgym arena --env``: every registered family's arena presets.
ENV_PRESETS: dict[str, EnvPreset] = {name: p for fam in families() for name, p in fam.arena.items()}

#: The names of :data:`ENV_PRESETS` (the choices of ``rubricgym arena --env``).
ArenaEnv = Literal[tuple(ENV_PRESETS)]  # type: ignore[valid-type]

# ------------------------------------------------------------------------------- configuration

#: Per-environment defaults of :meth:`ArenaConfig.for_env` (measured; see docs/arena.md and each
#: family's arena presets).
DEFAULT_SETTINGS: dict[str, dict[str, Any]] = {name: dict(p.settings) for name, p in ENV_PRESETS.items()}

#: ``(--estimators, --variants)`` of ``rubricgym arena --env E`` without them (others: the
#: registered estimators, no variants), as each family's preset declares (on ALFWorld: the five
#: estimators of the powered comparison with the finest calibration control beside them;
#: docs/arena.md).
DEFAULT_METHODS: dict[str, tuple[str, str]] = {name: p.methods for name, p in ENV_PRESETS.items() if p.methods}

#: Seeds of ``rubricgym arena --env E`` without ``--seeds`` (sized so the comparison's
#: minimum detectable difference is as documented in docs/arena.md).
DEFAULT_SEEDS: dict[str, int] = {name: p.seeds for name, p in ENV_PRESETS.items()}


@dataclass
class ArenaConfig:
    """One arena setting (everything but the method and the seed).

    The rollout, objective, update, warm-start and schedule sections are the trainer's
    (:mod:`trainers.settings`; the arena's defaults where they differ); the flat fields are the
    arena's own.  Every field is a flag of ``rubricgym arena`` (generated by tyro,
    :mod:`trainers.typed_cli`) with its help text and bounds.  :meth:`of` builds one from flat
    ``setting=value`` keywords, :meth:`for_env` from an environment's defaults.
    """

    env: Annotated[ArenaEnv, tyro.conf.arg(aliases=("-e",))] = setting(
        "alfworld-generated", "Environment: an arena preset of a registered environment family (--list names "
                              "them; alfworld-generated needs no data); it also picks the other settings' "
                              "defaults (DEFAULT_SETTINGS).")
    rollout: Section[Rollouts] = field(default_factory=lambda: Rollouts(groups_per_update=4))
    objective: Section[ObjectiveConfig] = field(default_factory=ObjectiveConfig)
    update: Section[Updates] = field(default_factory=lambda: Updates(learning_rate=10.0))  # with target_kl: the WebShop sweep of docs/arena.md (lr 3/10/30, KL 0.02/0.05/0.15)
    warm_start: Section[WarmStart] = field(default_factory=lambda: WarmStart(warm_start_epochs=3, warm_start_lr=0.1))
    schedule: Section[Schedule] = field(default_factory=lambda: Schedule(updates=30, train_tasks=24, val_tasks=24))
    val_episodes: int = setting(1, "Episodes per validation task at each validation (episode 0 draws the noise a "
                                   "single-episode validation draws; the record keeps each episode index's success "
                                   "rate, success_by_episode).", ge=1)
    minibatch: int = setting(32, "Rows per micro-batch of the SGD steps (MCGPO pairs are kept together).", ge=1)
    adv_scale: float = setting(1.0, "Multiply every advantage by this before the update rule sees it (the rescaling "
                                    "control: with adv_norm=running_rms it must change nothing).", gt=0)
    sampling: Literal["coupled", "sequential"] = setting(
        "coupled", "How actions are drawn: coupled (Gumbel-max with noise keyed by episode, step and action text: "
                   "common random numbers that survive divergence, so paired runs differ where their policies do) "
                   "or sequential (one uniform per decision, inverse CDF; the arena's former sampling). Both draw "
                   "exactly from the softmax.")
    max_steps: int | None = setting(None, "Episode horizon (None: the environment preset's).", ge=1)
    dim: int = setting(2**18, "Hashed feature dimension of the linear policy.", ge=1)
    policy: Literal["rubric", "text"] = setting(
        "rubric", "What the linear policy's features read: rubric (the goal, observation, actions and whole action "
                  "history, plus the rubric channels of info['rubric'] and the task's parsed spec, e.g. ALFWorld's "
                  "target and destination) or text (only what an LLM agent's prompt shows: the goal sentence, the "
                  "observation, the admissible actions and the last two (observation, action) pairs; "
                  "trainers.arena.text_features).")
    estimator_params: YamlDict = setting({}, "Extra estimator parameters applied to every method, a YAML mapping "
                                             "(e.g. '{gamma: 0.95}').")
    scpo_scorer: Annotated[str, tyro.conf.arg(aliases=("--scorer",))] = setting(
        "lexical", "SCPO's scorer: lexical (fast, the arena's default), auto (bi-encoder if installed), "
                   "bi-encoder[:path] or cross-encoder:path.")
    save_rollouts: bool = setting(False, "Also write each update's trajectories as JSON Lines.")
    memo: bool = setting(True, "Answer repeated (task, action history) prefixes from memory (EpisodeMemo; changes "
                               "speed, never results).")
    fast_grammar: bool = setting(True, "Memoise TextWorld's grammar parsing in this process "
                                       "(agent_envs.alfworld.fast_grammar; ALFWorld steps 2-3x faster, same outputs).")
    fresh_games: bool = setting(
        False, "Draw each seed's training, validation and warm-start games from its own draw (game_draw): "
               "generated games of generator seed FRESH_GAMES_SEED + seed (alfworld-generated), else a seed's own "
               "order of the splits' tasks (WebShop goals, ALFWorld's games), so the intervals cover games as well "
               "as sampling.  Off: every seed plays the same games (generator seed 0, the fixed task order).")
    validate_on_train: bool = setting(False, "Validate on the first val_tasks training tasks instead of held-out "
                                             "ones (measures learning of the training set, not generalisation).")
    task_types: list[str] | None = setting(None, "ALFWorld only: restrict the split to these task types "
                                                 "(gym.make's task_types; None: all six).")

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> ArenaConfig:
        """Check every setting (its type and declared bounds) and how they constrain each other.

        Raises:
            ValueError: the first bad setting, named.
        """
        if self.env not in ENV_PRESETS:
            raise ValueError(f"unknown arena env {self.env!r}; choose one of {', '.join(ENV_PRESETS)}")
        check(self)
        for name in ("train_tasks", "val_tasks"):
            if getattr(self.schedule, name) < 1:
                raise ValueError(f"{name} must be an integer ≥ 1; got {getattr(self.schedule, name)}")
        if self.rollout.groups_per_update > self.schedule.train_tasks:
            raise ValueError(f"groups_per_update ({self.rollout.groups_per_update}) exceeds train_tasks "
                             f"({self.schedule.train_tasks})")
        if self.rollout.val_temperature == 0 and self.val_episodes != 1:
            raise ValueError("greedy validation (val_temperature=0) plays one episode per task: its "
                             f"episodes are identical; got val_episodes={self.val_episodes}")
        self.update_rule()
        return self

    @classmethod
    def of(cls, **settings: Any) -> ArenaConfig:
        """A setting from flat keywords (``updates=4, group_size=4``; the names before the
        sections, e.g. ``lr`` or ``tasks_per_update``, are read as their new ones), the rest
        the defaults."""
        return cls.from_dict(settings)

    def update_rule(self) -> UpdateRuleConfig:
        """The shared update rule's settings (:mod:`trainers.update_rule`)."""
        return self.update.rule()

    @property
    def n_tasks_needed(self) -> int:
        """Tasks of the training split a run uses: RL pool, held-out validation set when it
        shares the split, and the warm-start tasks after both."""
        return self.schedule.train_tasks + self.schedule.val_tasks + self.warm_start.warm_start_tasks

    @classmethod
    def for_env(cls, env: str, **overrides: Any) -> ArenaConfig:
        """The arena's default setting for ``env`` (sized for a 3-seed, seven-estimator
        comparison in under 20 minutes on a 2-core CPU), with ``overrides``."""
        if env not in ENV_PRESETS:
            raise ValueError(f"unknown arena env {env!r}; choose one of {', '.join(ENV_PRESETS)}")
        return cls.from_dict({**DEFAULT_SETTINGS.get(env, {}), **overrides, "env": env})

    @property
    def preset(self) -> EnvPreset:
        """The environment preset."""
        return ENV_PRESETS[self.env]

    @property
    def horizon(self) -> int:
        """The episode horizon used."""
        return self.max_steps if self.max_steps is not None else self.preset.max_steps

    def objective_with(self, overrides: Mapping[str, Any] | None = None) -> ObjectiveConfig:
        """The objective coefficients, with a method's overrides (a copy)."""
        return dataclasses.replace(self.objective, **dict(overrides or {}))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-encodable dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ArenaConfig:
        """Inverse of :meth:`to_dict`, also for flat mappings (the names before the sections
        included); what ``data`` does not name is the default.  Unknown keys are an error
        naming them."""
        return nest(data, cls, cls(), source="ArenaConfig").validate()

    @classmethod
    def recorded(cls, data: Mapping[str, Any]) -> ArenaConfig:
        """The setting a run record's ``config`` describes: :meth:`from_dict`, except that a
        record written before the sections (flat) lacks the settings added since, and ran
        with the values of :data:`IMPLIED_BY_OLDER_RUNS`."""
        return cls.from_dict(data if "rollout" in data else {**IMPLIED_BY_OLDER_RUNS, **data})


#: Settings added to :class:`ArenaConfig` after runs were recorded without them, with the value
#: those runs used: a flat record's config that lacks one of them ran with that value.
IMPLIED_BY_OLDER_RUNS: dict[str, Any] = {"sampling": "sequential", "val_episodes": 1, "kl_clip": 10.0}


# ------------------------------------------------------------------------------- rollouts


@dataclass
class DecisionRecord:
    """What the update needs about one decision (kept beside its :class:`Step`)."""

    decision: DecisionFeatures
    chosen: int
    old_logp: float


_ENV_CACHE: dict[str, EnvPool] = {}


def game_draw(cfg: ArenaConfig, seed: int | None) -> int | None:
    """The games a run of ``seed`` draws: ``None`` (the fixed games) unless ``cfg.fresh_games``,
    else ``FRESH_GAMES_SEED + seed`` (the generator seed of generated games, else the
    ``draw`` of :func:`agent_envs.tasks.task_pool`)."""
    if not cfg.fresh_games or seed is None:
        return None
    return FRESH_GAMES_SEED + int(seed)


def arena_envs(cfg: ArenaConfig, seed: int | None = None) -> EnvPool:
    """The environments of ``cfg`` (of a run of ``seed``: with ``cfg.fresh_games`` a generated
    environment generates that seed's games): an in-process :class:`~agent_envs.rollout.EnvPool`, one
    per (environment, arguments) per process, reused across runs (an environment's episodes
    depend only on the task and the actions).

    Its environments are made on first use: the ``G`` siblings of a group play in lock step
    on environments ``0..G-1``, validation in chunks of at most ``G`` tasks, so a process
    holds ``max(G)`` environments of a kind.  With ``cfg.memo`` every one is wrapped in an
    :class:`~trainers.arena.memo.EpisodeMemo` and all share one
    :class:`~trainers.arena.memo.MemoTable`.
    """
    preset = cfg.preset
    kwargs = dict(preset.make_kwargs)
    kwargs["max_steps"] = cfg.horizon
    if preset.generated_n is not None:
        kwargs["generated_n"] = max(preset.generated_n, cfg.n_tasks_needed)
        if game_draw(cfg, seed) is not None:
            kwargs["generated_seed"] = game_draw(cfg, seed)
    if cfg.task_types is not None and "task_types" not in preset.env_settings:
        raise ValueError(f"ArenaConfig.task_types does not apply to {preset.env_id} (its arena preset does not "
                         "pass task types)")
    for name, kwarg in preset.env_settings.items():
        value = getattr(cfg, name)
        if value is not None:
            kwargs[kwarg] = list(value) if isinstance(value, (list, tuple)) else value
    key = json.dumps([preset.env_id, kwargs, cfg.memo], sort_keys=True, default=str)
    pool = _ENV_CACHE.get(key)
    if pool is None:
        table = MemoTable() if cfg.memo else None

        def make() -> Any:
            from agent_envs import make_env

            env = make_env(preset.env_id, kwargs)
            return EpisodeMemo(env, table=table) if table is not None else env

        make.__name__ = preset.env_id
        pool = _ENV_CACHE[key] = EnvPool(make)
    return pool


def make_arena_env(cfg: ArenaConfig, seed: int | None = None) -> Any:
    """Environment 0 of :func:`arena_envs` (for the task lists)."""
    pool = arena_envs(cfg, seed)
    if 0 not in pool.local:  # an in-process pool makes its environments on first use
        pool.local[0] = pool.env()
    return pool.local[0]


#: The free-text search template of WebShop's admissible actions.
SEARCH_TEMPLATE = "<your query>"
_PRICE_CLAUSE = re.compile(r",?\s*and price lower than [\d.,]+ dollars", re.IGNORECASE)
_REQUEST = re.compile(r"^\s*(i\s+(?:would like|want|need|am looking for|'m looking for)|find me|get me)\s+", re.IGNORECASE)


def search_queries(goal: str) -> list[str]:
    """Candidate queries that replace ``<your query>`` in a templated search action.

    The arena policy chooses among a finite set, so a free-text search becomes three
    goal-derived queries: the request without its price clause, its first six words and its
    first three words (duplicates removed, order kept).

    Example:
        >>> search_queries("i want a gluten free trail mix, and price lower than 40.00 dollars")
        ['a gluten free trail mix', 'gluten free trail mix', 'gluten free trail']
    """
    text = _REQUEST.sub("", _PRICE_CLAUSE.sub("", goal)).strip(" ,.")
    words = [w for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9'&-]*", text) if w.lower() not in {"a", "an", "the"}]
    out: list[str] = []
    for q in (text, " ".join(words[:6]), " ".join(words[:3])):
        q = q.strip()
        if q and q not in out:
            out.append(q)
    return out or ["items"]


def expand_actions(actions: Sequence[str], goal: str) -> list[str]:
    """Admissible actions with templated searches replaced by :func:`search_queries`."""
    out: list[str] = []
    for a in actions:
        if SEARCH_TEMPLATE in a:
            out += [a.replace(SEARCH_TEMPLATE, q) for q in search_queries(goal)]
        else:
            out.append(a)
    return out


class ArenaPolicy:
    """The arena's linear softmax policy as a :class:`~agent_envs.rollout.GroupRunner` policy.

    Called with the live episodes' turns (:class:`~agent_envs.rollout.Turn`), it answers each with
    one of the admissible actions (WebShop's templated search expanded by
    :func:`expand_actions`), sampled at ``temperature``, and records the decision (features,
    chosen index, log π_old at temperature 1) per episode.

    Every episode ``(group, slot)`` of a run draws from its own generator ``rng(group, slot)``,
    made at its first decision: its actions do not depend on which other episodes are played
    in the same lock-step batch, nor in what order.

    Args:
        policy: The acting policy.
        featurizer: Feature extractor matching the policy.
        temperature: Sampling temperature (0: greedy, the first of the highest-scoring actions).
        rng: The generator of episode ``(group, slot)``.
        coupled: Draw each decision by :meth:`~trainers.arena.policy.LinearSoftmaxPolicy.sample_coupled`
            with a key from the episode's generator and the step index (common random numbers
            that survive divergence: the same episode of another method, or of the same
            method after an update, meets the same noise on the same actions); ``False``:
            one uniform draw per decision from the episode's generator (inverse CDF).

    Attributes:
        records: ``(group, slot)`` -> the episode's decision records (:class:`DecisionRecord`),
            one per step.
        task_types: ``(group, slot)`` -> ``info["task"]["type"]`` (``"-"`` when absent).

    Example:
        >>> arena = ArenaPolicy(LinearSoftmaxPolicy(2**10), Featurizer(2**10), temperature=1.0,
        ...                     rng=lambda group, slot: np.random.default_rng([group, slot]))
        >>> info = {"admissible_actions": ["look", "inventory"], "task": {"goal": "find a mug", "type": "demo"}}
        >>> arena([Turn(0, 1, 0, "A kitchen.", info)]) == arena([Turn(0, 1, 0, "A kitchen.", info)])
        True
        >>> len(arena.records[(0, 1)]), arena.task_types[(0, 1)]
        (1, 'demo')
    """

    def __init__(self, policy: LinearSoftmaxPolicy, featurizer: Featurizer, *, temperature: float,
                 rng: Callable[[int, int], np.random.Generator], coupled: bool = False) -> None:
        self.policy, self.featurizer, self.temperature, self.rng = policy, featurizer, temperature, rng
        self.coupled = coupled
        self._keys: dict[tuple[int, int], int] = {}
        self.records: dict[tuple[int, int], list[DecisionRecord]] = {}
        self.task_types: dict[tuple[int, int], str] = {}
        self._tasks: dict[tuple[int, int], Mapping[str, Any]] = {}
        self._rngs: dict[tuple[int, int], np.random.Generator] = {}

    def __call__(self, turns: Sequence[Turn]) -> list[str]:
        return [self._decide(turn) for turn in turns]

    def _decide(self, turn: Turn) -> str:
        key = (turn.group, turn.slot)
        if turn.t == 0:  # a new episode: its task (as reset reported it) and its own generator
            task = turn.info.get("task") or {}
            self._tasks[key], self._rngs[key], self.records[key] = task, self.rng(*key), []
            self.task_types[key] = str(task.get("type", "-"))
            if self.coupled:
                self._keys[key] = int(self._rngs[key].integers(1 << 62))
        task = self._tasks[key]
        goal = str(task.get("goal", ""))
        actions = expand_actions(turn.info.get("admissible_actions") or [], goal)
        if not actions:
            raise RuntimeError(f"task {task.get('id')!r}: the environment offers no admissible action")
        decision = self.featurizer.turn_decision(turn, goal=goal, actions=actions, task=task,
                                                 task_type=self.task_types[key])
        if self.temperature == 0:  # greedy: the first of the highest-scoring actions (log π_old at T = 1)
            logp = self.policy.log_probabilities(decision)
            k = int(np.argmax(logp))
            self.records[key].append(DecisionRecord(decision, k, float(logp[k])))
            return actions[k]
        if self.coupled:  # the noise of decision t: a function of the episode's key, t and each action
            k, logp_t = self.policy.sample_coupled(decision, self._keys[key] * 1_000_003 + turn.t, self.temperature)
        else:
            k, logp_t = self.policy.sample(decision, self._rngs[key], self.temperature)
        # log π_old at temperature 1 (the objective's ratio is at temperature 1)
        old_logp = float(self.policy.log_probabilities(decision)[k]) if self.temperature != 1.0 else logp_t
        self.records[key].append(DecisionRecord(decision, k, old_logp))
        return actions[k]


def play_groups(
    envs: EnvPool, policy: ArenaPolicy, tasks: Sequence[Any], seeds: Sequence[int], *,
    split: str | None, group_size: int,
) -> list[list[Trajectory]]:
    """Play ``group_size`` siblings of every task with the arena policy, all in lock step, on
    environments ``0 .. len(tasks) * group_size - 1`` of ``envs``.

    The episodes are played by :class:`~agent_envs.rollout.GroupRunner` (the project's one
    episode loop; steps from :func:`~rubrics.trajectory.step_from_info`); ``policy`` keeps
    each episode's decision records and task type under ``(group, slot)``.

    Args:
        envs: The environments (e.g. :func:`arena_envs`; the runner does not close them).
        policy: The arena policy of this call (its generators are keyed by position in ``tasks``).
        tasks: Task index or id per group (``options["task"]``).
        seeds: ``reset(seed=...)`` per group; siblings share it, so they start identically.
        split: ``options["split"]`` (``None`` leaves it out).
        group_size: Siblings per task.
    """
    runner = GroupRunner(envs)
    return runner.run(list(tasks), policy, group_size=group_size, seeds=[int(s) for s in seeds],
                      options=None if split is None else {"split": split})


# ------------------------------------------------------------------------------- updates


def _minibatches(
    n_rows: int, pairs: Sequence[tuple[int, int, float]], size: int, rng: np.random.Generator
) -> list[tuple[list[int], list[tuple[int, int, float]]]]:
    """Shuffle rows into micro-batches of about ``size`` rows with both rows of every pair
    in the same micro-batch; returns ``(rows, pairs with batch-local positions)``."""
    paired: set[int] = set()
    units: list[tuple[list[int], list[tuple[int, int, float]]]] = []
    for p, q, w in pairs:
        if p in paired or q in paired or p == q:
            continue  # the allocator gives disjoint pairs; keep the first use of a row
        paired.update((p, q))
        units.append(([p, q], [(p, q, w)]))
    units += [([r], []) for r in range(n_rows) if r not in paired]
    order = rng.permutation(len(units))
    batches: list[tuple[list[int], list[tuple[int, int, float]]]] = []
    rows: list[int] = []
    bpairs: list[tuple[int, int, float]] = []
    for u in order:
        urows, upairs = units[u]
        if rows and len(rows) + len(urows) > size:
            batches.append((rows, bpairs))
            rows, bpairs = [], []
        rows += urows
        bpairs += upairs
    if rows:
        batches.append((rows, bpairs))
    out = []
    for rows, bpairs in batches:
        pos = {r: i for i, r in enumerate(rows)}
        out.append((rows, [(pos[p], pos[q], w) for p, q, w in bpairs]))
    return out


class _ArenaOps:
    """:class:`~trainers.update_rule.PolicyOps` of the linear policy on one update's rows:
    pair-aware mini-batch SGD steps on the SPEC §5 objective, exact KL over the admissible
    actions."""

    def __init__(self, policy: LinearSoftmaxPolicy, reference: LinearSoftmaxPolicy,
                 records: Sequence[DecisionRecord], advantages: np.ndarray,
                 pairs: Sequence[tuple[int, int, float]], objective: ObjectiveConfig,
                 *, lr: float, minibatch: int, rng: np.random.Generator) -> None:
        self.policy, self.objective, self.lr, self.minibatch, self.rng = policy, objective, lr, minibatch, rng
        self.decisions = [r.decision for r in records]
        self.chosen = np.array([r.chosen for r in records], dtype=np.int64)
        self.old = np.array([r.old_logp for r in records], dtype=np.float64)
        self.ref = reference.evaluate(self.decisions, self.chosen).logp
        self.advantages, self.pairs = advantages, pairs
        self.old_all = policy.evaluate(self.decisions, self.chosen).logp_all

    def snapshot(self) -> np.ndarray:
        return self.policy.weights.copy()

    def epoch(self, index: int) -> dict[str, float]:
        acc: dict[str, list[float]] = defaultdict(list)
        for rows, bpairs in _minibatches(len(self.decisions), self.pairs, self.minibatch, self.rng):
            ev = self.policy.evaluate([self.decisions[r] for r in rows], self.chosen[rows])
            out = decision_loss(
                logp=ev.logp, old_logp=self.old[rows], ref_logp=self.ref[rows],
                advantages=self.advantages[rows], entropy=ev.entropy, pairs=bpairs, config=self.objective,
            )
            self.policy.weights -= self.lr * ev.grad(out.d_logp, out.d_entropy)
            for k in ("loss", "policy_loss", "kl", "entropy", "pair_loss", "clip_fraction", "dual_clip_fraction"):
                acc[k].append(getattr(out, k))
            if out.n_pairs:
                acc["pair_accuracy"].append(out.pair_accuracy)
        return {("kl_ref" if k == "kl" else k): float(np.mean(v)) for k, v in acc.items()}

    def kl(self, snapshot: np.ndarray) -> float:
        ev = self.policy.evaluate(self.decisions, self.chosen)
        return float(np.mean(ev.kl_from(self.old_all)))

    def interpolate(self, snapshot: np.ndarray, beta: float) -> None:
        self.policy.weights[:] = snapshot + beta * (self.policy.weights - snapshot)

    def distance(self, snapshot: np.ndarray) -> float:
        return float(np.linalg.norm(self.policy.weights - snapshot))


def update_policy(
    policy: LinearSoftmaxPolicy,
    reference: LinearSoftmaxPolicy,
    records: Sequence[DecisionRecord],
    advantages: np.ndarray,
    pairs: Sequence[tuple[int, int, float]],
    objective: ObjectiveConfig,
    rule: UpdateRuleConfig,
    *,
    lr: float,
    minibatch: int,
    rng: np.random.Generator,
) -> dict[str, float]:
    """One update of :func:`~trainers.update_rule.trust_region_update` on the linear policy
    (``advantages`` already scaled); returns its diagnostics."""
    ops = _ArenaOps(policy, reference, records, advantages, pairs, objective, lr=lr, minibatch=minibatch, rng=rng)
    return trust_region_update(ops, rule)


def _aggregate_credit(results: Sequence[Any]) -> dict[str, float]:
    """Mean over the update's groups of every numeric ``CreditResult.stats`` entry."""
    acc: dict[str, list[float]] = defaultdict(list)
    for res in results:
        for k, v in (res.stats or {}).items():
            if isinstance(v, (bool, np.bool_)):
                v = float(v)
            if isinstance(v, (int, float, np.integer, np.floating)) and math.isfinite(float(v)):
                acc[str(k)].append(float(v))
    out = {k: float(np.mean(v)) for k, v in sorted(acc.items())}
    out["pairs_per_update"] = float(sum(len(r.pairs) for r in results))
    return out


# ------------------------------------------------------------------------------- warm start


def _expanded_actions(turn: Turn) -> list[str]:
    """The actions the arena policy chooses among at ``turn`` (:func:`expand_actions`)."""
    goal = info_goal(turn.info)
    return expand_actions(turn.info.get("admissible_actions") or [], goal)


def warm_start(
    policy: LinearSoftmaxPolicy,
    envs: EnvPool,
    cfg: ArenaConfig,
    tasks: Sequence[Any],
    featurizer: Featurizer,
) -> dict[str, float]:
    """Behaviour cloning on the walkthroughs of ``tasks`` (the arena's "SFT" step).

    Each walkthrough is replayed in the environments through the one episode loop
    (:class:`~agent_envs.agent.walkthrough.WalkthroughReplay`, ``cfg.rollout.group_size`` tasks at a
    time); every decision becomes a row whose target is the walkthrough's action, and the
    policy maximises their mean log-likelihood for ``cfg.warm_start.warm_start_epochs`` passes of Adam
    mini-batches.  Deterministic (fixed order, no sampling), so every method and seed of a
    comparison starts from the same policy.

    Raises:
        ValueError: none of ``tasks`` has a walkthrough (e.g. WebShop).
    """
    decisions: list[DecisionFeatures] = []
    chosen: list[int] = []
    for _k, d in replay_walkthroughs(envs, tasks, [0] * len(tasks), split=cfg.preset.train_split,
                                     chunk=cfg.rollout.group_size, admissible=_expanded_actions):
        task = d.first_info.get("task") or {}
        decisions.append(featurizer.turn_decision(d.turn, goal=str(task.get("goal", "")), actions=d.actions,
                                                  task=d.turn.info.get("task"), task_type=str(task.get("type", "-"))))
        chosen.append(d.index)
    if not decisions:
        raise ValueError(f"warm_start: no walkthrough found for the {len(tasks)} training tasks of {cfg.env}")
    opt = Adam(policy.dim, lr=cfg.warm_start.warm_start_lr)
    rng = np.random.default_rng(0)
    n = len(decisions)
    for _ in range(cfg.warm_start.warm_start_epochs):
        order = rng.permutation(n)
        for start in range(0, n, cfg.minibatch):
            rows = order[start : start + cfg.minibatch]
            ev = policy.evaluate([decisions[r] for r in rows], [chosen[r] for r in rows])
            opt.step(policy.weights, ev.grad(np.full(len(rows), -1.0 / len(rows))))
    final = policy.evaluate(decisions, chosen)
    return {"demo_rows": float(n), "demo_logp": float(final.logp.mean())}


def warm_start_tasks(env: Any, cfg: ArenaConfig, seed: int | None = None) -> list[Any]:
    """The ``cfg.warm_start.warm_start_tasks`` behaviour-cloning tasks: the positions of the training split
    after the RL pool (and after the validation set when it shares the split), so cloned
    tasks are never trained on with RL nor validated on."""
    preset = cfg.preset
    offset = cfg.schedule.train_tasks + (cfg.schedule.val_tasks if preset.val_split == preset.train_split else 0)
    return select_tasks(env, preset.train_split, cfg.warm_start.warm_start_tasks, offset, draw=_task_draw(cfg, seed))


def _task_draw(cfg: ArenaConfig, seed: int | None) -> int | None:
    """The ``draw`` of the task order (:func:`game_draw`; ``None`` for generated games, whose
    draw is the generator seed)."""
    return None if cfg.preset.generated_n is not None else game_draw(cfg, seed)


# ------------------------------------------------------------------------------- one run


def run_dir_name(method: str, seed: int) -> str:
    """Folder name of a run: ``<method>__seed<k>`` with ``:`` and ``+`` kept readable."""
    safe = method.replace("/", "_").replace(" ", "")
    return f"{safe}__seed{seed}"


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([int(k) & 0xFFFFFFFF for k in key])


def _evaluate(
    envs: EnvPool, cfg: ArenaConfig, val_set: Sequence[Any], val_split: str | None, policy: LinearSoftmaxPolicy,
    featurizer: Featurizer, seed: int, update: int,
) -> dict[str, Any]:
    """``cfg.val_episodes`` rollouts of every validation task (task ``k``: reset seed ``k``;
    episode ``j`` of it draws from ``_rng(seed, 1_000_003, update, k)`` for ``j = 0``, from
    ``_rng(seed, 1_000_003, update, k, j)`` after), in lock-step chunks of at most
    ``cfg.rollout.group_size`` environments on ``envs``."""
    k_ep = cfg.val_episodes
    succ = np.zeros((len(val_set), k_ep))
    score, steps, invalid = [], [], 0
    per_type: dict[str, list[float]] = defaultdict(list)
    chunk_n = max(1, cfg.rollout.group_size // k_ep)

    def rng(g: int, slot: int, start: int) -> np.random.Generator:
        key = (seed, 1_000_003, update, start + g) + ((slot,) if slot else ())
        return _rng(*key)

    for start in range(0, len(val_set), chunk_n):
        chunk = list(val_set[start : start + chunk_n])
        arena = ArenaPolicy(policy, featurizer, temperature=cfg.rollout.val_temperature, coupled=cfg.sampling == "coupled",
                            rng=lambda g, slot, start=start: rng(g, slot, start))
        groups = play_groups(envs, arena, chunk, range(start, start + len(chunk)), split=val_split, group_size=k_ep)
        for g, group in enumerate(groups):
            for j, traj in enumerate(group):
                succ[start + g, j] = float(traj.success)
                score.append(float(traj.score))
                steps.append(len(traj.steps))
                invalid += sum(not s.valid for s in traj.steps)
                per_type[arena.task_types[(g, j)]].append(float(traj.success))
    return {
        "update": update,
        "phase": "eval",
        "success": float(succ.mean()),
        "score": float(np.mean(score)),
        "invalid_rate": invalid / max(1, sum(steps)),
        "mean_steps": float(np.mean(steps)),
        **{f"success/{t}": float(np.mean(v)) for t, v in sorted(per_type.items())},
        "success_by_episode": succ.mean(axis=0).tolist(),
        "episodes": succ.size,
    }


# Process-wide: what every method of a comparison computes identically.  The warm start is
# deterministic (one policy for every method and seed), and the validation before the first
# update sees the same policy and draws for every method of a seed; each is computed once
# per process and setting (keyed by the whole setting, the seed and the policy's weights).
_warm_starts: dict[str, tuple[np.ndarray, dict[str, float]]] = {}
_first_validations: dict[tuple[str, int, str], dict[str, Any]] = {}
_SHARED_SIZE = 16  # settings; a warm-started weight vector is dim x 8 bytes (2 MiB)


def _setting_key(cfg: ArenaConfig) -> str:
    return json.dumps(cfg.to_dict(), sort_keys=True, default=str)


def _keep(table: dict[Any, Any], key: Any, value: Any) -> Any:
    """``table[key] = value`` (emptied first when full: memory stays bounded); returns ``value``."""
    if len(table) >= _SHARED_SIZE:
        table.clear()
    table[key] = value
    return value


def _warm_started(policy: LinearSoftmaxPolicy, env: Any, cfg: ArenaConfig, featurizer: Featurizer,
                  seed: int | None = None) -> dict[str, float]:
    """:func:`warm_start` of ``policy``, run once per process, setting and games (:func:`game_draw`)."""
    key = f"{_setting_key(cfg)}|{game_draw(cfg, seed)}"
    hit = _warm_starts.get(key)
    if hit is None:
        stats = warm_start(policy, arena_envs(cfg, seed), cfg, warm_start_tasks(env, cfg, seed), featurizer)
        hit = _keep(_warm_starts, key, (policy.weights.copy(), stats))
    policy.weights[:] = hit[0]
    return dict(hit[1])


def _evaluate_once(envs: EnvPool, cfg: ArenaConfig, val_set: Sequence[Any], val_split: str | None,
                   policy: LinearSoftmaxPolicy, featurizer: Featurizer, seed: int, update: int) -> dict[str, Any]:
    """:func:`_evaluate`; the validation before the first update is kept per process, setting,
    seed and weights (every method of a seed starts there)."""
    if update != 0:
        return _evaluate(envs, cfg, val_set, val_split, policy, featurizer, seed, update)
    key = (_setting_key(cfg), seed, hashlib.sha1(policy.weights.tobytes()).hexdigest())
    hit = _first_validations.get(key)
    if hit is None:
        hit = _keep(_first_validations, key, _evaluate(envs, cfg, val_set, val_split, policy, featurizer, seed, update))
    return copy.deepcopy(hit)


def _task_sets(env: Any, cfg: ArenaConfig, seed: int | None = None) -> tuple[list[Any], list[Any], str | None]:
    """(training pool, validation tasks, validation split) of a run of ``seed``."""
    preset, draw = cfg.preset, _task_draw(cfg, seed)
    if cfg.validate_on_train:
        if cfg.schedule.val_tasks > cfg.schedule.train_tasks:
            raise ValueError("validate_on_train needs val_tasks <= train_tasks")
        train_pool = select_tasks(env, preset.train_split, cfg.schedule.train_tasks, draw=draw)
        return train_pool, train_pool[: cfg.schedule.val_tasks], preset.train_split
    train_pool, val = train_val_tasks(env, preset.train_split, preset.val_split, train_n=cfg.schedule.train_tasks,
                                      val_n=cfg.schedule.val_tasks, draw=draw)
    return train_pool, val, preset.val_split


def _play_groups(
    envs: EnvPool, cfg: ArenaConfig, policy: LinearSoftmaxPolicy, featurizer: Featurizer, seed: int, update: int,
    picks: Sequence[int], tasks: Sequence[Any],
) -> tuple[list[list[Trajectory]], list[list[list[DecisionRecord]]], int]:
    """One update's rollouts: ``cfg.rollout.group_size`` siblings per task, one group at a time in
    lock step (sibling ``slot`` of training task ``pick`` draws from ``_rng(seed, update,
    pick, slot)``, reset seed ``pick``); (groups, their decision records, invalid actions)."""
    groups: list[list[Trajectory]] = []
    group_records: list[list[list[DecisionRecord]]] = []
    invalid = 0
    for pick, task in zip(picks, tasks):
        arena = ArenaPolicy(policy, featurizer, temperature=cfg.rollout.temperature, coupled=cfg.sampling == "coupled",
                            rng=lambda _g, slot, pick=pick: _rng(seed, update, pick, slot))
        (group,) = play_groups(envs, arena, [task], [pick], split=cfg.preset.train_split, group_size=cfg.rollout.group_size)
        groups.append(group)
        group_records.append([arena.records[(0, slot)] for slot in range(cfg.rollout.group_size)])
        invalid += sum(not s.valid for traj in group for s in traj.steps)
    return groups, group_records, invalid


def _credit_rows(
    groups: Sequence[Sequence[Trajectory]], group_records: Sequence[Sequence[list[DecisionRecord]]],
    results: Sequence[Any], scale: float, degrade: tuple[tuple[str, float], ...] = (),
    rng: np.random.Generator | None = None,
) -> tuple[list[DecisionRecord], np.ndarray, list[tuple[int, int, float]]]:
    """Flatten the decision rows with their advantages (times ``scale``, then degraded by a
    method's calibration controls ``degrade`` with ``rng``,
    :func:`~trainers.arena.variants.degrade_advantages`) and map MCGPO preferences
    (trajectory, step) -> row ids: (records, advantages, pairs)."""
    records: list[DecisionRecord] = []
    adv_parts: list[np.ndarray] = []
    pairs: list[tuple[int, int, float]] = []
    for group, grecs, res in zip(groups, group_records, results):
        offsets = {}
        for i, (_traj, recs) in enumerate(zip(group, grecs)):
            offsets[i] = len(records)
            records += recs
            adv_parts.append(np.asarray(res.advantages[i], dtype=np.float64))
        for pref in res.pairs:
            (pi, pt), (ni, nt) = pref.preferred, pref.rejected
            pairs.append((offsets[pi] + pt, offsets[ni] + nt, float(pref.weight)))
    if degrade:
        assert rng is not None, "calibration controls draw from rng"
        adv_parts = degrade_advantages(adv_parts, degrade, rng)
    advantages = scale * (np.concatenate(adv_parts) if adv_parts else np.zeros(0))
    return records, advantages, pairs


def _train_record(
    update: int, tasks: list[Any], groups: Sequence[Sequence[Trajectory]], invalid: int, n_rows: int,
    advantages: np.ndarray, results: Sequence[Any], loss_stats: dict[str, float], times: dict[str, float],
) -> dict[str, Any]:
    """The ``train`` metric record of one update, in the schema of :mod:`trainers.metrics`
    (``train/``, ``credit/``, ``opt/``, ``rollout/`` and ``time/`` keys, the trainer's)."""
    trajs = [t for g in groups for t in g]
    n_steps = sum(len(t.steps) for t in trajs)
    credit = _aggregate_credit(results)
    return {
        "update": update,
        "phase": "train",
        "train/success": float(np.mean([t.success for t in trajs])),
        "train/score": float(np.mean([t.score for t in trajs])),
        "train/mean_steps": n_steps / len(trajs),
        "train/invalid_rate": invalid / max(1, n_steps),
        "train/episodes": len(trajs),
        "train/groups_with_success": int(sum(any(t.success for t in g) for g in groups)),
        "credit/adv_abs_mean": float(np.mean(np.abs(advantages))) if advantages.size else 0.0,
        "credit/adv_zero_share": float(np.mean(np.abs(advantages) < 1e-9)) if advantages.size else 1.0,
        "opt/pairs": credit.pop("pairs_per_update"),
        **{f"credit/stat_{k}": v for k, v in credit.items()},
        "opt/rows": n_rows,
        **{f"opt/{'pg_loss' if k == 'policy_loss' else k}": v for k, v in loss_stats.items()},
        "rollout/rollout_s": times["rollout"],
        "credit/credit_s": times["credit"],
        "opt/optimize_s": times["update"],
        "time/update_s": float(sum(times.values())),
        "tasks": tasks,
    }


def run_one(cfg: ArenaConfig, method: str, seed: int, out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Train and validate one (method, seed) run; writes ``runs/<method>__seed<k>/``.

    The run's numpy work is many small operations, so BLAS runs on one thread meanwhile
    (``threadpoolctl``; the caller's limits are restored afterwards): OpenBLAS's other
    threads only spun, and a comparison already runs one process per core (measured on
    WebShop, five runs: 101 CPU-s in about 70 s wall with OpenBLAS's default threads, 60
    CPU-s in 61 s with one; the runs' results equal, only the last bit of the ‖Δθ‖
    diagnostic differs).

    Returns the ``end`` record (readouts and seconds).

    Raises:
        ValueError: an unknown method or variant.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        return _run_one(cfg, method, seed, out_dir)


def _run_one(cfg: ArenaConfig, method: str, seed: int, out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    from trainers.arena.report import RunMetrics

    t_start = time.perf_counter()
    cpu_start = time.process_time()
    spec: MethodSpec = resolve_method(method, cfg.preset.family, cfg.estimator_params, scpo_scorer=cfg.scpo_scorer)
    estimator = spec.build()
    objective = cfg.objective_with(spec.objective)
    run_dir = Path(out_dir) / "runs" / run_dir_name(method, seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics_path = run_dir / "metrics.jsonl"
    tmp_path = run_dir / "metrics.jsonl.partial"
    envs, env = arena_envs(cfg, seed), make_arena_env(cfg, seed)
    train_pool, val_set, val_split = _task_sets(env, cfg, seed)
    featurizer = make_featurizer(cfg.policy, cfg.dim)
    policy = LinearSoftmaxPolicy(cfg.dim)
    warm: dict[str, float] = {}
    if cfg.warm_start.warm_start_tasks:
        warm = _warm_started(policy, env, cfg, featurizer, seed)
    reference = policy.copy()
    rule = cfg.update_rule()
    scaler = AdvantageScaler.from_config(rule)
    run = RunMetrics(method=method, seed=seed)
    task_rng = _rng(seed, 7)
    log.info("arena run %s seed %d: %s", method, seed, spec.params)
    with tmp_path.open("w", encoding="utf-8") as fh:

        def emit(rec: dict[str, Any]) -> None:  # a record of the schema of trainers.metrics
            fh.write(json.dumps(rec, allow_nan=True) + "\n")
            fh.flush()

        def validate(update: int) -> dict[str, Any]:
            t_eval = time.perf_counter()
            rec = _evaluate_once(envs, cfg, val_set, val_split, policy, featurizer, seed, update)
            rec["eval_s"] = time.perf_counter() - t_eval
            run.evals.append(rec)
            emit(rec)
            return rec

        emit({"update": 0, "phase": "run",
              **run_identity("arena", cfg.env, spec.estimator, "+".join(spec.variants), seed, cfg.to_dict(), method=method),
              "estimator_params": dict(spec.params), "objective": asdict(objective), "warm_start": warm})
        validate(0)
        for update in range(1, cfg.schedule.updates + 1):
            t0 = time.perf_counter()
            picks = sorted(task_rng.choice(cfg.schedule.train_tasks, size=cfg.rollout.groups_per_update, replace=False).tolist())
            tasks = [train_pool[k] for k in picks]
            groups, group_records, invalid = _play_groups(envs, cfg, policy, featurizer, seed, update, picks, tasks)
            t1 = time.perf_counter()
            results = estimator(groups)
            t2 = time.perf_counter()
            records, advantages, pairs = _credit_rows(groups, group_records, results, cfg.adv_scale * spec.adv_scale,
                                                      spec.degrade, _rng(seed, update, 55))
            scaled = scaler.normalize(advantages)
            loss_stats: dict[str, float] = {}
            if cfg.update.rl_update and spec.rl:
                loss_stats = update_policy(
                    policy, reference, records, scaled, pairs, objective, rule,
                    lr=cfg.update.learning_rate, minibatch=cfg.minibatch, rng=_rng(seed, update, 99),
                )
            loss_stats["adv_rms"] = float(np.sqrt(np.mean(advantages**2))) if advantages.size else 0.0
            loss_stats["adv_rms_scaled"] = float(np.sqrt(np.mean(scaled**2))) if scaled.size else 0.0
            t3 = time.perf_counter()
            train_rec = _train_record(update, tasks, groups, invalid, len(records), advantages, results, loss_stats,
                                      {"rollout": t1 - t0, "credit": t2 - t1, "update": t3 - t2})
            run.train.append(train_rec)
            emit(train_rec)
            if cfg.save_rollouts:
                from rubrics.trajectory import save_jsonl

                save_jsonl(run_dir / "rollouts" / f"update_{update:04d}.jsonl", [t for g in groups for t in g])
            if update % cfg.schedule.eval_every == 0 or update == cfg.schedule.updates:
                rec = validate(update)
                log.info("%s seed %d update %d: validation success %.3f", method, seed, update, rec["success"])
        end = {"update": cfg.schedule.updates, "phase": "end", "readouts": run.readouts(), "seconds": time.perf_counter() - t_start,
               "cpu_seconds": time.process_time() - cpu_start}
        # what depends on the process and on what ran in it before: its id and the memo's counters
        end["time"] = {"process": os.getpid(), **(env.stats() if isinstance(env, EpisodeMemo) else {})}
        emit(end)
    os.replace(tmp_path, metrics_path)
    return end


# ------------------------------------------------------------------------------- many runs


def completed_run(cfg: ArenaConfig, method: str, seed: int, out_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``end`` record of a finished run of (``cfg``, ``method``, ``seed``) in ``out_dir``,
    or ``None`` when there is none, it is incomplete, or it ran another setting.

    Runs are deterministic, so a finished one need not run again: an interrupted comparison
    continues where it stopped, and more seeds can be added to a folder later.
    """
    path = Path(out_dir) / "runs" / run_dir_name(method, seed) / "metrics.jsonl"
    if not path.is_file():
        return None
    try:
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        first, last = records[0], records[-1]
    except (OSError, ValueError, IndexError):
        return None  # unreadable or damaged anywhere: run it again
    wanted = json.loads(json.dumps(cfg.to_dict(), sort_keys=True, allow_nan=True))
    first, last = upgrade_record(first), upgrade_record(last)  # arena files from before the schema too
    if first.get("phase") != "run" or last.get("phase") != "end":
        return None
    try:
        ran = ArenaConfig.recorded(first.get("config") or {}).to_dict()
    except (ValueError, TypeError):
        return None  # a setting this version cannot read: run it again
    return last if json.loads(json.dumps(ran, sort_keys=True, allow_nan=True)) == wanted else None


def _run_job(args: tuple[dict[str, Any], str, int, str]) -> tuple[str, int, dict[str, Any]]:
    cfg_dict, method, seed, out_dir = args
    cfg = ArenaConfig.from_dict(cfg_dict)
    done = completed_run(cfg, method, seed, out_dir)
    if done is not None:
        log.info("%s seed %d: finished run found in %s, not run again", method, seed, out_dir)
        return method, seed, done
    return method, seed, run_one(cfg, method, seed, out_dir)


def _run_seed_affine(seed_jobs: Sequence[Sequence[tuple[dict[str, Any], str, int, str]]], workers: int,
                     progress: Callable[[str, int, dict[str, Any]], None] | None) -> None:
    """Run each seed's jobs (one per method) in one worker process, ``workers`` at a time.

    A worker that finishes a seed takes the next one.  Every method of a seed then runs in
    the process that already holds what they share (the first validation, the first
    update's episodes in the memo table, the engine's transition memo); which process runs
    a job never changes its numbers, only the time.
    """
    import multiprocessing as mp
    from collections import deque
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    todo = deque(seed_jobs)
    pools = [ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"),
                                 initializer=_worker_init, initargs=(os.getpid(),))
             for _ in range(min(workers, len(todo)))]
    running: dict[Any, int] = {}  # future -> index of the pool running it
    left = [0] * len(pools)  # jobs of the pool's current seed not yet finished

    def feed(i: int) -> None:
        jobs = todo.popleft() if todo else ()
        for job in jobs:
            running[pools[i].submit(_run_job, job)] = i
        left[i] = len(jobs)

    try:
        for i in range(len(pools)):
            feed(i)
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                i = running.pop(fut)
                method, seed, end = fut.result()
                if progress:
                    progress(method, seed, end)
                left[i] -= 1
                if left[i] == 0:
                    feed(i)
    finally:
        for pool in pools:
            pool.shutdown(cancel_futures=True)


def _worker_init(parent: int) -> None:
    """Set up a spawned worker: logging (never configured in the caller's process), and exit
    when the comparison's process is gone (a killed comparison leaves no workers running)."""
    logging.basicConfig(level=logging.WARNING)
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()


def _exit_with_parent(parent: int, poll: float = 1.0) -> None:
    while os.getppid() == parent:
        time.sleep(poll)
    os._exit(1)


def prepare_generated_games(cfg: ArenaConfig, seeds: Sequence[int] = ()) -> list[Path]:
    """Generate (or find) the game cache a generated-ALFWorld setting plays, in this process.

    Call it in the parent before worker processes start: otherwise every worker would
    generate the same cache at once on first use.  Uses the same ``n``, seed and task types
    as :func:`make_arena_env` passes to the environment (with ``cfg.fresh_games``, every one
    of ``seeds``' generator seeds); returns ``[]`` for other environments.
    """
    preset = cfg.preset
    if preset.generated_n is None:
        return []
    from agent_envs.alfworld.generator import ensure_generated

    n = max(preset.generated_n, cfg.n_tasks_needed)
    draws = sorted({game_draw(cfg, s) for s in seeds} - {None}) if cfg.fresh_games else [0]
    return [Path(p) for d in draws for p in ensure_generated(n=n, seed=d, task_types=cfg.task_types)]


def _validation_mode(cfg: ArenaConfig) -> str:
    """How the validation plays, in words (for the report)."""
    if cfg.rollout.val_temperature == 0:
        return "greedy"
    episodes = f"{cfg.val_episodes} episodes per task, " if cfg.val_episodes > 1 else ""
    return f"{episodes}T = {cfg.rollout.val_temperature:g}"


def run_arena(
    cfg: ArenaConfig,
    methods: Sequence[str],
    seeds: Sequence[int],
    out_dir: str | os.PathLike[str],
    *,
    workers: int = 1,
    baseline: str | None = None,
    progress: Callable[[str, int, dict[str, Any]], None] | None = None,
    title: str | None = None,
    command: str | None = None,
) -> dict[str, Any]:
    """Run every (method, seed), then write the report; returns the summary.

    A (method, seed) whose finished run of the same setting is already in ``out_dir`` is not
    run again (:func:`completed_run`): an interrupted comparison continues, and seeds can be
    added to a folder later; the report covers every finished run in the folder.

    Args:
        cfg: The arena setting.
        methods: Method strings (``estimator`` or ``estimator:variant``).
        seeds: Training seeds (paired across methods).
        out_dir: Output folder (``config.json``, ``runs/``, ``results.md``, PNGs).
        workers: Parallel processes (each run is independent, so results do not depend
            on this number); each runs whole seeds (every method of a seed), which share
            work.
        baseline: Method for paired differences (default: the first method).
        progress: Called after each finished run with ``(method, seed, end record)``.
        title: Title of the results table.
        command: The command line to record in the report.

    Raises:
        ValueError: no methods or seeds, duplicates, or an unknown method (checked before
            any run starts).
    """
    from trainers.arena.report import write_report

    methods = [m.strip() for m in methods]
    if not methods or not seeds:
        raise ValueError("run_arena needs at least one method and one seed")
    if len(set(methods)) != len(methods) or len(set(seeds)) != len(seeds):
        raise ValueError("methods and seeds must not repeat")
    for m in methods:  # fail before any work
        resolve_method(m, cfg.preset.family, cfg.estimator_params, scpo_scorer=cfg.scpo_scorer).build()
    if baseline is not None and baseline not in methods:
        raise ValueError(f"baseline {baseline!r} is not among the methods {methods}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(
        json.dumps({"arena": cfg.to_dict(), "methods": methods, "seeds": list(seeds), "command": command},
                   indent=2, default=str),
        encoding="utf-8",
    )
    seed_jobs = [[(cfg.to_dict(), m, int(s), str(out)) for m in methods] for s in seeds]
    t0 = time.perf_counter()
    prepare_generated_games(cfg, seeds)  # once, here, before any worker process needs the games
    if workers <= 1:
        for job in (job for jobs in seed_jobs for job in jobs):
            method, seed, end = _run_job(job)
            if progress:
                progress(method, seed, end)
    else:
        _run_seed_affine(seed_jobs, workers, progress)
    wall = time.perf_counter() - t0
    preamble = (
        f"Environment `{cfg.env}`; {cfg.schedule.updates} updates x {cfg.rollout.groups_per_update} tasks x "
        f"{cfg.rollout.group_size} siblings; {cfg.schedule.val_tasks} validation tasks every {cfg.schedule.eval_every} updates "
        f"({_validation_mode(cfg)}); "
        f"seeds {', '.join(map(str, seeds))}; wall time {wall / 60:.1f} min with {workers} worker(s)."
    )
    if command:
        preamble = f"Command: `{command}`\n\n" + preamble
    summary = write_report(out, baseline=baseline or methods[0], title=title or f"Arena: {cfg.env}",
                           preamble=preamble)
    summary["wall_seconds"] = wall
    return summary

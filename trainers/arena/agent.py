"""The arena's agent: the linear softmax policy acting in the project's episode loop.

:class:`ArenaPolicy` answers :class:`~agent_envs.rollout.GroupRunner`'s turns with one of the
admissible actions (WebShop's templated search expanded into goal-derived queries,
:func:`expand_actions`) and keeps what the update needs of every decision
(:class:`DecisionRecord`); :func:`play_groups` plays groups of siblings with it.  Every
episode draws from its own generator, keyed by integers (:func:`keyed_rng`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent_envs.rollout import EnvPool, GroupRunner, Turn
from rubrics.trajectory import Trajectory
from trainers.arena.policy import DecisionFeatures, Featurizer, LinearSoftmaxPolicy

__all__ = [
    "SEARCH_TEMPLATE",
    "ArenaPolicy",
    "DecisionRecord",
    "expand_actions",
    "keyed_rng",
    "play_groups",
    "search_queries",
]


@dataclass
class DecisionRecord:
    """What the update needs about one decision (kept beside its :class:`Step`)."""

    decision: DecisionFeatures
    chosen: int
    old_logp: float


def keyed_rng(*key: int) -> np.random.Generator:
    """The generator of ``key`` (integers, each taken modulo 2**32): every draw of a run is keyed
    by what it is for (seed, update, task, slot, ...), never by what ran before it."""
    return np.random.default_rng([int(k) & 0xFFFFFFFF for k in key])


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

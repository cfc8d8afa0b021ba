"""The expert agent: a :class:`~agent_envs.rollout.GroupRunner` policy that replays expert plans.

An environment family declares its expert (:attr:`agent_envs.family.Family.expert`): the plan
for the task an episode's first ``info`` describes (ALFWorld: the game's stored walkthrough;
a generated puzzle: its solver's solution).  :class:`WalkthroughReplay` plays it through the one
episode loop, and keeps every decision
it made — which is what behaviour cloning learns from (the trainer's
:mod:`trainers.warm_start` and the arena's warm start).

Example (a task without a walkthrough ends at once, and nothing is recorded):
    >>> from agent_envs.rollout import EnvPool, GroupRunner, Turn
    >>> replay = WalkthroughReplay()
    >>> replay([Turn(0, 0, 0, "You are in a room.", {"task": {"id": 3}, "admissible_actions": ["look"]})])
    [None]
    >>> replay.decisions
    []
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_envs.agent.prompts import info_actions
from agent_envs.rollout import EnvPool, GroupRunner, Turn

__all__ = ["ExpertDecision", "WalkthroughReplay", "expert_plan", "replay_walkthroughs"]

#: ``expert(first info) -> plan`` (``[]``: no plan for that task).
Expert = Callable[[Mapping[str, Any]], list[str]]


def expert_plan(info: Mapping[str, Any]) -> list[str]:
    """The plan of the first registered family whose expert knows the task of ``info`` (each
    expert answers ``[]`` for a task it does not know; ``[]`` when none does).

    >>> expert_plan({"task": {"id": 3}})
    []
    """
    from agent_envs.family import families

    for fam in families():
        plan = fam.expert_plan(info)
        if plan:
            return plan
    return []

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExpertDecision:
    """One decision of a replayed walkthrough.

    Attributes:
        turn: What the policy saw (observation, ``info``, history).
        actions: The actions it chose among (``admissible(turn)``).
        index: The walkthrough's action's position in ``actions``.
        first_info: The episode's ``info`` after ``reset`` (its task).
    """

    turn: Turn
    actions: list[str]
    index: int
    first_info: Any


def _admissible(turn: Turn) -> list[str]:
    return info_actions(turn.info)


class WalkthroughReplay:
    """Replays each episode's stored walkthrough while its next action is admissible.

    Answers ``None`` (the episode ends there, :data:`~agent_envs.rollout.Decision`) once the
    walkthrough is over, after ``max_steps`` decisions, or when its next action is not among
    ``admissible(turn)`` (logged as a warning).

    Args:
        admissible: The actions of a turn to choose among (default: ``info["admissible_actions"]``).
        max_steps: Most decisions per episode (``None``: the walkthrough's length).
        expert: The plan of an episode from its first ``info`` (default: :func:`expert_plan`;
            give the family's, :meth:`agent_envs.family.Family.expert_plan`, when it is known).

    Attributes:
        decisions: Every decision made, in the order the policy made them
            (:class:`ExpertDecision`; sort by ``(turn.group, turn.slot, turn.t)`` for task order).
    """

    def __init__(self, admissible: Callable[[Turn], list[str]] | None = None, max_steps: int | None = None,
                 expert: Expert | None = None) -> None:
        self.admissible = admissible or _admissible
        self.max_steps = max_steps
        self.expert = expert or expert_plan
        self.decisions: list[ExpertDecision] = []
        self._plans: dict[tuple[int, int], tuple[list[str], Any]] = {}

    def __call__(self, turns: Sequence[Turn]) -> list[str | None]:
        return [self._next(turn) for turn in turns]

    def _next(self, turn: Turn) -> str | None:
        key = (turn.group, turn.slot)
        if turn.t == 0:
            self._plans[key] = (list(self.expert(turn.info)), turn.info)
        plan, first_info = self._plans[key]
        if turn.t >= len(plan) or (self.max_steps is not None and turn.t >= self.max_steps):
            return None
        action, actions = plan[turn.t], self.admissible(turn)
        if action not in actions:
            log.warning("walkthrough action %r of task %r is not admissible; stopping that replay",
                        action, (first_info.get("task") or {}).get("id"))
            return None
        self.decisions.append(ExpertDecision(turn, actions, actions.index(action), first_info))
        return action


def replay_walkthroughs(pool: EnvPool, tasks: Sequence[Any], seeds: Sequence[int | None], *, split: str | None,
                        chunk: int, admissible: Callable[[Turn], list[str]] | None = None,
                        max_steps: int | None = None, expert: Expert | None = None) -> list[tuple[int, ExpertDecision]]:
    """Replay the walkthroughs of ``tasks`` (reset seed ``seeds[k]``, ``options["split"]``
    unless ``split`` is ``None``) on environments ``0..chunk-1`` of ``pool``, ``chunk`` tasks
    at a time; every decision as ``(task position, decision)``, in task order, then step."""
    runner = GroupRunner(pool)
    keyed: list[tuple[int, int, ExpertDecision]] = []
    for s in range(0, len(tasks), chunk):
        replay = WalkthroughReplay(admissible, max_steps=max_steps, expert=expert)
        runner.run(list(tasks[s:s + chunk]), replay, group_size=1, seeds=list(seeds[s:s + chunk]),
                   options=None if split is None else {"split": split})
        keyed += [(s + d.turn.group, d.turn.t, d) for d in replay.decisions]
    keyed.sort(key=lambda row: row[:2])
    return [(k, d) for k, _t, d in keyed]

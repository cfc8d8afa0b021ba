"""Sibling-group rollouts: G episodes of the same task from identical start states.

Group-relative estimators (GRPO, GiGPO, GraphGPO, MCGPO, ...) compare G sibling rollouts of
one task.  :class:`GroupRunner` keeps a set of environments — in this process, or in worker
processes (game engines such as ALFWorld's are not thread-safe) — resets the G siblings of
each task with the same task and seed, and plays them one of two ways: :meth:`GroupRunner.run`
steps every live episode in lock step with one batched policy call per turn (a local model
that generates for the whole batch at once); :meth:`GroupRunner.arun` lets every episode
await its own policy answer and environment step (an inference server answering requests
concurrently), so no episode waits for the slowest and the event loop never blocks on an
environment (:mod:`agent_envs.pool`).  Both return :class:`~rubrics.trajectory.Trajectory`
objects whose steps are filled from the environments' ``info`` (SPEC §1–§2) by
:func:`~rubrics.trajectory.step_from_info` (its docstring has the field-by-field table).

It is environment-agnostic: anything made by ``gym.make(env_id, **env_kwargs)`` or by a
zero-argument factory works (the factory must be picklable for worker processes, e.g. a
module-level function or ``functools.partial``).

Environments persist between calls, so an environment that plays the same game again resets
fast (ALFWorld keeps the grounded problem; see :mod:`agent_envs.alfworld.engine`); within one
process, siblings of a game share one grounding.  With ``workers=W`` environment ``k`` lives
in worker ``k % W``, so a group's siblings are spread over the workers and each worker grounds
a game once.

Example:
    >>> import random
    >>> def policy(turns):                       # one action per live episode
    ...     return [random.Random(t.slot * 100 + t.t).choice(t.info["admissible_actions"]) for t in turns]
    >>> with GroupRunner("ALFWorld-Rubric-v0", {"split": "generated"}) as runner:   # doctest: +SKIP
    ...     groups = runner.run([0, 1], policy, group_size=4)
    >>> [len(g) for g in groups]                                                      # doctest: +SKIP
    [4, 4]
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_envs.pool import EnvFactory, EnvPool, RolloutWorkerError
from rubrics.trajectory import Step, Trajectory, hashable, matching_keys, step_from_info

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "AsyncPolicy",
    "Decision",
    "EnvFactory",
    "EnvPool",
    "GroupHook",
    "GroupRunner",
    "Policy",
    "RolloutWorkerError",
    "StepHook",
    "Turn",
    "matching_keys",
    "per_episode",
    "rollout_group",
    "rollout_groups",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Turn:
    """What the policy sees for one live episode at one turn.

    Attributes:
        group: Index of the task group in the call.
        slot: Rollout slot 0..G-1 inside the group.
        t: Decision index inside the episode (0 for the first decision).
        observation: The current observation.
        info: The current ``info`` (admissible actions, task, rubric, ...).
        history: Earlier ``(observation, action)`` pairs of this episode, oldest first.
    """

    group: int
    slot: int
    t: int
    observation: str
    info: Mapping[str, Any]
    history: tuple[tuple[str, str], ...] = ()


#: What a policy answers for one turn: the action string, or ``(action, extra)`` where
#: ``extra`` (JSON-encodable) is stored on the step as ``Step.extra`` (e.g. the model's response),
#: or ``None``: the policy ends the episode here, without a step (the trajectory is marked
#: truncated; e.g. a replayed walkthrough that is over).
Decision = str | tuple[str, Mapping[str, Any]] | None

#: A batched policy: one :data:`Decision` per turn, in order.
Policy = Callable[[Sequence[Turn]], Sequence[Decision]]

#: An asynchronous per-episode policy: ``await policy(turn)`` -> one :data:`Decision`.
AsyncPolicy = Callable[[Turn], Awaitable[Decision]]

#: Called after every transition with the turn the policy answered, the :class:`Step` it
#: became and the environment's new ``info`` (e.g. to read the final rubric status).
StepHook = Callable[[Turn, Step, Mapping[str, Any]], None]

#: Called by :meth:`GroupRunner.arun` when every sibling of a group has ended, with the group's
#: index and its trajectories.
GroupHook = Callable[[int, list[Trajectory]], None]


def per_episode(fn: Callable[[str, Mapping[str, Any]], str]) -> Policy:
    """Turn a per-episode policy ``fn(observation, info) -> action`` into a batched :data:`Policy`.

    Example:
        >>> policy = per_episode(lambda obs, info: info["admissible_actions"][0])
        >>> policy([Turn(0, 0, 0, "obs", {"admissible_actions": ["look"]})])
        ['look']
    """

    def policy(turns: Sequence[Turn]) -> list[str]:
        return [fn(t.observation, t.info) for t in turns]

    policy.__doc__ = getattr(fn, "__doc__", None)
    return policy


# ------------------------------------------------------------------------------------------
# The runner
# ------------------------------------------------------------------------------------------


@dataclass
class _Episode:
    group: int
    slot: int
    env_index: int
    task_id: Hashable
    obs: str
    info: dict[str, Any]
    steps: list[Step] = field(default_factory=list)
    history: list[tuple[str, str]] = field(default_factory=list)
    done: bool = False
    truncated: bool = False

    def turn(self, t: int) -> Turn:
        return Turn(self.group, self.slot, t, self.obs, self.info, tuple(self.history))

    def advance(self, turn: Turn, action: str, extra: dict[str, Any] | None, result: tuple,
                on_step: StepHook | None) -> None:
        """Record the transition ``result`` (the Gymnasium 5-tuple) of ``action``."""
        obs, reward, terminated, truncated, info = result
        step = step_from_info(self.obs, self.info, action, obs, reward, info, extra=extra)
        self.steps.append(step)
        if on_step is not None:
            on_step(turn, step, info)
        self.history.append((self.obs, action))
        self.obs, self.info = obs, dict(info)
        if terminated or truncated:
            self.done = True
            self.truncated = bool(truncated and not terminated)


class GroupRunner:
    """Runs sibling groups on persistent environments (in-process or in worker processes).

    It is the one episode loop of the project: the trainer (``trainers.lm_policy``) plays its
    rollouts and evaluations through it with a language-model policy, the arena
    (``trainers.arena.run``) with its linear softmax policy, and both warm starts replay
    their walkthroughs through it (:class:`~agent_envs.agent.walkthrough.WalkthroughReplay`),
    and ``rubricgym eval`` plays its panels through it (``trainers.evaluate.runner``).
    :meth:`run` and :meth:`arun`
    share how episodes start, advance and end (``_plan_resets``, ``_start``, ``_Episode.advance``,
    ``_trajectory``); they differ only in who waits for whom (and :meth:`arun` can admit groups
    a few at a time on reused environments).

    Args:
        env: A Gymnasium id (made with ``gym.make(env, **env_kwargs)``), a zero-argument
            factory returning an environment, or an :class:`EnvPool` to play on (the runner
            then uses it without owning it: :meth:`close` leaves it open).
        env_kwargs: Keyword arguments for ``gym.make`` (ignored with a factory or a pool).
        workers: 0 steps every environment in this process; ``W > 0`` spreads them over W
            worker processes (environment ``k`` in worker ``k % W``; ignored with a pool).
        max_steps: Safety cap on decisions per episode (episodes still running are marked
            truncated); ``None`` relies on the environment's own horizon.
        start_method: multiprocessing start method for workers (``"spawn"`` is safe after
            torch or an engine has been imported).
    """

    def __init__(
        self,
        env: str | EnvFactory,
        env_kwargs: Mapping[str, Any] | None = None,
        *,
        workers: int = 0,
        max_steps: int | None = None,
        start_method: str = "spawn",
    ) -> None:
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
            raise ValueError(f"max_steps must be a positive int or None, got {max_steps!r}")
        self.max_steps = max_steps
        self._owns = not isinstance(env, EnvPool)
        self._hosts = EnvPool(env, env_kwargs, workers=workers, start_method=start_method) if self._owns else env
        #: Seconds spent in the policy and in the environments, and decisions, of the last :meth:`run`.
        self.stats: dict[str, float] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every environment and stop the workers (not those of a pool passed in)."""
        if self._owns:
            self._hosts.close()

    def run(
        self,
        tasks: Sequence[Any],
        policy: Policy,
        *,
        group_size: int = 8,
        seeds: Sequence[int | None] | int | None = None,
        options: Mapping[str, Any] | None = None,
        on_step: StepHook | None = None,
    ) -> list[list[Trajectory]]:
        """Play ``group_size`` siblings of every task in lock step; returns one list of G
        trajectories per task.

        Args:
            tasks: One entry per group, passed as ``options["task"]`` to ``reset`` (``None``
                lets the environment draw a task from ``seed``).
            policy: Batched policy (:data:`Policy`); called once per turn with every live
                episode, must return one :data:`Decision` per turn.
            group_size: G, siblings per task.
            seeds: Reset seed per group (or one seed for all); siblings share their group's.
            options: Extra reset options for every group (e.g. ``{"split": "valid_seen"}``).
            on_step: Called after every transition (:data:`StepHook`).
        """
        resets = _plan_resets(tasks, group_size, seeds, options)
        episodes = self._start(resets, self._hosts.call("reset", resets), group_size)
        self.stats = {"policy_s": 0.0, "env_s": 0.0, "decisions": 0.0}
        t = 0
        while True:
            live = [e for e in episodes if not e.done]
            if not live:
                break
            if self.max_steps is not None and t >= self.max_steps:
                for e in live:
                    e.done = e.truncated = True
                break
            turns = [e.turn(t) for e in live]
            t0 = time.perf_counter()
            actions, extras = _split_decisions(policy(turns), len(live))
            t1 = time.perf_counter()
            moves = [(e, turn, a, x) for e, turn, a, x in zip(live, turns, actions, extras) if a is not None]
            for e, a in zip(live, actions):
                if a is None:  # the policy ended this episode
                    e.done = e.truncated = True
            results = self._hosts.call("step", [(e.env_index, a) for e, _turn, a, _x in moves]) if moves else []
            self.stats["policy_s"] += t1 - t0
            self.stats["env_s"] += time.perf_counter() - t1
            self.stats["decisions"] += len(moves)
            for (e, turn, action, extra), result in zip(moves, results):
                e.advance(turn, action, extra, result, on_step)
            t += 1
        return _groups(episodes, len(resets) // group_size)

    async def arun(
        self,
        tasks: Sequence[Any],
        policy: AsyncPolicy,
        *,
        group_size: int = 8,
        seeds: Sequence[int | None] | int | None = None,
        options: Mapping[str, Any] | None = None,
        on_step: StepHook | None = None,
        concurrency: int | None = None,
        groups_in_flight: int | None = None,
        on_group: GroupHook | None = None,
    ) -> list[list[Trajectory]]:
        """:meth:`run` with every episode on its own: each awaits its own policy answer and its
        own environment step (:meth:`EnvPool.astep`), so no episode waits for the slowest one
        and the event loop is never blocked by an environment.

        Siblings still start from identical states (a group's resets all finish before its
        first decision).  With a deterministic policy the trajectories equal :meth:`run`'s.

        Args:
            policy: ``await policy(turn)`` -> one :data:`Decision` (e.g. a request to an
                inference server).
            concurrency: Most episodes playing at once (``None``: all).
            groups_in_flight: Most groups started and not yet ended (``None``: all).  A group
                resets its siblings when it is admitted and hands its environments to the
                next group when it ends, so at most ``groups_in_flight * group_size``
                environments exist (an evaluation of a whole panel).
            on_group: Called with ``(group, trajectories)`` as soon as every sibling of a
                group has ended (e.g. to write its trace before the others end).
            tasks, group_size, seeds, options, on_step: As in :meth:`run`.
        """
        for name, value in (("concurrency", concurrency), ("groups_in_flight", groups_in_flight)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")
        resets = _plan_resets(tasks, group_size, seeds, options)
        n_groups = len(resets) // group_size
        self.stats = {"policy_s": 0.0, "env_s": 0.0, "decisions": 0.0}
        gate = asyncio.Semaphore(concurrency or len(resets) or 1)
        admit = asyncio.Semaphore(groups_in_flight or n_groups or 1)
        blocks = list(range(groups_in_flight))[::-1] if groups_in_flight else []  # free blocks of G slots, lowest last
        groups: list[list[Trajectory]] = [[] for _ in range(n_groups)]

        async def play(e: _Episode) -> None:
            async with gate:
                await self._play(e, policy, on_step)

        async def group(g: int) -> None:
            async with admit:
                block = blocks.pop() if groups_in_flight else g
                try:
                    mine = [(block * group_size + i, seed, opts)
                            for i, (_k, seed, opts) in enumerate(resets[g * group_size:(g + 1) * group_size])]
                    started = await asyncio.gather(*(self._hosts.areset(k, seed, opts) for k, seed, opts in mine))
                    episodes = self._start(mine, started, group_size, group=g)
                    await asyncio.gather(*(play(e) for e in episodes))
                finally:
                    blocks.append(block)
            groups[g] = [_trajectory(e) for e in episodes]
            if on_group is not None:
                on_group(g, groups[g])

        await asyncio.gather(*(group(g) for g in range(n_groups)))
        return groups

    async def _play(self, e: _Episode, policy: AsyncPolicy, on_step: StepHook | None) -> None:
        while not e.done:
            t = len(e.steps)
            if self.max_steps is not None and t >= self.max_steps:
                e.done = e.truncated = True
                break
            turn = e.turn(t)
            t0 = time.perf_counter()
            (action,), (extra,) = _split_decisions([await policy(turn)], 1)
            if action is None:  # the policy ended this episode
                e.done = e.truncated = True
                break
            t1 = time.perf_counter()
            result = await self._hosts.astep(e.env_index, action)
            self.stats["policy_s"] += t1 - t0
            self.stats["env_s"] += time.perf_counter() - t1
            self.stats["decisions"] += 1
            e.advance(turn, action, extra, result, on_step)

    def _start(self, resets: Sequence[tuple], results: Sequence[tuple[Any, Mapping[str, Any]]],
               group_size: int, group: int | None = None) -> list[_Episode]:
        """The episodes of freshly reset environments (their group: ``group``, else the
        environment index's block of ``group_size``)."""
        episodes = []
        for j, ((k, _seed, _opts), (obs, info)) in enumerate(zip(resets, results)):
            g, i = divmod(k, group_size) if group is None else (group, j)
            task_info = info.get("task") if isinstance(info.get("task"), Mapping) else {}
            task_id = hashable(task_info.get("id"), f"group-{g}")
            episodes.append(_Episode(g, i, k, task_id, obs, dict(info)))
        self._check_identical_starts(episodes, group_size)
        return episodes

    @staticmethod
    def _check_identical_starts(episodes: Sequence[_Episode], group_size: int) -> None:
        for start in range(0, len(episodes), group_size):
            sibs = episodes[start : start + group_size]
            first = sibs[0]
            for e in sibs[1:]:
                if e.obs != first.obs or e.task_id != first.task_id:
                    logger.warning(
                        "group %d: sibling %d did not start like sibling 0 (task %r vs %r)",
                        first.group, e.slot, e.task_id, first.task_id,
                    )


def _split_decisions(decisions: Sequence[Decision], n: int) -> tuple[list[str | None], list[dict[str, Any] | None]]:
    """Actions and extras of a policy's answers (``None``: end the episode); a clear error
    for anything else."""
    decisions = list(decisions)
    if len(decisions) != n:
        raise ValueError(f"the policy returned {len(decisions)} actions for {n} turns")
    actions: list[str | None] = []
    extras: list[dict[str, Any] | None] = []
    for d in decisions:
        action, extra = (d[0], dict(d[1])) if isinstance(d, tuple) and len(d) == 2 and isinstance(d[1], Mapping) else (d, None)
        if not isinstance(action, str) and d is not None:
            raise TypeError(f"the policy must return str actions, (str, dict) pairs or None, got {type(d).__name__}")
        actions.append(action)
        extras.append(extra)
    return actions, extras


def _plan_resets(tasks: Sequence[Any], group_size: int, seeds: Sequence[int | None] | int | None,
                 options: Mapping[str, Any] | None) -> list[tuple[int, int | None, dict[str, Any]]]:
    """``(environment index, seed, options)`` of every sibling, group by group; clear errors
    for arguments that would make siblings start differently."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    tasks = list(tasks)
    if seeds is None or isinstance(seeds, int):
        seed_list: list[int | None] = [seeds] * len(tasks)
    else:
        seed_list = list(seeds)
        if len(seed_list) != len(tasks):
            raise ValueError(f"got {len(seed_list)} seeds for {len(tasks)} tasks")
    for g, (task, seed) in enumerate(zip(tasks, seed_list)):
        if task is None and seed is None:
            raise ValueError(f"group {g}: give a task or a seed, or the siblings would draw different tasks")
    extra = dict(options or {})
    if "task" in extra:
        raise ValueError("pass tasks through `tasks`, not options['task']")
    resets = []
    for g, (task, seed) in enumerate(zip(tasks, seed_list)):
        opts = dict(extra)
        if task is not None:
            opts["task"] = task
        resets.extend((g * group_size + i, seed, opts) for i in range(group_size))
    return resets


def _trajectory(e: _Episode) -> Trajectory:
    return Trajectory(task_id=e.task_id, slot=e.slot, steps=e.steps, score=float(e.info.get("score", 0.0) or 0.0),
                      success=bool(e.info.get("won", False)), truncated=e.truncated)


def _groups(episodes: Sequence[_Episode], n_groups: int) -> list[list[Trajectory]]:
    groups: list[list[Trajectory]] = [[] for _ in range(n_groups)]
    for e in episodes:
        groups[e.group].append(_trajectory(e))
    return groups


def rollout_groups(
    env: str | EnvFactory,
    tasks: Sequence[Any],
    policy: Policy,
    *,
    group_size: int = 8,
    env_kwargs: Mapping[str, Any] | None = None,
    seeds: Sequence[int | None] | int | None = None,
    options: Mapping[str, Any] | None = None,
    workers: int = 0,
    max_steps: int | None = None,
) -> list[list[Trajectory]]:
    """One-shot :meth:`GroupRunner.run` (creates and closes the environments)."""
    with GroupRunner(env, env_kwargs, workers=workers, max_steps=max_steps) as runner:
        return runner.run(tasks, policy, group_size=group_size, seeds=seeds, options=options)


def rollout_group(
    env: str | EnvFactory,
    task: Any,
    policy: Policy,
    *,
    group_size: int = 8,
    env_kwargs: Mapping[str, Any] | None = None,
    seed: int | None = None,
    options: Mapping[str, Any] | None = None,
    workers: int = 0,
    max_steps: int | None = None,
) -> list[Trajectory]:
    """G sibling trajectories of one task (see :class:`GroupRunner`).

    Example:
        >>> trajs = rollout_group("ALFWorld-Rubric-v0", 0, policy, group_size=4,     # doctest: +SKIP
        ...                       env_kwargs={"split": "valid_seen"})
    """
    return rollout_groups(
        env, [task], policy, group_size=group_size, env_kwargs=env_kwargs,
        seeds=[seed], options=options, workers=workers, max_steps=max_steps,
    )[0]


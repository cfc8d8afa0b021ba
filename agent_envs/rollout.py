"""Sibling-group rollouts: G episodes of the same task from identical start states.

Group-relative estimators (GRPO, GiGPO, GraphGPO, MCGPO, ...) compare G sibling rollouts of
one task.  :class:`GroupRunner` keeps a set of environments — in this process, or in worker
processes (game engines such as ALFWorld's are not thread-safe) — resets the G siblings of
each task with the same task and seed, steps every live episode in lock step with one
batched policy call per turn, and returns :class:`~agent_envs.trajectory.Trajectory`
objects whose steps are filled from the environments' ``info`` (SPEC §1–§2) by
:func:`~agent_envs.trajectory.step_from_info` (its docstring has the field-by-field table).

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

import logging
import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_envs.trajectory import Step, Trajectory, hashable, matching_keys, step_from_info

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "Decision",
    "EnvFactory",
    "EnvPool",
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

#: Seconds between checks that a worker being waited for is still running (its reply ends the wait at once).
_POLL_S = 0.5

EnvFactory = Callable[[], Any]


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
#: ``extra`` (JSON-encodable) is stored on the step as ``Step.extra`` (e.g. the model's response).
Decision = str | tuple[str, Mapping[str, Any]]

#: A batched policy: one :data:`Decision` per turn, in order.
Policy = Callable[[Sequence[Turn]], Sequence[Decision]]

#: Called after every transition with the turn the policy answered, the :class:`Step` it
#: became and the environment's new ``info`` (e.g. to read the final rubric status).
StepHook = Callable[[Turn, Step, Mapping[str, Any]], None]


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


class RolloutWorkerError(RuntimeError):
    """An environment raised inside a worker process (the message carries its traceback), or a
    worker died or was stopped (the message names it)."""


def _process_state(pid: int | None) -> str:
    """The process state letter of ``pid`` from Linux ``/proc`` (``"T"``: stopped by a signal,
    ``"Z"``: exited); ``""`` where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError, ValueError):
        return ""


class _WorkerStopped(ChildProcessError):
    """A worker that is stopped (SIGSTOP/SIGTSTP), so its reply never comes."""


# ------------------------------------------------------------------------------------------
# Environment hosts: in-process, or a worker process
# ------------------------------------------------------------------------------------------


def _make_env(env: str | EnvFactory, env_kwargs: Mapping[str, Any]) -> Any:
    if callable(env):
        return env()
    import gymnasium as gym

    import agent_envs  # noqa: F401  (registers the rubricgym ids)

    return gym.make(env, **dict(env_kwargs))


def _apply(envs: dict[int, Any], env: str | EnvFactory, env_kwargs: Mapping[str, Any], cmd: str, items: Sequence[tuple]) -> list[Any]:
    out = []
    for item in items:
        k = item[0]
        if k not in envs:
            envs[k] = _make_env(env, env_kwargs)
        if cmd == "reset":
            out.append(envs[k].reset(seed=item[1], options=item[2]))
        elif cmd == "step":
            out.append(envs[k].step(item[1]))
        else:  # pragma: no cover - internal protocol
            raise ValueError(f"unknown command {cmd!r}")
    return out


def _worker_main(conn: Any, env: str | EnvFactory, env_kwargs: Mapping[str, Any]) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    envs: dict[int, Any] = {}
    try:
        while True:
            msg = conn.recv()
            if msg is None:
                break
            cmd, items = msg
            try:
                conn.send(("ok", _apply(envs, env, env_kwargs, cmd, items)))
            except BaseException:  # noqa: BLE001  (forwarded to the parent)
                conn.send(("error", traceback.format_exc()))
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        for e in envs.values():
            try:
                e.close()
            except Exception:
                logger.debug("closing an environment in a worker failed", exc_info=True)


class EnvPool:
    """Persistent environments of one kind, in this process or spread over worker processes.

    Environment ``k`` is made on first use and lives in this process (``workers=0``) or in
    worker ``k % workers`` for the pool's lifetime; it is reset to a new task for every
    episode. Engines such as ALFWorld's are not thread-safe, so parallel stepping uses
    processes (``spawn`` by default: safe after torch or an engine has been imported).
    :class:`GroupRunner` and the trainer (``trainers.rollouts``) both step through it.

    Args:
        env: A Gymnasium id (made with ``gym.make(env, **env_kwargs)``) or a zero-argument
            factory returning an environment (picklable for workers: a module-level function
            or ``functools.partial``).
        env_kwargs: Keyword arguments for ``gym.make`` (ignored with a factory).
        n: Number of slots (indices ``0..n-1``; ``None``: unbounded).
        workers: Worker processes (0 = step in this process; at most ``n``).
        start_method: multiprocessing start method of the workers.

    Example:
        >>> pool = EnvPool("CartPole-v1", n=2)
        >>> [len(obs) for obs, info in pool.reset([(0, 1, None), (1, 1, None)])]
        [4, 4]
        >>> pool.close()
    """

    def __init__(self, env: str | EnvFactory, env_kwargs: Mapping[str, Any] | None = None, n: int | None = None, *,
                 workers: int = 0, start_method: str = "spawn") -> None:
        if not (isinstance(env, str) or callable(env)):
            raise TypeError(f"env must be a Gymnasium id or a factory, got {type(env).__name__}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(f"workers must be a non-negative int, got {workers!r}")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"n must be a positive int or None, got {n!r}")
        self.env, self.env_kwargs, self.n = env, dict(env_kwargs or {}), n
        self.workers = workers if n is None else min(workers, n)
        self.name = env if isinstance(env, str) else getattr(env, "__name__", type(env).__name__)
        self.local: dict[int, Any] = {}
        self.conns: list[Any] = []
        self.procs: list[Any] = []
        if self.workers:
            ctx = mp.get_context(start_method)
            for _ in range(self.workers):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_worker_main, args=(child, env, self.env_kwargs), daemon=True)
                proc.start()
                child.close()
                self.conns.append(parent)
                self.procs.append(proc)

    def reset(self, items: Sequence[tuple[int, int | None, Mapping[str, Any] | None]]) -> list[tuple[Any, dict[str, Any]]]:
        """Reset environments: ``(index, seed, options)`` -> ``(obs, info)`` each, in order."""
        return self.call("reset", items)

    def step(self, items: Sequence[tuple[int, Any]]) -> list[tuple[Any, float, bool, bool, dict[str, Any]]]:
        """Step environments: ``(index, action)`` -> the Gymnasium 5-tuple each, in order."""
        return self.call("step", items)

    def call(self, cmd: str, items: Sequence[tuple]) -> list[Any]:
        """Run ``cmd`` (``"reset"`` or ``"step"``) for each ``(k, ...)`` item; results in item order.

        Raises:
            IndexError: an index outside ``0..n-1``.
            RolloutWorkerError: an environment raised in a worker (with its traceback).
        """
        if self.n is not None:
            for item in items:
                if not 0 <= item[0] < self.n:
                    raise IndexError(f"environment index {item[0]} out of range 0..{self.n - 1}")
        if not self.workers:
            return _apply(self.local, self.env, self.env_kwargs, cmd, items)
        per: list[list[int]] = [[] for _ in range(self.workers)]
        for pos, item in enumerate(items):
            per[item[0] % self.workers].append(pos)
        dead: dict[int, BaseException] = {}
        for w, positions in enumerate(per):
            if positions:
                try:
                    self.conns[w].send((cmd, [items[p] for p in positions]))
                except (OSError, EOFError) as exc:  # BrokenPipeError: killed between calls
                    dead[w] = exc
        out: list[Any] = [None] * len(items)
        errors = []
        for w, positions in enumerate(per):
            if not positions or w in dead:
                continue
            try:  # every live worker's reply is read, so the pipes stay in step
                status, payload = self._receive(w)
            except (EOFError, OSError) as exc:  # killed or stopped during the call
                dead[w] = exc
                continue
            if status != "ok":
                errors.append(f"worker {w}:\n{payload}")
                continue
            for p, result in zip(positions, payload):
                out[p] = result
        if dead:
            w = min(dead)
            raise RolloutWorkerError(f"{self.name}: {self._describe_dead(w, dead[w])}") from dead[w]
        if errors:
            raise RolloutWorkerError(f"{self.name} raised in a rollout worker:\n" + "\n".join(errors))
        return out

    def _receive(self, w: int) -> Any:
        """Worker ``w``'s reply; checks every :data:`_POLL_S` seconds of waiting that the worker
        still runs, so a dead worker raises ``EOFError`` and a stopped one :class:`_WorkerStopped`
        (the stopped state is read from Linux ``/proc``) instead of the wait never ending."""
        conn, proc = self.conns[w], self.procs[w]
        while not conn.poll(_POLL_S):
            if not proc.is_alive():
                raise EOFError(f"rollout worker {w} exited without replying")
            if _process_state(proc.pid) == "T":
                raise _WorkerStopped(f"rollout worker {w} is stopped")
        return conn.recv()

    def _describe_dead(self, w: int, exc: BaseException) -> str:
        proc = self.procs[w]
        if isinstance(exc, _WorkerStopped):
            return (f"rollout worker {w} (pid {proc.pid}) is stopped (by SIGSTOP or SIGTSTP), so its reply would "
                    "never come; its environments are lost, close this pool and make a new one")
        proc.join(timeout=1.0)
        code = proc.exitcode
        how = "is still running but its pipe is closed" if code is None else (
            f"was killed by signal {-code}" if code < 0 else f"exited with code {code}")
        return (f"rollout worker {w} (pid {proc.pid}) died: it {how}; its environments are lost, "
                "close this pool and make a new one")

    def worker_cpu_seconds(self) -> float:
        """CPU seconds (user + system) the live worker processes have used so far (Linux
        ``/proc``; 0 elsewhere or without workers)."""
        total = 0.0
        tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        for proc in self.procs:
            try:
                with open(f"/proc/{proc.pid}/stat", encoding="ascii") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            except (OSError, IndexError, ValueError):
                continue
        return total

    def close(self) -> None:
        """Close every environment and stop the workers (idempotent)."""
        for e in self.local.values():
            try:
                e.close()
            except Exception:
                logger.debug("closing an environment failed", exc_info=True)
        self.local.clear()
        for conn in self.conns:
            try:
                conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        for proc in self.procs:
            if _process_state(proc.pid) == "T":  # a stopped worker reads no None and ignores SIGTERM
                proc.kill()
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        for conn in self.conns:
            conn.close()
        self.conns, self.procs = [], []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover
        try:
            self.close()
        except Exception:  # interpreter shutdown: modules may already be gone
            logger.debug("closing an EnvPool at garbage collection failed", exc_info=True)


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


class GroupRunner:
    """Runs sibling groups on persistent environments (in-process or in worker processes).

    It is the one episode loop of the project: the trainer (``trainers.rollouts``) plays its
    rollouts and evaluations through it with a language-model policy, the arena
    (``trainers.arena.runner``) with its linear softmax policy.

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
        """Play ``group_size`` siblings of every task; returns one list of G trajectories per task.

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
                raise ValueError(
                    f"group {g}: give a task or a seed, or the siblings would draw different tasks"
                )
        extra = dict(options or {})
        if "task" in extra:
            raise ValueError("pass tasks through `tasks`, not options['task']")

        resets = []
        for g, (task, seed) in enumerate(zip(tasks, seed_list)):
            opts = dict(extra)
            if task is not None:
                opts["task"] = task
            for i in range(group_size):
                resets.append((g * group_size + i, seed, opts))
        results = self._hosts.call("reset", resets)
        episodes = []
        for (k, _seed, _opts), (obs, info) in zip(resets, results):
            g, i = divmod(k, group_size)
            task_info = info.get("task") if isinstance(info.get("task"), Mapping) else {}
            task_id = hashable(task_info.get("id"), f"group-{g}")
            episodes.append(_Episode(g, i, k, task_id, obs, dict(info)))
        self._check_identical_starts(episodes, group_size)

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
            turns = [Turn(e.group, e.slot, t, e.obs, e.info, tuple(e.history)) for e in live]
            t0 = time.perf_counter()
            actions, extras = _split_decisions(policy(turns), len(live))
            t1 = time.perf_counter()
            results = self._hosts.call("step", [(e.env_index, a) for e, a in zip(live, actions)])
            self.stats["policy_s"] += t1 - t0
            self.stats["env_s"] += time.perf_counter() - t1
            self.stats["decisions"] += len(live)
            for e, turn, action, extra, (obs, reward, terminated, truncated, info) in zip(live, turns, actions, extras, results):
                step = step_from_info(e.obs, e.info, action, obs, reward, info, extra=extra)
                e.steps.append(step)
                if on_step is not None:
                    on_step(turn, step, info)
                e.history.append((e.obs, action))
                e.obs, e.info = obs, dict(info)
                if terminated or truncated:
                    e.done = True
                    e.truncated = bool(truncated and not terminated)
            t += 1

        groups: list[list[Trajectory]] = [[] for _ in tasks]
        for e in episodes:
            groups[e.group].append(
                Trajectory(
                    task_id=e.task_id,
                    slot=e.slot,
                    steps=e.steps,
                    score=float(e.info.get("score", 0.0) or 0.0),
                    success=bool(e.info.get("won", False)),
                    truncated=e.truncated,
                )
            )
        return groups

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


def _split_decisions(decisions: Sequence[Decision], n: int) -> tuple[list[str], list[dict[str, Any] | None]]:
    """Actions and extras of a policy's answers; a clear error for anything else."""
    decisions = list(decisions)
    if len(decisions) != n:
        raise ValueError(f"the policy returned {len(decisions)} actions for {n} turns")
    actions: list[str] = []
    extras: list[dict[str, Any] | None] = []
    for d in decisions:
        action, extra = (d[0], dict(d[1])) if isinstance(d, tuple) and len(d) == 2 and isinstance(d[1], Mapping) else (d, None)
        if not isinstance(action, str):
            raise TypeError(f"the policy must return str actions or (str, dict) pairs, got {type(d).__name__}")
        actions.append(action)
        extras.append(extra)
    return actions, extras


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


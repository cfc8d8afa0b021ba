"""A rubricgym environment played through text: the piece every RL-library adapter shares.

RL libraries drive agents with text: a user message in, a model response out.
:class:`TextEpisode` wraps any rubricgym Gymnasium environment (or anything with the same
``reset``/``step`` and ``info`` conventions): it renders the decision prompt (SPEC §7, the
wording of :func:`agent_envs.agent.prompts.build_prompt`), parses the response into an action, steps
the environment and records every decision as a :class:`~rubrics.trajectory.Step` (via
:func:`~rubrics.trajectory.step_from_info`, the rollouts' own builder), so the finished
episode is a :class:`~rubrics.trajectory.Trajectory` that every credit estimator takes.

Imports no RL library, torch or engine (the environment imports its engine when made).

Example:
    >>> import tempfile
    >>> from agent_envs.webshop.testing import write_mini_catalogue
    >>> cat = str(write_mini_catalogue(tempfile.mkdtemp()))
    >>> ep = TextEpisode("WebShop-Rubric-v0", {"catalogue": cat, "verify": False, "tagger": "lexicon"})
    >>> "Possible actions:" in ep.reset(task=0)
    True
    >>> r = ep.step("<action>search[trail running shoes]</action>")
    >>> (r.step.action, r.step.valid, r.done, len(ep.steps))
    ('search[trail running shoes]', True, False, 1)
    >>> ep.trajectory(slot=0).task_id
    'webshop/human/0'
    >>> ep.close()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_envs.agent.prompts import STYLES, build_prompt, info_actions, info_goal, reply_action
from rubrics.trajectory import Step, Trajectory, hashable, step_from_info

__all__ = [
    "EpisodePool",
    "StepResult",
    "TextEpisode",
    "aepisode_pool",
    "episode_pool",
    "parse_task",
    "reset_all",
    "split_tasks",
    "step_all",
    "task_prompt",
]

#: ``parser(response, info) -> action``: turns a model response into the environment action.
ActionParser = Callable[[str, Mapping[str, Any]], str]


def task_prompt(task: Any = None, seed: int | None = None, split: str | None = None) -> str:
    """The dataset prompt that names a task (a JSON object; :func:`parse_task` reads it).

    >>> task_prompt(3, seed=0)
    '{"task": 3, "seed": 0}'
    """
    spec: dict[str, Any] = {"task": task}
    if seed is not None:
        spec["seed"] = int(seed)
    if split is not None:
        spec["split"] = str(split)
    return json.dumps(spec)


def split_tasks(env: Any, env_kwargs: Mapping[str, Any] | None = None, n: int | None = None,
                split: str | None = None) -> list[Any]:
    """The tasks of the environment's split, in the order ``rubricgym train`` draws them
    (:func:`agent_envs.tasks.task_pool`): ALFWorld task ids, WebShop goal indices.

    Args:
        env: A Gymnasium id, a zero-argument factory or an environment (one made here is closed).
        env_kwargs: Keyword arguments for ``gym.make``.
        n: The first ``n`` tasks (default: all of them).
        split: The split (default: the environment's own).

    Raises:
        ValueError: the split holds fewer than ``n`` tasks, or the environment cannot list them.
    """
    from agent_envs.registration import make_env
    from agent_envs.tasks import task_pool

    made = make_env(env, env_kwargs)
    try:
        base = getattr(made, "unwrapped", made)
        split = split if split is not None else getattr(base, "split", None)
        pool = task_pool(made, split)
    finally:
        if made is not env:
            made.close()
    if pool is None:
        raise ValueError(f"the environment cannot list the tasks of split {split!r}: pass task indices")
    if n is not None and not 0 <= n <= len(pool):
        raise ValueError(f"split {split!r} has {len(pool)} tasks, not {n}")
    return pool if n is None else pool[:n]


def parse_task(spec: Any) -> dict[str, Any]:
    """``{"task", "seed", "split"}`` from :func:`task_prompt` text, a mapping or a bare task.

    >>> parse_task('{"task": 3, "seed": 0}'), parse_task(5), parse_task({"task": 1, "split": "test"})
    ({'task': 3, 'seed': 0, 'split': None}, {'task': 5, 'seed': None, 'split': None}, {'task': 1, 'seed': None, 'split': 'test'})
    """
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise ValueError(f"a task prompt must be task_prompt() JSON such as '{{\"task\": 0}}', got {spec[:80]!r}") from exc
    if not isinstance(spec, Mapping):
        spec = {"task": spec}
    unknown = set(spec) - {"task", "seed", "split"}
    if unknown:
        raise ValueError(f"unknown task fields {sorted(unknown)}; expected 'task', 'seed', 'split'")
    seed = spec.get("seed")
    return {"task": spec.get("task"), "seed": None if seed is None else int(seed), "split": spec.get("split")}


def default_parser(response: str, info: Mapping[str, Any]) -> str:
    """:func:`~agent_envs.agent.prompts.reply_action` against the turn's admissible actions."""
    return reply_action(response, info_actions(info))


@dataclass
class StepResult:
    """What one response did.

    Attributes:
        text: The next user message (the rendered next decision prompt; ``""`` when done).
        reward: The environment's reward of the step (task reward + penalty).
        done: The episode ended (terminated, truncated or ``max_steps`` decisions).
        step: The recorded :class:`Step`.
        info: The environment's ``info`` after the step.
    """

    text: str
    reward: float
    done: bool
    step: Step
    info: dict[str, Any]


class TextEpisode:
    """One environment, played one episode at a time through text.

    Args:
        env: A Gymnasium id, a zero-argument factory or an environment instance (an
            :meth:`EnvPool.env_handle <agent_envs.pool.EnvPool.env_handle>` too: then
            :meth:`areset`/:meth:`astep` run it in its worker without blocking the event loop).
        env_kwargs: Keyword arguments for ``gym.make``.
        style: Prompt style, ``"action_only"`` or ``"think"`` (SPEC §7).
        list_actions: List the admissible actions in the prompt.
        compact: The compact prompt (:func:`agent_envs.agent.prompts.build_prompt`).
        max_steps: Stop after this many decisions (the environment's own horizon also applies).
        parser: ``parser(response, info) -> action``; default: the ``<action>`` block.
    """

    def __init__(self, env: Any, env_kwargs: Mapping[str, Any] | None = None, *, style: str = "action_only",
                 list_actions: bool = True, compact: bool = False, max_steps: int | None = None,
                 parser: ActionParser | None = None) -> None:
        if style not in STYLES:
            raise ValueError(f"style must be one of {', '.join(STYLES)}; got {style!r}")
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
            raise ValueError(f"max_steps must be a positive int or None, got {max_steps!r}")
        from agent_envs.registration import make_env  # gymnasium loads with the first episode

        self.env = make_env(env, env_kwargs)
        self.style, self.list_actions, self.compact = style, bool(list_actions), bool(compact)
        self.max_steps, self.parser = max_steps, parser or default_parser
        self.steps: list[Step] = []
        self.obs, self.info = "", {}
        self.done = True
        self.truncated = False
        self.task_ref: Any = None

    @property
    def goal(self) -> str:
        """The task sentence of the current episode."""
        return info_goal(self.info)

    def reset(self, task: Any = None, seed: int | None = None, split: str | None = None) -> str:
        """Start an episode (``task``: the environment's task option, or :func:`task_prompt`
        JSON / a mapping naming task, seed and split); returns the first user message."""
        seed, options = self._reset_args(task, seed, split)
        return self._started(*self.env.reset(seed=seed, options=options))

    async def areset(self, task: Any = None, seed: int | None = None, split: str | None = None) -> str:
        """:meth:`reset` for an event loop: awaits the environment's ``areset`` (an
        :class:`~agent_envs.pool.PooledEnv` resets in its worker); a plain environment resets inline."""
        seed, options = self._reset_args(task, seed, split)
        if hasattr(self.env, "areset"):
            return self._started(*await self.env.areset(seed=seed, options=options))
        return self._started(*self.env.reset(seed=seed, options=options))

    def _reset_args(self, task: Any, seed: int | None, split: str | None) -> tuple[int | None, dict[str, Any] | None]:
        if isinstance(task, (str, Mapping)) and seed is None and split is None:
            try:
                spec = parse_task(task)
            except ValueError:
                spec = {"task": task, "seed": None, "split": None}
            task, seed, split = spec["task"], spec["seed"], spec["split"]
        options: dict[str, Any] = {}
        if task is not None:
            options["task"] = task
        if split is not None:
            options["split"] = split
        self.task_ref = task
        return seed, options or None

    def _started(self, obs: Any, info: Mapping[str, Any]) -> str:
        self.obs, self.info = str(obs), dict(info)
        self.steps, self.done, self.truncated = [], False, False
        return self.prompt()

    def prompt(self) -> str:
        """The user message of the current decision (the history lives in the conversation)."""
        adm = info_actions(self.info)
        return build_prompt(self.goal, self.obs, adm, [], style=self.style, step=len(self.steps),
                            list_actions=self.list_actions, compact=self.compact)

    def step(self, response: str) -> StepResult:
        """Parse ``response``, step the environment and record the decision."""
        action = self._action(response)
        return self._record(response, action, self.env.step(action))

    async def astep(self, response: str) -> StepResult:
        """:meth:`step` for an event loop: awaits the environment's ``astep`` where it has one."""
        action = self._action(response)
        result = await self.env.astep(action) if hasattr(self.env, "astep") else self.env.step(action)
        return self._record(response, action, result)

    def _action(self, response: str) -> str:
        if self.done:
            raise RuntimeError("the episode is over; call reset()")
        return self.parser(str(response), self.info)

    def _record(self, response: str, action: str, result: tuple) -> StepResult:
        obs, reward, term, trunc, info = result
        step = step_from_info(self.obs, self.info, action, obs, reward, info, extra={"response": str(response)})
        self.steps.append(step)
        self.obs, self.info = str(obs), dict(info)
        if term or trunc:
            self.done, self.truncated = True, bool(trunc and not term)
        elif self.max_steps is not None and len(self.steps) >= self.max_steps:
            self.done, self.truncated = True, True
        return StepResult("" if self.done else self.prompt(), float(reward), self.done, step, self.info)

    def stop(self) -> None:
        """End the episode early (a token budget ran out): it counts as truncated."""
        if not self.done:
            self.done, self.truncated = True, True

    @property
    def success(self) -> bool:
        """Whether the episode was won (``info["won"]``)."""
        return bool(self.info.get("won", False))

    def trajectory(self, slot: int = 0, task_id: Any = None) -> Trajectory:
        """The episode so far as a :class:`Trajectory` (``task_id``: default the env's task id)."""
        tid = task_id if task_id is not None else hashable((self.info.get("task") or {}).get("id"), str(self.task_ref))
        return Trajectory(task_id=tid, slot=int(slot), steps=list(self.steps), score=float(self.info.get("score", 0.0)),
                          success=self.success, truncated=self.truncated or not self.done)

    def close(self) -> None:
        """Close the environment."""
        self.env.close()


def _call_all(episodes: Sequence[TextEpisode], cmd: str, args: Sequence[tuple]) -> list[Any]:
    """``env.reset``/``env.step`` of every episode; episodes on handles of one
    :class:`~agent_envs.pool.EnvPool` go in one batched call (their workers run in parallel)."""
    from agent_envs.pool import PooledEnv

    out: list[Any] = [None] * len(episodes)
    by_pool: dict[int, list[int]] = {}
    for i, ep in enumerate(episodes):
        if isinstance(ep.env, PooledEnv):
            by_pool.setdefault(id(ep.env.pool), []).append(i)
        elif cmd == "reset":
            out[i] = ep.env.reset(seed=args[i][0], options=args[i][1])
        else:
            out[i] = ep.env.step(args[i][0])
    for idx in by_pool.values():
        pool = episodes[idx[0]].env.pool
        for i, result in zip(idx, pool.call(cmd, [(episodes[i].env.k, *args[i]) for i in idx])):
            out[i] = result
    return out


def reset_all(episodes: Sequence[TextEpisode], tasks: Sequence[Any]) -> list[str]:
    """:meth:`TextEpisode.reset` of every episode (``tasks``: what ``reset`` takes as ``task``),
    pooled environments reset together; returns the first user messages."""
    args = [ep._reset_args(task, None, None) for ep, task in zip(episodes, tasks, strict=True)]
    return [ep._started(*result) for ep, result in zip(episodes, _call_all(episodes, "reset", args))]


def step_all(episodes: Sequence[TextEpisode], responses: Sequence[str]) -> list[StepResult]:
    """:meth:`TextEpisode.step` of every episode with its response, pooled environments stepped
    together (in parallel over the pool's workers).

    Example:
        >>> import tempfile
        >>> from agent_envs.pool import EnvPool
        >>> from agent_envs.webshop.testing import write_mini_catalogue
        >>> kw = {"catalogue": str(write_mini_catalogue(tempfile.mkdtemp())), "verify": False, "tagger": "lexicon"}
        >>> pool = EnvPool("WebShop-Rubric-v0", kw, n=2)
        >>> eps = [TextEpisode(pool.env_handle(k)) for k in range(2)]
        >>> _ = reset_all(eps, [0, 0])
        >>> [r.step.valid for r in step_all(eps, ["<action>search[shoes]</action>", "<action>dance</action>"])]
        [True, False]
        >>> pool.close()
    """
    actions = [ep._action(r) for ep, r in zip(episodes, responses, strict=True)]
    results = _call_all(episodes, "step", [(a,) for a in actions])
    return [ep._record(r, a, res) for ep, r, a, res in zip(episodes, responses, actions, results)]


class EpisodePool:
    """Text episodes on the environments of one :class:`~agent_envs.pool.EnvPool`, for the
    sessions of an RL library's worker process (verl's agent loop, OpenRLHF's agents): each
    session :meth:`acquire` s an episode on a free environment slot and :meth:`release` s it
    when done, so environments (catalogue, search index, grounded games) are built once and
    live in worker processes (or Ray actors), off the library's event loop.

    Args:
        env, env_kwargs: The environment (a Gymnasium id or a picklable factory, and its kwargs).
        workers, backend, ray_options: Where the environments live (:class:`~agent_envs.pool.EnvPool`).
        pool_options: More :class:`~agent_envs.pool.EnvPool` options, any of :data:`POOL_OPTIONS`
            (e.g. ``{"timeout": 600, "worker_idle": True}``).
    """

    def __init__(self, env: Any, env_kwargs: Mapping[str, Any] | None = None, *, workers: int = 1,
                 backend: str = "process", ray_options: Mapping[str, Any] | None = None,
                 pool_options: Mapping[str, Any] | None = None) -> None:
        from agent_envs.pool import EnvPool

        self.pool = EnvPool(env, env_kwargs, workers=workers, backend=backend, ray_options=ray_options,
                            **check_pool_options(pool_options))
        self._free: list[int] = []
        self._made = 0

    def acquire(self, **episode_kwargs: Any) -> TextEpisode:
        """A :class:`TextEpisode` (``episode_kwargs``: its options) on a free environment."""
        if self._free:
            k = self._free.pop()
        else:
            k, self._made = self._made, self._made + 1
        return TextEpisode(self.pool.env_handle(k), **episode_kwargs)

    @property
    def idle(self) -> list[int]:
        """The environment slots free for the next :meth:`acquire` (the last one first)."""
        return list(self._free)

    def release(self, episode: TextEpisode, *, retire: bool = False) -> None:
        """Give the episode's environment back (``retire``: never reuse it, e.g. after it raised)."""
        if not retire:
            self._free.append(episode.env.k)

    def close(self) -> None:
        self.pool.close()


_EPISODE_POOLS: dict[str, EpisodePool] = {}


#: The :class:`~agent_envs.pool.EnvPool` options a training library's configuration may pass
#: through (verl's ``env_pool_options``, OpenRLHF's ``RUBRICGYM_ENV_POOL_OPTIONS``, TRL's
#: ``env_rollout(env_pool_options=...)``); ``urls`` names the OpenEnv servers of the ``remote`` backend.
POOL_OPTIONS = ("timeout", "worker_nice", "worker_idle", "start_method", "urls")


def check_pool_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` as a dict, refused with the known names when it holds others."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(f"pool options must be a mapping, got {type(options).__name__}")
    unknown = sorted(set(options) - set(POOL_OPTIONS))
    if unknown:
        raise ValueError(f"unknown pool options {unknown}; known: {list(POOL_OPTIONS)}")
    return dict(options)


def episode_pool(env: str, env_kwargs: Mapping[str, Any] | None = None, *, workers: int = 1,
                 backend: str = "process", ray_options: Mapping[str, Any] | None = None,
                 pool_options: Mapping[str, Any] | None = None) -> EpisodePool:
    """The process-wide :class:`EpisodePool` of this environment, workers, backend and options."""
    key = _pool_key(env, env_kwargs, workers, backend, ray_options, pool_options)
    if key not in _EPISODE_POOLS:
        pool = EpisodePool(env, env_kwargs, workers=workers, backend=backend, ray_options=ray_options,
                           pool_options=pool_options)
        if _EPISODE_POOLS.setdefault(key, pool) is not pool:  # another thread built it meanwhile
            pool.close()
    return _EPISODE_POOLS[key]


async def aepisode_pool(env: str, env_kwargs: Mapping[str, Any] | None = None, *, workers: int = 1,
                        backend: str = "process", ray_options: Mapping[str, Any] | None = None,
                        pool_options: Mapping[str, Any] | None = None) -> EpisodePool:
    """:func:`episode_pool` for an event loop: the pool is built (its worker processes started,
    its servers connected) in a thread of its own, never on the loop; concurrent first calls
    for one pool await the same build; a failed build raises in each of them, and the next
    call tries again.  Once built, the pool is returned at once."""
    key = _pool_key(env, env_kwargs, workers, backend, ray_options, pool_options)
    pool = _EPISODE_POOLS.get(key)
    if pool is not None:
        return pool
    with _BUILDS_LOCK:
        build, new = _BUILDS.get(key), False
        if build is None:
            build = _BUILDS[key] = _in_thread(episode_pool, env, env_kwargs, workers=workers, backend=backend,
                                              ray_options=ray_options, pool_options=pool_options)
            new = True
    if new:  # outside the lock: a build already done runs the callback at once
        build.add_done_callback(lambda _f: _forget_build(key))
    return await asyncio.wrap_future(build)


_BUILDS: dict[str, concurrent.futures.Future] = {}
_BUILDS_LOCK = threading.Lock()


def _forget_build(key: str) -> None:
    with _BUILDS_LOCK:
        _BUILDS.pop(key, None)


def _in_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> concurrent.futures.Future:
    """``fn(*args, **kwargs)`` in a new daemon thread; its future."""
    future: concurrent.futures.Future = concurrent.futures.Future()

    def run() -> None:
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting sessions
                future.set_exception(exc)

    threading.Thread(target=run, name="rubricgym-episode-pool", daemon=True).start()
    return future


def _pool_key(env: Any, env_kwargs: Mapping[str, Any] | None, workers: int, backend: str,
              ray_options: Mapping[str, Any] | None, pool_options: Mapping[str, Any] | None) -> str:
    return json.dumps([env, dict(env_kwargs or {}), workers, backend, ray_options, pool_options], sort_keys=True,
                      default=str)

"""Any registered rubricgym environment as an OpenEnv server.

Built on the ``openenv`` distribution (0.10): its ``Environment`` interface, its typed
``Action``/``Observation``/``State`` models and its ``create_app`` (a FastAPI app: ``/ws``
WebSocket sessions, ``/reset``, ``/step``, ``/state``, ``/schema``, ``/health``), served by
uvicorn.  ``openenv`` and ``openenv-core`` both install the ``openenv`` import package;
``openenv-core`` (0.3) is the older split-out release of the same project, ``openenv`` the
current one (WebSocket sessions with per-server capacity, idle-session reaping and the
single-thread executor flag used below), so rubricgym depends on ``openenv``.

How a server runs its environments:

* **One environment per WebSocket session.**  A client's ``/ws`` connection gets its own
  :class:`RubricEnvironment`, which makes its Gymnasium environment (:func:`~agent_envs.registration.make_env`)
  on the first reset and keeps it for the session, so a game played again resets fast.
  ``max_sessions`` bounds the sessions one server holds (a client past it is refused with
  OpenEnv's ``CAPACITY_REACHED`` error); ``session_timeout`` reaps idle sessions (an agent
  that vanished without closing).  Closing the connection closes the environment.
* **One engine thread per server process.**  ``REQUIRES_SINGLE_THREAD_EXECUTOR`` makes
  OpenEnv run every session's reset and step on one thread (ALFWorld's TextWorld and the
  WebShop engine are not thread-safe; the GIL would serialise them anyway), while the event
  loop keeps reading and writing every socket.  Run more processes for more cores
  (``rubricgym serve --workers N``: uvicorn's workers share the port; a session stays on the
  process that accepted its connection) or more servers (:mod:`agent_envs.remote_pool`).
* **The stateless HTTP routes** ``/reset`` and ``/step`` are OpenEnv's: each request gets a
  fresh environment, so ``/step`` alone has no episode (it answers that a reset is needed);
  episodes are played over ``/ws``, as OpenEnv's ``EnvClient`` does.

Reset data: ``seed``, ``episode_id``, ``options`` (the environment's reset options), and as a
shorthand ``task`` and ``split`` (merged into ``options``, as OpenEnv's task API passes them).

Example (``pip install 'rubricgym[openenv]'``):
    >>> app = create_rubric_app("WebShop-Rubric-v0", {"num_products": 50})   # doctest: +SKIP
    >>> import uvicorn; uvicorn.run(app, port=8000)                          # doctest: +SKIP
"""

from __future__ import annotations

import functools
import json
import logging
import os
import uuid
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import ConcurrencyConfig, EnvironmentMetadata

from agent_envs.registration import make_env, register_envs
from agent_envs.serving.models import RubricAction, RubricObservation, RubricState, info_to_metadata

__all__ = ["ENV_VARS", "RubricEnvironment", "app_from_environ", "create_rubric_app"]

logger = logging.getLogger(__name__)

#: The variables :func:`app_from_environ` reads (``rubricgym serve`` sets them for uvicorn's workers).
ENV_VARS = ("RUBRICGYM_SERVE_ENV", "RUBRICGYM_SERVE_KWARGS", "RUBRICGYM_SERVE_MAX_SESSIONS",
            "RUBRICGYM_SERVE_SESSION_TIMEOUT")

#: Reset data besides ``seed``/``episode_id``/``options`` that go into ``options``.
_OPTION_SHORTHANDS = ("task", "split")


class RubricEnvironment(Environment[RubricAction, RubricObservation, RubricState]):
    """One session's rubricgym environment behind OpenEnv's ``Environment`` interface.

    Args:
        env_id: A registered Gymnasium id (``ALFWorld-Rubric-v0``, ``WebShop-Rubric-v0``, ...).
        env_kwargs: Keyword arguments of ``gym.make``.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session has its own environment
    REQUIRES_SINGLE_THREAD_EXECUTOR = True  # and every session's engine calls run on one thread

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        self._env: Any = None  # made on the first reset, on the engine thread
        self._state = RubricState(env_id=env_id)
        self._started = False

    def reset(self, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None,
              **data: Any) -> RubricObservation:
        """Start an episode: ``options`` (plus the ``task``/``split`` shorthands) go to the
        environment's ``reset``.

        Raises:
            ValueError: reset data the environment does not take (named).
        """
        unknown = sorted(set(data) - set(_OPTION_SHORTHANDS))
        if unknown:
            raise ValueError(f"unknown reset data {unknown}; give seed, episode_id, options, task or split")
        opts = {**dict(options or {}), **{k: data[k] for k in _OPTION_SHORTHANDS if data.get(k) is not None}}
        if self._env is None:
            self._env = make_env(self.env_id, self.env_kwargs)
        obs, info = self._env.reset(seed=seed, options=opts or None)
        self._started = True
        self._state = RubricState(episode_id=episode_id or uuid.uuid4().hex, step_count=0, env_id=self.env_id,
                                  task=info_to_metadata({"task": info.get("task", {})})["task"])
        return self._observe(obs, None, False, False, info)

    def step(self, action: RubricAction, timeout_s: float | None = None, **kwargs: Any) -> RubricObservation:
        """Step the action (text, or the tool call's text).

        Raises:
            RuntimeError: no episode has been started on this connection.
        """
        if not self._started:
            raise RuntimeError("no episode on this connection: reset first (episodes are played over the /ws "
                               "WebSocket; the stateless /step route has none)")
        obs, reward, terminated, truncated, info = self._env.step(action.as_text())
        self._state.step_count += 1
        return self._observe(obs, float(reward), bool(terminated), bool(truncated), info)

    def _observe(self, obs: Any, reward: float | None, terminated: bool, truncated: bool,
                 info: Mapping[str, Any]) -> RubricObservation:
        if not isinstance(obs, str):
            raise TypeError(f"{self.env_id} returned a {type(obs).__name__} observation; this server serves "
                            "text environments")
        state = self._state
        state.won, state.done = bool(info.get("won", False)), terminated or truncated
        state.score = float(info.get("score", 0.0) or 0.0)
        return RubricObservation(text=obs, reward=reward, done=state.done, terminated=terminated,
                                 truncated=truncated, metadata=info_to_metadata(info))

    @property
    def state(self) -> RubricState:
        """The session's current episode (read on the server's event loop: no engine call)."""
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name=self.env_id, description=f"rubricgym's {self.env_id}: text observations; "
                                   "the step's info (rubric channels, keys, admissible actions, won, score) in "
                                   "each observation's metadata", version="0")

    def close(self) -> None:
        if self._env is not None:
            env, self._env = self._env, None
            env.close()


def create_rubric_app(env_id: str, env_kwargs: Mapping[str, Any] | None = None, *, max_sessions: int = 256,
                      session_timeout: float | None = None) -> Any:
    """OpenEnv's FastAPI app serving ``env_id`` (``create_app`` with :class:`RubricEnvironment`).

    Args:
        env_id: A registered Gymnasium id.
        env_kwargs: Keyword arguments of ``gym.make`` for every session's environment (JSON-able).
        max_sessions: Most WebSocket sessions (environments) this process holds at once.
        session_timeout: Seconds after which an idle session is closed (``None``: never).

    Raises:
        ValueError: an unknown environment id or a bad bound (named).
    """
    register_envs()
    if env_id not in gym.registry:
        known = ", ".join(sorted(k for k in gym.registry if "Rubric" in k))
        raise ValueError(f"unknown environment id {env_id!r}; rubricgym's are: {known}")
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise ValueError(f"max_sessions must be a positive int, got {max_sessions!r}")
    factory = functools.partial(RubricEnvironment, env_id, dict(env_kwargs or {}))
    config = ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=session_timeout)
    return create_app(factory, RubricAction, RubricObservation, env_name=env_id, concurrency_config=config,
                      state_cls=RubricState)


def app_from_environ() -> Any:
    """The app :data:`ENV_VARS` describe (uvicorn's ``factory=True`` entry point, one call per
    worker process).

    Raises:
        ValueError: ``RUBRICGYM_SERVE_ENV`` unset, or ``RUBRICGYM_SERVE_KWARGS`` not JSON.
        TypeError: ``RUBRICGYM_SERVE_KWARGS`` not a JSON object.
    """
    env_id = os.environ.get("RUBRICGYM_SERVE_ENV")
    if not env_id:
        raise ValueError("RUBRICGYM_SERVE_ENV is not set: name the environment id to serve")
    raw = os.environ.get("RUBRICGYM_SERVE_KWARGS") or "{}"
    try:
        kwargs = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"RUBRICGYM_SERVE_KWARGS is not JSON: {exc}") from exc
    if not isinstance(kwargs, dict):
        raise TypeError(f"RUBRICGYM_SERVE_KWARGS must be a JSON object, got {raw!r}")
    timeout = os.environ.get("RUBRICGYM_SERVE_SESSION_TIMEOUT")
    return create_rubric_app(env_id, kwargs, max_sessions=int(os.environ.get("RUBRICGYM_SERVE_MAX_SESSIONS", "256")),
                             session_timeout=float(timeout) if timeout else None)

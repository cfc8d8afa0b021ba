"""Clients of a rubricgym OpenEnv server: OpenEnv's own ``EnvClient``, typed for
:mod:`agent_envs.serving.models`, and a Gymnasium environment played through it.

:class:`RubricEnvClient` is an ``openenv.core.EnvClient`` (one WebSocket session, one
server-side environment): ``await client.reset(...)`` / ``await client.step(...)`` in async
code, or ``client.sync()`` for blocking calls.  ``step`` takes a :class:`~agent_envs.serving.models.RubricAction`,
a plain action string, or a dict sent as it is (the server validates it).  :func:`reset_tuple`
and :func:`step_tuple` turn its results into Gymnasium's ``(obs, info)`` and 5-tuple, with the
``info`` decoded exactly as the environment returned it.

:class:`RemoteRubricEnv` is a ``gymnasium.Env`` whose episodes run on a server: anything that
takes a rubricgym environment or a factory of one (:func:`~agent_envs.registration.make_env`:
``TextEpisode``, TRL's ``environment_factory`` through
:class:`~wrappers.integrations.trl_env.RubricEnvironments`, ``rubricgym eval``) plays on the
server with it.  :class:`~agent_envs.pool.EnvPool`'s ``backend="remote"`` steps many sessions
at once instead (:mod:`agent_envs.remote_pool`).

After a server restart a session's environment is gone: the call in flight fails (OpenEnv's
client raises ``ConnectionClosed``), the next call reconnects to a fresh session, and a step
there before a reset answers that the session has no episode.

Example (``pip install 'rubricgym[openenv]'``, a server on port 8000):
    >>> env = RemoteRubricEnv("http://127.0.0.1:8000")                        # doctest: +SKIP
    >>> obs, info = env.reset(seed=0, options={"task": 0})                   # doctest: +SKIP
    >>> obs, reward, terminated, truncated, info = env.step(info["admissible_actions"][0])  # doctest: +SKIP
    >>> env.close()                                                          # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from agent_envs.serving.models import (
    RubricAction,
    RubricObservation,
    RubricState,
    info_from_metadata,
)

__all__ = ["RemoteRubricEnv", "RubricEnvClient", "action_payload", "reset_tuple", "step_tuple"]

#: Seconds a reply may take when no timeout is given (the WebSocket's keepalive pings still
#: detect a server that is gone or stopped within ~40 s).
NO_REPLY_LIMIT_S = 24 * 3600.0


def action_payload(action: Any) -> dict[str, Any]:
    """The step message's data: a string is text, a :class:`RubricAction` its fields, a mapping
    goes as it is (the server validates it).

    Raises:
        TypeError: any other type (named).
    """
    if isinstance(action, str):
        return {"text": action}
    if isinstance(action, RubricAction):
        return action.model_dump(exclude_none=True, exclude={"metadata"})
    if isinstance(action, Mapping):
        return dict(action)
    raise TypeError(f"an action is a string, a RubricAction or a mapping, got {type(action).__name__}")


class RubricEnvClient(EnvClient[RubricAction, RubricObservation, RubricState]):
    """OpenEnv's WebSocket client for a rubricgym server (``base_url``: ``http://host:port``)."""

    def _step_payload(self, action: Any) -> dict[str, Any]:
        return action_payload(action)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[RubricObservation]:
        obs = dict(payload.get("observation") or {})
        metadata = obs.pop("metadata", None) or payload.get("metadata") or {}
        observation = RubricObservation(text=obs.get("text", ""), terminated=bool(obs.get("terminated", False)),
                                        truncated=bool(obs.get("truncated", False)),
                                        done=bool(payload.get("done", False)), reward=payload.get("reward"),
                                        metadata=metadata)
        return StepResult(observation=observation, reward=payload.get("reward"), done=observation.done,
                          metadata=metadata)

    def _parse_state(self, payload: dict[str, Any]) -> RubricState:
        return RubricState(**payload)


def reset_tuple(result: StepResult[RubricObservation]) -> tuple[str, dict[str, Any]]:
    """A reset's result as Gymnasium's ``(obs, info)``."""
    obs = result.observation
    return obs.text, info_from_metadata(obs.metadata)


def step_tuple(result: StepResult[RubricObservation]) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """A step's result as Gymnasium's ``(obs, reward, terminated, truncated, info)``."""
    obs = result.observation
    return obs.text, float(result.reward or 0.0), obs.terminated, obs.truncated, info_from_metadata(obs.metadata)


class RemoteRubricEnv(gym.Env):
    """A rubricgym environment on an OpenEnv server, as a Gymnasium environment (one session).

    Args:
        base_url: The server (``http://host:port``).
        timeout: Seconds one reply may take (``None``: :data:`NO_REPLY_LIMIT_S`).
        connect_timeout: Seconds to open the WebSocket.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    observation_space = gym.spaces.Text(max_length=1 << 20)
    action_space = gym.spaces.Text(max_length=1 << 16)

    def __init__(self, base_url: str, *, timeout: float | None = None, connect_timeout: float = 10.0) -> None:
        self.base_url = base_url
        self._client = RubricEnvClient(base_url=base_url, connect_timeout_s=connect_timeout,
                                       message_timeout_s=timeout or NO_REPLY_LIMIT_S).sync()

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        return reset_tuple(self._client.reset(seed=seed, options=dict(options) if options else None))

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return step_tuple(self._client.step(action))

    def state(self) -> RubricState:
        """The server's view of the session's episode."""
        return self._client.state()

    def close(self) -> None:
        self._client.close()

"""The environment pool's ``backend="remote"``: environments held by OpenEnv servers.

``EnvPool(env, backend="remote", urls=[...])`` keeps environment ``k`` on server
``k % len(urls)`` (each a ``rubricgym serve`` of the same environment id and kwargs), as one
WebSocket session of OpenEnv's own client (:class:`~agent_envs.serving.client.RubricEnvClient`)
held for the pool's lifetime, so a game played again resets fast on its server.  Everything
that steps an :class:`~agent_envs.pool.EnvPool` — ``GroupRunner.run``/``arun``, verl's
``rubricgym_env`` agent loop and OpenRLHF's agent (``env_backend="remote"`` with
``urls`` in their pool options) — plays on the servers unchanged.

The sessions' sockets are read and written on one I/O thread of this process (its own event
loop), so the caller's event loop never blocks on the network and a synchronous batched call
works too; replies reach the awaiting episodes through the pool's resumer, as a Ray actor's do.

Failures, as for worker processes:

* an environment that raises on its server fails that request only, with the server's
  message (:class:`~agent_envs.pool.RolloutWorkerError`), and the session goes on;
* a server that cannot be reached, closes a session (it died or restarted: its environments
  are gone) or does not reply within the pool's ``timeout`` is lost for good: every request in
  flight or later on it raises :class:`~agent_envs.pool.RolloutWorkerError` naming the server
  (index and URL); the other servers' episodes go on.  Without ``timeout`` a server that stops
  answering is still found out by the WebSocket's keepalive pings (20 s apart, 20 s to answer).

Needs ``pip install 'rubricgym[openenv]'``.

Example (two servers started with ``rubricgym serve ALFWorld-Rubric-v0 --port 8001`` / ``8002``):
    >>> pool = EnvPool("ALFWorld-Rubric-v0", backend="remote",
    ...                urls=["http://127.0.0.1:8001", "http://127.0.0.1:8002"])   # doctest: +SKIP
    >>> obs, info = pool.reset([(0, 0, {"task": 0})])[0]                       # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from agent_envs.pool import Request, RolloutWorkerError, _Awaiting, _deliver

if TYPE_CHECKING:
    from agent_envs.pool import EnvPool

__all__ = ["check_urls", "make_remote_hosts"]

logger = logging.getLogger(__name__)

#: Seconds :meth:`_RemoteHost.close` waits for its sessions to close.
_CLOSE_S = 10.0


def check_urls(urls: Any) -> list[str]:
    """``urls`` as a list of ``http(s)://`` or ``ws(s)://`` server addresses.

    Raises:
        ValueError: none given, or one that is not such an address (named).
    """
    if isinstance(urls, str) or not isinstance(urls, Sequence) or not urls:
        raise ValueError(f"backend='remote' needs urls: a non-empty list of server addresses, got {urls!r}")
    for url in urls:
        if not isinstance(url, str) or not url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ValueError(f"a server address must start with http://, https://, ws:// or wss://, got {url!r}")
    return list(urls)


class _IOThread:
    """One event loop on a thread of its own, shared by a pool's hosts (closed with the last)."""

    def __init__(self, name: str, users: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.users = users
        self._thread = threading.Thread(target=self.loop.run_forever, name=f"rubricgym-remote-{name}", daemon=True)
        self._thread.start()

    def run(self, coro: Any) -> Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def release(self) -> None:
        self.users -= 1
        if self.users == 0 and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=_CLOSE_S)
            if not self._thread.is_alive():
                self.loop.close()


def _lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the server (not one environment) is gone: a failed connection, a
    closed socket, a reply past the timeout."""
    from websockets.exceptions import WebSocketException

    return isinstance(exc, (ConnectionError, OSError, TimeoutError, asyncio.TimeoutError, WebSocketException))


def _check_session(client: Any) -> None:
    """Raise ``ConnectionClosed`` when the server has closed this environment's session: OpenEnv's
    client would reconnect to a fresh session, where the environment and its episode are gone
    (a restarted server), so for the pool the server is lost, as a restarted worker would be."""
    from websockets.exceptions import ConnectionClosedError
    from websockets.protocol import State

    ws = getattr(client, "_ws", None)  # OpenEnv's client keeps its socket there (None before connecting)
    if ws is not None and ws.state in (State.CLOSING, State.CLOSED):
        raise ConnectionClosedError(None, None)


class _RemoteHost:
    """One server: a session per environment index, requests run on the pool's I/O thread.

    ``submit`` returns a future whose result is the replies (``("ok", result)`` or
    ``("error", message)`` each) or which raises :class:`RolloutWorkerError` once the server is lost.
    """

    def __init__(self, index: int, url: str, io: _IOThread, timeout: float | None) -> None:
        self.index, self.url, self.io, self.timeout = index, url, io, timeout
        self._clients: dict[int, Any] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._broken: RolloutWorkerError | None = None

    # --- the pool's host interface ----------------------------------------------------------

    def submit(self, requests: Sequence[Request]) -> Future:
        if self._broken is not None:
            out: Future = Future()
            out.set_exception(self._broken)
            return out
        return self.io.run(self._serve(list(requests)))

    def post(self, requests: Sequence[Request], to: _Awaiting) -> None:
        """:meth:`submit`, the replies resolving ``to.out`` on its event loop (from the I/O thread)."""
        job = (list(requests), to)

        def settled(done: Future) -> None:
            error = done.exception()
            _deliver([job], None if error is not None else done.result(), error)

        self.submit(job[0]).add_done_callback(settled)

    def cpu_seconds(self) -> float:
        """0: a server's CPU time is not this machine's to read."""
        return 0.0

    def close(self) -> None:
        if not self.io.loop.is_closed():
            try:
                self.io.run(self._close_all()).result(timeout=_CLOSE_S + 1)
            except Exception:  # a lost server's sessions are gone already
                logger.debug("closing the sessions on %s failed", self.url, exc_info=True)
        self.io.release()

    # --- on the I/O thread ------------------------------------------------------------------

    async def _serve(self, requests: list[Request]) -> list[tuple[str, Any]]:
        """Run ``requests`` (one environment's in order, different environments concurrently)."""
        out: list[tuple[str, Any]] = [("error", "not run")] * len(requests)
        per_env: dict[int, list[int]] = {}
        for pos, (_cmd, item) in enumerate(requests):
            per_env.setdefault(item[0], []).append(pos)

        async def run(k: int, positions: list[int]) -> None:
            async with self._locks.setdefault(k, asyncio.Lock()):
                for pos in positions:
                    out[pos] = await self._one(*requests[pos])

        await asyncio.gather(*(run(k, ps) for k, ps in per_env.items()), return_exceptions=True)
        if self._broken is not None:
            raise self._broken
        return out

    async def _one(self, cmd: str, item: tuple) -> tuple[str, Any]:
        from agent_envs.serving.client import action_payload, reset_tuple, step_tuple

        if self._broken is not None:
            raise self._broken
        k = item[0]
        try:
            client = self._client(k)
            _check_session(client)
            if cmd == "reset":
                return "ok", reset_tuple(await client.reset(seed=item[1], options=item[2]))
            return "ok", step_tuple(await client.step(action_payload(item[1])))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # sorted into: the server is lost, or this request failed
            if _lost(exc):
                self._break(exc)
                raise self._broken from exc
            return "error", f"environment {k} on remote env server {self.index} ({self.url}): {type(exc).__name__}: {exc}"

    def _client(self, k: int) -> Any:
        from agent_envs.serving.client import NO_REPLY_LIMIT_S, RubricEnvClient

        client = self._clients.get(k)
        if client is None:
            client = self._clients[k] = RubricEnvClient(base_url=self.url,
                                                        message_timeout_s=self.timeout or NO_REPLY_LIMIT_S)
        return client

    def _break(self, exc: BaseException) -> None:
        if self._broken is not None:
            return
        if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
            how = f"did not reply within {self.timeout:g} s" if self.timeout else "did not reply in time"
        elif isinstance(exc, ConnectionError):
            how = f"cannot be reached ({exc})"
        else:
            how = f"closed the session ({type(exc).__name__}: {exc}; it stopped or restarted)"
        self._broken = RolloutWorkerError(f"remote env server {self.index} ({self.url}) {how}; its environments "
                                          "are lost, close this pool and make a new one")

    async def _close_all(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(asyncio.wait_for(c.close(), _CLOSE_S) for c in clients), return_exceptions=True)


def make_remote_hosts(pool: EnvPool, urls: Sequence[str]) -> list[_RemoteHost]:
    """One host per server address, sharing one I/O thread."""
    urls = check_urls(urls)
    io = _IOThread(pool.name, users=len(urls))
    return [_RemoteHost(i, url, io, pool.timeout) for i, url in enumerate(urls)]

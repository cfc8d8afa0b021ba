"""The WebShop app in production: gunicorn, one worker process, N threads.

``rubricgym webshop serve`` (and the Docker image's command) runs :func:`serve_production`:
the Flask app of :func:`~agent_envs.webshop.server.create_app` under gunicorn's arbiter with
one threaded worker, :class:`~agent_envs.webshop.http_worker.BufferedThreadWorker` (gunicorn's
``gthread`` worker, where a thread takes a request only once it has arrived whole).

* **One process, N threads.**  Sessions live in the worker's memory
  (:class:`~agent_envs.webshop.server.SessionStore`): a second worker process would hold
  sessions of its own, and a client's next step could land on a process that never saw its
  reset.  Concurrency comes from the worker's threads (``threads``), each request holding only
  its session's lock; idle keep-alive connections wait in the worker's poller, not on a thread.
* **Loaded once.**  The app (catalogue, search index, noun tagger) is built before gunicorn
  starts (the CLI builds the search index with :meth:`ShopServer.warm_up`) and the worker is
  forked from it; the process is never recycled (sessions would go).
* **Signals.**  SIGTERM (``docker stop``, systemd, Kubernetes): stop accepting, finish the
  requests in flight (at most ``graceful_timeout`` seconds; kept-alive connections linger at
  most 2 s for a request already on its way), exit 0.  The arbiter handles SIGTERM itself, so
  it works as PID 1 of a container.  SIGINT (Ctrl-C): quick stop, exit 0.
* **Logs.**  One access line per request on stdout (``access_log``), gunicorn's own lines on
  stderr.
* **Slow and greedy clients.**  A request (head and body) must arrive whole within
  ``request_timeout`` seconds, else 408 and the connection is closed; until it is whole the
  connection waits in the worker's poller, and no thread ever waits on it, so clients that drip
  bytes hold no thread (:mod:`~agent_envs.webshop.http_worker`).  Answers are written without
  waiting too: a client has ``request_timeout`` seconds to take one, and holds no thread meanwhile.
  An idle keep-alive connection is closed after ``keepalive`` seconds; at most 1000 connections
  are open at once (gunicorn's ``worker_connections``).  A worker whose main loop stalls for
  ``worker_timeout`` seconds is killed and replaced (its sessions are lost).
* **Limits.**  Request lines up to 8190 bytes (gunicorn's maximum; longer ones get 414),
  100 header fields (431 beyond), heads up to 64 KiB (431), bodies up to the app's 64 KiB
  (413, answered by the worker); the app's own limits (URL length, ...) apply after.

Why gunicorn: it is the standard pre-fork WSGI server on Linux, with graceful drain on SIGTERM,
access logs and keep-alive/connection timeouts built in, and no dependency of its own.  waitress
(one process, threads) would fit the session model too, but installs no SIGTERM handler: the
drain, and PID 1's signal handling, would be ours to write.  gunicorn runs on POSIX only.
gunicorn's stock ``gthread`` worker lets a thread wait, without a deadline, for a request whose
first byte has come: ``threads`` slow clients stop the server for everyone.  Its other workers
do not fix that (``gevent``/``eventlet`` monkey-patch the process and set no read deadline
either), so the worker class is our own small subclass of ``gthread``
(:mod:`~agent_envs.webshop.http_worker` says why not waitress or a proxy in front).

:func:`serve_production` takes over the calling process: gunicorn installs its signal handlers
and forks the worker.  Call it only as a process's main job (the CLI does); tests and embedded
use keep :class:`~agent_envs.webshop.server.BackgroundServer` (werkzeug in a thread).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger

from agent_envs.webshop.http_worker import worker_class
from agent_envs.webshop.server import MAX_CONTENT_LENGTH, is_loopback

__all__ = ["AccessLogger", "ProductionOptions", "base_url", "bind_socket", "serve_production"]

logger = logging.getLogger(__name__)

#: Longest request line gunicorn reads (its maximum); the app refuses URLs over MAX_URL_CHARS.
_MAX_REQUEST_LINE = 8190
_ACCESS_FORMAT = '%(h)s %(t)s "%(r)s" %(s)s %(b)s %(M)sms "%(a)s"'
_TIME_FORMAT = "[%d/%b/%Y:%H:%M:%S %z]"  # gunicorn's Logger.now()


class AccessLogger(Logger):
    """gunicorn's logger with the access line of ``_ACCESS_FORMAT`` written directly: the same
    line (remote address, time, request line, status, bytes sent, milliseconds, user agent;
    ``"`` escaped as gunicorn escapes it) without building gunicorn's table of every atom
    and header for each request, written to gunicorn's own stream handler without a
    ``LogRecord`` when that handler is the access log's only output.  The time stamp is
    formatted once a second."""

    _stamp: tuple[int, str] = (-1, "")

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> None:
        if not self.access_log_enabled:
            return
        try:
            line = self._line(resp, environ, request_time)
            handler = self._plain_handler()
            if handler is None:
                self.access_log.info("%s", line)
            else:  # what logging would write there, without building a LogRecord
                with handler.lock:
                    handler.stream.write(line + handler.terminator)
                    handler.flush()
        except Exception:  # noqa: BLE001 - as gunicorn's own access(): logged, never raised
            self.error(traceback.format_exc())

    def _plain_handler(self) -> logging.StreamHandler | None:
        """gunicorn's own stream handler when it is the access log's only output, unfiltered and
        formatted ``%(message)s`` (``--access-log``'s stdout); None otherwise."""
        log = self.access_log
        handlers = log.handlers
        if len(handlers) != 1 or log.filters or log.propagate or not log.isEnabledFor(logging.INFO):
            return None
        handler = handlers[0]
        plain = (getattr(handler, "_gunicorn", False) and isinstance(handler, logging.StreamHandler)
                 and handler.stream is not None and not handler.filters and handler.level <= logging.INFO
                 and handler.formatter is not None and handler.formatter._fmt == self.access_fmt)
        return handler if plain else None

    def _line(self, resp: Any, environ: dict[str, Any], request_time: Any) -> str:
        status = resp.status
        if isinstance(status, str):
            status = status.split(None, 1)[0]
        sent = getattr(resp, "sent", None)
        ms = request_time.seconds * 1000 + int(request_time.microseconds / 1000)
        request_line = f"{environ['REQUEST_METHOD']} {environ['RAW_URI']} {environ['SERVER_PROTOCOL']}"
        return (f'{_safe(environ.get("REMOTE_ADDR", "-"))} {self._now()} "{_safe(request_line)}" '
                f'{_safe(status)} {sent if sent is not None else "-"} {ms}ms '
                f'"{_safe(environ.get("HTTP_USER_AGENT", "-"))}"')

    def _now(self) -> str:
        second = int(time.time())
        stamp = self._stamp
        if stamp[0] != second:
            stamp = (second, time.strftime(_TIME_FORMAT, time.localtime(second)))
            self._stamp = stamp
        return stamp[1]


def _safe(value: Any) -> Any:
    """An atom as gunicorn's access log writes it: ``"`` escaped in strings."""
    return value.replace('"', '\\"') if isinstance(value, str) else value


@dataclass(frozen=True)
class ProductionOptions:
    """How :func:`serve_production` runs gunicorn.

    Attributes:
        threads: Request threads of the one worker process (1-256).
        graceful_timeout: Seconds SIGTERM waits for requests in flight before the worker is
            killed (0-600).
        keepalive: Seconds an idle keep-alive connection stays open (0: no keep-alive; 0-600).
        request_timeout: Seconds a request (head and body) may take to arrive whole, and a
            client may take to read an answer (1-600).
        worker_timeout: Seconds of a stalled worker main loop before it is replaced (1-3600).
        access_log: One line per request on stdout.
        loop_paths: Requests whose path starts with one of these are served on the worker's
            event loop rather than handed to a thread and back: for the shop's JSON API (short,
            in-memory work) that hand-off was half the server's CPU per request.  A request
            served on the loop delays every other until it is answered, so only routes of
            bounded work belong here; ``()`` serves every request on a thread.

    Example:
        >>> ProductionOptions(threads=4).gunicorn_settings(fd=7)["bind"]
        ['fd://7']
        >>> ProductionOptions(threads=0).check()
        Traceback (most recent call last):
        ...
        ValueError: threads must be an integer from 1 to 256, got 0
    """

    threads: int = 8
    graceful_timeout: int = 3
    keepalive: int = 5
    request_timeout: int = 10
    worker_timeout: int = 30
    access_log: bool = True
    loop_paths: tuple[str, ...] = ("/api/",)

    def check(self) -> None:
        """Raise ValueError naming the first option out of range."""
        for name, low, high in (("threads", 1, 256), ("graceful_timeout", 0, 600), ("keepalive", 0, 600),
                                ("request_timeout", 1, 600), ("worker_timeout", 1, 3600)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer from {low} to {high}, got {value!r}")

    def gunicorn_settings(self, fd: int) -> dict[str, Any]:
        """gunicorn's settings for serving the already bound socket ``fd``."""
        shm = "/dev/shm"  # the worker's heartbeat file: a tmpfs even on a read-only root
        return {
            "bind": [f"fd://{fd}"], "workers": 1, "threads": self.threads,
            "worker_class": worker_class(request_timeout=self.request_timeout, max_body=MAX_CONTENT_LENGTH,
                                         loop_paths=self.loop_paths),
            "preload_app": True, "max_requests": 0, "timeout": self.worker_timeout,
            "graceful_timeout": self.graceful_timeout, "keepalive": self.keepalive,
            "accesslog": "-" if self.access_log else None, "access_log_format": _ACCESS_FORMAT,
            "logger_class": AccessLogger,
            "errorlog": "-", "loglevel": "info", "proc_name": "rubricgym-webshop",
            "limit_request_line": _MAX_REQUEST_LINE,
            "sendfile": False,  # the worker's sockets never block; sendfile() needs a blocking one
            "worker_tmp_dir": shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None,
            # no runtime control socket: it could add workers, and workers do not share sessions
            "control_socket_disable": True,
        }


def base_url(host: str, port: int) -> str:
    """``http://host:port`` (IPv6 literals in brackets).

    >>> base_url("127.0.0.1", 3000), base_url("::1", 80)
    ('http://127.0.0.1:3000', 'http://[::1]:80')
    """
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def bind_socket(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port=0``: a free port).

    Raises:
        OSError: the address cannot be resolved or bound (in use, not local, ...).
    """
    family, kind, proto, _name, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


class _ShopApplication(BaseApplication):
    """gunicorn's application interface over an already built WSGI app and fixed settings
    (no configuration file, no ``GUNICORN_CMD_ARGS``, no command line)."""

    def __init__(self, app: Flask, settings: dict[str, Any]) -> None:
        self._app = app
        self._settings = settings
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._settings.items():
            self.cfg.set(key, value)

    def load(self) -> Flask:
        return self._app


def serve_production(app: Flask, host: str = "127.0.0.1", port: int = 3000, *,
                     options: ProductionOptions | None = None,
                     on_ready: Callable[[str], None] | None = None) -> int:
    """Serve ``app`` with gunicorn until SIGTERM or SIGINT; returns the exit status (0).

    Takes over the process (signal handlers, a forked worker): call it as a process's main job.
    ``on_ready`` is called with the base URL once the server listens (``port=0`` picks a free
    port, and the URL names it).

    Raises:
        ValueError: an option is out of range.
        OSError: ``host:port`` cannot be bound.
    """
    opts = options or ProductionOptions()
    opts.check()
    if not is_loopback(host):
        logger.warning("serving WebShop on %s: reachable from other machines (use 127.0.0.1 unless "
                       "inside a container whose port is published on the host's loopback)", host)
    sock = bind_socket(host, port)
    url = base_url(host, sock.getsockname()[1])

    def when_ready(_arbiter: Any) -> None:
        logger.info("WebShop server (gunicorn, 1 worker x %d threads) on %s", opts.threads, url)
        if on_ready is not None:
            on_ready(url)

    fd = sock.detach()  # gunicorn owns (and closes) the descriptor from here on
    settings = {**opts.gunicorn_settings(fd), "when_ready": when_ready}
    master = os.getpid()
    try:
        _ShopApplication(app, settings).run()
    except SystemExit as exc:  # the arbiter ends with sys.exit(status)
        if os.getpid() != master:
            raise  # the forked worker leaves the way gunicorn means it to
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return 0

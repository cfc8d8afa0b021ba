"""``rubricgym serve ENV``: any registered rubricgym environment as an OpenEnv server.

Serves OpenEnv's FastAPI app (:func:`agent_envs.serving.server.create_rubric_app`) under
uvicorn: one environment per WebSocket session at ``/ws``, ``/health``, ``/schema``,
``/metadata``.  ``--workers N`` runs N uvicorn worker processes on the same port (a session
stays on the process that accepted it).  SIGTERM (or Ctrl-C) stops accepting, closes the
sessions and exits 0 after at most ``--graceful-timeout`` seconds, also as PID 1 of a
container.  Binds 127.0.0.1 by default; ``--host 0.0.0.0`` belongs inside a container whose
port is published where it should be.

Needs ``pip install 'rubricgym[openenv]'``; nothing heavy is imported until the command runs.
Exit status: 0 after SIGTERM/SIGINT, 1 when the app cannot be built or served, 2 for a bad option.

Example::

    rubricgym serve ALFWorld-Rubric-v0 --port 8000 --env-kwargs '{"split": "generated"}'
    curl http://127.0.0.1:8000/health
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import typer

__all__ = ["register", "serve"]


class _Stopped(BaseException):
    """SIGTERM or SIGINT: before uvicorn serves, or handed back by uvicorn after its graceful
    shutdown (uvicorn re-raises the signal it caught, which would end the process *by* the
    signal; a BaseException, so no ``except Exception`` of the loading code swallows it)."""


def _stop(_signum: int, _frame: Any) -> None:
    raise _Stopped


def _fail(message: str, code: int) -> typer.Exit:
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


def _kwargs(text: str) -> dict:
    if not text.strip():  # an empty RUBRICGYM_SERVE_KWARGS (a compose default)
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(f"--env-kwargs is not JSON: {exc}", 2) from None
    if not isinstance(value, dict):
        raise _fail(f"--env-kwargs must be a JSON object, got {text!r}", 2)
    return value


def serve(
    env: str = typer.Argument(..., help="A registered environment id, e.g. ALFWorld-Rubric-v0 (rubricgym envs lists them)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (loopback by default)."),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="TCP port."),
    workers: int = typer.Option(1, "--workers", min=1, max=256, envvar="RUBRICGYM_SERVE_WORKERS",
                                help="uvicorn worker processes sharing the port."),
    env_kwargs: str = typer.Option("{}", "--env-kwargs", envvar="RUBRICGYM_SERVE_KWARGS",
                                   help="gym.make keyword arguments of every session's environment, as a JSON object."),
    max_sessions: int = typer.Option(256, "--max-sessions", min=1, envvar="RUBRICGYM_SERVE_MAX_SESSIONS",
                                     help="WebSocket sessions (environments) one worker process holds at most; one "
                                          "more is refused (CAPACITY_REACHED)."),
    session_timeout: float | None = typer.Option(None, "--session-timeout", min=1.0,
                                                 help="Seconds after which an idle session is closed (default: never)."),
    graceful_timeout: int = typer.Option(10, "--graceful-timeout", min=0, max=600,
                                         help="Seconds SIGTERM waits for open sessions before closing them."),
) -> None:
    """Serve ENV with OpenEnv's server (WebSocket sessions at /ws) until SIGTERM or Ctrl-C."""
    kwargs = _kwargs(env_kwargs)
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        _serve(env, kwargs, host, port, workers, max_sessions, session_timeout, graceful_timeout)
    except _Stopped:
        raise typer.Exit(0) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _serve(env: str, kwargs: dict, host: str, port: int, workers: int, max_sessions: int,
           session_timeout: float | None, graceful_timeout: int) -> None:
    try:
        from agent_envs.serving.server import ENV_VARS, create_rubric_app
    except ModuleNotFoundError as exc:
        raise _fail(f"{exc}: rubricgym serve needs OpenEnv: pip install 'rubricgym[openenv]'", 1) from None
    try:
        app = create_rubric_app(env, kwargs, max_sessions=max_sessions, session_timeout=session_timeout)
    except (ValueError, TypeError) as exc:
        raise _fail(str(exc), 1) from None
    import uvicorn

    options = {"host": host, "port": port, "timeout_graceful_shutdown": graceful_timeout, "access_log": False,
               "log_level": "info", "ws_max_size": 16 << 20}
    if workers == 1:
        uvicorn.run(app, **options)
        return
    values = (env, json.dumps(kwargs), str(max_sessions), "" if session_timeout is None else str(session_timeout))
    os.environ.update(dict(zip(ENV_VARS, values)))  # this command's own process: its workers read them
    uvicorn.run("agent_envs.serving.server:app_from_environ", factory=True, workers=workers, **options)


def register(app: typer.Typer, data_app: typer.Typer) -> None:
    """Add ``rubricgym serve``."""
    app.command("serve")(serve)

"""``rubricgym webshop serve``: run the WebShop shop as a production web server.

Serves upstream WebShop's HTML routes for people and browsers and the JSON API that
``WebShop-Rubric-v0(server_url=...)`` plays through (see :mod:`agent_envs.webshop.server`),
under gunicorn with one worker process and ``--threads`` threads
(:mod:`agent_envs.webshop.wsgi`: sessions live in that process's memory, so they are lost
when it stops).  SIGTERM drains the requests in flight and exits 0, also as PID 1 of a
container.  Binds 127.0.0.1 by default; use ``--host 0.0.0.0`` only inside a container whose
port is published on the host's loopback (``docker/webshop/compose.yaml`` does that).

Exit status: 0 after SIGTERM/SIGINT, 1 for a catalogue or address problem, 2 for a bad option
(one line on stderr each, no traceback).  Nothing heavy is imported at module import time.

Example::

    rubricgym webshop serve --port 3000 --tagger lexicon
    curl http://127.0.0.1:3000/healthz
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from flask import Flask
    from rich.console import Console

    from agent_envs.webshop.wsgi import ProductionOptions

__all__ = ["register", "serve_webshop", "webshop_app"]

webshop_app = typer.Typer(help="The WebShop server (HTML pages for browsers, JSON API for environments).",
                          no_args_is_help=True)


class _Stopped(BaseException):
    """SIGTERM arrived before gunicorn's own handler was installed (a BaseException, so no
    ``except Exception`` of the loading code swallows it)."""


def _stop_on_sigterm(_signum: int, _frame: Any) -> None:
    raise _Stopped


def _fail(console: Console, message: str, code: int = 1) -> typer.Exit:
    console.print(f"[red]error:[/red] {message}", soft_wrap=True)
    return typer.Exit(code)


def _build_app(console: Console, data: Path | None, num_products: int, seed: int, price_seed: int,
               verify: bool, limit: int | None, tagger: str, goal_kind: str, max_sessions: int,
               session_ttl: float, max_browser_sessions: int | None) -> Flask:
    """The shop's Flask app, its search index built (before gunicorn forks the worker), the JSON
    API's steps and resets answered by :class:`~agent_envs.webshop.fastpath.ApiFastPath`; every
    catalogue problem ends in one line on stderr and exit 1."""
    from agent_envs.webshop.catalogue import CatalogueError, get_catalogue
    from agent_envs.webshop.env import resolve_catalogue_spec
    from agent_envs.webshop.fastpath import install_api_fast_path
    from agent_envs.webshop.server import create_app

    source = str(data) if data is not None else "auto"
    try:
        spec = resolve_catalogue_spec(source, num_products, seed, price_seed, verify, limit)
        catalogue = get_catalogue(spec)
        app = create_app(catalogue, tagger=tagger, goal_kind=goal_kind, max_sessions=max_sessions,
                         session_ttl=session_ttl, max_browser_sessions=max_browser_sessions)
        app.extensions["webshop"].warm_up()
        return install_api_fast_path(app)
    except (CatalogueError, ValueError, ImportError, OSError) as exc:
        raise _fail(console, str(exc) if isinstance(exc, CatalogueError) else f"{type(exc).__name__}: {exc}") \
            from None


def serve_webshop(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (loopback by default)."),
    port: int = typer.Option(3000, "--port", min=0, max=65535, help="TCP port (0: any free port)."),
    data: Path | None = typer.Option(None, "--data", help="Directory with upstream's WebShop files "
                                        "(default: installed files if any, else the generated catalogue)."),
    num_products: int = typer.Option(1000, "--num-products", min=1, help="Size of the generated catalogue."),
    seed: int = typer.Option(0, "--seed", help="Generator seed of the generated catalogue."),
    price_seed: int = typer.Option(0, "--price-seed", help="Seed of range prices and price ceilings."),
    verify: bool = typer.Option(True, "--verify/--no-verify", envvar="RUBRICGYM_WEBSHOP_VERIFY",
                                help="Check upstream files' published sha256 (upstream's full "
                                     "items_shuffle.json has none: --no-verify, or RUBRICGYM_WEBSHOP_VERIFY=0)."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Use only the first N raw products."),
    tagger: str = typer.Option("auto", "--tagger", help="Noun tagger of r_type: auto, spacy, spacy:<model>, lexicon."),
    goal_kind: str = typer.Option("human", "--goal-kind", help="Goals of sessions opened in a browser: human or synthetic."),
    max_sessions: int = typer.Option(4096, "--max-sessions", min=1,
                                     help="Live sessions held at most; a new session beyond them gets HTTP 503 "
                                          "(a live session is never evicted)."),
    session_ttl: float = typer.Option(1800.0, "--session-ttl", min=1.0,
                                      help="Seconds after which an idle session expires and frees its slot."),
    max_browser_sessions: int | None = typer.Option(
        None, "--max-browser-sessions", min=1,
        help="Live sessions opened by visiting a page (GET /<id>) held at most (default: a quarter of "
             "--max-sessions); the other slots are kept for the JSON API's environments."),
    threads: int = typer.Option(8, "--threads", min=1, max=256,
                                help="Request threads of the one worker process (sessions live in its memory)."),
    graceful_timeout: int = typer.Option(3, "--graceful-timeout", min=0, max=600,
                                         help="Seconds SIGTERM waits for requests in flight."),
    keepalive: int = typer.Option(5, "--keepalive", min=0, max=600,
                                  help="Seconds an idle keep-alive connection stays open (0: none)."),
    request_timeout: int = typer.Option(10, "--request-timeout", min=1, max=600,
                                        help="Seconds a request may take to arrive whole (else 408 and the "
                                             "connection is closed), and an answer to be written."),
    access_log: bool = typer.Option(True, "--access-log/--no-access-log", help="One line per request on stdout."),
) -> None:
    """Serve the WebShop shop (HTML + JSON API) until SIGTERM or Ctrl-C (gunicorn, exit 0)."""
    from rich.console import Console

    console = Console(stderr=True)
    if goal_kind not in ("human", "synthetic"):
        raise _fail(console, f"--goal-kind must be 'human' or 'synthetic', got {goal_kind!r}", 2)
    if max_browser_sessions is not None and max_browser_sessions > max_sessions:
        raise _fail(console, f"--max-browser-sessions ({max_browser_sessions}) must be at most "
                             f"--max-sessions ({max_sessions})", 2)
    # SIGTERM while loading (spaCy, the catalogue) exits 0 too; gunicorn installs its own handler.
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        app = _build_app(console, data, num_products, seed, price_seed, verify, limit, tagger, goal_kind,
                         max_sessions, session_ttl, max_browser_sessions)
        _announce(console, app, goal_kind)
        options = _options(threads, graceful_timeout, keepalive, request_timeout, access_log)
        _run(console, app, host, port, options)
    except _Stopped:
        console.print("stopped (SIGTERM before serving)")
        raise typer.Exit(0) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def _announce(console: Console, app: Flask, goal_kind: str) -> None:
    shop = app.extensions["webshop"]
    cat = shop.catalogue
    console.print(f"[green]WebShop[/green] {cat.description}: {len(cat.products)} products, "
                  f"{len(cat.goal_list(goal_kind))} {goal_kind} goals, tagger {shop.tagger.name}; "
                  f"at most {shop.sessions.max_sessions} live sessions (at most {shop.sessions.max_browser_sessions} "
                  f"opened from pages), idle expiry {shop.sessions.ttl:g} s",
                  soft_wrap=True)


def _options(threads: int, graceful_timeout: int, keepalive: int, request_timeout: int,
             access_log: bool) -> ProductionOptions:
    from agent_envs.webshop.wsgi import ProductionOptions

    return ProductionOptions(threads=threads, graceful_timeout=graceful_timeout, keepalive=keepalive,
                             request_timeout=request_timeout, access_log=access_log)


def _run(console: Console, app: Flask, host: str, port: int, options: ProductionOptions) -> None:
    from agent_envs.webshop.wsgi import serve_production

    def ready(url: str) -> None:
        console.print(f"serving on {url}  (health: {url}/healthz, shop: {url}/fixed_0)", soft_wrap=True)

    try:
        status = serve_production(app, host=host, port=port, options=options, on_ready=ready)
    except OSError as exc:
        raise _fail(console, f"cannot serve on {host}:{port}: {exc}") from None
    console.print("stopped" if status == 0 else f"[red]gunicorn stopped with status {status}[/red]")
    raise typer.Exit(status)


def register(app: typer.Typer, data_app: typer.Typer) -> None:
    """Add the ``webshop`` command group (``rubricgym webshop serve``)."""
    webshop_app.command("serve")(serve_webshop)
    app.add_typer(webshop_app, name="webshop")

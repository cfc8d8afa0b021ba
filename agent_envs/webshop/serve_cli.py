"""``rubricgym webshop serve``: run the WebShop shop as a Flask web server.

Serves upstream WebShop's HTML routes for people and browsers and the JSON API that
``WebShop-Rubric-v0(server_url=...)`` plays through (see :mod:`agent_envs.webshop.server`).
Binds 127.0.0.1 by default; use ``--host 0.0.0.0`` only inside a container whose port is
published on the host's loopback (``docker/webshop/compose.yaml`` does that).

Nothing heavy is imported at module import time.

Example::

    rubricgym webshop serve --port 3000 --tagger lexicon
    curl http://127.0.0.1:3000/healthz
"""

from __future__ import annotations

from pathlib import Path

import typer

__all__ = ["register", "serve_webshop", "webshop_app"]

webshop_app = typer.Typer(help="The WebShop server (HTML pages for browsers, JSON API for environments).",
                          no_args_is_help=True)


def serve_webshop(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (loopback by default)."),
    port: int = typer.Option(3000, "--port", min=0, max=65535, help="TCP port (0: any free port)."),
    data: Path | None = typer.Option(None, "--data", help="Directory with upstream's WebShop files "
                                        "(default: installed files if any, else the generated catalogue)."),
    num_products: int = typer.Option(1000, "--num-products", min=1, help="Size of the generated catalogue."),
    seed: int = typer.Option(0, "--seed", help="Generator seed of the generated catalogue."),
    price_seed: int = typer.Option(0, "--price-seed", help="Seed of range prices and price ceilings."),
    verify: bool = typer.Option(True, "--verify/--no-verify", help="Check upstream files' published sha256."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Use only the first N raw products."),
    tagger: str = typer.Option("auto", "--tagger", help="Noun tagger of r_type: auto, spacy, spacy:<model>, lexicon."),
    goal_kind: str = typer.Option("human", "--goal-kind", help="Goals of sessions opened in a browser: human or synthetic."),
    max_sessions: int = typer.Option(4096, "--max-sessions", min=1, help="Sessions kept (least recently used dropped)."),
) -> None:
    """Serve the WebShop shop (HTML + JSON API) until interrupted."""
    from rich.console import Console

    from agent_envs.webshop.catalogue import CatalogueError, get_catalogue
    from agent_envs.webshop.env import resolve_catalogue_spec
    from agent_envs.webshop.server import create_app, serve

    console = Console(stderr=True)
    if goal_kind not in ("human", "synthetic"):
        console.print(f"[red]error:[/red] --goal-kind must be 'human' or 'synthetic', got {goal_kind!r}", soft_wrap=True)
        raise typer.Exit(2)
    source = str(data) if data is not None else "auto"
    try:
        spec = resolve_catalogue_spec(source, num_products, seed, price_seed, verify, limit)
        catalogue = get_catalogue(spec)
        app = create_app(catalogue, tagger=tagger, goal_kind=goal_kind, max_sessions=max_sessions)
    except (CatalogueError, ValueError, ImportError) as exc:
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(1) from None
    shop = app.extensions["webshop"]
    console.print(f"[green]WebShop[/green] {catalogue.description}: {len(catalogue.products)} products, "
                  f"{len(catalogue.goal_list(goal_kind))} {goal_kind} goals, tagger {shop.tagger.name}")

    def ready(url: str) -> None:
        console.print(f"serving on {url}  (health: {url}/healthz, shop: {url}/fixed_0)", soft_wrap=True)

    try:
        serve(app, host=host, port=port, on_ready=ready)
    except OSError as exc:
        console.print(f"[red]cannot serve on {host}:{port}: {exc}[/red]")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        console.print("stopped")


def register(app: typer.Typer, data_app: typer.Typer) -> None:
    """Add the ``webshop`` command group (``rubricgym webshop serve``)."""
    webshop_app.command("serve")(serve_webshop)
    app.add_typer(webshop_app, name="webshop")

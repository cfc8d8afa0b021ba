"""The ``rubricgym`` command line.

Each area of the library contributes its commands from its own small module through a
``register(app, data_app)`` function; those modules import nothing heavy at import time, so
``rubricgym --help`` is instant and works without the optional extras.
"""

from __future__ import annotations

import importlib
import logging

import typer

__all__ = ["app", "main"]

app = typer.Typer(
    name="rubricgym",
    help="Rubric-channel environments, group credit estimators and an RL trainer for LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
data_app = typer.Typer(help="Install or inspect third-party data sets.", no_args_is_help=True)
app.add_typer(data_app, name="data")

#: Modules that add commands; a module missing from a partial checkout is skipped.
COMMAND_MODULES = (
    "agent_envs.cli",
    "agent_envs.alfworld.cli",
    "agent_envs.webshop.cli",
    "agent_envs.webshop.serve_cli",
    "trainers.train_cli",
    "trainers.report_cli",
    "trainers.arena_cli",
    "trainers.eval_cli",
)


@app.callback()
def _root(
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, help="More log output (-v info, -vv debug)."),
) -> None:
    """Rubric-channel environments, group credit estimators and an RL trainer for LLM agents."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _register_all() -> None:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and name.startswith(exc.name):
                continue  # that part of the library is not in this checkout
            raise
        module.register(app, data_app)


_register_all()


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()

"""The ``rubricgym`` command line.

Each area of the library contributes its commands from its own small module through a
``register(app, data_app)`` function; those modules import nothing heavy at import time, so
``rubricgym --help`` is instant and works without the optional extras.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys


def _stop_on_sigterm(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


# `rubricgym webshop serve` run as a program (a container's command) stops on SIGTERM from here on,
# before the imports below (a second or more): as PID 1 a signal with no handler is dropped.  The
# command installs its own handler next, gunicorn its own after that.  Other commands keep Python's.
if (__name__ == "__main__" or os.path.basename(sys.argv[0]) == "rubricgym") and \
        [a for a in sys.argv[1:] if not a.startswith("-")][:2] == ["webshop", "serve"]:
    signal.signal(signal.SIGTERM, _stop_on_sigterm)

import typer

__all__ = ["app", "main"]

app = typer.Typer(
    name="rubricgym",
    help="Rubric-channel environments, group credit estimators and an RL trainer for LLM agents.",
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # every command inherits -h
)
data_app = typer.Typer(help="Install or inspect third-party data sets.", no_args_is_help=True)
app.add_typer(data_app, name="data")

#: Modules that add commands; a module missing from a partial checkout is skipped.
COMMAND_MODULES = (
    "agent_envs.cli",
    "agent_envs.alfworld.cli",
    "agent_envs.webshop.cli",
    "agent_envs.webshop.serve_cli",
    "agent_envs.serving.cli",
    "trainers.train_cli",
    "trainers.report_cli",
    "trainers.arena_cli",
    "trainers.eval_cli",
)


#: Loggers whose INFO lines are a command's progress (its phases, the games it generates).
PROGRESS_LOGGERS = ("trainers", "agent_envs.alfworld.generator")


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, help="More log output (-v info, -vv debug)."),
) -> None:
    """Rubric-channel environments, group credit estimators and an RL trainer for LLM agents."""
    if ctx.invoked_subcommand is None:  # `rubricgym` alone: the help, and success
        text = ctx.get_help()  # typer's rich help prints itself and returns ""
        if text:
            typer.echo(text)
        raise typer.Exit(0)
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in PROGRESS_LOGGERS:  # a command's progress shows without -v (off a terminal: its only output)
        logging.getLogger(name).setLevel(min(level, logging.INFO))


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

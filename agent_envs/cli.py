"""Environment-level commands: ``rubricgym envs`` lists what is registered."""

from __future__ import annotations

import typer

__all__ = ["register"]


def envs() -> None:
    """List the registered environments and their entry points."""
    from rich.console import Console
    from rich.table import Table

    from agent_envs.registration import ENV_IDS

    table = Table("id", "entry point")
    for env_id, entry in ENV_IDS.items():
        table.add_row(env_id, entry)
    Console().print(table)


def register(app: typer.Typer, data_app: typer.Typer) -> None:
    """Add this module's commands to the CLI."""
    app.command("envs")(envs)

"""ALFWorld commands: ``rubricgym data alfworld`` (install + verify) and ``rubricgym alfworld-tasks``.

Nothing heavy is imported at module import time (the engine is never needed here).
"""

from __future__ import annotations

from pathlib import Path

import typer

__all__ = ["alfworld_tasks", "data_alfworld", "register"]


def data_alfworld(
    source: Path | None = typer.Option(
        None, "--from", help="Unpack this local json_2.1.1 archive (.tar.xz/.tar.gz/.zip) instead of downloading."
    ),
    dest: Path | None = typer.Option(
        None, "--dest", help="Data root (default: $ALFWORLD_DATA, else ~/.cache/alfworld)."
    ),
    parse: bool = typer.Option(True, "--parse/--no-parse", help="JSON-parse every game file while verifying."),
    allow_partial: bool = typer.Option(
        False, "--allow-partial", help="With --from: install splits whose game counts differ from the official set "
        "(a deliberate subset; the count is recorded and checked where the split is used)."
    ),
) -> None:
    """Install the real ALFWorld games and verify them (split counts, every file parses).

    Without --from this runs ALFWorld's official `alfworld-download` (needs the network).
    With --from the archive is unpacked and verified in a staging folder before anything
    installed is replaced; a failed verification installs nothing.
    """
    from rich.console import Console
    from rich.table import Table

    from agent_envs.alfworld import data

    console = Console()
    root = data.data_root(dest)
    try:
        if source is not None:
            console.print(f"Unpacking [bold]{source}[/bold] into {root} ...")
            data.install_from_archive(source, root, parse=parse, allow_partial=allow_partial)
        else:
            console.print(f"Running alfworld-download into {root} ...")
            data.install_with_downloader(root)
    except (data.InstallError, FileNotFoundError) as exc:
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(1) from exc
    report = data.verify_install(root, parse=parse)
    table = Table("split", "games", "expected", *[_short(t) for t in _types()])
    for split in data.REAL_SPLITS:
        by_type = report.by_type.get(split, {})
        table.add_row(
            split, str(report.counts.get(split, 0)), str(data.EXPECTED_COUNTS[split]),
            *[str(by_type.get(t, 0)) for t in _types()],
        )
    console.print(table)
    if allow_partial and not report.corrupt and all(report.counts.values()):
        console.print(f"[yellow]ALFWorld games installed under {root}: a partial set, as asked[/yellow]")
        return
    if not report.complete:
        for problem in report.problems()[:50]:
            console.print(f"[red]problem:[/red] {problem}")
        console.print(f"[red]the ALFWorld data under {root} is incomplete or damaged[/red]")
        raise typer.Exit(1)
    console.print(f"[green]ALFWorld games verified under {root}[/green]")


def _short(task_type: str) -> str:
    """Column label of a task type (``pick_heat_then_place_in_recep`` -> ``heat``)."""
    from agent_envs.alfworld.game import TASK_FAMILIES

    if task_type == "pick_two_obj_and_place":
        return "pick_two"
    return TASK_FAMILIES[task_type]


def _types() -> tuple[str, ...]:
    from agent_envs.alfworld.game import TASK_TYPES

    return TASK_TYPES


def alfworld_tasks(
    split: str = typer.Option("valid_seen", "--split", help="train, valid_seen, valid_unseen or generated."),
    data_root: Path | None = typer.Option(None, "--data-root", help="ALFWorld data root."),
    task_type: list[str] | None = typer.Option(None, "--task-type", help="Only these task types (repeatable)."),
) -> None:
    """List the task ids of a split, with the index `reset(options={"task": i})` takes."""
    from rich.console import Console

    from agent_envs.alfworld import data

    console = Console()
    try:
        if split == "generated":
            from agent_envs.alfworld.env import ALFWorldRubricEnv

            ids = ALFWorldRubricEnv(split="generated", task_types=task_type or None).task_ids()
        else:
            ids = data.list_tasks(split, data_root, task_type or None)
    except (data.DataNotFoundError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(1) from None
    for index, task_id in enumerate(ids):
        typer.echo(f"{index}\t{task_id}")  # plain, tab-separated: easy to grep/cut


def register(app: typer.Typer, data_app: typer.Typer) -> None:
    """Add ``data alfworld`` and ``alfworld-tasks`` (and the generator's command) to the CLI."""
    data_app.command("alfworld")(data_alfworld)
    app.command("alfworld-tasks")(alfworld_tasks)
    try:
        from agent_envs.alfworld import gen_cli
    except ImportError:  # the generator is not in this checkout
        return
    gen_cli.register(app, data_app)

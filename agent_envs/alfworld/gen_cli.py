"""``rubricgym data generate-alfworld``: build (and engine-verify) generated ALFWorld games.

Nothing heavy is imported at module import time; the generator and the engine load when the
command runs.
"""

from __future__ import annotations

from pathlib import Path

import typer

__all__ = ["generate_alfworld", "register"]


def generate_alfworld(
    n: int = typer.Option(
        60, "--n", min=1, help="Number of games (balanced across the task types)."
    ),
    seed: int = typer.Option(
        0, "--seed", help="Generator seed: the same seed gives byte-identical games."
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Cache directory (default: $RUBRICGYM_CACHE/alfworld/generated-<seed>-<n>).",
    ),
    task_type: list[str] | None = typer.Option(
        None, "--task-type", help="Restrict to these task types (repeatable); default: all six."
    ),
    workers: int | None = typer.Option(
        None, "--workers", min=1, help="Processes that build and verify games (default: automatic)."
    ),
) -> None:
    """Generate seeded, solvable ALFWorld games whose walkthroughs win in the real engine."""
    import time
    from collections import Counter

    from rich.console import Console
    from rich.table import Table

    from agent_envs.alfworld import generator

    console = Console()
    started = time.perf_counter()
    try:
        paths = generator.ensure_generated(
            n=n, seed=seed, cache_dir=out, task_types=task_type or None, workers=workers
        )
    except (TypeError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    except OSError as exc:  # --out is not a writable folder
        console.print(f"[red]error:[/red] --out {out}: {exc}", soft_wrap=True)
        raise typer.Exit(1) from None
    elapsed = time.perf_counter() - started
    counts = Counter(p.parent.parent.name.split("-", 1)[0] for p in paths)
    table = Table("task type", "games")
    for name in generator.TASK_TYPES:
        if counts.get(name):
            table.add_row(name, str(counts[name]))
    console.print(table)
    root = paths[0].parent.parent.parent
    console.print(f"{len(paths)} verified game(s) in [bold]{root}[/bold] ({elapsed:.1f} s)")


def register(app: typer.Typer, data_app: typer.Typer) -> None:
    """Add ``data generate-alfworld`` to the CLI."""
    data_app.command("generate-alfworld")(generate_alfworld)

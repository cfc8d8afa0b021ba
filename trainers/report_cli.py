"""``rubricgym report``: one report of trainer runs and arena runs alike.

Nothing heavy is imported at module import time (the report loads inside the command).
"""

from __future__ import annotations

from pathlib import Path

import typer

__all__ = ["register", "report"]


def report(
    paths: list[Path] = typer.Argument(..., help="Run folders, or folders above them (an arena output folder, "
                                                 "a trainer output_dir, any mix): every metrics.jsonl below counts."),
    baseline: str = typer.Option(None, "--baseline",
                                 help="Method to pair the others with, in every setting that has it "
                                      "(default: grpo where present, else the setting's first method)."),
    out: Path = typer.Option(None, "--out", "-o",
                             help="Folder for results.md, results.json, curves.png and diagnostics.png "
                                  "(default: the one PATH when it is a folder above runs; none otherwise)."),
    partial: bool = typer.Option(False, "--partial", help="Also report unfinished runs (running or interrupted)."),
    each: bool = typer.Option(False, "--each", help="Also print every run's own summary."),
    title: str = typer.Option(None, "--title", help="Title of the table (default: the paths)."),
) -> None:
    """Compare trainer and arena runs: L5, AUC, paired intervals and MDEs against a baseline.

    Per setting and method: L5, AUC and final success (mean ± SD over seeds), and paired
    differences to a baseline with 95% Student-t intervals and MDEs where seeds pair up.
    A single run folder also gets its curves.png and summary.txt redrawn.
    """
    from rich.console import Console

    import trainers.arena.config  # noqa: F401  (the arena tells the report how its runs' settings read)
    from trainers.metrics import MetricFileError
    from trainers.report import (
        find_runs,
        summarize,
        summary_text,
        write_markdown,
        write_report,
        write_run_report,
    )

    console = Console()
    try:
        runs = find_runs(paths, partial=partial)
        if out is None and len(paths) == 1 and paths[0].is_dir() and not (paths[0] / "metrics.jsonl").is_file():
            out = paths[0]
        heading = title or "Runs: " + ", ".join(str(p) for p in paths)
        if out is not None:
            summary = write_report(runs, out, baseline=baseline, title=heading)
        else:
            summary = summarize(runs, baseline)
        if len(paths) == 1 and (paths[0] / "metrics.jsonl").is_file():
            write_run_report(paths[0])
    except (FileNotFoundError, MetricFileError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(2) from None
    except OSError as exc:  # the report's folder cannot be written (--out a file, no permission, disk full)
        console.print(f"[red]error:[/red] cannot write the report: {exc}", soft_wrap=True)
        raise typer.Exit(1) from None
    if each or len(runs) == 1:
        for r in runs:
            typer.echo(summary_text(r))
    typer.echo(write_markdown(summary, title=heading))  # plain Markdown: no colours, no wrapping
    if out is not None:
        typer.echo(f"report: {out / 'results.md'} (results.json, curves.png, diagnostics.png beside it)")
    elif len(paths) == 1 and (paths[0] / "metrics.jsonl").is_file():
        typer.echo(f"curves: {paths[0] / 'curves.png'}; summary: {paths[0] / 'summary.txt'}")


def register(app: typer.Typer, data_app: typer.Typer) -> None:
    """Add ``rubricgym report`` to the command line."""
    del data_app
    app.command("report")(report)

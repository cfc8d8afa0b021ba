"""``rubricgym train`` and ``rubricgym model prepare`` (``rubricgym report`` is :mod:`trainers.report_cli`).

Nothing heavy is imported at module import time (torch/transformers load inside the
commands), so ``rubricgym --help`` stays instant.
"""

from __future__ import annotations

import logging
from pathlib import Path

import typer

__all__ = ["model_prepare", "register", "train"]

log = logging.getLogger(__name__)


def train(
    args: list[str] = typer.Argument(
        None,
        help="Optional preset name or config file (.toml/.yaml) followed by field=value overrides, "
        "e.g. `rubricgym train alfworld estimator=mcgpo updates=100`. No arguments: the demo preset.",
        show_default=False,
    ),
    resume: Path = typer.Option(None, "--resume", help="Continue the run in this folder from its last complete checkpoint."),
    output_dir: str = typer.Option(None, "--output-dir", "-o", help="Parent folder of the run folder (overrides output_dir)."),
    help_config: bool = typer.Option(False, "--help-config", help="List every configuration field with its help text and exit."),
    presets: bool = typer.Option(False, "--presets", help="List the packaged presets and exit."),
) -> None:
    """Train a policy (default: the CPU demo on generated ALFWorld games)."""
    from rich.console import Console
    from rich.table import Table

    from trainers.config import ConfigError, available_presets, config_help, load_config

    console = Console()
    if help_config:
        table = Table("field", "type", "default", "help", show_lines=False)
        for row in config_help():
            table.add_row(*row)
        console.print(table)
        return
    if presets:
        console.print("presets: " + ", ".join(available_presets()))
        return
    args = list(args or [])
    try:
        if resume is not None:
            cfg_file = resume / "config.yaml"
            if not cfg_file.is_file():
                raise ConfigError(f"--resume {resume}: no config.yaml there (is it a run folder?)")
            cfg = load_config(cfg_file, args)
            run_dir = resume
        else:
            source = "demo"
            if args and "=" not in args[0]:
                source = args.pop(0)
            cfg = load_config(source, args)
            run_dir = None
        if output_dir is not None:
            cfg.output_dir = output_dir
    except ConfigError as exc:
        console.print(f"[red]invalid configuration:[/red] {exc}")
        raise typer.Exit(2) from None
    from trainers.trainer import Trainer

    trainer = Trainer(cfg, run_dir, resume=resume is not None)
    summary = trainer.train()
    if trainer.accelerator.is_main_process:
        console.print(f"[bold green]done[/bold green]: run folder {summary['run_dir']}")
        txt = Path(summary["run_dir"]) / "summary.txt"
        if txt.is_file():
            console.print(txt.read_text())


def model_prepare(force: bool = typer.Option(False, "--force", help="Convert again even if the cache exists.")) -> None:
    """Convert the packaged SmolLM2-135M-Instruct GGUF into a cached Hugging Face checkpoint."""
    from rich.console import Console

    from trainers.models import prepare_smollm2

    try:
        path = prepare_smollm2(force=force)
    except FileNotFoundError as exc:
        Console().print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    Console().print(f"SmolLM2-135M-Instruct ready at {path}")


def register(app: typer.Typer, data_app: typer.Typer) -> None:
    """Add ``train`` and ``model prepare`` to the CLI."""
    app.command("train")(train)
    model_app = typer.Typer(help="Prepare policy models.", no_args_is_help=True)
    model_app.command("prepare")(model_prepare)
    app.add_typer(model_app, name="model")

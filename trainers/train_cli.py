"""``rubricgym train`` and ``rubricgym model prepare`` (``rubricgym report`` is :mod:`trainers.report_cli`).

Nothing heavy is imported at module import time (torch/transformers load inside the
commands), so ``rubricgym --help`` stays instant.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import typer

__all__ = ["TRAIN_USAGE", "model_prepare", "parse_train_args", "print_run_summary", "register", "train"]

log = logging.getLogger(__name__)


#: The command's usage line; the flags after it are generated from TrainConfig's fields.
TRAIN_USAGE = """Train a policy (default: the CPU demo on generated ALFWorld games).

rubricgym train [PRESET | FILE] [--resume RUN_DIR] [--presets] [--FIELD VALUE ...]

PRESET is a packaged preset (--presets lists them; default: demo), FILE a .toml/.yaml/.json
config file; --resume RUN_DIR continues that run from its last complete checkpoint (its
config.yaml is the starting point). Every field below can then be set by its flag, e.g.
`rubricgym train alfworld --estimator mcgpo --updates 100 --estimator-params '{gamma: 0.95}'`."""


def parse_train_args(args: list[str]) -> tuple[Any, Path | None]:
    """``(config, run folder to resume or None)`` from ``rubricgym train``'s arguments.

    The preset or file (first argument) or ``--resume`` give the starting configuration;
    the remaining flags are parsed by tyro from :class:`~trainers.config.TrainConfig`
    (:func:`trainers.typed_cli.parse`) and the result is validated.  Raises
    :class:`~trainers.config.ConfigError` for a bad source or value, ``SystemExit`` for
    ``--help`` and for flags tyro rejects.
    """
    from trainers.config import ConfigError, TrainConfig, load_config
    from trainers.typed_cli import parse

    args = list(args)
    resume = _take_option(args, "--resume")
    if resume is not None:
        run_dir = Path(resume)
        cfg_file = run_dir / "config.yaml"
        if not cfg_file.is_file():
            raise ConfigError(f"--resume {run_dir}: no config.yaml there (is it a run folder?)")
        base = load_config(cfg_file, validate=False)
    else:
        run_dir = None
        source = args.pop(0) if args and not args[0].startswith("-") else "demo"
        base = load_config(source, validate=False)
    stray = [a for a in args if "=" in a and not a.startswith("-")]
    if stray:
        key, value = stray[0].split("=", 1)
        raise ConfigError(f"{stray[0]!r}: fields are set with flags, e.g. --{key.replace('_', '-')} {value}")
    cfg = parse(TrainConfig, base, args, prog="rubricgym train", description=TRAIN_USAGE)
    return cfg.validate(), run_dir


def _check_env(cfg: Any) -> None:
    """Make (and close) the environment once, before a run folder is made, so a bad id, keyword
    argument or missing data set is a :class:`~trainers.config.ConfigError` naming the field."""
    import gymnasium as gym

    from agent_envs import make_env
    from trainers.config import ConfigError

    env_id, env_kwargs = cfg.env.env_id, cfg.env.env_kwargs
    try:
        make_env(env_id, cfg.env_make_kwargs()).close()
    except gym.error.Error as exc:
        raise ConfigError(f"env_id {env_id!r}: {exc}") from None
    except (TypeError, ValueError) as exc:  # gym.make names the environment and the kwargs
        raise ConfigError(f"env_kwargs {env_kwargs!r}: {exc}") from None
    except OSError as exc:  # missing data: the message says how to install it
        raise ConfigError(f"env_id {env_id!r}: {exc}") from None


def _take_option(args: list[str], name: str) -> str | None:
    """Remove ``name VALUE`` (or ``name=VALUE``) from ``args`` and return VALUE."""
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            del args[i]
            return arg.split("=", 1)[1]
        if arg == name:
            if i + 1 == len(args):
                from trainers.config import ConfigError

                raise ConfigError(f"{name} needs a value")
            value = args[i + 1]
            del args[i : i + 2]
            return value
    return None


def print_run_summary(console: Any, run_dir: Path) -> None:
    """The end of ``rubricgym train``: the run folder and its ``summary.txt`` line by line as
    written, never re-wrapped (off a terminal rich would wrap at 80 columns) nor read as markup."""
    console.print(f"[bold green]done[/bold green]: run folder {run_dir}", soft_wrap=True)
    txt = run_dir / "summary.txt"
    if txt.is_file():
        console.print(txt.read_text(encoding="utf-8").rstrip("\n"), soft_wrap=True, markup=False, highlight=False)


def train(ctx: typer.Context) -> None:
    """Train a policy (default: the CPU demo on generated ALFWorld games); --help lists every field."""
    from rich.console import Console

    from trainers.config import ConfigError, available_presets

    console = Console()
    args = list(ctx.args)
    if "--presets" in args:
        console.print("presets: " + ", ".join(available_presets()))
        return
    try:
        cfg, run_dir = parse_train_args(args)
        _check_env(cfg)
    except ConfigError as exc:
        console.print(f"[red]invalid configuration:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(2) from None
    from trainers.trainer import Trainer

    try:
        trainer = Trainer(cfg, run_dir, resume=run_dir is not None)
    except (OSError, ValueError) as exc:  # a run folder in the way, missing data, a bad task split
        log.debug("the trainer could not start", exc_info=True)
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(2) from None
    summary = trainer.train()
    if trainer.accelerator.is_main_process:
        print_run_summary(console, Path(summary["run_dir"]))
    # under `accelerate launch` with several processes: destroy the process group before the
    # interpreter exits (gloo's threads otherwise abort a process at finalization, SIGABRT)
    trainer.accelerator.end_training()


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
    # the arguments go to parse_train_args (tyro), --help included
    raw = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
    app.command("train", context_settings=raw)(train)
    model_app = typer.Typer(help="Prepare policy models.", no_args_is_help=True)
    model_app.command("prepare")(model_prepare)
    app.add_typer(model_app, name="model")

"""``rubricgym arena``: compare credit estimators' learning efficiency on a CPU.

Nothing heavy is imported at module import time; the arena and the engines load inside
the command.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from trainers.arena.runner import ArenaConfig

__all__ = ["arena", "register"]


def _split(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def _seeds(text: str) -> list[int]:
    """``"3"`` -> [0, 1, 2]; ``"0,4,7"`` -> [0, 4, 7]; ``"2-4"`` -> [2, 3, 4]."""
    text = text.strip()
    try:
        if "," in text:
            return [int(p) for p in _split(text)]
        if "-" in text[1:]:
            lo, hi = text.split("-", 1) if not text.startswith("-") else (text, text)
            return list(range(int(lo), int(hi) + 1))
        n = int(text)
    except ValueError:
        raise typer.BadParameter(f"--seeds must be a count (3), a list (0,1,2) or a range (0-2); got {text!r}") from None
    if n < 1:
        raise typer.BadParameter(f"--seeds count must be >= 1, got {n}")
    return list(range(n))


def arena(
    env: str = typer.Option("alfworld-generated", "--env", "-e",
                            help="Environment: alfworld-generated (no data needed), alfworld (real train/valid_seen), "
                                 "alfworld-unseen (real train/valid_unseen) or webshop."),
    estimators: str = typer.Option("grpo,rloo,gigpo,graphgpo,milegpo,scpo,mcgpo", "--estimators",
                                   help="Comma-separated estimators ('all' for the seven)."),
    variants: str = typer.Option("", "--variants",
                                 help="Comma-separated ablations as estimator:variant, e.g. "
                                      "mcgpo:same_fold,mcgpo:no_pair_loss ('all' for every one; --list shows them)."),
    seeds: str = typer.Option(None, "--seeds",
                              help="Seeds: a count (3 → 0,1,2), a list (0,1,2) or a range (0-2); default: the "
                                   "setting's (enough seeds for its documented minimum detectable difference)."),
    updates: int = typer.Option(None, "--updates", help="Training updates per run (default: the setting's)."),
    tasks: int = typer.Option(None, "--tasks", "-P", help="Task groups per update (P)."),
    group_size: int = typer.Option(None, "--group-size", "-G", help="Siblings per task (G)."),
    train_tasks: int = typer.Option(None, "--train-tasks", help="Size of the fixed training task pool."),
    val_tasks: int = typer.Option(None, "--val-tasks", help="Number of fixed validation tasks."),
    eval_every: int = typer.Option(None, "--eval-every", help="Validate every N updates."),
    epochs: int = typer.Option(None, "--epochs", help="Passes over each update's decisions."),
    lr: float = typer.Option(None, "--lr", help="SGD step size of the RL updates (advantages in RMS units)."),
    target_kl: float = typer.Option(None, "--target-kl", help="Trust region: KL(old -> new) per update, nats."),
    adv_norm: str = typer.Option(None, "--adv-norm", help="running_rms (default) or none."),
    adv_scale: float = typer.Option(None, "--adv-scale",
                                    help="Multiply every advantage by this (the rescaling control)."),
    no_rl: bool = typer.Option(False, "--no-rl",
                               help="Skip every policy update (the control run of a learning claim)."),
    max_steps: int = typer.Option(None, "--max-steps", help="Episode horizon (default: the setting's)."),
    warm_start: int = typer.Option(None, "--warm-start",
                                   help="Behaviour-clone the initial policy on this many training walkthroughs (ALFWorld)."),
    pair_coef: float = typer.Option(None, "--pair-coef", help="λ_pair of MCGPO's pairwise loss (SPEC: 0.05)."),
    scorer: str = typer.Option("lexical", "--scorer",
                               help="SCPO scorer: lexical (fast, default here), auto (bi-encoder if installed), "
                                    "bi-encoder[:path], cross-encoder:path."),
    baseline: str = typer.Option(None, "--baseline", help="Method for paired differences (default: the first)."),
    workers: int = typer.Option(None, "--workers", "-j",
                                help="Parallel processes (results do not depend on it); default: the CPU count, at most 2."),
    output_dir: Path = typer.Option(Path("arena_runs"), "--output-dir", "-o", help="Output folder."),
    report_only: bool = typer.Option(False, "--report-only",
                                     help="Only redraw the report from OUTPUT_DIR's finished runs (works while a comparison runs)."),
    list_methods: bool = typer.Option(False, "--list", help="List estimators, variants and environments, then exit."),
) -> None:
    """Train a small linear policy with each estimator's advantages and compare learning curves.

    Writes per-run JSONL metrics under OUTPUT_DIR/runs, then results.md (table with paired Student-t intervals), results.json, curves.png and diagnostics.png.
    """
    from rich.console import Console

    console = Console()
    # loaded first in every mode (the arena, its estimators and variants)
    from trainers.arena.runner import DEFAULT_SEEDS

    if list_methods:
        _print_methods(console)
        return
    if report_only:
        _redraw_report(console, output_dir, baseline)
        return
    methods = _methods(estimators, variants)
    seed_list = _seeds(seeds) if seeds is not None else list(range(DEFAULT_SEEDS.get(env, 3)))
    if workers is None:
        import os

        workers = max(1, min(2, os.cpu_count() or 1))
    overrides = {
        "updates": updates, "tasks_per_update": tasks, "group_size": group_size, "train_tasks": train_tasks,
        "val_tasks": val_tasks, "eval_every": eval_every, "epochs": epochs, "lr": lr, "max_steps": max_steps,
        "pair_coef": pair_coef, "warm_start": warm_start, "target_kl": target_kl, "adv_norm": adv_norm,
        "adv_scale": adv_scale, "rl": False if no_rl else None,
    }
    cfg = _config(console, env, overrides, scorer)
    _run(console, cfg, methods, seed_list, output_dir, workers, baseline)


def _print_methods(console: Console) -> None:
    """``--list``: the environments, estimators and variants."""
    from trainers.arena.runner import ENV_PRESETS
    from trainers.arena.variants import ESTIMATORS, VARIANTS

    console.print("environments: " + ", ".join(ENV_PRESETS))
    console.print("estimators: " + ", ".join(ESTIMATORS))
    for est, table in VARIANTS.items():
        for name, (_, _, desc) in table.items():
            console.print(f"  {est}:{name} — {desc}")


def _redraw_report(console: Console, output_dir: Path, baseline: str | None) -> None:
    """``--report-only``: the report of the finished runs in ``output_dir``."""
    from trainers.arena.report import MetricFileError, write_report

    try:
        write_report(output_dir, baseline=baseline, partial=True, title=f"Arena: {output_dir.name} (finished runs)")
    except (MetricFileError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    console.print((output_dir / "results.md").read_text(encoding="utf-8"), markup=False)


def _methods(estimators: str, variants: str) -> list[str]:
    """The methods to compare: estimators ('all': the seven), then variants ('all': every one)."""
    from trainers.arena.variants import ESTIMATORS, available_methods

    methods = list(ESTIMATORS) if estimators.strip() == "all" else _split(estimators)
    if variants.strip() == "all":
        methods += [m for m in available_methods() if ":" in m]
    else:
        methods += _split(variants)
    return methods


def _config(console: Console, env: str, overrides: dict[str, Any], scorer: str) -> ArenaConfig:
    """The setting's :class:`ArenaConfig` with the options given (exit 2 on a bad value)."""
    from trainers.arena.runner import ArenaConfig

    try:
        data = ArenaConfig.for_env(env).to_dict()
        data.update({k: v for k, v in overrides.items() if v is not None})
        data["scpo_scorer"] = scorer
        return ArenaConfig.from_dict(data)
    except ValueError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None


def _run(console: Console, cfg: ArenaConfig, methods: list[str], seed_list: list[int], output_dir: Path,
         workers: int, baseline: str | None) -> None:
    """Run the comparison with a progress line per finished run, then print the table."""
    from trainers.arena.runner import run_arena

    command = "rubricgym " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else None
    done = [0]
    total = len(methods) * len(seed_list)

    def progress(method: str, seed: int, end: dict) -> None:
        done[0] += 1
        ro = end.get("readouts", {})
        console.print(
            f"[{done[0]}/{total}] {method} seed {seed}: L5 {100 * ro.get('L5', float('nan')):.1f}% "
            f"AUC {100 * ro.get('AUC', float('nan')):.1f}% ({end.get('seconds', 0):.0f} s)"
        )

    try:
        summary = run_arena(cfg, methods, seed_list, output_dir, workers=workers, baseline=baseline,
                            progress=progress, command=command)
    except ValueError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    console.print((output_dir / "results.md").read_text(encoding="utf-8"), markup=False)
    console.print(f"wall time {summary['wall_seconds'] / 60:.1f} min; curves: {output_dir / 'curves.png'}")


def register(app: typer.Typer, data_app: typer.Typer) -> None:
    """Add ``rubricgym arena`` to the command line."""
    del data_app
    app.command("arena")(arena)

"""``rubricgym eval PANEL --model SPEC -o DIR``: evaluate an agent on a fixed, versioned panel.

Panels: :mod:`agent_envs.panels` (``rubricgym eval --list``).  Model specs:
:mod:`trainers.evaluate.agents` (``random``, ``walkthrough``, ``openai:MODEL``, ``hf:NAME``).
The loop, the trace folder and resuming: :mod:`trainers.evaluate.runner`.

Example::

    rubricgym eval alfworld-generated-v1 --model random -o runs/eval-random
    rubricgym eval webshop-human-v1 --model openai:Qwen2.5-7B-Instruct \\
        --base-url http://127.0.0.1:8000/v1 --concurrency 16 -o runs/eval-qwen
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

__all__ = ["eval_command", "register"]


def _print_panels(console) -> None:
    from rich.table import Table

    from agent_envs.panels import PANELS

    table = Table("panel", "environment", "tasks")
    for spec in PANELS.values():
        table.add_row(spec.name, spec.env_id, spec.description)
    console.print(table)


def _print_summary(console, summary: dict, agent_name: str) -> None:
    from rich.table import Table

    def pct(x):
        return f"{100 * x:.1f}"

    lo, hi = summary.get("success_ci", [float("nan")] * 2)
    table = Table(title=f"{agent_name} on {summary['panel']} (hash {summary['hash'][:12]})", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("95% interval", justify="right")
    table.add_row("episodes", str(summary["episodes"]), "")
    table.add_row("success %", pct(summary["success"]), f"[{pct(lo)}, {pct(hi)}]")
    slo, shi = summary["score_ci"]
    table.add_row("score", f"{summary['score']:.3f}", "" if slo is None else f"[{slo:.3f}, {shi:.3f}]")
    table.add_row("steps", f"{summary['mean_steps']:.1f}", "" if summary["steps_ci"][0] is None else
                  f"[{summary['steps_ci'][0]:.1f}, {summary['steps_ci'][1]:.1f}]")
    table.add_row("invalid actions %", pct(summary["invalid_rate"]), "")
    for key in sorted(k for k in summary if k.startswith(("success/", "rubric/"))):
        table.add_row(key, f"{summary[key]:.3f}", "")
    if summary["errors"]:
        table.add_row("[red]agent errors[/red]", str(summary["errors"]), "played again on resume")
    console.print(table)


def eval_command(
    panel: str = typer.Argument(None, help="Panel name (rubricgym eval --list)."),
    model: str = typer.Option(None, "--model", "-m", help="random, walkthrough, openai:MODEL or hf:NAME."),
    out: Path = typer.Option(None, "--out", "-o", help="Run folder (traces, run.json, results.json); resumed if it exists."),
    list_panels: bool = typer.Option(False, "--list", help="List the panels and exit."),
    base_url: str = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1."),
    api_key_env: str = typer.Option("OPENAI_API_KEY", "--api-key-env", help="Environment variable with the API key."),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0, help="Sampling temperature (0: greedy)."),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, help="Tokens per reply at most."),
    retries: int = typer.Option(4, "--retries", min=0, help="Retries of a failed request (exponential backoff)."),
    timeout: float = typer.Option(60.0, "--timeout", min=1.0, help="Seconds per request."),
    action_format: str = typer.Option("text", "--action-format", help="text (<action> blocks) or tools (function calls)."),
    tool_choice: str = typer.Option("auto", "--tool-choice", help="With tools: auto, required, or first (force a call of the first tool; llama.cpp)."),
    dtype: str = typer.Option(None, "--dtype", help="hf:NAME only: the weights' precision, float32 (default) or bfloat16."),
    batch_size: int = typer.Option(None, "--batch-size", min=1, help="hf:NAME only: requests of concurrent episodes generated together (default 1; give --concurrency at least as large)."),
    workers: int = typer.Option(1, "--workers", min=0, help="Environment worker processes (0: in this process)."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Episodes in flight at once."),
    limit: int = typer.Option(None, "--limit", min=1, help="Only the first N tasks of the panel."),
    max_steps: int = typer.Option(None, "--max-steps", min=1, help="Decisions per episode at most (default: the environment's horizon)."),
    data_root: str = typer.Option(None, "--data-root", help="ALFWorld data root (default: $ALFWORLD_DATA)."),
    allow_hash_change: bool = typer.Option(False, "--allow-hash-change", help="Resume a folder played on another panel hash."),
) -> None:
    """Evaluate an agent on a fixed panel: traces per episode, a summary table with intervals."""
    from rich.console import Console

    from agent_envs.panels import PanelError, resolve_panel
    from trainers.evaluate.agents import make_agent
    from trainers.evaluate.runner import EvalSettings, summarize

    console, err = Console(), Console(stderr=True)
    if list_panels:
        _print_panels(console)
        return
    if not panel or not model or out is None:
        err.print("[red]error:[/red] give a PANEL, --model and -o DIR (or --list)", soft_wrap=True)
        raise typer.Exit(2)
    if action_format not in ("text", "tools"):
        err.print(f"[red]error:[/red] --action-format must be text or tools, got {action_format!r}", soft_wrap=True)
        raise typer.Exit(2)
    if (dtype is not None or batch_size is not None) and not model.startswith("hf:"):
        err.print(f"[red]error:[/red] --dtype and --batch-size apply to hf:NAME models, not {model}", soft_wrap=True)
        raise typer.Exit(2)
    if dtype not in (None, "float32", "bfloat16"):
        err.print(f"[red]error:[/red] --dtype must be float32 or bfloat16, got {dtype!r}", soft_wrap=True)
        raise typer.Exit(2)
    try:
        resolved = resolve_panel(panel, data_root=data_root)
        agent = make_agent(model, env_id=resolved.spec.env_id, env_kwargs=resolved.spec.env_kwargs,
                           reset_options=resolved.spec.reset_options, base_url=base_url, api_key_env=api_key_env,
                           temperature=temperature, max_tokens=max_tokens, retries=retries, timeout=timeout,
                           action_format=action_format, tool_choice=tool_choice, dtype=dtype, batch_size=batch_size)
    except (PanelError, ValueError, ImportError, OSError) as exc:
        err.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(1) from None
    if action_format == "tools" and not agent.uses_tools:
        err.print(f"[red]error:[/red] --action-format tools needs an openai:MODEL endpoint, not {model}", soft_wrap=True)
        raise typer.Exit(2)
    settings = EvalSettings(workers=workers, concurrency=concurrency, limit=limit, max_steps=max_steps,
                            action_format=action_format)
    n = len(resolved.tasks) if limit is None else min(limit, len(resolved.tasks))
    err.print(f"panel {resolved.name} (hash {resolved.short_hash}, {n} tasks), agent {agent.describe()['name']}",
              soft_wrap=True)
    results = _run(err, resolved, agent, out, settings, n, allow_hash_change)
    _print_summary(console, summarize(results, resolved), agent.describe()["name"])


def _run(err, panel, agent, out, settings, n, allow_hash_change):
    """Play the panel under a progress bar; a run-folder conflict is a one-line error."""
    from rich.progress import Progress

    from trainers.evaluate.runner import RunFolderError, evaluate

    async def main():
        with Progress(console=err, transient=True) as progress:
            bar = progress.add_task("episodes", total=n)

            def tick(result, resumed):
                progress.advance(bar)

            try:
                return await evaluate(panel, agent, out, settings, allow_hash_change=allow_hash_change, on_episode=tick)
            finally:
                await agent.aclose()

    try:
        return asyncio.run(main())
    except RunFolderError as exc:
        err.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(1) from None


def register(app: typer.Typer, data_app: typer.Typer) -> None:
    """Add ``rubricgym eval``."""
    app.command("eval")(eval_command)

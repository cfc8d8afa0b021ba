"""``rubricgym eval PANEL --model SPEC -o DIR``: evaluate an agent on a fixed, versioned panel.

Panels: :mod:`agent_envs.panels` (``rubricgym eval --list``).  Model specs:
:mod:`trainers.evaluate.agents` (``random``, ``walkthrough``, ``openai:MODEL``, ``hf:NAME``).
The loop, the trace folder and resuming: :mod:`trainers.evaluate.runner`.

``rubricgym eval compare DIR...`` pairs runs of one panel hash task by task
(:mod:`trainers.evaluate.compare`).

Example::

    rubricgym eval alfworld-generated-v1 --model random -o runs/eval-random
    rubricgym eval webshop-human-v1 --model openai:Qwen2.5-7B-Instruct \\
        --base-url http://127.0.0.1:8000/v1 --concurrency 16 --price-in 0.2 --price-out 0.6 -o runs/eval-qwen
    rubricgym eval compare runs/eval-random runs/eval-qwen
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer
from typer.core import TyperCommand

__all__ = ["compare_command", "eval_command", "register"]

HELP = {"help_option_names": ["-h", "--help"]}


def _print_panels(console) -> None:
    from rich.table import Table

    from agent_envs.panels import PANELS

    table = Table("panel", "environment", "tasks")
    for spec in PANELS.values():
        table.add_row(spec.name, spec.env_id, spec.description)
    console.print(table)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _interval(ci, fmt: str) -> str:
    return "" if ci is None or ci[0] is None else f"[{ci[0]:{fmt}}, {ci[1]:{fmt}}]"


def _print_summary(console, summary: dict, agent_name: str) -> None:
    from rich.table import Table

    table = Table(title=f"{agent_name} on {summary['panel']} (hash {summary['hash'][:12]})", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("95% interval / note", justify="right")
    table.add_row("episodes", str(summary["episodes"]), "")
    if summary["episodes"]:
        lo, hi = summary["success_ci"]
        table.add_row("success %", _pct(summary["success"]), f"[{_pct(lo)}, {_pct(hi)}]")
        table.add_row("score", f"{summary['score']:.3f}", _interval(summary["score_ci"], ".3f"))
        table.add_row("steps", f"{summary['mean_steps']:.1f}", _interval(summary["steps_ci"], ".1f"))
        table.add_row("invalid actions %", _pct(summary["invalid_rate"]), "")
    for key in sorted(k for k in summary if k.startswith("rubric/")):
        table.add_row(f"{key} ({summary['units'][key]})", f"{summary[key]:.3f}", "")
    for key, label, fmt in _COST_ROWS:
        if summary.get(key) is not None:
            table.add_row(label, format(summary[key], fmt), _row_note(summary, key))
    if summary["errors"]:
        table.add_row("[red]agent errors[/red]", str(summary["errors"]), "played again on resume")
    console.print(table)
    _print_types(console, summary)


_COST_ROWS = (("prompt_tokens", "prompt tokens (total)", ","), ("completion_tokens", "completion tokens (total)", ","),
              ("tokens_per_episode", "tokens per episode", ",.0f"), ("cost_usd", "cost USD (total)", ".4f"),
              ("cost_per_episode_usd", "cost USD per episode", ".6f"),
              ("latency_mean_s", "seconds per decision (mean)", ".3f"),
              ("latency_p50_s", "seconds per decision (median)", ".3f"),
              ("latency_p95_s", "seconds per decision (95th pct)", ".3f"),
              ("episode_wall_mean_s", "seconds per episode (mean)", ".2f"),
              ("wall_s", "seconds of this invocation (wall)", ".1f"))


def _row_note(summary: dict, key: str) -> str:
    if key in ("prompt_tokens", "tokens_per_episode") and summary["token_episodes"] < summary["episodes"]:
        return f"{summary['token_episodes']} of {summary['episodes']} episodes counted"
    if key == "wall_s":
        return f"{summary['played']} episodes played now"
    return ""


def _print_types(console, summary: dict) -> None:
    from rich.table import Table

    types = sorted(k.split("/", 1)[1] for k in summary if k.startswith("episodes/"))
    if not types:
        return
    table = Table("task type", "episodes", "success %", "score", "steps", title="per task type", title_justify="left")
    for t in types:
        table.add_row(t, str(summary[f"episodes/{t}"]), _pct(summary[f"success/{t}"]), f"{summary[f'score/{t}']:.3f}",
                      f"{summary[f'steps/{t}']:.1f}")
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
    action_format: str = typer.Option("text", "--action-format", help="text (<action> blocks) or tools (function calls; openai:MODEL and hf:NAME)."),
    tool_choice: str = typer.Option("auto", "--tool-choice", help="With tools: auto, required, or first (force a call of the first tool; llama.cpp)."),
    dtype: str = typer.Option(None, "--dtype", help="hf:NAME only: the weights' precision, float32 (default) or bfloat16."),
    batch_size: int = typer.Option(None, "--batch-size", min=1, help="hf:NAME only: requests of concurrent episodes generated together (default 1; give --concurrency at least as large)."),
    workers: int = typer.Option(1, "--workers", min=0, help="Environment worker processes (0: in this process)."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Episodes in flight at once."),
    limit: int = typer.Option(None, "--limit", min=1, help="Only the first N tasks of the panel."),
    max_steps: int = typer.Option(None, "--max-steps", min=1, help="Decisions per episode at most (default: the environment's horizon)."),
    data_root: str = typer.Option(None, "--data-root", help="ALFWorld data root (default: $ALFWORLD_DATA)."),
    allow_hash_change: bool = typer.Option(False, "--allow-hash-change", help="Resume a folder played on another panel hash."),
    price_in: float = typer.Option(None, "--price-in", min=0.0, help="USD per million prompt tokens: adds the cost (give --price-out too)."),
    price_out: float = typer.Option(None, "--price-out", min=0.0, help="USD per million completion tokens (with --price-in)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary (results.json) as JSON instead of the tables."),
    trace_chars: int = typer.Option(32_768, "--trace-chars", min=100, help="Characters of a reply, action or prompt message a trace stores at most (longer ones are cut with a marker giving their length)."),
) -> None:
    """Evaluate an agent on a fixed panel: traces per episode, a summary table with intervals.

    Writes results.json (the summary), tasks.jsonl and tasks.csv (one row per task) too.

    rubricgym eval compare DIR... pairs runs of one panel hash task by task.
    """
    from rich.console import Console

    from agent_envs.panels import PanelError, resolve_panel
    from trainers.evaluate.agents import make_agent
    from trainers.evaluate.runner import EvalSettings

    console, err = Console(), Console(stderr=True)
    if list_panels:
        _print_panels(console)
        return
    problem = _option_problem(panel, model, out, action_format, dtype, batch_size, price_in, price_out)
    if problem:
        err.print(f"[red]error:[/red] {problem}", soft_wrap=True)
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
        err.print(f"[red]error:[/red] --action-format tools needs an openai:MODEL or hf:NAME model, not {model}",
                  soft_wrap=True)
        raise typer.Exit(2)
    settings = EvalSettings(workers=workers, concurrency=concurrency, limit=limit, max_steps=max_steps,
                            action_format=action_format, trace_chars=trace_chars)
    n = len(resolved.tasks) if limit is None else min(limit, len(resolved.tasks))
    err.print(f"panel {resolved.name} (hash {resolved.short_hash}, {n} tasks), agent {agent.describe()['name']}",
              soft_wrap=True)
    prices = None if price_in is None else (price_in, price_out)
    _run(err, resolved, agent, out, settings, n, allow_hash_change, prices)
    summary = json.loads((out / "results.json").read_text(encoding="utf-8"))
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        _print_summary(console, summary, agent.describe()["name"])


def _option_problem(panel, model, out, action_format, dtype, batch_size, price_in, price_out) -> str | None:
    """What is wrong with the options, if anything."""
    if not panel or not model or out is None:
        return "give a PANEL, --model and -o DIR (or --list)"
    if action_format not in ("text", "tools"):
        return f"--action-format must be text or tools, got {action_format!r}"
    if (dtype is not None or batch_size is not None) and not model.startswith("hf:"):
        return f"--dtype and --batch-size apply to hf:NAME models, not {model}"
    if dtype not in (None, "float32", "bfloat16"):
        return f"--dtype must be float32 or bfloat16, got {dtype!r}"
    if (price_in is None) != (price_out is None):
        return "give both --price-in and --price-out (USD per million prompt and completion tokens)"
    return None


def _run(err, panel, agent, out, settings, n, allow_hash_change, prices):
    """Play the panel under a progress bar; a run-folder conflict is a one-line error."""
    from rich.progress import Progress

    from trainers.evaluate.runner import RunFolderError, evaluate

    async def main():
        with Progress(console=err, transient=True) as progress:
            bar = progress.add_task("episodes", total=n)

            def tick(result, resumed):
                progress.advance(bar)

            try:
                return await evaluate(panel, agent, out, settings, allow_hash_change=allow_hash_change,
                                      on_episode=tick, prices=prices)
            finally:
                await agent.aclose()

    try:
        return asyncio.run(main())
    except RunFolderError as exc:
        err.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(1) from None


def compare_command(
    dirs: list[Path] = typer.Argument(..., help="Eval run folders of one panel hash; the first is the baseline."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON instead of the tables."),
) -> None:
    """Pair eval runs of one panel hash task by task: each run against the first, with paired
    95% Student-t intervals of the differences in success, score and steps and the minimum
    detectable difference (80% power)."""
    from rich.console import Console

    from trainers.evaluate.compare import compare_runs
    from trainers.evaluate.folder import RunFolderError

    try:
        result = compare_runs(dirs)
    except (RunFolderError, ValueError) as exc:
        Console(stderr=True).print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(1) from None
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        _print_comparison(Console(), result)


def _print_comparison(console, result: dict) -> None:
    from rich.table import Table

    runs = Table("#", "run folder", "agent", "finished", "success %", "score", "steps", "tokens/episode",
                 title=f"{result['panel']} (hash {result['hash'][:12]}); #1 is the baseline", title_justify="left")
    runs.columns[1].overflow = "fold"
    for i, row in enumerate(result["runs"], 1):
        def fmt(key, spec, row=row):
            return "" if row.get(key) is None else format(row[key], spec)

        runs.add_row(str(i), row["dir"], row["agent"], f"{row['finished']}/{row['tasks']}",
                     "" if row["success"] is None else _pct(row["success"]), fmt("score", ".3f"), fmt("steps", ".1f"),
                     fmt("tokens_per_episode", ",.0f"))
    console.print(runs)
    for i, comp in enumerate(result["comparisons"], 2):
        console.print(f"\n#{i} - #1: {comp['pairs']} tasks paired ({comp['unpaired']} unpaired); solved only by "
                      f"#{i}: {comp['only_run_solved']}, only by #1: {comp['only_baseline_solved']}", soft_wrap=True)
        table = Table("metric", "#1", f"#{i}", "difference", "95% interval", "MDE")
        for m in comp["metrics"]:
            spec = ".1f" if m["metric"] == "steps" else ".3f"
            table.add_row(m["metric"], format(m["baseline"], spec), format(m["run"], spec), format(m["diff"], "+" + spec),
                          _interval(m["ci"], spec), "" if m["mde"] is None else format(m["mde"], spec))
        console.print(table)
    for warning in result["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {warning}", soft_wrap=True)
    console.print("difference: run - baseline over the paired tasks; 95% Student-t interval; MDE: the smallest "
                  "difference a paired t-test detects with 80% power at this spread", soft_wrap=True)


_compare_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
_compare_app.command("compare", context_settings=HELP)(compare_command)


class _EvalCommand(TyperCommand):
    """``rubricgym eval``; ``rubricgym eval compare DIR...`` when its first argument is ``compare``."""

    def parse_args(self, ctx, args):
        if args and args[0] == "compare":
            ctx.meta["rubricgym.eval.compare"] = list(args[1:])
            return []
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        rest = ctx.meta.pop("rubricgym.eval.compare", None)
        if rest is None:
            return super().invoke(ctx)
        command = typer.main.get_command(_compare_app)
        with command.make_context(f"{ctx.info_name} compare", rest, parent=ctx.parent) as sub:
            return command.invoke(sub)


def register(app: typer.Typer, data_app: typer.Typer) -> None:
    """Add ``rubricgym eval`` (and ``rubricgym eval compare``)."""
    app.command("eval", cls=_EvalCommand, context_settings=HELP)(eval_command)

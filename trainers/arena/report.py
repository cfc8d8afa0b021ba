"""Arena metrics, paired Student-t intervals, curves (PNG) and the Markdown table.

Every arena run writes one JSON Lines metric file (``runs/<method>__seed<k>/metrics.jsonl``)
with three kinds of record:

* ``{"kind": "eval", "update": u, "success": ..., "score": ..., "invalid_rate": ...,
  "mean_steps": ..., "per_type": {...}}`` — one validation pass (SPEC §6);
* ``{"kind": "train", "update": u, "success": ..., "credit": {...}, "loss": {...}}`` — one
  training update, with the estimator's ``CreditResult.stats`` aggregated over the groups;
* ``{"kind": "end", ...}`` — written last, marks the run complete.

This module reads only those files, so the table always agrees with them:

* **L5** = mean validation success over the last five scheduled evaluations [MCGPO Eq. 14]
  (over all of them when a run has fewer than five); the evaluation before the first update
  is not scheduled and never counts (:mod:`trainers.stats`);
* **normalised AUC** = the trapezoidal area under the success curve (update 0, the
  untrained policy, included) divided by the span of updates — the mean success over
  training on a 0–1 scale;
* **invalid rate** = share of validation steps whose action was not admissible;
* across seeds: mean, sample SD, and for each method the paired difference to the
  baseline with a 95% Student-t interval, df = n − 1 (SPEC §6), pairing by seed.

Example:
    >>> import numpy as np
    >>> round(normalized_auc([0, 5, 10], [0.0, 0.5, 1.0]), 3)
    0.5
    >>> m, sd, lo, hi = paired_interval([0.1, 0.2, 0.3])
    >>> round(m, 3), round(sd, 3), round(lo, 3), round(hi, 3)   # t(0.975, 2) = 4.3027
    (0.2, 0.1, -0.048, 0.448)
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainers.stats import l5, mde, normalized_auc, paired_interval

__all__ = [
    "RUN_DIR_PATTERN",
    "MetricFileError",
    "RunMetrics",
    "load_run",
    "load_runs",
    "plot_curves",
    "plot_diagnostics",
    "summarize",
    "write_markdown",
    "write_report",
]

log = logging.getLogger(__name__)

#: Run folders are named ``<method>__seed<k>``.
RUN_DIR_PATTERN = re.compile(r"^(?P<method>.+)__seed(?P<seed>-?\d+)$")


class MetricFileError(ValueError):
    """A metric file is missing, corrupt or incomplete; the message names the file and line."""


@dataclass
class RunMetrics:
    """The metric records of one (method, seed) run.

    Attributes:
        method: Method label (estimator name, or ``estimator:variant``).
        seed: Training seed.
        evals: The ``eval`` records, in update order.
        train: The ``train`` records, in update order.
        end: The ``end`` record (``None`` if the run did not finish).
        path: The metric file.
    """

    method: str
    seed: int
    evals: list[dict[str, Any]] = field(default_factory=list)
    train: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    path: Path | None = None

    @property
    def updates(self) -> np.ndarray:
        """Updates at which validation ran."""
        return np.array([e["update"] for e in self.evals], dtype=np.float64)

    @property
    def success(self) -> np.ndarray:
        """Validation success per evaluation."""
        return np.array([e["success"] for e in self.evals], dtype=np.float64)

    def readouts(self) -> dict[str, float]:
        """L5, normalised AUC, final success, score L5, invalid rate and initial success."""
        s = self.success
        score = np.array([e.get("score", e["success"]) for e in self.evals], dtype=np.float64)
        inv = np.array([e.get("invalid_rate", 0.0) for e in self.evals], dtype=np.float64)
        return {
            "L5": l5(self.updates, s),
            "AUC": normalized_auc(self.updates, s),
            "final": float(s[-1]),
            "initial": float(s[0]),
            "score_L5": l5(self.updates, score),
            "invalid_rate": float(inv.mean()),
        }


def load_run(path: str | Path, method: str | None = None, seed: int | None = None) -> RunMetrics:
    """Read one run's ``metrics.jsonl``.

    Args:
        path: The metric file, or the run folder holding ``metrics.jsonl``.
        method, seed: Default to the values parsed from the folder name.

    Raises:
        MetricFileError: missing file, a line that is not JSON, a record without
            ``kind``/``update``, or no evaluation at all.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    if not path.is_file():
        raise MetricFileError(f"{path}: metric file not found")
    match = RUN_DIR_PATTERN.match(path.parent.name)
    if method is None:
        method = match.group("method") if match else path.parent.name
    if seed is None:
        seed = int(match.group("seed")) if match else 0
    run = RunMetrics(method=method, seed=seed, path=path)
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise MetricFileError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
            if not isinstance(rec, dict) or "kind" not in rec:
                raise MetricFileError(f"{path}:{lineno}: a metric record needs a 'kind'")
            kind = rec["kind"]
            if kind in ("eval", "train") and "update" not in rec:
                raise MetricFileError(f"{path}:{lineno}: a {kind} record needs an 'update'")
            if kind == "eval":
                if "success" not in rec:
                    raise MetricFileError(f"{path}:{lineno}: an eval record needs 'success'")
                run.evals.append(rec)
            elif kind == "train":
                run.train.append(rec)
            elif kind == "end":
                run.end = rec
    if not run.evals:
        raise MetricFileError(f"{path}: no evaluation records")
    run.evals.sort(key=lambda r: r["update"])
    run.train.sort(key=lambda r: r["update"])
    return run


def load_runs(out_dir: str | Path, *, require_complete: bool = True) -> list[RunMetrics]:
    """Every run under ``out_dir/runs`` (sorted by method, then seed).

    With ``require_complete=False`` runs that have not finished (no ``metrics.jsonl`` yet)
    are skipped, so a report can be drawn while a comparison is still running.

    Raises:
        MetricFileError: no runs, or (with ``require_complete``) a run without its ``end``
            record (still running, or interrupted).
    """
    root = Path(out_dir) / "runs"
    if not root.is_dir():
        raise MetricFileError(f"{root}: no runs folder (is {out_dir} an arena output folder?)")
    runs = []
    for sub in sorted(root.iterdir()):
        if sub.is_dir() and RUN_DIR_PATTERN.match(sub.name):
            if not require_complete and not (sub / "metrics.jsonl").is_file():
                log.warning("skipping %s: still running or interrupted", sub)
                continue
            run = load_run(sub)
            if require_complete and run.end is None:
                raise MetricFileError(f"{run.path}: the run is incomplete (no 'end' record)")
            runs.append(run)
    if not runs:
        raise MetricFileError(f"{root}: no run folders named <method>__seed<k>")
    return sorted(runs, key=lambda r: (r.method, r.seed))


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    v = np.asarray(values, dtype=np.float64)
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else float("nan")


def _aggregate_stats(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Mean over updates of every numeric credit diagnostic."""
    acc: dict[str, list[float]] = defaultdict(list)
    for rec in records:
        for k, v in (rec.get("credit") or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                acc[k].append(float(v))
    return {k: float(np.mean(v)) for k, v in sorted(acc.items())}


def summarize(
    runs: Sequence[RunMetrics], baseline: str | None = None, readouts: Sequence[str] = ("L5", "AUC")
) -> dict[str, Any]:
    """Per-method readouts across seeds and paired differences to ``baseline``.

    Args:
        runs: Completed runs (several methods x seeds).
        baseline: Method to compare against (default: ``grpo`` if present, else the first).
        readouts: Readouts that get paired differences.

    Returns:
        ``{"baseline", "methods": {method: {"seeds", readout: {"mean", "sd", "per_seed"},
        "diagnostics"}}, "paired": {method: {readout: {"mean", "sd", "lo", "hi", "n"}}}}``.
        Pairing uses the seeds both methods have.

    Raises:
        ValueError: an unknown baseline.
    """
    by_method: dict[str, dict[int, RunMetrics]] = defaultdict(dict)
    for run in runs:
        by_method[run.method][run.seed] = run
    methods = sorted(by_method)
    if baseline is None:
        baseline = "grpo" if "grpo" in by_method else methods[0]
    if baseline not in by_method:
        raise ValueError(f"baseline {baseline!r} has no runs; methods: {', '.join(methods)}")
    out: dict[str, Any] = {"baseline": baseline, "methods": {}, "paired": {}}
    per_method_readouts: dict[str, dict[int, dict[str, float]]] = {}
    for method in methods:
        seeds = sorted(by_method[method])
        ro = {s: by_method[method][s].readouts() for s in seeds}
        per_method_readouts[method] = ro
        entry: dict[str, Any] = {"seeds": seeds}
        for key in ("L5", "AUC", "final", "initial", "score_L5", "invalid_rate"):
            vals = [ro[s][key] for s in seeds]
            mean, sd = _mean_sd(vals)
            entry[key] = {"mean": mean, "sd": sd, "per_seed": vals}
        entry["diagnostics"] = _aggregate_stats(
            [rec for s in seeds for rec in by_method[method][s].train]
        )
        entry["seconds"] = float(np.mean([(by_method[method][s].end or {}).get("seconds", float("nan")) for s in seeds]))
        entry["cpu_seconds"] = float(np.mean([(by_method[method][s].end or {}).get("cpu_seconds", float("nan")) for s in seeds]))
        out["methods"][method] = entry
    base = per_method_readouts[baseline]
    for method in methods:
        if method == baseline:
            continue
        shared = sorted(set(base) & set(per_method_readouts[method]))
        if not shared:
            continue
        out["paired"][method] = {}
        for key in readouts:
            diffs = [per_method_readouts[method][s][key] - base[s][key] for s in shared]
            mean, sd, lo, hi = paired_interval(diffs)
            out["paired"][method][key] = {"mean": mean, "sd": sd, "lo": lo, "hi": hi, "n": len(shared),
                                          "mde": mde(sd, len(shared))}
    return out


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:.1f}"


def _pm(entry: Mapping[str, Any]) -> str:
    sd = entry["sd"]
    return f"{_pct(entry['mean'])} ± {_pct(sd)}" if math.isfinite(sd) else _pct(entry["mean"])


def _signed(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:+.1f}"


def write_markdown(summary: Mapping[str, Any], path: str | Path, *, title: str = "Arena results",
                   preamble: str = "") -> str:
    """Write the results table (percent, mean ± sample SD over seeds) and return its text.

    The first table has one row per method: L5, normalised AUC, final and initial
    success, WebShop-style score L5, validation invalid rate, seeds, wall and CPU seconds per
    run (wall time depends on what else the machine runs; CPU time much less).  The
    second gives paired differences to the baseline with 95% Student-t intervals.
    """
    base = summary["baseline"]
    lines = [f"# {title}", ""]
    if preamble:
        lines += [preamble, ""]
    lines += [
        "| method | L5 success (%) | norm. AUC (%) | final (%) | initial (%) | score L5 (%) | invalid (%) | seeds | s/run | CPU s/run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method, e in summary["methods"].items():
        secs = e.get("seconds", float("nan"))
        cpu = e.get("cpu_seconds", float("nan"))
        lines.append(
            f"| {method} | {_pm(e['L5'])} | {_pm(e['AUC'])} | {_pm(e['final'])} | {_pm(e['initial'])} "
            f"| {_pm(e['score_L5'])} | {_pct(e['invalid_rate']['mean'])} | {len(e['seeds'])} "
            f"| {'n/a' if not math.isfinite(secs) else f'{secs:.0f}'} "
            f"| {'n/a' if not math.isfinite(cpu) else f'{cpu:.0f}'} |"
        )
    if summary["paired"]:
        lines += [
            "",
            (f"Paired differences to **{base}** (percentage points, mean and 95% Student-t interval over seeds, "
             "df = n − 1; MDE = the smallest true difference a paired two-sided t-test at α = 0.05 detects with "
             "80% power at this SD of the differences and n seeds):"),
            "",
            "| method | Δ L5 | 95% CI (L5) | SD (L5) | MDE (L5) | Δ AUC | 95% CI (AUC) | MDE (AUC) | n |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for method, p in summary["paired"].items():
            a, b = p["L5"], p["AUC"]
            lines.append(
                f"| {method} | {_signed(a['mean'])} | [{_signed(a['lo'])}, {_signed(a['hi'])}] | {_pct(a['sd'])} "
                f"| {_pct(a['mde'])} | {_signed(b['mean'])} | [{_signed(b['lo'])}, {_signed(b['hi'])}] "
                f"| {_pct(b['mde'])} | {a['n']} |"
            )
    diag_keys = sorted({k for e in summary["methods"].values() for k in e["diagnostics"]})
    if diag_keys:
        lines += ["", "Estimator diagnostics (mean over updates and seeds):", ""]
        for method, e in summary["methods"].items():
            d = e["diagnostics"]
            if d:
                body = ", ".join(f"{k} = {v:.3g}" for k, v in d.items())
                lines.append(f"* **{method}**: {body}")
    text = "\n".join(lines) + "\n"
    Path(path).write_text(text, encoding="utf-8")
    return text


def plot_curves(runs: Sequence[RunMetrics], path: str | Path, *, title: str = "") -> None:
    """Validation success against update: per-seed lines (thin) and the seed mean (thick)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_method: dict[str, list[RunMetrics]] = defaultdict(list)
    for run in runs:
        by_method[run.method].append(run)
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    cmap = plt.get_cmap("tab10" if len(by_method) <= 10 else "tab20")
    for k, (method, rs) in enumerate(sorted(by_method.items())):
        color = cmap(k % cmap.N)
        for r in rs:
            ax.plot(r.updates, 100 * r.success, color=color, alpha=0.25, linewidth=0.8)
        lengths = {len(r.evals) for r in rs}
        if len(lengths) == 1:
            mean = np.mean([r.success for r in rs], axis=0)
            ax.plot(rs[0].updates, 100 * mean, color=color, linewidth=2.0, label=method)
    ax.set_xlabel("update")
    ax.set_ylabel("validation success (%)")
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_diagnostics(runs: Sequence[RunMetrics], path: str | Path, *, max_panels: int = 12) -> list[str]:
    """Estimator diagnostics over training (seed mean per method), one panel per statistic.

    Returns the plotted statistic names (the first ``max_panels``, alphabetically).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for run in runs:
        for rec in run.train:
            for k, v in (rec.get("credit") or {}).items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    series[k][run.method][int(rec["update"])].append(float(v))
    names = sorted(series)[:max_panels]
    if not names:
        names_to_plot: list[str] = []
    else:
        names_to_plot = names
    cols = 3
    rows = max(1, math.ceil(len(names_to_plot) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), dpi=100, squeeze=False)
    methods = sorted({r.method for r in runs})
    cmap = plt.get_cmap("tab10" if len(methods) <= 10 else "tab20")
    colors = {m: cmap(k % cmap.N) for k, m in enumerate(methods)}
    for ax, name in zip(axes.flat, names_to_plot):
        for method, per_update in sorted(series[name].items()):
            xs = sorted(per_update)
            ax.plot(xs, [np.mean(per_update[x]) for x in xs], color=colors[method], label=method, linewidth=1.2)
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names_to_plot):]:
        ax.axis("off")
    if names_to_plot:
        axes.flat[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return names_to_plot


def write_report(out_dir: str | Path, *, baseline: str | None = None, title: str = "Arena results",
                 preamble: str = "", partial: bool = False) -> dict[str, Any]:
    """Read every run under ``out_dir`` and write ``results.md``, ``results.json``,
    ``curves.png`` and ``diagnostics.png`` beside them; returns the summary.

    ``partial=True`` reports the finished runs of a comparison that is still running."""
    out_dir = Path(out_dir)
    runs = load_runs(out_dir, require_complete=not partial)
    summary = summarize(runs, baseline)
    (out_dir / "results.json").write_text(json.dumps(summary, indent=2, default=float), encoding="utf-8")
    write_markdown(summary, out_dir / "results.md", title=title, preamble=preamble)
    plot_curves(runs, out_dir / "curves.png", title=title)
    plot_diagnostics(runs, out_dir / "diagnostics.png")
    log.info("wrote %s", out_dir / "results.md")
    return summary

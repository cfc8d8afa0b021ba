"""The arena's side of the one report (:mod:`trainers.report`).

Every arena run writes ``runs/<method>__seed<k>/metrics.jsonl`` in the metrics schema of
:mod:`trainers.metrics` (a ``run`` record, ``eval`` and ``train`` records, an ``end`` record
last), so ``rubricgym report`` reads arena runs and trainer runs alike; this module only
finds the runs of one arena output folder, checks that they are complete, and writes the
report beside them (``results.md``, ``results.json``, ``curves.png``, ``diagnostics.png``)
with :func:`trainers.report.write_report`.  The readouts and their statistics are those of
:mod:`trainers.report` and :mod:`trainers.stats`.

Example:
    >>> run = RunMetrics("grpo", 0, evals=[{"update": 0, "success": 0.0}, {"update": 5, "success": 0.5}])
    >>> run.readouts()["L5"], run.readouts()["AUC"]
    (0.5, 0.25)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainers import report
from trainers.arena import config as _config  # noqa: F401  (registers how arena runs' settings read)
from trainers.metrics import MetricFileError
from trainers.report import RUN_DIR_PATTERN, RunInfo

__all__ = ["RUN_DIR_PATTERN", "MetricFileError", "RunMetrics", "load_run", "load_runs", "write_report"]

log = logging.getLogger(__name__)


@dataclass
class RunMetrics:
    """The records of one (method, seed) run while it runs (the runner's end record).

    Attributes:
        method: Method label (estimator name, or ``estimator:variant``).
        seed: Training seed.
        evals: The ``eval`` records, in update order.
        train: The ``train`` records, in update order.
        end: The ``end`` record (``None`` until the run finishes).
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
        """:func:`trainers.report.readouts` of the evaluations."""
        return report.readouts(self.evals)


def load_run(path: str | Path) -> RunInfo:
    """Read one arena run (its folder or ``metrics.jsonl``) with :func:`trainers.report.load_run`.

    Raises:
        MetricFileError: missing file, a line that is not JSON or a record without
            ``update``/``phase`` (names the file and line), or no evaluation at all.
    """
    path = Path(path)
    folder = path.parent if path.name == "metrics.jsonl" else path
    try:
        run = report.load_run(folder)
    except FileNotFoundError:
        raise MetricFileError(f"{folder / 'metrics.jsonl'}: metric file not found") from None
    if not run["eval"]:
        raise MetricFileError(f"{folder / 'metrics.jsonl'}: no evaluation records")
    return run


def load_runs(out_dir: str | Path, *, require_complete: bool = True) -> list[RunInfo]:
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
            if require_complete and run["end"] is None:
                raise MetricFileError(f"{sub / 'metrics.jsonl'}: the run is incomplete (no 'end' record)")
            runs.append(run)
    if not runs:
        raise MetricFileError(f"{root}: no run folders named <method>__seed<k>")
    return sorted(runs, key=lambda r: (r["method"], r["seed"]))


def write_report(out_dir: str | Path, *, baseline: str | None = None, title: str = "Arena results",
                 preamble: str = "", partial: bool = False) -> dict[str, Any]:
    """Read every run under ``out_dir`` and write ``results.md``, ``results.json``,
    ``curves.png`` and ``diagnostics.png`` beside them (:func:`trainers.report.write_report`);
    returns the summary.

    ``partial=True`` reports the finished runs of a comparison that is still running."""
    runs = load_runs(out_dir, require_complete=not partial)
    return report.write_report(runs, out_dir, baseline=baseline, title=title, preamble=preamble)

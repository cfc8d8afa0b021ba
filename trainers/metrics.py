"""Metrics sinks: one JSON object per line in ``metrics.jsonl`` plus TensorBoard scalars.

Records look like ``{"update": 3, "phase": "train", "loss": ..., ...}`` (``phase`` is
``train`` or ``eval``); :func:`read_metrics` reads them back for reports.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["MetricsLogger", "read_metrics"]


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and callable(value.item):
        return _clean(value.item())
    return value


class MetricsLogger:
    """Appends records to ``RUN_DIR/metrics.jsonl`` and mirrors numbers to TensorBoard.

    Args:
        run_dir: The run folder.
        tensorboard: Also write TensorBoard event files under ``RUN_DIR/tensorboard``.
        enabled: ``False`` on non-main processes (nothing is written).
    """

    def __init__(self, run_dir: str | os.PathLike[str], *, tensorboard: bool = True, enabled: bool = True) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self.enabled = enabled
        self._tb = None
        if enabled and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(Path(run_dir) / "tensorboard"))
            except ImportError:  # pragma: no cover - tensorboard not installed
                self._tb = None

    def log(self, update: int, phase: str, values: dict[str, Any]) -> None:
        """Write one record (and its numeric values as ``phase/name`` scalars)."""
        if not self.enabled:
            return
        record = {"update": update, "phase": phase, **{k: _clean(v) for k, v in values.items()}}
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for k, v in record.items():
                if k in ("update", "phase") or isinstance(v, bool) or not isinstance(v, (int, float)):
                    continue
                self._tb.add_scalar(f"{phase}/{k}", v, update)
            self._tb.flush()

    def close(self) -> None:
        """Flush and close TensorBoard."""
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def read_metrics(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All records of a run's ``metrics.jsonl`` (a corrupt line raises naming file and line)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} has no metrics.jsonl (is it a rubricgym run folder?)")
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{lineno}: not JSON: {exc}") from None
    return out

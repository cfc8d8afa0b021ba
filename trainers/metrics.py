"""Metrics sinks: one JSON object per line in ``metrics.jsonl`` plus TensorBoard scalars.

Records look like ``{"update": 3, "phase": "train", "loss": ..., ...}`` (``phase`` is
``train`` or ``eval``); :func:`read_metrics` reads them back for reports.

A process killed during an append (SIGKILL, power loss) can leave a torn last line.  Opening
the file again (``--resume``) cuts that fragment off, with a warning, so that the next record
starts on a line of its own; :func:`read_metrics` skips a torn last line, and recovers the
record from a line on which an older run glued one onto a fragment.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["MetricsLogger", "read_metrics", "repair_torn_tail"]

log = logging.getLogger(__name__)

_RECORD_START = '{"update": '  # every record MetricsLogger writes starts so


def repair_torn_tail(path: str | os.PathLike[str]) -> int:
    """Cut a torn last line (no final newline) off a JSON Lines file; returns bytes removed.

    A last line that is a whole JSON record but lacks only its newline gets the newline
    instead (nothing is removed).  Logs a warning naming the file when it changes anything.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with open(path, "rb+") as fh:
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return 0
        back = min(size, 1 << 20)
        fh.seek(size - back)
        tail = fh.read(back)
        cut = tail.rfind(b"\n") + 1  # 0 when the whole (last MiB of the) file is one line
        fragment = tail[cut:]
        try:
            json.loads(fragment.decode("utf-8"))
        except (ValueError, RecursionError):
            fh.truncate(size - len(fragment))
            log.warning("%s: dropped a torn last line (%d bytes, a record cut short by a killed "
                        "process)", path, len(fragment))
            return len(fragment)
        fh.seek(size)
        fh.write(b"\n")
        log.warning("%s: the last record lacked its newline; added it", path)
        return 0


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
        if enabled:
            repair_torn_tail(self.path)  # a resumed run appends on a line of its own
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
    """All records of a run's ``metrics.jsonl``.

    A torn last line (a record cut short by a killed process) is skipped, and a line holding
    a torn fragment with a whole record glued on (what resuming such a run wrote before
    :func:`repair_torn_tail`) yields that record; each logs a warning.  Any other corrupt
    line raises ``ValueError`` naming the file and the line.
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} has no metrics.jsonl (is it a rubricgym run folder?)")
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    out = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
            continue
        except (ValueError, RecursionError) as exc:
            error = exc
        glued = line.rfind(_RECORD_START)
        if glued > 0:
            try:
                out.append(json.loads(line[glued:]))
                log.warning("%s:%d: skipped a torn record fragment of %d characters before a whole "
                            "record", path, lineno, glued)
                continue
            except (ValueError, RecursionError):
                pass
        if lineno == len(lines) and not text.endswith("\n"):
            log.warning("%s:%d: skipped a torn last line (%d characters)", path, lineno, len(line))
            continue
        raise ValueError(f"{path}:{lineno}: not JSON: {error}") from None
    return out

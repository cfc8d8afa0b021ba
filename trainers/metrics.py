"""The one metrics schema of every run, its writer (``metrics.jsonl`` + TensorBoard) and reader.

The trainer (:class:`MetricsLogger`, :mod:`trainers.trainer`) and the arena
(:mod:`trainers.arena.run`) build and write the same records, so one
reader (:func:`read_metrics`) and one report (``rubricgym report``, :mod:`trainers.report`)
serve both.  ``metrics.jsonl`` holds one JSON object per line; its first two keys are always

* ``update`` (int): policy updates done when it was written (0 = before the first);
* ``phase`` (str): what the record is, one of:

``run`` (first line, update 0): the run's identity.
    ``schema`` (:data:`SCHEMA_VERSION`); ``source`` (``"trainer"`` or ``"arena"``); ``env``
    (the trainer's ``env_id``, e.g. ``WebShop-Rubric-v0``; the arena's ``--env``, e.g.
    ``webshop``); ``estimator``; ``variant`` (the arena's ``estimator:variant`` suffix, e.g.
    ``same_fold+uniform_weights`` or ``x4``; ``""`` for none and for every trainer run);
    ``method`` (``estimator`` or ``estimator:variant``); ``seed``; ``config`` (the writer's
    whole configuration: ``TrainConfig.to_dict()`` / ``ArenaConfig.to_dict()``);
    ``estimator_params`` (the estimator's parameters used).  The arena adds ``objective`` and
    ``warm_start``.  Runs whose ``source``,
    ``env`` and ``config`` agree apart from method and seed share a *setting*
    (:func:`trainers.report.setting_id`), within which the report pairs them by seed.
``eval``: one validation pass after ``update`` updates (the learning curve).
    ``success`` (share of validation episodes solved), ``score`` (mean graded score),
    ``invalid_rate`` (inadmissible steps / steps), ``mean_steps``, ``episodes``,
    ``success/<task type>``; optionally ``rubric/<channel>`` (mean final channel value)
    and ``eval_s`` (seconds).
``train``: one update, ``update`` = its number (1, 2, ...).
    ``train/success``, ``train/score``, ``train/invalid_rate``, ``train/mean_steps``,
    ``train/episodes`` over the update's rollouts (training success); ``credit/<name>``:
    the estimator's diagnostics (``credit/stat_<k>`` = ``CreditResult.stats[k]`` averaged
    over the groups, ``credit/credit_s``); ``opt/<name>``: the update rule's (``opt/loss``,
    ``opt/pg_loss``, ``opt/kl`` (KL(π_old ‖ π_new), the trust region's), ``opt/kl_ref``,
    ``opt/delta_norm``, ``opt/epochs_run``, ``opt/backtracks``,
    ``opt/adv_rms``, ``opt/rows``, ``opt/pairs``, ``opt/optimize_s``, ...);
    ``rollout/<name>`` (``rollout/rollout_s``, ...); ``time/update_s``.  The arena adds
    ``tasks`` (the update's task draws) and ``train/groups_with_success``.
``end`` (last line of a finished run): ``seconds`` (wall), ``cpu_seconds``; the arena adds
    ``readouts`` (L5, AUC, ... as its progress line prints them) and ``time`` (its episode
    memo's counters).

The trainer also writes ``warm_start``, ``eval_warm_start`` and ``eval_train_before`` /
``eval_train_after`` records (not part of the learning curve).  Names that mean the same
thing are spelled the same by both writers; either may add names of its own.  The trainer
writes non-finite numbers as ``null``.

Older files are read too: arena files from before this schema (records keyed by ``kind``,
with nested ``per_type`` / ``credit`` / ``loss`` / ``time``) are converted on reading
(:func:`upgrade_record`), and trainer files
without a ``run`` record take their identity from the folder's ``config.yaml``
(:func:`trainers.report.load_run`).

Example:
    >>> format_record(1, "train", {"train/success": 0.25})
    '{"update": 1, "phase": "train", "train/success": 0.25}\\n'
    >>> upgrade_record({"kind": "eval", "update": 5, "success": 0.5, "per_type": {"pick": 1.0}})
    {'update': 5, 'phase': 'eval', 'success': 0.5, 'success/pick': 1.0}

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

__all__ = [
    "SCHEMA_VERSION",
    "MetricFileError",
    "MetricsLogger",
    "format_record",
    "read_metrics",
    "repair_torn_tail",
    "run_identity",
    "upgrade_record",
]

log = logging.getLogger(__name__)

_RECORD_START = '{"update": '  # every record of the schema starts so

#: Version of the schema above, written in every ``run`` record (arena files keyed by
#: ``kind`` are version 1).
SCHEMA_VERSION = 2


class MetricFileError(ValueError):
    """A metric file is missing, corrupt or incomplete; the message names the file (and line)."""


def format_record(update: int, phase: str, values: dict[str, Any]) -> str:
    """One line of ``metrics.jsonl`` (``update`` and ``phase`` first), newline included."""
    return json.dumps({"update": update, "phase": phase, **values}) + "\n"


#: The arena's names of update-rule diagnostics that the trainer spells otherwise.
_ARENA_OPT_NAMES = {"policy_loss": "pg_loss"}


def run_identity(source: str, env: Any, estimator: str, variant: str, seed: int, config: dict[str, Any],
                 **extra: Any) -> dict[str, Any]:
    """The values of a ``run`` record (write it as update 0, phase ``"run"``)."""
    method = f"{estimator}:{variant}" if variant else estimator
    return {"schema": SCHEMA_VERSION, "source": source, "env": env, "estimator": estimator, "variant": variant,
            "method": method, "seed": seed, "config": config, **extra}


def _schema1_arena_record(rec: dict[str, Any]) -> dict[str, Any]:
    """An arena record of a file from before this schema (keyed by ``kind``: ``config``,
    ``eval``, ``train``, ``end``; nested ``per_type``, ``credit``, ``loss``, ``time``) in the
    schema, as the arena now writes it.  An ``end`` record without ``update`` gets ``None``
    (the reader fills in the last update).
    """
    rec = dict(rec)
    kind = rec.pop("kind")
    out: dict[str, Any] = {"update": rec.pop("update", 0 if kind == "config" else None), "phase": kind}
    if kind == "config":
        cfg = rec.pop("arena", None) or {}
        method = str(rec.pop("method", "?"))
        est, _, var = method.partition(":")
        variants = rec.pop("variants", None)
        out["phase"] = "run"
        out.update(run_identity("arena", cfg.get("env"), rec.pop("estimator", est),
                                "+".join(variants) if variants else var, rec.pop("seed", None), cfg))
        out["method"] = method  # as given (the folder's name)
    elif kind == "eval":
        per_type = rec.pop("per_type", None) or {}
        spent = rec.pop("time", None) or {}
        out.update({k: rec.pop(k) for k in ("success", "score", "invalid_rate", "mean_steps") if k in rec})
        out.update({f"success/{t}": v for t, v in per_type.items()})
        if "eval" in spent:
            out["eval_s"] = spent["eval"]
    elif kind == "train":
        credit = dict(rec.pop("credit", None) or {})
        loss = rec.pop("loss", None) or {}
        spent = rec.pop("time", None) or {}
        for k in ("success", "score", "mean_steps", "invalid_rate", "episodes", "groups_with_success"):
            if k in rec:
                out[f"train/{k}"] = rec.pop(k)
        for k in ("adv_abs_mean", "adv_zero_share"):
            if k in rec:
                out[f"credit/{k}"] = rec.pop(k)
        if "pairs_per_update" in credit:
            out["opt/pairs"] = credit.pop("pairs_per_update")
        out.update({f"credit/stat_{k}": v for k, v in credit.items()})
        if "rows" in rec:
            out["opt/rows"] = rec.pop("rows")
        out.update({f"opt/{_ARENA_OPT_NAMES.get(k, k)}": v for k, v in loss.items()})
        for key, name in (("rollout", "rollout/rollout_s"), ("credit", "credit/credit_s"), ("update", "opt/optimize_s")):
            if key in spent:
                out[name] = spent[key]
        if spent:
            out["time/update_s"] = float(sum(spent.values()))
    out.update(rec)  # whatever else the record carries (the arena's ``tasks``, ``readouts``, ...)
    return out


def upgrade_record(rec: Any) -> Any:
    """A record in the schema: records with ``phase`` as they are, arena records of schema 1
    (keyed by ``kind``) converted, anything else unchanged."""
    if isinstance(rec, dict) and "phase" not in rec and "kind" in rec:
        return _schema1_arena_record(rec)
    return rec


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
        record = {k: _clean(v) for k, v in values.items()}
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(format_record(update, phase, record))
        if self._tb is not None and phase != "run":
            for k, v in record.items():
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    continue
                self._tb.add_scalar(f"{phase}/{k}", v, update)
            self._tb.flush()

    def close(self) -> None:
        """Flush and close TensorBoard."""
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def read_metrics(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All records of a run's ``metrics.jsonl`` (``run_dir`` may also be the file itself), in
    the schema above: arena records from before it are converted (:func:`upgrade_record`),
    and an old arena ``end`` record gets the last update.

    A torn last line (a record cut short by a killed process) is skipped, and a line holding
    a torn fragment with a whole record glued on (what resuming such a run wrote before
    :func:`repair_torn_tail`) yields that record; each logs a warning.  Any other corrupt
    line, or a record without ``update`` and ``phase``, raises :class:`MetricFileError` (a
    ``ValueError``) naming the file and the line.

    Raises:
        FileNotFoundError: no ``metrics.jsonl`` there.
    """
    path = Path(run_dir)
    if path.is_dir() or path.name != "metrics.jsonl":
        path = path / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path.parent} has no metrics.jsonl (is it a rubricgym run folder?)")
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    out: list[dict[str, Any]] = []

    def add(rec: Any, lineno: int) -> None:
        rec = upgrade_record(rec)
        if not isinstance(rec, dict) or "phase" not in rec or "update" not in rec:
            raise MetricFileError(f"{path}:{lineno}: a metric record needs 'update' and 'phase' "
                                  "(or, in an arena file from before the schema, 'kind')")
        if rec["update"] is None:
            rec["update"] = max((r["update"] for r in out), default=0)
        out.append(rec)

    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError) as exc:
            error = exc
        else:
            add(rec, lineno)
            continue
        glued = line.rfind(_RECORD_START)
        if glued > 0:
            try:
                rec = json.loads(line[glued:])
            except (ValueError, RecursionError):
                pass
            else:
                log.warning("%s:%d: skipped a torn record fragment of %d characters before a whole "
                            "record", path, lineno, glued)
                add(rec, lineno)
                continue
        if lineno == len(lines) and not text.endswith("\n"):
            log.warning("%s:%d: skipped a torn last line (%d characters)", path, lineno, len(line))
            continue
        raise MetricFileError(f"{path}:{lineno}: not JSON: {error}") from None
    return out

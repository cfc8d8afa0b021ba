"""Atomic checkpoints: written under a temporary name, marked complete, then renamed.

Layout of ``RUN_DIR/checkpoints/update_000010/``:

* Accelerate's state (``accelerator.save_state``): model (or the whole peft model),
  optimizer and every process's RNG states (single process or DDP);
* ``lr_scheduler.json``: the learning-rate schedule's state, a few numbers (:data:`SCHEDULER_FILE`);
* ``trainer_state.json``: update counter, task-sampler state, evaluation history;
* ``COMPLETE``: written last, before the rename.

:func:`latest_checkpoint` only returns folders with the marker, so a checkpoint interrupted
half-way (a leftover ``.tmp-*`` folder, or a folder without ``COMPLETE``) is never loaded.

Nothing in a checkpoint is unpickled beyond what torch's restricted loader
(``weights_only=True``) reads, which Accelerate uses for the optimizer and RNG files: the
schedule is JSON, and a ``custom_checkpoint_*.pkl`` (which Accelerate would load with the
full unpickler, able to run any code) refuses the checkpoint before anything is read.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any

__all__ = ["MARKER", "SCHEDULER_FILE", "CheckpointError", "check_checkpoint_files", "checkpoint_name",
           "latest_checkpoint", "load_checkpoint", "prune_checkpoints", "restore_scheduler", "save_checkpoint",
           "scheduler_state"]

log = logging.getLogger(__name__)

MARKER = "COMPLETE"
#: The learning-rate schedule's state in a checkpoint: JSON, never a pickle.
SCHEDULER_FILE = "lr_scheduler.json"
_NAME = re.compile(r"^update_(\d{6})$")
_PICKLED_CUSTOM = re.compile(r"^custom_checkpoint_\d+\.pkl$")


def checkpoint_name(update: int) -> str:
    """Folder name of the checkpoint taken after ``update`` updates."""
    return f"update_{update:06d}"


def complete_checkpoints(ckpt_root: str | os.PathLike[str]) -> list[Path]:
    """Complete checkpoints under ``ckpt_root``, oldest first."""
    root = Path(ckpt_root)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _NAME.match(p.name)
        if m and p.is_dir() and (p / MARKER).is_file() and (p / "trainer_state.json").is_file():
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def latest_checkpoint(ckpt_root: str | os.PathLike[str]) -> Path | None:
    """The newest complete checkpoint, or ``None``."""
    done = complete_checkpoints(ckpt_root)
    return done[-1] if done else None


class _TiedWeights(logging.Filter):
    """Drops accelerate's "Removed shared tensor {...} while saving" for a model with tied
    weights (SmolLM2 ties ``lm_head`` to ``embed_tokens``): safetensors stores the shared tensor
    once and loading the state ties it again (the exact-resume tests compare the weights)."""

    def __init__(self, tied: set[str]) -> None:
        super().__init__()
        self.tied = tied

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return "Removed shared tensor" not in text or not any(name in text for name in self.tied)


def _tied_names(accelerator: Any) -> set[str]:
    """Names of parameters that share storage with another parameter, in the prepared models."""
    names: set[str] = set()
    for model in getattr(accelerator, "_models", []):
        seen: dict[int, str] = {}
        for name, p in accelerator.unwrap_model(model).named_parameters(remove_duplicate=False):
            key = p.data_ptr()
            if key in seen:
                names |= {name, seen[key]}
            seen.setdefault(key, name)
    return names


def save_checkpoint(accelerator: Any, ckpt_root: str | os.PathLike[str], update: int, state: dict[str, Any],
                    scheduler: Any = None) -> Path:
    """Write a checkpoint atomically (call on every process).

    Args:
        accelerator: The run's ``Accelerator`` (model/optimizer were prepared by it).
        ckpt_root: ``RUN_DIR/checkpoints``.
        update: Number of completed updates.
        state: JSON-encodable trainer state.
        scheduler: A learning-rate scheduler kept outside Accelerate: its state is written
            as JSON (:data:`SCHEDULER_FILE`; :func:`scheduler_state`).
    """
    schedule = None if scheduler is None else scheduler_state(scheduler)
    root = Path(ckpt_root)
    final = root / checkpoint_name(update)
    tmp = root / f".tmp-{checkpoint_name(update)}"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
    accelerator.wait_for_everyone()
    quiet, tied = logging.getLogger("accelerate.utils.other"), _TiedWeights(_tied_names(accelerator))
    quiet.addFilter(tied)  # only while saving; removed below
    try:
        accelerator.save_state(str(tmp), safe_serialization=True)
    finally:
        quiet.removeFilter(tied)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (tmp / "trainer_state.json").write_text(json.dumps(state, indent=1))
        if schedule is not None:
            (tmp / SCHEDULER_FILE).write_text(json.dumps(schedule, indent=1, allow_nan=False) + "\n")
        (tmp / MARKER).write_text(f"update {update}\n")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    accelerator.wait_for_everyone()
    return final


class CheckpointError(ValueError):
    """A checkpoint file is truncated or corrupt; the message names the file."""


def _plain(value: Any) -> bool:
    """JSON's own values only: None, bool, int, finite float, str, lists and str-keyed dicts."""
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return isinstance(value, dict) and all(isinstance(k, str) and _plain(v) for k, v in value.items())


def scheduler_state(scheduler: Any) -> dict[str, Any]:
    """A learning-rate scheduler's ``state_dict()`` as plain JSON data (a ``LambdaLR``'s is a few
    numbers: ``last_epoch``, ``_step_count``, ``base_lrs``, ``_last_lr``, ...).

    Raises:
        TypeError: the state holds something other than plain numbers, strings, lists and
            dicts (a scheduler with callable objects that keep state).
    """
    state = {k: list(v) if isinstance(v, tuple) else v for k, v in scheduler.state_dict().items()}
    if not _plain(state):
        raise TypeError(f"{type(scheduler).__name__}.state_dict() is not plain data; it cannot be kept as JSON")
    return state


def _same_shape(got: Any, want: Any) -> bool:
    """``got`` (read back) has ``want``'s structure: the same keys, list lengths and kinds of
    value (an int where a float is wanted is accepted)."""
    if isinstance(want, bool) or want is None or isinstance(want, str):
        return type(got) is type(want)
    if isinstance(want, (int, float)):
        return not isinstance(got, bool) and isinstance(got, (int, float)) and (isinstance(want, float) or isinstance(got, int))
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(_same_shape, got, want))
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(_same_shape(got[k], want[k]) for k in want)
    return False


def restore_scheduler(scheduler: Any, path: str | os.PathLike[str]) -> bool:
    """Load a checkpoint's :data:`SCHEDULER_FILE` into ``scheduler``; ``False`` if the checkpoint
    has none (written before the schedule was kept as JSON).

    Raises:
        CheckpointError: the file is not JSON, or not the state of a scheduler like this one
            (other keys, lengths or kinds of value); the message names it.
    """
    file = Path(path) / SCHEDULER_FILE
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise CheckpointError(f"{file}: cannot read it ({exc})") from None
    try:
        state = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{file}: not JSON ({exc})") from None
    want = scheduler_state(scheduler)
    if not (_plain(state) and _same_shape(state, want)):
        raise CheckpointError(f"{file}: not the state of this run's {type(scheduler).__name__} "
                              f"(expected the keys {sorted(want)} with the same kinds of value)")
    scheduler.load_state_dict(state)
    return True


def _refuse_pickled_objects(path: Path) -> None:
    """Refuse a checkpoint holding ``custom_checkpoint_*.pkl``: Accelerate loads those with
    the full unpickler, which runs whatever code the file names."""
    found = sorted(f.name for f in path.iterdir() if _PICKLED_CUSTOM.match(f.name))
    if found:
        raise CheckpointError(
            f"{path / found[0]}: a pickle, which rubricgym does not load (unpickling can run any code); "
            f"its checkpoints keep the learning-rate schedule as JSON ({SCHEDULER_FILE}). A checkpoint "
            f"written by an older rubricgym kept the schedule in that file: if you wrote this checkpoint "
            f"yourself, delete {', '.join(found)} to resume from it (the schedule is then recomputed from "
            f"the update counter)")


def _check_safetensors(path: Path) -> None:
    """A safetensors file: 8-byte little-endian header length, JSON header, then the data."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if n < 2 or 8 + n > size:
            raise CheckpointError(f"{path}: truncated or corrupt safetensors file ({size} bytes; "
                                  f"header length {n if n >= 0 else 'missing'})")
        try:
            header = json.loads(fh.read(n))
            end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as exc:
            raise CheckpointError(f"{path}: corrupt safetensors header ({type(exc).__name__}: {exc})") from None
    if 8 + n + end != size:
        raise CheckpointError(f"{path}: truncated or corrupt safetensors file: {size} bytes, "
                              f"its header describes {8 + n + end}")


def _check_torch_zip(path: Path) -> None:
    """``torch.save`` files are zip archives: the central directory is at the end.  Anything
    else (a bare pickle) was not written by ``torch.save`` and is refused unread."""
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != b"PK\x03\x04":
        raise CheckpointError(f"{path}: not a torch.save zip file (a bare pickle or another format; "
                              "checkpoints are written as zip files only, and this one is not read)")
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if info.header_offset + info.compress_size > size:
                    raise CheckpointError(f"{path}: truncated torch file (member {info.filename!r} "
                                          f"ends past the {size} bytes on disk)")
    except zipfile.BadZipFile as exc:
        raise CheckpointError(f"{path}: truncated or corrupt torch file ({exc})") from None


def check_checkpoint_files(path: str | os.PathLike[str]) -> None:
    """Check every safetensors and torch file under a checkpoint folder for truncation.

    Cheap (headers and zip directories only): a file cut short by a crash, a full disk or a
    bad copy is named here, instead of surfacing as a bare safetensors/torch error (or, for
    Accelerate's RNG-state files, as a silently skipped restore).

    Raises:
        CheckpointError: naming the first damaged file.
    """
    for f in sorted(Path(path).rglob("*")):
        if not f.is_file():
            continue
        if f.suffix == ".safetensors":
            _check_safetensors(f)
        elif f.suffix in (".bin", ".pt", ".pth", ".pkl"):
            _check_torch_zip(f)


def load_checkpoint(accelerator: Any, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Restore model/optimizer/RNG from a complete checkpoint; return trainer state (a
    scheduler kept outside Accelerate: :func:`restore_scheduler`).

    Raises:
        FileNotFoundError: ``path`` is not a complete checkpoint (no ``COMPLETE`` marker).
        CheckpointError: a file of the checkpoint is truncated or corrupt, or a pickle that
            would be unpickled in full (the message names it; delete the checkpoint folder to
            resume from the one before).
    """
    path = Path(path)
    if not (path / MARKER).is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {MARKER} marker)")
    _refuse_pickled_objects(path)
    try:
        state = json.loads((path / "trainer_state.json").read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise ValueError(f"{path / 'trainer_state.json'} is unreadable: {exc}") from None
    hint = "; delete that checkpoint folder to resume from the previous one"
    try:
        check_checkpoint_files(path)
    except CheckpointError as exc:
        raise CheckpointError(f"{exc}{hint}") from None
    try:
        accelerator.load_state(str(path))
    except Exception as exc:  # safetensors / torch / pickle errors name no file
        raise CheckpointError(f"{path}: cannot restore the checkpoint ({type(exc).__name__}: "
                              f"{str(exc)[:500]}){hint}") from exc
    return state


def prune_checkpoints(ckpt_root: str | os.PathLike[str], keep: int) -> None:
    """Delete all but the newest ``keep`` complete checkpoints (main process only)."""
    done = complete_checkpoints(ckpt_root)
    for p in done[:-keep] if keep > 0 else []:
        shutil.rmtree(p, ignore_errors=True)

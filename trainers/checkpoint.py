"""Atomic checkpoints: written under a temporary name, marked complete, then renamed.

Layout of ``RUN_DIR/checkpoints/update_000010/``:

* Accelerate's state (``accelerator.save_state``): model (or the whole peft model),
  optimizer, scheduler and every process's RNG states (single process or DDP);
* ``trainer_state.json``: update counter, task-sampler state, evaluation history;
* ``COMPLETE``: written last, before the rename.

:func:`latest_checkpoint` only returns folders with the marker, so a checkpoint interrupted
half-way (a leftover ``.tmp-*`` folder, or a folder without ``COMPLETE``) is never loaded.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any

__all__ = ["MARKER", "CheckpointError", "check_checkpoint_files", "checkpoint_name", "latest_checkpoint",
           "load_checkpoint", "prune_checkpoints", "save_checkpoint"]

log = logging.getLogger(__name__)

MARKER = "COMPLETE"
_NAME = re.compile(r"^update_(\d{6})$")


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


def save_checkpoint(accelerator: Any, ckpt_root: str | os.PathLike[str], update: int, state: dict[str, Any]) -> Path:
    """Write a checkpoint atomically (call on every process).

    Args:
        accelerator: The run's ``Accelerator`` (model/optimizer/scheduler were prepared by it).
        ckpt_root: ``RUN_DIR/checkpoints``.
        update: Number of completed updates.
        state: JSON-encodable trainer state.
    """
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
        (tmp / MARKER).write_text(f"update {update}\n")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    accelerator.wait_for_everyone()
    return final


class CheckpointError(ValueError):
    """A checkpoint file is truncated or corrupt; the message names the file."""


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
    """``torch.save`` files are zip archives: the central directory is at the end."""
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != b"PK\x03\x04":
        return  # a legacy pickle: nothing cheap to check
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
    """Restore model/optimizer/scheduler/RNG from a complete checkpoint; return trainer state.

    Raises:
        FileNotFoundError: ``path`` is not a complete checkpoint (no ``COMPLETE`` marker).
        CheckpointError: a file of the checkpoint is truncated or corrupt (the message names
            it; delete the checkpoint folder to resume from the one before).
    """
    path = Path(path)
    if not (path / MARKER).is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {MARKER} marker)")
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

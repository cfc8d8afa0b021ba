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
from pathlib import Path
from typing import Any

__all__ = ["MARKER", "checkpoint_name", "latest_checkpoint", "load_checkpoint", "prune_checkpoints", "save_checkpoint"]

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
    accelerator.save_state(str(tmp), safe_serialization=True)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (tmp / "trainer_state.json").write_text(json.dumps(state, indent=1))
        (tmp / MARKER).write_text(f"update {update}\n")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    accelerator.wait_for_everyone()
    return final


def load_checkpoint(accelerator: Any, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Restore model/optimizer/scheduler/RNG from a complete checkpoint; return trainer state.

    Raises:
        FileNotFoundError: ``path`` is not a complete checkpoint (no ``COMPLETE`` marker).
    """
    path = Path(path)
    if not (path / MARKER).is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {MARKER} marker)")
    try:
        state = json.loads((path / "trainer_state.json").read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path / 'trainer_state.json'} is unreadable: {exc}") from None
    accelerator.load_state(str(path))
    return state


def prune_checkpoints(ckpt_root: str | os.PathLike[str], keep: int) -> None:
    """Delete all but the newest ``keep`` complete checkpoints (main process only)."""
    done = complete_checkpoints(ckpt_root)
    for p in done[:-keep] if keep > 0 else []:
        shutil.rmtree(p, ignore_errors=True)

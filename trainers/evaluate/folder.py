"""An eval run folder on disk, read strictly: its header (``run.json``) and its episodes' results.

A damaged folder raises :class:`RunFolderError` naming the file, what is wrong with it and what
to do, and nothing in the folder is overwritten:

* ``run.json`` that is not a file, not UTF-8, not JSON, not an object (``[]``), misses a key a
  header has (``panel``, ``hash``, ``tasks``, ``agent.name``) or carries one no header has
  (written by another version, or edited);
* an episode trace that is not a file (a folder), not UTF-8 (binary bytes), whose last line
  is not JSON or not an object, or whose end line has unknown or missing fields, fields of the
  wrong type or another episode's index.

A trace without an end line (an interrupted episode) or whose end line records an agent error
is not a result: that episode is played again and its file replaced.  Traces written before
the end line carried token counts get them from their decision lines' ``usage``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["HEADER_KEYS", "EpisodeResult", "RunFolderError", "check_folder", "load_run", "read_header",
           "read_trace", "trace_path"]

#: The keys of ``run.json``.
HEADER_KEYS = frozenset({"panel", "hash", "versions", "tasks", "env_id", "env_kwargs", "agent", "settings"})


class RunFolderError(ValueError):
    """A run folder that belongs to another panel hash or agent, or a damaged file in it."""


@dataclass
class EpisodeResult:
    """One finished episode (the "end" line of its trace).

    ``prompt_tokens`` and ``completion_tokens`` are the sums of its decisions' token counts
    (``None``: the agent reported none); ``wall_s`` (first decision to end) and ``latency_s``
    (seconds per answered decision) are timings, left out of comparisons of results.
    """

    index: int
    task_id: str
    success: bool
    score: float
    steps: int
    invalid: int
    truncated: bool
    task_type: str | None = None
    rubric: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    wall_s: float | None = field(default=None, compare=False)
    latency_s: list[float] = field(default_factory=list, compare=False)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


_CHECKS: dict[str, Callable[[Any], bool]] = {
    "index": _is_int, "task_id": lambda v: isinstance(v, str), "success": lambda v: isinstance(v, bool),
    "score": _is_num, "steps": lambda v: _is_int(v) and v >= 0, "invalid": lambda v: _is_int(v) and v >= 0,
    "truncated": lambda v: isinstance(v, bool), "task_type": _optional(lambda v: isinstance(v, str)),
    "rubric": lambda v: isinstance(v, dict) and all(_is_num(x) for x in v.values()),
    "error": _optional(lambda v: isinstance(v, str)), "prompt_tokens": _optional(_is_int),
    "completion_tokens": _optional(_is_int), "wall_s": _optional(_is_num),
    "latency_s": lambda v: isinstance(v, list) and all(_is_num(x) for x in v),
}
_REQUIRED = ("index", "task_id", "success", "score", "steps", "invalid", "truncated")


def trace_path(out: Path, index: int) -> Path:
    """Where episode ``index``'s trace lives."""
    return out / "episodes" / f"{index:05d}.jsonl"


def _not_a_file(path: Path) -> bool:
    return (path.exists() or path.is_symlink()) and not path.is_file()


def _read_text(path: Path, fix: str) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RunFolderError(f"{path}: not UTF-8 text (binary bytes at offset {exc.start}); {fix}") from None
    except OSError as exc:
        raise RunFolderError(f"{path}: unreadable ({exc}); {fix}") from None


def read_header(out: Path) -> dict[str, Any] | None:
    """``run.json`` of the folder ``out`` (``None``: there is none yet)."""
    path = out / "run.json"
    fix = "restore it, or use another folder"
    if _not_a_file(path):
        raise RunFolderError(f"{path}: not a file; {fix}")
    if not path.exists():
        return None
    try:
        data = json.loads(_read_text(path, fix))
    except json.JSONDecodeError as exc:
        raise RunFolderError(f"{path}: not JSON ({exc}); {fix}") from None
    if not isinstance(data, dict):
        raise RunFolderError(f"{path}: holds a JSON {type(data).__name__}, not a run header (an object); {fix}")
    unknown = sorted(set(data) - HEADER_KEYS)
    if unknown:
        raise RunFolderError(f"{path}: unknown fields {unknown} (another version's run, or edited); {fix}")
    agent = data.get("agent")
    bad = [k for k, ok in (("panel", isinstance(data.get("panel"), str)), ("hash", isinstance(data.get("hash"), str)),
                           ("tasks", _is_int(data.get("tasks"))),
                           ("agent.name", isinstance(agent, dict) and isinstance(agent.get("name"), str))) if not ok]
    if bad:
        raise RunFolderError(f"{path}: not a run header (missing or invalid {', '.join(bad)}); {fix}")
    return data


def check_folder(out: Path, header: Mapping[str, Any], allow_hash_change: bool) -> None:
    """Refuse a folder that is not one, or holds a run of another panel, agent or panel hash."""
    for path, kind in ((out, "folder"), (out / "episodes", "folder")):
        if (path.exists() or path.is_symlink()) and not path.is_dir():
            raise RunFolderError(f"{path}: not a {kind}; use another run folder")
    old = read_header(out)
    if old is None:
        return
    if old["panel"] != header["panel"] or old["agent"]["name"] != header["agent"]["name"]:
        raise RunFolderError(f"{out} holds a run of {old['panel']} by {old['agent']['name']}; "
                             f"use another folder for {header['panel']} by {header['agent']['name']}")
    if old["hash"] != header["hash"] and not allow_hash_change:
        raise RunFolderError(f"{out} was played on panel hash {old['hash'][:12]}, this machine's "
                             f"{header['panel']} has {header['hash'][:12]} (other games, goals or engine); "
                             "use another folder, or pass --allow-hash-change to mix them")


def read_trace(path: Path, index: int) -> EpisodeResult | None:
    """The result of episode ``index``'s complete trace (``None``: absent, interrupted, or
    ended in an agent error: to be played again)."""
    fix = "delete it to play the episode again"
    if _not_a_file(path):
        raise RunFolderError(f"{path}: not a trace file (a folder or another non-file); {fix}")
    if not path.exists():
        return None
    lines = _read_text(path, fix).rstrip("\n").split("\n")
    end = _json_line(path, lines[-1], "the last line", fix)
    if not isinstance(end, dict):
        raise RunFolderError(f"{path}: the last line holds a JSON {type(end).__name__}, not a record; {fix}")
    if not end.get("end") or end.get("error"):
        return None
    end = {k: v for k, v in end.items() if k != "end"}
    _check_end(path, end, index, fix)
    if "prompt_tokens" not in end:  # a trace written before end lines counted tokens
        end.update(_line_tokens(path, lines[:-1], fix))
    return EpisodeResult(**end)


def _json_line(path: Path, line: str, which: str, fix: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise RunFolderError(f"{path}: {which} is not JSON ({exc}); {fix}") from None


def _check_end(path: Path, end: Mapping[str, Any], index: int, fix: str) -> None:
    unknown = sorted(set(end) - set(_CHECKS))
    if unknown:
        raise RunFolderError(f"{path}: unknown fields {unknown} in the end line (another version's trace, or "
                             f"edited); {fix}")
    missing = [k for k in _REQUIRED if k not in end]
    wrong = [k for k, v in end.items() if not _CHECKS[k](v)]
    if missing or wrong:
        raise RunFolderError(f"{path}: a damaged end line (missing {missing}, wrong type {wrong}); {fix}")
    if end["index"] != index:
        raise RunFolderError(f"{path}: the end line is episode {end['index']}'s, not {index}'s; {fix}")


def _line_tokens(path: Path, lines: list[str], fix: str) -> dict[str, int | None]:
    """Token sums of a trace's decision lines (``None`` where no line reports the count)."""
    sums: dict[str, int | None] = {"prompt_tokens": None, "completion_tokens": None}
    for i, line in enumerate(lines):
        record = _json_line(path, line, f"line {i + 1}", fix)
        usage = record.get("usage") if isinstance(record, dict) else None
        for key, total in list(sums.items()):
            value = usage.get(key) if isinstance(usage, dict) else None
            if _is_int(value):
                sums[key] = (total or 0) + value
    return sums


def load_run(out: Path) -> tuple[dict[str, Any], list[EpisodeResult]]:
    """A run folder's header and its finished episodes (those without an agent error), in task order."""
    out = Path(out)
    header = read_header(out) if out.is_dir() else None
    if header is None:
        raise RunFolderError(f"{out}: not an eval run folder (no run.json)")
    folder = out / "episodes"
    names = (p.name.removesuffix(".jsonl") for p in folder.iterdir()) if folder.is_dir() else ()
    indices = sorted(int(x) for x in names if len(x) >= 5 and x.isdigit() and int(x) < header["tasks"])
    found = (read_trace(trace_path(out, i), i) for i in indices)
    return header, [r for r in found if r is not None]

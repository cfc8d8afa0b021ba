"""The on-disk cache of generated games: balanced, deterministic, verified, written atomically."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_envs.alfworld.generator import games
from agent_envs.alfworld.generator.games import check_task_type
from agent_envs.alfworld.generator.verify import GameVerificationError, Verifier
from agent_envs.alfworld.generator.vocabulary import GENERATOR_VERSION, TASK_TYPES

__all__ = ["GAME_FILE_NAME", "MANIFEST_NAME", "default_cache_dir", "ensure_generated"]

logger = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
GAME_FILE_NAME = "game.tw-pddl"
_MAX_VERIFY_TRIES = 10  # engine-rejected resamples per game index before giving up


def _canonical_task_types(task_types: Sequence[str] | None) -> tuple[str, ...]:
    if task_types is None:
        return TASK_TYPES
    if isinstance(task_types, str):
        raise TypeError(
            f"task_types must be a sequence of task-type names, not the string {task_types!r}"
        )
    chosen = list(task_types)
    if not chosen:
        raise ValueError(f"task_types is empty; choose from {', '.join(TASK_TYPES)}")
    for t in chosen:
        check_task_type(t)
    return tuple(t for t in TASK_TYPES if t in set(chosen))


def default_cache_dir(n: int = 60, seed: int = 0, task_types: Sequence[str] | None = None) -> Path:
    """``$RUBRICGYM_CACHE/alfworld/generated-<seed>-<n>`` (``RUBRICGYM_CACHE`` defaults to
    ``~/.cache/rubricgym``); a subset of task types adds a short hash of their names."""
    root = Path(
        os.environ.get("RUBRICGYM_CACHE") or Path.home() / ".cache" / "rubricgym"
    ).expanduser()
    types = _canonical_task_types(task_types)
    name = f"generated-{seed}-{n}"
    if types != TASK_TYPES:
        name += "-" + hashlib.sha1(",".join(types).encode()).hexdigest()[:8]
    return root / "alfworld" / name


def _game_seed(seed: int, index: int, attempt: int) -> str:
    return f"rubricgym-alfworld:{seed}:{index}:{attempt}"


def _read_manifest(cache: Path) -> dict[str, Any] | None:
    path = cache / MANIFEST_NAME
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _complete(
    cache: Path, manifest: Mapping[str, Any] | None, expect: Mapping[str, Any]
) -> list[Path] | None:
    """The game paths of a finished cache matching ``expect``, else None."""
    if manifest is None or any(manifest.get(k) != v for k, v in expect.items()):
        return None
    games = manifest.get("games") or []
    if len(games) != expect["n"]:
        return None
    paths = []
    for entry in games:
        try:
            path = cache / entry["path"]
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except (OSError, KeyError, TypeError):
            return None
        if digest != entry.get("sha256"):
            return None
        paths.append(path)
    return sorted(paths)


def ensure_generated(
    n: int = 60,
    seed: int = 0,
    cache_dir: Path | None = None,
    task_types: Sequence[str] | None = None,
    *,
    workers: int | None = None,
) -> list[Path]:
    """Sorted paths of ``n`` generated ``game.tw-pddl`` files, generating them on first use.

    Games cycle through the task types (counts differ by at most one), are deterministic in
    ``seed`` (same seed: byte-identical files) and each one's walkthrough is verified in the real
    engine before it is kept. Generation writes into a temporary directory beside the cache and
    renames it into place, so a partly generated cache is never seen; a finished cache is
    recognised by its ``manifest.json`` and reused.

    Args:
        n: number of games (>= 1).
        seed: generator seed (int).
        cache_dir: where the games live (default :func:`default_cache_dir`).
        task_types: subset of :data:`TASK_TYPES` (default: all six).
        workers: worker subprocesses that build and verify games in parallel (the engine is
            not thread-safe). Default: ``min(4, cpu count)`` for 16 or more games, else 1
            (in-process). The files do not depend on it.

    Raises:
        TypeError / ValueError: bad arguments, or ``cache_dir`` exists and is not a generator
            cache (the message names it).

    Example (generates six games on first use, a few seconds; then instant):
        >>> paths = ensure_generated(n=6, seed=0)                        # doctest: +SKIP
        >>> [p.parent.parent.name.split("-")[0] for p in paths][:2]      # doctest: +SKIP
        ['look_at_obj_in_light', 'pick_and_place_simple']
    """
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"n must be an int, not {type(n).__name__}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, not {type(seed).__name__}")
    types = _canonical_task_types(task_types)
    if workers is None:
        workers = min(4, os.cpu_count() or 1) if n >= 16 else 1
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    cache = (
        Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir(n, seed, types)
    )
    expect = {
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "n": n,
        "task_types": list(types),
    }

    if cache.exists():
        if not cache.is_dir():
            raise ValueError(f"ALFWorld game cache {cache} exists and is not a directory")
        manifest = _read_manifest(cache)
        if manifest is None and any(cache.iterdir()):
            raise ValueError(
                f"{cache} exists but is not a generated-games cache (no readable {MANIFEST_NAME}); "
                "choose another cache_dir or remove it"
            )
        if manifest is not None and manifest.get("kind") != "rubricgym-alfworld-generated":
            raise ValueError(f"{cache / MANIFEST_NAME} is not a rubricgym generated-games manifest")
        found = _complete(cache, manifest, expect)
        if found is not None:
            return found
        if manifest is not None:
            held = {k: manifest.get(k) for k in expect}
            reason = "damaged" if held == expect else f"it holds {held}"
            logger.warning("regenerating the ALFWorld game cache %s (%s)", cache, reason)

    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{cache.name}.tmp-", dir=cache.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary directory
        entries = _generate_into(tmp, n, seed, types, workers)
        manifest = {"kind": "rubricgym-alfworld-generated", **expect, "games": entries}
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        _publish(tmp, cache)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    found = _complete(cache, _read_manifest(cache), expect)
    if found is None:  # another process published something else meanwhile
        raise RuntimeError(f"the ALFWorld game cache {cache} changed while it was being generated")
    return found


def _publish(tmp: Path, cache: Path) -> None:
    """Move a finished temp cache into place atomically (replacing a stale one of ours)."""
    try:
        os.rename(tmp, cache)
        return
    except OSError:
        if not cache.exists():
            raise
    # The target exists: an empty dir, a stale cache of ours, or one a concurrent process won.
    if _complete(cache, _read_manifest(cache), _read_manifest(tmp) or {}) is not None:
        return  # a concurrent process published the same games; keep theirs
    stale = cache.with_name(f".{cache.name}.stale-{os.getpid()}-{time.monotonic_ns()}")
    os.rename(cache, stale)
    os.rename(tmp, cache)
    shutil.rmtree(stale, ignore_errors=True)


def _generate_into(
    root: Path, n: int, seed: int, types: Sequence[str], workers: int
) -> list[dict[str, Any]]:
    started = time.perf_counter()
    jobs = [(index, types[index % len(types)]) for index in range(n)]
    if workers <= 1 or n < 2:
        entries = _generate_chunk(str(root), seed, jobs)
    else:
        chunks = [jobs[k::workers] for k in range(workers) if jobs[k::workers]]
        parts = _run_workers(root, seed, chunks)
        entries = sorted((e for part in parts for e in part), key=lambda e: e["index"])
    elapsed = time.perf_counter() - started
    logger.info(
        "generated and verified %d ALFWorld games in %.1f s (%.0f ms/game, %d worker(s))",
        n,
        elapsed,
        1000 * elapsed / n,
        workers,
    )
    return entries


def _run_workers(
    root: Path, seed: int, chunks: Sequence[Sequence[tuple[int, str]]]
) -> list[list[dict[str, Any]]]:
    """Run ``chunks`` in fresh interpreters (``python -m ...generator.worker``).

    Plain subprocesses rather than multiprocessing: nothing forks a process that may hold
    threads or an engine, and nothing re-imports the caller's ``__main__`` (multiprocessing's
    spawn would, and crash in scripts without an ``if __name__ == "__main__"`` guard).
    """
    import subprocess
    import sys

    package_root = str(Path(__file__).resolve().parents[3])  # the directory holding agent_envs
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    parts: list[list[dict[str, Any]]] = []
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rubricgym-alfworld-workers-") as logs:
        running = []
        for k, chunk in enumerate(chunks):
            spec = json.dumps({"root": str(root), "seed": seed, "jobs": [list(j) for j in chunk]})
            out, err = Path(logs) / f"{k}.out", Path(logs) / f"{k}.err"
            command = [sys.executable, "-m", "agent_envs.alfworld.generator.worker", spec]
            with out.open("w") as stdout, err.open("w") as stderr:
                proc = subprocess.Popen(command, stdout=stdout, stderr=stderr, env=env)
            running.append((proc, out, err))
        try:
            for proc, out, err in running:
                code = proc.wait()
                said = err.read_text(encoding="utf-8", errors="replace").strip()
                if said:  # workers log warnings only (e.g. a rejected game)
                    logger.warning("generator worker %d:\n%s", proc.pid, said)
                if code != 0:
                    failures.append(f"worker exited with {code}: {said[-2000:]}")
                else:
                    parts.append(json.loads(out.read_text(encoding="utf-8")))
        except BaseException:  # interrupted: do not leave workers writing into the temp dir
            for proc, _, _ in running:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            raise
    if failures:
        raise RuntimeError("generating ALFWorld games failed in a worker process: " + failures[0])
    return parts


def _generate_chunk(root: str, seed: int, jobs: Sequence[tuple[int, str]]) -> list[dict[str, Any]]:
    """Build, verify and write the games ``jobs`` (index, task type) under ``root``."""
    verifier = Verifier()
    entries: list[dict[str, Any]] = []
    for index, task_type in jobs:
        for attempt in range(_MAX_VERIFY_TRIES):
            built = games.build_game(random.Random(_game_seed(seed, index, attempt)), task_type)
            folder = built.folder_name(index)
            try:
                steps = verifier.verify(built.game, label=f"{folder} (attempt {attempt})")
            except GameVerificationError as exc:
                logger.warning("rejected a generated game: %s", exc)
                continue
            break
        else:
            raise RuntimeError(
                f"no verifiable {task_type} game for index {index} "
                f"after {_MAX_VERIFY_TRIES} attempts"
            )
        text = json.dumps(built.game, indent=2) + "\n"
        rel = Path(folder) / "trial_0" / GAME_FILE_NAME
        (Path(root) / rel).parent.mkdir(parents=True)
        (Path(root) / rel).write_text(text, encoding="utf-8")
        entries.append(
            {
                "index": index,
                "path": rel.as_posix(),
                "task_type": task_type,
                "target": built.target,
                "destination": built.destination,
                "room": built.room,
                "attempt": attempt,
                "goal": built.sentence,
                "walkthrough_length": steps,
                "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            }
        )
    return entries

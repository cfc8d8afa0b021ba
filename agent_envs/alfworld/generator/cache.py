"""The on-disk cache of generated games: balanced, deterministic, verified, generated lazily.

A cache holds the games of one ``(seed, n, task types)`` configuration::

    <cache>/<task_type>-<Obj>-None-<Recep>-<index>/trial_0/game.tw-pddl
    <cache>/manifest.json          # written once every game is there

Game ``index`` (0..n-1) has task type ``types[index % len(types)]`` and is built from seeds
that depend only on ``(seed, index, attempt)``, so any subset of the games can be generated
in any order, by any process, and the files are the same.

:class:`GameSet` generates on demand, one task type at a time: the sorted task ids (what
an integer task index refers to) are grouped by task type (the id starts with it), and a
type's block of that order is fixed once that type's games exist, so a reset needs only its
own type's games (a sixth of the set by default).  Until every game exists the cache also
holds ``.partial/`` (the manifest entries of the games made so far); the finished cache is
exactly what generating the whole set at once writes (plus an empty ``.lock`` file: POSIX
record locks on it keep concurrent processes from generating the same games twice).  Game
files are written atomically, so a reader never sees half a file, and a generation that is
interrupted keeps the games it finished: the next call makes only the others.

Progress is reported through :mod:`logging` (``INFO``, logger
``agent_envs.alfworld.generator.cache``) and, when standard error is a terminal, by a
transient progress bar there; nothing is printed to standard output.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_envs.alfworld.generator import games
from agent_envs.alfworld.generator.games import check_task_type
from agent_envs.alfworld.generator.verify import GameVerificationError, Verifier
from agent_envs.alfworld.generator.vocabulary import GENERATOR_VERSION, TASK_TYPES

__all__ = [
    "GAME_FILE_NAME",
    "LOCK_NAME",
    "MANIFEST_NAME",
    "GameSet",
    "default_cache_dir",
    "ensure_generated",
]

logger = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
GAME_FILE_NAME = "game.tw-pddl"
PARTIAL_DIR = ".partial"
LOCK_NAME = ".lock"
_KIND = "rubricgym-alfworld-generated"
_MAX_VERIFY_TRIES = 10  # engine-rejected resamples per game index before giving up

#: ``progress(done, total, what)``: called after each game of a generation run.
ProgressFn = Callable[[int, int, str], None]


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
    from agent_envs.alfworld.data import cache_root

    root = cache_root()
    types = _canonical_task_types(task_types)
    name = f"generated-{seed}-{n}"
    if types != TASK_TYPES:
        name += "-" + hashlib.sha1(",".join(types).encode()).hexdigest()[:8]
    return root / "alfworld" / name


def _game_seed(seed: int, index: int, attempt: int) -> str:
    return f"rubricgym-alfworld:{seed}:{index}:{attempt}"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache is ordinary files
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _entry_ok(cache: Path, entry: Any) -> bool:
    """Whether a manifest entry's game file exists with the recorded sha256."""
    try:
        digest = hashlib.sha256((cache / entry["path"]).read_bytes()).hexdigest()
    except (OSError, KeyError, TypeError):
        return False
    return digest == entry.get("sha256")


def _complete(
    cache: Path, manifest: Mapping[str, Any] | None, expect: Mapping[str, Any]
) -> list[Path] | None:
    """The game paths of a finished cache matching ``expect``, else None."""
    if not isinstance(manifest, Mapping) or any(manifest.get(k) != v for k, v in expect.items()):
        return None
    entries = manifest.get("games") or []
    if len(entries) != expect["n"] or not all(_entry_ok(cache, e) for e in entries):
        return None
    return sorted(cache / e["path"] for e in entries)


@contextlib.contextmanager
def _locked(lock_path: Path, slot: int) -> Iterator[None]:
    """Exclusive POSIX record lock on byte ``slot`` of ``lock_path`` (no-op without fcntl)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: writes are still atomic
        yield
        return
    try:
        fh = open(lock_path, "a+b")  # noqa: SIM115 - closed below
    except OSError:  # a read-only cache: nothing will be written into it either
        yield
        return
    with fh:
        fcntl.lockf(fh, fcntl.LOCK_EX, 1, slot)
        try:
            yield
        finally:
            fcntl.lockf(fh, fcntl.LOCK_UN, 1, slot)


class _Progress:
    """On a terminal, a transient bar on stderr; otherwise an INFO log line every
    :func:`log_every` finished games (and at the last)."""

    def __init__(self, total: int, what: str, callback: ProgressFn | None) -> None:
        self.total, self.what, self.callback = total, what, callback
        self.every = log_every(total)
        self.done = 0
        self.started = time.perf_counter()
        self._bar: Any = None
        self._task: Any = None
        if callback is None and _stderr_is_terminal():
            try:
                from rich.console import Console
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

                self._bar = Progress(
                    "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=Console(file=sys.stderr), transient=True,
                )
                self._bar.start()
                self._task = self._bar.add_task(what, total=total)
            except Exception:  # noqa: BLE001 - a progress bar must never break generation
                self._bar = None
        logger.info("%s: %d game(s) to build and verify", what, total)

    def advance(self, done: int) -> None:
        done = min(done, self.total)
        while self.done < done:
            self.done += 1
            if self._bar is None and (self.done % self.every == 0 or self.done == self.total):
                logger.info("%s: %d/%d verified (%.1f s)", self.what, self.done, self.total,
                            time.perf_counter() - self.started)
            if self.callback is not None:
                self.callback(self.done, self.total, self.what)
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def log_every(total: int) -> int:
    """Games between two progress log lines: about ten lines per run, at least every 100 games.

    >>> log_every(60), log_every(2000), log_every(5)
    (6, 100, 1)
    """
    return max(1, min(100, total // 10))


def _stderr_is_terminal() -> bool:
    try:
        return bool(sys.stderr is not None and sys.stderr.isatty())
    except (AttributeError, ValueError):
        return False


class GameSet:
    """The ``n`` generated games of one configuration, generated on first need.

    Args:
        n: number of games (>= 1).
        seed: generator seed (int).
        cache_dir: where the games live (default :func:`default_cache_dir`).
        task_types: subset of :data:`TASK_TYPES` (default: all six).
        workers: worker subprocesses that build and verify games in parallel (the engine is
            not thread-safe). Default: ``min(4, cpu count)`` when 16 or more games are to be
            generated in one go, else 1 (in-process). The files do not depend on it.
        progress: ``progress(done, total, what)`` after each generated game (replaces the
            terminal progress bar; the INFO log lines stay).

    Raises:
        TypeError / ValueError: bad arguments.

    Example (generates the ten look_at_obj_in_light games on first use, a few seconds):
        >>> games = GameSet(n=60, seed=0)                                  # doctest: +SKIP
        >>> games.path_at(0).parent.parent.name.split("-")[0]             # doctest: +SKIP
        'look_at_obj_in_light'
    """

    def __init__(
        self,
        n: int = 60,
        seed: int = 0,
        cache_dir: str | os.PathLike[str] | None = None,
        task_types: Sequence[str] | None = None,
        *,
        workers: int | None = None,
        progress: ProgressFn | None = None,
    ) -> None:
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"n must be an int, not {type(n).__name__}")
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, not {type(seed).__name__}")
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ValueError(f"workers must be a positive int, got {workers!r}")
        self.n, self.seed, self.workers, self.progress = n, seed, workers, progress
        self.types = _canonical_task_types(task_types)
        self.cache = (
            Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir(n, seed, self.types)
        )
        self.expect = {"generator_version": GENERATOR_VERSION, "seed": seed, "n": n,
                       "task_types": list(self.types)}
        self._lock_path = self.cache / LOCK_NAME
        self._groups: dict[str, list[dict[str, Any]]] = {}
        # A type's block of the sorted ids: ids start with "<type>-", and types hold no "-".
        counts = {t: len(self.indices(t)) for t in self.types}
        self.bounds: dict[str, tuple[int, int]] = {}
        start = 0
        for t in sorted(self.types, key=lambda name: name + "-"):
            self.bounds[t] = (start, start + counts[t])
            start += counts[t]

    # -- layout -----------------------------------------------------------------------------

    def indices(self, task_type: str) -> list[int]:
        """Game indices of ``task_type`` (index ``i`` has type ``types[i % len(types)]``)."""
        k = len(self.types)
        return [i for i in range(self.n) if self.types[i % k] == task_type]

    def type_at(self, position: int) -> str:
        """The task type of sorted position ``position`` (known without generating anything)."""
        for t, (lo, hi) in self.bounds.items():
            if lo <= position < hi:
                return t
        raise IndexError(f"position {position} out of range 0..{self.n - 1}")

    # -- generation -------------------------------------------------------------------------

    def group(self, task_type: str) -> list[Path]:
        """Sorted game paths of ``task_type`` (generating the missing ones first)."""
        check_task_type(task_type)
        if task_type not in self.bounds:
            raise ValueError(f"task type {task_type!r} is not in this game set ({', '.join(self.types)})")
        if task_type not in self._groups:
            self._groups[task_type] = self._ensure([task_type])[task_type]
        return sorted(self.cache / e["path"] for e in self._groups[task_type])

    def path_at(self, position: int) -> Path:
        """The game at ``position`` of the sorted task ids (generates only its type's games)."""
        if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < self.n:
            raise IndexError(f"position {position!r} out of range 0..{self.n - 1}")
        task_type = self.type_at(position)
        return self.group(task_type)[position - self.bounds[task_type][0]]

    def all(self) -> list[Path]:
        """Sorted paths of every game (generating the missing ones; writes the manifest)."""
        missing = [t for t in self.types if t not in self._groups]
        if missing:
            self._groups.update(self._ensure(missing))
        return sorted(self.cache / e["path"] for t in self.types for e in self._groups[t])

    def _ensure(self, task_types: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """Manifest entries of ``task_types``' games, generating what is missing."""
        manifest = _read_json(self.cache / MANIFEST_NAME)
        if _complete(self.cache, manifest, self.expect) is not None:  # no lock needed to read
            done = {e["index"]: e for e in manifest["games"]}
            return {t: [done[i] for i in self.indices(t)] for t in task_types}
        self._check_ours()
        self.cache.mkdir(parents=True, exist_ok=True)
        with _locked(self._lock_path, 0):
            done = self._prepare()
        if done is None:
            slots = sorted(1 + self.types.index(t) for t in task_types)
            with contextlib.ExitStack() as stack:
                for slot in slots:  # always in the same order: no deadlock between processes
                    stack.enter_context(_locked(self._lock_path, slot))
                have = self._partial_entries()
                jobs = [(i, t) for t in task_types for i in self.indices(t) if i not in have]
                if jobs:
                    have.update(self._generate(jobs))
            with _locked(self._lock_path, 0):
                done = self._finish()
            if done is None:
                done = have
        return {t: [done[i] for i in self.indices(t)] for t in task_types}

    def _check_ours(self) -> None:
        """Refuse a ``cache_dir`` that is a file, or a folder with things that are not ours."""
        cache = self.cache
        if cache.exists() and not cache.is_dir():
            raise ValueError(f"ALFWorld game cache {cache} exists and is not a directory")
        ours = (MANIFEST_NAME, PARTIAL_DIR, LOCK_NAME)
        if cache.is_dir() and not any((cache / name).exists() for name in ours) and any(cache.iterdir()):
            raise ValueError(
                f"{cache} exists but is not a generated-games cache (no readable {MANIFEST_NAME}); "
                "choose another cache_dir or remove it"
            )

    def _prepare(self) -> dict[int, dict[str, Any]] | None:
        """Entries by index of a finished cache; else make sure a partial cache of ours is there."""
        cache = self.cache
        manifest = _read_json(cache / MANIFEST_NAME)
        if _complete(cache, manifest, self.expect) is not None:
            return {e["index"]: e for e in manifest["games"]}
        partial = cache / PARTIAL_DIR
        spec = _read_json(partial / "spec.json")
        for found, what in ((manifest, MANIFEST_NAME), (spec, f"{PARTIAL_DIR}/spec.json")):
            if found is not None and (not isinstance(found, Mapping) or found.get("kind") != _KIND):
                raise ValueError(f"{cache / what} is not a rubricgym generated-games manifest")
        stale = manifest is not None or (
            spec is not None and any(spec.get(k) != v for k, v in self.expect.items())
        )
        if stale:
            held = {k: (manifest or spec).get(k) for k in self.expect}
            reason = "damaged" if held == self.expect else f"it holds {held}"
            logger.warning("regenerating the ALFWorld game cache %s (%s)", cache, reason)
            for child in cache.iterdir():  # everything but the lock file others may hold
                if child.name == LOCK_NAME:
                    continue
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        if not (partial / "spec.json").is_file():
            partial.mkdir(parents=True, exist_ok=True)
            _write_atomic(partial / "spec.json", json.dumps({"kind": _KIND, **self.expect}) + "\n")
        return None

    def _partial_entries(self) -> dict[int, dict[str, Any]]:
        """Entries of the games generated so far whose files are intact."""
        out: dict[int, dict[str, Any]] = {}
        manifest = _read_json(self.cache / MANIFEST_NAME)
        if _complete(self.cache, manifest, self.expect) is not None:
            return {e["index"]: e for e in manifest["games"]}
        for index in range(self.n):
            entry = _read_json(self.cache / PARTIAL_DIR / f"{index}.json")
            if isinstance(entry, Mapping) and entry.get("index") == index and _entry_ok(self.cache, entry):
                out[index] = dict(entry)
        if len(out) < self.n:
            # Another process may have finished meanwhile: it writes the manifest, then removes
            # the partial entries, so entries gone missing mean the manifest is there (a reader
            # that took them as missing would generate them again and leave a new .partial/).
            manifest = _read_json(self.cache / MANIFEST_NAME)
            if _complete(self.cache, manifest, self.expect) is not None:
                return {e["index"]: e for e in manifest["games"]}
        return out

    def _finish(self) -> dict[int, dict[str, Any]] | None:
        """Write the manifest once every game exists; entries by index, or None if some lack."""
        manifest = _read_json(self.cache / MANIFEST_NAME)
        if _complete(self.cache, manifest, self.expect) is not None:
            return {e["index"]: e for e in manifest["games"]}
        have = self._partial_entries()
        if len(have) < self.n:
            return None
        entries = [have[i] for i in range(self.n)]
        manifest = {"kind": _KIND, **self.expect, "games": entries}
        _write_atomic(self.cache / MANIFEST_NAME, json.dumps(manifest, indent=1) + "\n")
        shutil.rmtree(self.cache / PARTIAL_DIR, ignore_errors=True)
        logger.info("the ALFWorld game cache %s is complete (%d games)", self.cache, self.n)
        return have

    def _generate(self, jobs: Sequence[tuple[int, str]]) -> dict[int, dict[str, Any]]:
        workers = self.workers or (min(4, os.cpu_count() or 1) if len(jobs) >= 16 else 1)
        workers = min(workers, len(jobs))
        kinds = sorted({t for _, t in jobs}, key=self.types.index)
        what = f"generating ALFWorld games ({', '.join(kinds)}) into {self.cache}"
        progress = _Progress(len(jobs), what, self.progress)
        started = time.perf_counter()
        try:
            if workers <= 1:
                entries = _generate_chunk(str(self.cache), self.seed, jobs,
                                          on_game=lambda k: progress.advance(k))
            else:
                chunks = [list(jobs[k::workers]) for k in range(workers)]
                entries = _run_workers(self.cache, self.seed, chunks, progress)
        finally:
            progress.close()
        elapsed = time.perf_counter() - started
        logger.info("generated and verified %d ALFWorld games in %.1f s (%.0f ms/game, %d worker(s))",
                    len(jobs), elapsed, 1000 * elapsed / len(jobs), workers)
        return {e["index"]: e for e in entries}


def ensure_generated(
    n: int = 60,
    seed: int = 0,
    cache_dir: Path | None = None,
    task_types: Sequence[str] | None = None,
    *,
    workers: int | None = None,
    progress: ProgressFn | None = None,
) -> list[Path]:
    """Sorted paths of ``n`` generated ``game.tw-pddl`` files, generating them on first use.

    Games cycle through the task types (counts differ by at most one), are deterministic in
    ``seed`` (same seed: byte-identical files) and each one's walkthrough is verified in the real
    engine before it is kept. A finished cache is recognised by its ``manifest.json`` and
    reused; :class:`GameSet` generates only the games a caller needs (what the environment
    uses), this function all of them.

    Args: as :class:`GameSet`.

    Raises:
        TypeError / ValueError: bad arguments, or ``cache_dir`` exists and is not a generator
            cache (the message names it).

    Example (generates six games on first use, a few seconds; then instant):
        >>> paths = ensure_generated(n=6, seed=0)                        # doctest: +SKIP
        >>> [p.parent.parent.name.split("-")[0] for p in paths][:2]      # doctest: +SKIP
        ['look_at_obj_in_light', 'pick_and_place_simple']
    """
    return GameSet(n, seed, cache_dir, task_types, workers=workers, progress=progress).all()


def _run_workers(
    root: Path, seed: int, chunks: Sequence[Sequence[tuple[int, str]]], progress: _Progress
) -> list[dict[str, Any]]:
    """Run ``chunks`` in fresh interpreters (``python -m ...generator.worker``).

    Plain subprocesses rather than multiprocessing: nothing forks a process that may hold
    threads or an engine, and nothing re-imports the caller's ``__main__`` (multiprocessing's
    spawn would, and crash in scripts without an ``if __name__ == "__main__"`` guard). Each
    worker writes its games and their entries into the cache as it goes (progress counts them).
    """
    import subprocess

    package_root = str(Path(__file__).resolve().parents[3])  # the directory holding agent_envs
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    indices = [i for chunk in chunks for i, _ in chunk]
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rubricgym-alfworld-workers-") as logs:
        running = []
        try:
            for k, chunk in enumerate(chunks):
                spec = json.dumps({"root": str(root), "seed": seed, "jobs": [list(j) for j in chunk]})
                err = Path(logs) / f"{k}.err"
                command = [sys.executable, "-m", "agent_envs.alfworld.generator.worker", spec]
                with err.open("w") as stderr:
                    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr,
                                            stdin=subprocess.DEVNULL, env=env)
                running.append((proc, err))
            while any(proc.poll() is None for proc, _ in running):
                time.sleep(0.25)
                progress.advance(sum((root / PARTIAL_DIR / f"{i}.json").is_file() for i in indices))
            for proc, err in running:
                said = err.read_text(encoding="utf-8", errors="replace").strip()
                if said:  # workers log warnings only (e.g. a rejected game)
                    logger.warning("generator worker %d:\n%s", proc.pid, said)
                if proc.returncode != 0:
                    failures.append(f"worker exited with {proc.returncode}: {said[-2000:]}")
        except BaseException:  # interrupted: do not leave workers writing into the cache
            for proc, _ in running:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            raise
    if failures:
        raise RuntimeError("generating ALFWorld games failed in a worker process: " + failures[0])
    entries = [_read_json(root / PARTIAL_DIR / f"{i}.json") for i in indices]
    progress.advance(len(indices))
    return [e for e in entries if isinstance(e, Mapping)]


def _generate_chunk(
    root: str,
    seed: int,
    jobs: Sequence[tuple[int, str]],
    *,
    on_game: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Build, verify and write the games ``jobs`` (index, task type) under ``root``.

    Each game file is written atomically, then its manifest entry as
    ``<root>/.partial/<index>.json``. The engine is the environment's own (our
    :class:`~agent_envs.alfworld.engine.RestorablePddlEnv`, fresh-load equivalent to
    textworld's ``PddlEnv``), so a game is translated once.
    """
    verifier = Verifier(engine="restorable")
    entries: list[dict[str, Any]] = []
    partial = Path(root) / PARTIAL_DIR
    partial.mkdir(parents=True, exist_ok=True)
    try:
        for index, task_type in jobs:
            entry = _generate_one(Path(root), verifier, seed, index, task_type)
            _write_atomic(partial / f"{index}.json", json.dumps(entry) + "\n")
            entries.append(entry)
            if on_game is not None:
                on_game(len(entries))
    finally:
        verifier.close()
    return entries


def _generate_one(root: Path, verifier: Verifier, seed: int, index: int, task_type: str) -> dict[str, Any]:
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
            f"no verifiable {task_type} game for index {index} after {_MAX_VERIFY_TRIES} attempts"
        )
    text = json.dumps(built.game, indent=2) + "\n"
    rel = Path(folder) / "trial_0" / GAME_FILE_NAME
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(root / rel, text)
    return {
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

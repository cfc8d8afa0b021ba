"""Where ALFWorld games live, how tasks are named, and how the game set is installed.

Real games are found where ALFWorld's own tools put them: ``$ALFWORLD_DATA`` (default
``~/.cache/alfworld``), laid out as ``json_2.1.1/<split>/<task folder>/<trial>/game.tw-pddl``
with splits ``train`` (3553 games), ``valid_seen`` (140) and ``valid_unseen`` (134).

A *task id* is the game folder relative to its split, e.g.
``pick_two_obj_and_place-AlarmClock-None-Dresser-305/trial_T20190907_165826_194855``; a
split's tasks are sorted by id, so an integer index is stable.  The ``generated`` split lists
the games of :func:`agent_envs.alfworld.generator.ensure_generated` the same way.

Installing: :func:`install_from_archive` unpacks a local ``json_2.1.1`` tarball or zip, all or
nothing (verified in a staging folder, then swapped in by renames);
:func:`install_with_downloader` runs ALFWorld's official ``alfworld-download``;
:func:`verify_install` counts games per split and task type and parses every file.
:func:`list_tasks` refuses a split whose game count is not the one it was installed with
(:data:`INSTALL_RECORD`), or without a record, the official one (:data:`EXPECTED_COUNTS`).

Example:
    >>> split_dir("valid_seen", root="/data/alfworld").as_posix()
    '/data/alfworld/json_2.1.1/valid_seen'
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from agent_envs.alfworld.game import TASK_TYPES

__all__ = [
    "EXPECTED_COUNTS",
    "GAME_FILE",
    "INSTALL_RECORD",
    "REAL_SPLITS",
    "SPLITS",
    "DataNotFoundError",
    "InstallError",
    "SplitCountError",
    "UnpackLimits",
    "VerifyReport",
    "data_root",
    "install_from_archive",
    "install_with_downloader",
    "installed_count",
    "list_game_files",
    "list_tasks",
    "remove_stale_staging",
    "split_dir",
    "task_type_of",
    "task_walkthrough",
    "verify_install",
]

logger = logging.getLogger(__name__)

GAME_FILE = "game.tw-pddl"
DATASET_DIR = "json_2.1.1"
REAL_SPLITS: tuple[str, ...] = ("train", "valid_seen", "valid_unseen")
SPLITS: tuple[str, ...] = REAL_SPLITS + ("generated",)
#: Games per split in the official json_2.1.1 set (alfworld 0.4.x, ``game.tw-pddl`` files).
EXPECTED_COUNTS: dict[str, int] = {"train": 3553, "valid_seen": 140, "valid_unseen": 134}
#: Written into each split folder an install puts in place: the split's game count then.
INSTALL_RECORD = ".rubricgym-install.json"
#: Bounds on what an archive may unpack to (the official set: 3,827 games of at most 135 KB,
#: 312 MiB in all, 9,306 members).
MAX_MEMBER_BYTES = 64 << 20
MAX_TOTAL_BYTES = 4 << 30
MAX_MEMBERS = 200_000
STAGING_PREFIX = ".alfworld-unpack-"

INSTALL_HINT = (
    "install them with `rubricgym data alfworld` (downloads with ALFWorld's official "
    "`alfworld-download`), or offline `rubricgym data alfworld --from path/to/json_2.1.1.tar.xz`; "
    "or play the built-in generated games with split='generated'"
)


class DataNotFoundError(FileNotFoundError):
    """The real ALFWorld games are not installed; the message says which command fixes it."""


class InstallError(RuntimeError):
    """Installing the game set failed (download refused, bad archive, failed verification)."""


class SplitCountError(DataNotFoundError):
    """An installed split holds another number of games than it was installed with (or, with no
    install record, than the official set): its task indices would not name the same games."""


def cache_root() -> Path:
    """rubricgym's own cache folder: ``$RUBRICGYM_CACHE``, default ``~/.cache/rubricgym``
    (generated games, kept translations)."""
    return Path(os.environ.get("RUBRICGYM_CACHE") or Path.home() / ".cache" / "rubricgym").expanduser()


def data_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The ALFWorld data root: ``root`` if given, else ``$ALFWORLD_DATA``, else ``~/.cache/alfworld``."""
    if root is not None:
        return Path(root).expanduser()
    return Path(os.environ.get("ALFWORLD_DATA") or Path.home() / ".cache" / "alfworld").expanduser()


def split_dir(split: str, root: str | os.PathLike[str] | None = None) -> Path:
    """``<root>/json_2.1.1/<split>`` for a real split (the directory need not exist)."""
    if split not in REAL_SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; choose one of {', '.join(SPLITS)}")
    return data_root(root) / DATASET_DIR / split


def task_type_of(task_id: str) -> str | None:
    """The task type named by a task folder (``"pick_heat_then_place_in_recep-Apple-..."``), if any."""
    head = task_id.replace("\\", "/").split("/", 1)[0].split("-", 1)[0]
    return head if head in TASK_TYPES else None


@lru_cache(maxsize=32)
def _scan(directory: str, mtime_ns: int) -> tuple[str, ...]:
    base = Path(directory)
    found = []
    for dirpath, _dirnames, filenames in os.walk(base):
        if GAME_FILE in filenames:
            found.append(Path(dirpath).relative_to(base).as_posix())
    return tuple(sorted(found))


def list_game_files(directory: str | os.PathLike[str]) -> tuple[str, ...]:
    """Sorted task ids (folders holding a ``game.tw-pddl``) under ``directory``."""
    base = Path(directory)
    try:
        mtime = base.stat().st_mtime_ns
    except OSError:
        return ()
    return _scan(str(base.resolve()), mtime)


def list_tasks(
    split: str,
    root: str | os.PathLike[str] | None = None,
    task_types: Sequence[str] | None = None,
) -> list[str]:
    """Sorted task ids of a real split (optionally only some task types).

    Raises:
        DataNotFoundError: the split is not installed (the message says how to install it).
    """
    directory = split_dir(split, root)
    if not directory.is_dir():
        raise DataNotFoundError(f"ALFWorld split {split!r} not found at {directory}; {INSTALL_HINT}")
    tasks = list(list_game_files(directory))
    if not tasks:
        raise DataNotFoundError(f"no {GAME_FILE} files under {directory}; {INSTALL_HINT}")
    _check_count(split, directory, len(tasks))
    if task_types is not None:
        wanted = set(task_types)
        tasks = [t for t in tasks if task_type_of(t) in wanted]
    return tasks


def installed_count(directory: str | os.PathLike[str]) -> int | None:
    """The game count an install recorded in a split folder (``None``: no record there).

    Raises:
        SplitCountError: the record is unreadable (named).
    """
    path = Path(directory) / INSTALL_RECORD
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SplitCountError(f"cannot read the install record {path}: {exc}") from None
    try:
        games = json.loads(text)["games"]
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise SplitCountError(f"corrupt install record {path} ({type(exc).__name__}: {exc}); "
                              f"reinstall the split: {INSTALL_HINT}") from None
    if isinstance(games, bool) or not isinstance(games, int) or games < 1:
        raise SplitCountError(f"corrupt install record {path}: games={games!r}")
    return games


def _check_count(split: str, directory: Path, found: int) -> None:
    """Refuse a split whose game count is not the one it was installed with (or, with no
    install record, the official one): task ``i`` would silently be another game."""
    recorded = installed_count(directory)
    known = EXPECTED_COUNTS[split] if recorded is None else recorded
    if found == known:
        return
    why = (f"{known} were installed there" if recorded is not None
           else f"the official set has {known} (and no {INSTALL_RECORD} records another count)")
    raise SplitCountError(
        f"ALFWorld split {split!r} at {directory} holds {found} games, but {why}: the split is "
        f"incomplete or was changed, and task indices would not name the same games; reinstall "
        f"it with `rubricgym data alfworld` (or `--from ARCHIVE`; a deliberate subset with "
        f"`--from ARCHIVE --allow-partial`, which records its count)")


# ------------------------------------------------------------------------------------------
# Installing and verifying
# ------------------------------------------------------------------------------------------


@dataclass
class VerifyReport:
    """What :func:`verify_install` found.

    Attributes:
        root: The data root checked.
        counts: games per split.
        by_type: games per (split, task type).
        corrupt: ``(path, reason)`` of every file that failed to parse.
    """

    root: Path
    counts: dict[str, int] = field(default_factory=dict)
    by_type: dict[str, dict[str, int]] = field(default_factory=dict)
    corrupt: list[tuple[str, str]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every split has its official count and no file is corrupt."""
        return not self.corrupt and all(self.counts.get(s) == n for s, n in EXPECTED_COUNTS.items())

    def problems(self) -> list[str]:
        """Human-readable list of what is missing or wrong."""
        out = []
        for split, n in EXPECTED_COUNTS.items():
            got = self.counts.get(split, 0)
            if got != n:
                out.append(f"split {split}: {got} games, expected {n}")
        out += [f"corrupt game file {p}: {why}" for p, why in self.corrupt]
        return out


def verify_install(root: str | os.PathLike[str] | None = None, parse: bool = True) -> VerifyReport:
    """Count the games of every split under ``root`` and (``parse=True``) JSON-parse each one,
    checking it has the PDDL parts and a non-empty walkthrough."""
    base = data_root(root)
    report = VerifyReport(root=base)
    for split in REAL_SPLITS:
        _verify_split(report, split, split_dir(split, base), parse)
    return report


def _verify_split(report: VerifyReport, split: str, directory: Path, parse: bool) -> None:
    """Add one split folder's counts (and, ``parse=True``, its corrupt files) to ``report``."""
    tasks = list(_scan.__wrapped__(str(directory), 0)) if directory.is_dir() else []
    report.counts[split] = len(tasks)
    report.by_type[split] = dict(Counter(task_type_of(t) or "other" for t in tasks))
    if parse:
        for task in tasks:
            path = directory / task / GAME_FILE
            problem = _game_file_problem(path)
            if problem is not None:
                report.corrupt.append((str(path), problem))


def _game_file_problem(path: Path) -> str | None:
    """What is wrong with a game file (``None``: it parses and has its parts)."""
    if not path.is_file():  # a FIFO would block the read forever
        return "not a regular file"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        return f"not valid JSON ({type(exc).__name__}: {exc})"
    if not isinstance(data, dict):
        return "not a JSON object"
    missing = [k for k in ("pddl_domain", "grammar", "pddl_problem") if not data.get(k)]
    if missing:
        return f"missing {', '.join(missing)}"
    return None if data.get("walkthrough") else "no stored walkthrough"


def _tarfile() -> Any:
    """``tarfile`` with extraction filters: the standard library's (Python 3.10.12+, 3.11.4+,
    3.12+) or, on the patch releases before them (Debian 12's 3.11.2), the same module from PyPI
    (``backports.tarfile``, a dependency there)."""
    if hasattr(tarfile, "data_filter"):
        return tarfile
    from backports import tarfile as backport

    return backport


@dataclass(frozen=True)
class UnpackLimits:
    """Bounds on what an archive may unpack to (checked on the sizes its headers declare,
    before anything is written)."""

    member_bytes: int = MAX_MEMBER_BYTES
    total_bytes: int = MAX_TOTAL_BYTES
    members: int = MAX_MEMBERS

    def check(self, sizes: Sequence[tuple[str, int]], dest: Path) -> None:
        """Refuse an archive whose ``(name, size)`` members exceed a bound (or the free space)."""
        if len(sizes) > self.members:
            raise InstallError(f"refusing an archive of {len(sizes)} members (at most {self.members})")
        for name, size in sizes:
            if size > self.member_bytes:
                raise InstallError(f"refusing archive member {name!r}: it unpacks to {size} bytes "
                                   f"(at most {self.member_bytes} per member)")
        total = sum(size for _, size in sizes)
        if total > self.total_bytes:
            raise InstallError(f"refusing an archive that unpacks to {total} bytes (at most {self.total_bytes})")
        free = shutil.disk_usage(dest).free
        if total > free:
            raise InstallError(f"the archive unpacks to {total} bytes; {dest} has {free} free")


def _safe_members_tar(tar: Any, dest: Path, limits: UnpackLimits) -> list[Any]:
    """The members to extract: regular files and folders only (no links, devices or FIFOs),
    each passed through tarfile's ``data`` filter (no absolute paths, nothing outside
    ``dest``, no unsafe modes) and within ``limits``; anything else refuses the whole archive."""
    tar_module, members = _tarfile(), []
    for m in tar.getmembers():
        if not (m.isfile() or m.isdir()):
            kind = "link" if (m.issym() or m.islnk()) else "device, FIFO or other special file"
            raise InstallError(f"refusing unsafe archive member {m.name!r}: a {kind} (only files and folders)")
        try:
            tar_module.data_filter(m, str(dest))
        except tar_module.FilterError as exc:
            raise InstallError(f"refusing unsafe archive member {m.name!r}: {exc}") from None
        members.append(m)
        if len(members) > limits.members:
            break
    limits.check([(m.name, m.size) for m in members], dest)
    return members


def _unpack_zip(archive: Path, dest: Path, limits: UnpackLimits) -> None:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        for info in infos:
            if not (dest / info.filename).resolve().is_relative_to(dest.resolve()):
                raise InstallError(f"refusing unsafe archive member {info.filename!r}")
        # zipfile stops a member at its declared size (a longer stream fails its CRC)
        limits.check([(i.filename, i.file_size) for i in infos], dest)
        zf.extractall(dest)


def _unpack(archive: Path, dest: Path, limits: UnpackLimits) -> None:
    """Unpack ``archive`` into the empty folder ``dest`` (refusing unsafe or oversized members)."""
    try:
        if zipfile.is_zipfile(archive):
            _unpack_zip(archive, dest, limits)
        else:
            with _tarfile().open(archive) as tar:
                members = _safe_members_tar(tar, dest, limits)
                tar.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, _tarfile().TarError, zipfile.BadZipFile, OSError, EOFError) as exc:
        raise InstallError(f"cannot unpack {archive}: {exc}") from exc


def _staged_splits(archive: Path, unpacked: Path) -> list[Path]:
    """The split folders of an unpacked ``json_2.1.1/``; anything else in it refuses the archive."""
    if not unpacked.is_dir() or unpacked.is_symlink():
        raise InstallError(f"{archive} holds no top-level {DATASET_DIR}/ folder")
    splits = []
    for entry in sorted(unpacked.iterdir()):
        if entry.name not in REAL_SPLITS:
            raise InstallError(f"{archive}: unexpected {DATASET_DIR}/{entry.name} (a {DATASET_DIR}/ "
                               f"folder holds only the splits {', '.join(REAL_SPLITS)})")
        if not entry.is_dir() or entry.is_symlink():
            raise InstallError(f"{archive}: {DATASET_DIR}/{entry.name} is not a folder")
        splits.append(entry)
    if not splits:
        raise InstallError(f"{archive}: {DATASET_DIR}/ holds none of the splits {', '.join(REAL_SPLITS)}")
    return splits


def _verify_staged(archive: Path, splits: Sequence[Path], parse: bool, allow_partial: bool) -> VerifyReport:
    """Verify unpacked splits before they replace anything; raise naming every problem."""
    report = VerifyReport(root=splits[0].parent)
    for path in splits:
        _verify_split(report, path.name, path, parse)
    problems = [f"split {s}: no games" for s, n in report.counts.items() if n == 0]
    if not allow_partial:
        problems += [f"split {s}: {n} games, expected {EXPECTED_COUNTS[s]}"
                     for s, n in report.counts.items() if 0 < n != EXPECTED_COUNTS[s]]
    staging = splits[0].parent.parent
    problems += [f"corrupt game file {Path(p).relative_to(staging).as_posix()}: {why}" for p, why in report.corrupt]
    if problems:
        shown = "\n".join(f"  {p}" for p in problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        hint = "" if allow_partial else " (to install a deliberate subset: --allow-partial)"
        raise InstallError(f"{archive} failed verification; nothing was installed{hint}:\n{shown}{more}")
    return report


def _lock(fd: int, blocking: bool) -> bool:
    """An exclusive ``flock`` on ``fd``; ``False`` when another process holds it."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): treat every lock file as held
        return blocking
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def _staging(root: Path) -> Iterator[Path]:
    """A fresh staging folder in ``root``, held by a locked ``<folder>.lock`` file for as long
    as this install runs (the lock file exists and is locked before the folder does)."""
    while True:
        name = f"{STAGING_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        lock_path, folder = root / f"{name}.lock", root / name
        fd = os.open(lock_path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        _lock(fd, blocking=True)
        with contextlib.suppress(FileNotFoundError):  # else a cleaner took it before the lock
            if os.path.samestat(os.fstat(fd), os.stat(lock_path)):
                break
        os.close(fd)
    try:
        folder.mkdir()
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            lock_path.unlink()
        os.close(fd)


def remove_stale_staging(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the staging folders that killed installs left in ``root`` (those whose lock no
    live process holds), first moving back any split a killed swap had set aside.

    Returns:
        The folders removed.
    """
    base, removed = data_root(root), []
    for entry in sorted(base.glob(f"{STAGING_PREFIX}*")):
        if entry.name.endswith(".lock") or not entry.is_dir() or entry.is_symlink():
            continue
        lock_path = base / f"{entry.name}.lock"
        with _held_if_free(lock_path) as free:
            if not free:
                continue
            _restore_set_aside(entry, base / DATASET_DIR)
            shutil.rmtree(entry, ignore_errors=True)
            with contextlib.suppress(OSError):
                lock_path.unlink()
            removed.append(entry)
    for lock_path in base.glob(f"{STAGING_PREFIX}*.lock"):  # a lock whose folder never came
        with _held_if_free(lock_path) as free:
            if free and not lock_path.with_suffix("").exists():
                with contextlib.suppress(OSError):
                    lock_path.unlink()
    return removed


@contextlib.contextmanager
def _held_if_free(lock_path: Path) -> Iterator[bool]:
    """Lock ``lock_path`` for the block if no live process holds it (yields whether it was free;
    a missing lock file is free: a folder without one was left by an older install)."""
    try:
        fd = os.open(lock_path, os.O_RDWR)
    except FileNotFoundError:
        yield True
        return
    try:
        yield _lock(fd, blocking=False)
    finally:
        os.close(fd)


def _restore_set_aside(staging: Path, final: Path) -> None:
    """Put back a split that a swap killed between its two renames had set aside."""
    kept = staging / "previous"
    for old in sorted(kept.iterdir()) if kept.is_dir() else []:
        target = final / old.name
        if old.name in REAL_SPLITS and not target.exists() and not target.is_symlink():
            os.rename(old, target)
            logger.warning("restored the split %s that an interrupted install had set aside", target)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux ``renameat2(RENAME_EXCHANGE)``); ``False`` where the
    system or file system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # glibc before 2.28, musl
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap_in(new: Path, target: Path, set_aside: Path) -> None:
    """Put the folder ``new`` at ``target``.  The old ``target`` stays whole until the new one is
    in place: one atomic exchange where the system has it, else two renames, with the old one
    set aside at ``set_aside`` in between (put back on failure, or by the next install's
    :func:`remove_stale_staging` after a kill)."""
    if not target.exists() and not target.is_symlink():
        os.rename(new, target)
    elif not _exchange(new, target):
        set_aside.parent.mkdir(exist_ok=True)
        os.rename(target, set_aside)
        try:
            os.rename(new, target)
        except OSError:
            os.rename(set_aside, target)
            raise


def install_from_archive(
    archive: str | os.PathLike[str],
    dest: str | os.PathLike[str] | None = None,
    *,
    parse: bool = True,
    allow_partial: bool = False,
    limits: UnpackLimits | None = None,
) -> Path:
    """Unpack a ``json_2.1.1`` archive (``.tar.xz``/``.tar.gz``/``.tar``/``.zip``) into ``dest``,
    all or nothing.

    The archive must contain a top-level ``json_2.1.1/`` folder holding split folders (as
    ALFWorld's release and the project's offline copy do).  It is unpacked into a staging
    folder in ``dest`` and every split in it verified there (the official game count, unless
    ``allow_partial``; with ``parse``, every game file parses) before any installed split is
    touched.  Each verified split then replaces the installed one by a rename (the old one
    stays whole until the new one is in place) and records its game count
    (:data:`INSTALL_RECORD`), which :func:`list_tasks` checks.  Splits the archive lacks are
    left as they are.  A killed install leaves a staging folder and no partial split; the
    next install removes the folder.

    Returns:
        The data root (``dest``).

    Raises:
        FileNotFoundError: the archive does not exist.
        InstallError: unreadable archive, unsafe or oversized members, no ``json_2.1.1/``
            inside, or failed verification (nothing is installed then).
    """
    archive = Path(archive).expanduser()
    if not archive.is_file():
        raise FileNotFoundError(f"archive {archive} not found")
    root = data_root(dest)
    root.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(root)
    with _staging(root) as tmp:
        _unpack(archive, tmp, limits or UnpackLimits())
        splits = _staged_splits(archive, tmp / DATASET_DIR)
        report = _verify_staged(archive, splits, parse, allow_partial)
        final = root / DATASET_DIR
        final.mkdir(exist_ok=True)
        for path in splits:
            record = {"games": report.counts[path.name], "archive": archive.name}
            (path / INSTALL_RECORD).write_text(json.dumps(record) + "\n", encoding="utf-8")
        for path in splits:
            _swap_in(path, final / path.name, tmp / "previous" / path.name)
    _scan.cache_clear()
    return root


def _downloader() -> list[str]:
    exe = shutil.which("alfworld-download")
    if exe is not None:
        return [exe]
    # The console script of the alfworld wheel, run with this interpreter.
    candidate = Path(sys.executable).with_name("alfworld-download")
    if candidate.is_file():
        return [sys.executable, str(candidate)]
    raise InstallError(
        "ALFWorld's `alfworld-download` is not installed (pip install 'rubricgym[alfworld]'); "
        "or install from a local archive with `rubricgym data alfworld --from PATH`"
    )


def install_with_downloader(dest: str | os.PathLike[str] | None = None, timeout: float = 3600.0) -> Path:
    """Run ALFWorld's official ``alfworld-download --data-dir DEST``.

    Raises:
        InstallError: the downloader is missing or failed (no network, ...); the message
            suggests ``--from`` with a local archive.
    """
    root = data_root(dest)
    root.mkdir(parents=True, exist_ok=True)
    cmd = _downloader() + ["--data-dir", str(root)]
    env = dict(os.environ, ALFWORLD_DATA=str(root))
    logger.info("running %s", " ".join(cmd))
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InstallError(f"`alfworld-download` could not run: {exc}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-3:])
        raise InstallError(
            "`alfworld-download` failed (is the network reachable?):\n"
            f"{tail}\n"
            "Install from a local copy instead: `rubricgym data alfworld --from path/to/json_2.1.1.tar.xz`"
        )
    _scan.cache_clear()
    return root


def task_walkthrough(info: Mapping[str, Any]) -> list[str]:
    """The stored walkthrough (expert action list) of the task an ``info`` dict describes.

    ALFWorld games keep one in their ``game.tw-pddl``; ``info["task"]["gamefile"]`` names the
    file. Returns ``[]`` when the task has no game file (e.g. WebShop) or no walkthrough.

    Raises:
        ValueError: the game file exists but is not readable JSON (the message names it).

    Example:
        >>> task_walkthrough({"task": {"id": 3}})
        []
    """
    path = (info.get("task") or {}).get("gamefile")
    if not path or not os.path.isfile(str(path)):
        return []
    try:
        with open(str(path), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read the walkthrough of {path}: {exc}") from exc
    walk = data.get("walkthrough") if isinstance(data, Mapping) else None
    return [str(a) for a in walk] if isinstance(walk, list) else []

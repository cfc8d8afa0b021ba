"""Where ALFWorld games live, how tasks are named, and how the game set is installed.

Real games are found where ALFWorld's own tools put them: ``$ALFWORLD_DATA`` (default
``~/.cache/alfworld``), laid out as ``json_2.1.1/<split>/<task folder>/<trial>/game.tw-pddl``
with splits ``train`` (3553 games), ``valid_seen`` (140) and ``valid_unseen`` (134).

A *task id* is the game folder relative to its split, e.g.
``pick_two_obj_and_place-AlarmClock-None-Dresser-305/trial_T20190907_165826_194855``; a
split's tasks are sorted by id, so an integer index is stable.  The ``generated`` split lists
the games of :func:`agent_envs.alfworld.generator.ensure_generated` the same way.

Installing: :func:`install_from_archive` unpacks a local ``json_2.1.1`` tarball or zip;
:func:`install_with_downloader` runs ALFWorld's official ``alfworld-download``;
:func:`verify_install` counts games per split and task type and parses every file.

Example:
    >>> split_dir("valid_seen", root="/data/alfworld").as_posix()
    '/data/alfworld/json_2.1.1/valid_seen'
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from agent_envs.alfworld.game import TASK_TYPES

__all__ = [
    "EXPECTED_COUNTS",
    "GAME_FILE",
    "REAL_SPLITS",
    "SPLITS",
    "DataNotFoundError",
    "InstallError",
    "VerifyReport",
    "data_root",
    "install_from_archive",
    "install_with_downloader",
    "list_game_files",
    "list_tasks",
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

INSTALL_HINT = (
    "install them with `rubricgym data alfworld` (downloads with ALFWorld's official "
    "`alfworld-download`), or offline `rubricgym data alfworld --from path/to/json_2.1.1.tar.xz`; "
    "or play the built-in generated games with split='generated'"
)


class DataNotFoundError(FileNotFoundError):
    """The real ALFWorld games are not installed; the message says which command fixes it."""


class InstallError(RuntimeError):
    """Installing the game set failed (download refused, bad archive, failed verification)."""


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
    if task_types is not None:
        wanted = set(task_types)
        tasks = [t for t in tasks if task_type_of(t) in wanted]
    return tasks


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
        directory = split_dir(split, base)
        tasks = list(_scan.__wrapped__(str(directory), 0)) if directory.is_dir() else []
        report.counts[split] = len(tasks)
        report.by_type[split] = dict(Counter(task_type_of(t) or "other" for t in tasks))
        if not parse:
            continue
        for task in tasks:
            path = directory / task / GAME_FILE
            if not path.is_file():  # a FIFO would block the read forever
                report.corrupt.append((str(path), "not a regular file"))
                continue
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
                report.corrupt.append((str(path), f"not valid JSON ({type(exc).__name__}: {exc})"))
                continue
            if not isinstance(data, dict):
                report.corrupt.append((str(path), "not a JSON object"))
                continue
            missing = [k for k in ("pddl_domain", "grammar", "pddl_problem") if not data.get(k)]
            if missing:
                report.corrupt.append((str(path), f"missing {', '.join(missing)}"))
            elif not data.get("walkthrough"):
                report.corrupt.append((str(path), "no stored walkthrough"))
    return report


def _tarfile() -> Any:
    """``tarfile`` with extraction filters: the standard library's (Python 3.10.12+, 3.11.4+,
    3.12+) or, on the patch releases before them (Debian 12's 3.11.2), the same module from PyPI
    (``backports.tarfile``, a dependency there)."""
    if hasattr(tarfile, "data_filter"):
        return tarfile
    from backports import tarfile as backport

    return backport


def _safe_members_tar(tar: Any, dest: Path) -> list[Any]:
    """The members to extract: regular files and folders only (no links, devices or FIFOs),
    each passed through tarfile's ``data`` filter (no absolute paths, nothing outside
    ``dest``, no unsafe modes); anything else refuses the whole archive."""
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
    return members


def install_from_archive(archive: str | os.PathLike[str], dest: str | os.PathLike[str] | None = None) -> Path:
    """Unpack a ``json_2.1.1`` archive (``.tar.xz``/``.tar.gz``/``.tar``/``.zip``) into ``dest``.

    The archive must contain a top-level ``json_2.1.1/`` folder (as ALFWorld's release and
    the project's offline copy do).  Unpacks into a temporary folder beside ``dest`` and
    moves the split folders into place, so an interrupted install leaves nothing half-written.

    Returns:
        The data root (``dest``).

    Raises:
        FileNotFoundError: the archive does not exist.
        InstallError: unreadable archive, unsafe member paths, or no ``json_2.1.1/`` inside.
    """
    archive = Path(archive).expanduser()
    if not archive.is_file():
        raise FileNotFoundError(f"archive {archive} not found")
    root = data_root(dest)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".alfworld-unpack-", dir=root))
    try:
        try:
            if zipfile.is_zipfile(archive):
                with zipfile.ZipFile(archive) as zf:
                    for name in zf.namelist():
                        if not (tmp / name).resolve().is_relative_to(tmp.resolve()):
                            raise InstallError(f"refusing unsafe archive member {name!r}")
                    zf.extractall(tmp)
            else:
                with _tarfile().open(archive) as tar:
                    members = _safe_members_tar(tar, tmp)
                    tar.extractall(tmp, members=members, filter="data")
        except (tarfile.TarError, _tarfile().TarError, zipfile.BadZipFile, OSError, EOFError) as exc:
            raise InstallError(f"cannot unpack {archive}: {exc}") from exc
        unpacked = tmp / DATASET_DIR
        if not unpacked.is_dir():
            raise InstallError(f"{archive} holds no top-level {DATASET_DIR}/ folder")
        final = root / DATASET_DIR
        final.mkdir(exist_ok=True)
        for split_path in sorted(unpacked.iterdir()):
            target = final / split_path.name
            if target.exists():
                shutil.rmtree(target)
            os.replace(split_path, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
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

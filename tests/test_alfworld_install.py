"""``rubricgym data alfworld --from``: all or nothing, bounded, and a split's count checked where
it is used.

Archives here hold small made-up games (the install verifies counts and JSON parts, not the
games' content), each tagged with the archive it came from, so a test can tell an old split
from a new one.  Kills are real SIGKILLs of a real install, at chosen points.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_envs.alfworld import data
from trainers.cli import app

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _game(tag: str) -> bytes:
    return json.dumps({"pddl_domain": "d", "grammar": "g", "pddl_problem": tag, "walkthrough": ["look"]}).encode()


def _add(tar: tarfile.TarFile, name: str, body: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(body)
    tar.addfile(info, io.BytesIO(body))


def _archive(path: Path, counts: dict[str, int], tag: str, extra: dict[str, bytes] | None = None) -> Path:
    """A json_2.1.1 tarball with ``counts[split]`` games per split, each game tagged ``tag``."""
    with tarfile.open(path, "w") as tar:
        for split, n in counts.items():
            for i in range(n):
                _add(tar, f"json_2.1.1/{split}/pick_and_place_simple-X-{i:04d}/trial_1/game.tw-pddl", _game(tag))
        for name, body in (extra or {}).items():
            _add(tar, name, body)
    return path


def _tags(root: Path, split: str) -> list[str]:
    """The tag of every game of an installed split (checks the count on the way)."""
    base = data.split_dir(split, root)
    return [json.loads((base / t / data.GAME_FILE).read_text())["pddl_problem"] for t in data.list_tasks(split, root)]


SMALL = {"train": 3, "valid_seen": 2, "valid_unseen": 2}


@pytest.fixture
def installed(tmp_path) -> Path:
    """A data root holding a small partial set tagged "old"."""
    root = tmp_path / "root"
    data.install_from_archive(_archive(tmp_path / "old.tar", SMALL, "old"), root, allow_partial=True)
    return root


def _staging_left(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(data.STAGING_PREFIX))


@pytest.mark.parametrize("case", ["one-game split", "corrupt game", "a file named like a split", "unknown folder",
                                  "no splits"])
def test_a_bad_archive_leaves_the_installed_splits_untouched(tmp_path, installed, case):
    counts, extra = dict(SMALL), {}
    if case == "one-game split":
        counts["valid_seen"] = 1
    elif case == "corrupt game":
        extra = {"json_2.1.1/train/pick_and_place_simple-bad/trial_1/game.tw-pddl": b'{"pddl_domain": '}
    elif case == "a file named like a split":
        counts.pop("valid_unseen")
        extra = {"json_2.1.1/valid_unseen": b"not a folder"}
    elif case == "unknown folder":
        extra = {"json_2.1.1/test/x/game.tw-pddl": _game("new")}
    else:
        counts = {}
        extra = {"json_2.1.1/README": b"hi"}
    archive = _archive(tmp_path / "bad.tar", counts, "new", extra)
    result = runner.invoke(app, ["data", "alfworld", "--from", str(archive), "--dest", str(installed)])
    assert result.exit_code == 1, result.output
    message = " ".join(result.output.split())
    expected = {"one-game split": "split valid_seen: 1 games, expected 140",
                "corrupt game": "corrupt game file json_2.1.1/train/pick_and_place_simple-bad/trial_1/game.tw-pddl",
                "a file named like a split": "json_2.1.1/valid_unseen is not a folder",
                "unknown folder": "unexpected json_2.1.1/test",
                "no splits": "unexpected json_2.1.1/README"}[case]
    assert expected in message
    for split, n in SMALL.items():  # every installed split as it was (was: replaced, then refused)
        assert _tags(installed, split) == ["old"] * n
    assert _staging_left(installed) == []


def test_a_subset_without_allow_partial_replaces_nothing(tmp_path, installed):
    archive = _archive(tmp_path / "one.tar", {"valid_seen": 1}, "new")
    with pytest.raises(data.InstallError, match=r"nothing was installed \(to install a deliberate subset: "
                                                r"--allow-partial\):\n  split valid_seen: 1 games, expected 140"):
        data.install_from_archive(archive, installed)
    assert _tags(installed, "valid_seen") == ["old", "old"]


def test_splits_the_archive_lacks_are_kept(tmp_path, installed):
    data.install_from_archive(_archive(tmp_path / "vs.tar", {"valid_seen": 4}, "new"), installed, allow_partial=True)
    assert _tags(installed, "valid_seen") == ["new"] * 4
    assert _tags(installed, "train") == ["old"] * 3 and _tags(installed, "valid_unseen") == ["old"] * 2


# --- the count is checked where a split is used ------------------------------------------------


def test_a_split_that_lost_games_is_refused_where_it_is_used(installed):
    import shutil

    import gymnasium as gym

    import agent_envs  # noqa: F401  (registers the environments)

    games = data.split_dir("train", installed)
    victim = data.list_tasks("train", installed)[1]
    shutil.rmtree(games / victim.split("/")[0])  # as a kill mid-copy left `train` short
    with pytest.raises(data.SplitCountError, match=r"split 'train' at .* holds 2 games, but 3 were installed there"):
        data.list_tasks("train", installed)
    env = gym.make("ALFWorld-Rubric-v0", split="train", data_root=str(installed))
    try:  # was: task 1 silently became the game after it
        with pytest.raises(data.SplitCountError, match="task indices would not name the same games"):
            env.reset(options={"task": 1})
    finally:
        env.close()
    result = runner.invoke(app, ["alfworld-tasks", "--split", "train", "--data-root", str(installed)])
    assert result.exit_code == 1 and "holds 2 games, but 3 were installed" in " ".join(result.output.split())


def test_without_an_install_record_the_official_count_is_the_known_one(installed):
    (data.split_dir("valid_seen", installed) / data.INSTALL_RECORD).unlink()
    with pytest.raises(data.SplitCountError, match=r"holds 2 games, but the official set has 140"):
        data.list_tasks("valid_seen", installed)
    (data.split_dir("train", installed) / data.INSTALL_RECORD).write_text("{garbage")
    with pytest.raises(data.SplitCountError, match=r"corrupt install record .*\.rubricgym-install\.json"):
        data.list_tasks("train", installed)


# --- size bounds ------------------------------------------------------------------------------


def test_an_oversized_member_is_refused_before_it_is_written(tmp_path, installed):
    big = tmp_path / "big.tar.gz"
    with tarfile.open(big, "w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo("json_2.1.1/train/pick_and_place_simple-big/trial_1/game.tw-pddl")
        info.size = data.MAX_MEMBER_BYTES + 1

        class Zeros:
            def read(self, n: int) -> bytes:
                return bytes(n)

        tar.addfile(info, Zeros())
    assert big.stat().st_size < 1 << 20  # a small archive...
    with pytest.raises(data.InstallError, match=r"refusing archive member 'json_2\.1\.1/train/pick_and_place_simple-big"
                                                r"/trial_1/game\.tw-pddl': it unpacks to 67108865 bytes"):
        data.install_from_archive(big, installed, allow_partial=True)  # ...that would write 64 MiB
    assert _tags(installed, "train") == ["old"] * 3 and _staging_left(installed) == []


def test_total_size_and_zip_members_are_bounded(tmp_path):
    archive = _archive(tmp_path / "a.tar", SMALL, "new")
    with pytest.raises(data.InstallError, match=r"refusing an archive that unpacks to \d+ bytes \(at most 100\)"):
        data.install_from_archive(archive, tmp_path / "r", limits=data.UnpackLimits(total_bytes=100))
    with pytest.raises(data.InstallError, match=r"refusing an archive of \d+ members \(at most 5\)"):
        data.install_from_archive(archive, tmp_path / "r", limits=data.UnpackLimits(members=5))
    zipped = tmp_path / "a.zip"
    with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("json_2.1.1/valid_seen/pick_and_place_simple-z/trial_1/game.tw-pddl", _game("z") + b" " * 5000)
    with pytest.raises(data.InstallError, match=r"refusing archive member 'json_2\.1\.1/valid_seen/.*': it unpacks "
                                                r"to 5\d{3} bytes \(at most 1000 per member\)"):
        data.install_from_archive(zipped, tmp_path / "r", limits=data.UnpackLimits(member_bytes=1000))
    data.install_from_archive(zipped, tmp_path / "r", allow_partial=True)
    assert _tags(tmp_path / "r", "valid_seen") == ["z"]
    assert not (tmp_path / "r" / "json_2.1.1" / "train").exists()


# --- killed installs ---------------------------------------------------------------------------

_KILLED_INSTALL = r"""
import os, signal, sys
from agent_envs.alfworld import data

archive, root, point = sys.argv[1:4]

def die(*_a, **_k):
    os.kill(os.getpid(), signal.SIGKILL)

if point == "verify":       # unpacked into staging, nothing swapped yet
    data._verify_staged = die
elif point == "after-first-swap":
    real = data._swap_in
    def swap(*a):
        real(*a)
        die()
    data._swap_in = swap
elif point == "between-renames":  # no atomic exchange: killed with the old split set aside
    data._exchange = lambda a, b: False
    real_rename = os.rename
    def rename(src, dst):
        real_rename(src, dst)
        if "previous" in str(dst):
            die()
    os.rename = rename
data.install_from_archive(archive, root, allow_partial=True)
raise SystemExit("not killed")
"""


def _killed_install(archive: Path, root: Path, point: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-c", _KILLED_INSTALL, str(archive), str(root), point], env=env,
                          capture_output=True, check=False, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


@pytest.mark.parametrize("point", ["verify", "after-first-swap", "between-renames"])
def test_a_killed_install_leaves_no_partial_split_and_the_next_install_cleans_up(tmp_path, installed, point):
    new_counts = {"train": 5, "valid_seen": 4, "valid_unseen": 4}
    archive = _archive(tmp_path / "new.tar", new_counts, "new")
    _killed_install(archive, installed, point)
    assert len(_staging_left(installed)) == 2  # the folder and its lock file
    if point == "between-renames":
        assert not data.split_dir("train", installed).exists()  # set aside, not lost: see below
    else:
        for split, n in SMALL.items():  # each split whole: the old one or the new one, never a mix
            new = point == "after-first-swap" and split == "train"
            assert _tags(installed, split) == (["new"] * new_counts[split] if new else ["old"] * n)
    removed = data.remove_stale_staging(installed)  # what the next install does first
    assert len(removed) == 1 and _staging_left(installed) == []
    for split, n in SMALL.items():
        new = point == "after-first-swap" and split == "train"
        assert _tags(installed, split) == (["new"] * new_counts[split] if new else ["old"] * n)
    data.install_from_archive(archive, installed, allow_partial=True)
    assert all(_tags(installed, s) == ["new"] * n for s, n in new_counts.items())


_HOLDER = r"""
import sys, time
from pathlib import Path
from agent_envs.alfworld import data
with data._staging(Path(sys.argv[1])) as folder:
    print(folder, flush=True)
    time.sleep(120)
"""


def test_a_staging_folder_held_by_a_live_install_is_kept(tmp_path, installed):
    legacy = installed / ".alfworld-unpack-k2j4h1x9"  # what a killed install left before the locks
    (legacy / "json_2.1.1" / "train").mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(installed)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        live = Path(holder.stdout.readline().strip())
        assert live.is_dir()
        data.install_from_archive(_archive(tmp_path / "n.tar", {"valid_seen": 1}, "new"), installed, allow_partial=True)
        assert live.is_dir() and not legacy.exists()
        assert _staging_left(installed) == sorted([live.name, live.name + ".lock"])
    finally:
        holder.kill()
        holder.wait()
    assert [p.name for p in data.remove_stale_staging(installed)] == [live.name]
    assert _staging_left(installed) == []

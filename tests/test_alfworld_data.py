"""``rubricgym data alfworld``: install from an archive or the official downloader, and verify."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_envs.alfworld import data
from trainers.cli import app

runner = CliRunner()


def _out(result) -> str:
    """The command's output with rich's line wrapping undone."""
    return " ".join(result.output.split())


def _tiny_archive(alfworld_data: Path, tmp: Path, corrupt: bool = False) -> Path:
    """A json_2.1.1 tarball with the first two games of each real split (optionally one broken)."""
    src = tmp / "src" / "json_2.1.1"
    for split in data.REAL_SPLITS:
        for task in data.list_tasks(split, alfworld_data)[:2]:
            dst = src / split / task
            dst.mkdir(parents=True)
            shutil.copy(alfworld_data / "json_2.1.1" / split / task / "game.tw-pddl", dst / "game.tw-pddl")
    if corrupt:
        task = data.list_tasks("valid_seen", alfworld_data)[0]
        (src / "valid_seen" / task / "game.tw-pddl").write_text('{"pddl_domain": ')
    archive = tmp / "tiny.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(src, arcname="json_2.1.1")
    return archive


def test_install_from_archive_unpacks_and_verification_reports_counts(alfworld_data, tmp_path):
    archive = _tiny_archive(alfworld_data, tmp_path)
    dest = tmp_path / "root"
    result = runner.invoke(app, ["data", "alfworld", "--from", str(archive), "--dest", str(dest)])
    # Two games per split is not the official set: the command says so, fails, installs nothing.
    assert result.exit_code == 1, result.output
    assert "split valid_seen: 2 games, expected 140" in _out(result) and "nothing was installed" in _out(result)
    assert not (dest / "json_2.1.1" / "valid_seen").exists()
    # a deliberate subset: installed, its count recorded
    result = runner.invoke(app, ["data", "alfworld", "--from", str(archive), "--dest", str(dest), "--allow-partial"])
    assert result.exit_code == 0, result.output
    assert "a partial set, as asked" in _out(result)
    assert data.list_tasks("valid_unseen", dest) == data.list_tasks("valid_unseen", alfworld_data)[:2]
    report = data.verify_install(dest)
    assert report.counts == {"train": 2, "valid_seen": 2, "valid_unseen": 2} and not report.corrupt
    assert data.installed_count(dest / "json_2.1.1" / "train") == 2
    assert not list(dest.glob(".alfworld-unpack-*"))  # the staging folder and its lock are gone


def test_corrupt_game_files_are_named(alfworld_data, tmp_path):
    archive = _tiny_archive(alfworld_data, tmp_path, corrupt=True)
    dest = tmp_path / "root"
    result = runner.invoke(app, ["data", "alfworld", "--from", str(archive), "--dest", str(dest), "--allow-partial"])
    assert result.exit_code == 1
    bad = f"json_2.1.1/valid_seen/{data.list_tasks('valid_seen', alfworld_data)[0]}/game.tw-pddl"
    assert f"corrupt game file {bad}: not valid JSON" in _out(result)
    assert not (dest / "json_2.1.1" / "train").exists()  # nothing installed, not even the good splits


@pytest.fixture(params=["stdlib", "no-filters"])
def tar_filters(request, monkeypatch):
    """Each archive test twice: with this Python's tarfile, and as on a Python without its
    extraction filters (before 3.10.12 / 3.11.4, e.g. Debian 12's 3.11.2), where the install
    uses ``backports.tarfile``."""
    if request.param == "no-filters":
        pytest.importorskip("backports.tarfile", reason="pip install backports.tarfile (the dev extra has it)")
        for name in ("data_filter", "FilterError"):
            monkeypatch.delattr(tarfile, name, raising=False)
    return request.param


def test_bad_sources_give_clear_errors(tmp_path, tar_filters):
    result = runner.invoke(app, ["data", "alfworld", "--from", str(tmp_path / "nope.tar.xz"), "--dest", str(tmp_path)])
    assert result.exit_code == 1 and "not found" in _out(result)
    junk = tmp_path / "junk.tar.xz"
    junk.write_bytes(b"not an archive")
    result = runner.invoke(app, ["data", "alfworld", "--from", str(junk), "--dest", str(tmp_path / "r")])
    assert result.exit_code == 1 and "cannot unpack" in _out(result)
    other = tmp_path / "other.tar.gz"
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "a.txt").write_text("hi")
    with tarfile.open(other, "w:gz") as tar:
        tar.add(tmp_path / "x", arcname="x")
    result = runner.invoke(app, ["data", "alfworld", "--from", str(other), "--dest", str(tmp_path / "r")])
    assert result.exit_code == 1 and "no top-level json_2.1.1/" in _out(result)


def test_official_downloader_failure_suggests_from(tmp_path, monkeypatch):
    # The real alfworld-download, with every HTTPS request sent to a closed local port.
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    result = runner.invoke(app, ["data", "alfworld", "--dest", str(tmp_path / "dl")])
    assert result.exit_code == 1, result.output
    assert "alfworld-download" in _out(result) and "--from" in _out(result)


def test_alfworld_tasks_lists_indices(alfworld_data):
    result = runner.invoke(app, ["alfworld-tasks", "--split", "valid_seen", "--data-root", str(alfworld_data)])
    assert result.exit_code == 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 140 and lines[0] == f"0\t{data.list_tasks('valid_seen', alfworld_data)[0]}"
    result = runner.invoke(app, ["alfworld-tasks", "--split", "train", "--data-root", "/nonexistent"])
    assert result.exit_code == 1 and "rubricgym data alfworld" in _out(result)


@pytest.mark.slow
def test_install_the_full_offline_archive(tmp_path, shared_data):
    archive = shared_data / "alfworld" / "json_2.1.1.tar.xz"
    if not archive.is_file():
        pytest.skip(
            f"the offline ALFWorld archive {archive} is not here; this test installs from it: "
            "put ALFWorld's json_2.1.1 archive (a .tar.xz or .zip) at that path, or point "
            "RUBRICGYM_SHARED at a folder holding data/alfworld/json_2.1.1.tar.xz"
        )
    result = runner.invoke(app, ["data", "alfworld", "--from", str(archive), "--dest", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = data.verify_install(tmp_path)
    assert report.complete and report.counts == data.EXPECTED_COUNTS
    # per task type (look/pick/clean/cool/heat/pick_two), as published with the data set
    assert report.by_type["valid_seen"] == {
        "look_at_obj_in_light": 13, "pick_and_place_simple": 35, "pick_clean_then_place_in_recep": 27,
        "pick_cool_then_place_in_recep": 25, "pick_heat_then_place_in_recep": 16, "pick_two_obj_and_place": 24,
    }
    game = json.loads(next((tmp_path / "json_2.1.1" / "valid_unseen").rglob("game.tw-pddl")).read_text())
    assert set(game) >= {"pddl_domain", "grammar", "pddl_problem", "walkthrough"}


def _tar_with(path: Path, *members: tarfile.TarInfo) -> Path:
    with tarfile.open(path, "w") as tar:
        game = tarfile.TarInfo("json_2.1.1/valid_seen/t/trial/game.tw-pddl")
        body = b'{"pddl_domain": "d", "grammar": "g", "pddl_problem": "p", "walkthrough": ["look"]}'
        game.size = len(body)
        import io

        tar.addfile(game, io.BytesIO(body))
        for m in members:
            tar.addfile(m)
    return path


@pytest.mark.parametrize("kind", [tarfile.FIFOTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.SYMTYPE])
def test_a_hostile_archive_installs_nothing(tmp_path, kind, tar_filters):
    """Device nodes, FIFOs and links are refused (a FIFO shipped as a game file hung both
    `data alfworld --from` and reset), and nothing is left in the data folder."""
    member = tarfile.TarInfo("json_2.1.1/valid_seen/t2/trial/game.tw-pddl")
    member.type = kind
    if kind == tarfile.SYMTYPE:
        member.linkname = "/etc/passwd"
    archive = _tar_with(tmp_path / "bad.tar", member)
    dest = tmp_path / "root"
    with pytest.raises(data.InstallError, match="refusing unsafe archive member"):
        data.install_from_archive(archive, dest)
    assert not (dest / "json_2.1.1").exists() and not any(p.name.startswith(".alfworld-unpack") for p in dest.iterdir())


def test_paths_that_leave_the_folder_are_refused(tmp_path, tar_filters):
    for name in ("../evil.txt", "json_2.1.1/../../evil.txt"):
        member = tarfile.TarInfo(name)
        archive = _tar_with(tmp_path / "bad.tar", member)
        with pytest.raises(data.InstallError, match="refusing unsafe archive member"):
            data.install_from_archive(archive, tmp_path / "root")
    assert not (tmp_path / "evil.txt").exists()
    # an absolute name is made relative by the data filter: it lands inside the unpack folder
    target = tmp_path / "abs" / "evil.txt"
    archive = _tar_with(tmp_path / "abs.tar", tarfile.TarInfo(str(target)))
    data.install_from_archive(archive, tmp_path / "root", allow_partial=True)
    assert not target.exists()


def test_a_fifo_or_deeply_nested_game_file_is_a_named_error_not_a_hang(tmp_path):
    import os

    from agent_envs.alfworld.engine import GameFileError, read_game_file

    fifo = tmp_path / "game.tw-pddl"
    os.mkfifo(fifo)
    with pytest.raises(GameFileError, match="not a regular file"):
        read_game_file(fifo)
    deep = tmp_path / "deep.tw-pddl"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(GameFileError, match=r"corrupt ALFWorld game file .*deep\.tw-pddl.*RecursionError"):
        read_game_file(deep)

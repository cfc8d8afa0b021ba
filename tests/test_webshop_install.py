"""``rubricgym data webshop --from DIR``: never writes through a link in ``--dest``, and an
install that dies mid-copy leaves no partial file under a final name.

The files are a generated catalogue (``--no-verify``: they have no published sha256); the
deaths are real: a child process stopped by the kernel at a file-size limit (RLIMIT_FSIZE),
once killed outright by SIGXFSZ as a SIGKILL would, once failing the write as a full disk does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainers.cli import app

REPO = Path(__file__).resolve().parents[1]
NAMES = ("items_shuffle.json", "items_ins_v2.json", "items_human_ins.json")
runner = CliRunner()


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gen")
    res = runner.invoke(app, ["data", "generate-webshop", "--out", str(out), "--num-products", "60"])
    assert res.exit_code == 0, res.output
    return out


def _install(source: Path, dest: Path):
    return runner.invoke(app, ["data", "webshop", "--from", str(source), "--dest", str(dest), "--no-verify"])


def test_a_link_in_dest_is_replaced_not_written_through(tmp_path, source):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "items_human_ins.json").symlink_to(victim)
    (dest / "items_shuffle.json").symlink_to(source / "items_shuffle.json")  # a link to the source itself
    res = _install(source, dest)
    assert res.exit_code == 0, res.output
    assert victim.read_text() == "keep me"  # was: overwritten with the instructions file
    for name in NAMES:
        assert not (dest / name).is_symlink() and (dest / name).read_bytes() == (source / name).read_bytes()
    assert sorted(p.name for p in dest.iterdir()) == sorted(NAMES)  # no temporary file left


def test_installing_a_folder_onto_itself_keeps_the_files(source):
    before = {n: (source / n).read_bytes() for n in NAMES}
    assert _install(source, source).exit_code == 0
    assert {n: (source / n).read_bytes() for n in NAMES} == before


_LIMITED = r"""
import resource, signal, sys
from trainers.cli import app   # every import before the limit
import agent_envs.webshop.catalogue, agent_envs.webshop.cli, rich.console, hashlib, tempfile
src, dest, how = sys.argv[1:4]
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
if how == "killed":   # die at the limit as from a SIGKILL: no handler, no finally
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
limit = int(sys.argv[4])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
app(["data", "webshop", "--from", src, "--dest", dest, "--no-verify"])
"""


@pytest.mark.parametrize("how", ["killed", "write error"])
def test_an_install_that_dies_mid_copy_leaves_no_partial_file(tmp_path, source, how):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "items_human_ins.json").write_text('{"old": []}')  # a previous install's file
    limit = (source / "items_shuffle.json").stat().st_size // 2  # the first file dies half-way
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-c", _LIMITED, str(source), str(dest), how, str(limit)],
                          env=env, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    if how == "killed":
        assert proc.returncode == -signal.SIGXFSZ, proc.stderr
    else:
        assert proc.returncode == 1 and "File too large" in " ".join(proc.stdout.split()), proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr
    finals = sorted(p.name for p in dest.iterdir() if not p.name.startswith("."))
    assert finals == ["items_human_ins.json"]  # was: a half-written items_shuffle.json
    assert (dest / "items_human_ins.json").read_text() == '{"old": []}'
    if how == "write error":  # the temporary file is removed too
        assert sorted(p.name for p in dest.iterdir()) == ["items_human_ins.json"]


def test_a_file_changed_after_its_check_is_not_installed(tmp_path, source, monkeypatch):
    """The copy's own sha256 must be the one verified (a file replaced between the check and
    the copy is refused, and nothing is installed)."""
    from agent_envs.webshop import catalogue

    monkeypatch.setattr(catalogue, "verify_files", lambda paths, strict=True: {p.name: "0" * 64 for p in paths})
    dest = tmp_path / "dest"
    res = runner.invoke(app, ["data", "webshop", "--from", str(source), "--dest", str(dest)])
    assert res.exit_code == 1 and "changed while it was installed" in " ".join(res.output.split())
    assert list(dest.iterdir()) == []

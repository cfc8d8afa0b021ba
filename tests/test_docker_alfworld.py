"""The ALFWorld server image (docker/alfworld/Dockerfile), built and served for real.

As tests/test_docker_image.py does for the WebShop image: ``docker/alfworld/build_local.sh``
builds the image with buildah on the local stand-in for ``python:3.11-slim-bookworm``; here its
command runs from its root filesystem (``buildah mount``) as the image's user, as PID 1 of new
PID, mount and network namespaces, on a read-only root with a tmpfs /tmp (compose.yaml's
``read_only`` + ``tmpfs``).  OpenEnv's client, run from the image (it holds the client too),
joins the server's network namespace and plays a won episode; ``$ALFWORLD_DATA`` is mounted
read-only for the real splits.

Needs root, buildah and the built image; otherwise every test skips with the commands that
provide them (under ``RUBRICGYM_STRICT_SKIPS=1``, as in CI, the skip is a failure).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.docker]

IMAGE = os.environ.get("RUBRICGYM_ALFWORLD_IMAGE", "localhost/rubricgym-alfworld:ci")
HOW = ("apt-get install -y buildah debootstrap iproute2 && bash docker/alfworld/build_local.sh "
       "(as root; the stand-in base 2-7 min once, the image several minutes: it compiles ALFWorld's planner)")
TOOLS = ("buildah", "chroot", "unshare", "nsenter", "ip")
START_TIMEOUT_S = 300

#: PID 1 of the namespaces: read-only root, tmpfs /tmp, /proc; $2 (if not empty) is bind-mounted
#: read-only at the image's /data/alfworld.
CONTAINER_SH = """set -e
ip link set lo up
root=$1; data=$2; shift 2
mount --bind "$root" "$root"
if [ -n "$data" ]; then mount --bind "$data" "$root/data/alfworld"; mount -o remount,bind,ro "$root/data/alfworld"; fi
mount -o remount,bind,ro "$root"
mount -t tmpfs -o size=64m,mode=1777 tmpfs "$root/tmp"
mount -t proc proc "$root/proc"
exec "$@"
"""

#: A walkthrough replayed through OpenEnv's client against the server (argv: task, split).
EPISODE = r"""
import json, sys
from agent_envs.alfworld.data import task_walkthrough
from agent_envs.serving.client import RubricEnvClient, reset_tuple, step_tuple
with RubricEnvClient(base_url="http://127.0.0.1:8000").sync() as client:
    obs, info = reset_tuple(client.reset(seed=0, options={"task": int(sys.argv[1])}))
    walk = task_walkthrough(info)
    assert walk, f"no walkthrough readable at {info['task'].get('gamefile')}"
    for action in walk:
        obs, reward, terminated, truncated, info = step_tuple(client.step(action))
print(json.dumps({"steps": len(walk), "reward": reward, "won": info["won"], "split": info["task"].get("split")}))
"""


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)


def _image_config() -> dict:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing or os.geteuid() != 0:
        pytest.skip(f"needs root and {', '.join(missing) or 'the tools'}: {HOW}")
    out = _run(["buildah", "inspect", "--type", "image", IMAGE])
    if out.returncode != 0:
        pytest.skip(f"image {IMAGE} not built: {HOW}")
    return json.loads(out.stdout)["Docker"]["config"]


class Box:
    """The image's root filesystem mounted; its command run as its user in new namespaces."""

    def __init__(self, config: dict, env: tuple[str, ...] = (), data: str = "") -> None:
        self.config, self.data = config, data
        self.ctr = _run(["buildah", "from", "--pull=never", IMAGE]).stdout.strip()
        self.rootfs = Path(_run(["buildah", "mount", self.ctr]).stdout.strip())
        user = config["User"]
        entry = next(ln.split(":") for ln in (self.rootfs / "etc/passwd").read_text().splitlines()
                     if user in ln.split(":")[:3:2])
        self.uid, self.gid, home = int(entry[2]), int(entry[3]), entry[5]
        self.env = [*(config.get("Env") or []), f"HOME={home}", *env]
        self.proc: subprocess.Popen | None = None

    def in_image(self, argv: list[str]) -> list[str]:
        return ["chroot", f"--userspec={self.uid}:{self.gid}", str(self.rootfs), "env", "-i", *self.env,
                "sh", "-c", 'cd "$0" && exec "$@"', self.config.get("WorkingDir") or "/", *argv]

    def start(self, log: Path) -> None:
        cmd = [*(self.config.get("Entrypoint") or []), *self.config["Cmd"]]
        with open(log, "w") as fh:
            self.proc = subprocess.Popen(["unshare", "--net", "--pid", "--fork", "--mount-proc", "sh", "-c",
                                          CONTAINER_SH, "sh", str(self.rootfs), self.data, *self.in_image(cmd)],
                                         stdout=fh, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        probe = "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=5)"
        while time.monotonic() < deadline and self.proc.poll() is None:
            if self.netns(self.in_image(["python", "-c", probe]), timeout=60).returncode == 0:
                return
            time.sleep(2)
        raise AssertionError(f"the server did not answer /health:\n{log.read_text()[-3000:]}")

    @property
    def pid1(self) -> int:
        kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        return int(kids[0])

    def netns(self, argv: list[str], timeout: float = 300, mounts: bool = False) -> subprocess.CompletedProcess:
        """``argv`` in the server's network namespace (``mounts``: and its mount namespace, where
        the data mount and the read-only root are)."""
        ns = [f"--net=/proc/{self.proc.pid}/ns/net", *([f"--mount=/proc/{self.proc.pid}/ns/mnt"] if mounts else [])]
        return _run(["nsenter", *ns, *argv], timeout=timeout)

    def stop(self) -> int:
        """SIGTERM to PID 1 (docker stop); its exit status (SIGKILL after 60 s)."""
        try:
            os.kill(self.pid1, signal.SIGTERM)
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(self.pid1, signal.SIGKILL)
            self.proc.wait(timeout=30)
            return -9

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
        _run(["buildah", "umount", self.ctr])
        _run(["buildah", "rm", self.ctr])


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    b = Box(_image_config())
    b.log = tmp_path_factory.mktemp("alfworld-image") / "server.log"
    try:
        b.start(b.log)
        yield b
    finally:
        b.close()


def test_image_serves_as_its_own_user_on_a_read_only_root(box):
    cfg = box.config
    assert cfg["User"] == "alfworld" and box.uid == 10001
    assert cfg["Cmd"][:3] == ["rubricgym", "serve", "ALFWorld-Rubric-v0"]
    assert "/health" in " ".join(cfg["Healthcheck"]["Test"])
    status = Path(f"/proc/{box.pid1}/status").read_text().splitlines()
    assert set(next(ln for ln in status if ln.startswith("Uid:")).split()[1:]) == {"10001"}
    assert next(ln for ln in status if ln.startswith("NSpid:")).split()[-1] == "1"
    mounts = Path(f"/proc/{box.pid1}/mounts").read_text().splitlines()
    root = next(ln.split() for ln in mounts if ln.split()[1] == "/")
    assert "ro" in root[3].split(",")
    found = _run(["find", str(box.rootfs), "-xdev", "-perm", "/6000", "-type", "f"])
    assert found.stdout.strip() == ""  # no setuid/setgid file
    probe = "import importlib.util as u; print([m for m in ('matplotlib', 'scipy', 'torch') if u.find_spec(m)])"
    assert _run(box.in_image(["python", "-c", probe]), timeout=120).stdout.strip() == "[]"


def test_openenv_client_wins_a_generated_game_through_the_image(box):
    out = box.netns(box.in_image(["python", "-c", EPISODE, "3"]))
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert (got["reward"], got["won"], got["split"]) == (10.0, True, "generated") and got["steps"] >= 2


def test_real_split_from_a_read_only_alfworld_data_mount(alfworld_data, tmp_path):
    b = Box(_image_config(), env=('RUBRICGYM_SERVE_KWARGS={"split": "valid_seen"}',), data=str(alfworld_data))
    try:
        b.start(tmp_path / "server.log")
        out = b.netns(b.in_image(["python", "-c", EPISODE, "0"]), mounts=True)  # the client reads the game file
        assert out.returncode == 0, out.stderr[-3000:]
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert (got["won"], got["split"]) == (True, "valid_seen")
    finally:
        b.close()


def test_sigterm_to_pid_1_exits_0(tmp_path):
    b = Box(_image_config())
    log = tmp_path / "server.log"
    try:
        b.start(log)
        assert b.stop() == 0, log.read_text()[-2000:]
    finally:
        b.close()

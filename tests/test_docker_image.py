"""The WebShop Docker image (docker/webshop/Dockerfile), built and served for real.

No Docker engine is needed: ``docker/webshop/build_local.sh`` builds the image with buildah
(chroot isolation) on a local stand-in for ``python:3.11-slim``.  Here the image's command runs
from its root filesystem (``buildah mount``) as the image's user (``chroot --userspec``), with
the image's environment and working directory, in a private network namespace
(``unshare --net``), so it listens on 0.0.0.0:3000 exactly as in a container and clashes with
no port of the host.  Clients (``/healthz``, the image's HEALTHCHECK command, one
``WebShop-Rubric-v0(server_url=...)`` episode) join that namespace with ``nsenter``.

Needs root, buildah and the built image; otherwise every test skips with the commands that
provide them (under ``RUBRICGYM_STRICT_SKIPS=1``, as in CI, the skip is a failure).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[1]
IMAGE = os.environ.get("RUBRICGYM_DOCKER_IMAGE", "localhost/rubricgym-webshop:ci")
HOW = ("apt-get install -y buildah debootstrap iproute2 && bash docker/webshop/build_local.sh "
       "(as root; the base 2-7 min once, the image 1-4 min)")
TOOLS = ("buildah", "chroot", "unshare", "nsenter", "ip")
START_TIMEOUT_S = 300  # spaCy and the 1000-product catalogue load on 2 busy cores


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)


def _image_config() -> dict:
    """The image's Docker config (User, Env, WorkingDir, Cmd, Healthcheck); skips when absent."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing or os.geteuid() != 0:
        pytest.skip(f"needs root and {', '.join(missing) or 'the tools'}: {HOW}")
    out = _run(["buildah", "inspect", "--type", "image", IMAGE])
    if out.returncode != 0:
        pytest.skip(f"image {IMAGE} not built: {HOW}")
    return json.loads(out.stdout)["Docker"]["config"]


def _passwd_entry(rootfs: Path, user: str) -> tuple[int, int, str]:
    """uid, gid and home of ``user`` (a name or a uid) in the image's /etc/passwd."""
    for line in (rootfs / "etc/passwd").read_text().splitlines():
        name, _pw, uid, gid, _gecos, home, _shell = line.split(":")
        if user in (name, uid):
            return int(uid), int(gid), home
    raise AssertionError(f"user {user!r} not in the image's /etc/passwd")


class Container:
    """The image's root filesystem mounted, and its command run as the image's user."""

    def __init__(self, config: dict) -> None:
        self.config = config
        self.ctr = _run(["buildah", "from", "--pull=never", IMAGE]).stdout.strip()
        assert self.ctr, f"buildah from {IMAGE} failed"
        self.rootfs = Path(_run(["buildah", "mount", self.ctr]).stdout.strip())
        self.uid, self.gid, home = _passwd_entry(self.rootfs, config["User"])
        env = list(config.get("Env") or [])
        if not any(e.startswith("HOME=") for e in env):
            env.append(f"HOME={home}")  # what Docker sets from /etc/passwd
        self.env = env
        self.proc: subprocess.Popen | None = None

    def in_image(self, argv: list[str]) -> list[str]:
        """``argv`` run in the image: chroot as its user, its env only, in its working dir."""
        return ["chroot", f"--userspec={self.uid}:{self.gid}", str(self.rootfs), "env", "-i", *self.env,
                "sh", "-c", 'cd "$0" && exec "$@"', self.config.get("WorkingDir") or "/", *argv]

    def start(self, log: Path) -> None:
        cmd = [*(self.config.get("Entrypoint") or []), *self.config["Cmd"]]
        with open(log, "w") as fh:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *self.in_image(cmd)],
                stdout=fh, stderr=subprocess.STDOUT)

    def netns(self, argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
        """``argv`` (a host command) in the server's network namespace."""
        assert self.proc is not None
        return _run(["nsenter", f"--net=/proc/{self.proc.pid}/ns/net", *argv], timeout=timeout, cwd=REPO)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        _run(["buildah", "umount", self.ctr])
        _run(["buildah", "rm", self.ctr])


HEALTHZ = ("import json, urllib.request; "
           "print(json.dumps(json.load(urllib.request.urlopen('http://127.0.0.1:3000/healthz', timeout=5))))")


@pytest.fixture(scope="module")
def container(tmp_path_factory):
    box = Container(_image_config())
    log = tmp_path_factory.mktemp("docker") / "server.log"
    try:
        box.start(log)
        deadline, out = time.monotonic() + START_TIMEOUT_S, None
        while time.monotonic() < deadline and box.proc.poll() is None:
            out = box.netns([sys.executable, "-c", HEALTHZ], timeout=30)
            if out.returncode == 0:
                break
            time.sleep(2)
        assert out is not None and out.returncode == 0, f"server did not answer /healthz:\n{log.read_text()[-3000:]}"
        box.healthz = json.loads(out.stdout)
        yield box
    finally:
        box.close()


def test_image_serves_healthz_as_its_own_user(container):
    """The image's command answers /healthz with the generated 1000-product catalogue and the
    spaCy tagger, from a process running as the image's (non-root) user."""
    cfg = container.config
    assert cfg["User"] == "shop" and cfg["Cmd"][:3] == ["rubricgym", "webshop", "serve"]
    assert container.uid == 10001
    uids = next(ln.split()[1:] for ln in Path(f"/proc/{container.proc.pid}/status").read_text().splitlines()
                if ln.startswith("Uid:"))
    assert set(uids) == {"10001"}
    h = container.healthz
    assert (h["status"], h["products"]) == ("ok", 1000)
    assert h["tagger"].startswith("spacy-3.8") and "en_core_web_sm" in h["tagger"]
    # the build-time check installed the package system-wide, where the image's PATH finds it
    assert (container.rootfs / "usr/local/bin/rubricgym").exists()


def test_image_healthcheck_command_passes_and_fails_without_a_server(container):
    """The HEALTHCHECK exits 0 against the running server and non-zero where none listens."""
    test = container.config["Healthcheck"]["Test"]
    assert test[0] == "CMD" and "/healthz" in " ".join(test)
    check = container.in_image(test[1:])
    ok = container.netns(check, timeout=60)
    assert ok.returncode == 0, ok.stderr
    # A fresh network namespace has no server on 127.0.0.1:3000: the same command must fail.
    down = _run(["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *check], timeout=60)
    assert down.returncode != 0 and "Connection refused" in down.stderr


EPISODE = r"""
import json, sys
import gymnasium as gym, agent_envs
from agent_envs.webshop.oracle import oracle_action

def play(**kw):
    env = gym.make("WebShop-Rubric-v0", catalogue="generated", num_products=1000, tagger="spacy", **kw)
    obs, info = env.reset(options={"task": int(sys.argv[1])})
    trace, done = [obs], False
    while not done:
        obs, r, term, trunc, info = env.step(oracle_action(env.unwrapped))
        trace.append([obs, r])
        done = term or trunc
    env.close()
    return {"trace": trace, "reward": r, "score": info["score"], "won": info["won"], "steps": len(trace) - 1}

print(json.dumps({"server": play(server_url="http://127.0.0.1:3000"), "embedded": play()}))
"""


@pytest.mark.parametrize("task", [0, 7])
def test_one_episode_through_server_url_matches_the_embedded_shop(container, task):
    """An oracle episode played against the image scores 1.0 (reward 10) in a few steps, with
    the same observations and rewards as the embedded shop on the same goal."""
    out = container.netns([sys.executable, "-c", EPISODE, str(task)], timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    srv, emb = got["server"], got["embedded"]
    assert (srv["reward"], srv["score"], srv["won"]) == (10.0, 1.0, True)
    assert 3 <= srv["steps"] <= 15
    assert srv["trace"] == emb["trace"]

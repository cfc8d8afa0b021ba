"""The WebShop Docker image (docker/webshop/Dockerfile), built and served for real.

No Docker engine is needed: ``docker/webshop/build_local.sh`` builds the image with buildah
(chroot isolation) on a local stand-in for ``python:3.11-slim-bookworm``.  Here the image's
command runs from its root filesystem (``buildah mount``) as the image's user
(``chroot --userspec``), with the image's environment and working directory, as compose.yaml
runs it: PID 1 of a new PID namespace (Docker's situation: no default SIGTERM action), a
read-only root with a tmpfs on /tmp, and a private network namespace (``unshare --net --pid
--fork --mount-proc``), so it listens on 0.0.0.0:3000 exactly as in a container and clashes
with no port of the host.  Clients (``/healthz``, the image's HEALTHCHECK command, one
``WebShop-Rubric-v0(server_url=...)`` episode) join that network namespace with ``nsenter``.

Needs root, buildah and the built image; otherwise every test skips with the commands that
provide them (under ``RUBRICGYM_STRICT_SKIPS=1``, as in CI, the skip is a failure).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
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
        """The image's command as PID 1 of new PID, mount and network namespaces, on a read-only
        root with a tmpfs /tmp and a fresh /proc (compose.yaml's read_only + tmpfs)."""
        cmd = [*(self.config.get("Entrypoint") or []), *self.config["Cmd"]]
        with open(log, "w") as fh:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                ["unshare", "--net", "--pid", "--fork", "--mount-proc", "sh", "-c", CONTAINER_SH, "sh",
                 str(self.rootfs), *self.in_image(cmd)], stdout=fh, stderr=subprocess.STDOUT)

    @property
    def pid1(self) -> int:
        """Host pid of the container's PID 1 (the forked child of ``unshare``)."""
        assert self.proc is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            if kids:
                return int(kids[0])
            time.sleep(0.05)
        raise AssertionError("unshare started no child")

    def netns(self, argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
        """``argv`` (a host command) in the server's network namespace."""
        assert self.proc is not None
        return _run(["nsenter", f"--net=/proc/{self.proc.pid}/ns/net", *argv], timeout=timeout, cwd=REPO)

    def close(self) -> None:
        """Stop the server: SIGTERM to PID 1, then SIGKILL (the namespace ends with its PID 1;
        killing ``unshare`` instead would leave the server running), then unmount."""
        if self.proc is not None and self.proc.poll() is None:
            pid1 = self.pid1
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.kill(pid1, sig)
                    self.proc.wait(timeout=30)
                    break
                except ProcessLookupError:
                    self.proc.wait(timeout=30)
                    break
                except subprocess.TimeoutExpired:
                    continue
        _run(["buildah", "umount", self.ctr])
        _run(["buildah", "rm", self.ctr])


#: Run by ``unshare`` as PID 1 (then exec'd into the image's command): the image's root made
#: read-only in this mount namespace, a tmpfs on /tmp, /proc of the new PID namespace.
CONTAINER_SH = """set -e
ip link set lo up
root=$1; shift
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount -t tmpfs -o size=64m,mode=1777 tmpfs "$root/tmp"
mount -t proc proc "$root/proc"
exec "$@"
"""


def _wait_healthy(box: Container, log: Path) -> dict:
    deadline, out = time.monotonic() + START_TIMEOUT_S, None
    while time.monotonic() < deadline and box.proc.poll() is None:
        out = box.netns([sys.executable, "-c", HEALTHZ], timeout=30)
        if out.returncode == 0:
            return json.loads(out.stdout)
        time.sleep(2)
    raise AssertionError(f"server did not answer /healthz:\n{log.read_text()[-3000:]}")


HEALTHZ = ("import json, urllib.request; "
           "print(json.dumps(json.load(urllib.request.urlopen('http://127.0.0.1:3000/healthz', timeout=5))))")


@pytest.fixture(scope="module")
def container(tmp_path_factory):
    box = Container(_image_config())
    log = tmp_path_factory.mktemp("docker") / "server.log"
    try:
        box.start(log)
        box.healthz = _wait_healthy(box, log)
        box.log = log
        yield box
    finally:
        box.close()


def test_image_serves_healthz_as_its_own_user(container):
    """The image's command answers /healthz with the generated 1000-product catalogue and the
    spaCy tagger, from a process running as the image's (non-root) user."""
    cfg = container.config
    assert cfg["User"] == "shop" and cfg["Cmd"][:3] == ["rubricgym", "webshop", "serve"]
    assert container.uid == 10001
    uids = next(ln.split()[1:] for ln in Path(f"/proc/{container.pid1}/status").read_text().splitlines()
                if ln.startswith("Uid:"))
    assert set(uids) == {"10001"}
    h = container.healthz
    assert (h["status"], h["products"]) == ("ok", 1000)
    assert h["tagger"].startswith("spacy-3.8") and "en_core_web_sm" in h["tagger"]
    # the build installed the package system-wide, where the image's PATH finds it
    assert (container.rootfs / "usr/local/bin/rubricgym").exists()
    # PID 1 of its namespace, serving from a read-only root (compose.yaml's read_only: true)
    status = Path(f"/proc/{container.pid1}/status").read_text()
    assert next(ln for ln in status.splitlines() if ln.startswith("NSpid:")).split()[-1] == "1"
    mounts = Path(f"/proc/{container.pid1}/mounts").read_text().splitlines()
    root = next(ln.split() for ln in mounts if ln.split()[1] == "/")
    assert "ro" in root[3].split(","), root
    assert any(ln.split()[1] == "/tmp" and ln.split()[0] == "tmpfs" for ln in mounts)
    assert "gunicorn" in container.log.read_text() and "Booting worker" in container.log.read_text()


def test_image_runs_the_installed_package_without_the_plotting_stack(container):
    """Dependencies from the lock, the package from site-packages (no source tree left in the
    image), no matplotlib/pillow/fonttools/contourpy/kiwisolver/scipy."""
    probe = ("import importlib.util as u, json, agent_envs, gunicorn; print(json.dumps({'file': agent_envs.__file__, "
             "'gunicorn': gunicorn.__version__, 'present': [m for m in ('matplotlib', 'PIL', 'fontTools', "
             "'contourpy', 'kiwisolver', 'scipy') if u.find_spec(m)]}))")
    out = _run(container.in_image(["python", "-c", probe]), timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert re.search(r"/usr/(local/)?lib/python3\.11/(site|dist)-packages/agent_envs/__init__\.py$", got["file"])
    assert got["present"] == []
    pins = dict(ln.split("==") for ln in (REPO / "docker/webshop/requirements.txt").read_text().splitlines()
                if ln and not ln.startswith("#"))
    assert got["gunicorn"] == pins["gunicorn"]
    assert not (container.rootfs / "tmp/src").exists() and not (container.rootfs / "opt/rubricgym").exists()


def test_image_has_no_setuid_or_setgid_file(container):
    """The Dockerfile strips every setuid/setgid bit (the base ships su, mount, passwd, ...):
    nothing in the image can gain privileges, even run without compose's no-new-privileges."""
    out = _run(["find", str(container.rootfs), "-xdev", "-perm", "/6000", "-type", "f"], timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == []
    # the same walk does see the image's programs (so the empty answer is not a failed walk)
    programs = _run(["find", str(container.rootfs / "usr/bin"), "-xdev", "-perm", "/0111", "-type", "f"], timeout=300)
    assert len(programs.stdout.split()) > 50


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


def test_image_exits_0_within_5_s_of_sigterm_to_pid_1(tmp_path):
    """``docker stop``: SIGTERM to the container's PID 1; the server drains and exits 0 well
    before Docker's 10 s kill (the old development server ignored it as PID 1: exit 137)."""
    box = Container(_image_config())
    log = tmp_path / "server.log"
    try:
        box.start(log)
        _wait_healthy(box, log)
        t0 = time.monotonic()
        os.kill(box.pid1, signal.SIGTERM)
        try:
            rc = box.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running 30 s after SIGTERM:\n{log.read_text()[-2000:]}") from None
        elapsed = time.monotonic() - t0
        assert rc == 0 and elapsed < 5.0, f"status {rc} after {elapsed:.1f} s:\n{log.read_text()[-2000:]}"
        assert "Handling signal: term" in log.read_text()
    finally:
        box.close()

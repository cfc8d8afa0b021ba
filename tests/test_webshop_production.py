"""`rubricgym webshop serve` as it runs in production: gunicorn in a subprocess, real HTTP.

* page visits of new ids take at most ``--max-browser-sessions`` slots (the JSON API keeps the
  rest); a live session survives a full store (new ids get 503, nobody is evicted);
* clients that send a byte, drip a head or a body, never close, or never read their answers
  hold no thread: a normal client is answered meanwhile, and they are closed at
  ``--request-timeout``; pipelined, ``Expect: 100-continue`` and oversize requests still work;
* the search index is built before gunicorn forks the worker, not on the first search;
* SIGTERM drains a request in flight and exits 0 within 5 s, outside a container and as PID 1
  of a new PID namespace (what Docker does; ``unshare --pid --fork --mount-proc``), and is not
  lost while the CLI is still importing;
* the server's import path never imports the plotting stack (nor scipy, tyro, yaml: the image
  has none of them);
* access log lines on stdout; one-line errors for an unreadable or unverifiable catalogue and
  a port in use; ``RUBRICGYM_WEBSHOP_VERIFY=0`` accepts files without a published sha256.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from agent_envs.webshop.env import WebShopRubricEnv
from agent_envs.webshop.oracle import oracle_action
from agent_envs.webshop.remote import HttpBackend, ServerFullError

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 120
#: Import names of the packages the server image leaves out (docker/webshop/lock.py).
NOT_IN_IMAGE = ("matplotlib", "PIL", "fontTools", "contourpy", "kiwisolver", "cycler", "pyparsing", "dateutil",
                "scipy", "tyro", "yaml", "threadpoolctl", "backports")
# Run the CLI with an import hook that records (and refuses) any import of those packages.
BLOCKED_CLI = f"""
import importlib.abc, sys
log, blocked = sys.argv[1], {NOT_IN_IMAGE!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            with open(log, "a") as fh:
                fh.write(name + "\\n")
            raise ImportError(name + " is not in the server image")
        return None
sys.meta_path.insert(0, Block())
sys.argv = ["rubricgym", *sys.argv[2:]]
from trainers.cli import main
main()
"""


class Server:
    """``rubricgym webshop serve`` in a subprocess; stdout and stderr collected line by line."""

    def __init__(self, argv: list[str], *, prefix: tuple[str, ...] = (), env: dict | None = None) -> None:
        self.proc = subprocess.Popen([*prefix, *argv], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, **(env or {})})
        self.out: list[str] = []
        self.err: list[str] = []
        self._threads = [threading.Thread(target=self._drain, args=(s, buf), daemon=True)
                         for s, buf in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for t in self._threads:
            t.start()
        self.url = self._wait_url()

    @staticmethod
    def _drain(stream, buf: list[str]) -> None:
        for line in stream:  # visible to the waiting thread as each line comes
            buf.append(line)  # noqa: PERF402

    def _wait_url(self) -> str | None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for line in list(self.err):
                m = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
                if m:
                    return m.group(1)
            if self.proc.poll() is not None:
                return None
            time.sleep(0.05)
        return None

    def finish(self, timeout: float = 30) -> int:
        """Wait for the exit (killing after ``timeout``); the exit status."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
            raise
        finally:
            for t in self._threads:
                t.join(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.finish()

    def log(self) -> str:
        return "".join(self.err[-40:]) + "".join(self.out[-20:])


def serve_args(mini_dir: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "trainers.cli", "webshop", "serve", "--port", "0", "--data", mini_dir,
            "--no-verify", "--tagger", "lexicon", *extra]


@pytest.fixture(scope="module")
def blocked_log(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("imports") / "blocked.txt"


@pytest.fixture(scope="module")
def prod(mini_dir, blocked_log):
    """The production server over the mini catalogue, --max-sessions 64, 4 threads, requests
    due whole within 5 s, INFO logging (``-v``), run with the packages the image lacks made
    unimportable."""
    argv = [sys.executable, "-c", BLOCKED_CLI, str(blocked_log), "-v",
            *serve_args(mini_dir, "--max-sessions", "64", "--threads", "4", "--request-timeout", "5")[3:]]
    srv = Server(argv)
    try:
        assert srv.url, srv.log()
        yield srv
    finally:
        srv.stop()


def _http() -> requests.Session:
    s = requests.Session()
    s.trust_env = False
    return s


def play_to_the_end(env: WebShopRubricEnv) -> tuple[float, dict]:
    term = trunc = False
    while not (term or trunc):
        _obs, r, term, trunc, info = env.step(oracle_action(env))
    return r, info


# --------------------------------------------------------------------------- sessions
def test_page_visits_leave_the_api_room_and_a_live_session_survives_a_full_server(prod, mini_dir):
    """400 page visits of new ids (``GET /<id>`` opens a session) take at most a quarter of
    ``--max-sessions 64``: a training environment's reset still gets a slot (it got
    ``ServerFullError`` before).  Then API resets fill the store: a new id gets 503 and
    ``ServerFullError``, and the live session keeps playing (nobody is evicted)."""
    env = WebShopRubricEnv(catalogue=mini_dir, verify=False, tagger="lexicon", server_url=prod.url)
    env.reset(options={"task": 0})
    env.step("search[running shoes]")
    with _http() as http:
        before = http.get(f"{prod.url}/healthz").json()
        assert (before["max_sessions"], before["max_browser_sessions"]) == (64, 16)
        codes: Counter = Counter()
        for i in range(400):
            r = http.get(f"{prod.url}/flood-{i}")
            codes[r.status_code] += 1
            if r.status_code == 503:
                assert int(r.headers["Retry-After"]) >= 1 and "--max-browser-sessions" in r.text
        free = 16 - before["browser_sessions"]
        assert codes == {200: free, 503: 400 - free}, codes
        late = WebShopRubricEnv(catalogue=mini_dir, verify=False, tagger="lexicon", server_url=prod.url)
        assert late.reset(options={"task": 0})[0]  # the API's slots were kept
        late.close()
        api_free = 64 - http.get(f"{prod.url}/healthz").json()["sessions"]
        for i in range(api_free):
            assert http.post(f"{prod.url}/api/fill-{i}/reset", json={"task": 0}).status_code == 200
        with pytest.raises(ServerFullError, match=r"is full.*--max-sessions.*--session-ttl"):
            HttpBackend(prod.url, tagger_name="lexicon-v1").start(env.unwrapped.goal)
        r, info = play_to_the_end(env)  # the live session is still there
        assert (r, info["score"]) == (10.0, 1.0)
        env.close()
        for i in range(400):
            http.delete(f"{prod.url}/api/flood-{i}")
        for i in range(api_free):
            http.delete(f"{prod.url}/api/fill-{i}")
        assert http.get(f"{prod.url}/healthz").json()["sessions"] == before["sessions"] - 1  # env.close()


def test_the_server_path_imports_no_plotting_stack(prod, mini_dir, blocked_log):
    """Serving pages and an API episode never tries to import matplotlib & co, and works
    without scipy, tyro and yaml (the fixture's server refuses and records every such import)."""
    with _http() as http:
        assert http.get(f"{prod.url}/fixed_0").status_code == 200
        assert http.get(f"{prod.url}/search_results/fixed_0/shoes/1").status_code == 200
    env = WebShopRubricEnv(catalogue=mini_dir, verify=False, tagger="lexicon", server_url=prod.url)
    env.reset(options={"task": 0})
    assert play_to_the_end(env)[0] == 10.0
    env.close()
    tried = set(blocked_log.read_text().split()) if blocked_log.exists() else set()
    # bm25s probes for scipy at import and goes on without it (our index uses its numpy backend)
    assert tried <= {"scipy", "scipy.sparse"}, tried


def test_access_log_lines_go_to_stdout(prod):
    with _http() as http:
        http.get(f"{prod.url}/healthz?from=access-log-test")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any("access-log-test" in ln for ln in prod.out):
        time.sleep(0.05)
    line = next(ln for ln in prod.out if "access-log-test" in ln)
    assert re.search(r'"GET /healthz\?from=access-log-test HTTP/1\.1" 200 \d+ \d+ms', line), line
    assert not any("access-log-test" in ln for ln in prod.err)  # stderr has gunicorn's own lines


def test_an_oversize_body_leaves_the_kept_alive_connection_usable(prod):
    """413 for a body over 64 KiB, then the same pooled connection serves the next request
    (gunicorn closes a connection whose unread body exceeds 64 KiB; the app reads it first)."""
    with _http() as http:
        assert http.post(f"{prod.url}/api/big/reset", json={"task": 0}).status_code == 200
        for _ in range(10):  # the connection was closed (or not) some milliseconds after the 413
            r = http.post(f"{prod.url}/api/big/step", json={"action": "x" * (64 * 1024 + 1)})
            assert r.status_code == 413 and "larger than 65536 bytes" in r.json()["message"]
            ok = http.post(f"{prod.url}/api/big/step", json={"action": "search[shoes]"})
            assert ok.status_code == 200
        http.delete(f"{prod.url}/api/big")


# --------------------------------------------------------------------------- slow clients
#: How each kind of slow client starts; it then sends nothing more, or one byte at a time.
SLOW_STARTS = {
    "one byte": b"G",
    "head dripped": b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ",
    "body dripped": b"POST /api/slow/reset HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 100\r\n\r\n{\"ta",
    "chunks dripped": b"POST /api/slow/reset HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nff\r\n{\"ta",
    "never closes": b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
}


class SlowClients(threading.Thread):
    """Keeps at least ``keep`` slow connections open (of every kind in turn), dripping a byte
    into each every 0.2 s, until stopped; every socket it opened is in ``socks``."""

    def __init__(self, url: str, keep: int = 10) -> None:
        super().__init__(daemon=True)
        host, port = url.removeprefix("http://").split(":")
        self.addr, self.keep = (host, int(port)), keep
        self.socks: list[tuple[str, socket.socket]] = []
        self.stop = threading.Event()
        for i in range(keep):
            self._open(i)

    def _open(self, i: int) -> None:
        kind = list(SLOW_STARTS)[i % len(SLOW_STARTS)]
        sock = socket.create_connection(self.addr, timeout=30)
        sock.sendall(SLOW_STARTS[kind])
        self.socks.append((kind, sock))

    def run(self) -> None:
        while not self.stop.wait(0.2):
            alive = [(k, s) for k, s in self.socks if k != "never closes" and _drip(s)]
            for i in range(self.keep - len(alive)):
                self._open(len(self.socks) + i)


def _drip(sock: socket.socket) -> bool:
    """Send one more byte of a head or body; False (and nothing sent) once the server answered
    or closed (a byte sent after its close would reset the connection and lose the answer)."""
    if select.select([sock], [], [], 0)[0]:
        return False
    try:
        sock.sendall(b"a")
        return True
    except OSError:
        return False


def _read_to_the_end(sock: socket.socket) -> bytes:
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):  # socket.timeout (30 s) fails the test
            data += chunk
    return data


def test_slow_clients_hold_no_thread_and_are_closed(prod, mini_dir):
    """Ten and more connections that sent one byte, drip a head, a body or chunks, or never
    close after their answer, on a server with 4 threads: a normal client is still answered
    (each request within the client's 10 s timeout, a liveness bound), an episode plays, and
    every slow connection is closed (408 for an unfinished request).  gunicorn's own gthread
    worker gave 4 such connections all its threads, for as long as they stayed."""
    slow = SlowClients(prod.url)
    slow.start()
    try:
        with _http() as http:
            for _ in range(5):
                assert http.get(f"{prod.url}/healthz", timeout=10).status_code == 200
        env = WebShopRubricEnv(catalogue=mini_dir, verify=False, tagger="lexicon", server_url=prod.url)
        env.reset(options={"task": 0})
        assert play_to_the_end(env)[0] == 10.0
        env.close()
    finally:
        slow.stop.set()
        slow.join(timeout=30)
    assert len(slow.socks) >= 10
    for kind, sock in slow.socks:
        with sock:
            answer = _read_to_the_end(sock)  # the server closes every one of them
        expected = b"HTTP/1.1 200 " if kind == "never closes" else b"HTTP/1.1 408 Request Timeout"
        assert answer.startswith(expected), (kind, answer[:80])
    deadline = time.monotonic() + 10  # the worker logs each refusal after sending it
    while not any("408: the request did not arrive whole within 5 s" in ln for ln in prod.err):
        assert time.monotonic() < deadline, prod.log()
        time.sleep(0.05)


@pytest.mark.parametrize("path", ["/healthz", "/api/greedy/snapshot"], ids=["on-a-thread", "on-the-loop"])
def test_a_client_that_does_not_read_its_answers_holds_no_thread(prod, path):
    """10,000 pipelined requests whose megabytes of answers are never read: once the kernel's
    buffers are full the rest waits in the worker's queue, not on a thread nor on the event loop
    (others are answered meanwhile), and the connection is closed 5 s (``--request-timeout``)
    after an answer stopped being taken.  Pages go to threads; the JSON API is served on the loop,
    one pipelined request per round of the loop."""
    host, port = prod.url.removeprefix("http://").split(":")
    requests.post(f"{prod.url}/api/greedy/reset", json={"task": 0}, timeout=10).raise_for_status()
    timeouts = sum("answers not taken within 5 s" in ln for ln in prod.err)
    greedy = socket.socket()
    greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    greedy.connect((host, int(port)))
    greedy.settimeout(60)
    with greedy:
        greedy.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode() * 10000)
        deadline = time.monotonic() + START_TIMEOUT_S
        with _http() as http:
            while sum("answers not taken within 5 s" in ln for ln in prod.err) == timeouts:
                assert time.monotonic() < deadline, prod.log()
                assert http.get(f"{prod.url}/api/greedy/snapshot", timeout=10).status_code == 200
                assert http.get(f"{prod.url}/healthz", timeout=10).status_code == 200
                time.sleep(0.2)
    served = sum(f'"GET {path} HTTP/1.1" 200' in ln and '"-"' in ln for ln in prod.out)
    assert 100 < served < 10000, served  # raw-socket requests have no User-Agent ("-")
    requests.delete(f"{prod.url}/api/greedy", timeout=10)


LOOP_APP = """
import sys, threading
from flask import Flask
from agent_envs.webshop.wsgi import ProductionOptions, serve_production
app = Flask("loop_paths")
released = threading.Event()

@app.get("/page")
def page():  # holds the only thread until an API request releases it
    open(sys.argv[2], "w").close()  # the test waits for this before it sends the API request
    return "released" if released.wait(15) else "not released"

@app.get("/api/release")
def release():
    released.set()
    return "ok"

paths = ("/api/",) if sys.argv[1] == "loop" else ()
serve_production(app, port=0, options=ProductionOptions(threads=1, loop_paths=paths, access_log=False),
                 on_ready=lambda url: print("serving on", url, file=sys.stderr, flush=True))
"""


@pytest.mark.parametrize("mode", ["loop", "threads"])
def test_the_json_api_is_answered_while_every_thread_is_busy(mode, tmp_path):
    """One thread, held by a page that waits for an API request: served on the event loop
    (``loop_paths``, the default for ``/api/``) the API request releases it; with
    ``loop_paths=()`` the API request queues behind the page, which gives up after 15 s."""
    started = tmp_path / "page-started"
    server = Server([sys.executable, "-c", LOOP_APP, mode, str(started)])
    assert server.url, server.log()
    try:
        with ThreadPoolExecutor(1) as pool:
            page = pool.submit(requests.get, f"{server.url}/page", timeout=60)
            deadline = time.monotonic() + 60
            while not started.exists():  # the page holds the worker's only thread
                assert time.monotonic() < deadline and not page.done(), server.log()
                time.sleep(0.05)
            assert requests.get(f"{server.url}/api/release", timeout=60).text == "ok"
            expected = "released" if mode == "loop" else "not released"
            assert page.result().text == expected
    finally:
        server.stop()


def _next_response(fp) -> tuple[str, dict[str, str], bytes]:
    """Status line, headers and body of the next response on a buffered reader (so that two
    responses arriving in one segment are both read)."""
    status = fp.readline().decode("latin-1").strip()
    headers = {}
    while (line := fp.readline()) not in (b"\r\n", b""):
        key, value = line.decode("latin-1").split(":", 1)
        headers[key.lower()] = value.strip()
    assert status, "connection closed before a response"
    return status, headers, fp.read(int(headers.get("content-length", 0)))


def _exchange(url: str, data: bytes, *, responses: int, then: bytes = b"") -> list[tuple[str, dict, bytes]]:
    """Send ``data`` (and ``then`` after the first response) on one connection; read responses."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock, sock.makefile("rb") as fp:
        sock.sendall(data)
        got = [_next_response(fp)]
        if then:
            sock.sendall(then)
        got += [_next_response(fp) for _ in range(responses - 1)]
    return got


def test_pipelined_continued_and_oversize_requests_on_one_connection(prod):
    """Requests are read whole before a thread takes them, and still: two pipelined requests
    get two answers (also when the second arrives in two parts), ``Expect: 100-continue`` gets
    its 100 before the body is sent, and an oversize declared body gets 413 without being sent."""
    get = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    two = _exchange(prod.url, get + get, responses=2)
    assert [r[0] for r in two] == ["HTTP/1.1 200 OK"] * 2 and json.loads(two[1][2])["status"] == "ok"
    split = _exchange(prod.url, get + get[:10], responses=2, then=get[10:])
    assert [r[0] for r in split] == ["HTTP/1.1 200 OK"] * 2
    body = json.dumps({"task": 0}).encode()
    head = (b"POST /api/continued/reset HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Expect: 100-continue\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    host, port = prod.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(head)
        assert sock.recv(25) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        status, _h, answer = _read_response(sock)
        assert status == "HTTP/1.1 200 OK" and json.loads(answer)["snapshot"]["page"] == "start"
    big = head.replace(str(len(body)).encode(), b"70000")
    (status, headers, answer), = _exchange(prod.url, big, responses=1)
    assert status == "HTTP/1.1 413 Request Entity Too Large" and headers["connection"] == "close"
    assert json.loads(answer)["message"] == "request bodies larger than 65536 bytes are refused"
    requests.delete(f"{prod.url}/api/continued", timeout=10)


def test_the_search_index_is_built_before_the_worker_is_forked(prod):
    """Logged once, before the server listens (the worker inherits it), never on a search."""
    with _http() as http:
        assert http.get(f"{prod.url}/fixed_0").status_code == 200
        assert http.get(f"{prod.url}/search_results/fixed_0/socks%20first/1").status_code == 200
    built = [i for i, ln in enumerate(prod.err) if "BM25 search index over 5 documents built" in ln]
    serving = next(i for i, ln in enumerate(prod.err) if "serving on" in ln)
    assert len(built) == 1 and built[0] < serving, prod.log()
    assert not any("DEBUG" in ln and "bm25s" in ln for ln in prod.err)  # bm25s's own debug line


# --------------------------------------------------------------------------- SIGTERM
def _read_response(sock: socket.socket) -> tuple[str, dict[str, str], bytes]:
    """Status line, headers and body of one HTTP/1.1 response with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines)}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside a response body"
        body += chunk
    return status, headers, body


def _request_in_flight_across_sigterm(url: str, kill) -> tuple[str, dict, bytes, float]:
    """On one keep-alive connection: a full request, then half of a POST body; SIGTERM
    (``kill()``); then the rest of the body.  Returns the second response and when the signal
    was sent."""
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"task": 0}).encode()
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _read_response(sock)[0].startswith("HTTP/1.1 200")
        sock.sendall(b"POST /api/drain/reset HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:4])
        time.sleep(0.5)
        t_signal = time.monotonic()
        kill()
        time.sleep(0.5)
        sock.sendall(body[4:])
        return (*_read_response(sock), t_signal)


def test_sigterm_drains_a_request_in_flight_and_exits_0(mini_dir):
    """Against werkzeug's development server SIGTERM killed the process (status -15) and the
    request in flight got no answer."""
    srv = Server(serve_args(mini_dir, "--threads", "2"))
    try:
        assert srv.url, srv.log()
        with _http() as idle:  # an idle kept-alive connection must not hold the shutdown up
            idle.get(f"{srv.url}/healthz")
            status, _headers, body, t_signal = _request_in_flight_across_sigterm(srv.url, srv.proc.terminate)
            assert status.startswith("HTTP/1.1 200"), status
            assert json.loads(body)["snapshot"]["page"] == "start"
            rc = srv.finish(timeout=30)
        elapsed = time.monotonic() - t_signal
        assert rc == 0, srv.log()
        assert elapsed < 5.0, f"{elapsed:.1f} s from SIGTERM to exit\n{srv.log()}"
        assert any("Handling signal: term" in ln for ln in srv.err) and srv.err[-1].strip() == "stopped"
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{srv.url}/healthz", timeout=5)
    finally:
        srv.stop()


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_sigterm_to_pid_1_of_a_new_pid_namespace_exits_0(mini_dir):
    """As PID 1 (no default SIGTERM action: Docker's situation) the server still drains and
    exits 0; werkzeug's development server ignored the signal there until killed."""
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare or "unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True,
                           text=True, check=False) if unshare else None
    if probe is None or probe.returncode != 0:
        pytest.skip(f"needs `unshare --pid --fork --mount-proc` (root, or user namespaces): "
                    f"{probe.stderr.strip() if probe else 'unshare not installed (util-linux)'}")
    srv = Server(serve_args(mini_dir, "--threads", "2"), prefix=(unshare, "--pid", "--fork", "--mount-proc"))
    try:
        assert srv.url, srv.log()
        (pid1,) = _children(srv.proc.pid)
        nspid = next(ln for ln in Path(f"/proc/{pid1}/status").read_text().splitlines() if ln.startswith("NSpid:"))
        assert nspid.split()[-1] == "1", nspid  # the server is PID 1 of its namespace
        status, _h, body, t_signal = _request_in_flight_across_sigterm(srv.url, lambda: os.kill(pid1, signal.SIGTERM))
        assert status.startswith("HTTP/1.1 200") and json.loads(body)["snapshot"]["page"] == "start"
        rc = srv.finish(timeout=30)
        elapsed = time.monotonic() - t_signal
        assert rc == 0 and elapsed < 5.0, f"status {rc} after {elapsed:.1f} s\n{srv.log()}"
    finally:
        srv.stop()


#: The CLI as a container runs it, held inside its first heavy import (typer) until a signal
#: comes: a marker file says it got there.
HELD_CLI = """
import importlib.abc, sys, time
marker = sys.argv[1]
class Hold(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "typer":
            open(marker, "w").close()
            time.sleep(120)
        return None
sys.meta_path.insert(0, Hold())
sys.argv = ["rubricgym", *sys.argv[2:]]
import runpy
runpy.run_module("trainers.cli", run_name="__main__")
"""


def test_sigterm_to_pid_1_during_the_first_imports_is_not_lost(mini_dir, tmp_path):
    """PID 1 of a new PID namespace, SIGTERM while the CLI is still importing (before typer):
    it exits 0 at once.  Before, the handler came after the imports (0.5-1.5 s in): the signal
    was dropped and the server went on to serve."""
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare or "unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True,
                           text=True, check=False) if unshare else None
    if probe is None or probe.returncode != 0:
        pytest.skip(f"needs `unshare --pid --fork --mount-proc` (root, or user namespaces): "
                    f"{probe.stderr.strip() if probe else 'unshare not installed (util-linux)'}")
    marker = tmp_path / "importing-typer"
    proc = subprocess.Popen([unshare, "--pid", "--fork", "--mount-proc", sys.executable, "-c", HELD_CLI, str(marker),
                             *serve_args(mini_dir)[3:]], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), proc.communicate(timeout=30)
        (pid1,) = _children(proc.pid)
        os.kill(pid1, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)  # 120 s if the signal were lost
        assert proc.returncode == 0 and "serving on" not in err, (proc.returncode, out, err)
    finally:
        if proc.poll() is None:  # PID 1 first: the namespace ends with it (unshare alone would not)
            for pid in _children(proc.pid):
                os.kill(pid, signal.SIGKILL)
            proc.wait(timeout=30)


# --------------------------------------------------------------------------- errors, verification
def _run_cli(args: list[str], env: dict | None = None, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "trainers.cli", "webshop", "serve", "--port", "0",
                           "--tagger", "lexicon", *args], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, check=False)


def _one_line_error(out: subprocess.CompletedProcess) -> str:
    """The one ``error:`` line of a run that exited 1 without a traceback."""
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def test_verification_is_configurable_from_the_environment(mini_dir):
    """Files under upstream's full-set names have no published sha256: refused by default,
    served with RUBRICGYM_WEBSHOP_VERIFY=0 (what compose.yaml passes through)."""
    env = {"RUBRICGYM_WEBSHOP_DATA": mini_dir}
    line = _one_line_error(_run_cli([], env))
    assert "no published sha256 for 'items_shuffle.json'" in line and "RUBRICGYM_WEBSHOP_VERIFY=0" in line
    srv = Server([sys.executable, "-m", "trainers.cli", "webshop", "serve", "--port", "0", "--tagger", "lexicon"],
                 env={**env, "RUBRICGYM_WEBSHOP_VERIFY": "0"})
    try:
        assert srv.url, srv.log()
        assert requests.get(f"{srv.url}/healthz", timeout=10).json()["products"] == 5
    finally:
        srv.stop()


def test_unreadable_or_garbage_data_is_a_one_line_error(tmp_path, mini_dir):
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    for name in ("items_shuffle.json", "items_ins_v2.json", "items_human_ins.json"):
        (garbage / name).write_bytes(b"\x89PNG\r\n\x1a\n not a catalogue \xff\xfe")
    line = _one_line_error(_run_cli([], {"RUBRICGYM_WEBSHOP_DATA": str(garbage), "RUBRICGYM_WEBSHOP_VERIFY": "0"}))
    assert f"{garbage / 'items_shuffle.json'}: not valid JSON" in line
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("unreadable files need root and setpriv (util-linux) to drop the override capabilities")
    locked = tmp_path / "locked"
    shutil.copytree(mini_dir, locked)
    drop = (setpriv, "--bounding-set", "-dac_override,-dac_read_search")  # root that obeys file modes
    try:
        (locked / "items_shuffle.json").chmod(0)
        line = _one_line_error(_run_cli(["--no-verify"], {"RUBRICGYM_WEBSHOP_DATA": str(locked)}, drop))
        assert line.endswith(f"{locked / 'items_shuffle.json'}: cannot read it (Permission denied); "
                             "make it readable by uid 0")
        locked.chmod(0)
        line = _one_line_error(_run_cli([], {"RUBRICGYM_WEBSHOP_DATA": str(locked)}, drop))
        assert line.endswith(f"{locked}: cannot read the WebShop data directory (Permission denied); "
                             "make it readable by uid 0")
    finally:
        locked.chmod(0o755)


def test_a_port_in_use_is_a_one_line_error(mini_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = _run_cli(["--data", mini_dir, "--no-verify", "--port", str(port)])
    line = _one_line_error(out)
    assert f"cannot serve on 127.0.0.1:{port}" in line and "Address already in use" in line


def test_a_page_share_above_the_store_is_a_usage_error(mini_dir):
    out = _run_cli(["--data", mini_dir, "--no-verify", "--max-sessions", "4", "--max-browser-sessions", "5"])
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "error: --max-browser-sessions (5) must be at most --max-sessions (4)" in out.stderr

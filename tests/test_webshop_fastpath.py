"""The production server's cheaper paths answer exactly as before: the step fast path in front
of Flask (every answer byte-identical to the Flask view's, malformed requests and engine errors
left to Flask), the snapshot dict without deep copies, the direct access-log line, and one
``send`` per answer in the gunicorn worker."""

from __future__ import annotations

import datetime
import io
import json
import random
import socket

import pytest
from gunicorn.config import Config
from gunicorn.glogging import Logger, SafeAtoms

from agent_envs.webshop.catalogue import CatalogueSpec, get_catalogue
from agent_envs.webshop.fastpath import ApiFastPath, install_api_fast_path
from agent_envs.webshop.http_worker import _HOLD_MAX, _QueuedSocket
from agent_envs.webshop.oracle import oracle_next
from agent_envs.webshop.server import MAX_ACTION_CHARS, create_app, snapshot_dict
from agent_envs.webshop.session import PageSnapshot, ShopSession
from agent_envs.webshop.wsgi import _ACCESS_FORMAT, AccessLogger


@pytest.fixture(scope="module")
def catalogue():
    return get_catalogue(CatalogueSpec(num_products=200))


class _Counting:
    """Counts the requests that reach the wrapped WSGI callable (Flask's own)."""

    def __init__(self, app) -> None:
        self.app, self.paths = app, []

    def __call__(self, environ, start_response):
        self.paths.append((environ["REQUEST_METHOD"], environ["PATH_INFO"]))
        return self.app(environ, start_response)


@pytest.fixture()
def apps(catalogue):
    """(plain Flask app, app with the fast path, the requests that reached the latter's Flask)."""
    plain = create_app(catalogue, tagger="lexicon")
    fast = install_api_fast_path(create_app(catalogue, tagger="lexicon"))
    assert isinstance(fast.wsgi_app, ApiFastPath)
    counting = _Counting(fast.wsgi_app.wsgi_app)
    fast.wsgi_app.wsgi_app = counting
    return plain, fast, counting


def _answer(client, method: str, path: str, **kw) -> tuple[int, list, bytes]:
    resp = client.open(path, method=method, **kw)
    return resp.status_code, list(resp.headers.items()), resp.get_data()


def test_oracle_episodes_get_byte_identical_answers_and_skip_flask(apps, catalogue):
    plain, fast, counting = apps
    a, b = plain.test_client(), fast.test_client()
    goals = catalogue.goal_list("human")
    rng = random.Random(3)
    steps = 0
    for e in range(12):
        goal = goals[rng.randrange(len(goals))]
        sid = f"ep{e % 3}"
        first = _answer(a, "POST", f"/api/{sid}/reset", json={"task": goal.index})
        assert _answer(b, "POST", f"/api/{sid}/reset", json={"task": goal.index}) == first
        snap = PageSnapshot.from_dict(json.loads(first[2])["snapshot"])
        while not snap.done:
            body = {"action": oracle_next(snap, goal, catalogue)}
            want = _answer(a, "POST", f"/api/{sid}/step", json=body)
            assert want[0] == 200
            assert _answer(b, "POST", f"/api/{sid}/step", json=body) == want  # status, headers, bytes
            snap = PageSnapshot.from_dict(json.loads(want[2])["snapshot"])
            steps += 1
        assert snap.score == pytest.approx(1.0)
    assert steps > 12
    assert counting.paths == []  # every reset and step answered in front of Flask


@pytest.mark.parametrize("kw", [
    {"data": b"{not json", "content_type": "application/json"},
    {"data": b"[1, 2]", "content_type": "application/json"},
    {"data": b"[" * 3000 + b"]" * 3000, "content_type": "application/json"},
    {"data": b"\xff\xfe garbage", "content_type": "application/json"},
    {"data": b""},
    {"json": {"action": 5}},
    {"json": {"other": "x"}},
    {"json": {"action": "a" * (MAX_ACTION_CHARS + 1)}},
    {"data": b"x" * (64 * 1024 + 1), "content_type": "application/json"},
], ids=["bad-json", "a-list", "too-deep", "not-utf8", "empty", "int-action", "no-action", "long-action",
        "oversize"])
def test_malformed_steps_are_answered_by_flask_as_before(apps, kw):
    plain, fast, counting = apps
    a, b = plain.test_client(), fast.test_client()
    for client in (a, b):
        assert client.post("/api/s1/reset", json={"task": 0}).status_code == 200
    want = _answer(a, "POST", "/api/s1/step", **kw)
    assert 400 <= want[0] < 500
    assert _answer(b, "POST", "/api/s1/step", **kw) == want
    assert ("POST", "/api/s1/step") in counting.paths


@pytest.mark.parametrize("body", [
    {}, {"task": 3}, {"task": 2, "kind": "synthetic"}, {"kind": "synthetic"}, {"task": 1, "tagger": "lexicon-v1"},
    {"task": 1, "instruction": "WRONG"}, {"task": 10**9}, {"task": True}, {"task": "0"}, {"kind": "alien"},
    {"task": 0, "tagger": "lexicon"}, {"task": 0, "tagger": "spacy:none"}, {"task": 0, "tagger": 5}, {"task": 1.0},
    {"task": 0, "kind": ["human"]},
], ids=lambda b: json.dumps(b))
def test_resets_are_answered_as_flask_answers_them(apps, catalogue, body):
    plain, fast, counting = apps
    a, b = plain.test_client(), fast.test_client()
    for sid in ("r1", "fixed_4"):
        want = _answer(a, "POST", f"/api/{sid}/reset", json=body)
        assert _answer(b, "POST", f"/api/{sid}/reset", json=body) == want
        ours = want[0] == 200 and body.get("tagger") in (None, "lexicon-v1") and ("task" in body or sid == "r1")
        assert (("POST", f"/api/{sid}/reset") not in counting.paths) == ours
    inst = catalogue.goal_list(body.get("kind", "human") if body.get("kind") in ("human", "synthetic") else "human")
    ok = {"json": {"task": 1, "instruction": inst[1].instruction}}
    assert _answer(b, "POST", "/api/r2/reset", **ok) == _answer(a, "POST", "/api/r2/reset", **ok)
    assert _answer(b, "POST", "/api/r3/reset") == _answer(a, "POST", "/api/r3/reset")  # no body at all


def test_a_full_store_is_refused_by_flask(catalogue):
    plain = create_app(catalogue, tagger="lexicon", max_sessions=1)
    fast = install_api_fast_path(create_app(catalogue, tagger="lexicon", max_sessions=1))
    a, b = plain.test_client(), fast.test_client()
    for sid in ("one", "two"):
        want = _answer(a, "POST", f"/api/{sid}/reset", json={"task": 0})
        assert _answer(b, "POST", f"/api/{sid}/reset", json={"task": 0}) == want
    assert want[0] == 503 and ("Retry-After", "1800") in want[1]


def test_unknown_sessions_bad_ids_and_other_methods_go_to_flask(apps):
    plain, fast, counting = apps
    a, b = plain.test_client(), fast.test_client()
    for method, path in [("POST", "/api/nobody/step"), ("POST", "/api/bad!id/step"), ("GET", "/api/x/step"),
                         ("POST", "/api/" + "a" * 65 + "/step"), ("POST", "/api/x/step/")]:
        want = _answer(a, method, path, json={"action": "click[x]"})
        assert want[0] in (400, 404, 405)
        assert _answer(b, method, path, json={"action": "click[x]"}) == want
        assert (method, path) in counting.paths


def test_an_engine_error_is_answered_by_the_apps_error_handlers(apps, monkeypatch):
    plain, fast, _counting = apps
    a, b = plain.test_client(), fast.test_client()
    for client in (a, b):
        client.post("/api/s2/reset", json={"task": 0})

    def broken(self, action):
        raise KeyError("engine bug")

    monkeypatch.setattr(ShopSession, "act", broken)
    want = _answer(a, "POST", "/api/s2/step", json={"action": "search[shoes]"})
    assert want[0] == 500 and json.loads(want[2])["message"] == "internal error: KeyError"
    assert _answer(b, "POST", "/api/s2/step", json={"action": "search[shoes]"}) == want


def test_the_snapshot_dict_equals_to_dict(catalogue):
    goal = catalogue.goal_list("human")[5]
    from agent_envs.webshop.scorer import get_tagger

    sess = ShopSession(catalogue, goal, get_tagger("lexicon"), session_id="x")
    pages = 0
    while True:
        snap = sess.snapshot()
        assert snapshot_dict(snap) == snap.to_dict()
        assert json.dumps(snapshot_dict(snap)) == json.dumps(snap.to_dict())
        pages += 1
        if snap.done:
            break
        sess.act(oracle_next(snap, goal, catalogue))
    assert pages >= 3 and snap.purchase is not None and snap.preview is not None


class _Resp:
    def __init__(self, status, sent) -> None:
        self.status, self.sent, self.headers = status, sent, [("Content-Type", "text/html")]


@pytest.mark.parametrize(("resp", "environ"), [
    (_Resp("200 OK", 1884), {"REMOTE_ADDR": "127.0.0.1", "REQUEST_METHOD": "POST", "RAW_URI": "/api/a/step",
                             "SERVER_PROTOCOL": "HTTP/1.1", "HTTP_USER_AGENT": "python-requests/2.32"}),
    (_Resp("404 NOT FOUND", 0), {"REMOTE_ADDR": "::1", "REQUEST_METHOD": "GET", "RAW_URI": '/x"y?q="1"',
                                 "SERVER_PROTOCOL": "HTTP/1.0", "HTTP_USER_AGENT": 'curl/"8"'}),
    (_Resp(503, None), {"REMOTE_ADDR": "10.0.0.2", "REQUEST_METHOD": "DELETE", "RAW_URI": "/api/b",
                        "SERVER_PROTOCOL": "HTTP/1.1"}),
])
def test_the_access_line_is_gunicorns(resp, environ):
    cfg = Config()
    cfg.set("access_log_format", _ACCESS_FORMAT)
    log = AccessLogger(cfg)
    took = datetime.timedelta(seconds=2, microseconds=345678)
    want = _ACCESS_FORMAT % SafeAtoms(Logger.atoms(log, resp, [("Host", "h")], environ, took))
    got = log._line(resp, environ, took)
    assert got.split(" [", 1)[0] == want.split(" [", 1)[0]
    assert got.split("] ", 1)[1] == want.split("] ", 1)[1]
    assert abs(len(got) - len(want)) == 0  # the time stamps have one format


def test_the_access_line_reaches_gunicorns_handler_with_or_without_a_log_record():
    cfg = Config()
    cfg.set("access_log_format", _ACCESS_FORMAT)
    cfg.set("accesslog", "-")
    log = AccessLogger(cfg)
    [handler] = log.access_log.handlers
    handler.stream = io.StringIO()
    environ = {"REMOTE_ADDR": "127.0.0.1", "REQUEST_METHOD": "POST", "RAW_URI": "/api/a/step",
               "SERVER_PROTOCOL": "HTTP/1.1"}
    took = datetime.timedelta(microseconds=4000)
    assert log._plain_handler() is handler  # written directly
    log.access(_Resp("200 OK", 99), None, environ, took)
    seen = []
    log.access_log.addFilter(lambda record: seen.append(record.getMessage()) or True)
    assert log._plain_handler() is None  # a filter: through logging, as gunicorn would
    log.access(_Resp("200 OK", 99), None, environ, took)
    first, second = handler.stream.getvalue().splitlines()
    assert first.endswith('"POST /api/a/step HTTP/1.1" 200 99 4ms "-"') and first.startswith("127.0.0.1 [")
    assert second.split("] ", 1)[1] == first.split("] ", 1)[1] and seen == [second]


def test_an_answer_leaves_in_one_send():
    left, right = socket.socketpair()
    sock = _QueuedSocket(fileno=left.detach())
    try:
        sock.setblocking(False)
        right.setblocking(False)
        sock.hold()
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n")
        sock.sendall(memoryview(b"body"))
        with pytest.raises(BlockingIOError):  # gathered, nothing sent yet
            right.recv(100)
        assert sock.release()
        assert right.recv(100) == b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody"
        assert sock.release()  # nothing held: nothing sent
        sock.hold()
        sock.sendall(b"x" * (_HOLD_MAX + 1))  # past the cap: sent at once (what the kernel takes)
        assert not sock.held
        got = b""
        while True:
            try:
                got += right.recv(1 << 20)
            except BlockingIOError:
                break
        assert len(got) + len(sock.wbuf) == _HOLD_MAX + 1 and len(got) > 0
        sock.wbuf.clear()
        sock.release()
        right.close()
        sock.hold()
        sock.sendall(b"late")
        assert sock.release() is False  # the client is gone
    finally:
        sock.close()
        right.close()

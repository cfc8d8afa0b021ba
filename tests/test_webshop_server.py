"""WebShop server mode: the Flask app on a real loopback socket, the HTTP backend of
WebShop-Rubric-v0, upstream's routes and DOM hooks, escaping, 4xx on bad requests,
concurrent sessions, the CLI entry point and the Docker files."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import threading
import time
import warnings
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import requests
import yaml
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agent_envs  # noqa: F401 - registers the environments
from agent_envs.webshop.catalogue import CatalogueSpec, get_catalogue
from agent_envs.webshop.env import WebShopRubricEnv
from agent_envs.webshop.oracle import oracle_action
from agent_envs.webshop.remote import HttpBackend, RemoteError, ServerFullError
from agent_envs.webshop.render import Node, to_text, to_text_rich
from agent_envs.webshop.server import (
    MAX_CONTENT_LENGTH,
    BackgroundServer,
    SessionStore,
    SessionStoreFull,
    create_app,
    decode_segment,
    encode_segment,
)
from agent_envs.webshop.session import ShopSession
from agent_envs.webshop.testing import MINI_GOAL_TEXT

REPO = Path(__file__).resolve().parents[1]
GOAL = MINI_GOAL_TEXT + ", and price lower than 990.00 dollars"
# The hand-checked mini episode (tests/test_webshop_env.py derives its values): invalid
# actions, a near miss, options, sub-pages, navigation, then the correct purchase.
MINI_SCRIPT = ["click[x]", "search[running shoes]", "click[b000000002]", "click[black]", "click[< prev]",
               "click[b000000001]", "click[navy blue]", "click[description]", "click[< prev]", "click[10]",
               "search[x]", "click[reviews]", "click[< prev]", "click[buy now]"]


# --------------------------------------------------------------------------- fixtures
@pytest.fixture()
def http(mini_server):
    with requests.Session() as s:
        s.trust_env = False
        yield s


def trace(env, actions, task=0):
    """(obs, info) after reset, then every step's full tuple, plus the page snapshots."""
    obs, info = env.reset(options={"task": task})
    out = [(obs, info, env.unwrapped.page.to_dict())]
    for a in actions:
        out.append((*env.step(a), env.unwrapped.page.to_dict()))
    return out


class _Nodes(HTMLParser):
    """Collect the page's nodes (elements with data-role) as a DOM reader would."""

    VOID = frozenset({"br", "input", "img", "meta", "link", "hr"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.nodes: list[Node] = []
        self.attrs: list[dict[str, str | None]] = []
        self._depth = 0
        self._cur: dict | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.attrs.append({"tag": tag, **a})
        if tag in self.VOID:
            return
        if self._cur is not None:
            self._depth += 1
        elif "data-role" in a:
            self._cur, self._depth = {"a": a, "text": []}, 0

    def handle_endtag(self, tag):
        if self._cur is None or tag in self.VOID:
            return
        if self._depth:
            self._depth -= 1
            return
        a = self._cur["a"]
        self.nodes.append(Node("".join(self._cur["text"]), a["data-role"], a.get("data-clicked") == "1",
                               a.get("data-group")))
        self._cur = None

    def handle_data(self, data):
        if self._cur is not None:
            self._cur["text"].append(data)


def parse(html: str) -> _Nodes:
    p = _Nodes()
    p.feed(html)
    return p


# --------------------------------------------------------------------------- segments, store
@given(st.text(max_size=60))
def test_url_segments_round_trip_and_never_split(text):
    seg = encode_segment(text)
    assert decode_segment(seg) == text
    assert "/" not in seg and seg not in (".", "..")
    assert decode_segment(encode_segment(None)) is None


class FakeClock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_session_store_never_evicts_a_live_session_and_expires_idle_ones(mini_dir):
    cat = get_catalogue(CatalogueSpec(source=mini_dir, verify=False))
    from agent_envs.webshop.scorer import get_tagger

    clock = FakeClock()
    store = SessionStore(max_sessions=2, ttl=100, clock=clock)
    mk = lambda sid: ShopSession(cat, cat.goals[0], get_tagger("lexicon"), sid)
    store.put("a", mk("a"))  # a used at t=1000
    clock.now = 1030.0
    store.put("b", mk("b"))  # b used at t=1030
    clock.now = 1060.0
    assert store.get("a") is not None  # a used at t=1060: b is now the least recently used
    with pytest.raises(SessionStoreFull, match=r"2 live sessions.*--max-sessions.*--session-ttl") as full:
        store.put("c", mk("c"))
    # b (last used at 1030) expires at 1030 + 100 = 1130: 70 s from t=1060
    assert full.value.retry_after == 70
    assert store.get("b") is not None and store.get("a") is not None and len(store) == 2  # nobody evicted
    assert store.put("a", mk("a")).session.session_id == "a"  # a reset of a live id is always allowed
    clock.now = 1060.0 + 99.0  # a and b were used at 1060: 99 s idle, both still live
    assert len(store) == 2
    clock.now = 1060.0 + 100.0  # 100 s idle: both expire, c gets a slot
    store.put("c", mk("c"))
    assert (store.get("a"), store.get("b"), len(store)) == (None, None, 1)
    assert store.delete("c") and not store.delete("c")
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="max_sessions"):
            SessionStore(bad)
    for bad in (0, -5, float("inf"), float("nan"), "60"):
        with pytest.raises(ValueError, match="ttl"):
            SessionStore(4, ttl=bad)


def test_page_visits_hold_at_most_their_share_of_the_store(mini_dir):
    """Sessions opened by a page visit take at most ``max_browser_sessions`` slots: the rest
    stay free for the JSON API whatever a crawler does.  Hand-derived with max_sessions=8 and
    the default share 8 // 4 = 2; a replaced id keeps its kind; expiry frees browser slots."""
    cat = get_catalogue(CatalogueSpec(source=mini_dir, verify=False))
    from agent_envs.webshop.scorer import get_tagger

    clock = FakeClock()
    store = SessionStore(max_sessions=8, ttl=100, clock=clock)
    mk = lambda sid: ShopSession(cat, cat.goals[0], get_tagger("lexicon"), sid)
    assert store.max_browser_sessions == 2
    store.put("page-a", mk("page-a"), browser=True)
    clock.now += 10.0
    store.put("page-b", mk("page-b"), browser=True)
    with pytest.raises(SessionStoreFull, match=r"2 live sessions opened from pages.*--max-browser-sessions") as full:
        store.put("page-c", mk("page-c"), browser=True)
    assert full.value.retry_after == 90  # page-a, used at t=1000, expires at 1100; now t=1010
    store.put("page-a", mk("page-a"))  # an API reset of a page's id: allowed, still a page's slot
    assert store.browser_sessions() == 2
    for i in range(6):  # the API's six slots are all there
        store.put(f"api-{i}", mk(f"api-{i}"))
    with pytest.raises(SessionStoreFull, match=r"8 live sessions \(its --max-sessions\)"):
        store.put("api-6", mk("api-6"))
    assert store.delete("page-b") and store.browser_sessions() == 1
    store.put("page-c", mk("page-c"), browser=True)
    clock.now += 100.0  # everything idle for >= 100 s expires
    assert (len(store), store.browser_sessions()) == (0, 0)
    assert SessionStore(1).max_browser_sessions == 1 and SessionStore(4096).max_browser_sessions == 1024
    for bad in (0, 9, True, 2.5):
        with pytest.raises(ValueError, match="max_browser_sessions"):
            SessionStore(8, max_browser_sessions=bad)


def test_a_page_crawl_over_http_leaves_the_environments_their_slots(mini_dir):
    """The issue's lockout: new ids crawled as pages get 503 beyond their share (HTML, naming
    --max-browser-sessions), while environments' resets keep getting slots."""
    app = create_app(CatalogueSpec(source=mini_dir, verify=False), tagger="lexicon", max_sessions=6,
                     max_browser_sessions=2)
    with BackgroundServer(app) as srv, requests.Session() as http:
        http.trust_env = False
        codes = [http.get(f"{srv.url}/crawl-{i}").status_code for i in range(20)]
        assert codes == [200, 200] + [503] * 18
        page = http.get(f"{srv.url}/crawl-99")
        assert "text/html" in page.headers["Content-Type"] and "--max-browser-sessions" in page.text
        assert int(page.headers["Retry-After"]) == 1800
        for i in range(4):
            assert http.post(f"{srv.url}/api/env-{i}/reset", json={"task": 0}).status_code == 200
        health = http.get(f"{srv.url}/healthz").json()
        assert (health["sessions"], health["browser_sessions"], health["max_browser_sessions"]) == (6, 2, 2)


def test_full_server_answers_503_with_retry_after_and_idle_sessions_expire(mini_dir):
    """Over real HTTP: a new id on a server full of live sessions gets 503 (JSON for the API,
    HTML for pages) with Retry-After and the remedy; the live sessions keep playing; once
    they are idle for the TTL they expire (404 naming the TTL) and new ids are admitted."""
    clock = FakeClock()
    app = create_app(CatalogueSpec(source=mini_dir, verify=False), tagger="lexicon", max_sessions=2,
                     session_ttl=300, clock=clock)
    with BackgroundServer(app) as srv, requests.Session() as http:
        http.trust_env = False
        u = srv.url
        assert http.post(f"{u}/api/one/reset", json={"task": 0}).status_code == 200
        assert http.get(f"{u}/two").status_code == 200
        clock.now += 10.0
        api = http.post(f"{u}/api/three/reset", json={"task": 0})
        page = http.get(f"{u}/three")
        assert api.status_code == page.status_code == 503
        # both sessions were used at t=1000 and expire at 1300: 290 s from t=1010
        assert api.headers["Retry-After"] == page.headers["Retry-After"] == "290"
        assert api.json()["status"] == 503 and "--max-sessions" in api.json()["message"]
        assert "text/html" in page.headers["Content-Type"] and "--session-ttl" in page.text
        step = http.post(f"{u}/api/one/step", json={"action": "search[running shoes]"})
        assert step.status_code == 200 and step.json()["snapshot"]["page"] == "results"
        client = HttpBackend(u, tagger_name="lexicon-v1", session_id="three")
        with pytest.raises(ServerFullError, match=rf"{re.escape(u)} is full.*--max-sessions.*--session-ttl") as err:
            client.start(get_catalogue(CatalogueSpec(source=mini_dir, verify=False)).goals[0])
        assert err.value.retry_after == 290.0 and isinstance(err.value, RemoteError)
        clock.now += 290.0  # "two" idle for 300 s; "one" was used at t=1010, 290 s ago
        assert http.post(f"{u}/api/three/reset", json={"task": 0}).status_code == 200
        gone = http.get(f"{u}/search_results/two/shoes/1")
        assert gone.status_code == 404 and "idle for more than 300 s" in gone.text
        assert http.get(f"{u}/healthz").json()["sessions"] == 2  # one and three
        clock.now += 300.0
        assert http.get(f"{u}/healthz").json()["sessions"] == 0


# --------------------------------------------------------------------------- the production worker
LIMITS = {"max_head": 200, "max_body": 10, "drain_limit": 100, "max_line": 100}


@pytest.mark.parametrize(("data", "expected"), [
    (b"GET / HTTP/1.1\r\nHost: x", ("more", 0, 0, 0)),
    (b"GET / HTTP/1.1\r\n\r\n", ("ready", 18, 0, 0)),
    (b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n", ("ready", 18, 0, 0)),  # the first of two
    (b"GET /" + b"a" * 200, ("refuse", 0, 414, 0)),  # a request line past max_line, no end yet
    (b"GET /" + b"a" * 80 + b" HTTP/1.1\r\n" + b"X: y\r\n" * 20, ("refuse", 0, 431, 0)),  # 216 > max_head
    (b"GET /" + b"a" * 101 + b" HTTP/1.1\r\n\r\n", ("refuse", 0, 414, 0)),
    (b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\nab", ("more", 0, 0, 0)),
    (b"POST / HTTP/1.1\r\ncontent-length: 4\r\n\r\nabcdGET", ("ready", 42, 0, 0)),
    (b"POST / HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n", ("continue", 0, 0, 0)),
    (b"POST / HTTP/1.1\r\nContent-Length: 40\r\n\r\nabc", ("drain", 39, 413, 40)),
    (b"POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", ("refuse", 0, 413, 0)),  # past drain_limit
    (b"POST / HTTP/1.1\r\nContent-Length: 40\r\nExpect: 100-continue\r\n\r\n", ("refuse", 0, 413, 0)),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", ("more", 0, 0, 0)),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\n\r\n", ("ready", 64, 0, 0)),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\r\n\r\n", ("ready", 60, 0, 0)),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nb\r\n", ("refuse", 0, 413, 0)),  # 11 > 10
    # framing gunicorn refuses (400) is handed over as it is, never waited for
    (b"POST / HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n", ("ready", 57, 0, 0)),
    (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", ("ready", 39, 0, 0)),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nxx", ("ready", 46, 0, 0)),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", ("ready", 51, 0, 0)),
])
def test_requests_are_framed_before_a_thread_takes_them(data, expected):
    """Byte offsets counted by hand: "GET / HTTP/1.1\r\n" is 16 bytes, the blank line 2 more."""
    from agent_envs.webshop.http_worker import frame_request

    frame = frame_request(data, **LIMITS)
    assert (frame.state, frame.end, frame.status, frame.drop) == expected


@pytest.mark.parametrize(("line", "on_loop"), [
    (b"POST /api/s1/step HTTP/1.1\r\n", True),
    (b"GET /api/s1/snapshot HTTP/1.1\r\n", True),
    (b"DELETE /api/s1 HTTP/1.1\r\n", True),
    (b"GET /search_results/s1/api/1 HTTP/1.1\r\n", False),  # "/api/" further in: a page
    (b"GET /apiary HTTP/1.1\r\n", False),
    (b"GET /healthz HTTP/1.1\r\n", False),
    (b"POST /s1 HTTP/1.1\r\n", False),
    (b"XXXXXXXXXXXXXXXXXXXX /api/s1/step HTTP/1.1\r\n", False),  # no method is that long
])
def test_the_production_server_serves_the_json_api_on_its_event_loop(line, on_loop):
    """``rubricgym webshop serve``'s worker answers the JSON API on the loop and every page on a
    thread; with ``loop_paths=()`` every request goes to a thread."""
    from agent_envs.webshop.http_worker import _target_starts
    from agent_envs.webshop.wsgi import ProductionOptions

    worker = ProductionOptions().gunicorn_settings(fd=3)["worker_class"]
    assert worker.loop_paths == (b"/api/",)
    assert _target_starts(bytearray(line), worker.loop_paths) is on_loop
    threaded = ProductionOptions(loop_paths=()).gunicorn_settings(fd=3)["worker_class"]
    assert _target_starts(bytearray(line), threaded.loop_paths) is False


def test_bm25s_prints_no_debug_line_and_the_callers_logging_is_kept():
    """bm25s sets its own logger to DEBUG when imported: every index then printed "DEBUG
    bm25s: Building index from tokens" under a WARNING root handler.  The import leaves the
    caller's level in place: NOTSET by default (nothing printed), DEBUG when the caller asked."""
    code = """
import logging, sys
logging.basicConfig(level=logging.WARNING)
if sys.argv[1] == "debug":
    logging.getLogger("bm25s").setLevel(logging.DEBUG)
from agent_envs.webshop.search import SearchIndex
assert SearchIndex(["red shoes", "blue table"]).search("shoes") == [0]
print(logging.getLogger("bm25s").level)
"""
    quiet, asked = (subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, timeout=120,
                                   cwd=REPO, check=True) for arg in ("default", "debug"))
    assert quiet.stdout.strip() == "0" and "bm25s" not in quiet.stderr, quiet.stderr
    assert asked.stdout.strip() == "10" and "DEBUG:bm25s:Building index" in asked.stderr


# --------------------------------------------------------------------------- HTML routes
def test_html_pages_follow_upstream_routes_and_dom_hooks(mini_server, http, mini_dir):
    u = mini_server.url
    cat = get_catalogue(CatalogueSpec(source=mini_dir, verify=False))
    from agent_envs.webshop.scorer import get_tagger

    ref = ShopSession(cat, cat.goals[0], get_tagger("lexicon"))  # the embedded twin of fixed_0

    def check(resp, page):
        assert resp.status_code == 200 and resp.headers["Content-Type"].startswith("text/html")
        p = parse(resp.text)
        assert f'data-page="{page}"' in resp.text
        # one DOM element per node, in order: the DOM gives the embedded observations exactly
        assert p.nodes == ref.nodes()
        assert (to_text(p.nodes), to_text_rich(p.nodes)) == (ref.observation("text"), ref.observation("text_rich"))
        return p

    start = http.get(f"{u}/fixed_0")
    p = check(start, "start")
    assert any(a["tag"] == "input" and a.get("id") == "search_input" for a in p.attrs)
    assert re.search(r'<div id="instruction-text"[^>]*><h4>.*' + re.escape(GOAL), start.text)
    r = http.post(f"{u}/fixed_0", data={"search_query": "Running  Shoes"}, allow_redirects=False)
    assert r.status_code == 303 and r.headers["Location"] == "/search_results/fixed_0/running%20shoes/1"
    ref.act("search[running shoes]")
    p = check(http.get(u + r.headers["Location"]), "results")
    links = [a for a in p.attrs if "product-link" in (a.get("class") or "")]
    assert [a["data-role"] for a in links] == ["link"] * 3
    assert links[1]["href"] == "/item_page/fixed_0/B000000001/running%20shoes/1/%7B%7D"
    ref.act("click[b000000001]")
    p = check(http.get(u + links[1]["href"]), "item")
    radios = [a for a in p.attrs if a["tag"] == "input" and a.get("type") == "radio"]
    labels = {a["for"]: a for a in p.attrs if a["tag"] == "label"}
    assert [r_["value"] for r_ in radios] == ["black", "navy blue", "9", "10"]
    assert all(r_["id"] in labels for r_ in radios)  # radio input[value] with label[for]
    navy = next(r_ for r_ in radios if r_["value"] == "navy blue")
    assert unquote(navy["data-href"]).endswith('/{"color":"navy blue"}')
    ref.act("click[navy blue]")
    p = check(http.get(u + navy["data-href"]), "item")
    ten = next(a for a in p.attrs if a["tag"] == "input" and a.get("value") == "10")
    ref.act("click[10]")
    p = check(http.get(u + ten["data-href"]), "item")
    feats = next(a for a in p.attrs if a.get("data-role") == "button" and "features" in (a.get("href") or ""))
    ref.act("click[features]")
    check(http.get(u + feats["href"]), "item_sub")
    ref.act("click[< prev]")
    p = check(http.get(u + "/item_page/fixed_0/B000000001/running%20shoes/1/"
                       + "%7B%22color%22%3A%22navy%20blue%22%2C%22size%22%3A%2210%22%7D"), "item")
    buy = next(a for a in p.attrs if a["tag"] == "form" and a.get("class") == "buy-form")
    assert any(a["tag"] == "button" and "purchase" in a.get("class", "") for a in p.attrs)
    r = http.post(u + buy["action"], allow_redirects=False)
    assert r.status_code == 303
    ref.act("click[buy now]")
    p = check(http.get(u + r.headers["Location"]), "done")
    pre = next(a for a in p.attrs if a["tag"] == "pre")
    assert pre["data-score"] == "1.0" and p.nodes[-1].text == "1.0000"  # the '#reward pre' hook
    # a finished episode cannot be re-bought with other options; the start page starts over
    assert http.get(f"{u}/done/fixed_0/B000000001/%7B%7D").status_code == 409
    assert "Search" in to_text(parse(http.get(f"{u}/fixed_0").text).nodes)


def test_pages_load_only_local_assets(mini_server, http):
    html = http.get(f"{mini_server.url}/fixed_0").text
    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert refs and all(r.startswith("/") and not r.startswith("//") for r in refs), refs
    for ref in [r for r in refs if r.startswith("/static/")]:
        resp = http.get(mini_server.url + ref)
        assert resp.status_code == 200 and "http" not in resp.text  # no CDN, no remote imports
    csp = http.get(f"{mini_server.url}/fixed_0").headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp


# --------------------------------------------------------------------------- env equivalence
@pytest.mark.parametrize("mode", ["text", "text_rich"])
def test_scripted_episode_identical_embedded_and_server(mini_server, mini_dir, mode):
    kw = dict(catalogue=mini_dir, verify=False, tagger="lexicon", observation_mode=mode)
    embedded = trace(WebShopRubricEnv(**kw), MINI_SCRIPT)
    env = WebShopRubricEnv(server_url=mini_server.url, **kw)
    served = trace(env, MINI_SCRIPT)
    env.close()
    assert served == embedded  # observations, rewards, flags, every info field, the snapshots
    _obs, r, term, _trunc, info, _snap = embedded[-1]
    assert (r, term, info["score"], info["rubric"]["solved"]) == (10.0, True, 1.0, True)
    # the near miss B000000002 (road shoes, $995) with black selected: query match so u = 1;
    # attributes: breathable mesh yes, arch support no -> M_a = 1 of 2; options: black is not
    # navy blue, no size -> M_o = 0 of 2; 995 > 990 -> p = 0.  Eq. 19: 1 * (1+0+0)/(2+2+1) = 0.2
    assert embedded[4][4]["rubric"]["purchase_readiness"] == pytest.approx(0.2)
    assert [s[4]["valid"] for s in embedded[1:]].count(False) == 2  # click[x], search[x]


def test_random_walks_identical_embedded_and_server(gen_server):
    kw = dict(catalogue="generated", num_products=1000, tagger="lexicon")
    a, b = WebShopRubricEnv(**kw), WebShopRubricEnv(server_url=gen_server.url, **kw)
    rng = random.Random(7)
    for task in (0, 17, 400):
        actions, (_obs, info) = [], a.reset(options={"task": task})
        for _ in range(14):
            acts = info["admissible_actions"] or ["click[x]"]
            act = rng.choice(acts + ["click[nope]"]).replace("<your query>", info["task"]["goal"][:30])
            actions.append(act)
            _obs, _r, term, trunc, info = a.step(act)
            if term or trunc:
                break
        assert trace(b, actions, task) == trace(a, actions, task)
    b.close()


def test_check_env_passes_in_server_mode(gen_server):
    env = WebShopRubricEnv(catalogue="generated", num_products=1000, tagger="lexicon", server_url=gen_server.url)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env)
    env.close()


@pytest.fixture(scope="module")
def server_env(gen_server):
    env = WebShopRubricEnv(catalogue="generated", num_products=1000, tagger="lexicon", server_url=gen_server.url)
    yield env
    env.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=st.lists(st.one_of(
    st.text(max_size=200),
    st.builds(lambda s: f"click[{s}]", st.text(max_size=30)),
    st.builds(lambda s: f"search[{s}]", st.text(max_size=80)),
    st.sampled_from(["search[../..]", "search[%2F%00]", "search[<script>alert(1)</script>]", "click[]",
                     "search[" + "x" * 600 + "]", "\x00", "search[\u202e\ud7ff\U0001f600]"]),
    st.integers(0, 40)), min_size=1, max_size=15))
def test_action_fuzzing_never_crashes_server_mode(server_env, actions):
    obs, info = server_env.reset(options={"task": 5})
    for a in actions:
        if isinstance(a, int):
            acts = info["admissible_actions"]
            if not acts:
                break
            a = acts[a % len(acts)].replace("<your query>", "candle")
        obs, r, term, trunc, info = server_env.step(a)
        assert server_env.observation_space.contains(obs)
        assert r in (0.0, 10.0, -0.1)
        assert 0.0 <= info["score"] <= 1.0
        if term or trunc:
            break


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["human", "synthetic"])
def test_oracle_scores_one_on_generated_goals_through_the_server(gen_server, kind):
    """Every goal of both kinds (835 human, 2914 synthetic) is bought with score 1.0 over HTTP."""
    env = WebShopRubricEnv(catalogue="generated", num_products=1000, tagger="lexicon", goal_kind=kind,
                           server_url=gen_server.url)
    n = len(env.goals())
    assert n > 700
    failures = []
    for i in range(n):
        env.reset(options={"task": i})
        term = trunc = False
        while not (term or trunc):
            _obs, r, term, trunc, info = env.step(oracle_action(env.unwrapped))
        if not (term and info["score"] == 1.0 and r == 10.0 and info["won"]):
            failures.append((i, info["score"]))
    env.close()
    assert failures == []


def test_concurrent_sessions_are_isolated(gen_server):
    """Eight clients play different goals at once; each gets exactly its embedded episode."""
    kw = dict(catalogue="generated", num_products=1000, tagger="lexicon")
    tasks = [3, 9, 27, 81, 100, 200, 300, 500]

    def oracle_trace(env, task):
        obs, info = env.reset(options={"task": task})
        out, term = [obs], False
        while not term:
            obs, r, term, _trunc, info = env.step(oracle_action(env))
            out.append((obs, r, info["rubric"], info["keys"]))
        return out

    expected = {t: oracle_trace(WebShopRubricEnv(**kw), t) for t in tasks}
    got: dict[int, list] = {}
    errors: list[BaseException] = []

    def client(task):
        try:
            env = WebShopRubricEnv(server_url=gen_server.url, **kw)
            for _ in range(3):
                got[task] = oracle_trace(env, task)
            env.close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(t,)) for t in tasks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and got == expected


# --------------------------------------------------------------------------- safety
XSS = "\"'><script>alert('x')</script><img src=x onerror=alert(1)>"


def test_xss_keyword_is_escaped_in_pages_and_urls(mini_server, http):
    u = mini_server.url
    http.get(f"{u}/xss")
    r = http.post(f"{u}/xss", data={"search_query": XSS}, allow_redirects=False)
    loc = r.headers["Location"]
    assert r.status_code == 303 and not set('<>" ') & set(loc)
    path = urlsplit(loc).path
    assert decode_segment(unquote(path.split("/")[3])) == XSS.lower()  # round trip
    page = http.get(u + loc)
    assert page.status_code == 200
    html = page.text
    assert "<script>" not in html.lower().replace('<script src="/static/webshop.js" defer>', "")
    assert "onerror=alert" not in html.replace("onerror=alert(1)&gt;", "")
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html  # the <title> echo, escaped
    for href in re.findall(r'href="([^"]+)"', html):
        assert not set("<>\"' ") & set(href)
    # the item page built from those URLs carries the keywords through unchanged
    item = re.search(r'class="product-link" href="([^"]+)"', html)
    if item:  # some product may match 'x'/'img'/'src'
        assert http.get(u + item.group(1).replace("&amp;", "&")).status_code == 200
    snap = http.get(f"{u}/api/xss/snapshot").json()["snapshot"]
    assert snap["keywords"] == " ".join(XSS.lower().split()) or snap["page"] == "item"
    # error pages echo bad parameters escaped, too
    err = http.get(f"{u}/item_page/xss/%3Cb%3Eboom/x/1/%7B%7D")  # asins are upper-cased
    assert err.status_code == 404 and "<B>BOOM" not in err.text and "&lt;B&gt;BOOM" in err.text


@pytest.mark.parametrize("keywords", ["a/b", "..", ".", "100% cotton", "what?#frag", "ünïcode ✓ +plus", "%2F%25"])
def test_tricky_keywords_survive_the_url_round_trip(mini_server, http, keywords):
    u = mini_server.url
    http.get(f"{u}/tricky")
    page = http.post(f"{u}/tricky", data={"search_query": keywords})
    assert page.status_code == 200 and 'data-page="results"' in page.text
    assert http.get(f"{u}/api/tricky/snapshot").json()["snapshot"]["keywords"] == keywords.lower()


def test_malformed_and_oversize_requests_get_4xx(mini_server, http):
    u = mini_server.url
    assert http.post(f"{u}/api/bad/reset", json={"task": 0}).status_code == 200
    big = "x" * (MAX_CONTENT_LENGTH + 1)
    cases = [
        ("POST", "/api/bad/step", "json", {"action": big}, 413),
        ("POST", "/bad", "form", {"search_query": big}, 413),
        ("POST", "/api/bad/step", "raw", b"{not json", 400),
        ("POST", "/api/bad/step", "raw", b"[1, 2]", 400),
        ("POST", "/api/bad/step", "json", {"action": 5}, 400),
        ("POST", "/api/bad/step", "json", {"action": "a" * 4097}, 400),
        ("POST", "/api/bad/reset", "json", {"task": 10**9}, 400),
        ("POST", "/api/bad/reset", "json", {"task": True}, 400),
        ("POST", "/api/bad/reset", "json", {"task": 0, "kind": "alien"}, 400),
        ("POST", "/api/bad/reset", "json", {"task": 0, "instruction": "another catalogue"}, 409),
        ("POST", "/api/bad/reset", "json", {"task": 0, "tagger": "no-such-tagger"}, 409),
        ("POST", "/api/no!such/reset", "json", {"task": 0}, 400),
        ("POST", "/api/" + "a" * 65 + "/reset", "json", {"task": 0}, 400),
        ("GET", "/api/nosuch/snapshot", None, None, 404),
        ("POST", "/api/nosuch/step", "json", {"action": "click[x]"}, 404),
        ("GET", "/api/bad/step", None, None, 405),
        ("POST", "/bad", "form", {"other": "field"}, 400),
        ("GET", "/search_results/bad/" + "k" * 9000 + "/1", None, None, 414),
        ("GET", "/search_results/bad/" + "k" * 600 + "/1", None, None, 400),
        ("GET", "/search_results/bad/shoes/0", None, None, 400),
        ("GET", "/search_results/bad/shoes/99", None, None, 400),
        ("GET", "/search_results/bad/shoes/-1", None, None, 404),
        ("GET", "/search_results/nosuch/shoes/1", None, None, 404),
        ("GET", "/item_page/bad/B999/shoes/1/%7B%7D", None, None, 404),
        ("GET", "/item_page/bad/B000000001/shoes/1/not-json", None, None, 400),
        ("GET", "/item_page/bad/B000000001/shoes/1/%5B%5D", None, None, 400),
        ("GET", "/item_page/bad/B000000001/shoes/1/%7B%22color%22%3A%22pink%22%7D", None, None, 400),
        ("GET", "/item_page/bad/B000000001/%FF%FE/1/%7B%7D", None, None, 200),  # odd bytes are just keywords
        ("GET", "/item_sub_page/bad/B000000001/shoes/1/secrets/%7B%7D", None, None, 400),
        ("GET", "/done/bad/B000000001/%7B%22size%22%3A5%7D", None, None, 400),
        ("GET", "/a.b", None, None, 400),
        ("GET", "/too/many/segments/here", None, None, 404),
    ]
    for method, path, kind, body, want in cases:
        kwargs = {"json": body} if kind == "json" else {"data": body} if kind in ("form", "raw") else {}
        if kind == "raw":
            kwargs["headers"] = {"Content-Type": "application/json"}
        r = http.request(method, u + path, **kwargs)
        assert r.status_code == want, (method, path[:80], r.status_code, r.text[:200])
        if path.startswith("/api/"):
            assert r.json()["status"] == want and r.json()["message"]
    # the server still answers normally after all those refusals
    assert http.get(f"{u}/healthz").json()["status"] == "ok"


def test_malformed_http_gets_4xx_on_the_socket(mini_server):
    import socket

    def raw(payload: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", mini_server.port), timeout=10) as s:
            s.sendall(payload)
            return s.recv(4096)

    assert raw(b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * 120 + b"\r\n").startswith(b"HTTP/1.1 431")
    assert raw(b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 414")
    assert raw(b"BREW /fixed_0 HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 405")


def test_http_backend_reports_server_problems(mini_server, gen_server, mini_dir):
    # a client on another catalogue: the server refuses the goal (instructions differ)
    env = WebShopRubricEnv(catalogue="generated", num_products=1000, tagger="lexicon", server_url=mini_server.url)
    with pytest.raises(RemoteError, match="different catalogues|out of range|goal index"):
        env.reset(options={"task": 0})
    # a client scoring with another tagger
    api = HttpBackend(mini_server.url, tagger_name="lexicon-v2")
    with pytest.raises(RemoteError, match="HTTP 409.*noun tagger"):
        api.start(get_catalogue(CatalogueSpec(source=mini_dir, verify=False)).goals[0])
    # nobody listening on that port
    with BackgroundServer(create_app(CatalogueSpec(source=mini_dir, verify=False), tagger="lexicon")) as srv:
        dead = srv.url
    with pytest.raises(RemoteError, match="unreachable.*rubricgym webshop serve"):
        WebShopRubricEnv(catalogue=mini_dir, verify=False, tagger="lexicon", server_url=dead).reset(options={"task": 0})
    with pytest.raises(ValueError, match="server_url must look like"):
        WebShopRubricEnv(catalogue=mini_dir, verify=False, tagger="lexicon", server_url="ftp://x")


def test_healthz_and_home(mini_server, http):
    h = http.get(f"{mini_server.url}/healthz").json()
    assert (h["status"], h["products"], h["goals"]["human"], h["tagger"]) == ("ok", 5, 1, "lexicon-v1")
    r = http.get(mini_server.url + "/", allow_redirects=False)
    assert r.status_code == 302 and re.fullmatch(r"/[0-9a-f]{16}", r.headers["Location"])


# --------------------------------------------------------------------------- entry point, docker
@pytest.mark.slow
def test_serve_cli_entry_point_plays_an_episode(tmp_path, mini_dir):
    """`rubricgym webshop serve` (the Docker image's command) on a free loopback port."""
    proc = subprocess.Popen([sys.executable, "-m", "trainers.cli", "webshop", "serve", "--port", "0",
                             "--data", mini_dir, "--no-verify", "--tagger", "lexicon"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    try:
        url, lines, deadline = None, [], time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
            url = m.group(1) if m else None
        assert url, "".join(lines)
        assert requests.get(url + "/healthz", timeout=10).json()["products"] == 5
        env = WebShopRubricEnv(catalogue=mini_dir, verify=False, tagger="lexicon", server_url=url)
        env.reset(options={"task": 0})
        term = False
        while not term:
            _obs, r, term, _trunc, info = env.step(oracle_action(env))
        assert (r, info["score"]) == (10.0, 1.0)
        env.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_docker_files_publish_on_loopback_and_check_health():
    compose = yaml.safe_load((REPO / "docker/webshop/compose.yaml").read_text())
    svc = compose["services"]["webshop"]
    assert svc["ports"] and all(str(p).startswith("127.0.0.1:") for p in svc["ports"])
    assert "/healthz" in " ".join(svc["healthcheck"]["test"])
    docker = (REPO / "docker/webshop/Dockerfile").read_text()
    assert re.search(r'CMD \["rubricgym", "webshop", "serve", "--host", "0\.0\.0\.0", "--port", "3000"', docker)
    assert "/healthz" in docker and "STOPSIGNAL SIGTERM" in docker
    # the command the image runs exists with those options (the test above runs it)
    out = subprocess.run([sys.executable, "-m", "trainers.cli", "webshop", "serve", "--help"],
                         check=False, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0 and "--host" in out.stdout and "--data" in out.stdout


def test_compose_is_hardened_and_passes_verification_through():
    """Read-only root with a tmpfs /tmp, no capabilities, no-new-privileges, a memory limit,
    sha256 verification settable from the environment, and no endless restart loop."""
    svc = yaml.safe_load((REPO / "docker/webshop/compose.yaml").read_text())["services"]["webshop"]
    assert svc["read_only"] is True and any(str(t).startswith("/tmp") for t in svc["tmpfs"])
    assert svc["cap_drop"] == ["ALL"] and "no-new-privileges:true" in svc["security_opt"]
    assert svc["mem_limit"]
    assert svc["environment"]["RUBRICGYM_WEBSHOP_VERIFY"] == "${RUBRICGYM_WEBSHOP_VERIFY:-1}"
    assert re.fullmatch(r"on-failure:\d", svc["restart"])  # not always/unless-stopped
    assert all(v.endswith(":ro") for v in svc["volumes"])
    assert svc["init"] is True  # Docker's init is PID 1 and forwards SIGTERM
    # no setuid/setgid file is left in the image (tests/test_docker_image.py checks the built one)
    assert "find / -xdev -perm /6000 -type f -exec chmod a-s {} +" in (REPO / "docker/webshop/Dockerfile").read_text()


def _lock_module():
    """docker/lock.py, the recipe of every image's lock (docker/webshop/lock.py runs it)."""
    import runpy
    from types import SimpleNamespace

    return SimpleNamespace(**runpy.run_path(str(REPO / "docker/lock.py"), run_name="docker_lock"))


PLOTTING_STACK = {"matplotlib", "pillow", "fonttools", "contourpy", "kiwisolver", "cycler", "pyparsing",
                  "python-dateutil", "scipy"}


def test_image_dependencies_are_locked_and_installed_before_the_source():
    """docker/webshop/requirements.txt pins every package exactly, satisfies pyproject.toml's
    webshop extra and the core dependencies the server imports, and holds no plotting stack;
    the Dockerfile installs it before copying the source (layer cache), then the package with
    --no-deps, and runs its check against the installed package."""
    import tomllib
    from packaging.utils import canonicalize_name

    lock = _lock_module()
    image = lock.IMAGES["webshop"]
    assert image.lock == REPO / "docker/webshop/requirements.txt"
    lines = [ln for ln in image.lock.read_text().splitlines() if ln and not ln.startswith("#")]
    pins = {}
    for ln in lines:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==([0-9][A-Za-z0-9.+!-]*)", ln)
        assert m, f"not an exact pin: {ln!r}"
        pins[canonicalize_name(m.group(1))] = m.group(2)
    assert not PLOTTING_STACK & set(pins)
    roots = lock.server_roots(tomllib.loads((REPO / "pyproject.toml").read_text()), image.extras)
    assert {"gunicorn", "flask", "spacy", "numpy", "gymnasium", "typer", "rich"} <= {canonicalize_name(r.name)
                                                                                     for r in roots}
    for req in roots:
        if req.marker is not None and not req.marker.evaluate():
            continue
        name = canonicalize_name(req.name)
        assert name in pins, f"{name} missing from the lock: run python docker/webshop/lock.py"
        assert req.specifier.contains(pins[name], prereleases=True), (req, pins[name])
    assert not {canonicalize_name(n) for n in lock.NOT_IN_IMAGE} & {canonicalize_name(r.name) for r in roots}
    assert "setuptools" in pins  # the package is built without the network (--no-build-isolation)

    docker = (REPO / "docker/webshop/Dockerfile").read_text()
    steps = [ln for ln in docker.splitlines() if re.match(r"(COPY|RUN|USER|WORKDIR|FROM|ARG) ", ln)]
    first_source = next(i for i, ln in enumerate(steps) if re.match(r"COPY (agent_envs|pyproject)", ln))
    lock_install = next(i for i, ln in enumerate(steps) if "pip install --no-deps -r /tmp/requirements.txt" in ln)
    assert steps.index("COPY docker/webshop/requirements.txt /tmp/requirements.txt") < lock_install < first_source
    assert "pip install --no-deps --no-build-isolation --no-index /tmp/src && rm -rf /tmp/src" in docker
    check = next(i for i, ln in enumerate(steps) if ln.startswith("RUN python -c"))
    assert check > first_source and steps[check - 1] == "WORKDIR /home/shop"
    assert re.search(r"^ARG BASE=python:3\.11-slim-bookworm", docker, re.MULTILINE)


def test_snapshot_json_round_trip_is_exact(mini_server, http, mini_dir):
    """Floats (scores, Eq. 19 components) survive JSON exactly."""
    http.post(f"{mini_server.url}/api/float/reset", json={"task": 0})
    for a in ["search[running shoes]", "click[b000000002]", "click[light blue]"]:
        body = http.post(f"{mini_server.url}/api/float/step", json={"action": a}).json()
    cat = get_catalogue(CatalogueSpec(source=mini_dir, verify=False))
    from agent_envs.webshop.scorer import get_tagger

    ref = ShopSession(cat, cat.goals[0], get_tagger("lexicon"))
    for a in ["search[running shoes]", "click[b000000002]", "click[light blue]"]:
        ref.act(a)
    assert body["snapshot"] == json.loads(json.dumps(ref.snapshot().to_dict()))
    assert body["snapshot"]["preview"]["total"] == ref.preview().total

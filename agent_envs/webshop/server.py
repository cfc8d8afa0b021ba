"""The WebShop shop as a real Flask web application (server mode).

One :class:`~agent_envs.webshop.session.ShopSession` per client id, over the process-wide
shared catalogue, served two ways:

* **HTML pages for people and browsers**, on upstream WebShop's routes::

      /<session>                                              start page (GET), search (POST)
      /search_results/<session>/<keywords>/<page>
      /item_page/<session>/<asin>/<keywords>/<page>/<options>
      /item_sub_page/<session>/<asin>/<keywords>/<page>/<sub_page>/<options>
      /done/<session>/<asin>/<options>                        purchase (POST, or GET as upstream)

  with upstream's DOM hooks (``#search_input``, ``.btn``, ``.product-link``, radio
  ``input[value]`` with ``label[for]``, ``button.purchase``, ``#instruction-text h4``,
  ``#reward pre``).  Every visible node of :meth:`ShopSession.nodes` is one DOM element
  carrying ``data-role`` (and ``data-clicked``/``data-group``), in order, so a browser reading
  the DOM rebuilds exactly the ``text``/``text_rich`` observations of the embedded engine.
  Pages load only local assets (one stylesheet, one optional five-line script); everything
  works without JavaScript.

* **a JSON API** for ``WebShop-Rubric-v0(server_url=...)``::

      GET    /healthz                       {"status": "ok", ...}
      POST   /api/<session>/reset           {"task": int, "kind": "human", "instruction": ..., "tagger": ...}
      POST   /api/<session>/step            {"action": "click[buy now]"} -> {"outcome", "snapshot"}
      GET    /api/<session>/snapshot        {"snapshot": PageSnapshot.to_dict()}
      DELETE /api/<session>                 forget the session

The views are a Flask blueprint (:func:`webshop_blueprint`): :func:`create_app` mounts it at
the root of its own app; any Flask app can mount it under a prefix (``url_prefix="/shop"``),
and every URL it builds follows.

Safety: Jinja autoescaping on every template; keywords, asins and options travel in URLs as
percent-encoded path segments (:func:`encode_segment`); request bodies are capped
(``MAX_CONTENT_LENGTH``), URLs, session ids, keywords and actions have length limits, and
every malformed or oversize request gets a 4xx answer with a message (never a 5xx).  Pages
send a restrictive Content-Security-Policy.  Sessions live in a thread-safe store
(:class:`SessionStore`), each with its own lock, so concurrent clients never see each other's
state; a session idle for ``session_ttl`` seconds expires, and a live one is never evicted to
admit a new id (a new id beyond ``max_sessions`` live sessions gets 503 with ``Retry-After``);
sessions opened by visiting a page hold at most ``max_browser_sessions`` slots, so the JSON
API's environments always find the rest.  The server has no authentication: whoever reaches
its port can open, play and close any session; serve it on loopback or a private network only.

Serving: :func:`agent_envs.webshop.wsgi.serve_production` (gunicorn; what
``rubricgym webshop serve`` runs), :func:`serve` (werkzeug's development server) and
:class:`BackgroundServer` (werkzeug in a thread of the caller, for tests and embedded use).

Example:
    >>> from agent_envs.webshop.catalogue import CatalogueSpec
    >>> app = create_app(CatalogueSpec(num_products=120), tagger="lexicon")
    >>> client = app.test_client()
    >>> client.get("/healthz").json["status"]
    'ok'
    >>> r = client.post("/api/demo/reset", json={"task": 0})
    >>> r.json["snapshot"]["page"]
    'start'
    >>> client.post("/api/demo/step", json={"action": "search[shoes]"}).json["snapshot"]["page"]
    'results'
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import random
import re
import threading
import time
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import jinja2
from flask import Blueprint, Flask, Response, abort, jsonify, redirect, request, url_for
from werkzeug.exceptions import HTTPException, default_exceptions
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from agent_envs.webshop.catalogue import Catalogue, CatalogueSpec, get_catalogue
from agent_envs.webshop.goals import Goal
from agent_envs.webshop.scorer import NounTagger, get_tagger
from agent_envs.webshop.session import (
    MAX_KEYWORDS_CHARS,
    NAV_BUTTONS,
    SUB_PAGES,
    PageSnapshot,
    RouteError,
    ShopSession,
)

if TYPE_CHECKING:
    from flask.sansio.blueprints import BlueprintSetupState
    from typing_extensions import Self

__all__ = [
    "DEFAULT_SESSION_TTL_S",
    "MAX_ACTION_CHARS",
    "MAX_CONTENT_LENGTH",
    "MAX_SESSION_ID_CHARS",
    "MAX_URL_CHARS",
    "SECURITY_HEADERS",
    "SESSION_ID_RE",
    "BackgroundServer",
    "SessionStore",
    "SessionStoreFull",
    "ShopServer",
    "create_app",
    "decode_segment",
    "encode_segment",
    "is_loopback",
    "serve",
    "snapshot_dict",
    "webshop_blueprint",
]

logger = logging.getLogger(__name__)

#: Largest request body accepted (413 above).
MAX_CONTENT_LENGTH = 64 * 1024
#: Longest request path accepted (414 above).
MAX_URL_CHARS = 8192
MAX_SESSION_ID_CHARS = 64
#: Idle seconds after which a session expires (``--session-ttl``).
DEFAULT_SESSION_TTL_S = 1800.0
#: Longest action accepted by the API (the environment's own limit).
MAX_ACTION_CHARS = 4096
#: Session ids: letters, digits, ``_`` and ``-``.
SESSION_ID_RE = re.compile(rf"^[A-Za-z0-9_-]{{1,{MAX_SESSION_ID_CHARS}}}$")
_FIXED_RE = re.compile(r"^fixed_(\d{1,9})$")
_DRAIN_LIMIT = 1 << 20  # oversize bodies up to this size are read (and dropped) before the 413
_NONE_SEGMENT = "%"  # never produced by encode_segment for a string (every '%' is escaped)
_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
#: Headers every answer carries unless its view set them (pages and API answers also get
#: ``Cache-Control: no-store``; static files do not).
SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    ("Content-Security-Policy", _CSP), ("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"))
_NO_STORE = ("Cache-Control", "no-store")


# --------------------------------------------------------------------------- URL segments
def encode_segment(text: str | None) -> str:
    """Escape ``text`` for one URL path segment, before the URL builder percent-encodes it.

    A WSGI server hands the application percent-*decoded* paths, so a ``/`` inside keywords
    would split the segment and ``.``/``..`` would be removed by browsers as dot segments.
    We therefore escape ``%`` and ``/`` (and whole-segment dots) in-band first; the URL
    builder then quotes the result once more, and :func:`decode_segment` undoes the in-band
    step.  ``None`` (an item opened without a search) becomes a lone ``%``, which no string
    encodes to.

    >>> encode_segment("a/b 100%"), decode_segment(encode_segment("a/b 100%"))
    ('a%2Fb 100%25', 'a/b 100%')
    >>> encode_segment(".."), decode_segment(encode_segment(None)) is None
    ('%2E%2E', True)
    """
    if text is None:
        return _NONE_SEGMENT
    out = str(text).replace("%", "%25").replace("/", "%2F")
    if out in (".", ".."):
        out = out.replace(".", "%2E")
    return out


def decode_segment(raw: str) -> str | None:
    """Inverse of :func:`encode_segment` applied to a (WSGI-decoded) path segment."""
    if raw == _NONE_SEGMENT:
        return None
    return unquote(raw)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals.

    >>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# --------------------------------------------------------------------------- sessions
@dataclass
class _Entry:
    session: ShopSession
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_used: float = 0.0
    browser: bool = False  # opened by a page visit (GET /<id>), not by the JSON API


class SessionStoreFull(RuntimeError):
    """The store holds ``max_sessions`` live sessions: a new id is refused (HTTP 503).

    Attributes:
        retry_after: Seconds until the least recently used session expires (then a slot frees).
    """

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class SessionStore:
    """Thread-safe map of session id -> session (one lock per session) with idle expiry.

    A session untouched for ``ttl`` seconds is dropped; a live one is never evicted to admit a
    new id: when ``max_sessions`` live sessions exist, :meth:`put` of a new id raises
    :class:`SessionStoreFull` (the server answers 503 with ``Retry-After``).  Replacing the
    session of an existing id (a reset) is always allowed, and keeps the id's kind.

    Sessions opened by visiting a page (``browser=True``: any ``GET /<id>`` of a new id) are
    held at most ``max_browser_sessions`` at once, so that a client crawling page URLs cannot
    fill the store: the JSON API's environments always keep ``max_sessions -
    max_browser_sessions`` slots of their own.

    Args:
        max_sessions: Live sessions held at most.
        ttl: Idle seconds after which a session expires.
        clock: Monotonic seconds (tests inject a fake one).
        max_browser_sessions: Live sessions opened from pages held at most (default: a quarter
            of ``max_sessions``, at least 1).

    Example:
        >>> from agent_envs.webshop.catalogue import CatalogueSpec, get_catalogue
        >>> cat, tagger = get_catalogue(CatalogueSpec(num_products=120)), get_tagger("lexicon")
        >>> now = [0.0]  # a fake clock
        >>> store = SessionStore(max_sessions=1, ttl=60, clock=lambda: now[0])
        >>> _ = store.put("a", ShopSession(cat, cat.goals[0], tagger, "a"))
        >>> now[0] = 59.0
        >>> try:  # "a" is live: "b" is refused, "a" is kept
        ...     store.put("b", ShopSession(cat, cat.goals[0], tagger, "b"))
        ... except SessionStoreFull as exc:
        ...     print(exc.retry_after, store.get("a") is not None)
        1 True
        >>> now[0] = 59.0 + 60  # "a" idle for 60 s: expired, "b" admitted
        >>> _ = store.put("b", ShopSession(cat, cat.goals[0], tagger, "b"))
        >>> store.get("a") is None, len(store)
        (True, 1)
    """

    def __init__(self, max_sessions: int = 4096, ttl: float = DEFAULT_SESSION_TTL_S,
                 clock: Callable[[], float] = time.monotonic, max_browser_sessions: int | None = None) -> None:
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ValueError(f"max_sessions must be a positive integer, got {max_sessions!r}")
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < float("inf"):
            raise ValueError(f"session ttl must be a positive number of seconds, got {ttl!r}")
        browser = max(1, max_sessions // 4) if max_browser_sessions is None else max_browser_sessions
        if isinstance(browser, bool) or not isinstance(browser, int) or not 1 <= browser <= max_sessions:
            raise ValueError(f"max_browser_sessions must be an integer from 1 to max_sessions "
                             f"({max_sessions}), got {browser!r}")
        self.max_sessions = max_sessions
        self.max_browser_sessions = browser
        self.ttl = float(ttl)
        self.clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first
        self._browser: OrderedDict[str, None] = OrderedDict()  # the ids opened from pages, LRU first
        self._lock = threading.Lock()

    def _expire(self, now: float) -> None:
        """Drop sessions idle for ``ttl`` seconds or more (they sit at the front); lock held."""
        while self._entries:
            sid, entry = next(iter(self._entries.items()))
            if now - entry.last_used < self.ttl:
                return
            del self._entries[sid]
            self._browser.pop(sid, None)
            logger.info("WebShop session %s expired (idle for %.0f s)", sid, now - entry.last_used)

    def _touch(self, sid: str, entry: _Entry, now: float) -> None:
        entry.last_used = now
        self._entries.move_to_end(sid)
        if entry.browser:
            self._browser.move_to_end(sid)

    def get(self, sid: str) -> _Entry | None:
        """The live entry of ``sid`` (marks it used now), or None (unknown or expired)."""
        with self._lock:
            now = self.clock()
            self._expire(now)
            entry = self._entries.get(sid)
            if entry is not None:
                self._touch(sid, entry, now)
            return entry

    def put(self, sid: str, session: ShopSession, *, browser: bool = False) -> _Entry:
        """Store a (new) session for ``sid``, replacing any old one of that id (which keeps its
        kind); ``browser``: a new id opened by a page visit.

        Raises:
            SessionStoreFull: ``sid`` is new and ``max_sessions`` live sessions exist, or it is
                opened from a page and ``max_browser_sessions`` such sessions exist.
        """
        with self._lock:
            now = self.clock()
            self._expire(now)
            old = self._entries.get(sid)
            if old is None:
                self._check_room(browser, now)
            entry = _Entry(session, browser=browser if old is None else old.browser)
            self._entries[sid] = entry
            if entry.browser:
                self._browser[sid] = None
            self._touch(sid, entry, now)
        return entry

    def _check_room(self, browser: bool, now: float) -> None:
        """Raise SessionStoreFull when a new id of this kind has no slot; lock held."""
        if len(self._entries) >= self.max_sessions:
            raise self._full(now, next(iter(self._entries.values())).last_used)
        if browser and len(self._browser) >= self.max_browser_sessions:
            raise self._full(now, self._entries[next(iter(self._browser))].last_used, browser=True)

    def _full(self, now: float, oldest: float, browser: bool = False) -> SessionStoreFull:
        retry = max(1, math.ceil(oldest + self.ttl - now))
        if browser:
            return SessionStoreFull(
                f"the WebShop server holds {self.max_browser_sessions} live sessions opened from pages "
                f"(its --max-browser-sessions; the rest are kept for the JSON API's environments), none "
                f"idle for {self.ttl:g} s (its --session-ttl); retry in {retry} s", retry)
        return SessionStoreFull(
            f"the WebShop server holds {self.max_sessions} live sessions (its --max-sessions), none idle "
            f"for {self.ttl:g} s (its --session-ttl); retry in {retry} s, close finished sessions "
            "(DELETE /api/<session>), or restart the server with a larger --max-sessions or a shorter "
            "--session-ttl", retry)

    def delete(self, sid: str) -> bool:
        """Forget ``sid``; True when it existed."""
        with self._lock:
            self._browser.pop(sid, None)
            return self._entries.pop(sid, None) is not None

    def __len__(self) -> int:
        """Live sessions (expired ones are dropped first)."""
        with self._lock:
            self._expire(self.clock())
            return len(self._entries)

    def browser_sessions(self) -> int:
        """Live sessions opened from pages."""
        with self._lock:
            self._expire(self.clock())
            return len(self._browser)


class ShopServer:
    """The shop behind the Flask app: catalogue, noun tagger, goals and sessions.

    Args:
        catalogue: The shared catalogue.
        tagger: Default noun tagger of the scorer.
        goal_kind: Goal kind of sessions opened from a browser (``/<session>``).
        max_sessions: Live sessions held at most (a new id beyond them gets 503).
        session_ttl: Idle seconds after which a session expires.
        clock: Monotonic seconds of the session store (tests inject a fake one).
        max_browser_sessions: Live sessions opened from pages held at most (default a quarter
            of ``max_sessions``): the rest are kept for the JSON API.
    """

    def __init__(self, catalogue: Catalogue, tagger: NounTagger, goal_kind: str = "human",
                 max_sessions: int = 4096, session_ttl: float = DEFAULT_SESSION_TTL_S,
                 clock: Callable[[], float] = time.monotonic, max_browser_sessions: int | None = None) -> None:
        catalogue.goal_list(goal_kind)  # validates the kind
        self.catalogue = catalogue
        self.tagger = tagger
        self.goal_kind = goal_kind
        self.sessions = SessionStore(max_sessions, session_ttl, clock, max_browser_sessions)

    def warm_up(self) -> None:
        """Build what the first requests would otherwise build: the catalogue's search index.
        A server that forks its workers calls it before the fork, so they share the index."""
        self.catalogue.search("")

    def tagger_named(self, name: str | None) -> NounTagger:
        """The tagger a client asks for by name (its scores must match the client's)."""
        if name is None or name == self.tagger.name:
            return self.tagger
        if not isinstance(name, str) or len(name) > 200:
            abort(400, "tagger must be a tagger name string")
        if name.startswith("lexicon-v1"):  # the fallback is the same tagger under another label
            return get_tagger("lexicon")
        if name.startswith("spacy"):
            try:
                tagger = get_tagger("auto")
            except Exception as exc:  # noqa: BLE001 - reported to the client
                abort(409, f"the server cannot load the spaCy tagger {name!r}: {exc}")
            if tagger.name == name:
                return tagger
        abort(409, f"the server has no noun tagger {name!r} (it has {self.tagger.name!r}); "
                   "start it with a matching --tagger")

    def goal(self, kind: str, index: int) -> Goal:
        """Goal ``index`` of ``kind`` (400 when out of range)."""
        if kind not in ("human", "synthetic"):
            abort(400, f"kind must be 'human' or 'synthetic', got {str(kind)[:40]!r}")
        goals = self.catalogue.goal_list(kind)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(goals):
            abort(400, f"task must be a goal index in 0..{len(goals) - 1}, got {str(index)[:40]!r}")
        return goals[index]

    def goal_for_new_session(self, sid: str, kind: str | None = None) -> Goal:
        """``fixed_<n>`` -> goal n; any other id -> a goal drawn from a generator seeded by the id
        (of ``kind``, default the server's goal kind)."""
        kind = kind or self.goal_kind
        goals = self.catalogue.goal_list(kind)
        m = _FIXED_RE.match(sid)
        if m is not None:
            return self.goal(kind, int(m.group(1)))
        return goals[random.Random(zlib.crc32(sid.encode())).randrange(len(goals))]

    def new_session(self, sid: str, goal: Goal, tagger: NounTagger | None = None, *,
                    browser: bool = False) -> _Entry:
        """Start a fresh episode for ``sid`` on ``goal`` (``browser``: opened by a page visit).

        Raises:
            SessionStoreFull: ``sid`` is new and the store has no slot for it.
        """
        session = ShopSession(self.catalogue, goal, tagger or self.tagger, session_id=sid)
        return self.sessions.put(sid, session, browser=browser)


# --------------------------------------------------------------------------- page model
def _button_kind(text: str) -> str:
    key = text.strip().lower()
    if key == "search":
        return "search"
    if key in SUB_PAGES:
        return "sub"
    if key == NAV_BUTTONS["buy"].lower():
        return "buy"
    return "nav"


def _page_blocks(sess: ShopSession, sid: str) -> list[dict[str, Any]]:
    """Group the page's nodes (in order) into layout blocks, with the URL each clickable
    element leads to.  Flattening the blocks gives back :meth:`ShopSession.nodes` exactly."""
    st = sess.state
    nodes = sess.nodes()
    kw_seg = encode_segment(st.keywords)

    def item_url(asin: str, options: Mapping[str, str]) -> str:
        return url_for(".item_page", session_id=sid, asin=encode_segment(asin), keywords=kw_seg,
                       page=st.results_page, options=encode_segment(_options_json(options)))

    def results_url(page: int) -> str:
        return url_for(".search_results", session_id=sid, keywords=kw_seg, page=page)

    def button_href(text: str) -> str | None:
        key = text.strip().lower()
        if key == NAV_BUTTONS["back"].lower():
            return url_for(".index", session_id=sid)
        if key == NAV_BUTTONS["next"].lower():
            return results_url(st.results_page + 1)
        if key == NAV_BUTTONS["prev"].lower():
            if st.page == "results":
                return results_url(st.results_page - 1)
            if st.page == "item":
                return results_url(st.results_page) if st.keywords else url_for(".index", session_id=sid)
            return item_url(st.asin or "", st.options)
        if key in SUB_PAGES:
            return url_for(".item_sub_page", session_id=sid, asin=encode_segment(st.asin), keywords=kw_seg,
                           page=st.results_page, sub_page=key,
                           options=encode_segment(_options_json(st.options)))
        if key == NAV_BUTTONS["buy"].lower():
            return url_for(".done", session_id=sid, asin=encode_segment(st.asin),
                           options=encode_segment(_options_json(st.options)))
        return None

    blocks: list[dict[str, Any]] = []
    product = sess.product
    option_names = set(product.options) if product is not None else set()
    i = 0
    while i < len(nodes):
        n = nodes[i]
        item = {"text": n.text, "role": n.role, "clicked": n.clicked, "group": n.group}
        nxt = nodes[i + 1] if i + 1 < len(nodes) else None
        if (n.role == "text" and n.text == "Instruction:" and nxt is not None
                and nxt.text == sess.goal.instruction):
            blocks.append({"kind": "instruction", "items": [item, {"text": nxt.text, "role": nxt.role,
                                                                   "clicked": False, "group": nxt.group}]})
            i += 2
            continue
        if n.role == "button":
            kind = _button_kind(n.text)
            item["href"] = button_href(n.text)
            if kind in ("search", "buy"):
                blocks.append({"kind": kind, "items": [item]})
            elif blocks and blocks[-1]["kind"] == "buttons":
                blocks[-1]["items"].append(item)
            else:
                blocks.append({"kind": "buttons", "items": [item]})
        elif n.role == "link":
            item["href"] = item_url(n.text, {})
            blocks.append({"kind": "product", "items": [item]})
        elif n.role == "option":
            name = n.group or ""
            item["href"] = item_url(st.asin or "", {**st.options, name: n.text})
            if not (blocks and blocks[-1]["kind"] == "options" and blocks[-1]["name"] == name):
                blocks.append({"kind": "options", "name": name, "items": []})
            blocks[-1]["items"].append(item)
        elif (n.role == "text" and nxt is not None and nxt.role == "option" and n.text in option_names
              and st.page == "item"):
            blocks.append({"kind": "options", "name": n.text, "items": [dict(item, header=True)]})
        elif st.page == "done" and i == len(nodes) - 1:
            score = st.purchase.total if st.purchase is not None else 0.0
            blocks.append({"kind": "reward", "items": [item], "score": repr(float(score))})
        elif n.role == "text" and blocks and blocks[-1]["kind"] == "product" and len(blocks[-1]["items"]) < 3:
            blocks[-1]["items"].append(item)  # the product's title and price
        else:
            blocks.append({"kind": "text", "items": [item]})
        i += 1
    # radio ids for option values
    for b_i, block in enumerate(blocks):
        if block["kind"] == "options":
            for j, it in enumerate(block["items"]):
                it["radio_id"] = f"opt-{b_i}-{j}"
                it["radio_name"] = f"opt-{b_i}"
    return blocks


def _options_json(options: Mapping[str, str]) -> str:
    return json.dumps(dict(options), ensure_ascii=False, separators=(",", ":"))


def _parse_options(raw: str) -> dict[str, str]:
    text = decode_segment(raw)
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        abort(400, "options must be a JSON object of option name -> value")
    except RecursionError:  # not a ValueError: it would escape as a 500
        abort(400, "options must be a JSON object of option name -> value (this one is nested too deeply)")
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        abort(400, "options must be a JSON object of option name -> value (strings)")
    return value


# --------------------------------------------------------------------------- the views
#: Templates render with the shop's own Jinja environment (autoescaping on every template,
#: trimmed blocks), so pages are byte-identical in whatever app the blueprint is mounted.
_TEMPLATES = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).with_name("templates")),
                                autoescape=True, trim_blocks=True, lstrip_blocks=True, auto_reload=False)
_TEMPLATES.globals["url_for"] = url_for

#: The shop's routes, in registration order: (rule, endpoint = view method of _ShopViews, methods).
_ROUTES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("/", "home", ("GET",)),
    ("/favicon.ico", "favicon", ("GET",)),
    ("/healthz", "healthz", ("GET",)),
    ("/<session_id>", "index", ("GET", "POST")),
    ("/search_results/<session_id>/<keywords>/<int:page>", "search_results", ("GET",)),
    ("/item_page/<session_id>/<asin>/<keywords>/<int:page>/<options>", "item_page", ("GET",)),
    ("/item_sub_page/<session_id>/<asin>/<keywords>/<int:page>/<sub_page>/<options>", "item_sub_page", ("GET",)),
    ("/done/<session_id>/<asin>/<options>", "done", ("GET", "POST")),
    ("/api/<session_id>/reset", "api_reset", ("POST",)),
    ("/api/<session_id>/step", "api_step", ("POST",)),
    ("/api/<session_id>/snapshot", "api_snapshot", ("GET",)),
    ("/api/<session_id>", "api_close", ("DELETE",)),
)


def _check_sid(session_id: str) -> str:
    if not SESSION_ID_RE.match(session_id):
        abort(400, f"session ids are 1-{MAX_SESSION_ID_CHARS} letters, digits, '_' or '-'")
    return session_id


_SNAPSHOT_FIELDS = tuple(f.name for f in fields(PageSnapshot))


def snapshot_dict(snap: PageSnapshot) -> dict[str, Any]:
    """:meth:`PageSnapshot.to_dict` without its deep copies, for encoding at once: a snapshot's
    containers are its own fresh copies (:meth:`ShopSession.snapshot` builds them), and they hold
    only JSON values, so the encoded answer is the same bytes."""
    return {name: getattr(snap, name) for name in _SNAPSHOT_FIELDS}


def _json_body() -> dict[str, Any]:
    try:
        body = json.loads(request.get_data(cache=True))
    except (ValueError, UnicodeDecodeError):  # JSONDecodeError is a ValueError
        abort(400, "the request body must be a JSON object (it is not valid JSON)")
    except RecursionError:  # not a ValueError: it would escape as a 500
        abort(400, "the request body must be a JSON object (this one is nested too deeply)")
    if not isinstance(body, dict):
        abort(400, "the request body must be a JSON object")
    return body


def _http_exception(code: int, message: str) -> HTTPException:
    return default_exceptions[code](description=message)


class _ShopViews:
    """The views, hooks and error handlers of one :func:`webshop_blueprint` over a :class:`ShopServer`.

    Every URL the views build is relative to where the blueprint is mounted; ``mounts`` (full
    blueprint name -> URL prefix, filled when an app registers the blueprint) tells the hooks
    which part of a request's path is the shop's own.
    """

    def __init__(self, shop: ShopServer) -> None:
        self.shop = shop
        self.mounts: dict[str, str] = {}
        self._full_logged = -math.inf

    def on_register(self, state: BlueprintSetupState) -> None:
        name = f"{state.name_prefix}.{state.name}".lstrip(".")
        self.mounts[name] = (state.url_prefix or "").rstrip("/")

    # ---------------------------------------------------------------- where the request is
    def _mount(self) -> tuple[str, str]:
        """(blueprint name, URL prefix) of this request; app-wide hooks of create_app also see
        requests no view matched: those belong to the (only) mount."""
        if request.blueprint in self.mounts:
            return request.blueprint, self.mounts[request.blueprint]
        return next(iter(self.mounts.items()))

    def _shop_path(self) -> str:
        """The request's path below the mount point (``/api/x/step`` for ``/shop/api/x/step``)."""
        return request.path.removeprefix(self._mount()[1])

    def _wants_json(self) -> bool:
        path = self._shop_path()
        return path.startswith("/api/") or path == "/healthz"

    def _render(self, template: str, status: int = 200, **context: Any) -> Response:
        html = _TEMPLATES.get_template(template).render(blueprint=self._mount()[0], **context)
        return Response(html, status=status, mimetype="text/html")

    def _existing(self, session_id: str) -> _Entry:
        entry = self.shop.sessions.get(_check_sid(session_id))
        if entry is None:
            prefix = self._mount()[1]
            abort(404, f"unknown session {session_id!r} (never opened, closed, or idle for more than "
                       f"{self.shop.sessions.ttl:g} s); open {prefix}/{session_id} or "
                       f"POST {prefix}/api/{session_id}/reset first")
        return entry

    def _render_page(self, entry: _Entry, status: int = 200) -> Response:
        sess = entry.session
        st = sess.state
        title = {"start": "WebShop", "results": f"Results for {st.keywords or ''}",
                 "item": sess.product.name if sess.product else "Item",
                 "item_sub": f"{(st.sub_page or '').capitalize()}", "done": "Thank you"}[st.page]
        return self._render("page.html", status, page=st.page, title=title, session_id=sess.session_id,
                            blocks=_page_blocks(sess, sess.session_id), keywords=st.keywords)

    # ---------------------------------------------------------------- hooks
    def check_url_length(self) -> None:
        raw = request.environ.get("RAW_URI") or request.environ.get("REQUEST_URI") or request.path
        if len(raw) > MAX_URL_CHARS or len(request.path) > MAX_URL_CHARS:
            abort(414, f"URLs longer than {MAX_URL_CHARS} characters are refused")

    def check_body_length(self) -> None:
        """413 for a declared body over MAX_CONTENT_LENGTH, read and dropped first when it is at
        most 1 MiB: a body left unread would end the client's kept-alive connection after the
        answer (gunicorn drains at most 64 KiB of it), and the client's next request with it."""
        length = request.content_length
        if length is None or length <= MAX_CONTENT_LENGTH:
            return
        if length <= _DRAIN_LIMIT:
            stream = request.environ["wsgi.input"]
            while length > 0 and (chunk := stream.read(min(length, 65536))):
                length -= len(chunk)
        abort(413, f"request bodies larger than {MAX_CONTENT_LENGTH} bytes are refused")

    def add_headers(self, resp: Response) -> Response:
        """SECURITY_HEADERS (and no-store outside /static/) where the view set none of that name."""
        extra = SECURITY_HEADERS
        if not self._shop_path().startswith("/static/"):  # pages and API answers are never cached
            extra = (*extra, _NO_STORE)
        have = {key.lower() for key, _value in resp.headers.items()}
        for key, value in extra:
            if key.lower() not in have:
                resp.headers.add(key, value)
        return resp

    def http_error(self, exc: HTTPException) -> Response:
        code = exc.code or 500
        message = exc.description or exc.name
        if self._wants_json():
            resp = jsonify(error=exc.name, message=message, status=code)
            resp.status_code = code
        else:
            resp = self._render("error.html", code, code=code, name=exc.name, message=message)
        if code == 405 and hasattr(exc, "valid_methods") and exc.valid_methods:
            resp.headers["Allow"] = ", ".join(exc.valid_methods)
        return resp

    def store_full(self, exc: SessionStoreFull) -> Response:
        """503 with ``Retry-After``: no live session is ever evicted to admit a new one (logged as
        a warning at most once a minute; the access log has every refusal)."""
        now = time.monotonic()
        if now - self._full_logged >= 60.0:
            self._full_logged = now
            logger.warning("refusing new WebShop sessions: %s", exc)
        resp = self.http_error(_http_exception(503, str(exc)))
        resp.headers["Retry-After"] = str(exc.retry_after)
        return resp

    def route_error(self, exc: RouteError) -> Response:
        return self.http_error(_http_exception(404 if str(exc).startswith("unknown product") else 400, str(exc)))

    def unexpected(self, exc: Exception) -> Response:  # pragma: no cover - a bug if reached
        logger.exception("unexpected error serving %s", request.path)
        return self.http_error(_http_exception(500, f"internal error: {type(exc).__name__}"))

    # ---------------------------------------------------------------- HTML routes
    def home(self) -> Response:
        return redirect(url_for(".index", session_id=uuid.uuid4().hex[:16]), code=302)

    def favicon(self) -> Response:
        return Response(status=204, headers={"Cache-Control": "max-age=86400"})

    def healthz(self) -> Response:
        shop, cat = self.shop, self.shop.catalogue
        return jsonify(status="ok", catalogue=cat.description, products=len(cat.products),
                       goals={k: len(cat.goal_list(k)) for k in ("human", "synthetic")},
                       tagger=shop.tagger.name, sessions=len(shop.sessions),
                       browser_sessions=shop.sessions.browser_sessions(),
                       max_sessions=shop.sessions.max_sessions,
                       max_browser_sessions=shop.sessions.max_browser_sessions, session_ttl=shop.sessions.ttl)

    def index(self, session_id: str) -> Response:
        """The start page (GET: opens the session, or starts a finished one over) or a search (POST)."""
        sid = _check_sid(session_id)
        entry = self.shop.sessions.get(sid)
        if request.method == "POST":
            return self._search(sid, entry)
        if entry is None:
            entry = self.shop.new_session(sid, self.shop.goal_for_new_session(sid), browser=True)
        with entry.lock:
            if entry.session.state.done:  # a finished episode starts over on the same goal
                entry = self.shop.new_session(sid, entry.session.goal, entry.session.tagger)
            entry.session.goto_start()
            return self._render_page(entry)

    def _search(self, sid: str, entry: _Entry | None) -> Response:
        if entry is None:
            abort(404, f"unknown session {sid!r}; open {self._mount()[1]}/{sid} first")
        query = request.form.get("search_query")
        if query is None:
            abort(400, "the search form needs a search_query field")
        if len(query) > 4 * MAX_KEYWORDS_CHARS:
            abort(400, f"search keywords longer than {MAX_KEYWORDS_CHARS} characters")
        with entry.lock:
            entry.session.goto_results(query, 1)
            kw = entry.session.state.keywords
        return redirect(url_for(".search_results", session_id=sid, keywords=encode_segment(kw), page=1),
                        code=303)

    def search_results(self, session_id: str, keywords: str, page: int) -> Response:
        entry = self._existing(session_id)
        kw = decode_segment(keywords)  # the session checks the length (RouteError -> 400)
        if kw is None:
            abort(400, "search keywords are empty")
        with entry.lock:
            entry.session.goto_results(kw, page)
            return self._render_page(entry)

    def item_page(self, session_id: str, asin: str, keywords: str, page: int, options: str) -> Response:
        entry = self._existing(session_id)
        kw, opts = decode_segment(keywords), _parse_options(options)
        with entry.lock:
            entry.session.goto_item(decode_segment(asin) or "", kw, page, opts)
            return self._render_page(entry)

    def item_sub_page(self, session_id: str, asin: str, keywords: str, page: int, sub_page: str,
                      options: str) -> Response:
        entry = self._existing(session_id)
        kw, opts = decode_segment(keywords), _parse_options(options)
        with entry.lock:
            entry.session.goto_sub(decode_segment(asin) or "", kw, page, sub_page, opts)
            return self._render_page(entry)

    def done(self, session_id: str, asin: str, options: str) -> Response:
        entry = self._existing(session_id)
        opts = _parse_options(options)
        product = (decode_segment(asin) or "").upper()
        with entry.lock:
            st = entry.session.state
            if st.done:
                if st.asin != product or st.options != opts:
                    abort(409, "the episode is over (already purchased); open the start page to begin again")
            else:
                entry.session.buy(product, opts)
            if request.method == "POST":
                return redirect(request.path, code=303)
            return self._render_page(entry)

    # ---------------------------------------------------------------- JSON API
    def api_reset(self, session_id: str) -> Response:
        shop, cat = self.shop, self.shop.catalogue
        sid = _check_sid(session_id)
        body = _json_body() if request.get_data(cache=True) else {}
        kind = body.get("kind", shop.goal_kind)
        if kind not in ("human", "synthetic"):  # checked with or without a task
            abort(400, f"kind must be 'human' or 'synthetic', got {str(kind)[:40]!r}")
        task = body.get("task")
        goal = shop.goal(kind, task) if task is not None else shop.goal_for_new_session(sid, kind)
        want = body.get("instruction")
        if want is not None and want != goal.instruction:
            abort(409, f"goal {kind}/{goal.index} of this server's catalogue ({cat.description}) has a "
                       "different instruction than the client's: client and server use different catalogues")
        entry = shop.new_session(sid, goal, shop.tagger_named(body.get("tagger")))
        with entry.lock:
            return jsonify(snapshot=snapshot_dict(entry.session.snapshot()),
                           goal={"index": goal.index, "kind": goal.kind, "instruction": goal.instruction},
                           tagger=entry.session.tagger.name, catalogue=cat.description)

    def api_step(self, session_id: str) -> Response:
        entry = self._existing(session_id)
        action = _json_body().get("action")
        if not isinstance(action, str):
            abort(400, "'action' must be a string such as 'search[red shoes]' or 'click[buy now]'")
        if len(action) > MAX_ACTION_CHARS:
            abort(400, f"actions longer than {MAX_ACTION_CHARS} characters are refused")
        with entry.lock:  # encoded under the lock: no other request of the session runs meanwhile
            outcome = entry.session.act(action)
            return jsonify(outcome={"valid": outcome.valid, "done": outcome.done, "score": outcome.score,
                                    "feedback": outcome.feedback, "kind": outcome.kind},
                           snapshot=snapshot_dict(entry.session.snapshot()))

    def api_snapshot(self, session_id: str) -> Response:
        entry = self._existing(session_id)
        with entry.lock:
            return jsonify(snapshot=snapshot_dict(entry.session.snapshot()))

    def api_close(self, session_id: str) -> Response:
        return jsonify(closed=self.shop.sessions.delete(_check_sid(session_id)))


def webshop_blueprint(shop: ShopServer, *, name: str = "webshop", app_wide: bool = False) -> Blueprint:
    """The shop's pages, static files and JSON API as a Flask blueprint, to mount in any app.

    Args:
        shop: The shop (catalogue, tagger, goals, sessions) the views serve.
        name: The blueprint's name (endpoints are ``<name>.index``, ``<name>.api_step``, ...).
        app_wide: Apply the URL-length limit, the security headers and the error pages (JSON
            under ``/api/`` and for ``/healthz``, HTML elsewhere) to every request of the app, as
            :func:`create_app` does; by default they apply to the blueprint's requests only.

    The host app's settings still apply: :func:`create_app` also caps request bodies
    (``MAX_CONTENT_LENGTH``, ...), keeps JSON keys in order and neither merges slashes nor
    redirects trailing ones.

    Example:
        >>> from flask import Flask
        >>> from agent_envs.webshop.catalogue import CatalogueSpec, get_catalogue
        >>> shop = ShopServer(get_catalogue(CatalogueSpec(num_products=120)), get_tagger("lexicon"))
        >>> app = Flask("my_app")
        >>> app.register_blueprint(webshop_blueprint(shop), url_prefix="/shop")
        >>> client = app.test_client()
        >>> client.post("/shop/api/demo/reset", json={"task": 0}).json["snapshot"]["page"]
        'start'
    """
    views = _ShopViews(shop)
    bp = Blueprint(name, __name__, static_folder="static", static_url_path="/static")
    bp.record(views.on_register)
    if app_wide:
        before, after, on_error = bp.before_app_request, bp.after_app_request, bp.app_errorhandler
    else:
        before, after, on_error = bp.before_request, bp.after_request, bp.errorhandler
    before(views.check_url_length)
    before(views.check_body_length)
    after(views.add_headers)
    on_error(HTTPException)(views.http_error)
    on_error(RouteError)(views.route_error)
    on_error(SessionStoreFull)(views.store_full)
    on_error(Exception)(views.unexpected)
    for rule, endpoint, methods in _ROUTES:
        bp.add_url_rule(rule, endpoint, getattr(views, endpoint), methods=list(methods))
    return bp


# --------------------------------------------------------------------------- the app
def create_app(catalogue: Catalogue | CatalogueSpec | None = None, *, tagger: str | NounTagger = "auto",
               goal_kind: str = "human", max_sessions: int = 4096,
               session_ttl: float = DEFAULT_SESSION_TTL_S,
               clock: Callable[[], float] = time.monotonic, max_browser_sessions: int | None = None) -> Flask:
    """Build the Flask application: :func:`webshop_blueprint` at the root, app-wide.

    Args:
        catalogue: A catalogue, a :class:`CatalogueSpec` (built once per process and shared),
            or None for the default generated catalogue.
        tagger: Noun tagger (name for :func:`get_tagger`, or an instance).
        goal_kind: Goal kind of sessions opened from a browser.
        max_sessions: Live sessions held at most; a new session id beyond them gets HTTP 503
            with ``Retry-After`` (a live session is never evicted).
        session_ttl: Idle seconds after which a session expires (its slot frees).
        clock: Monotonic seconds of the session store (tests inject a fake one).
        max_browser_sessions: Live sessions opened by page visits (``GET /<id>`` of a new id)
            held at most; default a quarter of ``max_sessions``, the rest kept for the JSON API.

    Returns:
        The app; its :class:`ShopServer` is ``app.extensions["webshop"]``.
    """
    cat = catalogue if isinstance(catalogue, Catalogue) else get_catalogue(catalogue or CatalogueSpec())
    tag = get_tagger(tagger) if isinstance(tagger, str) else tagger
    shop = ShopServer(cat, tag, goal_kind=goal_kind, max_sessions=max_sessions, session_ttl=session_ttl,
                      clock=clock, max_browser_sessions=max_browser_sessions)

    app = Flask(__name__, static_folder=None)  # the blueprint serves /static/
    app.config.update(MAX_CONTENT_LENGTH=MAX_CONTENT_LENGTH, MAX_FORM_MEMORY_SIZE=MAX_CONTENT_LENGTH,
                      MAX_FORM_PARTS=16, JSON_SORT_KEYS=False, TEMPLATES_AUTO_RELOAD=False)
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.url_map.merge_slashes = False
    app.url_map.strict_slashes = False
    app.extensions["webshop"] = shop
    app.register_blueprint(webshop_blueprint(shop, app_wide=True))
    return app


# --------------------------------------------------------------------------- serving
class _Handler(WSGIRequestHandler):
    """Werkzeug's request handler speaking HTTP/1.1 (as ``run_simple`` does when threaded;
    werkzeug still closes the connection after each response)."""

    protocol_version = "HTTP/1.1"

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Malformed requests are the client's fault: an unsupported HTTP version gets 400, not 505."""
        if code == 505:
            code, message = 400, "unsupported HTTP version"
            self.request_version = self.protocol_version  # answer with a status line
        super().send_error(code, message, explain)

    def log(self, type: str, message: str, *args: Any) -> None:
        """Access and error lines go to this module's logger (debug / warning), not stderr."""
        level = logging.WARNING if type == "error" else logging.DEBUG
        logger.log(level, "%s - %s", self.address_string(), message % args)


class BackgroundServer:
    """Serve a WSGI app from a background thread (tests, benchmarks, browser mode).

    Binds 127.0.0.1 on a free port by default.

    Example:
        >>> from agent_envs.webshop.catalogue import CatalogueSpec
        >>> with BackgroundServer(create_app(CatalogueSpec(num_products=120), tagger="lexicon")) as srv:
        ...     import requests
        ...     requests.get(srv.url + "/healthz", timeout=10).status_code
        200
    """

    def __init__(self, app: Flask, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self._server: BaseWSGIServer = make_server(host, port, app, threaded=True, request_handler=_Handler)
        self.host, self.port = host, int(self._server.server_port)
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"webshop-server:{self.port}",
                                        daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:43123``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        """Stop serving and join the thread."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=10)
        self._server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(app: Flask, host: str = "127.0.0.1", port: int = 3000,
          on_ready: Callable[[str], None] | None = None) -> None:
    """Serve ``app`` in the foreground with werkzeug's development server, until interrupted.

    One thread per request, one connection per request, no graceful drain: SIGTERM ends it
    abruptly (and as PID 1 of a container it is ignored).  For debugging and for comparison
    (``bench/webshop_server.py``); ``rubricgym webshop serve`` runs
    :func:`agent_envs.webshop.wsgi.serve_production` (gunicorn) instead.

    ``on_ready`` is called with the base URL once the socket is bound (``port=0`` picks a free port).
    """
    if not is_loopback(host):
        logger.warning("serving WebShop on %s: reachable from other machines (use 127.0.0.1 unless "
                       "inside a container whose port is published on the host's loopback)", host)
    server = make_server(host, port, app, threaded=True, request_handler=_Handler)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{server.server_port}"
    logger.info("WebShop server on %s", url)
    if on_ready is not None:
        on_ready(url)
    try:
        server.serve_forever()
    finally:
        server.server_close()

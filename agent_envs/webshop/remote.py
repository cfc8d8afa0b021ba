"""Remote backends of ``WebShop-Rubric-v0``: a running server over HTTP, or a real browser.

* :class:`HttpBackend` (``server_url=...``) plays through the server's JSON API
  (``/api/<session>/reset|step|snapshot``): the server runs the same
  :class:`~agent_envs.webshop.session.ShopSession` and returns its
  :class:`~agent_envs.webshop.session.PageSnapshot`, so observations, channels and rewards are
  those of the embedded engine.
* :class:`BrowserBackend` (``browser=True``) drives the server's HTML pages with Selenium 4 and
  Debian's headless Chromium: ``search[...]`` types into ``#search_input`` and submits,
  ``click[...]`` clicks the element behind the clickable (``.btn``, ``a.product-link``, the
  ``label[for]`` of an option's radio ``input[value]``, ``button.purchase``).  The observation
  (``text``/``text_rich``), the clickables and the purchase score (``#reward pre``) are read
  from the rendered DOM; what no page shows — the scorer's components for the selected product
  (purchase readiness, MCGPO Eq. 19), the selected options, the query — comes from the
  server's snapshot of the same session.  DOM/server disagreements are logged and counted
  (:attr:`BrowserBackend.mismatches`).

Without ``server_url``, ``browser=True`` starts a private server on a free 127.0.0.1 port in a
background thread (sharing the environment's catalogue) and stops it on ``close()``.

Example (server mode):
    >>> import gymnasium as gym, agent_envs
    >>> from agent_envs.webshop.catalogue import CatalogueSpec
    >>> from agent_envs.webshop.server import BackgroundServer, create_app
    >>> srv = BackgroundServer(create_app(CatalogueSpec(num_products=120), tagger="lexicon"))
    >>> env = gym.make("WebShop-Rubric-v0", catalogue="generated", num_products=120,
    ...                tagger="lexicon", server_url=srv.url)
    >>> obs, info = env.reset(options={"task": 0})
    >>> obs.startswith("WebShop [SEP] Instruction:")
    True
    >>> env.close(); srv.close()
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import uuid
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from agent_envs.webshop.goals import Goal
from agent_envs.webshop.render import Node, to_text, to_text_rich
from agent_envs.webshop.session import (
    ActionOutcome,
    PageSnapshot,
    ShopSession,
    parse_action,
    reject_action,
)

if TYPE_CHECKING:
    from agent_envs.webshop.env import WebShopRubricEnv
    from agent_envs.webshop.server import BackgroundServer

__all__ = [
    "CHROMIUM_FLAGS",
    "BrowserBackend",
    "HttpBackend",
    "RemoteError",
    "ServerFullError",
    "find_browser",
    "make_remote_backend",
    "precheck_action",
]

logger = logging.getLogger(__name__)

#: Flags for headless Chromium on a machine without a display or outside network
#: (a fresh ``--user-data-dir`` and the host-resolver rule are added per driver).
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--disable-extensions", "--mute-audio")

_ROLES = frozenset({"text", "button", "link", "option"})
# Read the page: every element with data-role is a node (see templates/page.html).
_READ_JS = """
const nodes = Array.from(document.querySelectorAll('[data-role]')).map(e => [
  e.textContent, e.getAttribute('data-role'), e.getAttribute('data-clicked') === '1',
  e.hasAttribute('data-group') ? e.getAttribute('data-group') : null]);
const reward = document.querySelector('#reward pre');
const err = document.querySelector('#error-message');
return {page: document.body ? document.body.getAttribute('data-page') : null, nodes: nodes,
        search: document.querySelector('#search_input') !== null,
        score: reward ? reward.getAttribute('data-score') : null,
        error: err ? err.textContent : null, url: location.href};
"""
# Candidate elements for a click, by upstream's DOM hooks, with the text they show.
_LOCATE_JS = """
const kind = arguments[0];
const out = [];
if (kind === 'option') {
  for (const r of document.querySelectorAll('input[type=radio][value]')) {
    const label = document.querySelector('label[for="' + CSS.escape(r.id) + '"]');
    if (label) out.push([label, r.value]);
  }
} else {
  const sel = kind === 'product' ? 'a.product-link' : (kind === 'buy' ? 'button.purchase' : '.btn');
  for (const e of document.querySelectorAll(sel)) out.push([e, e.textContent]);
}
return out;
"""


class RemoteError(RuntimeError):
    """The server is unreachable, refused a request, or the browser could not do an action."""


class ServerFullError(RemoteError):
    """The server holds its ``--max-sessions`` live sessions and refused a new one (HTTP 503).

    Attributes:
        retry_after: Seconds the server suggests waiting (its ``Retry-After``), or None.
    """

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _check_url(server_url: str) -> str:
    if not isinstance(server_url, str):
        raise TypeError(f"server_url must be a str like 'http://127.0.0.1:3000', got {type(server_url).__name__}")
    parts = urlsplit(server_url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"server_url must look like 'http://127.0.0.1:3000', got {server_url!r}")
    return server_url.strip().rstrip("/")


def precheck_action(action: str, snap: PageSnapshot) -> ActionOutcome | None:
    """The outcome of ``action`` on page ``snap`` when it is inadmissible (what
    :meth:`ShopSession.act` answers, page unchanged), else None."""
    return reject_action(action, done=snap.done, has_search_bar=snap.has_search_bar,
                         clickable_kind=snap.clickable_kinds.get)


# --------------------------------------------------------------------------- HTTP
class HttpBackend:
    """Play one session on a running WebShop server through its JSON API.

    Args:
        server_url: Base URL, e.g. ``http://127.0.0.1:3000``.
        tagger_name: Noun tagger the client's scores must use (the server refuses a mismatch).
        catalogue_description: The client's catalogue (logged when the server's differs).
        session_id: Client id (default: a fresh random one).
        timeout: Seconds per request.
    """

    def __init__(self, server_url: str, *, tagger_name: str | None = None,
                 catalogue_description: str | None = None, session_id: str | None = None,
                 timeout: float = 30.0) -> None:
        import requests

        self.url = _check_url(server_url)
        self.session_id = session_id or f"env-{uuid.uuid4().hex}"
        self.tagger_name = tagger_name
        self.catalogue_description = catalogue_description
        self.timeout = float(timeout)
        self._http = requests.Session()
        self._http.trust_env = False  # never route the shop through a proxy from the environment
        self._snap: PageSnapshot | None = None
        self.server_catalogue: str | None = None

    def request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        """One API call; raises :class:`RemoteError` with the server's message on failure
        (:class:`ServerFullError` when the server is full of live sessions: HTTP 503)."""
        import requests

        try:
            r = self._http.request(method, self.url + path, json=payload, timeout=self.timeout)
        except requests.RequestException as exc:
            raise RemoteError(f"WebShop server {self.url} unreachable ({type(exc).__name__}: {exc}); "
                              "start one with `rubricgym webshop serve`") from None
        try:
            body = r.json()
        except ValueError:
            body = None
        if r.status_code >= 400 or not isinstance(body, dict):
            msg = body.get("message") if isinstance(body, dict) else r.text[:200]
            if r.status_code == 503:
                raise ServerFullError(
                    f"WebShop server {self.url} is full and refused session {self.session_id!r} "
                    f"(HTTP 503: {msg}); close finished environments, wait, or restart the server with "
                    "a larger --max-sessions or a shorter --session-ttl",
                    _retry_after(r.headers.get("Retry-After")))
            raise RemoteError(f"{method} {self.url}{path}: HTTP {r.status_code}: {msg}")
        return body

    def start(self, goal: Goal) -> PageSnapshot:
        """Open a session on ``goal`` (by kind and index; the server checks the instruction)."""
        body = self.request("POST", f"/api/{self.session_id}/reset", {
            "task": goal.index, "kind": goal.kind, "instruction": goal.instruction, "tagger": self.tagger_name})
        if self.tagger_name is not None and body.get("tagger") != self.tagger_name:
            raise RemoteError(f"server scores with tagger {body.get('tagger')!r}, the client with {self.tagger_name!r}")
        self.server_catalogue = body.get("catalogue")
        if self.catalogue_description and self.server_catalogue != self.catalogue_description:
            logger.info("WebShop server catalogue %r, client catalogue %r (same goals checked by instruction)",
                        self.server_catalogue, self.catalogue_description)
        self._snap = PageSnapshot.from_dict(body["snapshot"])
        return self._snap

    def act(self, action: str) -> tuple[ActionOutcome, PageSnapshot]:
        """Send a text action; returns the server's outcome and page."""
        body = self.request("POST", f"/api/{self.session_id}/step", {"action": action})
        o = body["outcome"]
        outcome = ActionOutcome(bool(o["valid"]), bool(o["done"]), o["score"], str(o["feedback"]), str(o["kind"]))
        self._snap = PageSnapshot.from_dict(body["snapshot"])
        return outcome, self._snap

    def snapshot(self) -> PageSnapshot:
        """The server's snapshot of the session's current page."""
        self._snap = PageSnapshot.from_dict(self.request("GET", f"/api/{self.session_id}/snapshot")["snapshot"])
        return self._snap

    def close(self) -> None:
        """Forget the session on the server (best effort) and close connections."""
        if self._snap is not None:
            try:
                self.request("DELETE", f"/api/{self.session_id}")
            except RemoteError as exc:
                logger.debug("closing WebShop session %s: %s", self.session_id, exc)
            self._snap = None
        self._http.close()


# --------------------------------------------------------------------------- browser
def find_browser() -> tuple[str, str]:
    """Paths of Chromium and chromedriver: ``$RUBRICGYM_CHROMIUM`` / ``$RUBRICGYM_CHROMEDRIVER``,
    else Debian's ``/usr/bin/chromium`` and ``/usr/bin/chromedriver``, else ``$PATH``."""
    found = []
    for var, names in (("RUBRICGYM_CHROMIUM", ("chromium", "chromium-browser", "google-chrome")),
                       ("RUBRICGYM_CHROMEDRIVER", ("chromedriver",))):
        path = os.environ.get(var) or next((p for n in names if (p := shutil.which(n))), None)
        if not path or not os.path.exists(path):
            raise RemoteError(f"browser mode needs {names[0]} (set ${var}, or on Debian/Ubuntu: "
                              "apt-get install -y chromium chromium-driver)")
        found.append(path)
    return found[0], found[1]


def _quit(driver: Any, profile: str) -> None:
    try:
        driver.quit()
    except Exception as exc:  # noqa: BLE001 - best effort at shutdown
        logger.debug("chromedriver quit: %s", exc)
    shutil.rmtree(profile, ignore_errors=True)


class BrowserBackend:
    """Drive the server's HTML pages with Selenium and headless Chromium.

    Args:
        server_url: Base URL of the server (the browser resolves no other host).
        api: The :class:`HttpBackend` of the same session (reset, and the scorer's view).
        timeout: Seconds to wait for a page.
        window_size: Browser window (screenshots have this size).
        owned_server: A server started for this backend, stopped on :meth:`close`.
    """

    def __init__(self, server_url: str, api: HttpBackend, *, timeout: float = 20.0,
                 window_size: tuple[int, int] = (1280, 1400), owned_server: BackgroundServer | None = None) -> None:
        self.url = _check_url(server_url)
        self.api = api
        self.timeout = float(timeout)
        self.window_size = window_size
        self.owned_server = owned_server
        self.driver: Any = None
        self._profile: str | None = None
        self._finalizer: weakref.finalize | None = None
        self._snap: PageSnapshot | None = None
        #: DOM/server disagreements seen (each is also logged as a warning).
        self.mismatches = 0

    # ---------------------------------------------------------------- driver
    def _ensure_driver(self) -> Any:
        if self.driver is not None:
            return self.driver
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        chromium, chromedriver = find_browser()
        host = urlsplit(self.url).hostname or "127.0.0.1"
        self._profile = tempfile.mkdtemp(prefix="rubricgym-chromium-")
        opts = webdriver.ChromeOptions()
        opts.binary_location = chromium
        for flag in CHROMIUM_FLAGS:
            opts.add_argument(flag)
        opts.add_argument(f"--user-data-dir={self._profile}")
        opts.add_argument(f"--window-size={self.window_size[0]},{self.window_size[1]}")
        opts.add_argument(f"--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE {host}")
        try:
            self.driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=opts)
        except Exception as exc:
            shutil.rmtree(self._profile, ignore_errors=True)
            raise RemoteError(f"could not start headless Chromium ({chromium}, {chromedriver}): {exc}") from exc
        self.driver.set_page_load_timeout(self.timeout)
        self._finalizer = weakref.finalize(self, _quit, self.driver, self._profile)
        return self.driver

    # ---------------------------------------------------------------- backend API
    def start(self, goal: Goal) -> PageSnapshot:
        """Open a session on ``goal`` and load its start page in the browser."""
        driver = self._ensure_driver()
        self.api.start(goal)
        driver.get(f"{self.url}/{self.api.session_id}")
        self._snap = self._read()
        return self._snap

    def act(self, action: str) -> tuple[ActionOutcome, PageSnapshot]:
        """Do ``action`` in the browser; inadmissible actions touch nothing."""
        assert self._snap is not None, "start() first"
        invalid = precheck_action(action, self._snap)
        if invalid is not None:
            return invalid, self._snap
        from selenium.webdriver.common.by import By

        name, arg = parse_action(action)  # type: ignore[misc]  # precheck accepted it
        driver = self.driver
        if name == "search":
            kw = " ".join(arg.lower().split())
            box = driver.find_element(By.CSS_SELECTOR, "#search_input")
            box.clear()
            if kw.isascii() and kw.isprintable():
                box.send_keys(kw)
            else:  # keys outside printable ASCII (e.g. Selenium's key codes) are set, not typed
                driver.execute_script("arguments[0].value = arguments[1];", box, kw)
            self._click_and_wait(driver.find_element(By.CSS_SELECTOR, "form.search-form button.btn"))
            kind = "search"
        else:
            key = arg.strip().lower()
            kind = self._snap.clickable_kinds[key]
            self._click_and_wait(self._locate(kind, key))
        snap = self._read()
        self._snap = snap
        if snap.done:
            return ActionOutcome(True, True, snap.score, kind=kind), snap
        return ActionOutcome(True, kind=kind), snap

    def snapshot(self) -> PageSnapshot:
        """The current page, read from the browser."""
        assert self._snap is not None, "start() first"
        return self._snap

    def screenshot(self, path: str | os.PathLike[str]) -> Path:
        """Save a PNG of the current page to ``path``."""
        if self.driver is None:
            raise RemoteError("no page to capture: start() first")
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        if not self.driver.save_screenshot(str(out)):
            raise RemoteError(f"Chromium could not write a screenshot to {out}")
        return out

    def close(self) -> None:
        """Quit Chromium, forget the session, stop an owned server."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self.driver = None
        self.api.close()
        if self.owned_server is not None:
            self.owned_server.close()
            self.owned_server = None

    # ---------------------------------------------------------------- internals
    def _locate(self, kind: str, key: str) -> Any:
        candidates = self.driver.execute_script(_LOCATE_JS, kind)
        hits = [el for el, text in candidates if str(text).strip().lower() == key]
        if not hits:
            raise RemoteError(f"the page at {self.driver.current_url} has no {kind} element for click[{key}]")
        return hits[-1]  # the engine's clickables keep the last element of a repeated text

    def _click_and_wait(self, element: Any) -> None:
        """Click and wait for the next document: the old window's marker is gone and the new
        page has loaded (polling ignores the driver's transient errors mid-navigation)."""
        from selenium.common.exceptions import TimeoutException, WebDriverException
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver.execute_script("window.__rubricgymOldPage = true;")
        element.click()
        try:
            WebDriverWait(self.driver, self.timeout, poll_frequency=0.02,
                          ignored_exceptions=(WebDriverException,)).until(
                lambda d: d.execute_script("return window.__rubricgymOldPage === undefined "
                                           "&& document.readyState === 'complete';"))
        except TimeoutException:
            raise RemoteError(f"no new page {self.timeout:.0f} s after a click at {self.driver.current_url}") from None

    def _read(self) -> PageSnapshot:
        data = self.driver.execute_script(_READ_JS)
        if data.get("page") in (None, "", "error"):
            raise RemoteError(f"the browser shows an error page at {data.get('url')}: {data.get('error')}")
        nodes = [Node(str(t), role if role in _ROLES else "text", bool(clicked), group)
                 for t, role, clicked, group in data["nodes"]]
        clicks = ShopSession.clickables_of(nodes)  # the engine's rule, on the nodes read from the DOM
        server = self.api.snapshot()
        done = data["page"] == "done"
        score = float(data["score"]) if done and data.get("score") is not None else None
        snap = dataclasses.replace(
            server, page=data["page"], done=done, score=score, has_search_bar=bool(data["search"]),
            text=to_text(nodes), text_rich=to_text_rich(nodes),
            clickables=[c for c, (k, _t) in clicks.items() if k != "search"],
            clickable_kinds={c: k for c, (k, _t) in clicks.items()},
            link_titles={n.text.lower(): n.group or "" for n in nodes if n.role == "link"})
        for f in ("page", "done", "score", "has_search_bar", "text", "text_rich", "clickables",
                  "clickable_kinds", "link_titles"):
            if getattr(snap, f) != getattr(server, f):
                self.mismatches += 1
                logger.warning("browser page and server state disagree on %s at %s", f, data.get("url"))
        return snap


def make_remote_backend(env: WebShopRubricEnv, server_url: str | None, browser: bool) -> HttpBackend | BrowserBackend:
    """The backend ``WebShopRubricEnv`` uses for ``server_url=`` / ``browser=True``."""
    owned = None
    if server_url is None:
        if not browser:
            raise ValueError("a remote backend needs server_url (or browser=True)")
        from agent_envs.webshop.server import BackgroundServer, create_app

        owned = BackgroundServer(create_app(env.catalogue, tagger=env.tagger))
        server_url = owned.url
    api = HttpBackend(server_url, tagger_name=env.tagger.name, catalogue_description=env.catalogue.description)
    if not browser:
        return api
    return BrowserBackend(server_url, api, owned_server=owned)

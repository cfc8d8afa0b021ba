"""The JSON API's step request answered in front of Flask, byte for byte as Flask answers it.

An environment playing through the server spends most of its requests on
``POST /api/<session>/step``.  :class:`StepFastPath` wraps the shop app's WSGI callable and
answers that request itself when it is well formed (a JSON object with an ``action`` string,
a body of declared length within the limits, a live session): the same session lock, the
same engine calls, the same JSON encoder (``app.json``) and the same headers as the Flask
view (:data:`~agent_envs.webshop.server.SECURITY_HEADERS` and ``Cache-Control: no-store``),
without Flask's request context, routing and hooks.  Everything else, every malformed request
included, goes to the Flask app unchanged (a body already read is handed on as it came), so
every error answer is Flask's own; an exception of the engine is answered by the app's error
handlers too.

``rubricgym webshop serve`` installs it (:func:`install_step_fast_path`); an app whose hooks
were extended after :func:`~agent_envs.webshop.server.create_app` should not use it, since its
answers skip them.

Example:
    >>> from agent_envs.webshop.catalogue import CatalogueSpec
    >>> from agent_envs.webshop.server import create_app
    >>> app = install_step_fast_path(create_app(CatalogueSpec(num_products=120), tagger="lexicon"))
    >>> client = app.test_client()
    >>> _ = client.post("/api/demo/reset", json={"task": 0})
    >>> client.post("/api/demo/step", json={"action": "search[shoes]"}).json["snapshot"]["page"]
    'results'
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask

from agent_envs.webshop.server import (
    MAX_ACTION_CHARS,
    MAX_CONTENT_LENGTH,
    MAX_SESSION_ID_CHARS,
    MAX_URL_CHARS,
    SECURITY_HEADERS,
    snapshot_dict,
)

__all__ = ["StepFastPath", "install_step_fast_path"]

_STEP_PATH = re.compile(rf"/api/([A-Za-z0-9_-]{{1,{MAX_SESSION_ID_CHARS}}})/step")
_HEADERS = (*SECURITY_HEADERS, ("Cache-Control", "no-store"))

StartResponse = Callable[..., Any]


class StepFastPath:
    """WSGI callable: well-formed ``POST /api/<session>/step`` answered here, the rest by ``app``.

    Args:
        app: The shop's Flask app (:func:`~agent_envs.webshop.server.create_app`), mounted at
            the root.
    """

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.shop = app.extensions["webshop"]
        self.wsgi_app = app.wsgi_app

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") == "POST":
            match = _STEP_PATH.fullmatch(environ.get("PATH_INFO", ""))
            if match is not None and self._usable(environ):
                answer = self._step(environ, match.group(1))
                if answer is not None:
                    return answer(environ, start_response)
        return self.wsgi_app(environ, start_response)

    def _usable(self, environ: dict[str, Any]) -> bool:
        """The app encodes compact JSON, and the URL is within the app's limit."""
        raw = environ.get("RAW_URI") or environ.get("REQUEST_URI") or ""
        return len(raw) <= MAX_URL_CHARS and not self.app.debug and self.app.json.compact is not False

    def _step(self, environ: dict[str, Any], sid: str) -> Callable[..., Iterable[bytes]] | None:
        """The answer (a WSGI callable), or None for Flask to answer."""
        action = _read_action(environ)
        if action is None:
            return None
        entry = self.shop.sessions.get(sid)
        if entry is None:
            return None
        try:
            with entry.lock:
                outcome = entry.session.act(action)
                text = self.app.json.dumps(
                    {"outcome": {"valid": outcome.valid, "done": outcome.done, "score": outcome.score,
                                 "feedback": outcome.feedback, "kind": outcome.kind},
                     "snapshot": snapshot_dict(entry.session.snapshot())},
                    separators=(",", ":"))
        except Exception as exc:  # noqa: BLE001 - answered by the app's own error handlers
            return self._error(environ, exc)
        return _json_answer((text + "\n").encode())

    def _error(self, environ: dict[str, Any], exc: Exception) -> Callable[..., Iterable[bytes]]:
        """The app's answer to ``exc`` raised by its view (error handlers, then after-request hooks)."""
        with self.app.request_context(environ):
            return self.app.finalize_request(self.app.handle_user_exception(exc))


def _read_action(environ: dict[str, Any]) -> str | None:
    """The body's ``action`` when the body is a JSON object of declared length within the limit
    whose action is a string of at most MAX_ACTION_CHARS; None otherwise.  A body read here is
    put back as ``wsgi.input`` for the app."""
    length = environ.get("CONTENT_LENGTH") or ""
    if not (length.isdigit() and len(length) <= 6 and int(length) <= MAX_CONTENT_LENGTH):
        return None
    body = environ["wsgi.input"].read(int(length)) if int(length) else b""
    environ["wsgi.input"] = io.BytesIO(body)
    if len(body) != int(length):
        return None
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    action = data.get("action") if isinstance(data, dict) else None
    return action if isinstance(action, str) and len(action) <= MAX_ACTION_CHARS else None


def _json_answer(body: bytes) -> Callable[..., Iterable[bytes]]:
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *_HEADERS]

    def answer(_environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        start_response("200 OK", headers)
        return [body]

    return answer


def install_step_fast_path(app: Flask) -> Flask:
    """Put :class:`StepFastPath` in front of ``app``'s WSGI callable; returns ``app``."""
    if not isinstance(app.wsgi_app, StepFastPath):
        app.wsgi_app = StepFastPath(app)  # type: ignore[method-assign]
    return app

"""The JSON API's step and reset answered in front of Flask, byte for byte as Flask answers them.

An environment playing through the server spends its requests on ``POST /api/<session>/step``
and ``/reset``.  :class:`ApiFastPath` wraps the shop app's WSGI callable and answers those
itself when they are well formed and accepted (a JSON object body of declared length within
the limits; a step's ``action`` string and a live session; a reset's valid kind and task, the
goal's instruction, the server's own tagger, a free slot): the same session lock, the same
engine calls, the same JSON encoder (``app.json``) and the same headers as the Flask views
(:data:`~agent_envs.webshop.server.SECURITY_HEADERS` and ``Cache-Control: no-store``), without
Flask's request context, routing and hooks.  Everything else, every malformed or refused request
included, goes to the Flask app unchanged (a body already read is handed on as it came), so
every error answer is Flask's own; an exception of the engine is answered by the app's error
handlers too.

``rubricgym webshop serve`` installs it (:func:`install_api_fast_path`); an app whose hooks
were extended after :func:`~agent_envs.webshop.server.create_app` should not use it, since its
answers skip them.

Example:
    >>> from agent_envs.webshop.catalogue import CatalogueSpec
    >>> from agent_envs.webshop.server import create_app
    >>> app = install_api_fast_path(create_app(CatalogueSpec(num_products=120), tagger="lexicon"))
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

from agent_envs.webshop.goals import Goal
from agent_envs.webshop.server import (
    MAX_ACTION_CHARS,
    MAX_CONTENT_LENGTH,
    MAX_SESSION_ID_CHARS,
    MAX_URL_CHARS,
    SECURITY_HEADERS,
    SessionStoreFull,
    snapshot_dict,
)

__all__ = ["ApiFastPath", "install_api_fast_path"]

_API_PATH = re.compile(rf"/api/([A-Za-z0-9_-]{{1,{MAX_SESSION_ID_CHARS}}})/(step|reset)")
_FIXED = re.compile(r"fixed_\d+")
_HEADERS = (*SECURITY_HEADERS, ("Cache-Control", "no-store"))
_NO_BODY = object()  # a body this path does not answer (malformed, too long, not declared)

StartResponse = Callable[..., Any]
Answer = Callable[..., Iterable[bytes]]


class ApiFastPath:
    """WSGI callable: well-formed ``POST /api/<session>/step`` and ``/reset`` answered here, the
    rest by ``app``.

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
            match = _API_PATH.fullmatch(environ.get("PATH_INFO", ""))
            if match is not None and self._usable(environ):
                body = _read_json(environ)
                if isinstance(body, dict):
                    answer = (self._step if match.group(2) == "step" else self._reset)(environ, match.group(1), body)
                    if answer is not None:
                        return answer(environ, start_response)
        return self.wsgi_app(environ, start_response)

    def _usable(self, environ: dict[str, Any]) -> bool:
        """The app encodes compact JSON, and the URL is within the app's limit."""
        raw = environ.get("RAW_URI") or environ.get("REQUEST_URI") or ""
        return len(raw) <= MAX_URL_CHARS and not self.app.debug and self.app.json.compact is not False

    def _step(self, environ: dict[str, Any], sid: str, body: dict[str, Any]) -> Answer | None:
        """The answer to a step (a WSGI callable), or None for Flask to answer."""
        action = body.get("action")
        if not isinstance(action, str) or len(action) > MAX_ACTION_CHARS:
            return None
        entry = self.shop.sessions.get(sid)
        if entry is None:
            return None
        try:
            with entry.lock:
                outcome = entry.session.act(action)
                return self._json(outcome={"valid": outcome.valid, "done": outcome.done, "score": outcome.score,
                                           "feedback": outcome.feedback, "kind": outcome.kind},
                                  snapshot=snapshot_dict(entry.session.snapshot()))
        except Exception as exc:  # noqa: BLE001 - answered by the app's own error handlers
            return self._error(environ, exc)

    def _reset(self, environ: dict[str, Any], sid: str, body: dict[str, Any]) -> Answer | None:
        """The answer to a reset of the server's own tagger, or None for Flask to answer
        (anything to refuse, another tagger, a ``fixed_<n>`` id without a task, a full store)."""
        goal = self._goal(sid, body)
        if goal is None or body.get("tagger") not in (None, self.shop.tagger.name):
            return None
        try:
            entry = self.shop.new_session(sid, goal)
        except SessionStoreFull:
            return None  # nothing was stored: Flask refuses it the same way (503)
        try:
            with entry.lock:
                return self._json(snapshot=snapshot_dict(entry.session.snapshot()),
                                  goal={"index": goal.index, "kind": goal.kind, "instruction": goal.instruction},
                                  tagger=entry.session.tagger.name, catalogue=self.shop.catalogue.description)
        except Exception as exc:  # noqa: BLE001 - answered by the app's own error handlers
            return self._error(environ, exc)

    def _goal(self, sid: str, body: dict[str, Any]) -> Goal | None:
        """The goal of a reset the Flask view would accept, or None."""
        kind, task = body.get("kind", self.shop.goal_kind), body.get("task")
        if kind not in ("human", "synthetic"):
            return None
        goals = self.shop.catalogue.goal_list(kind)
        if task is None:
            goal = None if _FIXED.fullmatch(sid) else self.shop.goal_for_new_session(sid, kind)
        elif isinstance(task, int) and not isinstance(task, bool) and 0 <= task < len(goals):
            goal = goals[task]
        else:
            goal = None
        want = body.get("instruction")
        return goal if goal is not None and (want is None or want == goal.instruction) else None

    def _json(self, **fields: Any) -> Answer:
        """What ``flask.jsonify(**fields)`` answers, with the app's after-request headers."""
        return _json_answer((self.app.json.dumps(fields, separators=(",", ":")) + "\n").encode())

    def _error(self, environ: dict[str, Any], exc: Exception) -> Answer:
        """The app's answer to ``exc`` raised by its view (error handlers, then after-request hooks)."""
        with self.app.request_context(environ):
            return self.app.finalize_request(self.app.handle_user_exception(exc))


def _read_json(environ: dict[str, Any]) -> Any:
    """The body as JSON (``{}`` for an empty one, as the reset view reads it) when its length is
    declared and within the limit; else ``_NO_BODY``.  A body read here is put back as
    ``wsgi.input`` for the app."""
    length = environ.get("CONTENT_LENGTH") or ""
    if not (length.isdigit() and len(length) <= 6 and int(length) <= MAX_CONTENT_LENGTH):
        return _NO_BODY
    body = environ["wsgi.input"].read(int(length)) if int(length) else b""
    environ["wsgi.input"] = io.BytesIO(body)
    if len(body) != int(length):
        return _NO_BODY
    if not body:
        return {}
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return _NO_BODY


def _json_answer(body: bytes) -> Callable[..., Iterable[bytes]]:
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *_HEADERS]

    def answer(_environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        start_response("200 OK", headers)
        return [body]

    return answer


def install_api_fast_path(app: Flask) -> Flask:
    """Put :class:`ApiFastPath` in front of ``app``'s WSGI callable; returns ``app``."""
    if not isinstance(app.wsgi_app, ApiFastPath):
        app.wsgi_app = ApiFastPath(app)  # type: ignore[method-assign]
    return app

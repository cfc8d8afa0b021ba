"""Active sets and rubric signatures (C, F) of decisions (SPEC §3.1-§3.2).

The status an extractor reports *after* transition t is the *pre-action* status of
decision t+1; the first decision's status is empty [MCGPO D.1, A.1].
:class:`SignatureTracker` does that bookkeeping for one episode.

Example:
    >>> from rubrics.templates import load_template
    >>> tracker = SignatureTracker(load_template("webshop", "webshop"))
    >>> tracker.signature().symbols
    ('', 'Q')
    >>> tracker.update({"search_issued": True})
    >>> tracker.signature().symbols
    ('Q', 'O')
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from rubrics.channels import channel_schema, diagnostic_channels
from rubrics.templates import Template

__all__ = ["Signature", "SignatureTracker", "active_set", "signatures"]


def _is_active(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) or hasattr(value, "__float__"):
        try:
            v = float(value)
        except (TypeError, ValueError):
            return False
        return math.isfinite(v) and v > 0
    return False


def active_set(status: Mapping[str, Any] | None, diagnostics: Iterable[str] | None = None) -> frozenset[str]:
    """C: channels whose value is boolean true or a finite positive number.

    Diagnostic channels (by default every schema's diagnostics) never enter C.
    """
    if status is None:
        return frozenset()
    if not isinstance(status, Mapping):
        raise TypeError(f"a rubric status must be a mapping of channel -> value, got {type(status).__name__}")
    skip = diagnostic_channels() if diagnostics is None else frozenset(diagnostics)
    return frozenset(name for name, value in status.items() if name not in skip and _is_active(value))


class Signature(NamedTuple):
    """The rubric signature of one decision: active set C and frontier F."""

    active: frozenset[str]
    frontier: frozenset[str]
    env: str = ""

    @property
    def symbols(self) -> tuple[str, str]:
        """(C, F) as symbol strings in schema order, e.g. ``("AH", "P")``."""
        if not self.env:
            return ("".join(sorted(self.active)), "".join(sorted(self.frontier)))
        schema = channel_schema(self.env)
        sym = lambda s: "".join(c.symbol for c in schema.values() if c.name in s)
        return sym(self.active), sym(self.frontier)

    def key(self) -> tuple[frozenset[str], frozenset[str]]:
        """The hashable (C, F) pair used inside matching keys."""
        return (self.active, self.frontier)


class SignatureTracker:
    """Turns post-transition statuses of one episode into pre-action signatures.

    Call :meth:`signature` before each decision and :meth:`update` with the status reported
    after the transition.  Only the template's vocabulary enters C and F.
    """

    def __init__(self, template: Template) -> None:
        self.template = template
        self._vocab = frozenset(template.vocabulary)
        self.reset()

    def reset(self) -> None:
        """Start a new episode: the first decision's status is empty."""
        self._current: frozenset[str] = frozenset()
        self._ever: frozenset[str] = frozenset()

    def update(self, status: Mapping[str, Any] | None) -> None:
        """Record the status reported after a transition."""
        self._current = active_set(status) & self._vocab
        self._ever = self._ever | self._current

    @property
    def ever(self) -> frozenset[str]:
        """Channels active at any decision so far."""
        return self._ever

    def signature(self) -> Signature:
        """(C, F) of the next decision."""
        return Signature(
            self._current, self.template.frontier(self._current, self._ever), self.template.env
        )


def signatures(template: Template, statuses: Iterable[Mapping[str, Any] | None]) -> list[Signature]:
    """Pre-action signatures of decisions 0..T for post-transition statuses 1..T.

    ``statuses[t]`` is the status after transition t; the result has one more element than
    ``statuses`` (the first decision, with empty status).
    """
    tracker = SignatureTracker(template)
    out = [tracker.signature()]
    for status in statuses:
        tracker.update(status)
        out.append(tracker.signature())
    return out

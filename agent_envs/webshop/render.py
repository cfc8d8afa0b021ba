"""HTML-independent page rendering: a page is a list of :class:`Node` s.

The text observations are pure functions of the node list, so the embedded engine, the Flask
server and the browser mode produce identical observations as long as they render the same
nodes (the server emits one DOM element per node, in order):

* ``text`` — the node texts, stripped, joined by ``" [SEP] "`` (upstream's ``text`` mode);
* ``text_rich`` — one node per line; buttons as ``[button] X [button_]``, option values
  indented and marked ``[clicked button] X [clicked button_]`` when selected (a
  ``You have clicked X.`` line is put first for each), product links on their own
  paragraph, visited ones marked clicked (upstream's ``text_rich`` mode).

Example:
    >>> nodes = [Node("Back to Search", "button"), Node("Page 1 (Total results: 0)")]
    >>> to_text(nodes)
    'Back to Search [SEP] Page 1 (Total results: 0)'
    >>> print(to_text_rich(nodes))
    [button] Back to Search [button_]
    Page 1 (Total results: 0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = ["SEP", "Node", "NodeRole", "to_text", "to_text_rich"]

SEP = " [SEP] "
NodeRole = Literal["text", "button", "link", "option"]


@dataclass(frozen=True)
class Node:
    """One visible element of a page.

    Attributes:
        text: The visible text (as displayed; clickables are its lower-cased form).
        role: ``text`` (static), ``button`` (navigation/buy), ``link`` (product link, text
            is the asin), ``option`` (an option value's radio label).
        clicked: Selected option / visited product link.
        group: For ``option`` nodes, the option name; for ``link`` nodes, the product title.
    """

    text: str
    role: NodeRole = "text"
    clicked: bool = False
    group: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict."""
        return asdict(self)


def to_text(nodes: Sequence[Node]) -> str:
    """Upstream's ``text`` observation."""
    return SEP.join(t for t in (n.text.strip() for n in nodes) if t)


def to_text_rich(nodes: Sequence[Node]) -> str:
    """Upstream's ``text_rich`` observation."""
    head: list[str] = []
    lines: list[str] = []
    for n in nodes:
        t = n.text.strip()
        if not t:
            continue
        if n.role == "button":
            lines.append(f"[button] {t} [button_]")
        elif n.role == "option":
            if n.clicked:
                head.append(f"You have clicked {t}.")
                lines.append(f"  [clicked button] {t} [clicked button_]")
            else:
                lines.append(f"  [button] {t} [button_]")
        elif n.role == "link":
            mark = "clicked button" if n.clicked else "button"
            lines.append(f"\n[{mark}] {t} [{mark}_]")
        else:
            lines.append(t)
    return "\n".join(head + lines)

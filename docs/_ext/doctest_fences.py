"""A griffe extension for the API reference: docstring examples render as code.

The docstrings write their examples as doctest lines (``>>>``, ``...`` and the expected output)
under ``Example:`` or after a sentence ending with a colon.  Markdown would read an output such
as ``[10.0, 10.0]`` as a reference link, so each run of doctest lines (up to the next blank line)
is wrapped in a ``pycon`` fence before the docstring is parsed, at the indentation of the line
that introduces it.  Sphinx roles (``:func:`x```) become code spans.  Only what the site shows
changes; the docstrings and their doctests are untouched.
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const):`~?([^`]+)`")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def fence_doctests(text: str) -> str:
    """Wrap every run of doctest lines of ``text`` in a ``pycon`` fence."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        if not lines[i].lstrip().startswith(">>>"):
            out.append(lines[i])
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].strip():
            j += 1
        prev = next((x for x in reversed(out) if x.strip()), "")
        base = min(_indent(prev), _indent(lines[i]))
        cut = _indent(lines[i]) - base
        pad = " " * base
        if out and out[-1].strip():
            out.append("")
        out.append(f"{pad}```pycon")
        out.extend(pad + ln[cut:] if ln[:cut].strip() == "" else pad + ln.lstrip() for ln in lines[i:j])
        out.append(f"{pad}```")
        i = j
    return _ROLE.sub(r"`\1`", "\n".join(out))


class DoctestFences(griffe.Extension):
    """Fence the doctest examples of every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: object) -> None:
        if obj.docstring is not None and (">>>" in obj.docstring.value or ":`" in obj.docstring.value):
            obj.docstring.value = fence_doctests(obj.docstring.value)

"""ALFRED-style entity ids and the display names the engine's demangler gives them."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["demangled_names", "mangle"]


def mangle(text: str) -> str:
    """ALFRED id mangling.

    >>> mangle("Apple|-00.14|+00.96")
    'Apple_bar__minus_00_dot_14_bar__plus_00_dot_96'
    """
    for old, new in (("|", "_bar_"), ("-", "_minus_"), ("+", "_plus_"), (".", "_dot_")):
        text = text.replace(old, new)
    return text


def demangled_names(ids: Sequence[str]) -> dict[str, str]:
    """The display names the engine gives entity ids, e.g. ``"apple 2"`` or ``"sinkbasin 1"``.

    Mirrors what alfworld's ``AlfredDemangler(shuffle=False)`` does on the engine's (lowercased)
    ids: the text before the first ``_bar_`` is the name (with ``basin`` appended when the id
    contains ``basin``: the naming trap that turns ``Sink_bar_..._bar_SinkBasin`` into
    ``sinkbasin``); within one name, ids in sorted order are numbered from the count down to 1.
    Ids without ``_bar_`` keep their text (``agent1``). The generator uses this to write
    walkthroughs; :func:`verify_game` checks the result in the real engine.

    >>> names = demangled_names(["Mug_bar__plus_01", "Mug_bar__minus_02", "Sink_bar_1_bar_Basin"])
    >>> list(names.values())
    ['mug 1', 'mug 2', 'sinkbasin 1']
    """
    lowered = sorted({i.lower() for i in ids})
    groups: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    for ident in lowered:
        head, sep, _ = ident.partition("_bar_")
        if not sep:
            names[ident] = ident
            continue
        if "basin" in ident:
            head += "basin"
        groups.setdefault(head, []).append(ident)
    for head, members in groups.items():
        for rank, ident in enumerate(members):
            names[ident] = f"{head} {len(members) - rank}"
    return {ident: names[ident] for ident in (i.lower() for i in ids)}

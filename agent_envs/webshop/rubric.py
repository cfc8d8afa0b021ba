"""WebShop rubric channels, matching keys and goal-aware action keys (SPEC §3.1, §3.4).

Everything here is a pure function of a :class:`~agent_envs.webshop.session.PageSnapshot`
(and the goal text), so the embedded, server and browser front-ends compute identical values.

Channels [MCGPO Table 16] after a transition:

* ``search_issued`` Q — a search has been issued in the episode;
* ``product_opened`` O — a product has been opened in the episode;
* ``type_match`` T, ``attribute_match`` A, ``option_match`` U, ``price_ok`` P — the scorer's
  r_type, r_att, r_option (0 when the goal has none) and r_price for the *selected* product
  (the last one opened) with the *selected* options;
* ``purchase_readiness`` R — ``u·(M_a + M_o + p)/(N_a + N_o + 1)`` on the same product and
  options [MCGPO Eq. 19], i.e. the score a purchase would get now;
* ``purchased`` B, ``task_score`` K (raw score clipped to [0, 1]), ``solved`` S
  (purchase with score >= 0.999);
* ``scorer_error`` E (diagnostic) — the scorer raised; the match channels stay 0.

Keys [MCGPO Table 5]; the environment reports them as
``{"exact": h_exact, "coarse": h_coarse, "signature": (C, F)}`` (the convention
:mod:`wrappers.credit.mcgpo` documents), so the matching context g = (h, C, F):

* exact: (page type, search query, product id, selected options);
* coarse: (page type, searched flag, product-open flag, bins of T/A/U, price satisfaction),
  with bin(v) = round-half-even(4·clip(v, 0, 1)).

Action keys: navigation markers (``nav:next``, ``nav:prev``, ``nav:back``,
``nav:description``...), ``buy``, and goal-aware keys ``search:b``, ``product:b``,
``option:b`` where b in 0..3 bins the goal-token overlap at 0.15 / 0.35 / 0.60:
for a search the share of goal tokens the query covers, for a product click the share of
goal tokens its title (as shown on the results page) covers, for an option click the share
of the option value's tokens that the goal mentions.  Inadmissible actions get ``invalid``.

Example:
    >>> coverage_bin(0.10), coverage_bin(0.15), coverage_bin(0.5), coverage_bin(0.6)
    (0, 1, 2, 3)
    >>> score_bin(0.625), score_bin(0.375)
    (2, 2)
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from typing import Any

from agent_envs.webshop.session import PageSnapshot, parse_action

__all__ = [
    "CHANNEL_NAMES",
    "COVERAGE_BINS",
    "SOLVED_THRESHOLD",
    "action_key",
    "channels",
    "coarse_key",
    "coverage_bin",
    "empty_status",
    "exact_key",
    "goal_tokens",
    "score_bin",
]

CHANNEL_NAMES = ("search_issued", "product_opened", "type_match", "attribute_match",
                 "option_match", "price_ok", "purchase_readiness", "purchased", "task_score",
                 "solved", "scorer_error")
COVERAGE_BINS = (0.15, 0.35, 0.60)
SOLVED_THRESHOLD = 0.999

_PRICE_CLAUSE = re.compile(r",? and price lower than [\d.]+ dollars\s*$")
_FILLER = frozenset("""
    i i'm im me my need want looking look find get buy searching search would like please can
    you some one am also should it's its that is with for and in of a an the to be this
""".split())


def empty_status() -> dict[str, Any]:
    """The status of the first decision: every channel off."""
    return {"search_issued": False, "product_opened": False, "type_match": 0.0,
            "attribute_match": 0.0, "option_match": 0.0, "price_ok": False,
            "purchase_readiness": 0.0, "purchased": False, "task_score": 0.0, "solved": False,
            "scorer_error": False}


def channels(snap: PageSnapshot) -> dict[str, Any]:
    """Channel values of Table 16 for a page snapshot (see the module docstring)."""
    out = empty_status()
    out["search_issued"] = bool(snap.searched or snap.keywords)
    out["product_opened"] = bool(snap.product_opened or snap.asin)
    comp = snap.purchase if snap.done and snap.purchase is not None else snap.preview
    if snap.scorer_error:
        out["scorer_error"] = True
    if comp is not None:
        out["type_match"] = float(comp["r_type"])
        out["attribute_match"] = float(comp["r_att"])
        out["option_match"] = float(comp["r_option"]) if comp["r_option"] is not None else 0.0
        out["price_ok"] = bool(comp["r_price"])
        # MCGPO Eq. 19: u * (M_a + M_o + p) / (N_a + N_o + 1)
        out["purchase_readiness"] = comp["r_type"] * (comp["n_att"] + comp["n_opt"] + int(comp["r_price"])) / (
            comp["num_attributes"] + comp["num_options"] + 1)
    if snap.done:
        out["purchased"] = True
        score = float(snap.score or 0.0)
        out["task_score"] = min(1.0, max(0.0, score)) if math.isfinite(score) else 0.0
        out["solved"] = score >= SOLVED_THRESHOLD
    return out


def score_bin(value: float) -> int:
    """round-half-even(4·clip(v, 0, 1)) (Python's round is half-even)."""
    v = float(value)
    if not math.isfinite(v):
        v = 0.0
    return round(4 * min(1.0, max(0.0, v)))


def exact_key(snap: PageSnapshot) -> tuple:
    """(page, query, product id, selected options)."""
    return (snap.page, snap.keywords, snap.asin, tuple(sorted(snap.options.items())))


def coarse_key(snap: PageSnapshot, status: Mapping[str, Any]) -> tuple:
    """(page, searched, product-open, bin T, bin A, bin U, price ok)."""
    return (snap.page, bool(status["search_issued"]), bool(status["product_opened"]),
            score_bin(status["type_match"]), score_bin(status["attribute_match"]),
            score_bin(status["option_match"]), bool(status["price_ok"]))


def _words(text: str) -> list[str]:
    from agent_envs.webshop.search import tokenize

    return tokenize(text)


@functools.lru_cache(maxsize=1 << 16)
def _word_set(text: str) -> frozenset[str]:
    """The set of :func:`_words` of ``text``, memoised: the same titles and option values
    recur on every page that shows them."""
    return frozenset(_words(text))


def goal_tokens(instruction: str) -> frozenset[str]:
    """Stemmed content tokens of a goal instruction (price clause and filler words removed)."""
    text = _PRICE_CLAUSE.sub("", instruction.lower())
    words = [w for w in re.findall(r"(?u)\b\w+\b", text) if w not in _FILLER]
    return frozenset(_words(" ".join(words)))


def coverage_bin(fraction: float) -> int:
    """0..3: below 0.15, below 0.35, below 0.60, at least 0.60."""
    return sum(fraction >= t for t in COVERAGE_BINS)


def _coverage(text: str, goal: frozenset[str]) -> float:
    if not goal:
        return 0.0
    return len(_word_set(text) & goal) / len(goal)


def action_key(snap: PageSnapshot, goal: frozenset[str], action: str) -> str:
    """Goal-aware action key of ``action`` on the pre-action page ``snap``."""
    parsed = parse_action(action) if isinstance(action, str) else None
    if parsed is None or snap.done:
        return "invalid"
    name, arg = parsed
    if name == "search":
        if not snap.has_search_bar or not arg:
            return "invalid"
        return f"search:{coverage_bin(_coverage(arg, goal))}"
    kind = snap.clickable_kinds.get(arg)
    if kind is None or kind == "search":
        return "invalid"
    if kind == "nav":
        return {"back to search": "nav:back", "next >": "nav:next", "< prev": "nav:prev"}.get(arg, f"nav:{arg}")
    if kind == "sub":
        return f"nav:{arg}"
    if kind == "buy":
        return "buy"
    if kind == "product":
        return f"product:{coverage_bin(_coverage(snap.link_titles.get(arg, ''), goal))}"
    # option: share of the option value's tokens that the goal mentions
    toks = _word_set(arg)
    frac = len(toks & goal) / len(toks) if toks else 0.0
    return f"option:{coverage_bin(frac)}"

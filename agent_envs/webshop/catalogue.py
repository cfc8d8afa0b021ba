"""Product catalogue: loading upstream's raw files (or a generated set), goals and search.

One :class:`Catalogue` per configuration lives in a process-wide cache
(:func:`get_catalogue`), so every environment instance in a process shares the products, the
search index and the goals (upstream keeps a copy per environment).

Loading follows upstream WebShop: products whose asin is ``'nan'`` or longer than 10
characters and duplicate asins are dropped; Title = ``name``, Description =
``full_description``, BulletPoints = ``small_description``; ``pricing`` ``"$12.99"`` or
``"$12.99 - $15.99"`` becomes a list of floats (missing -> ``[100.0]``) and a range-priced
product gets a uniform random price in its range (seeded here); options become
``{name.lower(): [value.strip().replace('/', ' | ').lower()]}``; attributes come from
``items_ins_v2`` (else ``['DUMMY_ATTR']``); the query is lower-cased.

Real upstream files are checked against their published sha256 (:data:`PUBLISHED_SHA256`).

Example:
    >>> cat = get_catalogue(CatalogueSpec(num_products=120))
    >>> len(cat.products)
    120
    >>> cat.goals[0].index
    0
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import numpy as np

from agent_envs.webshop.generator import MAX_PRODUCTS
from agent_envs.webshop.goals import Goal, human_goals, shuffle_goals, split_bounds, synthetic_goals

__all__ = [
    "PUBLISHED_SHA256",
    "REAL_FILE_SETS",
    "Catalogue",
    "CatalogueError",
    "CatalogueSpec",
    "Product",
    "check_human",
    "check_ins_v2",
    "check_int",
    "default_data_dir",
    "find_real_files",
    "get_catalogue",
    "load_raw_files",
    "normalize_option_value",
    "products_from_raw",
    "verify_files",
]

logger = logging.getLogger(__name__)

#: Published sha256 of upstream WebShop's data files (small 1000-product set).
PUBLISHED_SHA256: dict[str, str] = {
    "items_shuffle_1000.json": "30a4765c3a327af72d9a9a95a6b2486d516f0fa1d3ecd83681901ce82a21b269",
    "items_ins_v2_1000.json": "f88a36314a397b53b3d9c3fa5878e5f7b26d35019a51ec83fbedeca61a948f6f",
    "items_human_ins.json": "cf78667548a71786e1d9049c24b802e48e1084ad4bb021cae56ce1f6d96954a3",
}
#: Upstream file sets: (products, attributes/instructions, human instructions).
REAL_FILE_SETS: tuple[tuple[str, str, str], ...] = (
    ("items_shuffle_1000.json", "items_ins_v2_1000.json", "items_human_ins.json"),
    ("items_shuffle.json", "items_ins_v2.json", "items_human_ins.json"),
)


class CatalogueError(ValueError):
    """A catalogue file is missing, corrupt (named in the message) or fails verification."""


def normalize_option_value(value: str) -> str:
    """Upstream's option value normalisation: strip, '/' -> ' | ', lower-case."""
    return str(value).strip().replace("/", " | ").lower()


@dataclass(frozen=True, slots=True, eq=False)
class Product:
    """One product as the engine uses it.

    ``pricing`` holds one price or a (low, high) range; ``price`` is the price the scorer
    uses (the range's seeded uniform draw); ``price_tag`` is what pages show.
    """

    asin: str
    name: str
    query: str
    category: str
    product_category: str
    description: str
    bullet_points: tuple[str, ...]
    pricing: tuple[float, ...]
    price_tag: str
    price: float
    options: dict[str, tuple[str, ...]]
    attributes: tuple[str, ...]
    rating: str = "N.A."
    reviews: tuple[Mapping[str, Any], ...] = ()
    instruction_text: str | None = None
    instruction_attributes: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        """Upstream's ``Title`` (= ``name``)."""
        return self.name

    def scorer_view(self) -> dict[str, Any]:
        """The mapping :func:`agent_envs.webshop.scorer.score_purchase` expects."""
        return {"name": self.name, "title": self.name, "query": self.query,
                "product_category": self.product_category, "attributes": list(self.attributes),
                "bullet_points": list(self.bullet_points), "description": self.description}

    def option_of(self, value: str) -> str | None:
        """The option name offering ``value`` (None when no option has it)."""
        for name, values in self.options.items():
            if value in values:
                return name
        return None

    def search_document(self) -> str:
        """Text indexed for search: title, description, first bullet, option text."""
        option_text = "; ".join(f"{n}: {', '.join(vs)}" for n, vs in self.options.items())
        first = self.bullet_points[0] if self.bullet_points else ""
        return f"{self.name} {self.description} {first} {option_text}".lower()


def _parse_pricing(raw: Any, where: str) -> tuple[tuple[float, ...], str]:
    if not raw:
        return (100.0,), "$100.0"
    if not isinstance(raw, str):
        raise CatalogueError(f"{where}: 'pricing' must be a string like '$12.99', got {raw!r}")
    prices = []
    for part in raw.split("$")[1:]:
        digits = re.sub(r"[^\d.]", "", part)
        try:
            prices.append(float(Decimal(digits)))
        except InvalidOperation:
            raise CatalogueError(f"{where}: cannot parse price {part!r} in {raw!r}") from None
    if not prices:
        return (100.0,), "$100.0"
    prices = prices[:2]
    tag = f"${prices[0]}" if len(prices) == 1 else f"${prices[0]} to ${prices[1]}"
    return tuple(prices), tag


def products_from_raw(items: Sequence[Mapping[str, Any]], ins_v2: Mapping[str, Mapping[str, Any]],
                      seed: int = 0, source: str = "items_shuffle") -> list[Product]:
    """Turn upstream's raw product list into :class:`Product` objects (upstream's rules).

    Args:
        items: The ``items_shuffle`` list.
        ins_v2: The ``items_ins_v2`` mapping (attributes and synthetic instructions).
        seed: Seed for range prices (one ``random.Random(seed)`` drawn in product order).
        source: File name used in error messages.

    Raises:
        CatalogueError: naming ``source`` and the product index on malformed entries.
    """
    if not isinstance(items, list):
        raise CatalogueError(f"{source}: expected a JSON list of products, got {type(items).__name__}")
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[Product] = []
    for i, p in enumerate(items):
        where = f"{source}: product #{i}"
        if not isinstance(p, Mapping):
            raise CatalogueError(f"{where}: expected an object, got {type(p).__name__}")
        try:
            asin = str(p["asin"])
            if asin == "nan" or len(asin) > 10 or asin in seen:
                continue
            seen.add(asin)
            pricing, tag = _parse_pricing(p.get("pricing"), where)
            price = pricing[0] if len(pricing) == 1 else rng.uniform(*pricing[:2])
            options: dict[str, tuple[str, ...]] = {}
            for oname, contents in (p.get("customization_options") or {}).items():
                if contents is None:
                    continue
                options[str(oname).lower()] = tuple(normalize_option_value(c["value"]) for c in contents)
            bullets = p.get("small_description") or []
            if not isinstance(bullets, list):
                bullets = [bullets]
            entry = ins_v2.get(asin) or {}  # entries are checked by check_ins_v2
            attrs = entry.get("attributes") if "attributes" in entry else ["DUMMY_ATTR"]
            reviews = p.get("reviews") or p.get("Reviews") or []
            out.append(Product(
                asin=asin,
                name=str(p["name"]),
                query=str(p.get("query", "")).lower().strip(),
                category=str(p.get("category", "")),
                product_category=str(p.get("product_category", "")),
                description=str(p.get("full_description") or ""),
                bullet_points=tuple(str(b) for b in bullets),
                pricing=pricing,
                price_tag=tag,
                price=float(price),
                options=options,
                attributes=tuple(str(a) for a in (attrs or [])),
                reviews=tuple(r for r in reviews if isinstance(r, Mapping)),
                instruction_text=entry.get("instruction"),
                instruction_attributes=tuple(entry.get("instruction_attributes") or ()),
            ))
        except (KeyError, TypeError, AttributeError) as exc:
            raise CatalogueError(f"{where}: malformed product ({type(exc).__name__}: {exc})") from None
    return out


# --------------------------------------------------------------------------- real files
def default_data_dir() -> Path:
    """Where installed upstream files live: ``$RUBRICGYM_WEBSHOP_DATA`` or
    ``~/.cache/rubricgym/webshop``."""
    env = os.environ.get("RUBRICGYM_WEBSHOP_DATA")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rubricgym" / "webshop"


def _unreadable(path: Path, exc: OSError, what: str = "cannot read it") -> CatalogueError:
    """``<path>: cannot read it (Permission denied)``, with the uid to grant access to."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    hint = f"; make it readable by uid {uid}" if isinstance(exc, PermissionError) and uid is not None else ""
    return CatalogueError(f"{path}: {what} ({exc.strerror or exc}){hint}")


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def find_real_files(directory: str | os.PathLike[str]) -> tuple[Path, Path, Path] | None:
    """The first complete upstream file set in ``directory`` (or None).

    Raises:
        CatalogueError: ``directory`` cannot be searched (permissions), named.
    """
    d = Path(directory).expanduser()
    for names in REAL_FILE_SETS:
        paths = tuple(d / n for n in names)
        try:
            found = all(p.is_file() for p in paths)
        except OSError as exc:  # is_file() swallows "missing", not "permission denied"
            raise _unreadable(d, exc, "cannot read the WebShop data directory") from None
        if found:
            return paths  # type: ignore[return-value]
    return None


def verify_files(paths: Sequence[Path], strict: bool = True) -> dict[str, str]:
    """Check files against :data:`PUBLISHED_SHA256`; returns {name: sha256}.

    Raises:
        CatalogueError: a file with a published hash does not match (named), or
            (``strict``) a file has no published hash.
    """
    out = {}
    for path in paths:
        path = Path(path)
        try:
            digest = sha256_of(path)
        except OSError as exc:
            raise _unreadable(path, exc) from None
        want = PUBLISHED_SHA256.get(path.name)
        if want is None:
            if strict:
                raise CatalogueError(f"{path}: no published sha256 for {path.name!r}; known files: "
                                     f"{', '.join(PUBLISHED_SHA256)} (to trust it: --no-verify, RUBRICGYM_WEBSHOP_VERIFY=0 "
                                     "for `rubricgym webshop serve` and the image, or verify=False)")
            logger.warning("%s has no published sha256; using it unverified", path)
        elif digest != want:
            raise CatalogueError(f"{path}: sha256 {digest} does not match the published {want} "
                                 "(corrupt or a different version)")
        out[path.name] = digest
    return out


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise CatalogueError(f"{path}: file not found") from None
    except OSError as exc:
        raise _unreadable(path, exc) from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise CatalogueError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise CatalogueError(f"{path}: not valid WebShop JSON (nested too deeply)") from None


_LIST = (list, tuple)


def check_ins_v2(ins_v2: Any, source: str = "items_ins_v2") -> None:
    """Check the ``items_ins_v2`` mapping (asin -> {attributes, instruction, ...}).

    Raises:
        CatalogueError: naming ``source`` and the asin of a malformed entry.
    """
    if not isinstance(ins_v2, Mapping):
        raise CatalogueError(f"{source}: expected a JSON object of asin -> attributes, got {type(ins_v2).__name__}")
    for asin, entry in ins_v2.items():
        where = f"{source}: entry {str(asin)[:40]!r}"
        if entry is None:
            continue
        if not isinstance(entry, Mapping):
            raise CatalogueError(f"{where}: expected an object, got {type(entry).__name__}")
        for key in ("attributes", "instruction_attributes"):
            value = entry.get(key)
            if value is not None and not (isinstance(value, _LIST) and all(isinstance(v, str) for v in value)):
                raise CatalogueError(f"{where}: {key!r} must be a list of strings, got {value!r:.80}")
        text = entry.get("instruction")
        if text is not None and not isinstance(text, str):
            raise CatalogueError(f"{where}: 'instruction' must be a string, got {type(text).__name__}")


def check_human(human: Any, source: str = "items_human_ins") -> None:
    """Check the ``items_human_ins`` mapping (asin -> list of instruction objects).

    Raises:
        CatalogueError: naming ``source``, the asin and the entry number of a malformed entry.
    """
    if not isinstance(human, Mapping):
        raise CatalogueError(f"{source}: expected a JSON object of asin -> instructions, got {type(human).__name__}")
    for asin, entries in human.items():
        if entries is None:
            continue
        if not isinstance(entries, _LIST):
            raise CatalogueError(f"{source}: the instructions of {str(asin)[:40]!r} must be a list, "
                                 f"got {type(entries).__name__}")
        for k, entry in enumerate(entries):
            where = f"{source}: entry #{k} of {str(asin)[:40]!r}"
            if not isinstance(entry, Mapping):
                raise CatalogueError(f"{where}: expected an object, got {type(entry).__name__}")
            attrs, opts = entry.get("instruction_attributes"), entry.get("instruction_options")
            if attrs is not None and not (isinstance(attrs, _LIST) and all(isinstance(a, str) for a in attrs)):
                raise CatalogueError(f"{where}: 'instruction_attributes' must be a list of strings, got {attrs!r:.80}")
            if opts is not None and not isinstance(opts, (*_LIST, Mapping)):
                raise CatalogueError(f"{where}: 'instruction_options' must be a list or an object, got {opts!r:.80}")
            text = entry.get("instruction")
            if text is not None and not isinstance(text, str):
                raise CatalogueError(f"{where}: 'instruction' must be a string, got {type(text).__name__}")


def load_raw_files(directory: str | os.PathLike[str], verify: bool = True) -> tuple[Any, Any, Any, dict[str, str]]:
    """Read (items, ins_v2, human, {name: sha256}) from an upstream data directory."""
    paths = find_real_files(directory)
    if paths is None:
        want = " or ".join("+".join(s) for s in REAL_FILE_SETS)
        raise CatalogueError(f"{directory}: no complete WebShop file set ({want})")
    digests = verify_files(paths, strict=verify) if verify else {p.name: "unverified" for p in paths}
    items, ins, human = (_read_json(p) for p in paths)
    check_ins_v2(ins, str(paths[1]))
    check_human(human, str(paths[2]))
    return items, ins, human, digests


# --------------------------------------------------------------------------- catalogue
def check_int(name: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an ``int`` if it is an integer (numpy's too, a bool is not) within the bounds.

    Raises:
        ValueError: naming ``name``, for anything else.

    Example:
        >>> check_int("limit", np.int64(3), minimum=1)
        3
        >>> check_int("limit", "3", minimum=1)
        Traceback (most recent call last):
        ...
        ValueError: limit must be an integer >= 1, got '3' (str)
    """
    bounds = (f" from {minimum:_} to {maximum:_}" if minimum is not None and maximum is not None
              else f" >= {minimum:_}" if minimum is not None else "")
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if not ok or (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        shown = repr(value) if len(repr(value)) <= 60 else f"{repr(value)[:50]}..."
        raise ValueError(f"{name} must be an integer{bounds}, got {shown} ({type(value).__name__})")
    return int(value)


@dataclass(frozen=True)
class CatalogueSpec:
    """What catalogue to build (the process-wide cache key).

    Attributes:
        source: ``"generated"`` or a directory holding upstream's files.
        num_products: Generated size, 1 to :data:`~agent_envs.webshop.generator.MAX_PRODUCTS`
            (ignored for real files).
        seed: Generator seed (generated catalogues).
        price_seed: Seed for range prices and price ceilings.
        verify: Verify real files against the published sha256.
        limit: Keep only the first ``limit`` raw products (upstream's ``num_products``), >= 1.

    Raises:
        ValueError: naming the field, for a size, seed or limit that is not an integer in range.
    """

    source: str = "generated"
    num_products: int = 1000
    seed: int = 0
    price_seed: int = 0
    verify: bool = True
    limit: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_products", check_int("num_products", self.num_products, 1, MAX_PRODUCTS))
        object.__setattr__(self, "seed", check_int("seed", self.seed))
        object.__setattr__(self, "price_seed", check_int("price_seed", self.price_seed))
        if self.limit is not None:
            object.__setattr__(self, "limit", check_int("limit", self.limit, 1))


class Catalogue:
    """Products, goals of both kinds and a search index, shared by all sessions.

    Build one with :func:`get_catalogue` (cached) rather than directly.
    """

    def __init__(self, spec: CatalogueSpec, items: Sequence[Mapping[str, Any]],
                 ins_v2: Mapping[str, Mapping[str, Any]],
                 human: Mapping[str, Sequence[Mapping[str, Any]]], description: str,
                 digests: Mapping[str, str] | None = None,
                 sources: tuple[str, str, str] = ("items_shuffle", "items_ins_v2", "items_human_ins")) -> None:
        if spec.limit is not None and isinstance(items, list):
            items = items[: spec.limit]
        self.spec = spec
        self.description = description
        self.digests = dict(digests or {})
        check_ins_v2(ins_v2, sources[1])
        check_human(human, sources[2])
        self.products: list[Product] = products_from_raw(items, ins_v2, seed=spec.price_seed, source=sources[0])
        if not self.products:
            raise CatalogueError(f"{description}: no usable products")
        self.by_asin: dict[str, Product] = {p.asin: p for p in self.products}
        self._goals: dict[str, list[Goal]] = {
            "human": shuffle_goals(human_goals(self.products, human, random.Random(spec.price_seed + 1))),
            "synthetic": shuffle_goals(synthetic_goals(self.products, random.Random(spec.price_seed + 2))),
        }
        self._index = None
        self._lock = threading.Lock()
        self._search_cache: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._charset: frozenset[str] | None = None

    @property
    def goals(self) -> list[Goal]:
        """Human goals (upstream's default goal kind)."""
        return self._goals["human"]

    def goal_list(self, kind: str = "human") -> list[Goal]:
        """Goals of ``kind`` (``"human"`` or ``"synthetic"``) in shuffled order."""
        try:
            return self._goals[kind]
        except KeyError:
            raise ValueError(f"unknown goal kind {kind!r}; expected 'human' or 'synthetic'") from None

    def splits(self, kind: str = "human") -> dict[str, tuple[int, int]]:
        """Index ranges of the test / eval / train splits for ``kind``."""
        return split_bounds(len(self.goal_list(kind)))

    def search(self, keywords: str, top_k: int = 50) -> tuple[str, ...]:
        """Asins of the top ``top_k`` BM25 hits for ``keywords`` (cached per query)."""
        key = f"{top_k}\x00{keywords}"
        with self._lock:
            hit = self._search_cache.get(key)
            if hit is not None:
                self._search_cache.move_to_end(key)
                return hit
            if self._index is None:
                from agent_envs.webshop.search import SearchIndex

                self._index = SearchIndex([p.search_document() for p in self.products])
        found = tuple(self.products[i].asin for i in self._index.search(keywords, top_k))
        with self._lock:
            self._search_cache[key] = found
            if len(self._search_cache) > 4096:
                self._search_cache.popitem(last=False)
        return found

    def charset(self) -> frozenset[str]:
        """Every character a page can show (for the observation space)."""
        if self._charset is None:
            chars: set[str] = set()
            for p in self.products:
                chars.update(p.name, p.description, p.price_tag, p.rating)
                for b in p.bullet_points:
                    chars.update(b)
                for n, vs in p.options.items():
                    chars.update(n)
                    for v in vs:
                        chars.update(v)
                for r in p.reviews:
                    for v in r.values():
                        chars.update(str(v))
                chars.update(p.asin)
            for goals in self._goals.values():
                for g in goals:
                    chars.update(g.instruction)
            chars.update(_PAGE_CHARS)
            self._charset = frozenset(chars)
        return self._charset


_PAGE_CHARS = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
               " \n.,:;!?()[]{}<>$%&'\"-_/|+=*#@~^`\\")
_CACHE: dict[CatalogueSpec, Catalogue] = {}
_CACHE_LOCK = threading.Lock()


def get_catalogue(spec: CatalogueSpec | None = None) -> Catalogue:
    """The process-wide catalogue for ``spec`` (built once, then shared).

    Raises:
        CatalogueError: for a missing/corrupt/unverified real data directory.
    """
    spec = spec or CatalogueSpec()
    with _CACHE_LOCK:
        cat = _CACHE.get(spec)
        if cat is not None:
            return cat
        if spec.source == "generated":
            from agent_envs.webshop.generator import GENERATOR_VERSION, generate_raw

            raw = generate_raw(spec.num_products, spec.seed)
            cat = Catalogue(spec, raw.items_shuffle, raw.items_ins_v2, raw.items_human_ins,
                            description=f"generated(v{GENERATOR_VERSION}, n={spec.num_products}, seed={spec.seed})")
        else:
            items, ins, human, digests = load_raw_files(spec.source, verify=spec.verify)
            files = find_real_files(spec.source)
            sources = tuple(str(p) for p in files) if files else ("items_shuffle", "items_ins_v2", "items_human_ins")
            cat = Catalogue(spec, items, ins, human, description=f"upstream files in {spec.source}",
                            digests=digests, sources=sources)  # type: ignore[arg-type]
        _CACHE[spec] = cat
        return cat

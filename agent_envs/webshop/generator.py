"""Seeded catalogue generator in upstream WebShop's raw file format.

:func:`generate_raw` returns the three structures upstream reads from disk:

* ``items_shuffle`` — a list of product dicts (``asin``, ``name``, ``full_description``,
  ``small_description``, ``pricing``, ``customization_options``, ``category``, ``query``,
  ``product_category``, ``images``, ...);
* ``items_ins_v2`` — ``{asin: {"attributes": [...], "instruction"?: str,
  "instruction_attributes"?: [...]}}`` (synthetic-goal instructions);
* ``items_human_ins`` — ``{asin: [{"asin", "instruction", "instruction_attributes",
  "instruction_options"}, ...]}`` (human-style goals).

Products are grouped by product type (a real product noun, a >= 3-level breadcrumb); about
40 % are *near misses* derived from the previous product of the same type (one attribute
swapped, options and price changed), so that buying the wrong one of a family earns a partial
score.  Everything is driven by one ``random.Random(seed)``: the same seed gives byte-identical
files.

Example:
    >>> raw = generate_raw(num_products=120, seed=0)
    >>> len(raw.items_shuffle)
    120
    >>> p = raw.items_shuffle[0]
    >>> len(p["product_category"].split(" › ")) >= 3
    True
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_envs.webshop.vocab import BRANDS, OPTION_POOLS, PRODUCT_TYPES, ProductType

__all__ = ["GENERATOR_VERSION", "MAX_PRODUCTS", "RAW_FILE_NAMES", "RawCatalogue", "generate_raw", "write_raw"]

#: Bump when the generator's output changes for a given seed (it is part of cache keys).
GENERATOR_VERSION = 1

#: The largest generated catalogue: 100 times the default, about 1 GB of memory and half a
#: minute to build on one core (20 000 products: 0.2 GB, 6 s).  Upstream's full catalogue
#: (1.18 M products) comes from its files, not from the generator.
MAX_PRODUCTS = 100_000

#: File names used when a generated catalogue is written to disk (upstream's names).
RAW_FILE_NAMES = {
    "items_shuffle": "items_shuffle.json",
    "items_ins_v2": "items_ins_v2.json",
    "items_human_ins": "items_human_ins.json",
}

_OPTION_DISPLAY = {
    "color": "Color", "apparel_size": "Size", "shoe_size": "Size", "scent": "Scent",
    "flavor": "Flavor Name", "pack": "Item Package Quantity", "volume": "Size",
    "weight": "Size", "capacity": "Capacity", "length": "Length", "finish": "Finish Type",
    "furniture_size": "Size", "bed_size": "Size", "style": "Style", "fit": "Fit Type",
    "shade": "Color", "model": "Style",
}

_LINES = ("Classic", "Essential", "Signature", "Everyday", "Premium", "Original", "Select",
          "Studio", "Heritage", "Voyager", "Summit", "Horizon")

_GENERIC_BULLETS = (
    "Backed by a 30-day satisfaction promise and friendly customer support",
    "Ships in recyclable packaging",
    "Designed and quality checked by our in-house team",
    "A thoughtful gift for birthdays and holidays",
    "Carefully inspected before it leaves our warehouse",
)

_HUMAN_OPENERS = ("i need", "i am looking for", "i want", "find me", "i'm searching for",
                  "can you get me", "i would like")


@dataclass
class RawCatalogue:
    """The three upstream raw structures (see the module docstring)."""

    items_shuffle: list[dict[str, Any]]
    items_ins_v2: dict[str, dict[str, Any]]
    items_human_ins: dict[str, list[dict[str, Any]]]


def _asin(rng: random.Random, taken: set[str]) -> str:
    alphabet = string.ascii_uppercase + string.digits
    while True:
        asin = "B0" + "".join(rng.choice(alphabet) for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _title_case(phrase: str) -> str:
    return " ".join(w if any(c.isdigit() for c in w) else w[:1].upper() + w[1:] for w in phrase.split())


def _options(rng: random.Random, ptype: ProductType, base: dict[str, list[str]] | None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    used: set[str] = set()
    for k, (name, pool_name) in enumerate(ptype.options):
        if base is None and rng.random() > (0.85 if k == 0 else 0.6):
            continue
        if base is not None and _OPTION_DISPLAY[pool_name] not in base:
            continue
        pool = [v for v in OPTION_POOLS[pool_name] if v.lower() not in used]
        n = rng.randint(2, min(5, len(pool)))
        chosen = set(rng.sample(pool, n))
        values = [v for v in pool if v in chosen]  # keep the pool's natural order
        display = _OPTION_DISPLAY[pool_name]
        if display in out:
            continue
        out[display] = values
        used.update(v.lower() for v in values)
    return out


def _pricing(rng: random.Random, ptype: ProductType, base_price: float | None) -> tuple[str, float]:
    lo, hi = ptype.price
    if base_price is None:
        price = rng.uniform(lo, hi)
    else:
        price = base_price * rng.uniform(0.7, 1.4)
    price = max(1.0, float(int(price))) + 0.99
    roll = rng.random()
    if roll < 0.02:
        return "", price  # no price listed: upstream treats it as $100.0
    if roll < 0.22:
        top = float(int(price * rng.uniform(1.1, 1.6))) + 0.99
        return f"${price:.2f} - ${top:.2f}", price
    return f"${price:.2f}", price


def _product(rng: random.Random, ptype: ProductType, asin: str, base: dict[str, Any] | None,
             names: set[str]) -> tuple[dict[str, Any], list[str]]:
    cat = ptype.category
    if base is None:
        brand = rng.choice(BRANDS[cat])
        attrs = rng.sample(list(ptype.attributes), rng.randint(3, 5))
        audience = rng.choice(ptype.audiences) if ptype.audiences else ""
        options = _options(rng, ptype, None)
        pricing, price = _pricing(rng, ptype, None)
    else:  # near miss: same family, one attribute swapped, other options and price
        brand = base["_brand"]
        attrs = list(base["_attrs"])
        spare = [a for a in ptype.attributes if a not in attrs]
        if spare:
            attrs[rng.randrange(len(attrs))] = rng.choice(spare)
        audience = base["_audience"]
        options = _options(rng, ptype, base["customization_options"] and
                           {k: [] for k in base["customization_options"]})
        pricing, price = _pricing(rng, ptype, base["_price"])
    shown = attrs[:2]
    for_part = f" for {audience}" if audience else ""
    line = rng.choice(_LINES)
    name = f"{brand} {line} {_title_case(shown[0])} {ptype.noun}{for_part}, {_title_case(shown[1])}"
    k = 2
    while name in names:
        name = f"{brand} {rng.choice(_LINES)} {_title_case(shown[0])} {ptype.noun}{for_part}, " \
               f"{_title_case(shown[1])} - Model {k}"
        k += 1
    names.add(name)
    desc_bits = [f"The {brand} {ptype.phrase} brings together {attrs[0]} and {attrs[1]}."]
    for a in attrs[2:]:
        desc_bits.append(rng.choice((
            f"It also offers {a} for everyday use.",
            f"Customers love the {a}.",
            f"Made with {a} in mind.",
        )))
    if audience:
        desc_bits.append(f"Designed for {audience.lower()}.")
    bullets = [f"{_title_case(a)}: part of what makes this {ptype.phrase} stand out" for a in attrs[1:]]
    bullets += rng.sample(_GENERIC_BULLETS, 2)
    raw = {
        "asin": asin,
        "name": name,
        "full_description": " ".join(desc_bits),
        "small_description": bullets,
        "pricing": pricing,
        "images": [],
        "customization_options": {k: [{"value": v, "image": None} for v in vals]
                                  for k, vals in options.items()} or None,
        "category": cat,
        "query": ptype.query,
        "product_category": " › ".join(ptype.crumbs),
        "average_rating": round(rng.uniform(3.0, 5.0), 1),
        "total_reviews": rng.randint(0, 5000),
        # private bookkeeping for near misses (removed before returning)
        "_brand": brand, "_attrs": attrs, "_audience": audience, "_price": price,
    }
    # A pool attribute the text happens to mention is an attribute of the product.
    text = " ".join([name, raw["full_description"], " ".join(bullets)]).lower()
    attrs_all = list(attrs) + [a for a in ptype.attributes if a not in attrs and a in text]
    return raw, attrs_all


def _option_text(values: list[tuple[str, str]]) -> str:
    parts = []
    for name, value in values:
        v = value.lower()
        parts.append(f"{v} {name.lower()}" if name.lower() in ("color", "size", "scent") else v)
    return " and ".join(parts)


def _human_instruction(rng: random.Random, ptype: ProductType, attrs: list[str],
                       opts: list[tuple[str, str]], audience: str) -> str:
    opener = rng.choice(_HUMAN_OPENERS)
    art = "" if ptype.phrase.endswith("s") else ("an " if ptype.phrase[0] in "aeiou" else "a ")
    for_part = f" for {audience.lower()}" if audience and rng.random() < 0.5 else ""
    if len(attrs) == 1:
        head = f"{opener} {art}{attrs[0]} {ptype.phrase}{for_part}"
    elif rng.random() < 0.5:
        head = f"{opener} {art}{attrs[0]} {ptype.phrase}{for_part} that is {' and '.join(attrs[1:])}"
    else:
        head = f"{opener} {art}{ptype.phrase}{for_part} with {', '.join(attrs[:-1])} and {attrs[-1]}"
    if opts:
        head += rng.choice((" in ", ", in ", " and it should be in ")) + _option_text(opts)
    return head


def generate_raw(num_products: int = 1000, seed: int = 0) -> RawCatalogue:
    """Generate a catalogue in upstream's raw format.

    Args:
        num_products: Number of products, 1 to :data:`MAX_PRODUCTS` (>= 50 keeps every category
            populated; the default 1000 gives ~17 products per type over 60 types in 5 categories).
        seed: Seed of the single ``random.Random`` that drives everything.

    Raises:
        ValueError: if ``num_products`` is not an integer from 1 to :data:`MAX_PRODUCTS`.
    """
    if not isinstance(num_products, int) or isinstance(num_products, bool) or not 1 <= num_products <= MAX_PRODUCTS:
        raise ValueError(f"num_products must be an integer from 1 to {MAX_PRODUCTS:_}, got {num_products!r}")
    rng = random.Random(seed)
    taken: set[str] = set()
    names: set[str] = set()
    n_types = len(PRODUCT_TYPES)
    counts = [num_products // n_types + (1 if i < num_products % n_types else 0) for i in range(n_types)]
    products: list[dict[str, Any]] = []
    ins_v2: dict[str, dict[str, Any]] = {}
    human: dict[str, list[dict[str, Any]]] = {}
    for ptype, count in zip(PRODUCT_TYPES, counts):
        prev: dict[str, Any] | None = None
        for _ in range(count):
            asin = _asin(rng, taken)
            base = prev if (prev is not None and rng.random() < 0.4) else None
            raw, attrs = _product(rng, ptype, asin, base, names)
            products.append(raw)
            prev = raw if base is None else prev
            entry: dict[str, Any] = {"attributes": attrs}
            if rng.random() < 0.45:
                ia = rng.sample(attrs, rng.randint(1, min(3, len(attrs))))
                text = f"Find me {', '.join(ia)} {ptype.phrase}"
                entry.update(instruction=text, instruction_attributes=ia)
            ins_v2[asin] = entry
            if rng.random() < 0.8:
                entries = []
                for _k in range(2 if rng.random() < 0.1 else 1):
                    ia = rng.sample(attrs, rng.randint(1, min(3, len(attrs))))
                    opts = [(name, rng.choice([o["value"] for o in vals]))
                            for name, vals in (raw["customization_options"] or {}).items()
                            if rng.random() < 0.85]
                    instr = _human_instruction(rng, ptype, ia, opts, raw["_audience"])
                    if rng.random() < 0.04:
                        ia = []  # upstream skips human goals without attributes
                    entries.append({
                        "asin": asin,
                        "instruction": instr,
                        "instruction_attributes": ia,
                        # the shop shows option values lower-cased; annotators copied them
                        "instruction_options": [v.lower() for _n, v in opts],
                    })
                human[asin] = entries
    order = list(range(len(products)))
    rng.shuffle(order)  # "items_shuffle": product order is shuffled
    shuffled = []
    for i in order:
        p = products[i]
        shuffled.append({k: v for k, v in p.items() if not k.startswith("_")})
    return RawCatalogue(items_shuffle=shuffled, items_ins_v2=ins_v2, items_human_ins=human)


def write_raw(raw: RawCatalogue, out_dir: str | Path) -> dict[str, Path]:
    """Write a generated catalogue as upstream's three JSON files; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for key, fname in RAW_FILE_NAMES.items():
        path = out / fname
        path.write_text(json.dumps(getattr(raw, key), ensure_ascii=False, indent=None), encoding="utf-8")
        paths[key] = path
    return paths

"""Shopping goals (human-style and synthetic), price ceilings and splits.

Follows upstream WebShop:

* **human goals** — one per entry of ``items_human_ins`` whose ``instruction_attributes`` is
  non-empty; the goal options are the entry's ``instruction_options``.
* **synthetic goals** — for each product with an ``items_ins_v2`` instruction, one goal per
  combination of its option values (option names sorted), the option text appended as
  ``" with name: value, and name: value"``; weighted by the mean inverse attribute frequency.
* **price ceiling** — from the bins 10, 20, ..., 990 take the first 4 above the product's
  price, sample 2 and keep the larger; append ``", and price lower than {u:.2f} dollars"``.
  With fewer than 2 bins left there is no clause and the ceiling is 1e6.  Upstream samples
  with the unseeded global RNG; we use a seeded ``random.Random``.
* **order** — the goal list is shuffled with ``random.Random(233)`` (identical to upstream's
  ``random.seed(233); random.shuffle(goals)``).
* **splits** — goal indices 0-499 test, 500-1499 eval, 1500+ train; for fewer than 6000
  goals the boundaries scale to N/12 and N/4 (equal to upstream's at N = 6000).

Example:
    >>> split_bounds(12087)
    {'test': (0, 500), 'eval': (500, 1500), 'train': (1500, 12087)}
    >>> split_bounds(1200)
    {'test': (0, 100), 'eval': (100, 300), 'train': (300, 1200)}
"""

from __future__ import annotations

import itertools
import random
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent_envs.webshop.catalogue import Product

__all__ = [
    "GOAL_SHUFFLE_SEED",
    "PRICE_BINS",
    "SPLITS",
    "Goal",
    "human_goals",
    "price_ceiling",
    "shuffle_goals",
    "split_bounds",
    "synthetic_goals",
]

PRICE_BINS: tuple[float, ...] = tuple(10.0 * i for i in range(1, 100))
GOAL_SHUFFLE_SEED = 233
SPLITS = ("test", "eval", "train")
_PRICE_CLAUSE = re.compile(r",? and price lower than [\d.]+ dollars\s*$")


@dataclass(frozen=True)
class Goal:
    """One shopping goal.

    Attributes:
        index: Position in the (shuffled) goal list; the task id of an episode.
        kind: ``"human"`` or ``"synthetic"``.
        asin: Target product (never shown to an agent).
        instruction: Full instruction text, price clause included.
        name: Target product name (r_type's goal name).
        query: Target product's query.
        category: Target product's top-level category.
        product_category: Target product's breadcrumb.
        attributes: Requested attributes.
        options: Requested option values (as written in the goal; may be mixed case).
        option_names: For synthetic goals the option name of each value, else ``None``.
        price_upper: Price ceiling (1e6 when the instruction has no price clause).
        weight: Sampling weight (synthetic: mean inverse attribute frequency; human: 1).
    """

    index: int
    kind: str
    asin: str
    instruction: str
    name: str
    query: str
    category: str
    product_category: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]
    option_names: tuple[str, ...] | None
    price_upper: float
    weight: float = 1.0
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def instruction_without_price(self) -> str:
        """The instruction with its price clause removed."""
        return _PRICE_CLAUSE.sub("", self.instruction)

    def scorer_view(self) -> dict[str, Any]:
        """The mapping :func:`agent_envs.webshop.scorer.score_purchase` expects."""
        return {"name": self.name, "query": self.query, "product_category": self.product_category,
                "attributes": list(self.attributes), "options": list(self.options),
                "price_upper": self.price_upper}

    def public(self) -> dict[str, Any]:
        """What an agent may see (no asin): index, kind, instruction."""
        return {"index": self.index, "kind": self.kind, "instruction": self.instruction}


def price_ceiling(price: float, rng: random.Random) -> tuple[float, str]:
    """(ceiling, clause) for a product price, upstream's rule with a seeded RNG."""
    above = [p for p in PRICE_BINS if p > price][:4]
    if len(above) >= 2:
        _, upper = sorted(rng.sample(above, 2))
        return upper, f", and price lower than {upper:.2f} dollars"
    return 1_000_000.0, ""


def human_goals(products: Sequence[Product], human: Mapping[str, Sequence[Mapping[str, Any]]],
                rng: random.Random) -> list[Goal]:
    """Human goals in product order (index -1 until :func:`shuffle_goals`)."""
    goals: list[Goal] = []
    for p in products:
        for entry in human.get(p.asin, ()) or ():
            attrs = entry.get("instruction_attributes") or []
            if not attrs:
                continue
            upper, clause = price_ceiling(p.price, rng)
            opts = entry.get("instruction_options") or []
            if isinstance(opts, Mapping):
                opts = list(opts.values())
            goals.append(Goal(
                index=-1, kind="human", asin=p.asin,
                instruction=str(entry.get("instruction", "")).strip(".") + clause,
                name=p.name, query=p.query, category=p.category,
                product_category=p.product_category, attributes=tuple(attrs),
                options=tuple(str(o) for o in opts), option_names=None, price_upper=upper,
            ))
    return goals


def synthetic_goals(products: Sequence[Product], rng: random.Random) -> list[Goal]:
    """Synthetic goals: instruction x every option combination, in product order."""
    goals: list[Goal] = []
    counts: dict[str, int] = defaultdict(int)
    for p in products:
        if not p.instruction_text or not p.instruction_attributes:
            continue
        upper, clause = price_ceiling(p.price, rng)
        names = sorted(p.options)
        for combo in itertools.product(*(p.options[n] for n in names)):
            option_text = ", and ".join(f"{n}: {v}" for n, v in zip(names, combo))
            option_text = f" with {option_text}" if option_text else ""
            goals.append(Goal(
                index=-1, kind="synthetic", asin=p.asin,
                instruction=f"{p.instruction_text}{option_text}{clause}",
                name=p.name, query=p.query, category=p.category,
                product_category=p.product_category, attributes=tuple(p.instruction_attributes),
                options=tuple(combo), option_names=tuple(names), price_upper=upper,
            ))
            for a in p.instruction_attributes:
                counts[a] += 1
    out = []
    for g in goals:
        w = sum(1.0 / counts[a] for a in g.attributes) / len(g.attributes)
        out.append(_replace(g, weight=w))
    return out


def _replace(goal: Goal, **changes: Any) -> Goal:
    from dataclasses import replace

    return replace(goal, **changes)


def shuffle_goals(goals: Sequence[Goal], seed: int = GOAL_SHUFFLE_SEED) -> list[Goal]:
    """Shuffle like upstream (``random.seed(233); random.shuffle``) and number the goals."""
    order = list(goals)
    random.Random(seed).shuffle(order)
    return [_replace(g, index=i) for i, g in enumerate(order)]


def split_bounds(n_goals: int) -> dict[str, tuple[int, int]]:
    """Half-open index ranges of the test / eval / train splits for ``n_goals`` goals."""
    if n_goals >= 6000:
        a, b = 500, 1500
    else:
        a, b = round(n_goals / 12), round(n_goals / 4)
    return {"test": (0, a), "eval": (a, b), "train": (b, n_goals)}

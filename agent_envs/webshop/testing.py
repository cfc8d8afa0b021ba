"""A tiny hand-written catalogue in upstream's raw format, for hand-checked tests.

Five products: the goal's target (P1, trail running shoes), a near miss (P2, road running
shoes: one attribute missing, other colours, over budget), an unrelated product (P3,
earbuds), a same-department product (P4, running socks: category match) and a product that
shares one title noun (P5, a trail lantern).  One human goal targets P1; P1 also has a
synthetic instruction (2 colours x 2 sizes = 4 synthetic goals).  P1 costs $975 so the
price ceiling is always $990 (only the bins 980 and 990 lie above it), whatever the seed.

Example:
    >>> import tempfile, gymnasium as gym, agent_envs
    >>> d = write_mini_catalogue(tempfile.mkdtemp())
    >>> env = gym.make("WebShop-Rubric-v0", catalogue=str(d), verify=False, tagger="lexicon")
    >>> env.reset(options={"task": 0})[1]["task"]["goal"][:30]
    'i need running shoes with brea'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["MINI_GOAL_TEXT", "MINI_HUMAN", "MINI_INS_V2", "MINI_ITEMS", "write_mini_catalogue"]

MINI_GOAL_TEXT = "i need running shoes with breathable mesh and arch support in navy blue and size 10"


def _p(asin: str, name: str, query: str, crumbs: str, pricing: str, desc: str, bullets: list[str],
       options: dict[str, list[str]] | None, category: str) -> dict[str, Any]:
    return {
        "asin": asin, "name": name, "query": query, "product_category": crumbs,
        "pricing": pricing, "full_description": desc, "small_description": bullets,
        "customization_options": {k: [{"value": v, "image": None} for v in vs] for k, vs in options.items()}
        if options else None,
        "category": category, "images": [],
    }


MINI_ITEMS: list[dict[str, Any]] = [
    _p("B000000001", "Acme Trail Running Shoes for Men", "running shoes",
       "Clothing › Men › Shoes › Running", "$975.00", "Lightweight shoes with arch support.",
       ["Rubber sole for grip"], {"Color": ["Black", "Navy Blue"], "Size": ["9", "10"]}, "fashion"),
    _p("B000000002", "Acme Road Running Shoes for Men", "running shoes",
       "Clothing › Men › Shoes › Running", "$995.00", "Everyday road shoes.",
       ["Cushioned insole"], {"Color": ["Black", "Light Blue"], "Size": ["10", "11"]}, "fashion"),
    _p("B000000003", "Bolt Wireless Earbuds", "wireless earbuds",
       "Electronics › Headphones › Earbuds", "$25.00", "Compact earbuds.", ["Charging case"],
       None, "electronics"),
    _p("B000000004", "Acme Running Socks Pack", "running socks",
       "Clothing › Men › Socks", "$12.00 - $16.00", "Soft socks.", ["Cotton blend"], None, "fashion"),
    _p("B000000005", "Trail Camp Lantern", "lantern", "Sports › Outdoors › Lighting", "$30.00",
       "Bright lantern.", ["Three modes"], None, "sports"),
]
MINI_INS_V2: dict[str, dict[str, Any]] = {
    "B000000001": {"attributes": ["breathable mesh", "arch support", "rubber sole"],
                   "instruction": "Find me breathable mesh running shoes",
                   "instruction_attributes": ["breathable mesh"]},
    "B000000002": {"attributes": ["breathable mesh", "lace up"]},
    "B000000003": {"attributes": ["noise cancelling"]},
    "B000000004": {"attributes": ["cotton blend"]},
    "B000000005": {"attributes": []},
}
MINI_HUMAN: dict[str, list[dict[str, Any]]] = {
    "B000000001": [
        {"asin": "B000000001", "instruction": MINI_GOAL_TEXT,
         "instruction_attributes": ["breathable mesh", "arch support"],
         "instruction_options": ["navy blue", "10"]},
        {"asin": "B000000001", "instruction": "shoes please", "instruction_attributes": [],
         "instruction_options": []},  # no attributes: upstream skips it
    ],
}


def write_mini_catalogue(directory: str | Path) -> Path:
    """Write the mini catalogue as ``items_shuffle.json``/``items_ins_v2.json``/
    ``items_human_ins.json`` into ``directory``; returns the directory."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "items_shuffle.json").write_text(json.dumps(MINI_ITEMS), encoding="utf-8")
    (d / "items_ins_v2.json").write_text(json.dumps(MINI_INS_V2), encoding="utf-8")
    (d / "items_human_ins.json").write_text(json.dumps(MINI_HUMAN), encoding="utf-8")
    return d

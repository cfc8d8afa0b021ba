"""A scripted oracle that buys the goal product with the goal options.

It only reads the page snapshot, the goal and the catalogue, so it drives any backend
(embedded, server, browser).  Used by tests and benchmarks; not an agent baseline (it reads
the target asin from the goal).

Example:
    >>> import gymnasium as gym, agent_envs
    >>> env = gym.make("WebShop-Rubric-v0", catalogue="generated", num_products=120, tagger="lexicon")
    >>> obs, info = env.reset(options={"task": 3})
    >>> done = False
    >>> while not done:
    ...     obs, r, done, trunc, info = env.step(oracle_action(env.unwrapped))
    >>> info["score"], r
    (1.0, 10.0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from agent_envs.webshop.catalogue import Catalogue, normalize_option_value
from agent_envs.webshop.goals import Goal
from agent_envs.webshop.session import PageSnapshot

if TYPE_CHECKING:
    from agent_envs.webshop.env import WebShopRubricEnv

__all__ = ["goal_option_clicks", "oracle_action", "oracle_next"]


def goal_option_clicks(catalogue: Catalogue, goal: Goal) -> dict[str, str]:
    """Option name -> value (as clickable) that realises each goal option on the target."""
    product = catalogue.by_asin[goal.asin]
    out: dict[str, str] = {}
    for raw in goal.options:
        want = normalize_option_value(raw)
        name = product.option_of(want)
        if name is None:  # not verbatim: the closest value of any option
            best = max(((fuzz.token_set_ratio(want, v, processor=default_process), n, v)
                        for n, vs in product.options.items() for v in vs), default=None)
            if best is None:
                continue
            _s, name, want = best
        out.setdefault(name, want)
    return out


def oracle_next(snap: PageSnapshot, goal: Goal, catalogue: Catalogue) -> str:
    """The next oracle action on page ``snap``."""
    product = catalogue.by_asin[goal.asin]
    if snap.page == "start":
        return f"search[{product.name}]"
    if snap.page == "results":
        if goal.asin.lower() in snap.clickables:
            return f"click[{goal.asin.lower()}]"
        if "next >" in snap.clickables:
            return "click[next >]"
        return "click[back to search]"
    if snap.page in ("item", "item_sub") and (snap.asin or "").upper() != goal.asin:
        return "click[back to search]"
    if snap.page == "item_sub":
        return "click[< prev]"
    if snap.page == "item":
        for name, value in goal_option_clicks(catalogue, goal).items():
            if snap.options.get(name) != value:
                return f"click[{value}]"
        return "click[buy now]"
    raise ValueError(f"no oracle action on a {snap.page!r} page")


def oracle_action(env: WebShopRubricEnv) -> str:
    """The next oracle action for an (unwrapped) environment after ``reset``."""
    return oracle_next(env.page, env.goal, env.catalogue)

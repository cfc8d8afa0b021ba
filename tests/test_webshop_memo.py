"""The WebShop engine's memos change no page, preview or action key.

The embedded backend shares built pages and purchase previews across its sessions
(:class:`~agent_envs.webshop.session.PageMemo`), and the environment memoises every page's
action keys; sibling episodes of one goal revisit the same pages.  Each test plays the same
actions with and without the memos and compares what an agent would see.
"""

from __future__ import annotations

import random

import gymnasium as gym
import pytest

import agent_envs  # noqa: F401  (registers the environments)
from agent_envs.webshop import rubric as rb
from agent_envs.webshop import session as session_mod
from agent_envs.webshop.session import PageMemo, ShopSession


@pytest.fixture(scope="module")
def env():
    e = gym.make("WebShop-Rubric-v0", catalogue="generated").unwrapped
    yield e
    e.close()


def _action(snap, goal: str, rng: random.Random) -> str:
    acts = ([f"search[{' '.join(rng.sample(goal.split(), min(4, len(goal.split()))))}]"] if snap.has_search_bar else [])
    acts += [f"click[{c}]" for c in snap.clickables]
    return rng.choice(acts + ["click[not on the page]"])


def _products(session: ShopSession) -> list[str]:
    snap = session.snapshot()
    return [c for c in snap.clickables if snap.clickable_kinds[c] == "product"]


def _play(session: ShopSession, rng: random.Random, steps: int) -> list[dict]:
    seen = [session.snapshot().to_dict()]
    for _ in range(steps):
        snap = session.snapshot()
        if snap.done:
            break
        outcome = session.act(_action(snap, session.goal.instruction, rng))
        seen.append({"outcome": repr(outcome), **session.snapshot().to_dict()})
    return seen


def test_shared_pages_and_previews_equal_a_session_without_them(env):
    cat, tagger = env.backend.catalogue, env.backend.tagger
    memo = PageMemo()
    for g in range(6):
        goal = cat.goals[g]
        for sibling in range(4):
            seed = 100 * g + sibling
            shared = _play(ShopSession(cat, goal, tagger, pages=memo), random.Random(seed), 15)
            alone = _play(ShopSession(cat, goal, tagger), random.Random(seed), 15)
            assert shared == alone
    assert memo.get((cat.goals[0].instruction, ("start",))) is not None
    assert memo.previews, "no product was opened: the walk does not exercise the preview memo"


def test_an_item_page_is_one_page_whatever_was_visited_before(env):
    cat, tagger = env.backend.catalogue, env.backend.tagger
    memo = PageMemo()
    goal = cat.goals[0]
    a, b = ShopSession(cat, goal, tagger, pages=memo), ShopSession(cat, goal, tagger, pages=memo)
    for s in (a, b):
        assert s.act(f"search[{goal.instruction}]").valid
    first, second = _products(a)[:2]
    assert a.act(f"click[{first}]").valid and a.act("click[< prev]").valid  # a visited `first`
    assert a.act(f"click[{second}]").valid and b.act(f"click[{second}]").valid
    assert a.state.visited != b.state.visited
    assert a._current_page() is b._current_page()
    assert a.snapshot() == b.snapshot()
    # a results page shows which products were visited, so those pages stay apart
    assert a.act("click[< prev]").valid and b.act("click[< prev]").valid
    assert a._current_page() is not b._current_page()


def test_siblings_score_a_purchase_preview_once(env, monkeypatch):
    cat, tagger = env.backend.catalogue, env.backend.tagger
    calls = []
    real = session_mod.score_purchase
    monkeypatch.setattr(session_mod, "score_purchase", lambda *a, **k: calls.append(1) or real(*a, **k))
    memo, goal = PageMemo(), cat.goals[1]
    previews = []
    for _ in range(3):
        s = ShopSession(cat, goal, tagger, pages=memo)
        s.act(f"search[{goal.instruction}]")
        s.act(f"click[{_products(s)[0]}]")
        previews.append(s.snapshot().preview)
    assert len(calls) == 1 and previews[0] is not None and previews == previews[:1] * 3
    # a goal with other scored fields gets its own preview
    other = next(g for g in cat.goals if g.attributes != goal.attributes)
    s = ShopSession(cat, other, tagger, pages=memo)
    s.act(f"search[{goal.instruction}]")
    s.act(f"click[{_products(s)[0]}]")
    assert s.snapshot().preview is not None and len(calls) == 2


def test_page_memo_is_bounded():
    memo = PageMemo(max_pages=2)
    for k in range(3):
        memo.put(("g", (k,)), k)
    assert memo.get(("g", (2,))) == 2 and memo.get(("g", (0,))) is None


def test_memoised_action_keys_equal_the_direct_ones(env):
    rng = random.Random(3)
    for ep in range(12):
        _obs, info = env.reset(seed=ep, options={"task": 209 + ep % 4, "split": "train"})
        for _ in range(10):
            snap = env.page
            direct = {a: rb.action_key(snap, env._goal_tokens, a) for a in info["admissible_actions"]
                      if not a.startswith("search[")}
            assert info["action_keys"] == direct
            info["action_keys"].clear()  # the caller's copy: the memo is not shared with it
            if snap.done:
                break
            _obs, _r, term, trunc, info = env.step(_action(snap, env.goal.instruction, rng))
            if term or trunc:
                break
    from agent_envs.webshop.env import _PAGE_ACTION_KEYS

    assert _PAGE_ACTION_KEYS


def test_environments_over_one_catalogue_share_one_memo(env):
    other = gym.make("WebShop-Rubric-v0", catalogue="generated").unwrapped
    try:
        assert other.backend.pages is env.backend.pages
    finally:
        other.close()
    from agent_envs.webshop.scorer import LexiconNounTagger
    from agent_envs.webshop.session import shared_page_memo

    # previews depend on the tagger: another tagger object gets its own memo
    assert shared_page_memo(env.backend.catalogue, LexiconNounTagger()) is not env.backend.pages
    assert shared_page_memo(env.backend.catalogue, env.backend.tagger) is env.backend.pages


def test_a_session_whose_tagger_is_swapped_scores_with_the_new_one(env):
    """The tagger is an input of the preview: a memoised breakdown of another tagger is not reused."""
    cat, tagger = env.backend.catalogue, env.backend.tagger
    memo, goal = PageMemo(), cat.goals[2]
    first = ShopSession(cat, goal, tagger, pages=memo)
    first.act(f"search[{goal.instruction}]")
    first.act(f"click[{_products(first)[0]}]")
    assert first.snapshot().preview is not None and first.scorer_error is None

    class Boom:
        name = "boom"

        def nouns(self, text):
            raise RuntimeError("tagger exploded")

    second = ShopSession(cat, goal, tagger, pages=memo)
    second.tagger = Boom()
    second.act(f"search[{goal.instruction}]")
    second.act(f"click[{_products(second)[0]}]")
    assert second.snapshot().preview is None and "tagger exploded" in second.scorer_error

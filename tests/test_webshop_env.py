"""WebShop-Rubric-v0: episodes, rewards, channels (Table 16, Eq. 19), keys (Table 5), action
keys, check_env, fuzzing, determinism, the route API and the oracle on every goal."""

from __future__ import annotations

import json
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agent_envs  # noqa: F401 - registers the environments
from agent_envs.webshop.env import WebShopRubricEnv
from agent_envs.webshop.oracle import oracle_action
from agent_envs.webshop.session import ShopSession
from agent_envs.webshop.testing import MINI_GOAL_TEXT, write_mini_catalogue

Q, O, T, A, U, P, R, B, K, S = ("search_issued", "product_opened", "type_match", "attribute_match",
                                "option_match", "price_ok", "purchase_readiness", "purchased",
                                "task_score", "solved")
GOAL = MINI_GOAL_TEXT + ", and price lower than 990.00 dollars"


@pytest.fixture(scope="module")
def mini_dir(tmp_path_factory):
    return write_mini_catalogue(tmp_path_factory.mktemp("mini"))


@pytest.fixture()
def mini(mini_dir):
    env = WebShopRubricEnv(catalogue=str(mini_dir), verify=False, tagger="lexicon")
    env.reset(options={"task": 0})
    return env


@pytest.fixture(scope="module")
def gen_env():
    return WebShopRubricEnv(catalogue="generated", num_products=1000, tagger="lexicon")


def run(env, actions):
    out = []
    for a in actions:
        out.append(env.step(a))
    return out


def test_reset_info_contract(mini):
    obs, info = mini.reset(options={"task": 0})
    assert obs == f"WebShop [SEP] Instruction: [SEP] {GOAL} [SEP] Search"
    assert info["admissible_actions"] == ["search[<your query>]"]
    assert info["task"] == {"id": "webshop/human/0", "goal": GOAL, "type": "webshop"}
    assert set(info["rubric"]) == {Q, O, T, A, U, P, R, B, K, S, "scorer_error"}
    assert not any(info["rubric"].values())
    assert info["signature"] == ("", "Q")
    assert info["keys"]["exact"] == ("start", None, None, ())
    assert info["keys"]["signature"] == (frozenset(), frozenset({Q}))
    assert (info["won"], info["score"], info["valid"], info["task_reward"], info["penalty"]) == (
        False, 0.0, True, 0.0, 0.0)
    assert info["state_key"] == obs
    # the target asin is never in info (the start page shows no product)
    assert "B000000001" not in json.dumps(info, default=str)
    g = mini.goal
    assert (g.asin, g.attributes, g.options, g.price_upper) == (
        "B000000001", ("breathable mesh", "arch support"), ("navy blue", "10"), 990.0)


def test_hand_checked_episode_channels_keys_and_eq19(mini):
    """The full trace of the mini goal (values derived in tests/test_webshop_scorer.py)."""
    steps = run(mini, ["search[running shoes]"])
    obs, r, term, trunc, info = steps[-1]
    # BM25: P2 and P1 contain both terms, P4 only 'running'; P3, P5 match nothing
    assert obs == (f"Instruction: [SEP] {GOAL} [SEP] Back to Search [SEP] Page 1 (Total results: 3)"
                   " [SEP] B000000002 [SEP] Acme Road Running Shoes for Men [SEP] $995.0"
                   " [SEP] B000000001 [SEP] Acme Trail Running Shoes for Men [SEP] $975.0"
                   " [SEP] B000000004 [SEP] Acme Running Socks Pack [SEP] $12.0 to $16.0")
    assert info["rubric"][Q] and not info["rubric"][O]
    assert info["signature"] == ("Q", "O")
    assert info["keys"]["exact"] == ("results", "running shoes", None, ())
    assert info["keys"]["signature"] == (frozenset({Q}), frozenset({O}))
    # goal tokens (stemmed, filler/price removed): run shoe breathabl mesh arch support navi blue
    # size 10 -> 10 tokens; 'running shoes' covers 2 -> 0.2 -> bin 1; titles cover the same 2
    assert info["action_key"] == "search:1"
    assert info["action_keys"]["click[b000000002]"] == "product:1"
    assert info["action_keys"]["click[back to search]"] == "nav:back"

    obs, r, term, trunc, info = mini.step("click[b000000002]")  # the near miss
    st_ = info["rubric"]
    # P2, no options: r_type 1, r_att 1/2, r_option 0, price 995 > 990
    assert (st_[T], st_[A], st_[U], st_[P]) == (1.0, 0.5, 0.0, False)
    # Eq. 19: u (M_a + M_o + p) / (N_a + N_o + 1) = 1 * (1 + 0 + 0) / 5
    assert st_[R] == pytest.approx(0.2)
    assert info["signature"] == ("QOTAR", "UPB")
    # coarse: bins round_half_even(4v): T 4, A 2, U 0; price False
    assert info["keys"]["coarse"][:7] == ("item", True, True, 4, 2, 0, False)
    assert info["keys"]["exact"][:4] == ("item", "running shoes", "B000000002", ())
    # option key: share of the value's tokens in the goal: 'blue' of {light, blue} = 0.5 -> bin 2
    assert info["action_keys"]["click[light blue]"] == "option:2"
    assert info["action_keys"]["click[11]"] == "option:0"
    assert info["action_keys"]["click[buy now]"] == "buy"
    assert info["action_keys"]["click[description]"] == "nav:description"

    mini.step("click[< prev]")
    obs, r, term, trunc, info = mini.step("click[b000000001]")
    st_ = info["rubric"]
    assert (st_[T], st_[A], st_[U], st_[P], st_[R]) == (1.0, 1.0, 0.0, True, pytest.approx(3 / 5))
    assert info["signature"] == ("QOTAPR", "UB")
    assert mini.action_key("click[navy blue]") == "option:3" and mini.action_key("click[black]") == "option:0"

    obs, r, term, trunc, info = mini.step("click[navy blue]")
    # navy blue matches: U 1/2, R = (2 + 1 + 1) / 5
    assert (info["rubric"][U], info["rubric"][R]) == (0.5, pytest.approx(0.8))
    assert info["keys"]["coarse"][:7] == ("item", True, True, 4, 4, 2, True)
    assert info["keys"]["exact"][3] == (("color", "navy blue"),)

    obs, r, term, trunc, info = mini.step("click[10]")
    assert info["rubric"][R] == pytest.approx(1.0)  # readiness before purchase == final score
    assert info["signature"] == ("QOTAUPR", "B")
    assert (r, term) == (0.0, False)

    obs, r, term, trunc, info = mini.step("click[buy now]")
    assert (r, term, trunc, info["won"], info["score"], info["task_reward"]) == (10.0, True, False, True, 1.0, 10.0)
    assert info["rubric"][B] and info["rubric"][K] == 1.0 and info["rubric"][S]
    assert info["signature"] == ("QOTAUPRBKS", "")
    assert info["reward_info"]["total"] == 1.0 and info["reward_info"]["tagger"] == "lexicon-v1"
    assert "asin" not in json.dumps(info["reward_info"])
    assert info["admissible_actions"] == []


def test_partial_purchase_score_equals_prior_readiness(mini):
    mini.step("search[running shoes]")
    mini.step("click[b000000001]")
    *_, info = mini.step("click[black]")
    readiness = info["rubric"][R]
    # black does not match navy blue: (2 + 0 + 1) / 5
    assert readiness == pytest.approx(3 / 5)
    _obs, r, term, _trunc, info = mini.step("click[buy now]")
    assert info["score"] == pytest.approx(readiness) and r == 0.0 and term
    assert info["rubric"][K] == pytest.approx(0.6) and not info["rubric"][S] and not info["won"]


def test_scorer_error_is_a_diagnostic_channel(mini):
    class Boom:
        name = "boom"

        def nouns(self, text):
            raise RuntimeError("tagger exploded")

    mini.session.tagger = Boom()
    mini.step("search[running shoes]")
    *_, info = mini.step("click[b000000001]")
    st_ = info["rubric"]
    assert st_["scorer_error"] is True
    assert (st_[T], st_[A], st_[U], st_[P], st_[R]) == (0.0, 0.0, 0.0, False, 0.0)  # left at zero
    assert info["signature"] == ("QO", "TAUP")  # diagnostics never enter C
    _obs, r, term, _trunc, info = mini.step("click[buy now]")
    assert term and info["score"] == 0.0 and r == 0.0 and info["rubric"][B]


def test_invalid_actions_are_penalised_and_change_nothing(mini):
    obs0 = mini.page.text
    for bad in ["click[buy now]", "search[]", "jump", "click[search]", "", "search[x" * 1000]:
        obs, r, term, _trunc, info = mini.step(bad)
        assert (r, info["valid"], info["penalty"], term) == (-0.1, False, -0.1, False)
        assert obs == obs0 and info["feedback"]
        assert info["action_key"] == "invalid"
    with pytest.raises(TypeError, match="strings"):
        mini.step(3)  # type: ignore[arg-type]


def test_search_only_from_search_page_and_navigation(mini):
    mini.step("search[running]")
    obs, _r, *_ , info = mini.step("search[shoes]")
    assert not info["valid"] and "search bar" in info["feedback"]
    mini.step("click[b000000004]")
    obs, *_ = mini.step("click[features]")
    assert obs.endswith("Back to Search [SEP] < Prev [SEP] Cotton blend")
    obs, *_ = mini.step("click[< prev]")
    assert "Acme Running Socks Pack [SEP] Price: $12.0 to $16.0 [SEP] Rating: N.A." in obs
    obs, *_ = mini.step("click[back to search]")
    assert obs.endswith("[SEP] Search")


def test_results_pagination_on_generated(gen_env):
    gen_env.reset(options={"task": 0})
    obs, *_, info = gen_env.step("search[scented candle]")
    assert "Page 1 (Total results: 50)" in obs and "click[next >]" in info["admissible_actions"]
    assert "click[< prev]" not in info["admissible_actions"]
    assert sum(a.startswith("click[b0") for a in info["admissible_actions"]) == 10
    for _ in range(4):
        obs, *_, info = gen_env.step("click[next >]")
    assert "Page 5 (Total results: 50)" in obs and "click[next >]" not in info["admissible_actions"]
    obs, *_ = gen_env.step("click[< prev]")
    assert "Page 4 (Total results: 50)" in obs


def test_horizon_truncates(mini):
    for i in range(15):
        _obs, _r, term, trunc, info = mini.step("click[nothing]")
    assert trunc and not term and info["steps"] == 15


def test_text_rich_marks_buttons_and_selection(mini_dir):
    env = WebShopRubricEnv(catalogue=str(mini_dir), verify=False, tagger="lexicon", observation_mode="text_rich")
    env.reset(options={"task": 0})
    env.step("search[running shoes]")
    env.step("click[b000000001]")
    obs, *_ = env.step("click[navy blue]")
    lines = obs.split("\n")
    assert lines[0] == "You have clicked navy blue."
    assert "[button] Back to Search [button_]" in lines
    assert "  [clicked button] navy blue [clicked button_]" in lines
    assert "  [button] black [button_]" in lines and "[button] Buy Now [button_]" in lines
    obs, *_ = env.step("click[< prev]")
    assert "[clicked button] B000000001 [clicked button_]" in obs  # visited product link
    assert "[button] B000000002 [button_]" in obs


def test_route_api_reproduces_text_actions(mini):
    """Server routes (goto_*) reach the same pages as text actions (same snapshot text)."""
    cat, goal, tagger = mini.catalogue, mini.goal, mini.tagger
    a = ShopSession(cat, goal, tagger)
    for act in ["search[running shoes]", "click[b000000001]", "click[navy blue]", "click[reviews]"]:
        assert a.act(act).valid
    b = ShopSession(cat, goal, tagger)
    b.goto_results("Running  Shoes", 1)
    b.goto_sub("b000000001", "running shoes", 1, "reviews", {"color": "navy blue"})
    assert a.snapshot().text == b.snapshot().text
    assert a.snapshot().options == b.snapshot().options == {"color": "navy blue"}
    out = b.buy("B000000001", {"color": "navy blue", "size": "10"})
    assert out.done and out.score == pytest.approx(1.0)
    from agent_envs.webshop.session import RouteError

    c = ShopSession(cat, goal, tagger)
    for bad in [lambda: c.goto_item("B999"), lambda: c.goto_results("x", 0),
                lambda: c.goto_item("B000000001", None, 1, {"color": "pink"}),
                lambda: c.goto_sub("B000000001", None, 1, "secrets"),
                lambda: c.goto_results("running shoes", 2)]:  # 3 results: one page
        with pytest.raises(RouteError):
            bad()
    c.goto_results("zzzz qqqq", 1)  # no hits: an empty first page, as upstream shows
    assert "Page 1 (Total results: 0)" in c.snapshot().text


def test_check_env_passes(mini_dir):
    """Gymnasium's checker, its warnings included (a warning fails the test: it used to silence
    them all, so a missing ``render_fps`` could not fail it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for kwargs in ({"catalogue": str(mini_dir), "verify": False}, {"catalogue": "generated", "num_products": 300}):
            env = gym.make("WebShop-Rubric-v0", tagger="lexicon", disable_env_checker=False, **kwargs)
            check_env(env.unwrapped)
            _obs, _info = env.reset(seed=0)  # through the passive checker wrapper
            env.step("search[shoes]")
            env.close()


def test_determinism_same_seed_same_episode():
    def episode(seed):
        env = WebShopRubricEnv(catalogue="generated", num_products=300, tagger="lexicon")
        obs, info = env.reset(seed=seed)
        trace = [obs]
        for _ in range(6):
            acts = info["admissible_actions"]
            a = "search[" + info["task"]["goal"][:40] + "]" if acts[0].startswith("search") else acts[
                len(trace) % len(acts)]
            obs, r, term, _trunc, info = env.step(a)
            trace.append((obs, r, info["rubric"], info["keys"]["coarse"]))
            if term:
                break
        return trace

    assert episode(5) == episode(5)


def test_shared_catalogue_and_splits(gen_env):
    other = WebShopRubricEnv(catalogue="generated", num_products=1000, tagger="lexicon")
    assert other.catalogue is gen_env.catalogue
    n = len(gen_env.goals())
    assert gen_env.split_range("test") == range(round(n / 12))
    assert gen_env.split_range("eval") == range(round(n / 12), round(n / 4))
    _, info = gen_env.reset(seed=1, options={"split": "test"})
    assert int(info["task"]["id"].rsplit("/", 1)[1]) < round(n / 12)
    with pytest.raises(ValueError, match="not in split 'test'"):
        gen_env.reset(options={"task": n - 1, "split": "test"})
    with pytest.raises(ValueError, match="out of range"):
        gen_env.reset(options={"task": n})
    with pytest.raises(ValueError, match="unknown reset options"):
        gen_env.reset(options={"goal": 1})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=st.lists(st.one_of(
    st.text(max_size=200),
    st.builds(lambda s: f"click[{s}]", st.text(max_size=30)),
    st.builds(lambda s: f"search[{s}]", st.text(max_size=60)),
    st.integers(0, 40)), min_size=1, max_size=20))
def test_action_fuzzing_never_crashes(gen_env, actions):
    obs, info = gen_env.reset(options={"task": 1})
    for a in actions:
        if isinstance(a, int):  # pick an admissible action
            acts = info["admissible_actions"]
            if not acts:
                break
            a = acts[a % len(acts)].replace("<your query>", "candle")
        obs, r, term, trunc, info = gen_env.step(a)
        assert gen_env.observation_space.contains(obs)
        assert r in (0.0, 10.0, -0.1) or (r == 0.0)
        assert 0.0 <= info["score"] <= 1.0
        if term or trunc:
            break


@pytest.mark.slow
@pytest.mark.parametrize("kind,tagger", [("human", "lexicon"), ("synthetic", "lexicon"), ("human", "spacy")])
def test_oracle_scores_one_on_every_generated_goal(kind, tagger):
    env = WebShopRubricEnv(catalogue="generated", num_products=1000, tagger=tagger, goal_kind=kind)
    failures = []
    n = len(env.goals())
    assert n > 700
    for i in range(n):
        env.reset(options={"task": i})
        term = trunc = False
        while not (term or trunc):
            _obs, r, term, trunc, info = env.step(oracle_action(env))
        if not (term and info["score"] == 1.0 and r == 10.0 and info["won"]):
            failures.append((i, info["score"]))
    assert failures == []

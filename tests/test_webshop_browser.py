"""WebShop browser mode: Selenium 4 driving Debian's headless Chromium against the Flask
server on 127.0.0.1 gives exactly the embedded engine's episodes (observations read from the
rendered DOM), buys goal products with score 1.0, and never executes echoed keywords.

Needs ``chromium`` and ``chromium-driver`` (CI installs them with apt); a screenshot of a
finished purchase is saved to ``$ARTIFACTS_DIR`` (default ``artifacts/``)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import requests

import agent_envs  # noqa: F401 - registers the environments
from agent_envs.webshop.env import WebShopRubricEnv
from agent_envs.webshop.oracle import oracle_action
from agent_envs.webshop.remote import BrowserBackend, RemoteError, find_browser

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("ARTIFACTS_DIR") or REPO / "artifacts")
# Invalid actions, odd spacing/case, a near miss, options, sub-pages, navigation, the purchase.
MINI_SCRIPT = ["click[x]", "search[  Running   SHOES ]", "click[b000000002]", "click[black]", "click[< prev]",
               "click[b000000001]", "click[Navy Blue]", "click[description]", "click[< prev]", "click[10]",
               "search[x]", "click[reviews]", "click[< prev]", "click[back to search]", "search[running shoes]",
               "click[b000000001]", "click[navy blue]", "click[10]", "click[buy now]"]
GEN = dict(catalogue="generated", num_products=1000, tagger="lexicon")


@pytest.fixture(scope="module", autouse=True)
def chromium():
    try:
        return find_browser()
    except RemoteError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def gen_browser(gen_server):
    env = WebShopRubricEnv(server_url=gen_server.url, browser=True, **GEN)
    yield env
    env.close()


def trace(env, actions, task=0):
    obs, info = env.reset(options={"task": task})
    out = [(obs, info, env.unwrapped.page.to_dict())]
    for a in actions:
        out.append((*env.step(a), env.unwrapped.page.to_dict()))
    return out


def test_same_episode_in_embedded_server_and_browser_modes(mini_server, mini_dir):
    kw = dict(catalogue=mini_dir, verify=False, tagger="lexicon", observation_mode="text_rich", max_steps=25)
    embedded = trace(WebShopRubricEnv(**kw), MINI_SCRIPT)
    server_env = WebShopRubricEnv(server_url=mini_server.url, **kw)
    browser_env = WebShopRubricEnv(server_url=mini_server.url, browser=True, **kw)
    try:
        served = trace(server_env, MINI_SCRIPT)
        browsed = trace(browser_env, MINI_SCRIPT)
        assert isinstance(browser_env.backend, BrowserBackend)
        assert browser_env.backend.mismatches == 0
    finally:
        server_env.close()
        browser_env.close()
    for i, (e, s, b) in enumerate(zip(embedded, served, browsed)):
        assert s == e, f"server differs after {MINI_SCRIPT[i - 1] if i else 'reset'}"
        assert b == e, f"browser differs after {MINI_SCRIPT[i - 1] if i else 'reset'}"
    _obs, r, term, _trunc, info, snap = embedded[-1]  # the purchase
    assert (r, term, info["score"], info["won"], snap["page"]) == (10.0, True, 1.0, True, "done")
    assert "  [clicked button] navy blue [clicked button_]" in embedded[7][0].split("\n")


def test_browser_oracle_buys_a_sample_of_goals_and_saves_a_screenshot(gen_browser):
    n = len(gen_browser.goals())
    sample = sorted({0, 1, 7, n // 12, n // 4, n // 2, (3 * n) // 4, n - 1})
    scores = {}
    for task in sample:
        gen_browser.reset(options={"task": task})
        term = trunc = False
        while not (term or trunc):
            obs, r, term, trunc, info = gen_browser.step(oracle_action(gen_browser))
        scores[task] = (info["score"], r, info["won"])
    assert scores == {t: (1.0, 10.0, True) for t in sample}
    assert obs.startswith("Thank you for shopping with us!")
    shot = gen_browser.backend.screenshot(ARTIFACTS / "webshop_browser_purchase.png")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert gen_browser.backend.driver.find_element("css selector", "#reward pre").text == "1.0000"


def test_browser_random_walks_match_embedded(gen_browser):
    embedded = WebShopRubricEnv(**GEN)
    rng = random.Random(11)
    for task in (2, 333):
        actions, (_obs, info) = [], embedded.reset(options={"task": task})
        for _ in range(12):
            acts = info["admissible_actions"]
            act = rng.choice(acts + ["click[nothing here]"]).replace("<your query>", info["task"]["goal"][:40])
            actions.append(act)
            _obs, _r, term, trunc, info = embedded.step(act)
            if term or trunc:
                break
        assert trace(gen_browser, actions, task) == trace(embedded, actions, task)
    assert gen_browser.backend.mismatches == 0


def test_browser_never_runs_echoed_keywords_and_round_trips_odd_ones(gen_browser):
    from selenium.common.exceptions import NoAlertPresentException

    xss = "<img src=x onerror=alert(1)><script>alert('x')</script>"
    actions = [f"search[{xss}]", "click[back to search]", "search[a/b .. 100% ?#x]", "click[back to search]",
               "search[..]", "click[back to search]", "search[ünïcode ✓]"]
    embedded = trace(WebShopRubricEnv(**GEN), actions, task=4)
    browsed = []
    obs, info = gen_browser.reset(options={"task": 4})
    browsed.append((obs, info, gen_browser.page.to_dict()))
    driver = gen_browser.backend.driver
    for a in actions:
        browsed.append((*gen_browser.step(a), gen_browser.page.to_dict()))
        with pytest.raises(NoAlertPresentException):
            driver.switch_to.alert  # noqa: B018 - raises when no script ran
        if a.startswith("search[<img"):
            assert driver.title == f"Results for {xss.lower()} · WebShop"  # shown as text, not markup
            assert driver.execute_script("return document.querySelectorAll('img, body script').length") == 0
    assert browsed == embedded
    assert [s[-1]["keywords"] for s in browsed[1::2]] == [xss.lower(), "a/b .. 100% ?#x", "..", "ünïcode ✓"]


def test_browser_mode_without_server_url_runs_a_private_loopback_server(mini_dir):
    env = WebShopRubricEnv(catalogue=mini_dir, verify=False, tagger="lexicon", browser=True)
    try:
        env.reset(options={"task": 0})
        url = env.backend.url
        assert url.startswith("http://127.0.0.1:")
        term = False
        while not term:
            _obs, r, term, _trunc, info = env.step(oracle_action(env))
        assert (r, info["score"]) == (10.0, 1.0)
    finally:
        env.close()
    with pytest.raises(requests.ConnectionError):
        requests.get(url + "/healthz", timeout=5)

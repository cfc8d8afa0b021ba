"""WebShop under bad input and corrupt files (issue 14's defects), each reproduced first.

The env: task ids with the wrong kind prefix, non-ASCII digits, numpy ints, non-dict options,
failed resets, the first step after a failed first reset.  The catalogue: malformed
``items_human_ins`` / ``items_ins_v2`` entries and deeply nested JSON named by file.  The
server: deeply nested JSON bodies and option segments (RecursionError was an HTTP 500) and
an invalid ``kind`` without a task (silently ignored).
"""

from __future__ import annotations

import json
import re
import shutil

import gymnasium as gym
import numpy as np
import pytest

import agent_envs  # noqa: F401 - registers the environments
from agent_envs.webshop.catalogue import CatalogueError, CatalogueSpec, get_catalogue
from agent_envs.webshop.env import WebShopRubricEnv
from agent_envs.webshop.testing import write_mini_catalogue

DEEP = "[" * 3000 + "]" * 3000  # json.loads raises RecursionError on this, not ValueError


@pytest.fixture(scope="module")
def mini_dir(tmp_path_factory):
    return write_mini_catalogue(tmp_path_factory.mktemp("mini"))


@pytest.fixture()
def env(mini_dir):
    e = WebShopRubricEnv(catalogue=str(mini_dir), verify=False, tagger="lexicon")
    yield e
    e.close()


# ------------------------------------------------------------------------------- the env


def test_task_id_prefix_must_match_the_goal_kind(env):
    # was: "webshop/synthetic/0" played human goal 0
    assert env.reset(options={"task": "webshop/human/0"})[1]["task"]["id"] == "webshop/human/0"
    assert env.reset(options={"task": "0"})[1]["task"]["id"] == "webshop/human/0"
    with pytest.raises(ValueError, match=r"names a synthetic goal, but this environment plays human goals"):
        env.reset(options={"task": "webshop/synthetic/0"})
    with pytest.raises(ValueError, match=r"an id like 'webshop/human/12', got 'shop/human/0'"):
        env.reset(options={"task": "shop/human/0"})
    synthetic = WebShopRubricEnv(catalogue=env.catalogue.spec.source, verify=False, tagger="lexicon",
                                 goal_kind="synthetic")
    assert synthetic.reset(options={"task": "webshop/synthetic/3"})[1]["task"]["id"] == "webshop/synthetic/3"


def test_non_ascii_digits_are_refused_clearly(env):
    # was: ValueError: invalid literal for int() with base 10: '²'
    with pytest.raises(ValueError, match=r"task must be a goal index or an id like 'webshop/human/12', got 'webshop/human/²'"):
        env.reset(options={"task": "webshop/human/²"})
    with pytest.raises(ValueError, match="got '١'"):  # Arabic-Indic one: int() would take it
        env.reset(options={"task": "١"})


def test_numpy_ints_are_goal_indices(env):
    # was: TypeError (ALFWorld accepts them)
    assert env.reset(options={"task": np.int64(0)})[1]["task"]["id"] == "webshop/human/0"
    with pytest.raises(TypeError, match="int goal index"):
        env.reset(options={"task": np.bool_(True)})


def test_reset_options_must_be_a_mapping(env):
    # was: TypeError "cannot convert dictionary update sequence element #0 to a sequence"
    with pytest.raises(TypeError, match=r"reset options must be a dict such as \{'task': 0.*got list"):
        env.reset(options=[1, 2])


def test_a_failed_reset_changes_nothing(env):
    env.reset(seed=3, options={"task": 0})
    state = env.np_random.bit_generator.state
    for bad in ({"task": 10**6}, {"task": "webshop/synthetic/0"}, {"split": "nope"}):
        with pytest.raises(ValueError):
            env.reset(seed=99, options=bad)
        assert env.np_random.bit_generator.state == state
    assert env.split == "train"
    # the episode in progress goes on
    assert env.step("search[shoes]")[4]["valid"]


def test_first_step_after_a_failed_first_reset(mini_dir):
    """Gymnasium 1.4's passive checker fails the first step with TypeError after a failed first
    reset; gym.make adds no checker to our ids (agent_envs.registration)."""
    e = gym.make("WebShop-Rubric-v0", catalogue=str(mini_dir), verify=False, tagger="lexicon")
    try:
        with pytest.raises(ValueError):
            e.reset(options={"task": 10**6})
        with pytest.raises(RuntimeError, match=r"call reset\(\) before step\(\)"):
            e.step("search[shoes]")
        e.reset(options={"task": 0})
        assert e.step("search[shoes]")[4]["valid"]
    finally:
        e.close()


# ------------------------------------------------------------------------------- catalogue


def _copy(mini_dir, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(mini_dir, d)
    return d


def _load(directory):
    return get_catalogue(CatalogueSpec(source=str(directory), verify=False))


def test_malformed_human_instruction_entries_name_the_file(mini_dir, tmp_path):
    d = _copy(mini_dir, tmp_path)
    path = d / "items_human_ins.json"
    human = json.loads(path.read_text())
    asin = next(iter(human))
    for bad, what in (([42], "entry #0 of 'B"), ({"x": 1}, "must be a list"),
                      ([{"instruction_attributes": 7}], "instruction_attributes")):
        human[asin] = bad
        path.write_text(json.dumps(human))
        # was: bare AttributeError / TypeError
        with pytest.raises(CatalogueError, match=re.escape(str(path)) + ".*" + re.escape(what)):
            _load(d)


def test_malformed_ins_v2_entries_are_blamed_on_ins_v2(mini_dir, tmp_path):
    d = _copy(mini_dir, tmp_path)
    path = d / "items_ins_v2.json"
    ins = json.loads(path.read_text())
    asin = next(iter(ins))
    ins[asin] = ["not", "an", "object"]
    path.write_text(json.dumps(ins))
    # was: "items_shuffle: product #0: malformed product (AttributeError ...)"
    with pytest.raises(CatalogueError, match=re.escape(str(path)) + f".*{asin}.*expected an object") as err:
        _load(d)
    assert "items_shuffle" not in str(err.value)
    ins[asin] = {"attributes": 5}
    path.write_text(json.dumps(ins))
    with pytest.raises(CatalogueError, match=re.escape(str(path)) + f".*{asin}.*attributes"):
        _load(d)


def test_malformed_products_name_the_products_file(mini_dir, tmp_path):
    d = _copy(mini_dir, tmp_path)
    path = d / "items_shuffle.json"
    items = json.loads(path.read_text())
    del items[1]["name"]
    path.write_text(json.dumps(items))
    with pytest.raises(CatalogueError, match=re.escape(str(path)) + r": product #1: malformed"):
        _load(d)


def test_deeply_nested_catalogue_json_is_named(mini_dir, tmp_path):
    d = _copy(mini_dir, tmp_path)
    path = d / "items_human_ins.json"
    path.write_text(DEEP)
    # was: RecursionError
    with pytest.raises(CatalogueError, match=re.escape(str(path)) + ".*nested too deeply"):
        _load(d)


# ------------------------------------------------------------------------------- server


@pytest.fixture(scope="module")
def client(mini_dir):
    from agent_envs.webshop.server import create_app

    app = create_app(CatalogueSpec(source=str(mini_dir), verify=False), tagger="lexicon")
    return app.test_client()


@pytest.mark.parametrize("route", ["reset", "step"])
def test_deeply_nested_json_bodies_get_400(client, route):
    client.post("/api/deep/reset", json={"task": 0})
    # was: HTTP 500 (RecursionError is not a ValueError and escaped the parser)
    r = client.post(f"/api/deep/{route}", data=DEEP, content_type="application/json")
    assert r.status_code == 400, r.data[:300]
    assert "nested too deeply" in r.json["message"]
    r = client.post(f"/api/deep/{route}", data=b"\xff\xfe{", content_type="application/json")
    assert r.status_code == 400 and "not valid JSON" in r.json["message"]


@pytest.mark.parametrize("path", [
    "/item_page/deep/B000000001/shoes/1/{}",
    "/item_sub_page/deep/B000000001/shoes/1/Description/{}",
    "/done/deep/B000000001/{}",
])
def test_deeply_nested_options_segments_get_400(client, path):
    client.post("/api/deep/reset", json={"task": 0})
    nested = "[" * 1500 + "]" * 1500  # deeper than Python's recursion limit, shorter than a URL may be
    r = client.get(path.format(nested))
    assert r.status_code == 400, r.data[:300]  # was: 500
    assert b"nested too deeply" in r.data  # an HTML error page for the HTML routes


def test_server_reset_checks_kind_without_a_task(client):
    # was: an invalid kind was silently ignored when no task was given
    r = client.post("/api/k1/reset", json={"kind": "humane"})
    assert r.status_code == 400 and "kind must be 'human' or 'synthetic', got 'humane'" in r.json["message"]
    # a valid kind without a task draws a goal of that kind (seeded by the session id)
    r = client.post("/api/k1/reset", json={"kind": "synthetic"})
    assert r.status_code == 200 and r.json["goal"]["kind"] == "synthetic"
    r = client.post("/api/fixed_2/reset", json={"kind": "synthetic"})
    assert r.json["goal"] == {"index": 2, "kind": "synthetic", "instruction": r.json["goal"]["instruction"]}


def test_a_step_after_the_episode_ended_is_refused_and_pays_nothing() -> None:
    """Truncated at max_steps=1, a purchase later used to pay 10 and set won=True."""
    import gymnasium as gym

    env = gym.make("WebShop-Rubric-v0", max_steps=1)
    env.reset(seed=0, options={"task": 0})
    *_, truncated, _ = env.step("click[nothing here]")
    assert truncated
    with pytest.raises(RuntimeError, match="episode has ended"):
        env.step("click[buy now]")
    env.reset(seed=0, options={"task": 0})  # a new episode plays again
    env.step("search[anything]")
    env.close()


def test_a_step_after_close_asks_for_a_reset() -> None:
    """It used to fail inside the backend with a bare AssertionError ('start() first')."""
    import gymnasium as gym

    env = gym.make("WebShop-Rubric-v0")
    env.reset(seed=0, options={"task": 0})
    env.close()
    with pytest.raises(RuntimeError, match=r"call reset\(\) before step\(\)"):
        env.step("search[anything]")
    env.reset(seed=0, options={"task": 0})  # a closed embedded env can start again
    env.step("search[anything]")
    env.close()

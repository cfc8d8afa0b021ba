"""WebShop data: loader rules, sha256 verification, goals, splits, generator, CLI."""

from __future__ import annotations

import json
import random
from collections import Counter
from itertools import combinations

import pytest
from rapidfuzz import fuzz
from rapidfuzz.utils import default_process
from typer.testing import CliRunner

from agent_envs.webshop.catalogue import (
    PUBLISHED_SHA256,
    CatalogueError,
    CatalogueSpec,
    get_catalogue,
    load_raw_files,
    products_from_raw,
    verify_files,
)
from agent_envs.webshop.generator import generate_raw, write_raw
from agent_envs.webshop.goals import human_goals, price_ceiling, shuffle_goals, split_bounds
from agent_envs.webshop.testing import MINI_HUMAN, MINI_INS_V2, MINI_ITEMS, write_mini_catalogue
from agent_envs.webshop.vocab import PRODUCT_TYPES
from trainers.cli import app


def test_loader_follows_upstream_rules():
    items = [
        {"asin": "nan", "name": "x"},                       # dropped: asin 'nan'
        {"asin": "B0123456789X", "name": "x"},              # dropped: longer than 10
        {"asin": "B000000001", "name": "Shoe", "query": " Running Shoes ",
         "product_category": "A › B › C", "pricing": "$12.99 - $15.99",
         "full_description": "d", "small_description": "single bullet",
         "customization_options": {"Color": [{"value": " Black/White "}], "Size": None}},
        {"asin": "B000000001", "name": "duplicate"},        # dropped: duplicate asin
        {"asin": "B000000002", "name": "No price", "pricing": ""},
    ]
    prods = products_from_raw(items, {"B000000001": {"attributes": ["a b"]}}, seed=7)
    assert [p.asin for p in prods] == ["B000000001", "B000000002"]
    p, q = prods
    assert p.query == "running shoes"
    assert p.pricing == (12.99, 15.99) and p.price_tag == "$12.99 to $15.99"
    # the range price is the seeded uniform draw (first draw of Random(7))
    assert p.price == pytest.approx(random.Random(7).uniform(12.99, 15.99))
    assert p.options == {"color": ("black | white",)}      # None option dropped; '/' -> ' | '
    assert p.bullet_points == ("single bullet",)
    assert p.attributes == ("a b",)
    assert q.pricing == (100.0,) and q.price == 100.0 and q.price_tag == "$100.0"
    assert q.attributes == ("DUMMY_ATTR",)                  # not in items_ins_v2


def test_loader_names_malformed_product():
    with pytest.raises(CatalogueError, match=r"product #1"):
        products_from_raw([{"asin": "B1", "name": "a"}, {"asin": "B2"}], {}, source="f.json")
    with pytest.raises(CatalogueError, match="cannot parse price"):
        products_from_raw([{"asin": "B1", "name": "a", "pricing": "$abc"}], {})


def test_price_ceiling_rule():
    # price 975: bins above are 980, 990 -> both sampled -> ceiling 990
    assert price_ceiling(975.0, random.Random(0)) == (990.0, ", and price lower than 990.00 dollars")
    # price 985: only 990 above -> no clause, ceiling 1e6
    assert price_ceiling(985.0, random.Random(0)) == (1_000_000.0, "")
    # price 12: candidates 20, 30, 40, 50; the larger of two distinct samples is >= 30
    for s in range(20):
        u, clause = price_ceiling(12.0, random.Random(s))
        assert u in (30.0, 40.0, 50.0) and clause.endswith(f"{u:.2f} dollars")


def test_goal_shuffle_matches_upstream_global_seed():
    goals = human_goals(products_from_raw(MINI_ITEMS, MINI_INS_V2), MINI_HUMAN, random.Random(0))
    assert len(goals) == 1  # the entry without attributes is skipped
    many = [goals[0].__class__(**{**goals[0].__dict__, "asin": f"A{i}"}) for i in range(30)]
    expected = list(range(30))
    random.seed(233)
    random.shuffle(expected)  # what upstream does to its goal list
    assert [int(g.asin[1:]) for g in shuffle_goals(many)] == expected
    assert [g.index for g in shuffle_goals(many)] == list(range(30))


def test_split_bounds():
    assert split_bounds(12087) == {"test": (0, 500), "eval": (500, 1500), "train": (1500, 12087)}
    assert split_bounds(6000) == {"test": (0, 500), "eval": (500, 1500), "train": (1500, 6000)}
    # scaled below 6000: N/12 and N/4
    assert split_bounds(835) == {"test": (0, 70), "eval": (70, 209), "train": (209, 835)}


def test_synthetic_goals_of_mini_catalogue(tmp_path):
    cat = get_catalogue(CatalogueSpec(source=str(write_mini_catalogue(tmp_path)), verify=False))
    syn = cat.goal_list("synthetic")
    # 2 colours x 2 sizes of P1; option names sorted (color, size)
    assert sorted(g.instruction for g in syn) == sorted(
        f"Find me breathable mesh running shoes with color: {c}, and size: {s}, "
        "and price lower than 990.00 dollars" for c in ("black", "navy blue") for s in ("9", "10"))
    # weight = mean over attributes of 1/count: 'breathable mesh' is in all 4 goals -> 1/4
    assert [g.weight for g in syn] == [0.25] * 4

def test_generated_catalogue_properties():
    cat = get_catalogue(CatalogueSpec(num_products=1000, seed=0))
    assert len(cat.products) == 1000
    per_cat = Counter(p.category for p in cat.products)
    assert len(per_cat) == 5 and min(per_cat.values()) >= 50
    assert all(len(p.product_category.split(" › ")) >= 3 for p in cat.products)
    assert len({p.name for p in cat.products}) == 1000
    assert sum(1 for p in cat.products if p.options) > 800
    assert sum(1 for p in cat.products if len(p.pricing) == 2) > 100  # range prices
    human, syn = cat.goal_list("human"), cat.goal_list("synthetic")
    assert len(human) > 700 and len(syn) > 2000
    # near misses: most goal products share their query with >= 5 other products
    by_query = Counter(p.query for p in cat.products)
    assert all(by_query[g.query] >= 10 for g in human)


def test_generator_is_deterministic_and_seeded():
    a, b = generate_raw(200, seed=3), generate_raw(200, seed=3)
    assert json.dumps(a.items_shuffle) == json.dumps(b.items_shuffle)
    assert json.dumps(a.items_human_ins) == json.dumps(b.items_human_ins)
    assert generate_raw(200, seed=4).items_shuffle != a.items_shuffle


def test_attribute_pools_distinguish_near_misses():
    """No attribute in a type's pool fuzzy-matches another (else near misses could not lose
    attribute credit)."""
    for t in PRODUCT_TYPES:
        assert len(t.crumbs) >= 3, t.query
        for x, y in combinations(t.attributes, 2):
            assert fuzz.token_set_ratio(x, y, processor=default_process) <= 85, (t.query, x, y)


def test_written_files_load_like_in_memory(tmp_path):
    write_raw(generate_raw(150, seed=1), tmp_path)
    disk = get_catalogue(CatalogueSpec(source=str(tmp_path), verify=False))
    mem = get_catalogue(CatalogueSpec(num_products=150, seed=1))
    assert [p.name for p in disk.products] == [p.name for p in mem.products]
    assert [g.instruction for g in disk.goals] == [g.instruction for g in mem.goals]


def test_catalogue_is_shared_per_process():
    spec = CatalogueSpec(num_products=150, seed=1)
    assert get_catalogue(spec) is get_catalogue(CatalogueSpec(num_products=150, seed=1))


def test_sha256_of_the_real_attribute_file(shared_data):
    """Upstream's real items_ins_v2_1000.json matches its published hash (CI has the file in
    ../shared/data; a user has it after `rubricgym data webshop --from DIR`)."""
    from agent_envs.webshop.catalogue import default_data_dir

    candidates = [shared_data / "webshop" / "items_ins_v2_1000.json", default_data_dir() / "items_ins_v2_1000.json"]
    real = next((p for p in candidates if p.is_file()), None)
    if real is None:
        pytest.skip(
            "upstream's items_ins_v2_1000.json is not installed: put upstream WebShop's data files "
            "(items_ins_v2_1000.json among them) in a folder DIR and run "
            "`rubricgym data webshop --from DIR`"
        )
    assert verify_files([real]) == {real.name: PUBLISHED_SHA256[real.name]}


def test_sha256_verification(tmp_path):
    # a corrupt copy under an upstream name is rejected, naming the file
    bad = tmp_path / "items_shuffle_1000.json"
    bad.write_text("[]")
    with pytest.raises(CatalogueError, match="items_shuffle_1000.json: sha256 .* does not match"):
        verify_files([bad])
    # files without a published hash need verify=False
    write_mini_catalogue(tmp_path / "mini")
    with pytest.raises(CatalogueError, match="no published sha256"):
        load_raw_files(tmp_path / "mini")
    with pytest.raises(CatalogueError, match="no complete WebShop file set"):
        load_raw_files(tmp_path / "empty_dir_that_does_not_exist")


def test_corrupt_json_is_named(tmp_path):
    d = write_mini_catalogue(tmp_path)
    (d / "items_ins_v2.json").write_text("{not json")
    with pytest.raises(CatalogueError, match="items_ins_v2.json: not valid JSON"):
        load_raw_files(d, verify=False)


def test_cli_generate_and_install(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["data", "generate-webshop", "--out", str(tmp_path / "gen"), "--num-products", "60"])
    assert res.exit_code == 0, res.output
    assert len(json.loads((tmp_path / "gen" / "items_shuffle.json").read_text())) == 60
    # unverifiable files are refused unless --no-verify
    res = runner.invoke(app, ["data", "webshop", "--from", str(tmp_path / "gen"), "--dest", str(tmp_path / "inst")])
    assert res.exit_code == 1 and "no published sha256" in res.output
    res = runner.invoke(app, ["data", "webshop", "--from", str(tmp_path / "gen"), "--dest",
                              str(tmp_path / "inst"), "--no-verify"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "inst" / "items_human_ins.json").is_file()

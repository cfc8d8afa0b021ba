"""Channel schemas, dependency templates, frontiers [MCGPO Eq. 8] and signatures."""

from __future__ import annotations

import pytest

import rubrics
from rubrics import TemplateError, load_template, parse_template, signatures

ALF = "alfworld"
TASK_TYPES = list(rubrics.ALFWORLD_TASK_TYPES)


def syms(template, channels) -> str:
    return template.symbols(channels)


def test_schemas_match_tables_15_and_16() -> None:
    alf = rubrics.channel_schema("alfworld")
    assert [c.symbol for c in alf.values() if not c.diagnostic] == list("AHPLBGS")
    assert alf["target_acquired"].kind == "count" and alf["target_in_hand"].kind == "bool"
    web = rubrics.channel_schema("webshop")
    assert [c.symbol for c in web.values() if not c.diagnostic] == list("QOTAUPRBKS")
    assert web["purchase_readiness"].kind == "graded"
    with pytest.raises(ValueError, match="unknown environment 'minecraft'"):
        rubrics.channel_schema("minecraft")


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_every_alfworld_template_loads(task_type: str) -> None:
    t = load_template(ALF, task_type)
    assert task_type in t.task_types
    expected = {
        "pick": "AHLGS", "clean": "AHPLGS", "heat": "AHPLGS", "cool": "AHPLGS", "look": "AHBGS",
    }[rubrics.ALFWORLD_TASK_TYPES[task_type]]
    assert syms(t, t.vocabulary) == expected
    # the common edge E A->H is in every family
    assert rubrics.Edge("target_acquired", "target_in_hand", "requires_ever") in t.edges


def test_family_names_and_webshop_load() -> None:
    assert load_template(ALF, "clean") is load_template(ALF, "pick_clean_then_place_in_recep")
    w = load_template("webshop", "webshop")
    assert syms(w, w.vocabulary) == "QOTAUPRBKS"
    # Table 17: E Q->O; C O->{T,A,U,P}; C {T,A,U,P}->R; C R->B; C B->{K,S}: 1+4+4+1+2 = 12 edges
    assert len(w.edges) == 12
    with pytest.raises(ValueError, match="no template for 'alfworld' family 'juggle'"):
        load_template(ALF, "juggle")


def F(template, current: str, ever: str = "") -> str:
    """Frontier of symbol strings, as a symbol string."""
    by_sym = {c.symbol: c.name for c in rubrics.channel_schema(template.env).values()}
    cur = {by_sym[s] for s in current}
    return syms(template, template.frontier(cur, cur | {by_sym[s] for s in ever}))


def test_frontier_alfworld_clean_hand_worked() -> None:
    t = load_template(ALF, "pick_clean_then_place_in_recep")
    assert F(t, "") == "A"  # nothing active: only A has no prerequisites
    assert F(t, "AH") == "P"  # H active; P needs ever A (yes); L needs current P (no)
    # target put down before cleaning: A persists, H was active earlier -> H and P enabled
    assert F(t, "A", ever="AH") == "HP"
    # Eq. 8 tests C, not history, for membership: an inactive A is in F again
    assert F(t, "", ever="AH") == "AHP"
    assert F(t, "AHP") == "L"  # cleaned: L needs ever A and current P
    assert F(t, "APL") == "HG"  # placed: G needs current P and L; H still enabled by ever A
    assert F(t, "APLG") == "HS"


def test_frontier_pick_look_and_pick_two() -> None:
    pick = load_template(ALF, "pick_two_obj_and_place")
    assert F(pick, "") == "A"
    assert F(pick, "AH") == "L"
    assert F(pick, "AL") == "HG"
    look = load_template(ALF, "look_at_obj_in_light")
    assert F(look, "") == "AB"  # B (light) has no prerequisites in the look template
    assert F(look, "AH") == "B"
    assert F(look, "AHB") == "G"  # S needs G too
    assert F(look, "AHBG") == "S"


def test_frontier_webshop_hand_worked() -> None:
    w = load_template("webshop", "webshop")
    assert F(w, "") == "Q"
    assert F(w, "Q") == "O"
    assert F(w, "QO") == "TAUP"
    assert F(w, "QOTAUP") == "R"
    assert F(w, "QOTAP") == "U"  # R needs all of T, A, U, P currently
    assert F(w, "QOTAUPR") == "B"
    # back on the results page after having searched: O enabled by ever Q
    assert F(w, "", ever="Q") == "QO"


def test_blocking_edges() -> None:
    t = parse_template(
        {
            "env": "webshop",
            "family": "toy",
            "edges": [
                {"relation": "requires_ever", "from": "search_issued", "to": "product_opened"},
                {"relation": "blocks", "from": "purchased", "to": ["product_opened", "search_issued"]},
            ],
        }
    )
    names = lambda fs: sorted(fs)
    assert names(t.frontier(set(), set())) == ["search_issued"]  # blocking source never in F
    assert names(t.frontier({"search_issued"}, set())) == ["product_opened"]
    assert names(t.frontier({"search_issued", "purchased"}, set())) == []  # O blocked by B


def test_signature_sequence_over_scripted_history() -> None:
    t = load_template(ALF, "pick_clean_then_place_in_recep")
    zero = {c: 0 for c in rubrics.channel_schema(ALF)}
    history = [  # post-transition statuses of a clean episode
        dict(zero),  # go to countertop 1
        dict(zero, target_acquired=1, target_in_hand=True),  # take apple 1
        dict(zero, target_acquired=1, target_in_hand=True, target_processed=1, invalid_actions=3),
        dict(zero, target_acquired=1, target_processed=1, target_placed=1, goal_progress=3),
        dict(zero, target_acquired=1, target_processed=1, target_placed=1, goal_progress=3, solved=True),
    ]
    got = [s.symbols for s in signatures(t, history)]
    assert got == [
        ("", "A"),  # the first decision's status is empty
        ("", "A"),  # nothing changed after the first move
        ("AH", "P"),
        ("AHP", "L"),  # the diagnostic invalid_actions=3 is not in C
        ("APLG", "HS"),
        ("APLGS", "H"),
    ]


def test_active_set() -> None:
    status = {"a": True, "b": False, "c": 2, "d": 0, "e": 0.25, "f": float("nan"), "g": float("inf"),
              "h": -1.0, "invalid_actions": 4, "scorer_error": True, "s": "yes"}
    assert rubrics.active_set(status) == {"a", "c", "e"}
    assert rubrics.active_set(None) == frozenset()
    with pytest.raises(TypeError, match="rubric status must be a mapping"):
        rubrics.active_set([("a", True)])  # type: ignore[arg-type]


BASE = {"env": "webshop", "family": "x"}


@pytest.mark.parametrize(
    "edges, message",
    [
        ([{"relation": "requires_ever", "from": "search_issued", "to": "teleported"}], "unknown channel 'teleported'"),
        ([{"relation": "requires_sometimes", "from": "search_issued", "to": "solved"}], "unknown relation 'requires_sometimes'"),
        (
            [
                {"relation": "requires_current", "from": "search_issued", "to": "product_opened"},
                {"relation": "requires_ever", "from": "product_opened", "to": "purchased"},
                {"relation": "requires_current", "from": "purchased", "to": "search_issued"},
            ],
            "dependency cycle .*search_issued",
        ),
        ([{"relation": "requires_ever", "from": "solved", "to": "solved"}], "self-loop"),
        ([{"relation": "requires_ever", "from": "solved", "to": "scorer_error"}], "diagnostic"),
        ([{"relation": "requires_ever", "from": [], "to": "solved"}], "non-empty list"),
        ([{"relation": "requires_ever", "to": "solved"}], "missing 'from'"),
        ([{"relation": "requires_ever", "from": "solved", "to": "purchased", "why": 1}], "unknown keys"),
        ([], "non-empty array"),
    ],
)
def test_validation_errors(edges, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        parse_template({**BASE, "edges": edges}, source="bad.toml")


def test_validation_errors_name_env_and_source() -> None:
    with pytest.raises(TemplateError, match="bad.toml: unknown environment 'mars'"):
        parse_template({"env": "mars", "family": "x", "edges": [{}]}, source="bad.toml")
    with pytest.raises(TemplateError, match="missing required key 'edges'"):
        parse_template({"env": "webshop", "family": "x"}, source="bad.toml")

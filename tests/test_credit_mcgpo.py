"""MCGPO preference construction (SPEC §4.6, MCGPO §3, App. A, Table 6): hand-computed groups.

Conventions used by every group below: ``S(a, h, hc, sig)`` is a step with action key ``a``,
exact summary ``h``, coarse summary ``hc`` (default ``h``) and rubric signature ``sig``;
every trajectory opens with the shared step ``start`` (t = 0), so candidate rows (first
visits at t ≥ 1) are the later steps.  Folds: even slots = fold 0, odd slots = fold 1.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubrics.trajectory import Step, Trajectory
from wrappers.credit import CreditInputError, get_estimator
from wrappers.credit.graphgpo import graphgpo_credit
from wrappers.credit.mcgpo import MCGPO, context_keys, mcgpo_pairs, summarize_pairs

SIG0 = (frozenset(), frozenset({"A"}))  # opening signature: nothing active, A on the frontier
SIG1 = (frozenset({"A"}), frozenset({"H"}))
SIG2 = (frozenset({"A", "H"}), frozenset({"L"}))


def S(a: str, h: str, hc: str | None = None, sig: tuple = SIG1) -> Step:
    return Step(
        state_key=h,
        action=a,
        keys={"exact": h, "coarse": h if hc is None else hc, "signature": sig},
    )


def T(slot: int, steps: list[Step], win: bool) -> Trajectory:
    steps = [S("x", "start", sig=SIG0), *steps]
    if win:
        steps[-1].reward = 10.0
    return Trajectory("task", slot, steps, score=1.0 if win else 0.0, success=win)


def base_group() -> list[Trajectory]:
    """Eight siblings; at t = 1 key k is visited with a or b, key z with c.

    slot: action at t=1 (outcome)   0: k/a (W)  1: k/a (W)  2: k/b (L)  3: k/a (W)
                                    4: z/c (L)  5: k/b (L)  6: z/c (L)  7: k/b (W)
    """
    spec = {
        0: ("a", "k", True),
        1: ("a", "k", True),
        2: ("b", "k", False),
        3: ("a", "k", True),
        4: ("c", "z", False),
        5: ("b", "k", False),
        6: ("c", "z", False),
        7: ("b", "k", True),
    }
    return [T(s, [S(a, h)], win) for s, (a, h, win) in spec.items()]


def summary(pairs):
    return [
        (
            p.preferred,
            p.rejected,
            round(p.weight, 6),
            p.level,
            round(p.contrast, 6),
            p.support,
            p.fold,
        )
        for p in pairs
    ]


def test_base_group_hand_computed() -> None:
    pairs, stats = mcgpo_pairs(base_group())
    # Direction 0 (candidates 0,2,4,6): only (0,2) share k with different actions.
    #   evidence fold 1 at k: a -> slots 1 (W), 3 (W): p̂ = 1, n_a = 2;  b -> 5 (L), 7 (W): p̂ = 0.5, n_b = 2
    #   û = 1 − 0.5 = 0.5, n* = 2, c = 0.5 · 2/(2+2) · q_exact(1) = 0.25; slot 0 (action a) preferred.
    # Direction 1 (candidates 1,3,5,7): pairs (1,5), (1,7), (3,5), (3,7) (a vs b).
    #   evidence fold 0 at k: a -> slot 0 (W): 1;  b -> slot 2 (L): 0;  û = 1, n* = 1, c = 1 · 1/3 = 0.333333
    #   all tie on (max t = 1, c, min t = 1) -> slot order: (1,5) accepted; (1,7) and (3,5) reuse a
    #   row; (3,7) accepted; the quota of 2 is reached.
    assert summary(pairs) == [
        ((0, 1), (2, 1), 0.25, "exact", 0.5, 2, 0),
        ((1, 1), (5, 1), 0.333333, "exact", 1.0, 1, 1),
        ((3, 1), (7, 1), 0.333333, "exact", 1.0, 1, 1),
    ]
    # W/T/L on the candidates' own outcomes: 0(W) vs 2(L) = W; 1(W) vs 5(L) = W; 3(W) vs 7(W) = T
    assert (stats["wins"], stats["ties"], stats["losses"]) == (2, 1, 0)
    assert stats["agreement"] == pytest.approx((2 + 0.5) / 3)
    # coarse keys equal the exact ones here, so each level sees the same 1 + 4 candidate pairs
    assert stats["candidate_pairs_exact"] == stats["candidate_pairs_coarse"] == 1 + 4
    assert stats["supported_pairs"] == 5 and stats["qualified_pairs"] == 5
    assert (stats["pairs"], stats["pairs_exact"], stats["pairs_coarse"], stats["exact_share"]) == (
        3,
        3,
        0,
        1.0,
    )
    assert (stats["n_star_1"], stats["n_star_2"]) == (2, 1)
    assert stats["mean_contrast"] == pytest.approx((0.5 + 1 + 1) / 3)
    assert stats["mean_weight"] == pytest.approx((0.25 + 2 / 3) / 3)
    assert stats["missing_keys"] == 0


def test_at_most_two_disjoint_pairs_per_direction_and_max_pairs() -> None:
    for max_pairs, expected in ((0, 0), (1, 1), (2, 2), (3, 2)):
        pairs, _ = mcgpo_pairs(base_group(), max_pairs=max_pairs)
        d1 = [p for p in pairs if p.fold == 1]
        # 4 qualified candidate pairs in direction 1 but only 2 row-disjoint ones exist
        assert len(d1) == expected
        rows = [r for p in d1 for r in (p.preferred, p.rejected)]
        assert len(rows) == len(set(rows))


def test_opposite_fold_property_on_base_group() -> None:
    group = base_group()
    pairs, _ = mcgpo_pairs(group)
    # Change the outcomes of fold 0 (slots 0, 2, 4, 6): slot 0 loses, slot 2 wins.
    changed = base_group()
    for t, win in zip((changed[0], changed[2], changed[4], changed[6]), (False, True, True, True)):
        t.score = 1.0 if win else 0.0
    pairs2, _ = mcgpo_pairs(changed)
    # direction 0 reads only fold-1 evidence: unchanged
    assert [p for p in pairs2 if p.fold == 0] == [p for p in pairs if p.fold == 0]
    # direction 1 reads fold 0: now p̂(k,a) = 0 and p̂(k,b) = 1, so b (slots 5, 7) is preferred
    assert [(p.preferred, p.rejected) for p in pairs2 if p.fold == 1] == [
        ((5, 1), (1, 1)),
        ((7, 1), (3, 1)),
    ]


def test_same_fold_evidence_ablation() -> None:
    group = base_group()
    pairs, _ = mcgpo_pairs(group, evidence="same")
    # Direction 0, evidence = fold 0 itself (b = 0): k/a -> slot 0 (W) = 1, k/b -> slot 2 (L) = 0
    #   û = 1, n* = 1, c = 1/3 (opposite fold gave 0.25).
    # Direction 1, evidence = fold 1: k/a -> 1 (W), 3 (W) = 1; k/b -> 5 (L), 7 (W) = 0.5; û = 0.5, n* = 2,
    #   c = 0.5 · 2/4 = 0.25; accepted (1,5) then (3,7).
    assert summary(pairs) == [
        ((0, 1), (2, 1), 0.333333, "exact", 1.0, 1, 0),
        ((1, 1), (5, 1), 0.25, "exact", 0.5, 2, 1),
        ((3, 1), (7, 1), 0.25, "exact", 0.5, 2, 1),
    ]
    # ... and the fold property no longer holds: flipping slot 0 / slot 2 flips direction 0
    changed = base_group()
    changed[0].score, changed[2].score = 0.0, 1.0
    assert [
        (p.preferred, p.rejected) for p in mcgpo_pairs(changed, evidence="same")[0] if p.fold == 0
    ] == [((2, 1), (0, 1))]


def test_epsilon_filter() -> None:
    # direction 0 has |û| = 0.5, direction 1 has |û| = 1
    assert {p.fold for p in mcgpo_pairs(base_group(), epsilon=0.5)[0]} == {0, 1}  # 0.5 >= 0.5 kept
    pairs, stats = mcgpo_pairs(base_group(), epsilon=0.6)
    assert {p.fold for p in pairs} == {1}  # 0.5 < 0.6 dropped
    assert stats["supported_pairs"] == 5 and stats["qualified_pairs"] == 4
    assert mcgpo_pairs(base_group(), epsilon=1.01)[0] == []


def test_weight_formula_kappa_and_q() -> None:
    # c = |û| · n*/(n* + κ) · q_exact: direction 0 (û = 0.5, n* = 2), direction 1 (û = 1, n* = 1)
    pairs, _ = mcgpo_pairs(base_group(), kappa=1.0, q_exact=0.5)
    assert [round(p.weight, 6) for p in pairs] == [
        round(0.5 * 2 / 3 * 0.5, 6),  # 0.166667
        round(1.0 * 1 / 2 * 0.5, 6),  # 0.25
        round(1.0 * 1 / 2 * 0.5, 6),
    ]
    pairs, _ = mcgpo_pairs(base_group(), kappa=0.0)
    assert [p.weight for p in pairs] == [0.5, 1.0, 1.0]  # n*/n* = 1


def test_min_support_gate() -> None:
    # m = 2: direction 1 (n* = 1) is unsupported; direction 0 (n* = 2) survives
    pairs, stats = mcgpo_pairs(base_group(), min_support=2)
    assert [p.fold for p in pairs] == [0] and stats["supported_pairs"] == 1


def gate_group(case: str) -> list[Trajectory]:
    """Fold 0 candidates (slots 0, 2) compare a vs b at t = 1; fold 1 supplies evidence."""
    if case == "exact":  # evidence at the same exact key e1
        return [
            T(0, [S("a", "e1", "c1")], False),
            T(1, [S("a", "e1", "c1")], True),
            T(2, [S("b", "e1", "c1")], False),
            T(3, [S("b", "e1", "c1")], False),
        ]
    if case == "fallback":  # evidence only at the coarse key (exact e9 differs)
        return [
            T(0, [S("a", "e1", "c1")], False),
            T(1, [S("a", "e9", "c1")], True),
            T(2, [S("b", "e1", "c1")], False),
            T(3, [S("b", "e9", "c1")], False),
        ]
    if case == "coarse_only":  # the candidates' exact keys differ, only coarse matches
        return [
            T(0, [S("a", "e1", "c1")], False),
            T(1, [S("a", "e9", "c1")], True),
            T(2, [S("b", "e2", "c1")], False),
            T(3, [S("b", "e9", "c1")], False),
        ]
    if case == "retained":  # exact supported with û = 0; coarse alone would give û = 0.5
        return [
            T(0, [S("a", "e1", "c1")], False),
            T(1, [S("a", "e1", "c1")], True),
            T(2, [S("b", "e1", "c1")], False),
            T(3, [S("b", "e1", "c1")], True),
            T(4, [S("c", "e4", "c4")], False),
            T(5, [S("b", "e7", "c1")], False),
        ]
    raise ValueError(case)


def test_support_gate_exact_before_coarse() -> None:
    # exact: n* = min(1, 1) = 1 at e1; û = 1 − 0; c = 1 · 1/3 · 1
    d0 = [p for p in mcgpo_pairs(gate_group("exact"))[0] if p.fold == 0]
    assert summary(d0) == [((0, 1), (2, 1), 0.333333, "exact", 1.0, 1, 0)]
    # exact pair exists but has no evidence (n* = 0) -> coarse c1: c = 1 · 1/3 · 0.7 = 0.233333
    d0 = [p for p in mcgpo_pairs(gate_group("fallback"))[0] if p.fold == 0]
    assert summary(d0) == [((0, 1), (2, 1), 0.233333, "coarse", 1.0, 1, 0)]
    # no exact pair at all (e1 vs e2) -> coarse
    d0 = [p for p in mcgpo_pairs(gate_group("coarse_only"))[0] if p.fold == 0]
    assert summary(d0) == [((0, 1), (2, 1), 0.233333, "coarse", 1.0, 1, 0)]
    # q_coarse is a parameter: c = 1/3 · 0.5
    d0 = [p for p in mcgpo_pairs(gate_group("coarse_only"), q_coarse=0.5)[0] if p.fold == 0]
    assert round(d0[0].weight, 6) == round(1 / 3 * 0.5, 6)


def test_supported_exact_level_is_kept_when_contrast_fails() -> None:
    # exact e1: a -> slot 1 (W) = 1, b -> slot 3 (W) = 1: û = 0 (supported, n* = 1) -> dropped.
    # coarse c1 would give a -> 1 (W) = 1, b -> 3 (W), 5 (L) = 0.5: û = 0.5, but is never tried.
    pairs, _ = mcgpo_pairs(gate_group("retained"))
    assert [p for p in pairs if p.fold == 0] == []
    # the control: if the exact level were unsupported the coarse pair would exist
    group = gate_group("retained")
    group[3].steps[1].keys["exact"] = "e8"  # b's exact evidence moves away
    d0 = [p for p in mcgpo_pairs(group)[0] if p.fold == 0]
    # coarse: a -> slot 1 (W) = 1; b -> slots 3 (W), 5 (L) = 0.5; û = 0.5, n* = 1, c = 0.5/3 · 0.7
    assert summary(d0) == [((0, 1), (2, 1), round(0.5 / 3 * 0.7, 6), "coarse", 0.5, 1, 0)]


def two_key_group(earliest: bool) -> list[Trajectory]:
    """Slots 0 and 2 meet twice: at coarse key k1 (a vs b) and exact key k2 (c vs d).

    earliest=True: both k1 rows at t = 1, both k2 rows at t = 2.
    earliest=False: k1 rows at (0, t=1), (2, t=2); k2 rows at (0, t=2), (2, t=1) — a tie on
    max(t) = 2 and min(t) = 1.
    Evidence: slot 1 (W) takes a at k1 and c at k2; slot 3 (L) takes b at k1 and d at k2.
    """
    k1a, k1b = S("a", "e1a", "k1"), S("b", "e1b", "k1")
    k2c, k2d = S("c", "k2", "k2c"), S("d", "k2", "k2c")
    if earliest:
        s0, s2 = [k1a, k2c], [k1b, k2d]
    else:
        s0, s2 = [k1a, k2c], [k2d, k1b]
    return [
        T(0, s0, False),
        T(1, [S("a", "e1x", "k1"), S("c", "k2", "k2c")], True),
        T(2, s2, False),
        T(3, [S("b", "e1y", "k1"), S("d", "k2", "k2c")], False),
    ]


def test_earliest_comparison_per_sibling_pair() -> None:
    # k1 (coarse): û = 1, n* = 1, c = 0.7/3 = 0.233333 at max t = 1
    # k2 (exact):  û = 1, n* = 1, c = 1/3 at max t = 2 — larger weight, but later: dropped
    # (it uses other rows, so only the one-per-sibling-pair rule removes it)
    d0 = [p for p in mcgpo_pairs(two_key_group(True))[0] if p.fold == 0]
    assert summary(d0) == [((0, 1), (2, 1), 0.233333, "coarse", 1.0, 1, 0)]


def test_time_tie_broken_by_larger_weight() -> None:
    # both comparisons have max t = 2, min t = 1 -> the larger c (exact k2, 1/3) wins
    d0 = [p for p in mcgpo_pairs(two_key_group(False))[0] if p.fold == 0]
    assert summary(d0) == [((0, 2), (2, 1), 0.333333, "exact", 1.0, 1, 0)]


def test_earliest_per_sibling_pair_comes_before_the_disjoint_allocator() -> None:
    # Fold 0 = slots 0, 2, 4.  Key K1 at t=1: slot 0 a, slot 2 b, slot 4 a.  Key K2 at t=2:
    # slot 2 c, slot 4 d.  Evidence (fold 1): slot 1 takes a then c (W), slot 3 b then d (L).
    # Comparisons: (0,2)@K1 û=1 max t 1; (2,4)@K1 û=-1 max t 1; (2,4)@K2 û=1 max t 2.
    # EarliestQualified keeps (0,2)@K1 and (2,4)@K1 (dropping (2,4)@K2); Disjoint then accepts
    # (0,2)@K1 (lower slots first) and rejects (2,4)@K1 because row (2,1) is taken -> 1 pair.
    group = [
        T(0, [S("a", "K1"), S("y", "Y")], False),
        T(1, [S("a", "K1"), S("c", "K2")], True),
        T(2, [S("b", "K1"), S("c", "K2")], False),
        T(3, [S("b", "K1"), S("d", "K2")], False),
        T(4, [S("a", "K1"), S("d", "K2")], False),
        T(5, [S("z", "Z")], False),
    ]
    d0 = [p for p in mcgpo_pairs(group)[0] if p.fold == 0]
    assert summary(d0) == [((0, 1), (2, 1), 0.333333, "exact", 1.0, 1, 0)]


def test_candidates_use_first_visit_after_t0_and_evidence_from_t0() -> None:
    # slot 0 visits key "start" at t=0 and again at t=2 (action a); slot 2 at t=1 (action b).
    # Candidate first visits (b = 1): (0, 2) and (2, 1).  Evidence (b = 0): slots 1 and 3 both
    # visit "start" first at t = 0 with action x, so (start, a) and (start, b) have no support...
    group = [
        T(0, [S("y", "m"), S("a", "start", sig=SIG0)], False),
        T(1, [S("a", "start", sig=SIG0)], True),
        T(2, [S("b", "start", sig=SIG0)], False),
        T(3, [S("b", "start", sig=SIG0)], False),
    ]
    pairs, stats = mcgpo_pairs(group)
    assert [p for p in pairs if p.fold == 0] == [] and stats["candidate_pairs_exact"] >= 1
    # ...while a first visit at t = 0 with action a supports the comparison (t=0 counts for evidence)
    group[1].steps[0].action_key = "a"
    group[3].steps[0].action_key = "b"
    d0 = [p for p in mcgpo_pairs(group)[0] if p.fold == 0]
    assert summary(d0) == [((0, 2), (2, 1), 0.333333, "exact", 1.0, 1, 0)]


def test_uniform_weighting_preserves_direction_total() -> None:
    # Direction 0: (0,2) at exact k: c = 1/3; (4,6) at coarse z (exact z1 != z2): c = 0.7/3.
    group = [
        T(0, [S("a", "k")], False),
        T(1, [S("a", "k")], True),
        T(2, [S("b", "k")], False),
        T(3, [S("b", "k")], False),
        T(4, [S("c", "z1", "z")], False),
        T(5, [S("c", "z9", "z")], True),
        T(6, [S("d", "z2", "z")], False),
        T(7, [S("d", "z9", "z")], False),
    ]
    ev = [p for p in mcgpo_pairs(group)[0] if p.fold == 0]
    assert [round(p.weight, 6) for p in ev] == [0.333333, 0.233333]
    un = [p for p in mcgpo_pairs(group, weighting="uniform")[0] if p.fold == 0]
    # equal weights (1/3 + 0.7/3)/2 = 0.283333, same pairs, same total
    assert [round(p.weight, 6) for p in un] == [0.283333, 0.283333]
    assert [(p.preferred, p.rejected, p.level) for p in un] == [
        (p.preferred, p.rejected, p.level) for p in ev
    ]
    assert sum(p.weight for p in un) == pytest.approx(sum(p.weight for p in ev))


def test_state_only_keys_merge_progress_stages() -> None:
    # Same state summary k, different signatures: joint keys keep them apart, state-only merges.
    group = [
        T(0, [S("a", "k", sig=SIG1)], False),
        T(1, [S("a", "k", sig=SIG1)], True),
        T(2, [S("b", "k", sig=SIG2)], False),
        T(3, [S("b", "k", sig=SIG2)], False),
    ]
    assert [p for p in mcgpo_pairs(group)[0] if p.fold == 0] == []
    d0 = [p for p in mcgpo_pairs(group, keys="state")[0] if p.fold == 0]
    assert summary(d0) == [((0, 1), (2, 1), 0.333333, "exact", 1.0, 1, 0)]
    # the state-only mode does not need signatures at all
    for t in group:
        for s in t.steps:
            del s.keys["signature"]
    assert len([p for p in mcgpo_pairs(group, keys="state")[0] if p.fold == 0]) == 1
    assert mcgpo_pairs(group)[1]["missing_keys"] == 1


def test_rubric_only_keys_merge_situations() -> None:
    # Different state summaries, same signature: only rubric-only keys match them.
    group = [
        T(0, [S("a", "k1")], False),
        T(1, [S("a", "k9")], True),
        T(2, [S("b", "k2")], False),
        T(3, [S("b", "k8")], False),
    ]
    assert [p for p in mcgpo_pairs(group)[0] if p.fold == 0] == []
    d0 = [p for p in mcgpo_pairs(group, keys="rubric")[0] if p.fold == 0]
    # g = (C, F) = SIG1 at both levels; the exact level decides: c = 1/3 · q_exact
    assert summary(d0) == [((0, 1), (2, 1), 0.333333, "exact", 1.0, 1, 0)]
    # rubric-only needs no state summaries
    for t in group:
        for s in t.steps:
            del s.keys["exact"], s.keys["coarse"]
    assert len([p for p in mcgpo_pairs(group, keys="rubric")[0] if p.fold == 0]) == 1


def test_shuffle_rubric_permutes_signatures() -> None:
    group = base_group()
    for traj in group:  # give rows distinct signatures
        for t, s in enumerate(traj.steps):
            s.keys["signature"] = (frozenset({f"s{traj.slot}"}), frozenset({str(t)}))
    plain = context_keys(group, "joint")
    shuffled = context_keys(group, "joint", shuffle_rubric=True, shuffle_seed=0)
    for lv in ("exact", "coarse"):
        flat_p = [g for per in plain[lv] for g in per]
        flat_s = [g for per in shuffled[lv] for g in per]
        # state parts stay in place; the (C, F) parts are a permutation of the originals
        assert [g[0] for g in flat_s] == [g[0] for g in flat_p]
        assert sorted(map(repr, (g[1:] for g in flat_s))) == sorted(
            map(repr, (g[1:] for g in flat_p))
        )
    # deterministic for a seed, different across seeds
    assert context_keys(group, "joint", shuffle_rubric=True, shuffle_seed=0) == shuffled
    assert any(
        context_keys(group, "joint", shuffle_rubric=True, shuffle_seed=s) != shuffled
        for s in range(1, 6)
    )
    assert any(
        context_keys(group, "joint", shuffle_rubric=True, shuffle_seed=s) != plain for s in range(6)
    )
    # with one common signature a shuffle changes nothing
    same = base_group()
    for traj in same:
        for s in traj.steps:
            s.keys["signature"] = SIG1
    assert mcgpo_pairs(same, shuffle_rubric=True) == mcgpo_pairs(same)
    with pytest.raises(ValueError, match="shuffle_rubric"):
        MCGPO(keys="state", shuffle_rubric=True)


def test_folds_follow_slots_not_list_order() -> None:
    group = base_group()
    order = [5, 2, 7, 0, 3, 6, 1, 4]
    shuffled = [group[k] for k in order]
    pairs, _ = mcgpo_pairs(group)
    pairs2, _ = mcgpo_pairs(shuffled)
    slot_of = [t.slot for t in shuffled]
    as_slots = [
        (
            (slot_of[p.preferred[0]], p.preferred[1]),
            (slot_of[p.rejected[0]], p.rejected[1]),
            p.weight,
            p.fold,
        )
        for p in pairs2
    ]
    assert as_slots == [(p.preferred, p.rejected, p.weight, p.fold) for p in pairs]


def test_missing_keys_keep_task_credit_and_get_no_pairs() -> None:
    group = base_group()
    del group[3].steps[1].keys["signature"]
    est = get_estimator("mcgpo")
    res = est([group, base_group()])
    assert res[0].pairs == [] and res[0].stats["missing_keys"] == 1
    assert len(res[1].pairs) == 3 and res[1].stats["missing_keys"] == 0
    task = graphgpo_credit(group)
    for a, b in zip(res[0].advantages, task.advantages):
        np.testing.assert_array_equal(a, b)
    s = summarize_pairs(res)
    assert (s["groups"], s["groups_missing_keys"], s["groups_with_pairs"], s["pairs"]) == (
        2,
        1,
        1,
        3,
    )
    # a None value counts as missing too
    group = base_group()
    group[0].steps[0].keys["coarse"] = None
    assert mcgpo_pairs(group)[1]["missing_keys"] == 1


def test_estimator_advantages_are_graphgpo_task_credit() -> None:
    groups = [base_group(), gate_group("exact")]
    for gamma in (0.1, 0.2):
        res = get_estimator("mcgpo", gamma=gamma, norm="mean")(groups)
        for r, g in zip(res, groups):
            task = graphgpo_credit(g, gamma=gamma, norm="mean")
            for a, b in zip(r.advantages, task.advantages):
                np.testing.assert_array_equal(a, b)
            assert r.stats["nodes"] == task.stats["nodes"]
    # Preferences are independent of the task-credit parameters
    a = get_estimator("mcgpo", gamma=0.2)(groups)
    b = get_estimator("mcgpo")(groups)
    assert [r.pairs for r in a] == [r.pairs for r in b]


def test_summarize_pairs_batch() -> None:
    res = get_estimator("mcgpo")([base_group(), base_group()])
    s = summarize_pairs(res)
    # two copies of the base group: 6 pairs, all exact, n* = 1 four times and 2 twice
    assert (s["pairs"], s["pairs_exact"], s["exact_share"], s["n_star_1"], s["n_star_2"]) == (
        6,
        6,
        1.0,
        4,
        2,
    )
    assert (s["wins"], s["ties"], s["losses"]) == (4, 2, 0)
    assert s["agreement"] == pytest.approx((4 + 1) / 6)
    assert s["mean_weight"] == pytest.approx((0.25 + 2 / 3) / 3)


def test_bad_keys_and_parameters_are_named() -> None:
    group = base_group()
    group[2].steps[1].keys["exact"] = ["not", "hashable"]
    with pytest.raises(CreditInputError, match="group 1, trajectory 2, step 1"):
        get_estimator("mcgpo")([base_group(), group])
    group = base_group()
    group[1].steps[0].keys["signature"] = "CF"
    with pytest.raises(
        CreditInputError, match=r"trajectory 1, step 0: keys\['signature'\] must be a \(C, F\) pair"
    ):
        get_estimator("mcgpo")([group])
    # a set-valued C is frozen, not rejected
    group = base_group()
    group[0].steps[0].keys["signature"] = ({"A"}, set())
    assert get_estimator("mcgpo")([group])[0].stats["missing_keys"] == 0
    for bad in (
        {"evidence": "other"},
        {"weighting": "x"},
        {"keys": "both"},
        {"min_support": 0},
        {"max_pairs": -1},
        {"epsilon": -0.1},
        {"kappa": float("nan")},
        {"gamma": 0.0},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            get_estimator("mcgpo", **bad)


# --- properties over random groups ---------------------------------------------------------
@st.composite
def random_groups(draw):
    n = draw(st.sampled_from([2, 4, 6, 8]))
    group = []
    for slot in range(n):
        length = draw(st.integers(1, 5))
        steps = []
        for _ in range(length):
            h = draw(st.sampled_from(["p", "q", "r"]))
            steps.append(
                Step(
                    state_key=h,
                    action="go",
                    action_key=draw(st.sampled_from(["a", "b", "c"])),
                    keys={
                        "exact": h,
                        "coarse": draw(st.sampled_from(["P", "Q"])),
                        "signature": draw(st.sampled_from([SIG0, SIG1, SIG2])),
                    },
                )
            )
        win = draw(st.booleans())
        group.append(Trajectory("task", slot, steps, score=1.0 if win else 0.0, success=win))
    return group


@settings(max_examples=60, deadline=None)
@given(random_groups(), st.data())
def test_property_opposite_fold(group, data) -> None:
    c = data.draw(st.sampled_from([0, 1]))
    pairs, _ = mcgpo_pairs(group)
    for t in group:
        if t.slot % 2 == c:
            t.score = data.draw(st.sampled_from([0.0, 1.0]))
    pairs2, _ = mcgpo_pairs(group)
    assert [p for p in pairs2 if p.fold == c] == [p for p in pairs if p.fold == c]


@settings(max_examples=60, deadline=None)
@given(random_groups())
def test_property_invariants(group) -> None:
    pairs, stats = mcgpo_pairs(group)
    assert pairs == mcgpo_pairs(group)[0]  # deterministic
    for c in (0, 1):
        d = [p for p in pairs if p.fold == c]
        assert len(d) <= 2
        rows = [r for p in d for r in (p.preferred, p.rejected)]
        assert len(rows) == len(set(rows))  # each row used once
        sibs = [frozenset((p.preferred[0], p.rejected[0])) for p in d]
        assert len(sibs) == len(set(sibs))  # one per sibling pair
    for p in pairs:
        i, t = p.preferred
        j, u = p.rejected
        assert group[i].slot % 2 == group[j].slot % 2 == p.fold and i != j and t >= 1 and u >= 1
        assert group[i].steps[t].action_key != group[j].steps[u].action_key
        q = 1.0 if p.level == "exact" else 0.7
        assert p.contrast >= 0.1 and p.support >= 1
        assert p.weight == pytest.approx(p.contrast * p.support / (p.support + 2) * q)
    assert stats["pairs"] == len(pairs) and stats["wins"] + stats["ties"] + stats["losses"] == len(
        pairs
    )


def test_preference_stats_plot(tmp_path) -> None:
    from wrappers.credit.plots import plot_preference_stats

    res = get_estimator("mcgpo")([base_group()])
    empty = {"pairs": 0, "pairs_exact": 0, "wins": 0, "ties": 0, "losses": 0}
    a, b, c, d = plot_preference_stats([res, empty])
    # (a) update 1: 3 exact + 0 coarse pairs; update 2: none
    assert [r.get_height() for r in a.containers[0]] == [3.0, 0.0]
    assert [r.get_height() for r in a.containers[1]] == [0.0, 0.0]
    # (b) agreement (2 + 1/2)/3, tie share 1/3; undefined without pairs
    y = b.lines[0].get_ydata()
    assert y[0] == pytest.approx(2.5 / 3) and np.isnan(y[1])
    assert b.lines[1].get_ydata()[0] == pytest.approx(1 / 3)
    # (c) mean |û| = 2.5/3, mean c = (0.25 + 2/3)/3;  (d) n* shares 2/3 (n*=1), 1/3 (n*=2)
    assert c.lines[0].get_ydata()[0] == pytest.approx(2.5 / 3)
    assert c.lines[1].get_ydata()[0] == pytest.approx((0.25 + 2 / 3) / 3)
    assert [round(r.get_height(), 6) for r in d.containers[0]] == [round(2 / 3, 6), 0.0]
    # a window of 2 pools both updates into one point: 1.5 exact pairs per update
    a2 = plot_preference_stats([res, empty], window=2)[0]
    assert [r.get_height() for r in a2.containers[0]] == [1.5]
    a.figure.savefig(tmp_path / "prefs.png")
    assert (tmp_path / "prefs.png").stat().st_size > 1000


def test_comparisons_inspection_view() -> None:
    from wrappers.credit.mcgpo import comparisons

    comps = comparisons(base_group())
    # 1 supported comparison in direction 0 and 4 in direction 1 (see test_base_group_hand_computed)
    assert [(c.fold, c.rows, c.actions, c.contrast, c.support) for c in comps if c.fold == 0] == [
        (0, ((0, 1), (2, 1)), ("a", "b"), 0.5, 2)
    ]
    assert sorted(c.rows for c in comps if c.fold == 1) == [
        ((1, 1), (5, 1)),
        ((1, 1), (7, 1)),
        ((3, 1), (5, 1)),
        ((3, 1), (7, 1)),
    ]
    assert all(c.qualified and c.level == "exact" and c.key == ("k", *SIG1) for c in comps)

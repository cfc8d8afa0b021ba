"""SCPO (SPEC §4.5, SCPO §3, App. B): the monotonic KMP matcher and the GiGPO integration."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubrics.trajectory import Step, Trajectory
from wrappers.credit import get_estimator
from wrappers.credit.gigpo import GiGPO
from wrappers.credit.scorers import LexicalScorer, PairScorer
from wrappers.credit.scpo import (
    SCPO,
    failure_table,
    kept_steps,
    length_balanced_order,
    monotonic_credit,
    monotonic_match,
    step_text,
)

THETA, LAM = 0.6, 0.4


def soft(x: float) -> float:
    """r = max(0, (M − λ)/(1 − λ)) with λ = 0.4."""
    return max(0.0, (x - LAM) / (1 - LAM))


def char_self(ref: str) -> np.ndarray:
    """M* of a reference spelled as characters: 1 where two positions hold the same letter."""
    return np.array([[1.0 if a == b else 0.0 for b in ref] for a in ref])


def char_M(ref: str, failed: str, strength: Sequence[float]) -> np.ndarray:
    """M[u, v] = strength[v] when ref[u] == failed[v], else 0.1."""
    return np.array(
        [
            [strength[v] if ref[u] == failed[v] else 0.1 for v in range(len(failed))]
            for u in range(len(ref))
        ]
    )


# --- the failure table ---------------------------------------------------------------------
def test_failure_table_is_the_classical_prefix_function() -> None:
    # CLRS Fig. 32.11: P = ababaca -> π = 0 0 1 2 3 0 1
    assert failure_table(char_self("ababaca"), THETA).tolist() == [0, 0, 1, 2, 3, 0, 1]
    # aabaaab -> 0 1 0 1 2 2 3
    assert failure_table(char_self("aabaaab"), THETA).tolist() == [0, 1, 0, 1, 2, 2, 3]
    assert failure_table(np.zeros((0, 0)), THETA).tolist() == []
    # equality is M*[k, q] >= θ: 0.6 counts, 0.59 does not
    s = np.array([[1.0, 0.6], [0.6, 1.0]])
    assert failure_table(s, 0.6).tolist() == [0, 1]
    assert failure_table(s, 0.61).tolist() == [0, 0]


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="abc", min_size=1, max_size=12))
def test_failure_table_matches_brute_force_borders(ref: str) -> None:
    # with a transitive equality, fail[q] = longest proper border of ref[:q+1]
    brute = [
        max(k for k in range(q + 1) if ref[:k] == ref[q + 1 - k : q + 1]) for q in range(len(ref))
    ]
    assert failure_table(char_self(ref), THETA).tolist() == brute


# --- the matcher on hand-worked matrices -------------------------------------------------
REF, FAILED = "abac", "ababac"
STRENGTH = [0.7, 1.0, 0.9, 0.8, 0.9, 0.64]


def test_matcher_chronological_with_kmp_backtrack() -> None:
    M, S = char_M(REF, FAILED, STRENGTH), char_self(REF)
    # fail(abac) = [0, 0, 1, 0], next = fail − 1 = [-1, -1, 0, -1]
    # v0 a: M[0,0] = .7 >= θ -> j=0 > j_max: r = (.7−.4)/.6 = 0.5
    # v1 b: M[1,1] = 1  -> j=1: r = 1
    # v2 a: M[2,2] = .9 -> j=2: r = (.9−.4)/.6 = 0.8333
    # v3 b: M[3,3] = .1 < θ -> j = next(2) = 0; M[1,3] = .8 >= θ -> j = 1 (1 <= j_max = 2: no credit)
    # v4 a: M[2,4] = .9 -> j = 2 (no credit)
    # v5 c: M[3,5] = .64 -> j = 3 > 2: r = (.64−.4)/.6 = 0.4; j = m−1: stop
    credit, pos = monotonic_match(M, S, THETA, LAM, [0, 1, 2, 3, 4, 5])
    np.testing.assert_allclose(credit, [0.5, 1.0, soft(0.9), 0, 0, 0.4])
    assert pos.tolist() == [0, 1, 2, -1, -1, 3]
    # Without the KMP table (reset to j = −1 on a mismatch) v5 could not reach position 3:
    # v3 -> j=-1, v4 a -> j=0, v5 c: M[1,5] < θ, M[0,5] < θ.  The table is what credits v5.
    no_border = np.eye(len(REF))
    credit_nb = monotonic_credit(M, no_border, THETA, LAM, [0, 1, 2, 3, 4, 5])
    np.testing.assert_allclose(credit_nb, [0.5, 1.0, soft(0.9), 0, 0, 0])


def test_matcher_reversed_order() -> None:
    M, S = char_M(REF, FAILED, STRENGTH), char_self(REF)
    # π = 5 4 3 2 1 0
    # v5 c: M[0,5] < θ (j stays −1)        v4 a: M[0,4] = .9 -> j=0: r = 0.8333
    # v3 b: M[1,3] = .8 -> j=1: r = 0.6667  v2 a: M[2,2] = .9 -> j=2: r = 0.8333
    # v1 b: M[3,1] < θ -> j = next(2) = 0; M[1,1] = 1 -> j = 1 (no credit)
    # v0 a: M[2,0] = .7 -> j = 2 (no credit)
    credit, pos = monotonic_match(M, S, THETA, LAM, [5, 4, 3, 2, 1, 0])
    np.testing.assert_allclose(credit, [0, 0, soft(0.9), soft(0.8), soft(0.9), 0])
    assert pos.tolist() == [-1, -1, 2, 1, 0, -1]


def test_matcher_repeats_earn_nothing_and_soft_base() -> None:
    # reference "ab", failed "aaaa b": the repeated a's cannot re-claim position 0
    M = char_M("ab", "aaaab", [0.9] * 5)
    credit = monotonic_credit(M, char_self("ab"), THETA, LAM, range(5))
    np.testing.assert_allclose(credit, [soft(0.9), 0, 0, 0, soft(0.9)])
    # θ below λ: a match of 0.35 >= θ = 0.3 claims the position with credit max(0, −0.05/0.6) = 0
    M = np.array([[0.35]])
    c, p = monotonic_match(M, np.ones((1, 1)), 0.3, LAM, [0])
    assert c.tolist() == [0.0] and p.tolist() == [0]
    # soft_base 0: credit = M
    assert monotonic_credit(np.array([[0.75]]), np.ones((1, 1)), THETA, 0.0, [0]).tolist() == [0.75]


def test_matcher_stops_when_reference_is_complete() -> None:
    # reference "ab" is fully claimed by v0, v1; later perfect matches earn nothing
    M = char_M("ab", "abab", [1.0] * 4)
    np.testing.assert_allclose(
        monotonic_credit(M, char_self("ab"), THETA, LAM, range(4)), [1, 1, 0, 0]
    )


def test_matcher_input_errors() -> None:
    M = np.ones((2, 3))
    with pytest.raises(ValueError, match="permutation"):
        monotonic_credit(M, np.ones((2, 2)), THETA, LAM, [0, 1, 1])
    with pytest.raises(ValueError, match="permutation"):
        monotonic_credit(M, np.ones((2, 2)), THETA, LAM, [0, 1])
    with pytest.raises(ValueError, match="M_self must have shape"):
        monotonic_credit(M, np.ones((3, 3)), THETA, LAM, [0, 1, 2])
    with pytest.raises(ValueError, match="soft_base"):
        monotonic_credit(M, np.ones((2, 2)), THETA, 1.0, [0, 1, 2])
    with pytest.raises(ValueError, match="finite"):
        monotonic_credit(np.full((2, 3), np.nan), np.ones((2, 2)), THETA, LAM, [0, 1, 2])
    # empty reference or empty failed sequence: no credit
    assert monotonic_credit(np.zeros((0, 3)), np.zeros((0, 0)), THETA, LAM, [2, 0, 1]).tolist() == [
        0,
        0,
        0,
    ]
    assert monotonic_credit(np.zeros((2, 0)), np.eye(2), THETA, LAM, []).tolist() == []


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_property_each_reference_position_credited_at_most_once(data) -> None:
    m = data.draw(st.integers(0, 6))
    ell = data.draw(st.integers(0, 8))
    vals = st.sampled_from([0.0, 0.3, 0.59, 0.6, 0.61, 0.8, 1.0])
    M = np.array(
        data.draw(st.lists(st.lists(vals, min_size=ell, max_size=ell), min_size=m, max_size=m)),
        dtype=float,
    ).reshape(m, ell)
    S = np.array(
        data.draw(st.lists(st.lists(vals, min_size=m, max_size=m), min_size=m, max_size=m)),
        dtype=float,
    ).reshape(m, m)
    order = data.draw(st.permutations(range(ell)))
    theta = data.draw(st.sampled_from([0.3, 0.6, 0.8]))
    lam = data.draw(st.sampled_from([0.0, 0.4, 0.7]))
    credit, pos = monotonic_match(M, S, theta, lam, order)
    claimed = [int(pos[v]) for v in order if pos[v] >= 0]
    assert claimed == sorted(set(claimed))  # strictly increasing along π: each at most once
    assert len(claimed) <= m
    assert np.all((credit >= 0) & (credit <= 1))
    for v in range(ell):
        if pos[v] >= 0:
            assert M[pos[v], v] >= theta and credit[v] == pytest.approx(
                max(0.0, (M[pos[v], v] - lam) / (1 - lam))
            )
        else:
            assert credit[v] == 0.0


# --- step texts, orders ----------------------------------------------------------------------
def test_step_text_and_filtering() -> None:
    traj = Trajectory(
        "t",
        0,
        [
            Step("s", "go to desk 1", feedback="You arrive."),
            Step("s", "look", feedback=" Nothing happens. "),
            Step("s", "fly", valid=False, feedback="You arrive."),
            Step("s", "open drawer 1", feedback="You open it."),
        ],
    )
    assert kept_steps(traj) == [0, 3]
    assert step_text(traj.steps[0]) == "go to desk 1 \u2016 You arrive."


def test_length_balanced_order() -> None:
    # lengths [1, 1, 5, 1, 9] into 2 parts of 3 and 2 rows, longest first:
    # 9 (row 4) -> A; 5 (row 2) -> B; 1 (row 0) -> B (load 5 < 9; B now full);
    # 1 (row 1) -> A; 1 (row 3) -> A.  A = [1, 3, 4], B = [0, 2].
    assert length_balanced_order([1, 1, 5, 1, 9], 2).tolist() == [1, 3, 4, 0, 2]
    assert length_balanced_order([3, 1, 2], 1).tolist() == [0, 1, 2]
    for n, k in ((7, 3), (8, 8), (5, 9)):
        perm = length_balanced_order(np.arange(n)[::-1], k)
        assert sorted(perm.tolist()) == list(range(n))
    with pytest.raises(ValueError, match="partitions"):
        length_balanced_order([1], 0)


# --- the estimator --------------------------------------------------------------------------
class ExactScorer(PairScorer):
    """1 for identical texts, 0.2 otherwise (a deterministic plug-in through the public interface)."""

    name = "exact"

    def score_pairs(self, pairs):
        self.calls += 1
        return np.array([1.0 if a == b else 0.2 for a, b in pairs])


def st_(state: str, action: str, fb: str = "ok", reward: float = 0.0, **kw) -> Step:
    return Step(state, action, reward=reward, feedback=fb, **kw)


def hand_group() -> list[Trajectory]:
    win = Trajectory(
        "t",
        0,
        [st_("s0", "go a"), st_("s1", "take x"), st_("s2", "put x", reward=10.0)],
        score=1.0,
        success=True,
    )
    loss = Trajectory(
        "t",
        1,
        [st_("s0", "go a"), st_("s3", "look", fb="Nothing happens."), st_("s1", "take x")],
        score=0.0,
    )
    return [win, loss]


def test_scpo_hand_computed_advantages() -> None:
    est = SCPO(scorer=ExactScorer(), order="chronological", norm="mean")
    (traces,) = est.traces([hand_group()])
    (tr,) = traces
    # reference = the winner; the loser's kept steps: 0 ("go a") and 2 ("take x"); step 1 is a no-op
    assert (tr.reference, tr.failed, tr.ref_steps, tr.failed_steps) == (0, 1, [0, 1, 2], [0, 2])
    # M[:, 0] = (1, .2, .2), M[:, 1] = (.2, 1, .2): v0 claims position 0, v1 position 1, r = 1 each
    np.testing.assert_allclose(tr.credit, [1.0, 1.0])
    assert tr.position.tolist() == [0, 1]
    r = est([hand_group()])[0]
    # R (γ = .95): winner [9.025, 9.5, 10], loser [0, 0, 0];  R̃_loser = [0 + .5·1, 0, 0 + .5·1]
    np.testing.assert_allclose(r.shaped_rewards[0], [9.025, 9.5, 10.0])
    np.testing.assert_allclose(r.shaped_rewards[1], [0.5, 0.0, 0.5])
    # anchors (norm "mean"): s0 {9.025, .5} -> ±4.2625; s1 {9.5, .5} -> ±4.5; s2, s3 singletons -> 0
    # episode (norm "mean" over rows): Z = 10,10,10 | 0,0,0 -> ±5
    np.testing.assert_allclose(r.advantages[0], [5 + 4.2625, 5 + 4.5, 5.0])
    np.testing.assert_allclose(r.advantages[1], [-5 - 4.2625, -5.0, -5 - 4.5])
    # unshaped GiGPO: s0 {9.025, 0} -> ±4.5125, s1 {9.5, 0} -> ±4.75
    g = GiGPO(norm="mean")([hand_group()])[0]
    np.testing.assert_allclose(g.advantages[1], [-5 - 4.5125, -5.0, -5 - 4.75])
    assert (
        r.stats["has_reference"],
        r.stats["failed_trajectories"],
        r.stats["credited_steps"],
    ) == (1, 1, 2)
    assert r.stats["credited_steps_per_failed"] == 2.0 and r.stats["filtered_steps"] == 1
    # α·Σr = .5·2 = 1 over the failed sibling's 3 rows
    assert r.stats["aux_reward_sum"] == pytest.approx(1.0) and r.stats[
        "mean_aux_reward"
    ] == pytest.approx(1 / 3)


def test_no_success_or_no_failure_changes_nothing() -> None:
    lose_all = hand_group()
    lose_all[0].steps[2].reward = 0.0
    win_all = hand_group()
    win_all[1].steps[2].reward = 10.0
    for group in (lose_all, win_all):
        scorer = ExactScorer()
        r = SCPO(scorer=scorer)([group])[0]
        g = GiGPO()([group])[0]
        for a, b in zip(r.advantages, g.advantages):
            np.testing.assert_array_equal(a, b)
        assert r.stats["has_reference"] == 0 and r.stats["credited_steps"] == 0
        assert scorer.calls == 0  # nothing to score at all


def test_success_threshold_reference_and_longest() -> None:
    # WebShop-like outcomes 10·score: 9.5 succeeds at τ = 9, 5.0 does not
    a = Trajectory("t", 0, [st_("s0", "go a"), st_("s1", "buy", reward=5.0)], score=0.5)
    b = Trajectory(
        "t", 1, [st_("s0", "go a"), st_("s2", "take x"), st_("s1", "buy", reward=9.5)], score=0.95
    )
    c = Trajectory("t", 2, [st_("s0", "go a"), st_("s1", "buy", reward=9.5)], score=0.95)
    (traces,) = SCPO(scorer=ExactScorer(), success_threshold=9.0).traces([[a, b, c]])
    assert [(tr.reference, tr.failed) for tr in traces] == [(1, 0)]  # longest success = b; a failed
    (traces,) = SCPO(scorer=ExactScorer(), success_threshold=0.0).traces([[a, b, c]])
    assert traces == []  # all three succeed at τ = 0
    # ties in length: the first successful trajectory is the reference
    d = Trajectory(
        "t", 3, [st_("s0", "go b"), st_("s2", "take y"), st_("s1", "buy", reward=9.5)], score=0.95
    )
    (traces,) = SCPO(scorer=ExactScorer(), success_threshold=9.0).traces([[a, d, b]])
    assert traces[0].reference == 1


def test_invalid_steps_earn_no_credit() -> None:
    group = hand_group()
    group[1].steps[0].valid = False  # identical text, but invalid
    (traces,) = SCPO(scorer=ExactScorer(), order="chronological").traces([group])
    assert traces[0].failed_steps == [2]
    np.testing.assert_allclose(traces[0].credit, [0.0])  # "take x" cannot claim position 0 ("go a")


def order_group() -> list[Trajectory]:
    """Reference texts A, B; the failed sibling's texts A, B, A with token counts 5, 1, 9."""

    def s(state, text, n, reward=0.0):
        return Step(state, text, reward=reward, feedback="ok", extra={"num_tokens": n})

    win = Trajectory("t", 0, [s("s0", "A", 1), s("s1", "B", 1, 10.0)], score=1.0, success=True)
    loss = Trajectory("t", 1, [s("s0", "A", 5), s("s2", "B", 1), s("s3", "A", 9)], score=0.0)
    return [win, loss]


def test_processing_orders() -> None:
    # chronological: v0 A -> position 0; v1 B -> position 1 (done): credit [1, 1, 0]
    (tr,) = SCPO(scorer=ExactScorer(), order="chronological").traces([order_group()])[0]
    assert tr.order.tolist() == [0, 1, 2] and tr.credit.tolist() == [1.0, 1.0, 0.0]
    # length: batch rows (w0, w1, l0, l1, l2) have lengths (1, 1, 5, 1, 9): balanced order
    # [1, 3, 4, 0, 2] (see test_length_balanced_order) puts l1 before l2 before l0, so
    # π = [1, 2, 0]: v1 B misses position 0; v2 A -> position 0; v0 A cannot re-claim it.
    (tr,) = SCPO(scorer=ExactScorer(), order="length", partitions=2).traces([order_group()])[0]
    assert tr.order.tolist() == [1, 2, 0] and tr.credit.tolist() == [0.0, 0.0, 1.0]
    # one partition = the batch order = chronological
    (tr,) = SCPO(scorer=ExactScorer(), order="length", partitions=1).traces([order_group()])[0]
    assert tr.order.tolist() == [0, 1, 2]
    # random: a seeded permutation, reproducible
    orders = {
        tuple(
            SCPO(scorer=ExactScorer(), order="random", seed=s).traces([order_group()])[0][0].order
        )
        for s in range(8)
    }
    assert all(sorted(o) == [0, 1, 2] for o in orders) and len(orders) > 1
    a = SCPO(scorer=ExactScorer(), order="random", seed=3).traces([order_group()])[0][0].order
    b = SCPO(scorer=ExactScorer(), order="random", seed=3).traces([order_group()])[0][0].order
    assert a.tolist() == b.tolist()


def test_episode_term_is_unshaped_and_one_scorer_call_per_batch() -> None:
    scorer = ExactScorer()
    groups = [hand_group(), order_group(), hand_group()]
    r = SCPO(scorer=scorer, step_weight=0.0, order="chronological")(groups)
    g = GiGPO(step_weight=0.0)(groups)
    for x, y in zip(r, g):
        for a, b in zip(x.advantages, y.advantages):
            np.testing.assert_array_equal(a, b)
    assert scorer.calls == 1
    assert sum(x.stats["credited_steps"] for x in r) == 2 + 2 + 2


def test_lexical_scorer_end_to_end_and_determinism() -> None:
    scorer = LexicalScorer()
    est = get_estimator("scpo", scorer=scorer, alpha=1.0)
    groups = [hand_group(), order_group()]
    r1, r2 = est(groups), est(groups)
    for x, y in zip(r1, r2):
        for a, b in zip(x.advantages, y.advantages):
            np.testing.assert_array_equal(a, b)
        assert all(np.all(np.isfinite(a)) for a in x.advantages)
    # in the hand group the loser's "go a ‖ ok" equals the winner's first step text
    (traces,) = est.traces([hand_group()])
    assert traces[0].position[0] == 0 and traces[0].credit[0] == pytest.approx(1.0)


def test_parameter_errors_name_the_parameter() -> None:
    for bad, word in (
        ({"order": "backwards"}, "order"),
        ({"soft_base": 1.0}, "soft_base"),
        ({"norm": "max"}, "norm"),
        ({"partitions": 0}, "partitions"),
        ({"gamma": 1.5}, "gamma"),
        ({"theta": float("nan")}, "theta"),
    ):
        with pytest.raises(ValueError, match=word):
            get_estimator("scpo", **bad)
    with pytest.raises(ValueError, match="unknown scorer spec"):
        SCPO(scorer="magic")


def test_credit_spectrum_plot(tmp_path) -> None:
    from matplotlib.patches import Rectangle

    from wrappers.credit.plots import plot_credit_spectrum

    (tr,) = SCPO(scorer=ExactScorer(), order="length", partitions=2).traces([order_group()])[0]
    ax = plot_credit_spectrum(tr, theta=0.6, show_order=True)
    np.testing.assert_array_equal(ax.images[0].get_array(), tr.M)
    # one credited cell: failed kept step 2 at reference position 0 (processed second, π = [1, 2, 0])
    boxes = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert [(b.get_x(), b.get_y()) for b in boxes] == [(1.5, -0.5)]
    assert [t.get_text() for t in ax.texts] == ["2"]
    assert "1/2 reference positions credited, Σ r = 1.00" in ax.get_title()
    ax.figure.savefig(tmp_path / "spectrum.png")
    assert (tmp_path / "spectrum.png").stat().st_size > 1000


# --- ablation switches [SCPO §4.3.2-4.3.3] ----------------------------------------------------
def _ablation_group():
    from rubrics.trajectory import Step, Trajectory

    def st(action, feedback, reward=0.0):
        return Step(action, action, reward=reward, feedback=feedback)

    long_win = Trajectory("t", 0, [st("go to desk 1", "You see a key 1."), st("look", "You are in a room."),
                                   st("take key 1 from desk 1", "You pick up the key 1.", 10.0)])
    short_win = Trajectory("t", 1, [st("go to desk 1", "You see a key 1."),
                                    st("take key 1 from desk 1", "You pick up the key 1.", 10.0)])
    # the failed sibling repeats the winners' first step twice
    loss = Trajectory("t", 2, [st("go to desk 1", "You see a key 1."), st("go to desk 1", "You see a key 1.")])
    return [long_win, short_win, loss]


def test_no_monotonicity_credits_a_reference_position_again() -> None:
    from wrappers.credit.scpo import SCPO

    group = _ablation_group()
    # identical step text -> lexical similarity 1 -> credit (1 - 0.4)/(1 - 0.4) = 1.
    # Monotonic: the second "go to desk 1" re-matches reference position 0 (j = 0 = j_max): no credit.
    mono = SCPO(scorer="lexical", order="chronological").traces([group])[0][0]
    assert mono.credit.tolist() == [1.0, 0.0]
    # Without monotonicity the repeated match is credited again (repeated credit).
    rep = SCPO(scorer="lexical", order="chronological", monotonic=False).traces([group])[0][0]
    assert rep.credit.tolist() == [1.0, 1.0]


def test_shortest_reference_switch() -> None:
    from wrappers.credit.scpo import SCPO

    group = _ablation_group()
    assert SCPO(scorer="lexical").traces([group])[0][0].reference == 0  # longest success (3 steps)
    assert SCPO(scorer="lexical", reference="shortest").traces([group])[0][0].reference == 1  # 2 steps
    with pytest.raises(ValueError, match="reference must be one of"):
        SCPO(reference="median")

"""verl-agent's GiGPO/GraphGPO options: similarity-merged states and progress returns.

Every ratio below is difflib's ``SequenceMatcher(None, new, representative).ratio()`` = 2·M/T,
M the characters in its matching blocks, T the two lengths (all strings here are under 200
characters, so difflib's autojunk does not apply); the tests check the hand values against
difflib itself.
"""

from __future__ import annotations

import math
import random
from difflib import SequenceMatcher

import numpy as np
import pytest

from rubrics.trajectory import Step, Trajectory
from wrappers.credit import CreditInputError, get_estimator
from wrappers.credit.flat import flat_advantages
from wrappers.credit.gigpo import anchor_ids
from wrappers.credit.graph import SUCCESS, Terminal, TransitionGraph
from wrappers.credit.graphgpo import graphgpo_credit
from wrappers.credit.similarity import check_similarity, cluster_texts

EPS = 1e-6
DESK1 = "You are at desk 1. It is dark."
DESK2 = "You are at desk 2. It is dark."


def two_norm(hi: float, lo: float) -> float:
    """mean_std Norm of the larger member of a two-element group: (d/2)/(|d|/√2 + 1e-6)."""
    d = hi - lo
    return (d / 2) / (abs(d) / math.sqrt(2) + EPS)


def ratio(a: str, b: str) -> float:
    return SequenceMatcher(None, a, b).ratio()


# --- the similarity rule ------------------------------------------------------------------------
def test_one_word_apart_merges_at_095_not_099() -> None:
    # DESK1 / DESK2 (30 characters each) differ in the word "1" / "2": the blocks are
    # "You are at desk " (16) and ". It is dark." (13), M = 29, ratio = 2·29/60 = 0.9667
    assert ratio(DESK2, DESK1) == 58 / 60
    win = Trajectory("t", 0, [Step(DESK1, "a"), Step("s1", "b", reward=10.0)], success=True)
    loss = Trajectory("t", 1, [Step(DESK2, "c"), Step("s2", "d")])
    # anchor ids: rows DESK1, s1, DESK2, s2
    assert anchor_ids([[win, loss]], 0.95)[0].tolist() == [0, 1, 0, 2]
    assert anchor_ids([[win, loss]], 0.99)[0].tolist() == [0, 1, 2, 3]
    # merged at 0.95: the first steps form one anchor group, R = 10·0.95 = 9.5 (win) vs 0 (loss)
    x = two_norm(9.5, 0.0)
    merged = get_estimator("gigpo", similarity=0.95, episode_weight=0.0)([[win, loss]])[0]
    np.testing.assert_allclose(np.concatenate(merged.advantages), [x, 0.0, -x, 0.0], rtol=1e-12)
    assert merged.stats["anchor_groups"] == 3 and merged.stats["mean_anchor_size"] == 4 / 3
    # at 0.99 every anchor group is a singleton: A_S = 0 (as without similarity)
    for tau in (0.99, None):
        res = get_estimator("gigpo", similarity=tau, episode_weight=0.0)([[win, loss]])[0]
        assert np.concatenate(res.advantages).tolist() == [0.0] * 4


def test_greedy_order_first_representative_and_boundary() -> None:
    # X -> Y: one character at the end, M = 18 + 1 = 19 of T = 40: exactly 0.95 (>= merges)
    # Z -> X (the representative): blocks "desk 1 lamp " 12, " mug " 5, "." 1: M = 18, 0.9
    # Z -> Y would be 12 + 7 = 19, 0.95 -- but Y is no representative: Z opens its own cluster
    x, y, z = "desk 1 lamp 1 mug 1.", "desk 1 lamp 1 mug 2.", "desk 1 lamp 2 mug 2."
    assert (ratio(y, x), ratio(z, x), ratio(z, y)) == (0.95, 0.9, 0.95)
    assert cluster_texts([x, y, z, y, x], 0.95) == ([0, 0, 1, 0, 0], 2)
    assert cluster_texts([y, z, x], 0.95) == ([0, 0, 0], 1)  # order matters: Y first takes both
    assert cluster_texts([x, y, z], 0.9500001) == ([0, 1, 2], 3)
    assert cluster_texts([x, y, z], 0.9) == ([0, 0, 0], 1)
    assert cluster_texts([x, y, z], 1.0) == ([0, 1, 2], 3)  # 1: equal strings only


def test_ratio_is_not_symmetric_and_the_new_state_comes_first() -> None:
    # difflib's ratio depends on the argument order (autojunk looks at the second string only,
    # when it has 200 characters or more): a 230-character string over "ab c" and a 114-character
    # splice of it (found with this seed) score 0.645 one way and 0.244 the other
    rng = random.Random(1)
    for _ in range(2):  # (the second draw of the search)
        n = rng.choice([200, 210, 230])
        a = "".join(rng.choice("ab c") for _ in range(n))
        b = a[:rng.randrange(n)] + "".join(rng.choice("ab cx") for _ in range(rng.randint(1, 20))) + a[rng.randrange(n):]
    assert (len(a), len(b)) == (230, 114)
    assert round(ratio(a, b), 3) == 0.645 and round(ratio(b, a), 3) == 0.244
    for tau in (0.2, 0.244, ratio(b, a), 0.5, ratio(a, b), 0.7):
        assert cluster_texts([b, a], tau)[1] == (1 if ratio(a, b) >= tau else 2)  # a new, b representative
        assert cluster_texts([a, b], tau)[1] == (1 if ratio(b, a) >= tau else 2)


def plain_clusters(texts: list[str], tau: float) -> list[int]:
    """verl-agent's loop: every item against every representative with difflib, no shortcut."""
    reps: list[str] = []
    out = []
    for t in texts:
        k = next((j for j, r in enumerate(reps) if ratio(t, r) >= tau), None)
        if k is None:
            reps.append(t)
            k = len(reps) - 1
        out.append(k)
    return out


def _mutate(rng: random.Random, s: str, alphabet: str) -> str:
    chars = list(s)
    for _ in range(rng.randint(1, 5)):
        p = rng.randrange(len(chars) + 1)
        op = rng.random()
        if op < 0.4 and chars:
            chars[min(p, len(chars) - 1)] = rng.choice(alphabet)
        elif op < 0.7:
            chars.insert(p, rng.choice(alphabet))
        elif chars:
            del chars[min(p, len(chars) - 1)]
    return "".join(chars)


@pytest.mark.parametrize("seed", range(4))
def test_fast_clusters_equal_difflib_on_every_pair(seed: int) -> None:
    """The shortcuts (distinct strings, count bound, prefix rule, vectorised blocks, early
    stop) give exactly the plain rule, on strings around difflib's 200-character autojunk
    limit, with small alphabets (many tied blocks) and prefixes."""
    rng = random.Random(seed)
    for _ in range(12):
        alphabet = rng.choice(["ab", "ab c", "the quick brown fox 0123456789", "xyz[]$ .\n"])
        base = "".join(rng.choice(alphabet) for _ in range(rng.choice([8, 60, 190, 199, 200, 230, 400])))
        texts = [base]
        for _ in range(rng.randint(4, 14)):
            src = rng.choice(texts)
            texts.append(_mutate(rng, src, alphabet) if rng.random() < 0.8 else src + rng.choice(["", " x", "!"]))
        for tau in (0.5, 0.8, 0.9, 0.95, 0.99):
            labels, n = cluster_texts(texts, tau)
            assert labels == plain_clusters(texts, tau), (seed, tau)
            assert n == max(labels) + 1


@pytest.mark.parametrize("seed", range(3))
def test_each_decision_equals_difflib_at_its_boundary(seed: int) -> None:
    """Every shortcut of one decision (the prefix rule, the LCS bound that rejects, the common
    prefix/suffix bound that accepts, the plain loop on small ranges, the numpy blocks) gives
    difflib's ``ratio() >= τ`` exactly, with τ at the pair's own ratio and one float either side."""
    from wrappers.credit.similarity import _Texts

    rng = random.Random(seed)
    for _ in range(60):
        alphabet = rng.choice(["ab", "ab c", "the quick brown fox 0123456789", "xyz[]$ .\n"])
        a = "".join(rng.choice(alphabet) for _ in range(rng.choice([3, 12, 60, 150, 230])))
        b = _mutate(rng, a, alphabet) if rng.random() < 0.7 else "".join(rng.sample(a, len(a)))
        if a == b:
            continue
        texts = _Texts([a, b])
        r = ratio(a, b)
        for tau in (r, math.nextafter(r, 0.0), math.nextafter(r, 2.0)):
            if 0.0 < tau <= 1.0:
                assert texts.ratio_at_least(0, 1, tau) == (r >= tau), (a, b, tau)


@pytest.mark.parametrize("bad", [0, 0.0, -0.1, 1.5, float("nan"), True, "0.95"])
def test_threshold_is_validated(bad: object) -> None:
    with pytest.raises(ValueError, match=r"similarity must be"):
        check_similarity(bad)
    for name in ("gigpo", "graphgpo"):
        with pytest.raises(ValueError, match=r"similarity must be"):
            get_estimator(name, similarity=bad)
    assert check_similarity(None) is None and check_similarity(1) == 1.0


def test_non_text_states_are_named() -> None:
    group = [Trajectory("t", 0, [Step(("room", 1), "a")]), Trajectory("t", 1, [Step(("room", 2), "b")])]
    with pytest.raises(CreditInputError, match=r"group 0: .*item 0 is a tuple"):
        get_estimator("gigpo", similarity=0.95)([group])
    with pytest.raises(CreditInputError, match=r"group 0: .*tuple"):
        get_estimator("graphgpo", similarity=0.95)([group])
    get_estimator("gigpo")([group])  # exact grouping takes any hashable key


# --- GraphGPO: merged nodes ----------------------------------------------------------------------
def hall_group() -> list[Trajectory]:
    """τ0 wins start -a-> "hall, door 1" -b-> SUCCESS; τ1 goes start -c-> "hall, door 2" -d->
    (dead end).  "hall, door 2" vs "hall, door 1": blocks "hall, door " 11, M = 11 of T = 24,
    ratio 22/24 = 0.9167."""
    win = Trajectory("t", 0, [Step("start", "a"), Step("hall, door 1", "b", reward=10.0)], success=True)
    loss = Trajectory("t", 1, [Step("start", "c"), Step("hall, door 2", "d")])
    return [win, loss]


def test_merging_shortens_a_distance() -> None:
    assert ratio("hall, door 2", "hall, door 1") == 22 / 24
    exact, merged = TransitionGraph(hall_group()), TransitionGraph(hall_group(), similarity=0.9)
    # exact: D(hall 1) = 1, D(start) = 2, hall 2 cannot reach success -> max 2 + 1 = 3
    d = exact.filled_distances()
    assert [d[exact.index[k]] for k in ("start", "hall, door 1", "hall, door 2")] == [2.0, 1.0, 3.0]
    # merged: hall 2 is the node of hall 1 (its first key), one step from success
    assert merged.index["hall, door 2"] == merged.index["hall, door 1"]
    assert merged.keys == ["start", "hall, door 1", SUCCESS, Terminal(1)]  # success and dead end apart
    dm = merged.filled_distances()
    assert dm[merged.index["hall, door 2"]] == 1.0 and dm[merged.index[Terminal(1)]] == 3.0
    # R^graph = 10·0.1^D(next): the loser's first step 10·0.1^3 = 0.01 -> 10·0.1^1 = 1
    res = {tau: graphgpo_credit(hall_group(), gamma=0.1, similarity=tau) for tau in (None, 0.9)}
    np.testing.assert_allclose(np.concatenate(res[None].returns), [1.0, 10.0, 0.01, 0.01], rtol=1e-12)
    np.testing.assert_allclose(np.concatenate(res[0.9].returns), [1.0, 10.0, 1.0, 0.01], rtol=1e-12)
    # A^G groups rows by exact text (verl-agent): without merging, anchor "start" {1, 0.01},
    # halls singletons; merged distances, "start" {1, 1} -> 0, halls still singletons -> 0
    a, b = two_norm(1.0, 0.01), two_norm(10.0, 0.01)
    np.testing.assert_allclose(np.concatenate(res[None].step), [a, 0.0, -a, 0.0], rtol=1e-12)
    assert np.concatenate(res[0.9].step).tolist() == [0.0] * 4
    # step_groups="merged": the merged hall {10 (-> SUCCESS), 0.01 (-> dead end)} is one group
    merged_groups = graphgpo_credit(hall_group(), gamma=0.1, similarity=0.9, step_groups="merged")
    np.testing.assert_allclose(np.concatenate(merged_groups.step), [0.0, b, 0.0, -b], rtol=1e-12)
    np.testing.assert_array_equal(np.concatenate(merged_groups.returns), np.concatenate(res[0.9].returns))
    assert res[0.9].stats["nodes"] == 2 and res[None].stats["nodes"] == 3
    est = get_estimator("graphgpo", gamma=0.1, similarity=0.9)
    for got, want in zip(est([hall_group()])[0].advantages, res[0.9].advantages):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="prebuilt graph merged states with similarity=None"):
        graphgpo_credit(hall_group(), similarity=0.9, graph=exact)


MUG = "On the desk 1, you see a mug 2, a pen 3 and a lamp."
CUP = "On the desk 1, you see a cup 2, a pen 3 and a lamp."


def test_graphgpo_step_term_groups_by_exact_text_as_verl_agent() -> None:
    # MUG / CUP differ by one word: blocks 25 + "u" 1 + 23, M = 49 of T = 102, ratio 0.961
    assert ratio(CUP, MUG) == 98 / 102
    win = Trajectory("t", 0, [Step(MUG, "a"), Step("s1", "b", reward=10.0)], success=True)
    loss = Trajectory("t", 1, [Step(CUP, "c"), Step("s2", "d")])
    # merged at 0.95: D(MUG = CUP) = 2, D(s1) = 1, D(s2) = max 2 + 1 = 3; R^graph = 10·0.1^D(next):
    # 1, 10 | 0.01, 0.01.  verl-agent groups its step term by the exact observation: every row
    # is alone, A^G = [0, 0, 0, 0]
    ref = graphgpo_credit([win, loss], gamma=0.1, similarity=0.95)
    np.testing.assert_allclose(np.concatenate(ref.returns), [1.0, 10.0, 0.01, 0.01], rtol=1e-12)
    assert np.concatenate(ref.step).tolist() == [0.0] * 4
    est = get_estimator("graphgpo", gamma=0.1, similarity=0.95, episode_weight=0.0)
    assert est.params()["step_groups"] == "exact"
    assert np.concatenate(est([[win, loss]])[0].advantages).tolist() == [0.0] * 4
    # grouping by the merged node: MUG and CUP compete, {1, 0.01}
    x = two_norm(1.0, 0.01)
    merged = get_estimator("graphgpo", gamma=0.1, similarity=0.95, episode_weight=0.0, step_groups="merged")
    np.testing.assert_allclose(np.concatenate(merged([[win, loss]])[0].advantages), [x, 0.0, -x, 0.0], rtol=1e-12)
    assert abs(x - 0.7071) < 1e-4
    with pytest.raises(ValueError, match="step_groups"):
        get_estimator("graphgpo", step_groups="similar")


def test_the_success_node_never_merges_with_an_observation() -> None:
    # an observation that reads "success" stays a state; the success node stays apart
    win = Trajectory("t", 0, [Step("success", "a"), Step("successes", "b", reward=10.0)], success=True)
    g = TransitionGraph([win], similarity=0.5)
    assert g.index["success"] == g.index["successes"] != g.success_node
    assert g.keys == ["success", SUCCESS]


def detour_group() -> list[Trajectory]:
    """τ0 wins s0 -a-> s1 -b-> SUCCESS; τ1 wins after a detour s0 -x-> s2 -y-> s0 -a-> s1 -b->
    SUCCESS; τ2 tries an invalid action at s0 (stays, −0.1), goes to s1 and stops (dead end)."""
    t0 = Trajectory("T", 0, [Step("s0", "a"), Step("s1", "b", reward=10.0)], success=True)
    t1 = Trajectory("T", 1, [Step("s0", "x"), Step("s2", "y"), Step("s0", "a"), Step("s1", "b", reward=10.0)],
                    success=True)
    t2 = Trajectory("T", 2, [Step("s0", "fly", penalty=-0.1, valid=False), Step("s0", "a"), Step("s1", "c")])
    return [t0, t1, t2]


def test_progress_returns_on_a_detour() -> None:
    # D: SUCCESS 0, s1 1, s0 2, s2 3 (s2 -> s0 -> s1 -> SUCCESS); τ2's dead end: max 3 + 1 = 4.
    # progress 10·γ^(D(next) − D(here) + 1), γ = 0.1:
    #   τ0: s0->s1 (1−2+1 = 0) 10, s1->SUCCESS (0) 10
    #   τ1: s0->s2 away (3−2+1 = 2) 0.1, s2->s0 back (2−3+1 = 0) 10, then 10, 10
    #   τ2: s0->s0 stays (1) 1, s0->s1 10, s1->dead end (4−1+1 = 4) 0.001
    # proximity 10·γ^D(next): τ1 is 0.01, 0.1, 1, 10; τ2 is 0.1, 1, 0.001
    prog = graphgpo_credit(detour_group(), gamma=0.1, normalize_distance=True)
    want = [[10.0, 10.0], [0.1, 10.0, 10.0, 10.0], [1.0, 10.0, 0.001]]
    for got, w in zip(prog.returns, want):
        np.testing.assert_allclose(got, w, rtol=1e-12)
    prox = graphgpo_credit(detour_group(), gamma=0.1)
    np.testing.assert_allclose(prox.returns[1], [0.01, 0.1, 1.0, 10.0], rtol=1e-12)
    np.testing.assert_allclose(prox.returns[2], [0.1, 1.0, 0.001], rtol=1e-12)
    # A^G within anchor s1: {10 (τ0), 10 (τ1), 0.001 (τ2)}: mean 20.001/3, sample std of the
    # deviations (d, d, −2d) with d = (10 − 0.001)/3 is √(6d²/2) = √3·d
    d = (10 - 0.001) / 3
    s = math.sqrt(3) * d + EPS
    np.testing.assert_allclose([prog.step[0][1], prog.step[1][3], prog.step[2][2]], [d / s, d / s, -2 * d / s],
                               rtol=1e-12)
    # with verl-agent's penalty convention the invalid row gets 1 − 0.1; "zero": the dead end 0
    pen = graphgpo_credit(detour_group(), gamma=0.1, normalize_distance=True, penalty_in_graph_return=True)
    np.testing.assert_allclose(pen.returns[2], [0.9, 10.0, 0.001], rtol=1e-12)
    zero = graphgpo_credit(detour_group(), gamma=0.1, normalize_distance=True, unreachable="zero")
    np.testing.assert_allclose(zero.returns[2], [1.0, 10.0, 0.0], rtol=1e-12)
    est = get_estimator("graphgpo", gamma=0.1, normalize_distance=True)
    assert est.params()["normalize_distance"] is True
    np.testing.assert_array_equal(np.concatenate(est([detour_group()])[0].shaped_rewards),
                                  np.concatenate(prog.returns))


# --- off by default; the flat rows, the verl rows, the arena -------------------------------------
def text_batch(seed: int = 0) -> list[list[Trajectory]]:
    """Two tasks of four siblings over ALFWorld-like text states (one-word variants)."""
    rng = random.Random(seed)
    rooms = ["You arrive at desk {}. On the desk {}, you see a mug {}.", "You open drawer {}. It is empty.",
             "You are in the middle of a room. Looking around, you see cabinet {}."]
    groups = []
    for task in range(2):
        group = []
        for slot in range(4):
            steps = []
            for t in range(rng.randint(3, 7)):
                text = rng.choice(rooms).format(*(rng.randint(1, 3) for _ in range(3)))
                won = t >= 3 and rng.random() < 0.3
                steps.append(Step(f"task {task}: {text}", rng.choice(["go", "open", "take", "look"]),
                                  reward=10.0 if won else 0.0, penalty=-0.1 if rng.random() < 0.2 else 0.0))
                if won:
                    break
            group.append(Trajectory(f"task{task}", slot, steps, score=float(steps[-1].reward > 0),
                                    success=steps[-1].reward > 0))
        groups.append(group)
    return groups


@pytest.mark.parametrize("name", ["gigpo", "graphgpo"])
def test_off_by_default_equals_todays_numbers(name: str) -> None:
    batch = text_batch()
    default = get_estimator(name)(batch)
    assert get_estimator(name).params()["similarity"] is None
    for params in ({"similarity": None}, {"similarity": 1.0}):  # all keys distinct strings: 1 is exact
        for a, b in zip(default, get_estimator(name, **params)(batch)):
            for x, y in zip(a.advantages, b.advantages):
                np.testing.assert_array_equal(x, y)
    merged = get_estimator(name, similarity=0.9)(batch)
    assert any(not np.array_equal(x, y) for a, b in zip(default, merged) for x, y in zip(a.advantages, b.advantages))


def _columns(batch: list[list[Trajectory]], order: list[int]) -> dict[str, list]:
    """The rows as a verl step-level batch: group = uid, trajectory = (uid, session), the step
    index and session as slot (what ``wrappers.integrations.verl.step_credit`` passes), rows in
    ``order``."""
    rows = [(f"uid{g}", t.slot, k, s, t) for g, group in enumerate(batch) for t in group for k, s in enumerate(t.steps)]
    rows = [rows[r] for r in order]
    return dict(group_id=[r[0] for r in rows], traj_id=[(r[0], r[1]) for r in rows], step_index=[r[2] for r in rows],
                slot=[r[1] for r in rows], state_key=[r[3].state_key for r in rows],
                next_state_key=[r[3].next_state_key for r in rows], reward=[r[3].reward for r in rows],
                penalty=[r[3].penalty for r in rows], valid=[r[3].valid for r in rows],
                action=[r[3].action for r in rows], score=[r[4].score for r in rows],
                success=[r[4].success for r in rows], task_id=[r[4].task_id for r in rows])


@pytest.mark.parametrize(("name", "params"), [
    ("gigpo", {"similarity": 0.9}),
    ("graphgpo", {"similarity": 0.9, "normalize_distance": True, "penalty_in_graph_return": True}),
])
def test_flat_and_verl_rows_equal_the_grouped_estimator(name: str, params: dict) -> None:
    batch = text_batch(1)
    want = np.concatenate([a for r in get_estimator(name, **params)(batch) for a in r.advantages])
    n = len(want)
    in_order = flat_advantages(name, params=params, **_columns(batch, list(range(n))))
    np.testing.assert_array_equal(in_order, want)
    shuffled = random.Random(3).sample(range(n), n)  # verl's TransferQueue keeps no row order
    got = flat_advantages(name, params=params, **_columns(batch, shuffled))
    np.testing.assert_array_equal(got, want[shuffled])


def test_arena_estimator_params_reach_the_estimators() -> None:
    from trainers.arena.variants import resolve_method

    gigpo = resolve_method("gigpo", "webshop", {"similarity": 0.95}).build()
    graph = resolve_method("graphgpo", "alfworld", {"similarity": 0.95, "normalize_distance": True}).build()
    assert gigpo.similarity == 0.95 and graph.similarity == 0.95 and graph.normalize_distance is True

"""GraphGPO (SPEC §4.3) and the transition graph: hand-computed credit and diagnostics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rubrics.trajectory import Step, Trajectory
from wrappers.credit import get_estimator
from wrappers.credit.graph import SUCCESS, Terminal, TransitionGraph, segment_normalize
from wrappers.credit.graphgpo import graphgpo_credit

EPS = 1e-6


def two_norm(hi: float, lo: float) -> float:
    """mean_std Norm of the larger member of a two-element group: (d/2)/(|d|/√2 + 1e-6)."""
    d = hi - lo
    return (d / 2) / (abs(d) / math.sqrt(2) + EPS)


def three_group() -> list[Trajectory]:
    """τ0 wins s0-a->s1-b->s3-c->SUCCESS; τ1 fails s0-a->s1-d->s2-e->(dead end);
    τ2 is truncated s0-f->s4-g->s3 (it stops in a state that can reach success)."""
    t0 = Trajectory("T", 0, [Step("s0", "a"), Step("s1", "b"), Step("s3", "c", reward=10.0)], score=1, success=True)
    t1 = Trajectory("T", 1, [Step("s0", "a"), Step("s1", "d"), Step("s2", "e")])
    t2 = Trajectory("T", 2, [Step("s0", "f"), Step("s4", "g", next_state_key="s3")], truncated=True)
    return [t0, t1, t2]


def test_graph_nodes_destinations_and_distances() -> None:
    g = TransitionGraph(three_group())
    keys = [g.keys[v] for v in g.dst]
    # the winning last step enters SUCCESS; τ1's last step names nothing -> Terminal(1);
    # τ2's last step names s3 explicitly
    assert keys == ["s1", "s3", SUCCESS, "s1", "s2", Terminal(1), "s4", "s3"]
    d = g.success_distances()
    dist = {k: d[g.index[k]] for k in ["s0", "s1", "s2", "s3", "s4"]}
    # reverse BFS, unit cost: D(s3)=1 (s3->SUCCESS), D(s1)=D(s4)=2 (->s3), D(s0)=3, s2 cannot reach
    assert dist == {"s0": 3, "s1": 2, "s2": math.inf, "s3": 1, "s4": 2}
    assert d[g.success_node] == 0
    # max finite D = 3, so unreachable states get 3 + 1 = 4 under GraphGPO's convention
    filled = g.filled_distances("max_plus_one")
    assert filled[g.index["s2"]] == 4 and filled[g.index[Terminal(1)]] == 4


def test_graphgpo_hand_computed_max_plus_one() -> None:
    res = get_estimator("graphgpo", gamma=0.1)([three_group()])[0]
    # R^graph = 10·0.1^D(s_{t+1}):
    #  τ0: s1 (D=2) -> 0.1, s3 (D=1) -> 1, SUCCESS (D=0) -> 10
    #  τ1: s1 -> 0.1, s2 (D=4=max+1) -> 10·1e-4 = 0.001, Terminal (D=4) -> 0.001
    #  τ2: s4 (D=2) -> 0.1, s3 (D=1) -> 1
    np.testing.assert_allclose(res.shaped_rewards[0], [0.1, 1.0, 10.0])
    np.testing.assert_allclose(res.shaped_rewards[1], [0.1, 0.001, 0.001])
    np.testing.assert_allclose(res.shaped_rewards[2], [0.1, 1.0])
    # A^G by source state: s0 {0.1, 0.1, 0.1} -> all equal -> 0 exactly;
    # s1 {1 (τ0), 0.001 (τ1)} -> ±(0.999/2)/(0.999/√2 + 1e-6); s2, s3, s4 singletons -> 0
    x = two_norm(1.0, 0.001)
    # A^E = Norm over the 8 rows of Z: τ0 rows 10, others 0; mean 30/8 = 3.75,
    # SS = 3·6.25² + 5·3.75² = 187.5, sample std = √(187.5/7)
    sd = math.sqrt(187.5 / 7)
    win, lose = 6.25 / (sd + EPS), -3.75 / (sd + EPS)
    np.testing.assert_allclose(res.advantages[0], [win, x + win, win], rtol=1e-12)
    np.testing.assert_allclose(res.advantages[1], [lose, -x + lose, lose], rtol=1e-12)
    np.testing.assert_allclose(res.advantages[2], [lose, lose], rtol=1e-12)


def test_graphgpo_unreachable_zero() -> None:
    c = graphgpo_credit(three_group(), gamma=0.1, unreachable="zero")
    # s2 and Terminal cannot reach success: the decayed term is 0 instead of 10·0.1^4
    np.testing.assert_allclose(c.returns[1], [0.1, 0.0, 0.0])
    # s1's group is now {1, 0}: ±(1/2)/(1/√2 + 1e-6)
    assert c.step[0][1] == pytest.approx(two_norm(1.0, 0.0), rel=1e-12)
    assert c.step[1][1] == pytest.approx(-two_norm(1.0, 0.0), rel=1e-12)


def test_graphgpo_stats_named_as_in_spec() -> None:
    stats = graphgpo_credit(three_group()).stats
    # nodes: s0, s1, s2, s3, s4 (SUCCESS and the dead end are not states)
    assert stats["nodes"] == 5
    # distinct (s, a, s'): (s0,a,s1) twice -> once, (s1,b,s3), (s3,c,SUCC), (s1,d,s2),
    # (s2,e,T1), (s0,f,s4), (s4,g,s3) = 7
    assert stats["edges"] == 7
    # reuse: rows from states visited by >= 2 trajectories: s0 (3 rows) + s1 (2 rows) = 5 of 8
    assert stats["reuse_rate"] == pytest.approx(5 / 8)
    # success-reachable: s0, s1, s3, s4 of 5 states
    assert stats["success_reachable_share"] == pytest.approx(4 / 5)
    # same-state action pairs: s0: (a->s1, D 2) vs (f->s4, D 2) tie; s1: (b->s3, D 1) vs
    # (d->s2, D 4) no tie -> 1 of 2
    assert stats["action_pairs"] == 2 and stats["tie_pairs"] == 1
    assert stats["tie_rate"] == pytest.approx(0.5)
    assert stats["success"] is True


def test_no_success_gives_flat_graph_credit() -> None:
    # Nobody succeeds: every D is infinite, all returns equal, A^G = 0 and A = Norm_task(Z).
    t0 = Trajectory("T", 0, [Step("s0", "a"), Step("s1", "b")])
    t1 = Trajectory("T", 1, [Step("s0", "c", penalty=-0.1), Step("s2", "d")])
    for unreachable in ("max_plus_one", "zero"):
        c = graphgpo_credit([t0, t1], unreachable=unreachable)
        for step in c.step:
            assert np.array_equal(step, np.zeros_like(step))
    res = get_estimator("graphgpo")([[t0, t1]])[0]
    # Z rows: [0, 0], [-0.1, 0]; mean -0.025; devs 0.025, 0.025, -0.075, 0.025;
    # SS = 3·0.025² + 0.075² = 0.0075, sd = √(0.0075/3) = 0.05
    sd = 0.05
    np.testing.assert_allclose(res.advantages[0], [0.025 / (sd + EPS)] * 2, rtol=1e-9)
    np.testing.assert_allclose(res.advantages[1], [-0.075 / (sd + EPS), 0.025 / (sd + EPS)], rtol=1e-9)
    assert res.stats["success"] is False and res.stats["success_reachable_share"] == 0.0


def test_singleton_anchor_groups_give_zero() -> None:
    # One trajectory, every state visited once: all anchor groups are singletons -> A^G = 0;
    # the task term of a lone trajectory with equal Z rows is 0 too.
    t = Trajectory("T", 0, [Step("s0", "a"), Step("s1", "b"), Step("s2", "c", reward=10.0)], success=True)
    c = graphgpo_credit([t])
    assert np.array_equal(c.step[0], np.zeros(3))
    assert np.array_equal(c.advantages[0], np.zeros(3))
    # returns are still defined: 10·0.1^2, 10·0.1, 10
    np.testing.assert_allclose(c.returns[0], [0.1, 1.0, 10.0])


def test_revisits_and_self_loops_share_an_anchor_group() -> None:
    # τ0 loops at s0 (invalid action, state unchanged), then wins; τ1 fails from s0.
    t0 = Trajectory("T", 0, [Step("s0", "x", valid=False, penalty=-0.1), Step("s0", "a"),
                             Step("s1", "b", reward=10.0)], success=True)
    t1 = Trajectory("T", 1, [Step("s0", "c"), Step("s2", "d")])
    c = graphgpo_credit([t0, t1], gamma=0.1, episode_weight=0.0)
    # D(s1)=1, D(s0)=2 (s0->s1->SUCC), s2 unreachable -> max 2 + 1 = 3
    # s0 rows: loop -> s0: 10·0.1² = 0.1; a -> s1: 1; c -> s2: 10·0.1³ = 0.01
    np.testing.assert_allclose(c.returns[0][:2], [0.1, 1.0])
    np.testing.assert_allclose(c.returns[1][0], 0.01)
    r = np.array([0.1, 1.0, 0.01])
    dev = r - r.mean()
    expect = dev / (math.sqrt((dev**2).sum() / 2) + EPS)
    np.testing.assert_allclose([c.step[0][0], c.step[0][1], c.step[1][0]], expect, rtol=1e-12)
    # the penalty does not enter the graph return (SPEC §4.3), only Z
    assert c.returns[0][0] == pytest.approx(0.1)


def test_mean_norm_and_weights() -> None:
    c = graphgpo_credit(three_group(), norm="mean", step_weight=2.0, episode_weight=0.5)
    # mean mode: s1 group {1, 0.001} -> ±0.4995; Z - mean: 6.25 / -3.75
    np.testing.assert_allclose(c.step[0], [0.0, 0.4995, 0.0], atol=1e-15)
    np.testing.assert_allclose(c.advantages[0], [0.5 * 6.25, 2 * 0.4995 + 0.5 * 6.25, 0.5 * 6.25])
    np.testing.assert_allclose(c.advantages[2], [0.5 * -3.75] * 2)


def test_empty_trajectories_are_allowed() -> None:
    t0 = Trajectory("T", 0, [])
    t1 = Trajectory("T", 1, [Step("s0", "a", reward=10.0)], success=True)
    res = get_estimator("graphgpo")([[t0, t1]])[0]
    assert res.advantages[0].shape == (0,) and res.advantages[1].shape == (1,)


@pytest.mark.parametrize("kwargs, match", [
    ({"gamma": 0.0}, "gamma"),
    ({"gamma": 1.5}, "gamma"),
    ({"unreachable": "inf"}, "unreachable"),
    ({"norm": "std"}, "norm"),
    ({"episode_norm": "tokens"}, "episode_norm"),
])
def test_graphgpo_bad_parameters(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        get_estimator("graphgpo", **kwargs)


def test_segment_normalize_matches_common_normalize() -> None:
    from wrappers.credit.common import normalize

    rng = np.random.default_rng(0)
    x = rng.normal(size=40)
    seg = rng.integers(0, 7, size=40)
    for mode in ("mean_std", "mean"):
        out = segment_normalize(x, seg, mode, 7)
        for k in range(7):
            m = seg == k
            if m.any():
                np.testing.assert_allclose(out[m], normalize(x[m], mode), atol=1e-12)


def test_max_product_potential_equals_brute_force() -> None:
    # Φ(s) = max_v base(v)·ω^{d(s,v)}: compare the best-first search with one BFS per v.
    rng = np.random.default_rng(1)
    for _ in range(20):
        trajs = []
        for i in range(5):
            n = int(rng.integers(1, 7))
            states = [f"s{int(x)}" for x in rng.integers(0, 6, size=n)]
            trajs.append(Trajectory("T", i, [Step(s, "a") for s in states], success=bool(i == 0)))
        g = TransitionGraph(trajs)
        base = np.where(rng.random(g.n_nodes) < 0.4, rng.random(g.n_nodes), 0.0)
        for omega in (0.2, 1.0):
            phi = g.max_product_potential(base, omega)
            brute = np.zeros(g.n_nodes)
            for v in np.flatnonzero(base > 0):
                d = g.distances_to(int(v))
                vals = np.where(np.isfinite(d), base[v] * omega ** np.where(np.isfinite(d), d, 0), 0.0)
                brute = np.maximum(brute, vals)
            np.testing.assert_allclose(phi, brute, rtol=1e-12)


def test_plot_graph_draws_states_edges_and_milestones(tmp_path) -> None:
    from wrappers.credit.milegpo import milegpo_credit
    from wrappers.credit.plots import plot_graph

    group = three_group()
    ax = plot_graph(group, credit=milegpo_credit(group))
    title = ax.get_title()
    # the title carries the stats computed above: 5 states, 7 edges, reuse 5/8, reachable 4/5, ties 1/2
    assert title.startswith("GraphGPO graph: 5 states, 7 edges, reuse 0.62, reachable 0.80, ties 0.50")
    assert "2 milestones, 0 traps" in title
    # 7 distinct (u, v) edges are drawn as arrows; 7 nodes (5 states, SUCCESS, one dead end) are labelled
    arrows = [c for c in ax.texts if getattr(c, "arrow_patch", None) is not None and not c.get_text()]
    assert len(arrows) == 7
    assert sorted(t.get_text() for t in ax.texts if t.get_text()) == sorted(
        ["s0", "s1", "s2", "s3", "s4", "SUCCESS", "end τ1"])
    # node x positions are −D: s0 at −3, success at 0
    path = tmp_path / "graph.png"
    ax.figure.savefig(path)
    assert path.stat().st_size > 1000


def test_explicit_next_state_in_the_middle_and_batch_graph() -> None:
    # τ0's first step names its next state "s9" although the next step starts from "s1"
    # (e.g. a canonicaliser that differs pre/post action); the edge goes to s9, not s1.
    t0 = Trajectory("T", 0, [Step("s0", "a", next_state_key="s9"), Step("s1", "b", reward=10.0)], success=True)
    t1 = Trajectory("T", 1, [Step("s9", "c"), Step("s1", "d")])
    g = TransitionGraph([t0, t1])
    assert [g.keys[v] for v in g.dst] == ["s9", SUCCESS, "s1", Terminal(1)]
    # s1 -> SUCCESS (1), s9 -> s1 (2), s0 -> s9 (3)
    d = g.success_distances()
    assert [d[g.index[k]] for k in ("s0", "s9", "s1")] == [3, 2, 1]
    # the same two groups in one batch graph: disjoint components with their own distances
    other = [Trajectory("U", 0, [Step("s1", "x", reward=10.0)], success=True)]
    b = TransitionGraph.from_groups([[t0, t1], other])
    assert b.n_groups == 2 and b.indices[1]["s1"] != b.indices[0]["s1"]
    db = b.success_distances()
    assert db[b.indices[1]["s1"]] == 1 and db[b.indices[0]["s0"]] == 3
    assert b.success_nodes.tolist() == [b.indices[0][SUCCESS], b.indices[1][SUCCESS]]


def penalty_group() -> list[Trajectory]:
    """τ0 wins s0-a->s1-b->SUCCESS; τ1 tries an invalid x at s0 (−0.1, stays in s0), then
    s0-a->s1-d->(dead end)."""
    t0 = Trajectory("T", 0, [Step("s0", "a"), Step("s1", "b", reward=10.0)], score=1, success=True)
    t1 = Trajectory("T", 1, [Step("s0", "x", penalty=-0.1, valid=False), Step("s0", "a"), Step("s1", "d")])
    return [t0, t1]


def test_penalty_in_graph_return_as_verl_agent() -> None:
    # D: SUCCESS 0, s1 1, s0 2, Terminal(1) unreachable -> max 2 + 1 = 3; R = 10·0.1^D(next):
    #   τ0: s1 -> 1, SUCCESS -> 10;  τ1: s0 -> 0.1, s1 -> 1, Terminal -> 0.01
    # verl-agent adds the penalty to the stored return: τ1's invalid row gets 0.1 − 0.1 = 0.
    plain = graphgpo_credit(penalty_group(), gamma=0.1)
    verl = graphgpo_credit(penalty_group(), gamma=0.1, penalty_in_graph_return=True)
    np.testing.assert_allclose(plain.returns[1], [0.1, 1.0, 0.01], rtol=1e-12)
    np.testing.assert_allclose(verl.returns[1], [0.0, 1.0, 0.01], atol=1e-15)
    np.testing.assert_allclose(verl.returns[0], [1.0, 10.0], rtol=1e-12)
    # anchor s0 = rows {τ0 step 0, τ1 step 0, τ1 step 1}:
    #   plain {1, 0.1, 1}: mean 0.7, deviations (0.3, −0.6, 0.3), sample std √0.27
    #   verl  {1, 0, 1}:   mean 2/3, deviations (1/3, −2/3, 1/3), sample std √(1/3)
    sp, sv = math.sqrt(0.27) + EPS, math.sqrt(1 / 3) + EPS
    np.testing.assert_allclose([plain.step[0][0], plain.step[1][0], plain.step[1][1]],
                               [0.3 / sp, -0.6 / sp, 0.3 / sp], rtol=1e-9)
    np.testing.assert_allclose([verl.step[0][0], verl.step[1][0], verl.step[1][1]],
                               [1 / 3 / sv, -2 / 3 / sv, 1 / 3 / sv], rtol=1e-12)
    # anchor s1 = {10 (τ0), 0.01 (τ1)}: no penalty there, the same in both modes
    x = two_norm(10.0, 0.01)
    for c in (plain, verl):
        np.testing.assert_allclose([c.step[0][1], c.step[1][2]], [x, -x], rtol=1e-12)
    # the episode term (Z = O + penalty) does not change
    for a, b in zip(plain.episode, verl.episode):
        np.testing.assert_array_equal(a, b)
    # the estimator and the flat rows take the option too
    est = get_estimator("graphgpo", gamma=0.1, penalty_in_graph_return=True)
    res = est([penalty_group()])[0]
    for got, want in zip(res.advantages, verl.advantages):
        np.testing.assert_array_equal(got, want)
    assert est.params()["penalty_in_graph_return"] is True
    from wrappers.credit.flat import flat_advantages

    rows = [(0, s) for s in penalty_group()[0].steps] + [(1, s) for s in penalty_group()[1].steps]
    flat = flat_advantages(
        "graphgpo", params={"gamma": 0.1, "penalty_in_graph_return": True},
        group_id=["T"] * 5, traj_id=[i for i, _ in rows], state_key=[s.state_key for _, s in rows],
        reward=[s.reward for _, s in rows], penalty=[s.penalty for _, s in rows],
        valid=[s.valid for _, s in rows], action=[s.action for _, s in rows])
    np.testing.assert_array_equal(flat, np.concatenate(verl.advantages))

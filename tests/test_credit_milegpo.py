"""MileGPO (SPEC §4.4): hand-computed milestones, traps, potentials, PCC and Propositions 1–3."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubrics.trajectory import Step, Trajectory
from wrappers.credit import get_estimator
from wrappers.credit.graphgpo import graphgpo_credit
from wrappers.credit.milegpo import PRESETS, MileGPO, milegpo_credit

EPS = 1e-6


def three_group() -> list[Trajectory]:
    """τ0 wins s0-a->s1-b->s3-c->SUCCESS; τ1 fails s0-a->s1-d->s2-e->(dead end);
    τ2 is truncated s0-f->s4-g->s3."""
    t0 = Trajectory("T", 0, [Step("s0", "a"), Step("s1", "b"), Step("s3", "c", reward=10.0)], score=1, success=True)
    t1 = Trajectory("T", 1, [Step("s0", "a"), Step("s1", "d"), Step("s2", "e")])
    t2 = Trajectory("T", 2, [Step("s0", "f"), Step("s4", "g", next_state_key="s3")], truncated=True)
    return [t0, t1, t2]


# Hand derivation for three_group() with the ALFWorld preset (used by several tests):
# K = 3, one success: p_q⁺ = 1/3.  Visits: τ0 {s0,s1,s3}; τ1 {s0,s1,s2} (its dead end is not a
# state); τ2 {s0,s4,s3} (its final state s3 counts).
#   p⁺: s0 1/3, s1 1/2, s3 1/2, s2 0, s4 0;   m: s0 = s1 = s3 = 1.
#   distinct (u,v) edges: s0→s1, s1→s3, s3→SUCC, s1→s2, s2→T, s0→s4, s4→s3;
#   degree in+out: s0 0+2 = 2, s1 1+2 = 3, s3 2+1 = 3 -> C = 2/3, 1, 1.
#   S₀⁺ = w_s·max(p⁺−1/3,0) + w_m·m + w_c·C:
#     s0 = 0 + 1 + 0.25·2/3 = 7/6;  s1 = 1/6 + 1 + 0.25 = 17/12;  s3 = 17/12.
#   traps: s2 and s4 are seen by one failed trajectory, once -> no candidates.
# PCC: p⁺(e): s0→s1 1/2, s0→s4 0, s1→s3 1, s1→s2 0, s3→SUCC 1, s2→T 0, s4→s3 0.
#   margins c̃ = p⁺ − mean sibling p⁺: s0→s1 +1/2, s0→s4 −1/2, s1→s3 +1, s1→s2 −1, rest 0;
#   max |c̃| = 1 -> c = c̃.  b(s1) = c(s0→s1) = 1/2, b(s3) = c(s1→s3) = 1, b(s0) = 0.
#   d(·,g): s0 3, s1 2, s3 1, s4 2.  ψ(s0→s1) = (3−2) + (1/2 − 1/3) − 0 = 7/6;
#   ψ(s1→s3) = (2−1) + (1/2 − 1/3) − 0 = 7/6 (ℓ⁻ = max(−c̃, 0) = 0 for both).
#   ψ̄: s1 = s3 = (7/6)/(7/6) = 1, s0 = 0 (no incoming edge).  E = w_bc·b + w_pg·ψ̄:
#   s1 1.5, s3 2.  Retained: s1, s3 (ψ̄ > 0); s0 not (ψ̄ = 0, m = 1 < θ_m = 1.1, κ_bc = 0) -> ρ·S₀ = 0.
#   S_pcc: s1 = 17/12·2.5, s3 = 17/12·3 -> S̄⁺: s1 = 2.5/3 = 5/6, s3 = 1.
# Potentials (ω = 0.2): Φ⁺(s3) = 1; Φ⁺(s1) = max(5/6, 0.2·1) = 5/6; Φ⁺(s0) = max(0.2·5/6, 0.04) = 1/6;
#   Φ⁺(s4) = 0.2·1 = 0.2; Φ⁺(s2) = Φ⁺(SUCC) = Φ⁺(T) = 0.  Φ⁻ = 0.
# δ⁺ = max(Φ⁺(s′) − Φ⁺(s), 0) (γ_Φ = w₊ = 1):
#   τ0: s0→s1 5/6−1/6 = 2/3, s1→s3 1−5/6 = 1/6, s3→SUCC 0;  τ1: 2/3, 0, 0;
#   τ2: s0→s4 0.2−1/6 = 1/30, s4→s3 1−0.2 = 0.8.
# r^G = 10·0.2^D(s′) (unreachable -> 0): τ0 [0.4, 2, 10], τ1 [0.4, 0, 0], τ2 [0.4, 2].
# r^M = r^G + c·λ·δ⁺ = r^G + 2.5·δ⁺.
DPOS = [[2 / 3, 1 / 6, 0.0], [2 / 3, 0.0, 0.0], [1 / 30, 0.8]]
RG = [[0.4, 2.0, 10.0], [0.4, 0.0, 0.0], [0.4, 2.0]]
RM = [[0.4 + 2.5 * 2 / 3, 2.0 + 2.5 / 6, 10.0], [0.4 + 2.5 * 2 / 3, 0.0, 0.0], [0.4 + 2.5 / 30, 4.0]]


def norm(x: list[float]) -> np.ndarray:
    """mean_std Norm of a small group (hand formula)."""
    x = np.asarray(x, float)
    if x.size == 1:
        return np.zeros(1)
    dev = x - x.mean()
    return dev / (math.sqrt((dev**2).sum() / (x.size - 1)) + EPS)


def test_milestones_potentials_and_returns_by_hand() -> None:
    c = milegpo_credit(three_group(), preset="alfworld")
    assert c.milestones == pytest.approx({"s1": 5 / 6, "s3": 1.0})
    assert c.traps == {}
    assert c.stats["milestone_candidates"] == 3 and c.stats["milestones_retained"] == 2
    for i in range(3):
        np.testing.assert_allclose(c.delta_pos[i], DPOS[i], atol=1e-12)
        np.testing.assert_allclose(c.delta_neg[i], 0.0)
        np.testing.assert_allclose(c.graph_returns[i], RG[i], rtol=1e-12)
        np.testing.assert_allclose(c.returns[i], RM[i], rtol=1e-12)


def test_advantages_by_hand_alfworld_preset() -> None:
    c = milegpo_credit(three_group(), preset="alfworld")
    # Anchor groups: s0 rows (τ0,τ1,τ2): r^G all 0.4 -> A^G = 0; r^M -> Norm([RM00, RM10, RM20]).
    mix_s0 = norm([RM[0][0], RM[1][0], RM[2][0]])
    # two equal and one lower value: +1/√3, +1/√3, −2/√3 (up to the 1e-6 in the denominator)
    np.testing.assert_allclose(mix_s0, [1 / math.sqrt(3), 1 / math.sqrt(3), -2 / math.sqrt(3)], rtol=1e-5)
    # s1 rows (τ0, τ1): r^G {2, 0}, r^M {2.41667, 0}; s3, s2, s4 singletons -> 0.
    g_s1, mix_s1 = norm([RG[0][1], RG[1][1]]), norm([RM[0][1], RM[1][1]])
    eta = 0.2
    step = lambda ag, am: ag + eta * (am - ag)
    np.testing.assert_allclose(c.step[0], [step(0, mix_s0[0]), step(g_s1[0], mix_s1[0]), 0.0], rtol=1e-12)
    np.testing.assert_allclose(c.step[1], [step(0, mix_s0[1]), step(g_s1[1], mix_s1[1]), 0.0], rtol=1e-12)
    np.testing.assert_allclose(c.step[2], [step(0, mix_s0[2]), 0.0], rtol=1e-12, atol=1e-15)
    # Episode term: Z rows τ0 10,10,10, others 0 (8 rows): ±6.25 or −3.75 over √(187.5/7).
    sd = math.sqrt(187.5 / 7)
    np.testing.assert_allclose(c.advantages[0], c.step[0] + 6.25 / (sd + EPS), rtol=1e-12)
    np.testing.assert_allclose(c.advantages[2], c.step[2] - 3.75 / (sd + EPS), rtol=1e-12)


def test_pcc_off_and_uniform_md() -> None:
    # pcc=False: S̄⁺ = S₀⁺ / max = s0 (7/6)/(17/12) = 14/17, s1 = s3 = 1.
    c = milegpo_credit(three_group(), pcc=False)
    assert c.milestones == pytest.approx({"s0": 14 / 17, "s1": 1.0, "s3": 1.0})
    # Then Φ⁺(s0) = 14/17 and Φ⁺(s1) = 1 -> δ⁺(s0→s1) = 1 − 14/17 = 3/17.
    assert c.delta_pos[0][0] == pytest.approx(3 / 17)
    # rcs=False, pcc=False: every candidate weighs 1 -> Φ⁺ = 1 on s0, s1, s3 -> δ⁺(s0→s1) = 0,
    # and s0→s4: Φ⁺(s4) = 0.2·1 -> δ⁺ = max(0.2 − 1, 0) = 0.
    u = milegpo_credit(three_group(), rcs=False, pcc=False)
    assert u.milestones == {"s0": 1.0, "s1": 1.0, "s3": 1.0}
    assert u.delta_pos[0][0] == 0.0 and u.delta_pos[2][0] == 0.0
    # ... and s4→s3 gains 1 − 0.2 = 0.8
    assert u.delta_pos[2][1] == pytest.approx(0.8)


def test_webshop_preset_retains_by_coverage_and_branch() -> None:
    # WebShop: θ_m = 0.5 so s0 (m = 1) is retained with E(s0) = 0 -> S_pcc(s0) = 7/6;
    # s1 = 17/12·2.5, s3 = 17/12·3 = 4.25 -> S̄⁺: s0 = (7/6)/4.25 = 14/51, s1 = 5/6, s3 = 1.
    c = milegpo_credit(three_group(), preset="webshop")
    assert c.milestones == pytest.approx({"s0": 14 / 51, "s1": 5 / 6, "s3": 1.0})
    # ρ = 0.5 would only matter for non-retained candidates; mean-only norm and η = 1:
    # the step term is Norm_mean(r^M) within the state: s0 rows r^M.
    est = get_estimator("milegpo", preset="webshop")
    assert (est.norm, est.eta, est.rho, est.kappa_bc, est.theta_m) == ("mean", 1.0, 0.5, 1.0, 0.5)
    r = est([three_group()])[0]
    rm = np.array([x[0] for x in r.shaped_rewards])  # r^M of the three s0 rows
    step = milegpo_credit(three_group(), preset="webshop").step
    np.testing.assert_allclose([step[i][0] for i in range(3)], rm - rm.mean(), rtol=1e-12)
    # Episode term in mean mode: Z − mean = 6.25 (τ0), −3.75 (others)
    np.testing.assert_allclose(r.advantages[0][0], step[0][0] + 6.25, rtol=1e-12)


def trap_group() -> list[Trajectory]:
    """τ0 wins s0→s1→SUCC; τ1 s0→t, loops t→t, then dies; τ2 s0→t→x→dies;
    τ3 s0→s1→y (fails, ends in y)."""
    return [
        Trajectory("T", 0, [Step("s0", "a"), Step("s1", "b", reward=10.0)], success=True),
        Trajectory("T", 1, [Step("s0", "d"), Step("t", "l"), Step("t", "m")]),
        Trajectory("T", 2, [Step("s0", "d"), Step("t", "e"), Step("x", "f")]),
        Trajectory("T", 3, [Step("s0", "a"), Step("s1", "g", next_state_key="y")]),
    ]


def test_trap_score_potential_and_negative_increment() -> None:
    c = milegpo_credit(trap_group())
    # p_q⁺ = 1/4, p_q⁻ = 3/4.  t: visited only by failed τ1 (twice: a revisit) and τ2 -> candidate.
    # S⁻(t) = w_f·max(p⁻(t) − p_q⁻, 0) + w_l·f⁻(t)·L(t) = 1·(1 − 3/4) + 0.25·(2/3)·(1/2) = 1/3 ≥ 0.1.
    # x (τ2 only, once) and y (τ3's end, once) are not candidates.  S̄⁻(t) = 1.
    assert c.traps == {"t": 1.0}
    assert c.stats["traps"] == 1
    # Φ⁻(t) = 1, Φ⁻(s0) = 0.2 (s0→t), Φ⁻ = 0 elsewhere.  δ⁻ = max(w₋Φ⁻(s′) − w₋Φ⁻(s), 0), w₋ = 0.25:
    #   s0→t: 0.25 − 0.05 = 0.2;  t→t: 0;  t→dead end: 0;  t→x: 0;  s0→s1: 0.
    np.testing.assert_allclose(c.delta_neg[1], [0.2, 0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(c.delta_neg[2], [0.2, 0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(c.delta_neg[0], [0.0, 0.0])
    # t cannot reach a milestone, so δ⁺(s0→t) = 0 and r^M − r^G = −c·λ·0.2 = −0.5 there
    assert c.returns[1][0] - c.graph_returns[1][0] == pytest.approx(-0.5)
    assert -0.5 >= -10 * 0.25 * 0.25  # within Proposition 3's lower bound −c·λ·w₋ = −0.625


def test_trap_admission_threshold_and_support() -> None:
    # with trap_min_score above 1/3 the trap is not admitted
    assert milegpo_credit(trap_group(), trap_min_score=0.34).traps == {}
    # requiring 3 failed visitors still admits t through its revisit
    assert milegpo_credit(trap_group(), trap_min_failed=3).traps == {"t": 1.0}


# ---- Propositions (MileGPO App. B) --------------------------------------------------------

STATES = [f"s{i}" for i in range(6)]


@st.composite
def groups(draw: st.DrawFn) -> list[Trajectory]:
    n = draw(st.integers(1, 6))
    out = []
    for i in range(n):
        length = draw(st.integers(0, 7))
        win = length > 0 and draw(st.booleans())
        steps = [Step(draw(st.sampled_from(STATES)), draw(st.sampled_from("abc")),
                      penalty=draw(st.sampled_from([0.0, -0.1]))) for _ in range(length)]
        if win:
            steps[-1].reward = 10.0
        out.append(Trajectory("T", i, steps, score=float(win), success=win))
    return out


@settings(max_examples=60, deadline=None)
@given(groups(), st.sampled_from(["alfworld", "webshop"]))
def test_prop1_eta_zero_reproduces_graphgpo_exactly(group: list[Trajectory], preset: str) -> None:
    norm_mode = PRESETS[preset]["norm"]
    mile = milegpo_credit(group, preset=preset, eta=0.0)
    graph = graphgpo_credit(group, gamma=0.2, success_reward=10.0, unreachable="zero", norm=norm_mode)
    for a, b in zip(mile.advantages, graph.advantages):
        assert np.array_equal(a, b)
    # and with GraphGPO's own convention
    mile = milegpo_credit(group, preset=preset, eta=0.0, unreachable="max_plus_one")
    graph = graphgpo_credit(group, gamma=0.2, norm=norm_mode)
    for a, b in zip(mile.step, graph.step):
        assert np.array_equal(a, b)
    # η = 1 gives the normalised shaped term A^mix
    full = milegpo_credit(group, preset=preset, eta=1.0)
    for a, b in zip(full.step, full.mix_step):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(groups(), st.sampled_from(["alfworld", "webshop"]), st.floats(0.05, 1.0), st.floats(0.1, 1.0))
def test_prop3_correction_bounds(group: list[Trajectory], preset: str, omega: float, gamma_phi: float) -> None:
    c = milegpo_credit(group, preset=preset, omega=omega, gamma_phi=gamma_phi)
    cl = 10 * 0.25
    for dp, dn, rm, rg in zip(c.delta_pos, c.delta_neg, c.returns, c.graph_returns):
        assert np.all((dp >= 0) & (dp <= 1.0 + 1e-12))
        assert np.all((dn >= 0) & (dn <= 0.25 + 1e-12))
        corr = rm - rg
        assert np.all(corr >= -cl * 0.25 - 1e-12) and np.all(corr <= cl * 1.0 + 1e-12)


def test_prop2_distance_tie_resolved_by_shaping() -> None:
    # In three_group() the rows s0-a->s1 and s0-f->s4 tie under GraphGPO (D(s1) = D(s4) = 2).
    graph = graphgpo_credit(three_group(), gamma=0.2, unreachable="zero")
    assert graph.step[0][0] == graph.step[2][0] == 0.0
    for eta in (0.2, 0.5, 1.0):
        c = milegpo_credit(three_group(), eta=eta)
        # B(e1) − B(e2) = w_step·η·(A^mix(e1) − A^mix(e2))  [Eq. 27]
        lhs = c.step[0][0] - c.step[2][0]
        rhs = eta * (c.mix_step[0][0] - c.mix_step[2][0])
        assert lhs == pytest.approx(rhs, rel=1e-12)
        # the branch through the milestone s1 ranks above the one through s4
        assert c.step[0][0] > c.step[2][0]
    assert milegpo_credit(three_group()).stats["ties_resolved_share"] == 1.0


def test_preset_and_overrides() -> None:
    est = MileGPO()
    assert est.preset == "alfworld" and est.eta == 0.2 and est.norm == "mean_std" and est.theta_m == 1.1
    est = get_estimator("milegpo", preset="webshop", eta=0.3, c=5)
    assert est.eta == 0.3 and est.c == 5.0 and est.rho == 0.5
    assert est.params()["kappa_bc"] == 1.0


@pytest.mark.parametrize("kwargs, match", [
    ({"preset": "sokoban"}, "preset"),
    ({"omega": 0.0}, "omega"),
    ({"gamma_g": 2.0}, "gamma_g"),
    ({"lam": -1.0}, "lam"),
    ({"norm": "z"}, "norm"),
    ({"unreachable": "never"}, "unreachable"),
    ({"eta": float("nan")}, "eta"),
])
def test_bad_parameters(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        get_estimator("milegpo", **kwargs)


def test_no_success_means_no_milestones() -> None:
    t0 = Trajectory("T", 0, [Step("s0", "a"), Step("t", "b"), Step("t", "b")])
    t1 = Trajectory("T", 1, [Step("s0", "c"), Step("s2", "d")])
    c = milegpo_credit([t0, t1])
    assert c.milestones == {}
    # t: one failed visitor who revisits: S⁻ = 1·max(1 − 1, 0) + 0.25·(1/2)·1 = 0.125 ≥ 0.1
    assert c.traps == {"t": 1.0}
    # graph returns are all 0 (no success); the step term only reflects the trap
    assert all(np.array_equal(r, np.zeros_like(r)) for r in c.graph_returns)

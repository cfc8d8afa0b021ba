"""MileGPO: milestone and trap shaping on the GraphGPO graph (SPEC §4.4; MileGPO §3, Table 5).

Built on the same per-task :class:`~wrappers.credit.graph.TransitionGraph` as GraphGPO.
d(u, v) is the directed unit-cost distance; when v is unreachable every distance-decayed
term is 0 [MileGPO §3.1] (``unreachable="zero"``; ``"max_plus_one"`` applies GraphGPO's
convention to the graph return r^G only).  Notation: K trajectories, y_i success,
p_q⁺ = mean y_i, p_q⁻ = 1 − p_q⁺; a trajectory *visits* the source state of each of its
steps and, when it failed, the canonical state it ended in (the virtual success node and
unnamed dead ends are never visited).

1. **Milestone discovery (MD)** [§3.2].  Candidates: non-final states visited by successful
   trajectories.  With p⁺(v) the success rate of the trajectories visiting v, m(v) the
   share of successful trajectories visiting v and C(v) = (in+out degree)/max over the
   candidates (degrees over distinct (u, v) edges):
   S₀⁺(v) = w_s·max(p⁺(v) − p_q⁺, 0) + w_m·m(v) + w_c·C(v).
   Traps: states visited only by failed trajectories, by ≥ ``trap_min_failed`` (2) of them
   or revisited, with S⁻(v) = w_f·max(p⁻(v) − p_q⁻, 0) + w_l·f⁻(v)·L(v) ≥
   ``trap_min_score`` (0.1).  f⁻(v) = share of failed trajectories visiting v.
   L(v), the revisit term, is *our reading* (SPEC §4.4 and the available paper text do not
   define it): the share of the failed trajectories visiting v that visit it more than once.
2. **Reliability-calibrated shaping (RCS)** [§3.3, Eqs. 9–10].  Task-max-normalised scores
   S̄±; potentials Φ±(s) = max_{v∈S±} S̄±(v)·ω^{d(s,v)}; increments
   δ_t^± = max(γ_Φ·w_±·Φ±(s_{t+1}) − w_±·Φ±(s_t), 0).  ``rcs=False`` gives every mined
   candidate unit weight (the paper's "uniform MD" replay).
3. **Progress-contrastive calibration (PCC)** [§3.4].  For edges e = (u, v): the branch
   margin c̃(e) = p⁺(e) − mean of the sibling branches' p⁺ (other edges out of u; 0 without
   siblings), divided by the task's max |c̃|; b(v) = max c(e) over incoming e with c(e) > 0
   traversed by a successful trajectory.  Progress ψ(e) = α_d·(d(u,g) − d(v,g)) +
   α_s·(p⁺(v) − p_q⁺) − α_f·ℓ⁻(e), ℓ⁻(e) = max(p⁻(e) − mean sibling p⁻, 0), or without
   siblings the node version max(p⁻(v) − p_q⁻, 0); ψ̄(v) = best ψ > 0 over incoming edges
   traversed by a successful trajectory, task-max-normalised (0 if none).  Self-loops are
   siblings but never incoming edges of their own state (they make no progress into it).
   E(v) = w_bc·b(v) + w_pg·ψ̄(v); retained if ψ̄ > 0, or m(v) ≥ θ_m, or (κ_bc and b > 0);
   S_pcc = S₀⁺·(1 + w_pcc·E) if retained else ρ·S₀⁺; then max-normalised.  ``pcc=False``
   skips this stage.
4. **Return and advantage** [Eqs. 1, 20–22]: r_t^G = c·γ_G^{d(s_{t+1},g)},
   r_t^M = r_t^G + c·λ·(δ_t⁺ − δ_t⁻); A^G = Norm_{task,state}(r^G),
   A^mix = Norm_{task,state}(r^M);
   A_t = step_weight·[A^G + η·(A^mix − A^G)] + episode_weight·Norm_task(Z_i).

Properties [App. B]: η = 0 gives GraphGPO's step term exactly (Prop. 1); equal distances
are ordered by A^mix (Prop. 2); −c·λ·w₋ ≤ r^M − r^G ≤ c·λ·w₊ (Prop. 3).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rubrics.trajectory import Trajectory
from wrappers.credit.base import CreditResult, Estimator, register_estimator
from wrappers.credit.common import NORMS, check_choice
from wrappers.credit.graph import (
    UNREACHABLE,
    RowTable,
    TransitionGraph,
    compress_keys,
    graph_stats_batch,
    group_pairs,
    segment_max,
    segment_normalize,
)

__all__ = ["PRESETS", "MileCredit", "MileGPO", "milegpo_batch", "milegpo_credit"]

#: Table 5 values shared by both environments.
_SHARED: dict[str, float] = {
    "c": 10.0, "gamma_g": 0.2, "omega": 0.2, "gamma_phi": 1.0, "lam": 0.25,
    "w_pos": 1.0, "w_neg": 0.25, "w_s": 1.0, "w_m": 1.0, "w_f": 1.0, "w_c": 0.25, "w_l": 0.25,
    "alpha_d": 1.0, "alpha_s": 1.0, "alpha_f": 1.0, "w_bc": 1.0, "w_pg": 1.0, "w_pcc": 1.0,
    "step_weight": 1.0, "episode_weight": 1.0,
}
#: The environment recipes of MileGPO Table 5 (A.5).
PRESETS: dict[str, dict[str, Any]] = {
    "alfworld": {**_SHARED, "theta_m": 1.1, "rho": 0.0, "eta": 0.2, "kappa_bc": 0.0, "norm": "mean_std"},
    "webshop": {**_SHARED, "theta_m": 0.5, "rho": 0.5, "eta": 1.0, "kappa_bc": 1.0, "norm": "mean"},
}
_PARAMS = tuple(PRESETS["alfworld"])


@dataclass
class MileCredit:
    """MileGPO credit of one group with its intermediate quantities (per trajectory lists).

    Attributes:
        advantages: A_t.
        step: The step component A^G + η·(A^mix − A^G) (before ``step_weight``).
        graph_step, mix_step: A^G and A^mix.
        episode: Norm_task(Z).
        graph_returns, returns: r^G and r^M.
        delta_pos, delta_neg: δ⁺ and δ⁻.
        milestones: State key → S̄⁺ (after PCC), for candidates with a positive score.
        traps: State key → S̄⁻ for admitted traps.
        graph: The transition graph the group is part of (a batch graph holds several).
        group: The group's index in ``graph``.
        stats: Diagnostics (graph stats plus milestone/trap counts and shaping summaries).
    """

    advantages: list[np.ndarray]
    step: list[np.ndarray]
    graph_step: list[np.ndarray]
    mix_step: list[np.ndarray]
    episode: list[np.ndarray]
    graph_returns: list[np.ndarray]
    returns: list[np.ndarray]
    delta_pos: list[np.ndarray]
    delta_neg: list[np.ndarray]
    milestones: dict[Hashable, float]
    traps: dict[Hashable, float]
    graph: TransitionGraph
    group: int = 0
    stats: dict[str, Any] = field(default_factory=dict)


def _group_maxnorm(x: np.ndarray, mask: np.ndarray, seg: np.ndarray, n_seg: int) -> np.ndarray:
    """x / (max of x over ``mask`` within its segment) on ``mask``, 0 elsewhere (and 0 where
    that max is not positive): MileGPO's task-max normalisation."""
    top = segment_max(x[mask], seg[mask], n_seg, initial=0.0)[seg]
    ok = mask & (top > 0)
    out = np.zeros_like(x, dtype=np.float64)
    out[ok] = x[ok] / top[ok]
    return out


def _resolve(preset: str, params: dict[str, Any]) -> dict[str, Any]:
    check_choice("preset", preset, tuple(PRESETS))
    unknown = set(params) - set(_PARAMS)
    if unknown:
        raise TypeError(f"unknown MileGPO parameter(s) {sorted(unknown)}; accepted: {', '.join(_PARAMS)}")
    return {**PRESETS[preset], **{k: v for k, v in params.items() if v is not None}}


@dataclass
class _Visits:
    """Who visits what: per task (K, successes, p_q⁺) and per node (visitors, p±(v), revisits)."""

    pq: np.ndarray  # per group: p_q⁺
    pq_n: np.ndarray  # per node: p_q⁺ of its task
    ns_n: np.ndarray  # per node: successful trajectories of its task
    nf_n: np.ndarray  # per node: failed trajectories of its task
    n_vis: np.ndarray  # per node: visiting trajectories
    n_vis_s: np.ndarray  # ... of them successful
    n_vis_f: np.ndarray  # ... of them failed
    revisited: np.ndarray  # some trajectory visits the node more than once
    revisit_f: np.ndarray  # failed trajectories visiting it more than once
    p_plus_v: np.ndarray  # p⁺(v)
    p_minus_v: np.ndarray  # p⁻(v)


def _visits(g: TransitionGraph) -> _Visits:
    """Visits: the source states of the steps, plus the final canonical state of failed trajectories."""
    nn, G = g.n_nodes, g.n_groups
    ngr = g.node_group
    real = g._real
    k_traj = np.bincount(g.traj_group, minlength=G).astype(float)
    n_succ = np.bincount(g.traj_group, weights=g.success.astype(float), minlength=G)
    n_fail = k_traj - n_succ
    pq = n_succ / np.maximum(k_traj, 1.0)
    pq_n, ns_n, nf_n = pq[ngr], n_succ[ngr], n_fail[ngr]

    last = g.offsets[1:] - 1
    ends = (g.offsets[1:] > g.offsets[:-1]) & ~g.success
    end_nodes = g.dst[last[ends]]
    keep = real[end_nodes]
    vt = np.concatenate([g.traj, np.flatnonzero(ends)[keep]])
    vn = np.concatenate([g.src, end_nodes[keep]])
    tv, counts = np.unique(vt * max(nn, 1) + vn, return_counts=True)
    tu, nu = tv // max(nn, 1), tv % max(nn, 1)
    ys = g.success[tu]
    n_vis = np.bincount(nu, minlength=nn).astype(float)
    n_vis_s = np.bincount(nu, weights=ys.astype(float), minlength=nn)
    n_vis_f = n_vis - n_vis_s
    again = counts > 1
    revisited = np.bincount(nu, weights=again.astype(float), minlength=nn) > 0
    revisit_f = np.bincount(nu, weights=(again & ~ys).astype(float), minlength=nn)
    p_plus_v = np.where(n_vis > 0, n_vis_s / np.maximum(n_vis, 1), 0.0)
    p_minus_v = np.where(n_vis > 0, n_vis_f / np.maximum(n_vis, 1), 0.0)
    return _Visits(pq, pq_n, ns_n, nf_n, n_vis, n_vis_s, n_vis_f, revisited, revisit_f, p_plus_v, p_minus_v)


def _discover(g: TransitionGraph, v: _Visits, p: dict[str, Any], trap_min_score: float, trap_min_failed: int,
              rcs: bool) -> tuple[np.ndarray, ...]:
    """Milestone discovery [MileGPO §3.2]: (candidates, m(v), S₀⁺, traps, S⁻) per node."""
    nn, G = g.n_nodes, g.n_groups
    ngr = g.node_group
    real = g._real
    deg = (np.bincount(g.edge_v, minlength=nn) + np.bincount(g.edge_u, minlength=nn)).astype(float)
    cand = real & (v.n_vis_s > 0)
    m = np.where(v.ns_n > 0, v.n_vis_s / np.maximum(v.ns_n, 1), 0.0)
    cent = _group_maxnorm(deg, cand, ngr, G)
    s0 = np.where(cand, p["w_s"] * np.maximum(v.p_plus_v - v.pq_n, 0.0) + p["w_m"] * m + p["w_c"] * cent, 0.0)
    f_minus = np.where(v.nf_n > 0, v.n_vis_f / np.maximum(v.nf_n, 1), 0.0)
    loop = np.where(v.n_vis_f > 0, v.revisit_f / np.maximum(v.n_vis_f, 1), 0.0)
    trap_cand = real & (v.n_vis_s == 0) & (v.n_vis > 0) & ((v.n_vis_f >= trap_min_failed) | v.revisited)
    s_neg = np.where(trap_cand, p["w_f"] * np.maximum(v.p_minus_v - (1.0 - v.pq_n), 0.0)
                     + p["w_l"] * f_minus * loop, 0.0)
    traps = trap_cand & (s_neg >= trap_min_score)
    if not rcs:  # uniform MD: every mined candidate gets unit weight
        s0 = cand.astype(float)
        s_neg = traps.astype(float)
    return cand, m, s0, traps, s_neg


def _calibrate(g: TransitionGraph, v: _Visits, p: dict[str, Any], d: np.ndarray, cand: np.ndarray, m: np.ndarray,
               s0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Progress-contrastive calibration [§3.4]: (retained candidates, S_pcc before normalisation)."""
    nn, G = g.n_nodes, g.n_groups
    ngr, pq = g.node_group, v.pq
    eu, ev = g.edge_u, g.edge_v
    ne = eu.size
    row_edge = np.searchsorted(eu * nn + ev, g.src * nn + g.dst)
    te = np.unique(g.traj * ne + row_edge)  # (trajectory, edge) traversals
    t_of, e_of = te // ne, te % ne
    n_e = np.bincount(e_of, minlength=ne).astype(float)
    n_e_s = np.bincount(e_of, weights=g.success[t_of].astype(float), minlength=ne)
    p_e = n_e_s / n_e
    outdeg = np.bincount(eu, minlength=nn)
    has_sib = outdeg[eu] > 1
    sib_sum = np.bincount(eu, weights=p_e, minlength=nn)[eu] - p_e
    margin = np.where(has_sib, p_e - sib_sum / np.maximum(outdeg[eu] - 1, 1), 0.0)
    eg = ngr[eu]
    top = segment_max(np.abs(margin), eg, G, initial=0.0)[eg]
    cn = np.where(top > 0, margin / np.where(top > 0, top, 1.0), 0.0)
    into = (eu != ev) & (n_e_s > 0)  # incoming, not a self-loop, has a successful user
    b = np.zeros(nn)
    sel = into & (cn > 0)
    np.maximum.at(b, ev[sel], cn[sel])
    # excess failure rate: p⁻(e) − mean sibling p⁻ = −(p⁺(e) − mean sibling p⁺)
    excess = np.where(has_sib, np.maximum(-margin, 0.0), np.maximum(v.p_minus_v[ev] - (1.0 - pq[eg]), 0.0))
    ok = into & np.isfinite(d[eu]) & np.isfinite(d[ev])
    psi = (p["alpha_d"] * (d[eu[ok]] - d[ev[ok]]) + p["alpha_s"] * (v.p_plus_v[ev[ok]] - pq[eg[ok]])
           - p["alpha_f"] * excess[ok])
    psi_raw = np.zeros(nn)
    np.maximum.at(psi_raw, ev[ok], psi)  # best ψ > 0 (0 when none is positive)
    psi_bar = _group_maxnorm(psi_raw, cand, ngr, G)
    energy = p["w_bc"] * b + p["w_pg"] * psi_bar
    retained = cand & ((psi_bar > 0) | (m >= p["theta_m"]) | ((p["kappa_bc"] != 0) & (b > 0)))
    s_pos = np.where(retained, s0 * (1.0 + p["w_pcc"] * energy), p["rho"] * s0)
    return retained, np.where(cand, s_pos, 0.0)


def _shaped_returns(g: TransitionGraph, p: dict[str, Any], unreachable: str, sbar_pos: np.ndarray,
                    sbar_neg: np.ndarray) -> tuple[np.ndarray, ...]:
    """RCS potentials, increments and returns [§3.3, Eqs. 1, 9–10, 20]: (δ⁺, δ⁻, r^G, r^M) per row."""
    phi_pos = g.max_product_potential(sbar_pos, p["omega"])
    phi_neg = g.max_product_potential(sbar_neg, p["omega"])
    gp, wp, wn = p["gamma_phi"], p["w_pos"], p["w_neg"]
    dpos = np.maximum(gp * wp * phi_pos[g.dst] - wp * phi_pos[g.src], 0.0)
    dneg = np.maximum(gp * wn * phi_neg[g.dst] - wn * phi_neg[g.src], 0.0)
    r_g = g.graph_returns(p["gamma_g"], p["c"], unreachable)
    r_m = r_g + p["c"] * p["lam"] * (dpos - dneg)
    return dpos, dneg, r_g, r_m


def _diagnostics(g: TransitionGraph, unreachable: str, out: dict[str, Any], retained: np.ndarray) -> list[dict]:
    """Per group: the graph stats plus milestone/trap counts and shaping summaries."""
    G, ngr = g.n_groups, g.node_group
    cand, sbar_pos, traps = out["cand"], out["sbar_pos"], out["traps"]
    r_g, r_m, dpos, dneg = out["r_g"], out["r_m"], out["dpos"], out["dneg"]
    stats = graph_stats_batch(g, unreachable)
    corr = r_m - r_g
    rows = np.bincount(g.group, minlength=G).astype(float)

    def per_group_nodes(mask: np.ndarray) -> np.ndarray:
        return np.bincount(ngr[mask], minlength=G)

    def row_mean(x: np.ndarray) -> np.ndarray:
        return np.where(rows > 0, np.bincount(g.group, weights=x, minlength=G) / np.maximum(rows, 1), 0.0)

    counts_ms = per_group_nodes(cand & (sbar_pos > 0))
    counts_cand = per_group_nodes(cand)
    counts_ret = per_group_nodes(retained)
    counts_traps = per_group_nodes(traps)
    dpos_mean, dneg_mean = row_mean(dpos), row_mean(dneg)
    shaped = row_mean((corr != 0).astype(float))
    cmin = -segment_max(-corr, g.group, G, initial=0.0)
    cmax = segment_max(corr, g.group, G, initial=0.0)
    resolved = _ties_resolved(g, r_m, unreachable)
    for k, st in enumerate(stats):
        st.update({
            "milestones": int(counts_ms[k]),
            "milestone_candidates": int(counts_cand[k]),
            "milestones_retained": int(counts_ret[k]),
            "traps": int(counts_traps[k]),
            "delta_pos_mean": float(dpos_mean[k]),
            "delta_neg_mean": float(dneg_mean[k]),
            "shaped_share": float(shaped[k]),
            "correction_min": float(cmin[k]),
            "correction_max": float(cmax[k]),
            "ties_resolved_share": float(resolved[k]),
        })
    return stats


def _compute(g: TransitionGraph, p: dict[str, Any], unreachable: str, episode_norm: str, trap_min_score: float,
             trap_min_failed: int, rcs: bool, pcc: bool) -> dict[str, Any]:
    """The MileGPO pipeline on a (batch) graph; every array is per node or per row."""
    nn, G = g.n_nodes, g.n_groups
    v = _visits(g)
    cand, m, s0, traps, s_neg = _discover(g, v, p, trap_min_score, trap_min_failed, rcs)
    d = g.success_distances()
    if pcc and cand.any():
        retained, s_pos = _calibrate(g, v, p, d, cand, m, s0)
    else:
        retained, s_pos = cand, s0
    sbar_pos = _group_maxnorm(s_pos, cand, g.node_group, G)
    sbar_neg = _group_maxnorm(s_neg, traps, g.node_group, G)
    dpos, dneg, r_g, r_m = _shaped_returns(g, p, unreachable, sbar_pos, sbar_neg)
    # ---- advantages [Eqs. 21–22] ----------------------------------------------------
    a_g = segment_normalize(r_g, g.src, p["norm"], nn)
    a_mix = segment_normalize(r_m, g.src, p["norm"], nn)
    step = a_g + p["eta"] * (a_mix - a_g)
    episode = g.episode_term(p["norm"], episode_norm)
    adv = p["step_weight"] * step + p["episode_weight"] * episode
    out = {"adv": adv, "step": step, "a_g": a_g, "a_mix": a_mix, "episode": episode, "r_g": r_g, "r_m": r_m,
           "dpos": dpos, "dneg": dneg, "sbar_pos": sbar_pos, "sbar_neg": sbar_neg, "cand": cand, "traps": traps}
    out["stats"] = _diagnostics(g, unreachable, out, retained)
    return out


def milegpo_batch(groups: Sequence[Sequence[Trajectory]], *, preset: str = "alfworld", unreachable: str = "zero",
                  episode_norm: str = "rows", trap_min_score: float = 0.1, trap_min_failed: int = 2,
                  rcs: bool = True, pcc: bool = True, graph: TransitionGraph | None = None,
                  **params: Any) -> list[MileCredit]:
    """MileGPO credit for a batch of groups, vectorised over the whole batch.

    Args:
        groups: One sequence of sibling trajectories per task (validated).
        preset: ``"alfworld"`` or ``"webshop"``; the Table 5 defaults.
        unreachable: Convention for r^G (``"zero"``: MileGPO; ``"max_plus_one"``: GraphGPO).
        episode_norm: ``"rows"`` or ``"trajectories"``.
        trap_min_score, trap_min_failed: Trap admission (0.1; 2 failed visitors unless revisited).
        rcs, pcc: Stage switches (see the module docstring).
        graph: A prebuilt :meth:`TransitionGraph.from_groups` of ``groups``.
        **params: Any Table 5 symbol (``c``, ``gamma_g``, ``omega``, ... ``eta``, ``norm``,
            ``step_weight``, ``episode_weight``) overriding the preset.

    Returns:
        One :class:`MileCredit` per group, in order.
    """
    p = _resolve(preset, params)
    check_choice("unreachable", unreachable, UNREACHABLE)
    g = TransitionGraph.from_groups(groups) if graph is None else graph
    out = _compute(g, p, unreachable, episode_norm, trap_min_score, trap_min_failed, rcs, pcc)
    names = ("adv", "step", "a_g", "a_mix", "episode", "r_g", "r_m", "dpos", "dneg")
    parts = {k: g.split_groups(out[k]) for k in names}
    ms = {k: {} for k in range(g.n_groups)}
    tr = {k: {} for k in range(g.n_groups)}
    for v in np.flatnonzero(out["cand"] & (out["sbar_pos"] > 0)).tolist():
        ms[int(g.node_group[v])][g.keys[v]] = float(out["sbar_pos"][v])
    for v in np.flatnonzero(out["traps"]).tolist():
        tr[int(g.node_group[v])][g.keys[v]] = float(out["sbar_neg"][v])
    return [
        MileCredit(
            advantages=parts["adv"][k], step=parts["step"][k], graph_step=parts["a_g"][k], mix_step=parts["a_mix"][k],
            episode=parts["episode"][k], graph_returns=parts["r_g"][k], returns=parts["r_m"][k],
            delta_pos=parts["dpos"][k], delta_neg=parts["dneg"][k], milestones=ms[k], traps=tr[k],
            graph=g, group=k, stats=out["stats"][k],
        )
        for k in range(g.n_groups)
    ]


def milegpo_credit(group: Sequence[Trajectory], **kwargs: Any) -> MileCredit:
    """MileGPO credit for one group; takes the keyword arguments of :func:`milegpo_batch`."""
    return milegpo_batch([group], **kwargs)[0]


def _ties_resolved(g: TransitionGraph, r_m: np.ndarray, unreachable: str) -> np.ndarray:
    """Per group: among same-state action pairs tied under r^G (equal D(s′)), the share that
    r^M separates (|Δr^M| > 1e-9) [MileGPO App. C.1]; ``nan`` without ties."""
    G = g.n_groups
    if r_m.size == 0:
        return np.full(G, np.nan)
    nn, na = g.n_nodes, max(len(g.actions), 1)
    df = g.filled_distances(unreachable)[g.dst]
    dk = np.where(np.isfinite(df), df, -1.0).astype(np.int64) + 1
    _, first = np.unique((g.src * na + g.action) * nn + g.dst, return_index=True)  # distinct (u, a, v)
    u, a, dd = g.src[first].astype(np.int64), g.action[first], dk[first]
    eg = g.node_group[u]
    _, rid = np.unique(np.round(r_m[first], 9), return_inverse=True)
    rid = rid.reshape(-1).astype(np.int64)
    k_ud = compress_keys(u * (int(dd.max()) + 1) + dd)
    ties = group_pairs(k_ud, eg, G) - group_pairs(k_ud * na + a, eg, G)
    k_udr = compress_keys(k_ud * (int(rid.max()) + 1) + rid)
    unresolved = group_pairs(k_udr, eg, G) - group_pairs(k_udr * na + a, eg, G)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ties > 0, (ties - unresolved) / np.maximum(ties, 1), np.nan)


@register_estimator("milegpo")
class MileGPO(Estimator):
    """Milestone Inference with Local Evidence for Graph-Based Policy Optimisation.

    Parameters are the symbols of MileGPO Table 5 spelled out; ``None`` takes the
    ``preset`` value (``"alfworld"`` or ``"webshop"``, see :data:`PRESETS`):
    ``c`` (return scale 10), ``gamma_g`` (γ_G 0.2), ``omega`` (ω 0.2), ``gamma_phi`` (γ_Φ 1),
    ``lam`` (λ 0.25), ``w_pos``/``w_neg`` (w₊ 1 / w₋ 0.25), ``w_s``/``w_m``/``w_f`` (1),
    ``w_c``/``w_l`` (0.25), ``alpha_d``/``alpha_s``/``alpha_f``/``w_bc``/``w_pg``/``w_pcc``
    (1), ``theta_m`` (θ_m 1.1 | 0.5), ``rho`` (ρ 0 | 0.5), ``kappa_bc`` (κ_bc 0 | 1),
    ``eta`` (η 0.2 | 1), ``norm`` ("mean_std" | "mean"), ``step_weight``/``episode_weight``
    (w_step, w_episode 1).  Further: ``unreachable`` ("zero"), ``episode_norm`` ("rows"),
    ``trap_min_score`` (0.1), ``trap_min_failed`` (2), ``rcs`` and ``pcc`` stage switches.

    ``CreditResult.shaped_rewards`` holds r^M.

    Example:
        >>> from rubrics.trajectory import Step, Trajectory
        >>> win = Trajectory("t", 0, [Step("s0", "a"), Step("s1", "b", reward=10.0)], success=True)
        >>> loss = Trajectory("t", 1, [Step("s0", "c"), Step("s2", "d")])
        >>> est = MileGPO(preset="webshop")
        >>> est.eta, est.norm, est.theta_m
        (1.0, 'mean', 0.5)
        >>> r = est([[win, loss]])[0]
        >>> r.stats["milestones"], r.stats["traps"]
        (2, 0)
    """

    def __init__(
        self, *, preset: str = "alfworld",
        c: float | None = None, gamma_g: float | None = None, omega: float | None = None,
        gamma_phi: float | None = None, lam: float | None = None, w_pos: float | None = None,
        w_neg: float | None = None, w_s: float | None = None, w_m: float | None = None,
        w_c: float | None = None, w_f: float | None = None, w_l: float | None = None,
        alpha_d: float | None = None, alpha_s: float | None = None, alpha_f: float | None = None,
        w_bc: float | None = None, w_pg: float | None = None, w_pcc: float | None = None,
        theta_m: float | None = None, rho: float | None = None, kappa_bc: float | None = None,
        eta: float | None = None, norm: str | None = None, step_weight: float | None = None,
        episode_weight: float | None = None, unreachable: str = "zero", episode_norm: str = "rows",
        trap_min_score: float = 0.1, trap_min_failed: int = 2, rcs: bool = True, pcc: bool = True,
    ) -> None:
        check_choice("preset", preset, tuple(PRESETS))
        check_choice("unreachable", unreachable, UNREACHABLE)
        check_choice("episode_norm", episode_norm, ("rows", "trajectories"))
        self.preset = preset
        given = dict(locals())
        for name in _PARAMS:
            value = given[name]
            value = PRESETS[preset][name] if value is None else value
            if name != "norm":
                value = float(value)
                if not np.isfinite(value):
                    raise ValueError(f"{name} must be finite; got {value}")
            setattr(self, name, value)
        check_choice("norm", self.norm, NORMS)
        for name in ("gamma_g", "omega", "gamma_phi"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in (0, 1]; got {getattr(self, name)}")
        for name in ("c", "lam", "w_pos", "w_neg", "w_s", "w_m", "w_c", "w_f", "w_l", "rho"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0; got {getattr(self, name)}")
        if trap_min_failed < 1:
            raise ValueError(f"trap_min_failed must be >= 1; got {trap_min_failed}")
        self.unreachable = unreachable
        self.episode_norm = episode_norm
        self.trap_min_score = float(trap_min_score)
        self.trap_min_failed = int(trap_min_failed)
        self.rcs = bool(rcs)
        self.pcc = bool(pcc)

    def compute(self, groups: Sequence[Sequence[Trajectory]]) -> list[CreditResult]:
        """Credit for validated groups, in one vectorised pass over the batch."""
        return self.compute_rows(TransitionGraph.from_groups(groups))

    def compute_rows(self, rows: RowTable) -> list[CreditResult]:
        """Credit for a :class:`~wrappers.credit.graph.RowTable` (its graph is built from its columns)."""
        p = {k: getattr(self, k) for k in _PARAMS}
        g = rows if isinstance(rows, TransitionGraph) else TransitionGraph.from_columns(rows.columns)
        out = _compute(g, p, self.unreachable, self.episode_norm, self.trap_min_score, self.trap_min_failed,
                       self.rcs, self.pcc)
        adv, shaped = g.split_groups(out["adv"]), g.split_groups(out["r_m"])
        return [CreditResult(a, shaped_rewards=r, stats=st) for a, r, st in zip(adv, shaped, out["stats"])]

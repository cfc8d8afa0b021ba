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

from agent_envs.trajectory import Trajectory
from wrappers.credit.base import CreditResult, Estimator, register_estimator
from wrappers.credit.common import NORMS, check_choice, task_norm
from wrappers.credit.graph import UNREACHABLE, TransitionGraph, graph_stats, segment_normalize

__all__ = ["MileGPO", "MileCredit", "PRESETS", "milegpo_credit"]

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
        graph: The transition graph.
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
    stats: dict[str, Any] = field(default_factory=dict)


def _maxnorm(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """x / max(x[mask]) on mask, 0 elsewhere (all 0 when the max is not positive)."""
    out = np.zeros_like(x)
    if mask.any():
        top = x[mask].max()
        if top > 0:
            out[mask] = x[mask] / top
    return out


def milegpo_credit(group: Sequence[Trajectory], *, preset: str = "alfworld", unreachable: str = "zero",
                   episode_norm: str = "rows", trap_min_score: float = 0.1, trap_min_failed: int = 2,
                   rcs: bool = True, pcc: bool = True, graph: TransitionGraph | None = None,
                   **params: Any) -> MileCredit:
    """MileGPO credit for one group.

    Args:
        group: The task's sibling trajectories (validated).
        preset: ``"alfworld"`` or ``"webshop"``; the Table 5 defaults.
        unreachable: Convention for r^G (``"zero"``: MileGPO; ``"max_plus_one"``: GraphGPO).
        episode_norm: ``"rows"`` or ``"trajectories"``.
        trap_min_score, trap_min_failed: Trap admission (0.1; 2 failed visitors unless revisited).
        rcs, pcc: Stage switches (see the module docstring).
        graph: A prebuilt graph of ``group``.
        **params: Any Table 5 symbol (``c``, ``gamma_g``, ``omega``, ... ``eta``, ``norm``,
            ``step_weight``, ``episode_weight``) overriding the preset.
    """
    check_choice("preset", preset, tuple(PRESETS))
    unknown = set(params) - set(_PARAMS)
    if unknown:
        raise TypeError(f"unknown MileGPO parameter(s) {sorted(unknown)}; accepted: {', '.join(_PARAMS)}")
    p = {**PRESETS[preset], **{k: v for k, v in params.items() if v is not None}}
    g = TransitionGraph(group) if graph is None else graph
    n_traj = len(group)
    nn = g.n_nodes
    y = g.success
    n_succ = int(y.sum())
    n_fail = n_traj - n_succ
    pq = n_succ / n_traj
    real = g.is_real()

    # ---- visits (source states, plus the final canonical state of failed trajectories) --
    last = g.offsets[1:] - 1
    ends = (g.offsets[1:] > g.offsets[:-1]) & ~y
    end_nodes = g.dst[last[ends]]
    keep = real[end_nodes]
    vt = np.concatenate([g.traj, np.flatnonzero(ends)[keep]])
    vn = np.concatenate([g.src, end_nodes[keep]])
    tv, counts = np.unique(vt * nn + vn, return_counts=True)
    tu, nu = tv // max(nn, 1), tv % max(nn, 1)
    n_vis = np.bincount(nu, minlength=nn).astype(float)
    n_vis_s = np.bincount(nu, weights=y[tu].astype(float), minlength=nn)
    n_vis_f = n_vis - n_vis_s
    again = counts > 1
    revisited = np.bincount(nu, weights=again.astype(float), minlength=nn) > 0
    revisit_f = np.bincount(nu, weights=(again & ~y[tu]).astype(float), minlength=nn)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_plus_v = np.where(n_vis > 0, n_vis_s / np.maximum(n_vis, 1), 0.0)
        p_minus_v = np.where(n_vis > 0, n_vis_f / np.maximum(n_vis, 1), 0.0)
    # ---- milestone discovery --------------------------------------------------------
    deg = (np.bincount(g.edge_v, minlength=nn) + np.bincount(g.edge_u, minlength=nn)).astype(float)
    cand = real & (n_vis_s > 0)
    m = n_vis_s / n_succ if n_succ else np.zeros(nn)
    cent = _maxnorm(deg, cand)
    s0 = np.where(cand, p["w_s"] * np.maximum(p_plus_v - pq, 0.0) + p["w_m"] * m + p["w_c"] * cent, 0.0)
    f_minus = n_vis_f / n_fail if n_fail else np.zeros(nn)
    loop = np.where(n_vis_f > 0, revisit_f / np.maximum(n_vis_f, 1), 0.0)
    trap_cand = real & (n_vis_s == 0) & (n_vis > 0) & ((n_vis_f >= trap_min_failed) | revisited)
    s_neg = p["w_f"] * np.maximum(p_minus_v - (1.0 - pq), 0.0) + p["w_l"] * f_minus * loop
    traps = trap_cand & (s_neg >= trap_min_score)
    if not rcs:  # uniform MD: every mined candidate gets unit weight
        s0 = cand.astype(float)
        s_neg = traps.astype(float)
    # ---- progress-contrastive calibration -------------------------------------------
    d = g.success_distances()
    n_retained = int(cand.sum())
    if pcc and cand.any():
        eu, ev = g.edge_u, g.edge_v
        ekeys = eu * nn + ev
        te = np.unique(g.traj * (nn * nn) + g.src * nn + g.dst)
        t_of = te // (nn * nn)
        e_of = np.searchsorted(ekeys, te % (nn * nn))
        ne = len(ekeys)
        n_e = np.bincount(e_of, minlength=ne).astype(float)
        n_e_s = np.bincount(e_of, weights=y[t_of].astype(float), minlength=ne)
        p_e = n_e_s / n_e
        outdeg = np.bincount(eu, minlength=nn)
        has_sib = outdeg[eu] > 1
        sib_mean = np.where(has_sib, (np.bincount(eu, weights=p_e, minlength=nn)[eu] - p_e)
                            / np.maximum(outdeg[eu] - 1, 1), 0.0)
        margin = np.where(has_sib, p_e - sib_mean, 0.0)
        top = np.abs(margin).max() if ne else 0.0
        cn = margin / top if top > 0 else np.zeros(ne)
        into = (eu != ev) & (n_e_s > 0)  # incoming, non-self-loop, has a successful user
        b = np.zeros(nn)
        sel = into & (cn > 0)
        np.maximum.at(b, ev[sel], cn[sel])
        # excess failure rate: p⁻(e) − mean sibling p⁻ = −(p⁺(e) − mean sibling p⁺)
        excess = np.where(has_sib, np.maximum(-margin, 0.0), np.maximum(p_minus_v[ev] - (1.0 - pq), 0.0))
        ok = into & np.isfinite(d[eu]) & np.isfinite(d[ev])
        psi = np.zeros(ne)
        psi[ok] = (p["alpha_d"] * (d[eu[ok]] - d[ev[ok]]) + p["alpha_s"] * (p_plus_v[ev[ok]] - pq)
                   - p["alpha_f"] * excess[ok])
        psi_raw = np.zeros(nn)
        np.maximum.at(psi_raw, ev[ok], psi[ok])  # best ψ > 0 (0 when none is positive)
        psi_bar = _maxnorm(psi_raw, cand)
        energy = p["w_bc"] * b + p["w_pg"] * psi_bar
        retained = cand & ((psi_bar > 0) | (m >= p["theta_m"]) | ((p["kappa_bc"] != 0) & (b > 0)))
        n_retained = int(retained.sum())
        s_pos = np.where(retained, s0 * (1.0 + p["w_pcc"] * energy), p["rho"] * s0)
        s_pos = np.where(cand, s_pos, 0.0)
    else:
        s_pos = s0
    sbar_pos = _maxnorm(s_pos, cand)
    sbar_neg = _maxnorm(s_neg, traps)
    # ---- RCS potentials and increments -----------------------------------------------
    phi_pos = g.max_product_potential(sbar_pos, p["omega"])
    phi_neg = g.max_product_potential(sbar_neg, p["omega"])
    gp, wp, wn = p["gamma_phi"], p["w_pos"], p["w_neg"]
    dpos = np.maximum(gp * wp * phi_pos[g.dst] - wp * phi_pos[g.src], 0.0)
    dneg = np.maximum(gp * wn * phi_neg[g.dst] - wn * phi_neg[g.src], 0.0)
    r_g = g.graph_returns(p["gamma_g"], p["c"], unreachable)
    r_m = r_g + p["c"] * p["lam"] * (dpos - dneg)
    a_g = segment_normalize(r_g, g.src, p["norm"], nn) if r_g.size else r_g
    a_mix = segment_normalize(r_m, g.src, p["norm"], nn) if r_m.size else r_m
    step = a_g + p["eta"] * (a_mix - a_g)
    episode = task_norm(group, p["norm"], episode_norm)
    step_l = g.split(step)
    adv = [p["step_weight"] * s + p["episode_weight"] * e for s, e in zip(step_l, episode)]

    stats = graph_stats(g, unreachable)
    corr = r_m - r_g
    stats.update({
        "milestones": int((cand & (sbar_pos > 0)).sum()),
        "milestone_candidates": int(cand.sum()),
        "milestones_retained": n_retained,
        "traps": int(traps.sum()),
        "delta_pos_mean": float(dpos.mean()) if dpos.size else 0.0,
        "delta_neg_mean": float(dneg.mean()) if dneg.size else 0.0,
        "shaped_share": float(np.mean(corr != 0)) if corr.size else 0.0,
        "correction_min": float(corr.min()) if corr.size else 0.0,
        "correction_max": float(corr.max()) if corr.size else 0.0,
        "ties_resolved_share": _ties_resolved(g, r_m, unreachable),
    })
    keys = g.keys
    return MileCredit(
        advantages=adv, step=step_l, graph_step=g.split(a_g), mix_step=g.split(a_mix), episode=episode,
        graph_returns=g.split(r_g), returns=g.split(r_m), delta_pos=g.split(dpos), delta_neg=g.split(dneg),
        milestones={keys[v]: float(sbar_pos[v]) for v in np.flatnonzero(sbar_pos > 0)},
        traps={keys[v]: float(sbar_neg[v]) for v in np.flatnonzero(traps)},
        graph=g, stats=stats,
    )


def _ties_resolved(g: TransitionGraph, r_m: np.ndarray, unreachable: str) -> float:
    """Among same-state action pairs tied under r^G (equal D(s′)), the share that r^M
    separates (|Δr^M| > 1e-9) [MileGPO App. C.1]; ``nan`` without ties."""
    if r_m.size == 0:
        return float("nan")
    df = g.filled_distances(unreachable)[g.dst]
    dk = np.where(np.isfinite(df), df, -1.0).astype(np.int64)
    rk = np.round(r_m, 9)
    rows = np.stack([g.src, g.action, g.dst], axis=1)
    _, first = np.unique(rows, axis=0, return_index=True)  # distinct edges (u, a, v)
    u, a, dd = g.src[first], g.action[first], dk[first]
    _, rid = np.unique(rk[first], return_inverse=True)

    def pairs(*cols: np.ndarray) -> int:
        _, c = np.unique(np.stack(cols, axis=1), axis=0, return_counts=True)
        return int((c * (c - 1) // 2).sum())

    ties = pairs(u, dd) - pairs(u, dd, a)
    if ties == 0:
        return float("nan")
    unresolved = pairs(u, dd, rid) - pairs(u, dd, rid, a)
    return (ties - unresolved) / ties


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
        >>> from agent_envs.trajectory import Step, Trajectory
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

    def compute_group(self, group: Sequence[Trajectory]) -> CreditResult:
        c = milegpo_credit(
            group, preset=self.preset, unreachable=self.unreachable, episode_norm=self.episode_norm,
            trap_min_score=self.trap_min_score, trap_min_failed=self.trap_min_failed, rcs=self.rcs,
            pcc=self.pcc, **{k: getattr(self, k) for k in _PARAMS},
        )
        return CreditResult(c.advantages, shaped_rewards=c.returns, stats=c.stats)

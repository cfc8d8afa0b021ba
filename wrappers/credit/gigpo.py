"""GiGPO: group-in-group credit with anchor-state step groups (SPEC §4.2).

A = episode_weight·A_E + step_weight·A_S  [SCPO §3.1 Eq. 3, ω = step_weight]

* A_E(τ_i) = Norm_task(Z_i) with Z_{i,t} = O_i + penalty_{i,t} over all rows of the task's
  group [SCPO Eq. 1];
* A_S = Norm within the anchor group of all steps (of the task's trajectories) that share a
  ``state_key``, applied to the discounted return R_t = Σ_{k≥t} γ^{k−t} reward_k + penalty_t
  (row-local terms not discounted backwards) [SCPO Eq. 2]; a singleton anchor group gives 0.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from agent_envs.trajectory import Trajectory
from wrappers.credit.base import CreditResult, Estimator, register_estimator
from wrappers.credit.common import NORMS, check_choice, step_returns, task_norm
from wrappers.credit.graph import segment_normalize

__all__ = ["GiGPO", "anchor_ids", "gigpo_step_advantages"]


def anchor_ids(group: Sequence[Trajectory]) -> tuple[np.ndarray, int]:
    """Per row (trajectory-major) the anchor-group id of its ``state_key``, and the count."""
    index: dict[Hashable, int] = {}
    ids = [index.setdefault(s.state_key, len(index)) for t in group for s in t.steps]
    return np.array(ids, dtype=np.intp), len(index)


def gigpo_step_advantages(group: Sequence[Trajectory], gamma: float, norm: str,
                          returns: Sequence[np.ndarray] | None = None) -> tuple[list[np.ndarray], dict[str, float]]:
    """A_S for one group: Norm of R_t within anchor-state groups [SCPO Eq. 2].

    Args:
        group: The task's sibling trajectories.
        gamma: Discount γ of the step return.
        norm: ``"mean_std"`` or ``"mean"``.
        returns: Optional per-trajectory step returns to use instead of R_t (SCPO passes
            its shaped R̃_t here).

    Returns:
        One array per trajectory, and diagnostics (anchor groups, singleton share, mean
        anchor-group size).
    """
    rets = [step_returns(t, gamma) for t in group] if returns is None else [np.asarray(r, float) for r in returns]
    lengths = [len(t.steps) for t in group]
    for i, (r, n) in enumerate(zip(rets, lengths)):
        if r.shape != (n,):
            raise ValueError(f"returns[{i}] has shape {r.shape}, trajectory {i} has {n} steps")
    seg, k = anchor_ids(group)
    flat = np.concatenate(rets) if rets else np.zeros(0)
    adv = segment_normalize(flat, seg, norm, k) if flat.size else flat
    sizes = np.bincount(seg, minlength=k) if seg.size else np.zeros(0, np.intp)
    stats = {
        "anchor_groups": int(k),
        "singleton_share": float(np.mean(sizes[seg] == 1)) if seg.size else float("nan"),
        "mean_anchor_size": float(sizes.mean()) if k else float("nan"),
    }
    return list(np.split(adv, np.cumsum(lengths)[:-1])) if lengths else [], stats


@register_estimator("gigpo")
class GiGPO(Estimator):
    """Group-in-Group Policy Optimisation [SCPO §3.1 Eqs. 1–3].

    Args:
        gamma: Discount of the step return R_t (0.95).
        norm: ``"mean_std"`` or ``"mean"`` for both terms.
        step_weight: ω, the weight of the step term A_S (1).
        episode_weight: Weight of the episode term A_E (1).
        episode_norm: ``"rows"`` (Z over all rows, the papers' code) or ``"trajectories"``.

    Example (state s0 shared, R = 10·0.95 = 9.5 for the winner, 0 for the loser):
        >>> from agent_envs.trajectory import Step, Trajectory
        >>> win = Trajectory("t", 0, [Step("s0", "a"), Step("s1", "b", reward=10.0)], success=True)
        >>> loss = Trajectory("t", 1, [Step("s0", "c"), Step("s2", "d")])
        >>> r = GiGPO(episode_weight=0.0)([[win, loss]])[0]
        >>> [a.round(4).tolist() for a in r.advantages]
        [[0.7071, 0.0], [-0.7071, 0.0]]
    """

    def __init__(self, *, gamma: float = 0.95, norm: str = "mean_std", step_weight: float = 1.0,
                 episode_weight: float = 1.0, episode_norm: str = "rows") -> None:
        check_choice("norm", norm, NORMS)
        check_choice("episode_norm", episode_norm, ("rows", "trajectories"))
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must lie in [0, 1]; got {gamma}")
        self.gamma = float(gamma)
        self.norm = norm
        self.step_weight = float(step_weight)
        self.episode_weight = float(episode_weight)
        self.episode_norm = episode_norm

    def compute_group(self, group: Sequence[Trajectory]) -> CreditResult:
        a_s, stats = gigpo_step_advantages(group, self.gamma, self.norm)
        a_e = task_norm(group, self.norm, self.episode_norm)
        adv = [self.episode_weight * e + self.step_weight * s for e, s in zip(a_e, a_s)]
        return CreditResult(adv, stats=stats)

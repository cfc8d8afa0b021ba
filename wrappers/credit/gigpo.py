"""GiGPO: group-in-group credit with anchor-state step groups (SPEC §4.2).

A = episode_weight·A_E + step_weight·A_S  [SCPO §3.1 Eq. 3, ω = step_weight]

* A_E(τ_i) = Norm_task(Z_i) with Z_{i,t} = O_i + penalty_{i,t} over all rows of the task's
  group [SCPO Eq. 1];
* A_S = Norm within the anchor group of all steps (of the task's trajectories) that share a
  ``state_key``, applied to the discounted return R_t = Σ_{k≥t} γ^{k−t} reward_k + penalty_t
  (row-local terms not discounted backwards) [SCPO Eq. 2]; a singleton anchor group gives 0.

``similarity=τ`` (verl-agent's ``enable_similarity=True, similarity_thresh=τ``) widens the
anchor groups: within the task's group, step rows whose text ``state_key`` (verl-agent's
``anchor_obs``) is similar share a group, G_τ(s) = {rows whose key joins s's cluster}, built in
row order (trajectory by trajectory in slot order, step by step): a new key joins the first
cluster whose first key b has ``difflib.SequenceMatcher(None, key, b).ratio() >= τ``, else opens
its own (:mod:`wrappers.credit.similarity`).  Equal keys always share a group; τ = 1 is exact
grouping.  Only A_S changes: the episode term and R_t do not.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rubrics.trajectory import Trajectory
from wrappers.credit.base import CreditResult, Estimator, register_estimator
from wrappers.credit.common import NORMS, check_choice
from wrappers.credit.graph import RowTable, segment_normalize
from wrappers.credit.similarity import check_similarity

__all__ = ["GiGPO", "anchor_ids", "gigpo_step_advantages", "gigpo_step_batch", "gigpo_step_rows"]


def anchor_ids(groups: Sequence[Sequence[Trajectory]], similarity: float | None = None) -> tuple[np.ndarray, int]:
    """Per row (group-major, trajectory-major) the anchor-group id of its ``state_key``
    within its group, and the number of anchor groups (ids never span groups); with
    ``similarity`` similar keys share a group (:meth:`~wrappers.credit.graph.RowTable.anchor_ids`)."""
    return RowTable(groups).anchor_ids(check_similarity(similarity))


def gigpo_step_batch(groups: Sequence[Sequence[Trajectory]], gamma: float, norm: str,
                     returns: Sequence[Sequence[np.ndarray]] | None = None,
                     rows: RowTable | None = None, similarity: float | None = None
                     ) -> tuple[np.ndarray, list[dict[str, float]]]:
    """A_S for a batch, vectorised: Norm of R_t within anchor-state groups [SCPO Eq. 2].

    Args:
        groups: The groups.
        gamma: Discount γ of the step return.
        norm: ``"mean_std"`` or ``"mean"``.
        returns: Optional ``[group][trajectory]`` step returns to use instead of R_t.
        rows: A prebuilt :class:`~wrappers.credit.graph.RowTable` of ``groups``.
        similarity: Merge similar anchor states (threshold in (0, 1]; module docstring).

    Returns:
        A_S per row (group-major, trajectory-major) and per-group diagnostics
        (``anchor_groups``, ``singleton_share``, ``mean_anchor_size``).
    """
    if rows is None:
        rows = RowTable(groups, ("reward", "penalty", "state_key"))
    if returns is None:
        return gigpo_step_rows(rows, gamma, norm, similarity=similarity)
    flat = []
    for g, (group, rets) in enumerate(zip(groups, returns)):
        if len(rets) != len(group):
            raise ValueError(f"returns for group {g} has {len(rets)} arrays, the group {len(group)} trajectories")
        for i, (traj, x) in enumerate(zip(group, rets)):
            x = np.asarray(x, dtype=np.float64)
            if x.shape != (len(traj.steps),):
                raise ValueError(f"returns[{i}] has shape {x.shape}, trajectory {i} has {len(traj.steps)} steps")
            flat.append(x)
    return gigpo_step_rows(rows, gamma, norm, np.concatenate(flat) if flat else np.zeros(0), similarity)


def gigpo_step_rows(rows: RowTable, gamma: float, norm: str, returns: np.ndarray | None = None,
                    similarity: float | None = None) -> tuple[np.ndarray, list[dict[str, float]]]:
    """:func:`gigpo_step_batch` on a :class:`~wrappers.credit.graph.RowTable` (``returns``:
    one value per row instead of R_t; ``similarity``: merge similar anchor states)."""
    r = rows.returns(gamma) if returns is None else returns
    seg, k = rows.anchor_ids(check_similarity(similarity))
    step = segment_normalize(r, seg, norm, k)
    G = rows.n_groups
    if seg.size:
        sizes = np.bincount(seg, minlength=k)
        anchor_group = np.zeros(k, dtype=np.intp)
        anchor_group[seg] = rows.group
        n_anchor = np.bincount(anchor_group, minlength=G)
        n_rows = np.bincount(rows.group, minlength=G)
        single = np.bincount(rows.group, weights=(sizes[seg] == 1).astype(float), minlength=G)
    else:
        n_anchor = n_rows = single = np.zeros(G)
    stats = [
        {
            "anchor_groups": int(n_anchor[g]),
            "singleton_share": float(single[g] / n_rows[g]) if n_rows[g] else float("nan"),
            "mean_anchor_size": float(n_rows[g] / n_anchor[g]) if n_anchor[g] else float("nan"),
        }
        for g in range(G)
    ]
    return step, stats


def gigpo_step_advantages(group: Sequence[Trajectory], gamma: float, norm: str,
                          returns: Sequence[np.ndarray] | None = None, similarity: float | None = None
                          ) -> tuple[list[np.ndarray], dict[str, float]]:
    """A_S for one group: Norm of R_t within anchor-state groups [SCPO Eq. 2].

    Args:
        group: The task's sibling trajectories.
        gamma: Discount γ of the step return.
        norm: ``"mean_std"`` or ``"mean"``.
        returns: Optional per-trajectory step returns to use instead of R_t (SCPO passes
            its shaped R̃_t here).
        similarity: Merge similar anchor states (threshold in (0, 1]; module docstring).

    Returns:
        One array per trajectory, and diagnostics (anchor groups, singleton share, mean
        anchor-group size).
    """
    rows = RowTable([group])
    step, stats = gigpo_step_batch([group], gamma, norm, None if returns is None else [returns], rows, similarity)
    return [x.copy() for x in rows.split(step)], stats[0]


@register_estimator("gigpo")
class GiGPO(Estimator):
    """Group-in-Group Policy Optimisation [SCPO §3.1 Eqs. 1–3].

    Args:
        gamma: Discount of the step return R_t (0.95).
        norm: ``"mean_std"`` or ``"mean"`` for both terms.
        step_weight: ω, the weight of the step term A_S (1).
        episode_weight: Weight of the episode term A_E (1).
        episode_norm: ``"rows"`` (Z over all rows, the papers' code) or ``"trajectories"``.
        similarity: ``None`` (default: anchor groups of equal ``state_key``) or a threshold τ
            in (0, 1] (verl-agent's ``similarity_thresh``, 0.95 there): text state keys with
            difflib ratio ≥ τ to a cluster's first key share its anchor group (module docstring).

    Example (state s0 shared, R = 10·0.95 = 9.5 for the winner, 0 for the loser):
        >>> from rubrics.trajectory import Step, Trajectory
        >>> win = Trajectory("t", 0, [Step("s0", "a"), Step("s1", "b", reward=10.0)], success=True)
        >>> loss = Trajectory("t", 1, [Step("s0", "c"), Step("s2", "d")])
        >>> r = GiGPO(episode_weight=0.0)([[win, loss]])[0]
        >>> [a.round(4).tolist() for a in r.advantages]
        [[0.7071, 0.0], [-0.7071, 0.0]]

    With similarity: the first states differ by one character ("1" vs "2" in 30 characters:
    difflib ratio 2·29/60 ≈ 0.967), so at τ = 0.95 they form one anchor group, as s0 above
    (R = 9.5 vs 0: ±0.7071); at τ = 0.99 both are singletons (0):
        >>> win = Trajectory("t", 0, [Step("You are at desk 1. It is dark.", "a"),
        ...                           Step("s1", "b", reward=10.0)], success=True)
        >>> loss = Trajectory("t", 1, [Step("You are at desk 2. It is dark.", "c"), Step("s2", "d")])
        >>> [GiGPO(episode_weight=0.0, similarity=tau)([[win, loss]])[0].advantages[1].round(4).tolist()
        ...  for tau in (0.95, 0.99)]
        [[-0.7071, 0.0], [0.0, 0.0]]
    """

    def __init__(self, *, gamma: float = 0.95, norm: str = "mean_std", step_weight: float = 1.0,
                 episode_weight: float = 1.0, episode_norm: str = "rows", similarity: float | None = None) -> None:
        check_choice("norm", norm, NORMS)
        check_choice("episode_norm", episode_norm, ("rows", "trajectories"))
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must lie in [0, 1]; got {gamma}")
        self.gamma = float(gamma)
        self.norm = norm
        self.step_weight = float(step_weight)
        self.episode_weight = float(episode_weight)
        self.episode_norm = episode_norm
        self.similarity = check_similarity(similarity)

    def compute(self, groups: Sequence[Sequence[Trajectory]]) -> list[CreditResult]:
        """Credit for validated groups, in one vectorised pass over the batch."""
        return self.compute_rows(RowTable(groups, ("reward", "penalty", "state_key")))

    def compute_rows(self, rows: RowTable) -> list[CreditResult]:
        """Credit for a :class:`~wrappers.credit.graph.RowTable` (all the estimator needs)."""
        step, stats = gigpo_step_rows(rows, self.gamma, self.norm, similarity=self.similarity)
        adv = self.episode_weight * rows.episode_term(self.norm, self.episode_norm) + self.step_weight * step
        return [CreditResult(a, stats=st) for a, st in zip(rows.split_groups(adv), stats)]

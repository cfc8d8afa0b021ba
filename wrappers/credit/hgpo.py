"""HGPO: credit from a hierarchy of history-consistent step groups.

Hierarchy-of-Groups Policy Optimization [HGPO: S. He, L. Feng, Q. Wei, X. Cheng, L. Feng,
B. An, "Hierarchy-of-Groups Policy Optimization for Long-Horizon Agentic Tasks", ICLR 2026,
arXiv:2602.22817], as verl-agent's ``recipe/hgpo`` computes it (``algorithm.adv_estimator=hgpo``).

GiGPO groups every step with the steps of its task's trajectories that see the same anchor
observation, whatever came before ("context inconsistency": two visits to one observation
after different histories share one group).  HGPO puts each step into one group per history
depth and mixes the groups' advantages:

* R_t = Σ_{j≥t} γ^{j−t} reward_j + penalty_t, the discounted step return (row-local terms,
  such as verl-agent's −0.1 for an invalid action, not discounted backwards; as GiGPO's R_t).
* For k = 1 … H + 1 (H = ``history_length``, verl-agent's ``env.history_length``), the step
  (i, t) with t ≥ k − 1 joins the cluster C_k(i, t) of the steps of its task group whose last
  k anchor observations (``state_key``) equal its own (s_{i,t−k+1}, …, s_{i,t}); k = 1 is
  GiGPO's anchor group.  A step with fewer than k observations so far has no level-k cluster.
* Within a cluster of n ≥ 2 members, A_k = (R − mean)/(σ + 1e-6) (``norm="mean_std"``,
  verl-agent's ``mean_std_norm``; σ the *population* standard deviation) or A_k = R − mean
  (``norm="mean"``, ``mean_norm``); a cluster of one gives no item.
* A_{i,t} = Σ_k w_k·A_k / (Σ_k w_k + 1e-6) over the step's items with A_k ≠ 0,
  w_k = (k + 1)^α (α = ``alpha``, verl-agent's ``length_weight_alpha``); 0 when it has none.
* ``base_group=True`` adds one more item with k = 0 (w = 1): the episode advantage
  Norm_task(Z), Z_{i,t} = O_i + penalty_{i,t} over all rows of the task group (GiGPO's episode
  term: sample std in ``"mean_std"``; a task group of one row keeps Z/(1 + 1e-6) there, Z in
  ``"mean"``).  No separate episode term is added.

Where every member of a cluster has the same return, A_k is exactly 0 here (returns are
shifted by the cluster's first member before averaging; the same for the base item of a task
group whose rows all have the same Z), so it is left out; the reference's float arithmetic can
leave ±1e-9 there and then weighs it as a full item.  Everything else equals the reference to
float64 rounding (the reference runs in float32).

Diagnostics (``CreditResult.stats``, per group, for each k): ``clusters_k<k>`` (clusters of
≥ 2 members), ``mean_cluster_size_k<k>`` (their mean size, NaN if none), ``grouped_share_k<k>``
(share of the group's rows in one of them; ``grouped_share_k1`` is 1 − GiGPO's
``singleton_share``), and ``ungrouped_share`` (rows in no cluster of two at any depth: their
advantage is 0, or the base item alone).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np

from rubrics.trajectory import Trajectory
from wrappers.credit.base import CreditResult, Estimator, register_estimator
from wrappers.credit.common import EPS, NORMS, check_choice
from wrappers.credit.graph import RowTable

__all__ = ["HGPO", "cluster_normalize", "hgpo_rows", "history_clusters"]


def history_clusters(rows: RowTable, history_length: int) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Per depth k = 1 … history_length + 1: the rows with at least k observations so far,
    the id of their cluster (same task group, same last k ``state_key``s) and the number of
    clusters.  Ids never span groups.

    Example (one group; the third trajectory reaches "y" from "z", not from "x"):
        >>> from rubrics.trajectory import Step, Trajectory
        >>> g = [Trajectory("t", i, [Step(a, "a"), Step("y", "b")]) for i, a in enumerate("xzx")]
        >>> [(idx.tolist(), ids.tolist(), n) for idx, ids, n in history_clusters(RowTable([g]), 1)]
        [([0, 1, 2, 3, 4, 5], [0, 1, 2, 1, 0, 1], 3), ([1, 3, 5], [0, 1, 0], 2)]
    """
    last, n_last = rows.anchor_ids()
    pos = np.arange(rows.n_rows) - rows.offsets[rows.traj]
    idx, ids, n_ids = np.arange(rows.n_rows), last.astype(np.int64), n_last
    levels = [(idx, ids, n_ids)]
    for k in range(2, history_length + 2):
        keep = pos[idx] >= k - 1
        idx = idx[keep]
        key = ids[keep] * max(n_last, 1) + last[idx - (k - 1)]
        uniq, inverse = np.unique(key, return_inverse=True)
        ids, n_ids = inverse.astype(np.int64).reshape(-1), int(uniq.size)
        levels.append((idx, ids, n_ids))
    return levels


def cluster_normalize(x: np.ndarray, seg: np.ndarray, n_seg: int, mode: str) -> np.ndarray:
    """(x − mean)/(population std + 1e-6) (``"mean_std"``) or x − mean (``"mean"``) within
    each cluster; a cluster of one gives 0, a cluster of equal values exactly 0.

    Example:
        >>> cluster_normalize(np.array([0.0, 2.0, 5.0]), np.array([0, 0, 1]), 2, "mean_std").round(6).tolist()
        [-0.999999, 0.999999, 0.0]
    """
    if x.size == 0:
        return np.zeros(0)
    counts = np.bincount(seg, minlength=n_seg)
    first = np.zeros(n_seg)
    first[seg[::-1]] = x[::-1]
    shifted = x - first[seg]
    dev = shifted - (np.bincount(seg, weights=shifted, minlength=n_seg) / np.maximum(counts, 1))[seg]
    if mode == "mean_std":
        std = np.sqrt(np.bincount(seg, weights=dev * dev, minlength=n_seg) / np.maximum(counts, 1))
        dev = dev / (std[seg] + EPS)
    dev[counts[seg] < 2] = 0.0
    return dev


def _base_item(rows: RowTable, norm: str) -> np.ndarray:
    """The k = 0 item: Norm_task(Z) over the task group's rows; a one-row group keeps
    Z/(1 + 1e-6) in ``"mean_std"`` (mean 0, std 1, then the ε), as the reference does."""
    base = rows.episode_term(norm, "rows")
    if norm == "mean_std":
        alone = np.bincount(rows.group, minlength=rows.n_groups)[rows.group] == 1
        base[alone] = base[alone] / (1.0 + EPS)
    return base


def hgpo_rows(rows: RowTable, gamma: float, history_length: int, norm: str, alpha: float,
              base_group: bool) -> tuple[np.ndarray, list[dict[str, float]]]:
    """HGPO's advantage per row of ``rows`` (module docstring) and per-group diagnostics."""
    r = rows.returns(gamma)
    num, den = np.zeros(rows.n_rows), np.zeros(rows.n_rows)
    levels = history_clusters(rows, history_length)
    for k, (idx, seg, n_seg) in enumerate(levels, start=1):
        a = cluster_normalize(r[idx], seg, n_seg, norm)
        item = a != 0
        w = float(k + 1) ** alpha
        num[idx[item]] += w * a[item]  # (a row appears at most once per depth)
        den[idx[item]] += w
    if base_group:
        base = _base_item(rows, norm)
        item = base != 0
        num[item] += base[item]
        den[item] += 1.0
    adv = np.where(den > 0, num / (den + EPS), 0.0)
    return adv, _stats(rows, levels)


def _stats(rows: RowTable, levels: list[tuple[np.ndarray, np.ndarray, int]]) -> list[dict[str, float]]:
    """Per group: clusters of ≥ 2 members, their mean size and the share of rows in them, per
    depth; and the share of rows in no such cluster at any depth."""
    G = rows.n_groups
    n_rows = np.bincount(rows.group, minlength=G).astype(float)
    grouped_any = np.zeros(rows.n_rows, dtype=bool)
    out: list[dict[str, float]] = [{} for _ in range(G)]
    for k, (idx, seg, n_seg) in enumerate(levels, start=1):
        sizes = np.bincount(seg, minlength=n_seg)
        cluster_group = np.zeros(n_seg, dtype=np.intp)
        cluster_group[seg] = rows.group[idx]
        multi = sizes >= 2
        n_clusters = np.bincount(cluster_group[multi], minlength=G)
        in_multi = np.bincount(cluster_group[multi], weights=sizes[multi].astype(float), minlength=G)
        grouped_any[idx[multi[seg]]] = True
        for g in range(G):
            out[g][f"clusters_k{k}"] = int(n_clusters[g])
            out[g][f"mean_cluster_size_k{k}"] = float(in_multi[g] / n_clusters[g]) if n_clusters[g] else math.nan
            out[g][f"grouped_share_k{k}"] = float(in_multi[g] / n_rows[g]) if n_rows[g] else math.nan
    lone = np.bincount(rows.group, weights=(~grouped_any).astype(float), minlength=G)
    for g in range(G):
        out[g]["ungrouped_share"] = float(lone[g] / n_rows[g]) if n_rows[g] else math.nan
    return out


@register_estimator("hgpo")
class HGPO(Estimator):
    """Hierarchy-of-Groups Policy Optimisation [HGPO; verl-agent ``recipe/hgpo``].

    Args:
        gamma: Discount γ of the step return R_t (0.95, verl-agent's ``algorithm.gamma``).
        history_length: H: depths k = 1 … H + 1 (2, verl-agent's ``env.history_length``).
        norm: ``"mean_std"`` (verl-agent's ``mean_std_norm``, the default) or ``"mean"``
            (``mean_norm``), in the clusters and in the base item.
        alpha: α of the weights (k + 1)^α (1, verl-agent's ``algorithm.hgpo.length_weight_alpha``;
            0 weighs every depth alike).
        base_group: Add the episode advantage as an item with k = 0 (False,
            ``algorithm.hgpo.base_group``).

    Example: three trajectories of one task reach observation "y", two from "x" and one from
    "z"; only the first wins (reward 10), γ = 0.95 and H = 1 (depths 1 and 2, weights 2 and 3).
    At "y" the depth-1 cluster holds all three (returns 10, 0, 0: advantages 1.4142, −0.7071,
    −0.7071); the depth-2 cluster (x, y) holds the first and third (±1, up to the 1e-6).  The
    third row gets (2·(−0.7071) + 3·(−1))/5 = −0.8828, the second (from "z") keeps −0.7071
    alone; GiGPO's step term gives both −0.7071.  At the first step, "x" pairs the first and
    third (9.5 vs 0: ±1) and "z" is alone (0):

        >>> from rubrics.trajectory import Step, Trajectory
        >>> g = [Trajectory("t", 0, [Step("x", "a"), Step("y", "b", reward=10.0)], success=True),
        ...      Trajectory("t", 1, [Step("z", "c"), Step("y", "d")]),
        ...      Trajectory("t", 2, [Step("x", "e"), Step("y", "f")])]
        >>> r = HGPO(history_length=1)([g])[0]
        >>> [a.round(4).tolist() for a in r.advantages]
        [[1.0, 1.1657], [0.0, -0.7071], [-1.0, -0.8828]]
        >>> r.stats["clusters_k2"], r.stats["mean_cluster_size_k1"], round(r.stats["ungrouped_share"], 4)
        (1, 2.5, 0.1667)
    """

    def __init__(self, *, gamma: float = 0.95, history_length: int = 2, norm: str = "mean_std",
                 alpha: float = 1.0, base_group: bool = False) -> None:
        check_choice("norm", norm, NORMS)
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must lie in [0, 1]; got {gamma}")
        if isinstance(history_length, bool) or not isinstance(history_length, numbers.Integral) \
                or history_length < 0:
            raise ValueError(f"history_length must be an integer >= 0; got {history_length!r}")
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not math.isfinite(alpha):
            raise ValueError(f"alpha must be a finite number; got {alpha!r}")
        if not isinstance(base_group, bool):
            raise TypeError(f"base_group must be True or False; got {base_group!r}")
        self.gamma = float(gamma)
        self.history_length = int(history_length)
        self.norm = norm
        self.alpha = float(alpha)
        self.base_group = base_group

    def compute(self, groups: Sequence[Sequence[Trajectory]]) -> list[CreditResult]:
        """Credit for validated groups, in one vectorised pass over the batch."""
        return self.compute_rows(RowTable(groups, ("reward", "penalty", "state_key")))

    def compute_rows(self, rows: RowTable) -> list[CreditResult]:
        """Credit for a :class:`~wrappers.credit.graph.RowTable` (all the estimator needs)."""
        adv, stats = hgpo_rows(rows, self.gamma, self.history_length, self.norm, self.alpha, self.base_group)
        return [CreditResult(a, stats=st) for a, st in zip(rows.split_groups(adv), stats)]

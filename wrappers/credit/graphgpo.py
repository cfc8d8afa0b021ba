"""GraphGPO: credit from distances to success on the group's transition graph (SPEC §4.3).

Per task the sibling trajectories are merged into a :class:`~wrappers.credit.graph.TransitionGraph`
(nodes = canonical states, edges = observed transitions, successful terminal transitions
enter a virtual success node).  Reverse BFS with unit cost gives D(s), the distance to
success [GraphGPO notes §5.2]; states that cannot reach success get max finite D + 1
(``unreachable="max_plus_one"``, the papers' code) or a decayed term of 0
(``unreachable="zero"``, MileGPO's convention).

* R^graph_t = success_reward·γ^{D(s_{t+1})}, D(success) = 0.  We follow SPEC §4.3 and
  MCGPO A.3 (the public code's exponent D(s′)); the GraphGPO paper's Eq. 4 writes
  γ^{D(s′)+1}, a global factor γ that mean/std normalisation cancels.
* A^G = Norm over the rows sharing (task, source state); singletons get 0 [notes §5.3].
* A = step_weight·A^G + episode_weight·Norm_task(Z_i), Z_{i,t} = O_i + penalty_{i,t}
  [notes §5.3, β^G = β^E = 1; MCGPO A.3 Eq. 12].

By default the graph return carries no penalty term: SPEC §4.3 defines it from distances
only (an invalid action that leaves the state unchanged is already a self-loop that makes no
progress); penalties enter through Z in the episode term.  ``penalty_in_graph_return=True``
reproduces verl-agent's GraphGPO trainer, which adds the row penalty to the stored graph
return before the anchor-group normalisation: R^graph_t = success_reward·γ^{D(s_{t+1})} +
penalty_t (an invalid row gets 10·γ^D − 0.1).

Two more options of verl-agent's GraphGPO, off by default:

* ``normalize_distance=True`` (progress instead of proximity):
  R^graph_t = success_reward·γ^{D(s_{t+1}) − D(s_t) + 1}.  Since D(s_t) ≤ 1 + D(s_{t+1}) on the
  graph, the exponent is ≥ 0: a step 1 closer to success gets success_reward, one that keeps
  the distance (a self-loop, an invalid action) success_reward·γ, one 1 farther
  success_reward·γ²; D is the filled distance of the ``unreachable`` convention (under
  ``"zero"`` a destination that cannot reach success still gives 0).
* ``similarity=τ`` (``enable_similarity=True, similarity_thresh=τ``): before distances are
  computed, the group's state nodes (source and destination keys, in order of first
  appearance as nodes: trajectory by trajectory, each trajectory's states step by step, then its
  explicit next states) are merged greedily: a state joins the first merged node whose first
  key b has ``difflib.SequenceMatcher(None, state, b).ratio() >= τ``
  (:mod:`wrappers.credit.similarity`), "reducing graph fragmentation from minor text
  differences".  The virtual success node and the dead ends are never merged (a state is
  never the success node, and a failed ending stays apart); so a merge can only shorten
  distances.  Edges, D, R^graph and the diagnostics use the merged nodes; the anchor groups
  of A^G stay the rows sharing the exact ``state_key`` (``step_groups="exact"``, verl-agent's
  trainer: its step term groups rows by the observation text and never sees the similarity
  setting); ``step_groups="merged"`` groups them by merged source node instead (the widening
  GiGPO's ``similarity`` applies).  The episode term does not change.  Unlike verl-agent,
  whose success node is the literal string ``'success'`` and so can merge with an
  observation that reads like it, rubricgym's success node is a distinct object that never
  merges with any observation.

Both combine with ``penalty_in_graph_return``: the penalty is added to whichever R^graph, after
the merge, before the anchor-group normalisation.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    graph_stats_batch,
    segment_normalize,
)
from wrappers.credit.similarity import check_similarity

__all__ = ["STEP_GROUPS", "GraphCredit", "GraphGPO", "graphgpo_batch", "graphgpo_credit", "graphgpo_graph",
           "step_anchor_groups"]

#: Anchor groups of GraphGPO's step term under ``similarity``: exact state text (verl-agent)
#: or the merged node.
STEP_GROUPS = ("exact", "merged")


@dataclass
class GraphCredit:
    """GraphGPO credit of one group with its parts.

    Attributes:
        advantages: A per trajectory (step_weight·A^G + episode_weight·A^E).
        step: A^G per trajectory (unweighted).
        episode: A^E = Norm_task(Z) per trajectory (unweighted).
        returns: R^graph per trajectory.
        graph: The transition graph the group is part of (a batch graph holds several).
        group: The group's index in ``graph``.
        stats: :func:`~wrappers.credit.graph.graph_stats` diagnostics.
    """

    advantages: list[np.ndarray]
    step: list[np.ndarray]
    episode: list[np.ndarray]
    returns: list[np.ndarray]
    graph: TransitionGraph
    group: int = 0
    stats: dict[str, Any] = field(default_factory=dict)


def graphgpo_batch(
    groups: Sequence[Sequence[Trajectory]],
    *,
    gamma: float = 0.1,
    success_reward: float = 10.0,
    unreachable: str = "max_plus_one",
    norm: str = "mean_std",
    step_weight: float = 1.0,
    episode_weight: float = 1.0,
    episode_norm: str = "rows",
    graph: TransitionGraph | None = None,
    penalty_in_graph_return: bool = False,
    similarity: float | None = None,
    normalize_distance: bool = False,
    step_groups: str = "exact",
) -> list[GraphCredit]:
    """GraphGPO task credit for a batch of groups, vectorised over the whole batch.

    Args:
        groups: One sequence of sibling trajectories per task (already validated).
        gamma: Distance discount γ (0.1 ALFWorld, 0.2 WebShop).
        success_reward: Return scale (10).
        unreachable: ``"max_plus_one"`` or ``"zero"``.
        norm: ``"mean_std"`` or ``"mean"``.
        step_weight, episode_weight: β^G and β^E.
        episode_norm: ``"rows"`` or ``"trajectories"`` (see :func:`~wrappers.credit.common.task_norm`).
        graph: A prebuilt :meth:`TransitionGraph.from_groups` of ``groups``.
        penalty_in_graph_return: Add each row's penalty to R^graph before the anchor-group
            normalisation (verl-agent's trainer); the returned ``returns`` include it.
        similarity: Merge similar state nodes (threshold in (0, 1]; module docstring); a
            prebuilt ``graph`` must have been built with the same value.
        normalize_distance: Progress returns success_reward·γ^{D(s_{t+1}) − D(s_t) + 1}.
        step_groups: Anchor groups of A^G with ``similarity``: ``"exact"`` (rows sharing the
            exact ``state_key``, verl-agent) or ``"merged"`` (rows sharing a merged node).

    Returns:
        One :class:`GraphCredit` per group, in order.
    """
    similarity = check_similarity(similarity)
    g = TransitionGraph.from_groups(groups, similarity) if graph is None else graph
    if g.similarity != similarity:
        raise ValueError(f"the prebuilt graph merged states with similarity={g.similarity}, not {similarity}")
    return graphgpo_graph(g, gamma=gamma, success_reward=success_reward, unreachable=unreachable, norm=norm,
                          step_weight=step_weight, episode_weight=episode_weight, episode_norm=episode_norm,
                          penalty_in_graph_return=penalty_in_graph_return, normalize_distance=normalize_distance,
                          step_groups=step_groups)


def step_anchor_groups(g: TransitionGraph, step_groups: str = "exact") -> tuple[np.ndarray, int]:
    """Per row the anchor group of A^G and the number of groups: the source node, except on a
    similarity-merged graph under ``step_groups="exact"``, where rows group by exact ``state_key``."""
    check_choice("step_groups", step_groups, STEP_GROUPS)
    if g.similarity is None or step_groups == "merged":
        return g.src, g.n_nodes
    return g.anchor_ids(None)


def graphgpo_graph(g: TransitionGraph, *, gamma: float = 0.1, success_reward: float = 10.0,
                   unreachable: str = "max_plus_one", norm: str = "mean_std", step_weight: float = 1.0,
                   episode_weight: float = 1.0, episode_norm: str = "rows",
                   penalty_in_graph_return: bool = False, normalize_distance: bool = False,
                   step_groups: str = "exact") -> list[GraphCredit]:
    """:func:`graphgpo_batch` on a batch :class:`~wrappers.credit.graph.TransitionGraph`
    (built from groups or from :class:`~wrappers.credit.graph.StepColumns`; its states are
    merged when it was built with ``similarity``)."""
    check_choice("norm", norm, NORMS)
    seg, n_seg = step_anchor_groups(g, step_groups)
    r = g.graph_returns(gamma, success_reward, unreachable, progress=normalize_distance)
    if penalty_in_graph_return:
        r = r + g.penalty
    step = segment_normalize(r, seg, norm, n_seg)
    episode = g.episode_term(norm, episode_norm)
    adv = step_weight * step + episode_weight * episode
    stats = graph_stats_batch(g, unreachable)
    parts = [g.split_groups(x) for x in (adv, step, episode, r)]
    return [GraphCredit(parts[0][k], parts[1][k], parts[2][k], parts[3][k], g, k, stats[k]) for k in range(g.n_groups)]


def graphgpo_credit(group: Sequence[Trajectory], **params: Any) -> GraphCredit:
    """GraphGPO task credit for one group (the public entry point MCGPO builds on).

    Takes the keyword parameters of :func:`graphgpo_batch`; for many groups call that
    instead (one vectorised pass).

    Example:
        >>> from rubrics.trajectory import Step, Trajectory
        >>> win = Trajectory("t", 0, [Step("s0", "a"), Step("s1", "b", reward=10.0)], success=True)
        >>> loss = Trajectory("t", 1, [Step("s0", "c"), Step("s2", "d")])
        >>> c = graphgpo_credit([win, loss])
        >>> [r.round(4).tolist() for r in c.returns]     # D = 1, 0 | 3 (= max 2 + 1), 3
        [[1.0, 10.0], [0.01, 0.01]]
        >>> [a.round(4).tolist() for a in c.step]
        [[0.7071, 0.0], [-0.7071, 0.0]]

    Progress returns γ^{D(s_{t+1}) − D(s_t) + 1}: each winning step is 1 closer (10); the
    loser's s0 (D 2) -> s2 (D 3) is 1 farther (10·γ² = 0.1), s2 -> its dead end (D 3) keeps
    the distance (10·γ = 1):
        >>> [r.round(4).tolist() for r in graphgpo_credit([win, loss], normalize_distance=True).returns]
        [[10.0, 10.0], [0.1, 1.0]]
    """
    if "graph" in params and params["graph"] is not None and params["graph"].n_groups != 1:
        raise ValueError("graphgpo_credit needs a single-group graph; use graphgpo_batch for batches")
    return graphgpo_batch([group], **params)[0]


@register_estimator("graphgpo")
class GraphGPO(Estimator):
    """Graph-based Group Policy Optimisation [GraphGPO notes §5; MCGPO A.3].

    Args:
        gamma: Distance discount γ of R^graph = success_reward·γ^D (0.1 ALFWorld; use 0.2
            for WebShop).
        success_reward: Return of reaching success (10).
        unreachable: ``"max_plus_one"`` (default) or ``"zero"``.
        norm: ``"mean_std"`` or ``"mean"``.
        step_weight: β^G (1).
        episode_weight: β^E (1).
        episode_norm: ``"rows"`` or ``"trajectories"``.
        penalty_in_graph_return: Add the row penalty to R^graph before the anchor-group
            normalisation, as verl-agent's GraphGPO trainer does (default False: SPEC §4.3).
        similarity: ``None`` (default: one node per distinct state) or a threshold τ in (0, 1]
            (verl-agent's ``similarity_thresh``): text states with difflib ratio ≥ τ to a merged
            node's first key become that node (module docstring).
        normalize_distance: Progress returns success_reward·γ^{D(s_{t+1}) − D(s_t) + 1}
            instead of success_reward·γ^{D(s_{t+1})} (verl-agent's ``normalize_distance``).
        step_groups: With ``similarity``, the anchor groups of A^G: ``"exact"`` (default, as
            verl-agent: rows sharing the exact ``state_key``; the merge changes only the
            distances) or ``"merged"`` (rows sharing a merged source node).  rubricgym's
            success node never merges with an observation (verl-agent's ``'success'`` string can).

    ``CreditResult.shaped_rewards`` holds R^graph; ``stats`` holds ``nodes``, ``edges``,
    ``reuse_rate``, ``success_reachable_share``, ``tie_rate`` (see
    :func:`~wrappers.credit.graph.graph_stats`).

    Example (merging shortens a distance: "hall, door 1" -> "hall, door 2" differ by one
    character in 12, difflib ratio 22/24 ≈ 0.917; at τ = 0.9 they are one node, so the
    loser's first step lands next to success, D = 1 (R = 10·0.1 = 1) instead of in a state
    that cannot reach it, D = max 2 + 1 = 3 (R = 0.01); its dead end stays apart):
        >>> from rubrics.trajectory import Step, Trajectory
        >>> win = Trajectory("t", 0, [Step("start", "a"), Step("hall, door 1", "b", reward=10.0)], success=True)
        >>> loss = Trajectory("t", 1, [Step("start", "c"), Step("hall, door 2", "d")])
        >>> [GraphGPO(similarity=tau)([[win, loss]])[0].shaped_rewards[1].round(4).tolist() for tau in (None, 0.9)]
        [[0.01, 0.01], [1.0, 0.01]]

    The step term still groups by exact text: "start" holds {1, 1} (0), each hall is alone (0);
    merged step groups put the two halls together, {10 (-> success), 0.01 (dead end)}:
        >>> [np.concatenate(GraphGPO(similarity=0.9, episode_weight=0.0, step_groups=m)([[win, loss]])[0]
        ...                 .advantages).round(4).tolist() for m in ("exact", "merged")]
        [[0.0, 0.0, 0.0, 0.0], [0.0, 0.7071, 0.0, -0.7071]]
    """

    def __init__(self, *, gamma: float = 0.1, success_reward: float = 10.0, unreachable: str = "max_plus_one",
                 norm: str = "mean_std", step_weight: float = 1.0, episode_weight: float = 1.0,
                 episode_norm: str = "rows", penalty_in_graph_return: bool = False,
                 similarity: float | None = None, normalize_distance: bool = False,
                 step_groups: str = "exact") -> None:
        check_choice("norm", norm, NORMS)
        check_choice("step_groups", step_groups, STEP_GROUPS)
        check_choice("unreachable", unreachable, UNREACHABLE)
        check_choice("episode_norm", episode_norm, ("rows", "trajectories"))
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"gamma must lie in (0, 1]; got {gamma}")
        self.gamma = float(gamma)
        self.success_reward = float(success_reward)
        self.unreachable = unreachable
        self.norm = norm
        self.step_weight = float(step_weight)
        self.episode_weight = float(episode_weight)
        self.episode_norm = episode_norm
        self.penalty_in_graph_return = bool(penalty_in_graph_return)
        self.similarity = check_similarity(similarity)
        self.normalize_distance = bool(normalize_distance)
        self.step_groups = step_groups

    def compute(self, groups: Sequence[Sequence[Trajectory]]) -> list[CreditResult]:
        """Credit for validated groups, in one vectorised pass over the batch."""
        return self.compute_rows(TransitionGraph.from_groups(groups, self.similarity))

    def compute_rows(self, rows: RowTable) -> list[CreditResult]:
        """Credit for a :class:`~wrappers.credit.graph.RowTable` (its graph is built from its columns)."""
        if isinstance(rows, TransitionGraph) and rows.similarity == self.similarity:
            g = rows
        else:
            g = TransitionGraph.from_columns(rows.columns, self.similarity)
        credits = graphgpo_graph(g, gamma=self.gamma, success_reward=self.success_reward,
                                 unreachable=self.unreachable, norm=self.norm, step_weight=self.step_weight,
                                 episode_weight=self.episode_weight, episode_norm=self.episode_norm,
                                 penalty_in_graph_return=self.penalty_in_graph_return,
                                 normalize_distance=self.normalize_distance, step_groups=self.step_groups)
        return [CreditResult(c.advantages, shaped_rewards=c.returns, stats=c.stats) for c in credits]

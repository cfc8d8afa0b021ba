"""The per-task transition graph shared by GraphGPO and MileGPO (SPEC §4.3–4.4).

For the sibling trajectories of one task the graph has

* **nodes**: canonical states (``Step.state_key`` / ``Step.next_state_key``), plus a virtual
  :data:`SUCCESS` node entered by every successful terminal transition, and one private
  :class:`Terminal` dead end per trajectory whose last step names no ``next_state_key``;
* **edges**: observed transitions (s, a, s′) with unit cost.

The destination of row (i, t) is, in this order: :data:`SUCCESS` for the last step of a
successful trajectory (``Trajectory.success``); the step's ``next_state_key`` when given;
the next step's ``state_key``; :class:`Terminal` ``(i)`` for the last step.  A failed or
truncated ending never enters :data:`SUCCESS` [GraphGPO notes §5.1].

Distances are breadth-first over the reversed edges (unit cost, so BFS *is* Dijkstra)
[GraphGPO notes §5.2, Eq. d(s) = min (c + d(s′))].  Rows are stored flat, trajectory-major,
so per-row quantities are numpy arrays and :meth:`TransitionGraph.split` turns them back
into one array per trajectory.

Example:
    >>> from agent_envs.trajectory import Step, Trajectory
    >>> win = Trajectory("t", 0, [Step("s0", "a"), Step("s1", "b", reward=10.0)], success=True)
    >>> loss = Trajectory("t", 1, [Step("s0", "c"), Step("s2", "d")])
    >>> g = TransitionGraph([win, loss])
    >>> g.success_distances()[g.src].tolist()      # D(s_t) per row: s0, s1, s0, s2
    [2.0, 1.0, 2.0, inf]
    >>> g.graph_returns(gamma=0.1, scale=10.0).round(4).tolist()   # 10·γ^D(s_{t+1})
    [1.0, 10.0, 0.01, 0.01]
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent_envs.trajectory import Trajectory
from wrappers.credit.common import EPS, check_choice

__all__ = [
    "SUCCESS",
    "Terminal",
    "UNREACHABLE",
    "TransitionGraph",
    "segment_normalize",
    "graph_stats",
]

#: Conventions for states that cannot reach success: GraphGPO's max finite distance + 1,
#: or MileGPO's "the decayed term is 0".
UNREACHABLE = ("max_plus_one", "zero")


class _SuccessNode:
    """The virtual success node (a singleton; compares equal only to itself)."""

    _instance: _SuccessNode | None = None

    def __new__(cls) -> _SuccessNode:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "SUCCESS"

    def __reduce__(self) -> str:
        return "SUCCESS"


#: The virtual node entered by every successful terminal transition.
SUCCESS = _SuccessNode()


@dataclass(frozen=True)
class Terminal:
    """Dead-end node after the last step of trajectory ``trajectory`` when it names no
    ``next_state_key`` (a failed or truncated ending that leads nowhere observable)."""

    trajectory: int


def segment_normalize(x: np.ndarray, seg: np.ndarray, mode: str, n_seg: int | None = None) -> np.ndarray:
    """Norm(x) within each segment (anchor group); singletons give 0 (SPEC §4 preamble).

    ``mode="mean_std"``: (x − mean)/(sample std + 1e-6); ``mode="mean"``: x − mean.
    Values are shifted by their segment's first member before averaging, so a segment of
    equal values gives exactly 0.

    Args:
        x: Values, shape (n,).
        seg: Segment index of each value in ``0..n_seg-1``, shape (n,).
        mode: ``"mean_std"`` or ``"mean"``.
        n_seg: Number of segments (default ``seg.max() + 1``).

    Example:
        >>> segment_normalize(np.array([1.0, 3.0, 5.0]), np.array([0, 0, 1]), "mean").tolist()
        [-1.0, 1.0, 0.0]
    """
    x = np.asarray(x, dtype=np.float64)
    seg = np.asarray(seg, dtype=np.intp)
    if x.size == 0:
        return np.zeros(0)
    k = int(seg.max()) + 1 if n_seg is None else n_seg
    counts = np.bincount(seg, minlength=k)
    first = np.full(k, np.nan)
    first[seg[::-1]] = x[::-1]  # value of each segment's first member
    shifted = x - first[seg]
    mean = np.bincount(seg, weights=shifted, minlength=k) / np.maximum(counts, 1)
    dev = shifted - mean[seg]
    if mode == "mean":
        out = dev
    elif mode == "mean_std":
        ss = np.bincount(seg, weights=dev * dev, minlength=k)
        std = np.sqrt(ss / np.maximum(counts - 1, 1))
        out = dev / (std[seg] + EPS)
    else:
        check_choice("norm", mode, ("mean_std", "mean"))
        raise AssertionError  # unreachable
    out[counts[seg] == 1] = 0.0
    return out


class TransitionGraph:
    """The transition graph of one group (one task's siblings).

    Attributes:
        keys: Node index → state key (including :data:`SUCCESS` and :class:`Terminal` nodes).
        index: State key → node index.
        success_node: Index of :data:`SUCCESS`, or -1 when no trajectory succeeded.
        src, dst: Source/destination node of every row (flat, trajectory-major), int arrays.
        action: Action-class id of every row (ids index :attr:`actions`).
        actions: Action id → ``Step.action_key``.
        traj: Trajectory index of every row.
        offsets: Row offsets, ``rows of trajectory i = offsets[i]:offsets[i+1]``.
        success: Per-trajectory success flags (bool array).
        succ, pred: Distinct successors / predecessors of every node (lists of int lists).
    """

    def __init__(self, group: Sequence[Trajectory]) -> None:
        index: dict[Hashable, int] = {}
        keys: list[Hashable] = []
        actions: dict[Hashable, int] = {}
        src: list[int] = []
        dst: list[int] = []
        act: list[int] = []
        lengths: list[int] = []

        def node(key: Hashable) -> int:
            n = index.get(key)
            if n is None:
                n = index[key] = len(keys)
                keys.append(key)
            return n

        self.success = np.array([bool(t.success) for t in group], dtype=bool)
        for i, traj in enumerate(group):
            steps = traj.steps
            n = len(steps)
            lengths.append(n)
            for t, step in enumerate(steps):
                src.append(node(step.state_key))
                if t == n - 1:
                    if traj.success:
                        nxt: Hashable = SUCCESS
                    elif step.next_state_key is not None:
                        nxt = step.next_state_key
                    else:
                        nxt = Terminal(i)
                elif step.next_state_key is not None:
                    nxt = step.next_state_key
                else:
                    nxt = steps[t + 1].state_key
                dst.append(node(nxt))
                a = actions.get(step.action_key)
                if a is None:
                    a = actions[step.action_key] = len(actions)
                act.append(a)
        self.keys = keys
        self.index = index
        self.actions = list(actions)
        self.n_nodes = len(keys)
        self.src = np.array(src, dtype=np.intp)
        self.dst = np.array(dst, dtype=np.intp)
        self.action = np.array(act, dtype=np.intp)
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.intp)
        self.traj = np.repeat(np.arange(len(group), dtype=np.intp), lengths)
        self.success_node = index.get(SUCCESS, -1)
        # Distinct (u, v) adjacency; multi-edges with different actions collapse here,
        # which is all unit-cost distances need.
        nn = self.n_nodes
        pairs = np.unique(self.src * nn + self.dst) if self.src.size else np.zeros(0, np.intp)
        self.edge_u = pairs // max(nn, 1)
        self.edge_v = pairs % max(nn, 1)
        succ: list[list[int]] = [[] for _ in range(nn)]
        pred: list[list[int]] = [[] for _ in range(nn)]
        for u, v in zip(self.edge_u.tolist(), self.edge_v.tolist()):
            succ[u].append(v)
            pred[v].append(u)
        self.succ = succ
        self.pred = pred
        self._d_success: np.ndarray | None = None

    # -- basic views -------------------------------------------------------------------
    @property
    def n_rows(self) -> int:
        """Number of step rows."""
        return int(self.src.size)

    @property
    def n_states(self) -> int:
        """Number of canonical state nodes (the virtual and Terminal nodes excluded)."""
        return self.n_nodes - int(self.success_node >= 0) - sum(isinstance(k, Terminal) for k in self.keys)

    def is_real(self) -> np.ndarray:
        """Boolean mask of nodes that are canonical states (not SUCCESS, not Terminal)."""
        return np.array([not (k is SUCCESS or isinstance(k, Terminal)) for k in self.keys], dtype=bool)

    def split(self, values: np.ndarray) -> list[np.ndarray]:
        """Split a per-row array into one array per trajectory."""
        values = np.asarray(values, dtype=np.float64)
        return [values[self.offsets[i] : self.offsets[i + 1]].copy() for i in range(len(self.offsets) - 1)]

    # -- distances ---------------------------------------------------------------------
    def distances_to(self, target: int) -> np.ndarray:
        """d(s, target) for every node s (float; ``inf`` when target is unreachable).

        Reverse breadth-first search with unit edge cost.
        """
        d = np.full(self.n_nodes, np.inf)
        if target < 0:
            return d
        dist = [-1] * self.n_nodes
        dist[target] = 0
        queue = deque([target])
        pred = self.pred
        while queue:
            v = queue.popleft()
            dv = dist[v] + 1
            for u in pred[v]:
                if dist[u] < 0:
                    dist[u] = dv
                    queue.append(u)
        arr = np.array(dist, dtype=np.float64)
        d[arr >= 0] = arr[arr >= 0]
        return d

    def success_distances(self) -> np.ndarray:
        """D(s): distance of every node to :data:`SUCCESS` (``inf`` if unreachable; cached)."""
        if self._d_success is None:
            self._d_success = self.distances_to(self.success_node)
        return self._d_success

    def filled_distances(self, unreachable: str = "max_plus_one") -> np.ndarray:
        """D(s) with unreachable states set by the ``unreachable`` convention.

        ``"max_plus_one"``: max finite D + 1 (1 when nothing is finite, i.e. no success;
        then all states are equal anyway) [GraphGPO notes §5.2]; ``"zero"``: left at
        ``inf`` so that every decayed term γ^D is 0 [MileGPO §3.1].
        """
        check_choice("unreachable", unreachable, UNREACHABLE)
        d = self.success_distances()
        if unreachable == "zero":
            return d
        finite = np.isfinite(d)
        fill = (d[finite].max() if finite.any() else 0.0) + 1.0
        return np.where(finite, d, fill)

    def graph_returns(self, gamma: float, scale: float = 10.0, unreachable: str = "max_plus_one") -> np.ndarray:
        """R^graph per row = scale·γ^{D(s_{t+1})} [SPEC §4.3; MCGPO A.3; MileGPO Eq. 1]."""
        d = self.filled_distances(unreachable)[self.dst]
        with np.errstate(over="ignore", under="ignore"):
            out = scale * np.power(float(gamma), d)
        out[~np.isfinite(d)] = 0.0
        return out

    def max_product_potential(self, base: np.ndarray, omega: float) -> np.ndarray:
        """Φ(s) = max_v base(v)·ω^{d(s, v)} over nodes v with base(v) > 0 (0 if none reachable).

        A best-first search over reversed edges (values only shrink along a path since
        0 < ω ≤ 1), so every node is settled once: O(E log V) instead of one BFS per v.
        """
        phi = np.zeros(self.n_nodes)
        heap: list[tuple[float, int, int, int]] = []
        for v in np.flatnonzero(base > 0).tolist():
            heap.append((-float(base[v]), 0, v, v))
        heapq.heapify(heap)
        done = np.zeros(self.n_nodes, dtype=bool)
        pred = self.pred
        while heap:
            neg, dist, origin, node = heapq.heappop(heap)
            if done[node]:
                continue
            done[node] = True
            phi[node] = -neg
            nd = dist + 1
            value = float(base[origin]) * omega**nd
            if value <= 0.0:
                continue
            for u in pred[node]:
                if not done[u]:
                    heapq.heappush(heap, (-value, nd, origin, u))
        return phi

    # -- anchor groups ---------------------------------------------------------------
    def anchor_index(self) -> tuple[np.ndarray, int]:
        """Per row the anchor group (= source node) index and the number of nodes."""
        return self.src, self.n_nodes


def graph_stats(graph: TransitionGraph, unreachable: str = "max_plus_one") -> dict[str, Any]:
    """GraphGPO diagnostics (SPEC §4.3) for one group's graph.

    * ``nodes``: canonical states (the virtual success node and dead ends excluded);
    * ``edges``: distinct observed transitions (s, a, s′);
    * ``reuse_rate``: share of rows whose source state is visited by ≥ 2 trajectories
      [MileGPO Fig. 2: "transitions originate from states shared among the rollouts"];
    * ``success_reachable_share``: share of canonical states with a path to success;
    * ``tie_rate``: among pairs of distinct edges (s, a, s′), (s, b, s″) with a ≠ b out of
      the same state, the share whose graph returns are equal (equal D(s′) = D(s″) under
      the ``unreachable`` convention) [MileGPO Fig. 2, App. C.1]; ``nan`` when no pairs.
    * ``action_pairs``: the number of such pairs, ``tie_pairs`` the tied ones;
    * ``success``: whether the group has a success.
    """
    n_rows = graph.n_rows
    nn = max(graph.n_nodes, 1)
    na = max(len(graph.actions), 1)
    real = graph.is_real()
    # reuse: rows whose source node is visited (as a source) by >= 2 trajectories
    if n_rows:
        tv = np.unique(graph.traj * nn + graph.src)
        n_traj_per_node = np.bincount(tv % nn, minlength=graph.n_nodes)
        reuse = float(np.mean(n_traj_per_node[graph.src] >= 2))
    else:
        reuse = float("nan")
    d = graph.success_distances()
    n_real = int(real.sum())
    reach = float(np.isfinite(d[real]).sum() / n_real) if n_real else float("nan")
    # distinct edges (u, a, v)
    if n_rows:
        e = np.unique((graph.src * na + graph.action) * nn + graph.dst)
        eu = e // (na * nn)
        ea = (e // nn) % na
        ev = e % nn
        df = graph.filled_distances(unreachable)
        # discretise distances (inf -> -1) to compare returns exactly via distance equality
        dk = np.where(np.isfinite(df[ev]), df[ev], -1.0).astype(np.int64)
        total_pairs = _pairs(eu) - _pairs(eu * na + ea)
        key_d = eu * (int(dk.max()) + 2) + (dk + 1)
        tie_pairs = _pairs(key_d) - _pairs(key_d * na + ea)
        tie_rate = tie_pairs / total_pairs if total_pairs else float("nan")
        n_edges = int(e.size)
    else:
        total_pairs, tie_pairs, tie_rate, n_edges = 0, 0, float("nan"), 0
    return {
        "nodes": n_real,
        "edges": n_edges,
        "reuse_rate": reuse,
        "success_reachable_share": reach,
        "tie_rate": float(tie_rate),
        "action_pairs": int(total_pairs),
        "tie_pairs": int(tie_pairs),
        "success": bool(graph.success_node >= 0),
    }


def _pairs(keys: np.ndarray) -> int:
    """Σ over distinct key values of C(count, 2)."""
    if keys.size == 0:
        return 0
    _, c = np.unique(keys, return_counts=True)
    return int((c * (c - 1) // 2).sum())

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
[GraphGPO notes §5.2, Eq. d(s) = min (c + d(s′))].

For speed a whole batch of groups is held in one object (:meth:`TransitionGraph.from_groups`):
every group gets its own nodes, so the groups are disjoint components and one pass of numpy
(and one multi-source BFS) serves all of them.  Rows are stored flat, group-major then
trajectory-major; :meth:`RowTable.split` / :meth:`RowTable.split_groups` turn per-row arrays
back into one array per trajectory.

Example:
    >>> from rubrics.trajectory import Step, Trajectory
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
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from operator import attrgetter
from typing import Any

import numpy as np

from rubrics.trajectory import Trajectory
from wrappers.credit.base import CreditInputError
from wrappers.credit.common import EPS, check_choice
from wrappers.credit.similarity import check_similarity, cluster_texts

__all__ = [
    "SUCCESS",
    "UNREACHABLE",
    "RowTable",
    "StepColumns",
    "Terminal",
    "TransitionGraph",
    "compress_keys",
    "count_pairs",
    "graph_stats",
    "graph_stats_batch",
    "group_pairs",
    "segment_max",
    "segment_normalize",
]

#: Conventions for states that cannot reach success: GraphGPO's max finite distance + 1,
#: or MileGPO's "the decayed term is 0".
UNREACHABLE = ("max_plus_one", "zero")


class _SuccessNode:
    """The virtual success node (a singleton; compares equal only to itself)."""

    _instance: _SuccessNode | None = None

    def __new__(cls) -> _SuccessNode:  # noqa: PYI034  (a singleton)
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


def segment_normalize(x: np.ndarray, seg: np.ndarray, mode: str, n_seg: int | None = None,
                      singleton: str = "zero") -> np.ndarray:
    """Norm(x) within each segment (anchor group); SPEC §4 preamble.

    ``mode="mean_std"``: (x − mean)/(sample std + 1e-6); ``mode="mean"``: x − mean.
    Values are shifted by their segment's first member before averaging, so a segment of
    equal values gives exactly 0.

    Args:
        x: Values, shape (n,).
        seg: Segment index of each value in ``0..n_seg-1``, shape (n,).
        mode: ``"mean_std"`` or ``"mean"``.
        n_seg: Number of segments (default ``seg.max() + 1``).
        singleton: A segment of one gives ``"zero"`` (step groups) or keeps its value,
            ``"identity"`` (task groups: mean 0, scale 1) [MCGPO A.3].

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
    first = np.zeros(k)
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
    single = counts[seg] == 1
    out[single] = 0.0 if singleton == "zero" else x[single]
    return out


def segment_max(x: np.ndarray, seg: np.ndarray, n_seg: int, initial: float = -np.inf) -> np.ndarray:
    """Per-segment maximum (``initial`` for empty segments)."""
    out = np.full(n_seg, initial, dtype=np.float64)
    if x.size:
        np.maximum.at(out, seg, x)
    return out


def count_pairs(keys: np.ndarray) -> int:
    """Σ over distinct key values of C(count, 2): the number of pairs sharing a key.

    Example:
        >>> count_pairs(np.array([3, 1, 3, 3]))
        3
    """
    if keys.size == 0:
        return 0
    _, c = np.unique(keys, return_counts=True)
    return int((c * (c - 1) // 2).sum())


def group_pairs(keys: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group, the number of pairs of items sharing a key (keys never span groups)."""
    if keys.size == 0:
        return np.zeros(n_groups)
    _, first, c = np.unique(keys, return_index=True, return_counts=True)
    return np.bincount(group[first], weights=(c * (c - 1) // 2).astype(float), minlength=n_groups)


def compress_keys(keys: np.ndarray) -> np.ndarray:
    """Dense ids 0..k-1 for integer keys (keeps composite keys small)."""
    if keys.size == 0:
        return keys.astype(np.int64)
    return np.unique(keys, return_inverse=True)[1].astype(np.int64).reshape(-1)


def _clusters(keys: Sequence[Hashable], similarity: float, group: int) -> tuple[list[int], int]:
    """:func:`~wrappers.credit.similarity.cluster_texts` of one group's keys (errors name the group)."""
    try:
        return cluster_texts(keys, similarity)
    except CreditInputError as exc:
        raise CreditInputError(f"group {group}: {exc} (similarity needs str state keys)") from None


class _LazySteps:
    """Iterates the steps of trajectories in row order (built only when a column is missing)."""

    def __init__(self, trajs: Sequence[Trajectory]) -> None:
        self.trajs = trajs

    def __iter__(self) -> Any:
        return (s for t in self.trajs for s in t.steps)


class StepColumns:
    """Step rows as columns, group-major then trajectory-major then step order (the
    :class:`RowTable` order): what the row-level estimators read.

    Built from groups (:meth:`of_groups`; a column is read from the steps when first asked
    for) or directly from columns (:mod:`wrappers.credit.flat` builds it from an RL
    library's flat rows without making any :class:`~rubrics.trajectory.Step`).

    Args:
        sizes: Trajectories per group.
        lengths: Steps per trajectory.
        success: Per trajectory ``Trajectory.success``.
        steps: All steps in row order (the source of columns not given).
        **columns: Given columns: ``reward``, ``penalty`` (float arrays), ``state_key``,
            ``next_state_key``, ``action_key`` (lists).
    """

    NAMES = ("reward", "penalty", "state_key", "next_state_key", "action_key")

    def __init__(self, sizes: Sequence[int], lengths: Sequence[int], success: Sequence[bool],
                 steps: Sequence[Any] | None = None, **columns: Any) -> None:
        unknown = set(columns) - set(self.NAMES)
        if unknown:
            raise TypeError(f"unknown step columns {sorted(unknown)}; known: {', '.join(self.NAMES)}")
        self.sizes, self.lengths, self.success = list(sizes), list(lengths), list(success)
        self._steps, self._cols = steps, dict(columns)

    @classmethod
    def of_groups(cls, groups: Sequence[Sequence[Trajectory]], names: Sequence[str] = ("reward", "penalty")
                  ) -> StepColumns:
        """The columns of a batch of groups: ``names`` are read now (trajectory by trajectory,
        while its steps are in cache), any other column when first asked for."""
        trajs = [t for g in groups for t in g]
        lists: dict[str, list[Any]] = {k: [] for k in names}
        getters = [(lists[k].extend, attrgetter(k)) for k in names]
        for t in trajs:
            steps = t.steps
            for extend, get in getters:
                extend(map(get, steps))
        cols = {k: np.array(v, dtype=np.float64) if k in ("reward", "penalty") else v for k, v in lists.items()}
        return cls([len(g) for g in groups], [len(t.steps) for t in trajs], [bool(t.success) for t in trajs],
                   steps=_LazySteps(trajs), **cols)

    def trajectory_keys(self) -> Iterator[tuple[list[Hashable], list[Hashable], list[Hashable]]]:
        """Per trajectory, its ``state_key``, ``next_state_key`` and ``action_key`` lists
        (read from the steps trajectory by trajectory when not given as columns)."""
        if isinstance(self._steps, _LazySteps) and not {"state_key", "next_state_key", "action_key"} <= set(self._cols):
            for t in self._steps.trajs:
                steps = t.steps
                yield ([s.state_key for s in steps], [s.next_state_key for s in steps],
                       [s.action_key for s in steps])
            return
        state, nxt, act = (self.column(k) for k in ("state_key", "next_state_key", "action_key"))
        offsets = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.intp).tolist()
        for a, b in pairwise(offsets):
            yield state[a:b], nxt[a:b], act[a:b]

    def column(self, name: str) -> Any:
        """One column: a float64 array for ``reward``/``penalty``, else a list."""
        col = self._cols.get(name)
        if col is None:
            if name not in self.NAMES:
                raise KeyError(f"unknown step column {name!r}; known: {', '.join(self.NAMES)}")
            if self._steps is None:
                raise KeyError(f"step column {name!r} was not given")
            values = list(map(attrgetter(name), self._steps))  # (a _LazySteps iterates the steps)
            col = np.array(values, dtype=np.float64) if name in ("reward", "penalty") else values
            self._cols[name] = col
        return col


class RowTable:
    """A batch of groups as flat step rows (group-major, then trajectory-major).

    Attributes:
        n_groups: Number of groups.
        group_traj: Trajectory offsets of each group (global trajectory index), len n_groups+1.
        traj_group: Group of every trajectory.
        offsets: Row offsets of each trajectory, len n_traj+1.
        traj, group: Trajectory / group of every row.
        reward, penalty: Per-row task reward and row-local penalty.
        success: Per-trajectory success flags.
        columns: The :class:`StepColumns` the table was built from.
    """

    def __init__(self, groups: Sequence[Sequence[Trajectory]], names: Sequence[str] = ("reward", "penalty")) -> None:
        self._init_rows(StepColumns.of_groups(groups, names))

    @classmethod
    def from_columns(cls, columns: StepColumns) -> RowTable:
        """The table of :class:`StepColumns` (no groups or steps needed)."""
        self = cls.__new__(cls)
        self._init_rows(columns)
        return self

    def _init_rows(self, cols: StepColumns) -> None:
        sizes, lengths = cols.sizes, cols.lengths
        self.columns = cols
        self.n_groups = len(sizes)
        self.group_traj = np.concatenate([[0], np.cumsum(sizes)]).astype(np.intp)
        self.traj_group = np.repeat(np.arange(self.n_groups, dtype=np.intp), sizes)
        self.n_traj = len(lengths)
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.intp)
        self.traj = np.repeat(np.arange(self.n_traj, dtype=np.intp), lengths)
        self.group = self.traj_group[self.traj]
        self.success = np.array(cols.success, dtype=bool)
        self.reward = cols.column("reward")
        self.penalty = cols.column("penalty")

    def anchor_ids(self, similarity: float | None = None) -> tuple[np.ndarray, int]:
        """Per row the anchor-group id of its ``state_key`` within its group (ids in order of
        first appearance, never spanning groups), and the number of anchor groups.

        ``similarity``: a threshold τ in (0, 1]: rows whose (text) state keys are similar
        share an anchor group, clustered in row order against each cluster's first key
        (:func:`~wrappers.credit.similarity.cluster_texts`); ``None``: equal keys only.
        """
        keys = self.columns.column("state_key")
        bounds = self.offsets[self.group_traj].tolist()
        ids: list[int] = []
        total = 0
        for g, (a, b) in enumerate(pairwise(bounds)):
            if similarity is not None:
                labels, n = _clusters(keys[a:b], similarity, g)
                ids.extend([total + k for k in labels])
                total += n
                continue
            index: dict[Hashable, int] = {}
            new = index.setdefault
            ids.extend([total + new(k, len(index)) for k in keys[a:b]])
            total += len(index)
        return np.array(ids, dtype=np.intp), total

    @property
    def n_rows(self) -> int:
        """Number of step rows."""
        return int(self.traj.size)

    def split(self, values: np.ndarray) -> list[np.ndarray]:
        """Split a per-row array into one array per trajectory (all groups, in order)."""
        values = np.asarray(values, dtype=np.float64)
        return [values[a:b] for a, b in pairwise(self.offsets.tolist())]

    def split_groups(self, values: np.ndarray) -> list[list[np.ndarray]]:
        """Split a per-row array into ``[group][trajectory]`` arrays."""
        per_traj = self.split(values)
        return [per_traj[a:b] for a, b in pairwise(self.group_traj.tolist())]

    def outcomes(self) -> np.ndarray:
        """O_i = Σ_t reward_{i,t} per trajectory."""
        return np.bincount(self.traj, weights=self.reward, minlength=self.n_traj)

    def episode_term(self, norm: str, over: str = "rows") -> np.ndarray:
        """Norm_task(Z) per row, Z_{i,t} = O_i + penalty_{i,t} (SPEC §4 preamble).

        ``over="rows"`` normalises Z over all rows of each group (task-group singletons keep
        their value: mean 0, scale 1); ``over="trajectories"`` normalises O_i over the
        group's trajectories and broadcasts it (penalties ignored), as
        :func:`~wrappers.credit.common.task_norm` does.
        """
        check_choice("episode_norm", over, ("rows", "trajectories"))
        o = self.outcomes()
        if over == "rows":
            return segment_normalize(o[self.traj] + self.penalty, self.group, norm, self.n_groups, "identity")
        per_traj = segment_normalize(o, self.traj_group, norm, self.n_groups, "identity")
        return per_traj[self.traj]

    def returns(self, gamma: float) -> np.ndarray:
        """R_t = Σ_{k≥t} γ^{k−t} reward_k + penalty_t per row (same recursion as
        :func:`~wrappers.credit.common.step_returns`)."""
        rew = self.reward.tolist()
        pen = self.penalty.tolist()
        out = [0.0] * len(rew)
        for a, b in pairwise(self.offsets.tolist()):
            acc = 0.0
            for t in range(b - 1, a - 1, -1):
                acc = rew[t] + gamma * acc
                out[t] = acc + pen[t]
        return np.array(out, dtype=np.float64)


class TransitionGraph(RowTable):
    """The transition graph of one group, or of a batch of groups held as disjoint components.

    Attributes (besides :class:`RowTable`'s):
        keys: Node index → state key (including :data:`SUCCESS` and :class:`Terminal` nodes).
        indices: Per group, state key → node index (built on first use); :attr:`index` is
            group 0's.
        node_group: Group of every node.
        success_nodes: Per group the index of its :data:`SUCCESS` node, or -1 without success;
            :attr:`success_node` is group 0's.
        src, dst: Source/destination node of every row, int arrays.
        action: Action-class id of every row (ids index :attr:`actions`).
        edge_u, edge_v: Distinct (u, v) edges (sorted by u·n_nodes + v).
        succ, pred: Distinct successors / predecessors of every node (lists of int lists).
        similarity: ``None``, or the threshold τ the graph was built with: then each group's
            text state keys with difflib ratio ≥ τ to a merged node's first key are that node
            (:func:`~wrappers.credit.similarity.cluster_texts` over the state nodes in order of
            first appearance; :data:`SUCCESS` and :class:`Terminal` nodes are never merged;
            :attr:`indices` maps every merged key to its node, :attr:`keys` holds first keys).
    """

    def __init__(self, group: Sequence[Trajectory], similarity: float | None = None) -> None:
        self._build([group], similarity)

    @classmethod
    def from_groups(cls, groups: Sequence[Sequence[Trajectory]], similarity: float | None = None) -> TransitionGraph:
        """One graph for a batch of groups (one disjoint component per group)."""
        self = cls.__new__(cls)
        self._build(groups, similarity)
        return self

    @classmethod
    def from_columns(cls, columns: StepColumns, similarity: float | None = None) -> TransitionGraph:
        """The batch graph of :class:`StepColumns` (no groups or steps needed)."""
        self = cls.__new__(cls)
        self._build(columns, similarity)
        return self

    def _build(self, groups: Sequence[Sequence[Trajectory]] | StepColumns, similarity: float | None = None) -> None:
        cols = groups if isinstance(groups, StepColumns) else StepColumns.of_groups(groups)
        self._init_rows(cols)
        self.similarity = check_similarity(similarity)
        per_traj = cols.trajectory_keys()
        group_traj, success = self.group_traj.tolist(), cols.success
        keys: list[Hashable] = []
        local: list[dict[Hashable, int]] = []
        node_offsets: list[int] = []
        success_nodes: list[int] = []
        actions: dict[Hashable, int] = {}
        act_id = actions.setdefault
        src: list[int] = []  # group-local node ids; offset per group below
        dst: list[int] = []
        act: list[int] = []
        counts: list[int] = []
        for g0, g1 in pairwise(group_traj):
            row0 = len(src)
            index: dict[Hashable, int] = {}
            node = index.setdefault  # node(key, len(index)) -> local id, in order of appearance
            for i, k in enumerate(range(g0, g1)):
                state, nxt_keys, act_keys = next(per_traj)
                n = len(state)
                if n == 0:
                    continue
                s_ids = [node(x, len(index)) for x in state]
                d_ids = s_ids[1:]
                d_ids.append(-1)
                if nxt_keys.count(None) - (nxt_keys[-1] is None) < n - 1:  # an explicit next state before the end
                    for t in range(n - 1):
                        if nxt_keys[t] is not None:
                            d_ids[t] = node(nxt_keys[t], len(index))
                if success[k]:
                    last: Hashable = SUCCESS
                elif nxt_keys[-1] is not None:
                    last = nxt_keys[-1]
                else:
                    last = Terminal(i)
                d_ids[-1] = node(last, len(index))
                src.extend(s_ids)
                dst.extend(d_ids)
                act.extend([act_id(x, len(actions)) for x in act_keys])
            node_keys: list[Hashable] = list(index)
            if self.similarity is not None:  # similar states become one node (its first key)
                node_keys, remap = _merge_similar(node_keys, self.similarity, len(local))
                index = {k: remap[v] for k, v in index.items()}
                src[row0:] = [remap[v] for v in src[row0:]]
                dst[row0:] = [remap[v] for v in dst[row0:]]
            node_offsets.append(len(keys))
            local.append(index)
            keys.extend(node_keys)
            counts.append(len(node_keys))
            success_nodes.append(index[SUCCESS] + node_offsets[-1] if SUCCESS in index else -1)
        self._local = local
        self._node_offsets = node_offsets
        self._indices: list[dict[Hashable, int]] | None = None
        self.node_group = np.repeat(np.arange(self.n_groups, dtype=np.intp), counts)
        row_off = np.array(node_offsets, dtype=np.intp)[self.group] if self.n_groups else np.zeros(0, np.intp)
        self.keys = keys
        self.success_nodes = np.array(success_nodes, dtype=np.intp)
        self.actions = list(actions)
        self.n_nodes = len(keys)
        self.src = np.array(src, dtype=np.intp) + row_off
        self.dst = np.array(dst, dtype=np.intp) + row_off
        self.action = np.array(act, dtype=np.intp)
        # Distinct (u, v) adjacency; multi-edges with different actions collapse here,
        # which is all unit-cost distances need.
        nn = max(self.n_nodes, 1)
        pairs = np.unique(self.src * nn + self.dst) if self.src.size else np.zeros(0, np.intp)
        self.edge_u = pairs // nn
        self.edge_v = pairs % nn
        pred: list[list[int]] = [[] for _ in range(self.n_nodes)]
        for u, v in zip(self.edge_u.tolist(), self.edge_v.tolist()):
            pred[v].append(u)
        self.pred = pred
        self._real = np.fromiter((not (k is SUCCESS or type(k) is Terminal) for k in keys), bool, len(keys))
        self._d_success: np.ndarray | None = None

    # -- basic views -------------------------------------------------------------------
    @property
    def succ(self) -> list[list[int]]:
        """Distinct successors of every node (built on use; distances only need :attr:`pred`)."""
        out: list[list[int]] = [[] for _ in range(self.n_nodes)]
        for u, v in zip(self.edge_u.tolist(), self.edge_v.tolist()):
            out[u].append(v)
        return out

    @property
    def indices(self) -> list[dict[Hashable, int]]:
        """Per group, state key → (batch) node index."""
        if self._indices is None:
            self._indices = [{k: v + off for k, v in ix.items()} if off else ix
                             for ix, off in zip(self._local, self._node_offsets)]
        return self._indices

    @property
    def index(self) -> dict[Hashable, int]:
        """State key → node index of the first (for a single-group graph: the) group."""
        return self.indices[0]

    @property
    def success_node(self) -> int:
        """The success node of the first (single) group, -1 when it has no success."""
        return int(self.success_nodes[0]) if self.n_groups else -1

    @property
    def n_states(self) -> int:
        """Number of canonical state nodes (the virtual and Terminal nodes excluded)."""
        return int(self._real.sum())

    def is_real(self) -> np.ndarray:
        """Boolean mask of nodes that are canonical states (not SUCCESS, not Terminal)."""
        return self._real.copy()

    # -- distances ---------------------------------------------------------------------
    def distances_to(self, target: int | Sequence[int]) -> np.ndarray:
        """d(s, target) for every node s (float; ``inf`` when unreachable).

        Reverse breadth-first search with unit edge cost; several targets give the distance
        to the nearest one (one pass for all groups of a batch).
        """
        targets = [int(t) for t in np.atleast_1d(np.asarray(target)).tolist() if t >= 0]
        dist = [-1] * self.n_nodes
        for t in targets:
            dist[t] = 0
        queue = deque(targets)
        pred = self.pred
        while queue:
            v = queue.popleft()
            dv = dist[v] + 1
            for u in pred[v]:
                if dist[u] < 0:
                    dist[u] = dv
                    queue.append(u)
        arr = np.array(dist, dtype=np.float64)
        arr[arr < 0] = np.inf
        return arr

    def success_distances(self) -> np.ndarray:
        """D(s): distance of every node to its group's :data:`SUCCESS` (``inf`` if unreachable; cached)."""
        if self._d_success is None:
            self._d_success = self.distances_to(self.success_nodes)
        return self._d_success

    def filled_distances(self, unreachable: str = "max_plus_one") -> np.ndarray:
        """D(s) with unreachable states set by the ``unreachable`` convention.

        ``"max_plus_one"``: the group's max finite D + 1 (1 when nothing is finite, i.e. no
        success; then all states are equal anyway) [GraphGPO notes §5.2]; ``"zero"``: left
        at ``inf`` so that every decayed term γ^D is 0 [MileGPO §3.1].
        """
        check_choice("unreachable", unreachable, UNREACHABLE)
        d = self.success_distances()
        if unreachable == "zero":
            return d
        finite = np.isfinite(d)
        top = segment_max(d[finite], self.node_group[finite], self.n_groups, initial=0.0)
        return np.where(finite, d, top[self.node_group] + 1.0)

    def graph_returns(self, gamma: float, scale: float = 10.0, unreachable: str = "max_plus_one",
                      progress: bool = False) -> np.ndarray:
        """R^graph per row = scale·γ^{D(s_{t+1})} [SPEC §4.3; MCGPO A.3; MileGPO Eq. 1].

        ``progress=True`` (verl-agent's ``normalize_distance``): scale·γ^{D(s_{t+1}) − D(s_t) + 1},
        the change of distance (1 closer: scale; no change: scale·γ; 1 farther: scale·γ²).
        Either way a destination at D = ``inf`` (``unreachable="zero"``) gives 0.
        """
        d = self.filled_distances(unreachable)
        exponent = d[self.dst]
        finite = np.isfinite(exponent)
        if progress:
            exponent = np.where(finite, exponent - d[self.src] + 1.0, np.inf)
        out = np.zeros(exponent.shape)
        out[finite] = scale * np.power(float(gamma), exponent[finite])
        return out

    def max_product_potential(self, base: np.ndarray, omega: float) -> np.ndarray:
        """Φ(s) = max_v base(v)·ω^{d(s, v)} over nodes v with base(v) > 0 (0 if none reachable).

        A best-first search over reversed edges (values only shrink along a path since
        0 < ω ≤ 1), so every node is settled once: O(E log V) instead of one BFS per v.
        Groups are disjoint, so one search serves a whole batch.
        """
        phi = np.zeros(self.n_nodes)
        heap: list[tuple[float, int, int, int]] = [(-b, 0, v, v) for v, b in
                                                   zip(np.flatnonzero(base > 0).tolist(), base[base > 0].tolist())]
        heapq.heapify(heap)
        done = [False] * self.n_nodes
        pred = self.pred
        base_l = base.tolist()
        while heap:
            neg, dist, origin, node = heapq.heappop(heap)
            if done[node]:
                continue
            done[node] = True
            phi[node] = -neg
            nd = dist + 1
            value = base_l[origin] * omega**nd
            if value <= 0.0:
                continue
            for u in pred[node]:
                if not done[u]:
                    heapq.heappush(heap, (-value, nd, origin, u))
        return phi


def _merge_similar(keys: list[Hashable], similarity: float, group: int) -> tuple[list[Hashable], list[int]]:
    """One group's node keys after merging similar states (:func:`~wrappers.credit.similarity.cluster_texts`
    over the state nodes in node order; :data:`SUCCESS` and :class:`Terminal` nodes are never
    merged): the merged nodes' keys (each a cluster's first key) and the new id of every old node."""
    states = [k for k in keys if not (k is SUCCESS or type(k) is Terminal)]
    labels, _ = _clusters(states, similarity, group)
    cluster = dict(zip(states, labels))
    merged: list[Hashable] = []
    node_of: dict[int, int] = {}
    remap = []
    for k in keys:
        c = cluster.get(k, -1) if not (k is SUCCESS or type(k) is Terminal) else -1
        if c < 0 or c not in node_of:
            merged.append(k)
            if c >= 0:
                node_of[c] = len(merged) - 1
        remap.append(len(merged) - 1 if c < 0 else node_of[c])
    return merged, remap


def graph_stats_batch(graph: TransitionGraph, unreachable: str = "max_plus_one") -> list[dict[str, Any]]:
    """GraphGPO diagnostics (SPEC §4.3), one dict per group of ``graph``.

    * ``nodes``: canonical states (the virtual success node and dead ends excluded);
    * ``edges``: distinct observed transitions (s, a, s′);
    * ``reuse_rate``: share of rows whose source state is visited by ≥ 2 trajectories
      [MileGPO Fig. 2: "transitions originate from states shared among the rollouts"];
    * ``success_reachable_share``: share of canonical states with a path to success;
    * ``tie_rate``: among pairs of distinct edges (s, a, s′), (s, b, s″) with a ≠ b out of
      the same state, the share whose graph returns are equal (equal D(s′) = D(s″) under
      the ``unreachable`` convention) [MileGPO Fig. 2, App. C.1]; ``nan`` when no pairs;
    * ``action_pairs``: the number of such pairs, ``tie_pairs`` the tied ones;
    * ``success``: whether the group has a success.
    """
    G = graph.n_groups
    nn = max(graph.n_nodes, 1)
    na = max(len(graph.actions), 1)
    real = graph._real
    ng = graph.node_group
    rows = np.bincount(graph.group, minlength=G).astype(float)
    nodes = np.bincount(ng[real], minlength=G)
    d = graph.success_distances()
    reach = np.bincount(ng[real & np.isfinite(d)], minlength=G)
    with np.errstate(invalid="ignore", divide="ignore"):
        if graph.n_rows:
            tv = np.unique(graph.traj * nn + graph.src)
            n_traj_per_node = np.bincount(tv % nn, minlength=graph.n_nodes)
            shared = (n_traj_per_node[graph.src] >= 2).astype(float)
            reuse = np.bincount(graph.group, weights=shared, minlength=G) / rows
            e = np.unique((graph.src * na + graph.action) * nn + graph.dst)
            eu, ea, ev = e // (na * nn), (e // nn) % na, e % nn
            eg = ng[eu]
            edges = np.bincount(eg, minlength=G)
            df = graph.filled_distances(unreachable)[ev]
            dk = np.where(np.isfinite(df), df, -1.0).astype(np.int64) + 1
            k_u = eu.astype(np.int64)
            k_ud = compress_keys(k_u * (int(dk.max()) + 1) + dk)
            total = group_pairs(k_u, eg, G) - group_pairs(k_u * na + ea, eg, G)
            ties = group_pairs(k_ud, eg, G) - group_pairs(k_ud * na + ea, eg, G)
            tie_rate = np.where(total > 0, ties / np.maximum(total, 1), np.nan)
        else:
            reuse = np.full(G, np.nan)
            edges = np.zeros(G, np.intp)
            total = ties = np.zeros(G)
            tie_rate = np.full(G, np.nan)
        share = np.where(nodes > 0, reach / np.maximum(nodes, 1), np.nan)
    return [
        {
            "nodes": int(nodes[g]),
            "edges": int(edges[g]),
            "reuse_rate": float(reuse[g]),
            "success_reachable_share": float(share[g]),
            "tie_rate": float(tie_rate[g]),
            "action_pairs": int(total[g]),
            "tie_pairs": int(ties[g]),
            "success": bool(graph.success_nodes[g] >= 0),
        }
        for g in range(G)
    ]


def graph_stats(graph: TransitionGraph, unreachable: str = "max_plus_one") -> dict[str, Any]:
    """:func:`graph_stats_batch` of a single-group graph (see there for the names)."""
    return graph_stats_batch(graph, unreachable)[0]

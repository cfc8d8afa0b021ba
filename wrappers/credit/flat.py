"""Credit estimators over flat step rows, the batch layout of verl, OpenRLHF or SkyRL.

RL libraries keep one *row* per agent step (prompt = the step's history-conditioned context,
response = the generated action) in flat arrays.  :func:`flat_advantages` takes such columns,
regroups them into sibling groups, runs any registered estimator and scatters the per-step
advantages back to the rows, in the input order.  Rows may come in any order; ``step_index``
(or, when omitted, the order of appearance within a trajectory) orders the steps.

At native speed: the regrouping is column-wise numpy work, and the estimators with a
``compute_rows`` method (every built-in one) run on a
:class:`~wrappers.credit.graph.RowTable` of :class:`StepRows` built straight from the
columns, each column picked on first use, the same code path their grouped call takes, so no
:class:`~rubrics.trajectory.Step` is ever made.  Your own estimators without one get
:class:`~rubrics.trajectory.Trajectory` groups, built only then (``python bench/credit.py``
prints flat vs native times from 3,840 to 61,440 rows).

Columns (one entry per row; only the first four are required):

=================  ===========================================================================
``group_id``       the sibling group (verl-agent: ``uid``), hashable
``traj_id``        the trajectory (verl-agent: ``traj_uid``), hashable, unique across groups
``state_key``      the anchor state (verl-agent: ``anchor_obs``), hashable
``reward``         the environment task reward of the step (10 on success, else 0)
``step_index``     position within the trajectory (default: order of appearance)
``next_state_key`` post-action state (default: the next step's state)
``action``         the action text; ``action_key`` its class (default: the text)
``penalty``        row-local additive terms (invalid action −0.1, event shaping), default 0
``valid``          whether the action was admissible, default True
``score``          raw terminal score (constant within a trajectory), default 1.0/0.0 by success
``success``        trajectory success (constant within a trajectory), default: Σ reward > 0
``slot``           rollout slot (constant within a trajectory), default: order within the group;
                   when given, trajectories are ordered by slot inside their group
``task_id``        default: ``group_id``; ``truncated`` default False
``observation``, ``feedback``, ``rubric``, ``extra``; ``keys`` as {name: column}
=================  ===========================================================================

Example — a verl-agent-style batch (``non_tensor_batch`` arrays, one row per step):

    >>> import numpy as np
    >>> nb = {
    ...     "uid":            np.array(["task-a"] * 4),
    ...     "traj_uid":       np.array(["r0", "r0", "r1", "r1"]),
    ...     "anchor_obs":     np.array(["kitchen", "fridge open", "kitchen", "kitchen"], dtype=object),
    ...     "rewards":        np.array([0.0, 10.0, 0.0, 0.0]),       # env reward per step
    ...     "is_action_valid": np.array([True, True, False, True]),
    ...     "actions":        np.array(["open fridge 1", "take apple", "fly", "look"], dtype=object),
    ... }
    >>> adv = flat_advantages(
    ...     "graphgpo", group_id=nb["uid"], traj_id=nb["traj_uid"], state_key=nb["anchor_obs"],
    ...     reward=nb["rewards"], valid=nb["is_action_valid"], action=nb["actions"],
    ...     penalty=np.where(nb["is_action_valid"], 0.0, -0.1))
    >>> adv.shape, bool(adv[0] > 0 > adv[2])
    ((4,), True)

    In a verl trainer the row advantages are then broadcast over each row's response tokens,
    e.g. ``batch.batch["advantages"] = torch.from_numpy(adv)[:, None] * response_mask``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise, repeat
from operator import itemgetter, ne
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np

from rubrics.trajectory import Step, Trajectory
from wrappers.credit.base import (
    MAX_MAGNITUDE,
    CreditInputError,
    CreditResult,
    Estimator,
    get_estimator,
)
from wrappers.credit.graph import RowTable, StepColumns

__all__ = ["FlatBatch", "FlatCredit", "StepRows", "flat_advantages", "flat_batch", "flat_credit"]


class FlatBatch:
    """Flat rows regrouped into sibling groups.

    Attributes:
        groups: The groups (built on first use), in order of first appearance of their
            ``group_id``; inside a group the trajectories are ordered by ``slot`` when slots
            were given, else by first appearance.
        table: The same rows as a :class:`~wrappers.credit.graph.RowTable` of
            :class:`StepRows` (group-major, then trajectory, then step order), built from the
            columns without any ``Step``; the row-level estimators read only this.
        rows: ``rows[g][i]`` = input row index of each step of ``groups[g][i]``, in step order.
        order: Input row of every table row (``table`` order), shape (n_rows,).
        n_rows: Number of input rows.
        group_ids, traj_ids: The original ids, ``group_ids[g]`` and ``traj_ids[g][i]``.
    """

    def __init__(self, layout: _Layout, columns: Mapping[str, Any]) -> None:
        self._layout, self._columns = layout, columns
        self.n_rows = layout.n_rows
        self.order = layout.order
        self.group_ids = layout.g_ids
        bounds = layout.group_traj
        self.traj_ids = [[layout.t_ids[k] for k in layout.traj_codes[a:b]] for a, b in pairwise(bounds)]
        self._rows: list[list[np.ndarray]] | None = None
        self._groups: list[list[Trajectory]] | None = None
        self._table: RowTable | None = None

    @property
    def rows(self) -> list[list[np.ndarray]]:
        if self._rows is None:
            lay = self._layout
            per_traj = np.split(lay.order, lay.offsets[1:-1]) if lay.n_rows else []
            self._rows = [per_traj[a:b] for a, b in pairwise(lay.group_traj)]
        return self._rows

    @property
    def groups(self) -> list[list[Trajectory]]:
        if self._groups is None:
            self._groups = _build_groups(self._layout, self._columns, self.table.columns)
        return self._groups

    @property
    def table(self) -> RowTable:
        if self._table is None:
            lay = self._layout
            self._table = RowTable.from_columns(StepRows(
                np.diff(lay.group_traj).tolist(), np.diff(lay.offsets).tolist(), lay.traj["success"],
                _FlatSource(lay, self._columns)))
        return self._table

    @property
    def consistent(self) -> bool:
        """Task ids constant per group, slots unique per group, keys hashable: what
        :func:`~wrappers.credit.base.validate_groups` checks beyond the column checks."""
        return self._layout.consistent and _hashable(self._columns)

    def scatter(self, per_step: Sequence[Sequence[np.ndarray]], fill: float = 0.0) -> np.ndarray:
        """Per-row array from per-group, per-trajectory step arrays."""
        out = np.full(self.n_rows, fill, dtype=np.float64)
        if self.n_rows:
            flat = [np.asarray(v, dtype=np.float64) for arrays in per_step for v in arrays]
            out[self.order] = np.concatenate(flat) if flat else np.zeros(0)
        return out


@dataclass
class FlatCredit:
    """Row-level credit of a flat batch.

    Attributes:
        advantages: One advantage per input row.
        shaped_rewards: One shaped reward per row when the estimator reports them, else None.
        pairs: MCGPO preferences as input rows, shape (P, 2): (preferred row, rejected row).
        pair_weights: The weight of each pair, shape (P,).
        results: The underlying :class:`CreditResult` per group.
        batch: The regrouped batch.
    """

    advantages: np.ndarray
    shaped_rewards: np.ndarray | None
    pairs: np.ndarray
    pair_weights: np.ndarray
    results: list[CreditResult]
    batch: FlatBatch


#: The value of an absent ``rubric`` / ``extra`` in :class:`StepRows` (read-only, shared).
_EMPTY: Mapping[str, Any] = MappingProxyType({})


class _RowSource(Protocol):
    def read(self, names: Sequence[str], keys: Sequence[str]) -> tuple[dict[str, Any], dict[str, list[Any]]]: ...
    def group(self, rows: StepRows, g: int, names: Sequence[str], keys: Sequence[str]
              ) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]: ...
    def trajectory_keys(self) -> Iterator[tuple[list[Hashable], list[Hashable], list[Hashable]]] | None: ...
    def traj(self, name: str) -> list[Any]: ...


class StepRows(StepColumns):
    """Every field of the step rows: the :class:`~wrappers.credit.graph.StepColumns` of a
    batch plus the other ``Step`` fields, the matching keys (``Step.keys``) and the
    trajectory fields.  What MCGPO and SCPO read, so that they run one code path whether the
    rows come from groups (:meth:`of_groups`: read from the steps) or from an RL library's
    flat columns (:attr:`FlatBatch.table`: no ``Step`` is made).

    Row order is the :class:`~wrappers.credit.graph.RowTable` order (group-major, then
    trajectory, then step).  A whole column (:meth:`column`, :meth:`key_column`) is read on
    first use and kept; :meth:`group_columns` gives one group's rows, which rows from groups
    read from that group's steps without making a batch-wide list.

    Example:
        >>> from rubrics.trajectory import Step, Trajectory
        >>> rows = StepRows.of_groups([[Trajectory("t", 3, [Step("s", "go", keys={"exact": 1}), Step("u", "look")])]])
        >>> rows.column("action"), rows.key_column("exact"), rows.traj_column("slot")
        (['go', 'look'], [1, None], [3])
        >>> rows.group_columns(0, ["action"], ["exact"])
        ({'action': ['go', 'look']}, {'exact': [1, None]})
    """

    #: Step fields of :meth:`column` (``reward``/``penalty`` as float arrays, the rest as lists).
    NAMES = (*StepColumns.NAMES, "action", "valid", "observation", "feedback", "rubric", "extra")
    #: Trajectory fields of :meth:`traj_column`.
    TRAJ_NAMES = ("task_id", "slot", "score", "truncated")

    def __init__(self, sizes: Sequence[int], lengths: Sequence[int], success: Sequence[bool],
                 source: _RowSource) -> None:
        super().__init__(sizes, lengths, success)
        self._source = source
        self._keys: dict[str, list[Any]] = {}
        self._traj: dict[str, list[Any]] = {}
        self._group_bounds: list[int] | None = None

    @classmethod
    def of_groups(cls, groups: Sequence[Sequence[Trajectory]], names: Sequence[str] = ("reward", "penalty"),
                  keys: Sequence[str] = ()) -> StepRows:
        """The rows of a batch of groups (``names`` and ``keys``: the columns to read now, in one
        pass over the steps; the rest is read on use)."""
        trajs = [t for g in groups for t in g]
        self = cls([len(g) for g in groups], [len(t.steps) for t in trajs], [bool(t.success) for t in trajs],
                   _GroupSource(groups))
        self.load(names, keys)
        return self

    def load(self, names: Sequence[str] = (), keys: Sequence[str] = ()) -> None:
        """Read the step fields ``names`` and the matching keys ``keys`` now (those not yet read)."""
        names = [k for k in dict.fromkeys(names) if k not in self._cols]
        keys = [k for k in dict.fromkeys(keys) if k not in self._keys]
        self._check(names)
        if names or keys:
            cols, key_cols = self._source.read(names, keys)
            self._cols.update(cols)
            self._keys.update(key_cols)

    def _check(self, names: Sequence[str]) -> None:
        unknown = [k for k in names if k not in self.NAMES]
        if unknown:
            raise KeyError(f"unknown step column {unknown[0]!r}; known: {', '.join(self.NAMES)}")

    def column(self, name: str) -> Any:
        """One step field per row: a float64 array for ``reward``/``penalty``, else a list
        (``action_key`` defaults to the action; an absent ``rubric``/``extra`` is an empty
        mapping)."""
        if name not in self._cols:
            self.load((name,))
        return self._cols[name]

    def key_column(self, name: str) -> list[Any]:
        """``Step.keys[name]`` per row; None where the key is absent (or ``keys`` is not a
        mapping)."""
        if name not in self._keys:
            self.load((), (name,))
        return self._keys[name]

    def group_columns(self, g: int, names: Sequence[str] = (), keys: Sequence[str] = ()
                      ) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        """Group ``g``'s rows of the step fields ``names`` (as lists) and matching keys ``keys``."""
        self._check(names)
        return self._source.group(self, g, names, keys)

    def group_rows(self, g: int) -> tuple[int, int]:
        """The row range ``(start, stop)`` of group ``g``."""
        if self._group_bounds is None:
            offsets = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.intp)
            self._group_bounds = offsets[np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.intp)].tolist()
        return self._group_bounds[g], self._group_bounds[g + 1]

    def trajectory_keys(self) -> Iterator[tuple[list[Hashable], list[Hashable], list[Hashable]]]:
        """Per trajectory, its ``state_key``, ``next_state_key`` and ``action_key`` lists (rows
        from groups not yet read as columns: read from each trajectory's steps)."""
        names = ("state_key", "next_state_key", "action_key")
        per = None if all(k in self._cols for k in names) else self._source.trajectory_keys()
        if per is None:
            cols = [self.column(k) for k in names]
            offsets = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.intp).tolist()
            per = ((cols[0][a:b], cols[1][a:b], cols[2][a:b]) for a, b in pairwise(offsets))
        return per

    def traj_column(self, name: str) -> list[Any]:
        """One trajectory field (``task_id``, ``slot``, ``score``, ``truncated``) per trajectory."""
        col = self._traj.get(name)
        if col is None:
            if name not in self.TRAJ_NAMES:
                raise KeyError(f"unknown trajectory column {name!r}; known: {', '.join(self.TRAJ_NAMES)}")
            col = self._traj[name] = self._source.traj(name)
        return col


class _GroupSource:
    """The :class:`StepRows` columns of groups of trajectories, read from their steps."""

    def __init__(self, groups: Sequence[Sequence[Trajectory]]) -> None:
        self._groups = groups

    def read(self, names: Sequence[str], keys: Sequence[str]) -> tuple[dict[str, Any], dict[str, list[Any]]]:
        """The step fields ``names`` and matching keys ``keys`` of every row, read in one pass
        group by group (while its steps are in cache)."""
        cols: dict[str, Any] = {k: [] for k in names}
        key_cols: dict[str, list[Any]] = {k: [] for k in keys}
        for g in range(len(self._groups)):
            got, got_keys = self.group(None, g, names, keys)
            for k, v in got.items():
                cols[k].extend(v)
            for k, v in got_keys.items():
                key_cols[k].extend(v)
        for k in ("reward", "penalty"):
            if k in cols:
                cols[k] = np.array(cols[k], dtype=np.float64)
        return cols, key_cols

    def group(self, rows: StepRows | None, g: int, names: Sequence[str], keys: Sequence[str]
              ) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        steps = [s for t in self._groups[g] for s in t.steps]
        key_cols = {}
        if keys:
            dicts = [s.keys for s in steps]
            if not set(map(type, dicts)) <= {dict}:  # (mappings of other types; not a mapping: no keys)
                dicts = [d if isinstance(d, Mapping) else _EMPTY for d in dicts]
            key_cols = {k: _key_values(dicts, k) for k in keys}
        return {k: _READ[k](steps) for k in names}, key_cols

    def trajectory_keys(self) -> Iterator[tuple[list[Hashable], list[Hashable], list[Hashable]]]:
        for group in self._groups:
            for t in group:
                steps = t.steps
                yield [s.state_key for s in steps], [s.next_state_key for s in steps], [s.action_key for s in steps]

    def traj(self, name: str) -> list[Any]:
        return [getattr(t, name) for g in self._groups for t in g]


def _key_values(dicts: list[Mapping[str, Any]], name: str) -> list[Any]:
    """``keys[name]`` of each step's ``keys`` mapping; None where absent."""
    try:
        return list(map(itemgetter(name), dicts))
    except KeyError:
        return [d.get(name) for d in dicts]


#: Readers of one Step field of a list of steps (list comprehensions read attributes faster
#: than ``attrgetter``).
_READ: dict[str, Callable[[list[Step]], list[Any]]] = {
    "reward": lambda steps: [s.reward for s in steps],
    "penalty": lambda steps: [s.penalty for s in steps],
    "state_key": lambda steps: [s.state_key for s in steps],
    "next_state_key": lambda steps: [s.next_state_key for s in steps],
    "action_key": lambda steps: [s.action_key for s in steps],
    "action": lambda steps: [s.action for s in steps],
    "valid": lambda steps: [s.valid for s in steps],
    "observation": lambda steps: [s.observation for s in steps],
    "feedback": lambda steps: [s.feedback for s in steps],
    "rubric": lambda steps: [s.rubric for s in steps],
    "extra": lambda steps: [s.extra for s in steps],
}


def _column(name: str, values: Any, n: int | None) -> Sequence[Any]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"column {name!r} must be a sequence or array (one entry per row), got {type(values).__name__}")
    if n is not None and len(values) != n:
        raise ValueError(f"column {name!r} has {len(values)} rows, expected {n} (the length of group_id)")
    return values


def _item(v: Any) -> Any:
    """numpy scalars -> Python scalars (keys compare equal across arrays and lists)."""
    return v.item() if isinstance(v, np.generic) else v


def _py_values(col: Sequence[Any]) -> list[Any]:
    """The column as a list of Python values (numpy scalars converted, as :func:`_item`)."""
    if isinstance(col, np.ndarray) and col.dtype != object:
        return col.tolist()  # (ndarray.tolist converts every element like .item())
    values = list(col)
    if any(issubclass(t, np.generic) for t in set(map(type, values))):
        return [_item(v) for v in values]
    return values


def _raw(col: Sequence[Any]) -> list[Any]:
    """The column as a list, numpy scalars left as they are (they hash and compare like the
    Python values they stand for; convert what is kept with :func:`_item`)."""
    if isinstance(col, np.ndarray):
        return col.tolist() if col.dtype != object else list(col)
    return col if isinstance(col, list) else list(col)


def _codes(values: list[Any], name: str) -> tuple[np.ndarray, list[Hashable]]:
    """Codes in order of first appearance (the distinct values as Python values); an
    unhashable value names its row."""
    try:
        uniq = list(dict.fromkeys(values))
    except TypeError:
        for r, v in enumerate(values):
            try:
                hash(v)
            except TypeError:
                raise CreditInputError(f"row {r}: {name} is not hashable ({type(v).__name__}): {v!r}") from None
        raise
    index = dict(zip(uniq, range(len(uniq))))
    return np.fromiter(map(index.__getitem__, values), dtype=np.intp, count=len(values)), [_item(u) for u in uniq]


#: Trajectory-level columns (constant within a trajectory), in the order they are checked.
_TRAJ_FIELDS = ("success", "score", "slot", "task_id", "truncated")


@dataclass
class _Layout:
    """Where every input row goes: table order = group, then trajectory (by slot when given),
    then step; per trajectory (table order) its trajectory-level values."""

    n_rows: int
    g_ids: list[Hashable]
    t_ids: list[Hashable]
    order: np.ndarray  # input row of each table row
    offsets: np.ndarray  # table-row offsets of each trajectory, len n_traj + 1
    group_traj: list[int]  # trajectory offsets of each group, len n_groups + 1
    traj_codes: list[int]  # trajectory code of each trajectory (table order)
    row_traj: np.ndarray  # trajectory code of each input row
    traj: dict[str, list[Any]] = field(default_factory=dict)  # success, score, slot, task_id, truncated
    consistent: bool = True  # task ids constant per group and slots unique: validate_groups would pass


def flat_batch(
    *,
    group_id: Sequence[Hashable],
    traj_id: Sequence[Hashable],
    state_key: Sequence[Hashable],
    reward: Sequence[float],
    step_index: Sequence[int] | None = None,
    next_state_key: Sequence[Hashable] | None = None,
    action: Sequence[str] | None = None,
    action_key: Sequence[Hashable] | None = None,
    penalty: Sequence[float] | None = None,
    valid: Sequence[bool] | None = None,
    score: Sequence[float] | None = None,
    success: Sequence[bool] | None = None,
    slot: Sequence[int] | None = None,
    task_id: Sequence[Hashable] | None = None,
    truncated: Sequence[bool] | None = None,
    observation: Sequence[str] | None = None,
    feedback: Sequence[str] | None = None,
    rubric: Sequence[Mapping[str, Any]] | None = None,
    keys: Mapping[str, Sequence[Any]] | None = None,
    extra: Sequence[Mapping[str, Any]] | None = None,
) -> FlatBatch:
    """Regroup flat step rows into groups of trajectories (see the module docstring).

    Column-wise numpy work: the trajectories and their steps are built only when
    :attr:`FlatBatch.groups` is used; :attr:`FlatBatch.table` serves the row-level
    estimators without them.

    Raises:
        ValueError: columns of different lengths, duplicate or missing step indices.
        CreditInputError: NaN/inf rewards or penalties, unhashable ids or keys, a
            trajectory id reused in two groups, trajectory-level fields (score, success,
            slot, task_id, truncated) that differ between rows of one trajectory; the
            message names the row.
    """
    n = len(_column("group_id", group_id, None))
    cols: dict[str, Any] = {
        "traj_id": traj_id, "state_key": state_key, "reward": reward, "step_index": step_index,
        "next_state_key": next_state_key, "action": action, "action_key": action_key,
        "penalty": penalty, "valid": valid, "score": score, "success": success, "slot": slot,
        "task_id": task_id, "truncated": truncated, "observation": observation,
        "feedback": feedback, "rubric": rubric, "extra": extra,
    }
    for name, col in cols.items():
        if col is not None:
            _column(name, col, n)
    cols["keys"] = {k: _column(f"keys[{k!r}]", v, n) for k, v in (keys or {}).items()}
    rew = _numbers("reward", reward)
    pen = np.zeros(n) if penalty is None else _numbers("penalty", penalty)
    cols["reward"], cols["penalty"] = rew, pen
    layout = _layout(n, group_id, traj_id, step_index)
    _traj_values(layout, cols, rew)
    return FlatBatch(layout, cols)


def _numbers(name: str, values: Any) -> np.ndarray:
    """A 1-D float64 column of finite numbers within ±:data:`~wrappers.credit.base.MAX_MAGNITUDE`.

    Raises:
        CreditInputError: a value that is not a number (a string, None, a bool), NaN/inf, too
            large, or a column that is not one value per row; names the column and the row.
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise CreditInputError(f"{name} must be one number per row (a 1-D column), got shape {arr.shape}")
    if arr.dtype.kind not in "iuf":
        for r, v in enumerate(values if not isinstance(values, np.ndarray) else arr.tolist()):
            if isinstance(v, np.generic):
                v = v.item()
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise CreditInputError(f"row {r}: {name} must be a number, got {type(v).__name__} {v!r}")
    arr = arr.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise CreditInputError(f"row {bad[0]}: {name} is not finite ({arr[bad[0]]})")
    big = np.flatnonzero(np.abs(arr) > MAX_MAGNITUDE)
    if big.size:
        raise CreditInputError(f"row {big[0]}: {name} is {arr[big[0]]}, beyond the ±{MAX_MAGNITUDE:g} the "
                               "estimators take (rescale the rewards)")
    return arr


def _layout(n: int, group_id: Sequence[Hashable], traj_id: Sequence[Hashable],
            step_index: Sequence[int] | None) -> _Layout:
    """Codes, the trajectory-of-group check and the step order (rows of one trajectory by
    step index, else by appearance); trajectories in order of first appearance for now."""
    g_codes, g_ids = _codes(_raw(group_id), "group_id")
    t_codes, t_ids = _codes(_raw(traj_id), "traj_id")
    n_traj = len(t_ids)
    first_row = np.zeros(n_traj, dtype=np.intp)
    first_row[t_codes[::-1]] = np.arange(n - 1, -1, -1, dtype=np.intp)  # (the last write is the first row)
    traj_group = g_codes[first_row]
    bad = np.flatnonzero(traj_group[t_codes] != g_codes)
    if bad.size:
        r = int(bad[0])
        t = t_codes[r]
        raise CreditInputError(
            f"row {r}: trajectory {t_ids[t]!r} appears in groups {g_ids[traj_group[t]]!r} and "
            f"{g_ids[g_codes[r]]!r} (trajectory ids must be unique across groups)")
    counts = np.bincount(t_codes, minlength=n_traj)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.intp)
    if step_index is None:
        order = np.argsort(t_codes, kind="stable")  # order of appearance within a trajectory
    else:
        sidx = np.asarray(step_index)
        if sidx.dtype.kind not in "iu":
            sidx = np.array([int(v) for v in step_index], dtype=np.int64)
        order = np.lexsort((sidx, t_codes))  # by trajectory, then step index (stable)
        t_sorted = t_codes[order]
        bad = np.flatnonzero(sidx[order] != np.arange(n, dtype=np.intp) - starts[:-1][t_sorted])
        if bad.size:
            t = int(t_sorted[bad[0]])
            rows = order[starts[t]:starts[t + 1]].tolist()
            got = sidx[rows].tolist()
            raise ValueError(
                f"trajectory {t_ids[t]!r} (rows {rows[:8]}{'...' if len(rows) > 8 else ''}): step indices "
                f"{got[:8]}{'...' if len(got) > 8 else ''} are not 0..{len(got) - 1} without gaps or duplicates")
    # group-major: trajectories of each group in order of first appearance (stable)
    by_group = np.argsort(traj_group, kind="stable")
    sizes = np.bincount(traj_group, minlength=len(g_ids))
    return _Layout(n, g_ids, t_ids, order, starts, np.concatenate([[0], np.cumsum(sizes)]).astype(np.intp).tolist(),
                   by_group.tolist(), t_codes)


def _traj_values(layout: _Layout, cols: Mapping[str, Any], rew: np.ndarray) -> None:
    """Trajectory-level values, checked constant within each trajectory, then the final
    table order (by slot inside a group when slots were given)."""
    order, starts = layout.order, layout.offsets  # (still in trajectory-code order)
    order_l, starts_l = order.tolist(), starts.tolist()
    head_rows = _take(order_l, starts_l[:-1])  # each trajectory's first row in step order
    row_traj = layout.row_traj.tolist()
    for name in _TRAJ_FIELDS:
        if cols[name] is None:
            continue
        vals = _raw(cols[name])
        heads = _take(vals, head_rows)
        if any(map(ne, vals, _take(heads, row_traj))):  # (in C; a NaN head is looked at below)
            traj_of_pos = np.repeat(np.arange(len(heads)), np.diff(starts)).tolist()
            in_order = _take(vals, order_l)
            for pos, (v, t) in enumerate(zip(in_order, traj_of_pos)):
                if v is not heads[t] and v != heads[t]:  # (the first row is never compared with itself)
                    raise CreditInputError(
                        f"row {order_l[pos]}: {name} {_item(v)!r} differs from {_item(heads[t])!r} at row "
                        f"{head_rows[t]} of the same trajectory {layout.t_ids[t]!r}")
        layout.traj[name] = [_item(h) for h in heads]
    outcome = np.add.reduceat(rew[order], starts[:-1]) if layout.n_rows else np.zeros(0)
    tv = layout.traj
    tv["success"] = [bool(v) for v in tv["success"]] if "success" in tv else (outcome > 0).tolist()
    scores = tv.get("score") or [1.0 if s else 0.0 for s in tv["success"]]
    for t, sc in enumerate(scores):
        if not isinstance(sc, (int, float)) or isinstance(sc, bool) or not math.isfinite(float(sc)):
            raise CreditInputError(f"row {head_rows[t]}: score must be a finite number, got {sc!r}")
    tv["score"] = [float(sc) for sc in scores]
    _final_order(layout)


def _final_order(layout: _Layout) -> None:
    """Reorder trajectories group-major (slot order inside a group when slots were given),
    fill the default slots, task ids and truncation, and note whether validation holds."""
    codes = layout.traj_codes  # group-major, first appearance
    bounds = layout.group_traj
    slots = layout.traj.get("slot")
    if slots is not None:
        codes = [k for a, b in pairwise(bounds) for k in sorted(codes[a:b], key=lambda k: slots[k])]
    group_of = [g for g, (a, b) in enumerate(pairwise(bounds)) for _ in range(b - a)]
    tv = layout.traj
    per = {name: [tv[name][k] for k in codes] for name in tv}
    if slots is None:
        per["slot"] = [i for a, b in pairwise(bounds) for i in range(b - a)]
    per.setdefault("task_id", [layout.g_ids[g] for g in group_of])
    per.setdefault("truncated", [False] * len(codes))
    per["slot"] = [int(s) for s in per["slot"]]
    per["truncated"] = [bool(x) for x in per["truncated"]]
    starts = layout.offsets
    ks = np.array(codes, dtype=np.intp)
    lengths = np.diff(starts)[ks]
    layout.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.intp)
    # row p of trajectory k (its new place: offsets[j] + p) is old row starts[k] + p
    layout.order = layout.order[np.repeat(starts[ks] - layout.offsets[:-1], lengths) + np.arange(layout.n_rows)]
    layout.traj_codes, layout.traj = codes, per
    layout.consistent = all(
        len(set(per["slot"][a:b])) == b - a and len(set(per["task_id"][a:b])) <= 1 for a, b in pairwise(bounds))


def _pick(col: Sequence[Any] | None, order: list[int], convert: Callable[[Any], Any] | None = None,
          python: bool = False) -> list[Any] | None:
    """The column's values in table order (``convert`` applied; ``python``: numpy scalars
    as Python values), or None."""
    if col is None:
        return None
    picked = _take(_py_values(col) if python else _raw(col), order)
    return picked if convert is None else list(map(convert, picked))


def _take(values: Sequence[Any], order: list[int]) -> list[Any]:
    """``[values[r] for r in order]``, in C."""
    if len(order) < 2:
        return [values[r] for r in order]
    return list(itemgetter(*order)(values))


class _FlatSource:
    """The :class:`StepRows` columns of a flat batch, picked from the input columns in table
    order on first use, with the values :func:`_build_steps` would give its steps."""

    def __init__(self, layout: _Layout, cols: Mapping[str, Any]) -> None:
        self._layout, self._cols = layout, cols
        self._order: list[int] | None = None

    @property
    def order(self) -> list[int]:
        if self._order is None:
            self._order = self._layout.order.tolist()
        return self._order

    def step(self, name: str) -> Any:
        cols, order, n = self._cols, self.order, self._layout.n_rows
        if name in ("reward", "penalty"):
            return cols[name][self._layout.order]
        if name == "action_key":
            akeys = _pick(cols["action_key"], order)
            if akeys is None or None in akeys:  # the action is the default key
                actions = self.step("action")
                akeys = actions if akeys is None else [a if k is None else k for k, a in zip(akeys, actions)]
            return akeys
        if name in ("state_key", "next_state_key"):
            return _pick(cols[name], order) or [None] * n
        if name == "valid":
            return _pick(cols["valid"], order, bool) or [True] * n
        if name in ("rubric", "extra"):
            values = _pick(cols[name], order) or [_EMPTY] * n
            return [_EMPTY if v is None else v for v in values] if None in values else values
        return _pick(cols[name], order, str) or [""] * n  # action, observation, feedback

    def key(self, name: str) -> list[Any]:
        keys = self._cols["keys"]
        return _pick(keys[name], self.order, python=True) if name in keys else [None] * self._layout.n_rows

    def read(self, names: Sequence[str], keys: Sequence[str]) -> tuple[dict[str, Any], dict[str, list[Any]]]:
        return {k: self.step(k) for k in names}, {k: self.key(k) for k in keys}

    def group(self, rows: StepRows, g: int, names: Sequence[str], keys: Sequence[str]
              ) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        a, b = rows.group_rows(g)
        cols = {k: rows.column(k)[a:b] for k in names}
        return ({k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in cols.items()},
                {k: rows.key_column(k)[a:b] for k in keys})

    def trajectory_keys(self) -> None:
        return None  # (the columns are sliced)

    def traj(self, name: str) -> list[Any]:
        return self._layout.traj[name]


def _hashable(cols: Mapping[str, Any]) -> bool:
    """Whether every state, next-state and action key hashes (else
    :func:`~wrappers.credit.base.validate_groups` names the step); the input columns are
    hashed as they are (a default key, None or the action text, always hashes)."""
    try:
        for name in ("state_key", "next_state_key", "action_key"):
            if cols[name] is not None:
                hash(tuple(cols[name]))
    except TypeError:
        return False
    return True


def _build_steps(cols: Mapping[str, Any], sc: StepRows) -> list[Step]:
    """The steps in table order.  Their values are already what ``Step.__post_init__`` makes
    (str action, float reward and penalty, the action as default key), so the instances are
    filled directly: several times faster than the constructor."""
    names = list(cols["keys"])
    key_vals = [sc.key_column(k) for k in names]
    columns = [
        _py_values(sc.column("state_key")), sc.column("action"), _py_values(sc.column("action_key")),
        sc.column("reward").tolist(), sc.column("penalty").tolist(), sc.column("valid"), sc.column("observation"),
        sc.column("feedback"), sc.column("rubric"), [dict(zip(names, vs)) for vs in zip(*key_vals)] if names
        else repeat(None), _py_values(sc.column("next_state_key")), sc.column("extra"),
    ]
    new = Step.__new__
    steps = []
    append = steps.append
    for sk, a, ak, rw, pn, v, ob, fb, rb, ky, ns, ex in zip(*columns):
        s = new(Step)
        s.__dict__ = {"state_key": sk, "action": a, "action_key": ak, "reward": rw, "penalty": pn, "valid": v,
                      "observation": ob, "feedback": fb, "rubric": dict(rb), "keys": {} if ky is None else ky,
                      "next_state_key": ns, "extra": dict(ex)}
        append(s)
    return steps


def _build_groups(layout: _Layout, cols: Mapping[str, Any], sc: StepRows) -> list[list[Trajectory]]:
    """The groups of trajectories (table order)."""
    steps = _build_steps(cols, sc)
    offsets = layout.offsets.tolist()
    tv = layout.traj
    trajs = [Trajectory(task_id=tv["task_id"][k], slot=tv["slot"][k], steps=steps[a:b], score=tv["score"][k],
                        success=tv["success"][k], truncated=tv["truncated"][k])
             for k, (a, b) in enumerate(pairwise(offsets))]
    return [trajs[a:b] for a, b in pairwise(layout.group_traj)]
def _resolve(estimator: str | Estimator, params: Mapping[str, Any] | None) -> Estimator:
    if isinstance(estimator, str):
        return get_estimator(estimator, **(params or {}))
    if params:
        raise TypeError("params are only accepted with an estimator name")
    if not isinstance(estimator, Estimator):
        raise TypeError(f"estimator must be a registered name or an Estimator, got {type(estimator).__name__}")
    return estimator


def _row_level(est: Estimator) -> bool:
    """Whether ``est`` computes from a :class:`~wrappers.credit.graph.RowTable` alone: it
    defines ``compute_rows`` and neither its ``compute`` nor ``__call__`` is overridden below."""
    cls = type(est)
    owner = next((c for c in cls.__mro__ if "compute_rows" in c.__dict__), None)
    return owner is not None and cls.compute is owner.compute and cls.__call__ is Estimator.__call__


def flat_credit(estimator: str | Estimator, *, params: Mapping[str, Any] | None = None, **columns: Any) -> FlatCredit:
    """Run ``estimator`` on flat rows; see :func:`flat_batch` for the columns.

    Args:
        estimator: A registered name (built with ``params``) or an :class:`Estimator`.
        params: Keyword parameters for :func:`~wrappers.credit.get_estimator`.
        **columns: The row columns.
    """
    est = _resolve(estimator, params)
    batch = flat_batch(**columns)
    try:
        if _row_level(est) and batch.consistent:  # the columns passed validate_groups' checks
            results = est.compute_rows(batch.table)
            if [len(r.advantages) for r in results] != [len(t) for t in batch.traj_ids]:
                raise AssertionError(f"{est.name}: wrong number of advantage arrays")
        else:
            results = est(batch.groups)
    except CreditInputError as exc:
        raise CreditInputError(f"{exc} [flat batch: groups in order {batch.group_ids[:10]}]") from exc
    adv = batch.scatter([r.advantages for r in results])
    shaped = None
    if results and all(r.shaped_rewards is not None for r in results):
        shaped = batch.scatter([r.shaped_rewards for r in results])
    pairs, weights = [], []
    for g, res in enumerate(results):
        for p in res.pairs:
            pairs.append((batch.rows[g][p.preferred[0]][p.preferred[1]], batch.rows[g][p.rejected[0]][p.rejected[1]]))
            weights.append(p.weight)
    return FlatCredit(
        advantages=adv,
        shaped_rewards=shaped,
        pairs=np.array(pairs, dtype=np.intp).reshape(-1, 2),
        pair_weights=np.array(weights, dtype=np.float64),
        results=results,
        batch=batch,
    )


def flat_advantages(estimator: str | Estimator, *, params: Mapping[str, Any] | None = None, **columns: Any) -> np.ndarray:
    """One advantage per input row (see the module docstring for the columns and an example)."""
    return flat_credit(estimator, params=params, **columns).advantages

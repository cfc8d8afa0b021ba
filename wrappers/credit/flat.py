"""Credit estimators over flat step rows, the batch layout of verl, OpenRLHF or SkyRL.

RL libraries keep one *row* per agent step (prompt = the step's history-conditioned context,
response = the generated action) in flat arrays.  :func:`flat_advantages` takes such columns,
rebuilds the sibling groups as :class:`~agent_envs.trajectory.Trajectory` objects, runs any
registered estimator and scatters the per-step advantages back to the rows, in the input
order.  Rows may come in any order; ``step_index`` (or, when omitted, the order of
appearance within a trajectory) orders the steps.

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
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from agent_envs.trajectory import Step, Trajectory
from wrappers.credit.base import CreditInputError, CreditResult, Estimator, get_estimator

__all__ = ["FlatBatch", "FlatCredit", "flat_advantages", "flat_batch", "flat_credit"]


@dataclass
class FlatBatch:
    """Flat rows regrouped into sibling groups.

    Attributes:
        groups: The groups, in order of first appearance of their ``group_id``; inside a
            group the trajectories are ordered by ``slot`` when slots were given, else by
            first appearance.
        rows: ``rows[g][i]`` = input row index of each step of ``groups[g][i]``, in step order.
        n_rows: Number of input rows.
        group_ids, traj_ids: The original ids, ``group_ids[g]`` and ``traj_ids[g][i]``.
    """

    groups: list[list[Trajectory]]
    rows: list[list[np.ndarray]]
    n_rows: int
    group_ids: list[Hashable] = field(default_factory=list)
    traj_ids: list[list[Hashable]] = field(default_factory=list)

    def scatter(self, per_step: Sequence[Sequence[np.ndarray]], fill: float = 0.0) -> np.ndarray:
        """Per-row array from per-group, per-trajectory step arrays."""
        out = np.full(self.n_rows, fill, dtype=np.float64)
        for g, arrays in enumerate(per_step):
            for i, values in enumerate(arrays):
                out[self.rows[g][i]] = values
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


def _column(name: str, values: Any, n: int | None) -> Sequence[Any]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"column {name!r} must be a sequence or array (one entry per row), got {type(values).__name__}")
    if n is not None and len(values) != n:
        raise ValueError(f"column {name!r} has {len(values)} rows, expected {n} (the length of group_id)")
    return values


def _factorize(values: Sequence[Any], name: str) -> tuple[list[int], list[Hashable]]:
    index: dict[Hashable, int] = {}
    codes = []
    for r, v in enumerate(values):
        try:
            codes.append(index.setdefault(v, len(index)))
        except TypeError:
            raise CreditInputError(f"row {r}: {name} is not hashable ({type(v).__name__}): {v!r}") from None
    return codes, list(index)


def _item(v: Any) -> Any:
    """numpy scalars -> Python scalars (keys compare equal across arrays and lists)."""
    return v.item() if isinstance(v, np.generic) else v


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

    Raises:
        ValueError: columns of different lengths, duplicate or missing step indices.
        CreditInputError: NaN/inf rewards or penalties, unhashable ids or keys, a
            trajectory id reused in two groups, trajectory-level fields (score, success,
            slot, task_id, truncated) that differ between rows of one trajectory; the
            message names the row.
    """
    n = len(_column("group_id", group_id, None))
    cols: dict[str, Sequence[Any] | None] = {
        "traj_id": traj_id, "state_key": state_key, "reward": reward, "step_index": step_index,
        "next_state_key": next_state_key, "action": action, "action_key": action_key,
        "penalty": penalty, "valid": valid, "score": score, "success": success, "slot": slot,
        "task_id": task_id, "truncated": truncated, "observation": observation,
        "feedback": feedback, "rubric": rubric, "extra": extra,
    }
    for name, col in cols.items():
        if col is not None:
            _column(name, col, n)
    key_cols = {k: _column(f"keys[{k!r}]", v, n) for k, v in (keys or {}).items()}
    rew = np.asarray(reward, dtype=np.float64)
    pen = np.zeros(n) if penalty is None else np.asarray(penalty, dtype=np.float64)
    for name, arr in (("reward", rew), ("penalty", pen)):
        bad = np.flatnonzero(~np.isfinite(arr))
        if bad.size:
            raise CreditInputError(f"row {bad[0]}: {name} is not finite ({arr[bad[0]]})")
    fast = _fast_batch(n, rew, pen, key_cols, cols, group_id)
    if fast is not None:
        return fast
    # The general path, which also names the row of any problem.
    g_codes, g_ids = _factorize([_item(v) for v in group_id], "group_id")
    t_codes, t_ids = _factorize([_item(v) for v in traj_id], "traj_id")
    # rows of each trajectory, in order of appearance
    by_traj: list[list[int]] = [[] for _ in t_ids]
    traj_group = [-1] * len(t_ids)
    for r in range(n):
        t = t_codes[r]
        if traj_group[t] == -1:
            traj_group[t] = g_codes[r]
        elif traj_group[t] != g_codes[r]:
            raise CreditInputError(
                f"row {r}: trajectory {t_ids[t]!r} appears in groups {g_ids[traj_group[t]]!r} and "
                f"{g_ids[g_codes[r]]!r} (trajectory ids must be unique across groups)")
        by_traj[t].append(r)
    if step_index is not None:
        sidx = np.asarray(step_index)
        for t, rows in enumerate(by_traj):
            order = sorted(rows, key=lambda r: int(sidx[r]))
            got = [int(sidx[r]) for r in order]
            if got != list(range(len(got))):
                raise ValueError(
                    f"trajectory {t_ids[t]!r} (rows {order[:8]}{'...' if len(order) > 8 else ''}): step indices "
                    f"{got[:8]}{'...' if len(got) > 8 else ''} are not 0..{len(got) - 1} without gaps or duplicates")
            by_traj[t] = order

    def traj_value(col: Sequence[Any] | None, rows: list[int], name: str, default: Any) -> Any:
        if col is None:
            return default
        first = _item(col[rows[0]])
        for r in rows[1:]:
            if _item(col[r]) != first:
                raise CreditInputError(
                    f"row {r}: {name} {_item(col[r])!r} differs from {first!r} at row {rows[0]} "
                    f"of the same trajectory {t_ids[t_codes[r]]!r}")
        return first

    groups: list[list[Trajectory]] = [[] for _ in g_ids]
    rows_out: list[list[np.ndarray]] = [[] for _ in g_ids]
    tids_out: list[list[Hashable]] = [[] for _ in g_ids]
    for t, rows in enumerate(by_traj):
        g = traj_group[t]
        steps = []
        for r in rows:
            steps.append(Step(
                state_key=_item(state_key[r]),
                action="" if action is None else str(action[r]),
                action_key=None if action_key is None else _item(action_key[r]),
                reward=float(rew[r]),
                penalty=float(pen[r]),
                valid=True if valid is None else bool(valid[r]),
                observation="" if observation is None else str(observation[r]),
                feedback="" if feedback is None else str(feedback[r]),
                rubric={} if rubric is None else dict(rubric[r]),
                keys={k: _item(v[r]) for k, v in key_cols.items()},
                next_state_key=None if next_state_key is None else _item(next_state_key[r]),
                extra={} if extra is None else dict(extra[r]),
            ))
        outcome = float(rew[rows].sum())
        succ = bool(traj_value(success, rows, "success", outcome > 0))
        sc = traj_value(score, rows, "score", 1.0 if succ else 0.0)
        if not isinstance(sc, (int, float)) or isinstance(sc, bool) or not math.isfinite(float(sc)):
            raise CreditInputError(f"row {rows[0]}: score must be a finite number, got {sc!r}")
        sl = traj_value(slot, rows, "slot", len(groups[g]))
        groups[g].append(Trajectory(
            task_id=traj_value(task_id, rows, "task_id", g_ids[g]),
            slot=int(sl),
            steps=steps,
            score=float(sc),
            success=succ,
            truncated=bool(traj_value(truncated, rows, "truncated", False)),
        ))
        rows_out[g].append(np.array(rows, dtype=np.intp))
        tids_out[g].append(t_ids[t])
    if slot is not None:  # canonical order: by slot, so the row order does not matter at all
        for g in range(len(groups)):
            order = sorted(range(len(groups[g])), key=lambda i: groups[g][i].slot)
            groups[g] = [groups[g][i] for i in order]
            rows_out[g] = [rows_out[g][i] for i in order]
            tids_out[g] = [tids_out[g][i] for i in order]
    return FlatBatch(groups, rows_out, n, g_ids, tids_out)


#: Step fields in constructor order, so that steps are built with positional arguments.
_STEP_FIELDS = tuple(f.name for f in fields(Step))
_TRAJ_FIELDS = ("success", "score", "slot", "task_id", "truncated")


def _py_values(col: Sequence[Any]) -> list[Any]:
    """The column as a list of Python values (numpy scalars converted, as :func:`_item`)."""
    if isinstance(col, np.ndarray) and col.dtype != object:
        return col.tolist()  # (ndarray.tolist converts every element like .item())
    values = list(col)
    if any(isinstance(v, np.generic) for v in values):
        return [_item(v) for v in values]
    return values


def _codes(values: list[Any]) -> tuple[np.ndarray, list[Hashable]] | None:
    """Codes in order of first appearance (``None`` if a value is unhashable)."""
    try:
        uniq = list(dict.fromkeys(values))
    except TypeError:
        return None
    index = dict(zip(uniq, range(len(uniq))))
    return np.fromiter(map(index.__getitem__, values), dtype=np.intp, count=len(values)), uniq


def _fast_batch(
    n: int,
    rew: np.ndarray,
    pen: np.ndarray,
    key_cols: Mapping[str, Sequence[Any]],
    cols: Mapping[str, Sequence[Any] | None],
    group_id: Sequence[Hashable],
) -> FlatBatch | None:
    """:func:`flat_batch` for well-formed input, column-wise; ``None`` sends the caller to
    the general row-by-row path (which names the problem).  The result is equal: the same
    groups, steps, trajectories and row indices."""
    g = _codes(_py_values(group_id))
    t = _codes(_py_values(cols["traj_id"]))
    if g is None or t is None:
        return None
    (g_codes, g_ids), (t_codes, t_ids) = g, t
    n_traj = len(t_ids)
    _, first_row = np.unique(t_codes, return_index=True)
    traj_group = g_codes[first_row]
    if not np.array_equal(traj_group[t_codes], g_codes):
        return None  # a trajectory id in two groups
    step_index = cols["step_index"]
    if step_index is None:
        order = np.argsort(t_codes, kind="stable")  # order of appearance within a trajectory
    else:
        sidx = np.asarray(step_index)
        if sidx.dtype.kind not in "iu":
            return None
        order = np.lexsort((sidx, t_codes))  # by trajectory, then step index (stable)
    counts = np.bincount(t_codes, minlength=n_traj)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.intp)
    t_sorted = t_codes[order]
    if step_index is not None and not np.array_equal(
        sidx[order], np.arange(n, dtype=np.intp) - starts[:-1][t_sorted]
    ):
        return None  # gaps or duplicates
    # trajectory-level columns must be constant within a trajectory
    traj_vals: dict[str, list[Any] | None] = {}
    for name in _TRAJ_FIELDS:
        col = cols[name]
        if col is None:
            traj_vals[name] = None
            continue
        vals = _py_values(col)
        heads = [vals[r] for r in order[starts[:-1]].tolist()]
        if any(vals[r] != heads[k] for r, k in zip(order.tolist(), t_sorted.tolist())):
            return None
        traj_vals[name] = heads
    # Step columns in step order.  They are tuples: the garbage collector stops tracking a
    # tuple of atomic values, where a long list would be traversed by every collection.
    order_t = tuple(order.tolist())

    def in_order(values: Sequence[Any] | None, convert: Callable[[Any], Any] | None, default: Any) -> tuple[Any, ...]:
        if values is None:
            return (default,) * n
        values = _py_values(values) if convert is None else values
        if convert is None or convert is str or convert is bool:
            picked = map(values.__getitem__, order_t)
            return tuple(picked if convert is None else map(convert, picked))
        return tuple(convert(values[r]) for r in order_t)

    built: dict[str, tuple[Any, ...]] = {
        "state_key": in_order(cols["state_key"], None, None),
        "action": in_order(cols["action"], str, ""),
        "action_key": in_order(cols["action_key"], None, None),
        "reward": in_order(rew.tolist(), None, 0.0),
        "penalty": in_order(pen.tolist(), None, 0.0),
        "valid": in_order(cols["valid"], bool, True),
        "observation": in_order(cols["observation"], str, ""),
        "feedback": in_order(cols["feedback"], str, ""),
        "next_state_key": in_order(cols["next_state_key"], None, None),
        "rubric": in_order(cols["rubric"], dict, None),
        "extra": in_order(cols["extra"], dict, None),
    }
    for name in ("rubric", "extra"):  # a fresh dict per step
        if cols[name] is None:
            built[name] = tuple({} for _ in order_t)
    names = list(key_cols)
    if names:
        key_vals = [in_order(key_cols[k], None, None) for k in names]
        built["keys"] = tuple(dict(zip(names, vs)) for vs in zip(*key_vals))
    else:
        built["keys"] = tuple({} for _ in order_t)
    if set(built) != set(_STEP_FIELDS):  # the data model changed: use the general path
        return None
    step_cols = [built[f] for f in _STEP_FIELDS]
    groups: list[list[Trajectory]] = [[] for _ in g_ids]
    rows_out: list[list[np.ndarray]] = [[] for _ in g_ids]
    tids_out: list[list[Hashable]] = [[] for _ in g_ids]
    bounds = starts.tolist()
    tg = traj_group.tolist()
    success, score, slot = traj_vals["success"], traj_vals["score"], traj_vals["slot"]
    task_id, truncated = traj_vals["task_id"], traj_vals["truncated"]
    for k in range(n_traj):
        gk = tg[k]
        rows = order[bounds[k] : bounds[k + 1]]
        outcome = float(rew[rows].sum())
        succ = bool(outcome > 0 if success is None else success[k])
        sc = (1.0 if succ else 0.0) if score is None else score[k]
        if not isinstance(sc, (int, float)) or isinstance(sc, bool) or not math.isfinite(float(sc)):
            return None
        groups[gk].append(Trajectory(
            task_id=g_ids[gk] if task_id is None else task_id[k],
            slot=int(len(groups[gk]) if slot is None else slot[k]),
            steps=list(map(Step, *(col[bounds[k] : bounds[k + 1]] for col in step_cols))),
            score=float(sc),
            success=succ,
            truncated=bool(False if truncated is None else truncated[k]),
        ))
        rows_out[gk].append(np.array(rows, dtype=np.intp))
        tids_out[gk].append(t_ids[k])
    if slot is not None:  # canonical order: by slot, so the row order does not matter at all
        for gk in range(len(groups)):
            perm = sorted(range(len(groups[gk])), key=lambda i: groups[gk][i].slot)
            groups[gk] = [groups[gk][i] for i in perm]
            rows_out[gk] = [rows_out[gk][i] for i in perm]
            tids_out[gk] = [tids_out[gk][i] for i in perm]
    return FlatBatch(groups, rows_out, n, g_ids, tids_out)


def _resolve(estimator: str | Estimator, params: Mapping[str, Any] | None) -> Estimator:
    if isinstance(estimator, str):
        return get_estimator(estimator, **(params or {}))
    if params:
        raise TypeError("params are only accepted with an estimator name")
    if not isinstance(estimator, Estimator):
        raise TypeError(f"estimator must be a registered name or an Estimator, got {type(estimator).__name__}")
    return estimator


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

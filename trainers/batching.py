"""Training rows and pair-aware mini/micro-batching.

Each decision is one training row (its own prompt, its response, its advantage).  MCGPO's
pairwise loss is computed inside a micro-batch, so both rows of a pair must land in the same
micro-batch: rows joined by pairs form *units* (connected components) that are never split.

Example:
    >>> import numpy as np
    >>> plan = plan_batches(6, [(0, 5, 1.0), (2, 3, 0.5)], micro_rows=2, mini_batches=1,
    ...                     rng=np.random.default_rng(0))
    >>> sorted(sorted(mb) for mb in plan[0])
    [[0, 5], [1, 4], [2, 3]]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from trainers.lm_policy import RolloutResult

__all__ = ["TrainRow", "build_rows", "pairs_in", "plan_batches", "subsample_rows"]


@dataclass
class TrainRow:
    """One training row: prompt ids, response ids, advantage and where it came from; in
    ``choose`` mode also the scored candidates' ids and the chosen index (see
    :class:`trainers.lm_policy.RowTokens`)."""

    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    group: int
    traj: int
    step: int
    candidates: list[list[int]] = field(default_factory=list)
    chosen: int = -1


def build_rows(result: RolloutResult, credits: Sequence, *, drop_zero_advantage: bool = False) -> tuple[list[TrainRow], list[tuple[int, int, float]]]:
    """Flatten rollouts and credit into rows and row-index pairs ``(preferred, rejected, c)``.

    Steps with an empty response (nothing was generated) are skipped; a pair that refers to
    a skipped step is dropped.  With ``drop_zero_advantage`` rows whose advantage is exactly
    0 and that belong to no pair are left out (their policy-gradient term is 0; only their
    KL/entropy terms are lost) — a CPU speed option.
    """
    rows: list[TrainRow] = []
    index: dict[tuple[int, int, int], int] = {}
    pairs: list[tuple[int, int, float]] = []
    for g, (group_rows, credit) in enumerate(zip(result.rows, credits)):
        for i, traj_rows in enumerate(group_rows):
            adv = credit.advantages[i]
            if len(adv) != len(traj_rows):
                raise ValueError(f"group {g}, trajectory {i}: {len(adv)} advantages for {len(traj_rows)} steps")
            for t, row in enumerate(traj_rows):
                if not row.response_ids:
                    continue
                index[(g, i, t)] = len(rows)
                rows.append(TrainRow(row.prompt_ids, row.response_ids, float(adv[t]), g, i, t, row.candidates, row.chosen))
        for p in getattr(credit, "pairs", []) or []:
            a = index.get((g, *p.preferred))
            b = index.get((g, *p.rejected))
            if a is not None and b is not None and a != b:
                pairs.append((a, b, float(p.weight)))
    if drop_zero_advantage:
        in_pair = {r for a, b, _ in pairs for r in (a, b)}
        keep = [k for k, r in enumerate(rows) if r.advantage != 0.0 or k in in_pair]
        new = {old: new for new, old in enumerate(keep)}
        rows = [rows[k] for k in keep]
        pairs = [(new[a], new[b], c) for a, b, c in pairs]
    return rows, pairs


def _units(n_rows: int, pairs: Sequence[tuple[int, int, float]]) -> list[list[int]]:
    parent = list(range(n_rows))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b, _ in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    comps: dict[int, list[int]] = {}
    for r in range(n_rows):
        comps.setdefault(find(r), []).append(r)
    return list(comps.values())


def plan_batches(
    n_rows: int,
    pairs: Sequence[tuple[int, int, float]],
    *,
    micro_rows: int,
    mini_batches: int,
    rng: np.random.Generator,
) -> list[list[list[int]]]:
    """Split rows into ``mini_batches`` mini-batches of micro-batches of ≤ ``micro_rows`` rows.

    Rows connected by pairs are kept together (a unit larger than ``micro_rows`` is cut in
    order, and the pairs it cuts are then not co-located: :func:`pairs_in` drops them).
    Units are shuffled with ``rng``; mini-batches get near-equal row counts.

    Returns:
        ``plan[m][k]`` = row indices of micro-batch ``k`` of mini-batch ``m``.
    """
    if micro_rows < 1 or mini_batches < 1:
        raise ValueError("micro_rows and mini_batches must be ≥ 1")
    units = _units(n_rows, pairs)
    pieces: list[list[int]] = []
    for u in units:
        for s in range(0, len(u), micro_rows):
            pieces.append(u[s:s + micro_rows])
    order = rng.permutation(len(pieces)) if pieces else []
    pieces = [pieces[k] for k in order]
    # distribute pieces over mini-batches by row count (greedy, keeps shuffled order)
    target = n_rows / mini_batches if mini_batches else n_rows
    minis: list[list[list[int]]] = [[] for _ in range(mini_batches)]
    m, filled = 0, 0
    for piece in pieces:
        if filled >= target * (m + 1) - 1e-9 and m < mini_batches - 1:
            m += 1
        minis[m].append(piece)
        filled += len(piece)
    plan: list[list[list[int]]] = []
    for mini in minis:
        micros: list[list[int]] = []
        for piece in sorted(mini, key=len, reverse=True):  # first-fit decreasing
            for mb in micros:
                if len(mb) + len(piece) <= micro_rows:
                    mb.extend(piece)
                    break
            else:
                micros.append(list(piece))
        plan.append(micros)
    return plan


def pairs_in(micro: Sequence[int], pairs: Sequence[tuple[int, int, float]]) -> list[tuple[int, int, float]]:
    """The pairs whose two rows are both in ``micro``, re-indexed to positions in ``micro``."""
    pos = {r: k for k, r in enumerate(micro)}
    return [(pos[a], pos[b], c) for a, b, c in pairs if a in pos and b in pos]


def subsample_rows(
    rows: Sequence[TrainRow],
    pairs: Sequence[tuple[int, int, float]],
    max_rows: int,
    rng: np.random.Generator,
) -> tuple[list[TrainRow], list[tuple[int, int, float]]]:
    """A uniformly random subset of at most ``max_rows`` rows (pair-joined rows stay together).

    Units (rows joined by pairs, see :func:`plan_batches`) are shuffled and taken while they
    fit; the first unit is always taken.  Training on the subset is an unbiased estimate of
    the mean loss over all rows when units are single rows — a CPU speed option.  Rows keep
    their order; pairs are re-indexed.

    Example:
        >>> rows = [TrainRow([1], [2], float(a), 0, 0, t) for t, a in enumerate([1, -1, 2, 0.5])]
        >>> kept, kept_pairs = subsample_rows(rows, [(0, 1, 1.0)], 3, np.random.default_rng(0))
        >>> len(kept) <= 3 and (len(kept_pairs) == 1) == (rows[0] in kept)
        True
    """
    if max_rows <= 0 or len(rows) <= max_rows:
        return list(rows), list(pairs)
    units = _units(len(rows), pairs)
    keep: list[int] = []
    for k in rng.permutation(len(units)):
        u = units[int(k)]
        if keep and len(keep) + len(u) > max_rows:
            continue
        keep.extend(u)
        if len(keep) >= max_rows:
            break
    keep.sort()
    new = {old: i for i, old in enumerate(keep)}
    kept_pairs = [(new[a], new[b], c) for a, b, c in pairs if a in new and b in new]
    return [rows[i] for i in keep], kept_pairs

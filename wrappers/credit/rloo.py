"""RLOO: leave-one-out baseline (SPEC §4.1).

A_{i,t} = Z_{i,t} − mean_{j≠i} O_j, with Z_{i,t} = O_i + penalty_{i,t}.  A singleton group
has no baseline and gets 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from rubrics.trajectory import Trajectory
from wrappers.credit.base import CreditResult, Estimator, register_estimator
from wrappers.credit.graph import RowTable


@register_estimator("rloo")
class RLOO(Estimator):
    """REINFORCE leave-one-out advantages.

    Args:
        episode_weight: Multiplier of the advantage.

    Example:
        >>> from rubrics.trajectory import Step, Trajectory
        >>> g = [Trajectory("t", i, [Step("s", "a", reward=r)]) for i, r in enumerate([10.0, 0.0, 0.0])]
        >>> [a.tolist() for a in RLOO()([g])[0].advantages]
        [[10.0], [-5.0], [-5.0]]
    """

    def __init__(self, *, episode_weight: float = 1.0) -> None:
        self.episode_weight = float(episode_weight)

    def compute(self, groups: Sequence[Sequence[Trajectory]]) -> list[CreditResult]:
        """Credit for validated groups."""
        return self.compute_rows(RowTable(groups))

    def compute_rows(self, rows: RowTable) -> list[CreditResult]:
        """Credit for a :class:`~wrappers.credit.graph.RowTable`."""
        o = rows.outcomes()
        z = o[rows.traj] + rows.penalty
        bounds = rows.group_traj.tolist()
        offsets = rows.offsets.tolist()
        out = []
        for t0, t1 in pairwise(bounds):
            n = t1 - t0
            if n == 1:
                out.append(CreditResult([np.zeros(offsets[t1] - offsets[t0])], stats={"groups": 1}))
                continue
            og = o[t0:t1]
            total = og.sum()
            adv = [self.episode_weight * (z[offsets[t0 + i]:offsets[t0 + i + 1]] - (total - og[i]) / (n - 1))
                   for i in range(n)]
            out.append(CreditResult(adv, stats={"groups": 1}))
        return out

"""GRPO: trajectory-level group-normalised advantages (SPEC §4.1).

A_i = Norm over the group of the trajectory score, broadcast to all of its steps.  By
default the score is the row score Z_{i,t} = O_i + penalty_{i,t} normalised over all rows
(``episode_norm="rows"``); ``episode_norm="trajectories"`` normalises O_i over trajectories.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rubrics.trajectory import Trajectory
from wrappers.credit.base import CreditResult, Estimator, register_estimator
from wrappers.credit.common import NORMS, check_choice, normalize, task_norm
from wrappers.credit.graph import RowTable


@register_estimator("grpo")
class GRPO(Estimator):
    """Group Relative Policy Optimisation advantages.

    Args:
        norm: ``"mean_std"`` or ``"mean"``.
        episode_norm: ``"rows"`` or ``"trajectories"`` (see :func:`task_norm`).
        episode_weight: Multiplier of the episode term.

    Example:
        >>> from rubrics.trajectory import Step, Trajectory
        >>> g = [Trajectory("t", 0, [Step("s", "a", reward=10.0)]), Trajectory("t", 1, [Step("s", "b")])]
        >>> [a.round(4).tolist() for a in GRPO()(([g]))[0].advantages]
        [[0.7071], [-0.7071]]
    """

    def __init__(self, *, norm: str = "mean_std", episode_norm: str = "rows", episode_weight: float = 1.0) -> None:
        check_choice("norm", norm, NORMS)
        self.norm = norm
        self.episode_norm = episode_norm
        self.episode_weight = float(episode_weight)
        task_norm([], norm, episode_norm)  # validate early

    def compute(self, groups: Sequence[Sequence[Trajectory]]) -> list[CreditResult]:
        """Credit for validated groups."""
        return self.compute_rows(RowTable(groups))

    def compute_rows(self, rows: RowTable) -> list[CreditResult]:
        """Credit for a :class:`~wrappers.credit.graph.RowTable`: Norm of Z over each group's
        rows (or of O over its trajectories), as :func:`task_norm` computes it."""
        o = rows.outcomes()
        z = o[rows.traj] + rows.penalty
        t_bounds = rows.group_traj.tolist()
        r_bounds = rows.offsets[rows.group_traj].tolist()
        out = []
        for g in range(rows.n_groups):
            (t0, t1), (r0, r1) = t_bounds[g:g + 2], r_bounds[g:g + 2]
            if self.episode_norm == "trajectories":
                adv = normalize(o[t0:t1], self.norm, singleton="identity")
                per_row = np.repeat(adv, np.diff(rows.offsets[t0:t1 + 1]))
            else:
                per_row = normalize(z[r0:r1], self.norm, singleton="identity") if r1 > r0 else np.zeros(0)
            cuts = (rows.offsets[t0 + 1:t1] - r0).tolist()
            out.append(CreditResult([self.episode_weight * a for a in np.split(per_row, cuts)], stats={"groups": 1}))
        return out

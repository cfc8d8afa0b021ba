"""RLOO: leave-one-out baseline (SPEC §4.1).

A_{i,t} = Z_{i,t} − mean_{j≠i} O_j, with Z_{i,t} = O_i + penalty_{i,t}.  A singleton group
has no baseline and gets 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agent_envs.trajectory import Trajectory
from wrappers.credit.base import CreditResult, Estimator, register_estimator
from wrappers.credit.common import outcomes, row_scores


@register_estimator("rloo")
class RLOO(Estimator):
    """REINFORCE leave-one-out advantages.

    Args:
        episode_weight: Multiplier of the advantage.

    Example:
        >>> from agent_envs.trajectory import Step, Trajectory
        >>> g = [Trajectory("t", i, [Step("s", "a", reward=r)]) for i, r in enumerate([10.0, 0.0, 0.0])]
        >>> [a.tolist() for a in RLOO()([g])[0].advantages]
        [[10.0], [-5.0], [-5.0]]
    """

    def __init__(self, *, episode_weight: float = 1.0) -> None:
        self.episode_weight = float(episode_weight)

    def compute_group(self, group: Sequence[Trajectory]) -> CreditResult:
        n = len(group)
        if n == 1:
            return CreditResult([np.zeros(len(group[0].steps))], stats={"groups": 1})
        o = outcomes(group)
        total = o.sum()
        z = row_scores(group)
        adv = [self.episode_weight * (z[i] - (total - o[i]) / (n - 1)) for i in range(n)]
        return CreditResult(adv, stats={"groups": 1})

"""GRPO: trajectory-level group-normalised advantages (SPEC §4.1).

A_i = Norm over the group of the trajectory score, broadcast to all of its steps.  By
default the score is the row score Z_{i,t} = O_i + penalty_{i,t} normalised over all rows
(``episode_norm="rows"``); ``episode_norm="trajectories"`` normalises O_i over trajectories.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_envs.trajectory import Trajectory
from wrappers.credit.base import CreditResult, Estimator, register_estimator
from wrappers.credit.common import NORMS, check_choice, task_norm


@register_estimator("grpo")
class GRPO(Estimator):
    """Group Relative Policy Optimisation advantages.

    Args:
        norm: ``"mean_std"`` or ``"mean"``.
        episode_norm: ``"rows"`` or ``"trajectories"`` (see :func:`task_norm`).
        episode_weight: Multiplier of the episode term.

    Example:
        >>> from agent_envs.trajectory import Step, Trajectory
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

    def compute_group(self, group: Sequence[Trajectory]) -> CreditResult:
        adv = task_norm(group, self.norm, self.episode_norm)
        return CreditResult([self.episode_weight * a for a in adv], stats={"groups": 1})

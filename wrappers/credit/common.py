"""Shared reward bookkeeping and normalisation (SPEC §4 preamble).

* O_i = Σ_t reward_{i,t}: trajectory i's outcome.
* Z_{i,t} = O_i + penalty_{i,t}: the row score.
* R_{i,t} = Σ_{k≥t} γ^{k−t} reward_{i,k} + penalty_{i,t}: the discounted step return
  (row-local terms are not discounted backwards).
* Norm(x) = (x − mean)/(sample std + 1e-6) ("mean_std") or x − mean ("mean").  A singleton
  yields 0 for step groups and (mean 0, scale 1) for task groups [MCGPO A.3].
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rubrics.trajectory import Trajectory

__all__ = [
    "EPS",
    "NORMS",
    "check_choice",
    "normalize",
    "outcomes",
    "row_scores",
    "step_returns",
    "task_norm",
]

NORMS = ("mean_std", "mean")
EPS = 1e-6


def check_choice(name: str, value: object, allowed: Sequence[object]) -> None:
    """Raise ``ValueError`` naming the parameter and its allowed values."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")


def normalize(x: np.ndarray, mode: str, *, singleton: str = "zero") -> np.ndarray:
    """Norm(x) over one group.

    Args:
        x: Values of the group's members.
        mode: ``"mean_std"`` or ``"mean"``.
        singleton: For a group of one, ``"zero"`` (step groups: 0) or ``"identity"``
            (task groups: mean 0, scale 1, i.e. the value itself).
    """
    x = np.asarray(x, dtype=np.float64)
    if x.size == 1:
        return np.zeros_like(x) if singleton == "zero" else x.copy()
    centred = x - x.mean()
    if mode == "mean":
        return centred
    return centred / (x.std(ddof=1) + EPS)


def outcomes(group: Sequence[Trajectory]) -> np.ndarray:
    """O_i for each trajectory."""
    return np.array([sum(s.reward for s in t.steps) for t in group], dtype=np.float64)


def row_scores(group: Sequence[Trajectory]) -> list[np.ndarray]:
    """Z_{i,t} = O_i + penalty_{i,t} per trajectory."""
    out = []
    for traj in group:
        o = sum(s.reward for s in traj.steps)
        out.append(np.array([o + s.penalty for s in traj.steps], dtype=np.float64))
    return out


def step_returns(traj: Trajectory, gamma: float) -> np.ndarray:
    """R_t = Σ_{k≥t} γ^{k−t} reward_k + penalty_t."""
    n = len(traj.steps)
    out = np.empty(n, dtype=np.float64)
    acc = 0.0
    for t in range(n - 1, -1, -1):
        acc = traj.steps[t].reward + gamma * acc
        out[t] = acc + traj.steps[t].penalty
    return out


def task_norm(group: Sequence[Trajectory], mode: str, over: str = "rows") -> list[np.ndarray]:
    """Norm_task(Z): the episode-level advantage of every row.

    Args:
        over: ``"rows"`` (default) normalises Z over all rows of the group, so longer
            trajectories weigh more, as in the papers' code; ``"trajectories"`` normalises
            the outcomes O_i over trajectories and broadcasts Norm(O)_i to every row
            (row penalties are then ignored).
    """
    check_choice("episode_norm", over, ("rows", "trajectories"))
    if over == "trajectories":
        adv = normalize(outcomes(group), mode, singleton="identity")
        return [np.full(len(t.steps), a) for t, a in zip(group, adv)]
    z = row_scores(group)
    lengths = [len(v) for v in z]
    flat = np.concatenate(z) if z else np.zeros(0)
    if flat.size == 0:
        return [np.zeros(0) for _ in group]
    normed = normalize(flat, mode, singleton="identity")
    return list(np.split(normed, np.cumsum(lengths)[:-1]))

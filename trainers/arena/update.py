"""How the arena's policy learns: the warm start, then one update per batch of groups.

* :func:`warm_start`: behaviour cloning on the walkthroughs (Adam on their log-likelihood);
* :func:`credit_rows`: an update's decisions as rows with the estimator's advantages (and
  MCGPO's preferences as row pairs);
* :func:`update_policy`: the shared update rule (:func:`~trainers.update_rule.trust_region_update`)
  on the linear policy: pair-aware mini-batch SGD steps (:func:`minibatches`) on the SPEC §5
  objective (:mod:`trainers.arena.objective`) inside a KL trust region.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from agent_envs.agent.prompts import info_goal
from agent_envs.agent.walkthrough import replay_walkthroughs
from agent_envs.rollout import EnvPool, Turn
from rubrics.trajectory import Trajectory
from trainers.arena.agent import DecisionRecord, expand_actions
from trainers.arena.config import ArenaConfig
from trainers.arena.objective import Adam, decision_loss
from trainers.arena.policy import DecisionFeatures, Featurizer, LinearSoftmaxPolicy
from trainers.arena.variants import degrade_advantages
from trainers.settings import ObjectiveConfig
from trainers.update_rule import UpdateRuleConfig, trust_region_update

__all__ = ["credit_rows", "minibatches", "update_policy", "warm_start"]


# ------------------------------------------------------------------------------- warm start


def warm_start(
    policy: LinearSoftmaxPolicy,
    envs: EnvPool,
    cfg: ArenaConfig,
    tasks: Sequence[Any],
    featurizer: Featurizer,
) -> dict[str, float]:
    """Behaviour cloning on the walkthroughs of ``tasks`` (the arena's "SFT" step).

    Each walkthrough is replayed in the environments through the one episode loop
    (:class:`~agent_envs.agent.walkthrough.WalkthroughReplay`, ``cfg.rollout.group_size`` tasks at a
    time); every decision becomes a row whose target is the walkthrough's action, and the
    policy maximises their mean log-likelihood for ``cfg.warm_start.warm_start_epochs`` passes of Adam
    mini-batches.  Deterministic (fixed order, no sampling), so every method and seed of a
    comparison starts from the same policy.

    Raises:
        ValueError: none of ``tasks`` has a walkthrough (e.g. WebShop).
    """
    decisions: list[DecisionFeatures] = []
    chosen: list[int] = []
    for _k, d in replay_walkthroughs(envs, tasks, [0] * len(tasks), split=cfg.preset.train_split,
                                     chunk=cfg.rollout.group_size, admissible=_expanded_actions):
        task = d.first_info.get("task") or {}
        decisions.append(featurizer.turn_decision(d.turn, goal=str(task.get("goal", "")), actions=d.actions,
                                                  task=d.turn.info.get("task"), task_type=str(task.get("type", "-"))))
        chosen.append(d.index)
    if not decisions:
        raise ValueError(f"warm_start: no walkthrough found for the {len(tasks)} training tasks of {cfg.env}")
    opt = Adam(policy.dim, lr=cfg.warm_start.warm_start_lr)
    rng = np.random.default_rng(0)
    n = len(decisions)
    for _ in range(cfg.warm_start.warm_start_epochs):
        order = rng.permutation(n)
        for start in range(0, n, cfg.minibatch):
            rows = order[start : start + cfg.minibatch]
            ev = policy.evaluate([decisions[r] for r in rows], [chosen[r] for r in rows])
            opt.step(policy.weights, ev.grad(np.full(len(rows), -1.0 / len(rows))))
    final = policy.evaluate(decisions, chosen)
    return {"demo_rows": float(n), "demo_logp": float(final.logp.mean())}


def _expanded_actions(turn: Turn) -> list[str]:
    """The actions the arena policy chooses among at ``turn`` (:func:`expand_actions`)."""
    goal = info_goal(turn.info)
    return expand_actions(turn.info.get("admissible_actions") or [], goal)


# ------------------------------------------------------------------------------- updates


def credit_rows(
    groups: Sequence[Sequence[Trajectory]], group_records: Sequence[Sequence[list[DecisionRecord]]],
    results: Sequence[Any], scale: float, degrade: tuple[tuple[str, float], ...] = (),
    rng: np.random.Generator | None = None,
) -> tuple[list[DecisionRecord], np.ndarray, list[tuple[int, int, float]]]:
    """Flatten the decision rows with their advantages (times ``scale``, then degraded by a
    method's calibration controls ``degrade`` with ``rng``,
    :func:`~trainers.arena.variants.degrade_advantages`) and map MCGPO preferences
    (trajectory, step) -> row ids: (records, advantages, pairs)."""
    records: list[DecisionRecord] = []
    adv_parts: list[np.ndarray] = []
    pairs: list[tuple[int, int, float]] = []
    for group, grecs, res in zip(groups, group_records, results):
        offsets = {}
        for i, (_traj, recs) in enumerate(zip(group, grecs)):
            offsets[i] = len(records)
            records += recs
            adv_parts.append(np.asarray(res.advantages[i], dtype=np.float64))
        for pref in res.pairs:
            (pi, pt), (ni, nt) = pref.preferred, pref.rejected
            pairs.append((offsets[pi] + pt, offsets[ni] + nt, float(pref.weight)))
    if degrade:
        assert rng is not None, "calibration controls draw from rng"
        adv_parts = degrade_advantages(adv_parts, degrade, rng)
    advantages = scale * (np.concatenate(adv_parts) if adv_parts else np.zeros(0))
    return records, advantages, pairs


def update_policy(
    policy: LinearSoftmaxPolicy,
    reference: LinearSoftmaxPolicy,
    records: Sequence[DecisionRecord],
    advantages: np.ndarray,
    pairs: Sequence[tuple[int, int, float]],
    objective: ObjectiveConfig,
    rule: UpdateRuleConfig,
    *,
    lr: float,
    minibatch: int,
    rng: np.random.Generator,
) -> dict[str, float]:
    """One update of :func:`~trainers.update_rule.trust_region_update` on the linear policy
    (``advantages`` already scaled); returns its diagnostics."""
    ops = _ArenaOps(policy, reference, records, advantages, pairs, objective, lr=lr, minibatch=minibatch, rng=rng)
    return trust_region_update(ops, rule)


class _ArenaOps:
    """:class:`~trainers.update_rule.PolicyOps` of the linear policy on one update's rows:
    pair-aware mini-batch SGD steps on the SPEC §5 objective, exact KL over the admissible
    actions."""

    def __init__(self, policy: LinearSoftmaxPolicy, reference: LinearSoftmaxPolicy,
                 records: Sequence[DecisionRecord], advantages: np.ndarray,
                 pairs: Sequence[tuple[int, int, float]], objective: ObjectiveConfig,
                 *, lr: float, minibatch: int, rng: np.random.Generator) -> None:
        self.policy, self.objective, self.lr, self.minibatch, self.rng = policy, objective, lr, minibatch, rng
        self.decisions = [r.decision for r in records]
        self.chosen = np.array([r.chosen for r in records], dtype=np.int64)
        self.old = np.array([r.old_logp for r in records], dtype=np.float64)
        self.ref = reference.evaluate(self.decisions, self.chosen).logp
        self.advantages, self.pairs = advantages, pairs
        self.old_all = policy.evaluate(self.decisions, self.chosen).logp_all

    def snapshot(self) -> np.ndarray:
        return self.policy.weights.copy()

    def epoch(self, index: int) -> dict[str, float]:
        acc: dict[str, list[float]] = defaultdict(list)
        for rows, bpairs in minibatches(len(self.decisions), self.pairs, self.minibatch, self.rng):
            ev = self.policy.evaluate([self.decisions[r] for r in rows], self.chosen[rows])
            out = decision_loss(
                logp=ev.logp, old_logp=self.old[rows], ref_logp=self.ref[rows],
                advantages=self.advantages[rows], entropy=ev.entropy, pairs=bpairs, config=self.objective,
            )
            self.policy.weights -= self.lr * ev.grad(out.d_logp, out.d_entropy)
            for k in ("loss", "policy_loss", "kl", "entropy", "pair_loss", "clip_fraction", "dual_clip_fraction"):
                acc[k].append(getattr(out, k))
            if out.n_pairs:
                acc["pair_accuracy"].append(out.pair_accuracy)
        return {("kl_ref" if k == "kl" else k): float(np.mean(v)) for k, v in acc.items()}

    def kl(self, snapshot: np.ndarray) -> float:
        ev = self.policy.evaluate(self.decisions, self.chosen)
        return float(np.mean(ev.kl_from(self.old_all)))

    def interpolate(self, snapshot: np.ndarray, beta: float) -> None:
        self.policy.weights[:] = snapshot + beta * (self.policy.weights - snapshot)

    def distance(self, snapshot: np.ndarray) -> float:
        return float(np.linalg.norm(self.policy.weights - snapshot))


def minibatches(
    n_rows: int, pairs: Sequence[tuple[int, int, float]], size: int, rng: np.random.Generator
) -> list[tuple[list[int], list[tuple[int, int, float]]]]:
    """Shuffle rows into micro-batches of about ``size`` rows with both rows of every pair
    in the same micro-batch; returns ``(rows, pairs with batch-local positions)``."""
    paired: set[int] = set()
    units: list[tuple[list[int], list[tuple[int, int, float]]]] = []
    for p, q, w in pairs:
        if p in paired or q in paired or p == q:
            continue  # the allocator gives disjoint pairs; keep the first use of a row
        paired.update((p, q))
        units.append(([p, q], [(p, q, w)]))
    units += [([r], []) for r in range(n_rows) if r not in paired]
    order = rng.permutation(len(units))
    batches: list[tuple[list[int], list[tuple[int, int, float]]]] = []
    rows: list[int] = []
    bpairs: list[tuple[int, int, float]] = []
    for u in order:
        urows, upairs = units[u]
        if rows and len(rows) + len(urows) > size:
            batches.append((rows, bpairs))
            rows, bpairs = [], []
        rows += urows
        bpairs += upairs
    if rows:
        batches.append((rows, bpairs))
    out = []
    for rows, bpairs in batches:
        pos = {r: i for i, r in enumerate(rows)}
        out.append((rows, [(pos[p], pos[q], w) for p, q, w in bpairs]))
    return out

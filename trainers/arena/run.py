"""One arena run: a fresh linear policy trained and validated with one method and one seed.

A *run* trains a fresh :class:`~trainers.arena.policy.LinearSoftmaxPolicy` with one method
(estimator, or estimator with an ablation) and one seed; this module reads top to bottom as
the run goes:

0. the warm start (behaviour cloning on walkthroughs, :func:`~trainers.arena.update.warm_start`),
   once per process and setting, and the validation before the first update;
1. every update samples ``groups_per_update`` (P) tasks from a fixed training pool and plays
   ``group_size`` (G) siblings of each from identical start states (same task, same reset
   seed) at temperature 1, recording each decision's features and log π_old(a)
   (:class:`~trainers.arena.agent.ArenaPolicy`);
2. the estimator turns the P groups into per-step advantages (and MCGPO preferences);
3. the shared update rule (:mod:`trainers.update_rule`): advantages in units of their
   running RMS, up to ``ppo_epochs`` passes of pair-aware mini-batch SGD steps on the
   per-decision SPEC §5 objective (:mod:`trainers.arena.objective`) inside a KL trust
   region, the reference policy being the initial one (:mod:`trainers.arena.update`);
4. every ``eval_every`` updates (and before the first) one rollout per validation task at
   temperature 0.4 (SPEC §6; :mod:`trainers.arena.validation`).

Everything is seeded from ``(seed, update, task, slot)``, and environment stepping is
deterministic given the task, so the same configuration gives the same numbers, whichever
worker process runs it and in whatever order.

Metric records (``runs/<method>__seed<k>/metrics.jsonl``) are built in the one schema of
:mod:`trainers.metrics` (the trainer's: ``run``, ``eval``, ``train`` and ``end`` records with
``train/``, ``credit/`` and ``opt/`` keys), so ``rubricgym report`` reads arena and trainer runs
alike.  Wall-clock times are the ``*_s`` fields and the ``end`` record's, apart
from the deterministic numbers.

Example (one tiny run on generated ALFWorld games):
    >>> from trainers.arena.config import ArenaConfig   # doctest: +SKIP
    >>> cfg = ArenaConfig.of(env="alfworld-generated", updates=4, groups_per_update=2, group_size=4)  # doctest: +SKIP
    >>> end = run_one(cfg, "grpo", 0, "arena_out")  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import os
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from agent_envs.rollout import EnvPool
from rubrics.trajectory import Trajectory
from trainers.arena.agent import ArenaPolicy, DecisionRecord, keyed_rng, play_groups
from trainers.arena.config import ArenaConfig, game_draw
from trainers.arena.envs import arena_envs, make_arena_env, task_sets, warm_start_tasks
from trainers.arena.memo import EpisodeMemo
from trainers.arena.policy import Featurizer, LinearSoftmaxPolicy, make_featurizer
from trainers.arena.report import RunMetrics
from trainers.arena.update import credit_rows, update_policy, warm_start
from trainers.arena.validation import evaluate
from trainers.arena.variants import MethodSpec, resolve_method
from trainers.metrics import run_identity, upgrade_record
from trainers.settings import ObjectiveConfig
from trainers.update_rule import AdvantageScaler, UpdateRuleConfig

__all__ = ["completed_run", "play_update", "run_dir_name", "run_one"]

log = logging.getLogger(__name__)


def run_one(cfg: ArenaConfig, method: str, seed: int, out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Train and validate one (method, seed) run; writes ``runs/<method>__seed<k>/``.

    The run's numpy work is many small operations, so BLAS runs on one thread meanwhile
    (``threadpoolctl``; the caller's limits are restored afterwards): OpenBLAS's other
    threads only spun, and a comparison already runs one process per core (measured on
    WebShop, five runs: 101 CPU-s in about 70 s wall with OpenBLAS's default threads, 60
    CPU-s in 61 s with one; the runs' results equal, only the last bit of the ‖Δθ‖
    diagnostic differs).

    Returns the ``end`` record (readouts and seconds).

    Raises:
        ValueError: an unknown method or variant.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        return _run_one(cfg, method, seed, out_dir)


def _run_one(cfg: ArenaConfig, method: str, seed: int, out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    t_start, cpu_start = time.perf_counter(), time.process_time()
    run = _start(cfg, method, seed, out_dir)
    log.info("arena run %s seed %d: %s", method, seed, run.spec.params)
    partial = run.dir / "metrics.jsonl.partial"
    with partial.open("w", encoding="utf-8") as fh:
        run.out = fh
        run.emit(_run_record(run))
        _validate(run, 0)
        for update in range(1, cfg.schedule.updates + 1):
            _train(run, update)
            if update % cfg.schedule.eval_every == 0 or update == cfg.schedule.updates:
                rec = _validate(run, update)
                log.info("%s seed %d update %d: validation success %.3f", method, seed, update, rec["success"])
        end = _end_record(run, t_start, cpu_start)
        run.emit(end)
    os.replace(partial, run.dir / "metrics.jsonl")
    return end


@dataclass
class _Run:
    """What one run holds while it trains (made by :func:`_start`)."""

    cfg: ArenaConfig
    method: str
    seed: int
    spec: MethodSpec
    estimator: Any
    objective: ObjectiveConfig
    dir: Path
    envs: EnvPool
    env: Any
    train_pool: list[Any]
    val_set: list[Any]
    val_split: str | None
    featurizer: Featurizer
    policy: LinearSoftmaxPolicy
    warm: dict[str, float]
    reference: LinearSoftmaxPolicy
    rule: UpdateRuleConfig
    scaler: AdvantageScaler
    metrics: RunMetrics
    task_rng: np.random.Generator
    out: IO[str] | None = None

    def emit(self, rec: dict[str, Any]) -> None:
        """Write a record of the schema of :mod:`trainers.metrics` to the run's file."""
        assert self.out is not None, "the run's metric file is not open"
        self.out.write(json.dumps(rec, allow_nan=True) + "\n")
        self.out.flush()


def _start(cfg: ArenaConfig, method: str, seed: int, out_dir: str | os.PathLike[str]) -> _Run:
    """The method's estimator, the run's folder, environments and tasks, and its policy
    (warm-started when the setting has warm-start tasks)."""
    spec = resolve_method(method, cfg.preset.family, cfg.estimator_params, scpo_scorer=cfg.scpo_scorer)
    estimator = spec.build()
    objective = cfg.objective_with(spec.objective)
    run_dir = Path(out_dir) / "runs" / run_dir_name(method, seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    envs, env = arena_envs(cfg, seed), make_arena_env(cfg, seed)
    train_pool, val_set, val_split = task_sets(env, cfg, seed)
    featurizer = make_featurizer(cfg.policy, cfg.dim)
    policy = LinearSoftmaxPolicy(cfg.dim)
    warm = _warm_started(policy, env, cfg, featurizer, seed) if cfg.warm_start.warm_start_tasks else {}
    rule = cfg.update_rule()
    return _Run(cfg, method, seed, spec, estimator, objective, run_dir, envs, env, train_pool, val_set, val_split,
                featurizer, policy, warm, reference=policy.copy(), rule=rule,
                scaler=AdvantageScaler.from_config(rule), metrics=RunMetrics(method=method, seed=seed),
                task_rng=keyed_rng(seed, 7))


def _run_record(run: _Run) -> dict[str, Any]:
    """The ``run`` record: the run's identity, setting, estimator parameters and warm start."""
    cfg, spec = run.cfg, run.spec
    identity = run_identity("arena", cfg.env, spec.estimator, "+".join(spec.variants), run.seed, cfg.to_dict(),
                            method=run.method)
    return {"update": 0, "phase": "run", **identity, "estimator_params": dict(spec.params),
            "objective": asdict(run.objective), "warm_start": run.warm}


def _validate(run: _Run, update: int) -> dict[str, Any]:
    """Validate the policy after ``update`` updates; emits and returns the ``eval`` record."""
    t_eval = time.perf_counter()
    rec = _evaluate_once(run.envs, run.cfg, run.val_set, run.val_split, run.policy, run.featurizer, run.seed, update)
    rec["eval_s"] = time.perf_counter() - t_eval
    run.metrics.evals.append(rec)
    run.emit(rec)
    return rec


def _train(run: _Run, update: int) -> None:
    """One update: rollouts of the sampled tasks, the estimator's credit, the update rule;
    emits the ``train`` record (and the update's rollouts with ``save_rollouts``)."""
    cfg, seed = run.cfg, run.seed
    t0 = time.perf_counter()
    picks = sorted(run.task_rng.choice(cfg.schedule.train_tasks, size=cfg.rollout.groups_per_update,
                                       replace=False).tolist())
    tasks = [run.train_pool[k] for k in picks]
    groups, group_records, invalid = play_update(run.envs, cfg, run.policy, run.featurizer, seed, update, picks, tasks)
    t1 = time.perf_counter()
    results = run.estimator(groups)
    t2 = time.perf_counter()
    records, advantages, pairs = credit_rows(groups, group_records, results, cfg.adv_scale * run.spec.adv_scale,
                                             run.spec.degrade, keyed_rng(seed, update, 55))
    loss_stats = _optimize(run, update, records, advantages, pairs)
    t3 = time.perf_counter()
    rec = _train_record(update, tasks, groups, invalid, len(records), advantages, results, loss_stats,
                        {"rollout": t1 - t0, "credit": t2 - t1, "update": t3 - t2})
    run.metrics.train.append(rec)
    run.emit(rec)
    if cfg.save_rollouts:
        from rubrics.trajectory import save_jsonl

        save_jsonl(run.dir / "rollouts" / f"update_{update:04d}.jsonl", [t for g in groups for t in g])


def play_update(
    envs: EnvPool, cfg: ArenaConfig, policy: LinearSoftmaxPolicy, featurizer: Featurizer, seed: int, update: int,
    picks: Sequence[int], tasks: Sequence[Any],
) -> tuple[list[list[Trajectory]], list[list[list[DecisionRecord]]], int]:
    """One update's rollouts: ``cfg.rollout.group_size`` siblings per task, one group at a time in
    lock step (sibling ``slot`` of training task ``pick`` draws from ``keyed_rng(seed, update,
    pick, slot)``, reset seed ``pick``); (groups, their decision records, invalid actions)."""
    groups: list[list[Trajectory]] = []
    group_records: list[list[list[DecisionRecord]]] = []
    invalid = 0
    for pick, task in zip(picks, tasks):
        arena = ArenaPolicy(policy, featurizer, temperature=cfg.rollout.temperature, coupled=cfg.sampling == "coupled",
                            rng=lambda _g, slot, pick=pick: keyed_rng(seed, update, pick, slot))
        (group,) = play_groups(envs, arena, [task], [pick], split=cfg.preset.train_split, group_size=cfg.rollout.group_size)
        groups.append(group)
        group_records.append([arena.records[(0, slot)] for slot in range(cfg.rollout.group_size)])
        invalid += sum(not s.valid for traj in group for s in traj.steps)
    return groups, group_records, invalid


def _optimize(run: _Run, update: int, records: Sequence[DecisionRecord], advantages: np.ndarray,
              pairs: Sequence[tuple[int, int, float]]) -> dict[str, float]:
    """The update rule on the rows (unless the setting or the method has no RL update); its
    diagnostics with the advantages' RMS, raw and in the scaler's units."""
    cfg = run.cfg
    scaled = run.scaler.normalize(advantages)
    loss_stats: dict[str, float] = {}
    if cfg.update.rl_update and run.spec.rl:
        loss_stats = update_policy(
            run.policy, run.reference, records, scaled, pairs, run.objective, run.rule,
            lr=cfg.update.learning_rate, minibatch=cfg.minibatch, rng=keyed_rng(run.seed, update, 99),
        )
    loss_stats["adv_rms"] = float(np.sqrt(np.mean(advantages**2))) if advantages.size else 0.0
    loss_stats["adv_rms_scaled"] = float(np.sqrt(np.mean(scaled**2))) if scaled.size else 0.0
    return loss_stats


def _train_record(
    update: int, tasks: list[Any], groups: Sequence[Sequence[Trajectory]], invalid: int, n_rows: int,
    advantages: np.ndarray, results: Sequence[Any], loss_stats: dict[str, float], times: dict[str, float],
) -> dict[str, Any]:
    """The ``train`` metric record of one update, in the schema of :mod:`trainers.metrics`
    (``train/``, ``credit/``, ``opt/``, ``rollout/`` and ``time/`` keys, the trainer's)."""
    trajs = [t for g in groups for t in g]
    n_steps = sum(len(t.steps) for t in trajs)
    credit = _aggregate_credit(results)
    return {
        "update": update,
        "phase": "train",
        "train/success": float(np.mean([t.success for t in trajs])),
        "train/score": float(np.mean([t.score for t in trajs])),
        "train/mean_steps": n_steps / len(trajs),
        "train/invalid_rate": invalid / max(1, n_steps),
        "train/episodes": len(trajs),
        "train/groups_with_success": int(sum(any(t.success for t in g) for g in groups)),
        "credit/adv_abs_mean": float(np.mean(np.abs(advantages))) if advantages.size else 0.0,
        "credit/adv_zero_share": float(np.mean(np.abs(advantages) < 1e-9)) if advantages.size else 1.0,
        "opt/pairs": credit.pop("pairs_per_update"),
        **{f"credit/stat_{k}": v for k, v in credit.items()},
        "opt/rows": n_rows,
        **{f"opt/{'pg_loss' if k == 'policy_loss' else k}": v for k, v in loss_stats.items()},
        "rollout/rollout_s": times["rollout"],
        "credit/credit_s": times["credit"],
        "opt/optimize_s": times["update"],
        "time/update_s": float(sum(times.values())),
        "tasks": tasks,
    }


def _aggregate_credit(results: Sequence[Any]) -> dict[str, float]:
    """Mean over the update's groups of every numeric ``CreditResult.stats`` entry."""
    acc: dict[str, list[float]] = defaultdict(list)
    for res in results:
        for k, v in (res.stats or {}).items():
            if isinstance(v, (bool, np.bool_)):
                v = float(v)
            if isinstance(v, (int, float, np.integer, np.floating)) and math.isfinite(float(v)):
                acc[str(k)].append(float(v))
    out = {k: float(np.mean(v)) for k, v in sorted(acc.items())}
    out["pairs_per_update"] = float(sum(len(r.pairs) for r in results))
    return out


def _end_record(run: _Run, t_start: float, cpu_start: float) -> dict[str, Any]:
    """The ``end`` record: the readouts and the run's seconds."""
    end = {"update": run.cfg.schedule.updates, "phase": "end", "readouts": run.metrics.readouts(),
           "seconds": time.perf_counter() - t_start, "cpu_seconds": time.process_time() - cpu_start}
    # what depends on the process and on what ran in it before: its id and the memo's counters
    end["time"] = {"process": os.getpid(), **(run.env.stats() if isinstance(run.env, EpisodeMemo) else {})}
    return end


# ------------------------------------------------------------------------------- shared work

# Process-wide: what every method of a comparison computes identically.  The warm start is
# deterministic (one policy for every method and seed), and the validation before the first
# update sees the same policy and draws for every method of a seed; each is computed once
# per process and setting (keyed by the whole setting, the seed and the policy's weights).
_warm_starts: dict[str, tuple[np.ndarray, dict[str, float]]] = {}
_first_validations: dict[tuple[str, int, str], dict[str, Any]] = {}
_SHARED_SIZE = 16  # settings; a warm-started weight vector is dim x 8 bytes (2 MiB)


def _warm_started(policy: LinearSoftmaxPolicy, env: Any, cfg: ArenaConfig, featurizer: Featurizer,
                  seed: int | None = None) -> dict[str, float]:
    """:func:`~trainers.arena.update.warm_start` of ``policy``, run once per process, setting and
    games (:func:`~trainers.arena.config.game_draw`)."""
    key = f"{_setting_key(cfg)}|{game_draw(cfg, seed)}"
    hit = _warm_starts.get(key)
    if hit is None:
        stats = warm_start(policy, arena_envs(cfg, seed), cfg, warm_start_tasks(env, cfg, seed), featurizer)
        hit = _keep(_warm_starts, key, (policy.weights.copy(), stats))
    policy.weights[:] = hit[0]
    return dict(hit[1])


def _evaluate_once(envs: EnvPool, cfg: ArenaConfig, val_set: Sequence[Any], val_split: str | None,
                   policy: LinearSoftmaxPolicy, featurizer: Featurizer, seed: int, update: int) -> dict[str, Any]:
    """:func:`~trainers.arena.validation.evaluate`; the validation before the first update is
    kept per process, setting, seed and weights (every method of a seed starts there)."""
    if update != 0:
        return evaluate(envs, cfg, val_set, val_split, policy, featurizer, seed, update)
    key = (_setting_key(cfg), seed, hashlib.sha1(policy.weights.tobytes()).hexdigest())
    hit = _first_validations.get(key)
    if hit is None:
        hit = _keep(_first_validations, key, evaluate(envs, cfg, val_set, val_split, policy, featurizer, seed, update))
    return copy.deepcopy(hit)


def _setting_key(cfg: ArenaConfig) -> str:
    return json.dumps(cfg.to_dict(), sort_keys=True, default=str)


def _keep(table: dict[Any, Any], key: Any, value: Any) -> Any:
    """``table[key] = value`` (emptied first when full: memory stays bounded); returns ``value``."""
    if len(table) >= _SHARED_SIZE:
        table.clear()
    table[key] = value
    return value


# ------------------------------------------------------------------------------- finished runs


def run_dir_name(method: str, seed: int) -> str:
    """Folder name of a run: ``<method>__seed<k>`` with ``:`` and ``+`` kept readable."""
    safe = method.replace("/", "_").replace(" ", "")
    return f"{safe}__seed{seed}"


def completed_run(cfg: ArenaConfig, method: str, seed: int, out_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``end`` record of a finished run of (``cfg``, ``method``, ``seed``) in ``out_dir``,
    or ``None`` when there is none, it is incomplete, or it ran another setting.

    Runs are deterministic, so a finished one need not run again: an interrupted comparison
    continues where it stopped, and more seeds can be added to a folder later.
    """
    path = Path(out_dir) / "runs" / run_dir_name(method, seed) / "metrics.jsonl"
    if not path.is_file():
        return None
    try:
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        first, last = records[0], records[-1]
    except (OSError, ValueError, IndexError):
        return None  # unreadable or damaged anywhere: run it again
    wanted = json.loads(json.dumps(cfg.to_dict(), sort_keys=True, allow_nan=True))
    first, last = upgrade_record(first), upgrade_record(last)  # arena files from before the schema too
    if first.get("phase") != "run" or last.get("phase") != "end":
        return None
    try:
        ran = ArenaConfig.recorded(first.get("config") or {}).to_dict()
    except (ValueError, TypeError):
        return None  # a setting this version cannot read: run it again
    return last if json.loads(json.dumps(ran, sort_keys=True, allow_nan=True)) == wanted else None

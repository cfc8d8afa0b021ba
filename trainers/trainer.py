"""The Accelerate trainer: group rollouts → credit → the SPEC §5 objective, resumable.

One update:

1. The task sampler draws P tasks (a pure function of seed and update number, so a
   resumed run draws the same ones); process ``r`` of ``W`` takes groups ``r, r+W, …`` —
   whole groups stay on one process, so credit needs no communication.
2. ``collect_rollouts`` plays G siblings per task (batched policy, envs in worker processes).
3. The configured estimator (:mod:`wrappers.credit`) turns the groups into per-step
   advantages and, for MCGPO, preference pairs.
4. The advantages are divided by their running RMS (:class:`~trainers.update_rule.AdvantageScaler`,
   over every process's rows; its state is checkpointed).  Old (rollout) and reference
   log-probs are computed without gradients before the first step (the reference is the LoRA
   base with adapters disabled, or a frozen copy); π_old stays the rollout policy for every
   epoch.
5. The shared update rule (:func:`trainers.update_rule.trust_region_update` through
   :class:`trainers.trust_region.TrainerOps`, on the run's
   :class:`~trainers.trainable.TrainablePolicy`): up to ``ppo_epochs`` epochs of ``mini_batches``
   plain SGD steps; each mini-batch is a list of pair-aware micro-batches whose gradients
   accumulate (DDP syncs on the last; every process runs the same number of micro-batches,
   padding with zero-weight ones).  After each epoch KL(π_old ‖ π_new) over the update's rows
   is measured; above ``target_kl`` the step is halved until it is within, and the update ends.

Evaluation (SPEC §6) runs every ``eval_every`` updates; checkpoints are atomic
(:mod:`trainers.checkpoint`); metrics go to ``metrics.jsonl`` and TensorBoard.

Example (a tiny model on any SPEC §2 environment)::

    cfg = load_config("demo", ["model=tiny-llama", "updates=1"])
    summary = Trainer(cfg).train()
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agent_envs.rollout import EnvPool
from agent_envs.tasks import task_pool, train_val_tasks
from rubrics.trajectory import save_jsonl
from trainers.batching import TrainRow, build_rows, subsample_rows
from trainers.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    restore_scheduler,
    save_checkpoint,
)
from trainers.config import ConfigError, TrainConfig
from trainers.evaluation import episode_metrics
from trainers.generation import make_backend
from trainers.lm_policy import RolloutSettings, TaskRef, collect_rollouts
from trainers.metrics import MetricFileError, MetricsLogger, read_metrics, run_identity
from trainers.models import apply_lora, load_policy, train_top_layers
from trainers.report import last_per_update, readouts
from trainers.trainable import TrainablePolicy
from trainers.trust_region import TrainerOps, _all_sum
from trainers.update_rule import AdvantageScaler, trust_region_update

__all__ = ["Trainer", "cpu_threads", "list_tasks", "run_folder_note", "weights_digest"]

log = logging.getLogger(__name__)


def weights_digest(model: Any) -> str:
    """SHA-256 of every parameter's bytes (identical weights ⇔ identical digests)."""
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters()):
        h.update(name.encode())
        h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


def list_tasks(env_id: str, env_kwargs: dict[str, Any], split: str) -> list[Any] | None:
    """Every task of ``split`` in the fixed order of :func:`agent_envs.tasks.task_pool`
    (``None`` if the environment cannot list them)."""
    with _task_env(env_id, env_kwargs) as env:
        return task_pool(env, split)


@contextlib.contextmanager
def _task_env(env_id: str, env_kwargs: dict[str, Any]) -> Iterator[Any]:
    """An environment to ask for its tasks, closed afterwards."""
    from agent_envs import make_env

    env = make_env(env_id, env_kwargs)
    try:
        yield env
    finally:
        env.close()


def cpu_threads(requested: int = 0) -> int:
    """Torch CPU threads: ``$RUBRICGYM_TORCH_THREADS`` if set, else ``requested`` if > 0,
    else the cores this process may use that other work leaves free now (at least 1): busy
    cores are measured over a quarter of a second from ``/proc/stat`` (the 1-minute load
    average where that is unreadable, which still counts work that just ended, e.g. the
    install before a first run).  On a shared, loaded machine extra threads only wait on
    each other."""
    env = os.environ.get("RUBRICGYM_TORCH_THREADS")
    if env:
        return max(1, int(env))
    if requested > 0:
        return requested
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    busy = busy_cores()
    if busy is None:
        try:
            busy = os.getloadavg()[0]
        except OSError:  # pragma: no cover
            busy = 0.0
    return max(1, min(cores, int(cores - busy + 0.5)))


def busy_cores(interval: float = 0.25, stat: str = "/proc/stat") -> float | None:
    """How many cores were busy (not idle or waiting on I/O) over the next ``interval``
    seconds, from the kernel's aggregate CPU counters; None where ``stat`` is unreadable."""
    def sample() -> tuple[int, int] | None:
        try:
            with open(stat, encoding="ascii") as fh:
                fields = fh.readline().split()
        except OSError:
            return None
        if not fields or fields[0] != "cpu" or len(fields) < 6:
            return None
        ticks = [int(x) for x in fields[1:9]]
        return sum(ticks), ticks[3] + ticks[4]  # total, idle + iowait

    first = sample()
    if first is None:
        return None
    time.sleep(interval)
    second = sample()
    if second is None or second[0] <= first[0]:
        return None
    total, idle = second[0] - first[0], second[1] - first[1]
    return (total - idle) / total * (os.cpu_count() or 1)


def _mixed_precision(cfg: TrainConfig) -> str:
    if cfg.policy.mixed_precision != "auto":
        return cfg.policy.mixed_precision
    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "no"
    return "bf16" if _cpu_has_amx_bf16() else "no"


def _cpu_has_amx_bf16() -> bool:
    """True on CPUs with AMX bf16 tiles (bf16 autocast is then several times faster)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            return " amx_bf16" in fh.read(200_000)
    except OSError:
        return False


class Trainer:
    """Trains a policy on a SPEC §2 environment with the configured credit estimator.

    Args:
        cfg: A validated :class:`~trainers.config.TrainConfig`.
        run_dir: The run folder (default ``output_dir/run_name``).
        resume: Continue from the newest complete checkpoint in ``run_dir`` (starts fresh
            when there is none).
        stop_after: Stop after this many updates in this call (tests use it to simulate an
            interrupted run); ``None`` = run to ``cfg.schedule.updates``.
    """

    def __init__(self, cfg: TrainConfig, run_dir: str | os.PathLike[str] | None = None, *,
                 resume: bool = False, stop_after: int | None = None) -> None:
        from accelerate import Accelerator
        from accelerate.utils import set_seed

        cfg.validate()
        self.cfg = cfg
        self.stop_after = stop_after
        self.accelerator = Accelerator(cpu=not torch.cuda.is_available(), mixed_precision=_mixed_precision(cfg))
        acc = self.accelerator
        if acc.distributed_type.name in ("FSDP", "DEEPSPEED", "MEGATRON_LM"):
            raise ValueError(f"the trainer supports one process or DDP, not {acc.distributed_type.name}: generation, "
                             "choose-mode scoring and the weight digests use the full, unsharded model")
        self.rank, self.world = acc.process_index, acc.num_processes
        self._build_tasks()  # first: missing games or a bad split end the run before it has a folder
        self._build_run_dir(run_dir, resume)
        set_seed(cfg.schedule.seed)
        self._build_model()
        self._build_rollouts()
        self.metrics = MetricsLogger(self.run_dir, tensorboard=cfg.output.tensorboard, enabled=acc.is_main_process)
        self.start_update = 0
        self.phase_seconds: dict[str, float] = {"eval": 0.0, "rollout": 0.0, "credit": 0.0, "optimize": 0.0, "checkpoint": 0.0}
        self.eval_history: list[dict[str, Any]] = []
        self.resumed_from: str | None = None
        self.warm_start_stats: dict[str, float] | None = None
        self.warm_start_eval: dict[str, float] | None = None
        self.train_games_eval: dict[str, dict[str, float]] = {}  # "before" / "after" the RL phase
        if resume:
            self._resume()

    # ------------------------------------------------------------------ builders
    def _build_run_dir(self, run_dir: str | os.PathLike[str] | None, resume: bool) -> None:
        """The run folder (agreed by every process), its config, and the torch threads."""
        cfg, acc = self.cfg, self.accelerator
        if run_dir is None:
            name = cfg.output.run_name or f"{cfg.output.preset or 'run'}-{cfg.credit.estimator}-s{cfg.schedule.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
            run_dir = Path(cfg.output.output_dir) / name
            if self.world > 1:  # every process must agree on the folder
                run_dir = Path(_broadcast(acc, str(run_dir)))
        self.run_dir = Path(run_dir)
        if not resume and latest_checkpoint(self.run_dir / "checkpoints") is not None:
            raise FileExistsError(f"{self.run_dir} already holds checkpoints; continue it with --resume or choose another run_name")
        if acc.is_main_process:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "rollouts").mkdir(exist_ok=True)
            cfg.save(self.run_dir / "config.yaml")
        acc.wait_for_everyone()
        if not torch.cuda.is_available():
            torch.set_num_threads(cpu_threads(cfg.policy.torch_threads))
        log.info("torch threads: %d", torch.get_num_threads())

    def _build_tasks(self) -> None:
        """The training pool and the validation tasks, by the rule the arena uses too
        (:func:`agent_envs.tasks.train_val_tasks`: the pool first, the validation tasks next,
        held out of it when both come from one split)."""
        cfg = self.cfg
        log.info("listing the tasks of %s (games not yet generated are generated now)", cfg.env.env_id)
        with _task_env(cfg.env.env_id, cfg.env_make_kwargs()) as env:
            try:
                self.train_task_ids, self.val_task_ids = train_val_tasks(
                    env, cfg.env.train_split, cfg.env.val_split, train_n=cfg.schedule.train_tasks, val_n=cfg.schedule.val_tasks)
            except ValueError as exc:
                raise ConfigError(f"train_tasks/val_tasks: {exc}") from None

    def _build_model(self) -> None:
        """The trained policy (model, tokenizer, KL reference, SGD optimiser, rollout copy),
        the schedule and the update rule."""
        cfg, acc = self.cfg, self.accelerator
        log.info("loading the policy %s", cfg.policy.model)
        model, tok = load_policy(cfg.policy.model, seed=cfg.schedule.seed, dtype=cfg.policy.dtype)
        if cfg.policy.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        ref_model = None
        if cfg.policy.trainable_layers:
            try:
                n_train = train_top_layers(model, cfg.policy.trainable_layers)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            log.info("training the top %d blocks: %.1fM of %.1fM parameters", cfg.policy.trainable_layers, n_train / 1e6,
                     sum(p.numel() for p in model.parameters()) / 1e6)
        if cfg.policy.lora:
            model = apply_lora(model, r=cfg.policy.lora_r, alpha=cfg.policy.lora_alpha, dropout=cfg.policy.lora_dropout,
                               target_modules=cfg.policy.lora_target_modules)
        elif cfg.objective.kl_coef > 0:
            ref_model = copy.deepcopy(model).eval().requires_grad_(False).to(acc.device)
        params = [p for p in model.parameters() if p.requires_grad]
        # plain SGD (no momentum, no Adam: the step is proportional to the gradient, so
        # advantages that are all 0 leave the weights alone); the trust region bounds each update
        optimizer = torch.optim.SGD(params, lr=cfg.update.learning_rate, momentum=0.0, weight_decay=cfg.update.weight_decay)
        from transformers import get_scheduler

        # the schedule counts updates (the trust region decides how many SGD steps each takes)
        self.scheduler = get_scheduler(cfg.update.lr_schedule, optimizer, num_warmup_steps=cfg.update.warmup_updates,
                                       num_training_steps=cfg.schedule.updates)
        self.update_rule = cfg.update_rule()
        self.adv_scaler = AdvantageScaler.from_config(self.update_rule)
        # the schedule is checkpointed by trainers.checkpoint as JSON, not registered with
        # Accelerate (which would pickle it, and unpickle it in full on resume)
        model, optimizer = acc.prepare(model, optimizer)
        self.policy = TrainablePolicy(acc, model, optimizer, tok, loss_unit=cfg.loss_unit(cfg.credit.rl_loss),
                                      temperature=cfg.rollout.temperature, logprob_batch_rows=cfg.update.logprob_batch_rows,
                                      lora=bool(cfg.policy.lora), ref_model=ref_model)
        bf16_rollouts = cfg.policy.rollout_dtype == "bfloat16" or (
            cfg.policy.rollout_dtype == "auto" and acc.device.type == "cpu" and _mixed_precision(cfg) == "bf16")
        if bf16_rollouts:
            self.policy.rollout_model = copy.deepcopy(self.policy.unwrapped).to(torch.bfloat16).eval().requires_grad_(False)
        self.backend = make_backend("transformers", self.policy.acting, tok, batch_size=cfg.rollout.rollout_batch_size)

    def _build_rollouts(self) -> None:
        """Loss unit, estimator and the environment pool of this process's groups."""
        cfg = self.cfg
        from wrappers.credit import get_estimator

        self.estimator = get_estimator(cfg.credit.estimator, **cfg.estimator_params())
        self.groups_here = len(range(self.rank, cfg.rollout.groups_per_update, self.world))
        env: Any = cfg.env.env_id
        if cfg.credit.rubric_shaping:
            from wrappers.shaping import make_shaped

            env = functools.partial(make_shaped, cfg.env.env_id, cfg.credit.rubric_shaping, **cfg.env_make_kwargs())
        self.pool = EnvPool(env, cfg.env_make_kwargs(), max(1, self.groups_here * cfg.rollout.group_size), workers=cfg.env.env_workers,
                            timeout=(cfg.env.env_timeout or None) if cfg.env.env_workers else None)

    def _resume(self) -> None:
        """Continue from the run folder's last complete checkpoint, if there is one."""
        acc = self.accelerator
        self._check_metrics_file()
        ckpt = latest_checkpoint(self.run_dir / "checkpoints")
        if ckpt is not None:
            state = load_checkpoint(acc, ckpt)
            self.start_update = int(state["update"])
            if not restore_scheduler(self.scheduler, ckpt):  # a checkpoint from before lr_scheduler.json
                for _ in range(self.start_update):  # the schedule steps once per update
                    self._step_schedule()
            self.eval_history = list(state.get("eval_history", []))
            self.warm_start_stats = state.get("warm_start")
            self.warm_start_eval = state.get("warm_start_eval")
            self.train_games_eval = dict(state.get("train_games_eval") or {})
            if state.get("adv_scaler") is not None:
                self.adv_scaler.load_state_dict(state["adv_scaler"])
            self.resumed_from = str(ckpt)
            self.policy.sync_rollout_model(everything=True)
            log.info("resumed from %s (update %d)", ckpt, self.start_update)

    def _check_metrics_file(self) -> None:
        """Refuse to resume onto a ``metrics.jsonl`` that ``rubricgym report`` could not read
        (a torn last line was already cut off when the file was opened)."""
        if not (self.run_dir / "metrics.jsonl").is_file():
            return
        try:
            read_metrics(self.run_dir)
        except MetricFileError as exc:
            raise MetricFileError(f"cannot resume {self.run_dir}: {exc}; fix or delete that line "
                                  "(`rubricgym report` refuses it too), then resume") from None

    # ------------------------------------------------------------------ helpers
    def _seed_for(self, *parts: int) -> int:
        return int(np.random.SeedSequence([self.cfg.schedule.seed, *parts]).generate_state(1)[0])

    def sample_tasks(self, update: int) -> list[TaskRef]:
        """The P tasks of ``update``: the training tasks are dealt in passes, each pass a
        seeded shuffle of all of them, P per update, so every task is trained on once per
        pass (independent draws left some never drawn in a short run).  A pure function of
        seed and update: the sampler's state is the update counter, which checkpoints store."""
        cfg = self.cfg
        n, p = len(self.train_task_ids), cfg.rollout.groups_per_update
        refs = []
        for g in range(p):
            slot = update * p + g
            order = np.random.default_rng([cfg.schedule.seed, 7, slot // n]).permutation(n)
            k = int(order[slot % n])
            refs.append(TaskRef(self.train_task_ids[k], cfg.env.train_split, self._seed_for(1, update, g)))
        return refs

    def _rollout(self, tasks: list[TaskRef], group_size: int, temperature: float, seed: int):
        torch.manual_seed(seed)
        settings = RolloutSettings.from_config(self.cfg, temperature=temperature)
        pol = self.policy
        autocast = contextlib.nullcontext() if pol.rollout_model is not None else self.accelerator.autocast()
        with autocast:  # the bf16 rollout copy runs as it is
            return collect_rollouts(pol.acting, pol.tokenizer, self.backend, self.pool, tasks, group_size, settings)

    # ------------------------------------------------------------------ one update
    def optimize(self, rows: list[TrainRow], pairs: list[tuple[int, int, float]], update: int) -> dict[str, float]:
        """The policy update on this process's rows (all processes call it together): the
        advantages in units of their running RMS, then :func:`~trainers.update_rule.trust_region_update`
        (SGD epochs inside a KL trust region, :class:`~trainers.trust_region.TrainerOps`)."""
        cfg = self.cfg
        t0 = time.perf_counter()
        raw = np.array([r.advantage for r in rows], dtype=np.float64)
        rows = self._scale_advantages(rows)
        scaled = np.array([r.advantage for r in rows], dtype=np.float64)
        n_all = _all_sum(self.accelerator, [float(len(rows))])[0]
        out: dict[str, float] = {}
        if cfg.update.rl_update and n_all > 0:
            ref = self.policy.logprobs(rows, reference=True) if cfg.objective.kl_coef > 0 else None
            ops = TrainerOps(self.policy, cfg, rows, pairs, ref, np.random.default_rng([cfg.schedule.seed, 11, update]))
            out["logprob_s"] = time.perf_counter() - t0
            out.update(trust_region_update(ops, self.update_rule))
            out["pairs_colocated"] = float(ops.colocated / max(1.0, out["epochs_run"]))
            self.policy.sync_rollout_model()
        self._step_schedule()
        out.update(_rms_stats(self.accelerator, raw, scaled))
        out["adv_scale"] = float(self.adv_scaler.scale)
        out["pairs"] = float(len(pairs))
        out["rows"] = float(len(rows))
        out["optimize_s"] = time.perf_counter() - t0
        out["lr"] = float(self.scheduler.get_last_lr()[0])
        return out

    def _step_schedule(self) -> None:
        """Advance the learning-rate schedule by one update, whether or not this update stepped
        the optimizer (the control with ``rl_update`` off, an update with no rows): the schedule
        counts updates, so a run and its control see the same rate at every update.  torch's
        warning about a schedule stepped before the optimizer is about per-step schedules; it
        is silenced for this one call."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before", category=UserWarning)
            self.scheduler.step()

    def _scale_advantages(self, rows: list[TrainRow]) -> list[TrainRow]:
        """Rows with advantages divided by the running RMS (:class:`~trainers.update_rule.AdvantageScaler`),
        float noise zeroed; the statistic is over every process's rows, so all processes agree."""
        local = np.array([r.advantage for r in rows], dtype=np.float64)
        parts = _gather(self.accelerator, local)
        scaled = self.adv_scaler.normalize(np.concatenate(parts) if parts else local)
        start = sum(len(p) for p in parts[:self.rank])
        mine = scaled[start:start + len(rows)]
        return [dataclasses.replace(r, advantage=float(a)) for r, a in zip(rows, mine)]

    def run_update(self, update: int) -> dict[str, Any]:
        """Roll out, compute credit, optimise; return this update's (gathered) metrics."""
        cfg, acc = self.cfg, self.accelerator
        tasks = self.sample_tasks(update)[self.rank::self.world]
        result = self._rollout(tasks, cfg.rollout.group_size, cfg.rollout.temperature, self._seed_for(2, update, self.rank))
        t0 = time.perf_counter()
        credits = self.estimator(result.groups)
        t_credit = time.perf_counter() - t0
        rows, pairs = build_rows(result, credits, drop_zero_advantage=cfg.update.skip_zero_advantage_rows)
        if cfg.update.max_train_rows:
            rows, pairs = subsample_rows(rows, pairs, cfg.update.max_train_rows, np.random.default_rng([cfg.schedule.seed, 13, update, self.rank]))
        total_steps = sum(len(t.steps) for g in result.groups for t in g)
        if cfg.rollout.save_rollouts:
            suffix = "" if self.world == 1 else f".rank{self.rank}"
            save_jsonl(self.run_dir / "rollouts" / f"update_{update + 1:05d}{suffix}.jsonl",
                       [t for g in result.groups for t in g])
        opt = self.optimize(rows, pairs, update)
        self.phase_seconds["rollout"] += result.stats.get("rollout_s", 0.0)
        self.phase_seconds["credit"] += t_credit
        self.phase_seconds["optimize"] += opt["optimize_s"]
        episodes = [{"success": t.success, "score": t.score, **m} for g, gm in zip(result.groups, result.meta) for t, m in zip(g, gm)]
        advs = [a for c in credits for a in c.advantages if len(a)]
        adv = np.concatenate(advs) if advs else np.zeros(1)
        opt["rows_skipped"] = float(total_steps - len(rows))
        local = {
            "episodes": episodes,
            "opt": opt,
            "credit": {"adv_mean": float(adv.mean()), "adv_std": float(adv.std()), "adv_abs_max": float(np.abs(adv).max()),
                       "credit_s": t_credit, **_numeric_stats(credits)},
            "rollout": result.stats,
        }
        gathered = _gather(acc, local)
        eps = [e for g in gathered for e in g["episodes"]]
        record: dict[str, Any] = {f"train/{k}": v for k, v in episode_metrics(eps).items()}
        for part in ("opt", "credit", "rollout"):
            keys = set().union(*(g[part].keys() for g in gathered))
            for k in sorted(keys):
                vals = [g[part][k] for g in gathered if k in g[part]]
                sums = part == "rollout" or k in ("pairs", "rows", "pairs_colocated", "rows_skipped")
                record[f"{part}/{k}"] = float(np.sum(vals) if sums else np.mean(vals))
        rs = record
        if rs.get("rollout/policy_s"):
            rs["rollout/gen_tokens_per_s"] = rs["rollout/gen_tokens"] / max(1e-9, rs["rollout/policy_s"] / self.world)
        rs["rollout/decisions_per_s"] = rs["rollout/decisions"] / max(1e-9, rs["rollout/rollout_s"] / self.world)
        return record

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, update: int, tag: str = "eval", *, training_games: bool = False) -> dict[str, float]:
        """One rollout per validation task at ``val_temperature``; gathered metrics. With
        ``save_rollouts`` the episodes go to ``rollouts/<tag>_XXXXX.jsonl``.

        ``training_games``: one rollout per *training* game instead, with the same reset and
        sampling seeds whenever it is called (so two calls differ only by the policy)."""
        cfg = self.cfg
        if training_games:
            refs = [TaskRef(t, cfg.env.train_split, self._seed_for(6, k)) for k, t in enumerate(self.train_task_ids)]
            refs, update = refs[self.rank::self.world], 0
        else:
            refs = [TaskRef(t, cfg.env.val_split, self._seed_for(3, k)) for k, t in enumerate(self.val_task_ids)][self.rank::self.world]
        episodes = []
        played = []
        t0 = time.perf_counter()
        for s in range(0, len(refs), self.pool.n):
            chunk = refs[s:s + self.pool.n]
            res = self._rollout(chunk, 1, cfg.rollout.val_temperature, self._seed_for(4, update, self.rank, s))
            episodes += [{"success": g[0].success, "score": g[0].score, **m[0]} for g, m in zip(res.groups, res.meta)]
            played += [g[0] for g in res.groups]
        if cfg.rollout.save_rollouts and played:
            suffix = "" if self.world == 1 else f".rank{self.rank}"
            save_jsonl(self.run_dir / "rollouts" / f"{tag}_{update:05d}{suffix}.jsonl", played)
        all_eps = [e for part in _gather(self.accelerator, episodes) for e in part]
        out = episode_metrics(all_eps)
        out["eval_s"] = time.perf_counter() - t0
        self.phase_seconds["eval"] += out["eval_s"]
        return out

    # ------------------------------------------------------------------ the loop
    def train(self) -> dict[str, Any]:
        """Run (or continue) training; return the final summary (also written to the run folder)."""
        cfg, acc = self.cfg, self.accelerator
        progress = _Progress(enabled=cfg.output.progress and acc.is_main_process, total=cfg.schedule.updates, start=self.start_update)
        t_start = time.perf_counter()
        cpu_start = time.process_time()
        try:
            if self.start_update == 0 and not self.eval_history:  # the run's identity (trainers.metrics)
                self.metrics.log(0, "run", run_identity("trainer", cfg.env.env_id, cfg.credit.estimator, "", cfg.schedule.seed, cfg.to_dict(),
                                                          estimator_params=cfg.estimator_params()))
            if self.start_update == 0 and cfg.schedule.eval_at_start and not self.eval_history:
                progress.phase(f"validation before training ({len(self.val_task_ids)} tasks)")
                self._eval_and_log(0)
            if self.start_update == 0 and cfg.warm_start.warm_start_tasks:
                progress.phase(f"warm start: behaviour cloning of {cfg.warm_start.warm_start_tasks} walkthroughs")
                self.warm_start()
            end = cfg.schedule.updates if self.stop_after is None else min(cfg.schedule.updates, self.start_update + self.stop_after)
            if self.start_update == 0 and cfg.schedule.eval_train_games:
                progress.phase("training games before RL")
                self._eval_training_games("before")
            for u in range(self.start_update, end):
                progress.phase(f"update {u + 1}: rollouts, credit, optimizer")
                t0 = time.perf_counter()
                record = self.run_update(u)
                record["time/update_s"] = time.perf_counter() - t0
                self.metrics.log(u + 1, "train", record)
                done = u + 1
                if done % cfg.schedule.eval_every == 0 or done == cfg.schedule.updates:
                    progress.phase(f"validation after update {done}")
                    self._eval_and_log(done)
                if done % cfg.schedule.save_every == 0 or done == cfg.schedule.updates or done == end:
                    progress.phase(f"checkpoint {done}")
                    self._checkpoint(done)
                progress.advance(record.get("train/success", 0.0), self.eval_history[-1].get("success") if self.eval_history else None)
            if end == cfg.schedule.updates and cfg.schedule.eval_train_games and "after" not in self.train_games_eval:
                progress.phase("training games after RL")
                self._eval_training_games("after")
            progress.phase("saving the policy and the report")
            cpu = {"trainer_s": time.process_time() - cpu_start, "env_workers_s": self.pool.worker_cpu_seconds(),
                   "torch_threads": torch.get_num_threads(), "mixed_precision": str(self.accelerator.mixed_precision),
                   "rollout_dtype": "bfloat16" if self.policy.rollout_model is not None else "float32"}
            summary = self._summary(time.perf_counter() - t_start, cpu)
            note = run_folder_note(self.run_dir) if acc.is_main_process else None
            if note:
                log.warning(note)
            if end == cfg.schedule.updates:  # finished: the end record (trainers.metrics)
                self.metrics.log(end, "end", {"seconds": summary["seconds"], "cpu_seconds": sum(
                    c.get("trainer_s", 0.0) + c.get("env_workers_s", 0.0) for c in summary["cpu"] if c)})
        finally:
            progress.close()
            self.pool.close()
            self.metrics.close()
        return summary

    def warm_start(self) -> dict[str, float]:
        """Behaviour-clone the walkthroughs of ``warm_start_tasks`` training tasks (see
        :mod:`trainers.warm_start`); then validate again when ``eval_after_warm_start``."""
        from trainers.warm_start import behaviour_clone, expert_rows

        cfg = self.cfg
        ids = self.train_task_ids[: cfg.warm_start.warm_start_tasks]  # the pool is in the fixed mixed order
        n = len(ids)
        refs = [TaskRef(t, cfg.env.train_split, self._seed_for(5, k)) for k, t in enumerate(ids)]
        t0 = time.perf_counter()
        pol = self.policy
        rows = expert_rows(self.pool, pol.tokenizer, refs, RolloutSettings.from_config(cfg))
        stats = behaviour_clone(pol.model, self.accelerator, rows, pad_id=pol.pad_id,
                                lr=cfg.warm_start.warm_start_lr, epochs=cfg.warm_start.warm_start_epochs, batch_rows=cfg.warm_start.warm_start_batch_rows,
                                micro_rows=cfg.update.micro_batch_rows, seed=cfg.schedule.seed, rank=self.rank, world=self.world,
                                max_grad_norm=cfg.update.max_grad_norm, loss=cfg.loss_unit(cfg.warm_start.warm_start_loss))
        pol.sync_rollout_model()
        if pol.ref_model is not None:  # the KL reference is the policy RL starts from
            pol.ref_model.load_state_dict(pol.unwrapped.state_dict())
        elif cfg.policy.lora and cfg.objective.kl_coef > 0:
            log.warning("warm start with LoRA: the KL reference stays the base model (adapters disabled)")
        stats["tasks"] = float(n)
        stats["choice_loss"] = float(cfg.loss_unit(cfg.warm_start.warm_start_loss) == "choice")
        stats["seconds"] = time.perf_counter() - t0
        self.phase_seconds["warm_start"] = stats["seconds"]
        self.metrics.log(0, "warm_start", stats)
        log.info("warm start: %d rows from %d walkthroughs, NLL %.3f -> %.3f (%.0f s)", stats["rows"], n,
                 stats["nll_first"], stats["nll_last"], stats["seconds"])
        if cfg.warm_start.eval_after_warm_start and self.val_task_ids:
            res = self.evaluate(0, tag="eval_warm_start")
            stats["val_success"] = res.get("success", 0.0)
            self.metrics.log(0, "eval_warm_start", res)
            self.warm_start_eval = res
        self.warm_start_stats = stats
        return stats

    def _eval_training_games(self, when: str) -> None:
        """Play every training game once (``eval_train_games``): ``when`` = before / after the RL phase."""
        res = self.evaluate(0 if when == "before" else self.cfg.schedule.updates, tag=f"eval_train_{when}", training_games=True)
        self.train_games_eval[when] = res
        self.metrics.log(0 if when == "before" else self.cfg.schedule.updates, f"eval_train_{when}", res)
        log.info("training games %s the RL phase: success %.3f (%d games)", when, res.get("success", 0.0), len(self.train_task_ids))

    def _eval_and_log(self, update: int) -> None:
        res = self.evaluate(update)
        self.eval_history.append({"update": update, **res})
        self.metrics.log(update, "eval", res)

    def _checkpoint(self, update: int) -> None:
        state = {"update": update, "sampler": {"kind": "shuffled-passes", "seed": self.cfg.schedule.seed, "next_update": update},
                 "eval_history": self.eval_history, "config": self.cfg.to_dict(),
                 "warm_start": self.warm_start_stats, "warm_start_eval": self.warm_start_eval,
                 "train_games_eval": self.train_games_eval,
                 "adv_scaler": self.adv_scaler.state_dict()}
        t0 = time.perf_counter()
        save_checkpoint(self.accelerator, self.run_dir / "checkpoints", update, state, scheduler=self.scheduler)
        if self.accelerator.is_main_process:
            prune_checkpoints(self.run_dir / "checkpoints", self.cfg.schedule.keep_checkpoints)
        self.phase_seconds["checkpoint"] += time.perf_counter() - t0

    def _summary(self, seconds: float, cpu: dict[str, float] | None = None) -> dict[str, Any]:
        acc = self.accelerator
        digests = _gather(acc, weights_digest(self.policy.unwrapped))
        evals = last_per_update(h for h in self.eval_history if "success" in h)
        curve = [(h["update"], h["success"]) for h in evals]
        marks = readouts(evals)
        summary = {
            "run_dir": str(self.run_dir),
            "updates": self.cfg.schedule.updates,
            "processes": self.world,
            "weights_identical_across_processes": len(set(digests)) == 1,
            "weights_digest": digests[0],
            "eval_curve": curve,
            "L5": marks["L5"],
            "normalized_auc": marks["AUC"],
            "seconds": seconds,
            "cpu": _gather(acc, cpu or {}),
            "phases_s": self.phase_seconds,
            "resumed_from": self.resumed_from,
            "warm_start": self.warm_start_stats,
            "warm_start_eval": self.warm_start_eval,
            "train_games_eval": self.train_games_eval,
            "rl_loss": self.policy.loss_unit,
        }
        if acc.is_main_process:
            (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
            try:
                from trainers.report import write_run_report

                write_run_report(self.run_dir)
            except Exception as exc:  # noqa: BLE001  (a plotting failure must not lose the run)
                log.warning("could not draw the run report: %s", exc)
            final = self.run_dir / "policy"
            self.policy.unwrapped.save_pretrained(final)
            self.policy.tokenizer.save_pretrained(final)
        acc.wait_for_everyone()
        return summary


# ---------------------------------------------------------------------- small utilities
def run_folder_note(run_dir: Path, threshold_bytes: int = 200 * 2**20) -> str | None:
    """A warning for a run folder over ``threshold_bytes``: its size, the trained policy's and
    the checkpoints' (a full copy of the model and optimizer state that only ``--resume`` reads).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> (d / "checkpoints").mkdir(); _ = (d / "checkpoints" / "w").write_bytes(bytes(3 * 2**20))
    >>> run_folder_note(d, threshold_bytes=2**20)  # doctest: +ELLIPSIS
    'the run folder ... holds 3.0 MB: policy/ 0.0 MB (the trained model), checkpoints/ 3.0 MB (read only by --resume: delete them once the run is done)'
    """
    def size(path: Path) -> int:
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0

    total = size(run_dir)
    if total < threshold_bytes:
        return None
    mb = 2**20
    return (f"the run folder {run_dir} holds {total / mb:.1f} MB: policy/ {size(run_dir / 'policy') / mb:.1f} MB "
            f"(the trained model), checkpoints/ {size(run_dir / 'checkpoints') / mb:.1f} MB (read only by --resume: "
            "delete them once the run is done)")


def _numeric_stats(credits: list[Any]) -> dict[str, float]:
    out: dict[str, list[float]] = {}
    for c in credits:
        for k, v in (c.stats or {}).items():
            if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(float(v)):
                out.setdefault(k, []).append(float(v))
    return {f"stat_{k}": float(np.mean(v)) for k, v in out.items()}


def _gather(acc: Any, obj: Any) -> list[Any]:
    if acc.num_processes == 1:
        return [obj]
    from accelerate.utils import gather_object

    return gather_object([obj])


def _broadcast(acc: Any, value: str) -> str:
    from accelerate.utils import broadcast_object_list

    box = [value]
    broadcast_object_list(box, from_process=0)
    return box[0]


def _rms_stats(acc: Any, raw: np.ndarray, scaled: np.ndarray) -> dict[str, float]:
    """RMS of the raw and of the scaled advantages over every process's rows."""
    sq_raw, sq_scaled, n = _all_sum(acc, [float(np.sum(raw**2)), float(np.sum(scaled**2)), float(raw.size)])
    return {"adv_rms": math.sqrt(sq_raw / n) if n else 0.0, "adv_rms_scaled": math.sqrt(sq_scaled / n) if n else 0.0}


class _Progress:
    """A rich progress bar over updates that names the phase under way; off a terminal, one
    INFO log line per phase and per update instead (no output when disabled)."""

    def __init__(self, *, enabled: bool, total: int, start: int, console: Any = None) -> None:
        self.bar = None
        self.last = ""
        self.total, self.done = total, start
        if enabled and console is None:
            from rich.console import Console

            console = Console()  # where the bar would draw (stdout)
        self.lines = enabled and not console.is_terminal
        if enabled and not self.lines:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                TimeRemainingColumn(), TextColumn("{task.fields[info]}"), transient=False,
                                console=console)
            self.task = self.bar.add_task("updates", total=total, completed=start, info="starting")
            self.bar.start()

    def phase(self, name: str) -> None:
        """Show what the run is doing now (before the last update's success figures)."""
        if self.bar is not None:
            self.bar.update(self.task, info=" · ".join(x for x in (name, self.last) if x))
        elif self.lines:
            log.info("train: %s", name)

    def advance(self, train_success: float, val_success: float | None) -> None:
        self.done += 1
        self.last = f"train success {train_success:.2f}" + ("" if val_success is None else f" · val {val_success:.2f}")
        if self.bar is not None:
            self.bar.update(self.task, advance=1, info=self.last)
        elif self.lines:
            log.info("train: %d/%d updates done · %s", self.done, self.total, self.last)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

"""How different is each estimator's credit from GRPO's on the same batches?

Follows GRPO's own run of an arena setting (its rollouts, its updates) and, on every update's
batch, computes every method's advantages and the policy-gradient direction they give,
g_m = Σ_rows A_m(row) ∇log π(a_row) (the direction of the objective's first step), then
prints per method, averaged over updates and seeds:

* the Pearson correlation of its per-row advantages with GRPO's;
* the cosine of g_m with GRPO's g;
* the share of rows with zero advantage.

A method whose gradient has cosine ~1 with GRPO's can only differ from GRPO by the size of
its steps, which the update rule's running-RMS units remove: the arena cannot tell it apart.

Usage::

    python bench/credit_directions.py                                   # ALFWorld, seeds 0-3
    python bench/credit_directions.py --env webshop --seeds 0 1 --methods grpo rloo gigpo
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(a @ b / (na * nb)) if na > 0 and nb > 0 else float("nan")


def main() -> None:
    from trainers.arena.agent import keyed_rng
    from trainers.arena.config import ArenaConfig
    from trainers.arena.envs import (
        arena_envs,
        make_arena_env,
        prepare_generated_games,
        task_sets,
        warm_start_tasks,
    )
    from trainers.arena.policy import Featurizer, LinearSoftmaxPolicy
    from trainers.arena.run import play_update
    from trainers.arena.update import credit_rows, update_policy, warm_start
    from trainers.arena.variants import arena_estimators, resolve_method
    from trainers.update_rule import AdvantageScaler

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="alfworld-generated")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--methods", nargs="+", help="default: every registered estimator and gigpo:step_shuffle")
    args = ap.parse_args()
    if not args.methods:
        args.methods = [*arena_estimators(), "gigpo:step_shuffle"]
    cfg = ArenaConfig.for_env(args.env)
    prepare_generated_games(cfg)
    family = cfg.preset.family
    specs = {m: resolve_method(m, family, cfg.estimator_params, scpo_scorer=cfg.scpo_scorer) for m in args.methods}
    estimators = {m: s.build() for m, s in specs.items()}
    acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for seed in args.seeds:
        envs, env = arena_envs(cfg), make_arena_env(cfg)
        train_pool, _val, _ = task_sets(env, cfg)
        feat, policy = Featurizer(cfg.dim), LinearSoftmaxPolicy(cfg.dim)
        if cfg.warm_start.warm_start_tasks:
            warm_start(policy, envs, cfg, warm_start_tasks(env, cfg), feat)
        reference, scaler, grpo = policy.copy(), AdvantageScaler.from_config(cfg.update_rule()), resolve_method(
            "grpo", family).build()
        task_rng = keyed_rng(seed, 7)
        for update in range(1, cfg.schedule.updates + 1):
            picks = sorted(task_rng.choice(cfg.schedule.train_tasks, size=cfg.rollout.groups_per_update, replace=False).tolist())
            groups, grecs, _ = play_update(envs, cfg, policy, feat, seed, update, picks,
                                              [train_pool[k] for k in picks])
            base_records, base_adv, _ = credit_rows(groups, grecs, grpo(groups), 1.0)
            ev = policy.evaluate([r.decision for r in base_records], [r.chosen for r in base_records])
            g_base = ev.grad(base_adv)
            for m, est in estimators.items():
                _, adv, _ = credit_rows(groups, grecs, est(groups), 1.0, specs[m].degrade, keyed_rng(seed, update, 55))
                acc[m]["corr"].append(float(np.corrcoef(adv, base_adv)[0, 1]) if adv.std() > 0 and base_adv.std() > 0
                                      else float("nan"))
                acc[m]["cos"].append(_cos(ev.grad(adv), g_base))
                acc[m]["zero"].append(float(np.mean(np.abs(adv) < 1e-9)))
            update_policy(policy, reference, base_records, scaler.normalize(base_adv), [], cfg.objective,
                            cfg.update_rule(), lr=cfg.update.learning_rate, minibatch=cfg.minibatch, rng=keyed_rng(seed, update, 99))
    print(f"{args.env}, GRPO's runs, seeds {args.seeds}, {cfg.schedule.updates} updates each "
          f"(means over updates with a defined value)")
    print(f"{'method':<22} {'corr(A, A_grpo)':>16} {'cos(g, g_grpo)':>15} {'zero-adv rows':>14}")
    for m, d in acc.items():
        print(f"{m:<22} {np.nanmean(d['corr']):16.3f} {np.nanmean(d['cos']):15.3f} {np.mean(d['zero']):14.3f}")


if __name__ == "__main__":
    main()

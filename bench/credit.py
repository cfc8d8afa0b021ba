"""Benchmark: time per credit estimator on batches of sibling groups (one CPU core).

Batches: 16 groups × 8 trajectories of 30 steps (the target size), of 10–50 steps, and that
mixed batch at 4× and 16× the number of groups.  Every registered estimator is timed (new
ones are picked up automatically); SCPO runs with the dependency-free lexical scorer unless
``--scpo-scorer`` says otherwise, and its row also shows the time without the scorer call
(the target excludes the scorer).  Target: < 20 ms per estimator for 16 × 8 × 30 and linear
growth (the GraphGPO paper reports 133 ms for its graph stage per iteration).

Rollouts are synthetic by default: a small ALFWorld-like task per group — states (stage,
location), actions "go to loc j" / "use ..." (invalid when nothing happens, −0.1), success
when the last stage is done — so anchor states recur across siblings as in real rollouts.
``--rollouts FILE.jsonl`` times real saved rollouts instead (grouped by task id, tiled to
the sizes).

    python bench/credit.py                 # the table
    python bench/credit.py --repeats 9     # steadier numbers
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import inspect
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_envs.trajectory import Step, Trajectory, load_jsonl
from wrappers.credit import available_estimators, get_estimator
from wrappers.credit.base import _REGISTRY, validate_groups
from wrappers.credit.flat import flat_advantages
from wrappers.credit.graph import TransitionGraph

TARGET_MS = 20.0
LOCATIONS = 5
STAGES = 4


def synthetic_trajectory(rng: random.Random, task: int, slot: int, length: int, fixed: bool) -> Trajectory:
    """One rollout of the synthetic task (``fixed``: exactly ``length`` steps)."""
    # stage k must be done at location (task + 2k) mod LOCATIONS
    stage, loc, steps = 0, 0, []
    skill = rng.uniform(0.3, 0.8)
    for t in range(length):
        target = (task + 2 * stage) % LOCATIONS
        state = (f"task{task}", stage, loc)
        keys = {"exact": state, "coarse": (stage, loc == target), "signature": (frozenset({f"s{stage}"}), frozenset())}
        if loc != target and rng.random() < skill:
            action, nxt, feedback, valid = f"go to loc {target}", (stage, target), f"You arrive at loc {target}.", True
        elif loc == target and rng.random() < skill:
            action, nxt, feedback, valid = f"use item {stage}", (stage + 1, loc), f"You finish stage {stage}.", True
        elif rng.random() < 0.5:
            j = rng.randrange(LOCATIONS)
            action, nxt, feedback, valid = f"go to loc {j}", (stage, j), f"You arrive at loc {j}.", True
        else:
            action, nxt, feedback, valid = f"use item {rng.randrange(9)}", (stage, loc), "Nothing happens.", False
        won = nxt[0] == STAGES and (not fixed or t == length - 1)
        if nxt[0] == STAGES and not won:  # fixed length: finishing early is undone
            nxt = (stage, loc)
        steps.append(Step(state_key=state, action=action, reward=10.0 if won else 0.0,
                          penalty=0.0 if valid else -0.1, valid=valid, observation=f"You are at loc {loc}.",
                          feedback=feedback, keys=keys, rubric={"stage": stage},
                          next_state_key=None if t < length - 1 else (f"task{task}",) + nxt))
        stage, loc = nxt
        if won:
            break
    ok = bool(steps) and steps[-1].reward > 0
    return Trajectory(f"task{task}", slot, steps, score=1.0 if ok else 0.0, success=ok, truncated=not ok)


def synthetic_batch(groups: int, size: int, lengths: tuple[int, int], seed: int, fixed: bool = False) -> list[list[Trajectory]]:
    rng = random.Random(seed)
    return [[synthetic_trajectory(rng, g, i, rng.randint(*lengths), fixed) for i in range(size)] for g in range(groups)]


def flat_columns(groups: list[list[Trajectory]]) -> dict[str, list]:
    """The batch as flat step-row columns (what an RL library's batch holds)."""
    cols: dict[str, list] = {k: [] for k in ("group_id", "traj_id", "step_index", "state_key", "next_state_key",
                                            "action", "reward", "penalty", "valid", "slot")}
    for g, group in enumerate(groups):
        for t in group:
            for k, s in enumerate(t.steps):
                for name, value in (("group_id", g), ("traj_id", (g, t.slot)), ("step_index", k),
                                    ("state_key", s.state_key), ("next_state_key", s.next_state_key),
                                    ("action", s.action), ("reward", s.reward), ("penalty", s.penalty),
                                    ("valid", s.valid), ("slot", t.slot)):
                    cols[name].append(value)
    return cols


def tile(groups: list[list[Trajectory]], n: int) -> list[list[Trajectory]]:
    return [groups[k % len(groups)] for k in range(n)]


def best_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up (imports, lazily built scorers)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def build(name: str, scpo_scorer: str):
    accepted = inspect.signature(_REGISTRY[name].__init__).parameters
    return get_estimator(name, **({"scorer": scpo_scorer} if "scorer" in accepted else {}))


def scorer_ms(name: str, est, batch: Sequence[Sequence[Trajectory]]) -> float | None:
    """Scorer wall time of the last call, when the estimator reports it."""
    res = est(batch)
    for r in res:
        if "batch_scorer_seconds" in r.stats:
            return 1e3 * float(r.stats["batch_scorer_seconds"])
    return None


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per cell (best is reported)")
    ap.add_argument("--scpo-scorer", default="lexical", help="scorer spec for SCPO (default: lexical)")
    ap.add_argument("--rollouts", type=Path, help="JSONL of real rollouts to time instead of synthetic ones")
    ap.add_argument("--estimators", nargs="*", help="subset of estimator names")
    ap.add_argument("--cpu", type=int, default=0, help="pin to this CPU core (-1: do not pin)")
    args = ap.parse_args(argv)
    if args.cpu >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})

    if args.rollouts:
        by_task: dict[object, list[Trajectory]] = {}
        for t in load_jsonl(args.rollouts):
            by_task.setdefault(t.task_id, []).append(t)
        real = list(by_task.values())
        base, mixed = tile(real, 16), tile(real, 16)
        source = f"{args.rollouts} ({len(real)} groups, tiled)"
    else:
        base = synthetic_batch(16, 8, (30, 30), seed=1, fixed=True)
        mixed = synthetic_batch(16, 8, (10, 50), seed=2)
        source = "synthetic ALFWorld-like tasks"
    big4 = tile(mixed, 64) if args.rollouts else synthetic_batch(64, 8, (10, 50), seed=3)
    big16 = tile(mixed, 256) if args.rollouts else synthetic_batch(256, 8, (10, 50), seed=4)
    sizes = [("16x8x30", base), ("16x8x10-50", mixed), ("4x", big4), ("16x", big16)]
    steps = {k: sum(len(t.steps) for g in b for t in g) for k, b in sizes}
    wins = sum(t.success for g in base for t in g) / sum(len(g) for g in base)
    print(f"rollouts: {source}; steps per batch: " + ", ".join(f"{k} {v}" for k, v in steps.items())
          + f"; success rate (16x8x30) {wins:.2f}; best of {args.repeats} on one core"
          + (f"; load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "") + "\n")

    names = args.estimators or available_estimators()
    head = (f"{'estimator':<22}{'16x8x30 ms':>11}{'us/step':>9}{'no-valid.':>10}{'10-50 ms':>10}{'4x ms':>9}"
            f"{'16x ms':>9}{'us/step 1x/4x/16x':>20}{'growth':>8}  target")
    print(head)
    print("-" * len(head))
    rows: list[tuple[str, Callable[[list[list[Trajectory]]], object]]] = []
    rows.append(("validate_groups", validate_groups))
    rows.append(("graph stage only", lambda b: TransitionGraph.from_groups(b).success_distances()))
    for name in names:
        est = build(name, args.scpo_scorer)
        rows.append((name, est))
    if "graphgpo" in names:  # the flat step-row path: regrouping rows into Trajectory objects + GraphGPO
        cols_of = {id(b): flat_columns(b) for _, b in sizes}
        rows.append(("graphgpo (flat rows)", lambda b: flat_advantages("graphgpo", **cols_of[id(b)])))
    for label, fn in rows:
        rep = {k: max(1, args.repeats if k != "16x" else max(1, args.repeats // 3)) for k, _ in sizes}
        ms = {k: best_ms(lambda b=b, fn=fn: fn(b), rep[k]) for k, b in sizes}
        # the estimator's own work, without the input validation every call starts with
        bare = best_ms(lambda fn=fn: fn.compute(base), args.repeats) if hasattr(fn, "compute") else ms["16x8x30"]
        target_ms = ms["16x8x30"]
        note = ""
        if label == "scpo" or "scorer" in getattr(fn, "params", dict)():
            s = scorer_ms(label, fn, base)
            if s is not None:
                target_ms = ms["16x8x30"] - s
                note = f" (without scorer {target_ms:.1f} ms)"
        ok = "ok" if target_ms < TARGET_MS else "SLOW"
        per = [1e3 * ms[k] / steps[k] for k in ("16x8x10-50", "4x", "16x")]
        print(f"{label:<22}{ms['16x8x30']:>11.2f}{1e3 * ms['16x8x30'] / steps['16x8x30']:>9.2f}{bare:>10.2f}"
              f"{ms['16x8x10-50']:>10.2f}{ms['4x']:>9.2f}{ms['16x']:>9.2f}"
              f"{'/'.join(f'{x:.2f}' for x in per):>20}{per[2] / per[0]:>8.2f}  {ok}{note}")
    print(f"\nno-valid.: the 16x8x30 time of Estimator.compute alone (every call first runs validate_groups);"
          f"\nus/step 1x/4x/16x: time per step on the 16x8x10-50 batch and at 4x and 16x its groups;"
          f" growth = (us/step at 16x)/(us/step at 1x), 1.0 is linear;"
          f" target: < {TARGET_MS:g} ms at 16x8x30 (GraphGPO paper: 133 ms graph stage per iteration)")


if __name__ == "__main__":
    main()

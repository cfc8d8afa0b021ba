"""Benchmark: time per credit estimator on batches of sibling groups (one CPU core).

Batches: 16 groups × 8 trajectories of 30 steps (the target size), of 10–50 steps (1×), and
that mixed batch at 4× and 16× the number of groups.  Every registered estimator is timed (new
ones are picked up automatically), plus input validation and the graph stage alone; a second
table times every estimator fed through the flat step-row path (:mod:`wrappers.credit.flat`)
against its native grouped call, the two calls alternating, at 3,840 to 61,440 rows: the
flat / native ratio at every size (target <= 1.5) and the growth of the time per row.  SCPO
runs with the dependency-free lexical scorer unless ``--scpo-scorer`` says otherwise; its row leaves out the scorer's calls (the target excludes
the scorer) and the next row shows them.  Target: < 20 ms per estimator for 16 × 8 × 30 and
linear growth (the GraphGPO paper reports 133 ms for its graph stage per iteration).

Each cell is the median of ``--repeats`` calls after a warm-up.  By default the clock is the
process's CPU time (``--timer cpu``), which leaves out time the core spends on other
processes on a shared machine; ``--timer wall`` gives elapsed time.  The final table is in
Markdown, ready to quote.

Rollouts are synthetic by default: a small ALFWorld-like task per group — states (stage,
location), actions "go to loc j" / "use ..." (invalid when nothing happens, −0.1), success
when the last stage is done — so anchor states recur across siblings as in real rollouts.
``--rollouts FILE.jsonl`` times real saved rollouts instead (grouped by task id, tiled to
the sizes).

    python bench/credit.py                 # the tables
    python bench/credit.py --repeats 9     # steadier numbers
    python bench/credit.py --flat only     # only flat step rows vs native, 3,840 to 61,440 rows
    python bench/credit.py --versus hgpo gigpo   # two estimators side by side, their time ratio

``--versus A B`` times A and B on the same batches, the calls alternating (so both see the same
moments of a shared machine), and prints A's time over B's per batch (HGPO's target: <= 2x
GiGPO's on the 16 x 8 x 30 batch).
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
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from rubrics.trajectory import Step, Trajectory, load_jsonl
from wrappers.credit import available_estimators, get_estimator
from wrappers.credit.base import _REGISTRY, validate_groups
from wrappers.credit.flat import flat_advantages
from wrappers.credit.graph import TransitionGraph
from wrappers.credit.scorers import PairScorer, make_scorer

TARGET_MS = 20.0
PAPER_GRAPH_MS = 133.0  # GraphGPO paper: graph stage per training iteration
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


def flat_columns(groups: list[list[Trajectory]]) -> dict[str, object]:
    """The batch as flat step-row columns (what an RL library's batch holds), every field."""
    names = ("group_id", "traj_id", "step_index", "state_key", "next_state_key", "action", "action_key", "reward",
             "penalty", "valid", "observation", "feedback", "rubric", "extra", "slot", "score", "success",
             "truncated", "task_id")
    cols: dict[str, list] = {k: [] for k in names}
    keys: dict[str, list] = {}
    for g, group in enumerate(groups):
        for t in group:
            for k, s in enumerate(t.steps):
                for name, value in (("group_id", g), ("traj_id", (g, t.slot)), ("step_index", k), ("slot", t.slot),
                                    ("score", t.score), ("success", t.success), ("truncated", t.truncated),
                                    ("task_id", t.task_id)):
                    cols[name].append(value)
                for name in ("state_key", "next_state_key", "action", "action_key", "reward", "penalty", "valid",
                             "observation", "feedback", "rubric", "extra"):
                    cols[name].append(getattr(s, name))
                for name, value in s.keys.items():
                    keys.setdefault(name, []).append(value)
    return {**cols, "keys": keys}


def tile(groups: list[list[Trajectory]], n: int) -> list[list[Trajectory]]:
    return [groups[k % len(groups)] for k in range(n)]


def _clock(timer: str) -> Callable[[], float]:
    return time.process_time if timer == "cpu" else time.perf_counter


def median_ms(fn: Callable[[], object], repeats: int, timer: str = "cpu") -> float:
    """Median time of ``repeats`` calls after one warm-up call (imports, lazily built scorers).

    ``timer="cpu"``: this process's CPU time, which leaves out the time other processes
    hold the core (the machine is shared); ``"wall"``: elapsed time.
    """
    clock = _clock(timer)
    fn()
    times = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times) * 1e3


def median_split_ms(fn: Callable[[], object], repeats: int, timer: str, scorer: TimedScorer) -> tuple[float, float]:
    """Medians of (time without the scorer's calls, time of the scorer's calls) per call."""
    clock = _clock(timer)
    fn()
    rest, inner = [], []
    for _ in range(repeats):
        scorer.seconds = 0.0
        t0 = clock()
        fn()
        total = clock() - t0
        rest.append(total - scorer.seconds)
        inner.append(scorer.seconds)
    return statistics.median(rest) * 1e3, statistics.median(inner) * 1e3


class TimedScorer(PairScorer):
    """Wraps a scorer and adds up the time of its calls (to time SCPO without its scorer)."""

    def __init__(self, inner: PairScorer, timer: str) -> None:
        super().__init__()
        self.inner, self.name, self.clock, self.seconds = inner, inner.name, _clock(timer), 0.0

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        t0 = self.clock()
        try:
            return self.inner.score_pairs(pairs)
        finally:
            self.seconds += self.clock() - t0

    def score_matrices(self, requests: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[np.ndarray]:
        t0 = self.clock()
        try:
            return self.inner.score_matrices(requests)
        finally:
            self.seconds += self.clock() - t0


def build(name: str, scorer: PairScorer | None = None):
    """The registered estimator with its defaults (SCPO: with ``scorer``)."""
    accepted = inspect.signature(_REGISTRY[name].__init__).parameters
    return get_estimator(name, **({"scorer": scorer} if "scorer" in accepted and scorer is not None else {}))


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7, help="timed repeats per cell (the median is reported)")
    ap.add_argument("--scpo-scorer", default="lexical", help="scorer spec for SCPO (default: lexical)")
    ap.add_argument("--rollouts", type=Path, help="JSONL of real rollouts to time instead of synthetic ones")
    ap.add_argument("--estimators", nargs="*", help="subset of estimator names")
    ap.add_argument("--timer", choices=("cpu", "wall"), default="cpu",
                    help="cpu: process CPU time (default; robust on a shared machine); wall: elapsed time")
    ap.add_argument("--cpu", type=int, default=0, help="pin to this CPU core (-1: do not pin)")
    ap.add_argument("--versus", nargs=2, metavar=("A", "B"),
                    help="only time estimators A and B side by side (calls alternating) and print A/B")
    ap.add_argument("--flat", choices=("also", "only", "no"), default="also",
                    help="the flat-rows vs native table (up to 61,440 rows): after the main table, only it, or not")
    args = ap.parse_args(argv)
    if args.cpu >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})

    if args.flat == "only":
        flat_table(args.estimators or available_estimators(), args.repeats, args.timer, args.scpo_scorer)
        return
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
    sizes = [("target", base), ("1x", mixed), ("4x", big4), ("16x", big16)]
    steps = {k: sum(len(t.steps) for g in b for t in g) for k, b in sizes}
    if args.versus:
        versus_table(*args.versus, sizes, steps, args.repeats, args.timer, source)
        return
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    print(f"Credit estimators, {args.timer} time per call, median of {args.repeats} (16x: of "
          f"{max(3, args.repeats // 2)}), one core{load}; rollouts: {source}")
    print(f"target batch 16 groups x 8 x 30 steps ({steps['target']} steps); growth batches 16 / 64 / 256 groups "
          f"x 8 x 10-50 steps ({steps['1x']} / {steps['4x']} / {steps['16x']} steps)\n")

    known = available_estimators()  # (also registers the built-in estimators)
    names = args.estimators or known
    rows: list[tuple[str, Callable[[list[list[Trajectory]]], object]]] = [
        ("validate_groups", validate_groups),
        ("graph stage", lambda b: TransitionGraph.from_groups(b).success_distances()),
    ]
    scorer: TimedScorer | None = None
    for name in names:
        if name == "scpo":
            scorer = TimedScorer(make_scorer(args.scpo_scorer), args.timer)
            rows.append(("scpo", build(name, scorer)))
        else:
            rows.append((name, build(name)))

    head = ("| estimator | 16x8x30 ms | us/step | vs 20 ms | 1x ms | 4x ms | 16x ms "
            "| us/step 1x / 4x / 16x | growth |")
    print(head)
    print("|" + "|".join([":---"] + ["---:"] * (head.count("|") - 2)) + "|")
    graph_ms = None
    for label, fn in rows:
        ms: dict[str, float] = {}
        scorer_ms: dict[str, float] = {}
        for k, b in sizes:
            reps = args.repeats if k != "16x" else max(3, args.repeats // 2)
            if label == "scpo" and scorer is not None:
                ms[k], scorer_ms[k] = median_split_ms(lambda b=b, fn=fn: fn(b), reps, args.timer, scorer)
            else:
                ms[k] = median_ms(lambda b=b, fn=fn: fn(b), reps, args.timer)
        name = f"{label} (without scorer)" if scorer_ms else label
        _row(name, ms, steps)
        if scorer_ms:
            _row(f"scpo scorer ({scorer.name})", scorer_ms, steps, target=False)
        if label == "graph stage":
            graph_ms = ms["target"]
    print(f"\nus/step: per step of the batch; growth = (us/step at 16x) / (us/step at 1x), 1.00 is linear;"
          f" vs 20 ms: the target batch's time over the {TARGET_MS:g} ms target (< 1 meets it; the SCPO scorer"
          f" is outside the target).")
    if graph_ms is not None:
        print(f"graph stage (build the batch's transition graphs + distances to success): {graph_ms:.2f} ms, "
              f"{PAPER_GRAPH_MS / graph_ms:.0f}x below the {PAPER_GRAPH_MS:g} ms the GraphGPO paper reports "
              f"for its graph stage per iteration.")
    if args.flat == "also":
        flat_table(names, args.repeats, args.timer, args.scpo_scorer)


VERSUS_TARGET = 2.0  # HGPO / GiGPO on the target batch


def versus_table(a: str, b: str, sizes: Sequence[tuple[str, list[list[Trajectory]]]], steps: dict[str, int],
                 repeats: int, timer: str, source: str) -> None:
    """Estimators ``a`` and ``b`` (defaults) on the same batches, calls alternating: ms and a/b."""
    unknown = [n for n in (a, b) if n not in available_estimators()]
    if unknown:
        raise SystemExit(f"unknown estimator(s) {', '.join(unknown)}; available: {', '.join(available_estimators())}")
    ea, eb = build(a), build(b)
    print(f"{a} vs {b}, {timer} time per call, median of {repeats} (calls alternating); rollouts: {source}\n")
    print(f"| batch | steps | {a} ms | {b} ms | {a} / {b} |")
    print("|:---|---:|---:|---:|---:|")
    ratio = {}
    for k, batch in sizes:
        reps = repeats if k != "16x" else max(3, repeats // 2)
        ta, tb = paired_ms(lambda batch=batch: ea(batch), lambda batch=batch: eb(batch), reps, timer)
        ratio[k] = ta / tb
        print(f"| {k} | {steps[k]:,} | {ta:.2f} | {tb:.2f} | {ta / tb:.2f} |", flush=True)
    verdict = "within" if ratio["target"] <= VERSUS_TARGET else "NOT within"
    print(f"\n{a} / {b} on the target batch: {ratio['target']:.2f} ({verdict} the {VERSUS_TARGET:g}x target)")


FLAT_GROUPS = (16, 64, 128, 256)  # x 8 trajectories x 30 steps: 3,840 ... 61,440 rows
FLAT_TARGET = 1.5  # flat / native


def paired_ms(fa: Callable[[], object], fb: Callable[[], object], repeats: int, timer: str = "cpu"
              ) -> tuple[float, float]:
    """Medians of ``repeats`` calls of ``fa`` and of ``fb``, the calls alternating (a, b, a,
    b, ...) after one warm-up call each, so that both see the same moments of a shared
    machine."""
    clock = _clock(timer)
    fa()
    fb()
    ta, tb = [], []
    for _ in range(repeats):
        for fn, times in ((fa, ta), (fb, tb)):
            t0 = clock()
            fn()
            times.append(clock() - t0)
    return statistics.median(ta) * 1e3, statistics.median(tb) * 1e3


def flat_table(names: Sequence[str], repeats: int, timer: str, scorer_spec: str) -> None:
    """Flat step rows vs the native grouped call, per estimator, up to 61,440 rows.

    The same rollouts both ways: ``est(groups)`` on prebuilt Trajectory groups, and
    ``flat_advantages(est, **columns)`` on their columns (every Step field given), whose
    result is checked equal first; the two calls alternate (:func:`paired_ms`).  Target:
    flat / native <= 1.5 at every size and linear growth (growth: us/row at 61,440 rows
    over that at 3,840, 1.00 is linear; shown for the native call too).
    """
    batches = [synthetic_batch(g, 8, (30, 30), seed=10 + g, fixed=True) for g in FLAT_GROUPS]
    cols = [flat_columns(b) for b in batches]
    rows = [sum(len(t.steps) for g in b for t in g) for b in batches]
    print(f"\nFlat step rows vs native, {timer} time per call (median of {repeats}, the two calls alternating); "
          "cells: native ms / flat ms (flat/native)")
    head = ("| estimator | " + " | ".join(f"{n:,} rows" for n in rows)
            + " | flat/native (max) | flat us/row (first-last) | growth flat / native |")
    print(head)
    print("|" + "|".join([":---"] + ["---:"] * (head.count("|") - 2)) + "|")
    worst = 0.0
    for name in names:
        est = build(name, make_scorer(scorer_spec) if name == "scpo" else None)
        cells, ratios, per_row, native_row = [], [], [], []
        for b, c, n in zip(batches, cols, rows):
            want = np.concatenate([a for r in est(b) for a in r.advantages])
            if not np.array_equal(flat_advantages(est, **c), want):
                raise AssertionError(f"{name}: flat rows and the grouped call disagree")
            reps = repeats if n < 50_000 else max(3, repeats // 2)
            nat, flat = paired_ms(lambda b=b, est=est: est(b), lambda c=c, est=est: flat_advantages(est, **c),
                                  reps, timer)
            cells.append(f"{nat:.1f} / {flat:.1f} ({flat / nat:.2f})")
            ratios.append(flat / nat)
            per_row.append(1e3 * flat / n)
            native_row.append(1e3 * nat / n)
        worst = max(worst, max(ratios))
        print(f"| {name} | " + " | ".join(cells) + f" | {max(ratios):.2f} | {per_row[0]:.2f}-{per_row[-1]:.2f} "
              f"| {per_row[-1] / per_row[0]:.2f} / {native_row[-1] / native_row[0]:.2f} |", flush=True)
    verdict = "within" if worst <= FLAT_TARGET else "NOT within"
    print(f"\nflat/native at most {worst:.2f}: {verdict} the {FLAT_TARGET:g}x target.")


def _row(label: str, ms: dict[str, float], steps: dict[str, int], target: bool = True) -> None:
    per = [1e3 * ms[k] / steps[k] for k in ("1x", "4x", "16x")]
    ratio = f"{ms['target'] / TARGET_MS:.2f}" if target else "-"
    print(f"| {label} | {ms['target']:.2f} | {1e3 * ms['target'] / steps['target']:.2f} | {ratio} "
          f"| {ms['1x']:.2f} | {ms['4x']:.2f} | {ms['16x']:.2f} "
          f"| {' / '.join(f'{x:.2f}' for x in per)} | {per[2] / per[0]:.2f} |", flush=True)


if __name__ == "__main__":
    main()

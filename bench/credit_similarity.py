"""Benchmark: similarity-merged anchor states (``similarity=0.95``) on real rollouts (one CPU core).

Plays 16 groups × 8 siblings × up to 30 steps of each environment with a uniform random policy
over the admissible actions (WebShop's search with the arena's three goal-derived queries; ALFWorld's generated games, ``gym.make("ALFWorld-Rubric-v0",
split="generated")``; WebShop's generated catalogue), then times the credit stage of GiGPO
and GraphGPO with exact anchor states and with ``similarity=0.95`` side by side, the two calls
alternating (median of ``--repeats`` after a warm-up, process CPU time by default), and prints
what the merge does to the groups: GiGPO's mean anchor-group size (rows per anchor group) and
singleton share, GraphGPO's state nodes per group.  Target: the similarity credit stage under
50 ms per call on these batches.

Before timing, the fast clustering (distinct strings only, upper bounds before ``ratio()``) is
checked equal to the plain rule on every row — each row against every cluster
representative with ``difflib.SequenceMatcher(None, row, rep).ratio() >= 0.95``, as verl-agent
does.

    python bench/credit_similarity.py                       # both environments
    python bench/credit_similarity.py --env webshop --repeats 15
    python bench/credit_similarity.py --cache /tmp/sim      # keep the rollouts (JSONL) for reruns
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import random
import time
from collections.abc import Callable, Sequence
from difflib import SequenceMatcher
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from agent_envs.rollout import GroupRunner, Turn
from bench.credit import paired_ms
from rubrics.trajectory import Trajectory, load_jsonl, save_jsonl
from wrappers.credit import get_estimator
from wrappers.credit.graph import RowTable, TransitionGraph, graph_stats_batch

TARGET_MS = 50.0
ENVS = {
    "alfworld": ("ALFWorld-Rubric-v0", {"split": "generated"}),
    "webshop": ("WebShop-Rubric-v0", {"catalogue": "generated", "tagger": "lexicon", "max_steps": 30}),
}


def uniform_policy(seed: int) -> Callable[[Sequence[Turn]], list[str]]:
    """A uniform choice among the admissible actions (WebShop's templated search expanded into
    the arena's goal-derived queries), reproducible per (group, slot, step)."""
    from trainers.arena.agent import expand_actions

    def policy(turns: Sequence[Turn]) -> list[str]:
        out = []
        for t in turns:
            goal = str((t.info.get("task") or {}).get("goal", ""))
            actions = expand_actions(list(t.info.get("admissible_actions") or ["look"]), goal)
            out.append(random.Random(hash((seed, t.group, t.slot, t.t))).choice(actions))
        return out

    return policy


def play(env: str, groups: int, size: int, steps: int, seed: int) -> list[list[Trajectory]]:
    """``groups`` × ``size`` rollouts of ``env`` of at most ``steps`` decisions."""
    env_id, kwargs = ENVS[env]
    with GroupRunner(env_id, kwargs, max_steps=steps) as runner:
        return runner.run([None] * groups, uniform_policy(seed), group_size=size,
                          seeds=[seed * 1000 + g for g in range(groups)])


def load_or_play(env: str, args: argparse.Namespace) -> list[list[Trajectory]]:
    """The batch, from ``--cache`` when it holds it (else played, and saved there)."""
    path = args.cache / f"{env}-{args.groups}x{args.size}x{args.steps}-s{args.seed}.jsonl" if args.cache else None
    if path is not None and path.is_file():
        trajs = load_jsonl(path)
        return [trajs[k:k + args.size] for k in range(0, len(trajs), args.size)]
    t0 = time.perf_counter()
    batch = play(env, args.groups, args.size, args.steps, args.seed)
    print(f"{env}: played {sum(len(t) for g in batch for t in g)} steps in {time.perf_counter() - t0:.1f} s",
          flush=True)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_jsonl(path, [t for g in batch for t in g])
    return batch


def plain_clusters(texts: Sequence[str], tau: float) -> list[int]:
    """The rule without shortcuts: every row against every representative (verl-agent's loop)."""
    reps: list[str] = []
    out = []
    for text in texts:
        k = next((j for j, rep in enumerate(reps) if SequenceMatcher(None, text, rep).ratio() >= tau), None)
        if k is None:
            reps.append(text)
            k = len(reps) - 1
        out.append(k)
    return out


def check_exact(batch: list[list[Trajectory]], tau: float) -> None:
    """The fast anchor ids equal :func:`plain_clusters` on every group's rows."""
    fast, _ = RowTable(batch).anchor_ids(tau)
    start = 0
    for g, group in enumerate(batch):
        texts = [s.state_key for t in group for s in t.steps]
        want = plain_clusters(texts, tau)
        got = fast[start:start + len(texts)]
        if (got - got.min() if len(got) else got).tolist() != want:
            raise AssertionError(f"group {g}: fast clusters differ from the plain rule")
        start += len(texts)


def group_sizes(batch: list[list[Trajectory]], tau: float | None) -> dict[str, float]:
    """GiGPO's anchor groups (pooled over the batch) and GraphGPO's state nodes per group."""
    stats = get_estimator("gigpo", similarity=tau)(batch)
    rows = sum(len(t.steps) for g in batch for t in g)
    anchors = sum(r.stats["anchor_groups"] for r in stats)
    single = sum(r.stats["singleton_share"] * sum(len(t.steps) for t in g) for r, g in zip(stats, batch)) / rows
    nodes = [s["nodes"] for s in graph_stats_batch(TransitionGraph.from_groups(batch, tau))]
    return {"rows": rows, "anchor_groups": anchors, "mean_anchor_size": rows / anchors, "singleton_share": single,
            "nodes_per_group": float(np.mean(nodes))}


def report(env: str, batch: list[list[Trajectory]], tau: float, repeats: int, timer: str) -> None:
    """The timing and group-size rows of one environment."""
    steps = sum(len(t.steps) for g in batch for t in g)
    distinct = np.mean([len({s.state_key for t in g for s in t.steps}) for g in batch])
    print(f"\n{env}: {len(batch)} groups x {len(batch[0])} siblings, {steps} steps "
          f"({steps / (len(batch) * len(batch[0])):.1f} per trajectory), {distinct:.1f} distinct states per group, "
          f"{sum(t.success for g in batch for t in g)} successes")
    print("| estimator | exact ms | similarity ms | ratio | under 50 ms |")
    print("|:---|---:|---:|---:|:---|")
    for name in ("gigpo", "graphgpo"):
        exact, merged = get_estimator(name), get_estimator(name, similarity=tau)
        a, b = paired_ms(lambda e=exact: e(batch), lambda e=merged: e(batch), repeats, timer)
        print(f"| {name} | {a:.2f} | {b:.2f} | {b / a:.1f}x | {'yes' if b < TARGET_MS else 'NO'} |", flush=True)
    before, after = group_sizes(batch, None), group_sizes(batch, tau)
    print(f"\n| {env} | anchor groups | mean anchor-group size | singleton share | GraphGPO nodes per group |")
    print("|:---|---:|---:|---:|---:|")
    for label, s in (("exact", before), (f"similarity {tau:g}", after)):
        print(f"| {label} | {s['anchor_groups']} | {s['mean_anchor_size']:.2f} | {s['singleton_share']:.3f} "
              f"| {s['nodes_per_group']:.1f} |")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", choices=(*ENVS, "both"), default="both")
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--size", type=int, default=8, help="siblings per group")
    ap.add_argument("--steps", type=int, default=30, help="decision cap per episode")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--similarity", type=float, default=0.95)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--timer", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--cache", type=Path, help="folder to keep the played rollouts in (JSONL) and reuse them from")
    ap.add_argument("--cpu", type=int, default=0, help="pin to this CPU core (-1: do not pin)")
    args = ap.parse_args(argv)
    if args.cpu >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    print(f"Credit stage with exact vs similarity-merged states (similarity={args.similarity:g}), {args.timer} time, "
          f"median of {args.repeats}, one core; uniform random policy over admissible actions")
    for env in ENVS if args.env == "both" else (args.env,):
        batch = load_or_play(env, args)
        check_exact(batch, args.similarity)
        report(env, batch, args.similarity, args.repeats, args.timer)


if __name__ == "__main__":
    main()

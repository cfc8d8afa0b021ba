"""Benchmark: ALFWorld-Rubric-v0 versus the raw engine, measured side by side in one run.

Prints median times and ratios for

1. reset of an already-loaded game: the raw upstream stack
   (``AlfredInfos(AlfredDemangler(PddlEnv))``, which re-grounds the problem with
   fast-downward on every reset) vs ``ALFWorld-Rubric-v0`` (kept grounding, exact restore);
2. step (the games' stored walkthroughs): raw engine step vs our full env step (engine step +
   rubric channels + keys + signature);
3. a sibling group: bringing G persistent environments to the start of a new game — G
   independent upstream load+reset vs our G environments sharing one grounding — and again
   for the next update on the same game;
4. rubric extraction alone (facts -> channels -> signature -> keys) per step, as a share of
   the step.

Usage::

    python bench/alfworld_env.py                      # 6 valid_seen games (1 per type), G = 8
    python bench/alfworld_env.py --split generated --games 12 --group-size 4
    python bench/alfworld_env.py --no-fast-grammar    # TextWorld's grammar unpatched (slower steps)
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path


def _median_ms(xs: list[float]) -> float:
    return 1000.0 * statistics.median(xs)


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="valid_seen", help="valid_seen, valid_unseen, train or generated")
    parser.add_argument("--games", type=int, default=6, help="games to measure (spread over the task types)")
    parser.add_argument("--group-size", type=int, default=8, help="G, siblings per group")
    parser.add_argument("--resets", type=int, default=3, help="timed resets per game")
    parser.add_argument("--no-fast-grammar", action="store_true",
                        help="leave TextWorld's grammar unpatched (agent_envs.alfworld.fast_grammar); "
                             "the patch is process-wide, so both columns are measured the same way")
    args = parser.parse_args()

    import gymnasium as gym

    import agent_envs  # noqa: F401
    from agent_envs.alfworld import engine
    from agent_envs.alfworld.rubric import coarse_key, exact_key, snapshot

    env = gym.make("ALFWorld-Rubric-v0", split=args.split, fast_grammar=not args.no_fast_grammar).unwrapped
    ids = env.task_ids()
    by_type: dict[str, list[str]] = {}
    for t in ids:
        by_type.setdefault(t.split("-", 1)[0], []).append(t)
    chosen: list[str] = []
    while len(chosen) < min(args.games, len(ids)):
        for lst in by_type.values():
            if lst and len(chosen) < args.games:
                chosen.append(lst.pop(0))
    paths = {t: env._catalogue(args.split)[1][t] for t in chosen}
    walks = {t: json.loads(Path(p).read_text(encoding="utf-8"))["walkthrough"] for t, p in paths.items()}
    engine.translation_cache_clear()

    raw = engine.make_raw_engine()
    raw_load, raw_reset, raw_step = [], [], []
    our_first, our_reset, our_step, rubric_cost = [], [], [], []
    for t in chosen:
        raw_load.append(_timed(lambda: (raw.load(paths[t]), raw.reset())))
        for _ in range(args.resets):
            raw_reset.append(_timed(raw.reset))
        for a in walks[t]:
            raw_step.append(_timed(lambda: raw.step(a)))

        our_first.append(_timed(lambda: env.reset(options={"task": t})))
        for _ in range(args.resets):
            our_reset.append(_timed(lambda: env.reset(options={"task": t})))
        for a in walks[t]:
            our_step.append(_timed(lambda: env.step(a)))
        # rubric extraction alone, on the final state of the episode
        game, tracker, sigs = env._game, env._tracker, env._signatures
        facts = env._state["_facts"]

        def extract() -> None:
            snap = snapshot(facts, game.facts, game.spec)
            tracker.update(snap, won=False, valid=True)
            sigs.update(tracker.status)
            sigs.signature()
            exact_key(game.spec, tracker, "x")
            coarse_key(game.spec, tracker, "x", 10, 50)

        rubric_cost += [_timed(extract) for _ in range(20)]

    # Sibling groups: G persistent environments (built before timing) brought to a new game.
    G = args.group_size
    raws = [engine.make_raw_engine() for _ in range(G)]
    ours = [gym.make("ALFWorld-Rubric-v0", split=args.split).unwrapped for _ in range(G)]
    engine.translation_cache_clear()
    group_raw, group_ours, group_raw_again, group_ours_again = [], [], [], []
    for t in chosen:

        def raw_group() -> None:
            for e in raws:
                e.load(paths[t])
                e.reset()

        def our_group() -> None:
            for e in ours:
                e.reset(options={"task": t})

        group_raw.append(_timed(raw_group))
        group_ours.append(_timed(our_group))
        # next update, same game: upstream resets (re-grounds) each env; ours restores
        group_raw_again.append(_timed(lambda: [e.reset() for e in raws]))
        group_ours_again.append(_timed(our_group))

    rows = [
        ("reset (game loaded)", _median_ms(raw_reset), _median_ms(our_reset)),
        ("first reset of a game (load + reset)", _median_ms(raw_load), _median_ms(our_first)),
        ("step (walkthrough)", _median_ms(raw_step), _median_ms(our_step)),
        (f"sibling group, new game (G={G})", _median_ms(group_raw), _median_ms(group_ours)),
        (f"sibling group, same game again (G={G})", _median_ms(group_raw_again), _median_ms(group_ours_again)),
    ]
    print(f"ALFWorld-Rubric-v0 vs raw engine — {date.today()} — {platform.node()} "
          f"({platform.processor() or platform.machine()}, {platform.python_version()})")
    print(f"split {args.split}: {len(chosen)} games, {len(raw_step)} steps, {args.resets} resets/game, G={G}, "
          f"TextWorld grammar memo {'off' if args.no_fast_grammar else 'on'} (both columns)")
    print(f"{'median ms':42s} {'raw engine':>12s} {'ours':>12s} {'raw/ours':>9s}")
    for name, r, o in rows:
        print(f"{name:42s} {r:12.1f} {o:12.1f} {r / o:8.1f}x")
    rub = _median_ms(rubric_cost)
    print(f"{'rubric extraction per step (ms)':42s} {'':12s} {rub:12.3f} "
          f"{100 * rub / _median_ms(our_step):7.2f}% of our step")
    print(f"{'our step / raw step':42s} {'':12s} {_median_ms(our_step) / _median_ms(raw_step):11.2f}x")
    for e in raws:
        e.close()
    for e in ours:
        e.close()
    raw.close()
    env.close()


if __name__ == "__main__":
    main()

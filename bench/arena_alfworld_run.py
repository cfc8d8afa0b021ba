"""Benchmark: the CPU cost of one arena run of the default ALFWorld setting, with and without
each of the engine's speed aids, measured side by side in one invocation.

Each configuration runs in a fresh process (the aids are process-wide): GRPO seed 0 of
``ArenaConfig.for_env("alfworld-generated")`` (12 updates x 4 tasks x 6 siblings, 36
training games, 24 validation games every 4 updates, horizon 30, warm start on 36 other
games), then seed 1 in the same process (the steady state of a comparison's worker, whose
caches are warm).  Printed per configuration: CPU seconds of both runs, their L5 (identical
across configurations: the aids change time only), the ratio to the configuration with
every aid and the process's peak resident memory (MB, after both runs); with ``--rounds N`` the medians over rounds of the seconds and of the ratios, each
ratio taken within its round.  ``--concurrent`` runs each configuration of this checkout at the
same time as the baseline's ``all``, one process per core, and takes each ratio within that
pair (a shared VM's speed drifts between minutes; two processes at once see the same drift).

Configurations:

* ``all``: every aid (the default);
* ``no-transition-memo``: the engine's transition memo and memoised derivations off
  (``agent_envs.alfworld.engine.transition_memo().enabled = False``);
* ``no-disk-translations``: translations not kept on disk (``RUBRICGYM_TRANSLATION_CACHE=0``);
* ``sequential``: the arena's former sampling (``sampling="sequential"``), every aid on;
* ``text``: the text-only policy setting (``policy="text"``: features from what an LLM agent's
  prompt shows, :mod:`trainers.arena.text_features`), every aid on (its L5 differs: another policy).

``--baseline DIR`` runs the same configurations from another checkout too (e.g. a ``git worktree``
of an earlier commit), each in its own process as well, so that the policies' costs before and
after a change are measured side by side in one invocation, under the same load; every ratio is
to this checkout's ``all``.  A configuration the other checkout cannot run (``text`` before the
text policy existed) is reported as not measured there.

Usage::

    python bench/arena_alfworld_run.py                 # all five (about 6 min on 2 idle cores)
    python bench/arena_alfworld_run.py all text        # the text-only policy's cost beside the rubric policy's
    python bench/arena_alfworld_run.py all text --baseline ../wt-old   # ... and both at another commit
    python bench/arena_alfworld_run.py all text --baseline ../wt-old --rounds 3   # medians of 3 interleaved rounds
    python bench/arena_alfworld_run.py all text --baseline ../wt-old --rounds 3 --concurrent   # each beside the old `all`
    python bench/arena_alfworld_run.py all no-transition-memo
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import provenance  # bench/provenance.py (this folder is on sys.path)

SCRIPT = r"""
import json, resource, sys, time
try:
    from trainers.arena.config import ArenaConfig
    from trainers.arena.envs import prepare_generated_games
    from trainers.arena.run import run_one
except ImportError:  # a checkout from before the arena's modules (--baseline)
    from trainers.arena.runner import ArenaConfig, prepare_generated_games, run_one
from agent_envs.alfworld import engine
name, out = sys.argv[1], sys.argv[2]
kw = {"sequential": {"sampling": "sequential"}, "text": {"policy": "text"}}.get(name, {})
cfg = ArenaConfig.for_env("alfworld-generated", **kw)
prepare_generated_games(cfg)
if name == "no-transition-memo":
    engine.transition_memo().enabled = False
res = []
for seed in (0, 1):
    t = time.process_time()
    end = run_one(cfg, "grpo", seed, out)
    res.append({"cpu": time.process_time() - t, "L5": end["readouts"]["L5"]})
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
res.append(dict(engine.transition_memo().stats(), peak_rss_mb=peak))
print(json.dumps(res))
"""

CONFIGS = ("all", "no-transition-memo", "no-disk-translations", "sequential", "text")


def _measure(name: str, tree: Path, out: str) -> list:
    """One configuration's two runs, in a fresh process on the checkout ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    if name == "no-disk-translations":
        env["RUBRICGYM_TRANSLATION_CACHE"] = "0"
    res = subprocess.run([sys.executable, "-c", SCRIPT, name, out], cwd=tree, capture_output=True, text=True,
                         env=env, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", nargs="*", help=f"configurations (default: all of {', '.join(CONFIGS)})")
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout to measure beside this one")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure every configuration this many times, interleaved, and print medians "
                         "(a shared VM's speed drifts by tens of percent within minutes)")
    ap.add_argument("--concurrent", action="store_true",
                    help="with --baseline: run each configuration of this checkout at the same time as the "
                         "baseline's `all` (one process per core), so that both see the same VM speed")
    args = ap.parse_args()
    names = args.configs or list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown configuration(s) {unknown}; choose from {', '.join(CONFIGS)}")
    if args.baseline is not None and not (args.baseline / "trainers" / "arena").is_dir():
        raise SystemExit(f"--baseline {args.baseline}: not a rubricgym checkout")
    if args.rounds < 1:
        raise SystemExit("--rounds must be >= 1")
    here = Path(__file__).resolve().parents[1]
    if args.concurrent:
        if args.baseline is None:
            raise SystemExit("--concurrent needs --baseline")
        _concurrent(names, here, args.baseline.resolve(), args.rounds)
        return
    old = args.baseline
    trees = [("", here)] + ([(f" @{provenance.commit(old)}", old.resolve())] if old else [])
    runs = _interleaved(names, trees, args.rounds)
    rows = {name: _median_row(measured) for name, measured in runs.items()}
    base = rows.get("all")
    print(f"{'configuration':<22} {'fresh CPU-s':>11} {'warm CPU-s':>10} {'L5 s0':>6} {'L5 s1':>6} "
          f"{'x fresh':>8} {'x warm':>7} {'memo hit rate':>13} {'peak MB':>8}")
    for name, (fresh, warm, memo) in rows.items():
        ratio = (f"{_ratio(runs[name], runs['all'], 0):8.2f} {_ratio(runs[name], runs['all'], 1):7.2f}" if base
                 else f"{'':>8} {'':>7}")
        print(f"{name:<22} {fresh['cpu']:11.1f} {warm['cpu']:10.1f} {100 * fresh['L5']:6.1f} "
              f"{100 * warm['L5']:6.1f} {ratio} {memo['transition_hit_rate']:13.2f} {memo.get('peak_rss_mb', 0):8.0f}")
    print(f"commit {provenance.commit(here)}{provenance.dirty(here)}; python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs; "
          f"{args.rounds} round(s), medians; load while measuring: {os.getloadavg()[0]:.1f}")


def _interleaved(names: list[str], trees: list[tuple[str, Path]], rounds: int) -> dict[str, list[list]]:
    """Every configuration on every checkout, ``rounds`` times in turn: the runs by
    ``name + tag``.  A configuration another checkout cannot run is reported and skipped."""
    runs: dict[str, list[list]] = {}
    skip: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for name in names:
                for tag, tree in trees:
                    if name + tag in skip:
                        continue
                    out = os.path.join(tmp, f"{name}{tag.replace(' @', '-')}-{r}")
                    try:
                        measured = _measure(name, tree, out)
                    except subprocess.CalledProcessError as exc:
                        if not tag:
                            raise
                        skip.add(name + tag)
                        why = (exc.stderr or "").strip().splitlines()[-1:] or ["failed"]
                        print(f"{name}{tag}: not measured, that checkout cannot run it ({why[0][:120]})")
                        continue
                    runs.setdefault(name + tag, []).append(measured)
                    print(f"round {r + 1}: {name}{tag} {measured[0]['cpu']:.1f} / {measured[1]['cpu']:.1f} CPU-s",
                          flush=True)
    return runs


def _concurrent(names: list[str], here: Path, baseline: Path, rounds: int) -> None:
    """Each configuration of ``here`` run at the same time as ``baseline``'s ``all``, ``rounds``
    times; printed: the medians of both, and of their ratio within each pair."""
    from concurrent.futures import ThreadPoolExecutor

    pairs: dict[str, list[tuple[list, list]]] = {}
    base = provenance.commit(baseline)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
        for r in range(rounds):
            for name in names:
                ours = pool.submit(_measure, name, here, os.path.join(tmp, f"{name}-{r}"))
                theirs = pool.submit(_measure, "all", baseline, os.path.join(tmp, f"base-{name}-{r}"))
                pair = (ours.result(), theirs.result())
                pairs.setdefault(name, []).append(pair)
                print(f"round {r + 1}: {name} {pair[0][0]['cpu']:.1f} / {pair[0][1]['cpu']:.1f} CPU-s beside "
                      f"all @{base} {pair[1][0]['cpu']:.1f} / {pair[1][1]['cpu']:.1f}", flush=True)
    print(f"{'configuration':<22} {'fresh CPU-s':>11} {'warm CPU-s':>10} {'base fresh':>10} {'base warm':>9} "
          f"{'x fresh':>8} {'x warm':>7} {'memo hit rate':>13} {'peak MB':>8} {'base MB':>8}")
    for name, runs in pairs.items():
        med = [statistics.median(p[k][w]["cpu"] for p in runs) for k in (0, 1) for w in (0, 1)]
        ratio = [statistics.median(p[0][w]["cpu"] / p[1][w]["cpu"] for p in runs) for w in (0, 1)]
        peak = [statistics.median(p[k][2]["peak_rss_mb"] for p in runs) for k in (0, 1)]
        print(f"{name:<22} {med[0]:11.1f} {med[1]:10.1f} {med[2]:10.1f} {med[3]:9.1f} {ratio[0]:8.2f} {ratio[1]:7.2f} "
              f"{runs[0][0][2]['transition_hit_rate']:13.2f} {peak[0]:8.0f} {peak[1]:8.0f}")
    print(f"commit {provenance.commit(here)}{provenance.dirty(here)} beside all @{base}, run at the same time; "
          f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {rounds} round(s), medians")


def _median_row(measured: list[list]) -> list:
    """One configuration's rounds as one row: the median CPU seconds of its fresh and warm runs
    (their L5 and the memo's counters are the same in every round; those of the first)."""
    fresh, warm, memo = measured[0]
    return [dict(fresh, cpu=statistics.median(m[0]["cpu"] for m in measured)),
            dict(warm, cpu=statistics.median(m[1]["cpu"] for m in measured)), memo]


def _ratio(runs: list[list], base: list[list], which: int) -> float:
    """The median over rounds of a configuration's CPU seconds over ``all``'s in the same round
    (0: the fresh run, 1: the warm one): the VM's drift between rounds cancels."""
    return statistics.median(r[which]["cpu"] / b[which]["cpu"] for r, b in zip(runs, base))


if __name__ == "__main__":
    main()

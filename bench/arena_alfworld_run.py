"""Benchmark: the CPU cost of one arena run of the default ALFWorld setting, with and without
each of the engine's speed aids, measured side by side in one invocation.

Each configuration runs in a fresh process (the aids are process-wide): GRPO seed 0 of
``ArenaConfig.for_env("alfworld-generated")`` (12 updates x 4 tasks x 6 siblings, 36
training games, 24 validation games every 4 updates, horizon 30, warm start on 36 other
games), then seed 1 in the same process (the steady state of a comparison's worker, whose
caches are warm).  Printed per configuration: CPU seconds of both runs, their L5 (identical
across configurations: the aids change time only) and the ratio to the configuration with
every aid.

Configurations:

* ``all``: every aid (the default);
* ``no-transition-memo``: the engine's transition memo and memoised derivations off
  (``agent_envs.alfworld.engine.transition_memo().enabled = False``);
* ``no-disk-translations``: translations not kept on disk (``RUBRICGYM_TRANSLATION_CACHE=0``);
* ``sequential``: the arena's former sampling (``sampling="sequential"``), every aid on;
* ``text``: the text-only policy setting (``policy="text"``: features from what an LLM agent's
  prompt shows, :mod:`trainers.arena.text_features`), every aid on (its L5 differs: another policy).

Usage::

    python bench/arena_alfworld_run.py                 # all five (about 6 min on 2 idle cores)
    python bench/arena_alfworld_run.py all text        # the text-only policy's cost beside the default's
    python bench/arena_alfworld_run.py all no-transition-memo
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

SCRIPT = r"""
import json, sys, time
from trainers.arena.config import ArenaConfig
from trainers.arena.envs import prepare_generated_games
from trainers.arena.run import run_one
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
res.append(engine.transition_memo().stats())
print(json.dumps(res))
"""

CONFIGS = ("all", "no-transition-memo", "no-disk-translations", "sequential", "text")


def main() -> None:
    names = sys.argv[1:] or list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown configuration(s) {unknown}; choose from {', '.join(CONFIGS)}")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            env = dict(os.environ)
            if name == "no-disk-translations":
                env["RUBRICGYM_TRANSLATION_CACHE"] = "0"
            res = subprocess.run([sys.executable, "-c", SCRIPT, name, os.path.join(tmp, name)],
                                 capture_output=True, text=True, env=env, check=True)
            rows[name] = json.loads(res.stdout.strip().splitlines()[-1])
    base = rows.get("all")
    print(f"{'configuration':<22} {'fresh CPU-s':>11} {'warm CPU-s':>10} {'L5 s0':>6} {'L5 s1':>6} "
          f"{'x fresh':>8} {'x warm':>7} {'memo hit rate':>13}")
    for name, (fresh, warm, memo) in rows.items():
        ratio = (f"{fresh['cpu'] / base[0]['cpu']:8.2f} {warm['cpu'] / base[1]['cpu']:7.2f}" if base
                 else f"{'':>8} {'':>7}")
        print(f"{name:<22} {fresh['cpu']:11.1f} {warm['cpu']:10.1f} {100 * fresh['L5']:6.1f} "
              f"{100 * warm['L5']:6.1f} {ratio} {memo['transition_hit_rate']:13.2f}")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; load while measuring: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

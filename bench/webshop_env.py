"""Embedded WebShop-Rubric-v0 speed and memory.

Prints, measured in this run:

* reset and step time (median / p90) of the embedded engine, over scripted episodes
  (oracle actions plus a few random admissible clicks), on the generated catalogue;
* resident memory of 1 vs 64 environment instances in a fresh process, sharing the one
  per-process catalogue, next to 8 instances that each build their own catalogue (what
  upstream does per environment), with the per-instance cost ratio.

Usage: ``python bench/webshop_env.py [--episodes 200] [--tagger lexicon|auto]``
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time


def _rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    import os

    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _memory_child(n: int, shared: bool, tagger: str) -> None:
    import agent_envs  # noqa: F401
    from agent_envs.webshop.env import WebShopRubricEnv
    from agent_envs.webshop.scorer import get_tagger

    get_tagger(tagger)
    WebShopRubricEnv(catalogue="generated", num_products=1000, tagger=tagger, price_seed=999).reset(
        options={"task": 0})  # warm imports, the tagger and the search index code paths
    base = _rss_mib()
    envs = []
    for i in range(n):
        env = WebShopRubricEnv(catalogue="generated", num_products=1000, tagger=tagger,
                               price_seed=0 if shared else 1000 + i)
        env.reset(options={"task": i % 50})
        env.step("search[shoes]")  # builds the search index
        envs.append(env)
    print(json.dumps({"n": n, "shared": shared, "mib": _rss_mib() - base}))


def _memory(n: int, shared: bool, tagger: str) -> float:
    out = subprocess.run([sys.executable, __file__, "--child", str(n), "--shared", str(int(shared)),
                          "--tagger", tagger], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["mib"]


def _speed(episodes: int, tagger: str) -> dict[str, list[float]]:
    import agent_envs  # noqa: F401
    from agent_envs.webshop.env import WebShopRubricEnv
    from agent_envs.webshop.oracle import oracle_action

    t0 = time.perf_counter()
    env = WebShopRubricEnv(catalogue="generated", num_products=1000, tagger=tagger)
    build = time.perf_counter() - t0
    rng = random.Random(0)
    resets, steps = [], []
    n_goals = len(env.goals())
    for ep in range(episodes):
        t = time.perf_counter()
        _obs, info = env.reset(options={"task": ep % n_goals})
        resets.append(time.perf_counter() - t)
        done = False
        k = 0
        while not done:
            if 1 <= k <= 3 and env.page.page == "results" and rng.random() < 0.5:
                action = rng.choice(info["admissible_actions"])  # wander a little
            else:
                action = oracle_action(env)
            t = time.perf_counter()
            _obs, _r, term, trunc, info = env.step(action)
            steps.append(time.perf_counter() - t)
            done = term or trunc
            k += 1
    return {"build": [build], "reset": resets, "step": steps}


def _fmt(xs: list[float]) -> str:
    xs = sorted(xs)
    p90 = xs[int(0.9 * (len(xs) - 1))]
    return f"median {statistics.median(xs) * 1e3:7.3f} ms   p90 {p90 * 1e3:7.3f} ms   (n={len(xs)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--tagger", default="lexicon")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--shared", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        _memory_child(args.child, bool(args.shared), args.tagger)
        return
    sp = _speed(args.episodes, args.tagger)
    print(f"WebShop-Rubric-v0 embedded, generated catalogue (1000 products), tagger={args.tagger}")
    print(f"  catalogue build (first env)  {sp['build'][0] * 1e3:8.1f} ms")
    print(f"  reset                        {_fmt(sp['reset'])}")
    print(f"  step                         {_fmt(sp['step'])}")
    m1 = _memory(1, True, args.tagger)
    m64 = _memory(64, True, args.tagger)
    m8u = _memory(8, False, args.tagger)
    print("memory (RSS growth after warm-up, fresh process each)")
    print(f"  1 env                        {m1:8.1f} MiB")
    extra = max(m64 - m1, 0.0) / 63
    print(f"  64 envs, shared catalogue    {m64:8.1f} MiB   (+{extra:6.3f} MiB per extra env)")
    print(f"  8 envs, own catalogue each   {m8u:8.1f} MiB   ({m8u / 8:6.2f} MiB per env)")
    print(f"  64 envs: shared vs own catalogues (own extrapolated from 8): "
          f"{m64:.1f} vs {m8u * 8:.1f} MiB ({m8u * 8 / max(m64, 1e-6):.1f}x)")


if __name__ == "__main__":
    main()

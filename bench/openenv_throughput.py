"""Benchmark: ALFWorld episodes over OpenEnv's protocol against the in-process and worker pools.

``GroupRunner.arun`` plays ALFWorld-generated episodes C at a time on C environments (C = 1, 8,
64; at least ``--total`` steps per measurement, so C = 1 plays 30 episodes one after another; a
seeded random admissible action, answered at once; horizon ``--steps``) on the same games through:

* ``in-process`` — ``EnvPool`` with ``workers=0`` (the environments on one engine thread);
* ``process xW`` — ``EnvPool`` with W worker processes;
* ``remote xS`` — ``EnvPool(backend="remote")`` on S ``rubricgym serve`` servers on this machine
  (OpenEnv's server and client over loopback WebSockets).

Printed per backend and C: steps/s (decisions over the wall time of the timed ``arun``, after a
warm-up ``arun`` of the same shape that made every environment and loaded every game; the timed
round's policy seed differs from the warm-up's), the wall time per step (its inverse), and for C = 1 the
latency a step adds over the in-process pool (mean ms per step minus in-process's: JSON, the
socket, the server's event loop and its engine thread).  The engine's transition memo is off in
every process (this one, the workers, the servers: they are started through ``rubricgym serve``'s
own entry point after switching it off) unless ``--memo``: the warm-up round and the other
backends' rounds would otherwise answer the measured steps from memory.  Servers and workers
share this machine's cores with the caller, so remote x1 at C = 64 measures one server core
against the caller's loop, not a cluster.

Needs OpenEnv (``pip install 'rubricgym[openenv]'``); run it from the repository root::

    python bench/openenv_throughput.py                       # C = 1 8 64, 10 steps, (~5 min on 2 cores)
    python bench/openenv_throughput.py --concurrency 1 8 --workers 2 --servers 1 2
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import random
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import provenance  # bench/provenance.py (this folder is on sys.path)

from agent_envs.pool import EnvPool
from agent_envs.rollout import GroupRunner

ENV = "ALFWorld-Rubric-v0"
KWARGS = {"split": "generated"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: ``rubricgym serve`` (trainers.cli's entry point) with the transition memo set first (argv[1]: "on"/"off").
SERVE = ("import sys; from agent_envs.alfworld import engine; engine.transition_memo().enabled = sys.argv[1] == 'on'; "
         "from trainers.cli import main; sys.argv = ['rubricgym', *sys.argv[2:]]; main()")


def make_env(memo: bool):
    """The environment, with the transition memo of the process that makes it set (picklable)."""
    import gymnasium as gym

    from agent_envs.alfworld import engine

    engine.transition_memo().enabled = memo
    return gym.make(ENV, **KWARGS)


@contextmanager
def server(memo: bool):
    """``rubricgym serve ENV`` on a free loopback port; its URL."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-c", SERVE, "on" if memo else "off", "serve", ENV, "--port", str(port),
                             "--env-kwargs", json.dumps(KWARGS), "--max-sessions", "1024"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server on {url} did not start") from None
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def policy_of(seed: int):
    async def policy(turn):
        actions = list(turn.info["admissible_actions"])
        return random.Random(hash((seed, turn.group, turn.slot, turn.t))).choice(actions)

    return policy


def measure(pool: EnvPool, concurrency: int, steps: int, total: int) -> tuple[float, float]:
    """(steps/s, ms per step) of a timed ``arun`` of at least ``total`` steps, ``concurrency``
    episodes at a time on ``concurrency`` environments, after a warm-up of the same shape."""
    tasks = [i % 60 for i in range(max(concurrency, -(-total // steps)))]
    shape = {"group_size": 1, "seeds": 0, "concurrency": concurrency, "groups_in_flight": concurrency}
    with GroupRunner(pool, max_steps=steps) as runner:
        asyncio.run(runner.arun(tasks, policy_of(1), **shape))  # warm-up: envs made, games loaded
        t0 = time.perf_counter()
        asyncio.run(runner.arun(tasks, policy_of(2), **shape))
        wall = time.perf_counter() - t0
        done = runner.stats["decisions"]
    return done / wall, 1000.0 * wall / done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--steps", type=int, default=10, help="horizon of each episode")
    ap.add_argument("--total", type=int, default=300, help="steps at least per measurement (more episodes, "
                    "played C at a time, at small C)")
    ap.add_argument("--workers", type=int, nargs="+", default=[2], help="worker-process counts to compare")
    ap.add_argument("--servers", type=int, nargs="+", default=[1, 2], help="server counts to compare")
    ap.add_argument("--memo", action="store_true", help="leave the engine's transition memo on")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    print(f"# {ENV} {KWARGS}, horizon {args.steps}, random admissible actions, transition memo "
          f"{'on' if args.memo else 'off'}; {platform.node()} {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}, commit {provenance.commit(REPO)}{provenance.dirty(REPO)}, {date.today()}")
    factory = functools.partial(make_env, args.memo)
    rows: dict[str, dict[int, tuple[float, float]]] = {}
    with ExitStack() as stack:
        urls = [stack.enter_context(server(args.memo)) for _ in range(max(args.servers))]
        backends = [("in-process", lambda: EnvPool(factory))]
        backends += [(f"process x{w}", lambda w=w: EnvPool(factory, workers=w)) for w in args.workers]
        backends += [(f"remote x{s}", lambda s=s: EnvPool(ENV, backend="remote", urls=urls[:s])) for s in args.servers]
        for name, make in backends:
            rows[name] = {}
            for c in args.concurrency:
                with make() as pool:
                    rows[name][c] = measure(pool, c, args.steps, args.total)
                print(f"  {name:12s} C={c:3d}: {rows[name][c][0]:8.1f} steps/s, {rows[name][c][1]:6.2f} ms/step",
                      flush=True)
    base = rows["in-process"]
    print("\n| backend | " + " | ".join(f"C={c} steps/s (vs in-process)" for c in args.concurrency) + " |")
    print("|---|" + "---|" * len(args.concurrency))
    for name, row in rows.items():
        cells = [f"{row[c][0]:.0f} ({row[c][0] / base[c][0]:.2f}x)" for c in args.concurrency]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    if 1 in args.concurrency:
        print("\nadded latency per step at C=1 (ms per step minus in-process's "
              f"{base[1][1]:.2f} ms): " + ", ".join(f"{n} {r[1][1] - base[1][1]:+.2f}" for n, r in rows.items()
                                                     if n != "in-process"))


if __name__ == "__main__":
    main()

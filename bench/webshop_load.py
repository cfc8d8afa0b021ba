"""Load test of the WebShop server: N concurrent clients x M oracle episodes over HTTP.

Starts ``rubricgym webshop serve`` on a free 127.0.0.1 port in a subprocess (or uses
``--url`` for a server you started yourself), then runs each client count of ``--clients``
in turn: every client is a thread with its own session id and keep-alive connection that
plays ``--episodes`` episodes through the JSON API (``/api/<session>/reset`` then
``/api/<session>/step`` with the oracle's actions until the purchase).  Bounded in count and
time (``--time-limit`` seconds per client count; clients stop starting episodes after it).

Prints, per client count, measured in this run: requests, wall time, throughput (requests/s,
episodes/s), request latency p50/p90/p99, errors (transport failures and non-2xx answers)
and wrong scores (purchases below 1.0), plus the throughput ratio against the first row.

Usage: ``python bench/webshop_load.py [--clients 1,32] [--episodes 5] [--tagger lexicon]``
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agent_envs.webshop.catalogue import CatalogueSpec, get_catalogue
from agent_envs.webshop.oracle import oracle_next
from agent_envs.webshop.session import PageSnapshot

MAX_STEPS = 15


@dataclass
class ClientStats:
    latencies: list[float] = field(default_factory=list)
    episodes: int = 0
    errors: list[str] = field(default_factory=list)
    wrong_scores: int = 0


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    """``rubricgym webshop serve --port 0`` in a subprocess; returns it and its URL."""
    cmd = [sys.executable, "-m", "trainers.cli", "webshop", "serve", "--host", "127.0.0.1", "--port", "0",
           "--num-products", str(args.num_products), "--tagger", args.tagger,
           "--max-sessions", str(max(4096, 4 * max(args.clients)))]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
        if m:
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # drain the pipe
            return proc, m.group(1)
    proc.kill()
    raise SystemExit("the WebShop server did not start")


def client(url: str, cid: str, episodes: int, tasks: list[int], goals: list, catalogue, deadline: float,
           stats: ClientStats, barrier: threading.Barrier, timeout: float) -> None:
    """One client: ``episodes`` oracle episodes on random tasks."""
    http = requests.Session()
    http.trust_env = False
    rng = random.Random(cid)

    def call(method: str, path: str, payload: dict | None = None) -> dict | None:
        t0 = time.perf_counter()
        try:
            r = http.request(method, url + path, json=payload, timeout=timeout)
        except requests.RequestException as exc:
            stats.errors.append(f"{type(exc).__name__}: {exc}"[:200])
            return None
        stats.latencies.append(time.perf_counter() - t0)
        if r.status_code != 200:
            stats.errors.append(f"HTTP {r.status_code} {path}: {r.text[:120]}")
            return None
        return r.json()

    barrier.wait()
    for _ in range(episodes):
        if time.monotonic() > deadline:
            break
        goal = goals[rng.choice(tasks)]
        body = call("POST", f"/api/{cid}/reset", {"task": goal.index, "kind": goal.kind,
                                                 "instruction": goal.instruction})
        if body is None:
            continue
        snap = PageSnapshot.from_dict(body["snapshot"])
        for _step in range(MAX_STEPS):
            body = call("POST", f"/api/{cid}/step", {"action": oracle_next(snap, goal, catalogue)})
            if body is None:
                break
            snap = PageSnapshot.from_dict(body["snapshot"])
            if snap.done:
                break
        if body is not None:
            stats.episodes += 1
            if not (snap.done and snap.score is not None and snap.score >= 0.999):
                stats.wrong_scores += 1
    call("DELETE", f"/api/{cid}")
    http.close()


def run(url: str, n_clients: int, args: argparse.Namespace, goals: list, catalogue) -> dict:
    """Run ``n_clients`` clients at once; returns the row of the table."""
    tasks = list(range(len(goals)))
    stats = [ClientStats() for _ in range(n_clients)]
    barrier = threading.Barrier(n_clients + 1)
    deadline = time.monotonic() + args.time_limit
    threads = [threading.Thread(target=client, args=(url, f"load-{n_clients}-{i}", args.episodes, tasks, goals,
                                                     catalogue, deadline, stats[i], barrier, args.timeout))
               for i in range(n_clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join(timeout=args.time_limit + args.timeout + 30)
    wall = time.perf_counter() - t0
    lat = sorted(x for s in stats for x in s.latencies)
    q = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else [lat[0] if lat else 0.0] * 99
    errors = [e for s in stats for e in s.errors]
    return {"clients": n_clients, "requests": len(lat), "episodes": sum(s.episodes for s in stats), "wall": wall,
            "rps": len(lat) / wall, "eps": sum(s.episodes for s in stats) / wall, "p50": 1e3 * q[49],
            "p90": 1e3 * q[89], "p99": 1e3 * q[98], "errors": len(errors),
            "wrong": sum(s.wrong_scores for s in stats), "first_errors": errors[:3],
            "stuck": sum(t.is_alive() for t in threads)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", default="1,32", help="comma-separated concurrent client counts (default 1,32)")
    ap.add_argument("--episodes", type=int, default=5, help="episodes per client (default 5)")
    ap.add_argument("--num-products", type=int, default=1000)
    ap.add_argument("--tagger", default="lexicon", help="noun tagger of the server (default lexicon)")
    ap.add_argument("--time-limit", type=float, default=300.0, help="seconds per client count (default 300)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default 30)")
    ap.add_argument("--url", default=None, help="use a running server instead of starting one")
    args = ap.parse_args()
    args.clients = [int(c) for c in str(args.clients).split(",") if c.strip()]
    if not args.clients or min(args.clients) < 1 or max(args.clients) > 256 or not 1 <= args.episodes <= 1000:
        raise SystemExit("--clients must be 1..256 each and --episodes 1..1000")

    catalogue = get_catalogue(CatalogueSpec(num_products=args.num_products))
    goals = catalogue.goal_list("human")
    proc = None
    url = args.url
    if url is None:
        proc, url = start_server(args)
    try:
        health = requests.get(url + "/healthz", timeout=30).json()
        print(f"server {url}: {health['catalogue']}, tagger {health['tagger']}; "
              f"{args.episodes} oracle episodes per client")
        warm = argparse.Namespace(**{**vars(args), "episodes": 2})
        run(url, 1, warm, goals, catalogue)  # warm-up (search index, caches), not reported
        rows = [run(url, n, args, goals, catalogue) for n in args.clients]
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    head = (f"{'clients':>7} {'requests':>8} {'episodes':>8} {'wall s':>7} {'req/s':>7} {'ep/s':>6} "
            f"{'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'errors':>6} {'wrong':>5} {'x req/s':>7}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['clients']:>7} {r['requests']:>8} {r['episodes']:>8} {r['wall']:>7.2f} {r['rps']:>7.1f} "
              f"{r['eps']:>6.2f} {r['p50']:>7.1f} {r['p90']:>7.1f} {r['p99']:>7.1f} {r['errors']:>6} "
              f"{r['wrong']:>5} {r['rps'] / rows[0]['rps']:>7.2f}")
    for r in rows:
        for e in r["first_errors"]:
            print(f"  error ({r['clients']} clients): {e}")
        if r["stuck"]:
            print(f"  {r['stuck']} client threads still running at the time limit ({r['clients']} clients)")
    if any(r["errors"] or r["wrong"] or r["stuck"] for r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()

"""The production WebShop server against werkzeug's development server, side by side.

Starts both on free 127.0.0.1 ports over the same generated catalogue (word-list tagger by
default): ``rubricgym webshop serve`` (gunicorn, one worker, ``--threads`` threads, access log
on as in production) and :func:`agent_envs.webshop.server.serve` (werkzeug's threaded
development server, what ``rubricgym webshop serve`` ran before).  For each client count of
``--clients`` (default 1, 8, 64), each server in turn runs the load of
``bench/webshop_load.py``: every client a thread with its own session and one persistent
``http.client`` connection, playing oracle episodes through the JSON API (reset, then steps
until the purchase); ``--episodes`` episodes in all per row, split over the clients.
``--baseline DIR`` adds a third server, ``rubricgym webshop serve`` run from another checkout
(e.g. a ``git worktree`` of an older commit), measured in the same run under the same load.

Prints, per client count and server: requests, throughput (requests/s), latency p50/p99,
errors and wrong scores, the server's CPU milliseconds per request (user + system of its
processes, from /proc), the cores it kept busy, its capacity (1000 / CPU ms per request: the
requests per second one core's worth of its CPU time serves; gunicorn's single worker runs its
Python under one GIL, so about one core is what it can use) and the clients' CPU milliseconds
per request (this process) (``--repeats`` interleaved runs: medians of the figures, sums of
the counts); then the production/development ratios of throughput and p99.  The clients run
in this process, on the same cores as the server: on a 2-core machine they take a share of
the CPU from every server alike, and other work on the machine (the load average is printed)
lowers throughput far more than it changes CPU per request.

Usage: ``python bench/webshop_server.py [--clients 1,8,64] [--episodes 512] [--repeats 3] [--threads 8] [--baseline DIR]``
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

import requests

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

import provenance  # bench/provenance.py
import webshop_load  # the load generator of bench/webshop_load.py

from agent_envs.webshop.catalogue import CatalogueSpec, get_catalogue

DEV_SERVER = """
import sys
from agent_envs.webshop.catalogue import CatalogueSpec
from agent_envs.webshop.server import create_app, serve
app = create_app(CatalogueSpec(num_products=int(sys.argv[1])), tagger=sys.argv[2], max_sessions=4096)
serve(app, port=0, on_ready=lambda url: print("serving on", url, file=sys.stderr, flush=True))
"""


def _start(cmd: list[str], cwd: Path | None = None) -> tuple[subprocess.Popen, str]:
    """Start a server process (from the checkout ``cwd``, default this one); returns it and the
    URL it prints (``serving on URL``)."""
    from webshop_load import start_process  # bench/ is on sys.path (above)

    return start_process(cmd, cwd=cwd)


def start_servers(args: argparse.Namespace) -> dict[str, tuple[subprocess.Popen, str]]:
    prod = [sys.executable, "-m", "trainers.cli", "webshop", "serve", "--port", "0", "--num-products",
            str(args.num_products), "--tagger", args.tagger, "--max-sessions", "4096", "--threads", str(args.threads)]
    dev = [sys.executable, "-c", DEV_SERVER, str(args.num_products), args.tagger]
    servers = {"gunicorn": _start(prod), "werkzeug dev": _start(dev)}
    if args.baseline is not None:
        servers["gunicorn base"] = _start(prod, cwd=args.baseline)
    return servers


def row(url: str, clients: int, args: argparse.Namespace, goals: list, catalogue, pid: int | None = None) -> dict:
    """One measurement: ``clients`` clients sharing ``args.episodes`` episodes (``pid``: the
    server process, for its CPU time)."""
    per_client = max(1, -(-args.episodes // clients))
    load = argparse.Namespace(episodes=per_client, time_limit=args.time_limit, timeout=args.timeout, hostile=0)
    return webshop_load.run(url, clients, load, goals, catalogue, pid)


def header(args: argparse.Namespace) -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{datetime.date.today()} {cpu}, {os.cpu_count()} cores, load {load}; commit {provenance.commit(REPO)}"
            f"{provenance.dirty(REPO)}{_base(args)}; {args.num_products} products, tagger {args.tagger}, gunicorn --threads "
            f"{args.threads}; {args.episodes} oracle episodes per run, medians of {args.repeats} interleaved runs")


def _base(args: argparse.Namespace) -> str:
    if args.baseline is None:
        return ""
    return f", gunicorn base: {args.baseline} at {provenance.commit(args.baseline)}"


def median_rows(rows: list[tuple[int, str, dict]]) -> list[tuple[int, str, dict]]:
    """One row per (clients, server): medians of rates and latencies, sums of counts."""
    out = []
    for key in dict.fromkeys((c, n) for c, n, _r in rows):
        runs = [r for c, n, r in rows if (c, n) == key]
        merged = {k: statistics.median(r[k] for r in runs) for k in ("rps", "p50", "p99")}
        merged |= {k: statistics.median(r[k] for r in runs) if all(r[k] is not None for r in runs) else None
                   for k in ("cpu_ms", "server_cores", "client_ms")}
        merged |= {k: sum(r[k] for r in runs) for k in ("requests", "errors", "wrong", "stuck")}
        out.append((*key, merged))
    return out


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def report(rows: list[tuple[int, str, dict]]) -> None:
    head = (f"{'clients':>7} {'server':<13} {'requests':>8} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>8} "
            f"{'errors':>6} {'wrong':>5} {'srv ms/req':>10} {'srv cores':>9} {'cap req/s':>9} {'cli ms/req':>10}")
    print(head)
    print("-" * len(head))
    for clients, name, r in rows:
        print(f"{clients:>7} {name:<13} {r['requests']:>8} {r['rps']:>7.1f} {r['p50']:>7.1f} {r['p99']:>8.1f} "
              f"{r['errors']:>6} {r['wrong']:>5} {_num(r['cpu_ms'], '.3f'):>10} {_num(r['server_cores'], '.2f'):>9} "
              f"{_num(1e3 / r['cpu_ms'] if r['cpu_ms'] else None, '.0f'):>9} {_num(r['client_ms'], '.3f'):>10}")
    print("\ngunicorn / werkzeug dev:")
    by = {(c, n): r for c, n, r in rows}
    for clients in sorted({c for c, _n, _r in rows}):
        g, w = by[(clients, "gunicorn")], by[(clients, "werkzeug dev")]
        print(f"  {clients:>3} clients: throughput x{g['rps'] / w['rps']:.2f}, p99 x{g['p99'] / w['p99']:.2f}")
    if any(n == "gunicorn base" for _c, n, _r in rows):
        print("\ngunicorn / gunicorn base:")
        for clients in sorted({c for c, _n, _r in rows}):
            g, b = by[(clients, "gunicorn")], by[(clients, "gunicorn base")]
            cpu = f", server CPU per request x{g['cpu_ms'] / b['cpu_ms']:.2f}" if g["cpu_ms"] and b["cpu_ms"] else ""
            print(f"  {clients:>3} clients: throughput x{g['rps'] / b['rps']:.2f}, p99 x{g['p99'] / b['p99']:.2f}{cpu}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", default="1,8,64", help="comma-separated concurrent client counts (default 1,8,64)")
    ap.add_argument("--episodes", type=int, default=512, help="oracle episodes per run, over all clients")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved runs per row (default 3; medians)")
    ap.add_argument("--threads", type=int, default=8, help="gunicorn's --threads (default 8, its default)")
    ap.add_argument("--num-products", type=int, default=1000)
    ap.add_argument("--tagger", default="lexicon", help="noun tagger of both servers (default lexicon)")
    ap.add_argument("--time-limit", type=float, default=300.0, help="seconds per row at most (default 300)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per request (default 60)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another checkout whose `rubricgym webshop serve` runs as a third server")
    args = ap.parse_args()
    if args.baseline is not None and not (args.baseline / "agent_envs" / "webshop").is_dir():
        raise SystemExit(f"--baseline {args.baseline}: not a rubricgym checkout")
    clients = [int(c) for c in args.clients.split(",") if c.strip()]
    if not clients or min(clients) < 1 or max(clients) > 256 or not 1 <= args.episodes <= 10_000:
        raise SystemExit("--clients must be 1..256 each and --episodes 1..10000")
    if not 1 <= args.repeats <= 20:
        raise SystemExit("--repeats must be 1..20")

    catalogue = get_catalogue(CatalogueSpec(num_products=args.num_products))
    goals = catalogue.goal_list("human")
    servers = start_servers(args)
    rows: list[tuple[int, str, dict]] = []
    try:
        print(header(args))
        for _proc, url in servers.values():
            assert requests.get(url + "/healthz", timeout=30).json()["status"] == "ok"
            row(url, 1, argparse.Namespace(**{**vars(args), "episodes": 4}), goals, catalogue)  # warm-up
        for _rep in range(args.repeats):
            for n in clients:
                for name, (proc, url) in servers.items():  # the same load on each, one after the other
                    rows.append((n, name, row(url, n, args, goals, catalogue, proc.pid)))
    finally:
        for proc, _url in servers.values():
            proc.terminate()
            proc.wait(timeout=30)
    rows = median_rows(rows)
    report(rows)
    if any(r["errors"] or r["wrong"] or r["stuck"] for _c, _n, r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()

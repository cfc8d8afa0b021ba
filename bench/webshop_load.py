"""Load test of the WebShop server: N concurrent clients x M oracle episodes over HTTP.

Starts ``rubricgym webshop serve`` on a free 127.0.0.1 port in a subprocess (or uses
``--url`` for a server you started yourself), then runs each client count of ``--clients``
in turn: every client is a thread with its own session id and one persistent ``http.client``
connection (what a high-throughput client keeps; no per-request session machinery) that
plays ``--episodes`` episodes through the JSON API (``/api/<session>/reset`` then
``/api/<session>/step`` with the oracle's actions until the purchase).  Bounded in count and
time (``--time-limit`` seconds per client count; clients stop starting episodes after it).

Prints, per client count, measured in this run: requests, wall time, throughput (requests/s,
episodes/s), request latency p50/p90/p99, errors (transport failures and non-2xx answers)
and wrong scores (purchases below 1.0), plus the throughput ratio against the first row, and
the server's CPU milliseconds per request (user + system of the server process and its
gunicorn worker, from /proc; for a server of your own, give ``--server-pid``) and the
clients' (this process's) CPU milliseconds per request.  On a machine shared with other work,
CPU per request varies far less than requests per second.

``--hostile K`` adds K threads that, while the clients play, fire malformed and oversize
requests (bad JSON, wrong types, JSON nested 3000 deep, bodies over the 64 KiB cap, URLs over
8 KiB, bad session ids, unknown routes and methods, random bytes, broken HTTP on the raw
socket) and counts the answers by class: the server must answer each with a 4xx (a few
harmless ones with 2xx/3xx), never a 5xx or a dropped connection.

Usage: ``python bench/webshop_load.py [--clients 1,32] [--episodes 5] [--tagger lexicon] [--hostile 8]``
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

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
    return start_process(cmd)


def start_process(cmd: list[str], cwd: Path | None = None) -> tuple[subprocess.Popen, str]:
    """Start a server process; returns it and the URL it prints on stderr (``serving on URL``).
    Its stdout (gunicorn's access log) goes to /dev/null: written by the server as in
    production, read by nobody on these cores."""
    env = None if cwd is None else {**os.environ, "PYTHONPATH": str(cwd)}  # that checkout's code
    proc = subprocess.Popen(cmd, cwd=cwd or REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # drain the pipe
            return proc, m.group(1)
    proc.kill()
    raise SystemExit(f"{' '.join(cmd[:6])}... did not start")


class Connection:
    """One persistent HTTP/1.1 connection (``http.client``), as a high-throughput client keeps:
    JSON in, JSON out, reconnecting after a transport error."""

    def __init__(self, url: str, timeout: float) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)

    def call(self, method: str, path: str, payload: dict | None) -> tuple[int, bytes]:
        body = None if payload is None else json.dumps(payload)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        try:
            self.conn.request(method, path, body, headers)
            resp = self.conn.getresponse()
            return resp.status, resp.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()  # the next request opens a new connection
            raise

    def close(self) -> None:
        self.conn.close()


def client(url: str, cid: str, episodes: int, tasks: list[int], goals: list, catalogue, deadline: float,
           stats: ClientStats, barrier: threading.Barrier, timeout: float) -> None:
    """One client: ``episodes`` oracle episodes on random tasks, over one kept-alive connection."""
    conn = Connection(url, timeout)
    rng = random.Random(cid)

    def call(method: str, path: str, payload: dict | None = None) -> dict | None:
        t0 = time.perf_counter()
        try:
            status, data = conn.call(method, path, payload)
        except (OSError, http.client.HTTPException) as exc:
            stats.errors.append(f"{type(exc).__name__}: {exc}"[:200])
            return None
        stats.latencies.append(time.perf_counter() - t0)
        if status != 200:
            stats.errors.append(f"HTTP {status} {path}: {data[:120]!r}")
            return None
        return json.loads(data)

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
    conn.close()


DEEP = "[" * 3000 + "]" * 3000
BIG = "x" * (64 * 1024 + 1)


def bad_requests(sid: str) -> list[tuple[str, str, dict]]:
    """Malformed and oversize HTTP requests (method, path, requests kwargs); session ``sid`` exists."""
    js = {"Content-Type": "application/json"}
    a, r = f"/api/{sid}", f"/item_page/{sid}/B000000001/shoes/1"
    return [
        ("POST", f"{a}/step", {"data": b"{not json", "headers": js}),
        ("POST", f"{a}/step", {"data": b"[1, 2]", "headers": js}),
        ("POST", f"{a}/step", {"data": DEEP.encode(), "headers": js}),
        ("POST", f"{a}/reset", {"data": DEEP.encode(), "headers": js}),
        ("POST", f"{a}/reset", {"data": b'{"task": 1e999}', "headers": js}),
        ("POST", f"{a}/reset", {"data": b"\xff\xfe\x00garbage", "headers": js}),
        ("POST", f"{a}/step", {"json": {"action": BIG}}),
        ("POST", f"{a}/step", {"json": {"action": "a" * 4097}}),
        ("POST", f"{a}/step", {"json": {"action": 5}}),
        ("POST", f"{a}/step", {"json": {"action": ["click[x]"]}}),
        ("POST", f"{a}/reset", {"json": {"task": 10**9}}),
        ("POST", f"{a}/reset", {"json": {"task": True}}),
        ("POST", f"{a}/reset", {"json": {"task": "0"}}),
        ("POST", f"{a}/reset", {"json": {"task": 0, "kind": "alien"}}),
        ("POST", f"{a}/reset", {"json": {"task": 0, "tagger": "no-such-tagger"}}),
        ("POST", "/api/no!such/reset", {"json": {"task": 0}}),
        ("POST", "/api/" + "a" * 65 + "/reset", {"json": {"task": 0}}),
        ("GET", f"{a}/step", {}),
        ("PUT", f"{a}/reset", {"json": {"task": 0}}),
        ("POST", f"/{sid}", {"data": {"search_query": BIG}}),
        ("POST", f"/{sid}", {"data": {"other": "field"}}),
        ("GET", f"/search_results/{sid}/" + "k" * 9000 + "/1", {}),
        ("GET", f"/search_results/{sid}/" + "k" * 600 + "/1", {}),
        ("GET", f"/search_results/{sid}/shoes/0", {}),
        ("GET", f"/search_results/{sid}/shoes/-1", {}),
        ("GET", f"{r}/not-json", {}),
        ("GET", f"{r}/%5B%5D", {}),
        ("GET", f"{r}/" + "%5B" * 3000 + "%5D" * 3000, {}),
        ("GET", f"/item_sub_page/{sid}/B000000001/shoes/1/secrets/%7B%7D", {}),
        ("GET", f"/done/{sid}/B000000001/%7B%22size%22%3A5%7D", {}),
        ("GET", f"/done/{sid}/B000000001/" + "%5B" * 3000 + "%5D" * 3000, {}),
        ("GET", "/a.b", {}),
        ("GET", "/too/many/segments/here/x", {}),
    ]


RAW_BAD = [b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n",
           b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * 120 + b"\r\n",
           b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n",
           b"BREW /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
           b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(range(64)) + b"\r\n\r\n"]


def raw_http(url: str, payload: bytes, timeout: float) -> str:
    """Send bytes on a fresh socket; the status class of the answer ('4xx', ...) or 'closed'."""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
            sock.sendall(payload)
            head = sock.recv(64)
    except (ConnectionResetError, BrokenPipeError):
        return "closed"  # refusing garbage by closing the connection is fine
    m = re.match(rb"HTTP/1\.[01] (\d)\d\d", head)
    return f"{m.group(1).decode()}xx" if m else "closed"


def hostile(url: str, hid: str, deadline: float, stop: threading.Event, counts: Counter,
            firsts: list[str], timeout: float) -> None:
    """Fire malformed and oversize requests until ``stop``: the list in turn, and every 10th one
    raw bytes on a socket (broken HTTP or random bytes)."""
    http = requests.Session()
    http.trust_env = False
    rng = random.Random(hid)
    http.post(f"{url}/api/{hid}/reset", json={"task": 0}, timeout=timeout)
    cases = bad_requests(hid)
    i, start = 0, rng.randrange(len(cases))
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            if i % 10 == 9:
                payload = (RAW_BAD[rng.randrange(len(RAW_BAD))] if rng.random() < 0.5
                           else rng.randbytes(200) + b"\r\n\r\n")
                cls = raw_http(url, payload, timeout)
            else:
                method, path, kw = cases[(start + i) % len(cases)]  # cycle: every case is sent
                resp = http.request(method, url + path, timeout=timeout, allow_redirects=False, **kw)
                cls = f"{resp.status_code // 100}xx"
                if cls == "5xx" and len(firsts) < 5:
                    firsts.append(f"HTTP {resp.status_code} {method} {path[:80]}: {resp.text[:100]}")
        except (OSError, requests.RequestException) as exc:
            cls = "transport"
            if len(firsts) < 5:
                firsts.append(f"{type(exc).__name__}: {exc}"[:200])
        counts[cls] += 1
        i += 1
    http.close()


def server_cpu_s(pid: int | None) -> float | None:
    """CPU seconds (user + system) of process ``pid`` and its children (gunicorn's master and
    worker), from /proc; None without a pid or off Linux."""
    if pid is None:
        return None
    try:
        pids = [pid, *map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]
        ticks = sum(sum(map(int, Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[11:13]))
                    for p in pids)
    except (OSError, ValueError):
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """CPU seconds (user + system) of this process: the clients' threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(url: str, n_clients: int, args: argparse.Namespace, goals: list, catalogue, pid: int | None = None) -> dict:
    """Run ``n_clients`` clients at once; returns the row of the table (``pid``: the server's
    process, for its CPU time)."""
    tasks = list(range(len(goals)))
    stats = [ClientStats() for _ in range(n_clients)]
    barrier = threading.Barrier(n_clients + 1)
    deadline = time.monotonic() + args.time_limit
    threads = [threading.Thread(target=client, args=(url, f"load-{n_clients}-{i}", args.episodes, tasks, goals,
                                                     catalogue, deadline, stats[i], barrier, args.timeout))
               for i in range(n_clients)]
    counts: Counter = Counter()
    firsts: list[str] = []
    stop = threading.Event()
    bad = [threading.Thread(target=hostile, args=(url, f"hostile-{n_clients}-{i}", deadline, stop, counts,
                                                  firsts, args.timeout))
           for i in range(args.hostile)]
    for t in threads:
        t.start()
    barrier.wait()
    t0, cpu0, own0 = time.perf_counter(), server_cpu_s(pid), own_cpu_s()
    for t in bad:
        t.start()
    for t in threads:
        t.join(timeout=args.time_limit + args.timeout + 30)
    wall, cpu1, own1 = time.perf_counter() - t0, server_cpu_s(pid), own_cpu_s()
    stop.set()
    for t in bad:
        t.join(timeout=args.timeout + 30)
    lat = sorted(x for s in stats for x in s.latencies)
    q = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else [lat[0] if lat else 0.0] * 99
    errors = [e for s in stats for e in s.errors]
    return {"clients": n_clients, "requests": len(lat), "episodes": sum(s.episodes for s in stats), "wall": wall,
            "rps": len(lat) / wall, "eps": sum(s.episodes for s in stats) / wall, "p50": 1e3 * q[49],
            "cpu_ms": 1e3 * (cpu1 - cpu0) / len(lat) if cpu0 is not None and cpu1 is not None and lat else None,
            "server_cores": (cpu1 - cpu0) / wall if cpu0 is not None and cpu1 is not None else None,
            "client_ms": 1e3 * (own1 - own0) / len(lat) if lat else None,
            "p90": 1e3 * q[89], "p99": 1e3 * q[98], "errors": len(errors),
            "wrong": sum(s.wrong_scores for s in stats), "first_errors": errors[:3],
            "stuck": sum(t.is_alive() for t in threads), "hostile": dict(counts), "hostile_errors": firsts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", default="1,32", help="comma-separated concurrent client counts (default 1,32)")
    ap.add_argument("--episodes", type=int, default=5, help="episodes per client (default 5)")
    ap.add_argument("--num-products", type=int, default=1000)
    ap.add_argument("--tagger", default="lexicon", help="noun tagger of the server (default lexicon)")
    ap.add_argument("--time-limit", type=float, default=300.0, help="seconds per client count (default 300)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default 30)")
    ap.add_argument("--url", default=None, help="use a running server instead of starting one")
    ap.add_argument("--server-pid", type=int, default=None,
                    help="with --url: the server's process id, for its CPU time per request")
    ap.add_argument("--hostile", type=int, default=0,
                    help="threads firing malformed/oversize requests during each run (default 0)")
    args = ap.parse_args()
    args.clients = [int(c) for c in str(args.clients).split(",") if c.strip()]
    if not args.clients or min(args.clients) < 1 or max(args.clients) > 256 or not 1 <= args.episodes <= 1000:
        raise SystemExit("--clients must be 1..256 each and --episodes 1..1000")
    if not 0 <= args.hostile <= 64:
        raise SystemExit("--hostile must be 0..64")

    catalogue = get_catalogue(CatalogueSpec(num_products=args.num_products))
    goals = catalogue.goal_list("human")
    proc = None
    url, pid = args.url, args.server_pid
    if url is None:
        proc, url = start_server(args)
        pid = proc.pid
    try:
        health = requests.get(url + "/healthz", timeout=30).json()
        print(f"server {url}: {health['catalogue']}, tagger {health['tagger']}; "
              f"{args.episodes} oracle episodes per client")
        warm = argparse.Namespace(**{**vars(args), "episodes": 2})
        run(url, 1, warm, goals, catalogue)  # warm-up (search index, caches), not reported
        rows = [run(url, n, args, goals, catalogue, pid) for n in args.clients]
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    head = (f"{'clients':>7} {'requests':>8} {'episodes':>8} {'wall s':>7} {'req/s':>7} {'ep/s':>6} "
            f"{'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'errors':>6} {'wrong':>5} {'x req/s':>7} {'cpu ms/req':>10} "
            f"{'client ms':>9}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['clients']:>7} {r['requests']:>8} {r['episodes']:>8} {r['wall']:>7.2f} {r['rps']:>7.1f} "
              f"{r['eps']:>6.2f} {r['p50']:>7.1f} {r['p90']:>7.1f} {r['p99']:>7.1f} {r['errors']:>6} "
              f"{r['wrong']:>5} {r['rps'] / rows[0]['rps']:>7.2f} "
              f"{'-' if r['cpu_ms'] is None else format(r['cpu_ms'], '.2f'):>10} "
              f"{'-' if r['client_ms'] is None else format(r['client_ms'], '.2f'):>9}")
    for r in rows:
        for e in r["first_errors"]:
            print(f"  error ({r['clients']} clients): {e}")
        if r["stuck"]:
            print(f"  {r['stuck']} client threads still running at the time limit ({r['clients']} clients)")
        if args.hostile:
            h = r["hostile"]
            print(f"  hostile ({r['clients']} clients, {args.hostile} threads): {sum(h.values())} malformed/oversize "
                  f"requests: " + ", ".join(f"{k} {h.get(k, 0)}" for k in ("2xx", "3xx", "4xx", "5xx", "closed",
                                                                            "transport")))
            for e in r["hostile_errors"]:
                print(f"    {e}")
    if any(r["errors"] or r["wrong"] or r["stuck"] for r in rows) or any(
            r["hostile"].get("5xx", 0) + r["hostile"].get("transport", 0) for r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()

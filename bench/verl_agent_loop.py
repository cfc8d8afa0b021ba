"""Benchmark: how long verl's event loop stalls while the ``rubricgym_env`` agent loop plays.

Run it with verl's venv (``.ci/run`` builds it; verl 0.9.1 on CPU)::

    $RUBRICGYM_VERL_PYTHON bench/verl_agent_loop.py                 # 8 sessions, 3 rounds
    $RUBRICGYM_VERL_PYTHON bench/verl_agent_loop.py --split valid_unseen   # real games ($ALFWORLD_DATA)
    $RUBRICGYM_VERL_PYTHON bench/verl_agent_loop.py --profile       # cProfile of the longest turns instead

``--sessions`` concurrent sessions (default 8: one prompt's group, verl's ``rollout.n``) play one
ALFWorld task in a fresh process, each session's loop object built as verl 0.9's agent-loop
worker builds it (``AgentLoopWorker._run_agent_loop``: ``hydra.utils.instantiate`` of the
registry entry with the trainer config, verl's own ``ppo_trainer`` config composed, a server
manager, the tokenizer, ...) inside the session's task on the event loop, then ``run()``.  A
stand-in for verl's server manager (no vLLM here) answers each request after ``--gen-ms`` of
``asyncio.sleep`` with ``look`` (``--detour`` times, default 10) and then the task's
walkthrough, so every episode is won, in 15-20 steps.
Round 1 holds the *first* episodes (the environment pool starts, its worker loads the games);
later rounds play the next tasks on the warm pool.

Printed per round: the event loop's longest stall and 99th percentile (a ticker coroutine that
sleeps 1 ms at a time and records how late it wakes) beside the floor (the same ticker alone
for a second after the round: what the machine imposes), and the turns of the event loop (all
callbacks one ``_run_once`` runs: what a waiting coroutine waits for) with what ran inside them:
the longest turn, and the turns with the most of rubricgym's own time ("ours max", wall and
this thread's CPU time; on a loaded machine wall time also counts the thread waiting for a
core, so the CPU time is the code's own cost).  The attribution times labelled functions
(exclusive of the labelled functions they call): rubricgym's (the agent loop's ``__init__``,
``run`` between its waits, the episode pool, prompts, steps, rows), verl's
(``AgentLoopBase.__init__``, its token builders), hydra's ``instantiate`` around them, garbage
collections (``gc``), the stand-in server; the rest of a turn is "other" (asyncio, the ticker).
``--profile`` plays the rounds under cProfile instead, one profile per turn, and prints the top
functions of the longest turns (times inflated by the profiler).

Target: rubricgym's part of any single callback <= 5 ms, first episodes included.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import subprocess
import sys
import threading
import time
from collections import defaultdict
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OURS = ("ours:", )


class Clock:
    """Exclusive wall and CPU time (this thread's) per label, summed over the callbacks of each
    turn of the event loop (what a coroutine waiting for the loop waits for)."""

    def __init__(self) -> None:
        self.stack: list[list] = []  # [label, wall start, cpu start, wall and cpu in labelled children]
        self.current: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.turns: list[dict] = []  # one per turn of the event loop that ran callbacks
        self.turn: dict | None = None
        self.recording = False
        self.profiling = False
        self.thread = threading.get_ident()  # the event loop's thread

    def push(self, label: str) -> None:
        self.stack.append([label, time.perf_counter(), time.thread_time(), 0.0, 0.0])

    def pop(self) -> None:
        label, wall0, cpu0, inner_wall, inner_cpu = self.stack.pop()
        wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
        part = self.current[label]
        part[0] += wall - inner_wall
        part[1] += cpu - inner_cpu
        if self.stack:
            self.stack[-1][3] += wall
            self.stack[-1][4] += cpu

    def timed(self, label: str, fn):
        """Calls on the loop's thread count; calls in other threads (the episode pool's build)
        hold no turn of the loop and are not attributed."""
        clock = self

        def wrapper(*args, **kwargs):
            if threading.get_ident() != clock.thread:
                return fn(*args, **kwargs)
            clock.push(label)
            try:
                return fn(*args, **kwargs)
            finally:
                clock.pop()

        wrapper.__wrapped__ = fn
        return wrapper

    def timed_async(self, label: str, fn):
        """Each resumption of the coroutine counts, not its waits."""
        clock = self

        class Proxy:
            def __init__(self, coro) -> None:
                self.coro = coro

            def __await__(self):
                send, error = None, None
                while True:
                    clock.push(label)
                    try:
                        out = self.coro.throw(error) if error is not None else self.coro.send(send)
                    except StopIteration as stop:
                        return stop.value
                    finally:
                        clock.pop()
                    try:
                        send, error = (yield out), None
                    except BaseException as exc:  # noqa: BLE001  (handed to the coroutine)
                        send, error = None, exc

        async def wrapper(*args, **kwargs):
            return await Proxy(fn(*args, **kwargs))

        return wrapper

    def gc_callback(self, phase: str, _info: dict) -> None:
        if threading.get_ident() != self.thread:
            return
        if phase == "start":
            self.push("gc")
        elif self.stack and self.stack[-1][0] == "gc":
            self.pop()


def install(clock: Clock) -> None:
    """Label the functions whose time is attributed (patched in this process only)."""
    import hydra.utils
    from verl.experimental.agent_loop import agent_loop as verl_loop

    import wrappers.integrations.verl as ours
    from agent_envs import pool
    from wrappers.integrations import episode

    hydra.utils.instantiate = clock.timed("hydra: instantiate", hydra.utils.instantiate)
    base = verl_loop.AgentLoopBase
    base.__init__ = clock.timed("verl: AgentLoopBase.__init__", base.__init__)
    for name in ("ct_build_initial_tokens", "ct_merge_assistant_token"):
        setattr(base, name, clock.timed_async(f"verl: {name}", getattr(base, name)))
    loop_cls = ours.RubricgymEnvLoop
    loop_cls.__init__ = clock.timed("ours: RubricgymEnvLoop.__init__", loop_cls.__init__)
    loop_cls.run = clock.timed_async("ours: RubricgymEnvLoop.run", loop_cls.run)
    loop_cls._prompt = clock.timed("ours: prompt", loop_cls._prompt)
    ours.aepisode_pool = clock.timed_async("ours: aepisode_pool", ours.aepisode_pool)
    episode.episode_pool = clock.timed("ours: episode_pool", episode.episode_pool)
    for name in ("encode_row", "_step_text", "_row_head"):  # the last two: rows written step by step
        if hasattr(ours, name):
            setattr(ours, name, clock.timed(f"ours: {name}", getattr(ours, name)))
    pool.EnvPool.__init__ = clock.timed("ours: EnvPool.__init__", pool.EnvPool.__init__)
    episode.EpisodePool.acquire = clock.timed("ours: EpisodePool.acquire", episode.EpisodePool.acquire)
    for name in ("_started", "_record", "_action", "_reset_args"):
        setattr(episode.TextEpisode, name, clock.timed(f"ours: TextEpisode.{name}", getattr(episode.TextEpisode, name)))
    gc.callbacks.append(clock.gc_callback)

    run, run_once = asyncio.events.Handle._run, asyncio.base_events.BaseEventLoop._run_once

    def timed_run(handle):
        turn = clock.turn
        if turn is None:
            return run(handle)
        clock.current = turn["parts"]
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        if turn["profile"] is not None:
            turn["profile"].enable()
        try:
            return run(handle)
        finally:
            if turn["profile"] is not None:
                turn["profile"].disable()
            turn["wall"] += time.perf_counter() - wall0
            turn["cpu"] += time.thread_time() - cpu0
            turn["what"][_describe(handle)] += 1

    def timed_run_once(loop):
        if not clock.recording:
            return run_once(loop)
        clock.turn = {"wall": 0.0, "cpu": 0.0, "what": defaultdict(int), "parts": defaultdict(lambda: [0.0, 0.0]),
                      "profile": cProfile.Profile() if clock.profiling else None}
        try:
            return run_once(loop)
        finally:
            if clock.turn["what"]:
                clock.turns.append(clock.turn)
            clock.turn = None

    asyncio.events.Handle._run = timed_run
    asyncio.base_events.BaseEventLoop._run_once = timed_run_once


def _describe(handle) -> str:
    cb = getattr(handle, "_callback", None)
    task = getattr(cb, "__self__", None)
    if isinstance(task, asyncio.Task):
        return task.get_name().rstrip("0123456789")
    return getattr(cb, "__qualname__", repr(cb))


class StandInServer:
    """verl's server manager stand-in: the walkthrough's next action after ``delay`` seconds."""

    def __init__(self, tokenizer, walkthrough: list[str], delay: float, detour: int = 0) -> None:
        walkthrough = ["look"] * detour + walkthrough  # longer episodes that still win
        self.tok, self.walkthrough, self.delay = tokenizer, walkthrough, delay
        self.turns: dict[str, int] = defaultdict(int)
        self.encoded = {a: tokenizer.encode(f"<action>{a}</action>", add_special_tokens=False) + [tokenizer.eos_token_id]
                        for a in walkthrough}

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_kw):
        from verl.workers.rollout.replica import TokenOutput

        await asyncio.sleep(self.delay)
        turn = self.turns[request_id]
        self.turns[request_id] += 1
        ids = self.encoded[self.walkthrough[min(turn, len(self.walkthrough) - 1)]]
        return TokenOutput(token_ids=list(ids), log_probs=[-0.25] * len(ids))


def trainer_config(sessions: int):
    """verl 0.9.1's own ppo_trainer config, composed with hydra as its entry point does."""
    import verl.trainer
    from hydra import compose, initialize_config_dir

    config_dir = str(Path(verl.trainer.__file__).parent / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=[
            f"actor_rollout_ref.rollout.n={sessions}", "actor_rollout_ref.rollout.prompt_length=4096",
            "actor_rollout_ref.rollout.response_length=256",
            "actor_rollout_ref.rollout.agent.default_agent_loop=rubricgym_env"])


def walkthrough(env_kwargs: dict, task: int) -> list[str]:
    """The task's walkthrough, read in a child process (this one stays without an engine)."""
    code = ("import json, sys, gymnasium as gym, agent_envs; from agent_envs.alfworld.data import task_walkthrough; "
            "e = gym.make('ALFWorld-Rubric-v0', **json.loads(sys.argv[1])); "
            "_, info = e.reset(seed=0, options={'task': int(sys.argv[2])}); print(json.dumps(task_walkthrough(info)))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(env_kwargs), str(task)], cwd=REPO, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


async def _ticker(stop: asyncio.Event, lateness: list[float], period: float = 0.001) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(period)
        lateness.append(time.perf_counter() - t - period)


async def play_round(args, clock: Clock, config, tokenizer, env_kwargs: dict, task: int, walk: list[str]) -> dict:
    """``args.sessions`` sessions of one task, each loop built per session as verl's worker does."""
    import hydra.utils
    from verl.experimental.agent_loop.agent_loop import (
        DictConfigWrap,
        ToolListWrap,
        _agent_loop_registry,
    )
    from verl.utils.dataset.rl_dataset import RLHFDataset

    server = StandInServer(tokenizer, walk, args.gen_ms / 1000, args.detour)
    server.generate = clock.timed_async("stand-in server", server.generate)
    spec = json.dumps({"env_id": "ALFWorld-Rubric-v0", "env_kwargs": env_kwargs, "task": task, "seed": 0,
                       "style": "action_only", "env_workers": args.env_workers})

    async def session(s: int):
        agent_loop = hydra.utils.instantiate(
            config=_agent_loop_registry["rubricgym_env"], trainer_config=DictConfigWrap(config=config),
            server_manager=server, tokenizer=tokenizer, processor=None, hf_model_type=None,
            dataset_cls=RLHFDataset, data_config=DictConfigWrap(config.data), tools=ToolListWrap([]))
        return await agent_loop.run({"temperature": 1.0}, uid=f"u{task}", session_id=s, raw_prompt=[],
                                    extra_info={"index": task, "rubricgym": spec})

    stop, lateness = asyncio.Event(), []
    tick = asyncio.ensure_future(_ticker(stop, lateness))
    await asyncio.sleep(0.01)
    t0 = time.perf_counter()
    tasks = [asyncio.create_task(session(s), name=f"session-{s}") for s in range(args.sessions)]
    clock.recording = True  # from the sessions' first callbacks on
    outputs = await asyncio.gather(*tasks)
    clock.recording = False
    wall = time.perf_counter() - t0
    stop.set()
    await tick
    won = sum(out[-1].extra_fields["reward_extra_info"]["success"] == 1.0 for out in outputs)
    row = {"wall_s": wall, "won": int(won), "steps": sum(len(o) for o in outputs)}
    row["stall_max_ms"], row["stall_p99_ms"] = _stall(lateness)
    floor: list[float] = []  # the same ticker alone for a second: what the machine imposes
    stop = asyncio.Event()
    tick = asyncio.ensure_future(_ticker(stop, floor))
    await asyncio.sleep(1.0)
    stop.set()
    await tick
    row["floor_max_ms"], row["floor_p99_ms"] = _stall(floor)
    return row


def _stall(lateness: list[float]) -> tuple[float, float]:
    late = sorted(lateness) or [0.0]
    return 1000 * late[-1], 1000 * late[int(0.99 * (len(late) - 1))]


def _ours(parts: dict[str, list[float]], i: int) -> float:
    return sum(v[i] for k, v in parts.items() if k.startswith(OURS))


def summarise(clock: Clock, row: dict) -> dict:
    """The longest turn (wall), and the turns with the most of our wall and of our CPU time."""
    turns, clock.turns = clock.turns, []

    def brief(turn) -> dict:
        parts = sorted(turn["parts"].items(), key=lambda kv: -kv[1][1])
        return {"wall_ms": 1000 * turn["wall"], "cpu_ms": 1000 * turn["cpu"], "what": dict(turn["what"]),
                "parts": {k: [1000 * v[0], 1000 * v[1]] for k, v in parts}}

    row["turns"] = len(turns)
    row["longest"] = brief(max(turns, key=lambda t: t["wall"]))
    row["ours_wall"] = brief(max(turns, key=lambda t: _ours(t["parts"], 0)))
    row["ours_cpu"] = brief(max(turns, key=lambda t: _ours(t["parts"], 1)))
    row["ours_max_wall_ms"] = _ours(row["ours_wall"]["parts"], 0)
    row["ours_max_cpu_ms"] = _ours(row["ours_cpu"]["parts"], 1)
    return row


def _parts(turn: dict) -> str:
    """The turn's callbacks, then ``label wall/cpu`` for each labelled part and the rest."""
    shown = [f"{k} {w:.1f}/{c:.1f}" for k, (w, c) in turn["parts"].items() if w >= 0.05]
    rest_w = turn["wall_ms"] - sum(w for w, _ in turn["parts"].values())
    rest_c = turn["cpu_ms"] - sum(c for _, c in turn["parts"].values())
    what = ", ".join(f"{n} x {name}" for name, n in turn["what"].items())
    return f"{turn['wall_ms']:.1f}/{turn['cpu_ms']:.1f} ms ({what}): " + ", ".join(
        [*shown, f"other {rest_w:.1f}/{rest_c:.1f}"])


def _print_profiles(turns: list[dict], top: int) -> None:
    for turn in sorted(turns, key=lambda t: -t["wall"])[:3]:
        out = io.StringIO()
        pstats.Stats(turn["profile"], stream=out).sort_stats("cumulative").print_stats(top)
        what = ", ".join(f"{n} x {name}" for name, n in turn["what"].items())
        print(f"--- cProfile of a {1000 * turn['wall']:.1f} ms turn ({what}; profiled, so inflated)")
        print("\n".join(line for line in out.getvalue().splitlines()[6:] if line.strip()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3, help="round 1: first episodes; then warm rounds")
    ap.add_argument("--gen-ms", type=float, default=20.0, help="the stand-in server's answer delay")
    ap.add_argument("--detour", type=int, default=10, help="'look' steps before each walkthrough")
    ap.add_argument("--env-workers", type=int, default=1)
    ap.add_argument("--split", default="generated", help="generated (default) or a real split under $ALFWORLD_DATA")
    ap.add_argument("--games", type=int, default=4, help="generated games (--split generated)")
    ap.add_argument("--profile", action="store_true", help="cProfile each turn; print the longest ones")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    import verl  # noqa: F401  (loads the plugin: wrappers.integrations.verl, as in verl's workers)

    from trainers.models import build_tiny_tokenizer

    env_kwargs = {"split": args.split}
    if args.split == "generated":
        env_kwargs.update(generated_n=args.games, generated_seed=3)
    tasks = list(range(args.rounds))
    walks = [walkthrough(env_kwargs, t % (args.games if args.split == "generated" else 10 ** 6)) for t in tasks]
    config, tokenizer = trainer_config(args.sessions), build_tiny_tokenizer()
    clock = Clock()
    install(clock)
    clock.profiling = args.profile
    gc.collect()

    async def rounds():
        rows = []
        for r, (task, walk) in enumerate(zip(tasks, walks)):
            row = await play_round(args, clock, config, tokenizer, env_kwargs, task, walk)
            row.update(round=r + 1, task=task)
            if args.profile:
                print(f"== round {r + 1} (task {task}, {'first episodes' if r == 0 else 'warm pool'})")
                _print_profiles(clock.turns, args.top)
                clock.turns = []
            else:
                rows.append(summarise(clock, row))
        return rows

    rows = asyncio.run(rounds())
    if args.profile:
        return
    print(f"verl agent loop: {args.sessions} concurrent sessions, ALFWorld split {args.split}, stand-in server "
          f"{args.gen_ms:g} ms, detour {args.detour}, env_workers={args.env_workers}; {date.today()}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print("stall: the ticker's lateness; floor: the ticker alone after the round; a turn: the callbacks of one "
          "turn of the event loop; ours: rubricgym's exclusive time in one turn (wall / this thread's CPU)")
    print(f"{'round':>5} {'won':>5} {'steps':>5} {'wall':>6} {'stall max':>9} {'p99':>5} {'floor max':>9} "
          f"{'p99':>5} {'longest turn':>12} {'ours max wall':>13} {'ours max cpu':>12}")
    for row in rows:
        print(f"{row['round']:>5} {row['won']:>2}/{args.sessions:<2} {row['steps']:>5} {row['wall_s']:>5.2f}s "
              f"{row['stall_max_ms']:>7.1f}ms {row['stall_p99_ms']:>5.1f} {row['floor_max_ms']:>7.1f}ms "
              f"{row['floor_p99_ms']:>5.1f} {row['longest']['wall_ms']:>10.1f}ms {row['ours_max_wall_ms']:>11.1f}ms "
              f"{row['ours_max_cpu_ms']:>10.1f}ms")
    for row in rows:
        print(f"round {row['round']} ({'first episodes' if row['round'] == 1 else 'warm pool'}), parts in ms "
              "(wall/CPU):")
        print(f"  longest turn       {_parts(row['longest'])}")
        print(f"  ours max (wall)    {_parts(row['ours_wall'])}")
        print(f"  ours max (CPU)     {_parts(row['ours_cpu'])}")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()

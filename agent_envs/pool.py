"""Persistent environments in this process, in worker processes or in Ray actors.

:class:`EnvPool` keeps environments of one kind alive between episodes (an ALFWorld game that
is played again resets fast; building a WebShop catalogue or search index happens once) and
steps them two ways:

* **batched and synchronous** — :meth:`EnvPool.reset` / :meth:`EnvPool.step` /
  :meth:`EnvPool.call` take one item per environment and return when all are done; items of
  different workers run in parallel.  :class:`~agent_envs.rollout.GroupRunner`'s lock-step
  loop, the trainer and the arena use this;
* **one environment at a time, asynchronously** — ``await pool.areset(k, ...)`` /
  ``await pool.astep(k, action)`` never block the caller's event loop: the environment runs in
  its worker and the reply resolves a future.  A GPU trainer's agent loop (verl's
  ``rubricgym_env``), :meth:`GroupRunner.arun <agent_envs.rollout.GroupRunner.arun>` and
  TRL's rollout step hundreds of episodes concurrently this way.

Where environments live (``workers`` and ``backend``):

* ``workers=0``: in this process.  Synchronous calls run on the caller's thread; asynchronous
  ones on one dedicated engine thread (engines such as ALFWorld's TextWorld are not
  thread-safe, so one pool never touches its environments from two threads at once — do not
  mix synchronous and asynchronous calls on an in-process pool concurrently).  A full garbage
  collection of the engine's objects still pauses the event loop: use workers for that.
* ``workers=W, backend="process"`` (default): W worker processes (``spawn``), environment ``k``
  in worker ``k % W``.  No thread of this process stands in between: a synchronous call sends
  to every worker concerned, then reads their replies; asynchronous calls made in one turn of
  the event loop go to a worker as one message at the end of that turn (or after the reply in
  flight), and the loop's selector waits for the reply.  The replies of a message come back
  together; the awaiting coroutines are resumed a few at a time (:data:`_RESUME_SLICE` per
  turn of the event loop), so the loop's other callbacks do not wait for a whole batch of
  episodes' work.  One event loop at a time may have steps in flight on a worker, and
  synchronous calls wait until it has none (a loop that ended with steps in flight, its
  coroutines cancelled, leaves their replies to be dropped).
* ``workers=W, backend="ray"``: W Ray actors (``pip install rubricgym[ray]``; an initialised
  Ray, e.g. inside verl or OpenRLHF, or a local one started with ``ray.init``), so a multi-node
  job spreads its environments over the cluster; ``ray_options`` go to ``actor.options``
  (default ``{"num_cpus": 1}``).
* ``backend="remote", urls=[...]``: on OpenEnv servers (``rubricgym serve``; ``pip install
  rubricgym[openenv]``), environment ``k`` a WebSocket session on server ``k % len(urls)``
  (:mod:`agent_envs.remote_pool`; ``workers`` is the number of servers).

A worker that raises reports the traceback for that item only (other items of the same
message still run); a worker that dies, is stopped (SIGSTOP) or does not reply within
``timeout`` seconds (worker processes) makes every later call raise :class:`RolloutWorkerError` naming it.

Example:
    >>> import asyncio
    >>> pool = EnvPool("CartPole-v1", n=2)
    >>> [len(obs) for obs, info in pool.reset([(0, 1, None), (1, 1, None)])]
    [4, 4]
    >>> async def one_step():
    ...     obs, reward, terminated, truncated, info = await pool.astep(0, 1)
    ...     return reward
    >>> asyncio.run(one_step())
    1.0
    >>> pool.close()
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import os
import pickle
import queue
import struct
import sys
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, NamedTuple

from agent_envs.registration import make_env

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["BACKENDS", "EnvFactory", "EnvPool", "PooledEnv", "RolloutWorkerError"]

logger = logging.getLogger(__name__)

EnvFactory = Callable[[], Any]

#: Where a pool with workers keeps its environments ("remote": OpenEnv servers, :mod:`agent_envs.remote_pool`).
BACKENDS = ("process", "ray", "remote")

#: Seconds between checks that a worker being waited for is still running (its reply ends the wait at once).
_POLL_S = 0.5

#: Most requests one message to a worker carries (the rest wait for the next message).
_MAX_BATCH = 512

#: Most awaiting episodes resumed in one turn of the caller's event loop when a batch's replies
#: come back together (the rest in the next turns, after the loop's other ready callbacks).
_RESUME_SLICE = 8

#: One request: ``("reset", (k, seed, options))`` or ``("step", (k, action))``.
Request = tuple[str, tuple]


class RolloutWorkerError(RuntimeError):
    """An environment raised inside a worker (the message carries its traceback), or a worker
    died, was stopped or did not reply in time (the message names it)."""


class _WorkerStopped(ChildProcessError):
    """A worker that is stopped (SIGSTOP/SIGTSTP), so its reply never comes."""


class _WorkerTimeout(TimeoutError):
    """A worker that did not reply within the pool's ``timeout``."""


def _process_state(pid: int | None) -> str:
    """The process state letter of ``pid`` from Linux ``/proc`` (``"T"``: stopped by a signal,
    ``"Z"``: exited); ``""`` where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError, ValueError):
        return ""


def _proc_cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of ``pid`` from Linux ``/proc`` (0 where it cannot be read)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    except (OSError, IndexError, ValueError):
        return 0.0


# ------------------------------------------------------------------------------------------
# What every host runs: make an environment on first use, reset or step it
# ------------------------------------------------------------------------------------------


def _apply_one(envs: dict[int, Any], env: str | EnvFactory, env_kwargs: Mapping[str, Any], cmd: str, item: tuple) -> Any:
    k = item[0]
    if k not in envs:
        envs[k] = make_env(env, env_kwargs)
    if cmd == "reset":
        return envs[k].reset(seed=item[1], options=item[2])
    if cmd == "step":
        return envs[k].step(item[1])
    raise ValueError(f"unknown command {cmd!r}")  # pragma: no cover - internal protocol


def _serve(envs: dict[int, Any], env: str | EnvFactory, env_kwargs: Mapping[str, Any], requests: Sequence[Request],
           *, keep_exceptions: bool = False) -> list[tuple[str, Any]]:
    """Run ``requests`` in order: ``("ok", result)`` or ``("error", traceback text)`` each
    (``("raised", exception)`` with ``keep_exceptions``, for hosts in this process)."""
    out: list[tuple[str, Any]] = []
    for cmd, item in requests:
        try:
            out.append(("ok", _apply_one(envs, env, env_kwargs, cmd, item)))
        except Exception as exc:  # noqa: BLE001  (forwarded to the caller)
            out.append(("raised", exc) if keep_exceptions else ("error", traceback.format_exc()))
    return out


def _close_all(envs: dict[int, Any]) -> None:
    for e in envs.values():
        try:
            e.close()
        except Exception:
            logger.debug("closing an environment failed", exc_info=True)
    envs.clear()


def _worker_main(conn: Any, env: str | EnvFactory, env_kwargs: Mapping[str, Any], nice: int = 0,
                 idle: bool = False) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if nice:
        os.nice(nice)
    if idle:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    envs: dict[int, Any] = {}
    try:
        while True:
            msg = conn.recv()
            if msg is None:
                break
            conn.send(_serve(envs, env, env_kwargs, msg))
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        _close_all(envs)


# ------------------------------------------------------------------------------------------
# Hosts: synchronous calls get a future-like object (submit), asynchronous ones post a job
# ------------------------------------------------------------------------------------------


class _Awaiting(NamedTuple):
    """Where the replies of an asynchronous job go: ``out``, a future of ``resumer``'s event loop."""

    resumer: _Resumer
    out: asyncio.Future


#: An asynchronous job: its requests and where their replies go.
Job = tuple[list[Request], _Awaiting]


def _deliver(jobs: Sequence[Job], replies: Sequence[tuple[str, Any]] | None = None,
             error: BaseException | None = None) -> None:
    """Queue each job's share of ``replies`` (or ``error``) on its :class:`_Resumer`, on whatever
    thread has them, and wake each resumer once however many of its jobs were answered."""
    woken: dict[int, _Resumer] = {}
    at = 0
    for reqs, to in jobs:
        to.resumer.ready.append((to.out, error if error is not None else replies[at : at + len(reqs)]))
        at += len(reqs)
        woken[id(to.resumer)] = to.resumer
    for resumer in woken.values():
        resumer.wake()


class _ThreadHost:
    """The environments of an in-process pool, served on one dedicated engine thread that
    drains a queue of jobs, batching every job queued meanwhile into one pass."""

    def __init__(self, pool: EnvPool) -> None:
        self._pool = pool
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"rubricgym-env-{pool.name}", daemon=True)
        self._thread.start()

    def post(self, requests: Sequence[Request], to: _Awaiting) -> None:
        """Queue ``requests``; their replies resolve ``to.out`` on its event loop."""
        self._jobs.put((list(requests), to))

    def _take(self) -> tuple[list[Job], bool]:
        """The next jobs (at least one, up to :data:`_MAX_BATCH` requests) and whether to stop."""
        first = self._jobs.get()
        if first is None:
            return [], True
        jobs, size = [first], len(first[0])
        while size < _MAX_BATCH:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
            size += len(job[0])
        return jobs, False

    def _run(self) -> None:
        p, stop = self._pool, False
        while not stop:
            jobs, stop = self._take()
            # read from this thread: a cancellation racing it still runs the job
            jobs = [(reqs, to) for reqs, to in jobs if not to.out.cancelled()]
            if not jobs:
                continue
            try:
                replies = _serve(p.local, p.env, p.env_kwargs, [r for reqs, _ in jobs for r in reqs],
                                 keep_exceptions=True)
            except BaseException as exc:  # noqa: BLE001  (a bug: hand it to the callers)
                _deliver(jobs, error=exc)
            else:
                _deliver(jobs, replies)

    def close(self, wait: float = 30.0) -> None:
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join(timeout=wait)


class _Pending:
    """The reply to a message already sent to a worker process, read when asked for."""

    def __init__(self, host: _ProcessHost, error: RolloutWorkerError | None = None) -> None:
        self.host, self.error = host, error

    def result(self) -> list[tuple[str, Any]]:
        if self.error is not None:
            raise self.error
        return self.host.receive()


def _main_module_hint() -> str:
    """The likely cause of a spawned worker's exit when the main module is a script without an
    ``if __name__ == "__main__":`` guard, or one read from stdin: a spawned worker imports the
    main module again (as ``__mp_main__``), so an unguarded script starts the pool again inside
    the worker, which fails, and a script from stdin cannot be read again ("" otherwise)."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            guarded = "__main__" in f.read()
    except OSError:
        return (f". Likely cause: a spawned worker imports the main module again, and {path!r} (a script "
                f"piped into python?) cannot be read again: save the script to a file and run that")
    if guarded:
        return ""
    return (f". Likely cause: a spawned worker imports the main module again, so {path} runs again inside "
            f"it and tries to start the pool there: put the script's code under "
            f"`if __name__ == \"__main__\":`")


class _ProcessHost:
    """One worker process and the socket to it, with no thread of this process in between.

    Synchronous calls send a message and read its reply in the calling thread (:meth:`submit`
    sends at once, so every worker computes while the caller reads the first reply).
    Asynchronous calls (:meth:`post`) are queued; at the end of the current turn of the
    caller's event loop everything queued goes in one message, and the loop's own selector
    waits for the reply (a reader on the socket) while a watchdog timer checks every
    :data:`_POLL_S` seconds that the worker still runs.  Jobs posted while a message is in
    flight go in the next one.  No thread of this process competes with the loop for the
    GIL (the I/O-thread design before it stalled the loop longer on 2 cores: the README puts
    the two side by side, measured with ``bench/env_concurrency.py``)."""

    def __init__(self, index: int, ctx: Any, pool: EnvPool) -> None:
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, pool.env, pool.env_kwargs, pool.worker_nice,
                                                            pool.worker_idle), daemon=True)
        self.proc.start()
        child.close()
        self.spawned = ctx.get_start_method() != "fork"  # the worker imports the main module again
        self.index, self.conn, self.timeout = index, parent, pool.timeout
        self._broken: RolloutWorkerError | None = None
        self._stuck = False
        self._buf = bytearray()  # bytes of a reply not yet complete
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop reading the reply in flight
        self._outbox: deque[Job] = deque()
        self._in_flight: list[Job] | None = None
        self._flush_handle: asyncio.Handle | None = None
        self._watch: asyncio.TimerHandle | None = None
        self._sent_at = 0.0

    # --- synchronous --------------------------------------------------------------------

    def submit(self, requests: Sequence[Request]) -> _Pending:
        """Send ``requests`` now; the returned object's ``result()`` reads the replies."""
        self._settle_loop("step it synchronously")
        if self._broken is None:
            try:
                self.conn.send(list(requests))
            except OSError as exc:  # BrokenPipeError: killed between calls
                self._break(exc)
        return _Pending(self, self._broken)

    def receive(self) -> list[tuple[str, Any]]:
        """The reply to the message sent last, read in this thread."""
        try:
            return self._read_reply()
        except (EOFError, OSError, _WorkerStopped, _WorkerTimeout) as exc:
            raise self._break(exc) from exc

    def _break(self, exc: BaseException) -> RolloutWorkerError:
        """Mark this host lost for good (every later call raises the same error)."""
        self._broken = RolloutWorkerError(self._describe(exc))
        self._stuck = isinstance(exc, _WorkerTimeout)  # still busy: close kills it
        return self._broken

    def _read_reply(self) -> Any:
        """Read until a whole reply has arrived; checks every :data:`_POLL_S` seconds of waiting
        that the worker still runs and that ``timeout`` has not passed."""
        start = time.monotonic()
        while (body := self._frame()) is None:
            if self.conn.poll(_POLL_S):
                self._read_some()
            else:
                self._check_running(start)
        return pickle.loads(body)

    # --- asynchronous -------------------------------------------------------------------

    def post(self, requests: Sequence[Request], to: _Awaiting) -> None:
        """Queue ``requests`` to go at the end of this turn of ``to``'s loop (or after the
        reply in flight); their replies resolve ``to.out``."""
        loop = to.resumer.loop
        if self._loop is not loop:
            self._settle_loop("await it from another event loop")
            self._loop = loop
        if self._broken is not None:
            _deliver([(list(requests), to)], error=self._broken)
            return
        self._outbox.append((list(requests), to))
        if self._in_flight is None and self._flush_handle is None:
            self._flush_handle = loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Send every queued job still wanted (up to :data:`_MAX_BATCH` requests) as one message."""
        self._flush_handle = None
        jobs, size = [], 0
        while self._outbox and size < _MAX_BATCH:
            reqs, to = self._outbox.popleft()
            if not to.out.cancelled():
                jobs.append((reqs, to))
                size += len(reqs)
        if not jobs:
            self._idle()
            return
        try:
            self.conn.send([r for reqs, _ in jobs for r in reqs])
        except OSError as exc:
            self._fail(exc, jobs)
            return
        loop = self._loop
        self._in_flight, self._sent_at = jobs, time.monotonic()
        if self._watch is None:
            loop.add_reader(self.conn.fileno(), self._readable)
            self._watch = loop.call_later(_POLL_S, self._watchdog)

    def _readable(self) -> None:
        try:
            self._read_some()
        except (EOFError, OSError) as exc:
            self._fail(exc)
            return
        body = self._frame()
        if body is None:
            return
        jobs, self._in_flight = self._in_flight or [], None
        _deliver(jobs, pickle.loads(body))
        if self._outbox:
            self._flush()
        else:
            self._idle()

    def _watchdog(self) -> None:
        try:
            self._check_running(self._sent_at)
        except (EOFError, _WorkerStopped, _WorkerTimeout) as exc:
            self._fail(exc)
            return
        self._watch = self._loop.call_later(_POLL_S, self._watchdog)

    def _idle(self) -> None:
        """Nothing in flight: stop watching the socket, so another loop may use this host."""
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
            self._loop.remove_reader(self.conn.fileno())
        if not self._outbox and self._flush_handle is None:
            self._loop = None

    def _fail(self, exc: BaseException, jobs: list | None = None) -> None:
        self._break(exc)
        jobs = [*(jobs or []), *(self._in_flight or []), *self._outbox]
        self._in_flight = None
        self._outbox.clear()
        self._idle()
        _deliver(jobs, error=self._broken)

    def _settle_loop(self, doing: str) -> None:
        """Before this host is used by a caller other than :attr:`_loop`: a loop that ended
        with a reply in flight (its coroutines were cancelled) leaves it to be read and
        dropped here; a loop still running keeps it."""
        loop = self._loop
        if loop is None:
            return
        if not loop.is_closed():
            raise RuntimeError(f"rollout worker {self.index} has steps in flight on a running event loop; "
                               f"await them before you {doing}")
        self._watch = self._flush_handle = None  # the closed loop's handles and reader went with it
        in_flight, self._in_flight, self._loop = self._in_flight, None, None
        self._outbox.clear()
        if in_flight is not None and self._broken is None:
            try:
                self.receive()
            except RolloutWorkerError:
                pass

    # --- shared -------------------------------------------------------------------------

    def _read_some(self) -> None:
        data = os.read(self.conn.fileno(), 1 << 20)
        if not data:
            raise EOFError(f"rollout worker {self.index} exited without replying")
        self._buf += data

    def _frame(self) -> bytes | None:
        """One whole message off the front of the buffer (multiprocessing's framing: a 4-byte
        signed big-endian length, -1 then an 8-byte length for messages of 2 GiB or more)."""
        buf = self._buf
        if len(buf) < 4:
            return None
        (size,), start = struct.unpack("!i", buf[:4]), 4
        if size == -1:
            if len(buf) < 12:
                return None
            (size,), start = struct.unpack("!Q", buf[4:12]), 12
        if len(buf) < start + size:
            return None
        body = bytes(buf[start : start + size])
        del buf[: start + size]
        return body

    def _check_running(self, since: float) -> None:
        """Raise if the worker has exited (``EOFError``), is stopped — read from Linux ``/proc``
        — (:class:`_WorkerStopped`) or has been answering for longer than ``timeout``."""
        if not self.proc.is_alive():
            raise EOFError(f"rollout worker {self.index} exited without replying")
        if _process_state(self.proc.pid) == "T":
            raise _WorkerStopped(f"rollout worker {self.index} is stopped")
        if self.timeout is not None and time.monotonic() - since > self.timeout:
            raise _WorkerTimeout(f"rollout worker {self.index} did not reply")

    def _describe(self, exc: BaseException) -> str:
        w, pid = self.index, self.proc.pid
        lost = "its environments are lost, close this pool and make a new one"
        if isinstance(exc, _WorkerStopped):
            return f"rollout worker {w} (pid {pid}) is stopped (by SIGSTOP or SIGTSTP), so its reply would never come; {lost}"
        if isinstance(exc, _WorkerTimeout):
            return (f"rollout worker {w} (pid {pid}) did not reply within {self.timeout:g} s (an environment "
                    f"step that never ends?); {lost}")
        self.proc.join(timeout=1.0)
        code = self.proc.exitcode
        how = "is still running but its pipe is closed" if code is None else (
            f"was killed by signal {-code}" if code < 0 else f"exited with code {code}")
        hint = _main_module_hint() if self.spawned and code is not None and code > 0 else ""
        return f"rollout worker {w} (pid {pid}) died: it {how}; {lost}{hint}"

    def cpu_seconds(self) -> float:
        return _proc_cpu_seconds(self.proc.pid)

    def close(self) -> None:
        loop = self._loop
        if self._watch is not None and loop is not None and not loop.is_closed():
            self._watch.cancel()
            loop.remove_reader(self.conn.fileno())
        self._watch = self._flush_handle = self._loop = None
        if self._stuck or _process_state(self.proc.pid) == "T":  # busy forever, or stopped: it reads no None and ignores SIGTERM
            self.proc.kill()
        else:
            try:
                self.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=5)
        self.conn.close()


class _EnvActor:
    """The body of a Ray actor holding environments (Ray runs its calls one at a time, so the
    engine stays on one thread)."""

    def __init__(self, env: str | EnvFactory, env_kwargs: Mapping[str, Any]) -> None:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        self.env, self.env_kwargs, self.envs = env, dict(env_kwargs), {}

    def serve(self, requests: list[Request]) -> list[tuple[str, Any]]:
        return _serve(self.envs, self.env, self.env_kwargs, requests)

    def cpu_seconds(self) -> float:
        return _proc_cpu_seconds(os.getpid())

    def close(self) -> None:
        _close_all(self.envs)


class _RayHost:
    """One Ray actor; its calls' ObjectRefs are turned into futures that raise
    :class:`RolloutWorkerError` when the actor is gone."""

    _actor_class: Any = None

    def __init__(self, index: int, pool: EnvPool) -> None:
        try:
            import ray
        except ImportError as exc:
            raise ImportError("backend='ray' needs Ray: pip install 'rubricgym[ray]'") from exc
        if not ray.is_initialized():
            raise RuntimeError("backend='ray' needs a running Ray: call ray.init() (or run inside a Ray job) first")
        if _RayHost._actor_class is None:
            _RayHost._actor_class = ray.remote(_EnvActor)
        self.ray, self.index = ray, index
        self.actor = _RayHost._actor_class.options(**pool.ray_options).remote(pool.env, pool.env_kwargs)
        self._broken: RolloutWorkerError | None = None

    def submit(self, requests: Sequence[Request]) -> Future:
        out: Future = Future()
        if self._broken is not None:
            out.set_exception(self._broken)
            return out
        ref_future = self.actor.serve.remote(list(requests)).future()
        ref_future.add_done_callback(lambda f: self._settle(f, out))
        return out

    def post(self, requests: Sequence[Request], to: _Awaiting) -> None:
        """:meth:`submit`, the replies resolving ``to.out`` on its event loop (from Ray's thread)."""
        job = (list(requests), to)

        def settled(done: Future) -> None:
            error = done.exception()
            _deliver([job], None if error is not None else done.result(), error)

        self.submit(job[0]).add_done_callback(settled)

    def _settle(self, done: Future, out: Future) -> None:
        exc = done.exception()
        if exc is None:
            out.set_result(done.result())
            return
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        why = " ".join(dict.fromkeys(lines[:1] + lines[-1:]))  # Ray's first and last lines; the middle is ids
        self._broken = RolloutWorkerError(f"Ray env actor {self.index} failed: {type(exc).__name__}: {why}; "
                                          "its environments are lost, close this pool and make a new one")
        out.set_exception(self._broken)

    def cpu_seconds(self) -> float:
        try:
            return float(self.ray.get(self.actor.cpu_seconds.remote(), timeout=10))
        except Exception:  # noqa: BLE001  (a dead actor has used what it used)
            return 0.0

    def close(self) -> None:
        try:
            self.ray.get(self.actor.close.remote(), timeout=10)
        except Exception:
            logger.debug("closing a Ray env actor failed", exc_info=True)
        self.ray.kill(self.actor)


class _Resumer:
    """Hands replies from hosts' threads to the awaiting coroutines of one event loop, at most
    :data:`_RESUME_SLICE` per turn of the loop.

    A host's thread only appends ``(future, outcome)`` pairs to :attr:`ready` and wakes the
    loop once per answered batch (:meth:`wake`); everything else happens on the loop's thread,
    so the loop never waits for a lock or a future's condition that a host's thread holds (a
    contended lock hands the GIL to that thread, and getting it back can take the whole switch
    interval, 5 ms).  ``asyncio.wrap_future`` would also schedule every reply of a batch at
    once, and the loop would then run every resumed episode (its policy call, its bookkeeping)
    before any other ready callback: the batch's size times an episode's work, one stall.  Here
    the drain resumes a slice, then queues itself behind whatever became ready meanwhile (a
    timer, another coroutine)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.ready, self.draining = loop, deque(), False

    def wake(self) -> None:
        """Schedule a drain, after appending to :attr:`ready`: from the loop's own thread (a
        worker process's reply read by the loop) without writing to the loop's self-pipe."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:  # a host's thread
            running = None
        try:
            (self.loop.call_soon if running is self.loop else self.loop.call_soon_threadsafe)(self._kick)
        except RuntimeError:  # the caller's loop ended without awaiting these replies
            pass

    def _kick(self) -> None:  # on the loop's thread, like everything that reads ``draining``
        if not self.draining:
            self.draining = True
            self._drain()

    def _drain(self) -> None:
        for _ in range(_RESUME_SLICE):
            try:
                out, outcome = self.ready.popleft()
            except IndexError:
                break
            if out.done():  # cancelled while its job ran
                continue
            if isinstance(outcome, BaseException):
                out.set_exception(outcome)
            else:
                out.set_result(outcome)
        if self.ready:
            self.loop.call_soon(self._drain)
        else:  # a later append comes with its own wake
            self.draining = False


# ------------------------------------------------------------------------------------------
# The pool
# ------------------------------------------------------------------------------------------


class EnvPool:
    """Persistent environments of one kind, in this process, in worker processes or in Ray actors.

    Environment ``k`` is made on first use and lives in this process (``workers=0``) or in
    worker ``k % workers`` for the pool's lifetime; it is reset to a new task for every
    episode.  See the module docstring for the two ways to step it.

    Args:
        env: A Gymnasium id (made with ``gym.make(env, **env_kwargs)``) or a zero-argument
            factory returning an environment (picklable for workers: a module-level function
            or ``functools.partial``).
        env_kwargs: Keyword arguments for ``gym.make`` (ignored with a factory).
        n: Number of slots (indices ``0..n-1``; ``None``: unbounded).
        workers: Worker processes or Ray actors (0 = environments in this process; at most ``n``).
        start_method: multiprocessing start method of worker processes (``spawn``: safe after
            torch or an engine has been imported).
        backend: ``"process"`` or ``"ray"`` (used when ``workers > 0``), or ``"remote"`` (with ``urls``).
        ray_options: Options of each Ray actor (``actor.options(**ray_options)``).
        urls: The OpenEnv servers of ``backend="remote"`` (``http://host:port`` each).
        timeout: Seconds a worker process may take to answer one message before the pool gives
            it up (``None``: no limit; a dead or stopped worker is detected either way).  Worker
            processes and remote servers: a Ray actor's failures are Ray's to report.
        worker_nice: Niceness each worker process adds to its own (``os.nice``, 0-19; worker
            processes only).  Above 0 the environments yield the cores to this process's event
            loop when they compete for them (on a 2-core machine with 2 workers the loop's
            longest stall fell from 7.4-12.5 to 4.0-4.7 ms at 10 and its 99th percentile from
            3.9-4.2 to 0.9-1.0 ms, the workers as busy; ``bench/env_concurrency.py --worker-nice
            10``; single longer waits for a core remained on a busy host, which ``worker_idle``
            removed); 0 leaves the priority as it is.
        worker_idle: Run each worker process under Linux's ``SCHED_IDLE`` policy (worker
            processes only, not with ``worker_nice``): the environments get only the cores that
            no other process wants, and any of this machine's ordinary threads (the trainer's
            event loop, its data loaders) takes a core from them at once.  For a caller that
            shares the cores with its workers (2 cores, 2 workers: longest stall 3.3-5.0 ms,
            99th percentile 0.9 ms; ``bench/env_concurrency.py --worker-idle``); on a machine
            whose cores are busy with other work the environments would get little time.
    """

    def __init__(self, env: str | EnvFactory, env_kwargs: Mapping[str, Any] | None = None, n: int | None = None, *,
                 workers: int = 0, start_method: str = "spawn", backend: str = "process",
                 ray_options: Mapping[str, Any] | None = None, timeout: float | None = None,
                 worker_nice: int = 0, worker_idle: bool = False, urls: Sequence[str] | None = None) -> None:
        if not (isinstance(env, str) or callable(env)):
            raise TypeError(f"env must be a Gymnasium id or a factory, got {type(env).__name__}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(f"workers must be a non-negative int, got {workers!r}")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"n must be a positive int or None, got {n!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
        if (backend == "remote") != (urls is not None):
            raise ValueError("backend='remote' takes the servers' urls, and urls go only with backend='remote'")
        if backend == "remote":
            from agent_envs.remote_pool import check_urls

            workers = len(check_urls(urls))
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
        if isinstance(worker_nice, bool) or not isinstance(worker_nice, int) or not 0 <= worker_nice <= 19:
            raise ValueError(f"worker_nice must be an int in 0..19, got {worker_nice!r}")
        if worker_nice and not (workers and backend == "process"):
            raise ValueError("worker_nice applies to worker processes (workers > 0, backend='process'); "
                             "in this process or on Ray it would change another process's priority")
        if worker_idle and not (workers and backend == "process"):
            raise ValueError("worker_idle applies to worker processes (workers > 0, backend='process')")
        if worker_idle and worker_nice:
            raise ValueError("give worker_idle or worker_nice, not both (SCHED_IDLE ignores niceness)")
        if worker_idle and not hasattr(os, "SCHED_IDLE"):
            raise ValueError("worker_idle needs Linux's SCHED_IDLE scheduling policy")
        self.env, self.env_kwargs, self.n = env, dict(env_kwargs or {}), n
        self.worker_nice, self.worker_idle = worker_nice, bool(worker_idle)
        self.workers = workers if n is None else min(workers, n)
        self.backend, self.timeout = backend, timeout
        self.ray_options = dict(ray_options) if ray_options is not None else {"num_cpus": 1}
        self.name = env if isinstance(env, str) else getattr(env, "__name__", type(env).__name__)
        self.local: dict[int, Any] = {}
        self._thread_host: _ThreadHost | None = None
        self._lock = threading.Lock()
        self._resumers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Resumer] = weakref.WeakKeyDictionary()
        self.hosts: list[Any] = []
        if self.workers and backend == "process":
            ctx = mp.get_context(start_method)
            self.hosts = [_ProcessHost(w, ctx, self) for w in range(self.workers)]
        elif self.workers and backend == "remote":
            from agent_envs.remote_pool import make_remote_hosts

            self.hosts = make_remote_hosts(self, list(urls)[: self.workers])
        elif self.workers:
            self.hosts = [_RayHost(w, self) for w in range(self.workers)]

    @property
    def procs(self) -> list[Any]:
        """The worker processes (``backend="process"``; empty otherwise)."""
        return [h.proc for h in self.hosts if isinstance(h, _ProcessHost)]

    # --- batched, synchronous -------------------------------------------------------------

    def reset(self, items: Sequence[tuple[int, int | None, Mapping[str, Any] | None]]) -> list[tuple[Any, dict[str, Any]]]:
        """Reset environments: ``(index, seed, options)`` -> ``(obs, info)`` each, in order."""
        return self.call("reset", items)

    def step(self, items: Sequence[tuple[int, Any]]) -> list[tuple[Any, float, bool, bool, dict[str, Any]]]:
        """Step environments: ``(index, action)`` -> the Gymnasium 5-tuple each, in order."""
        return self.call("step", items)

    def call(self, cmd: str, items: Sequence[tuple]) -> list[Any]:
        """Run ``cmd`` (``"reset"`` or ``"step"``) for each ``(k, ...)`` item; results in item order.

        Raises:
            IndexError: an index outside ``0..n-1``.
            RolloutWorkerError: an environment raised in a worker (with its traceback), or a
                worker died, was stopped or timed out.
        """
        for item in items:
            self._check_index(item[0])
        if not self.workers:
            return [_apply_one(self.local, self.env, self.env_kwargs, cmd, item) for item in items]
        per: list[list[int]] = [[] for _ in range(self.workers)]
        for pos, item in enumerate(items):
            per[item[0] % self.workers].append(pos)
        futures = {w: self.hosts[w].submit([(cmd, items[p]) for p in positions]) for w, positions in enumerate(per) if positions}
        out: list[Any] = [None] * len(items)
        failed: dict[int, BaseException] = {}
        errors = []
        for w, fut in futures.items():  # every host's answer is awaited, so none is left half-read
            try:
                replies = fut.result()
            except RolloutWorkerError as exc:
                failed[w] = exc
                continue
            for p, (status, payload) in zip(per[w], replies):
                if status == "ok":
                    out[p] = payload
                else:
                    errors.append(f"worker {w}:\n{payload}")
        if failed:
            w = min(failed)
            raise RolloutWorkerError(f"{self.name}: {failed[w]}") from failed[w]
        if errors:
            raise RolloutWorkerError(f"{self.name} raised in a rollout worker:\n" + "\n".join(errors))
        return out

    # --- one environment, asynchronous ----------------------------------------------------

    async def areset(self, k: int, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset environment ``k`` without blocking the event loop; returns ``(obs, info)``."""
        return await self._acall("reset", (k, seed, options))

    async def astep(self, k: int, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Step environment ``k`` without blocking the event loop; returns the Gymnasium 5-tuple."""
        return await self._acall("step", (k, action))

    async def _acall(self, cmd: str, item: tuple) -> Any:
        self._check_index(item[0])
        host = self.hosts[item[0] % self.workers] if self.workers else self._engine_thread()
        resumer = self._resumer()
        out = resumer.loop.create_future()
        host.post([(cmd, item)], _Awaiting(resumer, out))
        ((status, payload),) = await out
        if status == "ok":
            return payload
        if status == "raised":
            raise payload
        raise RolloutWorkerError(f"{self.name} raised in a rollout worker:\n{payload}")

    def _resumer(self) -> _Resumer:
        """The running event loop's :class:`_Resumer` (one per loop this pool is awaited from)."""
        loop = asyncio.get_running_loop()
        resumer = self._resumers.get(loop)
        if resumer is None:
            resumer = self._resumers[loop] = _Resumer(loop)
        return resumer

    def _engine_thread(self) -> _ThreadHost:
        with self._lock:
            if self._thread_host is None:
                self._thread_host = _ThreadHost(self)
            return self._thread_host

    def env_handle(self, k: int) -> PooledEnv:
        """Environment ``k`` as an object with ``reset``/``step`` and ``areset``/``astep``."""
        self._check_index(k)
        return PooledEnv(self, k)

    def _check_index(self, k: Any) -> None:
        if self.n is not None and not 0 <= k < self.n:
            raise IndexError(f"environment index {k} out of range 0..{self.n - 1}")

    # --- bookkeeping ----------------------------------------------------------------------

    def worker_cpu_seconds(self) -> float:
        """CPU seconds (user + system) the live workers have used so far (Linux ``/proc``;
        0 elsewhere or without workers)."""
        return sum(h.cpu_seconds() for h in self.hosts)

    def close(self) -> None:
        """Close every environment and stop the workers (idempotent)."""
        if self._thread_host is not None:
            self._thread_host.close()
            self._thread_host = None
        _close_all(self.local)
        for host in self.hosts:
            host.close()
        self.hosts = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover
        try:  # no contextlib here: at interpreter shutdown modules (even contextlib, logging) may be gone
            self.close()
        except Exception:  # noqa: BLE001, S110
            pass


class PooledEnv:
    """Environment ``k`` of an :class:`EnvPool`, with the Gymnasium ``reset``/``step`` and
    their awaitable twins ``areset``/``astep`` (``close`` leaves the pool's environment alive).

    Example:
        >>> with EnvPool("CartPole-v1", n=1) as pool:
        ...     env = pool.env_handle(0)
        ...     obs, info = env.reset(seed=0)
        ...     len(env.step(0))
        5
    """

    def __init__(self, pool: EnvPool, k: int) -> None:
        self.pool, self.k = pool, k

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        return self.pool.call("reset", [(self.k, seed, options)])[0]

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self.pool.call("step", [(self.k, action)])[0]

    async def areset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        return await self.pool.areset(self.k, seed, options)

    async def astep(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return await self.pool.astep(self.k, action)

    def close(self) -> None:
        """Nothing: the pool owns the environment."""

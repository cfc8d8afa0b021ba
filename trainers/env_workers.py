"""A pool of Gymnasium text environments, stepped in the trainer process or in workers.

Engines such as ALFWorld are not thread-safe, so parallel stepping uses processes
(``spawn`` start method: safe after torch is imported).  Environment ``i`` lives in worker
``i % workers`` for the pool's lifetime and is reset to a new task for every episode.

Example:
    >>> pool = EnvPool("CartPole-v1", {}, n=2)   # any Gymnasium id works
    >>> [len(obs) for obs, info in pool.reset([(0, 1, None), (1, 1, None)])]
    [4, 4]
    >>> pool.close()
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import traceback
from collections.abc import Sequence
from typing import Any

__all__ = ["EnvPool", "EnvWorkerError"]

log = logging.getLogger(__name__)


class EnvWorkerError(RuntimeError):
    """An environment raised inside a worker; the message carries the worker's traceback."""


def _make(env_id: str, env_kwargs: dict[str, Any], shaping: float = 0.0) -> Any:
    import gymnasium as gym

    try:
        import agent_envs  # noqa: F401  (registers the rubricgym ids)
    except ImportError:  # pragma: no cover
        pass
    env = gym.make(env_id, **env_kwargs)
    if shaping:
        from wrappers.shaping import RubricShaping

        env = RubricShaping(env, coef=shaping)
    return env


def _do(envs: dict[int, Any], env_id: str, env_kwargs: dict[str, Any], cmd: str, items: Sequence[tuple],
        shaping: float = 0.0) -> list[Any]:
    out = []
    for item in items:
        i = item[0]
        if i not in envs:
            envs[i] = _make(env_id, env_kwargs, shaping)
        env = envs[i]
        if cmd == "reset":
            _, seed, options = item
            out.append(env.reset(seed=seed, options=options))
        elif cmd == "step":
            _, action = item
            out.append(env.step(action))
        else:  # pragma: no cover
            raise ValueError(f"unknown command {cmd!r}")
    return out


def _worker(conn: Any, env_id: str, env_kwargs: dict[str, Any], shaping: float = 0.0) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    envs: dict[int, Any] = {}
    try:
        while True:
            msg = conn.recv()
            if msg is None:
                break
            cmd, items = msg
            try:
                conn.send(("ok", _do(envs, env_id, env_kwargs, cmd, items, shaping)))
            except Exception:  # noqa: BLE001  (forwarded to the trainer)
                conn.send(("error", traceback.format_exc()))
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        for env in envs.values():
            try:
                env.close()
            except Exception:  # noqa: BLE001
                pass


class EnvPool:
    """``n`` environments of one id, optionally spread over ``workers`` processes.

    Args:
        env_id: Gymnasium id.
        env_kwargs: Keyword arguments for ``gym.make``.
        n: Number of environments (slots).
        workers: Worker processes (0 = step in this process).
        shaping: Wrap every environment in :class:`wrappers.shaping.RubricShaping` with
            this coefficient (0 = no wrapper).
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], n: int, workers: int = 0, *, shaping: float = 0.0) -> None:
        self.env_id, self.env_kwargs, self.n = env_id, dict(env_kwargs), n
        self.shaping = float(shaping)
        self.workers = min(workers, n)
        self._local: dict[int, Any] = {}
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        if self.workers > 0:
            ctx = mp.get_context("spawn")
            for _ in range(self.workers):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_worker, args=(child, env_id, self.env_kwargs, self.shaping), daemon=True)
                proc.start()
                child.close()
                self._procs.append(proc)
                self._conns.append(parent)

    def _run(self, cmd: str, items: Sequence[tuple]) -> list[Any]:
        for item in items:
            if not 0 <= item[0] < self.n:
                raise IndexError(f"environment index {item[0]} out of range 0..{self.n - 1}")
        if self.workers == 0:
            return _do(self._local, self.env_id, self.env_kwargs, cmd, items, self.shaping)
        buckets: list[list[int]] = [[] for _ in range(self.workers)]
        for k, item in enumerate(items):
            buckets[item[0] % self.workers].append(k)
        for w, ks in enumerate(buckets):
            if ks:
                self._conns[w].send((cmd, [items[k] for k in ks]))
        results: list[Any] = [None] * len(items)
        errors = []
        for w, ks in enumerate(buckets):
            if not ks:
                continue
            status, payload = self._conns[w].recv()
            if status == "error":
                errors.append(payload)
                continue
            for k, res in zip(ks, payload):
                results[k] = res
        if errors:
            raise EnvWorkerError(f"{self.env_id} failed in a worker:\n{errors[0]}")
        return results

    def worker_cpu_seconds(self) -> float:
        """CPU seconds (user + system) the live worker processes have used so far (Linux
        ``/proc``; 0 elsewhere or without workers)."""
        total = 0.0
        tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        for proc in self._procs:
            try:
                with open(f"/proc/{proc.pid}/stat", encoding="ascii") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            except (OSError, IndexError, ValueError):
                continue
        return total

    def reset(self, items: Sequence[tuple[int, int | None, dict[str, Any] | None]]) -> list[tuple[Any, dict[str, Any]]]:
        """Reset environments: ``(index, seed, options)`` -> ``(obs, info)`` each, in order."""
        return self._run("reset", items)

    def step(self, items: Sequence[tuple[int, Any]]) -> list[tuple[Any, float, bool, bool, dict[str, Any]]]:
        """Step environments: ``(index, action)`` -> the Gymnasium 5-tuple each, in order."""
        return self._run("step", items)

    def close(self) -> None:
        """Close every environment and stop the workers."""
        for env in self._local.values():
            env.close()
        self._local.clear()
        for conn in self._conns:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
        self._procs.clear()
        self._conns.clear()

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

"""Memoised episodes: replay a deterministic environment's known action histories for free.

The rubricgym environments are deterministic given the reset arguments and the actions
taken (SPEC §2), so the result of ``step(a)`` after ``reset(seed, options)`` and actions
``a_1 … a_k`` can be reused whenever the same history comes up again — later siblings, later
updates, other seeds and other methods of a comparison play the same tasks.  As the arena
policy sharpens, whole episodes repeat (validation at temperature 0.4 especially).

:class:`EpisodeMemo` wraps an environment: a known history is answered from the memo
without touching the engine; the real environment is brought to the current history only
when an unknown step is needed (reset, then replay of the not-yet-executed actions), so the
engine does at most the work it would have done without the memo.

Several wrappers — one per environment of a pool, e.g. the G siblings the arena plays in
lock step — can share one :class:`MemoTable`: what one sibling's environment computed
answers the others, and each wrapper brings only its own environment up to date.

Results are never changed by the memo — only time.  ``tests/test_arena_memo.py`` checks
that memoised and direct episodes are identical.

Example:
    >>> import gymnasium as gym, agent_envs                                     # doctest: +SKIP
    >>> env = EpisodeMemo(gym.make("WebShop-Rubric-v0"))                        # doctest: +SKIP
    >>> obs, info = env.reset(seed=0, options={"task": 300})                    # doctest: +SKIP
"""

from __future__ import annotations

import json
import threading
from typing import Any

from cachetools import LRUCache

__all__ = ["EpisodeMemo", "MemoTable"]


class MemoTable:
    """The memory of one or more :class:`EpisodeMemo` wrappers, with their shared counters.

    Args:
        max_entries: Remember at most this many steps; when full, the least recently used
            one is forgotten (memory bound; behaviour is unaffected, only speed).

    Attributes:
        hits: Steps and resets answered from the memo.
        misses: Steps and resets that ran a real environment (replays excluded).
        replayed: Actions re-executed to bring a real environment to a history.

    Example:
        >>> table = MemoTable(max_entries=2)
        >>> table.store(("reset", ()), "first")
        >>> table.store(("reset", ("look",)), "second")
        >>> table.lookup(("reset", ()))                        # used: now the most recent
        'first'
        >>> table.store(("reset", ("look", "inventory")), "third")   # full: "second" goes
        >>> len(table), table.lookup(("reset", ("look",))), table.lookup(("reset", ()))
        (2, None, 'first')
    """

    def __init__(self, max_entries: int = 200_000) -> None:
        self.max_entries = int(max_entries)
        self.entries: LRUCache = LRUCache(maxsize=self.max_entries)
        self._lock = threading.Lock()  # a lookup reorders the table
        self.hits = 0
        self.misses = 0
        self.replayed = 0

    def __len__(self) -> int:
        return len(self.entries)

    def lookup(self, key: tuple[str, tuple[str, ...]]) -> Any:
        """The value stored for ``key`` (``None`` if unknown or forgotten)."""
        with self._lock:
            return self.entries.get(key)

    def store(self, key: tuple[str, tuple[str, ...]], value: Any) -> None:
        """Remember ``value`` for ``key`` (the least recently used step goes when full)."""
        with self._lock:
            self.entries[key] = value

    def stats(self) -> dict[str, float]:
        """Hit rate and counters."""
        total = self.hits + self.misses
        return {"memo_hits": self.hits, "memo_misses": self.misses, "memo_replayed": self.replayed,
                "memo_hit_rate": self.hits / total if total else 0.0, "memo_entries": len(self.entries)}


class EpisodeMemo:
    """Answers repeated (reset, action history) prefixes of a deterministic env from memory.

    Args:
        env: The environment (Gymnasium API: ``reset(seed=, options=)``, ``step(action)``).
        max_entries: Remember at most this many steps, forgetting the least recently used
            (memory bound; behaviour is unaffected, only speed); ignored with ``table``.
        table: A :class:`MemoTable` shared with other wrappers of environments of the same
            kind and arguments (``None``: a table of this wrapper's own).

    Attributes:
        table: The memory and its counters (``hits``, ``misses``, ``replayed``: see
            :class:`MemoTable`; a shared table counts every wrapper's work).
    """

    def __init__(self, env: Any, max_entries: int = 200_000, *, table: MemoTable | None = None) -> None:
        self.env = env
        self.table = table if table is not None else MemoTable(max_entries)
        self._reset_args: tuple[int | None, dict[str, Any] | None] | None = None
        self._reset_key = ""
        self._history: tuple[str, ...] = ()
        self._real: tuple[str, ...] | None = None  # history the real env is at (None: stale)
        self._real_key = ""

    @property
    def unwrapped(self) -> Any:
        """The innermost environment."""
        return self.env.unwrapped

    @property
    def hits(self) -> int:
        """Steps and resets answered from the memo (the table's count)."""
        return self.table.hits

    @property
    def misses(self) -> int:
        """Steps and resets that ran a real environment (the table's count)."""
        return self.table.misses

    @property
    def replayed(self) -> int:
        """Actions re-executed to bring a real environment to a history (the table's count)."""
        return self.table.replayed

    def __len__(self) -> int:
        return len(self.table)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        """``env.reset`` (from the memo when these arguments were seen before)."""
        self._reset_args = (seed, None if options is None else dict(options))
        self._reset_key = json.dumps([seed, options], sort_keys=True, default=str)
        self._history = ()
        key = (self._reset_key, ())
        cached = self.table.lookup(key)
        if cached is not None:
            self.table.hits += 1
            return cached
        self.table.misses += 1
        result = self.env.reset(seed=seed, options=options)
        self._real, self._real_key = (), self._reset_key
        self.table.store(key, result)
        return result

    def _sync(self) -> None:
        """Bring the real environment to the current history."""
        real = self._real
        if real is None or self._real_key != self._reset_key or real != self._history[: len(real)]:
            assert self._reset_args is not None
            seed, options = self._reset_args
            self.env.reset(seed=seed, options=options)
            real = ()
            self._real_key = self._reset_key
        for action in self._history[len(real):]:
            self.env.step(action)
            self.table.replayed += 1
        self._real = self._history

    def step(self, action: str) -> Any:
        """``env.step`` (from the memo when this history was seen before)."""
        if self._reset_args is None:
            raise RuntimeError("call reset() before step()")
        history = self._history + (action,)
        key = (self._reset_key, history)
        cached = self.table.lookup(key)
        if cached is not None:
            self.table.hits += 1
            self._history = history
            return cached
        self._sync()
        self.table.misses += 1
        result = self.env.step(action)
        self._history = history
        self._real = history
        self.table.store(key, result)
        return result

    def stats(self) -> dict[str, float]:
        """Hit rate and counters (of the table: every wrapper sharing it)."""
        return self.table.stats()

    def close(self) -> None:
        """Close the wrapped environment."""
        self.env.close()

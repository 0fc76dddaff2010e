"""The one process-local cache: what a Python worker keeps from one task or commit to the next.

Spark reuses its Python workers: an executor's worker runs task after task, and the sink's
commits run in one worker that serves every micro-batch of a query. gtbarrier keeps what
is costly to rebuild in such a worker (stores and their clients, Kafka consumers and
producers, database connections, boto3 sessions) and what it has learnt that never changes
(batch records written, the barrier state last swapped) in a :class:`ProcessCache`:

* **One process.** The entries belong to the process that made them. A forked child
  (``pyspark.daemon`` forks every worker) starts empty: an :func:`os.register_at_fork` hook
  empties it, and every call compares the pid as well. A parent's values are dropped in
  the child, never closed there: their sockets and threads belong to the parent.
* **Thread-safe.** One lock guards the map; ``create`` runs under it, so two threads never
  build two values for one key. ``close`` runs outside it.
* **Bounded.** ``capacity`` entries at most, least recently used evicted first; with
  ``max_idle``, an entry unused for that long is evicted at the next call.
* **Closed.** Evicted, replaced, refused and cleared values are handed to ``close`` (if
  given), and with ``close_at_exit`` every value is closed at interpreter exit. An owner
  that keeps counters of its own beside the cache resets them in ``after_fork``.

A value that is *lent* (a consumer, a producer, a connection: used by one caller at a
time) is taken out with :meth:`ProcessCache.take` and given back with
:meth:`ProcessCache.give_back`; a value that is *shared* (a store, a session) stays in and
is looked up with :meth:`ProcessCache.get_or_create`.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ProcessCache(Generic[K, V]):
    """A bounded, thread-safe map that belongs to one process (module docstring)."""

    def __init__(  # noqa: PLR0913 - the cache's policy, each part optional
        self,
        name: str,
        *,
        capacity: int | None = None,
        max_idle: float | None = None,
        close: Callable[[V], None] | None = None,
        close_at_exit: bool = False,
        after_fork: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity is not None and capacity < 1:
            raise ValueError(f"{name}: capacity must be at least 1, not {capacity}")
        self.name = name
        self.capacity = capacity
        self.max_idle = max_idle
        self._close = close
        self._after_fork = after_fork
        self._clock = clock
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._entries: OrderedDict[K, tuple[V, float]] = OrderedDict()  # LRU first
        os.register_at_fork(after_in_child=self._after_fork_in_child)
        if close_at_exit:
            atexit.register(self.clear)

    # --- shared values -------------------------------------------------------------------

    def get(self, key: K) -> V | None:
        """The value of ``key`` (now the most recently used), or None."""
        with self._lock:
            dropped = self._housekeep()
            hit = self._entries.get(key)
            if hit is not None:
                self._entries[key] = (hit[0], self._clock())
                self._entries.move_to_end(key)
        self._close_all(dropped)
        return None if hit is None else hit[0]

    def get_or_create(self, key: K, create: Callable[[], V]) -> V:
        """The value of ``key``, made by ``create()`` (under the lock) if there is none."""
        with self._lock:
            dropped = self._housekeep()
            hit = self._entries.get(key)
            if hit is None:
                value = create()
                dropped += self._insert(key, value)
            else:
                value = hit[0]
                self._entries[key] = (value, self._clock())
                self._entries.move_to_end(key)
        self._close_all(dropped)
        return value

    def put(self, key: K, value: V) -> None:
        """Set ``key`` to ``value``; a value it replaces is closed unless it is ``value``."""
        with self._lock:
            dropped = self._housekeep()
            old = self._entries.pop(key, None)
            if old is not None and old[0] is not value:
                dropped.append(old[0])
            dropped += self._insert(key, value)
        self._close_all(dropped)

    def discard(self, key: K) -> None:
        """Forget ``key`` (its value is not closed: the caller may still hold it)."""
        with self._lock:
            self._housekeep_fork()
            self._entries.pop(key, None)

    # --- lent values -----------------------------------------------------------------------

    def take(self, key: K) -> V | None:
        """Take ``key``'s value out (now the caller's alone), or None."""
        with self._lock:
            dropped = self._housekeep()
            hit = self._entries.pop(key, None)
        self._close_all(dropped)
        return None if hit is None else hit[0]

    def give_back(self, key: K, value: V) -> None:
        """Keep ``value`` for the next :meth:`take` of ``key``; if ``key`` already has a
        value, ``value`` is closed instead (the cache keeps one value per key)."""
        with self._lock:
            dropped = self._housekeep()
            if key in self._entries:
                dropped.append(value)
            else:
                dropped += self._insert(key, value)
        self._close_all(dropped)

    def take_newest(self, match: Callable[[K], bool]) -> tuple[K, V] | None:
        """Take out the most recently used entry whose key ``match``es, or None (for a
        cache that keeps several interchangeable values, under keys that tell them apart)."""
        with self._lock:
            dropped = self._housekeep()
            hit = next((k for k in reversed(self._entries) if match(k)), None)
            taken = None if hit is None else (hit, self._entries.pop(hit)[0])
        self._close_all(dropped)
        return taken

    def visit_idle(self, idle_for: float, visit: Callable[[V], None]) -> int:
        """Call ``visit(value)`` for every value unused for ``idle_for`` seconds or longer,
        under the lock (no value is taken meanwhile: ``visit`` must be quick and must not
        use the cache); how many were visited. The values stay, as idle as they were."""
        with self._lock:
            self._housekeep_fork()
            now = self._clock()
            idle = [v for v, used in self._entries.values() if now - used >= idle_for]
            for value in idle:
                visit(value)
        return len(idle)

    # --- the whole cache -------------------------------------------------------------------

    def evict_oldest(self, count: int) -> int:
        """Close the ``count`` least recently used values (fewer if there are fewer); how
        many were closed. For a caller whose bound counts more than the cache holds."""
        with self._lock:
            dropped = self._housekeep()
            while count > 0 and self._entries:
                dropped.append(self._entries.popitem(last=False)[1][0])
                count -= 1
        self._close_all(dropped)
        return len(dropped)

    def evict_idle(self) -> int:
        """Close the values unused for ``max_idle`` or longer; how many were closed."""
        with self._lock:
            dropped = self._housekeep()
        self._close_all(dropped)
        return len(dropped)

    def clear(self) -> None:
        """Close every value and forget them (also run at exit with ``close_at_exit``)."""
        with self._lock:
            self._housekeep_fork()
            dropped = [value for value, _ in self._entries.values()]
            self._entries.clear()
        self._close_all(dropped)

    def __len__(self) -> int:
        with self._lock:
            self._housekeep_fork()
            return len(self._entries)

    def __repr__(self) -> str:
        return f"ProcessCache({self.name!r}, {len(self._entries)} entries)"

    # --- internals (the lock held) -----------------------------------------------------------

    def _insert(self, key: K, value: V) -> list[V]:
        self._entries[key] = (value, self._clock())
        self._entries.move_to_end(key)
        dropped: list[V] = []
        while self.capacity is not None and len(self._entries) > self.capacity:
            dropped.append(self._entries.popitem(last=False)[1][0])
        return dropped

    def _housekeep(self) -> list[V]:
        """Forget a parent's entries; take out the expired ones (to be closed)."""
        self._housekeep_fork()
        if self.max_idle is None:
            return []
        now = self._clock()
        expired = [k for k, (_, used) in self._entries.items() if now - used >= self.max_idle]
        return [self._entries.pop(k)[0] for k in expired]

    def _housekeep_fork(self) -> None:
        if self._pid != os.getpid():
            self._forget_parent()

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()  # another thread of the parent may have held it
        self._forget_parent()

    def _forget_parent(self) -> None:
        self._pid = os.getpid()
        self._entries = OrderedDict()
        if self._after_fork is not None:
            self._after_fork()

    def _close_all(self, values: list[V]) -> None:
        """Close dropped values; every one is tried, the first failure is raised after."""
        if self._close is None or not values:
            return
        failure: BaseException | None = None
        for value in values:
            try:
                self._close(value)
            except Exception as err:
                failure = failure or err
        if failure is not None:
            raise failure

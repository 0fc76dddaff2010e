"""Bounded, jittered retries as one object (modelled on kazoo's ``KazooRetry``), and the
named retry policies of gtbarrier.

One owner per policy: a state store retries its own requests (:func:`store_requests`),
so its callers never wrap a store call in another retry for transient errors. A caller
retries only what the store cannot: a lost compare-and-swap race (:func:`cas_loop`), a
condition it is waiting for (:func:`poll_until`), a consumer's delivery
(:func:`delivery`), Kafka metadata requests (:func:`kafka_requests`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

Sleep = Callable[[float], None]
Clock = Callable[[], float]
Predicate = Callable[[BaseException], bool]


def is_retriable(err: BaseException) -> bool:
    """The default predicate: gtbarrier's own ``retriable`` flag (:mod:`state.errors`)."""
    return bool(getattr(err, "retriable", False))


@dataclass(frozen=True)
class Retry:
    """Retry a call while it raises a retriable error, within a deadline.

    The delay before attempt ``n`` (``n >= 1``) is ``min(max_delay, base_delay * 2**(n-1))``
    scaled by a random factor in ``[1 - jitter, 1]``. The call is never retried after
    ``deadline`` seconds have passed since the first attempt, nor more than
    ``max_attempts`` times in all (``None``: the deadline alone bounds it); then the last
    error propagates unchanged. Only errors for which ``is_retriable`` is true are
    retried: everything else (a failed precondition, a bad option) propagates at once.

    ``sleep`` and ``clock`` are injectable so unit tests run without waiting.
    """

    max_attempts: int | None = 8
    base_delay: float = 0.05
    max_delay: float = 2.0
    deadline: float = 30.0
    jitter: float = 0.5
    sleep: Sleep = field(default=time.sleep, compare=False)
    clock: Clock = field(default=time.monotonic, compare=False)
    rng: Callable[[], float] = field(default=random.random, compare=False)
    is_retriable: Predicate = field(default=is_retriable, compare=False)

    @classmethod
    def until(  # noqa: PLR0913 - keyword-only settings of the policy, all defaulted
        cls,
        deadline: float,
        *,
        base_delay: float = 0.05,
        max_delay: float = 1.0,
        jitter: float = 0.5,
        is_retriable: Predicate = is_retriable,
        sleep: Sleep = time.sleep,
        clock: Clock = time.monotonic,
    ) -> Retry:
        """A deadline-only policy: as many attempts as fit in ``deadline`` seconds."""
        return cls(
            max_attempts=None,
            base_delay=base_delay,
            max_delay=max_delay,
            deadline=deadline,
            jitter=jitter,
            sleep=sleep,
            clock=clock,
            is_retriable=is_retriable,
        )

    def __call__(self, fn: Callable[[], T]) -> T:
        start = self.clock()
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn()
            except Exception as err:  # re-raised unless retriable and within bounds
                if not self.is_retriable(err):
                    raise
                delay = self.delay(attempt)
                elapsed = self.clock() - start
                out_of_attempts = self.max_attempts is not None and attempt >= self.max_attempts
                if out_of_attempts or elapsed + delay > self.deadline:
                    err.add_note(f"gave up after {attempt} attempt(s) in {elapsed:.2f}s")
                    raise
                self.sleep(delay)

    def delay(self, attempt: int) -> float:
        """The pause after failed attempt ``attempt`` (1-based)."""
        raw = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return float(raw * (1.0 - self.jitter * self.rng()))


# --- the named policies -------------------------------------------------------------------

STORE_MAX_ATTEMPTS = 6
STORE_DEADLINE_S = 30.0


def store_requests(
    deadline: float = STORE_DEADLINE_S, *, sleep: Sleep = time.sleep, clock: Clock = time.monotonic
) -> Retry:
    """A state store's own retries of one request (transient errors only)."""
    return Retry(
        max_attempts=STORE_MAX_ATTEMPTS,
        base_delay=0.1,
        max_delay=2.0,
        deadline=deadline,
        sleep=sleep,
        clock=clock,
    )


def lost_race(err: BaseException) -> bool:
    """A conditional write lost to another writer: read again and decide again."""
    from state.errors import ConcurrentModification, KeyExists

    return isinstance(err, ConcurrentModification | KeyExists)


def cas_loop(
    deadline: float = 30.0, *, sleep: Sleep = time.sleep, clock: Clock = time.monotonic
) -> Retry:
    """A read-modify-write loop over a store or ZooKeeper record: retries lost races only
    (the store already retried its transient errors)."""
    return Retry(
        max_attempts=20,
        base_delay=0.02,
        max_delay=0.5,
        deadline=deadline,
        is_retriable=lost_race,
        sleep=sleep,
        clock=clock,
    )


def poll_until(  # noqa: PLR0913 - keyword-only settings of the policy, all defaulted
    deadline: float,
    *,
    base_delay: float = 0.05,
    max_delay: float = 1.0,
    is_retriable: Predicate = is_retriable,
    sleep: Sleep = time.sleep,
    clock: Clock = time.monotonic,
) -> Retry:
    """Wait for a condition, checked by a call that raises a retriable error until it
    holds, for at most ``deadline`` seconds."""
    return Retry.until(
        deadline,
        base_delay=base_delay,
        max_delay=max_delay,
        is_retriable=is_retriable,
        sleep=sleep,
        clock=clock,
    )


def delivery(max_retries: int, backoff: float, *, sleep: Sleep = time.sleep) -> Retry:
    """A consumer's delivery of one bundle: ``max_retries`` more attempts of the same
    bundle, ``backoff`` seconds apart and doubling (sink options ``delivery.*``)."""
    return Retry(
        max_attempts=max_retries + 1,
        base_delay=backoff,
        max_delay=max(backoff, 30.0),
        deadline=float("inf"),
        jitter=0.2,
        sleep=sleep,
    )


def kafka_requests(num_retries: int, interval: float, deadline: float) -> Retry:
    """Kafka metadata and offset requests (source options ``fetchOffset.*``)."""
    return Retry(
        max_attempts=num_retries + 1,
        base_delay=interval,
        max_delay=interval,
        jitter=0.0,
        deadline=deadline,
    )


def backoff(base: float, cap: float) -> Retry:
    """The pause between restarts of a supervised query (only :meth:`Retry.delay` is used)."""
    return Retry(base_delay=base, max_delay=max(cap, base), jitter=0.2)

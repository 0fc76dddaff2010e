"""Bounded, jittered retries as one object (modelled on kazoo's ``KazooRetry``)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Retry:
    """Retry a call while it raises a retriable error, within a deadline.

    The delay before attempt ``n`` (``n >= 1``) is ``min(max_delay, base_delay * 2**(n-1))``
    scaled by a random factor in ``[1 - jitter, 1]``. The call is never retried after
    ``deadline`` seconds have passed since the first attempt, nor more than
    ``max_attempts`` times in all; then the last error propagates unchanged. Only errors
    for which ``is_retriable`` is true are retried: everything else (a failed
    precondition, a bad option) propagates at once.

    ``sleep`` and ``clock`` are injectable so unit tests run without waiting.
    """

    max_attempts: int = 8
    base_delay: float = 0.05
    max_delay: float = 2.0
    deadline: float = 30.0
    jitter: float = 0.5
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)
    rng: Callable[[], float] = field(default=random.random, compare=False)
    is_retriable: Callable[[BaseException], bool] = field(
        default=lambda e: bool(getattr(e, "retriable", False)), compare=False
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
                if attempt >= self.max_attempts or elapsed + delay > self.deadline:
                    err.add_note(f"gave up after {attempt} attempt(s) in {elapsed:.2f}s")
                    raise
                self.sleep(delay)

    def delay(self, attempt: int) -> float:
        """The pause after failed attempt ``attempt`` (1-based)."""
        raw = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return float(raw * (1.0 - self.jitter * self.rng()))

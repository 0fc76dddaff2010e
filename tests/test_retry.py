"""``state.retry.Retry``: bounded, jittered, deadline-limited; only retriable errors."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from state.errors import ConcurrentModification, KeyExists, StoreUnavailable
from state.retry import Retry


class FakeTime:
    """A clock that only moves when the retry sleeps (or a call takes time)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Flaky:
    """Fails with ``errors`` (in order), then returns ``result``."""

    def __init__(
        self,
        errors: Sequence[Exception],
        result: str = "done",
        cost: float = 0.0,
        time: FakeTime | None = None,
    ) -> None:
        self.errors = list(errors)
        self.result = result
        self.calls = 0
        self.cost = cost
        self.time = time

    def __call__(self) -> str:
        self.calls += 1
        if self.time is not None:
            self.time.now += self.cost
        if self.errors:
            raise self.errors.pop(0)
        return self.result


def unavailable(i: int = 0) -> StoreUnavailable:
    return StoreUnavailable("s3://b", "k", f"boom {i}")


def make(t: FakeTime, **kw: object) -> Retry:
    return Retry(sleep=t.sleep, clock=t.clock, rng=lambda: 0.0, **kw)  # type: ignore[arg-type]


def test_succeeds_after_retriable_failures() -> None:
    t = FakeTime()
    fn = Flaky([unavailable(1), unavailable(2)])
    assert make(t, base_delay=0.1)(fn) == "done"
    assert fn.calls == 3
    assert t.sleeps == [0.1, 0.2]  # exponential, no jitter with rng() == 0


def test_non_retriable_errors_pass_through_at_once() -> None:
    t = FakeTime()
    for err in (
        KeyExists("s3://b", "k"),
        ConcurrentModification("s3://b", "k", "v1"),
        ValueError("plain"),
    ):
        fn = Flaky([err])
        with pytest.raises(type(err)) as info:
            make(t)(fn)
        assert info.value is err
        assert fn.calls == 1
    assert t.sleeps == []


def test_max_attempts_bounds_the_calls_and_reraises_the_last_error() -> None:
    t = FakeTime()
    errors = [unavailable(i) for i in range(10)]
    fn = Flaky(errors)
    with pytest.raises(StoreUnavailable) as info:
        make(t, max_attempts=4, deadline=1e9)(fn)
    assert fn.calls == 4
    assert "boom 3" in str(info.value)  # the last one, unchanged
    assert len(t.sleeps) == 3
    assert info.value.__notes__ == ["gave up after 4 attempt(s) in 0.35s"]


def test_deadline_stops_retrying_before_it_would_be_exceeded() -> None:
    t = FakeTime()
    fn = Flaky([unavailable(i) for i in range(100)], cost=0.5, time=t)
    with pytest.raises(StoreUnavailable):
        make(t, max_attempts=100, base_delay=1.0, max_delay=1.0, deadline=5.0)(fn)
    # attempt costs 0.5 s and each pause 1 s: the next pause would cross 5 s after 4 attempts
    elapsed = t.now - 100.0
    assert elapsed <= 5.0
    assert fn.calls == 4
    assert t.sleeps == [1.0, 1.0, 1.0]


def test_zero_deadline_means_a_single_attempt() -> None:
    t = FakeTime()
    fn = Flaky([unavailable()])
    with pytest.raises(StoreUnavailable):
        make(t, deadline=0.0)(fn)
    assert fn.calls == 1 and t.sleeps == []


def test_delays_grow_exponentially_up_to_max_delay() -> None:
    r = Retry(base_delay=0.1, max_delay=1.0, jitter=0.0)
    assert [r.delay(n) for n in range(1, 7)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


@pytest.mark.parametrize("rng_value", [0.0, 0.25, 0.5, 0.999999])
def test_jitter_stays_within_bounds(rng_value: float) -> None:
    r = Retry(base_delay=0.2, max_delay=5.0, jitter=0.5, rng=lambda: rng_value)
    for n in range(1, 10):
        raw = min(5.0, 0.2 * 2 ** (n - 1))
        d = r.delay(n)
        assert raw * 0.5 <= d <= raw
        assert d == pytest.approx(raw * (1 - 0.5 * rng_value))


def test_real_random_jitter_is_bounded_and_varies() -> None:
    r = Retry(base_delay=1.0, max_delay=1.0, jitter=0.3)
    samples = [r.delay(1) for _ in range(200)]
    assert all(0.7 <= s <= 1.0 for s in samples)
    assert len(set(samples)) > 100


def test_custom_is_retriable() -> None:
    t = FakeTime()
    fn = Flaky([ValueError("transient for this caller")])
    retry = Retry(sleep=t.sleep, clock=t.clock, is_retriable=lambda e: isinstance(e, ValueError))
    assert retry(fn) == "done"
    assert fn.calls == 2


def test_retry_is_a_value_object() -> None:
    assert Retry(max_attempts=3) == Retry(max_attempts=3, sleep=lambda s: None)
    with pytest.raises(AttributeError):
        Retry().deadline = 1.0  # type: ignore[misc]

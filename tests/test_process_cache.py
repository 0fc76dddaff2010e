"""The process-local cache: bounded, idle expiry, lent values, closing, fork safety."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from state.process_cache import ProcessCache


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def closing_cache(**kwargs: object) -> tuple[ProcessCache[str, str], list[str]]:
    closed: list[str] = []
    cache: ProcessCache[str, str] = ProcessCache("test", close=closed.append, **kwargs)  # type: ignore[arg-type]
    return cache, closed


def test_get_or_create_creates_once_per_key() -> None:
    cache, _ = closing_cache()
    made: list[str] = []

    def create() -> str:
        made.append("x")
        return f"value-{len(made)}"

    assert cache.get_or_create("a", create) == "value-1"
    assert cache.get_or_create("a", create) == "value-1"
    assert cache.get_or_create("b", create) == "value-2"
    assert len(cache) == 2


def test_capacity_evicts_the_least_recently_used_and_closes_it() -> None:
    cache, closed = closing_cache(capacity=2)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"  # a is now the most recently used
    cache.put("c", "C")
    assert closed == ["B"]
    assert cache.get("b") is None
    assert (cache.get("a"), cache.get("c")) == ("A", "C")


def test_an_idle_value_expires_and_is_closed() -> None:
    clock = Clock()
    cache, closed = closing_cache(max_idle=60.0, clock=clock)
    cache.put("a", "A")
    clock.now = 59.0
    assert cache.get("a") == "A"  # used: idle again from 59
    clock.now = 118.0
    assert cache.evict_idle() == 0
    clock.now = 119.0
    assert cache.evict_idle() == 1
    assert closed == ["A"]
    assert len(cache) == 0


def test_a_lent_value_is_out_until_given_back_and_a_second_one_is_closed() -> None:
    cache, closed = closing_cache()
    assert cache.take("k") is None
    cache.give_back("k", "first")
    assert cache.take("k") == "first"
    assert cache.take("k") is None  # lent: no one else gets it
    cache.give_back("k", "first")
    cache.give_back("k", "second")  # one value per key: the extra one is closed
    assert closed == ["second"]
    assert cache.take("k") == "first"


def test_put_closes_the_value_it_replaces_but_not_the_same_value() -> None:
    cache, closed = closing_cache()
    cache.put("a", "A")
    cache.put("a", "A")
    assert closed == []
    cache.put("a", "A2")
    assert closed == ["A"]


def test_discard_forgets_without_closing_and_clear_closes_everything() -> None:
    cache, closed = closing_cache()
    cache.put("a", "A")
    cache.put("b", "B")
    cache.discard("a")
    assert closed == []
    cache.clear()
    assert closed == ["B"]
    assert len(cache) == 0


def test_every_dropped_value_is_closed_even_if_one_close_fails() -> None:
    closed: list[str] = []

    def close(value: str) -> None:
        closed.append(value)
        if value == "A":
            raise OSError("boom")

    cache: ProcessCache[str, str] = ProcessCache("test", close=close)
    cache.put("a", "A")
    cache.put("b", "B")
    with pytest.raises(OSError, match="boom"):
        cache.clear()
    assert closed == ["A", "B"]


def test_a_bad_capacity_names_the_cache() -> None:
    with pytest.raises(ValueError, match="pool: capacity must be at least 1, not 0"):
        ProcessCache("pool", capacity=0)


def test_a_forked_child_starts_empty_and_never_closes_the_parents_values() -> None:
    cache, closed = closing_cache()
    cache.put("a", "A")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it sees, then leave without cleanup
        seen = f"{len(cache)} {cache.get('a')} {len(closed)}"
        cache.clear()
        os.write(write, f"{seen} {len(closed)}".encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    report = os.read(read, 100).decode()
    os.close(read)
    assert os.waitstatus_to_exitcode(status) == 0
    assert report == "0 None 0 0"
    assert cache.get("a") == "A"
    assert closed == []


def test_take_newest_takes_the_most_recently_used_match() -> None:
    cache, _ = closing_cache()
    cache.put("a1", "first a")
    cache.put("b1", "b")
    cache.put("a2", "second a")
    assert cache.take_newest(lambda k: k.startswith("a")) == ("a2", "second a")
    assert cache.take_newest(lambda k: k.startswith("a")) == ("a1", "first a")
    assert cache.take_newest(lambda k: k.startswith("a")) is None
    assert len(cache) == 1


def test_evict_oldest_closes_the_least_recently_used() -> None:
    cache, closed = closing_cache()
    for key in "abc":
        cache.put(key, key.upper())
    assert cache.get("a") == "A"
    assert cache.evict_oldest(2) == 2
    assert closed == ["B", "C"]
    assert cache.evict_oldest(5) == 1
    assert closed == ["B", "C", "A"]


def test_after_fork_runs_when_a_child_finds_the_parents_entries() -> None:
    reset: list[int] = []
    cache: ProcessCache[str, str] = ProcessCache("test", after_fork=lambda: reset.append(1))
    cache.put("a", "A")
    pid = os.fork()
    if pid == 0:
        os._exit(0 if reset == [1] and len(cache) == 0 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert reset == [] and cache.get("a") == "A"


# Process-local memoization the product may keep outside a ProcessCache: pure values that
# hold no client, socket or thread, so a forked child may use its parent's (module -> the
# functions, and why).
PURE_MEMOIZED = {
    # whether kafka-python has the internals it patches, and the class it defines over
    # them: a fact of the installed library and a class, the same in every process
    "datasource/record_rows.py": {"supported", "_row_partition_records_class"},
}


def _functools_caches(path: Path) -> set[str]:
    """The functions of ``path`` decorated with ``functools.cache`` or ``lru_cache``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                name = ast.unparse(target)
                if name.rpartition(".")[2] in {"cache", "lru_cache"}:
                    found.add(node.name)
    return found


def test_the_product_keeps_clients_in_process_caches_not_functools_caches() -> None:
    """A functools cache is not emptied in a forked child (which would then use its
    parent's sockets) and has no idle expiry; only pure values may be memoized with it."""
    root = Path(__file__).resolve().parents[1]
    wrong = []
    for package in ("gtbarrier", "datasource", "sink", "state"):
        for path in sorted((root / package).rglob("*.py")):
            where = str(path.relative_to(root))
            extra = _functools_caches(path) - PURE_MEMOIZED.get(where, set())
            wrong += [f"{where}: {name}" for name in sorted(extra)]
    assert not wrong, "functools caches outside a ProcessCache:\n" + "\n".join(wrong)


def test_visit_idle_sees_the_values_idle_long_enough_and_keeps_them() -> None:
    clock = Clock()
    cache, closed = closing_cache(clock=clock)
    cache.give_back("old", "O")
    clock.now = 5.0
    cache.give_back("new", "N")
    clock.now = 6.0
    seen: list[str] = []
    assert cache.visit_idle(3.0, seen.append) == 1
    assert seen == ["O"]  # "new" has been idle 1 s only
    assert cache.visit_idle(0.0, seen.append) == 2
    assert seen == ["O", "O", "N"]
    assert cache.take("old") == "O" and cache.take("new") == "N"  # still there, not closed
    assert closed == []

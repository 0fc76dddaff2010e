"""The behavioural contract every :class:`state.stores.state_store.StateStore` must meet.

One suite, run against ``memory://`` and ``file://`` in ``tests/`` and against a real
S3 server in ``integration_tests/test_stores.py``. A concrete test class inherits
:class:`StoreContract` and provides two fixtures:

* ``store``: a fresh, empty store;
* ``other_store``: a second, independent instance on the same URI (as a second
  driver or an executor would open it).

The barrier's run claims (:mod:`state.protocol.barrier_state`) run on each store too:
many runs claiming in turn with their claims pruned, and two runs racing their claims.

It also holds the worker used by the multi-process race tests (it must be importable
by a spawned interpreter).
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from state.errors import (
    ConcurrentModification,
    GtBarrierError,
    KeyExists,
    KeyNotFound,
    PipelineFenced,
    StoreConfigError,
)
from state.layout import PipelineLayout
from state.protocol.barrier_state import (
    CLAIMS_KEPT,
    BarrierStateStore,
    Claim,
    start_generation,
)
from state.stores import StateStore, StoreConfig, Versioned, open_store

BAD_KEYS = ["", "/abs", "a//b", "a/./b", "a/../b", "..", "trailing/", "."]


class StoreContract:
    """Inherit and provide the ``store`` and ``other_store`` fixtures."""

    #: Does writing identical bytes again give a new version? (S3's ETag is an MD5
    #: of the body, so there a rewrite of the same bytes keeps the version.)
    REWRITE_CHANGES_VERSION = True
    #: Rounds of each two-writer race.
    RACE_ROUNDS = 200
    #: Writers and rounds of the many-writer races.
    WIDE_RACE_WRITERS = 32
    WIDE_RACE_ROUNDS = 5
    #: Keys listed by the pagination test; an S3 store sets more than one page of
    #: ListObjectsV2 (1001).
    LIST_KEYS = 10
    #: Driver runs that claim the barrier in turn, and rounds of two runs' claim race.
    CLAIM_RUNS = 12
    CLAIM_RACE_ROUNDS = 5

    # --- reads and writes ----------------------------------------------------------

    def test_get_missing_key(self, store: StateStore) -> None:
        with pytest.raises(KeyNotFound) as info:
            store.get("missing/key.json")
        assert store.uri in str(info.value)
        assert "'missing/key.json'" in str(info.value)
        assert info.value.key == "missing/key.json"
        assert store.get_or_none("missing/key.json") is None
        assert store.get_json_or_none("missing/key.json") is None

    def test_put_get_round_trip(self, store: StateStore) -> None:
        payloads = [b"", b"x", bytes(range(256)) * 4, b"GTB1 not a header\n", b"\n\n\x00"]
        for i, data in enumerate(payloads):
            version = store.put(f"rt/{i}", data)
            got = store.get(f"rt/{i}")
            assert got.data == data
            assert got.version == version

    def test_large_value(self, store: StateStore) -> None:
        data = bytes(range(256)) * 8192  # 2 MiB
        version = store.put("big/blob", data)
        assert store.get("big/blob") == Versioned(data, version)

    def test_put_overwrites(self, store: StateStore) -> None:
        store.put("k", b"one")
        v2 = store.put("k", b"two")
        assert store.get("k").data == b"two"
        assert store.get("k").version == v2

    def test_versions_change_on_every_write(self, store: StateStore) -> None:
        versions = [store.put("v", f"value {i}".encode()) for i in range(5)]
        versions.append(store.compare_and_swap("v", b"cas", versions[-1]))
        assert len(set(versions)) == len(versions)
        assert store.get("v").version == versions[-1]

    def test_rewrite_of_identical_bytes(self, store: StateStore) -> None:
        v1 = store.put("same", b"bytes")
        v2 = store.put("same", b"bytes")
        assert (v1 != v2) is self.REWRITE_CHANGES_VERSION
        assert store.get("same").version == v2

    def test_json_helpers_are_canonical(self, store: StateStore) -> None:
        version = store.create_json("j/doc.json", {"b": [1, 2], "a": {"y": None, "x": True}})
        assert store.get("j/doc.json").data == b'{"a":{"x":true,"y":null},"b":[1,2]}'
        value, v = store.get_json("j/doc.json")
        assert value == {"a": {"x": True, "y": None}, "b": [1, 2]}
        assert v == version
        v2 = store.compare_and_swap_json("j/doc.json", {"n": 1}, v)
        assert store.get_json("j/doc.json") == ({"n": 1}, v2)
        assert store.put_json("j/doc.json", [1]) != v2

    # --- create-if-absent ----------------------------------------------------------

    def test_create_new_key(self, store: StateStore) -> None:
        version = store.create("epochs/000000000001.json", b"first")
        assert store.get("epochs/000000000001.json") == Versioned(b"first", version)

    def test_create_twice_raises_key_exists(
        self, store: StateStore, other_store: StateStore
    ) -> None:
        version = store.create("once", b"first")
        for s in (store, other_store):
            with pytest.raises(KeyExists) as info:
                s.create("once", b"second")
            assert store.uri in str(info.value)
            assert "'once'" in str(info.value)
            assert not info.value.retriable
        assert store.get("once").data == b"first"
        assert store.get("once").version == version

    def test_create_after_put_raises_key_exists(self, store: StateStore) -> None:
        store.put("p", b"x")
        with pytest.raises(KeyExists):
            store.create("p", b"y")

    def test_create_after_delete(self, store: StateStore) -> None:
        store.create("d", b"1")
        store.delete("d")
        store.create("d", b"2")
        assert store.get("d").data == b"2"

    # --- compare-and-swap ----------------------------------------------------------

    def test_compare_and_swap(self, store: StateStore, other_store: StateStore) -> None:
        v1 = store.put("cas", b"one")
        v2 = other_store.compare_and_swap("cas", b"two", v1)
        assert v2 != v1
        assert store.get("cas").data == b"two"
        v3 = store.compare_and_swap("cas", b"three", v2)
        assert other_store.get("cas").version == v3

    def test_compare_and_swap_with_stale_version(
        self, store: StateStore, other_store: StateStore
    ) -> None:
        v1 = store.put("cas", b"one")
        v2 = other_store.compare_and_swap("cas", b"two", v1)
        with pytest.raises(ConcurrentModification) as info:
            store.compare_and_swap("cas", b"stale", v1)
        err = info.value
        assert err.expected_version == v1
        assert store.uri in str(err) and "'cas'" in str(err)
        assert not err.retriable
        assert store.get("cas").data == b"two"
        assert store.get("cas").version == v2

    def test_compare_and_swap_with_made_up_version(self, store: StateStore) -> None:
        store.put("cas", b"one")
        with pytest.raises(ConcurrentModification):
            store.compare_and_swap("cas", b"two", "not-a-version")
        assert store.get("cas").data == b"one"

    def test_compare_and_swap_on_missing_key(self, store: StateStore) -> None:
        with pytest.raises(ConcurrentModification) as info:
            store.compare_and_swap("nothing/here", b"x", "some-version")
        assert info.value.key == "nothing/here"
        assert store.get_or_none("nothing/here") is None

    def test_compare_and_swap_on_missing_key_with_a_real_version(self, store: StateStore) -> None:
        """The expected version is one the store really gave out (another key's): a
        missing key still fails (AWS answers 404 there, SeaweedFS 412; both mean lost)."""
        version = store.put("elsewhere", b"x")
        with pytest.raises(ConcurrentModification) as info:
            store.compare_and_swap("not/written", b"x", version)
        assert info.value.expected_version == version
        assert not info.value.retriable
        assert store.get_or_none("not/written") is None
        assert store.list() == ["elsewhere"]

    def test_compare_and_swap_after_delete(self, store: StateStore) -> None:
        v = store.put("gone", b"x")
        store.delete("gone")
        with pytest.raises(ConcurrentModification):
            store.compare_and_swap("gone", b"y", v)
        assert store.get_or_none("gone") is None

    # --- list and delete -----------------------------------------------------------

    def test_list_by_prefix_sorted(self, store: StateStore) -> None:
        keys = ["a/1", "a/10", "a/2", "a/sub/deep/x.json", "ab", "b/x", "c"]
        for k in reversed(keys):
            store.put(k, k.encode())
        assert store.list() == sorted(keys)
        assert store.list("") == sorted(keys)
        assert store.list("a/") == ["a/1", "a/10", "a/2", "a/sub/deep/x.json"]
        assert store.list("a") == ["a/1", "a/10", "a/2", "a/sub/deep/x.json", "ab"]
        assert store.list("a/1") == ["a/1", "a/10"]
        assert store.list("a/sub/") == ["a/sub/deep/x.json"]
        assert store.list("zzz/") == []
        assert store.list("a/nope/") == []

    def test_list_beyond_one_page(self, store: StateStore) -> None:
        keys = [f"many/{i:05d}" for i in range(self.LIST_KEYS)]
        # Concurrently: a store is shared by a process's threads, and a cloud emulator
        # takes minutes for 5,001 puts one after the other.
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(lambda k: store.put(k, b""), keys))
        store.put("other", b"")
        assert store.list("many/") == keys
        assert store.list() == [*keys, "other"]
        assert store.delete_prefix("many/") == len(keys)
        assert store.list() == ["other"]

    def test_list_of_empty_store(self, store: StateStore) -> None:
        assert store.list() == []
        assert store.list("x/") == []

    def test_delete_is_idempotent(self, store: StateStore) -> None:
        store.delete("never/existed")
        store.put("k/v", b"x")
        store.delete("k/v")
        assert store.get_or_none("k/v") is None
        store.delete("k/v")
        assert store.list() == []

    def test_delete_prefix(self, store: StateStore) -> None:
        for i in range(5):
            store.put(f"snap/{i}/blob", b"x")
        store.put("snap-other", b"y")
        assert store.delete_prefix("snap/") == 5
        assert store.list() == ["snap-other"]
        assert store.delete_prefix("snap/") == 0

    def test_delete_many(self, store: StateStore) -> None:
        for i in range(5):
            store.put(f"parts/{i}", b"x")
        store.delete_many(["parts/0", "parts/3", "parts/never", "parts/4"])
        assert store.list("parts/") == ["parts/1", "parts/2"]
        store.delete_many([])
        store.delete_many(["parts/1"])
        assert store.list("parts/") == ["parts/2"]

    # --- bad input -----------------------------------------------------------------

    @pytest.mark.parametrize("key", BAD_KEYS)
    def test_bad_keys_are_refused(self, store: StateStore, key: str) -> None:
        ops: list[Callable[[], Any]] = [
            lambda: store.get(key),
            lambda: store.put(key, b"x"),
            lambda: store.create(key, b"x"),
            lambda: store.compare_and_swap(key, b"x", "v"),
            lambda: store.delete(key),
        ]
        for op in ops:
            with pytest.raises(StoreConfigError) as info:
                op()
            assert "'key'" in str(info.value)
            assert repr(key) in str(info.value)
        assert store.list() == []

    # --- transport -----------------------------------------------------------------

    def test_pickled_store_shares_the_data(self, store: StateStore) -> None:
        store.put("shared", b"1")
        clone: StateStore = pickle.loads(pickle.dumps(store))
        assert clone.uri == store.uri
        assert clone.get("shared").data == b"1"
        clone.put("shared", b"2")
        assert store.get("shared").data == b"2"

    def test_open_store_by_config(self, store: StateStore) -> None:
        store.put("via/config", b"x")
        again = open_store(store.config)
        assert type(again) is type(store)
        assert again.get("via/config").data == b"x"

    def test_closed_store_can_be_used_again(self, store: StateStore) -> None:
        store.put("closed/k", b"x")
        store.close()
        assert store.get("closed/k").data == b"x"
        store.put("closed/k", b"y")
        assert store.get("closed/k").data == b"y"

    def test_open_store_shares_an_instance_that_survives_close(self, store: StateStore) -> None:
        shared = open_store(store.config)
        shared.put("shared/k", b"x")
        shared.close()
        again = open_store(store.config)
        assert again.get("shared/k").data == b"x"
        if shared.shared:
            assert again is shared
        assert store.get("shared/k").data == b"x"

    # --- races ---------------------------------------------------------------------

    def test_two_threads_race_on_create(self, store: StateStore, other_store: StateStore) -> None:
        outcomes = race_in_threads(
            [store, other_store],
            self.RACE_ROUNDS,
            lambda s, r, me: s.create(f"race/create/{r:05d}", f"writer {me}".encode()),
            expected=KeyExists,
        )
        for r, winners in enumerate(outcomes):
            assert len(winners) == 1, f"round {r}: winners {winners}"
            assert store.get(f"race/create/{r:05d}").data == f"writer {winners[0]}".encode()

    def test_two_threads_race_on_compare_and_swap(
        self, store: StateStore, other_store: StateStore
    ) -> None:
        store.put("race/cas", b"start")
        outcomes = race_in_threads(
            [store, other_store],
            self.RACE_ROUNDS,
            lambda s, r, me, v: s.compare_and_swap("race/cas", f"{r} by {me}".encode(), v),
            expected=ConcurrentModification,
            read=lambda s: s.get("race/cas").version,
        )
        for r, winners in enumerate(outcomes):
            assert len(winners) == 1, f"round {r}: winners {winners}"
        last = len(outcomes) - 1
        assert store.get("race/cas").data == f"{last} by {outcomes[last][0]}".encode()

    def test_many_writers_race_on_create(self, store: StateStore, other_store: StateStore) -> None:
        """WIDE_RACE_WRITERS threads ``create`` one key at once: exactly one wins."""
        writers = [store, other_store] * (self.WIDE_RACE_WRITERS // 2)
        outcomes = race_in_threads(
            writers,
            self.WIDE_RACE_ROUNDS,
            lambda s, r, me: s.create(f"race/wide/{r:05d}", f"writer {me}".encode()),
            expected=KeyExists,
        )
        for r, winners in enumerate(outcomes):
            assert len(winners) == 1, f"round {r}: winners {winners}"
            assert store.get(f"race/wide/{r:05d}").data == f"writer {winners[0]}".encode()

    def test_many_writers_race_on_compare_and_swap(
        self, store: StateStore, other_store: StateStore
    ) -> None:
        """WIDE_RACE_WRITERS threads read one version, then all swap: exactly one wins."""
        store.put("race/wide-cas", b"start")
        writers = [store, other_store] * (self.WIDE_RACE_WRITERS // 2)
        outcomes = race_in_threads(
            writers,
            self.WIDE_RACE_ROUNDS,
            lambda s, r, me, v: s.compare_and_swap("race/wide-cas", f"{r} by {me}".encode(), v),
            expected=ConcurrentModification,
            read=lambda s: s.get("race/wide-cas").version,
        )
        for r, winners in enumerate(outcomes):
            assert len(winners) == 1, f"round {r}: winners {winners}"
        last = len(outcomes) - 1
        assert store.get("race/wide-cas").data == f"{last} by {outcomes[last][0]}".encode()

    # --- the barrier's run claims (state.protocol.barrier_state) on this store ------

    def test_run_claims_stay_bounded_and_a_superseded_run_stays_fenced(
        self, store: StateStore, other_store: StateStore
    ) -> None:
        """Runs claim one pipeline in turn, each with the generation it started at, and
        each prunes the claims below those kept. The first run's claim is gone; at its next
        commit, through another instance of the store (its own driver), it is fenced. The
        marker of a run of an earlier release (no start generation) is kept and fences it."""
        layout = PipelineLayout("claims")
        here, there = BarrierStateStore(store, layout), BarrierStateStore(other_store, layout)

        def claim(states: BarrierStateStore, run_id: str, start: int | None) -> Claim:
            return states.claim_run(states.load(), run_id, "q", None, start_generation=start)

        claim(here, "run-old", None)
        zombie_start = start_generation(other_store, layout)
        claim(there, "run-0", zombie_start)
        for i in range(1, self.CLAIM_RUNS):
            claimed = claim(here, f"run-{i}", start_generation(store, layout))
            assert claimed.took_over
            here.prune_claims(claimed.held.state)
            assert len(store.list(layout.barrier_claims_prefix)) <= CLAIMS_KEPT + 1
        assert "run-0" not in there.claimed_runs()
        with pytest.raises(PipelineFenced, match=r"\(run run-0\) is a zombie"):
            claim(there, "run-0", zombie_start)
        assert other_store.get_or_none(layout.barrier_run("run-old")) is not None
        with pytest.raises(PipelineFenced, match="a newer run took the pipeline over"):
            claim(there, "run-old", None)
        owner = here.load().state.owner
        assert owner is not None
        assert (owner.run_id, owner.generation) == (
            f"run-{self.CLAIM_RUNS - 1}",
            self.CLAIM_RUNS + 1,
        )

    def test_two_runs_that_start_together_race_and_exactly_one_claims(
        self, store: StateStore, other_store: StateStore
    ) -> None:
        """Two runs read the state (their start generation) at once, then claim at once,
        through two instances of the store: one claims, the other is fenced, and stays
        fenced at its next commit while the winner stays the owner."""
        layout = PipelineLayout("claim-race")
        sides = [BarrierStateStore(store, layout), BarrierStateStore(other_store, layout)]
        for r in range(self.CLAIM_RACE_ROUNDS):
            won, fenced = claim_race(sides, [f"run-{r}-a", f"run-{r}-b"])
            assert len(won) == 1 and len(fenced) == 1, f"round {r}: won {won}, fenced {fenced}"
            held = sides[0].load()
            state = held.state
            assert held.version is not None and state.owner is not None
            assert state.owner.run_id == won[0]
            started = state.owner.generation - 1  # where both runs started
            with pytest.raises(PipelineFenced):
                sides[1].claim_run(held, fenced[0], "q", None, start_generation=started)
            again = sides[0].claim_run(held, won[0], "q", None, start_generation=started)
            assert again.held.state.owner == state.owner and not again.took_over


def claim_race(sides: list[BarrierStateStore], run_ids: list[str]) -> tuple[list[str], list[str]]:
    """Run ``run_ids[i]`` through ``sides[i]``, in threads: each reads the barrier state and
    its start generation, then (once both have) claims. Returns the runs that claimed and
    the runs that were fenced."""
    gate = threading.Barrier(len(sides))
    won: list[str] = []
    fenced: list[str] = []
    errors: list[BaseException] = []

    def run(states: BarrierStateStore, run_id: str) -> None:
        try:
            held = states.load()
            start = start_generation(states.store, states.layout)
            gate.wait(timeout=60)  # both started before either claims
            try:
                states.claim_run(held, run_id, "q", None, start_generation=start)
            except PipelineFenced:
                fenced.append(run_id)
            else:
                won.append(run_id)
        except BaseException as err:  # reported by the caller's assertion
            errors.append(err)
            gate.abort()

    threads = [
        threading.Thread(target=run, args=side, daemon=True)
        for side in zip(sides, run_ids, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, f"claim race worker failed: {errors[0]!r}"
    assert not any(t.is_alive() for t in threads), "claim race worker hung"
    return won, fenced


def race_in_threads(
    stores: list[StateStore],
    rounds: int,
    write: Callable[..., Any],
    *,
    expected: type[GtBarrierError],
    read: Callable[[StateStore], str] | None = None,
) -> list[list[int]]:
    """Run ``rounds`` races of one thread per store; the winners of each round.

    Each round, every thread (optionally) reads a version, all meet at a barrier, then
    all write at once. A write either succeeds or raises ``expected``; anything else
    fails the test.
    """
    barrier = threading.Barrier(len(stores))
    wins: list[list[int]] = [[] for _ in range(rounds)]
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(me: int) -> None:
        s = stores[me]
        try:
            for r in range(rounds):
                args: tuple[Any, ...] = (s, r, me)
                if read is not None:
                    args += (read(s),)
                barrier.wait(timeout=60)  # everyone has read before anyone writes
                try:
                    write(*args)
                except expected:
                    pass
                else:
                    with lock:
                        wins[r].append(me)
                barrier.wait(timeout=60)  # round over before the next read
        except BaseException as err:  # reported by the caller's assertion
            errors.append(err)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, f"race worker failed: {errors[0]!r}"
    assert not any(t.is_alive() for t in threads), "race worker hung"
    return wins


def process_race_worker(
    config: StoreConfig, me: int, *, rounds: int, op: str, barrier: Any, results: Any
) -> None:
    """One side of a multi-process race (see ``integration_tests/test_stores.py``).

    ``op`` is ``"create"`` (every round a new key) or ``"cas"`` (every round both
    processes read the version of one key, then both compare-and-swap it). Puts
    ``(me, round, won)`` for every round on ``results``, then ``(me, -1, False)``.
    """
    store = open_store(config)
    for r in range(rounds):
        if op == "create":
            barrier.wait(timeout=60)
            try:
                store.create(f"prace/create/{r:05d}", f"writer {me}".encode())
                won = True
            except KeyExists:
                won = False
        else:
            version = store.get("prace/cas").version
            barrier.wait(timeout=60)
            try:
                store.compare_and_swap("prace/cas", f"{r} by {me}".encode(), version)
                won = True
            except ConcurrentModification:
                won = False
        results.put((me, r, won))
        barrier.wait(timeout=60)
    results.put((me, -1, False))

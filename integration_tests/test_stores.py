"""The state stores against real servers and real processes.

* The shared contract (``tests/store_contract.py``) against SeaweedFS (the harness's S3
  server) and against moto, with the two-writer races of ``create`` and
  ``compare_and_swap`` over many rounds, many-writer races (32 writers on moto, 8 on
  SeaweedFS, whose per-object lock makes each round slow), and listings of more than one
  page; and the servers' raw answer to ``If-Match`` on a missing key (SeaweedFS 412,
  moto and AWS 404), which the store maps to the same error.
  The contract again through an ``s3a://`` URI on SeaweedFS (the same objects as ``s3://``).
* ``file://`` races between separate processes.
* S3 faults: a loopback proxy that resets connections, drops responses after the
  server acted, delays or swallows them; and the S3 server killed by pid mid-use.
"""

from __future__ import annotations

import multiprocessing
import pickle
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.fault_proxy import Fault, FaultProxy
from harness.s3 import S3Bucket, S3Server
from state.errors import (
    ConcurrentModification,
    GtBarrierError,
    KeyExists,
    KeyNotFound,
    StoreConfigError,
    StoreUnavailable,
    StoreWriteUnknown,
)
from state.retry import Retry
from state.stores import StateStore, StoreConfig, open_store
from state.stores.s3_store import TOKEN_METADATA, S3Store
from tests.store_contract import StoreContract, process_race_worker

pytestmark = pytest.mark.timeout(120)

RACE_ROUNDS = 200


class TestS3StoreContract(StoreContract):
    """The one store contract, over HTTP against SeaweedFS (or ``GTB_S3_ENDPOINT``)."""

    REWRITE_CHANGES_VERSION = False  # the ETag is the MD5 of the body
    RACE_ROUNDS = RACE_ROUNDS
    LIST_KEYS = 1001  # more than one page of ListObjectsV2
    # Fewer many-writer races than the contract's 32 x 5: SeaweedFS serialises the
    # conditional PUTs of one key behind a per-object lock whose waiters poll it once a
    # second, so a round of N writers lasts up to about 0.4 * N seconds (32 writers: 11 to
    # 13 s a round, 70 s a test) while the store sends one PUT per writer and retries
    # nothing. 8 writers still queue 7 losers on that lock every round.
    WIDE_RACE_WRITERS = 8
    WIDE_RACE_ROUNDS = 4

    @pytest.fixture
    def store(self, s3: S3Bucket) -> StateStore:
        return s3.store("state/contract")

    @pytest.fixture
    def other_store(self, s3: S3Bucket) -> StateStore:
        return s3.store("state/contract")


class TestMotoS3StoreContract(TestS3StoreContract):
    """The same contract against moto (the S3 of the tests before SeaweedFS): what the
    store relies on must hold there too."""

    # moto has no such lock: the contract's full many-writer races take a second or two.
    WIDE_RACE_WRITERS = StoreContract.WIDE_RACE_WRITERS
    WIDE_RACE_ROUNDS = StoreContract.WIDE_RACE_ROUNDS

    @pytest.fixture
    def store(self, moto_s3: S3Bucket) -> StateStore:
        return moto_s3.store("state/contract")

    @pytest.fixture
    def other_store(self, moto_s3: S3Bucket) -> StateStore:
        return moto_s3.store("state/contract")


class TestS3aStoreContract(StoreContract):
    """The contract through an ``s3a://`` URI (Hadoop's name for S3) against SeaweedFS: the
    store a Spark user's ``state.uri=s3a://...`` opens. Fewer race rounds than the
    ``s3://`` class above: the races themselves are that class's; here they show that
    the conditional writes reach the server through this URI too."""

    REWRITE_CHANGES_VERSION = False
    RACE_ROUNDS = 20
    WIDE_RACE_WRITERS = 4
    WIDE_RACE_ROUNDS = 1

    @pytest.fixture
    def store(self, s3: S3Bucket) -> StateStore:
        return S3Store(StoreConfig(f"s3a://{s3.bucket}/state/s3a", s3.server.settings()))

    @pytest.fixture
    def other_store(self, s3: S3Bucket) -> StateStore:
        return S3Store(StoreConfig(f"S3A://{s3.bucket}/state/s3a", s3.server.settings()))


def test_s3a_and_s3_uris_open_the_same_objects(s3: S3Bucket) -> None:
    """A source given ``s3a://b/p`` and a sink given ``s3://b/p`` share one state: what one
    writes the other reads, and a conditional create of one loses to the other's."""
    hadoop = open_store(StoreConfig(f"s3a://{s3.bucket}/same", s3.server.settings()))
    plain = open_store(StoreConfig(s3.uri("same"), s3.server.settings()))
    assert hadoop is plain  # one shared store per configuration: the spelling is one
    by_hadoop = S3Store(StoreConfig(f"s3a://{s3.bucket}/same", s3.server.settings()))
    by_hadoop.create("k", b"from s3a")
    assert s3.store("same").get("k").data == b"from s3a"
    with pytest.raises(KeyExists):
        s3.store("same").create("k", b"from s3")
    keys = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix="same/")["Contents"]
    assert [o["Key"] for o in keys] == ["same/k"]


@pytest.mark.parametrize("bucket", ["s3", "moto_s3"])
def test_if_match_on_a_missing_key(bucket: str, request: pytest.FixtureRequest) -> None:
    """The raw answer differs (SeaweedFS: 412 PreconditionFailed; moto, like AWS: 404
    NoSuchKey); the store reports both as a lost compare-and-swap."""
    s3: S3Bucket = request.getfixturevalue(bucket)
    client = s3.client()
    version = client.put_object(Bucket=s3.bucket, Key="present", Body=b"x")["ETag"]
    with pytest.raises(client.exceptions.ClientError) as info:
        client.put_object(Bucket=s3.bucket, Key="missing", Body=b"y", IfMatch=version)
    status = info.value.response["ResponseMetadata"]["HTTPStatusCode"]
    if not s3.server.external:
        assert status == (412 if s3.server.durable else 404), info.value.response
    assert status in (404, 412)
    with pytest.raises(ConcurrentModification):
        s3.store().compare_and_swap("missing", b"y", version)
    assert s3.store().get_or_none("missing") is None


# --- file:// across processes ---------------------------------------------------------


@pytest.mark.parametrize("op", ["create", "cas"])
def test_file_store_race_between_processes(tmp_path: Path, op: str) -> None:
    """Two processes race RACE_ROUNDS times; exactly one wins every round."""
    config = StoreConfig(f"file://{tmp_path}/state")
    store = open_store(config)
    if op == "cas":
        store.put("prace/cas", b"start")
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=process_race_worker,
            args=(config, me),
            kwargs={"rounds": RACE_ROUNDS, "op": op, "barrier": barrier, "results": results},
        )
        for me in (0, 1)
    ]
    for p in procs:
        p.start()
    wins: dict[int, list[int]] = {r: [] for r in range(RACE_ROUNDS)}
    done = 0
    try:
        while done < 2:
            me, r, won = results.get(timeout=60)
            if r < 0:
                done += 1
            elif won:
                wins[r].append(me)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
    assert [p.exitcode for p in procs] == [0, 0]
    bad = {r: w for r, w in wins.items() if len(w) != 1}
    assert not bad, f"rounds without exactly one winner: {bad}"
    both_won = {w[0] for w in wins.values()}
    assert both_won == {0, 1}, "one process won every round: the race was not a race"
    if op == "create":
        for r, w in wins.items():
            assert store.get(f"prace/create/{r:05d}").data == f"writer {w[0]}".encode()
    else:
        last = RACE_ROUNDS - 1
        assert store.get("prace/cas").data == f"{last} by {wins[last][0]}".encode()


# --- S3 configuration -----------------------------------------------------------------


def test_missing_bucket_is_a_config_error_naming_it(s3: S3Bucket) -> None:
    store = S3Store(StoreConfig("s3://gtb-no-such-bucket/x", s3.server.settings()))
    with pytest.raises(StoreConfigError) as info:
        store.put("k", b"x")
    text = str(info.value)
    assert "'gtb-no-such-bucket'" in text and "state.uri" in text and s3.endpoint in text


def test_standard_aws_chain_from_the_environment(
    s3: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bare URI works with only AWS_* variables (as a Spark executor would have)."""
    s3.store("env").put("k", b"written with explicit settings")
    bare = open_store(s3.uri("env"))  # endpoint, keys, region from the fixture's AWS_* env
    assert isinstance(bare, S3Store)
    assert bare.get("k").data == b"written with explicit settings"
    assert bare.endpoint == s3.endpoint

    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)  # the service-agnostic variable
    generic = open_store(s3.uri("env"))
    assert generic.get("k").data == b"written with explicit settings"


def test_explicit_settings_win_over_the_environment(
    s3: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # nothing listens there
    store = open_store(s3.config("explicit"))
    store.put("k", b"x")
    assert store.get("k").data == b"x"


def test_pickled_store_drops_its_client(s3: S3Bucket) -> None:
    store = s3.store("pickle")
    store.put("k", b"x")
    assert store._s3 is not None
    state = store.__getstate__()
    assert "_s3" not in state and "_lock" not in state
    clone = pickle.loads(pickle.dumps(store))
    assert clone._s3 is None
    assert clone.get("k").data == b"x"


def test_store_at_bucket_root(s3: S3Bucket) -> None:
    store = s3.store("")
    store.put("a/b", b"1")
    store.put("c", b"2")
    assert store.list() == ["a/b", "c"]
    assert sorted(o["Key"] for o in s3.client().list_objects_v2(Bucket=s3.bucket)["Contents"]) == [
        "a/b",
        "c",
    ]


# --- S3 faults ------------------------------------------------------------------------


class Sleeps:
    """A sleep that records its delays (and really sleeps, the proxy is real)."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        time.sleep(seconds)


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[FaultProxy]:
    host, port = s3_server.endpoint.removeprefix("http://").rsplit(":", 1)
    with FaultProxy(host, int(port)) as p:
        yield p


def proxied(
    s3: S3Bucket, proxy: FaultProxy, *, deadline: float = 3.0, read_timeout: float = 1.0
) -> tuple[S3Store, Sleeps]:
    sleeps = Sleeps()
    retry = Retry(max_attempts=20, base_delay=0.05, max_delay=0.4, deadline=deadline, sleep=sleeps)
    store = s3.store(
        "faults",
        retry=retry,
        endpoint=proxy.endpoint,
        read_timeout=read_timeout,
        connect_timeout=1.0,
    )
    return store, sleeps


def test_store_survives_transient_connection_resets(s3: S3Bucket, proxy: FaultProxy) -> None:
    store, sleeps = proxied(s3, proxy)
    v = store.put("k", b"1")
    ops: list[tuple[str, Any]] = [
        ("get", lambda: store.get("k")),
        ("put", lambda: store.put("k", b"2")),
        ("create", lambda: store.create("new", b"n")),
        ("cas", lambda: store.compare_and_swap("k", b"3", store.get("k").version)),
        ("list", store.list),
        ("delete", lambda: store.delete("new")),
    ]
    for name, op in ops:
        before = proxy.stats().faulted
        proxy.inject(Fault.RESET, count=2)
        op()
        assert proxy.pending() == 0, name
        assert proxy.stats().faulted - before == 2, name
    assert store.get("k").data == b"3"
    assert store.get("k").version != v
    assert store.list() == ["k"]
    assert len(sleeps.delays) >= 12  # two retries per operation


def test_slow_responses_within_the_read_timeout_succeed(s3: S3Bucket, proxy: FaultProxy) -> None:
    store, sleeps = proxied(s3, proxy, read_timeout=2.0)
    proxy.always(Fault.DELAY, delay=0.3)
    start = time.monotonic()
    v = store.create("slow", b"x")
    assert store.get("slow").version == v
    assert time.monotonic() - start >= 0.6
    assert sleeps.delays == []  # nothing was retried


@pytest.mark.parametrize("op", ["create", "cas"])
def test_lost_response_to_a_conditional_write_is_resolved(
    s3: S3Bucket, proxy: FaultProxy, op: str
) -> None:
    """The server applied the write but the client never heard: the store finds out it won."""
    store, sleeps = proxied(s3, proxy)
    expected = store.put("k", b"old") if op == "cas" else None
    proxy.inject(Fault.DROP_RESPONSE)
    if op == "create":
        version = store.create("c", b"mine")
        key = "c"
    else:
        assert expected is not None
        version = store.compare_and_swap("k", b"mine", expected)
        key = "k"
    assert proxy.stats().by_kind == {"drop-response": 1}
    assert sleeps.delays, "the first attempt's answer was lost, so there was a retry"
    got = store.get(key)
    assert got.data == b"mine" and got.version == version


@pytest.mark.parametrize("op", ["create", "cas", "put"])
def test_a_writer_dead_after_its_request_head_stores_nothing(
    s3: S3Bucket, proxy: FaultProxy, op: str
) -> None:
    """A process killed between its request's head and its body (its client waiting for
    ``100 Continue``) leaves the server a request with no body. SeaweedFS stores such a
    request as an empty object unless a checksum names the body, so a record would read
    as empty, and stay so: the store sends one with every write. The retry then writes
    the whole value, and nothing else is ever stored."""
    store, sleeps = proxied(s3, proxy)
    plain = s3.store("faults")
    old = plain.put("k", b"old") if op != "create" else None
    proxy.inject(Fault.HEAD_ONLY)
    if op == "create":
        store.create("k", b"mine")
    elif op == "cas":
        assert old is not None
        store.compare_and_swap("k", b"mine", old)
    else:
        store.put("k", b"mine")
    assert proxy.stats().by_kind == {"head-only": 1}
    assert sleeps.delays, "the first attempt failed, so there was a retry"
    assert plain.get("k").data == b"mine"


def test_a_writer_killed_after_its_request_head_leaves_no_record(
    s3: S3Bucket, proxy: FaultProxy
) -> None:
    """The same, with no retry (the writing process is gone): the key stays absent."""
    retry = Retry(max_attempts=1, base_delay=0.05, max_delay=0.4, deadline=3.0, sleep=Sleeps())
    store = s3.store("faults", retry=retry, endpoint=proxy.endpoint, read_timeout=1.0)
    proxy.inject(Fault.HEAD_ONLY)
    with pytest.raises(GtBarrierError):
        store.create("k", b"mine")
    assert proxy.stats().by_kind == {"head-only": 1}
    with pytest.raises(KeyNotFound):
        s3.store("faults").get("k")


def _plant_cut_off_write(s3: S3Bucket, store: S3Store, key: str, *, ours: bool) -> None:
    """An empty object at ``key``, as a release that sent no checksum left on SeaweedFS when
    its writer died between the request's head and its body (tagged as gtbarrier's writes
    are, if ``ours``)."""
    metadata = {TOKEN_METADATA: "0" * 32} if ours else {}
    store.client.put_object(
        Bucket=store.bucket, Key=store._object(key), Body=b"", Metadata=metadata
    )
    assert s3.store("faults").get(key).data == b""


def test_a_create_completes_an_empty_object_an_earlier_writer_cut_off(s3: S3Bucket) -> None:
    """An empty object tagged as gtbarrier's write holds no record: a write cut off after
    its head, which no reader could have taken for a record. A create of the key replaces
    it (conditioned on its version) instead of failing, so that a replay of the batch that
    wrote it repairs it: without that, every later attempt found the key taken and read
    an empty document, and the pipeline stopped for good."""
    store = s3.store("faults")
    _plant_cut_off_write(s3, store, "batches/q/000000000002.json", ours=True)
    version = store.create("batches/q/000000000002.json", b'{"epoch": 2}')
    got = store.get("batches/q/000000000002.json")
    assert got.data == b'{"epoch": 2}' and got.version == version
    # A second create meets the completed record, as for any record.
    with pytest.raises(KeyExists):
        store.create("batches/q/000000000002.json", b'{"epoch": 3}')


def test_a_create_leaves_an_empty_object_not_written_by_gtbarrier(s3: S3Bucket) -> None:
    """An empty object without gtbarrier's tag was put there by someone else: the key is
    taken, as before."""
    store = s3.store("faults")
    _plant_cut_off_write(s3, store, "k", ours=False)
    with pytest.raises(KeyExists):
        store.create("k", b"mine")
    assert store.get("k").data == b""


def test_lost_response_then_another_writer_is_reported_as_lost(
    s3: S3Bucket, proxy: FaultProxy
) -> None:
    """Our create was applied, the answer lost, and another writer replaced the value
    before we could look: the store must not claim the key holds our write."""
    store, _ = proxied(s3, proxy)
    other = s3.store("faults")
    proxy.inject(Fault.DROP_RESPONSE)

    real_put = store.client.put_object
    calls = {"n": 0}

    def put_then_interfere(**kw: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:  # the retry: meanwhile someone else took over the key
            other.compare_and_swap("c", b"theirs", other.get("c").version)
        return real_put(**kw)

    store.client.put_object = put_then_interfere  # type: ignore[method-assign]
    with pytest.raises(KeyExists) as info:
        store.create("c", b"mine")
    assert "never took effect, or another writer has replaced it" in "".join(info.value.__notes__)
    assert other.get("c").data == b"theirs"


def test_persistent_resets_give_store_unavailable_within_the_deadline(
    s3: S3Bucket, proxy: FaultProxy
) -> None:
    store, _ = proxied(s3, proxy, deadline=1.5)
    store.put("k", b"x")
    proxy.always(Fault.RESET)
    start = time.monotonic()
    with pytest.raises(StoreUnavailable) as info:
        store.get("k")
    elapsed = time.monotonic() - start
    assert elapsed < 1.5 + 1.0
    text = str(info.value)
    assert store.uri in text and "'k'" in text and proxy.endpoint in text
    assert info.value.retriable
    assert not isinstance(info.value, StoreWriteUnknown)
    proxy.clear()
    assert store.get("k").data == b"x"


def test_unanswered_conditional_write_is_reported_as_unknown(
    s3: S3Bucket, proxy: FaultProxy
) -> None:
    store, _ = proxied(s3, proxy, deadline=1.5, read_timeout=0.4)
    v = store.put("k", b"x")
    proxy.always(Fault.BLACKHOLE)
    start = time.monotonic()
    with pytest.raises(StoreWriteUnknown) as info:
        store.compare_and_swap("k", b"y", v)
    assert time.monotonic() - start < 1.5 + 0.4 + 1.0
    assert "may or may not have taken effect" in str(info.value)
    assert "'k'" in str(info.value)
    proxy.clear()
    assert store.get("k").data == b"x"  # the blackhole never forwarded it


def test_killed_server_gives_store_unavailable_then_recovers(
    s3: S3Bucket, s3_server: S3Server
) -> None:
    retry = Retry(max_attempts=20, base_delay=0.05, max_delay=0.4, deadline=2.0)
    store = s3.store("kill", retry=retry, connect_timeout=1.0, read_timeout=2.0)
    store.put("k", b"before")
    old_pid = s3_server.pid
    s3_server.stop()  # SIGKILL by pid
    start = time.monotonic()
    with pytest.raises(StoreUnavailable) as info:
        store.get("k")
    assert time.monotonic() - start < 2.0 + 1.0
    assert s3.endpoint in str(info.value)
    with pytest.raises(StoreUnavailable):
        store.create("k2", b"x")  # connection refused: never sent, so not "unknown"
    s3_server.start()
    assert s3_server.pid != old_pid
    assert s3_server.durable  # SeaweedFS: the data on disk survives the SIGKILL
    assert store.get("k").data == b"before"  # the same store object reconnects
    store.create("k2", b"after")
    assert store.get("k2").data == b"after"


def test_paused_server_gives_store_unavailable_and_keeps_data(
    s3: S3Bucket, s3_server: S3Server
) -> None:
    retry = Retry(max_attempts=20, base_delay=0.05, max_delay=0.4, deadline=1.0)
    store = s3.store("pause", retry=retry, connect_timeout=0.5, read_timeout=0.5)
    v = store.put("k", b"kept")
    s3_server.pause()
    try:
        start = time.monotonic()
        with pytest.raises(StoreUnavailable):
            store.get("k")
        assert time.monotonic() - start < 1.0 + 0.5 + 1.0
    finally:
        s3_server.resume()
    assert store.get("k").version == v
    with pytest.raises(ConcurrentModification):
        store.compare_and_swap("k", b"x", '"stale"')

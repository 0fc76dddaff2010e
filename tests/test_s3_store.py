"""``s3://`` decisions without a server: error mapping, retries, unknown outcomes, config.

The same store runs against a real S3 server in ``integration_tests/test_stores.py``;
here a scripted fake client makes every branch happen on purpose.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable
from typing import Any

import botocore.exceptions as bce
import pytest

from state.errors import (
    ConcurrentModification,
    ConfigError,
    KeyExists,
    KeyNotFound,
    StateError,
    StoreConfigError,
    StoreUnavailable,
    StoreWriteUnknown,
)
from state.retry import Retry
from state.stores import S3Settings, StoreConfig
from state.stores.s3_store import TOKEN_METADATA, S3Store

URI = "s3://bucket-a/pre/fix"


def client_error(code: str, status: int, op: str = "PutObject") -> bce.ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": f"{code} message"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return bce.ClientError(response, op)


def read_timeout() -> Exception:
    return bce.ReadTimeoutError(endpoint_url="http://s3.test")


def refused() -> Exception:
    return bce.EndpointConnectionError(endpoint_url="http://s3.test")


Step = Exception | Callable[[dict[str, Any]], Any]


class FakeClient:
    """Answers each call with the next scripted step: an exception or a function of kwargs."""

    class meta:  # noqa: N801 - mimics boto3's client.meta
        endpoint_url = "http://s3.test"

    def __init__(self, **script: list[Step]) -> None:
        self.script = script
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def _answer(self, op: str, kwargs: dict[str, Any]) -> Any:
        self.calls.append((op, kwargs))
        step = self.script[op].pop(0)
        if isinstance(step, Exception):
            raise step
        return step(kwargs)

    def put_object(self, **kw: Any) -> Any:
        return self._answer("put_object", kw)

    def get_object(self, **kw: Any) -> Any:
        return self._answer("get_object", kw)

    def head_object(self, **kw: Any) -> Any:
        return self._answer("head_object", kw)

    def delete_object(self, **kw: Any) -> Any:
        return self._answer("delete_object", kw)

    def ops(self) -> list[str]:
        return [op for op, _ in self.calls]


class Recorder:
    def __init__(self) -> None:
        self.sleeps: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.sleeps.append(seconds)


def make(fake: FakeClient, *, attempts: int = 4) -> tuple[S3Store, Recorder]:
    rec = Recorder()
    retry = Retry(max_attempts=attempts, base_delay=0.01, deadline=100.0, sleep=rec)
    store = S3Store(StoreConfig(URI, S3Settings(endpoint="http://s3.test")), retry=retry)
    store._s3 = fake  # type: ignore[assignment]
    return store, rec


def ok(etag: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda kw: {"ETag": etag}


def same_token_head(fake: FakeClient, etag: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A HEAD answer carrying the token of the last PUT: that PUT did land."""

    def answer(_: dict[str, Any]) -> dict[str, Any]:
        last_put = [kw for op, kw in fake.calls if op == "put_object"][-1]
        return {"ETag": etag, "Metadata": dict(last_put["Metadata"])}

    return answer


# --- conditional writes: never retry a precondition ----------------------------------


def a_record(kw: Any) -> dict[str, Any]:
    """The head of a whole record written by another gtbarrier writer."""
    return {"ETag": '"e-theirs"', "ContentLength": 7, "Metadata": {TOKEN_METADATA: "other"}}


def test_precondition_failed_on_create_is_key_exists_without_retry() -> None:
    # One head: is the key's object a record, or a write cut off after its head (empty)?
    fake = FakeClient(put_object=[client_error("PreconditionFailed", 412)], head_object=[a_record])
    store, rec = make(fake)
    with pytest.raises(KeyExists) as info:
        store.create("k", b"x")
    assert "'k'" in str(info.value) and URI in str(info.value)
    assert fake.ops() == ["put_object", "head_object"] and rec.sleeps == []
    assert fake.calls[0][1]["IfNoneMatch"] == "*"
    assert fake.calls[0][1]["Key"] == "pre/fix/k"


def test_conflict_on_cas_is_concurrent_modification_without_retry() -> None:
    fake = FakeClient(put_object=[client_error("ConditionalRequestConflict", 409)])
    store, rec = make(fake)
    with pytest.raises(ConcurrentModification) as info:
        store.compare_and_swap("k", b"x", '"e1"')
    assert info.value.expected_version == '"e1"'
    assert fake.ops() == ["put_object"] and rec.sleeps == []
    assert fake.calls[0][1]["IfMatch"] == '"e1"'


# AWS answers ``If-Match`` on a missing key with 404 NoSuchKey, SeaweedFS with 412.
MISSING_KEY_ANSWERS = [
    pytest.param(("NoSuchKey", 404), id="aws-404"),
    pytest.param(("PreconditionFailed", 412), id="seaweedfs-412"),
]


@pytest.mark.parametrize("answer", MISSING_KEY_ANSWERS)
def test_cas_on_missing_key_is_concurrent_modification(answer: tuple[str, int]) -> None:
    fake = FakeClient(put_object=[client_error(*answer)])
    store, rec = make(fake)
    with pytest.raises(ConcurrentModification) as info:
        store.compare_and_swap("k", b"x", '"e1"')
    assert info.value.expected_version == '"e1"'
    assert fake.ops() == ["put_object"] and rec.sleeps == []


# --- retries -------------------------------------------------------------------------


def test_throttling_is_retried_then_succeeds() -> None:
    fake = FakeClient(put_object=[client_error("SlowDown", 503), client_error("", 429), ok('"e2"')])
    store, rec = make(fake)
    assert store.create("k", b"x") == '"e2"'
    assert len(rec.sleeps) == 2
    assert fake.ops() == ["put_object"] * 3  # a throttled request was not applied: no HEAD


def test_server_errors_exhaust_into_store_unavailable_naming_uri_key_cause() -> None:
    fake = FakeClient(get_object=[client_error("InternalError", 500, "GetObject")] * 4)
    store, rec = make(fake, attempts=4)
    with pytest.raises(StoreUnavailable) as info:
        store.get("a/b")
    text = str(info.value)
    assert URI in text and "'a/b'" in text and "InternalError" in text and "500" in text
    assert not isinstance(info.value, StoreWriteUnknown)
    assert len(fake.calls) == 4 and len(rec.sleeps) == 3
    assert any("gave up after 4 attempt" in n for n in info.value.__notes__)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (client_error("AccessDenied", 403, "GetObject"), StateError),
        (client_error("InvalidAccessKeyId", 403, "GetObject"), StateError),
        (client_error("NoSuchBucket", 404, "GetObject"), StoreConfigError),
        (bce.NoCredentialsError(), StoreConfigError),
    ],
)
def test_fatal_errors_are_not_retried(error: Exception, kind: type[Exception]) -> None:
    fake = FakeClient(get_object=[error])
    store, rec = make(fake)
    with pytest.raises(kind) as info:
        store.get("k")
    assert not getattr(info.value, "retriable", True)
    assert rec.sleeps == [] and len(fake.calls) == 1


def test_missing_bucket_error_names_bucket_and_option() -> None:
    fake = FakeClient(put_object=[client_error("NoSuchBucket", 404)])
    store, _ = make(fake)
    with pytest.raises(StoreConfigError) as info:
        store.put("k", b"x")
    assert "'state.uri'" in str(info.value) and "bucket 'bucket-a'" in str(info.value)


def test_get_of_missing_key_is_key_not_found_without_retry() -> None:
    fake = FakeClient(get_object=[client_error("NoSuchKey", 404, "GetObject")])
    store, rec = make(fake)
    with pytest.raises(KeyNotFound):
        store.get("k")
    assert rec.sleeps == []


def test_delete_is_retried_and_idempotent() -> None:
    fake = FakeClient(delete_object=[refused(), lambda kw: {}, client_error("NoSuchKey", 404)])
    store, rec = make(fake)
    store.delete("k")
    store.delete("k")
    assert len(rec.sleeps) == 1


# --- unknown outcomes ----------------------------------------------------------------


def test_lost_answer_then_precondition_failed_with_our_token_is_a_win() -> None:
    fake = FakeClient(put_object=[read_timeout(), client_error("PreconditionFailed", 412)])
    fake.script["head_object"] = [same_token_head(fake, '"e-ours"')]
    store, _ = make(fake)
    assert store.compare_and_swap("k", b"x", '"e1"') == '"e-ours"'
    assert fake.ops() == ["put_object", "put_object", "head_object"]
    tokens = {kw["Metadata"][TOKEN_METADATA] for op, kw in fake.calls if op == "put_object"}
    assert len(tokens) == 1  # every attempt of one write carries the same token


def test_lost_answer_then_precondition_failed_with_another_token_is_a_loss() -> None:
    fake = FakeClient(
        put_object=[read_timeout(), client_error("PreconditionFailed", 412)],
        head_object=[lambda kw: {"ETag": '"e-theirs"', "Metadata": {TOKEN_METADATA: "other"}}],
    )
    store, _ = make(fake)
    with pytest.raises(KeyExists) as info:
        store.create("k", b"x")
    assert any("never took effect" in n for n in info.value.__notes__)


@pytest.mark.parametrize("answer", MISSING_KEY_ANSWERS)
def test_lost_answer_then_key_gone_is_a_loss(answer: tuple[str, int]) -> None:
    fake = FakeClient(
        put_object=[bce.ConnectionClosedError(endpoint_url="x"), client_error(*answer)],
        head_object=[client_error("404", 404, "HeadObject")],
    )
    store, _ = make(fake)
    with pytest.raises(ConcurrentModification) as info:
        store.compare_and_swap("k", b"x", '"e1"')
    assert fake.ops() == ["put_object", "put_object", "head_object"]
    assert any("never took effect" in n for n in info.value.__notes__)


def test_lost_answers_until_the_deadline_are_write_unknown() -> None:
    fake = FakeClient(put_object=[read_timeout()] * 4)
    store, _ = make(fake, attempts=4)
    with pytest.raises(StoreWriteUnknown) as info:
        store.create("k", b"x")
    assert isinstance(info.value, StoreUnavailable) and info.value.retriable
    assert "may or may not have taken effect" in str(info.value) and "'k'" in str(info.value)


def test_refused_connections_are_plain_store_unavailable() -> None:
    fake = FakeClient(put_object=[refused()] * 4)
    store, _ = make(fake, attempts=4)
    with pytest.raises(StoreUnavailable) as info:
        store.create("k", b"x")
    assert not isinstance(info.value, StoreWriteUnknown)
    assert "EndpointConnectionError" in str(info.value)


def test_refused_then_precondition_failed_is_a_plain_loss() -> None:
    # The refused attempt never reached the server: the 412 is another writer's record,
    # not ours (no "superseded" note); the one head only tells a record from a cut-off write.
    fake = FakeClient(
        put_object=[refused(), client_error("PreconditionFailed", 412)], head_object=[a_record]
    )
    store, _ = make(fake)
    with pytest.raises(KeyExists) as info:
        store.create("k", b"x")
    assert not getattr(info.value, "__notes__", [])
    assert fake.ops() == ["put_object", "put_object", "head_object"]


def test_a_create_that_may_not_read_the_key_back_leaves_it_taken() -> None:
    # A role that may create but not read (HEAD answers a bare 403, with no code to name
    # the permission): the key stays taken, as before the cut-off check, so that the
    # caller's read of the record is what fails, naming s3:GetObject.
    fake = FakeClient(
        put_object=[client_error("PreconditionFailed", 412)],
        head_object=[client_error("403", 403, "HeadObject")],
    )
    store, rec = make(fake)
    with pytest.raises(KeyExists):
        store.create("k", b"x")
    assert fake.ops() == ["put_object", "head_object"] and rec.sleeps == []


def test_a_create_completes_an_empty_object_tagged_as_a_gtbarrier_write() -> None:
    cut_off = {"ETag": '"e-empty"', "ContentLength": 0, "Metadata": {TOKEN_METADATA: "old"}}
    fake = FakeClient(
        put_object=[client_error("PreconditionFailed", 412), lambda kw: {"ETag": '"e-new"'}],
        head_object=[lambda kw: cut_off],
    )
    store, _ = make(fake)
    assert store.create("k", b"x") == '"e-new"'
    assert fake.ops() == ["put_object", "head_object", "put_object"]
    assert fake.calls[2][1]["IfMatch"] == '"e-empty"' and fake.calls[2][1]["Body"] == b"x"


# --- configuration -------------------------------------------------------------------


@pytest.mark.parametrize("uri", ["s3://Upper/x", "s3://ab", "s3://under_score", "s3://a..b/x"])
def test_bad_bucket_names_are_config_errors(uri: str) -> None:
    with pytest.raises(StoreConfigError) as info:
        S3Store(StoreConfig(uri))
    assert "'state.uri'" in str(info.value) and repr(uri) in str(info.value)


def test_half_given_credentials_are_refused() -> None:
    with pytest.raises(StoreConfigError) as info:
        S3Store(StoreConfig(URI, S3Settings(access_key_id="AK")))
    assert "'s3.secretAccessKey'" in str(info.value)


def test_client_config_turns_botocore_retries_down_and_sets_timeouts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    store = S3Store(
        StoreConfig(
            URI,
            S3Settings(
                endpoint="http://127.0.0.1:9",
                region="eu-west-1",
                access_key_id="AK",
                secret_access_key="SK",
                connect_timeout=1.5,
                read_timeout=7.0,
            ),
        )
    )
    config: Any = store.client.meta.config
    assert config.retries == {"total_max_attempts": 1, "mode": "standard"}
    assert (config.connect_timeout, config.read_timeout) == (1.5, 7.0)
    assert config.s3 == {"addressing_style": "path"}  # default with a custom endpoint
    assert store.client.meta.endpoint_url == "http://127.0.0.1:9"
    assert store.client.meta.region_name == "eu-west-1"

    aws = S3Store(StoreConfig(URI, S3Settings(region="us-east-1")))
    assert cfg(aws).s3 == {"addressing_style": "auto"}
    assert cfg(aws).read_timeout == 20.0

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:10")
    via_env = S3Store(StoreConfig(URI, S3Settings(region="us-east-1")))
    assert via_env.client.meta.endpoint_url == "http://127.0.0.1:10"
    assert cfg(via_env).s3 == {"addressing_style": "path"}
    virtual = S3Store(StoreConfig(URI, S3Settings(region="us-east-1", path_style=False)))
    assert cfg(virtual).s3 == {"addressing_style": "auto"}


def cfg(store: S3Store) -> Any:
    return store.client.meta.config


def test_pickling_drops_client_and_custom_retry() -> None:
    fake = FakeClient()
    store, _ = make(fake)
    clone = pickle.loads(pickle.dumps(store))
    assert clone._s3 is None
    assert clone.retry.deadline == 30.0
    assert (clone.bucket, clone.prefix) == ("bucket-a", "pre/fix")


def test_s3_timeout_options_are_parsed_and_checked() -> None:
    config = StoreConfig.from_options(
        {
            "state.uri": URI,
            "s3.connectTimeout": "500ms",
            "s3.readTimeout": "3s",
            "s3.retryDeadline": "2m",
        }
    )
    assert (config.s3.connect_timeout, config.s3.read_timeout, config.s3.retry_deadline) == (
        0.5,
        3.0,
        120.0,
    )
    assert S3Store(config).retry.deadline == 120.0
    with pytest.raises(ConfigError) as info:
        StoreConfig.from_options({"state.uri": URI, "s3.readTimeout": "0s"})
    assert "'s3.readTimeout' = '0s'" in str(info.value) and "positive duration" in str(info.value)


class _RecordingSession:
    def __init__(self) -> None:
        self.kwargs: dict[str, Any] = {}

    def client(self, service: str, **kwargs: Any) -> object:
        self.kwargs = kwargs
        return object()


def test_credentials_given_as_references_resolve_only_where_the_client_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from state.stores import s3_store

    monkeypatch.setenv("GTB_TEST_S3_KEY", "AKIA-marker")
    monkeypatch.setenv("GTB_TEST_S3_SECRET", "secret-marker-41")
    settings = S3Settings(
        endpoint="http://127.0.0.1:9",
        access_key_id="${env:GTB_TEST_S3_KEY}",
        secret_access_key="${env:GTB_TEST_S3_SECRET}",
    )
    store = S3Store(StoreConfig("s3://bucket/prefix", s3=settings))
    assert b"secret-marker-41" not in pickle.dumps(store)  # what travels keeps the reference
    session = _RecordingSession()
    shared = type("Shared", (), {"session": session, "lock": threading.Lock()})()
    monkeypatch.setattr(s3_store._sessions, "get_or_create", lambda key, create: shared)
    store._make_client()
    assert session.kwargs["aws_access_key_id"] == "AKIA-marker"
    assert session.kwargs["aws_secret_access_key"] == "secret-marker-41"
    monkeypatch.delenv("GTB_TEST_S3_SECRET")
    with pytest.raises(ConfigError, match=r"'s3.secretAccessKey': secret reference \$\{env:"):
        store._make_client()

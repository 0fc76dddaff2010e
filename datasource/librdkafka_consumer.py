"""A librdkafka consumer (the ``confluent-kafka`` package) behind the part of kafka-python's
``KafkaConsumer`` that the executors' read path uses: ``kafkaConsumer.client=confluent``.

The read path (:mod:`datasource.partition_reader`, :mod:`datasource.consumer_pool`) keeps
one contract whatever the client: :class:`LibrdkafkaConsumer` answers ``assign``,
``seek``, ``position``, ``poll``, ``highwater``, ``beginning_offsets``, ``topics``,
``partitions_for_topic`` and ``close`` as kafka-python does, for one assigned partition,
and ``poll`` returns :data:`datasource.record_rows.Row` tuples (without headers). So exact
ranges, gaps, data loss, pooling and positions are decided in one place for both clients.

Why librdkafka: it constructs a consumer in about 0.4 ms against 8 ms for kafka-python,
and reads a partition's first records in about 4 ms against 13 ms
(``python -m benchmarks.consumer_reuse``): a task that meets a partition for the first
time pays a quarter of kafka-python's cost.

What differs from kafka-python, and how it is kept out of the read path's way:

* **Seeks.** librdkafka can only seek a partition it is fetching; :meth:`seek` assigns the
  partition again at the offset instead (about 10 us; it drops what was fetched ahead, as
  a seek does).
* **Positions.** librdkafka forgets a partition's position when it is assigned again
  (``-1001`` until a record is consumed); this class keeps the position the records it
  returned imply, and takes librdkafka's only when it is ahead of it (control batches and
  compacted offsets that librdkafka skipped).
* **Polls.** librdkafka's ``consume(n, timeout)`` waits until it has ``n`` messages;
  :meth:`poll` returns what is queued at once, else waits for the first message only, as
  kafka-python's ``poll`` does.
* **Errors** come as error events (``consume`` and ``error_cb``), not exceptions. They are
  raised as kafka-python's exception classes (:func:`kafka_error`), so that
  :mod:`state.kafka_errors` is still the one translation into gtbarrier's errors. An
  error event that arrives behind records is raised by the next poll: records are never
  dropped for it.
* **Prefetch** is bounded per consumer (``queued.max.messages.kbytes``) to twice
  ``max.partition.fetch.bytes``: a pool of 64 consumers would otherwise queue up to 64 MB
  each.
* **Headers** are not read: confluent-kafka's ``Message.headers()`` fails (a
  ``SystemError`` over a ``UnicodeDecodeError``) on a header key that is not UTF-8, so one
  such record would stop the pipeline for good. ``includeHeaders=true`` is refused with
  this client (:func:`check_settings`); kafka-python reads such keys with replacement
  characters, as Spark's Kafka source does.
* **Topics deleted and created again**: see :meth:`LibrdkafkaConsumer.park`.
* **Closing** can wait for a fetch in flight (up to ``fetch.wait.max.ms``; 1,001 ms was
  seen): :meth:`close` hands the consumer to a closing thread of the process, never
  making a task wait.

Settings: gtkafka's ``kafka.*`` options are kafka-python arguments
(:mod:`datasource.kafka_settings`); :func:`librdkafka_config` translates them.
:func:`check_settings` refuses, when the options are parsed, the ones that have no
librdkafka equivalent, naming the option. Settings of consumer groups, metrics and
auto-commit, which an assign-only reader never uses, are accepted and not passed on.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from typing import Any

from datasource.record_rows import NO_HEADERS, Row
from state.errors import ConfigError
from state.kafka_redaction import REDACT

log = logging.getLogger(__name__)

CLIENT = "confluent"
"""The value of ``kafkaConsumer.client`` that selects this consumer."""

# kafka-python argument -> (librdkafka property, value conversion).
_TRANSLATED: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "client_id": ("client.id", str),
    "request_timeout_ms": ("socket.timeout.ms", int),
    "fetch_max_wait_ms": ("fetch.wait.max.ms", int),
    "fetch_min_bytes": ("fetch.min.bytes", int),
    "fetch_max_bytes": ("fetch.max.bytes", int),
    "max_partition_fetch_bytes": ("max.partition.fetch.bytes", int),
    "receive_message_max_bytes": ("receive.message.max.bytes", int),
    "check_crcs": ("check.crcs", bool),
    "isolation_level": ("isolation.level", str),
    "client_rack": ("client.rack", str),
    "connections_max_idle_ms": ("connections.max.idle.ms", int),
    "metadata_max_age_ms": ("metadata.max.age.ms", int),
    "receive_buffer_bytes": ("socket.receive.buffer.bytes", int),
    "send_buffer_bytes": ("socket.send.buffer.bytes", int),
    "reconnect_backoff_ms": ("reconnect.backoff.ms", int),
    "reconnect_backoff_max_ms": ("reconnect.backoff.max.ms", int),
    "retry_backoff_ms": ("retry.backoff.ms", int),
    "security_protocol": ("security.protocol", str),
    "sasl_mechanism": ("sasl.mechanism", str),
    "sasl_plain_username": ("sasl.username", str),
    # str.__str__: the text of a Secret (a str subclass), handed to librdkafka only.
    "sasl_plain_password": ("sasl.password", str.__str__),
    "sasl_kerberos_service_name": ("sasl.kerberos.service.name", str),
    "ssl_cafile": ("ssl.ca.location", str),
    "ssl_certfile": ("ssl.certificate.location", str),
    "ssl_keyfile": ("ssl.key.location", str),
    "ssl_password": ("ssl.key.password", str.__str__),
    "ssl_crlfile": ("ssl.crl.location", str),
    "ssl_ciphers": ("ssl.cipher.suites", str),
    "ssl_check_hostname": (
        "ssl.endpoint.identification.algorithm",
        lambda check: "https" if check else "none",
    ),
}
# Settings of consumer groups, auto-commit, metrics and kafka-python's own loop: an
# assign-only reader that never commits has no use for them, whichever client reads.
_UNUSED = frozenset(
    {
        "auto_commit_interval_ms",
        "bootstrap_timeout_ms",
        "consumer_timeout_ms",
        "enable_incremental_fetch_sessions",
        "exclude_internal_topics",
        "heartbeat_interval_ms",
        "max_in_flight_requests_per_connection",
        "max_poll_interval_ms",
        "max_poll_records",  # the reader's own cap per poll (RangeReader)
        "metric_group_prefix",
        "metrics_enabled",
        "metrics_num_samples",
        "metrics_sample_window_ms",
        "session_timeout_ms",
    }
)
# What gtkafka fixes (kafka-python's spelling), translated below, never taken from users.
_FIXED = frozenset(
    {
        "bootstrap_servers",
        "group_id",
        "enable_auto_commit",
        "auto_offset_reset",
        "allow_auto_create_topics",
    }
)
_MESSAGE_MAX_BYTES = 1_000_000  # librdkafka's default message.max.bytes
#: A group id is required by librdkafka's consumer; the reader never joins nor commits.
GROUP_ID = "gtkafka-reader"
# librdkafka's timestamp types (NOT_AVAILABLE, CREATE_TIME, LOG_APPEND_TIME) as Kafka's.
_TIMESTAMP_TYPE = (0, 0, 1)


def installed() -> bool:
    """Whether the ``confluent-kafka`` package is importable here."""
    import importlib.util

    return importlib.util.find_spec("confluent_kafka") is not None


def check_settings(settings: Mapping[str, Any], *, headers: bool, where: str, option: str) -> None:
    """Refuse ``kafka.*`` settings (kafka-python arguments) that librdkafka cannot take,
    ``includeHeaders`` (``headers``), and a missing ``confluent-kafka`` package:
    :class:`ConfigError` naming the option."""
    if not installed():
        raise ConfigError(
            option,
            CLIENT,
            "kafka-python, or the confluent-kafka package installed on the driver and every "
            "executor (pip install 'gtbarrier[fast]')",
            where=where,
        )
    if headers:
        raise ConfigError(
            "includeHeaders",
            "true",
            f"false with {option}={CLIENT}: librdkafka's Python binding cannot return header "
            f"keys that are not UTF-8; read headers with {option}=kafka-python",
            where=where,
        )
    received, fetched = settings.get("receive_message_max_bytes"), settings.get("fetch_max_bytes")
    if received is not None and int(received) < int(fetched or 52_428_800) + 512:
        raise ConfigError(
            "kafka.receive.message.max.bytes",
            str(received),
            f"at least kafka.fetch.max.bytes + 512 ({int(fetched or 52_428_800) + 512}) with "
            f"{option}={CLIENT}: librdkafka receives a whole fetch answer at once",
            where=where,
        )
    for arg in sorted(settings):
        if arg in _TRANSLATED or arg in _UNUSED:
            continue
        name = "kafka." + arg.replace("_", ".")
        raise ConfigError(
            name,
            None,  # never the value: it may be a secret
            f"a setting librdkafka takes: with {option}={CLIENT} use kafka-python "
            f"({option}=kafka-python) for {name}",
            where=where,
        )


def librdkafka_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The librdkafka configuration of a reader with kafka-python's ``config`` (what
    :meth:`datasource.options.KafkaSourceOptions.consumer_config` returns)."""
    servers = config["bootstrap_servers"]
    out: dict[str, Any] = {
        "bootstrap.servers": servers if isinstance(servers, str) else ",".join(servers),
        "group.id": GROUP_ID,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "allow.auto.create.topics": False,
        "enable.partition.eof": False,
    }
    for arg, value in config.items():
        if arg in _FIXED or arg in _UNUSED or value is None:
            continue
        name, convert = _TRANSLATED[arg]
        out[name] = convert(value)
    # librdkafka refuses a fetch.max.bytes below message.max.bytes (10^6 by default),
    # which kafka-python allows: the fetch size is the user's, so the other follows it.
    if int(out.get("fetch.max.bytes", _MESSAGE_MAX_BYTES)) < _MESSAGE_MAX_BYTES:
        out["message.max.bytes"] = max(1_000, int(out["fetch.max.bytes"]))
    partition_bytes = int(out.get("max.partition.fetch.bytes", 1024 * 1024))
    out.update(
        {
            # Prefetch: at most two fetches of the partition ahead of the reader...
            "queued.max.messages.kbytes": max(1024, 2 * partition_bytes // 1024),
            "queued.min.messages": int(config.get("max_poll_records", 10_000)),
            # ...and fetching again 20 ms after the reader took them (librdkafka waits a
            # whole second by default, which halves a partition's read rate).
            "fetch.queue.backoff.ms": 20,
            # No periodic metadata refresh: an idle (parked) consumer then never asks for
            # its topic, which librdkafka cannot survive once the topic was deleted and
            # created again (see LibrdkafkaConsumer.park). Errors still refresh it.
            "topic.metadata.refresh.interval.ms": -1,
        }
    )
    return out


class LibrdkafkaConsumer:
    """A librdkafka consumer of one partition at a time, answering as kafka-python's
    ``KafkaConsumer`` does for the calls of the read path (see the module doc).

    ``config`` is kafka-python's (:func:`librdkafka_config` translates it). Rows carry no
    headers (:data:`~datasource.record_rows.NO_HEADERS`).
    """

    #: poll() returns Row lists (what :func:`datasource.record_rows.installed` checks).
    _gtkafka_rows = True

    def __init__(self, **config: Any) -> None:
        from confluent_kafka import Consumer

        self._error: Any = None  # a fatal error event, raised by the next call
        self._pending: Any = None  # an error event that came behind records
        self._tp: Any = None  # the kafka.TopicPartition assigned
        self._position: int | None = None
        self._parked = False
        settings = librdkafka_config(config)
        settings["error_cb"] = self._on_error
        settings["logger"] = _LIBRDKAFKA_LOG
        self._consumer: Any = Consumer(settings)

    # --- kafka-python's interface -----------------------------------------------------

    def assign(self, partitions: list[Any]) -> None:
        """Take ``partitions`` (one ``kafka.TopicPartition``); fetching starts at :meth:`seek`."""
        (tp,) = partitions
        self._tp = tp
        self._position = None

    def seek(self, tp: Any, offset: int) -> None:
        """Read ``tp`` from ``offset`` (an assignment at the offset: librdkafka seeks only a
        partition it is fetching already)."""
        from confluent_kafka import TopicPartition

        self._check_partition(tp)
        self._consumer.assign([TopicPartition(tp.topic, tp.partition, offset)])
        self._position = offset
        self._pending = None
        self._parked = False

    def position(self, tp: Any) -> int | None:
        """The offset of the next record to be returned."""
        from confluent_kafka import TopicPartition

        self._check_partition(tp)
        if self._parked:
            return self._position
        (got,) = self._consumer.position([TopicPartition(tp.topic, tp.partition)])
        if got.offset >= 0 and (self._position is None or got.offset > self._position):
            self._position = int(got.offset)
        return self._position

    def highwater(self, tp: Any) -> int | None:
        """The high watermark of the last fetch answer, if any since the consumer was made."""
        from confluent_kafka import TopicPartition

        self._check_partition(tp)
        _, high = self._consumer.get_watermark_offsets(
            TopicPartition(tp.topic, tp.partition), cached=True
        )
        return int(high) if high >= 0 else None

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[Any, list[Row]]:
        """``{tp: rows}`` with at most ``max_records`` rows (``{}`` when none came within
        ``timeout_ms``); raises the error events of the partition and fatal client errors."""
        self._raise_errors()
        if self._tp is None or self._position is None:
            raise _kafka_errors().IllegalStateError("poll() before assign() and seek()")
        if self._parked:
            self.unpark()
            if timeout_ms <= 0:
                return {}  # nothing is fetched yet: parking dropped what was
        wanted = max(1, max_records or 500)
        consumer = self._consumer
        messages = consumer.consume(wanted, 0)
        if not messages and timeout_ms > 0:
            messages = consumer.consume(1, timeout_ms / 1000.0)
            if messages and wanted > 1 and messages[0].error() is None:
                messages += consumer.consume(wanted - 1, 0)
        if not messages:
            self._raise_errors()
            return {}
        rows = self._rows(messages)
        if not rows:
            self._raise_errors()
            return {}
        self._position = rows[-1][0] + 1
        return {self._tp: rows}

    def beginning_offsets(self, partitions: list[Any], timeout_ms: int) -> dict[Any, int]:
        """The log start of each partition (a ListOffsets request)."""
        from confluent_kafka import KafkaException, TopicPartition

        out = {}
        for tp in partitions:
            try:
                low, _ = self._consumer.get_watermark_offsets(
                    TopicPartition(tp.topic, tp.partition), timeout=timeout_ms / 1000.0
                )
            except KafkaException as err:
                raise kafka_error(err.args[0]) from err
            out[tp] = int(low)
        return out

    def topics(self) -> set[str]:
        """The cluster's topics (a Metadata request)."""
        return set(self._metadata(None).topics)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partitions of ``topic`` (a Metadata request), ``None`` if it does not exist."""
        found = self._metadata(topic).topics.get(topic)
        if found is None or found.error is not None:
            return None
        return set(found.partitions)

    def park(self) -> None:
        """Stop fetching until the next :meth:`poll` or :meth:`seek`, which fetch again from
        the position (what was fetched ahead is dropped).

        The pool parks a consumer once it has been idle for a second
        (:data:`datasource.consumer_pool.PARK_AFTER_S`: not at once, as what it fetched
        ahead serves the next batch's range of its partition). librdkafka (2.16) cannot
        survive a topic that is deleted and created again under a consumer that still
        fetches it or refreshes its metadata: its metadata cache is corrupted and the
        process crashes (upstream: re-creating a topic under a live client is not
        supported yet). A parked consumer does neither, and the pool closes it, unused,
        once a task's plan names the topic under its new id.

        Parking unassigns the partition, and unparking assigns it again at the position:
        a round trip of about 2 ms. (librdkafka's ``pause``/``resume`` would keep the
        assignment, but a resumed partition waits about 300 ms for its next Fetch.)
        """
        if self._tp is not None and self._consumer is not None and not self._parked:
            self._consumer.unassign()
            self._parked = True

    def close(self) -> None:
        """Close on the process's closing thread (a close may wait for a fetch in flight)."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            _CLOSER.close(consumer)

    # --- internals ----------------------------------------------------------------------

    def unpark(self) -> None:
        """Fetch again from the position if parked (:meth:`park`; the next poll does it too)."""
        from confluent_kafka import TopicPartition

        if not self._parked:
            return
        tp, position = self._tp, self._position
        if position is None:
            raise _kafka_errors().IllegalStateError("unpark() before seek()")
        self._consumer.assign([TopicPartition(tp.topic, tp.partition, position)])
        self._parked = False

    def _rows(self, messages: list[Any]) -> list[Row]:
        """The records of ``messages`` as rows, up to the first error event (kept pending)."""
        rows: list[Row] = []
        append = rows.append
        types = _TIMESTAMP_TYPE
        for m in messages:
            if m.error() is not None:
                self._pending = m.error()
                break
            kind, ts = m.timestamp()
            append((m.offset(), ts, types[kind], m.key(), m.value(), NO_HEADERS))
        return rows

    def _raise_errors(self) -> None:
        error, self._error = self._error, None
        if error is None:
            error, self._pending = self._pending, None
        if error is not None:
            raise kafka_error(error)

    def _on_error(self, error: Any) -> None:
        """librdkafka's ``error_cb`` (called from a poll): keep errors that no retry mends
        (authentication, fatal ones); transport errors are librdkafka's to retry, and a
        read that makes no progress fails after ``kafkaConsumer.pollTimeoutMs``."""
        from confluent_kafka import KafkaError

        code = error.code()
        if error.fatal() or code in (KafkaError._AUTHENTICATION, KafkaError._SSL):
            self._error = error
        else:
            log.debug("gtkafka: librdkafka: %s", REDACT.redact(str(error)))

    def _metadata(self, topic: str | None) -> Any:
        from confluent_kafka import KafkaException

        try:
            return self._consumer.list_topics(topic, timeout=10.0)
        except KafkaException as err:
            raise kafka_error(err.args[0]) from err

    def _check_partition(self, tp: Any) -> None:
        if self._tp is None or (tp.topic, tp.partition) != (self._tp.topic, self._tp.partition):
            raise _kafka_errors().IllegalStateError(f"{tp} is not the partition assigned")


def _kafka_errors() -> Any:
    import kafka.errors

    return kafka.errors


def kafka_error(error: Any) -> Exception:
    """A librdkafka ``KafkaError`` as the kafka-python exception the read path expects:
    Kafka's own error codes by their kafka-python class; librdkafka's local ones (negative
    codes) as an offset out of range, a time-out, a lost connection or an authentication
    failure."""
    import kafka.errors as kerr
    from confluent_kafka import KafkaError

    code, text = error.code(), REDACT.redact(error.str())
    cls: type[Exception] = kerr.KafkaError
    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        cls = kerr.OffsetOutOfRangeError
    elif code > 0 and kerr.for_code(code) is not kerr.UnknownError:
        cls = kerr.for_code(code)
    elif code == KafkaError._AUTHENTICATION:
        cls = kerr.SaslAuthenticationFailedError
    elif code == KafkaError._TIMED_OUT:
        cls = kerr.KafkaTimeoutError
    elif code in (
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
        KafkaError._SSL,  # a failed TLS handshake: a connection error, as for kafka-python
    ):
        cls = kerr.KafkaConnectionError
    else:
        text = f"librdkafka {error.name()}: {text}"
    return cls(text)


class _Closer:
    """Closes consumers on a daemon thread of the process, one after another."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def close(self, consumer: Any) -> None:
        self._queue.put(consumer)
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="gtkafka-librdkafka-closer", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            consumer = self._queue.get()
            try:
                consumer.close()
            except Exception:
                log.warning("gtkafka: closing a librdkafka consumer failed", exc_info=True)


_CLOSER = _Closer()
_LIBRDKAFKA_LOG = logging.getLogger(__name__ + ".librdkafka")
_LIBRDKAFKA_LOG.addFilter(REDACT)

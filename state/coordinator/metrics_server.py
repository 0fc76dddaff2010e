"""Reading a pipeline's state for the metrics, at each scrape, and serving ``/metrics``.

:class:`StoreFacts` is what the state store holds (the barrier state, the epoch log up to
``GT_last``, the batch records); epoch and batch records never change once written, so a
:class:`StateReader` reads each one once and only lists the new ones afterwards.
:class:`PipelineCollector` is a ``prometheus_client`` collector that calls a read
function at each scrape and turns its :class:`PipelineReading` into metric families
(:func:`~state.coordinator.metric_families.metric_families`); :class:`MetricsServer` serves it
on a port from a thread of its own. The driver (the coordinator's ``metrics_port``) and
``gtbarrier exporter`` both use them, each with its own read function.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.registry import Collector

from state.coordinator.metric_families import EpochFacts, PipelineReading, metric_families
from state.errors import ConfigError, GtBarrierError
from state.lag import Lag
from state.layout import PipelineLayout
from state.protocol.barrier_state import load_barrier_state
from state.protocol.batch_records import batch_record_keys, read_batch_record_at
from state.protocol.epoch_log import EpochLog
from state.records.barrier import BarrierState
from state.records.floor import FloorRecord
from state.records.source_offset import Frontier
from state.secrets import redact
from state.stores import StateStore

log = logging.getLogger("gtbarrier.metrics")


@dataclass(frozen=True)
class StoreFacts:
    """What the state store holds for the metrics.

    ``barrier``: None if it was never written. ``epochs``: the recorded epochs at or
    below ``GT_last``. ``batches_per_epoch``: how many batch records read each epoch.
    ``planned``: where the newest planned epoch ends (the source's start before any),
    per partition; None before the source started. ``floor``: where the pruned epoch log
    begins (None: nothing pruned); ``epochs`` and ``batches_per_epoch`` hold only what
    lies at or above it, the floor's counts the rest.
    """

    barrier: BarrierState | None
    epochs: tuple[EpochFacts, ...]
    batches_per_epoch: dict[int, int]
    planned: Frontier | None
    floor: FloorRecord | None = None


class StateReader:
    """Reads :class:`StoreFacts` from ``store``; immutable records are read once."""

    def __init__(self, store: StateStore, layout: PipelineLayout) -> None:
        self.store = store
        self.layout = layout
        self._epochs: dict[int, tuple[EpochFacts, Frontier]] = {}
        self._batches: dict[str, int] = {}

    def read(self) -> StoreFacts:
        held = load_barrier_state(self.store, self.layout)
        state, version = held.state, held.version
        epoch_log = EpochLog(self.store, self.layout)
        floor = epoch_log.floor()
        lowest = 0 if floor is None else floor.epoch
        # below the floor: counted by the floor, and no longer remembered here
        self._epochs = {n: facts for n, facts in self._epochs.items() if n >= lowest}
        self._batches = {k: e for k, e in self._batches.items() if e >= lowest}
        numbers = [n for n in epoch_log.epoch_numbers() if n >= lowest]
        unread = epoch_log.read_epochs(n for n in numbers if n not in self._epochs)
        for n, record in unread.items():
            start, end = dict(record.start.offsets), dict(record.end.offsets)
            self._epochs[n] = (EpochFacts(n, Lag.between(start, end).total), end)
        keys = batch_record_keys(self.store, self.layout)
        for key in keys:
            if key not in self._batches:
                batch = read_batch_record_at(self.store, key)
                if batch is not None and batch.epoch >= lowest:
                    self._batches[key] = batch.epoch
        present = set(keys)
        per_epoch = Counter(e for k, e in self._batches.items() if k in present)
        if floor is not None and floor.segments:
            for batch in epoch_log.compacted_batches(floor):
                key = self.layout.batch(batch.query_id, batch.batch_id)
                if key not in present and batch.epoch >= lowest:
                    per_epoch[batch.epoch] += 1
        known = [n for n in numbers if n in self._epochs]
        planned: Frontier | None
        if known:
            planned = self._epochs[known[-1]][1]
        else:
            origin = epoch_log.start()
            planned = None if origin is None else dict(origin.offsets)
        return StoreFacts(
            barrier=None if version is None else state,
            epochs=tuple(self._epochs[n][0] for n in known if n <= state.progress),
            batches_per_epoch=dict(per_epoch),
            planned=planned,
            floor=floor,
        )


class PipelineCollector(Collector):
    """Reads the pipeline with ``read`` at each scrape and yields its metric families.

    A read that fails with a gtbarrier error (a store or ZooKeeper that cannot be
    reached) yields no family and logs one warning, its text without secrets; any other
    error is logged with its traceback, secrets masked as in every log record. The scrape
    still answers, and the missing series say that nothing was read.
    """

    def __init__(
        self, read: Callable[[], PipelineReading], clock: Callable[[], float] = time.time
    ) -> None:
        self._read = read
        self._clock = clock
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Any]:
        with self._lock:  # one read at a time: scrapes may overlap
            try:
                reading = self._read()
            except GtBarrierError as err:
                log.warning(
                    "gtbarrier metrics: could not read the pipeline: %s: %s",
                    type(err).__name__,
                    redact(str(err)),
                )
                return
            except Exception:
                # Not left to the HTTP server, which prints the traceback unmasked: a log
                # record has every secret given to a client masked (state.secrets).
                log.exception("gtbarrier metrics: reading the pipeline failed unexpectedly")
                return
            yield from metric_families(reading, self._clock())

    def describe(self) -> Sequence[Any]:
        # Nothing is read when the collector is registered: only at a scrape.
        return []


class MetricsServer:
    """``/metrics`` of ``collector`` over HTTP on ``address:port`` (0: a free port), from
    a daemon thread, until :meth:`stop`."""

    def __init__(
        self,
        collector: Collector,
        port: int,
        address: str = "0.0.0.0",
        *,
        option: str = "metrics_port",
        where: str = "",
    ) -> None:
        if not 0 <= port <= 65535:
            raise ConfigError(option, port, "a port 0-65535 (0: a free one)", where=where)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        try:
            server, thread = start_http_server(port, address, registry=self.registry)
        except OSError as err:
            raise ConfigError(
                option,
                port,
                f"a port this process can listen on at {address} ({err.strerror or err})",
                where=where,
            ) from err
        self._server: WSGIServer = server
        self._thread: threading.Thread = thread
        self.address = address

    @property
    def port(self) -> int:
        """The bound port (the one chosen when 0 was asked for)."""
        return int(self._server.server_port)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.address in ("", "0.0.0.0") else self.address
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()

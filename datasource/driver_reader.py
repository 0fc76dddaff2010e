"""``readMode=driver``: gtkafka read on the driver, through Spark's simple stream reader.

Spark wraps a :class:`~pyspark.sql.datasource.SimpleDataSourceStreamReader` so that
``latestOffset(start)`` calls :meth:`DriverKafkaStreamReader.read`, which plans the next
epoch and reads its rows at once, in the driver's long-lived Python process; Spark keeps
them and hands them to the JVM with the batch's plan, so a batch starts no Python read
task at all. A batch whose rows are not in that cache (a driver that started again and
runs the last batch of its offset log once more) is read by one Python read task through
:meth:`DriverKafkaStreamReader.readBetweenOffsets`.

The planning is executor mode's, not a copy of it: the reader holds a
:class:`~datasource.stream_reader.GlobalTimeKafkaStreamReader` and asks it for the
persisted start, the epoch log's recorded ends (reused unchanged) and the next end under
the read limits. Spark gives a simple reader no read limit (always "all available"), so
the limit is the one the options declare (``maxOffsetsPerTrigger``,
``minOffsetsPerTrigger``, ``maxTriggerDelay``), the one executor mode's
``getDefaultReadLimit`` gives Spark. ``Trigger.AvailableNow`` sets the planner's target:
each batch plans one epoch under those limits, up to the target, as in executor mode.

The rows are executor mode's, read by the same partitions
(:func:`~datasource.partition_reader.plan_partitions`) through the same
:func:`~datasource.partition_reader.read_partition`: the same schema and ``gt``.

Batch records: a read on the driver has no Spark task, so it writes none; the barrier
learns the batch's epoch from Spark's offset log instead (:mod:`state.spark_offset_log`,
docs/PROTOCOL.md, "Batch records"). A read task of ``readBetweenOffsets`` writes it as
executor mode's marked task does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql.datasource import SimpleDataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from datasource.consumer_pool import ConsumerSource
from datasource.options import KafkaSourceOptions
from datasource.partition_reader import KafkaInputPartition, read_partition
from datasource.schema import arrow_schema
from datasource.stream_reader import GlobalTimeKafkaStreamReader, from_checkpoint
from datasource.topic_id_check import CurrentIds
from state.profiling import span
from state.spark_task import StreamingTask


class DriverKafkaStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """gtkafka's epochs, planned and read on the driver (``readMode=driver``)."""

    def __init__(  # noqa: PLR0913 - keyword-only injectable planner and read clients
        self,
        options: KafkaSourceOptions,
        schema: StructType,
        *,
        planner: GlobalTimeKafkaStreamReader | None = None,
        consumer_factory: Callable[..., Any] | None = None,
        source: ConsumerSource | None = None,
        current_ids: CurrentIds | None = None,
    ) -> None:
        """``planner`` replaces the executor mode's reader whose planning this one uses
        (its clients, clock and sleep injectable as there); ``consumer_factory``,
        ``source`` and ``current_ids`` replace the read's clients as in
        :func:`~datasource.partition_reader.read_partition` (none survives pickling)."""
        self.options = options
        self.schema = schema
        self.planner = planner or GlobalTimeKafkaStreamReader(options, schema)
        self._consumer_factory = consumer_factory
        self._source = source
        self._current_ids = current_ids

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_consumer_factory"] = None
        state["_source"] = None
        state["_current_ids"] = None
        return state

    def initialOffset(self) -> dict[str, Any]:
        """The persisted start (:meth:`GlobalTimeKafkaStreamReader.initialOffset`)."""
        return self.planner.initialOffset()

    def prepareForTriggerAvailableNow(self) -> None:
        """Stop at the latest offsets now; each batch still reads one epoch under the
        options' read limits, until that target."""
        self.planner.prepareForTriggerAvailableNow()

    def read(self, start: dict[str, Any]) -> tuple[Iterator[Any], dict[str, Any]]:
        """The next epoch from ``start`` (recorded, or planned now under the options' read
        limits) and its rows as Arrow record batches; ``start`` itself and no rows when
        there is nothing to read.

        The rows are in a list's iterator: Spark's wrapper copies the iterator it caches.
        """
        limit = self.planner.getDefaultReadLimit()
        end = self.planner.latestOffset(start, limit)
        if end == start:
            return iter([]), start
        with span("driver.read"):
            rows = list(self._rows(start, end, task=None))
        return iter(rows), end

    def readBetweenOffsets(self, start: dict[str, Any], end: dict[str, Any]) -> Iterator[Any]:
        """The rows of the recorded epoch from ``start`` to ``end``: a batch of Spark's
        offset log run again, in a read task, which writes the batch record first as
        executor mode's marked task does."""
        return self._rows(start, end, task=StreamingTask.current())

    def _rows(
        self, start: dict[str, Any], end: dict[str, Any], *, task: StreamingTask | None
    ) -> Iterator[Any]:
        schema = arrow_schema(self.schema)
        begin, finish = from_checkpoint(start), from_checkpoint(end)
        if begin.same_as(finish):
            return
        for part in self.planner.partitions(start, end):
            assert isinstance(part, KafkaInputPartition)
            yield from read_partition(
                self.options,
                part,
                schema,
                task=task,
                consumer_factory=self._consumer_factory,
                source=self._source,
                current_ids=self._current_ids,
            )

    def commit(self, end: dict[str, Any]) -> None:
        """As executor mode: ``commitOffsetsToGroup``, and the epoch log's pruning."""
        self.planner.commit(end)

    def stop(self) -> None:
        self.planner.stop()

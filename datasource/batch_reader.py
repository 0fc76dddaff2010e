"""Batch reads of ``gtkafka``: ``spark.read.format("gtkafka")`` between two frontiers.

``startingOffsets`` (default ``earliest``) and ``endingOffsets`` (default ``latest``), or
their timestamp forms, are resolved against the broker when Spark plans the read. Batch
reads use no epoch log and write no batch records; every row's ``gt`` has epoch 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from datasource.offset_reader import OffsetReader
from datasource.offset_specs import resolve, subscribed_partitions
from datasource.offsets import ranges_between, task_ranges
from datasource.options import KafkaSourceOptions
from datasource.partition_reader import KafkaInputPartition, input_partitions, read_partition
from datasource.schema import arrow_schema
from datasource.subscription import WHERE
from state.errors import ConfigError

BATCH_EPOCH = 0


class GlobalTimeKafkaBatchReader(DataSourceReader):
    """Reads the records between the resolved starting and ending offsets, once."""

    def __init__(self, options: KafkaSourceOptions, schema: StructType) -> None:
        options.require_batch()
        self.options = options
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        reader = OffsetReader(self.options)
        try:
            tps = subscribed_partitions(self.options, reader.topic_partitions())
            start = resolve(
                self.options.batch_starting,
                tps,
                reader,
                role="start",
                strategy=self.options.starting_by_timestamp_strategy,
                fail_on_data_loss=self.options.fail_on_data_loss,
            )
            end = resolve(self.options.batch_ending, tps, reader, role="end")
            topic_ids = reader.topic_ids
        finally:
            reader.close()
        backwards = sorted(tp for tp in tps if end[tp] < start[tp])
        if backwards:
            shown = ", ".join(f"{t}-{p}: {start[(t, p)]} > {end[(t, p)]}" for t, p in backwards)
            raise ConfigError(
                self.options.batch_ending.option,
                self.options.batch_ending.describe(),
                f"ending offsets at or after the starting offsets ({shown})",
                where=WHERE,
            )
        tasks = task_ranges(
            ranges_between(start, end),
            min_partitions=self.options.min_partitions,
            max_records_per_partition=self.options.max_records_per_partition,
            min_records_per_task=self.options.min_records_per_task,
        )
        # Nothing to read: one empty partition (Spark would otherwise plan a bare
        # InputPartition(None) and hand it to read()).
        partitions = input_partitions(BATCH_EPOCH, tasks, records_batch=False, topic_ids=topic_ids)
        return list(partitions) or [KafkaInputPartition(BATCH_EPOCH)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaInputPartition)
        return read_partition(self.options, partition, arrow_schema(self.schema), task=None)

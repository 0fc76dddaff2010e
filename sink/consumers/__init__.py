"""Consumers of the barrier sink, one module each, and the factory that picks one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sink.consumers.base import Ack, Consumer, LastBundle
from sink.faults import FaultInjector
from sink.staging import FileStaging, Staging, StoreStaging
from state.layout import PipelineLayout
from state.stores import StateStore

if TYPE_CHECKING:
    from sink.options import SinkOptions

__all__ = ["Ack", "Consumer", "LastBundle", "open_consumer", "open_staging"]


def open_staging(options: SinkOptions, store: StateStore) -> Staging:
    """Where write tasks stage parts: the consumer's hidden prefix (file/s3/iceberg) or the
    store."""
    if options.consumer == "file":
        assert options.consumer_path is not None
        return FileStaging(options.consumer_path)
    if options.consumer == "s3":
        from sink.consumers.s3 import s3_staging

        return s3_staging(options)
    if options.consumer == "iceberg":
        from sink.consumers.iceberg_staging import iceberg_staging

        return iceberg_staging(options)
    return StoreStaging(store, PipelineLayout(options.pipeline_id))


def open_consumer(
    options: SinkOptions, store: StateStore, faults: FaultInjector | None = None
) -> Consumer:
    """The consumer named by ``options.consumer`` (created in the commit process)."""
    faults = faults if faults is not None else FaultInjector.from_environment()
    staging = open_staging(options, store)
    if options.consumer == "file":
        from sink.consumers.file import FileConsumer

        assert isinstance(staging, FileStaging) and options.consumer_path is not None
        return FileConsumer(options.consumer_path, staging, faults)
    if options.consumer == "s3":
        from sink.consumers.s3 import S3Consumer

        return S3Consumer(options, staging, faults)
    if options.consumer == "kafka":
        from sink.consumers.kafka import KafkaTopicConsumer

        return KafkaTopicConsumer(options, staging, faults)
    if options.consumer == "postgres":
        from sink.consumers.postgres import PostgresConsumer

        return PostgresConsumer(options, staging, faults)
    if options.consumer == "iceberg":
        from sink.consumers.iceberg import IcebergConsumer

        return IcebergConsumer(options, staging, faults)
    from sink.consumers.http import HttpConsumer

    return HttpConsumer(options, staging, faults)

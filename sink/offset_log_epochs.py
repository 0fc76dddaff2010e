"""A batch's epoch learned from Spark's offset log, for a batch without a batch record.

With ``readMode=driver`` the source reads a batch on the driver, where no read task runs
to write the batch record (:mod:`state.protocol.batch_records`). The barrier's commit then
reads the batch's entry, and the previous batch's, in Spark's offset log under the sink's
``checkpointLocation`` option, reads the epoch records its gtkafka offsets name, and lets
:func:`state.spark_offset_log.decide_batch_epoch` (pure) decide which epoch the batch
read, checked against the epoch log. The barrier writes the batch record itself
(:func:`~state.protocol.batch_records.write_batch_record`: created once, a conflicting
record refused), so that every later lookup (segments, pruning, replays) finds it as if a
read task had written it.
"""

from __future__ import annotations

from collections.abc import Callable

from state import spark_offset_log
from state.errors import ConfigError, OffsetLogMismatch
from state.layout import PipelineLayout
from state.protocol.batch_records import write_batch_record
from state.protocol.epoch_log import EpochLog, epoch_of_batch
from state.records.source_offset import SourceOffset
from state.spark_offset_log import OffsetLog
from state.stores import StateStore


def epoch_from_offset_log(
    store: StateStore,
    layout: PipelineLayout,
    offset_log: OffsetLog,
    query_id: str,
    batch_id: int,
) -> int | None:
    """The epoch batch ``batch_id`` read, as Spark's ``offset_log`` and the epoch log
    say; its batch record written. None if the offset log names no epoch of this
    pipeline for it (a no-data batch).

    Raises ``offset_log.missing`` if the log does not hold the batch (Spark logs a batch
    before it runs: for the checkpoint's files, a :class:`~state.errors.ConfigError`
    naming ``checkpointLocation``), and :class:`~state.errors.OffsetLogMismatch` if the
    log disagrees with the epoch log.
    """
    entry = offset_log.entry(batch_id)
    if entry is None:
        raise offset_log.missing(batch_id)
    logged = entry.gtkafka_offsets()
    if not logged:
        return None
    before = offset_log.entry(batch_id - 1) if batch_id > 0 else None
    previous = None if before is None else before.gtkafka_offsets()
    epochs = EpochLog(store, layout)
    wanted = {o.epoch - 1 for o in logged if o.epoch > 0}
    ends: dict[int, SourceOffset | None] = {}
    for number in sorted(wanted):
        record = epochs.read_epoch(number)
        ends[number] = None if record is None else record.end
    # Looked up through its module when called, as every decision the protocol's
    # simulator runs is, so that a test can replace it there.
    epoch = spark_offset_log.decide_batch_epoch(
        logged, previous, ends, where=f"barrier: {offset_log.where(batch_id)}"
    )
    if epoch is not None:
        write_batch_record(store, layout, query_id, batch_id, epoch)
    return epoch


def batch_epoch(  # noqa: PLR0913 - the batch's identity and the two ways to its epoch
    store: StateStore,
    layout: PipelineLayout,
    offset_log: Callable[[], OffsetLog],
    no_record: str,
    *,
    query_id: str,
    batch_id: int,
    rows: int,
) -> int | None:
    """The epoch batch ``batch_id`` read: its batch record, else Spark's offset log
    (``offset_log()``, opened only then; :func:`epoch_from_offset_log`); None for a no-data
    batch.

    A batch with rows fails before anything is delivered when the log cannot be read
    (:class:`ConfigError` naming ``checkpointLocation``) or names no epoch of this
    pipeline (:class:`OffsetLogMismatch`); both errors add ``no_record``
    (:func:`no_record_reason`: the sink's ``pipeline.id`` and ``state.uri``). A batch
    without rows whose log cannot be read is a no-data batch."""
    epoch = epoch_of_batch(store, layout, query_id, batch_id)
    if epoch is not None:
        return epoch
    try:
        return epoch_from_offset_log(store, layout, offset_log(), query_id, batch_id)
    except ConfigError as err:
        if rows:
            raise ConfigError(
                err.option, err.value, f"{err.expected}. Without it: {no_record}", where="barrier"
            ) from None
        return None
    except OffsetLogMismatch as err:
        if rows:
            # Most often the source's pipeline.id or state.uri is not the sink's: the
            # batch record was written, but under the other pipeline.
            raise OffsetLogMismatch(
                f"barrier: {no_record}; nor does Spark's offset log name an epoch of this "
                f"pipeline: {err}"
            ) from None
        raise


def no_record_reason(  # noqa: PLR0913 - the message's every part
    store_uri: str,
    layout: PipelineLayout,
    *,
    pipeline_id: str,
    query_id: str,
    batch_id: int,
    rows: int,
) -> str:
    """Why a batch with rows and no batch record is refused, and the ways out."""
    return (
        f"batch {batch_id} of query {query_id} produced {rows} row(s) but has no batch "
        f"record {store_uri}/{layout.batch(query_id, batch_id)}: either it is a no-data "
        "micro-batch, whose content is not replay-stable (set "
        "spark.sql.streaming.noDataMicroBatches.enabled=false; gtbarrier.register_all(spark) "
        "does), or the query does not read a gtkafka source with the same pipeline.id and "
        f"state.uri as this sink (pipeline.id={pipeline_id!r}, state.uri={store_uri!r})"
    )

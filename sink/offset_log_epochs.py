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

from state import spark_offset_log
from state.layout import PipelineLayout
from state.protocol.batch_records import write_batch_record
from state.protocol.epoch_log import EpochLog
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

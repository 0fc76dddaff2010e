"""Spark's offset log read for a batch's epoch (state.spark_offset_log, pure parts), and
the barrier's lookup through it (sink.offset_log_epochs) against a memory store and a
checkpoint directory written as Spark writes it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from sink.offset_log_epochs import epoch_from_offset_log
from state.errors import ConfigError, EpochLogConflict, MalformedRecord, OffsetLogMismatch
from state.layout import PipelineLayout
from state.protocol.batch_records import read_batch_record, write_batch_record
from state.protocol.epoch_log import EpochLog
from state.records.source_offset import SourceOffset
from state.spark_offset_log import (
    CheckpointOffsetLog,
    checkpoint_directory,
    decide_batch_epoch,
    parse_offset_log,
)
from state.stores import StoreConfig
from state.stores.memory_store import MemoryStore

META = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{"a":"b"}}'


def off(epoch: int, offset: int, topic: str = "t") -> SourceOffset:
    return SourceOffset(epoch, {(topic, 0): offset})


def entry_text(*sources: object) -> str:
    lines = ["v1", META]
    lines += ["-" if s is None else json.dumps(s) for s in sources]
    return "\n".join(lines)


# --- parsing --------------------------------------------------------------------------


def test_an_entry_gives_each_source_line_and_picks_the_gtkafka_offsets() -> None:
    rate = {"value": 12}
    entry = parse_offset_log(entry_text(rate, off(3, 40).to_json(), None), 7, "f")
    assert entry.batch_id == 7
    assert entry.sources == (rate, off(3, 40).to_json(), None)
    assert entry.gtkafka_offsets() == (off(3, 40),)


def test_text_that_is_no_entry_is_a_malformed_record_naming_the_file() -> None:
    with pytest.raises(MalformedRecord, match="cp/offsets/2"):
        parse_offset_log("hello", 2, "cp/offsets/2")
    with pytest.raises(MalformedRecord, match="not JSON"):
        parse_offset_log("v1\n{}\n{not json", 2, "cp/offsets/2")


def test_local_checkpoint_locations_are_read_others_refused_naming_the_option() -> None:
    assert checkpoint_directory("/data/cp") == Path("/data/cp")
    assert checkpoint_directory("relative/cp") == Path("relative/cp")
    assert checkpoint_directory("file:///data/my%20cp") == Path("/data/my cp")
    assert checkpoint_directory("file:/data/cp") == Path("/data/cp")
    with pytest.raises(ConfigError) as missing:
        checkpoint_directory(None)
    assert "checkpointLocation" in str(missing.value)
    assert "readMode=executors" in str(missing.value)
    with pytest.raises(ConfigError) as remote:
        checkpoint_directory("s3a://AKIDSECRET:topsecret@bucket/cp")
    text = str(remote.value)
    assert "checkpointLocation" in text and "s3a://bucket/cp" in text
    assert "topsecret" not in text and "AKIDSECRET" not in text


# --- the decision ----------------------------------------------------------------------


def test_the_offset_matching_the_recorded_end_names_the_epoch_before_it() -> None:
    ends = {4: off(5, 100)}
    assert decide_batch_epoch([off(5, 100)], [off(4, 60)], ends, where="w") == 4


def test_an_offset_the_previous_batch_logged_too_read_nothing() -> None:
    ends = {4: off(5, 100)}
    assert decide_batch_epoch([off(5, 100)], [off(5, 100)], ends, where="w") is None


def test_epoch_zero_start_and_no_gtkafka_offsets_read_nothing() -> None:
    assert decide_batch_epoch([off(0, 0)], None, {}, where="w") is None
    assert decide_batch_epoch([], None, {}, where="w") is None


def test_another_pipelines_offset_is_told_apart_by_the_epoch_log() -> None:
    ours, theirs = off(3, 30, "orders"), off(8, 90, "clicks")
    ends = {2: ours, 7: off(8, 91, "clicks")}
    assert decide_batch_epoch([theirs, ours], None, ends, where="w") == 2


def test_a_lone_offset_the_epoch_log_does_not_record_is_a_mismatch() -> None:
    with pytest.raises(OffsetLogMismatch, match="epoch 4") as info:
        decide_batch_epoch([off(5, 100)], None, {4: off(5, 99)}, where="w")
    assert "new checkpointLocation" in str(info.value)
    with pytest.raises(OffsetLogMismatch, match="no end"):
        decide_batch_epoch([off(5, 100)], None, {4: None}, where="w")


def test_two_matching_offsets_of_different_epochs_are_ambiguous() -> None:
    a, b = off(3, 30, "a"), off(5, 50, "b")
    with pytest.raises(OffsetLogMismatch, match=r"pipeline\.id"):
        decide_batch_epoch([a, b], None, {2: a, 4: b}, where="w")


def test_two_gtkafka_offsets_reading_one_topic_partition_are_refused() -> None:
    # Another pipeline on the same partition that lags behind this one reaches, in a
    # batch where this one read nothing, an offset this pipeline recorded as an older
    # epoch's end: the batch's rows are not that epoch's.
    ours, theirs_before, theirs = off(5, 50), off(2, 20), off(3, 30)
    ends = {2: off(3, 30), 4: ours}
    with pytest.raises(OffsetLogMismatch, match=r"t\[0\].*readMode=executors"):
        decide_batch_epoch([ours, theirs], [ours, theirs_before], ends, where="w")


def test_one_pipelines_source_read_several_times_logs_one_offset() -> None:
    # a query that reads the source once per branch logs the same offset for each
    ends = {4: off(5, 100)}
    assert decide_batch_epoch([off(5, 100)] * 3, [off(4, 60)] * 3, ends, where="w") == 4
    assert decide_batch_epoch([off(0, 0)] * 3, None, ends, where="w") is None


# --- the barrier's lookup (I/O around the decision) -----------------------------------


class Pipeline:
    def __init__(self, tmp_path: Path) -> None:
        self.store = MemoryStore(StoreConfig(f"memory://ol-{uuid.uuid4().hex}"))
        self.layout = PipelineLayout("p")
        self.log = EpochLog(self.store, self.layout)
        self.cp = tmp_path / "cp"
        (self.cp / "offsets").mkdir(parents=True)

    def epoch(self, k: int, start: int, end: int) -> None:
        self.log.record(off(k, start), off(k + 1, end), {})

    def log_at(self, location: str | None) -> CheckpointOffsetLog:
        return CheckpointOffsetLog(location)

    def logged(self, batch: int, *sources: object) -> None:
        (self.cp / "offsets" / str(batch)).write_text(entry_text(*sources))


def test_the_lookup_writes_the_batch_record(tmp_path: Path) -> None:
    p = Pipeline(tmp_path)
    p.epoch(0, 0, 10)
    p.epoch(1, 10, 25)
    p.logged(0, off(1, 10).to_json())
    p.logged(1, off(2, 25).to_json())
    assert epoch_from_offset_log(p.store, p.layout, p.log_at(f"file://{p.cp}"), "q", 1) == 1
    record = read_batch_record(p.store, p.layout, "q", 1)
    assert record is not None and record.epoch == 1
    assert epoch_from_offset_log(p.store, p.layout, p.log_at(str(p.cp)), "q", 0) == 0


def test_a_no_data_batch_has_no_epoch_and_a_batch_not_logged_is_refused(tmp_path: Path) -> None:
    p = Pipeline(tmp_path)
    p.epoch(0, 0, 10)
    p.logged(0, off(1, 10).to_json())
    p.logged(1, off(1, 10).to_json())  # a no-data batch repeats the offsets
    assert epoch_from_offset_log(p.store, p.layout, p.log_at(str(p.cp)), "q", 1) is None
    assert read_batch_record(p.store, p.layout, "q", 1) is None
    # Spark logs a batch before it runs: no entry means this process does not see the
    # query's checkpoint there
    with pytest.raises(ConfigError, match="offsets/9 is missing") as info:
        epoch_from_offset_log(p.store, p.layout, p.log_at(str(p.cp)), "q", 9)
    assert "checkpointLocation" in str(info.value)


def test_a_recorded_batch_of_another_epoch_conflicts(tmp_path: Path) -> None:
    p = Pipeline(tmp_path)
    p.epoch(0, 0, 10)
    p.logged(0, off(1, 10).to_json())
    write_batch_record(p.store, p.layout, "q", 0, 5)
    with pytest.raises(EpochLogConflict):
        epoch_from_offset_log(p.store, p.layout, p.log_at(str(p.cp)), "q", 0)


def test_without_a_readable_checkpoint_the_option_is_named(tmp_path: Path) -> None:
    p = Pipeline(tmp_path)
    with pytest.raises(ConfigError, match="checkpointLocation"):
        p.log_at(None)

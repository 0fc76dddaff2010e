"""Rows a consumer's target refuses (``errors.tolerance``) and dead letters, without servers.

The options; the write task's checks (the shared null-``gt`` check and the kind's
``validate``, here consumer=http with ``consumer.format=jsonl``, which refuses strings that
are not UTF-8); the dead-letter file (format, create-once, another pipeline's file); and
the barrier's step: the file written before the bundle is recorded in flight, never twice
across a crash before the in-flight record, a redelivery, or a replay.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from sink.barrier import Barrier
from sink.bundle import BarrierCommitMessage
from sink.consumers.consumer_kind import RowRejection
from sink.consumers.http import HTTP, HttpSettings
from sink.dead_letters.dead_letter_files import (
    DeadLetterFile,
    FileDeadLetters,
    StoreDeadLetters,
    expired,
    open_dead_letters,
)
from sink.dead_letters.dead_letter_format import (
    BUNDLE_COLUMN,
    COLUMN_COLUMN,
    NO_GT,
    REASON_COLUMN,
    dead_letter_name,
    input_columns,
    nullable_schema,
    pairs,
    recorded_against,
    unmatched,
    without_rows,
)
from sink.dead_letters.dead_letter_settings import DeadLetterSettings
from sink.dead_letters.dead_letter_settlement import DeadLetterSettlement
from sink.faults import FaultInjector, InjectedFault
from sink.known_state import KNOWN
from sink.options import SinkOptions
from sink.write_task import NULL_GT, RowChecks, check_rows, stage_task
from state.errors import (
    CommitFailed,
    ConfigError,
    PipelineFenced,
    RowsRefused,
    StateError,
    UnknownOptionError,
)
from state.protocol.barrier_state import HeldState
from state.records.gt import arrow_array as gt_array
from state.spark_task import StreamingTask
from state.stores import open_store
from tests.sink_helpers import Pipeline, sink_options

BAD = b"caf\xe9"  # latin-1, not UTF-8


def note_batch(
    epoch: int,
    partition: int,
    offsets: Sequence[int],
    *,
    bad: Sequence[int] = (),
    null_gt: Sequence[int] = (),
) -> pa.RecordBatch:
    """Rows ``value``, ``note`` (a string; bytes that are not UTF-8 at offsets ``bad``) and
    ``gt`` (null at offsets ``null_gt``, its fields null there too, as Spark gives them
    although their type says not nullable)."""
    n = len(offsets)
    gt = gt_array(
        pa.array([epoch] * n, pa.int64()),
        pa.array(["t"] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array(list(offsets), pa.int64()),
    )
    if null_gt:
        mask = pa.array([o in null_gt for o in offsets], pa.bool_())
        gt = pa.StructArray.from_arrays(
            [
                pc.if_else(mask, pa.scalar(None, gt.type.field(i).type), gt.field(i))
                for i in range(gt.type.num_fields)
            ],
            fields=list(gt.type),
            mask=mask,
        )
    notes = pa.array([BAD if o in bad else f"n{o}".encode() for o in offsets], pa.binary()).view(
        pa.string()
    )
    values = pa.array([f"{partition}:{o}".encode() for o in offsets], pa.binary())
    return pa.RecordBatch.from_arrays([values, notes, gt], names=["value", "note", "gt"])


def jsonl(tmp_path: Path | None = None, **extra: str) -> SinkOptions:
    """consumer=http with jsonl bodies (refuses strings that are not UTF-8); with
    ``tmp_path``, errors.tolerance=all into ``<tmp_path>/dl``."""
    opts = {"consumer.format": "jsonl", **extra}
    if tmp_path is not None:
        opts.update({"errors.tolerance": "all", "errors.deadLetter.path": f"file://{tmp_path}/dl"})
    return sink_options(**opts)


def notes(table: pa.Table | None) -> list[bytes]:
    assert table is not None
    found: list[bytes] = table.column("note").combine_chunks().view(pa.binary()).to_pylist()
    return found


def crash_at(step: str) -> FaultInjector:
    class Crash(FaultInjector):
        def at(self, name: str, n: int | None) -> None:
            if name == step:
                raise InjectedFault(f"crash at {step}")

    return Crash()


def file_id(path: Path) -> tuple[int, int]:
    """What changes if a file is written again: its inode and modification time."""
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


# --- options ------------------------------------------------------------------------------


def test_errors_tolerance_is_none_by_default_and_all_takes_a_file_or_s3_destination(
    tmp_path: Path,
) -> None:
    assert sink_options().errors == DeadLetterSettings()
    assert not sink_options().errors.tolerant
    local = sink_options(
        **{"errors.tolerance": "ALL", "errors.deadLetter.path": f"file://{tmp_path}/dl/"}
    )
    assert local.errors == DeadLetterSettings("all", f"file://{tmp_path}/dl")
    s3 = sink_options(**{"errors.tolerance": "all", "errors.deadLetter.path": "s3://b/dl"})
    assert s3.errors.path == "s3://b/dl" and s3.errors.tolerant


@pytest.mark.parametrize(
    ("extra", "option", "expected"),
    [
        ({"errors.tolerance": "some"}, "errors.tolerance", "'none', 'all'"),
        ({"errors.tolerance": "all"}, "errors.deadLetter.path", "file:///absolute/dir"),
        (
            {"errors.tolerance": "all", "errors.deadLetter.path": "/tmp/dl"},
            "errors.deadLetter.path",
            "file:///absolute/dir or s3://bucket/prefix",
        ),
        (
            {"errors.tolerance": "all", "errors.deadLetter.path": "file://host/dl"},
            "errors.deadLetter.path",
            "file:///absolute/dir",
        ),
        (
            {"errors.tolerance": "all", "errors.deadLetter.path": "s3://"},
            "errors.deadLetter.path",
            "s3://bucket/prefix",
        ),
        (
            {"errors.deadLetter.path": "file:///tmp/dl"},
            "errors.deadLetter.path",
            "not to be set with errors.tolerance=none",
        ),
        (
            {
                "errors.tolerance": "all",
                "errors.deadLetter.path": "file:///tmp/dl",
                "errors.deadLetter.topic": "dlq",
            },
            "errors.deadLetter.topic",
            "errors.deadLetter.kafka.bootstrap.servers",
        ),
        (
            {
                "errors.tolerance": "all",
                "errors.deadLetter.path": "file:///tmp/dl",
                "errors.deadLetter.kafka.linger.ms": "5",
            },
            "errors.deadLetter.kafka.linger.ms",
            "errors.deadLetter.topic",
        ),
        *(
            (
                {
                    "errors.tolerance": "all",
                    "errors.deadLetter.path": "file:///tmp/dl",
                    "errors.deadLetter.topic": "dlq",
                    "errors.deadLetter.kafka.bootstrap.servers": "127.0.0.1:9092",
                    f"errors.deadLetter.kafka.{name}": value,
                },
                f"errors.deadLetter.kafka.{name}",
                expected,
            )
            for name, value, expected in [("acks", "1", "not to be set")]
        ),
    ],
)
def test_bad_error_options_name_the_option_the_value_and_what_was_expected(
    extra: dict[str, str], option: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as err:
        sink_options(**extra)
    assert f"option '{option}'" in str(err.value) and expected in str(err.value)


def test_an_unknown_producer_setting_is_named_without_its_value() -> None:
    """The unknown-setting error of every Kafka client's settings (state.kafka_settings):
    the setting named, what is accepted listed, the value never shown (a misspelt password
    setting would show the password)."""
    with pytest.raises(UnknownOptionError) as err:
        sink_options(
            **{
                "errors.tolerance": "all",
                "errors.deadLetter.path": "file:///tmp/dl",
                "errors.deadLetter.topic": "dlq",
                "errors.deadLetter.kafka.bootstrap.servers": "127.0.0.1:9092",
                "errors.deadLetter.kafka.no.such.setting": "value-5f1",
            }
        )
    text = str(err.value)
    assert "'errors.deadLetter.kafka.no.such.setting'" in text
    assert "kafka-python producer settings" in text and "errors.deadLetter.kafka.linger.ms" in text
    assert "value-5f1" not in text


def test_the_topic_takes_its_cluster_and_producer_settings() -> None:
    errors = sink_options(
        **{
            "errors.tolerance": "all",
            "errors.deadLetter.path": "s3://b/dl",
            "errors.deadLetter.topic": "dlq",
            "errors.deadLetter.kafka.bootstrap.servers": "127.0.0.1:9092",
            "errors.deadLetter.kafka.Linger.Ms": "5",
        }
    ).errors
    assert (errors.topic, errors.bootstrap, errors.kafka) == (
        "dlq",
        "127.0.0.1:9092",
        (("linger.ms", "5"),),
    )


def test_unknown_error_option_is_named() -> None:
    with pytest.raises(UnknownOptionError, match=r"errors\.deadLetter\.pth"):
        sink_options(**{"errors.deadLetter.pth": "file:///tmp/dl"})


def test_dead_letters_inside_the_file_consumers_directory_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"outside consumer\.path") as err:
        sink_options(
            consumer="file",
            **{
                "consumer.url": "",
                "consumer.path": str(tmp_path / "out"),
                "errors.tolerance": "all",
                "errors.deadLetter.path": f"file://{tmp_path}/out/dead",
            },
        )
    assert "errors.deadLetter.path" in str(err.value)


def test_start_check_refuses_an_input_with_the_added_columns_and_an_unwritable_destination(
    tmp_path: Path,
) -> None:
    schema = StructType(
        [StructField("value", BinaryType()), StructField("_gtb_reason", StringType())]
    )
    with pytest.raises(ConfigError, match="_gtb_reason"):
        jsonl(tmp_path).check_at_start(schema)
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    opts = jsonl(
        None, **{"errors.tolerance": "all", "errors.deadLetter.path": f"file://{blocked}/dl"}
    )
    with pytest.raises(ConfigError, match=r"option 'errors.deadLetter.path' .* can write"):
        opts.check_at_start(StructType([StructField("value", BinaryType())]))
    ok = StructType([StructField("value", BinaryType())])
    assert jsonl(tmp_path).check_at_start(ok).errors.tolerant
    assert (tmp_path / "dl").is_dir()  # made before any data moves


# --- the checks in the write task ---------------------------------------------------------


def test_jsonl_http_refuses_strings_that_are_not_utf8_and_arrow_takes_them() -> None:
    table = pa.Table.from_batches([note_batch(1, 0, [0, 1, 2], bad=[1])])
    [rejection] = HTTP.validate(HttpSettings("http://h/x", "jsonl"), table)
    assert rejection.row == 1 and rejection.column == "note"
    assert "not valid UTF-8" in rejection.reason and "jsonl" in rejection.reason
    assert HTTP.validate(HttpSettings("http://h/x", "arrow"), table) == []
    nested = pa.table(
        {"s": pa.StructArray.from_arrays([table.column("note").combine_chunks()], ["a"])}
    )
    assert [
        (r.row, r.column) for r in HTTP.validate(HttpSettings("http://h", "jsonl"), nested)
    ] == [(1, "s")]


def test_the_kind_sees_the_rows_in_gt_order_and_null_gt_rows_are_refused_by_every_kind() -> None:
    seen: list[list[int]] = []

    class Spy(type(HTTP)):  # type: ignore[misc]
        def validate(self, settings: Any, table: pa.Table) -> list[RowRejection]:
            seen.append(table.column("gt").combine_chunks().field("offset").to_pylist())
            return [RowRejection(0, None, "the first row in gt order")]

    rows = pa.concat_tables(
        [
            pa.Table.from_batches([note_batch(2, 0, [9, 3])]),
            pa.Table.from_batches([note_batch(2, 0, [5, 7], null_gt=[7])]),
        ]
    )
    checks = RowChecks("http", Spy(), HttpSettings("http://h", "jsonl"), "all")
    checked = check_rows(rows, checks, has_gt=True)
    assert seen == [[3, 5, 9]]  # the null-gt row is not given to the kind
    assert [(r.column, r.reason) for r in checked.rejections] == [
        ("gt", NULL_GT),
        (None, "the first row in gt order"),
    ]
    assert checked.accepted.column("gt").combine_chunks().field("offset").to_pylist() == [5, 9]
    assert checked.refused is not None
    assert checked.refused.column(COLUMN_COLUMN).to_pylist() == ["gt", None]
    assert notes(checked.refused) == [b"n7", b"n3"]


def test_refused_rows_fail_the_task_before_anything_is_staged(tmp_path: Path) -> None:
    p = Pipeline(jsonl())
    p.record_batch(0, epoch=3)
    with pytest.raises(RowsRefused) as err:
        p.write(0, [note_batch(3, 0, [4, 5, 6], bad=[5, 6])])
    text = str(err.value)
    assert "bundle 3 (epoch 3, batch 0 of query" in text and "was not stored" in text
    assert "gt (epoch 3 t-0@5)" in text and "(and 1 more row(s) of this task)" in text
    assert "column 'note'" in text and "not valid UTF-8" in text
    assert "errors.tolerance=all" in text and "errors.deadLetter.path" in text
    assert p.staged() == []


def test_a_null_gt_is_a_refused_row_too() -> None:
    p = Pipeline(jsonl())
    p.record_batch(0, epoch=3)
    with pytest.raises(RowsRefused, match=r"gt null, column 'gt': no gt \(null\)"):
        p.write(0, [note_batch(3, 0, [1, 2], null_gt=[2])])
    assert p.staged() == []


def test_with_tolerance_all_the_task_stages_refused_rows_as_its_dead_letter_part(
    tmp_path: Path,
) -> None:
    p = Pipeline(jsonl(tmp_path))
    p.record_batch(0, epoch=3)
    m = p.write(0, [note_batch(3, 0, [6, 5, 4], bad=[5], null_gt=[6])])
    assert m.part is not None and m.dead_letters is not None
    assert (m.rows, m.dead_letter_rows) == (1, 2)
    assert m.dead_letters.location.rsplit("/", 1)[1].startswith("dl-p00000-t")
    staged = p.staging.read_part(m.dead_letters.location)
    assert staged.column_names == ["value", "note", "gt", REASON_COLUMN, COLUMN_COLUMN]
    assert staged.column(COLUMN_COLUMN).to_pylist() == ["gt", "note"]
    assert notes(staged) == [b"n6", BAD]
    assert sorted(p.staged()) == sorted([m.part.location, m.dead_letters.location])


# --- the dead-letter file -----------------------------------------------------------------


def test_the_file_holds_the_input_columns_as_they_were_and_the_three_added_columns(
    tmp_path: Path,
) -> None:
    p = Pipeline(jsonl(tmp_path))
    p.record_batch(0, epoch=3)
    outcome = p.barrier().commit([p.write(0, [note_batch(3, 0, [0, 1, 2], bad=[1])])], 0)
    assert outcome.action == "delivered" and (outcome.rows, outcome.dead_letters) == (2, 1)
    path = tmp_path / "dl" / dead_letter_name(3)
    assert outcome.dead_letters_at == f"file://{path}"
    table = pq.read_table(path)
    # the input's names and types; every field nullable (a refused row may hold a null
    # where the input's schema declares none, as a null gt's fields)
    expected = pa.schema(
        [
            *nullable_schema(note_batch(3, 0, []).schema),
            pa.field(BUNDLE_COLUMN, pa.int64()),
            pa.field(REASON_COLUMN, pa.string()),
            pa.field(COLUMN_COLUMN, pa.string()),
        ]
    )
    assert table.schema.remove_metadata() == expected
    assert table.schema.field("gt").type.field("epoch").type == pa.int64()
    assert table.column(BUNDLE_COLUMN).to_pylist() == [3]
    assert table.column(COLUMN_COLUMN).to_pylist() == ["note"]
    assert notes(table) == [BAD]
    meta = pq.read_metadata(path).metadata
    assert meta[b"gtbarrier.pipeline"] == b"p1" and meta[b"gtbarrier.bundle"] == b"3"
    assert [d[0] for d in p.consumer.delivered] == [3] and notes(p.consumer.delivered[0][1]) == [
        b"n0",
        b"n2",
    ]
    assert p.staged() == []  # the dead-letter part too
    assert sorted(os.listdir(tmp_path / "dl")) == [dead_letter_name(3)]


def test_a_file_is_created_once_and_another_pipelines_file_is_never_taken_as_ours(
    tmp_path: Path,
) -> None:
    dl = FileDeadLetters(str(tmp_path / "dl"))
    rows = pa.table({"v": [1, 2], REASON_COLUMN: ["r", "r"], COLUMN_COLUMN: ["v", None]})
    first = dl.write("p1", 7, lambda: rows)
    assert first.written and first.rows == 2
    again = dl.write("p1", 7, lambda: pytest.fail("the rows are read only to write the file"))
    assert not again.written and again.rows == 2 and again.location == first.location
    with pytest.raises(StateError, match="shared by two pipelines"):
        dl.write("p2", 7, lambda: rows)
    assert [(f.bundle_id, f.rows, f.pipeline_id) for f in dl.files()] == [(7, 2, "p1")]
    assert dl.read(7).column(BUNDLE_COLUMN).to_pylist() == [7, 7]


def test_the_same_on_a_store(tmp_path: Path) -> None:
    dl = open_dead_letters(f"memory://{tmp_path.name}-dl")
    assert isinstance(dl, StoreDeadLetters)
    rows = pa.table({"v": [1], REASON_COLUMN: ["r"], COLUMN_COLUMN: [None]}, schema=None)
    assert dl.write("p1", 2, lambda: rows).written
    assert not dl.write("p1", 2, lambda: rows).written
    assert dl.write("p1", 10, lambda: rows).written
    assert [f.bundle_id for f in dl.files()] == [2, 10]
    assert dl.read(10).num_rows == 1


# --- the barrier's step -------------------------------------------------------------------


def test_dead_letters_are_written_after_the_bundle_is_recorded_in_flight_before_delivery(
    tmp_path: Path,
) -> None:
    """Nothing is written to the dead letters before the swap that records the bundle in
    flight (a crash there leaves nothing); after it, the file is created before anything
    of the bundle is delivered, and a restart that resolves the bundle in flight finds it
    and does not write it again."""
    p = Pipeline(jsonl(tmp_path))
    path = tmp_path / "dl" / dead_letter_name(1)
    p.consumer.on_deliver = lambda bundle: seen.append(path.exists())
    seen: list[bool] = []
    p.record_batch(0, epoch=1)
    with pytest.raises(InjectedFault):
        p.barrier(faults=crash_at("before_inflight")).commit(
            [p.write(0, [note_batch(1, 0, [0, 1], bad=[0])])], 0
        )
    assert not path.exists() and p.state().inflight is None
    with pytest.raises(InjectedFault):
        p.barrier(faults=crash_at("after_dead_letters")).commit(
            [p.write(0, [note_batch(1, 0, [0, 1], bad=[0])])], 0
        )
    assert path.exists() and p.consumer.calls == 0
    assert p.inflight().dead_letter_rows == 1 and p.state().gt_last == -1
    written = file_id(path)
    # the restart resolves the bundle in flight; its replay of the epoch is dropped
    p.run_id = "run-b"
    outcome = p.barrier().commit([p.write(0, [note_batch(1, 0, [0, 1], bad=[0])])], 0)
    assert outcome.action == "dropped" and outcome.recovered == 1
    assert seen == [True] and file_id(path) == written
    assert p.state().gt_last == 1 and pq.read_table(path).num_rows == 1
    assert [(d[0], values_of(d[1])) for d in p.consumer.delivered] == [(1, [b"0:1"])]
    assert p.staged() == []


@dataclass(frozen=True)
class AlsoRefusing:
    """The jsonl http kind, refusing besides the rows whose ``value`` is in ``values``: a
    target that refuses more than it did (a table altered, a limit lowered)."""

    values: frozenset[bytes]

    def validate(self, settings: Any, table: pa.Table) -> list[RowRejection]:
        more = [
            RowRejection(i, "value", "refused now")
            for i, v in enumerate(table.column("value").to_pylist())
            if v in self.values
        ]
        return [*HTTP.validate(settings, table), *more]


def write_refusing(
    p: Pipeline, batch_id: int, batch: pa.RecordBatch, values: Sequence[bytes]
) -> BarrierCommitMessage:
    """A write task of ``p`` whose target also refuses the rows with these values."""
    kind: Any = AlsoRefusing(frozenset(values))
    checks = RowChecks("http", kind, p.options.settings, "all")
    task = StreamingTask(p.query_id, batch_id, p.run_id, partition=0, task_attempt=9000 + batch_id)
    return stage_task(iter([batch]), task, p.staging, has_gt=True, checks=checks)


def values_of(table: pa.Table | None) -> list[bytes]:
    assert table is not None
    found: list[bytes] = table.column("value").to_pylist()
    return sorted(found)


def earlier_file(
    p: Pipeline, tmp_path: Path, bundle_id: int, rows: pa.RecordBatch, values: Sequence[bytes]
) -> tuple[int, int]:
    """Bundle ``bundle_id``'s file as an earlier record of the bundle left it, refusing
    the rows of ``rows`` with ``values`` (its in-flight record cleared as lost since, or an
    attempt of a release that wrote the file before the record); its :func:`file_id`."""
    FileDeadLetters(str(tmp_path / "dl")).write(
        "p1", bundle_id, lambda: write_refusing_table(p, rows, values)
    )
    return file_id(tmp_path / "dl" / dead_letter_name(bundle_id))


def test_a_replay_that_accepts_rows_the_file_holds_delivers_only_the_others(
    tmp_path: Path,
) -> None:
    """A bundle's file is the record of what was refused: a replay whose target accepts
    those rows now keeps them out of the delivery, and writes no file."""
    p = Pipeline(jsonl(tmp_path))
    path = tmp_path / "dl" / dead_letter_name(1)
    rows = note_batch(1, 0, [0, 1, 2, 3])
    written = earlier_file(p, tmp_path, 1, rows, [b"0:1", b"0:3"])
    p.record_batch(0, epoch=1)
    m = p.write(0, [rows])
    assert m.dead_letters is None and m.rows == 4  # this attempt refuses nothing
    outcome = p.barrier().commit([m], 0)
    assert outcome.action == "delivered" and (outcome.rows, outcome.dead_letters) == (4, 2)
    ((bundle, table, _),) = p.consumer.delivered
    assert bundle == 1 and values_of(table) == [b"0:0", b"0:2"]
    assert file_id(path) == written and values_of(pq.read_table(path)) == [b"0:1", b"0:3"]
    assert p.state().gt_last == 1 and p.staged() == []


def test_a_changed_query_s_replay_matches_the_file_s_rows_by_their_gt(
    tmp_path: Path,
) -> None:
    """A query changed between two attempts of a bundle (an upgrade) computes other values
    for the same records: the file's row is matched by its ``gt``, stays the dead letter,
    and its new version is not delivered; the file is not written again."""
    p = Pipeline(jsonl(tmp_path))
    path = tmp_path / "dl" / dead_letter_name(1)
    rows = note_batch(1, 0, [0, 1, 2, 3])
    written = earlier_file(p, tmp_path, 1, rows, [b"0:1"])
    upgraded = pa.RecordBatch.from_arrays(
        [rows.column(0), pa.array([f"v2-n{o}" for o in range(4)]), rows.column(2)],
        names=rows.schema.names,
    )
    p.record_batch(0, epoch=1)
    outcome = p.barrier().commit([p.write(0, [upgraded])], 0)  # it refuses nothing
    assert outcome.action == "delivered" and outcome.dead_letters == 1
    ((_, table, _),) = p.consumer.delivered
    assert table is not None and table.column("note").to_pylist() == ["v2-n0", "v2-n2", "v2-n3"]
    assert file_id(path) == written and notes(pq.read_table(path)) == [b"n1"]
    assert p.staged() == []


def fan_out_batch() -> pa.RecordBatch:
    """Rows ``0:0a`` and ``0:0b`` made from one input record (an explode: the same ``gt``,
    offset 0), then ``0:1`` (offset 1)."""
    gt = gt_array(
        pa.array([1, 1, 1], pa.int64()),
        pa.array(["t"] * 3, pa.string()),
        pa.array([0, 0, 0], pa.int32()),
        pa.array([0, 0, 1], pa.int64()),
    )
    values = pa.array([b"0:0a", b"0:0b", b"0:1"], pa.binary())
    notes = pa.array(["n0a", "n0b", "n1"], pa.string())
    return pa.RecordBatch.from_arrays([values, notes, gt], names=["value", "note", "gt"])


def test_fan_out_rows_refused_in_turn_by_two_attempts_each_end_in_one_place(
    tmp_path: Path,
) -> None:
    """Two rows of one input record share its ``gt``. An earlier attempt's file holds
    ``0:0a``; this attempt refuses ``0:0b`` instead (NOT NULL moved to another column). The
    ``gt`` must not pair the file's ``0:0a`` with ``0:0b``: ``0:0b`` is a refusal the file
    lacks, so the commit stops with nothing delivered and the file kept. An attempt that
    refuses ``0:0a`` again delivers the others, each row then in one place."""
    p = Pipeline(jsonl(tmp_path))
    path = tmp_path / "dl" / dead_letter_name(1)
    rows = fan_out_batch()
    written = earlier_file(p, tmp_path, 1, rows, [b"0:0a"])
    p.record_batch(0, epoch=1)
    with pytest.raises(StateError, match="1 of them not"):
        p.barrier().commit([write_refusing(p, 0, rows, [b"0:0b"])], 0)
    assert p.consumer.calls == 0 and file_id(path) == written
    p.run_id = "run-b"
    p.record_batch(1, epoch=1)
    outcome = p.barrier().commit([write_refusing(p, 1, rows, [b"0:0a"])], 1)
    assert outcome.action == "delivered"
    ((_, table, _),) = p.consumer.delivered
    delivered, dead = values_of(table), values_of(pq.read_table(path))
    for value in (b"0:0a", b"0:0b", b"0:1"):
        assert (delivered + dead).count(value) == 1, (value, delivered, dead)
    assert dead == [b"0:0a"] and p.state().gt_last == 1 and p.staged() == []


def test_the_gt_pairs_rows_of_two_attempts_only_when_it_is_unique_among_those_left() -> None:
    """Pure reconciliation: rows pair by their values first; the ``gt`` pairs what is left
    only when one row on each side holds it. ``0:0a`` (the file's) pairs by value with this
    attempt's accepted ``0:0a``, and ``0:0b`` refused now is unrecorded."""
    rows = pa.Table.from_batches([fan_out_batch()])
    file_rows = rows.slice(0, 1)  # [0:0a]
    refused_now = rows.slice(1, 1)  # [0:0b]
    accepted_now = rows.filter(pa.array([True, False, True]))  # [0:0a, 0:1]
    unrecorded, kept_out = recorded_against(file_rows, refused_now, lambda: [accepted_now])
    assert unrecorded == 1
    (kept,) = without_rows([accepted_now], input_columns(file_rows), kept_out)
    assert values_of(kept) == [b"0:1"]
    # an upgrade (other values, the same records): a lone gt on each side still pairs
    upgraded = accepted_now.set_column(1, "note", pa.array(["v2-a", "v2-1"], pa.string()))
    unrecorded, kept_out = recorded_against(file_rows, None, lambda: [upgraded])
    (kept,) = without_rows([upgraded], input_columns(file_rows), kept_out)
    assert unrecorded == 0 and kept.column("note").to_pylist() == ["v2-1"]
    # two rows of the record left on one side: the gt says nothing, nothing is paired
    both = rows.set_column(1, "note", pa.array(["v2-a", "v2-b", "v2-1"], pa.string()))
    unrecorded, kept_out = recorded_against(file_rows, None, lambda: [both])
    assert unrecorded == 0 and kept_out == []


@pytest.mark.parametrize("topic", [False, True])
def test_a_replay_that_refuses_a_row_the_file_lacks_stops_naming_the_way_out(
    tmp_path: Path, topic: bool
) -> None:
    """A row the replay refuses and the file lacks can be neither delivered nor dropped;
    the file is never put in place of (a superseded run could overwrite one another run
    delivered against), with or without a topic: the commit stops, nothing written."""
    p = Pipeline(jsonl(tmp_path))
    path = tmp_path / "dl" / dead_letter_name(1)
    rows = note_batch(1, 0, [0, 1, 2, 3])
    written = earlier_file(p, tmp_path, 1, rows, [b"0:1"])
    if topic:
        p.options = jsonl(
            tmp_path,
            **{
                "errors.deadLetter.topic": "dlq",
                "errors.deadLetter.kafka.bootstrap.servers": "127.0.0.1:9",
                "state.uri": p.options.store.uri,
            },
        )
    p.record_batch(0, epoch=1)
    with pytest.raises(StateError) as info:
        p.barrier().commit([write_refusing(p, 0, rows, [b"0:1", b"0:2"])], 0)
    text = str(info.value)
    assert "bundle 1 (batch 0 of query" in text and "refuses 2 row(s) now, 1 of them not" in text
    assert "the 1 row(s) an earlier attempt refused" in text
    assert ("'dlq'" in text) == topic
    assert "Way out: make the target accept those rows again" in text
    assert p.consumer.calls == 0 and p.state().inflight is None and file_id(path) == written


def test_a_redelivery_of_the_bundle_in_flight_never_writes_its_dead_letters_twice(
    tmp_path: Path,
) -> None:
    p = Pipeline(jsonl(tmp_path))
    path = tmp_path / "dl" / dead_letter_name(1)
    p.record_batch(0, epoch=1)
    m = p.write(0, [note_batch(1, 0, [0, 1, 2], bad=[2])])
    with pytest.raises(InjectedFault):
        p.barrier(faults=crash_at("after_inflight")).commit([m], 0)
    inflight = p.inflight()
    assert m.dead_letters is not None
    assert inflight.dead_letters == (m.dead_letters,) and inflight.dead_letter_rows == 1
    written = file_id(path)
    # a new run: its first commit's claim sweeps superseded runs' parts, but not those the
    # in-flight record references (the dead-letter part included)
    p.run_id = "run-b"
    p.record_batch(1, epoch=2)
    outcome = p.barrier().commit([p.write(1, [note_batch(2, 0, [3])])], 1)
    assert outcome.recovered == 1 and outcome.action == "delivered"
    assert [(d[0], d[2]) for d in p.consumer.delivered] == [(1, True), (2, False)]
    assert file_id(path) == written
    assert sorted(os.listdir(tmp_path / "dl")) == [dead_letter_name(1)]
    assert p.staged() == []


def test_a_replay_of_a_delivered_bundle_writes_no_dead_letters(tmp_path: Path) -> None:
    p = Pipeline(jsonl(tmp_path))
    path = tmp_path / "dl" / dead_letter_name(1)
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [note_batch(1, 0, [0, 1], bad=[1])])], 0)
    path.unlink()  # so that a write would show
    p.record_batch(5, epoch=1)  # the same epoch on a new checkpoint
    outcome = p.barrier().commit([p.write(5, [note_batch(1, 0, [0, 1], bad=[1])])], 5)
    assert outcome.action == "dropped" and outcome.dead_letters == 0
    assert not path.exists() and p.staged() == []


def test_a_bundle_whose_every_row_is_refused_writes_its_dead_letters_and_delivers_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """It is recorded in flight like any bundle (the swap fences its dead letters), not
    handed to the consumer, and acknowledged: ``GT_last`` moves to it, so a replay drops
    it."""
    p = Pipeline(jsonl(tmp_path))
    path = tmp_path / "dl" / dead_letter_name(4)
    p.record_batch(0, epoch=4)
    with caplog.at_level(logging.INFO, logger="sink.barrier"):
        outcome = p.barrier().commit([p.write(0, [note_batch(4, 0, [0, 1], bad=[0, 1])])], 0)
    assert outcome.action == "empty" and outcome.dead_letters == 2
    assert p.consumer.calls == 0 and p.state().gt_last == 4 and p.state().inflight is None
    assert pq.read_table(path).num_rows == 2 and p.staged() == []
    assert (
        "bundle 4 had no rows to deliver; 2 row(s) refused, in dead letters file://" in caplog.text
    )
    written = file_id(path)
    p.record_batch(1, epoch=4)  # replayed: dropped, not written again
    replay = p.barrier().commit([p.write(1, [note_batch(4, 0, [0, 1], bad=[0, 1])])], 1)
    assert replay.action == "dropped" and file_id(path) == written


def test_the_log_line_counts_the_refused_rows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p = Pipeline(jsonl(tmp_path))
    p.record_batch(0, epoch=2)
    with caplog.at_level(logging.INFO, logger="sink.barrier"):
        p.barrier().commit(
            [
                p.write(0, [note_batch(2, 0, [0, 1], bad=[1])], partition=0),
                p.write(0, [note_batch(2, 1, [0, 1], bad=[0])], partition=1),
            ],
            0,
        )
    assert (
        "bundle 2 (batch 0, 2 rows) delivered to fake; 2 row(s) refused, in dead letters "
        f"file://{tmp_path}/dl/bundle-000000000002.parquet; GT_last=2"
    ) in caplog.text
    table = pq.read_table(tmp_path / "dl" / dead_letter_name(2))
    assert table.column("gt").combine_chunks().field("partition").to_pylist() == [0, 1]


def test_abort_deletes_the_dead_letter_parts_too(tmp_path: Path) -> None:
    p = Pipeline(jsonl(tmp_path))
    p.record_batch(0, epoch=1)
    m = p.write(0, [note_batch(1, 0, [0, 1], bad=[1])])
    assert len(p.staged()) == 2
    p.barrier().abort([m], 0)
    assert p.staged() == []


def test_a_barrier_can_be_given_its_destination(tmp_path: Path) -> None:
    p = Pipeline(jsonl(tmp_path))
    store_dl = StoreDeadLetters(open_store(f"memory://{tmp_path.name}-given"))
    barrier = Barrier(
        p.options, p.store, p.consumer, p.staging, FaultInjector(), dead_letters=store_dl
    )
    p.record_batch(0, epoch=6)
    barrier.commit([p.write(0, [note_batch(6, 0, [0, 1], bad=[1])])], 0)
    assert [f.bundle_id for f in store_dl.files()] == [6]
    assert not (tmp_path / "dl").exists() or not os.listdir(tmp_path / "dl")


# --- dead letters under a superseded run: every write fenced by the barrier's swap --------


def rows_once(p: Pipeline, tmp_path: Path, bundle_id: int, values: Sequence[bytes]) -> None:
    """Each of ``values`` (bundle ``bundle_id``'s rows) is exactly once in (the consumer,
    the bundle's dead-letter file): none in both, none in neither, none delivered twice."""
    delivered = [
        v
        for bundle, table, _ in p.consumer.delivered
        if bundle == bundle_id and table is not None
        for v in table.column("value").to_pylist()
    ]
    path = tmp_path / "dl" / dead_letter_name(bundle_id)
    dead = pq.read_table(path).column("value").to_pylist() if path.exists() else []
    assert sorted(delivered + dead) == sorted(values), (
        f"delivered {sorted(delivered)}, dead letters {sorted(dead)}"
    )


def remembered_by(p: Pipeline) -> HeldState:
    """What the process of the run that committed last remembers (sink.known_state)."""
    known = KNOWN.get(p.store, p.layout)
    assert known is not None and known.remembered
    return known


def commit_as(  # noqa: PLR0917 - the run, what it remembers, and its batch
    p: Pipeline,
    run_id: str,
    memory: HeldState | None,
    batch_id: int,
    rows: pa.RecordBatch,
    refusing: Sequence[bytes],
    **barrier: Any,
) -> str:
    """Commit ``rows`` as batch ``batch_id`` of run ``run_id``, its target refusing the rows
    with the values ``refusing``, in a process that remembers ``memory``; its outcome's
    action, or the name of the error that stopped it."""
    KNOWN.clear()
    if memory is not None:
        KNOWN.put(p.store, p.layout, memory)
    p.run_id = run_id
    message = write_refusing(p, batch_id, rows, refusing)
    try:
        return p.barrier(**barrier).commit([message], batch_id).action
    except (PipelineFenced, StateError, CommitFailed) as err:
        return type(err).__name__


def test_a_superseded_run_remembering_its_state_writes_no_dead_letters_for_a_bundle_delivered(
    tmp_path: Path,
) -> None:
    """Run A delivers bundle 1 and remembers the state; run B claims and delivers bundle 2
    refusing nothing; A then commits its own batch of epoch 2 from what it remembers,
    refusing row 0:3. A is fenced, and 0:3 is not a dead letter as well as delivered."""
    p = Pipeline(jsonl(tmp_path))
    p.record_batch(0, epoch=1)
    assert commit_as(p, "run-a", None, 0, note_batch(1, 0, [0, 1]), [], start_generation=0) == (
        "delivered"
    )
    a_remembers = remembered_by(p)
    p.record_batch(1, epoch=2)
    bundle_2 = note_batch(2, 0, [2, 3])
    assert commit_as(p, "run-b", None, 1, bundle_2, [], start_generation=1) == "delivered"
    action = commit_as(p, "run-a", a_remembers, 1, bundle_2, [b"0:3"], start_generation=0)
    assert action == "PipelineFenced"
    rows_once(p, tmp_path, 2, [b"0:2", b"0:3"])
    assert p.state().gt_last == 2


class Interrupted(FileDeadLetters):
    """The dead-letter directory of one run's process, where another process acts at a
    chosen moment: ``after_find`` once this run has looked for a bundle's file and found
    none, ``before_write`` before this run writes a file."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.after_find: Callable[[], None] | None = None
        self.before_write: Callable[[], None] | None = None

    def find(self, pipeline_id: str, bundle_id: int) -> DeadLetterFile | None:
        found = super().find(pipeline_id, bundle_id)
        if found is None and self.after_find is not None:
            act, self.after_find = self.after_find, None
            act()
        return found

    def _create(self, name: str, data: bytes) -> bool:
        if self.before_write is not None:
            act, self.before_write = self.before_write, None
            act()
        return super()._create(name, data)


def test_a_create_lost_to_a_superseded_run_leaves_no_row_in_both_or_neither(
    tmp_path: Path,
) -> None:
    """Run B commits bundle 2 refusing 0:1; between its look for the file (none) and its
    own write, superseded run A, from the state it remembers, commits its batch of epoch 2
    refusing 0:2 instead, and is fenced. B's bundle and the dead letters still hold each
    row once."""
    p = Pipeline(jsonl(tmp_path))
    p.record_batch(0, epoch=1)
    assert commit_as(p, "run-a", None, 0, note_batch(1, 0, [9]), [], start_generation=0) == (
        "delivered"
    )
    a_remembers = remembered_by(p)
    p.record_batch(1, epoch=2)
    rows = note_batch(2, 0, [0, 1, 2, 3])
    zombie: list[str] = []
    destination = Interrupted(str(tmp_path / "dl"))
    destination.after_find = lambda: zombie.append(
        commit_as(p, "run-a", a_remembers, 1, rows, [b"0:2"], start_generation=0)
    )
    action = commit_as(
        p, "run-b", None, 1, rows, [b"0:1"], start_generation=1, dead_letters=destination
    )
    assert zombie == ["PipelineFenced"] and action == "delivered"
    rows_once(p, tmp_path, 2, [b"0:0", b"0:1", b"0:2", b"0:3"])


def test_a_run_paused_before_it_puts_its_dead_letters_in_place_overwrites_nothing_delivered(
    tmp_path: Path,
) -> None:
    """Bundle 1's file holds 0:1 (an attempt stopped before recording the bundle in flight,
    as a release before this one wrote it). Run A refuses 0:1 and 0:2, a row the file
    lacks; run B, which refuses only 0:1, commits the bundle while A is about to write its
    dead letters, past any check of the barrier state it makes before (or after A, if A
    never writes). Each row of the bundle ends once in the consumer or the dead letters."""
    p = Pipeline(jsonl(tmp_path))
    rows = note_batch(1, 0, [0, 1, 2, 3])
    earlier = FileDeadLetters(str(tmp_path / "dl"))
    earlier.write("p1", 1, lambda: write_refusing_table(p, rows, [b"0:1"]))
    p.record_batch(0, epoch=1)
    b_ran: list[str] = []

    def run_b() -> None:
        b_ran.append(commit_as(p, "run-b", None, 0, rows, [b"0:1"], start_generation=1))

    destination = Interrupted(str(tmp_path / "dl"))
    destination.before_write = run_b
    commit_as(
        p, "run-a", None, 0, rows, [b"0:1", b"0:2"], start_generation=0, dead_letters=destination
    )
    if not b_ran:
        run_b()
    assert b_ran == ["delivered"] or p.state().gt_last == 1
    rows_once(p, tmp_path, 1, [b"0:0", b"0:1", b"0:2", b"0:3"])
    assert p.state().gt_last == 1


def write_refusing_table(p: Pipeline, rows: pa.RecordBatch, values: Sequence[bytes]) -> pa.Table:
    """The dead-letter rows a task staging ``rows`` would stage, refusing ``values``."""
    message = write_refusing(p, 99, rows, values)
    assert message.dead_letters is not None
    table = p.staging.read_part(message.dead_letters.location)
    p.staging.delete_many(part.location for part in (message.part, message.dead_letters) if part)
    return table


def test_a_superseded_run_sends_nothing_to_the_dead_letter_topic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The topic is sent to after the file, so after the swap that records the bundle in
    flight: superseded run A, committing from the state it remembers a batch of the epoch
    run B delivered, is fenced before it sends anything."""
    sent: list[tuple[str, int]] = []

    def send(self: Any, destination: Any, bundle_id: int, table: Any) -> None:
        sent.append((self.options.errors.topic or "", bundle_id))

    monkeypatch.setattr(DeadLetterSettlement, "_send_to_topic", send)
    p = Pipeline(
        jsonl(
            tmp_path,
            **{
                "errors.deadLetter.topic": "dlq",
                "errors.deadLetter.kafka.bootstrap.servers": "127.0.0.1:9",
            },
        )
    )
    p.record_batch(0, epoch=1)
    assert commit_as(p, "run-a", None, 0, note_batch(1, 0, [0]), [], start_generation=0) == (
        "delivered"
    )
    a_remembers = remembered_by(p)
    p.record_batch(1, epoch=2)
    bundle_2 = note_batch(2, 0, [2, 3])
    assert commit_as(p, "run-b", None, 1, bundle_2, [], start_generation=1) == "delivered"
    action = commit_as(p, "run-a", a_remembers, 1, bundle_2, [b"0:3"], start_generation=0)
    assert action == "PipelineFenced" and sent == []


def test_rows_without_a_gt_pair_with_each_other_after_an_upgrade() -> None:
    """The sink refuses every row without a ``gt``, so such rows of an earlier attempt's
    file pair one for one with those refused now, whatever values an upgraded query gives
    them: the replay of a bundle whose file is already there is not stopped by them. Rows
    sharing a real ``gt`` still pair only where one is left on each side."""
    held = [(("v1-a",), NO_GT), (("v1-b",), NO_GT), (("v1-c",), ("t", 0, 7))]
    now = [(("v2-a",), NO_GT), (("v2-x",), ("t", 0, 7)), (("v2-y",), ("t", 0, 7))]
    paired = pairs(held, now)
    assert paired == {0: 0}
    assert unmatched(held, now) == ([1, 2], [1, 2])


# --- errors.deadLetter.retention ------------------------------------------------------------


def dead_letter_file(bundle_id: int, created: float | None) -> DeadLetterFile:
    return DeadLetterFile(bundle_id, f"file:///dl/{bundle_id}", 1, 10, "p", created)


def test_expired_files_are_old_and_of_bundles_at_or_below_gt_last() -> None:
    files = [
        dead_letter_file(1, 100.0),  # old, delivered: expired
        dead_letter_file(2, 150.0),  # exactly at the retention: kept
        dead_letter_file(3, None),  # a release that did not record the time: kept
        dead_letter_file(4, 10.0),  # old, but above GT_last (in flight): kept
    ]
    assert expired(files, gt_last=3, now=200.0, retention=50.0) == [1]
    assert expired(files, gt_last=4, now=200.0, retention=49.0) == [1, 2, 4]
    assert expired(files, gt_last=0, now=200.0, retention=1.0) == []


def test_the_retention_is_a_positive_duration_with_tolerance_all(tmp_path: Path) -> None:
    assert jsonl(tmp_path).errors.retention is None
    assert jsonl(tmp_path, **{"errors.deadLetter.retention": "2h"}).errors.retention == 7200.0
    for value, expected in (("0s", "positive duration"), ("soon", "a duration such as")):
        with pytest.raises(ConfigError) as bad:
            jsonl(tmp_path, **{"errors.deadLetter.retention": value})
        assert "errors.deadLetter.retention" in str(bad.value) and value in str(bad.value)
        assert expected in str(bad.value)
    with pytest.raises(ConfigError, match=r"errors\.deadLetter\.retention"):
        jsonl(None, **{"errors.deadLetter.retention": "1h"})  # tolerance none


def test_the_owner_deletes_expired_files_in_its_sweep(tmp_path: Path) -> None:
    """With ``staging.sweepEvery=2`` and a retention of 60 s: the sweep after bundle 4 deletes
    the files of bundles written over 60 s before and at or below ``GT_last``, and the
    others stay until a later sweep finds them old."""
    now = [1000.0]
    p = Pipeline(
        jsonl(tmp_path, **{"errors.deadLetter.retention": "60s", "staging.sweepEvery": "2"})
    )
    destination = FileDeadLetters(str(tmp_path / "dl"), clock=lambda: now[0])
    barrier = Barrier(
        p.options, p.store, p.consumer, p.staging, FaultInjector(), dead_letters=destination
    )
    for batch, (bundle, written_at) in enumerate([(1, 1000.0), (2, 1050.0), (3, 1100.0)]):
        now[0] = written_at
        p.record_batch(batch, epoch=bundle)
        barrier.commit([p.write(batch, [note_batch(bundle, 0, [0, 1], bad=[1])])], batch)
    # the sweep after bundle 2 (due) ran at 1050: nothing was 60 s old yet
    assert [f.bundle_id for f in destination.files()] == [1, 2, 3]
    assert {f.created for f in destination.files()} == {1000.0, 1050.0, 1100.0}
    now[0] = 1111.0
    p.record_batch(3, epoch=4)
    barrier.commit([p.write(3, [note_batch(4, 0, [0, 1], bad=[1])])], 3)
    # after bundle 4 (due): bundles 1 and 2 are over 60 s old; 3 and 4 are younger
    assert [f.bundle_id for f in destination.files()] == [3, 4]
    assert p.state().gt_last == 4


def test_without_a_retention_the_sweep_keeps_every_file(tmp_path: Path) -> None:
    now = [0.0]
    p = Pipeline(jsonl(tmp_path, **{"staging.sweepEvery": "1"}))
    destination = FileDeadLetters(str(tmp_path / "dl"), clock=lambda: now[0])
    barrier = Barrier(
        p.options, p.store, p.consumer, p.staging, FaultInjector(), dead_letters=destination
    )
    for batch in range(3):
        now[0] = batch * 1e6
        p.record_batch(batch, epoch=batch + 1)
        barrier.commit([p.write(batch, [note_batch(batch + 1, 0, [0, 1], bad=[1])])], batch)
    assert [f.bundle_id for f in destination.files()] == [1, 2, 3]


def test_expiring_on_a_store_deletes_the_objects(tmp_path: Path) -> None:
    p = Pipeline(jsonl(tmp_path))
    rows = note_batch(1, 0, [0, 1])
    store_dl = StoreDeadLetters(open_store(f"memory://{tmp_path.name}-expire"), clock=lambda: 5.0)
    for bundle in (1, 2):
        store_dl.write("p1", bundle, lambda: write_refusing_table(p, rows, [b"0:1"]))
    assert store_dl.expire(gt_last=1, retention=1.0) == []  # written at 5.0, now 5.0
    store_dl.clock = lambda: 10.0
    assert store_dl.expire(gt_last=1, retention=1.0) == [1]
    assert [f.bundle_id for f in store_dl.files()] == [2]

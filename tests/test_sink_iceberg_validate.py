"""consumer=iceberg's validation against the table's schema recorded at start, without servers.

A table may require columns (``NOT NULL``): the start check takes the sink's nullable input
for them, records them in the settings, and the write tasks refuse the rows with a null
there (and strings that are not UTF-8, which an Iceberg string cannot hold) before anything
is delivered; the parts they stage mark those columns required, as the table's data files
must.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyiceberg")

from pyiceberg.schema import Schema
from pyiceberg.types import BinaryType as IcebergBinary
from pyiceberg.types import IntegerType as IcebergInt
from pyiceberg.types import LongType as IcebergLong
from pyiceberg.types import NestedField
from pyiceberg.types import StringType as IcebergString
from pyiceberg.types import StructType as IcebergStruct
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from sink.consumers import open_consumer
from sink.consumers.iceberg.iceberg_consumer import IcebergConsumer
from sink.consumers.iceberg.iceberg_kind import ICEBERG
from sink.consumers.iceberg.iceberg_options import IcebergSettings
from sink.consumers.iceberg.iceberg_table import load_table, open_catalog
from sink.dead_letters.dead_letter_format import COLUMN_COLUMN, dead_letter_name
from sink.faults import FaultInjector
from sink.options import SinkOptions
from state.errors import ConfigError, RowsRefused
from tests.sink_helpers import Pipeline
from tests.test_sink_dead_letters import BAD, note_batch
from tests.test_sink_iceberg import GT, raw_options

# the input: value, note (a string) and gt, as note_batch makes them
INPUT = StructType(
    [StructField("value", BinaryType()), StructField("note", StringType()), StructField("gt", GT)]
)


def gt_struct(first_id: int) -> IcebergStruct:
    return IcebergStruct(
        NestedField(first_id, "epoch", IcebergLong(), required=False),
        NestedField(first_id + 1, "topic", IcebergString(), required=False),
        NestedField(first_id + 2, "partition", IcebergInt(), required=False),
        NestedField(first_id + 3, "offset", IcebergLong(), required=False),
    )


def create_table(tmp_path: Path, *, note_required: bool = True) -> None:
    """``ns.events`` with ``note`` required (``NOT NULL``), as a user may have made it."""
    settings = ICEBERG.settings(SinkOptions.parse(raw_options(tmp_path)))
    catalog = open_catalog(settings)
    catalog.create_namespace_if_not_exists(("ns",))
    catalog.create_table(
        "ns.events",
        schema=Schema(
            NestedField(1, "value", IcebergBinary(), required=False),
            NestedField(2, "note", IcebergString(), required=note_required),
            NestedField(3, "gt", gt_struct(4), required=False),
        ),
    )


def options(tmp_path: Path, **extra: str) -> SinkOptions:
    return SinkOptions.parse(raw_options(tmp_path, **extra)).check_at_start(INPUT)


def with_nulls(batch: pa.RecordBatch, offsets: list[int]) -> pa.RecordBatch:
    """``batch`` with ``note`` null at ``offsets`` (the others' bytes as they were)."""
    gt_offsets = batch.column("gt").field("offset").to_pylist()
    mask = pa.array([o in offsets for o in gt_offsets], pa.bool_())
    column = pc.if_else(mask, pa.scalar(None, pa.string()), batch.column("note"))
    return batch.set_column(1, "note", column)


def test_the_start_check_records_the_required_columns_and_takes_a_nullable_input_for_them(
    tmp_path: Path,
) -> None:
    create_table(tmp_path)
    settings = ICEBERG.settings(options(tmp_path))
    assert isinstance(settings, IcebergSettings) and settings.required == ("note",)
    # a table the query creates requires nothing
    other = tmp_path / "other"
    other.mkdir()
    assert ICEBERG.settings(options(other)).required == ()


def test_a_required_column_the_input_lacks_is_still_refused_at_start(tmp_path: Path) -> None:
    create_table(tmp_path)
    without_note = StructType([StructField("value", BinaryType()), StructField("gt", GT)])
    with pytest.raises(ConfigError, match="takes the sink's input columns"):
        SinkOptions.parse(raw_options(tmp_path)).check_at_start(without_note)


def test_validate_refuses_nulls_in_required_columns_and_strings_that_are_not_utf8(
    tmp_path: Path,
) -> None:
    create_table(tmp_path)
    settings = ICEBERG.settings(options(tmp_path))
    batch = with_nulls(note_batch(1, 0, [0, 1, 2, 3], bad=[3]), [1])
    found = ICEBERG.validate(settings, pa.Table.from_batches([batch]))
    assert [(r.row, r.column) for r in found] == [(1, "note"), (3, "note")]
    assert "required" in found[0].reason and "ns.events" in found[0].reason
    assert "UTF-8" in found[1].reason
    # without required columns, nulls are fine
    free = tmp_path / "free"
    free.mkdir()
    assert ICEBERG.validate(ICEBERG.settings(options(free)), pa.Table.from_batches([batch])) == [
        found[1]
    ]


class Lake:
    def __init__(self, tmp_path: Path, **extra: str) -> None:
        self.options = options(tmp_path, **extra)
        self.p = Pipeline(self.options)
        consumer = open_consumer(self.options, self.p.store, FaultInjector())
        assert isinstance(consumer, IcebergConsumer)
        self.p.consumer = consumer  # type: ignore[assignment]
        self.p.staging = consumer.staging
        self.settings = ICEBERG.settings(self.options)


def test_rows_with_a_null_in_a_required_column_go_to_dead_letters_and_the_rest_to_the_table(
    tmp_path: Path,
) -> None:
    create_table(tmp_path)
    lake = Lake(
        tmp_path,
        **{"errors.tolerance": "all", "errors.deadLetter.path": f"file://{tmp_path}/dl"},
    )
    lake.p.record_batch(0, epoch=2)
    m = lake.p.write(0, [with_nulls(note_batch(2, 0, [0, 1, 2]), [0, 2])])
    assert m.part is not None and m.dead_letters is not None
    part = lake.p.staging.read_part(m.part.location)
    assert not part.schema.field("note").nullable  # as the table's data files must
    outcome = lake.p.barrier().commit([m], 0)
    assert outcome.action == "delivered" and (outcome.rows, outcome.dead_letters) == (1, 2)
    rows = load_table(lake.settings).scan().to_arrow()
    assert rows.column("note").to_pylist() == ["n1"]
    dead = pq.read_table(tmp_path / "dl" / dead_letter_name(2))
    assert dead.column("note").to_pylist() == [None, None]
    assert dead.column(COLUMN_COLUMN).to_pylist() == ["note", "note"]
    assert dead.schema.field("note").nullable  # the input's columns as they were


def test_without_tolerance_the_bundle_fails_naming_the_row(tmp_path: Path) -> None:
    create_table(tmp_path)
    lake = Lake(tmp_path)
    lake.p.record_batch(0, epoch=2)
    with pytest.raises(
        RowsRefused, match=r"gt \(epoch 2 t-0@1\), column 'note': null in a required"
    ):
        lake.p.write(0, [with_nulls(note_batch(2, 0, [0, 1]), [1])])
    assert lake.p.staged() == []


def test_strings_that_are_not_utf8_are_refused_in_any_table(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.p.record_batch(0, epoch=1)
    with pytest.raises(RowsRefused, match="not valid UTF-8"):
        lake.p.write(0, [note_batch(1, 0, [0, 1], bad=[1])])
    assert BAD not in (b"n0", b"n1")

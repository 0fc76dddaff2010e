"""The global time of a record: the ``gt`` struct, defined once, and its value type.

gtkafka gives every row ``gt: struct<epoch bigint, topic string, partition int, offset
bigint>`` (docs/PROTOCOL.md, "Global time"). Ascending ``gt`` is delivery order, and it is
the same on every replay: the epoch comes from the epoch log, the rest from Kafka. The
Spark type, the Arrow type and the JSON form (``{"epoch", "topic", "partition",
"offset"}``, in the in-flight bundle record) are all derived from :data:`GT_STRUCT`.

pyspark and pyarrow are imported inside the functions that need them: the records
package is imported by processes that never touch either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from state.records.codec import Fields

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

GT_COLUMN = "gt"

# The one definition: each field and its Spark SQL type, in struct (= sort) order.
GT_STRUCT: tuple[tuple[str, str], ...] = (
    ("epoch", "bigint"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
)
GT_FIELDS: tuple[str, ...] = tuple(name for name, _ in GT_STRUCT)
GT_TYPE_TEXT = "struct<" + ", ".join(f"{name}: {sql}" for name, sql in GT_STRUCT) + ">"

GtTuple = tuple[int, str, int, int]


@dataclass(frozen=True, order=True)
class GlobalTime:
    """One record's global time; ordered as the ``gt`` column sorts."""

    epoch: int
    topic: str
    partition: int
    offset: int

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
        }

    @classmethod
    def from_json(cls, raw: object) -> GlobalTime:
        f = Fields(raw, "global time")
        return cls(
            epoch=f.integer("epoch", minimum=0),
            topic=f.string("topic"),
            partition=f.integer("partition", minimum=0),
            offset=f.integer("offset", minimum=0),
        )

    def to_tuple(self) -> GtTuple:
        return (self.epoch, self.topic, self.partition, self.offset)

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...]) -> GlobalTime:
        """From ``(epoch, topic, partition, offset)``, e.g. one row of the ``gt`` column."""
        epoch, topic, partition, offset = value
        return cls(int(epoch), str(topic), int(partition), int(offset))

    def __str__(self) -> str:
        return f"epoch {self.epoch} {self.topic}-{self.partition}@{self.offset}"


# --- the column's type, for Spark and for Arrow ----------------------------------------------


def spark_type() -> StructType:
    """``gt``'s Spark type (fields not nullable)."""
    from pyspark.sql.types import (
        DataType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    types: dict[str, type[DataType]] = {
        "bigint": LongType,
        "string": StringType,
        "int": IntegerType,
    }
    return StructType([StructField(name, types[sql](), False) for name, sql in GT_STRUCT])


def arrow_type() -> pa.StructType:
    """``gt``'s Arrow type, as Spark converts :func:`spark_type` (fields not nullable)."""
    import pyarrow as pa

    types = {"bigint": pa.int64(), "string": pa.string(), "int": pa.int32()}
    return pa.struct([pa.field(name, types[sql], nullable=False) for name, sql in GT_STRUCT])


def arrow_accepts(name: str, dtype: pa.DataType) -> bool:
    """Whether an Arrow column of type ``dtype`` can hold field ``name`` of ``gt``
    (a ``large_string`` topic is fine too)."""
    import pyarrow as pa

    expected = arrow_type().field(name).type
    return bool(dtype == expected or (expected == pa.string() and dtype == pa.large_string()))


def arrow_array(
    epoch: pa.Array, topic: pa.Array, partition: pa.Array, offset: pa.Array
) -> pa.StructArray:
    """The ``gt`` column from its four fields' arrays (of equal length)."""
    import pyarrow as pa

    return pa.StructArray.from_arrays([epoch, topic, partition, offset], fields=list(arrow_type()))

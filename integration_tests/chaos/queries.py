"""The chaos run's queries: how each is built on Spark, and what a failure-free run delivers.

Input record ``i`` has key ``b"k<i % 13>"``, value ``b"<i>"`` and lands in partition
``i % partitions``; a round ends with two *ticks*, records ``TICK_BASE`` and
``TICK_BASE + 1`` with key ``b"tick"``, in two successive epochs (see
:mod:`integration_tests.chaos.rounds`). Every query is deterministic, so what it must
deliver follows from the input and the recorded epochs (:mod:`.reference`):

* ``stateless``: every record as ``key, value, gt``: one row per record, in the bundle of
  its epoch (ticks included). In a poison round (:mod:`.poison`) the rows of the poison
  records have a null ``gt``: every consumer refuses them, and they must be in the dead
  letters of the bundle of their epoch instead (:attr:`Item.dead`). A round with a setting
  change (:mod:`.variants`) adds a string column ``label`` of ``n % label_modulus``
  characters, which the consumer refuses when it is longer than its column holds; a
  sparse round keeps only the records ``n % keep_divisor == 0`` (and the ticks).
* ``windowed``: event time ``i`` seconds, 100-second tumbling windows, a 30-second
  watermark, ``count`` and ``sum`` per window, output mode append: every window of the
  records before the ticks exactly once, with its full count and sum (the first tick moves
  the watermark past every such window, the second one closes them; the ticks' own window
  never closes). Input has one partition, so no record is ever late.
* ``keyed``: ``applyInPandasWithState`` per key with state (count, sum, max), emitting
  each key's new state once per epoch in which the key has records (append): exactly
  the rows of a sequential replay of the epochs.

For the kafka consumer the sink input needs a ``value`` column: :meth:`Query.for_kafka`
puts the row into it (JSON, or the record's value for ``stateless``), and
:meth:`Query.items` reads either form back.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.coordinator_program import KEYS
from integration_tests.chaos.reference import InputRecord

TICK_BASE = 1_000_000_000
TICK_KEY = b"tick"
WINDOW_SECONDS = 100
WATERMARK_DELAY = "30 seconds"

Identity = Hashable
Value = tuple[Any, ...]
#: Whether the consumer refuses input record ``n``'s row: True, False, or None when one
#: setting of the round refuses it and another does not.
Refusal = Callable[[int], "bool | None"]


@dataclass(frozen=True)
class Item:
    """One unit of output that must arrive exactly once: its identity, what it must hold,
    and the bundle it came in (``-1`` in the reference when the bundle is not modelled).
    ``dead``: in the reference, a row the consumer's target refuses, which must be in the
    dead letters and not in the consumer; None: a row that one setting of the round
    refuses and another accepts, which may be in either (but in one)."""

    identity: Identity
    value: Value
    bundle: int
    dead: bool | None = False


def record_key(i: int) -> bytes:
    return TICK_KEY if i >= TICK_BASE else b"k%d" % (i % KEYS)


class Query(ABC):
    """One query: its Spark plan, its output mode and its reference."""

    name: ClassVar[str]
    mode: ClassVar[str] = "append"
    single_partition: ClassVar[bool] = False  # input in one Kafka partition only
    first_output_epoch: ClassVar[int] = 0  # the first epoch that delivers a bundle

    @abstractmethod
    def build(
        self,
        df: Any,
        poison: Collection[int] = (),
        *,
        label_modulus: int = 0,
        keep_divisor: int = 0,
    ) -> Any:
        """The query's output, from gtkafka's DataFrame ``df``; ``poison``: the input
        record numbers whose rows the consumer must refuse; ``label_modulus`` (> 0): add
        the ``label`` column; ``keep_divisor`` (> 0): keep only the records ``n %
        keep_divisor == 0`` and the ticks (only ``stateless`` has any of these)."""

    @abstractmethod
    def for_kafka(self, out: Any) -> Any:
        """``out`` with the ``value`` (and ``key``) columns the kafka consumer sends."""

    @abstractmethod
    def expected(
        self,
        records: list[InputRecord],
        shape: str,
        poison: Collection[int] = (),
        *,
        refused: Refusal | None = None,
        keep_divisor: int = 0,
    ) -> list[Item]:
        """What a failure-free run delivers, from every input record and its epoch, as
        :meth:`item` reads it from a consumer of ``shape``; the rows of ``poison`` records
        as the dead letters hold them (``dead``), and those that ``refused`` says the
        consumer refuses (or may refuse); with ``keep_divisor``, only the rows the sparse
        filter keeps."""

    @abstractmethod
    def item(self, bundle: int, row: dict[str, Any], shape: str) -> Item:
        """One delivered row (a kafka message's key and value when ``shape`` is kafka)."""

    def items(self, bundle: int, rows: Iterable[dict[str, Any]], shape: str) -> list[Item]:
        return [self.item(bundle, row, shape) for row in rows]


def _number(df: Any) -> Any:
    from pyspark.sql import functions as sf

    return sf.col("value").cast("string").cast("long")


class Stateless(Query):
    name = "stateless"

    def build(
        self,
        df: Any,
        poison: Collection[int] = (),
        *,
        label_modulus: int = 0,
        keep_divisor: int = 0,
    ) -> Any:
        from pyspark.sql import functions as sf

        gt = sf.col("gt")
        if poison:
            # A row without a gt: every consumer refuses it (docs/sink.md).
            gt = sf.when(_number(df).isin(sorted(poison)), sf.lit(None)).otherwise(gt)
        columns = [sf.col("key"), sf.col("value"), gt.alias("gt")]
        if label_modulus:
            # n % label_modulus characters: a varchar(k) column refuses those above k.
            length = f"cast(cast(cast(value AS string) AS bigint) % {label_modulus} AS int)"
            columns.append(sf.expr(f"repeat('x', {length})").alias("label"))
        if keep_divisor:
            n = _number(df)
            df = df.where((n >= TICK_BASE) | (n % keep_divisor == 0))
        return df.select(*columns)

    def for_kafka(self, out: Any) -> Any:
        # gt stays in the sink input (the kafka consumer orders by it, does not send it, and
        # refuses a row without one) but is not in the topic.
        return out.select("key", "value", "gt")

    def expected(
        self,
        records: list[InputRecord],
        shape: str,
        poison: Collection[int] = (),
        *,
        refused: Refusal | None = None,
        keep_divisor: int = 0,
    ) -> list[Item]:
        # The kafka consumer sends key and value only: the gt column is not in the topic.
        # A poison row's gt is null, in the dead letters as the query produced it.
        def dead(n: int) -> bool | None:
            if n in poison:
                return True
            return False if refused is None else refused(n)

        return [
            Item(
                r.number,
                (
                    r.key,
                    None
                    if shape == "kafka" or r.number in poison
                    else (r.epoch, r.partition, r.offset),
                ),
                r.epoch,
                dead=dead(r.number),
            )
            for r in records
            if not keep_divisor or r.number >= TICK_BASE or r.number % keep_divisor == 0
        ]

    def item(self, bundle: int, row: dict[str, Any], shape: str) -> Item:
        number = int(bytes(row["value"]))
        gt = row.get("gt")
        where = None if gt is None else (gt["epoch"], gt["partition"], gt["offset"])
        key = None if row.get("key") is None else bytes(row["key"])
        return Item(number, (key, where), bundle)


class Windowed(Query):
    name = "windowed"
    single_partition = True
    first_output_epoch = 1  # the first epoch only sets the watermark

    def build(
        self,
        df: Any,
        poison: Collection[int] = (),
        *,
        label_modulus: int = 0,
        keep_divisor: int = 0,
    ) -> Any:
        from pyspark.sql import functions as sf

        n = _number(df)
        return (
            df.select(n.alias("i"), sf.timestamp_seconds(n).alias("ts"))
            .withWatermark("ts", WATERMARK_DELAY)
            .groupBy(sf.window("ts", f"{WINDOW_SECONDS} seconds"))
            .agg(sf.count("*").alias("n"), sf.sum("i").alias("total"))
            .select(sf.col("window.start").cast("long").alias("start"), "n", "total")
        )

    def for_kafka(self, out: Any) -> Any:
        from pyspark.sql import functions as sf

        return out.select(sf.to_json(sf.struct("start", "n", "total")).alias("value"))

    def expected(
        self,
        records: list[InputRecord],
        shape: str,
        poison: Collection[int] = (),
        *,
        refused: Refusal | None = None,
        keep_divisor: int = 0,
    ) -> list[Item]:
        windows: dict[int, tuple[int, int]] = {}
        for r in records:
            if r.number >= TICK_BASE:
                continue
            start = r.number - r.number % WINDOW_SECONDS
            n, total = windows.get(start, (0, 0))
            windows[start] = (n + 1, total + r.number)
        return [Item(start, v, -1) for start, v in sorted(windows.items())]

    def item(self, bundle: int, row: dict[str, Any], shape: str) -> Item:
        if shape == "kafka":
            row = json.loads(bytes(row["value"]))
        return Item(int(row["start"]), (int(row["n"]), int(row["total"])), bundle)


class Keyed(Query):
    name = "keyed"

    def build(
        self,
        df: Any,
        poison: Collection[int] = (),
        *,
        label_modulus: int = 0,
        keep_divisor: int = 0,
    ) -> Any:
        from integration_tests.coordinator_support import KEYED_SCHEMA, KEYED_STATE, keyed_update

        return df.groupBy("key").applyInPandasWithState(
            keyed_update, KEYED_SCHEMA, KEYED_STATE, "append", "NoTimeout"
        )

    def for_kafka(self, out: Any) -> Any:
        from pyspark.sql import functions as sf

        row = sf.struct(sf.col("key").cast("string").alias("key"), "n", "total", "mx")
        return out.select("key", sf.to_json(row).alias("value"))

    def expected(
        self,
        records: list[InputRecord],
        shape: str,
        poison: Collection[int] = (),
        *,
        refused: Refusal | None = None,
        keep_divisor: int = 0,
    ) -> list[Item]:
        state: dict[bytes, tuple[int, int, int]] = {}
        by_epoch: dict[int, list[InputRecord]] = {}
        for r in records:
            by_epoch.setdefault(r.epoch, []).append(r)
        out: list[Item] = []
        for epoch in sorted(by_epoch):
            touched: dict[bytes, None] = {}
            for r in by_epoch[epoch]:
                n, total, mx = state.get(r.key, (0, 0, -1))
                state[r.key] = (n + 1, total + r.number, max(mx, r.number))
                touched[r.key] = None
            out.extend(Item((epoch, k), state[k], epoch) for k in touched)
        return out

    def item(self, bundle: int, row: dict[str, Any], shape: str) -> Item:
        if shape == "kafka":
            row = json.loads(bytes(row["value"]))
            key = str(row["key"]).encode()
        else:
            key = bytes(row["key"])
        return Item((bundle, key), (int(row["n"]), int(row["total"]), int(row["mx"])), bundle)


QUERIES: dict[str, Query] = {q.name: q for q in (Stateless(), Windowed(), Keyed())}

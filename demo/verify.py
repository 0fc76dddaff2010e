"""The demo's check: the consumer's content against a batch computation of the same input.

The batch computation (:func:`expected_from_records`) reads what is in Kafka and computes,
with pandas rather than Spark, what a failure-free run must deliver: one enriched row
per order or payment, the revenue of every (1-minute window, category), and every
customer's final totals. :func:`verify` compares that with the delivered rows
(:func:`read_file_consumer` / :func:`read_http_consumer`) and counts duplicates and
missing records; :func:`render_table` prints the result.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from demo.catalog import DEPARTMENT_OF, MICRO, RATE_OF

EVENT_FIELDS = (
    "event_id",
    "event_type",
    "customer_id",
    "category",
    "department",
    "currency",
    "amount",
    "amount_usd_cents",
    "event_time_ms",
    "src_partition",
    "src_offset",
)
WINDOW_FIELDS = ("window_start_ms", "category", "department", "revenue", "orders")
CUSTOMER_FIELDS = ("customer_id", "ordered", "paid", "orders", "payments")


@dataclass(frozen=True)
class Expected:
    """What a failure-free run delivers, computed in batch from the input records."""

    records: int  # orders and payments (heartbeats excluded)
    heartbeats: int
    events: pd.DataFrame  # EVENT_FIELDS, one row per record
    windows: pd.DataFrame  # WINDOW_FIELDS, one row per (window, category)
    customers: pd.DataFrame  # CUSTOMER_FIELDS, one row per customer


def expected_from_records(
    records: Iterable[tuple[int, int, bytes]], window_ms: int = 60_000
) -> Expected:
    """``(partition, offset, value)`` of every record in the topic -> :class:`Expected`."""
    rows: list[dict[str, Any]] = []
    heartbeats = 0
    for partition, offset, value in records:
        e = json.loads(value)
        if e["type"] == "tick":
            heartbeats += 1
            continue
        currency = e["currency"]
        category = e.get("category")
        rows.append(
            {
                "event_id": e["order_id"] if e["type"] == "order" else e["payment_id"],
                "event_type": e["type"],
                "customer_id": e["customer_id"],
                "category": category,
                "department": DEPARTMENT_OF.get(category) if category else None,
                "currency": currency,
                "amount": int(e["amount"]),
                "amount_usd_cents": int(e["amount"]) * RATE_OF[currency] // MICRO,
                "event_time_ms": _iso_to_ms(e["ts"]),
                "src_partition": partition,
                "src_offset": offset,
            }
        )
    events = pd.DataFrame(rows, columns=list(EVENT_FIELDS))
    orders = events[events["event_type"] == "order"].copy()
    orders["window_start_ms"] = orders["event_time_ms"] - orders["event_time_ms"] % window_ms
    windows = (
        orders.groupby(["window_start_ms", "category", "department"], as_index=False)
        .agg(revenue=("amount_usd_cents", "sum"), orders=("event_id", "count"))
        .astype({"revenue": "int64", "orders": "int64"})
    )
    is_order = events["event_type"] == "order"
    per = events.assign(
        ordered=events["amount_usd_cents"].where(is_order, 0),
        paid=events["amount_usd_cents"].where(~is_order, 0),
        orders=is_order.astype("int64"),
        payments=(~is_order).astype("int64"),
    )
    customers = (
        per.groupby("customer_id", as_index=False)[["ordered", "paid", "orders", "payments"]]
        .sum()
        .astype({"ordered": "int64", "paid": "int64", "orders": "int64", "payments": "int64"})
    )
    return Expected(len(events), heartbeats, events, windows, customers)


def _iso_to_ms(text: str) -> int:
    return int(pd.Timestamp(text).value // 1_000_000)


# --- reading what the consumer has -------------------------------------------------------


def read_file_consumer(directory: Path) -> pd.DataFrame:
    """Every bundle in a ``file`` consumer's directory, with a ``bundle_id`` column.

    Bundle files are ``bundle-<epoch>.parquet``; names starting with ``_`` or ``.`` are
    not data (the pointer, staging, files being written)."""
    tables = []
    for path in sorted(directory.glob("bundle-*.parquet")):
        table = pq.read_table(path)
        bundle = int(path.stem.split("-")[1])
        tables.append(table.append_column("bundle_id", pa.array([bundle] * table.num_rows)))
    return _to_frame(tables)


def read_iceberg_consumer(directory: Path) -> pd.DataFrame:
    """Every row of the ``iceberg`` consumer's table (``--consumer iceberg``), with the
    ``bundle_id`` its data file's name carries; the files are those pyiceberg's scan plans."""
    from pyiceberg.catalog import load_catalog

    from demo.pipeline import ICEBERG_TABLE, iceberg_options
    from sink.consumers.iceberg.iceberg_staging import epoch_of_data_file

    props = {k.rsplit(".", 1)[-1]: v for k, v in iceberg_options(str(directory)).items()}
    catalog = load_catalog("default", uri=props["uri"], warehouse=props["warehouse"])
    table = catalog.load_table(ICEBERG_TABLE)
    tables = []
    for task in table.scan().plan_files():
        path = task.file.file_path
        bundle = epoch_of_data_file(path)
        part = pq.read_table(path.removeprefix("file://"))
        tables.append(part.append_column("bundle_id", pa.array([bundle] * part.num_rows)))
    return _to_frame(tables)


def read_http_consumer(receiver_dir: Path, stream: str) -> pd.DataFrame:
    """Every bundle the reference receiver (``python -m gtbarrier.http_receiver``) stored for
    ``stream`` (the URL path), read from its SQLite file; Arrow IPC bodies."""
    conn = sqlite3.connect(receiver_dir / "receiver.sqlite3")
    try:
        rows = conn.execute(
            "SELECT bundle_id, body FROM bundles WHERE stream = ? ORDER BY bundle_id",
            ("/" + stream.strip("/"),),
        ).fetchall()
    finally:
        conn.close()
    tables = []
    for bundle, body in rows:
        table = pa.ipc.open_stream(bytes(body)).read_all()
        tables.append(table.append_column("bundle_id", pa.array([int(bundle)] * table.num_rows)))
    return _to_frame(tables)


def read_postgres_consumer(dsn: str, table: str) -> pd.DataFrame:
    """Every row a ``postgres`` consumer stored in ``table`` (``schema.table``), with a
    ``bundle_id`` column: each bundle is one transaction, so a row's ``xmin`` is that of
    its bundle's row in ``gtbarrier_bundles`` (docs/sink.md)."""
    import psycopg
    from psycopg import sql

    schema, name = table.split(".")
    query = sql.SQL(
        "SELECT b.bundle_id, e.* FROM {} e JOIN {} b ON b.xmin = e.xmin ORDER BY b.bundle_id"
    ).format(sql.Identifier(schema, name), sql.Identifier(schema, "gtbarrier_bundles"))
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(query)
        names = [d.name for d in cur.description or []]
        rows = cur.fetchall()
    if not rows:
        return _to_frame([])
    columns = {n: [r[i] for r in rows] for i, n in enumerate(names)}
    return _to_frame([pa.table(columns)])


def _to_frame(tables: Sequence[pa.Table]) -> pd.DataFrame:
    if not tables:
        return pd.DataFrame(columns=["kind", "bundle_id"])
    frame = pa.concat_tables(tables, promote_options="default").to_pandas()
    for col in ("event_time", "window_start", "window_end"):
        if col in frame:
            frame[col + "_ms"] = _ms(frame[col])
    return frame


def _ms(series: pd.Series) -> pd.Series:
    """Timestamps (any unit, naive UTC or aware) -> milliseconds since the epoch (Int64)."""
    stamps = pd.to_datetime(series, utc=True).astype("datetime64[ns, UTC]")
    millis = stamps.astype("int64") // 1_000_000
    return millis.where(stamps.notna()).astype("Int64")


# --- comparing -------------------------------------------------------------------------


@dataclass
class Verification:
    records_in: int
    bundles: int
    event_rows: int
    duplicates: int
    missing: int
    unexpected: int
    in_gt_order: bool
    stateless_equal: bool
    windows_equal: bool
    customers_equal: bool
    windows: int
    customers: int
    details: list[str] = field(default_factory=list)

    @property
    def stateful_equal(self) -> bool:
        return self.windows_equal and self.customers_equal

    @property
    def ok(self) -> bool:
        return (
            self.duplicates == 0
            and self.missing == 0
            and self.unexpected == 0
            and self.in_gt_order
            and self.stateless_equal
            and self.stateful_equal
        )


def verify(delivered: pd.DataFrame, expected: Expected) -> Verification:
    """Compare the consumer's rows with the batch computation."""
    details: list[str] = []
    bundles = int(delivered["bundle_id"].nunique()) if len(delivered) else 0
    kind = delivered["kind"] if len(delivered) else pd.Series(dtype=object)
    events = delivered[kind == "event"]
    windows = delivered[kind == "category_minute"]
    customers = delivered[kind == "customer_total"]
    other = set(kind.unique()) - {"event", "category_minute", "customer_total"}
    if other:
        details.append(f"rows of unknown kinds: {sorted(other)}")

    # One row per input record, no more, no less.
    counts = events["event_id"].value_counts() if len(events) else pd.Series(dtype="int64")
    event_dups = int((counts - 1).clip(lower=0).sum())
    want = set(expected.events["event_id"])
    got = set(counts.index)
    missing = len(want - got)
    unexpected = len(got - want)
    if event_dups:
        dup_ids = list(counts[counts > 1].index[:3])
        details.append(f"{event_dups} duplicated record(s), e.g. {dup_ids}")
    if missing:
        details.append(f"{missing} missing record(s), e.g. {sorted(want - got)[:3]}")
    if unexpected:
        details.append(f"{unexpected} record(s) not in the input, e.g. {sorted(got - want)[:3]}")

    stateless_equal = _frames_equal(
        events.drop_duplicates("event_id"),
        expected.events,
        key=["event_id"],
        fields=EVENT_FIELDS,
        what="enriched records",
        details=details,
    )
    in_order = _bundles_in_gt_order(events, details)

    # Aggregates: every (window, category) once, with the batch computation's values.
    w = windows.rename(columns={"amount_usd_cents": "revenue"})
    window_dups = int(w.duplicated(["window_start_ms", "category"]).sum()) if len(w) else 0
    if window_dups:
        details.append(f"{window_dups} (window, category) row(s) delivered more than once")
    windows_equal = window_dups == 0 and _frames_equal(
        w,
        expected.windows,
        key=["window_start_ms", "category"],
        fields=WINDOW_FIELDS,
        what="category-minute revenue",
        details=details,
    )

    # Running totals: one row per customer per bundle; the last one equals the batch total.
    c = customers.rename(columns={"amount_usd_cents": "ordered", "paid_usd_cents": "paid"})
    customer_dups = int(c.duplicated(["customer_id", "bundle_id"]).sum()) if len(c) else 0
    if customer_dups:
        details.append(f"{customer_dups} customer total(s) delivered twice in one bundle")
    final = c.sort_values("bundle_id", kind="stable").drop_duplicates("customer_id", keep="last")
    customers_equal = customer_dups == 0 and _frames_equal(
        final,
        expected.customers,
        key=["customer_id"],
        fields=CUSTOMER_FIELDS,
        what="customer totals",
        details=details,
    )
    return Verification(
        records_in=expected.records,
        bundles=bundles,
        event_rows=len(events),
        duplicates=event_dups + window_dups + customer_dups,
        missing=missing,
        unexpected=unexpected,
        in_gt_order=in_order,
        stateless_equal=stateless_equal,
        windows_equal=windows_equal,
        customers_equal=customers_equal,
        windows=len(expected.windows),
        customers=len(expected.customers),
        details=details,
    )


def _frames_equal(
    got: pd.DataFrame,
    want: pd.DataFrame,
    *,
    key: list[str],
    fields: Sequence[str],
    what: str,
    details: list[str],
) -> bool:
    cols = list(fields)
    missing_cols = [c for c in cols if c not in got.columns]
    if missing_cols:
        details.append(f"{what}: the consumer's rows lack column(s) {missing_cols}")
        return False
    a = _normalise(got[cols]).sort_values(key).reset_index(drop=True)
    b = _normalise(want[cols]).sort_values(key).reset_index(drop=True)
    if len(a) != len(b):
        details.append(f"{what}: {len(a)} row(s) delivered, {len(b)} expected")
        return False
    diff = (a != b) & ~(a.isna() & b.isna())
    bad = diff.any(axis=1)
    if bad.any():
        first = int(bad.idxmax())
        details.append(
            f"{what}: {int(bad.sum())} row(s) differ, e.g. got {a.iloc[first].to_dict()} "
            f"expected {b.iloc[first].to_dict()}"
        )
        return False
    return True


def _normalise(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    for col in out.columns:
        if pd.api.types.is_numeric_dtype(out[col]):
            out[col] = out[col].astype("Int64")
        else:
            out[col] = out[col].astype(object).where(out[col].notna(), None)
    return out


def _bundles_in_gt_order(events: pd.DataFrame, details: list[str]) -> bool:
    """Within each Kafka partition, every record of a bundle comes after every record of
    the bundles before it (bundles are epochs; epochs are offset ranges)."""
    if events.empty:
        return True
    spans = events.groupby(["src_partition", "bundle_id"])["src_offset"].agg(["min", "max"])
    for partition, group in spans.groupby(level=0):
        ordered = group.sort_index(level=1)
        if (ordered["min"].to_numpy()[1:] <= ordered["max"].to_numpy()[:-1]).any():
            details.append(f"partition {partition}: bundles are not in offset order")
            return False
    return True


# --- the table ---------------------------------------------------------------------------


def yes_no(value: bool) -> str:
    return "yes" if value else "NO"


def table_rows(v: Verification, extra: Sequence[tuple[str, str]] = ()) -> list[tuple[str, str]]:
    """The verification table's rows, ``(label, value)``; labels are stable (tests read them)."""
    return [
        ("records in", f"{v.records_in:,}"),
        ("bundles delivered", f"{v.bundles:,}"),
        ("duplicates", f"{v.duplicates}"),
        ("missing", f"{v.missing}"),
        ("in GT order", yes_no(v.in_gt_order)),
        ("stateless results equal", yes_no(v.stateless_equal)),
        (
            "stateful results equal",
            f"{yes_no(v.stateful_equal)} ({v.windows:,} category-minute windows, "
            f"{v.customers:,} customer totals)",
        ),
        *extra,
        ("verdict", "PASS" if v.ok else "FAIL"),
    ]


def render_table(rows: Sequence[tuple[str, str]], title: str) -> str:
    width = max(len(label) for label, _ in rows)
    value_width = max(len(value) for _, value in rows)
    rule = f"+-{'-' * width}-+-{'-' * value_width}-+"
    lines = [title, rule]
    lines += [f"| {label:<{width}} | {value:<{value_width}} |" for label, value in rows]
    lines.append(rule)
    return "\n".join(lines)


def parse_table(text: str) -> dict[str, str]:
    """The rows of a table printed by :func:`render_table` (the last one in ``text``)."""
    rows: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("| ") and line.rstrip().endswith(" |"):
            label, value = (part.strip() for part in line.strip()[1:-1].split("|", 1))
            if label == "records in":
                rows = {}
            rows[label] = value
    return rows

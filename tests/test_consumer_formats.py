"""The consumers' own bookkeeping, as golden bytes: what each stores next to a bundle so that
``last_bundle()`` finds it again after a crash, or an upgrade (docs/operations.md).

``tests/golden/consumers/<what>-format1.json``: the file and s3 consumers' pointer
``_last_bundle.json`` (its exact bytes), the iceberg consumer's table property (its exact
value) and snapshot summary properties, the kafka consumer's headers of one item, and the
postgres consumer's ``gtbarrier_bundles`` table and a bundle's row in it. Each has had one
shape since its consumer was written; none carries a format field. This release must
write the fixture's bytes (a change fails here until it is made deliberately, with a new
fixture and the old one kept) and read each back to the bundle it names. The http
consumer stores nothing: the receiver answers for its bundles.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sink.bundle import Bundle
from sink.consumers.base import BundlePointer, LastBundle
from sink.consumers.file import bundle_file_name
from sink.consumers.iceberg.iceberg_consumer import (
    last_bundle_of_property,
    last_bundle_property,
    marker_of,
    snapshot_marker,
)
from sink.consumers.kafka.kafka_consumer import sink_header, sink_headers
from sink.consumers.kafka.kafka_rows import H_BUNDLE, H_COUNT, H_GT, H_INDEX
from sink.consumers.postgres.postgres_consumer import Sql, bookkeeping_row
from sink.consumers.postgres.postgres_options import PostgresSettings
from state.errors import MalformedRecord
from state.records.codec import dumps
from state.records.gt import GlobalTime
from state.records.inflight_bundle import StagedPart

GOLDEN_DIR = Path(__file__).parent / "golden" / "consumers"

PIPELINE = "orders"
BUNDLE = Bundle(
    PIPELINE,
    7,
    "4bfc1e8a-5f0e-4d6e-9b1a-2f7c9d3e6a10",
    3,
    (
        StagedPart("p0.parquet", 600, 18000, GlobalTime(7, "orders", 0, 0), None),
        StagedPart("p1.parquet", 400, 12000, GlobalTime(7, "orders", 1, 0), None),
    ),
    has_gt=True,
    ordered=True,
)
LAST = LastBundle(7, 7)


def golden(name: str) -> bytes:
    return (GOLDEN_DIR / f"{name}.json").read_bytes()


def postgres_bookkeeping() -> dict[str, Any]:
    """The table's definition, the INSERT of a row and the row, as text."""
    statements = Sql(PostgresSettings(dsn="postgresql://h/db", table="billing", schema="out"))
    return {
        "create": statements.create_bookkeeping().as_string(None),
        "insert": statements.insert_bookkeeping().as_string(None),
        "row": list(bookkeeping_row(PIPELINE, BUNDLE)),
    }


# name -> the bytes this release writes for BUNDLE
WRITTEN: dict[str, bytes] = {
    "last-bundle-pointer-format1": BundlePointer.of(BUNDLE, bundle_file_name(7)).to_bytes(),
    "iceberg-last-bundle-property-format1": last_bundle_property(BUNDLE).encode(),
    "iceberg-snapshot-summary-format1": dumps(snapshot_marker(BUNDLE)),
    "kafka-headers-format1": dumps([[k, v.decode()] for k, v in sink_headers(BUNDLE, 5, 1000)]),
    "postgres-bookkeeping-format1": dumps(postgres_bookkeeping()),
}


def test_every_fixture_is_listed() -> None:
    assert {p.stem for p in GOLDEN_DIR.glob("*.json")} == set(WRITTEN)


@pytest.mark.parametrize("name", WRITTEN)
def test_this_release_writes_the_fixtures_bytes(name: str) -> None:
    assert WRITTEN[name] == golden(name), (
        f"{name}: this release no longer writes the fixture's bytes; a consumer's "
        "bookkeeping is read by every release that may resume its pipeline: change it "
        "deliberately, with a new fixture, and keep this one readable"
    )


def test_the_pointer_names_its_bundle() -> None:
    pointer = BundlePointer.from_json(json.loads(golden("last-bundle-pointer-format1")))
    assert pointer == BundlePointer(7, 7, "bundle-000000000007.parquet", 1000, PIPELINE)
    assert pointer.last_bundle == LAST
    # only bundle_id and gt are needed; fields a reader does not know are ignored
    assert BundlePointer.from_json({"bundle_id": 7, "gt": 7, "new": 1}).last_bundle == LAST
    with pytest.raises(MalformedRecord, match=r"last-bundle pointer: field 'gt' is missing"):
        BundlePointer.from_json({"bundle_id": 7})


def test_the_iceberg_markers_name_their_bundle() -> None:
    raw = golden("iceberg-last-bundle-property-format1").decode()
    assert last_bundle_of_property(raw, "t") == LAST
    summary = json.loads(golden("iceberg-snapshot-summary-format1"))
    assert marker_of(summary, PIPELINE) == LAST
    assert marker_of(summary, "another-pipeline") is None
    with pytest.raises(MalformedRecord, match=r"table property x: not a JSON document"):
        last_bundle_of_property("{7", "table property x")


def test_the_kafka_headers_name_their_bundle_and_item() -> None:
    headers = [(k, v.encode()) for k, v in json.loads(golden("kafka-headers-format1"))]
    found = [sink_header(headers, h) for h in (H_BUNDLE, H_GT, H_INDEX, H_COUNT)]
    assert found == [7, 7, 5, 1000]


def test_the_postgres_row_names_its_bundle() -> None:
    stored = json.loads(golden("postgres-bookkeeping-format1"))
    assert stored["row"] == [PIPELINE, 7, 7, 1000]
    assert '"out"."gtbarrier_bundles"' in stored["create"]

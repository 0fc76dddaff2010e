"""docs/quickstart.md, run as written: the source block, then each consumer's block, in the
session's Spark against the test servers (Tansu, PostgreSQL; Iceberg's SQL catalog on
SQLite; Delta on the local file system). Only hosts, ports, paths and topic names are
replaced, each replacement must find its text (a drifted page fails here), and each
consumer must then hold every input record exactly once."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from harness.process import REPO_ROOT
from integration_tests.sink_helpers import read_bundles

PAGE = REPO_ROOT / "docs" / "quickstart.md"
RECORDS = 40


def blocks() -> dict[str, str]:
    """The page's python blocks by the heading above each."""
    found: dict[str, str] = {}
    for section in re.split(r"^## ", PAGE.read_text(), flags=re.MULTILINE)[1:]:
        heading, _, body = section.partition("\n")
        codes = re.findall(r"```python\n(.*?)```", body, re.DOTALL)
        if codes:
            assert len(codes) == 1, f"{PAGE.name}: one python block per section ({heading})"
            found[heading.strip()] = codes[0]
    return found


def substituted(code: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert old in code, f"{PAGE.name} no longer has {old!r}: update the page's test"
        code = code.replace(old, new)
    return code


def test_the_page_has_a_block_per_consumer() -> None:
    assert list(blocks()) == [
        "The source",
        "File (Parquet files in a directory)",
        "PostgreSQL",
        "Apache Iceberg",
        "Delta Lake",
        "Kafka (another topic)",
    ]


def run_page(spark: Any, kafka: Any, tmp_path: Path, heading: str, sink: dict[str, str]) -> None:
    """Run the source block and ``heading``'s block on a fresh topic of :data:`RECORDS`
    records, to the end of the input."""
    topic = kafka.create_topic(partitions=2)
    kafka.produce_values(topic, [f"order-{i}".encode() for i in range(RECORDS)])
    source = substituted(
        blocks()["The source"],
        {
            '"orders-to-billing"': repr(f"quickstart-{tmp_path.name}"),
            "file:///tmp/gtbarrier-state": f"file://{tmp_path / 'state'}",
            '"127.0.0.1:9092"': repr(kafka.bootstrap),
            '.option("subscribe", "orders")': f'.option("subscribe", {topic!r})',
        },
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, f"{PAGE.name}: The source", "exec"), namespace)
    assert namespace["spark"] is spark, "the page's session is the one Spark already has"
    exec(
        compile(substituted(blocks()[heading], sink), f"{PAGE.name}: {heading}", "exec"), namespace
    )
    query = namespace["q"]
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None


def values(rows: list[Any]) -> Counter[str]:
    return Counter(v.decode() if isinstance(v, bytes) else str(v) for v in rows)


EXPECTED = Counter(f"order-{i}" for i in range(RECORDS))


def test_file(spark: Any, kafka: Any, tmp_path: Path) -> None:
    out = tmp_path / "billing"
    run_page(
        spark,
        kafka,
        tmp_path,
        "File (Parquet files in a directory)",
        {'"/tmp/billing"': repr(str(out)), '"/tmp/cp-file"': repr(str(tmp_path / "cp"))},
    )
    assert values(read_bundles(out).column("value").to_pylist()) == EXPECTED


def test_postgres(spark: Any, kafka: Any, postgres: Any, tmp_path: Path) -> None:
    # The session's Spark started before this test, so its Python workers cannot see a
    # variable set now: the page's ${env:...} reference becomes a ${file:...} one, which
    # the same resolver reads where the connection is made (the harness's server trusts
    # loopback, so the password is only resolved, not checked).
    password = tmp_path / "pgpassword"
    password.write_text("resolved-not-checked\n")
    host, port, user = (
        re.search(rf"{k}=(\S+)", postgres.dsn).group(1)  # type: ignore[union-attr]
        for k in ("host", "port", "user")
    )
    run_page(
        spark,
        kafka,
        tmp_path,
        "PostgreSQL",
        {
            "postgresql://billing:${env:PGPASSWORD}@127.0.0.1:5432/shop": (
                f"postgresql://{user}:${{file:{password}}}@{host}:{port}/postgres"
            ),
            '"public.billing"': repr(postgres.table("billing")),
            '"/tmp/cp-postgres"': repr(str(tmp_path / "cp")),
        },
    )
    rows = postgres.rows("SELECT body FROM {schema}.billing")
    assert values([r[0] for r in rows]) == EXPECTED


def test_iceberg(spark: Any, kafka: Any, tmp_path: Path) -> None:
    from pyiceberg.catalog import load_catalog

    catalog_db, warehouse = tmp_path / "catalog.db", tmp_path / "warehouse"
    run_page(
        spark,
        kafka,
        tmp_path,
        "Apache Iceberg",
        {
            "sqlite:////tmp/iceberg/catalog.db": f"sqlite:///{catalog_db}",
            "file:///tmp/iceberg/warehouse": f"file://{warehouse}",
            '"/tmp/cp-iceberg"': repr(str(tmp_path / "cp")),
        },
    )
    catalog = load_catalog(
        "default", type="sql", uri=f"sqlite:///{catalog_db}", warehouse=f"file://{warehouse}"
    )
    table = catalog.load_table("shop.billing").scan().to_arrow()
    assert values(table.column("body").to_pylist()) == EXPECTED


def test_delta(spark: Any, kafka: Any, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    table = tmp_path / "delta" / "billing"
    run_page(
        spark,
        kafka,
        tmp_path,
        "Delta Lake",
        {
            "file:///tmp/delta/billing": f"file://{table}",
            '"/tmp/cp-delta"': repr(str(tmp_path / "cp")),
        },
    )
    delta = DeltaTable(f"file://{table}")
    assert values(delta.to_pyarrow_table().column("body").to_pylist()) == EXPECTED
    assert delta.transaction_version(f"quickstart-{tmp_path.name}") is not None


def test_kafka(spark: Any, kafka: Any, tmp_path: Path) -> None:
    out_topic = kafka.create_topic(partitions=1)
    run_page(
        spark,
        kafka,
        tmp_path,
        "Kafka (another topic)",
        {
            '"127.0.0.1:9092"': repr(kafka.bootstrap),
            '.option("consumer.topic", "billing")': f'.option("consumer.topic", {out_topic!r})',
            '"/tmp/cp-kafka"': repr(str(tmp_path / "cp")),
        },
    )
    assert values([r.value for r in kafka.consume_all(out_topic)]) == EXPECTED

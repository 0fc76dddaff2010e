"""Coming from Spark's ``format("kafka")``: the options Spark's Kafka source takes, and
what gtkafka does with each, as ``docs/migrating.md`` tells it.

The doc's option table is read here and every row is run through gtkafka's own
validation: an option the doc calls the same or different is accepted with the value the
row was tried with, and one it calls refused fails with a :class:`ConfigError` naming it
and saying what the row quotes. The table must name every option of Spark's Kafka source
(:data:`SPARK_SOURCE_OPTIONS`), so the doc cannot drift from the product or from Spark.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from datasource.options import KafkaSourceOptions
from state.errors import ConfigError, UnknownOptionError

DOC = Path(__file__).resolve().parent.parent / "docs" / "migrating.md"
BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders"}

# The options of Spark's Kafka source (Structured Streaming + Kafka Integration Guide,
# Spark 4.x: "Creating a Kafka Source", its options table and "Kafka Specific
# Configurations"), and the kafka.* settings that guide names.
SPARK_SOURCE_OPTIONS = (
    "assign",
    "subscribe",
    "subscribePattern",
    "kafka.bootstrap.servers",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsets",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "endingOffsets",
    "failOnDataLoss",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "groupIdPrefix",
    "kafka.group.id",
    "includeHeaders",
    "startingOffsetsByTimestampStrategy",
    "kafka.auto.offset.reset",
    "kafka.key.deserializer",
    "kafka.value.deserializer",
    "kafka.enable.auto.commit",
    "kafka.interceptor.classes",
)

VERDICTS = ("same", "different", "refused")


def parse(options: dict[str, str]) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse(options)


def test_group_id_prefix_is_refused_saying_why_gtkafka_needs_no_group() -> None:
    with pytest.raises(ConfigError) as info:
        parse({**BASE, "groupIdPrefix": "team-a"})
    err = info.value
    assert not isinstance(err, UnknownOptionError)
    assert err.option == "groupIdPrefix"
    text = str(err)
    assert "never joins" in text and "kafka.client.id" in text and "commitOffsetsToGroup" in text


def test_kafka_group_id_is_refused_saying_why_gtkafka_needs_no_group() -> None:
    with pytest.raises(ConfigError) as info:
        parse({**BASE, "kafka.group.id": "team-a"})
    text = str(info.value)
    assert info.value.option == "kafka.group.id"
    assert "never joins" in text and "ACL" in text and "kafka.client.id" in text


def test_kafka_client_id_names_the_client_to_the_broker_for_quotas() -> None:
    o = parse({**BASE, "pipeline.id": "p", "kafka.client.id": "team-a-reader"})
    assert o.consumer_config()["client_id"] == "team-a-reader"
    assert o.consumer_config()["group_id"] is None


# --- the doc's option table ------------------------------------------------------------


def doc_rows() -> list[tuple[str, str, list[str], str]]:
    """``(option, verdict, tried-with pairs, the rest of the row)`` of every table row
    whose first cell is a backticked option name."""
    rows: list[tuple[str, str, list[str], str]] = []
    text = DOC.read_text() if DOC.exists() else ""  # a missing doc fails the test below
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not re.fullmatch(r"`[^`]+`", cells[0]):
            continue
        option, verdict, tried, rest = cells
        rows.append(
            (option.strip("`"), verdict.lower(), re.findall(r"`([^`=]+=[^`]*)`", tried), rest)
        )
    return rows


def test_the_doc_names_every_option_of_spark_s_kafka_source_once() -> None:
    assert DOC.exists()
    named = [row[0] for row in doc_rows()]
    assert sorted(named) == sorted(set(named)), "an option named twice"
    missing = [o for o in SPARK_SOURCE_OPTIONS if o not in named]
    assert missing == []
    assert all(row[1] in VERDICTS for row in doc_rows()), [
        r for r in doc_rows() if r[1] not in VERDICTS
    ]


@pytest.mark.parametrize("row", doc_rows(), ids=lambda row: row[0])
def test_each_row_is_what_gtkafka_s_validation_does(row: tuple[str, str, list[str], str]) -> None:
    option, verdict, tried, rest = row
    assert tried, f"{option}: no `name=value` the row was tried with"
    given = dict(pair.split("=", 1) for pair in tried)
    assert option in given, f"{option}: not among the values it was tried with"
    base = dict(BASE)
    if {"subscribePattern", "assign"} & set(given):
        del base["subscribe"]
    options = {**base, **given}
    if verdict == "refused":
        with pytest.raises(ConfigError) as info:
            parse(options)
        assert info.value.option.lower() == option.lower(), str(info.value)
        quoted = re.findall(r'"([^"]+)"', rest)
        assert quoted, f"{option}: a refused row quotes the error"
        for excerpt in quoted:
            assert excerpt in str(info.value), option
    else:
        parse(options)


@pytest.mark.parametrize(
    "pattern", [r"orders-\p{L}+", r"\Qorders.v1\E", r"(?<env>prod|dev)-orders"]
)
def test_a_java_only_pattern_fails_at_load_naming_subscribe_pattern(pattern: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse({"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribePattern": pattern})
    assert info.value.option == "subscribePattern" and "a regular expression" in str(info.value)


def test_the_doc_s_commands_find_the_offsets_of_the_last_committed_batch(tmp_path: Path) -> None:
    """The doc's shell lines, run on a checkpoint laid out as Spark writes one (batch 2
    planned but not committed), print the offsets that follow batch 1, which gtkafka takes
    as ``startingOffsets``."""
    text = DOC.read_text()
    block = re.search(r"```bash\n(\s*cp=.*?)```", text, re.DOTALL)
    assert block is not None
    script = "\n".join(line.strip() for line in block.group(1).splitlines())
    cp = tmp_path / "checkpoint"
    (cp / "commits").mkdir(parents=True)
    (cp / "offsets").mkdir()
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{}}'
    ends = [
        '{"orders":{"1":10,"0":12}}',
        '{"orders":{"1":1234,"0":5678}}',
        '{"orders":{"1":2000,"0":6000}}',
    ]
    for batch, end in enumerate(ends):
        (cp / "offsets" / str(batch)).write_text(f"v1\n{meta}\n{end}")
    for batch in (0, 1):  # batch 2 started, never committed
        (cp / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (cp / "commits" / ".1.crc").write_text("")  # Hadoop's checksum files sit beside them
    script = script.replace("cp=/path/to/checkpoint", f"cp={cp}")
    out = subprocess.run(["bash", "-c", script], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == ends[1]
    parsed = parse({**BASE, "startingOffsets": out.stdout.strip()})
    assert parsed.starting is not None
    assert dict(parsed.starting.offsets) == {("orders", 0): 5678, ("orders", 1): 1234}

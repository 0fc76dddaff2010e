"""Identifiers and names are checked against their whole pattern: a trailing line break
(which ``$`` lets through) is refused or not recognised, wherever input is validated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gtbarrier.cli import main as gtbarrier
from sink.consumers.postgres.postgres_options import PostgresSettings
from sink.dead_letters.dead_letter_format import bundle_of_name, dead_letter_name
from sink.options import SinkOptions
from state.coordinator.config import CoordinatorConfig, ZooKeeperAuth
from state.errors import ConfigError, MalformedRecord
from state.layout import PipelineLayout, validate_pipeline_id
from state.records.floor import SegmentRef
from state.records.manifest import ManifestEntry, PackRef

SHA = "a" * 64


def test_pipeline_id_with_a_trailing_line_break_is_refused() -> None:
    assert validate_pipeline_id("orders") == "orders"
    for bad in ("orders\n", "orders\r\n", "\norders", "ord\ners"):
        with pytest.raises(ConfigError) as info:
            validate_pipeline_id(bad)
        assert info.value.option == "pipeline.id"


def test_the_coordinator_and_the_cli_refuse_a_pipeline_id_with_a_trailing_line_break(
    tmp_path: Path,
) -> None:
    """They take the id as given (no option table trims it): it would reach znode paths,
    keys and log lines with its line break."""
    CoordinatorConfig.from_arguments("orders", "memory://fm", tmp_path / "cp")
    with pytest.raises(ConfigError) as info:
        CoordinatorConfig.from_arguments("orders\n", "memory://fm", tmp_path / "cp")
    assert info.value.option == "pipeline_id"
    assert gtbarrier(["status", "--pipeline", "orders\n", "--state-uri", "memory://fm"]) == 2


def test_the_source_and_the_sink_trim_the_pipeline_id_so_no_line_break_flows() -> None:
    """Their option tables trim every value: what is used is the id without the line
    break (not a gap, kept to show it)."""
    options = {"state.uri": "memory://fm", "consumer": "file", "consumer.path": "/tmp/x"}
    assert SinkOptions.parse({**options, "pipeline.id": "orders\n"}).pipeline_id == "orders"


def test_a_zookeeper_auth_scheme_with_a_line_break_is_refused() -> None:
    assert ZooKeeperAuth.parse("digest:u:p").scheme == "digest"
    with pytest.raises(ConfigError) as info:
        ZooKeeperAuth.parse("digest\n:u:p")
    assert info.value.option == "zookeeper_auth"


def test_a_postgres_table_is_trimmed_and_a_line_break_inside_refused() -> None:
    base = {
        "pipeline.id": "p",
        "state.uri": "memory://pg",
        "consumer": "postgres",
        "consumer.postgres.dsn": "host=db user=u dbname=x",
    }
    parsed = SinkOptions.parse({**base, "consumer.postgres.table": "out.events\n"}).settings
    assert isinstance(parsed, PostgresSettings) and parsed.table == "events"
    with pytest.raises(ConfigError) as info:
        SinkOptions.parse({**base, "consumer.postgres.table": "out.events\n.x"})
    assert info.value.option == "consumer.postgres.table"


@pytest.mark.parametrize(
    "decode",
    [
        lambda sha: PackRef.from_json({"sha256": sha, "size": 1}),
        lambda sha: ManifestEntry.from_json(
            {"path": "a", "sha256": SHA, "size": 1, "pack": sha, "offset": 0}, packed=True
        ),
    ],
    ids=["pack", "entry's pack"],
)
def test_a_stored_digest_with_a_trailing_line_break_is_malformed(decode: Any) -> None:
    decode(SHA)
    with pytest.raises(MalformedRecord):
        decode(SHA + "\n")


def test_a_segment_digest_with_a_trailing_line_break_is_refused() -> None:
    SegmentRef(0, 1, "0" * 16)
    with pytest.raises(ValueError, match="16 lowercase hex"):
        SegmentRef(0, 1, "0" * 16 + "\n")


def test_names_listed_with_a_trailing_line_break_are_not_recognised() -> None:
    name = dead_letter_name(7)
    assert bundle_of_name(name) == 7
    assert bundle_of_name(name + "\n") is None
    layout = PipelineLayout("p")
    key = layout.barrier_claim(3, "run-1")
    assert layout.claim_of(key) == (3, "run-1")
    assert layout.claim_of(key + "\n") is None

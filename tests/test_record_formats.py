"""Every stored record format, as golden bytes: what this release writes, and every earlier
shape a release has written, which this one must still read (docs/operations.md, "Upgrades").

``tests/golden/records/<record>-format<N>[-<shape>].json`` holds a record's exact stored
bytes (canonical JSON, no trailing newline). :data:`GOLDEN` says what each decodes to:

* a fixture this release writes (``current``) decodes to its value and re-encodes to the
  identical bytes, so an encoder that changes a record's bytes fails here until the
  change is made deliberately: a new format and a new fixture, the old one kept;
* an earlier shape (a record written before a field existed) decodes with the documented
  defaults, and is rewritten by this release as the current fixture ``rewritten_as``;
* for every record that carries ``format``, the fixture of the format this release writes
  exists, and the same record with a higher format is refused with an error naming the
  record, its format and the formats supported (:class:`~state.errors.UnsupportedFormat`);
* fields a reader does not know are ignored, in every record (state/records/codec.py).

To change a record's format: bump its ``*_FORMAT`` constant, add the new
``<record>-format<N+1>.json`` and its entry here, keep every earlier fixture, and say in
docs/operations.md what an older release does with it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from state.errors import MalformedOffset, MalformedRecord, SnapshotCorrupted, UnsupportedFormat
from state.records.barrier import (
    BARRIER_STATE_FORMAT,
    BarrierState,
    Owner,
    RunMarker,
    SkippedBundle,
)
from state.records.batch import BatchRecord
from state.records.checkpoint_marker import MARKER_FORMAT, CheckpointMarker
from state.records.codec import FORMAT_FIELD, decode, dumps
from state.records.driver import DriverOwner, DriverRecord
from state.records.epoch import EPOCH_RECORD_FORMAT, EpochRecord
from state.records.epoch_segment import EPOCH_SEGMENT_FORMAT, EpochSegment
from state.records.floor import FLOOR_RECORD_FORMAT, FloorRecord, SegmentRef
from state.records.gt import GlobalTime
from state.records.inflight_bundle import InflightBundle, StagedPart
from state.records.manifest import MANIFEST_FORMAT, Manifest, ManifestEntry, PackRef
from state.records.resume_point import RESUME_POINT_FORMAT, ResumePoint, SnapshotRef
from state.records.source_offset import SourceOffset
from state.records.source_start import SourceStart

GOLDEN_DIR = Path(__file__).parent / "golden" / "records"

# --- the values the fixtures hold ---------------------------------------------------------

TOPIC_ID = "01a212fd-3be2-76d0-825d-fa41f38b6803"
START = SourceOffset(7, {("orders", 0): 1200, ("orders", 1): 1187})
END = SourceOffset(8, {("orders", 0): 1300, ("orders", 1): 1290})
QUERY = "4bfc1e8a-5f0e-4d6e-9b1a-2f7c9d3e6a10"
RUN = "9e2d4c1b-7a3f-4e8d-b6c5-1f0a2b3c4d5e"
PART = StagedPart(
    f"orders/staging/{QUERY}/000000000003/p00000-t1-r{RUN}.parquet",
    600,
    18000,
    GlobalTime(7, "orders", 0, 1200),
    GlobalTime(7, "orders", 0, 1299),
)
PART2 = StagedPart(
    f"orders/staging/{QUERY}/000000000003/p00001-t2-r{RUN}.parquet",
    400,
    12000,
    GlobalTime(7, "orders", 1, 1187),
    GlobalTime(7, "orders", 1, 1289),
)
DEAD = StagedPart(f"orders/staging/{QUERY}/000000000003/dl-p00000-t1-r{RUN}.parquet", 2, 900)
BUNDLE = InflightBundle(7, QUERY, 3, RUN, (PART, PART2), has_gt=True, ordered=True)
WITH_DEAD_LETTERS = InflightBundle(
    7, QUERY, 3, RUN, (PART, PART2), has_gt=True, ordered=True, dead_letters=(DEAD,)
)
OWNER = Owner(RUN, QUERY, 4, 1760000000.5, 3)
BARRIER = BarrierState(6, BUNDLE, OWNER)
DRIVER_CLAIM = Owner.driver_claim("host-a:4242:5f1c", 5, 5, 1760000100.25)
SKIPPED = SkippedBundle(
    bundle_id=4,
    batch_id=2,
    query_id=QUERY,
    run_id=RUN,
    rows=1000,
    parts_missing=(PART.location,),
    rows_missing=600,
    since=1760000050.0,
)
BARRIER_CLAIMED = BarrierState(6, None, DRIVER_CLAIM, (SKIPPED,))
BARRIER_COMMITTED = BarrierState(6, None, OWNER, committed=38)
REF = SnapshotRef(12, "orders/snapshots/000000000012/manifest.json", "ab" * 32, 41, 41)
OLDER_REF = SnapshotRef(11, "orders/snapshots/000000000011/manifest.json", "cd" * 32, 38, 38)
FRONTIER = SourceOffset(42, {("orders", 0): 5200, ("orders", 1): 5187}).to_json()
POINT = ResumePoint(0, 3, 41, 41, QUERY, FRONTIER, 1760000000.0, (REF, OLDER_REF))
AFTER = SourceOffset(9, {("orders", 0): 1300, ("orders", 1): 1401})
SEGMENT = EpochSegment(
    epochs=(EpochRecord(7, START, END), EpochRecord(8, END, AFTER, {"orders": TOPIC_ID})),
    batches=(BatchRecord(QUERY, 3, 7), BatchRecord(QUERY, 4, 8), BatchRecord(RUN, 0, 7)),
)
FLOOR_WITH_SEGMENTS = FloorRecord(
    7,
    START,
    6,
    2,
    segments=(SegmentRef(0, 64, "4d1c0b9e7a3f2e61"), SegmentRef(64, 80, "0be2a19c44d7f3a5")),
)
FLOOR_NOTHING_PRUNED = FloorRecord(
    0, SourceOffset(0, {("orders", 0): 0}), segments=(SegmentRef(0, 16, "9f86d081884c7d65"),)
)
FLOOR_FENCED = FloorRecord(0, SourceOffset(0, {("orders", 0): 0}), generation=2)
FLOOR_WITH_GENERATION = replace(FLOOR_WITH_SEGMENTS, generation=3)
MANIFEST = Manifest(
    "orders",
    12,
    0,
    3,
    41,
    41,
    FRONTIER,
    QUERY,
    1760000000.0,
    (
        ManifestEntry("commits/41", 29, "cd" * 32),
        ManifestEntry("metadata", 45, "ef" * 32),
        ManifestEntry("offsets/41", 402, "01" * 32),
    ),
    uploaded_files=2,
    uploaded_bytes=431,
    copy_seconds=0.412,
)
PACK, OLDER_PACK = PackRef("5a" * 32, 431), PackRef("7c" * 32, 4096)
MANIFEST_PACKED = Manifest(
    "orders",
    13,
    0,
    3,
    44,
    44,
    FRONTIER,
    QUERY,
    1760000030.0,
    (
        ManifestEntry("commits/44", 29, "cd" * 32, pack=PACK.sha256, offset=0),
        ManifestEntry("metadata", 45, "ef" * 32, pack=OLDER_PACK.sha256, offset=1024),
        ManifestEntry("offsets/44", 402, "01" * 32, pack=PACK.sha256, offset=29),
    ),
    uploaded_files=2,
    uploaded_bytes=431,
    copy_seconds=0.118,
    packs=(PACK, OLDER_PACK),
)


@dataclass(frozen=True)
class Golden:
    """One fixture: ``name`` is its file's stem, ``value`` what it decodes to.

    ``current``: this release writes these bytes for ``value``. Otherwise an earlier shape,
    ``written`` says which commits wrote it, and ``rewritten_as`` names the current
    fixture this release writes for the same value (None: only a round trip is checked).
    """

    name: str
    value: Any
    from_json: Callable[[object], Any]
    current: bool = True
    written: str = ""
    rewritten_as: str | None = None


GOLDEN: list[Golden] = [
    # the source's offsets: what Spark checkpoints, and source/start.json (no format field)
    Golden("source-offset-format1", START, SourceOffset.from_json),
    Golden("source-start-format1", SourceStart(START), SourceStart.from_json),
    Golden(
        "source-start-format1-topic-ids",
        SourceStart(START, {"orders": TOPIC_ID}),
        SourceStart.from_json,
    ),
    Golden("epoch-format1", EpochRecord(7, START, END), EpochRecord.from_json),
    Golden(
        "epoch-format1-topic-ids",
        EpochRecord(7, START, END, {"orders": TOPIC_ID}),
        EpochRecord.from_json,
    ),
    Golden(
        "epoch-format1-no-format-field",
        EpochRecord(7, START, END),
        EpochRecord.from_json,
        current=False,
        written="57647a9 .. 931bbc3 (before the format field)",
        rewritten_as="epoch-format1",
    ),
    Golden("batch-format1", BatchRecord(QUERY, 3, 7), BatchRecord.from_json),
    # the sink's state
    Golden("barrier-state-format1", BARRIER, BarrierState.from_json),
    Golden("barrier-state-format1-empty", BarrierState(), BarrierState.from_json),
    Golden("barrier-state-format1-driver-claim-skipped", BARRIER_CLAIMED, BarrierState.from_json),
    # epochs committed past GT_last with empty bundles; a record without it reads as -1
    Golden("barrier-state-format1-committed", BARRIER_COMMITTED, BarrierState.from_json),
    Golden(
        "barrier-state-format1-no-format-field",
        BARRIER,
        BarrierState.from_json,
        current=False,
        written="c98f5cb .. 931bbc3 (before the format field)",
        rewritten_as="barrier-state-format1",
    ),
    # the in-flight bundle is stored inside the barrier state, in its format; without dead
    # letters it has the bytes it had before the field existed (56ec76b)
    Golden("inflight-bundle-format1", BUNDLE, InflightBundle.from_json),
    Golden("inflight-bundle-format1-dead-letters", WITH_DEAD_LETTERS, InflightBundle.from_json),
    Golden("run-marker-format1", RunMarker(RUN, QUERY, 1760000000.5, 4), RunMarker.from_json),
    Golden(
        "run-marker-format1-no-generation",
        RunMarker(RUN, QUERY, 1760000000.5),
        RunMarker.from_json,
        current=False,
        written="c98f5cb .. aa54d6d (before run markers carried their generation)",
    ),
    # the coordinator's records; a driver record without "coordinated" was written before
    # the field existed (state.protocol.fencing.coordinated reads it from its owner)
    Golden(
        "driver-format1",
        DriverRecord(3, DriverOwner("host-a", 4242, "host-a:4242:5f1c", 1760000000.25)),
        DriverRecord.from_json,
    ),
    Golden(
        "driver-format1-coordinated",
        DriverRecord(
            3, DriverOwner("host-a", 4242, "host-a:4242:5f1c", 1760000000.25), coordinated=True
        ),
        DriverRecord.from_json,
    ),
    Golden("resume-point-format1", POINT, ResumePoint.from_json),
    Golden(
        "resume-point-format1-empty",
        ResumePoint.empty(generation=1, token=4, created_at=1760000200.0),
        ResumePoint.from_json,
    ),
    Golden(
        "resume-point-format1-no-format-field",
        POINT,
        ResumePoint.from_json,
        current=False,
        written="963506f .. 931bbc3 (before the format field)",
        rewritten_as="resume-point-format1",
    ),
    # written before packs, and still for a manifest without them
    Golden("manifest-format1", MANIFEST, Manifest.from_json),
    Golden("manifest-format2", MANIFEST_PACKED, Manifest.from_json),
    Golden("checkpoint-marker-format1", CheckpointMarker("orders", 1), CheckpointMarker.from_json),
    Golden("floor-format1", FloorRecord(7, START, 6, 2), FloorRecord.from_json),
    Golden("floor-format2", FLOOR_WITH_SEGMENTS, FloorRecord.from_json),
    Golden("floor-format2-nothing-pruned", FLOOR_NOTHING_PRUNED, FloorRecord.from_json),
    # written once recover(mode="replay") began a generation: a release before refuses it
    Golden("floor-format3", FLOOR_WITH_GENERATION, FloorRecord.from_json),
    Golden("floor-format3-fenced-only", FLOOR_FENCED, FloorRecord.from_json),
    Golden("epoch-segment-format1", SEGMENT, EpochSegment.from_json),
]
BY_NAME = {g.name: g for g in GOLDEN}

# Each record that carries ``format``: its fixtures' prefix and the format this release writes.
FORMATS: dict[str, int] = {
    "epoch": EPOCH_RECORD_FORMAT,
    "barrier-state": BARRIER_STATE_FORMAT,
    "resume-point": RESUME_POINT_FORMAT,
    "manifest": MANIFEST_FORMAT,
    "checkpoint-marker": MARKER_FORMAT,
    "floor": FLOOR_RECORD_FORMAT,
    "epoch-segment": EPOCH_SEGMENT_FORMAT,
}
RECORD_NAMES: dict[str, str] = {
    "epoch": "epoch record",
    "barrier-state": "barrier state",
    "resume-point": "resume point",
    "manifest": "snapshot manifest",
    "checkpoint-marker": "checkpoint generation marker",
    "floor": "floor record",
    "epoch-segment": "epoch segment",
}


def fixture_bytes(name: str) -> bytes:
    return (GOLDEN_DIR / f"{name}.json").read_bytes()


def ids(golden: Golden) -> str:
    return golden.name


def test_every_fixture_is_listed_and_every_listed_fixture_exists() -> None:
    on_disk = {p.stem for p in GOLDEN_DIR.glob("*.json")}
    assert on_disk == set(BY_NAME), (
        f"fixtures without an entry: {sorted(on_disk - set(BY_NAME))}; "
        f"entries without a fixture: {sorted(set(BY_NAME) - on_disk)}"
    )


@pytest.mark.parametrize("golden", GOLDEN, ids=ids)
def test_fixture_decodes_to_its_values(golden: Golden) -> None:
    assert decode(fixture_bytes(golden.name), golden.from_json, golden.name) == golden.value


@pytest.mark.parametrize("golden", [g for g in GOLDEN if g.current], ids=ids)
def test_this_release_writes_the_fixtures_bytes(golden: Golden) -> None:
    data = fixture_bytes(golden.name)
    written = dumps(golden.value.to_json())
    assert written == data, (
        f"{golden.name}: this release no longer writes the fixture's bytes. If the format "
        "changed on purpose, give the record a new format and a new fixture and keep this "
        f"one as an earlier shape.\nfixture: {data!r}\nwritten: {written!r}"
    )
    assert dumps(json.loads(data)) == data  # canonical JSON: sorted keys, no whitespace


@pytest.mark.parametrize("golden", [g for g in GOLDEN if not g.current], ids=ids)
def test_an_earlier_shape_is_rewritten_in_todays(golden: Golden) -> None:
    assert golden.written, f"{golden.name}: say which commits wrote this shape"
    written = dumps(golden.value.to_json())
    assert decode(written, golden.from_json, golden.name) == golden.value
    if golden.rewritten_as is not None:
        assert BY_NAME[golden.rewritten_as].current
        assert written == fixture_bytes(golden.rewritten_as)


@pytest.mark.parametrize(("record", "supported"), FORMATS.items())
def test_every_format_has_fixtures(record: str, supported: int) -> None:
    for fmt in range(1, supported + 1):
        name = f"{record}-format{fmt}"
        assert name in BY_NAME, f"{name}.json: no fixture of format {fmt} of the {record}"
    current = BY_NAME[f"{record}-format{supported}"]
    assert current.current
    assert json.loads(fixture_bytes(current.name))[FORMAT_FIELD] == supported


@pytest.mark.parametrize(("record", "supported"), FORMATS.items())
def test_a_newer_format_is_refused_naming_the_record_and_the_formats(
    record: str, supported: int
) -> None:
    golden = BY_NAME[f"{record}-format{supported}"]
    raw = json.loads(fixture_bytes(golden.name))
    raw[FORMAT_FIELD] = supported + 1
    with pytest.raises(UnsupportedFormat) as info:
        golden.from_json(raw)
    err = info.value
    assert (err.record, err.found, err.supported) == (
        RECORD_NAMES[record],
        supported + 1,
        supported,
    )
    formats = "format 1" if supported == 1 else f"formats 1 to {supported}"
    assert str(err) == (
        f"{RECORD_NAMES[record]}: format {supported + 1} is not supported: this gtbarrier "
        f"reads {formats} (the record was written by a newer gtbarrier)"
    )
    assert isinstance(err, MalformedRecord) and not err.retriable


def test_a_newer_in_flight_bundle_is_refused_with_its_barrier_state() -> None:
    raw = json.loads(fixture_bytes("barrier-state-format1"))
    raw[FORMAT_FIELD] = BARRIER_STATE_FORMAT + 1
    with pytest.raises(UnsupportedFormat, match=r"^barrier state: format 2 is not supported"):
        decode(dumps(raw), BarrierState.from_json, "orders/barrier/state.json")


def test_a_newer_manifest_is_a_snapshot_that_cannot_be_used() -> None:
    raw = json.loads(fixture_bytes(f"manifest-format{MANIFEST_FORMAT}"))
    raw[FORMAT_FIELD] = MANIFEST_FORMAT + 1
    newer = rf"manifest m is malformed: .*format {MANIFEST_FORMAT + 1} is not sup"
    with pytest.raises(SnapshotCorrupted, match=newer):
        Manifest.from_bytes(dumps(raw), where="m")
    del raw[FORMAT_FIELD]  # it has always been written: required
    with pytest.raises(MalformedRecord, match=r"field 'format' is missing"):
        Manifest.from_json(raw)


@pytest.mark.parametrize("value", [0, -1, "2", 1.5, True, None])
def test_a_format_that_is_no_format_is_malformed(value: object) -> None:
    raw = json.loads(fixture_bytes("barrier-state-format1"))
    raw[FORMAT_FIELD] = value
    with pytest.raises(MalformedRecord, match=r"barrier state: field 'format' = .* is invalid"):
        BarrierState.from_json(raw)


@pytest.mark.parametrize(
    "golden", [g for g in GOLDEN if not isinstance(g.value, SourceOffset)], ids=ids
)
def test_fields_a_reader_does_not_know_are_ignored(golden: Golden) -> None:
    raw = json.loads(fixture_bytes(golden.name))
    raw["added_by_a_newer_release"] = {"any": ["value"]}
    assert golden.from_json(raw) == golden.value


def test_a_source_offset_with_another_field_is_not_gtkafkas() -> None:
    # Spark compares offsets as JSON text, so the offset's keys are fixed: one with another
    # key was written by another source (or a release that changed what Spark checkpoints).
    raw = json.loads(fixture_bytes("source-offset-format1"))
    raw["added_by_a_newer_release"] = 1
    with pytest.raises(MalformedOffset, match="not a gtkafka offset"):
        SourceOffset.from_json(raw)

"""The protocol's records (state.records): round trips, today's stored bytes, old records
without a ``format`` field, and clear errors for malformed input."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from state.errors import MalformedOffset, MalformedRecord, SnapshotCorrupted
from state.layout import PipelineLayout
from state.protocol.barrier_state import HeldState, load_barrier_state, read_barrier_state
from state.records.barrier import BarrierState, Owner, RunMarker
from state.records.batch import BatchRecord
from state.records.codec import Fields, decode, dumps
from state.records.driver import DriverOwner, DriverRecord
from state.records.epoch import EpochRecord
from state.records.gt import GT_FIELDS, GT_TYPE_TEXT, GlobalTime, arrow_array, arrow_type
from state.records.inflight_bundle import InflightBundle, StagedPart
from state.records.manifest import Manifest, ManifestEntry
from state.records.resume_point import ResumePoint, SnapshotRef
from state.records.source_offset import SourceOffset
from state.stores import open_store

TOPIC_ID = "01a212fd-3be2-76d0-825d-fa41f38b6803"  # as Tansu gives them
START = SourceOffset(7, {("orders", 0): 1200, ("orders", 1): 1187})
END = SourceOffset(8, {("orders", 0): 1300, ("orders", 1): 1290})
PART = StagedPart(
    "p1/staging/q/000000000003/p00000-t1-rrun.parquet",
    600,
    18000,
    GlobalTime(7, "t", 0, 5),
    GlobalTime(7, "t", 0, 604),
)
PART2 = StagedPart(
    "p1/staging/q/000000000003/p00001-t2-rrun.parquet",
    400,
    12000,
    GlobalTime(7, "t", 1, 0),
    GlobalTime(7, "t", 1, 399),
)
BUNDLE = InflightBundle(7, "q", 3, "run", (PART, PART2), has_gt=True, ordered=True)
DEAD = StagedPart("p1/staging/q/000000000003/dl-p00000-t1-rrun.parquet", 2, 900)
WITH_DEAD_LETTERS = InflightBundle(
    7, "q", 3, "run", (PART,), has_gt=True, ordered=True, dead_letters=(DEAD,)
)
OWNER = Owner("run", "q", 4, 1760000000.5, 3)
REF = SnapshotRef(12, "p1/snapshots/000000000012/manifest.json", "ab" * 32, 41, 41)
POINT = ResumePoint(0, 3, 41, 41, "q", START.to_json(), 1760000000.0, (REF,))
MANIFEST = Manifest(
    "p1",
    12,
    0,
    3,
    41,
    41,
    END.to_json(),
    "q",
    1760000000.0,
    (ManifestEntry("commits/41", 29, "cd" * 32), ManifestEntry("metadata", 45, "ef" * 32)),
    uploaded_files=1,
    uploaded_bytes=29,
    copy_seconds=0.4123,
)

# Every record, as ``(value, from_json)``.
RECORDS: list[tuple[Any, Callable[[object], Any]]] = [
    (GlobalTime(7, "t", 1, 99), GlobalTime.from_json),
    (START, SourceOffset.from_json),
    (EpochRecord(7, START, END), EpochRecord.from_json),
    (EpochRecord(7, START, END, {"orders": TOPIC_ID}), EpochRecord.from_json),
    (BatchRecord("q", 3, 7), BatchRecord.from_json),
    (BUNDLE, InflightBundle.from_json),
    (InflightBundle(9, "q", 4, None, (), has_gt=False, ordered=True), InflightBundle.from_json),
    (WITH_DEAD_LETTERS, InflightBundle.from_json),
    (BarrierState(), BarrierState.from_json),
    (BarrierState(6, BUNDLE, OWNER), BarrierState.from_json),
    (OWNER, Owner.from_json),
    (RunMarker("run", "q", 1760000000.0), RunMarker.from_json),
    (REF, SnapshotRef.from_json),
    (POINT, ResumePoint.from_json),
    (ResumePoint.empty(generation=2, token=5, created_at=3.0), ResumePoint.from_json),
    (MANIFEST, Manifest.from_json),
    (DriverRecord(3, DriverOwner("host", 42, "host:42:ab", 1.5)), DriverRecord.from_json),
]


@pytest.mark.parametrize(("record", "from_json"), RECORDS, ids=lambda r: type(r).__name__)
def test_every_record_round_trips_through_canonical_json(
    record: Any, from_json: Callable[[object], Any]
) -> None:
    data = dumps(record.to_json())
    again = decode(data, from_json, "test")
    if isinstance(record, Manifest):  # copy_seconds is stored rounded to milliseconds
        assert again.copy_seconds == 0.412
        record = Manifest(**{**record.__dict__, "copy_seconds": 0.412})
    assert again == record
    assert dumps(again.to_json()) == data


# --- the bytes of today's records -------------------------------------------------------


def test_source_offset_json_has_sorted_keys() -> None:
    off = SourceOffset(3, {("b", 10): 5, ("b", 2): 7, ("a", 0): 1})
    doc = off.to_json()
    assert list(doc) == ["epoch", "offsets"]
    assert list(doc["offsets"]) == ["a", "b"]
    assert list(doc["offsets"]["b"]) == ["10", "2"]  # text order, as json sort_keys
    text = json.dumps(doc)
    assert text == json.dumps(doc, sort_keys=True)
    again = SourceOffset.from_json(json.loads(text))
    assert again.same_as(off) and json.dumps(again.to_json()) == text


def test_stored_bytes_are_todays_plus_the_format_field() -> None:
    assert dumps(BatchRecord("q", 3, 7).to_json()) == b'{"batch_id":3,"epoch":7,"query_id":"q"}'
    assert dumps(RunMarker("r", "q", 1.5).to_json()) == b'{"query_id":"q","run_id":"r","since":1.5}'
    assert dumps(EpochRecord(0, SourceOffset(0, {}), SourceOffset(1, {("t", 0): 2})).to_json()) == (
        b'{"end":{"epoch":1,"offsets":{"t":{"0":2}}},"epoch":0,"format":1,'
        b'"start":{"epoch":0,"offsets":{}}}'
    )
    # with the topic ids of the end (a broker that reports them): one more field, sorted
    with_ids = EpochRecord(
        0, SourceOffset(0, {}), SourceOffset(1, {("t", 0): 2}), {"t": TOPIC_ID, "a": "x"}
    )
    assert dumps(with_ids.to_json()) == (
        b'{"end":{"epoch":1,"offsets":{"t":{"0":2}}},"epoch":0,"format":1,'
        b'"start":{"epoch":0,"offsets":{}},'
        b'"topic_ids":{"a":"x","t":"01a212fd-3be2-76d0-825d-fa41f38b6803"}}'
    )
    assert EpochRecord.from_json(json.loads(dumps(with_ids.to_json()))) == with_ids
    assert dumps(BarrierState(-1, None, Owner("r", "q", 1, 2.0)).to_json()) == (
        b'{"format":1,"gt_last":-1,"inflight":null,"owner":{"generation":1,"query_id":"q",'
        b'"run_id":"r","since":2.0,"token":null}}'
    )
    assert dumps(DriverRecord(2, DriverOwner("h", 7, "i", 1.0)).to_json()) == (
        b'{"owner":{"host":"h","id":"i","pid":7,"since":1.0},"token":2}'
    )
    assert dumps(GlobalTime(7, "t", 1, 99).to_json()) == (
        b'{"epoch":7,"offset":99,"partition":1,"topic":"t"}'
    )


def test_in_flight_record_keeps_todays_fields() -> None:
    raw = BUNDLE.to_json()
    assert raw == {
        "bundle_id": 7,
        "epoch": 7,
        "query_id": "q",
        "batch_id": 3,
        "run_id": "run",
        "parts": [PART.location, PART2.location],
        "part_info": [PART.info_json(), PART2.info_json()],
        "rows": 1000,
        "has_gt": True,
        "ordered": True,
        "max_gt": {"epoch": 7, "topic": "t", "partition": 1, "offset": 399},
    }
    assert raw["part_info"][0] == {
        "rows": 600,
        "size": 18000,
        "min_gt": {"epoch": 7, "topic": "t", "partition": 0, "offset": 5},
        "max_gt": {"epoch": 7, "topic": "t", "partition": 0, "offset": 604},
    }


def test_in_flight_record_with_dead_letters_adds_one_field_and_without_keeps_its_bytes() -> None:
    # golden bytes: the record of a bundle whose tasks staged refused rows
    assert dumps(WITH_DEAD_LETTERS.to_json()) == (
        b'{"batch_id":3,"bundle_id":7,"dead_letters":{"part_info":[{"max_gt":null,'
        b'"min_gt":null,"rows":2,"size":900}],'
        b'"parts":["p1/staging/q/000000000003/dl-p00000-t1-rrun.parquet"],"rows":2},'
        b'"epoch":7,"has_gt":true,"max_gt":{"epoch":7,"offset":604,"partition":0,"topic":"t"},'
        b'"ordered":true,"part_info":[{"max_gt":{"epoch":7,"offset":604,"partition":0,'
        b'"topic":"t"},"min_gt":{"epoch":7,"offset":5,"partition":0,"topic":"t"},"rows":600,'
        b'"size":18000}],"parts":["p1/staging/q/000000000003/p00000-t1-rrun.parquet"],'
        b'"query_id":"q","rows":600,"run_id":"run"}'
    )
    # and without dead letters, the bytes records had before the field existed
    without = InflightBundle(7, "q", 3, "run", (PART,), has_gt=True, ordered=True)
    assert dumps(without.to_json()) == (
        b'{"batch_id":3,"bundle_id":7,"epoch":7,"has_gt":true,"max_gt":{"epoch":7,'
        b'"offset":604,"partition":0,"topic":"t"},"ordered":true,"part_info":[{"max_gt":'
        b'{"epoch":7,"offset":604,"partition":0,"topic":"t"},"min_gt":{"epoch":7,"offset":5,'
        b'"partition":0,"topic":"t"},"rows":600,"size":18000}],'
        b'"parts":["p1/staging/q/000000000003/p00000-t1-rrun.parquet"],"query_id":"q",'
        b'"rows":600,"run_id":"run"}'
    )
    assert WITH_DEAD_LETTERS.staged_locations == (PART.location, DEAD.location)
    assert WITH_DEAD_LETTERS.dead_letter_rows == 2 and without.dead_letter_rows == 0
    state = BarrierState(6, WITH_DEAD_LETTERS, OWNER)
    assert decode(dumps(state.to_json()), BarrierState.from_json, "s") == state


def test_manifest_bytes_are_stable() -> None:
    data = MANIFEST.to_bytes()
    assert data.startswith(b'{"batch_id":41,"bytes":74,"copy_seconds":0.412,"created_at"')
    assert b'"format":1' in data and Manifest.from_bytes(data, where="m").to_bytes() == data


# --- records written before the format field --------------------------------------------


def test_barrier_state_without_format_decodes() -> None:
    old = (
        b'{"gt_last":6,"inflight":{"batch_id":3,"bundle_id":7,"epoch":7,"has_gt":true,'
        b'"max_gt":{"epoch":7,"offset":9,"partition":0,"topic":"t"},"ordered":true,'
        b'"part_info":[{"max_gt":{"epoch":7,"offset":9,"partition":0,"topic":"t"},'
        b'"min_gt":{"epoch":7,"offset":0,"partition":0,"topic":"t"},"rows":10,"size":900}],'
        b'"parts":["p1/staging/q/000000000003/p00000-t1-rrun.parquet"],"query_id":"q",'
        b'"rows":10,"run_id":"run"},"owner":{"generation":4,"query_id":"q","run_id":"run",'
        b'"since":1760000000.0,"token":null}}'
    )
    state = decode(old, BarrierState.from_json, "old")
    assert state.gt_last == 6 and state.owner == Owner("run", "q", 4, 1760000000.0)
    assert state.inflight is not None and state.inflight.bundle_id == 7
    assert state.inflight.parts[0].min_gt == GlobalTime(7, "t", 0, 0)
    assert state.inflight.max_gt == GlobalTime(7, "t", 0, 9) and state.inflight.rows == 10
    # written again, only the format field is added
    rewritten = json.loads(dumps(state.to_json()))
    assert rewritten.pop("format") == 1 and rewritten == json.loads(old)


def test_old_minimal_records_decode_with_todays_defaults() -> None:
    assert BarrierState.from_json({"gt_last": 2, "inflight": None}) == BarrierState(2)
    assert BarrierState.from_json({}) == BarrierState()
    assert Owner.from_json({"run_id": "r"}) == Owner("r", "", 0, 0.0, None)
    inflight = InflightBundle.from_json(
        {"epoch": 5, "query_id": "q", "batch_id": 1, "parts": ["a", "b"]}
    )
    assert [(p.rows, p.size, p.min_gt) for p in inflight.parts] == [(0, 0, None), (0, 0, None)]
    assert inflight.has_gt is False and inflight.ordered is True and inflight.run_id is None
    assert EpochRecord.from_json(
        {"epoch": 0, "start": START.to_json(), "end": END.to_json()}
    ) == EpochRecord(0, START, END)
    point = ResumePoint.from_json(
        {"generation": 1, "token": 2, "epoch": -1, "manifest": None, "retained": []}
    )
    assert point == ResumePoint.empty(generation=1, token=2, created_at=0.0)
    assert DriverRecord.from_json({"token": 4}) == DriverRecord(4)


def test_gt_type_is_defined_once() -> None:
    from datasource.schema import GT_TYPE, arrow_schema, source_schema

    assert tuple(f.name for f in GT_TYPE.fields) == GT_FIELDS
    assert arrow_schema(source_schema(False)).field("gt").type == arrow_type()
    assert GT_TYPE_TEXT == "struct<epoch: bigint, topic: string, partition: int, offset: bigint>"
    import pyarrow as pa

    column = arrow_array(
        pa.array([1, 1], pa.int64()),
        pa.array(["t", "t"]),
        pa.array([0, 0], pa.int32()),
        pa.array([5, 6], pa.int64()),
    )
    assert column.type == arrow_type()
    assert [GlobalTime.from_tuple(tuple(r.values())) for r in column.to_pylist()] == [
        GlobalTime(1, "t", 0, 5),
        GlobalTime(1, "t", 0, 6),
    ]


def test_global_time_orders_as_the_gt_column() -> None:
    times = [
        GlobalTime(2, "a", 0, 0),
        GlobalTime(1, "b", 0, 9),
        GlobalTime(1, "a", 1, 0),
        GlobalTime(1, "a", 0, 3),
    ]
    assert sorted(times) == sorted(times, key=GlobalTime.to_tuple)
    assert GlobalTime.from_tuple(times[0].to_tuple()) == times[0]


# --- malformed input ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("from_json", "raw", "message"),
    [
        (BarrierState.from_json, [1], r"barrier state: expected a JSON object, found \[1\]"),
        (BarrierState.from_json, {"gt_last": "6"}, r"field 'gt_last' = \"6\" is invalid"),
        (BarrierState.from_json, {"gt_last": -2}, r"'gt_last' = -2 .*an integer >= -1"),
        (BarrierState.from_json, {"format": 2}, r"format 2 is not .*written by a newer gtbarrier"),
        (BarrierState.from_json, {"owner": {"generation": 1}}, r"owner: field 'run_id' is miss"),
        (
            InflightBundle.from_json,
            {"epoch": 1, "query_id": "q", "batch_id": 0},
            r"in-flight bundle: field 'parts' is missing",
        ),
        (
            InflightBundle.from_json,
            {"epoch": 1, "bundle_id": 2, "query_id": "q", "batch_id": 0, "parts": []},
            r"'bundle_id' = 2 is invalid: expected the bundle's epoch 1",
        ),
        (
            InflightBundle.from_json,
            {
                "epoch": 1,
                "query_id": "q",
                "batch_id": 0,
                "parts": ["a"],
                "part_info": [{"rows": 1, "size": 1}, {}],
            },
            r"'part_info' .* a list of 1 part",
        ),
        (
            InflightBundle.from_json,
            {
                "epoch": 1,
                "query_id": "q",
                "batch_id": 0,
                "parts": ["a"],
                "part_info": [{"rows": 1, "size": 1, "min_gt": {"epoch": 1}}],
            },
            r"global time: field 'topic' is missing",
        ),
        (
            InflightBundle.from_json,
            {
                "epoch": 1,
                "query_id": "q",
                "batch_id": 0,
                "parts": [],
                "dead_letters": {"parts": ["d"], "part_info": []},
            },
            r"in-flight bundle: dead_letters: field 'part_info' .* a list of 1 part",
        ),
        (
            BatchRecord.from_json,
            {"batch_id": 1, "epoch": True, "query_id": "q"},
            r"batch record: field 'epoch' = true is invalid: expected an integer >= 0",
        ),
        (
            EpochRecord.from_json,
            {"epoch": 0, "start": START.to_json()},
            r"epoch record: field 'end' is missing",
        ),
        (
            EpochRecord.from_json,
            {"epoch": 0, "start": START.to_json(), "end": END.to_json(), "topic_ids": {"t": 7}},
            r"epoch record: field 'topic_ids' = \{\"t\": 7\} is invalid: expected an object "
            r"of topic names to topic ids",
        ),
        (
            ResumePoint.from_json,
            {"retained": [{"snapshot_id": 1}]},
            r"retained snapshot: field 'manifest' is missing",
        ),
        (ResumePoint.from_json, {"created_at": "now"}, r"'created_at' = \"now\" .*a number"),
        (Manifest.from_json, {"format": 1}, r"snapshot manifest: field 'files' is missing"),
        (DriverRecord.from_json, {"token": 1.5}, r"driver record: field 'token' = 1.5"),
    ],
)
def test_malformed_records_are_refused_naming_the_field(
    from_json: Callable[[object], Any], raw: object, message: str
) -> None:
    with pytest.raises(MalformedRecord, match=message):
        from_json(raw)


@pytest.mark.parametrize(
    "bad",
    [
        {"orders": {"0": 1}},  # Spark's own Kafka offsets
        {"epoch": -1, "offsets": {}},
        {"epoch": "1", "offsets": {}},
        {"epoch": 1, "offsets": {"t": {"x": 1}}},
        {"epoch": 1, "offsets": {"t": {"0": -1}}},
        {"epoch": 1, "offsets": {"t": [1]}},
        [1],
    ],
)
def test_malformed_offsets(bad: object) -> None:
    with pytest.raises(MalformedOffset):
        SourceOffset.from_json(bad)


def test_malformed_offset_inside_an_epoch_record_is_a_malformed_offset() -> None:
    with pytest.raises(MalformedOffset):
        EpochRecord.from_json({"epoch": 0, "start": {"epoch": 0}, "end": END.to_json()})


def test_decode_names_where_the_record_was_read() -> None:
    with pytest.raises(MalformedRecord, match=r"s3://b/p1/barrier/state.json: not a JSON"):
        decode(b"{nope", BarrierState.from_json, "s3://b/p1/barrier/state.json")
    with pytest.raises(MalformedRecord) as info:
        decode(b'{"gt_last": null}', BarrierState.from_json, "s3://b/k")
    assert "while reading s3://b/k" in info.value.__notes__
    with pytest.raises(SnapshotCorrupted, match=r"snapshot manifest m is malformed: .*format"):
        Manifest.from_bytes(b'{"format": 9}', where="m")
    with pytest.raises(SnapshotCorrupted, match="snapshot manifest m is malformed"):
        Manifest.from_bytes(b"[", where="m")


def test_fields_accessors() -> None:
    f = Fields({"a": 1, "b": None, "c": 2.5, "d": "x", "e": False, "l": [1]}, "rec")
    assert f.integer("a") == 1 and f.integer("zz", 7) == 7
    assert f.optional_integer("b") is None and f.optional_string("b") is None
    assert f.number("a") == 1.0 and f.number("c") == 2.5
    assert f.string("d") == "x" and f.boolean("e") is False and f.array("l") == [1]
    with pytest.raises(MalformedRecord, match="rec: field 'b' = null is invalid"):
        f.integer("b")
    with pytest.raises(MalformedRecord, match=r"field 'c' = 2\.5 is invalid: expected an integer"):
        f.integer("c")


# --- reading the barrier state from a store -------------------------------------------------


def test_read_barrier_state_from_a_store() -> None:
    store = open_store(f"memory://records-{uuid.uuid4().hex}")
    layout = PipelineLayout("p1")
    assert read_barrier_state(store, layout) == BarrierState()
    assert load_barrier_state(store, layout) == HeldState(BarrierState(), None)
    state = BarrierState(6, BUNDLE, OWNER)
    version = store.create_json(layout.barrier_state, state.to_json())
    assert load_barrier_state(store, layout) == HeldState(state, version)
    store.put(layout.barrier_state, b'{"gt_last": "x"}')
    with pytest.raises(MalformedRecord) as info:
        read_barrier_state(store, layout)
    assert any("p1/barrier/state.json" in note for note in info.value.__notes__)


def _packed_manifest(**changes: Any) -> dict[str, Any]:
    raw = json.loads((Path(__file__).parent / "golden/records/manifest-format2.json").read_bytes())
    raw.update(changes)
    return dict(raw)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"packs": []}, r"field 'packs' = \[\] is invalid: expected a non-empty JSON array"),
        ({"packs": [{"sha256": "5a" * 32, "size": 431}]}, r"pack 7c7c7c7c7c7c\.\.\. is not among"),
        (
            {"packs": [{"sha256": "5a" * 32, "size": 100}, {"sha256": "7c" * 32, "size": 4096}]},
            r"offsets/44: bytes 29\.\.431 lie beyond the 100 bytes of pack 5a5a",
        ),
        (
            {"packs": [{"sha256": "5A" * 32, "size": 431}]},
            r"manifest pack entry: field 'sha256' = .* expected 64 lowercase hex digits",
        ),
        (
            {"packs": [*_packed_manifest()["packs"], {"sha256": "99" * 32, "size": 1}]},
            r"names only the packs that hold its files",
        ),
    ],
)
def test_a_packed_manifest_whose_files_lie_outside_its_packs_is_refused(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(MalformedRecord, match=message):
        Manifest.from_json(_packed_manifest(**change))


def test_a_packed_manifest_entry_names_its_pack_and_offset() -> None:
    raw = _packed_manifest()
    del raw["files"][0]["offset"]
    with pytest.raises(MalformedRecord, match=r"manifest file entry: field 'offset' is missing"):
        Manifest.from_json(raw)
    raw = _packed_manifest()
    raw["files"][0]["pack"] = "nope"
    with pytest.raises(MalformedRecord, match=r"field 'pack' = \"nope\" is invalid"):
        Manifest.from_json(raw)
    # A format-1 manifest's entries never name a pack: the fields are not read.
    raw = _packed_manifest(format=1)
    del raw["packs"]
    assert all(f.pack is None for f in Manifest.from_json(raw).files)

"""An upgrade that keeps state: the previous release runs a pipeline, this one resumes it.

The previous release is the commit :data:`PREVIOUS_RELEASE`, taken out of this repository's
history into a temporary directory (``git archive``) and run there as its own driver
program (``upgrade_driver_program.py`` with ``PYTHONPATH`` and the working directory set
to that tree): gtkafka -> barrier (file consumer) over real Tansu, with the state store on
SeaweedFS S3 and the coordinator on ZooKeeper, for a few batches and one snapshot; then it
stops. This release then

1. decodes every record the previous release stored (each key of the pipeline in the
   store, and the resume point in ZooKeeper) with its own codecs;
2. resumes the same checkpoint, state and ZooKeeper nodes (``recover()`` keeps the
   checkpoint) and reads the records produced since;
3. loses the checkpoint and is restored from the previous release's snapshot (its
   manifest, resume point and checkpoint files), replaying the epochs after it.

The consumer must hold every input record exactly once. The previous release's run
markers are kept (they fence its drivers), and this release's runs leave only their
pruned claims. docs/operations.md, "Upgrades",
describes the procedure this runs.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from harness.coordinator_program import gt_last, produce
from harness.driver import DriverRunner
from harness.process import REPO_ROOT
from integration_tests.coordinator_support import events
from state.layout import PipelineLayout
from state.protocol.barrier_state import CLAIMS_KEPT
from state.records.barrier import BarrierState, RunMarker
from state.records.batch import BatchRecord
from state.records.codec import decode
from state.records.driver import DriverRecord
from state.records.epoch import EpochRecord
from state.records.manifest import Manifest
from state.records.resume_point import ResumePoint
from state.records.source_offset import SourceOffset
from state.stores import StateStore, StoreConfig, open_store

pytestmark = pytest.mark.slow

# The release this one upgrades from: the commit the state-compatibility work started at.
PREVIOUS_RELEASE = "aefbe6be88a2b345f0c3559d44dfa706827fa3a3"

PROGRAM = Path(__file__).with_name("upgrade_driver_program.py")
PIPELINE = "upgrade"


def previous_release_tree(dest: Path) -> Path:
    """The previous release's files in ``dest``; fails (never skips) if the commit is not
    in this repository's history."""
    found = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.fail(
            f"the previous release {PREVIOUS_RELEASE} is not in the repository at {REPO_ROOT} "
            f"({found.stderr.strip() or 'git cat-file failed'}): the upgrade test needs the "
            "full history (a clone, not a shallow one or a source archive)"
        )
    archive = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", "--format=tar", PREVIOUS_RELEASE],
        capture_output=True,
        check=True,
    )
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest


# Which codec reads each key of a pipeline's state (the parts of a key after the pipeline).
DECODERS: list[tuple[Callable[[list[str]], bool], Callable[[object], Any]]] = [
    (lambda k: k == ["source", "start.json"], SourceOffset.from_json),
    (lambda k: k[0] == "epochs" and len(k) == 2, EpochRecord.from_json),
    (lambda k: k[0] == "batches" and len(k) == 3, BatchRecord.from_json),
    (lambda k: k == ["barrier", "state.json"], BarrierState.from_json),
    (lambda k: k[:2] == ["barrier", "runs"] and len(k) == 3, RunMarker.from_json),
    (lambda k: k[:2] == ["barrier", "claims"] and len(k) == 3, RunMarker.from_json),
    (lambda k: k == ["coordinator", "driver.json"], DriverRecord.from_json),
    (lambda k: k == ["resume.json"], ResumePoint.from_json),
    (lambda k: k[0] == "snapshots" and k[-1] == "manifest.json", Manifest.from_json),
]
NOT_RECORDS = ("staging", "snapshot-blobs")  # Parquet parts, checkpoint files


def decode_every_record(store: StateStore, pipeline: str, *, unchanged: bool) -> Counter[str]:
    """Decode every record of ``pipeline`` in ``store``; how many of each kind.

    ``unchanged``: each record, decoded and encoded again by this release, must be what was
    stored (true while this release writes the formats the previous one wrote: a field
    misread or dropped shows). A release that changes a format on purpose compares the
    rewritten record with its golden fixture (tests/test_record_formats.py) instead.
    """
    kinds: Counter[str] = Counter()
    for key in store.list(f"{pipeline}/"):
        parts = key.split("/")[1:]
        if parts[0] in NOT_RECORDS:
            continue
        decoders = [d for match, d in DECODERS if match(parts)]
        assert decoders, f"{key}: a stored key the upgrade test does not know how to decode"
        data = store.get(key).data
        record = decode(data, decoders[0], key)
        if unchanged:
            assert record.to_json() == json.loads(data), f"{key}: not read as it was written"
        kinds[type(record).__name__] += 1
    return kinds


def commits(metrics: Path) -> list[tuple[str, int]]:
    """``(action, epoch)`` of every commit of the barrier, from ``$GTBARRIER_METRICS``."""
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    return [(rec["action"], rec["epoch"]) for rec in map(json.loads, lines)]


def delivered_values(out: Path) -> list[int]:
    """Every record value the file consumer holds, bundle by bundle."""
    values: list[int] = []
    for path in sorted(out.glob("bundle-*.parquet")):
        values += [int(bytes(v)) for v in pq.read_table(path).column("value").to_pylist()]
    return values


def run_program(
    driver: DriverRunner, common: list[str], *extra: str, metrics: Path, tree: Path | None = None
) -> list[dict[str, Any]]:
    """Run the driver program to its end, on ``tree`` (default: this release), its commits
    appended to ``metrics``; its events."""
    env = {"GTBARRIER_METRICS": str(metrics)}
    if tree is not None:
        env |= {"PYTHONPATH": str(tree), "PYSPARK_PYTHON": sys.executable}
    # A copy outside both trees: the directory of the script is first on sys.path.
    program = driver.workdir / "programs" / PROGRAM.name
    program.parent.mkdir(exist_ok=True)
    shutil.copyfile(PROGRAM, program)
    proc = driver.run(program, *common, *extra, env=env, cwd=tree)
    code = proc.wait(300)
    out = proc.output()
    assert code == 0, out[-6000:]
    return events(out)


@pytest.mark.timeout(600)
def test_the_next_release_resumes_the_previous_releases_state(
    kafka: Any, s3: Any, zk: Any, driver: DriverRunner, tmp_path: Path
) -> None:
    old_tree = previous_release_tree(tmp_path / "previous-release")
    topic = kafka.create_topic(partitions=2)
    state_uri = s3.uri("gtb")
    store = open_store(StoreConfig(state_uri, s3.config().s3))
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    common = [
        "--bootstrap",
        kafka.bootstrap,
        "--topic",
        topic,
        "--pipeline",
        PIPELINE,
        "--state-uri",
        state_uri,
        "--zk",
        zk.hosts,
        "--checkpoint",
        str(checkpoint),
        "--out",
        str(out),
        "--workdir",
        str(tmp_path / "spark"),
        "--max-offsets",
        "200",
    ]

    # The previous release: three batches of 200 records and a snapshot of the last.
    produce(kafka, topic, 0, 600)
    metrics = tmp_path / "commits.jsonl"
    old = {
        e["event"]: e
        for e in run_program(driver, common, "--snapshot", metrics=metrics, tree=old_tree)
    }
    assert Path(old["recovered"]["gtbarrier"]).is_relative_to(old_tree), old["recovered"]
    old_point = old["snapshot"]["resume_point"]
    assert old_point is not None and old_point["snapshot_id"] is not None
    assert sorted(delivered_values(out)) == list(range(600))
    old_delivered = [e for action, e in commits(metrics) if action == "delivered"]
    assert old_delivered == [0, 1, 2], commits(metrics)

    # 1. Every record it stored decodes with this release's codecs, to what it wrote.
    kinds = decode_every_record(store, PIPELINE, unchanged=True)
    for kind in ("SourceOffset", "EpochRecord", "BatchRecord", "BarrierState", "RunMarker"):
        assert kinds[kind] >= 1, (kind, kinds)
    assert kinds["DriverRecord"] == 1 and kinds["Manifest"] == 1, kinds
    markers = store.list(f"{PIPELINE}/barrier/runs/")
    assert markers, "the previous release wrote no run marker"
    assert gt_last(store, PIPELINE) == old_delivered[-1] == old_point["epoch"]
    zk_point = decode(
        zk.client().get(PipelineLayout(PIPELINE).zookeeper_resume)[0],
        ResumePoint.from_json,
        "the resume point in ZooKeeper",
    )
    assert zk_point.to_json() == old_point  # as the previous release itself showed it

    # 2. This release on the same checkpoint, state and ZooKeeper nodes.
    produce(kafka, topic, 600, 1000)
    new = {e["event"]: e for e in run_program(driver, common, metrics=metrics)}
    assert Path(new["recovered"]["gtbarrier"]).is_relative_to(REPO_ROOT), new["recovered"]
    assert new["recovered"]["action"] == "keep", new["recovered"]
    assert new["recovered"]["token"] > old["recovered"]["token"]
    assert new["finished"]["batches"][0] == 3, new  # Spark went on after the last batch
    assert gt_last(store, PIPELINE) > old_delivered[-1]
    assert sorted(delivered_values(out)) == list(range(1000))

    # 3. The checkpoint lost: restored from the previous release's snapshot, the epochs
    # after it replayed (and dropped, as delivered), then the records produced since.
    shutil.rmtree(checkpoint)
    produce(kafka, topic, 1000, 1200)
    delivered_before = {e for action, e in commits(metrics) if action == "delivered"}
    restored = {e["event"]: e for e in run_program(driver, common, metrics=metrics)}
    assert restored["recovered"]["action"] == "materialise", restored["recovered"]
    assert restored["recovered"]["snapshot"] == old_point["snapshot_id"]
    replayed = [e for action, e in commits(metrics) if action == "dropped"]
    assert sorted(replayed) == sorted(delivered_before - set(old_delivered)), commits(metrics)

    # Each epoch delivered once, by one release or the other; each record held once.
    delivered = Counter(e for action, e in commits(metrics) if action == "delivered")
    assert sorted(delivered) == list(range(len(delivered))), commits(metrics)
    assert set(delivered.values()) == {1}, commits(metrics)
    values = delivered_values(out)
    twice = sorted(v for v, n in Counter(values).items() if n > 1)
    assert not twice, f"delivered more than once: {twice[:20]}"
    assert sorted(values) == list(range(1200)), "records lost"
    decode_every_record(store, PIPELINE, unchanged=False)  # the state both releases wrote
    # The previous release's run markers are kept (each fences a driver of that release);
    # this release's runs claimed over the generation they started at, their claims pruned.
    assert store.list(f"{PIPELINE}/barrier/runs/") == markers
    assert 1 <= len(store.list(f"{PIPELINE}/barrier/claims/")) <= CLAIMS_KEPT + 1

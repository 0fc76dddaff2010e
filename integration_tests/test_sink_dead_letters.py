"""Rows a consumer's target refuses, against real servers: the poison bundle, the way past
it, and dead letters exactly once under SIGKILL at every protocol step.

Drivers run ``integration_tests/dead_letter_driver_program.py`` (gtkafka -> key, value,
note, gt -> barrier) in their own process groups (the ``driver`` fixture). A row without a
``gt`` is refused by every consumer; with consumer=postgres a NUL character in text is
refused too. At the end, the consumer's rows and the dead letters together hold every
input record exactly once.
"""

from __future__ import annotations

import base64
import json
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gtbarrier.cli import main as gtbarrier
from harness.process import repo_env
from harness.receiver import Receiver
from integration_tests.metrics_support import exporter, scrape
from integration_tests.metrics_support import value as sample
from integration_tests.sink_helpers import FileChainState, read_bundles
from sink.consumers.http import NOT_UTF8
from sink.dead_letters.dead_letter_format import (
    BUNDLE_COLUMN,
    COLUMN_COLUMN,
    REASON_COLUMN,
    dead_letter_name,
)
from sink.dead_letters.dead_letter_topic import H_BUNDLE, H_COLUMN, H_OFFSET, H_PIPELINE
from sink.faults import InjectedFault
from state.layout import PipelineLayout
from state.stores import open_store
from tests.sink_helpers import Pipeline, sink_options
from tests.test_sink_dead_letters import crash_at, note_batch

PROGRAM = Path(__file__).with_name("dead_letter_driver_program.py")
DRIVER_TIMEOUT = 240.0
PARTITIONS = 2
PER_EPOCH = 1000  # maxOffsetsPerTrigger: epoch e reads the numbers [1000 e, 1000 e + 1000)


def produce(kafka: Any, topic: str, n: int) -> None:
    """Records ``value = "<i>"`` for i < n, number i in partition i % 2."""
    kafka.produce(
        topic,
        ((b"k%d" % i, b"%d" % i, None, i % PARTITIONS) for i in range(n)),
        batch_size=2000,
    )


class Chain(FileChainState):
    """One pipeline into a file consumer (or another), run by successive drivers."""

    def __init__(
        self,
        driver: Any,
        kafka: Any,
        tmp_path: Path,
        topic: str,
        *,
        per_epoch: int = PER_EPOCH,
        null_gt: str = "",
        nul: str = "",
        partition: str = "",
        bad_utf8: str = "",
    ) -> None:
        self.driver, self.kafka, self.topic, self.tmp_path = driver, kafka, topic, tmp_path
        self.per_epoch = per_epoch
        self.pipeline = "dl"
        self.state_uri = f"file://{tmp_path}/state"
        self.out = tmp_path / "out"
        self.dead = tmp_path / "dead"
        self.poison = {
            "null-gt": null_gt,
            "nul": nul,
            "partition": partition,
            "bad-utf8": bad_utf8,
        }
        self.store = open_store(self.state_uri)
        self.layout = PipelineLayout(self.pipeline)

    def consumer_options(self) -> dict[str, str]:
        return {"consumer": "file", "consumer.path": str(self.out)}

    def tolerant(self) -> dict[str, str]:
        return {"errors.tolerance": "all", "errors.deadLetter.path": f"file://{self.dead}"}

    def run(
        self,
        *,
        fault: str | None = None,
        options: dict[str, str] | None = None,
        checkpoint: str = "cp",
    ) -> Any:
        """A driver on the checkpoint ``checkpoint`` (a directory under the test's tmp_path)."""
        args = [
            "--bootstrap", self.kafka.bootstrap, "--topic", self.topic,
            "--pipeline", self.pipeline, "--state", self.state_uri,
            "--checkpoint", str(self.tmp_path / checkpoint), "--max-offsets", str(self.per_epoch),
        ]  # fmt: skip
        for name, numbers in self.poison.items():
            if numbers:
                args += [f"--{name}", numbers]
        for key, value in {**self.consumer_options(), **(options or {})}.items():
            args += ["--sink-option", f"{key}={value}"]
        return self.driver.run(PROGRAM, *args, env={"GTBARRIER_FAULT": fault} if fault else None)

    def dead_letter_files(self) -> list[int]:
        return sorted(int(p.name[7:19]) for p in self.dead.glob("bundle-*.parquet"))

    def delivered_numbers(self) -> list[int]:
        if not self.bundle_files():
            return []
        return [int(v) for v in read_bundles(self.out).column("value").to_pylist()]

    def dead_letters(self) -> pa.Table:
        return read_bundles(self.dead)


def failed(proc: Any) -> str:
    code = proc.wait(DRIVER_TIMEOUT)
    out: str = proc.output()
    assert code == 1, f"driver exited {code}, expected a failed query:\n{out[-3000:]}"
    return out


def finished(proc: Any) -> str:
    code = proc.wait(DRIVER_TIMEOUT)
    out: str = proc.output()
    assert code == 0, out[-3000:]
    return out


def killed(proc: Any) -> None:
    code = proc.wait(DRIVER_TIMEOUT)
    assert code == -signal.SIGKILL, f"driver exited {code}, not killed:\n{proc.output()[-3000:]}"


def file_id(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    capsys.readouterr()
    code = gtbarrier([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_poison_bundle_stops_every_restart_before_any_of_it_is_delivered_until_all_takes_it(
    driver: Any, kafka: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n, poison = 4000, 2503  # epoch 2 holds the row without a gt
    topic = kafka.create_topic(partitions=PARTITIONS)
    produce(kafka, topic, n)
    c = Chain(driver, kafka, tmp_path, topic, null_gt=str(poison))

    # errors.tolerance=none (the default): the query stops before anything of bundle 2 is
    # delivered, and every restart on the same checkpoint does the same
    for _ in range(2):
        out = failed(c.run())
        assert "RowsRefused" in out and "bundle 2 (epoch 2, batch 2 of query" in out, out[-3000:]
        assert "was not stored" in out and "gt null, column 'gt': no gt (null)" in out
        assert "errors.tolerance=all" in out
        assert c.progress() == (1, None) and c.bundle_files() == [0, 1]
        assert sorted(c.delivered_numbers()) == list(range(2 * PER_EPOCH))
        assert [p for p in c.staged() if "/000000000002/" in str(p)] == []
        assert not c.dead.exists()

    # the way past it: the same checkpoint with errors.tolerance=all
    out = finished(c.run(options=c.tolerant()))
    assert c.progress() == (3, None) and c.bundle_files() == [0, 1, 2, 3]
    assert "1 row(s) refused, in dead letters file://" in out
    delivered = c.delivered_numbers()
    dead = c.dead_letters()
    refused = [int(v) for v in dead.column("value").to_pylist()]
    assert refused == [poison] and poison not in delivered
    assert sorted(delivered + refused) == list(range(n)), "lost or duplicated records"
    assert dead.column(BUNDLE_COLUMN).to_pylist() == [2]
    assert dead.column(COLUMN_COLUMN).to_pylist() == ["gt"]
    assert dead.column("gt").to_pylist() == [None] and dead.column("note").to_pylist() == [
        f"n{poison}"
    ]
    assert c.dead_letter_files() == [2] and c.staged() == []

    # the counts, as an operator sees them
    where = ["--pipeline", c.pipeline, "--state-uri", c.state_uri, "--dead-letters"]
    listed = cli_json(capsys, "deadletters", *where, f"file://{c.dead}")
    assert [(b["bundle_id"], b["rows"], b["acknowledged"]) for b in listed["bundles"]] == [
        (2, 1, True)
    ]
    one = cli_json(capsys, "deadletters", *where, f"file://{c.dead}", "--bundle", "2")
    assert one["items"][0]["value"] and one["items"][0][REASON_COLUMN].startswith("no gt")
    status = cli_json(capsys, "status", *where, f"file://{c.dead}")
    assert status["dead_letters"]["rows"] == 1 and status["barrier"]["gt_last"] == 3
    with exporter(
        [*where, f"file://{c.dead}"], env=repo_env(), output=tmp_path / "exporter.log"
    ) as run:
        _, samples = scrape(run.url)
    p = {"pipeline": c.pipeline}
    assert sample(samples, "gtbarrier_deadletter_rows_total", **p) == 1, run.text()
    assert sample(samples, "gtbarrier_gt_last", **p) == 3
    assert sample(samples, "gtbarrier_bundles_delivered_total", **p) == 4


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_sigkill_at_every_protocol_step_of_bundles_with_dead_letters_is_exactly_once(  # noqa: PLR0915 - one chain of drivers, step by step
    driver: Any, kafka: Any, tmp_path: Path
) -> None:
    """One pipeline into a file consumer with ``errors.tolerance=all``, run by 8 drivers:
    a write task that fails once, the driver SIGKILLed at every step of the barrier's
    protocol, the checkpoint deleted, the consumer raising until the query fails, then a
    run to the end. Every epoch but 5 holds one row without a gt, so bundles with dead
    letters and one without go through the kills; at the end every input row is in the
    consumer or in the dead letters exactly once, and every dead-letter file was written
    once (a replay or a redelivery finds it)."""
    epochs, clean = 8, 5  # epoch 5 holds no poison row
    n = epochs * PER_EPOCH
    with_dead_letters = [e for e in range(epochs) if e != clean]
    poison = [e * PER_EPOCH + 7 for e in with_dead_letters]  # one row without a gt
    topic = kafka.create_topic(partitions=PARTITIONS)
    produce(kafka, topic, n)
    c = Chain(driver, kafka, tmp_path, topic, null_gt=",".join(map(str, poison)))
    tolerant = c.tolerant()
    seen: dict[int, tuple[int, int]] = {}

    def dead_letter_file(bundle: int) -> Path:
        path = c.dead / dead_letter_name(bundle)
        assert path.exists(), f"no dead-letter file for bundle {bundle}"
        seen.setdefault(bundle, file_id(path))
        return path

    # 1. batch 0: a write task fails on its first attempt and is retried; then the driver
    #    dies before bundle 1 is recorded in flight: nothing of it written
    first = c.run(fault="write_fail:0,before_inflight:1", options=tolerant, checkpoint="cp1")
    killed(first)
    assert "injected fault write_fail:0" in first.output(), "no write task of batch 0 failed"
    assert c.progress() == (0, None) and c.dead_letter_files() == [0]
    assert c.bundle_files() == [0] and c.pointer() == 0
    assert not [p for p in c.staged() if "/000000000000/" in str(p)]  # failed attempt cleaned
    dead_letter_file(0)

    # 2. the checkpoint is lost: a new one replays epoch 0 (dropped, its dead letters not
    #    looked at), delivers 1, and dies right after bundle 2's dead letters were written,
    #    after its in-flight record (which fences them), before its delivery
    shutil.rmtree(tmp_path / "cp1")
    killed(c.run(fault="after_dead_letters:2", options=tolerant, checkpoint="cp2"))
    assert c.progress() == (1, 2) and c.dead_letter_files() == [0, 1, 2]
    assert c.bundle_files() == [0, 1] and c.pointer() == 1
    assert file_id(c.dead / dead_letter_name(0)) == seen[0], "the replay rewrote bundle 0's"
    for bundle in (1, 2):
        dead_letter_file(bundle)

    # 3. bundle 2 redelivered from its in-flight record (its dead letters found); killed
    #    after bundle 3 was recorded in flight (its dead letters written after the record)
    killed(c.run(fault="after_inflight:3", options=tolerant, checkpoint="cp2"))
    assert c.progress() == (2, 3) and c.dead_letter_files() == [0, 1, 2, 3]
    assert c.bundle_files() == [0, 1, 2] and c.pointer() == 2
    inflight = c.state().inflight
    assert inflight is not None and inflight.dead_letter_rows == 1
    assert all(Path(c.out, p.location).exists() for p in inflight.dead_letters)
    dead_letter_file(3)

    # 4. bundle 3 redelivered (the consumer never got it; its dead letters found, not
    #    written again); bundle 4 reaches the consumer, which dies before its pointer moves
    #    (before the ack)
    killed(c.run(fault="after_deliver:4", options=tolerant, checkpoint="cp2"))
    assert c.progress() == (3, 4) and c.bundle_files() == [0, 1, 2, 3, 4]
    assert c.pointer() == 3
    dead_letter_file(4)

    # 5. bundle 5, which has no dead letters: killed after the consumer acknowledged it,
    #    before GT_last moves
    killed(c.run(fault="after_ack:5", options=tolerant, checkpoint="cp2"))
    assert c.progress() == (4, 5) and c.pointer() == 5
    inflight = c.state().inflight
    assert inflight is not None and inflight.dead_letter_rows == 0
    assert inflight.dead_letters == ()
    assert c.dead_letter_files() == [0, 1, 2, 3, 4]

    # 6. bundle 5 is found at the consumer (not sent again); killed after GT_last moved to
    #    6, before Spark's commit log: Spark will replay batch 6, which the barrier drops
    #    (its dead letters untouched)
    killed(c.run(fault="after_gt_last:6", options=tolerant, checkpoint="cp2"))
    assert c.progress() == (6, None) and c.pointer() == 6
    assert (tmp_path / "cp2" / "commits" / "5").exists()
    assert not (tmp_path / "cp2" / "commits" / "6").exists()
    assert c.dead_letter_files() == [0, 1, 2, 3, 4, 6]
    dead_letter_file(6)

    # 7. the consumer raises on bundle 7, the retries are spent, the query fails; its dead
    #    letters were settled before it went in flight
    out = failed(
        c.run(
            fault="deliver_error:7",
            options={**tolerant, "delivery.maxRetries": "1", "delivery.retryBackoffMs": "10"},
            checkpoint="cp2",
        )
    )
    assert "injected fault deliver_error:7" in out, out[-3000:]
    assert c.progress() == (6, 7) and c.pointer() == 6
    assert c.bundle_files() == list(range(7))
    dead_letter_file(7)

    # 8. restart without faults, to the end
    finished(c.run(options=tolerant, checkpoint="cp2"))
    assert c.progress() == (7, None) and c.pointer() == 7
    assert c.bundle_files() == list(range(epochs))
    assert c.dead_letter_files() == with_dead_letters
    for bundle in with_dead_letters:
        dead_letter_file(bundle)
    assert {b: file_id(c.dead / dead_letter_name(b)) for b in seen} == seen, (
        "a dead-letter file was written again"
    )

    delivered = c.delivered_numbers()
    dead = c.dead_letters()
    refused = [int(v) for v in dead.column("value").to_pylist()]
    assert sorted(refused) == poison
    assert len(delivered) == len(set(delivered)), "records delivered twice"
    assert sorted(delivered + refused) == list(range(n)), "lost or duplicated records"
    gt = read_bundles(c.out).column("gt").combine_chunks()
    fields = ("epoch", "topic", "partition", "offset")
    keys = list(zip(*(gt.field(f).to_pylist() for f in fields), strict=True))
    assert keys == sorted(keys), "items are not in gt order"
    assert sorted(dead.column(BUNDLE_COLUMN).to_pylist()) == with_dead_letters
    for bundle, number in zip(with_dead_letters, poison, strict=True):
        rows = pq.read_table(c.dead / dead_letter_name(bundle))
        assert [int(v) for v in rows.column("value").to_pylist()] == [number]
    assert c.staged() == []
    assert c.owner().generation == 8  # every run claimed the pipeline once


class KafkaChain(Chain):
    """A chain into a kafka consumer: ``output`` on the same broker."""

    output = ""

    def consumer_options(self) -> dict[str, str]:
        return {
            "consumer": "kafka",
            "consumer.kafka.bootstrap.servers": self.kafka.bootstrap,
            "consumer.topic": self.output,
        }


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_dead_letter_is_not_delivered_by_a_replay_that_would_accept_it(
    driver: Any, kafka: Any, tmp_path: Path
) -> None:
    """The dead-letter file of a bundle recorded in flight records what was refused: the
    restart after the output topic gained the partition the row names delivers every other
    row of the bundle and not that one, so each input row is in exactly one of (topic,
    dead letters)."""
    n, poison = 2 * PER_EPOCH, 503  # bundle 0 holds the row for partition 1
    topic = kafka.create_topic(partitions=PARTITIONS)
    produce(kafka, topic, n)
    c = KafkaChain(driver, kafka, tmp_path, topic, partition=f"{poison}=1")
    c.output = kafka.create_topic(partitions=1)
    tolerant = c.tolerant()

    # partition 1 of a one-partition topic: refused; killed once its dead letters are written
    # (after the bundle was recorded in flight)
    killed(c.run(fault="after_dead_letters:0", options=tolerant))
    assert c.progress() == (-1, 0) and c.dead_letter_files() == [0]
    first = file_id(c.dead / dead_letter_name(0))
    assert [int(v) for v in c.dead_letters().column("value").to_pylist()] == [poison]
    assert kafka.consume_all(c.output) == []

    # the topic now has partition 1: the replay of bundle 0 would accept the row
    kafka.recreate_topic(c.output, 2)
    finished(c.run(options=tolerant))
    assert c.progress() == (1, None)
    assert file_id(c.dead / dead_letter_name(0)) == first, "the dead-letter file was rewritten"
    delivered = [int(r.value) for r in kafka.consume_all(c.output)]
    refused = [int(v) for v in c.dead_letters().column("value").to_pylist()]
    assert refused == [poison]
    assert poison not in delivered, "a row in the dead letters was delivered too"
    assert sorted(delivered + refused) == list(range(n)), "lost or duplicated records"


class HttpChain(Chain):
    """A chain into consumer=http with JSON-lines bodies, to the reference receiver."""

    receiver: Receiver

    def consumer_options(self) -> dict[str, str]:
        return {
            "consumer": "http",
            "consumer.url": f"{self.receiver.url}/s",
            "consumer.format": "jsonl",
        }

    def delivered_numbers(self) -> list[int]:
        return [
            int(base64.b64decode(json.loads(line)["value"]))
            for _, body in self.receiver.bodies("s")
            for line in body.splitlines()
            if line.strip()
        ]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_jsonl_http_refuses_a_string_that_is_not_utf8_until_all_sends_it_to_dead_letters(
    driver: Any, kafka: Any, receiver: Receiver, tmp_path: Path
) -> None:
    """A string Spark made from bytes that are not UTF-8 (CAST(binary AS STRING)) cannot be
    a JSON line: the reference receiver gets nothing of its bundle, every other bundle
    once; restarted with errors.tolerance=all, the row is in the dead letters once and
    the rest of its bundle reaches the receiver."""
    n, poison = 3 * PER_EPOCH, PER_EPOCH + 503  # bundle 1, partition 1, offset 751
    receiver.start()
    topic = kafka.create_topic(partitions=PARTITIONS)
    produce(kafka, topic, n)
    c = HttpChain(driver, kafka, tmp_path, topic, bad_utf8=str(poison))
    c.receiver = receiver

    out = failed(c.run())
    assert "RowsRefused" in out and "bundle 1 (epoch 1, batch 1 of query" in out, out[-3000:]
    assert f"refuses the row with gt (epoch 1 {topic}-1@751), column 'note': {NOT_UTF8}" in out
    assert c.progress() == (0, None)
    assert [b["bundle_id"] for b in receiver.bundles("s")] == [0]
    assert sorted(c.delivered_numbers()) == list(range(PER_EPOCH)) and not c.dead.exists()

    finished(c.run(options=c.tolerant()))
    assert c.progress() == (2, None)
    assert [(b["bundle_id"], b["rows"]) for b in receiver.bundles("s")] == [
        (0, PER_EPOCH),
        (1, PER_EPOCH - 1),
        (2, PER_EPOCH),
    ]
    dead = c.dead_letters()
    assert c.dead_letter_files() == [1] and dead.num_rows == 1
    assert [int(v) for v in dead.column("value").to_pylist()] == [poison]
    assert dead.column(COLUMN_COLUMN).to_pylist() == ["note"]
    assert dead.column(REASON_COLUMN).to_pylist() == [NOT_UTF8]
    note = dead.column("note").combine_chunks().view(pa.binary()).to_pylist()
    assert note == [b"\xffn"]
    delivered = c.delivered_numbers()
    assert poison not in delivered
    assert sorted([*delivered, poison]) == list(range(n)), "lost or duplicated records"


# --- on S3 and to a topic, in-process (no Spark) ------------------------------------------


def test_dead_letters_on_s3_and_on_a_topic_are_written_once_across_a_crash(
    s3: Any, kafka: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    dlq = kafka.create_topic(partitions=2)
    options = sink_options(
        **{
            "consumer.format": "jsonl",
            "errors.tolerance": "all",
            "errors.deadLetter.path": s3.uri("dead"),
            "errors.deadLetter.topic": dlq,
            "errors.deadLetter.kafka.bootstrap.servers": kafka.bootstrap,
            **s3.options(),
        }
    )
    p = Pipeline(options)
    p.record_batch(0, epoch=5)
    rows = [note_batch(5, 0, [0, 1, 2, 3], bad=[1, 3], null_gt=[2])]
    with pytest.raises(InjectedFault):
        p.barrier(faults=crash_at("after_dead_letters")).commit([p.write(0, rows)], 0)
    key = f"dead/{dead_letter_name(5)}"
    first = s3.client().head_object(Bucket=s3.bucket, Key=key)
    messages = kafka.consume_all(dlq)
    assert len(messages) == 3 and p.consumer.calls == 0

    # the restart resolves the bundle in flight: the file and the messages are found, not
    # written again; its replay of the epoch is dropped
    p.run_id = "run-b"
    outcome = p.barrier().commit([p.write(0, rows)], 0)
    assert outcome.action == "dropped" and outcome.recovered == 5
    assert [(d[0], d[1].num_rows if d[1] else 0) for d in p.consumer.delivered] == [(5, 1)]
    again = s3.client().head_object(Bucket=s3.bucket, Key=key)
    assert again["ETag"] == first["ETag"] and again["LastModified"] == first["LastModified"]
    assert len(kafka.consume_all(dlq)) == 3

    dead = pq.read_table(
        pa.BufferReader(s3.client().get_object(Bucket=s3.bucket, Key=key)["Body"].read())
    )
    assert dead.column(COLUMN_COLUMN).to_pylist() == ["gt", "note", "note"]
    headers = [dict(m.headers) for m in messages]
    by_reason = sorted(
        (h[H_COLUMN].decode(), h.get(H_OFFSET, b"-").decode(), h[H_BUNDLE].decode())
        for h in headers
    )
    assert by_reason == [("gt", "-", "5"), ("note", "1", "5"), ("note", "3", "5")]
    assert all(h[H_PIPELINE] == b"p1" and "gtb.index" in h for h in headers)
    assert sorted(m.value for m in messages) == [b"0:1", b"0:2", b"0:3"]  # the value column

    listed = cli_json(
        capsys,
        "deadletters",
        "--pipeline", "p1", "--state-uri", options.store.uri,
        "--dead-letters", s3.uri("dead"),
        *[f"--option={k}={v}" for k, v in s3.options().items()],
    )  # fmt: skip
    assert [(b["bundle_id"], b["rows"]) for b in listed["bundles"]] == [(5, 3)]


def test_the_owners_sweep_deletes_expired_dead_letters_on_s3(s3: Any) -> None:
    """``errors.deadLetter.retention`` on SeaweedFS: each file records when it was written,
    and the sweep after a commit deletes those older than the retention, of bundles at or
    below ``GT_last``; the newest stays."""
    options = sink_options(
        **{
            "consumer.format": "jsonl",
            "errors.tolerance": "all",
            "errors.deadLetter.path": s3.uri("dead"),
            "errors.deadLetter.retention": "1s",
            "staging.sweepEvery": "1",
            **s3.options(),
        }
    )
    p = Pipeline(options)
    for batch, bundle in enumerate((1, 2)):
        p.record_batch(batch, epoch=bundle)
        p.barrier().commit([p.write(batch, [note_batch(bundle, 0, [0, 1], bad=[1])])], batch)
    listed = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix="dead/")
    assert sorted(o["Key"] for o in listed["Contents"]) == [
        f"dead/{dead_letter_name(b)}" for b in (1, 2)
    ]
    time.sleep(1.5)  # both files are now older than the retention
    p.record_batch(2, epoch=3)
    p.barrier().commit([p.write(2, [note_batch(3, 0, [0, 1], bad=[1])])], 2)
    listed = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix="dead/")
    assert [o["Key"] for o in listed["Contents"]] == [f"dead/{dead_letter_name(3)}"]
    assert p.state().gt_last == 3 and len(p.consumer.delivered) == 3

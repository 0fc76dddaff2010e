"""``consumer=postgres``: the commit of a 50,000-row bundle, and exactly-once vs at-least-once.

    python -m benchmarks.postgres_bench                       # 50,000-row bundles, 8 per mode
    python -m benchmarks.postgres_bench --rows 10000 --bundles 3

No Spark and no Kafka: the write tasks' staging (``BarrierStreamWriter.write_task``) and
the barrier's commit run in this process, as Spark's Python workers run them, with the
barrier state on ``file://``, against a PostgreSQL server started here
(:mod:`harness.postgres`, Debian's package) or the one at ``GTB_POSTGRES_DSN``. A bundle
is ``--parts`` staged parts of rows shaped like the sink's test query: ``key`` (~8
bytes), ``value`` (~100 bytes), ``gt``.

Measured:

* the commit of one bundle (``Barrier.commit``: the state CASes and the delivery, i.e.
  reading the staged parts, COPY, the bookkeeping row, COMMIT), median over the bundles,
  and its delivery alone;
* throughput, rows/s over staging plus commit of every bundle, ``delivery=exactly-once``
  vs ``delivery=at-least-once`` (the same commits without the in-flight record, the
  consumer's last bundle and the bookkeeping row). The two modes alternate, ``--repeat``
  times, each going first every other time; each mode's median run counts (a loaded
  machine makes single runs noisy).

Targets: a 50,000-row bundle commits in under a second (median); exactly-once throughput
>= 0.95 x at-least-once.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from benchmarks.common import Ratio, load_average, print_table, write_results
from harness.postgres import PostgresSchema, PostgresServer
from harness.server import serving
from sink.barrier import Barrier
from sink.consumers import open_consumer
from sink.options import SinkOptions
from sink.writer import BarrierStreamWriter
from state.layout import PipelineLayout
from state.protocol.batch_records import write_batch_record
from state.records.gt import arrow_array
from state.spark_task import StreamingTask
from state.stores import open_store

MODES = ("exactly-once", "at-least-once")
COMMIT_TARGET_MS = 1000.0
RATIO_TARGET = 0.95


@dataclass
class Run:
    mode: str
    rows: int
    seconds: float
    commit_ms: list[float]
    deliver_ms: list[float]

    @property
    def rate(self) -> float:
        return self.rows / self.seconds


def make_part(epoch: int, partition: int, rows: int) -> pa.RecordBatch:
    offsets = range(rows)
    gt = arrow_array(
        pa.array([epoch] * rows, pa.int64()),
        pa.array(["bench"] * rows, pa.string()),
        pa.array([partition] * rows, pa.int32()),
        pa.array(offsets, pa.int64()),
    )
    keys = pa.array([b"k%07d" % o for o in offsets], pa.binary())
    values = pa.array([(b"%010d" % o) * 10 for o in offsets], pa.binary())
    return pa.RecordBatch.from_arrays([keys, values, gt], names=["key", "value", "gt"])


def run_mode(
    dsn: str, table: str, mode: str, state_dir: Path, parts: list[list[pa.RecordBatch]]
) -> Run:
    """Stage and commit each bundle of ``parts`` (one list of parts per bundle)."""
    run = uuid.uuid4().hex[:8]
    options = SinkOptions.parse(
        {
            "pipeline.id": f"bench-{run}",
            "state.uri": f"file://{state_dir}/{run}",
            "consumer": "postgres",
            "consumer.postgres.dsn": dsn,
            "consumer.postgres.table": table,
            "delivery": mode,
        }
    )
    store = open_store(options.store)
    layout = PipelineLayout(options.pipeline_id)
    writer = BarrierStreamWriter(options, has_gt=True)
    query_id = f"q-{run}"
    commit_ms: list[float] = []
    deliver_ms: list[float] = []
    rows = 0
    started = time.perf_counter()
    for batch_id, bundle in enumerate(parts):
        write_batch_record(store, layout, query_id, batch_id, batch_id)
        messages = [
            writer.write_task(
                iter([part]),
                StreamingTask(
                    query_id, batch_id, run, partition=p, task_attempt=p, attempt_number=1
                ),
            )
            for p, part in enumerate(bundle)
        ]
        consumer = open_consumer(options, store)
        try:
            t0 = time.perf_counter()
            outcome = Barrier(options, store, consumer, consumer.staging).commit(messages, batch_id)
            commit_ms.append((time.perf_counter() - t0) * 1000)
        finally:
            consumer.close()
        deliver_ms.append(outcome.timings.get("deliver", 0.0) * 1000)
        rows += outcome.rows
    return Run(mode, rows, time.perf_counter() - started, commit_ms, deliver_ms)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50_000, help="rows per bundle")
    parser.add_argument("--parts", type=int, default=4, help="staged parts per bundle")
    parser.add_argument("--bundles", type=int, default=8, help="bundles per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per mode (median counts)")
    parser.add_argument("--json", type=Path, default=None, help="results for python -m benchmarks")
    args = parser.parse_args(argv)

    per_part = max(1, args.rows // args.parts)
    bundles = [
        [make_part(epoch, p, per_part) for p in range(args.parts)] for epoch in range(args.bundles)
    ]
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pg-bench-")))
        server = PostgresServer.from_env() or PostgresServer(workdir)
        stack.enter_context(serving(server, "postgres"))
        if not server.external:
            stack.callback(server.remove)
            stack.callback(server.shutdown)
        schema = PostgresSchema(server)
        stack.callback(schema.drop)
        # a warm-up: the connection, the table, the bookkeeping table
        run_mode(server.dsn, schema.table("warmup"), MODES[0], workdir, bundles[:1])
        runs: dict[str, list[Run]] = {m: [] for m in MODES}
        for i in range(args.repeat):
            for mode in MODES if i % 2 == 0 else MODES[::-1]:
                table = schema.table(f"events_{mode[0]}{i}".replace("-", "_"))
                runs[mode].append(run_mode(server.dsn, table, mode, workdir, bundles))
    middle = {m: sorted(rs, key=lambda r: r.rate)[len(rs) // 2] for m, rs in runs.items()}
    eo, alo = middle["exactly-once"], middle["at-least-once"]
    eo_commits = [ms for r in runs["exactly-once"] for ms in r.commit_ms]
    eo_delivers = [ms for r in runs["exactly-once"] for ms in r.deliver_ms]
    print_table(
        ["postgres", "rows/s", "commit median ms", "commit max ms", "deliver median ms"],
        [
            [
                r.mode,
                f"{r.rate:,.0f}",
                f"{statistics.median(r.commit_ms):.0f}",
                f"{max(r.commit_ms):.0f}",
                f"{statistics.median(r.deliver_ms):.0f}",
            ]
            for r in (eo, alo)
        ],
    )
    commit = statistics.median(eo_commits)
    ratio = eo.rate / alo.rate
    rows_text = f"{per_part * args.parts:,}"
    commit_met = commit < COMMIT_TARGET_MS
    ratio_met = ratio >= RATIO_TARGET
    print(
        f"postgres: {rows_text}-row bundle commit = {commit:.0f} ms "
        f"(target < {COMMIT_TARGET_MS:.0f} ms: {'met' if commit_met else 'NOT met'})"
    )
    print(
        f"postgres: exactly-once / at-least-once throughput = {ratio:.2f} x "
        f"(target >= {RATIO_TARGET}: {'met' if ratio_met else 'NOT met'})"
    )
    print(f"load average: {load_average()}")
    ratios = [
        Ratio(
            "postgres",
            f"postgres: {rows_text}-row bundle commit (median)",
            round(commit, 1),
            f"< {COMMIT_TARGET_MS:.0f} ms",
            commit_met,
            unit="ms",
            note=f"delivery alone {statistics.median(eo_delivers):.0f} ms",
        ),
        Ratio(
            "postgres",
            "postgres: exactly-once / at-least-once throughput",
            round(ratio, 3),
            f">= {RATIO_TARGET}",
            ratio_met,
            note=f"{eo.rate:,.0f} vs {alo.rate:,.0f} rows/s",
        ),
    ]
    data = {
        r.mode: {
            "rows_per_s": r.rate,
            "commit_ms": r.commit_ms,
            "deliver_ms": r.deliver_ms,
        }
        for r in (eo, alo)
    }
    write_results(args.json, ratios, {"rows_per_bundle": per_part * args.parts, **data})


if __name__ == "__main__":
    main()

"""How gtkafka's throughput grows with Kafka partitions and with Spark cores.

    python -m benchmarks.scaling                          # 200,000 records per point
    python -m benchmarks.scaling --records 50000 --json out.json
    python -m benchmarks.scaling --sink barrier           # through the barrier instead
    python -m benchmarks.scaling --clients kafka-python,confluent   # both read clients

Each point fills a topic with the same number of ~100-byte records (spread over the
topic's partitions) and runs ``gtkafka -> noop`` (or, ``--sink barrier``, the stateless
pipeline ``gtkafka -> (key, value, gt) -> barrier``, ``consumer=file``, exactly-once,
state ``file://``) with ``Trigger.AvailableNow`` and ``maxOffsetsPerTrigger`` = a tenth
of the records (about 10 batches), after a warm-up query in the same SparkSession.
Reported: records/s over the query's wall time and inside its triggers (Spark's
``processedRowsPerSecond`` measure, without the query's start and stop), and inside the
triggers after the first two batches, in which each of Spark's Python workers creates a
pooled Kafka consumer for every partition it reads (the target is the in-trigger rate
of all the batches; the steady-state rate is printed next to it). ``--batches`` sets
the number of batches per point and ``--no-warmup`` leaves the warm-up query out (then
each session's first point pays its cold start): for quick runs, whose numbers are
shapes only.

* partitions: 1, 4, 16, 64 on ``local[<all cores>]``, with each read client of
  ``--clients`` (``kafkaConsumer.client``; the points of every client in turn, each on a
  topic of its own);
* cores: ``local[1]``, ``local[2]``, ... up to the machine's cores, on 8 partitions, with
  the first client.

``--repeat N`` runs each session's points N times in turn and keeps each point's fastest
run (``make bench`` passes 2), as ``benchmarks.demo_bench --repeat`` does.

Target: records/s inside triggers with the most partitions / with one >= 0.85, for each
client; and, with two clients, each one's rate with the most partitions is printed against
the first's.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import (
    add_repeat_option,
    best_in_turn,
    kafka_bootstrap,
    load_average,
    local_spark,
    print_table,
    target_ratio,
    write_results,
)
from benchmarks.source_bench import fill
from datasource.consumer_pool import PARK_INTERVAL_S

PARTITIONS = (1, 4, 16, 64)
TARGET = ">= 0.85"
BATCHES = 10
#: Batches left out of the steady-state rate (the first reads of every partition in each
#: Python worker create its pooled consumers).
WARM_BATCHES = 2
#: The Python workers' pool closes a run's consumers this long after its last batch. With
#: a broker per run, librdkafka's would otherwise keep reconnecting to a broker that is
#: gone, and log every failed attempt, until the pool's default 5 minutes.
POOL_IDLE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Point:
    axis: str  # "partitions" | "cores"
    partitions: int
    cores: int
    records: int
    wall_s: float
    triggers_s: float
    batches: int
    load: str = ""
    #: Records and trigger seconds of the batches after the first :data:`WARM_BATCHES`:
    #: without the pool's warm-up (each Python worker creates a consumer per partition).
    steady_records: int = 0
    steady_s: float = 0.0
    client: str = "kafka-python"

    @property
    def rate(self) -> float:
        return self.records / self.wall_s

    @property
    def trigger_rate(self) -> float:
        return self.records / self.triggers_s if self.triggers_s else 0.0

    @property
    def steady_rate(self) -> float:
        return self.steady_records / self.steady_s if self.steady_s else 0.0


@dataclass(frozen=True)
class Run:
    wall_s: float
    triggers_s: float
    batches: int
    steady_records: int
    steady_s: float


def run_pipeline(
    spark: Any,
    bootstrap: str,
    topic: str,
    records: int,
    workdir: Path,
    *,
    sink: str = "noop",
    batches: int = BATCHES,
    client: str = "kafka-python",
) -> Run:
    """gtkafka -> ``sink`` over the whole topic, in about ``batches`` batches, read with
    the executor read client ``client`` (``kafkaConsumer.client``)."""
    run = uuid.uuid4().hex[:8]
    ids = {"pipeline.id": f"scale-{run}", "state.uri": f"file://{workdir}/state-{run}"}
    df = (
        spark.readStream.format("gtkafka")
        .options(**ids)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max(1, records // batches)))
        .option("kafkaConsumer.client", client)
        .option("kafkaConsumer.pool.idleTimeout", f"{POOL_IDLE_TIMEOUT_S:g}s")
        .load()
    )
    began = time.perf_counter()
    if sink == "barrier":
        writer = (
            df.select("key", "value", "gt")
            .writeStream.format("barrier")
            .options(**ids)
            .option("consumer.path", str(workdir / f"out-{run}"))
        )
    else:
        writer = df.writeStream.format("noop")
    query = (
        writer.option("checkpointLocation", str(workdir / f"cp-{run}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    wall = time.perf_counter() - began
    if query.exception() is not None:
        raise RuntimeError(f"scaling query on {topic} failed: {query.exception()}")
    progress = query.recentProgress
    rows = sum(p["numInputRows"] for p in progress)
    if rows != records:
        raise RuntimeError(f"scaling query on {topic} read {rows} records, expected {records}")

    def seconds(batches: Sequence[Any]) -> float:
        return float(sum(p["durationMs"].get("triggerExecution", 0) for p in batches)) / 1000.0

    steady = progress[WARM_BATCHES:]
    return Run(
        wall,
        seconds(progress),
        len(progress),
        sum(p["numInputRows"] for p in steady),
        seconds(steady),
    )


def measure(
    bootstrap: str | None,
    records: int,
    *,
    partitions: Sequence[int] = PARTITIONS,
    cores: Sequence[int] | None = None,
    workdir: Path,
    sink: str = "noop",
    repeat: int = 1,
    batches: int = BATCHES,
    warmup: bool = True,
    clients: Sequence[str] = ("kafka-python",),
) -> list[Point]:
    """Every point of both axes (topics filled once per partition count), each point's
    query in about ``batches`` batches, after a warm-up query in each session unless not
    ``warmup``.

    With ``repeat`` > 1 the points of one session are run that many times in turn (1, 4,
    ..., 64, then 1, 4, ... again), each run on a topic of its own (so that it starts with
    no pooled consumer, like the first), and each point keeps its run with the highest
    in-trigger rate: the 1-partition reference moves by a third from run to run (its
    batches are one task each, and which Python worker runs it varies), and a session's
    first runs are slower whatever they run.

    With ``bootstrap`` None every run has a Tansu broker of its own, started for it and
    filled with its topic only: Tansu's answers slow down as it holds more topics and
    record batches (a consumer's creation took 35 times longer on a broker that had served
    two earlier runs, ``benchmarks.pooled_reads``), which would favour the earlier runs."""
    all_cores = os.cpu_count() or 1
    cores = list(cores or range(1, all_cores + 1))
    topics: dict[tuple[int, int, str], str] = {}

    def before_the_broker_stops(clients_run: Sequence[str]) -> None:
        # A run's own broker stops when it ends: first let the pool close the consumers
        # librdkafka keeps connected (kafka-python's hold no connection while idle).
        if bootstrap is None and "confluent" in clients_run:
            time.sleep(POOL_IDLE_TIMEOUT_S + 2 * PARK_INTERVAL_S)

    def topic_with(at: str, n: int, turn: int, client: str) -> str:
        # A topic per turn and client: a run must not find the Python workers' pooled
        # consumers of an earlier one (their creation is part of what is measured).
        if (n, turn, client) not in topics:
            name = f"scale-{n}p-{uuid.uuid4().hex[:6]}"
            fill(at, name, n, records - records % n, min(n, all_cores))
            topics[(n, turn, client)] = name
        return topics[(n, turn, client)]

    def point_of(spark: Any, c: int, where: tuple[str, int, str], turn: int) -> Point:
        """Run one point (axis, partitions, client) on its turn's topic; print it."""
        axis, p, client = where
        n = records - records % p
        with kafka_bootstrap(bootstrap) as at:
            if bootstrap is None:
                topics.clear()  # a new broker: nothing is filled on it yet
            run = run_pipeline(
                spark,
                at,
                topic_with(at, p, turn, client),
                n,
                workdir,
                sink=sink,
                batches=batches,
                client=client,
            )
            before_the_broker_stops([client])
        point = Point(
            axis,
            p,
            c,
            n,
            run.wall_s,
            run.triggers_s,
            run.batches,
            load_average(),
            run.steady_records,
            run.steady_s,
            client,
        )
        print(
            f"  {axis:10} partitions={p:<3} local[{c}] {client:12}"
            + (f" (run {turn + 1}/{repeat})" if repeat > 1 else "")
            + f": {n:,} records in {run.wall_s:.1f}s ({point.rate:,.0f}/s; "
            f"{point.trigger_rate:,.0f}/s inside triggers)",
            flush=True,
        )
        return point

    points: list[Point] = []
    for c in sorted(set(cores) | {all_cores}):
        with local_spark(c) as spark:
            if warmup:
                with kafka_bootstrap(bootstrap) as at:
                    warm_topic = f"scale-warmup-{uuid.uuid4().hex[:6]}"
                    fill(at, warm_topic, 2, 10_000, 1)
                    for client in clients:
                        run_pipeline(
                            spark, at, warm_topic, 10_000, workdir, sink=sink, client=client
                        )
                    before_the_broker_stops(clients)
            axes: list[tuple[str, int, str]] = []
            if c in cores:
                axes.append(("cores", 8, clients[0]))
            if c == all_cores:
                axes += [("partitions", p, client) for client in clients for p in partitions]
            points += best_in_turn(
                [functools.partial(point_of, spark, c, where) for where in axes],
                repeat,
                cost=lambda point: -point.trigger_rate,
            )
    return points


def report(points: Sequence[Point]) -> list[Any]:
    clients = list(dict.fromkeys(p.client for p in points if p.axis == "partitions"))
    for axis, label in (("partitions", "Kafka partitions"), ("cores", "Spark cores")):
        for client in clients if axis == "partitions" else [None]:
            chosen = sorted(
                (p for p in points if p.axis == axis and client in (None, p.client)),
                key=lambda p: (p.partitions, p.cores),
            )
            if not chosen:
                continue
            if client is not None and len(clients) > 1:
                print(f"read client {client}:")
            _table(axis, label, chosen)
    ratios = []
    most: dict[str, Point] = {}
    for client in clients:
        chosen = sorted(
            (p for p in points if p.axis == "partitions" and p.client == client),
            key=lambda p: p.partitions,
        )
        if len(chosen) < 2 or chosen[0].partitions != 1:
            continue
        one, most[client] = chosen[0], chosen[-1]
        top = most[client]
        ratios.append(
            target_ratio(
                "partition scaling",
                f"partition scaling: records/s inside triggers, {top.partitions} partitions / "
                "1 partition" + ("" if client == "kafka-python" else f", {client}"),
                top.trigger_rate / one.trigger_rate,
                TARGET,
                f"{top.trigger_rate:,.0f} vs {one.trigger_rate:,.0f} records/s "
                f"(wall {top.rate / one.rate:.2f}x; after the first {WARM_BATCHES} batches "
                f"{top.steady_rate / one.steady_rate if one.steady_rate else 0:.2f}x); "
                f"load {top.load}",
            )
        )
    if len(most) > 1:
        first, *others = most.values()
        for other in others:
            print(
                f"{other.client} / {first.client} with {other.partitions} partitions: "
                f"{other.trigger_rate / first.trigger_rate:.2f}x inside triggers "
                f"({other.trigger_rate:,.0f} vs {first.trigger_rate:,.0f} records/s), "
                f"{other.rate / first.rate:.2f}x wall",
                flush=True,
            )
    return ratios


def _table(axis: str, label: str, chosen: Sequence[Point]) -> None:
    base = chosen[0]
    print_table(
        [
            label,
            "local[N]",
            "records",
            "wall s",
            "records/s",
            "in triggers /s",
            f"vs {base.partitions if axis == 'partitions' else base.cores}",
            f"after {WARM_BATCHES} batches /s",
            "vs",
        ],
        [
            [
                str(p.partitions if axis == "partitions" else p.cores),
                str(p.cores),
                f"{p.records:,}",
                f"{p.wall_s:.1f}",
                f"{p.rate:,.0f}",
                f"{p.trigger_rate:,.0f}",
                f"{p.trigger_rate / base.trigger_rate:.2f}",
                f"{p.steady_rate:,.0f}",
                f"{p.steady_rate / base.steady_rate:.2f}" if base.steady_rate else "-",
            ]
            for p in chosen
        ],
    )
    print()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__)
    parser.add_argument("--records", type=int, default=200_000, help="records per point")
    parser.add_argument("--sink", choices=("noop", "barrier"), default="noop")
    parser.add_argument(
        "--clients",
        default="kafka-python",
        help="comma list of the executors' read clients (kafkaConsumer.client): "
        "kafka-python, confluent",
    )
    parser.add_argument("--partitions", default=",".join(map(str, PARTITIONS)))
    parser.add_argument("--cores", default=None, help="comma list (default 1..all cores)")
    parser.add_argument(
        "--batches", type=int, default=BATCHES, help="batches per point (maxOffsetsPerTrigger)"
    )
    parser.add_argument(
        "--no-warmup", action="store_true", help="no warm-up query per session (quick runs)"
    )
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("GTB_KAFKA_BOOTSTRAP"),
        help="a broker for every run (default: a Tansu broker started for each run)",
    )
    parser.add_argument(
        "--broker-per-run",
        action="store_true",
        help="a Tansu broker of its own for each run even if --bootstrap (or "
        "GTB_KAFKA_BOOTSTRAP, as make bench sets) names one",
    )
    add_repeat_option(
        parser, "run a session's points this many times in turn; each keeps its fastest run"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the points here")
    parser.add_argument("--results", type=Path, default=None, help="the target's ratio here")
    args = parser.parse_args(argv)
    if args.batches < 1:
        parser.error(f"--batches: expected at least 1, got {args.batches}")
    partitions = [int(p) for p in args.partitions.split(",")]
    cores = [int(c) for c in args.cores.split(",")] if args.cores else None
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    if not clients or set(clients) - {"kafka-python", "confluent"}:
        parser.error(f"--clients: expected kafka-python and/or confluent, got {args.clients!r}")
    with tempfile.TemporaryDirectory(prefix="gtb-scaling-") as workdir:
        points = measure(
            None if args.broker_per_run else args.bootstrap,
            args.records,
            partitions=partitions,
            cores=cores,
            workdir=Path(workdir),
            sink=args.sink,
            repeat=args.repeat,
            batches=args.batches,
            warmup=not args.no_warmup,
            clients=clients,
        )
    ratios = report(points)
    write_results(args.results, ratios, {"points": [asdict(p) for p in points]})
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([asdict(p) for p in points], indent=2))


if __name__ == "__main__":
    main()

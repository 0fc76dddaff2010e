"""Where a micro-batch's time goes, and where a recovery's time goes.

    python -m benchmarks.breakdown                        # 8, 100 and 10,000 records per batch
    python -m benchmarks.breakdown --sizes 100 --batches 3 --skip-recovery

Starts the harness's servers (Tansu, SeaweedFS S3, ZooKeeper; or uses ``--bootstrap``,
``--s3-endpoint``, ``--zk-hosts`` / the ``GTB_*`` variables), sets ``GTBARRIER_PROFILE``
(so the driver hooks, the read and write tasks and the commit record their spans, see
:mod:`state.profiling`) and runs, in one SparkSession (``local[<cores>]``), for every
batch size (``maxOffsetsPerTrigger``; 8 partitions, state on S3, ``consumer=file``,
exactly-once, ``Trigger.AvailableNow`` over a topic of ``batches + 1`` batches):

* ``stateless``: ``gtkafka -> key, value, gt -> barrier``;
* ``demo``: the demo's query (:func:`demo.pipeline.shop_outputs`: three branches, a
  windowed aggregation and ``applyInPandasWithState``) ``-> barrier``.

Each run's first batch is left out; the others are broken down (:mod:`benchmarks.spans`)
per batch, per task and per record next to Spark's own ``durationMs``. Then the demo's
driver program is started cold, SIGKILLed and restarted (:mod:`benchmarks.recovery`).
Tables go to stdout with the load average, everything to ``results/breakdown.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_ROOT, load_average, local_spark, print_table
from benchmarks.recovery import DriverRuns, report, to_json
from benchmarks.source_bench import fill
from benchmarks.spans import (
    NESTED,
    SPARK_KEYS,
    Breakdown,
    Span,
    Trigger,
    break_down,
    load_spans,
    table,
)

PARTITIONS = 8
QUERIES = ("stateless", "demo")


def _topic(services: Any, query: str, records: int) -> str:
    topic = f"breakdown-{query}-{uuid.uuid4().hex[:8]}"
    if query == "stateless":
        fill(services.bootstrap, topic, PARTITIONS, records, 1)
        return topic
    from demo.generator import GeneratorConfig, iter_events

    kafka = services.kafka(topic)
    try:
        kafka.create_topic(partitions=PARTITIONS, name=topic)
        events = iter_events(GeneratorConfig(events=records, partitions=PARTITIONS))
        kafka.produce(topic, (e.record() for e in events), batch_size=5000)
    finally:
        kafka.close()
    return topic


def run_query(
    spark: Any, services: Any, workdir: Path, query: str, *, size: int, batches: int
) -> list[Trigger]:
    """``batches`` + 1 batches of ``size`` records (AvailableNow over a topic of that many
    records, so that the query ends by itself); the triggers of all but the first."""
    topic = _topic(services, query, size * (batches + 1))
    run = uuid.uuid4().hex[:8]
    bucket = f"breakdown-{run}"
    services.create_bucket(bucket)
    ids = {"pipeline.id": f"bd-{query}-{run}", "state.uri": f"s3://{bucket}/gtb"}
    ids.update(services.s3_options())
    raw = (
        spark.readStream.format("gtkafka")
        .options(**ids)
        .option("kafka.bootstrap.servers", services.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(size))
        .load()
    )
    if query == "stateless":
        out = raw.select("key", "value", "gt")
    else:
        from demo.pipeline import parse_events, reference_tables, shop_outputs

        categories, rates = reference_tables(spark)
        out = shop_outputs(parse_events(raw, "5 minutes"), categories, rates, "1 minute")
        out = out.coalesce(2)  # as the demo's driver (DemoJob.output_partitions)
    q = (
        out.writeStream.format("barrier")
        .options(**ids)
        .option("consumer", "file")
        .option("consumer.path", str(workdir / f"out-{run}"))
        .option("checkpointLocation", str(workdir / f"cp-{run}"))
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )
    if not q.awaitTermination(3600):
        q.stop()
        raise TimeoutError(f"{query} query, {size} per batch: not done within an hour")
    if q.exception() is not None:
        raise RuntimeError(f"{query} query, {size} per batch, failed: {q.exception()}")
    triggers = [Trigger.from_progress(p) for p in q.recentProgress if p["numInputRows"] > 0]
    # A keyed topic's partitions differ in size: a last short batch may hold the rest.
    return [t for t in triggers[1:] if t.records >= size // 2]


def print_breakdown(b: Breakdown) -> None:
    print(
        f"\n{b.query}: {b.batch_records:,} records per batch, {len(b.triggers)} batches "
        f"(medians), load average {b.load_average}"
    )
    print_table(*table(b))
    top = sorted(
        (r for r in b.rows if r.name not in NESTED),
        key=lambda r: -r.per_batch_ms,
    )[:5]
    print(
        "largest: "
        + "; ".join(f"{r.section}/{r.label.strip()} {r.per_batch_ms:,.0f} ms" for r in top)
    )


def reanalyze(doc: dict[str, Any], spans: list[Span]) -> dict[str, Any]:
    """``doc`` with its tables computed again from the saved spans (where the batches'
    start times were saved)."""
    again = []
    for b in doc["breakdowns"]:
        if not all("start" in t for t in b["batches"]):
            again.append(b)
            continue
        triggers = [
            Trigger(t["batch_id"], t["start"], t["input_rows"], t["records"], t["durations_ms"])
            for t in b["batches"]
        ]
        again.append(break_down(b["query"], triggers, spans, b["load_average"]).to_json())
    return doc | {"breakdowns": again}


def markdown(doc: dict[str, Any]) -> str:
    """``breakdown.json`` as Markdown: per batch size, the queries side by side."""
    out: list[str] = []
    by_size: dict[int, list[dict[str, Any]]] = {}
    for b in doc["breakdowns"]:
        by_size.setdefault(int(b["batch_records"]), []).append(b)
    for size, runs in sorted(by_size.items()):
        names = [r["query"] for r in runs]
        out.append(
            f"\n**{size:,} records per batch** (load average "
            + "; ".join(f"{r['query']} {r['load_average']}" for r in runs)
            + ")\n"
        )
        head = ["part"] + [
            f"{n} {c}" for n in names for c in ("ms/batch", "n", "ms/task", "us/record")
        ]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        labels: list[tuple[str, str]] = [(f"Spark {k}", f"spark:{k}") for k in SPARK_KEYS]
        labels += [("ours (own time, union)", "ours"), ("rest: Spark's own", "rest")]
        section = ""
        for r in runs:
            for row in r["rows"]:
                if row["section"] != section:
                    section = row["section"]
                    labels.append((f"**{section}**", "section"))
                entry = (row["label"], f"row:{row['name']}")
                if entry not in labels:
                    labels.append(entry)
        for label, key in dict.fromkeys(labels):
            cells = [label.replace("  ", "&nbsp;&nbsp;")]
            for r in runs:
                cells += [""] * 4 if key == "section" else _cells(r, key)
            out.append("| " + " | ".join(cells) + " |")
    if "recovery" in doc:
        out.append(_recovery_markdown(doc["recovery"]))
    return "\n".join(out) + "\n"


def _recovery_markdown(rec: dict[str, Any]) -> str:
    cold, again = dict(rec["cold"]["steps"]), dict(rec["recovery"]["steps"])
    steps = list(dict.fromkeys([*again, *cold]))
    lines = [
        f"\n**Recovery** (the demo's driver; ZooKeeper {'yes' if rec['zookeeper'] else 'no'}; "
        f"load average {rec['load_average']}; recover(): {rec['recovery']['recover_action']})\n",
        "| step | cold start s | SIGKILL -> restart s |",
        "|---|---|---|",
    ]
    lines += [f"| {s} | {_num(cold.get(s))} | {_num(again.get(s))} |" for s in steps]
    lines.append(
        f"| **total, to the first (new) bundle** | {rec['cold']['total_s']:.1f} | "
        f"{rec['recovery']['total_s']:.1f} |"
    )
    first_cold, first_again = rec["cold"]["first_batch_ms"], rec["recovery"]["first_batch_ms"]
    if first_cold or first_again:
        lines += ["", "| first micro-batch, durationMs | cold start | restart |", "|---|---|---|"]
        for key in SPARK_KEYS:
            lines.append(f"| {key} | {_ms(first_cold.get(key))} | {_ms(first_again.get(key))} |")
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _cells(run: dict[str, Any], key: str) -> list[str]:
    kind, _, name = key.partition(":")
    if kind == "spark":
        return [f"{run['spark_ms'].get(name, 0):,.0f}", "", "", ""]
    if key in ("ours", "rest"):
        return [f"{run[key + '_ms']:,.0f}", "", "", ""]
    for row in run["rows"]:
        if row["name"] == name:
            return [
                f"{row['per_batch_ms']:,.0f}",
                f"{row['count_per_batch']:.0f}",
                f"{row['per_span_ms']:,.0f}",
                f"{row['per_record_us']:,.0f}",
            ]
    return ["-", "", "", ""]


def main(argv: list[str] | None = None) -> None:  # noqa: PLR0915 - the command, step by step
    parser = argparse.ArgumentParser(prog="python -m benchmarks.breakdown", description=__doc__)
    parser.add_argument("--sizes", default="8,100,10000", help="records per micro-batch")
    parser.add_argument("--queries", default=",".join(QUERIES))
    parser.add_argument("--batches", type=int, default=4, help="measured batches per run")
    parser.add_argument(
        "--small", action="store_true", help="2 measured batches per run, a smaller recovery"
    )
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--skip-recovery", action="store_true")
    parser.add_argument("--recovery-events", type=int, default=8000)
    parser.add_argument("--recovery-per-batch", type=int, default=500)
    parser.add_argument("--bootstrap", default=os.environ.get("GTB_KAFKA_BOOTSTRAP"))
    parser.add_argument("--s3-endpoint", default=os.environ.get("GTB_S3_ENDPOINT"))
    parser.add_argument("--zk-hosts", default=os.environ.get("GTB_ZK_HOSTS"))
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "results")
    parser.add_argument(
        "--markdown",
        type=Path,
        default=None,
        help="only print this breakdown.json as Markdown tables (for docs/performance.md)",
    )
    args = parser.parse_args(argv)
    if args.markdown is not None:
        saved = json.loads(args.markdown.read_text())
        spans_dir = args.markdown.parent / "breakdown-profile"
        if spans_dir.is_dir():
            saved = reanalyze(saved, load_spans(spans_dir))
        print(markdown(saved))
        return
    if args.small:
        args.batches, args.recovery_events = 2, 4000
    sizes = [int(s) for s in args.sizes.split(",")]
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    from demo.services import Services

    doc: dict[str, Any] = {
        "cores": os.cpu_count(),
        "load_average_start": load_average(),
        "breakdowns": [],
    }
    print(f"load average at the start: {doc['load_average_start']}", flush=True)
    with tempfile.TemporaryDirectory(prefix="gtb-breakdown-") as tmp:
        workdir = Path(tmp)
        profile = workdir / "profile"
        os.environ["GTBARRIER_PROFILE"] = str(profile)  # before Spark: its workers inherit it
        services = Services(
            workdir / "services", kafka=args.bootstrap, s3=args.s3_endpoint, zookeeper=args.zk_hosts
        ).start()
        try:
            conf = {"spark.sql.shuffle.partitions": "4", "spark.sql.session.timeZone": "UTC"}
            with local_spark(args.cores, **conf) as spark:
                for size in sizes:
                    for query in queries:
                        triggers = run_query(
                            spark, services, workdir, query, size=size, batches=args.batches
                        )
                        b = break_down(query, triggers, load_spans(profile), load_average())
                        print_breakdown(b)
                        doc["breakdowns"].append(b.to_json())
            del os.environ["GTBARRIER_PROFILE"]
            if not args.skip_recovery:
                print("\nrecovery: the demo's driver, cold start, then SIGKILL and restart")
                result = DriverRuns(
                    services,
                    workdir / "recovery",
                    events=args.recovery_events,
                    per_batch=args.recovery_per_batch,
                    zookeeper=True,
                ).run()
                report(result)
                doc["recovery"] = to_json(result)
            # The raw spans, so that the tables can be computed again (another analysis).
            saved = args.out / "breakdown-profile"
            shutil.rmtree(saved, ignore_errors=True)
            shutil.copytree(profile, saved)
        finally:
            services.stop()
    doc["load_average_end"] = load_average()
    print(f"load average at the end: {doc['load_average_end']}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "breakdown.json"
    path.write_text(json.dumps(doc, indent=2, default=str))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

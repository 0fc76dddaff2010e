"""``gtbarrier exporter``: a pipeline's Prometheus metrics at ``/metrics``, for pipelines
run without the coordinator's endpoint.

Each scrape reads what ``gtbarrier status`` reads: the barrier state, the epoch log and the
batch records from the state store, the resume point (from ZooKeeper with
``--zookeeper``, else from the store), with ``--bootstrap`` Kafka's end offsets against
the newest planned epoch, and with ``--dead-letters`` the rows the consumer refused.
The metrics a driver observes per process (batch durations, snapshot outcomes) are only
served by the coordinator's ``metrics_port``. Secrets are given as references
(``--option s3.secretAccessKey=${env:NAME}``, ``--zookeeper-auth
'digest:gtb:${env:ZK_PASSWORD}'``), resolved where a client is made. Runs until SIGINT or
SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

from gtbarrier.cli.common import (
    PipelineArgs,
    UsageError,
    add_dead_letters_argument,
    add_pipeline_arguments,
    open_dead_letter_files,
)
from gtbarrier.cli.deadletters import pipeline_files
from gtbarrier.cli.kafka_ends import end_offsets, source_options
from gtbarrier.cli.output import Result
from gtbarrier.cli.status import BOOTSTRAP_ENV, ZOOKEEPER_ENV, read_resume
from gtbarrier.cli.zookeeper import add_zookeeper_auth_argument

DEFAULT_PORT = 9464


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "exporter",
        help="serve a pipeline's Prometheus metrics at /metrics (needs gtbarrier[metrics])",
        description=__doc__,
    )
    add_pipeline_arguments(parser)
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"the port to listen on (0: a free one, printed; default {DEFAULT_PORT})",
    )
    parser.add_argument(
        "--address", default="0.0.0.0", help="the address to listen on (default 0.0.0.0)"
    )
    parser.add_argument(
        "--zookeeper",
        default=os.environ.get(ZOOKEEPER_ENV),
        metavar="HOSTS",
        help=f"the coordinator's zookeeper_hosts, for the resume point (default: ${ZOOKEEPER_ENV})",
    )
    add_zookeeper_auth_argument(parser)
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get(BOOTSTRAP_ENV),
        metavar="SERVERS",
        help="kafka.bootstrap.servers, for the offsets behind per partition "
        f"(default: ${BOOTSTRAP_ENV}; kafka.* settings via --option)",
    )
    add_dead_letters_argument(parser, what="to count the rows the consumer refused")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> Result | None:
    try:
        from state.coordinator.metric_families import PipelineReading, offsets_behind
        from state.coordinator.metrics_server import MetricsServer, PipelineCollector, StateReader
    except ImportError as err:
        raise UsageError(
            f"gtbarrier exporter needs {err.name}, which comes with the metrics extra: "
            "pip install 'gtbarrier[metrics]'"
        ) from None
    pipeline = PipelineArgs.parse(args, prefixes=("kafka.",))
    if args.bootstrap:  # the kafka.* options are checked before anything is served
        source_options(args.bootstrap, ["-"], pipeline.options)
    dead_letters = (
        open_dead_letter_files(args.dead_letters, pipeline.config) if args.dead_letters else None
    )
    store = pipeline.open_store()
    reader = StateReader(store, pipeline.layout)

    def read() -> PipelineReading:
        facts = reader.read()
        resume, _ = read_resume(args.zookeeper, store, pipeline.layout, args.zookeeper_auth)
        behind = None
        if args.bootstrap and facts.planned is not None:
            topics = {t for t, _ in facts.planned}
            ends = end_offsets(source_options(args.bootstrap, topics, pipeline.options))
            behind = offsets_behind(facts.planned, ends)
        refused = None
        if dead_letters is not None:
            refused = sum(f.rows for f in pipeline_files(dead_letters, pipeline.pipeline_id))
        return PipelineReading(
            pipeline=pipeline.pipeline_id,
            barrier=facts.barrier,
            epochs=facts.epochs,
            batches_per_epoch=facts.batches_per_epoch,
            floor=facts.floor,
            resume=resume,
            behind=behind,
            dead_letter_rows=refused,
        )

    try:
        server = MetricsServer(
            PipelineCollector(read),
            args.port,
            args.address,
            option="--port",
            where="gtbarrier exporter",
        )
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
        print(
            f"gtbarrier exporter: pipeline {pipeline.pipeline_id}: serving {server.url}",
            file=sys.stderr,
            flush=True,
        )
        try:
            stop.wait()
        finally:
            server.stop()
    finally:
        store.close()
        if dead_letters is not None:
            dead_letters.close()
    return None

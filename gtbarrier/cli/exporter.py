"""``gtbarrier exporter``: a pipeline's Prometheus metrics at ``/metrics``, for pipelines
run without the coordinator's endpoint.

Each scrape reads what ``gtbarrier status`` reads: the barrier state, the epoch log and the
batch records from the state store, the resume point (from ZooKeeper with
``--zookeeper``, else from the store), with ``--bootstrap`` Kafka's end offsets against
the newest planned epoch (read as the driver's endpoint reads them:
:class:`~state.metrics.source_lag.SourceEnds`; a Kafka that does not answer leaves the lag
out and shows ``gtbarrier_up`` 0), and with ``--dead-letters`` the rows the consumer refused.
The metrics a driver observes per process (batch durations, snapshot outcomes) are only
served by the coordinator's ``metrics_port``. Secrets are given as references
(``--option s3.secretAccessKey=${env:NAME}``, ``--zookeeper-auth
'digest:gtb:${env:ZK_PASSWORD}'``), resolved where a client is made. Runs until SIGINT or
SIGTERM.

The ZooKeeper session, the Kafka reader and the store are made once and kept across
scrapes (:class:`ExporterReading`). A scrape reads with the exporter's credentials, so it
listens on ``127.0.0.1`` unless ``--address`` says otherwise; ``--tls-cert``/``--tls-key``
serve HTTPS, ``--tls-client-ca`` requires client certificates, and ``--basic-auth
'user:${file:/path}'`` requires basic authentication.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any

from gtbarrier.cli.common import (
    PipelineArgs,
    UsageError,
    add_dead_letters_argument,
    add_pipeline_arguments,
    open_dead_letter_files,
)
from gtbarrier.cli.deadletters import pipeline_files
from gtbarrier.cli.kafka_ends import source_options
from gtbarrier.cli.output import Result
from gtbarrier.cli.status import BOOTSTRAP_ENV, ZOOKEEPER_ENV, ZOOKEEPER_TIMEOUT
from gtbarrier.cli.zookeeper import add_zookeeper_auth_argument, open_session
from gtbarrier.help_text import plain_help
from state.protocol.resume_point import StoreResumePoints, read_resume_point

if TYPE_CHECKING:
    from sink.dead_letters.dead_letter_files import DeadLetters
    from state.coordinator.zookeeper_session import ZooKeeperSession
    from state.metrics.reading import PipelineReading, StateReader
    from state.metrics.source_lag import SourceEnds
    from state.records.resume_point import ResumePoint
    from state.stores import StateStore

DEFAULT_PORT = 9464
DEFAULT_ADDRESS = "127.0.0.1"


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "exporter",
        help="serve a pipeline's Prometheus metrics at /metrics (needs gtbarrier[metrics])",
        description=plain_help(__doc__),
    )
    add_pipeline_arguments(parser)
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"the port to listen on (0: a free one, printed; default {DEFAULT_PORT})",
    )
    parser.add_argument(
        "--address",
        default=DEFAULT_ADDRESS,
        help=f"the address to listen on (default {DEFAULT_ADDRESS}, this host only; 0.0.0.0: "
        "every interface, then use TLS and --basic-auth)",
    )
    parser.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate")
    parser.add_argument("--tls-key", metavar="PEM", help="the certificate's private key")
    parser.add_argument(
        "--tls-client-ca",
        metavar="PEM",
        help="require a client certificate signed by one of these CAs (needs --tls-cert)",
    )
    parser.add_argument(
        "--basic-auth",
        metavar="USER:PASSWORD",
        help="require HTTP basic authentication; the password may be a secret reference "
        "('prometheus:${file:/run/secrets/metrics}'; a value here is visible to every user "
        "of the host)",
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


class ExporterReading:
    """What each scrape reads, with clients made once and kept: the store, the ZooKeeper
    session (``--zookeeper``, opened at the first scrape; kazoo reconnects it) and the
    Kafka reader (``--bootstrap``; made again only when the subscribed topics change).
    A scrape must not open a session or a connection of its own: Prometheus scrapes every
    few seconds, and each new session costs ZooKeeper a session and the exporter a
    handshake."""

    def __init__(
        self,
        args: argparse.Namespace,
        pipeline: PipelineArgs,
        store: StateStore,
        dead_letters: DeadLetters | None,
    ) -> None:
        from state.metrics.reading import StateReader

        self.args = args
        self.pipeline = pipeline
        self.store = store
        self.dead_letters = dead_letters
        self._state: StateReader = StateReader(store, pipeline.layout)
        self._session: ZooKeeperSession | None = None
        self._ends: SourceEnds | None = None
        if args.bootstrap:
            from gtbarrier.source_ends import kafka_ends_opener
            from state.metrics.source_lag import SourceEnds

            self._ends = SourceEnds(kafka_ends_opener(args.bootstrap, pipeline.options))

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ExporterReading:
        """Check the arguments and open the store (and the dead-letter files)."""
        pipeline = PipelineArgs.parse(args, prefixes=("kafka.",))
        if args.bootstrap:  # the kafka.* options are checked before anything is served
            source_options(args.bootstrap, ["-"], pipeline.options)
        dead_letters = (
            open_dead_letter_files(args.dead_letters, pipeline.config)
            if args.dead_letters
            else None
        )
        try:
            store = pipeline.open_store()
        except BaseException:
            if dead_letters is not None:
                dead_letters.close()
            raise
        return cls(args, pipeline, store, dead_letters)

    def read(self) -> PipelineReading:
        """One scrape's reading (raises the store's, ZooKeeper's or Kafka's errors)."""
        from state.metrics.reading import PipelineReading
        from state.metrics.source_lag import SourceLag

        facts = self._state.read()
        lag = SourceLag() if self._ends is None else self._ends.read(facts.planned)
        refused = None
        if self.dead_letters is not None:
            files = pipeline_files(self.dead_letters, self.pipeline.pipeline_id)
            refused = sum(f.rows for f in files)
        return PipelineReading(
            pipeline=self.pipeline.pipeline_id,
            facts=facts,
            resume=self._resume_point(),
            behind=lag.behind,
            ends=lag.ends,
            dead_letter_rows=refused,
            errors=lag.errors,
        )

    def _resume_point(self) -> ResumePoint | None:
        if not self.args.zookeeper:
            point, _ = read_resume_point(StoreResumePoints(self.store, self.pipeline.layout))
            return point
        from state.coordinator.zookeeper_resume_points import ZooKeeperResumePoints

        if self._session is None:
            self._session = open_session(
                self.args.zookeeper, self.args.zookeeper_auth, ZOOKEEPER_TIMEOUT
            )
        backend = ZooKeeperResumePoints(self._session, self.pipeline.layout.zookeeper_resume)
        point, _ = read_resume_point(backend)
        return point

    def close(self) -> None:
        """Close every client (each even if another fails to close)."""
        try:
            if self._ends is not None:
                self._ends.close()
            if self._session is not None:
                self._session.stop()
        finally:
            try:
                self.store.close()
            finally:
                if self.dead_letters is not None:
                    self.dead_letters.close()


def run(args: argparse.Namespace) -> Result | None:
    try:
        from state.metrics.server import MetricsServer, PipelineCollector
    except ImportError as err:
        raise UsageError(
            f"gtbarrier exporter needs {err.name}, which comes with the metrics extra: "
            "pip install 'gtbarrier[metrics]'"
        ) from None
    from state.metrics.access import EXPORTER_NAMES, MetricsAccess

    access = MetricsAccess.parse(
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        basic_auth=args.basic_auth,
        names=EXPORTER_NAMES,
    )
    reading = ExporterReading.from_args(args)
    try:
        server = MetricsServer(
            PipelineCollector(reading.read, pipeline=reading.pipeline.pipeline_id),
            args.port,
            args.address,
            access=access,
            option="--port",
            where="gtbarrier exporter",
        )
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
        print(
            f"gtbarrier exporter: pipeline {reading.pipeline.pipeline_id}: serving {server.url}",
            file=sys.stderr,
            flush=True,
        )
        try:
            stop.wait()
        finally:
            server.stop()
    finally:
        reading.close()
    return None

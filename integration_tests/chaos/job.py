"""What one chaos driver program runs: a :class:`DriverJob`, written as JSON by the round
and read by :mod:`integration_tests.chaos.driver_program`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class DriverJob:
    """One driver program: the pipeline, where its servers are, and the query to run."""

    pipeline: str
    topic: str
    bootstrap: str
    state_uri: str
    s3_options: dict[str, str]
    zookeeper_hosts: str
    checkpoint: str
    query: str  # a name in queries.QUERIES
    shape: str  # "arrow" or "kafka": what the consumer needs as sink input
    sink_options: dict[str, str]
    workdir: str
    stop_path: str  # the driver stops its query and exits when this file appears
    session_path: str  # the driver writes its ZooKeeper session id and password here
    master: str = "local[2,2]"  # local, task retries allowed
    spark_conf: dict[str, str] = field(default_factory=dict)
    max_offsets: int = 400
    trigger_ms: int = 500
    snapshot_period: str = "1s"
    session_timeout: str = "4s"
    driver_wait: str = "90s"
    reset_attempts: int = 8
    #: Input record numbers whose rows the consumer refuses (``stateless``: a null gt).
    poison: list[int] = field(default_factory=list)
    #: > 0: the stateless query adds a ``label`` of ``n % label_modulus`` characters.
    label_modulus: int = 0
    #: > 0: the stateless query keeps only the records ``n % keep_divisor == 0`` (sparse).
    keep_divisor: int = 0
    #: ``state.epochsRetained`` of the source and the coordinator's ``epochs_retained``.
    epochs_retained: int = 1000
    #: gtkafka's ``readMode`` (``executors`` or ``driver``).
    read_mode: str = "executors"

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2, sort_keys=True))

    @classmethod
    def load(cls, path: Path) -> DriverJob:
        return cls(**json.loads(path.read_text()))

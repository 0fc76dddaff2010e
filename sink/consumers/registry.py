"""The consumers by name: the one table from a value of the ``consumer`` option to its kind.

Every consumer-specific step of the sink goes through the kind this table names
(:class:`~sink.consumers.consumer_kind.ConsumerKind`): parsing its options, the check when
the query starts, staging, the consumer itself and ``gtbarrier sweep``. No other module
compares a consumer's name. Adding a consumer is one module (or sub-package) with its kind,
and one entry here.

The sink's option table lists each kind's options once, in this table's order, each
applying only with (``only_with``) the consumers whose kinds declare it: ``consumer.path``
is declared by ``file`` and shared by ``s3``, so it applies to ``consumer=file/s3``.

Every Python process Spark starts for a query imports this table, and so every kind. A
kind's module imports its client library (urllib3, botocore through the S3 store,
kafka-python, psycopg, pyiceberg, deltalake), and the consumer's own modules that use it
(``kafka_consumer``, ``postgres_consumer``, ``iceberg_consumer``, ``delta_consumer``...),
only inside the methods that run once the consumer is chosen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from sink.consumers.consumer_kind import ConsumerKind
from sink.consumers.delta.delta_kind import DELTA
from sink.consumers.file import FILE
from sink.consumers.http import HTTP
from sink.consumers.iceberg.iceberg_kind import ICEBERG
from sink.consumers.kafka.kafka_kind import KAFKA_TOPIC
from sink.consumers.postgres.postgres_kind import POSTGRES
from sink.consumers.s3 import S3
from state.errors import ConfigError
from state.option_table import ChoiceOption, OnlyWith, OptionSpec

CONSUMER_KINDS: Mapping[str, ConsumerKind[Any]] = MappingProxyType(
    {
        "file": FILE,
        "s3": S3,
        "kafka": KAFKA_TOPIC,
        "http": HTTP,
        "postgres": POSTGRES,
        "iceberg": ICEBERG,
        "delta": DELTA,
    }
)
"""``consumer`` value -> kind, in the order the docs and error messages list them."""

CONSUMER_NAMES: tuple[str, ...] = tuple(CONSUMER_KINDS)
DEFAULT_CONSUMER = "file"


def _listed(names: tuple[str, ...]) -> str:
    """```a`, `b` or `c```."""
    quoted = [f"`{name}`" for name in names]
    return ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else quoted[0]


CONSUMER = ChoiceOption[str](
    name="consumer",
    choices=CONSUMER_NAMES,
    default=DEFAULT_CONSUMER,
    doc=_listed(CONSUMER_NAMES) + ".",
)


def kind_of(name: str) -> ConsumerKind[Any]:
    """The kind of consumer ``name``; a :class:`~state.errors.ConfigError` naming the
    registered consumers if there is none."""
    kind = CONSUMER_KINDS.get(name)
    if kind is None:
        expected = "one of " + ", ".join(repr(n) for n in CONSUMER_NAMES)
        raise ConfigError(CONSUMER.name, name, expected, where="barrier")
    return kind


def _consumer_options() -> tuple[OptionSpec, ...]:
    """Every kind's options, each once (in the order of the first kind that declares it),
    applying only with the consumers whose kinds declare it."""
    specs: dict[str, OptionSpec] = {}
    users: dict[str, list[str]] = {}
    for name, kind in CONSUMER_KINDS.items():
        for spec in kind.specs:
            declared = specs.setdefault(spec.name, spec)
            if declared is not spec:
                raise ValueError(f"consumer {name}: option {spec.name} is declared twice")
            if spec.only_with is not None:
                raise ValueError(f"consumer {name}: {spec.name}: only_with comes from the registry")
            users.setdefault(spec.name, []).append(name)
    return tuple(
        replace(spec, only_with=OnlyWith(CONSUMER.name, tuple(users[spec.name])))
        for spec in specs.values()
    )


CONSUMER_OPTIONS: tuple[OptionSpec, ...] = _consumer_options()
"""The kinds' options as the sink's option table lists them (with their ``only_with``)."""

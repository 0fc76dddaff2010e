"""The options of ``consumer=iceberg`` and their parsed form :class:`IcebergSettings`."""

from __future__ import annotations

from dataclasses import dataclass, field

from sink.consumers.consumer_kind import ConsumerSettings
from state.errors import ConfigError
from state.option_table import BooleanOption, PrefixOption, StringOption
from state.options import Options

TABLE = StringOption(
    name="consumer.iceberg.table",
    required=True,
    doc="The Iceberg table, `namespace.table` (the namespace may be nested: `a.b.table`).",
)
CATALOG = PrefixOption(
    name="consumer.iceberg.catalog.",
    doc="pyiceberg catalog properties (`...catalog.type=sql`, `...catalog.uri=sqlite:///...`, "
    "`...catalog.warehouse=file:///...` or `s3://...`, `...catalog.s3.endpoint`...); "
    "`...catalog.name` names the catalog (default `default`).",
)
CREATE_TABLE = BooleanOption(
    name="consumer.iceberg.createTable",
    default=True,
    doc="Create the namespace and the table from the sink's input schema if missing.",
)
SPECS = (TABLE, CATALOG, CREATE_TABLE)


@dataclass(frozen=True)
class IcebergSettings(ConsumerSettings):
    """``consumer=iceberg``: the table and the pyiceberg catalog that holds it."""

    namespace: tuple[str, ...]
    table: str
    catalog: tuple[tuple[str, str], ...] = field(repr=False)
    """pyiceberg catalog properties, sorted (hashable: a per-process cache key); out of the
    repr, as they may hold secrets given inline (``shown_properties`` masks them)."""
    catalog_name: str = "default"
    create_table: bool = True
    location: str | None = None
    """The table's location and FileIO properties, filled in on the driver when the query
    starts (write tasks then never open the catalog)."""
    io_properties: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    required: tuple[str, ...] = ()
    """The table's required (``NOT NULL``) columns, recorded when the query starts: the write
    tasks refuse rows with a null there and stage parts that mark them required."""

    @property
    def identifier(self) -> str:
        return ".".join((*self.namespace, self.table))

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.catalog)


def parse_settings(opts: Options) -> IcebergSettings:
    """The ``consumer.iceberg.*`` options, checked; errors name option, value, expectation."""
    table = TABLE.read_required(opts)
    parts = table.split(".")
    if len(parts) < 2 or any(not p.strip() or p != p.strip() for p in parts):
        raise opts.error(TABLE.name, "namespace.table (non-empty names, dot-separated)")
    props = {k: v for k, v in CATALOG.read(opts).items() if k != "name"}
    name = opts.string(CATALOG.name + "name")
    if not props and name is None:
        raise ConfigError(
            CATALOG.name + "*",
            None,
            "pyiceberg catalog properties, e.g. consumer.iceberg.catalog.uri=sqlite:///... and "
            "consumer.iceberg.catalog.warehouse=file:///...",
            where=opts.where,
        )
    warehouse = props.get("warehouse")
    if warehouse is not None and "://" not in warehouse:
        raise opts.error(
            CATALOG.name + "warehouse", "a URI: file:///absolute/path or s3://bucket/prefix"
        )
    return IcebergSettings(
        namespace=tuple(parts[:-1]),
        table=parts[-1],
        catalog=tuple(sorted(props.items())),
        catalog_name=name or "default",
        create_table=CREATE_TABLE.read(opts),
    )

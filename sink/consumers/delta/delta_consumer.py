"""``consumer=delta``: each bundle is one Delta commit carrying the pipeline's transaction id.

Delta's *application transaction* (a ``txn`` action: ``appId``, ``version``) is the
consumer's last bundle: every commit of bundle ``k`` carries ``txn(appId=<pipeline.id>,
version=k)`` in the same commit as its rows, and ``last_bundle()`` is
``DeltaTable.transaction_version(<pipeline.id>)``, which survives other writers' commits,
checkpoints and log cleanup (a table's snapshot keeps each app id's newest version).
Delivery of bundle ``k``:

1. open the table at its newest version; if its transaction version for the pipeline is
   ``>= k``, the bundle is acknowledged without a commit: never committed twice;
2. ``mode=append`` (:attr:`DeltaSettings.stage_in_table`): the write tasks staged their
   parts under the table (:mod:`sink.consumers.delta.delta_staging`); move them to their
   data file names under ``gtbarrier/<pipeline>/`` (a rename, or a server-side copy on S3:
   no item bytes through the driver; a retry, or the redelivery after a crash between the
   move and the commit, finds the files its failed attempt moved and commits those), and
   commit them in one ``DeltaTable.create_write_transaction`` of ``add`` actions whose
   statistics come from each file's Parquet footer, never its rows;
3. ``mode=merge`` (and ``append`` into a table whose writes delta-rs must check or
   rewrite row by row: partitioned, column mapping, constraints, generated or identity
   columns, a nested ``NOT NULL`` field the input may leave null): a merge must read the
   rows it matches, so the parts are staged in the state store and read on the driver
   (they stay staged until the barrier has recorded the acknowledgement, so a bundle lost
   before its commit is delivered again from them);
   ``append`` writes them, ``merge`` upserts them by the key columns (a key's last row in
   the bundle wins) through ``DeltaTable.merge``; either in one commit with the
   transaction id.

A commit that loses the race for its log entry to a commit of the same pipeline (delta-rs
refuses a commit whose app id another commit since its read version carries: "Concurrent
transaction") or to any other conflicting commit (``CommitFailedError``) is retried
through :func:`state.retry.cas_loop`: open the table again, and if the winner was this very
bundle (another attempt of it), acknowledge it; otherwise commit it on top. A commit that
fails any other way (a connection lost while the log entry was written) may have landed: it
is resolved by reading the transaction version back; if that read fails too, or the bundle
is not there, it is :class:`~state.errors.CommitStateUnknown` and the barrier's redelivery
resolves it through ``last_bundle()``. A refusal of the rows themselves (a schema mismatch,
a null in a ``NOT NULL`` column that validation did not see) is
:class:`~state.errors.CommitFailed`: nothing was committed, and the same rows would be
refused again.

Two writers must not commit the same log version: on a file system delta-rs creates the
entry exclusively; on S3 it writes it with a conditional put (``If-None-Match: *``), which
the S3 server must enforce (docs/sink.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from sink.bundle import Bundle
from sink.consumers.base import Ack, Consumer, LastBundle
from sink.consumers.delta.delta_options import DeltaSettings
from sink.consumers.delta.delta_staging import DataFile, DeltaStaging, data_file_location
from sink.consumers.delta.delta_table import open_table, said, storage_options
from sink.faults import FaultInjector
from sink.staging import Staging
from state.errors import (
    CommitFailed,
    CommitStateUnknown,
    ConcurrentModification,
    DeliveryFailed,
    StateError,
)
from state.retry import cas_loop

if TYPE_CHECKING:
    from deltalake import CommitProperties, DeltaTable

log = logging.getLogger(__name__)

SEQUENCE = "__gtbarrier_sequence"
"""A column added to a merge's source to keep a key's last row (never written)."""


def commit_properties(pipeline_id: str, bundle: Bundle) -> CommitProperties:
    """The commit's transaction id (``appId`` = the pipeline, ``version`` = the bundle)."""
    from deltalake import CommitProperties, Transaction

    return CommitProperties(app_transactions=[Transaction(pipeline_id, bundle.bundle_id)])


Write = Callable[["DeltaTable", "CommitProperties"], None]
"""One commit to the table with the given properties (the transaction id)."""


def write_append(
    table: DeltaTable, files: Sequence[DataFile], properties: CommitProperties
) -> None:
    """Add ``files`` (already under the table) to ``table`` in one commit, in the table's
    own schema (no metadata change)."""
    from deltalake.transaction import AddAction, RemoveAction

    actions: list[AddAction | RemoveAction] = [
        AddAction(
            path=f.location,
            size=f.size,
            partition_values={},
            modification_time=f.modification_time,
            data_change=True,
            stats=f.stats,
        )
        for f in files
    ]
    table.create_write_transaction(
        actions, mode="append", schema=table.schema(), commit_properties=properties
    )


def with_table_columns(table: DeltaTable, rows: pa.Table) -> pa.Table:
    """``rows`` with every column of ``table`` they lack, as nulls of its type: delta-rs
    refuses a write with fewer columns than the table ("number of fields does not
    match"), where the staged parts' commits read such a column as null. The start check
    refused the tables with a NOT NULL column the input lacks."""
    present = set(rows.column_names)
    for f in pa.schema(table.schema().to_arrow()):
        if f.name not in present:
            rows = rows.append_column(
                pa.field(f.name, f.type, nullable=True), pa.nulls(rows.num_rows, f.type)
            )
    return rows


def write_rows(table: DeltaTable, rows: pa.Table, properties: CommitProperties) -> None:
    """Append ``rows`` to ``table`` in one commit (delta-rs writes the data files)."""
    from deltalake import write_deltalake

    write_deltalake(
        table, with_table_columns(table, rows), mode="append", commit_properties=properties
    )


#: What delta-rs says when its check of the rows (NOT NULL fields, CHECK constraints,
#: invariants) refuses some: raised as a generic ``DeltaError`` while the data files are
#: written, before any log entry, so nothing was committed.
ROWS_REFUSED = "Invalid data found"


def refuses_rows(err: Exception) -> bool:
    """Whether ``err`` is delta-rs refusing the rows themselves (see :data:`ROWS_REFUSED`)."""
    from deltalake.exceptions import DeltaError

    return isinstance(err, DeltaError) and ROWS_REFUSED in str(err)


def last_per_key(rows: pa.Table, keys: tuple[str, ...]) -> pa.Table:
    """``rows`` with only the last row of each key (in their order): a Delta merge refuses a
    source in which two rows match the same target row."""
    numbered = rows.append_column(SEQUENCE, pa.array(range(rows.num_rows), pa.int64()))
    last = numbered.group_by(list(keys), use_threads=False).aggregate([(SEQUENCE, "max")])
    keep = pc.sort_indices(last.column(f"{SEQUENCE}_max"))
    return rows.take(pc.take(last.column(f"{SEQUENCE}_max"), keep))


def merge_predicate(keys: tuple[str, ...]) -> str:
    return " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)


def write_merge(
    table: DeltaTable, rows: pa.Table, keys: tuple[str, ...], properties: CommitProperties
) -> None:
    """Upsert ``rows`` into ``table`` by ``keys`` in one commit."""
    (
        table.merge(
            last_per_key(rows, keys),
            merge_predicate(keys),
            source_alias="s",
            target_alias="t",
            commit_properties=properties,
        )
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


class DeltaConsumer(Consumer):
    name = "delta"

    def __init__(
        self, settings: DeltaSettings, staging: Staging, faults: FaultInjector, *, pipeline_id: str
    ) -> None:
        super().__init__(staging, faults)
        self.settings = settings
        self.pipeline_id = pipeline_id
        self.files = staging if isinstance(staging, DeltaStaging) else None
        """The table's own staging when parts become its data files (``mode=append``)."""

    def describe(self) -> str:
        return f"delta consumer {self.settings.uri} ({self.settings.mode})"

    # --- delivery -----------------------------------------------------------------------

    def deliver(self, bundle: Bundle, *, redelivery: bool = False) -> Ack:
        def attempt() -> Ack:
            table = self._table()
            if self._holds(table, bundle):
                return Ack(bundle.bundle_id, bundle.rows)
            write, driver_bytes = self._prepare(bundle)
            self.faults.at("after_deliver", bundle.bundle_id)
            self._commit(table, bundle, write)
            self.faults.at("after_consumer_commit", bundle.bundle_id)
            return Ack(bundle.bundle_id, bundle.rows, driver_bytes)

        try:
            return cas_loop()(attempt)
        except ConcurrentModification as err:
            raise DeliveryFailed(
                f"{self.describe()}: bundle {bundle.bundle_id} lost every commit race to "
                f"other writers of the table: {err}"
            ) from err

    def _prepare(self, bundle: Bundle) -> tuple[Write, int]:
        """The bundle's commit, and the item bytes read on the driver to make it: none
        when its parts become data files, else every row."""
        if self.files is not None:
            files = self._promote(self.files, bundle)
            return lambda table, props: write_append(table, files, props), 0
        mode, keys = self.settings.mode, self.settings.key_columns
        rows = bundle.read_all(self.staging) if bundle.parts else None

        def write(table: DeltaTable, properties: CommitProperties) -> None:
            data = rows
            if data is None:
                data = pa.schema(table.schema().to_arrow()).empty_table()
            if mode == "merge":
                write_merge(table, data, keys, properties)
            else:
                write_rows(table, data, properties)

        return write, bundle.size

    def missing_parts(self, bundle: Bundle) -> tuple[str, ...]:
        """The parts neither staged nor already moved to their data files (an attempt
        moves them before it commits)."""
        files = self.files
        if files is None:
            return super().missing_parts(bundle)
        return tuple(
            part.location
            for part in bundle.parts
            if not files.exists(part.location)
            and not files.exists(data_file_location(self.pipeline_id, bundle.epoch, part.location))
        )

    def _promote(self, files: DeltaStaging, bundle: Bundle) -> list[DataFile]:
        """Move the bundle's staged parts to their data files (those an earlier attempt
        moved are taken as they are); the files, described from their footers."""
        out = []
        for part in bundle.parts:
            target = data_file_location(self.pipeline_id, bundle.epoch, part.location)
            if files.exists(part.location):
                files.move(part.location, target)
            elif not files.exists(target):
                raise StateError(
                    f"{self.describe()}: bundle {bundle.bundle_id} is not in the table and its "
                    f"staged part {part.location} is gone (no data file {target} either); the "
                    "bundle cannot be delivered"
                )
            out.append(files.data_file(target))
        return out

    def _table(self) -> DeltaTable:
        table = open_table(self.settings)
        if table is None:
            raise CommitFailed(
                f"{self.describe()}: there is no Delta table at {self.settings.uri} any more "
                "(it was there when the query started); bundles cannot be delivered"
            )
        return table

    def _holds(self, table: DeltaTable, bundle: Bundle) -> bool:
        version = table.transaction_version(self.pipeline_id)
        if version is None or version < bundle.bundle_id:
            return False
        if version > bundle.bundle_id:
            log.warning(
                "%s already holds bundle %d of pipeline %s: bundle %d is not committed again",
                self.describe(), version, self.pipeline_id, bundle.bundle_id,
            )  # fmt: skip
        return True

    def _commit(self, table: DeltaTable, bundle: Bundle, write: Write) -> None:
        """One Delta commit: ``write`` (the rows or data files, none for an empty bundle)
        with the transaction id."""
        from deltalake.exceptions import CommitFailedError, DeltaProtocolError, SchemaMismatchError

        try:
            write(table, commit_properties(self.pipeline_id, bundle))
        except CommitFailedError as err:
            log.info(
                "%s: bundle %d lost a commit race: %s", self.describe(), bundle.bundle_id, said(err)
            )
            raise ConcurrentModification(
                self.settings.uri, "_delta_log", str(table.version())
            ) from err
        except (SchemaMismatchError, DeltaProtocolError) as err:
            raise CommitFailed(
                f"{self.describe()}: the table refuses bundle {bundle.bundle_id} ({said(err)}); "
                "nothing of it was committed"
            ) from err
        except Exception as err:  # the log entry may have been written
            if refuses_rows(err):
                raise CommitFailed(
                    f"{self.describe()}: the table refuses rows of bundle {bundle.bundle_id} "
                    f"({said(err)}); nothing of it was committed"
                ) from err
            self._resolve_unknown(bundle, err)

    def _resolve_unknown(self, bundle: Bundle, err: Exception) -> None:
        """After a commit with an unknown outcome: return if the bundle landed, raise
        CommitStateUnknown otherwise (the barrier's redelivery asks again)."""
        try:
            landed = self._holds(self._table(), bundle)
        except Exception as read_err:
            raise CommitStateUnknown(
                f"{self.describe()}: the commit of bundle {bundle.bundle_id} may or may not have "
                f"landed ({said(err)}) and the table cannot be read back ({said(read_err)})"
            ) from err
        if not landed:
            raise CommitStateUnknown(
                f"{self.describe()}: the commit of bundle {bundle.bundle_id} failed with an "
                f"unknown outcome ({said(err)}); it is not in the table now"
            ) from err
        log.info("%s: bundle %d landed despite %s", self.describe(), bundle.bundle_id, said(err))

    # --- recovery -----------------------------------------------------------------------

    def last_bundle(self) -> LastBundle | None:
        table = open_table(self.settings)
        if table is None:
            return None
        version = table.transaction_version(self.pipeline_id)
        return None if version is None else LastBundle(version, version)

    def check(self) -> None:
        """Storage options resolve (a secret reference that cannot is named)."""
        storage_options(self.settings)

"""``consumer=iceberg``: each bundle is one Iceberg append commit, found again by its marker.

Write tasks stage their parts under the table's location
(:mod:`sink.consumers.iceberg.iceberg_staging`). Delivery of bundle ``k``:

1. reload the table; if the bundle is already in it (``last_bundle() >= k``), it is
   acknowledged without a commit: never appended twice;
2. move the bundle's staged parts to their data file names under ``data/`` (a rename, or
   a server-side copy on S3: no item bytes through the driver; a retry finds the files
   its failed attempt moved);
3. one transaction: ``add_files`` of those data files (pyiceberg reads each file's
   Parquet footer for the statistics, never its rows) with the snapshot summary
   properties ``gtbarrier.pipeline``, ``gtbarrier.bundle-id`` and ``gtbarrier.gt``, and the
   table property ``gtbarrier.last-bundle.<pipeline>`` = ``{"bundle_id": k, "gt": k}``;
   committed as ONE catalog commit (one snapshot).

``last_bundle()`` is the newer of the newest snapshot of this pipeline among the current
snapshot's ancestors (other writers' snapshots in between are skipped) and the table
property (which survives the expiry of that snapshot: docs/sink.md).

A commit that lost the race to another writer (``CommitFailedException``; pyiceberg's own
retries are turned off for it, see :func:`without_own_retries`) is retried through
:func:`state.retry.cas_loop`: reload, and if the winner was this very bundle (another
attempt of it), acknowledge it; otherwise commit the same bundle on top. A commit whose
outcome is unknown (``CommitStateUnknownException``, a connection lost while committing)
is resolved by reading the table back; if that read fails too, or the bundle is not
there, it is :class:`~state.errors.CommitStateUnknown` and the barrier's redelivery
resolves it through ``last_bundle()``.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from sink.bundle import Bundle
from sink.consumers.base import Ack, Consumer, LastBundle
from sink.consumers.iceberg.iceberg_options import IcebergSettings
from sink.consumers.iceberg.iceberg_staging import IcebergStaging, data_file_location
from sink.consumers.iceberg.iceberg_table import load_table
from sink.faults import FaultInjector
from state.errors import (
    CommitStateUnknown,
    ConcurrentModification,
    DeliveryFailed,
    StateError,
)
from state.records.codec import Fields, decode
from state.retry import cas_loop

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

PIPELINE = "gtbarrier.pipeline"
BUNDLE_ID = "gtbarrier.bundle-id"
GT = "gtbarrier.gt"
LAST_BUNDLE_PROPERTY = "gtbarrier.last-bundle."
"""Prefix of the table property naming a pipeline's last bundle (``...<pipeline>``)."""


def snapshot_marker(bundle: Bundle) -> dict[str, str]:
    """The snapshot summary properties of a bundle's commit."""
    return {PIPELINE: bundle.pipeline_id, BUNDLE_ID: str(bundle.bundle_id), GT: str(bundle.gt)}


def last_bundle_property(bundle: Bundle) -> str:
    """The value of the table property ``gtbarrier.last-bundle.<pipeline>`` for ``bundle``:
    ``{"bundle_id": k, "gt": k}`` (sorted keys, ``json.dumps``' default separators)."""
    return json.dumps({"bundle_id": bundle.bundle_id, "gt": bundle.gt}, sort_keys=True)


def last_bundle_of_property(raw: str, where: str) -> LastBundle:
    """The bundle a ``gtbarrier.last-bundle.<pipeline>`` property value names;
    :class:`~state.errors.MalformedRecord` naming ``where`` if it is not one."""

    def from_json(value: object) -> LastBundle:
        f = Fields(value, "iceberg last-bundle property")
        return LastBundle(f.integer("bundle_id", minimum=0), f.integer("gt", minimum=0))

    return decode(raw.encode(), from_json, where)


def marker_of(summary: Any, pipeline_id: str) -> LastBundle | None:
    """The bundle a snapshot summary records for ``pipeline_id`` (None if not ours)."""
    if summary is None:
        return None
    props = summary.additional_properties if hasattr(summary, "additional_properties") else summary
    if props.get(PIPELINE) != pipeline_id or BUNDLE_ID not in props:
        return None
    return LastBundle(int(props[BUNDLE_ID]), int(props.get(GT, props[BUNDLE_ID])))


def last_bundle_of(table: Table, pipeline_id: str) -> LastBundle | None:
    """The newest bundle of ``pipeline_id`` in ``table``: snapshot history, table property."""
    from pyiceberg.table.snapshots import ancestors_of

    found: LastBundle | None = None
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        found = marker_of(snapshot.summary, pipeline_id)
        if found is not None:
            break
    name = LAST_BUNDLE_PROPERTY + pipeline_id
    raw = table.properties.get(name)
    if raw is not None:
        prop = last_bundle_of_property(raw, f"table property {name}")
        if found is None or prop.bundle_id > found.bundle_id:
            found = prop
    return found


def without_own_retries(table: Table) -> None:
    """Turn off pyiceberg's commit retries for this (in-memory) table object only.

    pyiceberg retries a lost commit race by committing the same files again on top of
    the winner, without asking whether the winner was this very bundle (another attempt
    of it): that would append the bundle twice. The retry is gtbarrier's
    (:func:`state.retry.cas_loop` in :meth:`IcebergConsumer.deliver`), which looks first.
    The catalog applies only the transaction's updates to its own current metadata, so
    the table's stored properties are not changed.
    """
    from pyiceberg.table import TableProperties

    properties = {**table.metadata.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}
    table.metadata = table.metadata.model_copy(update={"properties": properties})


class IcebergConsumer(Consumer):
    name = "iceberg"

    def __init__(
        self, settings: IcebergSettings, staging: Any, faults: FaultInjector, *, pipeline_id: str
    ) -> None:
        assert isinstance(staging, IcebergStaging)
        super().__init__(staging, faults)
        self.settings = settings
        self.files = staging
        self.pipeline_id = pipeline_id

    def describe(self) -> str:
        return f"iceberg consumer {self.settings.identifier} ({self.files.location})"

    # --- delivery -----------------------------------------------------------------------

    def deliver(self, bundle: Bundle, *, redelivery: bool = False) -> Ack:
        done = Ack(bundle.bundle_id, bundle.rows)

        def attempt() -> Ack:
            table = load_table(self.settings)
            if self._holds(table, bundle):
                return done
            paths = self._promote(bundle)
            self.faults.at("after_deliver", bundle.bundle_id)
            self._commit(table, bundle, paths)
            return done

        try:
            return cas_loop()(attempt)
        except ConcurrentModification as err:
            raise DeliveryFailed(
                f"{self.describe()}: bundle {bundle.bundle_id} lost every commit race to "
                f"other writers of the table: {err}"
            ) from err

    def _holds(self, table: Table, bundle: Bundle) -> bool:
        last = last_bundle_of(table, self.pipeline_id)
        if last is None or last.bundle_id < bundle.bundle_id:
            return False
        if last.bundle_id > bundle.bundle_id:
            log.warning(
                "%s already holds bundle %d of pipeline %s: bundle %d is not appended again",
                self.describe(), last.bundle_id, self.pipeline_id, bundle.bundle_id,
            )  # fmt: skip
        return True

    def missing_parts(self, bundle: Bundle) -> tuple[str, ...]:
        """The parts neither staged nor already moved to their data files (an attempt
        moves them before it commits)."""
        return tuple(
            part.location
            for part in bundle.parts
            if not self.files.exists(part.location)
            and not self.files.exists(
                data_file_location(self.pipeline_id, bundle.epoch, part.location)
            )
        )

    def _promote(self, bundle: Bundle) -> list[str]:
        """Move the bundle's staged parts to their data files; their URIs, in order."""
        uris = []
        for part in bundle.parts:
            target = data_file_location(self.pipeline_id, bundle.epoch, part.location)
            if self.files.exists(part.location):
                self.files.move(part.location, target)
            elif not self.files.exists(target):
                raise StateError(
                    f"{self.describe()}: bundle {bundle.bundle_id} is not in the table and its "
                    f"staged part {part.location} is gone (no data file {target} either); the "
                    "bundle cannot be delivered"
                )
            uris.append(self.files.uri(target))
        return uris

    def _commit(self, table: Table, bundle: Bundle, paths: list[str]) -> None:
        """One catalog commit: the data files, the snapshot marker, the table property."""
        from pyiceberg.exceptions import CommitFailedException, ValidationException

        without_own_retries(table)
        tx = table.transaction()
        tx.set_properties({LAST_BUNDLE_PROPERTY + self.pipeline_id: last_bundle_property(bundle)})
        tx.add_files(
            paths, snapshot_properties=snapshot_marker(bundle), check_duplicate_files=False
        )
        try:
            tx.commit_transaction()
        except (CommitFailedException, ValidationException) as err:
            log.info("%s: bundle %d lost a commit race: %s", self.describe(), bundle.bundle_id, err)
            raise ConcurrentModification(
                self.files.location, "metadata", table.metadata_location
            ) from err
        except Exception as err:  # the commit was sent: it may have landed
            self._resolve_unknown(bundle, err)

    def _resolve_unknown(self, bundle: Bundle, err: Exception) -> None:
        """After a commit with an unknown outcome: return if the bundle landed, raise
        CommitStateUnknown otherwise (the barrier's redelivery asks again)."""
        try:
            landed = self._holds(load_table(self.settings), bundle)
        except Exception as read_err:
            raise CommitStateUnknown(
                f"{self.describe()}: the commit of bundle {bundle.bundle_id} may or may not have "
                f"landed ({type(err).__name__}: {err}) and the table cannot be read back "
                f"({type(read_err).__name__}: {read_err})"
            ) from err
        if not landed:
            raise CommitStateUnknown(
                f"{self.describe()}: the commit of bundle {bundle.bundle_id} failed with an "
                f"unknown outcome ({type(err).__name__}: {err}); it is not in the table now"
            ) from err
        log.info("%s: bundle %d landed despite %r", self.describe(), bundle.bundle_id, err)

    # --- recovery -----------------------------------------------------------------------

    def last_bundle(self) -> LastBundle | None:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            table = load_table(self.settings)
        except NoSuchTableError:
            return None
        return last_bundle_of(table, self.pipeline_id)

    def close(self) -> None:
        """Nothing to release: the catalog is shared by the process (a cache)."""

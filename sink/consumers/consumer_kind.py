"""What every consumer kind provides: options, settings, staging, start check, consumer, sweep.

A *kind* is one way of delivering bundles (``consumer=file``, ``kafka``, ``postgres``...).
:mod:`sink.consumers.registry` maps each value of the ``consumer`` option to its kind, and
nothing else in the product tells consumers apart by name. A kind

* declares its options once (:attr:`ConsumerKind.specs`); the sink's option table
  (:data:`sink.options.SINK_OPTIONS`) lists them, each applying only with the consumers
  whose kinds declare it;
* parses them into its own frozen settings dataclass (:meth:`ConsumerKind.parse`), which
  the sink's options carry as ``settings`` to every write task and commit (so the settings
  are small and picklable, and hold no client);
* says which rows its target would refuse (:meth:`ConsumerKind.validate`, a pure function
  of the rows and its settings, run in the write tasks);
* checks, when the query starts and before any data moves, that it can deliver
  (:meth:`ConsumerKind.check_at_start`), says where write tasks stage their parts
  (:meth:`ConsumerKind.open_staging`), opens the consumer in the commit process
  (:meth:`ConsumerKind.open_consumer`) and lists and deletes what its failed attempts left
  behind for ``gtbarrier sweep`` (:meth:`ConsumerKind.find_leftovers`).

A kind sees the sink's options through :class:`SinkView`, the fields every consumer shares
and its settings, not through :class:`sink.options.SinkOptions`: those options are parsed
through the registry, so a kind that named them would import itself back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import pyarrow as pa

from sink.consumers.base import Consumer
from sink.faults import FaultInjector
from sink.staging import Staging, StoreStaging
from state.layout import PipelineLayout
from state.option_table import OptionSpec
from state.options import Options
from state.stores import StateStore, StoreConfig


@dataclass(frozen=True)
class ConsumerSettings:
    """The base of every kind's parsed options (a frozen dataclass of its own)."""


S = TypeVar("S", bound=ConsumerSettings)


class SinkView(Protocol):
    """What a kind reads of the sink's options: the shared fields and its own settings."""

    @property
    def pipeline_id(self) -> str: ...

    @property
    def store(self) -> StoreConfig: ...

    @property
    def exactly_once(self) -> bool: ...

    @property
    def ack_timeout(self) -> float:
        """Seconds one delivery attempt waits for the consumer's acknowledgement."""

    @property
    def settings(self) -> ConsumerSettings: ...


@dataclass(frozen=True)
class RowRejection:
    """A row the consumer's target would refuse: its index in the table that was validated,
    the column at fault (None: the row as a whole) and why, in words an operator acts on
    (``"NUL character (0x00) in text"``, ``"record of 1,048,700 bytes with its headers
    exceeds max.request.size 1,048,576"``)."""

    row: int
    column: str | None
    reason: str


@dataclass(frozen=True)
class ConsumerLeftover:
    """Something of the consumer's own that no bundle needs any more (``gtbarrier sweep``).

    ``what`` is what the operator sees (``consumer temp file``...); ``location`` names it
    in the consumer (a path relative to its directory, a URI); ``kept`` marks one that may
    still be needed (a file of a bundle that may be in flight): listed, never deleted.
    """

    what: str
    location: str
    kept: bool = False


class ConsumerKind(ABC, Generic[S]):
    """One kind of consumer; see the module docstring. Instances are stateless singletons."""

    settings_type: type[S]
    """The frozen dataclass :meth:`parse` returns."""
    specs: tuple[OptionSpec, ...]
    """The kind's options, declared without ``only_with`` (the registry adds it)."""

    @abstractmethod
    def parse(self, opts: Options) -> S:
        """The kind's options, checked; a :class:`~state.errors.ConfigError` names the
        option, the value and what was expected. Called once the sink knows the options
        of other kinds are absent."""

    def settings(self, options: SinkView) -> S:
        """``options.settings``, which must be this kind's."""
        settings = options.settings
        if not isinstance(settings, self.settings_type):
            raise TypeError(
                f"{type(self).__name__}: settings of type {type(settings).__name__}, "
                f"expected {self.settings_type.__name__}"
            )
        return settings

    def check_at_start(self, options: SinkView, spark_schema: Any) -> S:
        """Called on the driver when the query plans its first micro-batch, before any
        data moves: refuse (with a ConfigError or DeliveryFailed naming what is wrong) what
        could never be delivered. Returns the settings the write tasks and commits receive:
        a kind may complete them (a table's location, say). By default: nothing to check."""
        return self.settings(options)

    def validate(self, settings: S, table: pa.Table) -> list[RowRejection]:
        """The rows of ``table`` (a write task's rows, in their staged order) that the
        target would refuse, by row index; by default none.

        Runs in the write tasks, before anything of the bundle is delivered. It must be a
        pure function of the rows and ``settings`` (no I/O: what it needs of the target,
        such as a topic's partition count or a table's column types, ``check_at_start``
        records in the settings), so that every replay with the same settings classifies
        the same rows the same way (when the settings change between attempts of a
        bundle, its first dead-letter file decides: :mod:`sink.barrier`). A failure that
        is not about a row (the target unreachable) is never a rejection: it stays a
        failed delivery, retried.
        """
        return []

    def open_staging(self, options: SinkView, store: StateStore) -> Staging:
        """Where write tasks stage their parts and the commit reads them back; by default
        the state store, under the pipeline's prefix."""
        return StoreStaging(store, PipelineLayout(options.pipeline_id))

    @abstractmethod
    def open_consumer(self, options: SinkView, staging: Staging, faults: FaultInjector) -> Consumer:
        """The consumer, in the commit process (never pickled); ``staging`` is what
        :meth:`open_staging` returned."""

    def consumer_path(self, options: SinkView) -> str | None:
        """The consumer's ``consumer.path`` (directory or prefix) if it has one, for the
        operator's commands."""
        return None

    def find_leftovers(self, options: SinkView) -> list[ConsumerLeftover]:
        """What the consumer's own failed attempts left behind (staged parts are the
        barrier's and are found apart). By default: nothing."""
        return []

    def delete_leftovers(
        self, options: SinkView, leftovers: Sequence[ConsumerLeftover]
    ) -> list[str]:
        """Delete ``leftovers`` (from :meth:`find_leftovers`, never one ``kept``); the
        locations deleted. Called only when no driver of the pipeline runs."""
        return []

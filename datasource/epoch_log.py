"""The source's durable records: the resolved start and the epoch log (docs/PROTOCOL.md).

* ``<pipeline>/source/start.json``: the initial offset, resolved once (``latest`` and
  timestamps become concrete offsets) and created once, so ``initialOffset()`` answers
  the same after a restart or on a new checkpoint.
* ``<pipeline>/epochs/<k>.json``: ``{"epoch": k, "start": {...}, "end": {...}}``, created
  before ``latestOffset`` returns ``end`` for ``start``; first writer wins. A replay of
  ``start`` gets the recorded end, whatever the read limit is now.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from datasource.offsets import SourceOffset
from state.errors import EpochLogConflict, KeyExists
from state.layout import PipelineLayout
from state.retry import Retry
from state.store import StateStore

STORE_RETRY = Retry(max_attempts=6, base_delay=0.1, max_delay=2.0, deadline=30.0)


@dataclass
class EpochLog:
    """Reads and creates the source's records in one pipeline's state."""

    store: StateStore
    layout: PipelineLayout
    retry: Retry = STORE_RETRY

    # --- the resolved start ----------------------------------------------------------

    def start(self) -> SourceOffset | None:
        """The persisted initial offset, if any."""
        hit = self.retry(lambda: self.store.get_json_or_none(self.layout.source_start))
        return None if hit is None else SourceOffset.from_json(hit[0])

    def create_start(self, offset: SourceOffset) -> SourceOffset:
        """Persist ``offset`` as the initial offset unless one exists; the one that won."""
        return self._create_or_get(self.layout.source_start, offset.to_json(), self._start_of)

    def _start_of(self, doc: object) -> SourceOffset:
        return SourceOffset.from_json(doc)

    # --- epochs ------------------------------------------------------------------------

    def recorded_end(self, start: SourceOffset) -> SourceOffset | None:
        """The end recorded for epoch ``start.epoch``, checked against ``start``."""
        key = self.layout.epoch(start.epoch)
        hit = self.retry(lambda: self.store.get_json_or_none(key))
        return None if hit is None else self._check(key, hit[0], start)

    def record(self, start: SourceOffset, end: SourceOffset) -> SourceOffset:
        """Create epoch ``start.epoch = (start, end)``; if it exists, the recorded end."""
        if end.epoch != start.epoch + 1:
            raise ValueError(f"epoch {start.epoch} must end at epoch {start.epoch + 1}, not {end}")
        key = self.layout.epoch(start.epoch)
        doc = {"end": end.to_json(), "epoch": start.epoch, "start": start.to_json()}
        return self._create_or_get(key, doc, lambda winner: self._check(key, winner, start))

    def _check(self, key: str, doc: object, start: SourceOffset) -> SourceOffset:
        if not isinstance(doc, dict) or not {"start", "end", "epoch"} <= set(doc):
            raise EpochLogConflict(f"{self.store.uri}/{key}: not an epoch record: {doc!r}")
        recorded_start = SourceOffset.from_json(doc["start"])
        if not recorded_start.same_as(start):
            raise EpochLogConflict(
                f"{self.store.uri}/{key}: epoch {start.epoch} is recorded as starting at "
                f"{recorded_start}, but Spark asked for the epoch starting at {start}. The "
                "checkpoint and the pipeline's epoch log describe different inputs; use a new "
                "pipeline.id or the checkpoint that belongs to this pipeline"
            )
        end = SourceOffset.from_json(doc["end"])
        if end.epoch != start.epoch + 1:
            raise EpochLogConflict(
                f"{self.store.uri}/{key}: recorded end {end} is not epoch {start.epoch + 1}"
            )
        return end

    def _create_or_get(
        self, key: str, doc: dict[str, object], parse: Callable[[object], SourceOffset]
    ) -> SourceOffset:
        try:
            self.retry(lambda: self.store.create_json(key, doc))
        except KeyExists:
            # Another writer (or our own earlier attempt whose answer was lost) won.
            winner, _ = self.retry(lambda: self.store.get_json(key))
            return parse(winner)
        return parse(doc)

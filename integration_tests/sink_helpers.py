"""Support for the sink's integration tests: reading what a file consumer wrote, and where
a pipeline's barrier stands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from state.layout import PipelineLayout
from state.protocol.barrier_state import read_barrier_state
from state.records.barrier import BarrierState, Owner
from state.stores import StateStore


def read_bundles(directory: Path | str, **kwargs: Any) -> pa.Table:
    """What a reader of a file consumer's directory sees (``_``/``.`` names skipped)."""
    return ds.dataset(str(directory), format="parquet", **kwargs).to_table()


class FileChainState:
    """What a chain of drivers into a file consumer at ``out`` left: the barrier state in
    ``store`` under ``layout``, the bundles, the consumer's pointer and staged parts."""

    store: StateStore
    layout: PipelineLayout
    out: Path

    def state(self) -> BarrierState:
        return read_barrier_state(self.store, self.layout)

    def progress(self) -> tuple[int, int | None]:
        """``(GT_last, the in-flight bundle's id or None)``."""
        s = self.state()
        return s.gt_last, None if s.inflight is None else s.inflight.bundle_id

    def owner(self) -> Owner:
        owner = self.state().owner
        assert owner is not None, "no driver claimed the pipeline yet"
        return owner

    def pointer(self) -> int | None:
        """The file consumer's last acknowledged bundle (its ``_last_bundle.json``)."""
        path = self.out / "_last_bundle.json"
        return json.loads(path.read_text())["bundle_id"] if path.exists() else None

    def bundle_files(self) -> list[int]:
        return sorted(int(p.name[7:19]) for p in self.out.glob("bundle-*.parquet"))

    def staged(self) -> list[Path]:
        return sorted((self.out / "_staging").rglob("*.parquet"))

"""Where each protocol record lives under ``<state.uri>/<pipeline.id>/``.

One function per record, so that the source, the sink and the coordinator can never
disagree on a key. Numbers are zero-padded so that listing order is numeric order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from state.errors import ConfigError

_PIPELINE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_PAD = 12
_CLAIM_NAME = re.compile(rf"(\d{{{_PAD}}})-(.+)\.json")


def validate_pipeline_id(pipeline_id: str | None, *, where: str = "") -> str:
    if pipeline_id is None or not _PIPELINE_ID.fullmatch(pipeline_id):
        raise ConfigError(
            "pipeline.id",
            pipeline_id,
            "1-200 characters of letters, digits, '.', '_' or '-', starting with a letter or digit",
            where=where,
        )
    return pipeline_id


@dataclass(frozen=True)
class PipelineLayout:
    pipeline_id: str

    @property
    def root(self) -> str:
        return self.pipeline_id

    # --- source ---------------------------------------------------------------
    @property
    def source_start(self) -> str:
        """The resolved starting frontier, written once (create-if-absent)."""
        return f"{self.root}/source/start.json"

    @property
    def source_floor(self) -> str:
        """Where the pruned epoch log begins (:mod:`state.protocol.epoch_floor`); absent
        until the first pruning."""
        return f"{self.root}/source/floor.json"

    @property
    def epochs_prefix(self) -> str:
        return f"{self.root}/epochs/"

    def epoch(self, k: int) -> str:
        """Epoch ``k``: ``{"epoch": k, "start": {...}, "end": {...}}``, first writer wins."""
        return f"{self.epochs_prefix}{k:0{_PAD}d}.json"

    @property
    def epoch_segments_prefix(self) -> str:
        return f"{self.epochs_prefix}segments/"

    def epoch_segment(self, first: int, end: int, digest: str) -> str:
        """Epochs ``[first, end)`` and their batch records compacted into one object,
        named by the digest of its bytes as well."""
        return f"{self.epoch_segments_prefix}{first:0{_PAD}d}-{end:0{_PAD}d}-{digest}.json"

    def batch(self, query_id: str, batch_id: int) -> str:
        """Which epoch Spark's batch ``batch_id`` of query ``query_id`` read."""
        return f"{self.root}/batches/{query_id}/{batch_id:0{_PAD}d}.json"

    def batches_prefix(self, query_id: str | None = None) -> str:
        return f"{self.root}/batches/" + (f"{query_id}/" if query_id else "")

    # --- barrier --------------------------------------------------------------
    @property
    def barrier_state(self) -> str:
        """``{"gt_last": k | -1, "inflight": {...} | null, "owner": {...}}``, every change a CAS."""
        return f"{self.root}/barrier/state.json"

    def barrier_run(self, run_id: str) -> str:
        """The marker of a run that claimed without a start generation (every run of a
        release before claims existed): created at its claim, never changed or pruned. A
        run whose marker exists but which is no longer the owner was superseded: fenced.
        """
        return f"{self.root}/barrier/runs/{run_id}.json"

    @property
    def barrier_claims_prefix(self) -> str:
        return f"{self.root}/barrier/claims/"

    def barrier_claim(self, generation: int, run_id: str) -> str:
        """Run ``run_id`` claimed the barrier as ``generation`` (created at the claim, pruned
        once the owner is far enough ahead); listing order is generation order."""
        return f"{self.barrier_claims_prefix}{generation:0{_PAD}d}-{run_id}.json"

    def claim_of(self, key: str) -> tuple[int, str] | None:
        """``(generation, run_id)`` of a key :meth:`barrier_claim` made; None for any other."""
        name = key.removeprefix(self.barrier_claims_prefix)
        match = _CLAIM_NAME.fullmatch(name)
        if name == key or match is None:
            return None
        return int(match.group(1)), match.group(2)

    def staging(self, query_id: str, batch_id: int) -> str:
        return f"{self.root}/staging/{query_id}/{batch_id:0{_PAD}d}/"

    @property
    def staging_prefix(self) -> str:
        return f"{self.root}/staging/"

    # --- coordinator ----------------------------------------------------------
    @property
    def snapshots_prefix(self) -> str:
        return f"{self.root}/snapshots/"

    def snapshot(self, snapshot_id: int) -> str:
        return f"{self.snapshots_prefix}{snapshot_id:0{_PAD}d}/"

    @property
    def snapshot_blobs_prefix(self) -> str:
        """Content-addressed checkpoint files shared by snapshots (incremental uploads)."""
        return f"{self.root}/snapshot-blobs/"

    @property
    def resume_point(self) -> str:
        """The resume point when no ZooKeeper is configured."""
        return f"{self.root}/resume.json"

    @property
    def driver(self) -> str:
        """``{"token": n, "owner": {...}}``: every driver that takes the pipeline bumps
        ``token`` (compare-and-swap); the sink fences commits with a lower token."""
        return f"{self.root}/coordinator/driver.json"

    # --- ZooKeeper (paths in the ensemble, not store keys) -----------------------
    @property
    def zookeeper_root(self) -> str:
        return f"/gtbarrier/{self.pipeline_id}"

    @property
    def zookeeper_resume(self) -> str:
        """The resume point ``{"epoch", "frontier", "batch_id", "manifest", ...}``."""
        return f"{self.zookeeper_root}/resume"

    @property
    def zookeeper_driver_lock(self) -> str:
        """The lock (kazoo ``Lock`` recipe) held by the one driver of the pipeline."""
        return f"{self.zookeeper_root}/driver"

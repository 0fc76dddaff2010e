"""A snapshot of a completed batch, from the checkpoint directory to the store and back:

* :mod:`~state.coordinator.snapshot.attempt`: the snapshot of one batch, from its
  checkpoint files to an accepted resume point, then pruning;
* :mod:`~state.coordinator.snapshot.files`: which checkpoint files a restart after a
  batch reads;
* :mod:`~state.coordinator.snapshot.packs` (pure): which stored files a snapshot
  references, and how the others are grouped into packs;
* :mod:`~state.coordinator.snapshot.write`: the packs uploaded and verified, then the
  manifest;
* :mod:`~state.coordinator.snapshot.restore`: a manifest read and checked, its files
  written into a checkpoint directory and swapped in whole;
* :mod:`~state.coordinator.snapshot.retention`: the snapshots not kept deleted, then the
  packs and blobs no kept manifest names.

When to snapshot is the scheduler's (:mod:`state.coordinator.scheduler`), the thread that
runs the snapshots the worker's (:mod:`state.coordinator.worker`), and whether a restart
uses a snapshot the recovery's (:mod:`state.coordinator.checkpoint_recovery`).

It imports nothing itself: each module is imported by its own name.
"""

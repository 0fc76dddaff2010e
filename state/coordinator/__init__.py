"""The snapshot coordinator (``SnapshotCoordinator``), one module per role:

* :mod:`~state.coordinator.snapshot_coordinator`: :class:`SnapshotCoordinator`, the class
  users call;
* :mod:`~state.coordinator.config`: the arguments, checked once (:class:`CoordinatorConfig`);
* :mod:`~state.coordinator.driver_ownership`: one driver per pipeline (lock, fencing token);
* :mod:`~state.coordinator.batches` and :mod:`~state.coordinator.listener`: completed
  micro-batches, from Spark's progress events;
* :mod:`~state.coordinator.scheduler`: which batch to snapshot, and when;
* :mod:`~state.coordinator.snapshot`: the snapshot of one batch, up to the resume point
  (``snapshot.attempt``), and its files written, restored and pruned;
* :mod:`~state.coordinator.worker`: the watched query and the snapshot thread;
* :mod:`~state.coordinator.recovery_future`: ``recover()`` as a cancellable future;
* :mod:`~state.coordinator.supervisor`: supervised runs with restarts.

Importing it loads neither pyspark nor kazoo (only the listener and ZooKeeper do).
"""

from state.coordinator.config import CoordinatorConfig
from state.coordinator.snapshot.attempt import SnapshotStats
from state.coordinator.snapshot_coordinator import SnapshotCoordinator

__all__ = ["CoordinatorConfig", "SnapshotCoordinator", "SnapshotStats"]

"""The snapshot coordinator (``SnapshotCoordinator``), one module per role:

* :mod:`~state.coordinator.facade`: :class:`SnapshotCoordinator`, the class users call;
* :mod:`~state.coordinator.config`: the arguments, checked once (:class:`CoordinatorConfig`);
* :mod:`~state.coordinator.ownership`: one driver per pipeline (lock, fencing token);
* :mod:`~state.coordinator.batches` and :mod:`~state.coordinator.listener`: completed
  micro-batches, from Spark's progress events;
* :mod:`~state.coordinator.scheduler`: which batch to snapshot, and when;
* :mod:`~state.coordinator.pipeline`: the snapshot of one batch, up to the resume point;
* :mod:`~state.coordinator.worker`: the watched query and the snapshot thread;
* :mod:`~state.coordinator.recover`: ``recover()`` as a cancellable future;
* :mod:`~state.coordinator.supervisor`: supervised runs with restarts.

Importing it loads neither pyspark nor kazoo (only the listener and ZooKeeper do).
"""

from state.coordinator.config import CoordinatorConfig
from state.coordinator.facade import SnapshotCoordinator
from state.coordinator.pipeline import SnapshotStats

__all__ = ["CoordinatorConfig", "SnapshotCoordinator", "SnapshotStats"]

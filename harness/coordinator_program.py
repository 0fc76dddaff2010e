"""The interface of the coordinator's driver program (``integration_tests/
coordinator_driver.py``), shared by its tests and the snapshot benchmark: its arguments,
its input records, and the barrier's ``GT_last`` that shows its progress.

Input record ``i`` has key ``b"k<i % KEYS>"`` and value ``b"<i>"``, in partition
``i % partitions``.
"""

from __future__ import annotations

from typing import Any

KEYS = 13


def driver_args(**options: Any) -> list[str]:
    """``coordinator_driver.py`` arguments: ``max_offsets=200`` -> ``--max-offsets 200``."""
    return [a for k, v in options.items() for a in (f"--{k.replace('_', '-')}", str(v))]


def produce(kafka: Any, topic: str, start: int, stop: int, partitions: int = 2) -> None:
    """Send records ``start`` to ``stop - 1`` through ``kafka`` (anything with
    :meth:`harness.kafka.KafkaHelper.produce`), in batches of 2000."""
    kafka.produce(
        topic,
        ((b"k%d" % (i % KEYS), b"%d" % i, None, i % partitions) for i in range(start, stop)),
        batch_size=2000,
    )


def gt_last(store: Any, pipeline: str) -> int:
    """The barrier's ``GT_last`` of ``pipeline`` in ``store`` (-1 before the first bundle)."""
    from state.layout import PipelineLayout
    from state.protocol.barrier_state import read_barrier_state

    return read_barrier_state(store, PipelineLayout(pipeline)).gt_last

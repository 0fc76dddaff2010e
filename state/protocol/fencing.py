"""Fencing tokens: a number that grows every time a driver takes a pipeline.

The driver record ``<pipeline>/coordinator/driver.json``
(:class:`~state.records.driver.DriverRecord`) is bumped with a compare-and-swap by every
driver that takes the pipeline, after it holds the ZooKeeper lock (with ZooKeeper) or
right away (without). The token travels to the barrier sink as the option
``fencing.token``; the sink refuses a commit whose token is lower than the one recorded in
the barrier state (:class:`PipelineFenced`). The coordinator also refuses to write a
resume point once a newer token exists.

The record also says whether the snapshot coordinator runs the pipeline
(:func:`coordinated`): the coordinator prunes the epoch log then, keeping the epochs of its
snapshots, and the driver's source never does. ``gtbarrier sweep --delete`` takes a token
too, to fence a driver still running; it leaves that answer as it was.

Right after taking its token the driver *claims the barrier*
(:meth:`state.protocol.barrier_state.BarrierStateStore.claim_driver`): it records itself,
with its token, as the barrier state's owner, before its query runs, so that a zombie
driver is refused at its next commit after the new driver took the pipeline.
"""

from __future__ import annotations

import os
import socket
import time

from state.errors import PipelineFenced
from state.layout import PipelineLayout
from state.records.codec import decode
from state.records.driver import NO_TOKEN, DriverOwner, DriverRecord
from state.retry import Retry, cas_loop
from state.stores import StateStore

#: The identity ``gtbarrier sweep`` takes tokens under (``gtbarrier-sweep:<host>:<pid>``).
SWEEP_IDENTITY = "gtbarrier-sweep"


def coordinated(record: DriverRecord | None) -> bool:
    """Whether a snapshot coordinator ever took a token of the pipeline (``record``, None:
    nobody took one), so that it, not the driver's source, prunes the epoch log.

    A record written before ``coordinated`` existed says only who took the last token:
    if that was ``gtbarrier sweep`` and the token is the first, no coordinator took one;
    otherwise one may have (an earlier token's taker is not recorded), and the answer is
    yes, so that a coordinator's snapshots never lose the epochs their restore needs.
    """
    if record is None:
        return False
    if record.coordinated is not None:
        return record.coordinated
    swept = record.owner is not None and record.owner.identifier.startswith(f"{SWEEP_IDENTITY}:")
    return not (swept and record.token == NO_TOKEN + 1)


def read_coordinated(store: StateStore, layout: PipelineLayout) -> bool:
    """:func:`coordinated` of the pipeline's driver record, read now."""
    return coordinated(read_driver_record(store, layout))


def read_driver_record(store: StateStore, layout: PipelineLayout) -> DriverRecord | None:
    """The driver record, or None before the first driver took the pipeline."""
    hit = store.get_or_none(layout.driver)
    if hit is None:
        return None
    return decode(hit.data, DriverRecord.from_json, f"{store.uri}/{layout.driver}")


def read_token(store: StateStore, layout: PipelineLayout) -> int:
    """The highest token handed out so far (0: none)."""
    record = read_driver_record(store, layout)
    return NO_TOKEN if record is None else record.token


def take_token(
    store: StateStore,
    layout: PipelineLayout,
    *,
    identifier: str = "",
    races: Retry | None = None,
    coordinator: bool = True,
) -> int:
    """Hand out the next token (compare-and-swap on the driver record).

    ``coordinator``: the taker is a snapshot coordinator's driver; the record says so
    from then on (:func:`coordinated`). ``gtbarrier sweep`` passes False and leaves the
    answer as it was. A lost race reads the record again, within ``races`` (default
    :func:`~state.retry.cas_loop`); the store retries its own requests.
    """
    owner = DriverOwner(
        host=socket.gethostname(), pid=os.getpid(), identifier=identifier, since=time.time()
    )

    def once() -> int:
        hit = store.get_or_none(layout.driver)
        if hit is None:
            taken = DriverRecord(NO_TOKEN + 1, owner, coordinated=coordinator)
            store.create_json(layout.driver, taken.to_json())
            return taken.token
        current = decode(hit.data, DriverRecord.from_json, f"{store.uri}/{layout.driver}")
        taken = DriverRecord(
            current.token + 1, owner, coordinated=coordinator or coordinated(current)
        )
        store.compare_and_swap_json(layout.driver, taken.to_json(), hit.version)
        return taken.token

    return (races or cas_loop())(once)


def check_token(store: StateStore, layout: PipelineLayout, token: int) -> None:
    """Raise :class:`PipelineFenced` if a driver with a higher token took the pipeline."""
    current = read_token(store, layout)
    if current > token:
        raise PipelineFenced(
            f"pipeline '{layout.pipeline_id}' was taken by a newer driver (fencing token "
            f"{current} > ours {token}); this driver must stop"
        )

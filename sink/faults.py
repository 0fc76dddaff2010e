"""Fault injection, a test-only hook: stop the protocol at a named step.

The hook is armed only by the environment variable ``GTBARRIER_FAULT``; it is not an
option of the sink, and without that variable no fault can fire (production code builds
its injector with :meth:`FaultInjector.from_environment` only). Set it in the driver's
environment *before* the SparkSession starts: Spark's Python workers inherit the JVM's
environment. Its value is ``<step>[:<n>]``, several separated by commas. ``n`` is the
bundle's epoch for commit steps and the Spark batch id for ``write_fail``; without ``n``
the fault fires every time.

Steps of the barrier protocol (driver, commit process); the action is SIGKILL of the whole
driver (see :func:`kill_driver`):

* ``before_inflight``  - the bundle is about to be recorded in flight (and, if it has
  rows its consumer's target refused, to have its dead-letter file written after that)
* ``after_dead_letters`` - recorded in flight and its dead-letter file written (and its
  topic messages sent), nothing delivered yet (only for a bundle with refused rows)
* ``after_inflight``   - recorded in flight (its dead letters written), nothing delivered yet
* ``after_deliver``    - the consumer holds (part of) the bundle, the ack has not arrived
  (file/s3: data promoted, pointer not yet replaced; kafka: half of the messages sent;
  http: the POST answered, before its status is read)
* ``after_consumer_commit`` - postgres: the bundle's transaction committed, the
  acknowledgement not yet returned (``after_deliver`` is before the COMMIT)
* ``after_ack``        - the consumer acknowledged, ``GT_last`` not yet advanced
* ``after_gt_last``    - ``GT_last`` advanced, before Spark writes its commit log

Other actions:

* ``deliver_error``    - the consumer raises on delivery of bundle ``n`` (every attempt)
* ``write_fail``       - a write task of batch ``n`` stages its part, then raises on its
  first attempt (Spark retries it when the master allows task retries, e.g. ``local[2,2]``)
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from state.errors import ConfigError, GtBarrierError

ENV = "GTBARRIER_FAULT"
KILL_STEPS = (
    "before_inflight",
    "after_dead_letters",
    "after_inflight",
    "after_deliver",
    "after_consumer_commit",
    "after_ack",
    "after_gt_last",
)
STEPS = (*KILL_STEPS, "deliver_error", "write_fail")


class InjectedFault(GtBarrierError):
    """Raised by the ``deliver_error`` and ``write_fail`` faults."""

    retriable = False


@dataclass(frozen=True)
class Fault:
    step: str
    n: int | None

    def matches(self, step: str, n: int | None) -> bool:
        return self.step == step and (self.n is None or self.n == n)


def parse_faults(spec: str, *, option: str = ENV, where: str = "") -> tuple[Fault, ...]:
    faults = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        step, _, num = item.partition(":")
        if step not in STEPS or (num and not num.strip().isdigit()):
            raise ConfigError(
                option, spec, f"'<step>[:<n>]' with step one of {', '.join(STEPS)}", where=where
            )
        faults.append(Fault(step, int(num) if num else None))
    return tuple(faults)


class FaultInjector:
    """The faults ``GTBARRIER_FAULT`` names, checked at each step; cheap when there are none.

    ``FaultInjector()`` is inert: unit tests subclass it to raise at a step of their
    choice. Only :meth:`from_environment` arms faults, from the environment variable.
    """

    def __init__(self) -> None:
        self._faults: tuple[Fault, ...] = ()

    @staticmethod
    def from_environment() -> FaultInjector:
        """The injector for ``GTBARRIER_FAULT``; inert when the variable is unset or blank."""
        injector = FaultInjector()
        spec = os.environ.get(ENV, "")
        if spec.strip():
            injector._faults = parse_faults(spec)
        return injector

    @property
    def faults(self) -> tuple[Fault, ...]:
        return self._faults

    def __bool__(self) -> bool:
        return bool(self._faults)

    def armed(self, step: str, n: int | None) -> bool:
        return any(f.matches(step, n) for f in self._faults)

    def at(self, step: str, n: int | None) -> None:
        """Fire the fault configured for ``step`` (and ``n``), if any."""
        if not self.armed(step, n):
            return
        if step in KILL_STEPS:
            kill_driver(f"{step}:{n}")
        raise InjectedFault(f"injected fault {step}:{n} ({ENV})")


def _stat(pid: int) -> tuple[str, int]:
    """``(comm, ppid)`` of a process from ``/proc``."""
    with open(f"/proc/{pid}/stat") as f:
        raw = f.read()
    comm = raw[raw.index("(") + 1 : raw.rindex(")")]
    ppid = int(raw[raw.rindex(")") + 2 :].split()[1])
    return comm, ppid


def driver_process_group() -> int:
    """The process group of the driver program that runs this Spark application.

    Spark's Python workers (also the commit process) are forked by ``pyspark.daemon``,
    which puts itself in a process group of its own; so the driver's group is found
    through the ancestry: the JVM is the first ``java`` ancestor and the driver program
    is its parent, which must lead its own process group (``start_new_session=True``),
    else the fault would kill whatever started the driver (a test runner, a shell).
    """
    pid = os.getpid()
    for _ in range(32):
        comm, ppid = _stat(pid)
        if comm == "java":
            pgid = os.getpgid(ppid)
            if pgid != ppid:
                raise RuntimeError(
                    f"fault injection: driver pid {ppid} does not lead its own process group "
                    f"(group {pgid}); start it with start_new_session=True"
                )
            return pgid
        if ppid <= 1:
            break
        pid = ppid
    raise RuntimeError("fault injection: no JVM among this process's ancestors")


def kill_driver(reason: str) -> None:
    """SIGKILL the driver program, its JVM and Spark's Python workers, now."""
    driver_group = driver_process_group()
    own_group = os.getpgrp()
    os.killpg(driver_group, signal.SIGKILL)
    if own_group != driver_group:
        os.killpg(own_group, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError(f"unreachable: killed by fault {reason}")

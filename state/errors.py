"""The one error hierarchy of gtbarrier, shared by ``datasource``, ``sink`` and ``state``.

Every error is either *retriable* (the same call may succeed later: a server was
unreachable, a request timed out) or *fatal* (retrying cannot help: bad options, a
lost race, a fenced driver). Callers decide with ``err.retriable``; the
:class:`state.retry.Retry` object only ever retries retriable errors.

Commit outcomes are kept apart, as pyiceberg does: :class:`CommitFailed` means the
commit did not happen and may be retried from the start; :class:`CommitStateUnknown`
means it may or may not have happened, and only recovery (asking the consumer for
its last bundle) can tell.
"""

from __future__ import annotations


class GtBarrierError(Exception):
    """Base of every error raised by gtbarrier."""

    retriable: bool = False


class RetriableError(GtBarrierError):
    """The operation may succeed if tried again."""

    retriable = True


class FatalError(GtBarrierError):
    """Retrying the same operation cannot succeed."""

    retriable = False


# --- configuration -----------------------------------------------------------------


class ConfigError(FatalError, ValueError):
    """An option is unknown, malformed, missing or in conflict with another.

    Raised before any data moves. The message names the option, the value given and
    what was expected.
    """

    def __init__(self, option: str, value: object, expected: str, *, where: str = "") -> None:
        self.option = option
        self.value = value
        self.expected = expected
        prefix = f"{where}: " if where else ""
        shown = "<missing>" if value is None else repr(value)
        super().__init__(f"{prefix}option '{option}' = {shown} is invalid: expected {expected}")


class UnknownOptionError(ConfigError):
    """Options that the component does not know."""

    def __init__(self, options: list[str], known: list[str], *, where: str = "") -> None:
        self.options = sorted(options)
        names = ", ".join(repr(o) for o in self.options)
        prefix = f"{where}: " if where else ""
        GtBarrierError.__init__(
            self,
            f"{prefix}unknown option(s) {names}; known options are: {', '.join(sorted(known))}",
        )
        self.option = self.options[0]
        self.value = None
        self.expected = "a known option"


class SecretReferenceError(ConfigError):
    """An option's secret reference (``${env:NAME}``, ``${file:/path}``,
    ``${file:/path:key}``) that cannot be resolved where the client is created. The
    message names the option and the reference, never a secret."""

    def __init__(self, option: str, reference: str, why: str, *, where: str = "") -> None:
        self.option = option
        self.value = reference
        self.expected = why
        prefix = f"{where}: " if where else ""
        GtBarrierError.__init__(
            self, f"{prefix}option '{option}': secret reference {reference} {why}"
        )


# --- state stores ------------------------------------------------------------------


class StateError(GtBarrierError):
    """A state store operation failed."""


class StoreConfigError(StateError, ConfigError):
    """The store URI or one of its options is wrong (fatal)."""

    def __init__(self, option: str, value: object, expected: str, *, where: str = "") -> None:
        ConfigError.__init__(self, option, value, expected, where=where)


class KeyNotFound(StateError, FatalError, KeyError):
    """``get`` of a key that does not exist."""

    def __init__(self, uri: str, key: str) -> None:
        self.uri = uri
        self.key = key
        Exception.__init__(self, f"{uri}: key '{key}' does not exist")

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class KeyExists(StateError, FatalError):
    """``create`` lost: the key already exists (someone else created it first)."""

    def __init__(self, uri: str, key: str) -> None:
        self.uri = uri
        self.key = key
        super().__init__(f"{uri}: key '{key}' already exists (create-if-absent lost the race)")


class ConcurrentModification(StateError, FatalError):
    """``compare_and_swap`` lost: the key's version is not the one expected."""

    def __init__(self, uri: str, key: str, expected: str | None, actual: str | None = None) -> None:
        self.uri = uri
        self.key = key
        self.expected_version = expected
        self.actual_version = actual
        seen = f", found {actual!r}" if actual is not None else ""
        super().__init__(
            f"{uri}: key '{key}' was modified concurrently: expected version {expected!r}{seen}"
        )


class StoreUnavailable(StateError, RetriableError):
    """The store could not be reached or answered with a transient error (retriable)."""

    def __init__(self, uri: str, key: str | None, cause: str) -> None:
        self.uri = uri
        self.key = key
        where = f" key '{key}'" if key else ""
        super().__init__(f"{uri}:{where} store unavailable: {cause}")


class StoreWriteUnknown(StoreUnavailable):
    """A conditional write may or may not have taken effect (retriable).

    The request was sent, the connection failed before the answer arrived, and the
    store stayed unreachable for the rest of the retry deadline. Re-read the key
    before deciding what to do; never assume either outcome.
    """


class MalformedRecord(StateError, FatalError, ValueError):
    """A stored protocol record (docs/PROTOCOL.md) is not in the documented format, or was
    written by a newer gtbarrier whose format this one does not know."""


class UnsupportedFormat(MalformedRecord):
    """A stored record's ``format`` is newer than this gtbarrier reads: a newer release
    wrote it. It is refused, never misread; the message names the record, its format and
    the formats this release supports. Run the release that wrote it (or a newer one), or
    restore the state this release wrote (docs/operations.md, "Upgrades").

    ``record`` names the record, ``found`` is its format, ``supported`` the highest
    format this release reads (it reads every format from 1 up to it).
    """

    def __init__(self, record: str, found: int, supported: int) -> None:
        self.record, self.found, self.supported = record, found, supported
        formats = "format 1" if supported == 1 else f"formats 1 to {supported}"
        super().__init__(
            f"{record}: format {found} is not supported: this gtbarrier reads {formats} "
            f"(the record was written by a newer gtbarrier)"
        )


# --- protocol outcomes -------------------------------------------------------------


class CommitFailed(FatalError):
    """The commit did not happen; nothing was delivered or recorded."""


class CommitStateUnknown(GtBarrierError):
    """The commit may or may not have taken effect; resolve by asking the consumer.

    Retriable in the sense that a restart of the query resolves it through the
    barrier's in-flight record.
    """

    retriable = True


class DeliveryUnsettled(CommitStateUnknown):
    """A delivery's outcome cannot be known in this process: messages it handed to a
    client may still land. Not retried in-process (a redelivery would race them); the
    query stops and its restart resolves the bundle through the in-flight record."""

    retriable = False


class StaleState(CommitFailed):
    """A compare-and-swap from a *remembered* barrier state lost: the state changed since
    this process remembered it. Nothing was written; the barrier starts the commit again
    from a read (docs/PROTOCOL.md, "A commit's decisions"), so it never leaves a commit."""


class PipelineFenced(FatalError):
    """Another driver owns this pipeline; this one must stop (a zombie)."""


class EpochLogConflict(FatalError):
    """The epoch log disagrees with the offsets Spark asked about (a different input)."""


class OffsetLogMismatch(StateError, FatalError):
    """Spark's offset log names a gtkafka offset for a batch that the epoch log does not
    record as that epoch's end (a checkpoint of another pipeline, or a reset state)."""


class SegmentGone(StateError, RetriableError):
    """An epoch segment that the floor record named when it was read is gone: a
    compaction merged it, or a pruning deleted it, since. Reading the floor again names
    where its epochs are now."""


class EpochsPruned(FatalError):
    """The epochs a query asks for were pruned from the epoch log (below its floor): a
    checkpoint older than the retained window, or a new checkpoint that would replay from
    the start."""


class MalformedOffset(FatalError, ValueError):
    """An offset that Spark handed back is not in the source's format (e.g. a checkpoint
    written by another source)."""


class DataLossError(FatalError):
    """Offsets that a batch needs are gone from Kafka (retention, deleted topic)."""


class SourceUnavailable(RetriableError):
    """The Kafka cluster could not be reached or did not answer in time."""


class DeliveryFailed(RetriableError):
    """The consumer did not acknowledge a bundle within the retries allowed."""


class RowsRefused(FatalError):
    """Rows of a bundle that the consumer's target refuses, found by the validation
    before anything of the bundle is delivered, with ``errors.tolerance=none``.

    Fatal: validation is a pure function of the rows, so every replay refuses the same
    rows. The message names the bundle (its epoch), the first refused row's ``gt``, the
    column and the reason; ``errors.tolerance=all`` writes such rows to dead letters.
    """


class CoordinationError(GtBarrierError):
    """ZooKeeper or snapshot coordination failed."""


# --- snapshot coordination ---------------------------------------------------------


class ZooKeeperUnavailable(CoordinationError, RetriableError):
    """ZooKeeper could not be reached, or the session is suspended (retriable)."""


class DriverLockHeld(PipelineFenced, CoordinationError):
    """Another driver holds this pipeline's driver lock; this one may not run it."""


class GenerationSuperseded(PipelineFenced, CoordinationError):
    """``recover(mode="replay")`` began a newer generation of the resume point after this
    driver started: it may run the previous version of the query, so it does not take the
    pipeline (nothing written); it must be restarted with the current program."""


class SnapshotIncomplete(CoordinationError, RetriableError):
    """A checkpoint file vanished while a snapshot copied it; the next batch is tried."""


class SnapshotCorrupted(CoordinationError, FatalError):
    """A snapshot's manifest or one of its files does not match its recorded checksum."""


class ResetAttemptsExhausted(CoordinationError, FatalError):
    """A supervised query failed more consecutive times than it is allowed to."""

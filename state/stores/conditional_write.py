"""A conditional write whose answer may be lost, for the object stores that tag each write.

The ``gs://`` and ``az://`` stores (and, in its own code, ``s3://``) write every object with
a random token in its metadata. A conditional write (create-if-absent or compare-and-swap)
is retried under the store's :class:`~state.retry.Retry` when it fails in a way that is
retriable; if an attempt failed *after* its request was sent, the write may have happened,
and the retry then meets a failed precondition caused by our own write. So after such an
ambiguous attempt, a failed precondition is resolved by reading the object's token back:

* our token: the earlier attempt wrote; its version is returned (we won);
* another token, or no object: the key does not hold our write now (it never took effect,
  or another writer replaced it since); the loss is reported with :data:`SUPERSEDED` as a
  note;
* the store stays unreachable: :class:`~state.errors.StoreWriteUnknown` says the outcome is
  unknown.

Pure control flow over callables: the stores supply the request, the read-back and the
classification of their SDK's errors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from state.errors import (
    ConcurrentModification,
    GtBarrierError,
    KeyExists,
    StoreUnavailable,
    StoreWriteUnknown,
)
from state.retry import Retry

SUPERSEDED = (
    "an earlier attempt of this write failed after it was sent; the key does not hold "
    "that write now (it never took effect, or another writer has replaced it since)"
)


class PreconditionNotMet(Exception):
    """Raised by a store's single write attempt when the server refused it because the
    condition did not hold (the key exists, or has another version, or is absent)."""


class WriteFailed(Exception):
    """Raised by a store's single write attempt for any other failure: ``error`` is the
    failure as gtbarrier's error (its ``__cause__`` the SDK's error); ``maybe_written``
    whether the request may have taken effect (it was sent and no answer came back, or the
    server failed after acting)."""

    def __init__(self, error: GtBarrierError, *, maybe_written: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.maybe_written = maybe_written


@dataclass(frozen=True)
class ReadBack:
    """What the object holds now: the token of its last write (None if it has none) and
    its version."""

    token: str | None
    version: str


def conditional_write(  # noqa: PLR0913 - keyword-only parts of one write
    *,
    uri: str,
    key: str,
    expected: str | None,
    retry: Retry,
    write_once: Callable[[], str],
    read_back: Callable[[], ReadBack | None],
    token: str,
) -> str:
    """Run ``write_once`` (create if ``expected`` is None, else compare-and-swap against
    ``expected``) under ``retry``; the new version.

    ``write_once`` returns the new version or raises :class:`PreconditionNotMet` or
    :class:`WriteFailed`; ``read_back`` returns the object's :class:`ReadBack` (None if
    absent) or raises a gtbarrier error. Raises :class:`KeyExists` /
    :class:`ConcurrentModification` for a lost race, :class:`StoreWriteUnknown` when an
    ambiguous attempt was followed only by failures, or the error of a failure that is not
    retriable.
    """
    ambiguous = False

    def lost(actual: str | None, note: str = "") -> GtBarrierError:
        err: GtBarrierError = (
            KeyExists(uri, key)
            if expected is None
            else ConcurrentModification(uri, key, expected, actual)
        )
        if note:
            err.add_note(note)
        return err

    def attempt() -> str:
        nonlocal ambiguous
        try:
            return write_once()
        except PreconditionNotMet as refused:
            if not ambiguous:
                raise lost(None) from None
            now = read_back()
            if now is not None and now.token == token:
                return now.version  # our earlier attempt did write
            raise lost(None if now is None else now.version, SUPERSEDED) from refused
        except WriteFailed as failed:
            if failed.error.retriable and failed.maybe_written:
                ambiguous = True
            raise failed.error from failed.error.__cause__

    try:
        return retry(attempt)
    except StoreUnavailable as err:
        if not ambiguous or isinstance(err, StoreWriteUnknown):
            raise
        what = "create" if expected is None else "compare-and-swap"
        raise StoreWriteUnknown(
            uri,
            key,
            f"{what} may or may not have taken effect: the connection failed after the "
            f"request was sent, then {err}",
        ) from err

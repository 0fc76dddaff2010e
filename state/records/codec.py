"""The one JSON codec of the protocol's records: canonical bytes out, checked fields in.

Every record is written as canonical JSON (:func:`dumps`: sorted keys, no whitespace), so
equal records are equal bytes (a snapshot manifest's SHA-256 relies on it). Decoding goes
through :class:`Fields`, whose errors name the record, the field, the value found and
what was expected (:class:`~state.errors.MalformedRecord`).

Records whose format may evolve carry ``"format": n``. A record without the field was
written before it existed and is format 1; a format above the one this code knows was
written by a newer gtbarrier and is refused (:class:`~state.errors.UnsupportedFormat`)
rather than misread. Every reader decodes every format from 1 up to its own, and each
earlier shape of a record keeps a golden fixture in ``tests/golden/records/``.

Fields a reader does not know are ignored, in every record: a release may add a field
without a new format only when a reader that ignores it still reads the record right (as
``topic_ids`` of the epoch record and ``dead_letters`` of the in-flight bundle were
added). A change an older reader must not ignore takes a new format, which is why a
record that may change that way carries the field; the records without one (the batch
record, the run marker, the driver record, the source offset) can only gain such
ignorable fields, or be given a ``format`` field first.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from typing import Any, TypeVar

from state.errors import GtBarrierError, MalformedRecord, UnsupportedFormat

R = TypeVar("R")
JsonObject = dict[str, Any]

FORMAT_FIELD = "format"


def dumps(value: Any) -> bytes:
    """Canonical JSON: sorted keys, no whitespace, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def decode(data: bytes, from_json: Callable[[object], R], where: str) -> R:
    """Parse stored bytes with a record's ``from_json``; errors name ``where`` it was read."""
    try:
        raw = json.loads(data)
    except ValueError as err:
        raise MalformedRecord(f"{where}: not a JSON document: {err}") from None
    try:
        return from_json(raw)
    except GtBarrierError as err:
        err.add_note(f"while reading {where}")
        raise


class _Required(enum.Enum):
    TOKEN = 0


REQUIRED = _Required.TOKEN


class Fields:
    """Typed access to the fields of one JSON object being decoded.

    ``record`` names the record in errors (``"barrier state"``); ``error`` is the error
    type raised (:class:`MalformedRecord` unless a record has its own). Integers must be
    JSON integers (not booleans, not strings); numbers may be integers or floats. A
    field that is absent takes ``default``; without a default it is required. A field
    that is present with ``null`` is accepted only by the ``optional_*`` accessors.
    """

    def __init__(
        self,
        raw: object,
        record: str,
        *,
        error: Callable[[str], GtBarrierError] = MalformedRecord,
    ) -> None:
        self.record = record
        self._error = error
        if not isinstance(raw, dict):
            raise error(f"{record}: expected a JSON object, found {_show(raw)}")
        self.raw: JsonObject = raw

    def invalid(self, name: str, expected: str) -> GtBarrierError:
        """The error for field ``name`` not holding ``expected``."""
        if name not in self.raw:
            return self._error(f"{self.record}: field '{name}' is missing (expected {expected})")
        return self._error(
            f"{self.record}: field '{name}' = {_show(self.raw[name])} is invalid: "
            f"expected {expected}"
        )

    def format(self, supported: int, *, required: bool = False) -> int:
        """The record's format, from 1 up to ``supported`` (this release's).

        Absent, it is 1 (the record was written before the field existed), unless
        ``required`` (a record that has always carried it). Above ``supported``, a newer
        gtbarrier wrote it: :class:`~state.errors.UnsupportedFormat`, naming the record,
        its format and the formats supported, rather than a misreading.
        """
        fmt = self.integer(FORMAT_FIELD, REQUIRED if required else 1, minimum=1)
        if fmt > supported:
            raise UnsupportedFormat(self.record, fmt, supported)
        return fmt

    def integer(
        self, name: str, default: int | _Required = REQUIRED, *, minimum: int | None = None
    ) -> int:
        value = self._get(name, default, "an integer")
        expected = "an integer" if minimum is None else f"an integer >= {minimum}"
        if not _is_int(value) or (minimum is not None and value < minimum):
            raise self.invalid(name, expected)
        return int(value)

    def optional_integer(self, name: str, *, minimum: int | None = None) -> int | None:
        if self.raw.get(name) is None:
            return None
        return self.integer(name, minimum=minimum)

    def number(self, name: str, default: float | _Required = REQUIRED) -> float:
        value = self._get(name, default, "a number")
        if not (_is_int(value) or isinstance(value, float)):
            raise self.invalid(name, "a number")
        return float(value)

    def string(self, name: str, default: str | _Required = REQUIRED) -> str:
        value = self._get(name, default, "a string")
        if not isinstance(value, str):
            raise self.invalid(name, "a string")
        return value

    def optional_string(self, name: str) -> str | None:
        return None if self.raw.get(name) is None else self.string(name)

    def boolean(self, name: str, default: bool | _Required = REQUIRED) -> bool:
        value = self._get(name, default, "true or false")
        if not isinstance(value, bool):
            raise self.invalid(name, "true or false")
        return value

    def array(self, name: str, default: list[Any] | _Required = REQUIRED) -> list[Any]:
        value = self._get(name, default, "a JSON array")
        if not isinstance(value, list):
            raise self.invalid(name, "a JSON array")
        return value

    def value(self, name: str) -> Any:
        """Any JSON value (``None`` if absent): for fields another codec decodes."""
        return self.raw.get(name)

    def required(self, name: str, expected: str) -> Any:
        """A field that must be present and not null; ``expected`` describes it."""
        value = self.raw.get(name)
        if value is None:
            raise self.invalid(name, expected)
        return value

    def _get(self, name: str, default: object, expected: str) -> Any:
        if name in self.raw:
            return self.raw[name]
        if default is REQUIRED:
            raise self.invalid(name, expected)
        return default


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _show(value: object) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."

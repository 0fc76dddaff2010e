"""Typed, case-insensitive access to Spark data source options.

Each component parses its options exactly once, in its ``DataSource`` constructor or
``streamReader``/``streamWriter``, into a frozen dataclass, reading them through the specs
of its option table (:mod:`state.option_table`). This module is the one place that turns
strings into typed values and raises :class:`state.errors.ConfigError` naming the
option, the value and what was expected.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar, overload

from state.errors import ConfigError, UnknownOptionError

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*", re.IGNORECASE)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}

# Options Spark itself passes to every data source; never reported as unknown.
SPARK_PASSTHROUGH = frozenset({"path", "paths", "checkpointlocation", "queryname"})

L = TypeVar("L", bound=str)


class Options:
    """A case-insensitive view of raw string options with typed accessors.

    ``where`` names the component in error messages (e.g. ``"gtkafka"``).
    """

    def __init__(self, raw: Mapping[str, str], *, where: str) -> None:
        self.where = where
        self._raw: dict[str, tuple[str, str]] = {}
        for key, value in raw.items():
            self._raw[key.lower()] = (key, value)

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._raw

    def raw(self, name: str) -> str | None:
        hit = self._raw.get(name.lower())
        return None if hit is None else hit[1]

    def names(self) -> list[str]:
        """The options as the user spelled them."""
        return [orig for orig, _ in self._raw.values()]

    def items(self) -> list[tuple[str, str]]:
        """``(name as spelled, value)`` of every option."""
        return list(self._raw.values())

    def with_prefix(self, prefix: str) -> dict[str, str]:
        """Options under ``prefix`` with the prefix removed (names lower-cased)."""
        p = prefix.lower()
        return {k[len(p) :]: v for k, (_, v) in self._raw.items() if k.startswith(p) and k != p}

    def check_known(self, known: Iterable[str], prefixes: Iterable[str] = ()) -> None:
        """Raise :class:`UnknownOptionError` for any option not in ``known`` or under a prefix."""
        known_l = {k.lower() for k in known} | SPARK_PASSTHROUGH
        prefixes_l = tuple(p.lower() for p in prefixes)
        unknown = [
            orig
            for low, (orig, _) in self._raw.items()
            if low not in known_l and not low.startswith(prefixes_l)
        ]
        if unknown:
            shown = sorted(known) + [p + "*" for p in prefixes]
            raise UnknownOptionError(unknown, shown, where=self.where)

    def error(self, name: str, expected: str) -> ConfigError:
        return ConfigError(name, self.raw(name), expected, where=self.where)

    @overload
    def string(self, name: str, default: str, *, required: bool = False) -> str: ...
    @overload
    def string(self, name: str, default: None = None, *, required: bool = False) -> str | None: ...
    def string(
        self, name: str, default: str | None = None, *, required: bool = False
    ) -> str | None:
        value = self._nonblank(name)
        if value is None:
            if required:
                raise self._missing(name)
            return default
        return value

    def required(self, name: str) -> str:
        value = self._nonblank(name)
        if value is None:
            raise self._missing(name)
        return value

    def _nonblank(self, name: str) -> str | None:
        value = self.raw(name)
        return None if value is None or value.strip() == "" else value.strip()

    def _missing(self, name: str) -> ConfigError:
        return self.error(name, "a non-empty value (this option is required)")

    @overload
    def integer(
        self, name: str, default: int, *, minimum: int | None = None, maximum: int | None = None
    ) -> int: ...
    @overload
    def integer(
        self,
        name: str,
        default: None = None,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | None: ...
    def integer(
        self,
        name: str,
        default: int | None = None,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | None:
        value = self.raw(name)
        if value is None:
            return default
        try:
            parsed = int(value.strip())
        except ValueError:
            raise self.error(name, _range_text("an integer", minimum, maximum)) from None
        if (minimum is not None and parsed < minimum) or (maximum is not None and parsed > maximum):
            raise self.error(name, _range_text("an integer", minimum, maximum))
        return parsed

    @overload
    def boolean(self, name: str, default: bool) -> bool: ...
    @overload
    def boolean(self, name: str, default: None) -> bool | None: ...
    def boolean(self, name: str, default: bool | None) -> bool | None:
        value = self.raw(name)
        if value is None:
            return default
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise self.error(name, "true or false")

    def choice(self, name: str, choices: Sequence[L], default: L) -> L:
        """One of ``choices`` (matched case-insensitively), spelled as in ``choices``."""
        value = self.raw(name)
        if value is None:
            return default
        low = value.strip().lower()
        for c in choices:
            if c.lower() == low:
                return c
        raise self.error(name, "one of " + ", ".join(repr(c) for c in choices))

    @overload
    def duration(self, name: str, default: float) -> float: ...
    @overload
    def duration(self, name: str, default: None) -> float | None: ...
    def duration(self, name: str, default: float | None) -> float | None:
        """Seconds, from ``"250ms"``, ``"30s"``, ``"5m"``, ``"1h"`` or a bare number of seconds."""
        value = self.raw(name)
        if value is None:
            return default
        return parse_duration(value, option=name, where=self.where)

    def exactly_one_of(self, *names: str) -> str:
        """The one option of ``names`` that is set; an error if none or several are."""
        present = [n for n in names if self.string(n) is not None]
        if len(present) != 1:
            given = ", ".join(present) if present else "none"
            raise ConfigError(
                "/".join(names),
                given,
                "exactly one of " + ", ".join(repr(n) for n in names),
                where=self.where,
            )
        return present[0]


def parse_duration(value: str | float | int, *, option: str, where: str = "") -> float:
    """Seconds from a duration such as ``"30s"``, ``"500ms"``, ``"2m"``, or a number of seconds."""
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        m = _DURATION.fullmatch(value)
        if not m:
            raise ConfigError(option, value, "a duration such as '500ms', '30s', '5m'", where=where)
        seconds = float(m.group(1)) * _UNIT_SECONDS[(m.group(2) or "s").lower()]
    if seconds < 0:
        raise ConfigError(option, value, "a non-negative duration", where=where)
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest of ``"15m"``, ``"30s"``, ``"500ms"`` that :func:`parse_duration` reads back."""
    if seconds == 0:
        return "0s"
    for unit, size in (("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    millis = seconds * 1000
    return f"{int(millis)}ms" if millis == int(millis) else f"{seconds}s"


def _range_text(kind: str, minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"{kind} between {minimum} and {maximum}"
    if minimum is not None:
        return f"{kind} >= {minimum}"
    if maximum is not None:
        return f"{kind} <= {maximum}"
    return kind

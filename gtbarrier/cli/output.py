"""What a command prints: titled tables for people, one JSON document with ``--json``.

A command returns a :class:`Result`: ``data`` (plain JSON values, the ``--json`` output)
and the :class:`Table` s that show the same facts to a person.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Table:
    """A titled table; ``header=False``: rows only (a ``field value`` list)."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    empty: str = "(none)"
    header: bool = True

    @classmethod
    def fields(cls, title: str, pairs: Sequence[tuple[str, Any]]) -> Table:
        """A two-column ``field value`` list, without a header."""
        return cls(title, ("field", "value"), tuple((k, v) for k, v in pairs), header=False)


@dataclass(frozen=True)
class Result:
    """A command's answer: ``data`` for ``--json``, ``tables`` for people."""

    data: dict[str, Any]
    tables: tuple[Table, ...] = field(default_factory=tuple)


def cell(value: Any) -> str:
    """How a value reads in a table: ``-`` for None, ``yes``/``no``, JSON for containers."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


def render_table(table: Table) -> str:
    """``table`` as text: the title, then an aligned grid (or the ``empty`` note)."""
    lines = [table.title]
    if not table.rows:
        lines.append(f"  {table.empty}")
        return "\n".join(lines)
    grid = [list(table.columns) if table.header else [""] * len(table.columns)]
    grid += [[cell(v) for v in row] for row in table.rows]
    widths = [max(len(r[i]) for r in grid) for i in range(len(table.columns))]

    def line(values: list[str]) -> str:
        return "  " + "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    if table.header:
        lines.append(line(grid[0]))
        lines.append("  " + "  ".join("-" * w for w in widths))
    lines.extend(line(r) for r in grid[1:])
    return "\n".join(lines)


def render(result: Result, *, as_json: bool) -> str:
    """The text to print for ``result``."""
    if as_json:
        return json.dumps(result.data, indent=2, sort_keys=True, default=str)
    return "\n\n".join(render_table(t) for t in result.tables)

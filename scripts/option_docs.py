"""The option tables of README.md and docs/, rendered from the components' option tables,
and the metrics table of docs/operations.md, rendered from the metric definitions.

    python -m scripts.option_docs            print every table
    python -m scripts.option_docs --check    exit 1 when a document differs from the code
    python -m scripts.option_docs --write    rewrite the tables in the documents

A table sits between ``<!-- options:<name> -->`` and ``<!-- /options:<name> -->``; what
is between the markers is replaced. To document a new table, add it to :data:`TABLES`,
put the markers where it belongs and list the file in :data:`DOCS`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from datasource.options import SOURCE_OPTIONS
from sink.options import SINK_OPTIONS
from state.coordinator.config import PARAMETERS
from state.metrics.definitions import markdown_table as metrics_table
from state.option_table import HEADERS, Documented, render_markdown
from state.stores import STORE_OPTIONS

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "python -m scripts.option_docs --write"


@dataclass(frozen=True)
class Table:
    """Rows to render (option specs, or any :class:`~state.option_table.Documented`)."""

    rows: Sequence[Documented]
    origin: str  # where the rows are declared, named in the generated block
    headers: tuple[str, ...] = HEADERS


TABLES: dict[str, Table] = {
    "gtkafka": Table(SOURCE_OPTIONS.entries, "SOURCE_OPTIONS in datasource/options.py"),
    "barrier": Table(SINK_OPTIONS.entries, "SINK_OPTIONS in sink/options.py"),
    "state": Table(STORE_OPTIONS.entries, "STORE_OPTIONS in state/stores/state_store.py"),
    "coordinator": Table(
        PARAMETERS, "PARAMETERS in state/coordinator/config.py", ("argument", "default", "meaning")
    ),
}

#: The README's short tables: the options most pipelines set (the full tables are in docs/).
KEY_OPTIONS: dict[str, tuple[str, ...]] = {
    "gtkafka": (
        "kafka.bootstrap.servers",
        "subscribe",
        "startingOffsets",
        "maxOffsetsPerTrigger",
        "failOnDataLoss",
        "pipeline.id",
        "state.uri",
    ),
    "barrier": (
        "pipeline.id",
        "state.uri",
        "consumer",
        "consumer.path",
        "delivery",
        "errors.tolerance",
        "errors.deadLetter.path",
        "fencing.token",
    ),
}


def key_table(name: str) -> Table:
    """The rows of table ``name`` that :data:`KEY_OPTIONS` names, in its order."""
    table = TABLES[name]
    rows = {row.doc_row().name.strip("`"): row for row in table.rows}
    missing = [option for option in KEY_OPTIONS[name] if option not in rows]
    if missing:
        raise ValueError(f"KEY_OPTIONS[{name!r}] names options {name} does not have: {missing}")
    return Table([rows[o] for o in KEY_OPTIONS[name]], table.origin, table.headers)


TABLES |= {f"key-{name}": key_table(name) for name in KEY_OPTIONS}

#: Tables rendered by a function of their own (not option rows), and where they come from.
RENDERED: dict[str, tuple[Callable[[], str], str]] = {
    "metrics": (metrics_table, "METRICS in state/metrics/definitions.py"),
}

# Each document (relative to the repository root) and the tables it holds.
DOCS: dict[str, tuple[str, ...]] = {
    "docs/operations.md": ("metrics",),
    "README.md": ("key-gtkafka", "key-barrier"),
    "docs/source.md": ("gtkafka",),
    "docs/sink.md": ("barrier",),
    "docs/state-stores.md": ("state",),
    "docs/coordinator.md": ("coordinator",),
}


def render(name: str) -> str:
    """The block between the markers of table ``name``."""
    if name in RENDERED:
        table_of, origin = RENDERED[name]
        note = f"<!-- generated from {origin} by {COMMAND}; edit the definitions there -->"
        return f"{note}\n\n{table_of()}"
    table = TABLES[name]
    note = f"<!-- generated from {table.origin} by {COMMAND}; edit the table there -->"
    return f"{note}\n\n{render_markdown(table.rows, table.headers)}\n"


def replace_block(text: str, name: str, block: str, *, doc: str = "document") -> str:
    """``text`` with what lies between the markers of ``name`` replaced by ``block``."""
    start, end = f"<!-- options:{name} -->", f"<!-- /options:{name} -->"
    if text.count(start) != 1 or text.count(end) != 1:
        raise ValueError(f"{doc}: expected exactly one {start} ... {end} pair")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    return f"{head}{start}\n{block}{end}{tail}"


def updated(root: Path, doc: str) -> str:
    """The text ``doc`` should have: its tables rendered from the code."""
    text = (root / doc).read_text()
    for name in DOCS[doc]:
        text = replace_block(text, name, render(name), doc=doc)
    return text


def stale(root: Path = ROOT) -> list[str]:
    """The documents whose option tables differ from the code."""
    return [doc for doc in DOCS if updated(root, doc) != (root / doc).read_text()]


def write(root: Path = ROOT) -> list[str]:
    """Rewrite the stale documents; the ones rewritten."""
    changed = stale(root)
    for doc in changed:
        (root / doc).write_text(updated(root, doc))
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.option_docs", description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 if a document is stale")
    mode.add_argument("--write", action="store_true", help="rewrite the stale documents")
    args = parser.parse_args(argv)
    if args.write:
        for doc in write():
            print(f"rewrote {doc}")
        return 0
    if args.check:
        docs = stale()
        for doc in docs:
            print(f"{doc}: option tables differ from the code; run {COMMAND}", file=sys.stderr)
        return 1 if docs else 0
    for name in [*TABLES, *RENDERED]:
        print(f"<!-- options:{name} -->\n{render(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

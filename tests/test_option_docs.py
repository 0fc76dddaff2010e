"""The option tables in README.md and docs/ are the ones the code declares."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from datasource.options import SOURCE_OPTIONS
from scripts import option_docs
from sink.options import SINK_OPTIONS
from state.option_table import DocRow, OptionTable, render_markdown
from state.options import format_duration
from state.stores.state_store import (
    S3_CONNECT_TIMEOUT,
    S3_OPTIONS,
    S3_READ_TIMEOUT,
    S3_RETRY_DEADLINE,
    STORE_OPTIONS,
)

COMPONENT_TABLES: tuple[OptionTable, ...] = (SOURCE_OPTIONS, SINK_OPTIONS, STORE_OPTIONS)


def test_docs_match_the_option_tables() -> None:
    stale = option_docs.stale()
    assert not stale, f"{stale}: option tables differ from the code; run {option_docs.COMMAND}"


def block(doc: str, name: str) -> str:
    text = (option_docs.ROOT / doc).read_text()
    return text.split(f"<!-- options:{name} -->")[1].split(f"<!-- /options:{name} -->")[0]


def test_every_option_is_documented() -> None:
    for table in COMPONENT_TABLES:
        assert table.component in option_docs.TABLES, f"table {table.component} is not rendered"
        docs = [d for d, names in option_docs.DOCS.items() if table.component in names]
        assert docs, f"table {table.component} is in no document"
        documented = "".join(
            block(d, name) for d, names in option_docs.DOCS.items() for name in names
        )
        for spec in table.specs():
            assert spec.name_cell() in documented, f"{spec.name} is not documented"
            assert spec.doc.strip() and "\n" not in spec.doc, f"{spec.name}: a one-line doc"
    # The shared s3.* options are listed in full in the state store's table.
    state = block("docs/state-stores.md", "state")
    assert all(f"| `{name}` |" in state for name in S3_OPTIONS.names())


def copy_docs(tmp_path: Path) -> Path:
    for doc in option_docs.DOCS:
        (tmp_path / doc).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(option_docs.ROOT / doc, tmp_path / doc)
    return tmp_path


def test_drift_is_found_and_rewritten(tmp_path: Path) -> None:
    root = copy_docs(tmp_path)
    assert option_docs.stale(root) == []
    readme = root / "README.md"
    text = readme.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `delivery` |"))
    readme.write_text(text.replace(row + "\n", ""))  # an option missing from the docs
    sink = root / "docs/sink.md"
    sink.write_text(sink.read_text().replace("| `30000` |", "| `60000` |"))  # a wrong default
    assert option_docs.stale(root) == ["README.md", "docs/sink.md"]
    assert option_docs.write(root) == ["README.md", "docs/sink.md"]
    assert option_docs.stale(root) == []
    assert readme.read_text() == text


def test_markers_are_required() -> None:
    with pytest.raises(ValueError, match=r"README\.md: expected exactly one <!-- options:x -->"):
        option_docs.replace_block("no markers", "x", "table\n", doc="README.md")
    twice = "<!-- options:x -->\n<!-- /options:x -->\n" * 2
    with pytest.raises(ValueError, match="exactly one"):
        option_docs.replace_block(twice, "x", "table\n")
    once = "intro\n<!-- options:x -->\nold\n<!-- /options:x -->\nrest\n"
    assert option_docs.replace_block(once, "x", "new\n") == (
        "intro\n<!-- options:x -->\nnew\n<!-- /options:x -->\nrest\n"
    )


def test_the_renderer_takes_any_documented_rows() -> None:
    """The coordinator's parameter list can be rendered the same way (as DocRows)."""
    rows = [DocRow("`retain`", "`3`", "snapshots kept"), DocRow("`a|b`", "", "x")]
    table = option_docs.Table(rows, "a test", headers=("argument", "default", "meaning"))
    assert render_markdown(table.rows, table.headers) == (
        "| argument | default | meaning |\n|---|---|---|\n"
        "| `retain` | `3` | snapshots kept |\n| `a\\|b` |  | x |\n"
    )
    with pytest.raises(ValueError, match="one line"):
        render_markdown([DocRow("`x`", "", "two\nlines")])


def test_documented_s3_defaults_are_the_stores() -> None:
    from state.stores.s3_store import (
        DEFAULT_CONNECT_TIMEOUT,
        DEFAULT_READ_TIMEOUT,
        DEFAULT_RETRY_DEADLINE,
    )

    for spec, seconds in [
        (S3_CONNECT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT),
        (S3_READ_TIMEOUT, DEFAULT_READ_TIMEOUT),
        (S3_RETRY_DEADLINE, DEFAULT_RETRY_DEADLINE),
    ]:
        assert spec.default_doc == f"`{format_duration(seconds)}`", spec.name

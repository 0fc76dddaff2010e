"""Support for the sink's integration tests: reading what a file consumer wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds


def read_bundles(directory: Path | str, **kwargs: Any) -> pa.Table:
    """What a reader of a file consumer's directory sees (``_``/``.`` names skipped)."""
    return ds.dataset(str(directory), format="parquet", **kwargs).to_table()

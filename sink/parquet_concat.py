"""Combine a bundle's staged Parquet parts into the one file a consumer shows.

Parts listed in delivery order (``Bundle.ordered``) are copied row group by row group;
otherwise they are merged and sorted by ``gt``. Returns the item bytes read by this process.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from sink.bundle import Bundle
from sink.gt import sort_by_gt


def concat_parts_to_file(bundle: Bundle, paths: Sequence[str], out_path: str) -> int:
    moved = 0
    with open(out_path, "wb") as out:
        if bundle.ordered:
            writer: pq.ParquetWriter | None = None
            for path in paths:
                pf = pq.ParquetFile(path)
                if writer is None:
                    writer = pq.ParquetWriter(out, pf.schema_arrow)
                for i in range(pf.num_row_groups):
                    writer.write_table(pf.read_row_group(i))
                moved += os.path.getsize(path)
            if writer is not None:
                writer.close()
        else:
            table = pa.concat_tables([pq.read_table(p) for p in paths])
            moved = sum(os.path.getsize(p) for p in paths)
            pq.write_table(sort_by_gt(table) if bundle.has_gt else table, out)
        out.flush()
        os.fsync(out.fileno())
    return moved

"""The dead-letter files' reader, in the short-lived processes that use it (the CLI)."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness.process import REPO_ROOT, repo_env
from sink.dead_letters.dead_letter_format import dead_letter_name

# pyarrow's threaded Parquet reader leaves pool threads that abort the interpreter at
# exit ("terminate called without an active exception", -6) in about one exit of thirty
# here; 60 exits find that with a probability of about 0.88.
PROCESSES = 60

# An S3 destination's reader parses the object's bytes in memory; a memory:// store has
# the same reader without a server.
READ_AND_EXIT = """
import sys
from pathlib import Path
from sink.dead_letters.dead_letter_files import open_dead_letters
destination = open_dead_letters("memory://dead-letters")
name = Path(sys.argv[1]).name
destination.store.create(name, Path(sys.argv[1]).read_bytes())
print(destination.read(1).num_rows)
"""


def test_a_process_that_read_a_dead_letter_file_exits_cleanly(tmp_path: Path) -> None:
    rows = 5000
    table = pa.table({"gt": list(range(rows)), "value": [f"row {i}" for i in range(rows)]})
    path = tmp_path / dead_letter_name(1)
    pq.write_table(table, path)

    def read_once(_: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", READ_AND_EXIT, str(path)],
            check=False,
            cwd=REPO_ROOT,
            env=repo_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        done = list(pool.map(read_once, range(PROCESSES)))
    failed = [(d.returncode, d.stderr[-300:]) for d in done if d.returncode != 0]
    assert not failed, f"{len(failed)} of {PROCESSES} exits failed: {failed[:3]}"
    assert {d.stdout.strip() for d in done} == {str(rows)}

"""``python -m scripts.notebooks`` (``make notebooks``): run the notebooks and store them
with their outputs.

Each notebook is cleared, executed top to bottom in a fresh kernel (it starts the
harness's servers itself unless ``GTB_KAFKA_BOOTSTRAP`` / ``GTB_S3_ENDPOINT`` /
``GTB_ZK_HOSTS`` name running ones) and written back with its outputs, so a reader on a
code host sees the tables and plots of a real run. Paths of the machine that ran them
(the checkout, the virtualenv, the home directory) are replaced by ``<repo>``,
``<venv>`` and ``~`` in the outputs, and what went to stderr (Spark's and the JVM's logs,
the Python workers' broken pipes when a query stops) is not stored: an error raised by a
cell is an ``error`` output, which is.
Runs set ``GTBARRIER_LOG_LEVEL=WARNING`` unless it is set (gtbarrier's per-batch INFO
lines would fill the stored outputs). The notebook's metadata records when and from which
commit it was run
(``metadata.gtbarrier``); ``tests/test_notebook_outputs.py`` checks that every stored
notebook ran completely, in order and without an error.

    python -m scripts.notebooks                       # all of them, their default sizes
    python -m scripts.notebooks 01_quickstart.ipynb   # one
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO_ROOT / "notebooks"
CELL_TIMEOUT_S = 1800


def clear(nb: Any) -> None:
    """Remove every output and execution count (the state a run starts from)."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None


def scrub(text: str, replacements: list[tuple[str, str]]) -> str:
    for old, new in replacements:
        text = text.replace(old, new)
    return text


def scrub_outputs(nb: Any, replacements: list[tuple[str, str]]) -> None:
    """Drop stderr streams; replace this machine's paths in every other textual output."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.outputs = [
            o for o in cell.outputs if not (o["output_type"] == "stream" and o["name"] == "stderr")
        ]
        for out in cell.outputs:
            if "text" in out:
                out["text"] = scrub(out["text"], replacements)
            if "traceback" in out:
                out["traceback"] = [scrub(line, replacements) for line in out["traceback"]]
            data = out.get("data", {})
            for mime in ("text/plain", "text/html", "text/markdown"):
                if mime in data:
                    data[mime] = scrub(data[mime], replacements)


def path_replacements() -> list[tuple[str, str]]:
    """This checkout, the virtualenv and the home directory, longest first (one may lie in
    another); both the paths as given and as resolved (a symlinked ``.venv``)."""
    venv = Path(sys.prefix)
    pairs = [
        (str(venv.resolve()), "<venv>"),
        (str(venv), "<venv>"),
        (str(REPO_ROOT), "<repo>"),
        (str(Path.home()), "~"),
    ]
    return sorted((p for p in pairs if len(p[0]) > 1), key=lambda p: -len(p[0]))


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def run(path: Path, timeout: int) -> float:
    """Execute ``path`` from a cleared state and write it back with its outputs."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
    clear(nb)
    started = time.monotonic()
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()
    took = time.monotonic() - started
    scrub_outputs(nb, path_replacements())
    nb.metadata["gtbarrier"] = {
        "executed": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit(),
        "seconds": round(took, 1),
    }
    nbformat.write(nb, path)  # type: ignore[no-untyped-call]
    return took


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scripts.notebooks", description=__doc__)
    p.add_argument("names", nargs="*", help="notebook file names (default: all)")
    p.add_argument("--timeout", type=int, default=CELL_TIMEOUT_S, help="seconds per cell")
    p.add_argument(
        "--scrub-only",
        action="store_true",
        help="do not run: apply the stderr and path scrubbing to the stored outputs",
    )
    a = p.parse_args(argv)
    # gtbarrier's per-batch INFO lines (lag, decisions) would fill the stored outputs of
    # the benchmarks' runs; the kernels and everything they start inherit this.
    os.environ.setdefault("GTBARRIER_LOG_LEVEL", "WARNING")
    paths = [NOTEBOOKS / n for n in a.names] or sorted(NOTEBOOKS.glob("*.ipynb"))
    for path in paths:
        if not path.is_file():
            p.error(f"no notebook {path.name} in notebooks/")
    if a.scrub_only:
        import nbformat

        for path in paths:
            nb = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
            scrub_outputs(nb, path_replacements())
            nbformat.write(nb, path)  # type: ignore[no-untyped-call]
        return 0
    for path in paths:
        print(f"running {path.name} ...", flush=True)
        took = run(path, a.timeout)
        print(f"  {path.name}: done in {took:.0f}s, stored with its outputs", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

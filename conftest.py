"""Markers follow from where a test lives; no test module sets them by hand.

* ``tests/``: ``unit`` (pure logic, no servers);
* ``integration_tests/``: ``integration`` (real Kafka, S3, ZooKeeper or Spark);
* ``integration_tests/test_notebooks.py``: ``notebook`` as well.

``slow`` and timeouts stay on the tests (or modules) they belong to.

Slow tests run first. ``make test`` runs the suite on two workers (pytest-xdist's
``--dist load --maxschedchunk 1``), which hand out tests one at a time, in collection
order, to whichever worker is free: started first, the long tests overlap each other
and the many short ones fill the gaps, instead of one long test running alone at the
end. (Without ``--maxschedchunk 1``, pytest-xdist first sends each worker a quarter of
its share in one consecutive chunk, and one worker would get every slow test.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent

# (path relative to the repository root, marker); a test gets every marker whose path
# is its file or a directory above it.
PLACES = (
    ("tests", "unit"),
    ("integration_tests", "integration"),
    ("integration_tests/test_notebooks.py", "notebook"),
)


def markers_for(path: Path) -> list[str]:
    """The markers of a test defined in ``path`` (none outside the repository)."""
    try:
        rel = path.resolve().relative_to(ROOT)
    except ValueError:
        return []
    return [marker for place, marker in PLACES if rel.is_relative_to(place)]


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for marker in markers_for(item.path):
            item.add_marker(marker)
    # A stable sort: within each group, the collection order is kept.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)

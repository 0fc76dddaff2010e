"""Print how many tests each pytest marker selects (collection only; nothing runs).

Usage: python scripts/count_tests.py [paths...]   (default: tests integration_tests)
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections import Counter

import pytest

MARKERS = ("unit", "integration", "notebook", "slow", "volume")


class Tally:
    def __init__(self) -> None:
        self.by_marker: Counter[str] = Counter()
        self.total = 0
        self.unmarked: list[str] = []

    # After the root conftest.py has added the markers that follow from a test's directory.
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            self.total += 1
            names = {m.name for m in item.iter_markers()}
            self.by_marker.update(names & set(MARKERS))
            if not names & {"unit", "integration", "notebook"}:
                self.unmarked.append(item.nodeid)


def main(argv: list[str]) -> int:
    tally = Tally()
    paths = argv or ["tests", "integration_tests"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *paths], [tally])
    if rc != 0:
        sys.stdout.write(out.getvalue())
        return int(rc)
    for marker in MARKERS:
        print(f"{marker:12} {tally.by_marker[marker]}")
    print(f"{'all':12} {tally.total}")
    if tally.unmarked:
        print(f"without unit/integration/notebook marker: {len(tally.unmarked)}")
        for nodeid in tally.unmarked:
            print(f"  {nodeid}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The harness prints the tail of registered server logs when (and only when) a test fails."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from harness.process import repo_env

CONFTEST = 'pytest_plugins = ["integration_tests.fixtures.logs"]\n'

TESTS = textwrap.dedent(
    """
    from pathlib import Path

    import pytest

    from harness.logs import register_log

    @pytest.fixture
    def server(tmp_path):
        log = tmp_path / "server.log"
        log.write_text("".join(f"server line {i}\\n" for i in range(500)))
        register_log("fake server", log, fixture="server")
        yield log

    @pytest.fixture
    def other(tmp_path):
        log = tmp_path / "other.log"
        log.write_text("other server line\\n")
        register_log("other server", log, fixture="other")
        yield log

    def test_passes(server, other):
        assert server.read_text().startswith("server line 0")
        assert other.read_text() == "other server line\\n"

    def test_fails(server):
        assert False, "boom"
    """
)


def test_failure_report_carries_the_log_tail(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_fake.py").write_text(TESTS)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=repo_env({"GTB_LOG_TAIL_LINES": "200"}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "1 failed, 1 passed" in out
    assert "fake server: last 200 lines of" in out
    assert "server line 499" in out
    assert "server line 300" in out
    assert "server line 299\n" not in out  # only the last 200 lines
    # The failing test does not use the `other` fixture: its log is not shown.
    assert "other server line" not in out

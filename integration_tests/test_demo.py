"""The demo command (`make demo` runs `python -m demo`) works end to end."""

from __future__ import annotations

import pytest

from integration_tests.fixtures.process import REPO_ROOT, DriverRunner

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(420)]


def test_foundation_demo_runs_end_to_end(
    driver: DriverRunner, tmp_path_factory: pytest.TempPathFactory
) -> None:
    workdir = tmp_path_factory.mktemp("demo")
    proc = driver.run(
        REPO_ROOT / "demo" / "__main__.py", "--records", "2000", "--workdir", str(workdir)
    )
    assert proc.wait(360) == 0, proc.output()[-4000:]
    out = proc.output()
    assert "produced 2,000 orders" in out
    assert "read 2,000 rows through the gtkafka source" in out
    assert "a second create of the same key was refused (KeyExists)" in out
    assert "wrote znode /gtbarrier/demo/foundation/summary" in out
    assert "stopped Spark, ZooKeeper, S3 and Kafka" in out

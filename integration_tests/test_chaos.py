"""The chaos run's short version: about 10 faults drawn from a fixed seed, against real
servers (``python -m integration_tests.chaos --quick``, docs/chaos.md). Every round must
deliver exactly once: nothing lost, nothing duplicated, stateful results equal to the
failure-free reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from integration_tests.chaos.__main__ import run
from integration_tests.chaos.options import QUICK_FAULTS, QUICK_SIZING, ChaosOptions

pytestmark = pytest.mark.slow

# Drawn rounds (docs/chaos.md), until 10 faults were injected: keyed -> http (killed at
# after_ack, two Python workers killed), keyed -> s3 (killed at after_ack, S3 resets),
# windowed -> postgres (S3 resets and latency), stateless -> http (lost S3 answers, resets,
# a 503), stateless -> kafka (killed at after_deliver, S3 faults)...
SEED = 968


@pytest.mark.timeout(1500)
def test_quick_chaos_run_is_exactly_once(tmp_path: Path) -> None:
    summary = run(
        ChaosOptions(
            seed=SEED,
            out=tmp_path / "chaos",
            faults=QUICK_FAULTS,
            sizing=QUICK_SIZING,
            cluster_share=0.0,
        )
    )
    assert summary.faults >= QUICK_FAULTS - 2, summary
    assert (summary.lost, summary.duplicated, summary.differing) == (0, 0, 0), summary.failures
    assert summary.clean, "\n".join(summary.failures)
    assert (tmp_path / "chaos" / "chaos.json").is_file()
    assert (tmp_path / "chaos" / "chaos.png").is_file()

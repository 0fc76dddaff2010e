"""benchmarks.read_path's synthetic mode runs and both decoders read every record."""

from __future__ import annotations

import pytest

from benchmarks import read_path


def test_synthetic_run_reads_every_record(capsys: pytest.CaptureFixture[str]) -> None:
    runs = read_path.synthetic(9_000)
    assert [r.mode for r in runs] == ["kafka-python parse only", "record_rows parse only"]
    assert all(r.records == 9_000 for r in runs)
    read_path.main(["--synthetic", "--records", "4000", "--repeat", "1"])
    assert "record_rows parse only" in capsys.readouterr().out

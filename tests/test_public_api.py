"""The public face of the ``gtbarrier`` package: what it exports and the version it
reports. A change to either is a change users see, so it is made here on purpose."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

import gtbarrier
from gtbarrier.cli import main

#: ``gtbarrier.__all__`` as released: adding a name is a feature, removing one a break.
PUBLIC = {
    "CommitFailed",
    "CommitStateUnknown",
    "ConfigError",
    "DeliveryFailed",
    "FatalError",
    "GtBarrierError",
    "LostBundle",
    "PipelineFenced",
    "RetriableError",
    "SnapshotCoordinator",
    "__version__",
    "configure_logging",
    "errors",
    "kafka_ends",
    "register_all",
    "resolve_lost_inflight",
}


def test_the_public_exports_are_pinned() -> None:
    assert set(gtbarrier.__all__) == PUBLIC
    assert len(gtbarrier.__all__) == len(PUBLIC), "a name is exported twice"


def test_every_export_resolves() -> None:
    for name in gtbarrier.__all__:
        assert getattr(gtbarrier, name) is not None, name


def test_the_version_is_the_installed_distributions() -> None:
    version = gtbarrier.__version__
    assert isinstance(version, str)
    assert version == importlib.metadata.version("gtbarrier")
    major, minor, *_ = version.split(".")
    assert major.isdigit() and minor.isdigit(), version


def test_the_cli_prints_its_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"gtbarrier {gtbarrier.__version__}"


def test_python_dash_m_gtbarrier_prints_its_version() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gtbarrier", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"gtbarrier {gtbarrier.__version__}"

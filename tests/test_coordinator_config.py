"""The coordinator's argument table matches its signature; the config is frozen."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest

from state.coordinator import CoordinatorConfig, SnapshotCoordinator
from state.coordinator.config import PARAMETERS, REQUIRED


def test_every_argument_is_documented_with_its_default() -> None:
    params = inspect.signature(SnapshotCoordinator.__init__).parameters
    public = {n: p for n, p in params.items() if n not in ("self", "store")}  # store: tests only
    assert [p.name for p in PARAMETERS] == list(public)
    for p in PARAMETERS:
        default = public[p.name].default
        assert p.default == (REQUIRED if default is inspect.Parameter.empty else default), p.name
        assert p.doc and "\n" not in p.doc and p.type


def test_config_is_parsed_once_and_frozen(tmp_path: Path) -> None:
    config = CoordinatorConfig.from_arguments(
        "p1", "memory://cfg", tmp_path / "cp", snapshot_period="2m", driver_wait=5
    )
    assert (config.snapshot_period, config.driver_wait, config.retain) == (120.0, 5.0, 3)
    assert config.layout.pipeline_id == "p1" and config.store.uri == "memory://cfg"
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.retain = 4  # type: ignore[misc]
    coord = SnapshotCoordinator(None, "p1", "memory://cfg", tmp_path / "cp", retain=5)
    assert coord.config.retain == coord.retain == 5
    coord.close()

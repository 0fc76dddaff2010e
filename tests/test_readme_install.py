"""README.md's Install section says what pyproject.toml declares: how to install from a
clone and from a wheel built with ``python -m build``, every extra a user can ask for, and
the Java and PySpark versions (the wheel itself: integration_tests/test_packaging.py)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from gtbarrier._version import __version__

ROOT = Path(__file__).resolve().parent.parent
#: Extras for working on gtbarrier itself, not for running it.
DEVELOPER_EXTRAS = frozenset({"test", "notebooks"})


def project() -> dict[str, object]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    section: dict[str, object] = data["project"]
    return section


def install_section() -> str:
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"^## Install\n(.*?)^## ", readme, re.DOTALL | re.MULTILINE)
    assert match, "README.md has no ## Install section"
    return match.group(1)


def user_extras() -> set[str]:
    extras = project()["optional-dependencies"]
    assert isinstance(extras, dict)
    return set(extras) - DEVELOPER_EXTRAS


def test_every_user_extra_is_named_in_the_install_table() -> None:
    named: set[str] = set()
    for row in re.findall(r"^\| (`[^|]+`) \|", install_section(), re.MULTILINE):
        named.update(re.findall(r"`([a-z-]+)`", row))
    assert named == user_extras(), (
        f"README Install table names {sorted(named)}, pyproject.toml declares "
        f"{sorted(user_extras())}"
    )


def test_all_is_every_user_extra() -> None:
    extras = project()["optional-dependencies"]
    assert isinstance(extras, dict)
    [spec] = extras["all"]
    members = set(re.fullmatch(r"gtbarrier\[(.*)\]", spec).group(1).split(","))  # type: ignore[union-attr]
    assert members == user_extras() - {"all"}


def test_install_shows_a_clone_and_a_built_wheel_with_an_extra() -> None:
    text = install_section()
    assert "pip install ." in text
    assert "python -m build --wheel" in text
    wheel = re.search(
        r"pip install '(dist/gtbarrier-([^-]+)-py3-none-any\.whl)\[([a-z,]+)\]'", text
    )
    assert wheel, "README Install: no `pip install 'dist/gtbarrier-<version>-...whl[extra]'`"
    assert wheel.group(2) == __version__, "README Install names another version's wheel"
    assert set(wheel.group(3).split(",")) <= user_extras()


def test_install_names_the_java_and_pyspark_versions() -> None:
    text = install_section()
    dependencies = project()["dependencies"]
    assert isinstance(dependencies, list)
    [pyspark] = [d for d in dependencies if d.startswith("pyspark")]
    floor = re.search(r">=([0-9.]+)", pyspark).group(1)  # type: ignore[union-attr]
    assert f"PySpark {floor}" in text
    assert re.search(r"Java 17\b", text)


def test_the_readme_stays_under_250_lines() -> None:
    """The README is the front page: the options, the protocol and the figures live in
    docs/, which it links to."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines; move detail into docs/"

"""The release this tree is: the one place the version is written (pyproject.toml reads it,
CHANGELOG.md describes it)."""

__version__ = "0.1.0"

"""The notebooks are stored with the outputs of a complete run (``make notebooks``): every
code cell ran, in order, none failed, the plots are there, and no output names a path of
the machine that ran them. Notebooks 01 and 02 import nothing of the project but
gtbarrier's public face, except in the branch they take in a clone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scripts.notebooks import NOTEBOOKS, path_replacements

PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
MIN_IMAGES = {
    "01_quickstart.ipynb": 0,
    "02_exactly_once_under_failure.ipynb": 2,
    "03_performance.ipynb": 2,
}


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def code_cells(nb: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def test_there_are_notebooks() -> None:
    assert [p.name for p in PATHS][:3] == [
        "01_quickstart.ipynb",
        "02_exactly_once_under_failure.ipynb",
        "03_performance.ipynb",
    ]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_every_cell_ran_in_order(path: Path) -> None:
    counts = [c["execution_count"] for c in code_cells(load(path))]
    assert counts == list(range(1, len(counts) + 1)), (
        f"{path.name}: execution counts {counts}; run `make notebooks` and commit the result"
    )


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_no_cell_failed(path: Path) -> None:
    for i, cell in enumerate(code_cells(load(path))):
        for out in cell.get("outputs", []):
            assert out["output_type"] != "error", f"{path.name}, code cell {i}: {out.get('ename')}"
            assert "Traceback (most recent call last)" not in "".join(out.get("text", "")), (
                f"{path.name}, code cell {i} printed a traceback"
            )


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_plots_are_stored(path: Path) -> None:
    images = [
        o
        for c in code_cells(load(path))
        for o in c.get("outputs", [])
        if "image/png" in o.get("data", {})
    ]
    assert len(images) >= MIN_IMAGES.get(path.name, 1), f"{path.name}: {len(images)} plot(s)"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_run_is_recorded_without_machine_paths(path: Path) -> None:
    nb = load(path)
    assert {"executed", "commit"} <= set(nb["metadata"].get("gtbarrier", {})), path.name
    text = path.read_text()
    for machine_path, _ in path_replacements():
        assert machine_path not in text, f"{path.name} names {machine_path}"


PROJECT_PACKAGES = ("benchmarks", "datasource", "demo", "gtbarrier", "harness", "sink", "state")


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_every_project_name_a_notebook_imports_exists(path: Path) -> None:
    """The notebooks run only in the integration tier: a module moved or a name renamed
    would otherwise be found there, 30 minutes into the suite."""
    import ast
    import importlib

    for i, cell in enumerate(code_cells(load(path))):
        lines = "".join(cell["source"]).splitlines()
        # IPython's magics and shell escapes are not Python.
        tree = ast.parse("\n".join(ln for ln in lines if not ln.lstrip().startswith(("%", "!"))))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module.split(".")[0] not in PROJECT_PACKAGES:
                    continue
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), (
                        f"{path.name}, code cell {i}: {node.module} has no {alias.name}"
                    )
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in PROJECT_PACKAGES:
                        importlib.import_module(alias.name)


#: Notebooks a user runs with the installed package against servers they name: what they
#: import of this project is gtbarrier's public face; the demo's modules (servers, the demo
#: job) only in a branch taken in a clone.
PACKAGE_NOTEBOOKS = ("01_quickstart.ipynb", "02_exactly_once_under_failure.ipynb")
PUBLIC_MODULES = ("gtbarrier",)
CLONE_ONLY_PACKAGES = ("demo",)


def project_imports(tree: Any) -> list[tuple[str, bool]]:
    """``(module, nested)`` for each import of a project package in ``tree``; ``nested``:
    inside an ``if`` (a branch the notebook takes only in a clone), not at a cell's top."""
    import ast

    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, nested: bool) -> None:
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found.extend((n, nested) for n in names if n.split(".")[0] in PROJECT_PACKAGES)
        for child in ast.iter_child_nodes(node):
            visit(child, nested or isinstance(node, ast.If))

    visit(tree, False)
    return found


@pytest.mark.parametrize("name", PACKAGE_NOTEBOOKS)
def test_package_notebooks_import_only_the_public_api(name: str) -> None:
    """A user who installed the wheel has no ``demo``, ``harness`` or ``benchmarks``, and
    ``state``, ``sink`` and ``datasource`` are internal even though the wheel ships them."""
    import ast

    for i, cell in enumerate(code_cells(load(NOTEBOOKS / name))):
        lines = "".join(cell["source"]).splitlines()
        tree = ast.parse("\n".join(ln for ln in lines if not ln.lstrip().startswith(("%", "!"))))
        for module, nested in project_imports(tree):
            if module in PUBLIC_MODULES:
                continue
            assert nested and module.split(".")[0] in CLONE_ONLY_PACKAGES, (
                f"{name}, code cell {i} imports {module}: only {PUBLIC_MODULES} at a cell's "
                f"top, {CLONE_ONLY_PACKAGES} only in a branch taken in a clone"
            )

"""The import layering, read from the source with ``ast`` (nothing is imported).

    gtbarrier                   the public face and composition root
    datasource     sink         the Spark adapters; neither imports the other
    state.coordinator           the snapshot coordinator (only gtbarrier imports it)
    state.metrics               the metrics: definitions, reading, families, server
    state.protocol              one module per shared record, and its rules
    state.stores                the store contract, its implementations, the factory
    state                       the kernel: retries, options, layout, caches, timing
    state.records               the stored records and their codecs
    state.errors                the one error hierarchy (lowest)

Imports only point down. The product (these packages) imports nothing from the tests,
the harness, the demo, the benchmarks or the simulation; those import nothing from the
tests and not pytest. A store implementation imports only the store contract (and its own
helper modules, held to the same rule), never the factory that opens it. Every import
counts for these rules and for cycles, also one inside a function or under
``TYPE_CHECKING``: no package's modules form an import cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("gtbarrier", "datasource", "sink", "state")
NOT_PRODUCT = ("tests", "integration_tests", "harness", "demo", "benchmarks", "simulation")
SUPPORT = ("harness", "demo", "benchmarks", "simulation")

# package -> packages it must not import
FORBIDDEN: dict[str, set[str]] = {
    **{p: set(NOT_PRODUCT) for p in PRODUCT},
    "datasource": {*NOT_PRODUCT, "sink", "gtbarrier"},
    "sink": {*NOT_PRODUCT, "datasource", "gtbarrier"},
    "state": {*NOT_PRODUCT, "datasource", "sink", "gtbarrier"},
    **{p: {"tests", "integration_tests", "pytest"} for p in SUPPORT},
}
# The layers of ``state``, lowest first: a module may import its own layer and those below.
STATE_LAYERS = (
    "state.errors",
    "state.records",
    "state",
    "state.stores",
    "state.protocol",
    "state.metrics",
    "state.coordinator",
)
STORE_IMPLEMENTATIONS = (
    "state.stores.memory_store",
    "state.stores.file_store",
    "state.stores.s3_store",
)
# A store implementation's own helper modules (helper -> its implementation): the only
# modules of state.stores beside the contract that implementation may import.
STORE_HELPERS = {"state.stores.s3_errors": "state.stores.s3_store"}


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    target: str  # dotted module name (the module itself when it exists, else its package)
    line: int
    module_level: bool  # runs when the importer is imported (not in a function or TYPE_CHECKING)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(packages: tuple[str, ...]) -> dict[str, Path]:
    return {
        module_name(path): path
        for package in packages
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, module_level: bool) -> Iterator[tuple[ast.AST, bool]]:
    """Every node below ``node``, with whether it runs when the module is imported."""
    if isinstance(node, ast.If) and _is_type_checking(node):
        parts: list[tuple[ast.AST, bool]] = [(node.test, module_level)]
        parts += [(n, False) for n in node.body] + [(n, module_level) for n in node.orelse]
    else:
        inner = module_level and not isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
        )
        parts = [(n, inner) for n in ast.iter_child_nodes(node)]
    for child, level in parts:
        yield child, level
        yield from _walk(child, level)


def imports_of(name: str, path: Path, known: set[str]) -> list[Import]:
    """Every import in ``path`` (module ``name``), relative ones resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node, module_level in _walk(tree, True):
        if isinstance(node, ast.Import):
            found += [Import(name, a.name, node.lineno, module_level) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                target = sub if sub in known else base
                found.append(Import(name, target, node.lineno, module_level))
    return found


def all_imports(packages: tuple[str, ...]) -> list[Import]:
    mods = modules(packages)
    known = set(modules(PRODUCT + NOT_PRODUCT))
    return [i for name, path in mods.items() for i in imports_of(name, path, known)]


def top(name: str) -> str:
    return name.split(".", maxsplit=1)[0]


def where(imp: Import) -> str:
    path = modules((top(imp.importer),))[imp.importer].relative_to(ROOT)
    return f"{path}:{imp.line} imports {imp.target}"


def test_every_package_imports_only_what_its_layer_allows() -> None:
    wrong = [
        where(imp)
        for imp in all_imports(PRODUCT + SUPPORT)
        if top(imp.target) in FORBIDDEN[top(imp.importer)]
    ]
    assert not wrong, "imports across the layering:\n" + "\n".join(wrong)


def state_layer(name: str) -> int:
    """The index in :data:`STATE_LAYERS` of a ``state`` module's layer."""
    for i in range(len(STATE_LAYERS) - 1, -1, -1):
        layer = STATE_LAYERS[i]
        if layer != "state" and (name == layer or name.startswith(layer + ".")):
            return i
    return STATE_LAYERS.index("state")


def test_state_imports_only_point_down() -> None:
    wrong = [
        where(imp)
        for imp in all_imports(("state",))
        if top(imp.target) == "state" and state_layer(imp.target) > state_layer(imp.importer)
    ]
    assert not wrong, "state imports a higher layer:\n" + "\n".join(wrong)


def test_only_gtbarrier_imports_the_coordinator() -> None:
    wrong = [
        where(imp)
        for imp in all_imports(("datasource", "sink"))
        if imp.target.startswith("state.coordinator")
    ]
    assert not wrong, "a Spark adapter imports the coordinator:\n" + "\n".join(wrong)


def test_store_implementations_import_only_the_contract() -> None:
    wrong = [
        where(imp)
        for imp in all_imports(("state",))
        if (imp.importer in STORE_IMPLEMENTATIONS or imp.importer in STORE_HELPERS)
        and imp.target.startswith("state.stores")
        and imp.target != "state.stores.state_store"
        and STORE_HELPERS.get(imp.target) != imp.importer
    ]
    assert not wrong, "a store implementation imports more than the contract:\n" + "\n".join(wrong)


# File names that several product modules share, each set one concept in several layers
# (docs/ARCHITECTURE.md, "Module names"); any other shared name is a collision.
SHARED_NAMES: dict[str, tuple[set[str], str]] = {
    "options.py": (
        {"state/options.py", "datasource/options.py", "sink/options.py"},
        "the typed reading of options, and each Spark component's own option table on it",
    ),
    "kafka_settings.py": (
        {"state/kafka_settings.py", "datasource/kafka_settings.py"},
        "every Kafka client's conversion of settings, and the source's refusals on it",
    ),
    "errors.py": (
        {"state/errors.py", "gtbarrier/errors.py"},
        "the one error hierarchy, and its public face for users (a re-export)",
    ),
    "resume_point.py": (
        {"state/records/resume_point.py", "state/protocol/resume_point.py"},
        "the resume point's record, and its rules",
    ),
    "barrier.py": (
        {"state/records/barrier.py", "sink/barrier.py"},
        "the barrier's records, and the commit that advances them",
    ),
}


def test_no_two_product_modules_share_a_name_but_the_layered_pairs() -> None:
    by_name: dict[str, set[str]] = {}
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            if path.name != "__init__.py":
                by_name.setdefault(path.name, set()).add(str(path.relative_to(ROOT)))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    wrong = [
        f"{name}: {sorted(paths)}"
        for name, paths in sorted(shared.items())
        if SHARED_NAMES.get(name, (set(), ""))[0] != paths
    ]
    wrong += [f"{name}: no longer shared" for name in sorted(set(SHARED_NAMES) - set(shared))]
    assert not wrong, (
        "module names shared by different things (rename one, or add a layered pair to "
        "SHARED_NAMES and docs/ARCHITECTURE.md's Module names):\n" + "\n".join(wrong)
    )


@pytest.mark.parametrize("packages", [PRODUCT, NOT_PRODUCT], ids=["product", "support"])
def test_no_import_cycles(packages: tuple[str, ...]) -> None:
    graph: dict[str, set[str]] = {name: set() for name in modules(packages)}
    for imp in all_imports(packages):
        if imp.target in graph and imp.target != imp.importer:
            graph[imp.importer].add(imp.target)
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join([*c, c[0]]) for c in cycles)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import sink.bundle\n", [("sink.bundle", True)]),
        ("from sink import bundle\n", [("sink.bundle", True)]),
        ("from sink import BarrierSink\n", [("sink", True)]),
        ("def f():\n    import sink\n", [("sink", False)]),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import sink\n",
            [("typing", True), ("sink", False)],
        ),
        (
            "if TYPE_CHECKING:\n    import sink\nelse:\n    import state\n",
            [("sink", False), ("state", True)],
        ),
    ],
)
def test_imports_are_read_with_their_place(
    tmp_path: Path, source: str, expected: list[tuple[str, bool]]
) -> None:
    path = tmp_path / "m.py"
    path.write_text(source)
    found = imports_of("datasource.m", path, set(modules(("sink",))))
    assert [(i.target, i.module_level) for i in found] == expected

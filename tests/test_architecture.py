"""The shape of the two big packages, simulator/ and hw_profile/: no import cycle between a package's modules
(imports inside functions included) nor between its sub-packages, few modules at its top level, and no torch
anywhere in simulator/."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = ("simulator", "hw_profile")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports anywhere in its body (a package import counts as its
    __init__; ``from package import name`` counts the submodule ``name`` when there is one)."""
    modules = {module_name(p): p for p in (ROOT / package).rglob("*.py")}

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == package:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    edges.add(full if full in modules else known(node.module))
            elif isinstance(node, ast.Import):
                edges.update(known(a.name) for a in node.names if a.name.split(".")[0] == package)
        graph[name] = {e for e in edges if e and e != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def wing_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The same graph between a package's sub-packages ("wings"): a top-level module is a wing of its own, and a
    package's __init__ importing its own modules is no arrow."""
    def wing(module: str) -> str:
        return ".".join(module.split(".")[:2])

    out: dict[str, set[str]] = {}
    for module, edges in graph.items():
        out.setdefault(wing(module), set()).update(wing(e) for e in edges if wing(e) != wing(module))
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_inside_a_package(package):
    graph = import_graph(package)
    assert len(graph) > 10  # the walk found the package's modules
    assert cycles(graph) == []


# hw_profile's sub-packages in the order docs/hw-profile.md ("Touch points") lists them: each imports only those
# before it (and errors); cli imports any
HW_PROFILE_WINGS = ("hardware", "tables", "kernels", "estimate", "measure", "calibrate", "view")


def test_hw_profiles_wings_are_layers_in_the_documented_order():
    wings = wing_graph(import_graph("hw_profile"))
    assert {w.removeprefix("hw_profile.") for w in wings} == {*HW_PROFILE_WINGS, "cli", "errors", "hw_profile"}
    assert cycles(wings) == []
    for i, wing in enumerate(HW_PROFILE_WINGS):
        below = {f"hw_profile.{w}" for w in HW_PROFILE_WINGS[:i]} | {"hw_profile.errors"}
        assert wings[f"hw_profile.{wing}"] <= below, wing


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("package", PACKAGES)
def test_few_modules_at_the_top_level(package):
    """At most 10 modules and sub-packages side by side at a package's top: more, and it needs wings."""
    top = sorted(p.name for p in (ROOT / package).iterdir()
                 if p.suffix == ".py" or (p / "__init__.py").is_file())
    assert len(top) <= 10, top


def test_simulator_never_imports_torch():
    for path in (ROOT / "simulator").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] in ("torch", "transformers") for n in names), path


def test_the_simulator_reads_hw_profile_through_the_table_contract_only():
    """hw_profile's one contract with the simulator is its tables wing (the table set, its typed sidecar facts, the
    step-time lookup): no other wing is imported, no sidecar dict is read by key, and the table checks live in
    hw_profile (hw_profile.tables.checks)."""
    imported = set()
    for path in (ROOT / "simulator").rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"meta\[|meta\.get\(", text), path  # typed facts, never the sidecar's keys
        for node in ast.walk(ast.parse(text, str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            imported.update((n, path.name) for n in names if n.split(".")[0] == "hw_profile")
    assert imported  # the walk saw the simulator's imports of the tables wing
    assert {(n, f) for n, f in imported if not n.startswith("hw_profile.tables")} == set()
    assert not (ROOT / "simulator" / "inputs" / "table_checks.py").exists()

"""Cached numba kernels that compile in another file's functions are guarded against a stale cache
(simulator/core/kernel_cache.py): an AST walk over simulator/ (the guard itself on the real walk:
tests/simulator/test_greedy.py)."""

from __future__ import annotations

import ast
import textwrap

from tests.conftest import ROOT


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def unguarded(source: str, module: str) -> list[str]:
    """``kernel -> module`` for each cached kernel of ``source`` that calls a function imported from another project
    module without a ``guard_cached_kernel(kernel, <that module>, ...)`` call in the same file."""
    tree = ast.parse(source)
    origin: dict[str, str] = {}  # a name bound by an import -> the project module it comes from
    modules: dict[str, str] = {}  # a name that is a module -> its dotted name
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("simulator", "hw_profile"):
            for a in node.names:
                origin[a.asname or a.name] = node.module
                modules[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                modules[a.asname or a.name] = a.name
    guarded: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _dotted(node.func) == "guard_cached_kernel" and node.args:
            names = {_dotted(a) for a in node.args[1:]}
            guarded.setdefault(_dotted(node.args[0]), set()).update(modules.get(n, n) for n in names if n)
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        cached = any(isinstance(d, ast.Call) and _dotted(d.func) == "njit"
                     and any(k.arg == "cache" and getattr(k.value, "value", False) for k in d.keywords)
                     for d in fn.decorator_list)
        if not cached:
            continue
        for call in ast.walk(fn):
            name = _dotted(call.func) if isinstance(call, ast.Call) else None
            if name in origin and origin[name] != module and origin[name] not in guarded.get(fn.name, set()):
                out.append(f"{fn.name} -> {origin[name]}")
    return sorted(set(out))


def test_every_cached_kernel_that_compiles_in_another_files_function_is_guarded():
    found = {}
    for path in (ROOT / "simulator").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[module] = unguarded(path.read_text(), module)
    assert len(found) > 50
    assert {m: v for m, v in found.items() if v} == {}


def test_the_walk_finds_an_unguarded_kernel_and_accepts_a_guarded_one():
    source = textwrap.dedent('''
        from numba import njit
        import hw_profile.tables.step_table
        from hw_profile.tables.step_table import verify_ms_at
        from simulator.core.kernel_cache import guard_cached_kernel

        @njit(cache=True)
        def rows(t):
            return verify_ms_at(t)
        ''')
    assert unguarded(source, "simulator.x") == ["rows -> hw_profile.tables.step_table"]
    guarded = source + "\nguard_cached_kernel(rows, hw_profile.tables.step_table)\n"
    assert unguarded(guarded, "simulator.x") == []

"""attnplan's import structure has no circles: not between modules, not between sub-packages.

Read from the source with ``ast`` (nothing is imported), counting every import statement wherever it
stands: a function-level or ``TYPE_CHECKING`` import hides a circle from Python's import machinery
but not from a reader who has to change one of its modules (issue 25, item 5).
"""

from __future__ import annotations

import ast
from pathlib import Path

import attnplan

ROOT = Path(attnplan.__file__).resolve().parent

# The adapter's metadata <-> decode_layout/host_metadata circle is taken apart on another branch of
# issue 25 (h25b): the entry goes when that lands; a stale entry fails test_known_circles_still_exist.
KNOWN_CIRCLES: frozenset[frozenset[str]] = frozenset()


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for p in sorted(ROOT.rglob("*.py")):
        parts = ["attnplan", *p.relative_to(ROOT).with_suffix("").parts]
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the attnplan modules it imports (``from pkg import mod`` is an arrow to ``pkg.mod``;
    ``from pkg import name`` to ``pkg``'s ``__init__``). Parent packages are not counted as arrows."""
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, (path, is_pkg) in mods.items():
        package = mod if is_pkg else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src for a in node.names]
            else:
                continue
            edges[mod].update(t for t in targets if t in mods and t != mod)
    return edges


def circles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def _package_of(mod: str) -> str:
    """``attnplan.policy.engine`` -> ``attnplan.policy``; a top-level module is its own package."""
    return ".".join(mod.split(".")[:2])


def test_circles_are_found():
    # The detector itself: a planted circle, one through a function-level import, is found.
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset({"a", "b", "c"})]
    assert circles({"a": {"b"}, "b": set()}) == []
    tree = ast.parse("def f():\n    from .engine import default_ruleset\n")
    assert any(isinstance(n, ast.ImportFrom) and n.module == "engine" for n in ast.walk(tree))


def test_graph_reads_function_level_imports():
    edges = import_graph()
    # attnplan/__init__.py imports policy only inside __getattr__ (PEP 562): still an arrow.
    assert "attnplan.policy" in edges["attnplan"]
    assert "attnplan.errors" in edges["attnplan.safeio"]


def test_no_module_circles():
    found = set(circles(import_graph()))
    assert found <= KNOWN_CIRCLES, [sorted(c) for c in found - KNOWN_CIRCLES]


def test_known_circles_still_exist():
    found = set(circles(import_graph()))
    assert KNOWN_CIRCLES <= found, f"gone, drop from KNOWN_CIRCLES: {[sorted(c) for c in KNOWN_CIRCLES - found]}"


def test_no_package_circles():
    # Sub-packages form layers (cli -> rest/preflight/... -> adapter/render -> policy -> rules/safeio ->
    # errors): an import up, e.g. safeio -> policy.errors, closes a circle here.
    packages: dict[str, set[str]] = {}
    for a, targets in import_graph().items():
        for b in targets:
            if _package_of(a) != _package_of(b):
                packages.setdefault(_package_of(a), set()).add(_package_of(b))
    for p in list(packages.values()):
        for q in p:
            packages.setdefault(q, set())
    assert circles(packages) == []


def test_errors_module_is_the_bottom():
    # Every layer raises the tree's classes, so the tree imports nothing of attnplan.
    assert import_graph()["attnplan.errors"] == set()

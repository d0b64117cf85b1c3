"""``attnplan.policy`` exports its public surface only (issue 25): the embedded calls, their answers,
nodes, models, rules and the error tree. The helpers the sub-packages share are imported from their
modules, so a name in ``__all__`` is a promise and a helper can change without breaking it."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import pytest

import attnplan
import attnplan.errors
from attnplan import policy

REPO = Path(attnplan.__file__).resolve().parent.parent


def test_every_exported_name_resolves_and_is_public():
    assert len(policy.__all__) == len(set(policy.__all__))
    for name in policy.__all__:
        assert not name.startswith("_"), name
        assert not isinstance(getattr(policy, name), types.ModuleType), name


def test_the_error_tree_is_exported_whole():
    assert set(attnplan.errors.__all__) <= set(policy.__all__)


def test_the_package_names_only_its_exports():
    # Nothing public lives in the package namespace beyond __all__ (submodules aside).
    names = {n for n, v in vars(policy).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    lazy = set(policy.__all__) - names
    assert names <= set(policy.__all__), names - set(policy.__all__)
    # the capability matrix is imported on first use (policy/__init__.py __getattr__: not on every command's path)
    assert lazy == {"capability_matrix", "matrix_markdown"}, lazy
    assert all(callable(getattr(policy, n)) for n in lazy)
    with pytest.raises(AttributeError):
        policy.no_such_export  # noqa: B018


def test_importers_use_the_exports_or_the_modules():
    # `from attnplan.policy import X` anywhere in the repository names an export (or a submodule).
    stray = []
    for root in ("attnplan", "tests", "bench", "scripts"):
        for path in (REPO / root).rglob("*.py"):
            if path.is_relative_to(REPO / "attnplan" / "policy"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module == "attnplan.policy":
                    stray += [(str(path.relative_to(REPO)), a.name) for a in node.names
                              if a.name not in policy.__all__ and not (REPO / "attnplan/policy" / f"{a.name}.py").exists()]
    assert stray == []

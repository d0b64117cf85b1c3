"""The GPU tests skip at module level on a machine without CUDA, before their imports run, so a name
they import from gpu_common that no longer exists only shows on the GPU (test_fp8_query_gpu.py
imported a removed ``derived_executor`` and failed to collect on the H100). Read with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

GPU = Path(__file__).resolve().parent / "gpu"


def _defined(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return out


def test_every_name_a_gpu_test_imports_from_a_sibling_exists():
    siblings = {p.stem: p for p in GPU.glob("*.py")}
    missing = []
    for path in sorted(GPU.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in siblings and not node.level:
                have = _defined(siblings[node.module])
                missing += [f"{path.name}: {a.name} from {node.module}" for a in node.names if a.name not in have]
    assert siblings and not missing, missing


def test_the_checker_sees_a_missing_name(tmp_path):
    (tmp_path / "common.py").write_text("def real_plan():\n    pass\n")
    assert "real_plan" in _defined(tmp_path / "common.py")
    assert "derived_executor" not in _defined(tmp_path / "common.py")

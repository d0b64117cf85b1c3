"""The GPU tests skip at module level on a machine without CUDA, before their imports run, and the
benches import most things inside their functions, so a helper they import that no longer exists
only showed on the GPU: test_fp8_query_gpu.py imported a removed ``derived_executor``, and
bench/decode_steps.py and bench/xqa_vs_fa2.py kept ``import derive`` (tests/gpu/derive.py, removed)
inside functions, unnoticed until a lease (issue 38). Here, on the CPU:

- every import statement of every bench script and GPU test module, at any depth (function bodies
  too), read with ``ast``, resolves: a sibling module (bench/, tests/gpu/) defines each name taken
  from it; a project, FlashInfer or torch module exists and has each name; any other module is
  installed, or is a CUDA-only package stubbed here (``STUBBED``);
- every bench script and every GPU helper module (not a test: those skip without CUDA) imports,
  in a fresh interpreter, with the CUDA-only packages stubbed.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "tests" / "gpu"
BENCH = ROOT / "bench"
# Packages that exist only on the GPU machine (its image: /work/.library/device/KINDS.md): a
# module of them is stubbed, not resolved.
STUBBED = ("triton", "cupy", "cuda", "pynvml")
# Modules whose names are checked (imported here); any other installed module is only looked up.
CHECK_NAMES = ("attnplan", "flashinfer", "torch")


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


def unresolved(paths: list[Path], siblings: dict[str, Path]) -> list[str]:
    """Every import in ``paths`` (at any depth) that does not resolve, as 'file:line: why'."""
    bad: list[str] = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                wanted = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                wanted = [(node.module, [a.name for a in node.names])]
            else:
                continue
            for module, names in wanted:
                why = _why_unresolved(module, names, siblings)
                if why:
                    bad.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{node.lineno}: {why}")
    return bad


def _why_unresolved(module: str, names: list[str] | None, siblings: dict[str, Path]) -> str | None:
    top = module.split(".")[0]
    if top in siblings:
        if module != top:
            return f"{module}: {top} is a file, not a package"
        have = _defined(siblings[top])
        missing = [n for n in names or () if n not in have]
        return f"{', '.join(missing)} not defined in {siblings[top].name}" if missing else None
    if top in STUBBED:
        return None
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        spec = None
    if spec is None:
        return f"no module {module!r}"
    if names and top in CHECK_NAMES:
        mod = importlib.import_module(module)
        missing = [n for n in names if not hasattr(mod, n) and importlib.util.find_spec(f"{module}.{n}") is None]
        if missing:
            return f"{', '.join(missing)} not in {module}"
    return None


def _siblings(*dirs: Path) -> dict[str, Path]:
    return {p.stem: p for d in dirs for p in d.glob("*.py")}


def test_every_import_of_the_benches_and_gpu_tests_resolves():
    paths = sorted(BENCH.glob("*.py")) + sorted(GPU.glob("*.py"))
    assert len(paths) > 10
    bad = unresolved(paths, _siblings(BENCH, GPU))
    assert not bad, "\n".join(bad)


_IMPORT_ALL = textwrap.dedent("""\
    import importlib.util, json, sys, types
    stubbed, files = json.loads(sys.argv[1]), json.loads(sys.argv[2])

    def load(f):
        spec = importlib.util.spec_from_file_location("_imported_" + f.replace("/", "_")[:-3], f)
        try:
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        except BaseException as exc:          # SystemExit and pytest's Skipped too: a script must not run
            return exc
        return None

    # First without stubs (installed libraries probe for triton and would take a stub for it), then
    # the files that need a CUDA-only package again, with that package stubbed.
    failed, again = {}, []
    for f in files:
        exc = load(f)
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in stubbed:
            again.append(f)
        elif exc is not None:
            failed[f] = f"{type(exc).__name__}: {exc}"
    class Stub(types.ModuleType):             # any attribute: a callable that does nothing
        def __getattr__(self, attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return lambda *a, **k: None

    for name in stubbed:
        for part in (name, name + ".testing", name + ".language"):
            sys.modules.setdefault(part, Stub(part))
    for f in again:
        exc = load(f)
        if exc is not None:
            failed[f] = f"{type(exc).__name__}: {exc} (with {', '.join(stubbed)} stubbed)"
    print(json.dumps(failed))
""")


def _import_in_fresh_python(files: list[Path], extra_path: list[Path]) -> dict[str, str]:
    env_path = [str(p) for p in extra_path] + [str(ROOT)]
    code = "import sys; sys.path[:0] = " + json.dumps(env_path) + "\n" + _IMPORT_ALL
    p = subprocess.run([sys.executable, "-c", code, json.dumps(STUBBED), json.dumps([str(f) for f in files])],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_every_bench_script_and_gpu_helper_imports_with_cuda_packages_stubbed():
    # The GPU test files themselves skip at import without CUDA (their imports are checked above);
    # their helpers (gpu_common, prebuild_all) and every bench script must import here.
    helpers = [p for p in sorted(GPU.glob("*.py")) if not p.name.startswith("test_")]
    files = sorted(BENCH.glob("*.py")) + helpers
    failed = _import_in_fresh_python(files, [BENCH, GPU])
    assert not failed, failed


def test_the_checker_sees_a_removed_helper(tmp_path):
    # What broke the benches: a helper module imported inside a function, and a name a sibling lost.
    (tmp_path / "common.py").write_text("def real_plan():\n    pass\n")
    (tmp_path / "bench_a.py").write_text("def run():\n    import derive\n    return derive.base()\n")
    (tmp_path / "bench_b.py").write_text("def run():\n    from common import real_plan, derived_executor\n")
    (tmp_path / "bench_c.py").write_text("import json\nfrom attnplan.policy import plan_for\n"
                                         "def run():\n    from common import real_plan\n    from triton.testing import do_bench\n")
    sib = _siblings(tmp_path)
    bad = unresolved([tmp_path / "bench_a.py", tmp_path / "bench_b.py", tmp_path / "bench_c.py"], sib)
    assert any("bench_a.py:2: no module 'derive'" in b for b in bad), bad
    assert any("bench_b.py:2: derived_executor not defined in common.py" in b for b in bad), bad
    assert not [b for b in bad if "bench_c" in b], bad
    assert unresolved([tmp_path / "bench_x.py"] if (tmp_path / "bench_x.py").write_text(
        "from attnplan.policy import no_such_function\n") else [], sib) == [
        "bench_x.py:1: no_such_function not in attnplan.policy"]


def test_the_import_run_reports_a_script_that_fails_at_import(tmp_path):
    (tmp_path / "good.py").write_text("from triton.testing import do_bench\nX = 1\n")     # stubbed: imports
    (tmp_path / "bad.py").write_text("import derive\n")
    failed = _import_in_fresh_python([tmp_path / "good.py", tmp_path / "bad.py"], [tmp_path])
    assert list(failed) == [str(tmp_path / "bad.py")] and "derive" in failed[str(tmp_path / "bad.py")]

"""The real signatures of installed FlashInfer functions, with or without importing FlashInfer.

On a GPU node ``inspect.signature`` reads the imported function. On a CPU-only CI node importing
flashinfer can fail (its CUDA-side dependencies are not installed), so the function's ``def`` is
parsed with ``ast`` from the installed source instead: same parameter names, kinds and which have
defaults - enough for ``Signature.bind`` to reject a missing or unknown argument.
"""

from __future__ import annotations

from attnplan.errors import SourceNotFoundError

import ast
import functools
import importlib
import importlib.util
import inspect
from pathlib import Path


def flashinfer_root() -> Path:
    """The installed package's directory, located without importing it."""
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or not spec.submodule_search_locations:
        raise SourceNotFoundError("flashinfer is not installed: pip install flashinfer-python (no deps needed to read it)")
    return Path(list(spec.submodule_search_locations)[0])


def flashinfer_version() -> str:
    """flashinfer's version from its build metadata file (no import)."""
    text = (flashinfer_root() / "_build_meta.py").read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SourceNotFoundError("no __version__ in flashinfer/_build_meta.py")


def _source_file(module: str) -> Path:
    parts = module.split(".")[1:]
    base = flashinfer_root().joinpath(*parts)
    for cand in (base.with_suffix(".py"), base / "_core.py", base / "__init__.py"):
        if cand.is_file() and (cand.name != "__init__.py" or not (base / "_core.py").is_file()):
            return cand
    raise SourceNotFoundError(f"no source for {module} under {flashinfer_root()}")


_MISSING = object()


def _from_ast(fn: ast.FunctionDef) -> inspect.Signature:
    P = inspect.Parameter
    a = fn.args
    params: list[inspect.Parameter] = []
    positional = [*a.posonlyargs, *a.args]
    first_default = len(positional) - len(a.defaults)
    for i, arg in enumerate(positional):
        kind = P.POSITIONAL_ONLY if i < len(a.posonlyargs) else P.POSITIONAL_OR_KEYWORD
        params.append(P(arg.arg, kind, default=_MISSING if i >= first_default else P.empty))
    if a.vararg:
        params.append(P(a.vararg.arg, P.VAR_POSITIONAL))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        params.append(P(arg.arg, P.KEYWORD_ONLY, default=P.empty if default is None else _MISSING))
    if a.kwarg:
        params.append(P(a.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(params)


@functools.lru_cache(maxsize=None)
def source_signature(module: str, name: str) -> inspect.Signature:
    """The signature of ``module.name`` parsed from the installed file (top-level ``def`` only)."""
    path = _source_file(module)
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return _from_ast(node)
    for node in tree.body:
        # A re-export (flashinfer/decode.py imports trtllm_batch_decode_with_kv_cache_mla from
        # .mla): read the defining module, as ``import`` would.
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            alias = next(a for a in node.names if (a.asname or a.name) == name)
            package = module if path.name in ("__init__.py", "_core.py") else module.rpartition(".")[0]
            for _ in range(max(node.level - 1, 0)):
                package = package.rpartition(".")[0]
            target = f"{package}.{node.module}" if node.level else str(node.module)
            return source_signature(target, alias.name)
    raise SourceNotFoundError(f"{name} is not defined at the top level of {path}")


@functools.lru_cache(maxsize=None)
def real_signature(module: str, name: str) -> tuple[inspect.Signature, str]:
    """(signature, how it was read): imported when flashinfer imports here, else parsed."""
    try:
        fn = getattr(importlib.import_module(module), name)
        return inspect.signature(fn), "inspect"
    except Exception:  # noqa: BLE001 - any import failure (no CUDA, missing deps) -> read the source
        return source_signature(module, name), "ast"

"""Every exception attnplan raises is a class of the one tree (``attnplan/errors.py``), or a named
exception of a protocol attnplan speaks (PEP 562, argparse, FastAPI), or a control-flow exception
caught inside the package. Read with ``ast`` from every module, so no torch is needed."""

from __future__ import annotations

import ast
from pathlib import Path

import attnplan
import attnplan.errors as errors
from attnplan.policy import AttnplanError

ROOT = Path(attnplan.__file__).resolve().parent

TREE = frozenset(errors.__all__)
# Protocols that name their own exceptions: each raise is what the protocol's caller catches.
PROTOCOL = {
    "AttributeError": "a module's __getattr__ (PEP 562) misses as attribute access does",
    "KeyError": "RuleSet.rule(id) misses as a mapping lookup does",
    "NotImplementedError": "an abstract method of conditions.Pred",
    "KeyboardInterrupt": "verify's SIGTERM handler stops a run as Ctrl-C does (cli/main.py answers it)",
    "argparse.ArgumentTypeError": "argparse's type= callables report a bad flag value so",
    "HTTPException": "FastAPI's HTTP status answers (401, 404, 503)",
    "RequestValidationError": "FastAPI's 422 answer naming the field",
    "ValidationError": "pydantic: a request validator located at the field it is about (rest/models.py)",
}
# Raised and caught inside the package: each one turns into a verdict or a response, never escapes.
CONTROL_FLOW = {
    "BadAnswer": "preflight: why a node's answer does not count (its error row)",
    "BodyError": "preflight transport: why an answer's body was refused (its error row)",
    "NodeFailure": "preflight http: one node's failure kind (its row)",
    "NotReady": "rest: the node's facts are not known yet (503)",
    "_Refused": "sglang resolve: SGLang's own startup refusal, made a violation",
    "FlashInferError": "kernels/trtllm_gen/select.py: FlashInfer's FLASHINFER_CHECK in the ported selection, made a miss",
    "Reached": "oracle/trtllm_wrappers.py: the stubbed kernel launch was reached (FlashInfer's wrapper took the call)",
    "Unreachable": "cli/upgrade.py --preflight: a node that does not answer with node facts (exit 3, as preflight)",
    "Refused": "adapter/general_plans.py: why a wrapper's scheduler replay is refused (kept as its reason; the step plans whole)",
    "Ambiguous": "adapter/general_plans.py: two learning steps that cannot tell step values apart (another pair is tried)",
}


def _raises() -> list[tuple[str, int, str]]:
    """(file, line, class) of every ``raise`` with an exception; a raise of a factory call (``raise
    invalid(...)``) is read as the class its return annotation names."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        factories = {n.name: ast.unparse(n.returns) if n.returns else "" for n in ast.walk(tree)
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = ast.unparse(exc)
            if isinstance(node.exc, ast.Call) and name in factories:
                name = factories[name].strip("'\"")
            elif isinstance(exc, ast.Name) and exc.id[:1].islower():
                continue  # re-raising a caught exception held in a variable
            out.append((str(path.relative_to(ROOT.parent)), node.lineno, name))
    return out


def _caught() -> set[str]:
    out = set()
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ExceptHandler) and node.type is not None:
                types = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
                out.update(ast.unparse(t) for t in types)
    return out


def test_every_raise_is_in_the_tree():
    raises = _raises()
    assert len(raises) > 100  # the scan reads the package
    stray = [r for r in raises if r[2] not in TREE | PROTOCOL.keys() | CONTROL_FLOW.keys()]
    assert stray == []


def test_no_bare_value_errors():
    # The tree's ValueError subclasses (InvalidInputError, RuleError, AdapterCallError, ...) keep
    # `except ValueError` callers working; a bare ValueError names no rule and no fix.
    assert [r for r in _raises() if r[2] in ("ValueError", "RuntimeError", "TypeError", "Exception")] == []


def test_allow_lists_are_alive():
    names = {r[2] for r in _raises()}
    assert set(PROTOCOL) <= names and set(CONTROL_FLOW) <= names
    # Control flow that is raised must be caught in the package, or it would escape unnamed.
    assert set(CONTROL_FLOW) <= _caught()


def test_tree_has_one_root_and_lives_in_one_module():
    for name in TREE:
        cls = getattr(errors, name)
        assert issubclass(cls, AttnplanError) and cls.__module__ == "attnplan.errors", name
    # No exception class is defined elsewhere in attnplan but the control-flow ones.
    defined = set()
    for path in ROOT.rglob("*.py"):
        if path.name == "errors.py" and path.parent == ROOT:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b).endswith(("Error", "Exception")) for b in node.bases):
                defined.add(node.name)
    assert defined <= set(CONTROL_FLOW), defined - set(CONTROL_FLOW)


def test_the_tree_is_documented():
    # The tree drawn in attnplan/errors.py's docstring names every class of it.
    doc = errors.__doc__ or ""
    assert all(f" {name}" in doc for name in TREE), [n for n in TREE if f" {name}" not in doc]

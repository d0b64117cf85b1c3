"""Whether a node's answer counts: schema-valid, for the config sent, and internally consistent.

A node is a remote program; what it sends is data to check, never a verdict to trust. An answer
counts only when it parses as ``PlanAnswer`` (bounded: size and nesting are checked before any
parser runs, through ``attnplan.safeio``), names the answer schema this preflight reads, answers
the config that was sent, and says something coherent: ``status: ok`` carries a plan,
``rejected`` names at least one violated rule, and the node facts the report shows are of the
right type and range (a capability of 10^30 or a list as GPU name is not a node we can judge).
Anything else is that node's ``error`` row: never a pass, never a rejection.
"""

from __future__ import annotations

from typing import Any, Optional

from attnplan.policy import ANSWER_SCHEMA_VERSION
from attnplan.policy import AttnplanError, PlanAnswer
from attnplan.safeio import parse_json

from .model import NamedConfig

# The version of the /v1/plan answer schema this preflight reads (the REST service writes it).
MAX_ANSWER_DEPTH = 32  # a plan answer nests about 8 deep
MAX_TEXT = 256  # node-supplied names and versions: anything longer is not a name


class BadAnswer(Exception):
    """Why an answer does not count (the node's ``error`` row says it)."""


def answer_object(body: bytes) -> dict:
    """The JSON object a node answered (bytes of a 200 response), read with safeio's limits, or ``BadAnswer``."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadAnswer(f"malformed JSON: not UTF-8 (byte {exc.start})") from None
    try:
        data = parse_json(text, what="answer", name="answer", max_depth=MAX_ANSWER_DEPTH)
    except AttnplanError as exc:
        raise BadAnswer("malformed JSON: " + str(exc).replace("answer: answer: ", "", 1)[:160]) from None
    if not isinstance(data, dict):
        raise BadAnswer(f"schema-invalid answer: expected a JSON object, got {type(data).__name__}")
    return data


def parse_answer(body: bytes, nc: NamedConfig, *, require_version: bool = True) -> PlanAnswer:
    """The answer in ``body`` (bytes of a 200 response) for ``nc``, or ``BadAnswer``."""
    data = answer_object(body)
    if require_version:
        version = data.get("schema_version")
        if version is None:
            raise BadAnswer("schema-invalid answer: no schema_version (the node runs an older attnplan: upgrade it)")
        if version != ANSWER_SCHEMA_VERSION:
            raise BadAnswer(f"schema-invalid answer: schema_version {str(version)[:20]!r}, "
                            f"this preflight reads {ANSWER_SCHEMA_VERSION!r}")
    return validate_data(data, nc)


def validate_data(data: Any, nc: NamedConfig) -> PlanAnswer:
    """A decoded answer (HTTP body or Ray task result) checked against the schema and ``nc``."""
    from pydantic import ValidationError

    if not isinstance(data, dict):
        raise BadAnswer(f"schema-invalid answer: expected a JSON object, got {type(data).__name__}")
    data = {k: v for k, v in data.items() if k != "schema_version"}
    try:
        answer = PlanAnswer.model_validate(data)
    except ValidationError as exc:
        errs = exc.errors()
        e = errs[0]
        where = ".".join(str(p) for p in e.get("loc", ())) or "answer"
        more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
        raise BadAnswer(f"schema-invalid answer: {where}: {e.get('msg')}{more}") from None
    except (AttnplanError, ValueError, TypeError, RecursionError) as exc:  # e.g. a capability validator's own error
        raise BadAnswer(f"schema-invalid answer: {str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}") from None
    if answer.config != nc.config:
        sent, got = nc.config.model_dump(), answer.config.model_dump()
        diff = next((k for k in sent if sent[k] != got.get(k)), "?")
        raise BadAnswer(f"answered for another config ({diff}: sent {sent.get(diff)!r}, got {got.get(diff)!r})")
    if nc.engine is not None and not nc.engine.matches(answer.engine):
        got = answer.engine.name + (f"=={answer.engine.version}" if answer.engine.version else "")
        raise BadAnswer(f"answered for another engine (sent {str(nc.engine)!r}, got {got!r})")
    problem = incoherence(answer)
    if problem:
        raise BadAnswer(f"schema-invalid answer: {problem}")
    return answer


def incoherence(a: PlanAnswer) -> Optional[str]:
    """What makes a schema-valid answer unusable, or None."""
    if a.status == "ok" and a.plan is None:
        return "status ok without a plan"
    if a.status == "ok" and a.violations:  # a pass that names broken rules is no pass (issue 24 #12)
        return f"status ok with {len(a.violations)} violated rule(s)"
    if a.status == "rejected" and not a.violations:
        return "status rejected without any violated rule"
    if a.status == "rejected" and a.plan is not None:
        return "status rejected with a plan"
    node = a.node
    cap = node.capability.value
    if cap is not None and (type(cap) is not int or not 30 <= cap <= 199):
        return f"node.capability: {_short(cap)} is not a compute capability"
    count = node.gpu_count.value
    if count is not None and (type(count) is not int or not 0 <= count <= 4096):
        return f"node.gpu_count: {_short(count)} is not a GPU count"
    for name in ("gpu_name", "hostname", "flashinfer_version", "driver_version", "torch_version"):
        v = getattr(node, name).value
        if v is not None and (not isinstance(v, str) or len(v) > MAX_TEXT):
            return f"node.{name}: {_short(v)} is not a name"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."

"""What an engine decides besides kernel candidates, read from ``engines.<name>`` in rules/backends.yaml
(issue 21): the query dtype each phase runs with, the kernel page a requested block maps to, which
backend names select with the engine's own order, and the engine's own backend choice.

Rows are data: ``{when: CONDITION, ...}``, first row that holds wins (a row without ``when`` always
holds). Conditions use the rule packs' condition language (conditions.py) over the same facts.
"""

from __future__ import annotations

from typing import Any, Optional

from .conditions import Pred, compile_condition
from .rulepack import EngineChoiceRow, EngineLayer, RuleSet


_COMPILED: dict[int, tuple[Any, Pred]] = {}


def _cond(raw: Any) -> Pred:
    """A row condition, compiled once (keyed by the data object, which the loaded RuleSet keeps alive)."""
    hit = _COMPILED.get(id(raw))
    if hit is None or hit[0] is not raw:
        hit = (raw, compile_condition(raw))
        _COMPILED[id(raw)] = hit
    return hit[1]


class _Row:
    __slots__ = ("when", "data")

    def __init__(self, raw: dict[str, Any]):
        self.when = compile_condition(raw["when"]) if raw.get("when") is not None else None
        self.data = raw

    def holds(self, ctx: dict[str, Any]) -> bool:
        return self.when is None or self.when.test(ctx)


_ROWS: dict[tuple[int, str], tuple[Any, tuple[_Row, ...]]] = {}


def _rows(spec_id: int, key: str, spec: EngineLayer) -> tuple[_Row, ...]:
    """The compiled rows of ``spec.<key>`` (kept per spec object; the loaded RuleSet keeps it alive)."""
    hit = _ROWS.get((spec_id, key))
    if hit is None or hit[0] is not spec:
        hit = (spec, tuple(_Row(r) for r in getattr(spec, key)))
        _ROWS[(spec_id, key)] = hit
    return hit[1]


def compile_all(rs: RuleSet) -> None:
    """Compile every engine row (a bad fact name raises ConditionError naming it): tests call this."""
    for spec in (*rs.engines.values(), *rs.releases.values()):
        _rows(id(spec), "query_dtype", spec)
        _rows(id(spec), "decode_tensor_cores", spec)
        eb = spec.engine_backend or {}
        for kind in ("standard", "mla", "mla_prefill"):
            for row in eb.get(kind, []):
                for cond in (row.get("when"),) + tuple(r.get("when") for r in row.get("refused_when", [])):
                    if cond is not None:
                        compile_condition(cond)


def query_dtype(spec: EngineLayer, ctx: dict[str, Any]) -> str:
    """The query dtype (config vocabulary: fp16, bf16, fp8_e4m3, fp8_e5m2) for ctx's phase and backend.

    Row keys: ``phases`` / ``backends`` (limits), ``dtype``: ``model`` (the config's dtype), ``kv`` (the KV
    element dtype) or a dtype name. No row holding: the model dtype."""
    for row in _rows(id(spec), "query_dtype", spec):
        d = row.data
        if d.get("phases") and ctx.get("phase") not in d["phases"]:
            continue
        if d.get("backends") and ctx.get("backend") not in d["backends"]:
            continue
        if not row.holds(ctx):
            continue
        kind = d["dtype"]
        return ctx["config.dtype"] if kind == "model" else ctx["config.kv_dtype"] if kind == "kv" else kind
    return ctx["config.dtype"]


def decode_tensor_cores(spec: EngineLayer, ctx: dict[str, Any]) -> Optional[bool]:
    """Whether the engine's decode wrapper runs on tensor cores here (its first ``decode_tensor_cores`` row that
    holds); None when the engine's data says nothing (attnplan's own choice then: plan.py)."""
    for row in _rows(id(spec), "decode_tensor_cores", spec):
        if row.holds(ctx):
            return bool(row.data["value"])
    return None


def kernel_page_mode(spec: EngineLayer) -> str:
    return spec.kernel_page


def selects_as_auto(spec: EngineLayer, name: str) -> bool:
    return name == "auto" or name in spec.auto_names


def mla_prefill_choice(spec: EngineLayer, ctx: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The engine's own MLA prefill backend (``engine_backend.mla_prefill``: first row whose ``when`` holds and no
    ``refused_when`` does); None when the data has no such rows, name "none" when no row holds."""
    eb = spec.engine_backend or {}
    rows = eb.get("mla_prefill") or []
    if not rows:
        return None
    for row in rows:
        if row.get("when") is not None and not _cond(row["when"]).test(ctx):
            continue
        if any(_cond(r["when"]).test(ctx) for r in row.get("refused_when", [])):
            continue
        pick = EngineChoiceRow.model_validate(row)   # validated at load (rulepack._check_engine_rows): reads its keys
        return {"name": pick.name, "runs_flashinfer": pick.runs_flashinfer, "flashinfer_backend": pick.flashinfer}
    return {"name": "none", "runs_flashinfer": False, "flashinfer_backend": None}


def engine_choice(spec: EngineLayer, ctx: dict[str, Any], is_mla: bool) -> Optional[dict[str, Any]]:
    """The engine's own backend when none is asked for: the first row (priority order) whose ``when``
    holds and none of whose ``refused_when`` conditions hold. None when the data has no choice rows."""
    eb = spec.engine_backend
    if not eb:
        return None
    rows = eb.get("mla" if is_mla else "standard", [])
    for row in rows:
        if row.get("when") is not None and not _cond(row["when"]).test(ctx):
            continue
        refusals = [r for r in row.get("refused_when", []) if _cond(r["when"]).test(ctx)]
        if refusals:
            continue
        return {"name": row["name"], "runs_flashinfer": bool(row.get("runs_flashinfer", False)),
                "source": eb.get("source", ""), "flashinfer_name": eb.get("flashinfer_name", {}).get("mla" if is_mla else "standard")}
    return {"name": "none", "runs_flashinfer": False, "source": eb.get("source", ""),
            "flashinfer_name": eb.get("flashinfer_name", {}).get("mla" if is_mla else "standard")}

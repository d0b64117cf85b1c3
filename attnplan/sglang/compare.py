"""Side by side (issue 26): per GPU, what vLLM 0.33 and SGLang 0.5.23 each run for one model.

Both engines are planned by the same rules over the same kernel truth, per tensor-parallel rank and per
attention layer group: vLLM's layer (``engine="vllm"``) and SGLang's (``SglangEngine`` with no backend
flags: SGLang's defaults). A row says, per phase, the engine's own backend (where the engine layer names
it), the FlashInfer backend, the query dtype, the page size given and run, the silent coercions and the
refusals with their phase. The CLI (``attnplan compare``), REST (``POST /v1/compare``) and the status
page's grid print these rows.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from attnplan.render.verdict import finish
from attnplan.policy import InvalidInputError, NodeFacts, PlanAnswer, RuleSet
from attnplan.embedded import plan_for, plan_model
from attnplan.policy import make_config, simulated_node
from attnplan.model import read_layers
from attnplan.policy.parallel import per_rank_fields, startup_errors
from attnplan.model.hfconfig import model_info, read_model_config

from .flags import SglangEngine, SglangFlags, architecture_of, kv_dtype, request_for_model

ENGINES = ("vllm", "sglang")
# vLLM's --kv-cache-dtype names -> SGLang's (fp8 is e4m3 in both)
SGLANG_KV = {"fp8": "fp8_e4m3"}


def _engine(name: str, raw: Mapping[str, Any], where: str, kv: str, page: Optional[int]) -> Any:
    if name == "vllm":
        return "vllm"
    # the model's architecture rides with SGLang's request as on every other entry point (request_for_model)
    return request_for_model(SglangEngine(SglangFlags(kv_cache_dtype=SGLANG_KV.get(kv, kv), page_size=page)), raw, where)


def _phase(a: PlanAnswer, ph: str) -> dict[str, Any]:
    eb = (a.engine_phases or {}).get(ph) or a.engine_backend
    pp = getattr(a.plan, ph) if a.plan is not None else None
    return {"engine_backend": eb.name if eb is not None else None,
            "runs_flashinfer": eb.runs_flashinfer if eb is not None else (pp is not None),
            "engine_note": eb.note if eb is not None else "",
            "flashinfer": pp.backend if pp is not None else None,
            "query_dtype": pp.query_dtype if pp is not None else None}


def _row(device: str, node: NodeFacts, engine: str, a: PlanAnswer, page_given: Optional[int],
         group: Optional[str]) -> dict[str, Any]:
    v = a.verdict
    return {
        "device": device, "capability": node.capability_str, "engine": engine, "version": a.engine.version,
        # one standard for both engines: the verdict of each engine's command (policy/verdict.py), its outcome as
        # the row's status; ``flashinfer_plan`` is the status of the FlashInfer plan beneath it
        "group": group, "status": v.outcome if v is not None else a.status, "flashinfer_plan": a.status,
        "verdict": finish(v).model_dump(mode="json") if v is not None else None,
        "prefill": _phase(a, "prefill"), "decode": _phase(a, "decode"),
        "page_size": {"given": page_given, "runs": a.plan.kv_cache.page_size if a.plan is not None else None},
        "coercions": [c.model_dump(mode="json") for c in a.coercions],
        "refusals": [{"rule": v.rule, "phase": v.phase, "outcome": v.outcome or "rule", "layer": v.layer,
                      "message": v.message} for v in a.violations],
    }


def compare(model: str | Mapping[str, Any], devices: Sequence[str], *, tp: int = 1, kv_cache_dtype: str = "auto",
            page_size: Optional[int] = None, ruleset: Optional[RuleSet] = None,
            nodes: Optional[Mapping[str, NodeFacts]] = None) -> dict[str, Any]:
    """Rows per (device, engine[, layer group]) for ``model`` (a config.json path/repo id, or its dict)."""
    where = "config.json" if isinstance(model, Mapping) else str(model)
    raw = dict(model) if isinstance(model, Mapping) else read_model_config(model)
    info = model_info(raw, where)
    if not devices:
        raise InvalidInputError("devices", "give at least one device, e.g. H100,B200")
    if tp < 1:
        raise InvalidInputError("tp", f"tensor parallel size must be at least 1, got {tp}")
    kv_dtype(SGLANG_KV.get(kv_cache_dtype, kv_cache_dtype))  # a dtype SGLang lacks is bad input, named
    fields = dict(info.fields)
    fields["kv_cache_dtype"] = kv_cache_dtype
    if page_size is not None:
        fields["page_size"] = page_size
    arch = architecture_of(raw, where)
    heads = fields["num_qo_heads"]
    errs = startup_errors(heads, fields.get("num_kv_heads") or heads, tp, 1, mla=fields.get("kv_lora_rank") is not None)
    if errs:
        raise InvalidInputError("tp", errs[0])
    layered = len(read_layers(raw).attention_groups) > 1
    rows: list[dict[str, Any]] = []
    for dev in devices:
        node = (nodes or {}).get(dev) or simulated_node(dev)
        for eng in ENGINES:
            e = _engine(eng, raw, where, kv_cache_dtype, page_size)
            if layered:
                over = {k: fields[k] for k in ("kv_cache_dtype", "page_size") if k in fields}
                mp = plan_model(raw, node, overrides=over, ruleset=ruleset, engine=e, tensor_parallel_size=tp)
                for g in mp.attention_groups:
                    if g.answer is not None:
                        rows.append(_row(dev, node, eng, g.answer, page_size, g.kind))
            else:
                a = plan_for(make_config(per_rank_fields(fields, tp)), node, ruleset=ruleset, engine=e)
                rows.append(_row(dev, node, eng, a, page_size, None))
    return {"model": where, "architecture": arch, "tp": tp, "kv_cache_dtype": kv_cache_dtype, "page_size": page_size,
            "devices": list(devices), "rows": rows, "notes": list(info.notes)}


def _cell(p: dict[str, Any]) -> str:
    fi = p["flashinfer"] or "-"
    if p["engine_backend"] is None:
        return f"FlashInfer {fi}"
    if p["runs_flashinfer"]:
        return f"{p['engine_backend']} -> FlashInfer {fi}"
    return f"{p['engine_backend']} (not FlashInfer; FlashInfer plan: {fi})"


def render_compare(rep: dict[str, Any]) -> str:
    from attnplan.render.tables import table

    out = [f"{rep['model']} ({rep['architecture'] or 'unknown architecture'}), tensor parallel {rep['tp']}, "
           f"KV cache {rep['kv_cache_dtype']}: vLLM 0.33 vs SGLang 0.5.23, per GPU (one rank)"]
    headers = ["GPU", "engine", "group", "prefill", "decode", "page (given -> runs)", "query dtype (p/d)", "status"]
    body = []
    extra: list[str] = []
    for r in rep["rows"]:
        pg = r["page_size"]
        body.append([f"{r['device']} ({r['capability']})", f"{r['engine']} {r['version'] or ''}".strip(), r["group"] or "",
                     _cell(r["prefill"]), _cell(r["decode"]),
                     f"{'unset' if pg['given'] is None else pg['given']} -> {pg['runs'] or '-'}",
                     f"{r['prefill']['query_dtype'] or '-'}/{r['decode']['query_dtype'] or '-'}",
                     r["status"] if r["status"] == "runs" or r["status"] in ("ok", "rejected") else r["status"].upper()])
        who = f"{r['device']} {r['engine']}" + (f" [{r['group']}]" if r["group"] else "")
        for c in r["coercions"]:
            extra.append(f"  {who}: coerced {c['field']} {'unset' if c['given'] is None else c['given']} -> {c['runs']} "
                         f"[{c['rule']}] (silently)")
        vd = r.get("verdict")
        if vd is not None and vd["outcome"] != "runs":
            extra.append(f"  {who}: {vd['outcome']}: {vd['message']}")
        for v in r["refusals"] if vd is None else ():  # a verdict says the outcome and its rule once
            extra.append(f"  {who}: refused ({v['outcome']}, {v['phase']}) [{v['rule']}] {v['message']}")
    out += ["", table(headers, body)]
    if extra:
        out += ["", "coercions and refusals:", *extra]
    if any(r["engine"] == "vllm" and r["prefill"]["engine_backend"] is None for r in rep["rows"]):
        out += ["", "vLLM rows name the FlashInfer backends its FlashInfer backend runs (vLLM's own backend pick "
                    "is not reported by this engine layer)."]
    return "\n".join(out)

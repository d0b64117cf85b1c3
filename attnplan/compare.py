"""Side by side (issue 26): per GPU, what vLLM 0.33 and SGLang 0.5.23 each run for one model.

Each (GPU, engine) cell is one engine command planned by the one pipeline of model requests (issue 36
item 6: attnplan/request.py ``ModelRequest`` -> ``plan_request``): ``vllm serve MODEL -tp N --kv-cache-dtype K
[--block-size P]`` and ``sglang.launch_server --model-path MODEL --tp N --kv-cache-dtype K [--page-size P]``,
each in its engine's own spelling of the cache dtype. So a row says what ``attnplan vllm serve`` /
``attnplan sglang launch_server`` say for the same command: the same verdict (a split the engine refuses is
its ``fails-at-startup``, not bad input), the same per-rank plan (``commands``: verdict and plan JSON as
``--json`` prints them). A row says, per phase, the engine's own backend (where the engine layer names it),
the FlashInfer backend, the query dtype, the page size given and run, the silent coercions and the
refusals with their phase; a layered model has a row per attention layer group. The CLI
(``attnplan compare``), REST (``POST /v1/compare``) and the status page's grid print these rows.

This module sits above both engines' packages (as attnplan/lines.py does): sglang/ cannot import the request
pipeline in vllm/, which imports SGLang's flags (tests/test_import_structure.py: no package circles).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from attnplan.policy import InvalidInputError, NodeFacts, PlanAnswer, RuleSet, simulated_node
from attnplan.policy.answer import Verdict
from attnplan.model.hfconfig import model_info
from attnplan.render.notes import notes_text
from attnplan.render.verdict import finish
from attnplan.sglang.flags import architecture_of
from attnplan.request import ModelRequest, cache_dtype, plan_request
from attnplan.vllm.serve import ServeAnswer, serve_json

ENGINES = ("vllm", "sglang")


def engine_spelling(engine: str, kv_cache_dtype: str, ruleset: Optional[RuleSet] = None) -> str:
    """``--kv-cache-dtype`` as ``engine``'s own command spells it (backends.yaml engines.<engine>.kv_dtype_spelling:
    attnplan's names, e.g. ``bf16`` -> vLLM's ``bfloat16``, ``fp8`` -> SGLang's ``fp8_e4m3``); a name the table
    lacks goes as given, for that engine to take or refuse in its own words (exit 2)."""
    from attnplan.policy import default_ruleset

    rs = ruleset if ruleset is not None else default_ruleset()
    table = rs.engines[engine].kv_dtype_spelling or {}
    return table.get(kv_cache_dtype, kv_cache_dtype)


def command_request(model: Any, engine: str, *, tp: int = 1, kv_cache_dtype: str = "auto",
                    page_size: Optional[int] = None, ruleset: Optional[RuleSet] = None) -> ModelRequest:
    """The one request of ``engine``'s command for ``model`` (a reference or a config.json dict): what a pasted
    ``vllm serve`` / ``sglang.launch_server`` line with these flags builds (attnplan/lines.py)."""
    kv = engine_spelling(engine, kv_cache_dtype, ruleset)
    cache_dtype(engine, kv)   # exactly the engine's own spelling (vLLM's CacheDType, SGLang's choices), as a line's
    return ModelRequest.build(model=model, engine=engine, tensor_parallel_size=tp, kv_cache_dtype=kv,
                              block_size=page_size)


def _phase(a: Optional[PlanAnswer], ph: str) -> dict[str, Any]:
    eb = ((a.engine_phases or {}).get(ph) or a.engine_backend) if a is not None else None
    pp = getattr(a.plan, ph) if a is not None and a.plan is not None else None
    return {"engine_backend": eb.name if eb is not None else None,
            "runs_flashinfer": eb.runs_flashinfer if eb is not None else (pp is not None),
            "engine_note": eb.note if eb is not None else "",
            "flashinfer": pp.backend if pp is not None else None,
            "query_dtype": pp.query_dtype if pp is not None else None}


def _row(device: str, node: NodeFacts, engine: str, version: Optional[str], a: Optional[PlanAnswer],
         verdict: Optional[Verdict], page_given: Optional[int], group: Optional[str]) -> dict[str, Any]:
    v = verdict
    status = a.status if a is not None else "startup_error"
    return {
        "device": device, "capability": node.capability_str, "engine": engine, "version": version,
        # one standard for both engines: the verdict of each engine's command (policy/verdict.py), its outcome as
        # the row's status; ``flashinfer_plan`` is the status of the FlashInfer plan beneath it
        "group": group, "status": v.outcome if v is not None else status, "flashinfer_plan": status,
        "verdict": finish(v).model_dump(mode="json") if v is not None else None,
        "prefill": _phase(a, "prefill"), "decode": _phase(a, "decode"),
        "page_size": {"given": page_given, "runs": a.plan.kv_cache.page_size if a is not None and a.plan is not None
                      else None},
        "coercions": [c.model_dump(mode="json") for c in a.coercions] if a is not None else [],
        "refusals": [{"rule": x.rule, "phase": x.phase, "outcome": x.outcome or "rule", "layer": x.layer,
                      "message": x.message} for x in a.violations] if a is not None else [],
    }


def _version(sa: ServeAnswer) -> Optional[str]:
    a = sa.answer or (sa.model.answer() if sa.model is not None else None)
    if a is not None:
        return a.engine.version
    if sa.model is not None:
        return sa.model.engine.version
    v = sa.verdict
    return v.engine.partition("==")[2] or None if v is not None else sa.release


def rows_of(sa: ServeAnswer, device: str, node: NodeFacts, engine: str, page_size: Optional[int]) -> list[dict[str, Any]]:
    """The rows of one engine command's answer: one for a model of one attention group (or one the engine refuses
    at startup), one per attention layer group otherwise (each group's own verdict)."""
    version = _version(sa)
    if sa.model is None or sa.answer is not None:
        return [_row(device, node, engine, version, sa.answer, sa.verdict, page_size, None)]
    return [_row(device, node, engine, version, g.answer, g.answer.verdict, page_size, g.kind)
            for g in sa.model.attention_groups if g.answer is not None]


def compare(model: str | Mapping[str, Any], devices: Sequence[str], *, tp: int = 1, kv_cache_dtype: str = "auto",
            page_size: Optional[int] = None, ruleset: Optional[RuleSet] = None,
            nodes: Optional[Mapping[str, NodeFacts]] = None) -> dict[str, Any]:
    """Rows per (device, engine[, layer group]) for ``model`` (a config.json path, preset or cached repo id, or its
    dict), and ``commands``: per (device, engine) the command's verdict and per-rank plan JSON, as ``attnplan vllm
    serve --json`` / ``attnplan sglang launch_server --json`` print them (``--no-trace``)."""
    ref: Any = dict(model) if isinstance(model, Mapping) else model
    where = "config.json" if isinstance(model, Mapping) else str(model)
    if not devices:
        raise InvalidInputError("devices", "give at least one device, e.g. H100,B200")
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise InvalidInputError("tp", f"tensor parallel size must be an integer of at least 1, got {tp!r}")
    # one request per engine, built (and its flags checked in that engine's own words) before anything is planned
    requests = {eng: command_request(ref, eng, tp=tp, kv_cache_dtype=kv_cache_dtype, page_size=page_size,
                                     ruleset=ruleset) for eng in ENGINES}
    # the model is read once (a file, a preset, the HuggingFace cache), and every row plans that config.json: the
    # requests keep the model as given, so each answer names it as `vllm serve` / `sglang launch_server` would
    raw = requests["vllm"].load(allow_paths=True)
    info = model_info(raw, where)
    arch = architecture_of(raw, where)
    rows: list[dict[str, Any]] = []
    commands: list[dict[str, Any]] = []
    for dev in devices:
        node = (nodes or {}).get(dev) or simulated_node(dev)
        for eng in ENGINES:
            sa = plan_request(requests[eng], node, ruleset, allow_paths=True, loaded=raw)
            rows += rows_of(sa, dev, node, eng, page_size)
            data = serve_json(sa, trace=False)
            commands.append({"device": dev, "engine": eng, "verdict": data["verdict"], "status": data["status"],
                             "startup_error": data["startup_error"], "per_rank": data["per_rank"]})
    return {"model": where, "architecture": arch, "tp": tp, "kv_cache_dtype": kv_cache_dtype, "page_size": page_size,
            "devices": list(devices), "rows": rows, "commands": commands, "notes": list(notes_text(info.notes_says))}


def _cell(p: dict[str, Any]) -> str:
    fi = p["flashinfer"] or "-"
    if p["engine_backend"] is None:
        # no engine pick (a command the engine refuses at startup plans nothing): the FlashInfer plan, if any
        return f"FlashInfer {fi}" if p["flashinfer"] else "-"
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
    if any(r["engine"] == "vllm" and r["prefill"]["engine_backend"] is None and r["prefill"]["flashinfer"] is not None
           for r in rep["rows"]):
        out += ["", "vLLM rows name the FlashInfer backends its FlashInfer backend runs (vLLM's own backend pick "
                    "is not reported by this engine layer)."]
    return "\n".join(out)

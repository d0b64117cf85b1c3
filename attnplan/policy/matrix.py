"""The capability matrix, derived by evaluating the rule data (never by parsing code).

For every backend and every capability in the device catalog, each dimension (head size,
KV dtype, page size, sinks, soft-cap, ...) is varied alone from a baseline config and the
backend's rules are evaluated: what passes is what the matrix shows.
"""

from __future__ import annotations

from typing import Any

from .capability import format_capability
from .config import KV_CACHE_DTYPES, AttentionConfig
from .devices import catalog
from .candidates import evaluate_candidate, page_domain
from .engine import default_ruleset
from .engines import EngineLike, EngineSpec, parse_engine
from .facts import Fact, NodeFacts
from .representative import HEAD_SIZES, LOGITS_SOFT_CAP, MLA, SLIDING_WINDOW, STANDARD
from .rulepack import RuleSet
from .version import SUPPORTED_FLASHINFER



def _node(cap: int) -> NodeFacts:
    # A node with every software fact satisfied, so the matrix shows hardware and config limits.
    return NodeFacts(capability=Fact.declared(cap), gpu_count=Fact.declared(1),
                     flashinfer_version=Fact.declared(SUPPORTED_FLASHINFER),
                     flashinfer_cubin_version=Fact.declared(SUPPORTED_FLASHINFER),
                     cubin_dir_has_cubins=Fact.declared(False), artifactory_reachable=Fact.declared(True),
                     batch_invariant_env=Fact.declared(False), torch_cuda_version=Fact.declared("13.0"),
                     jit_toolchain=Fact.declared(True), vllm_version=Fact.declared(None))


def _passes(rs: RuleSet, cfg: AttentionConfig, node: NodeFacts, phase: str, backend: str,
            engine: EngineSpec) -> bool:
    return evaluate_candidate(cfg, node, phase, backend, ruleset=rs, engine=engine).ok


def capability_matrix(ruleset: RuleSet | None = None, *, engine: EngineLike = None) -> list[dict[str, Any]]:
    """One row per (backend, model kind, phase) and group of capabilities, for one engine layer."""
    rs = ruleset or default_ruleset()
    eng = parse_engine(engine, rs)  # an unknown engine is an error before any work
    caps = sorted({d.capability_int for d in catalog().devices})
    rows: list[dict[str, Any]] = []
    for backend, spec in rs.backends.items():
        models = ["standard", "mla"] if spec.kind == "any" else [spec.kind]
        for model in models:
            phases = spec.phases if not (model == "mla" and spec.kind == "any") else ["prefill"]
            base = AttentionConfig(**(MLA if model == "mla" else STANDARD))
            for cap in caps:
                node = _node(cap)
                for phase in phases:
                    if not _passes(rs, base, node, phase, backend, eng):
                        continue
                    row: dict[str, Any] = {
                        "backend": backend, "model": model, "phase": phase,
                        "capability": format_capability(cap),
                        "devices": [d.name for d in catalog().for_capability(cap)],
                    }
                    if model == "standard":
                        row["head_sizes"] = [h for h in HEAD_SIZES if _passes(rs, base.replace(head_dim=h), node, phase, backend, eng)]
                    elif phase == "prefill":
                        row["head_sizes"] = [f"{base.qk_head_dim}/{base.vo_head_dim}"]
                    else:
                        row["head_sizes"] = [f"{base.kv_lora_rank}+{base.qk_rope_head_dim}"]
                    row["kv_cache_dtypes"] = [k for k in KV_CACHE_DTYPES
                                              if _try(lambda k=k: _passes(rs, base.replace(kv_cache_dtype=k), node, phase, backend, eng))]
                    row["page_sizes"] = [p for p in sorted({1, 8, *page_domain(rs)}) if _passes(rs, base.replace(page_size=p), node, phase, backend, eng)]
                    row["sinks"] = model == "standard" and _passes(rs, base.replace(sinks=True), node, phase, backend, eng)
                    row["logits_soft_cap"] = _passes(rs, base.replace(logits_soft_cap=LOGITS_SOFT_CAP), node, phase, backend, eng)
                    row["sliding_window"] = _passes(rs, base.replace(sliding_window=SLIDING_WINDOW), node, phase, backend, eng)
                    row["fp8_query"] = _passes(rs, base.replace(dtype="fp8_e4m3", kv_cache_dtype="fp8"), node, phase, backend, eng)
                    row["batch_invariant"] = _passes(rs, base.replace(batch_invariant=True), node, phase, backend, eng)
                    rows.append(row)
    return _group(rows)


def _group(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows that differ only in capability become one row listing the capabilities."""
    grouped: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = repr({k: v for k, v in r.items() if k not in ("capability", "devices")})
        if key in grouped:
            grouped[key]["capabilities"].append(r["capability"])
            grouped[key]["devices"] += r["devices"]
        else:
            g = {k: v for k, v in r.items() if k != "capability"}
            g["capabilities"] = [r["capability"]]
            g["devices"] = list(r["devices"])
            grouped[key] = g
    return list(grouped.values())


def _try(fn) -> bool:  # type: ignore[no-untyped-def]
    try:
        return fn()
    except ValueError:
        return False


def _yn(v: bool) -> str:
    return "yes" if v else "no"


def matrix_markdown(ruleset: RuleSet | None = None, *, engine: EngineLike = None) -> str:
    """The matrix of one engine layer (``engine`` given), or of every engine layer in turn."""
    rs = ruleset or default_ruleset()
    engines = [parse_engine(engine, rs)] if engine else [parse_engine(name, rs) for name in rs.engines]
    out = [
        "# Capability matrix",
        "",
        f"Generated by `attnplan matrix --format markdown` from the rule packs (rules revision `{rs.revision}`);",
        "do not edit by hand. Each cell is found by evaluating the rules with one field changed from a",
        "baseline (bf16, 32/8 heads, head_dim 128; MLA: DeepSeek-V3 dims) on a node whose software facts",
        "all pass, so it shows hardware and configuration limits. `attnplan explain` shows a single case.",
        "Engine layers: `vllm` = FlashInfer's kernel rules plus vLLM's own gates (the default);",
        "`flashinfer` = the kernel rules alone (`attnplan matrix --engine flashinfer`).",
    ]
    for eng in engines:
        out += _engine_table(rs, eng)
    out += ["", "## Rules", "", "| id | layer | versions | title | source | verified |", "|---|---|---|---|---|---|"]
    for rule in rs.rules:
        versions = (f"vllm {rule.vllm}" if rule.vllm else f"flashinfer {rule.flashinfer}" if rule.flashinfer else "-")
        out.append(f"| `{rule.id}` | {rule.layer} | {versions} | {rule.title} | {rule.source} | {rule.provenance()} |")
    return "\n".join(out) + "\n"


def _engine_table(rs: RuleSet, engine: EngineSpec) -> list[str]:
    rows = capability_matrix(rs, engine=engine)
    spec = rs.layer(engine.name, engine.version)
    out = [
        "",
        f"## Engine `{engine}`" + (f" ({spec.covers})" if spec.covers else ""),
        "",
        spec.doc,
        "",
        "| backend | model | phase | capabilities | devices | head sizes | KV cache dtypes | page sizes | sinks | soft-cap | sliding window | fp8 query | batch-invariant |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append("| " + " | ".join([
            r["backend"], r["model"], r["phase"], ", ".join(r["capabilities"]), ", ".join(r["devices"]),
            ", ".join(map(str, r["head_sizes"])) or "-", ", ".join(r["kv_cache_dtypes"]) or "-",
            ", ".join(map(str, r["page_sizes"])) or "-", _yn(r["sinks"]), _yn(r["logits_soft_cap"]),
            _yn(r["sliding_window"]), _yn(r["fp8_query"]), _yn(r["batch_invariant"]),
        ]) + " |")
    return out

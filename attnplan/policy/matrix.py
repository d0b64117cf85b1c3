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
from .engine import _eval_candidate, default_ruleset, page_domain
from .facts import Fact, NodeFacts
from .facts_catalog import base_context
from .rulepack import RuleSet
from .version import SUPPORTED_FLASHINFER

HEAD_SIZES = (64, 96, 128, 192, 256, 512)
BASE_STANDARD = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8, dtype="bf16")
BASE_MLA = dict(num_qo_heads=128, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, dtype="bf16")


def _node(cap: int) -> NodeFacts:
    # A node with every software fact satisfied, so the matrix shows hardware and config limits.
    return NodeFacts(capability=Fact.declared(cap), gpu_count=Fact.declared(1),
                     flashinfer_version=Fact.declared(SUPPORTED_FLASHINFER),
                     flashinfer_cubin_version=Fact.declared(SUPPORTED_FLASHINFER),
                     cubin_dir_has_cubins=Fact.declared(False), artifactory_reachable=Fact.declared(True),
                     batch_invariant_env=Fact.declared(False))


def _passes(rs: RuleSet, cfg: AttentionConfig, node: NodeFacts, phase: str, backend: str,
            pages: tuple[int, ...] | None = None) -> bool:
    pages = pages if pages is not None else ((cfg.page_size,) if cfg.page_size else page_domain(rs))
    return _eval_candidate(rs, base_context(cfg, node), phase, backend, pages, False).ok


def capability_matrix(ruleset: RuleSet | None = None) -> list[dict[str, Any]]:
    rs = ruleset or default_ruleset()
    caps = sorted({d.capability_int for d in catalog().devices})
    rows: list[dict[str, Any]] = []
    for backend, spec in rs.backends.items():
        models = ["standard", "mla"] if spec.kind == "any" else [spec.kind]
        for model in models:
            phases = spec.phases if not (model == "mla" and spec.kind == "any") else ["prefill"]
            base = AttentionConfig(**(BASE_MLA if model == "mla" else BASE_STANDARD))
            for cap in caps:
                node = _node(cap)
                for phase in phases:
                    if not _passes(rs, base, node, phase, backend):
                        continue
                    row: dict[str, Any] = {
                        "backend": backend, "model": model, "phase": phase,
                        "capability": format_capability(cap),
                        "devices": [d.name for d in catalog().for_capability(cap)],
                    }
                    if model == "standard":
                        row["head_sizes"] = [h for h in HEAD_SIZES if _passes(rs, base.replace(head_dim=h), node, phase, backend)]
                    elif phase == "prefill":
                        row["head_sizes"] = [f"{base.qk_head_dim}/{base.vo_head_dim}"]
                    else:
                        row["head_sizes"] = [f"{base.kv_lora_rank}+{base.qk_rope_head_dim}"]
                    row["kv_cache_dtypes"] = [k for k in KV_CACHE_DTYPES
                                              if _try(lambda k=k: _passes(rs, base.replace(kv_cache_dtype=k), node, phase, backend))]
                    row["page_sizes"] = [p for p in page_domain(rs) if _passes(rs, base.replace(page_size=p), node, phase, backend)]
                    row["sinks"] = model == "standard" and _passes(rs, base.replace(sinks=True), node, phase, backend)
                    row["logits_soft_cap"] = _passes(rs, base.replace(logits_soft_cap=30.0), node, phase, backend)
                    row["sliding_window"] = _passes(rs, base.replace(sliding_window=4096), node, phase, backend)
                    row["fp8_query"] = _passes(rs, base.replace(dtype="fp8_e4m3", kv_cache_dtype="fp8"), node, phase, backend)
                    row["batch_invariant"] = _passes(rs, base.replace(batch_invariant=True), node, phase, backend)
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


def matrix_markdown(ruleset: RuleSet | None = None) -> str:
    rs = ruleset or default_ruleset()
    rows = capability_matrix(rs)
    out = [
        "# Capability matrix",
        "",
        f"Generated by `attnplan matrix --format markdown` from the rule packs (rules revision `{rs.revision}`);",
        "do not edit by hand. Each cell is found by evaluating the rules with one field changed from a",
        "baseline (bf16, 32/8 heads, head_dim 128; MLA: DeepSeek-V3 dims) on a node whose software facts",
        "all pass, so it shows hardware and configuration limits. `attnplan explain` shows a single case.",
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
    out += ["", "## Rules", "", "| id | title | source |", "|---|---|---|"]
    for rule in rs.rules:
        out.append(f"| `{rule.id}` | {rule.title} | {rule.source} |")
    return "\n".join(out) + "\n"

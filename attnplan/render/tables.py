"""Tables for people (the JSON contract is ``PlanAnswer.to_json``)."""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable, Optional, Sequence

from attnplan.policy import Explanation, NodeFacts, PlanAnswer, RuleSet
from .trace import entry_inputs


def _color() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def paint(text: str, code: str) -> str:
    return f"\033[{code}m{text}\033[0m" if _color() else text


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], indent: str = "") -> str:
    rows = [["" if c is None else str(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    def line(cells: Sequence[str]) -> str:
        return indent + "  ".join(c.ljust(widths[i]) for i, c in enumerate(cells)).rstrip()
    out = [line(headers), indent + "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    return "\n".join(out)


def node_label(node: NodeFacts) -> str:
    name = node.gpu_name.value or "no GPU"
    cap = node.capability_str or "?"
    return f"{name} (capability {cap}, {node.capability.source.value})"


def _engine(a: PlanAnswer) -> str:
    return a.engine.name + (f" {a.engine.version}" if a.engine.version else "")


def engine_line(answer: Any) -> Optional[str]:
    """The first line of every rendered answer that carries the engine's own backend choice (issue 21):
    what the engine selects without --attention-backend, and what the plan below is. ``answer``: a
    PlanAnswer or a ModelPlanAnswer (anything with ``engine_backend``)."""
    from .verdict import finish

    eb = finish(getattr(answer, "engine_backend", None))   # its note written from its data
    if eb is None or not eb.note:
        return None
    return paint(eb.note, "33;1") if not eb.runs_flashinfer else eb.note


_OUTCOME_COLOR = {"runs": "32;1", "wrong-output": "35;1"}


def render_verdict(v: Any) -> list[str]:
    """The verdict block that leads every rendered answer (policy/answer.py Verdict): the outcome of the command
    as typed, the engine's own pick, the rules that decide it and the fixes, each re-evaluated."""
    from .verdict import finish, verdict_message

    v = finish(v)   # its message and fixes written from their data
    out = [f"{paint(v.outcome.upper(), _OUTCOME_COLOR.get(v.outcome, '31;1'))}  {verdict_message(v)}"]
    sel = v.selected
    picked = sel.prefill if sel.prefill == sel.decode else f"prefill {sel.prefill}, decode {sel.decode}"
    kind = "FlashInfer, planned below" if v.modelled else "not FlashInfer's kernels"
    if picked != "none":
        out.append(f"  {v.engine} selects {picked}: {kind}")
    elif v.rules[:1] == ("vllm.engine-backend",):
        out.append(f"  {v.engine} finds no valid backend")
    if v.fixes:
        out.append("  fixes (each re-evaluated):")
        out.append(table(("change", "outcome", "selected"),
                         [(f.args or f.change, f.outcome, f.selected or "-") for f in v.fixes], indent="    "))
    return out


def plan_heading(v: Any) -> Optional[str]:
    """The line above a FlashInfer plan that is not what the command runs."""
    if v is None or v.flashinfer_plan == "command":
        return None
    return f"FlashInfer plan if forced with {v.forced_with} (the command as given does not run it):"


def render_answer(a: PlanAnswer) -> str:
    from .verdict import finish

    a = finish(a)   # every sentence written from the answer's data (render/notes.py)
    out: list[str] = []
    if a.verdict is not None:
        out += render_verdict(a.verdict) + [""]
        head = plan_heading(a.verdict)
        if head:
            out += [head, ""]
    else:
        line = engine_line(a)
        if line:
            out += [line, ""]
    if a.ok and a.plan is not None:
        p = a.plan
        out.append(f"{paint('OK', '32;1')}  {node_label(a.node)}  [engine {_engine(a)}]")
        out.append("")
        rows = [
            ("backend", p.prefill.backend, p.decode.backend),
            ("call", p.prefill.call, p.decode.call),
            ("kernel", p.prefill.kernel, p.decode.kernel),
            ("query dtype", p.prefill.query_dtype, p.decode.query_dtype),
            ("KV view dtype", p.prefill.kv_view_dtype, p.decode.kv_view_dtype),
            ("q_len / request", "-", p.decode.q_len_per_req),
            ("tensor cores", "-", "-" if p.decode.use_tensor_cores is None else p.decode.use_tensor_cores),
            ("on prefill kernel", "-", p.decode.runs_on_prefill_kernel),
            ("workspace", f"{p.prefill.workspace_bytes >> 20} MiB", f"{p.decode.workspace_bytes >> 20} MiB"),
        ]
        out.append(table(("", "prefill", "decode"), rows))
        c = p.decode_choice
        if c is not None:   # --engine flashinfer on a GPU with a measured boundary (rules/decode_choice.yaml)
            by = {p.decode.backend: p.decode.call, c.alternative.backend: c.alternative.call}
            out.append(f"decode per batch shape: {c.small} ({by[c.small]}) for a decode batch reading at most "
                       f"{c.small_up_to_kv_tokens} KV tokens, {c.large} ({by[c.large]}) above - measured ({c.id})")
        kv = p.kv_cache
        extra = f", nvfp4 scales {kv.nvfp4_scale_dtype}/{kv.nvfp4_block_size}" if kv.nvfp4_scale_dtype else ""
        out.append("")
        block = f"block_size {kv.block_size} on kernel pages of {kv.page_size}" if kv.block_size not in (None, kv.page_size) \
            else f"page_size {kv.page_size}"
        out.append(f"KV cache: layout {kv.layout}, {block}, storage {kv.kv_storage_dtype} viewed as "
                   f"{kv.kv_view_dtype}, {kv.num_kv_heads} KV heads x {kv.head_dim_k}{' (MLA latent)' if kv.mla else ''}{extra}")
        at = p.attention
        split = at.split_kv + (f" ({at.fixed_split_size} pages)" if at.fixed_split_size else "")
        out.append(f"attention: sm_scale {at.sm_scale:.4g}, window_left {at.window_left}, soft-cap {at.logits_soft_cap:g}, "
                   f"sinks {at.sinks}, split-KV {split}")
        out.append("")
        m = p.metadata
        out.append(table(("batch kind", "all_uses_trtllm", "host seq_lens", "paged_kv_indices", "prefill indptr"), [
            (k, getattr(m, k).all_uses_trtllm, getattr(m, k).needs_host_seq_lens,
             getattr(m, k).needs_paged_kv_indices, getattr(m, k).prefill_kv_indptr or "-")
            for k in ("prefill_only", "decode_only", "mixed")]))
        mods = [mod for ph in (p.prefill, p.decode) for mod in ph.modules]
        out.append("")
        out.append("warm-up: " + "; ".join(f"{m.kind} {m.name}" for m in mods))
    else:
        out.append(f"{paint('REJECTED', '31;1')}  {node_label(a.node)}  [engine {_engine(a)}]")
        out.append("")
        out.append(table(("rule", "layer", "phase", "backend", "observed", "required"), [
            (v.rule, v.layer, v.phase, v.backend or "-", v.observed, v.required) for v in a.violations]))
        out.append("")
        for v in a.violations:
            out.append(f"  [{v.rule}] {v.message}")
        out.append("")
        if a.suggestions:
            out.append("suggestions (each verified by re-evaluating every rule):")
            out.append(table(("field", "value", "result"), [
                (s.field, s.value, s.message) for s in a.suggestions], indent="  "))
        elif not (a.verdict is not None and a.verdict.fixes):
            out.append("no single-field change makes this configuration valid on this node.")
    if a.notes:
        out.append("")
        out.append("notes:")
        out += [f"  - {n}" for n in a.notes]
    return "\n".join(out)


def engine_rules_words(name: str, rs: Optional[RuleSet] = None) -> str:
    """Whose engine rules an explanation evaluates, from the rule set's ``engines.<name>`` (backends.yaml): none for
    attnplan's own adapter (the kernel rules alone), the engine's display name, or, where a resolver applies them
    (SGLang), its display name's, applied by its resolver (in its pipeline order)."""
    if rs is None:
        from attnplan.policy import default_ruleset

        rs = default_ruleset()
    layer = rs.engines.get(name)
    if layer is None:
        return name
    if layer.adapter:
        return "none"
    return f"{layer.display}'s, applied by its resolver" if layer.resolver is not None else layer.display


def render_explain(e: Explanation, ruleset: Optional[RuleSet] = None) -> str:
    verdict = {"pass": "pass", "fail": paint("FAIL", "31"), "skip": "n/a"}
    cols = [c for c in e.columns if any((r, c[0], c[1]) in e.cells for r in e.rules)]
    headers = ["rule", "layer"] + [("pair" if ph == "both" else f"{ph}/{b}") for ph, b in cols]
    rows = []
    for r in e.rules:
        if not any((r, ph, b) in e.cells for ph, b in cols):
            continue
        rows.append([r, (e.layers or {}).get(r, "kernel")]
                    + [verdict[e.cells[(r, ph, b)].verdict] if (r, ph, b) in e.cells else "-" for ph, b in cols])
    eng = e.answer.engine
    out = [render_answer(e.answer).splitlines()[0],
           f"engine layer: {eng.name}{' ' + eng.version if eng.version else ''} (kernel rules: FlashInfer; engine rules: "
           f"{engine_rules_words(eng.name, ruleset)})", "", table(headers, rows), "", "facts each rule read:"]
    seen: set[str] = set()
    for r in e.rules:
        for ph, b in cols:
            entry = e.cells.get((r, ph, b))
            if entry is None or r in seen:
                continue
            seen.add(r)
            facts = ", ".join(f"{k}={v}" for k, v in entry_inputs(entry).items() if k not in ("backend", "phase"))
            out.append(f"  {r}: {facts or '-'}  (needs {entry.required})")
    pb, db = e.answer.backends()
    out.append("")
    out.append(f"selected: prefill {pb or '-'}, decode {db or '-'}" if e.answer.ok else "selected: nothing (rejected)")
    return "\n".join(out)


def render_node(node: NodeFacts) -> str:
    rows = []
    summary = node.summary()
    for name in type(node).model_fields:
        f = getattr(node, name)
        rows.append((name, summary[name] if summary[name] is not None else "-", f.source.value, f.detail or ""))
    return table(("fact", "value", "source", "detail"), rows)


def _versions(r: Any) -> str:
    if r.layer == "engine" and getattr(r, "engine", None) not in (None, "vllm"):
        return f"{r.engine} {r.versions}" if r.versions else r.engine   # a second engine's own range (SGLang)
    return f"vllm {r.vllm}" if r.vllm else f"flashinfer {r.flashinfer}" if r.flashinfer else "-"


def render_rules(rs: RuleSet, only: set[str] | None = None) -> str:
    rows = []
    shown = [r for r in rs.rules if only is None or r.id in only]
    for r in shown:
        backends = sorted({b for c in r.checks for b in (c.backends or ())}) or ["(pair)" if any(c.scope == "pair" for c in r.checks) else "all"]
        rows.append((r.id, r.layer, _versions(r), r.title, ",".join(backends), r.source, r.provenance()))
    return (table(("id", "layer", "versions", "title", "backends", "source", "verified"), rows)
            + f"\n\nrules revision {rs.revision}; {len(shown)} rules")


def _verified(v: Any) -> Any:
    """A rule's ``verified:`` as JSON (its records, or the source-only reason)."""
    if v is None:
        return None
    return v.model_dump() if hasattr(v, "model_dump") else [x.model_dump() for x in v]


def model_rules(rs: RuleSet) -> list[dict[str, Any]]:
    """The rules a whole model's plan is checked against beside the packs' per-config ones (one per
    call with a ``jit_name``: policy/jit_names.py), as ``attnplan rules`` lists them."""
    return [{"id": j.rule, "layer": "kernel", "scope": "model", "call": call,
             "title": f"one {call} module per FlashInfer name across layer groups",
             "named_by": list(j.named_by), "compiled": list(j.compiled), "source": j.source,
             "verified": _verified(j.verified)}
            for call, j in sorted((c, info.jit_name) for c, info in rs.calls.items() if info.jit_name is not None)]


def rules_json(rs: RuleSet, only: set[str] | None = None) -> dict[str, Any]:

    return {
        "rules_revision": rs.revision,
        "rules": [{
            "id": r.id, "title": r.title, "reason": r.reason, "source": r.source, "fix": r.fix,
            "fixed_in": r.fixed_in, "pack": r.pack, "layer": r.layer, "flashinfer": r.flashinfer, "vllm": r.vllm,
            "verified": _verified(r.verified), "provenance": r.provenance(),
            "checks": [{"scope": c.scope, "backends": sorted(c.backends) if c.backends else None,
                        "phases": sorted(c.phases) if c.phases else None,
                        "when": c.when.describe() if c.when else None, "require": c.require.describe()}
                       for c in r.checks],
        } for r in rs.rules if only is None or r.id in only],
        "backends": {n: b.model_dump() for n, b in rs.backends.items()},
        "engines": {n: e.model_dump() for n, e in rs.engines.items()},
        # checked over a whole model's layer groups (policy/jit_names.py), not per config
        "model_rules": model_rules(rs) if only is None else [],
    }

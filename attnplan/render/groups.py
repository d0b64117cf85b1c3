"""A people table of a model's layer groups (the JSON is ``ModelPlanAnswer.to_json``)."""

from __future__ import annotations

from typing import Optional, Sequence

from attnplan.policy import Explanation
from attnplan.model import GroupPlan, ModelPlanAnswer, compact_layers

from .notes import all_notes_text
from .tables import node_label, paint, table


def _param(g: GroupPlan) -> str:
    if g.kind == "sliding":
        return f"window {g.sliding_window}"
    if g.kind == "chunked_local":
        return f"chunk {g.chunk_size}"
    if g.recurrent is not None:
        return g.recurrent.mixer
    return "-"


def render_groups(a: ModelPlanAnswer) -> str:
    from .tables import engine_line

    from .tables import plan_heading, render_verdict
    from .verdict import finish

    a = finish(a)   # every sentence written from the answer's data (render/notes.py)
    head = paint("OK", "32;1") if a.ok else paint("REJECTED", "31;1")
    line = engine_line(a)
    if a.verdict is not None:
        top = render_verdict(a.verdict) + [""]
        heading = plan_heading(a.verdict)
        top += [heading, ""] if heading else []
    else:
        top = [line, ""] if line else []
    out = top + [f"{head}  {a.model_type or 'model'}, {a.num_layers} layers, {len(a.layer_groups)} layer groups  {node_label(a.node)}", ""]
    rows = []
    for g in a.layer_groups:
        served = g.status != "not_served"
        rows.append((
            compact_layers(g.layers, a.num_layers), len(g.layers), g.kind, _param(g),
            f"{g.num_qo_heads}/{g.num_kv_heads}" if served else "-",
            (f"{g.head_dim_qk}" if g.head_dim_qk == g.head_dim_vo else f"{g.head_dim_qk}/{g.head_dim_vo}") if served else "-",
            f"{g.sm_scale:.6g}" if g.sm_scale is not None else "-",
            f"{g.logits_soft_cap:g}" if g.logits_soft_cap else "-",
            "yes" if g.sinks else "-",
            ("yes" if g.rope else "no") if served else "-",
            g.prefill.backend if g.prefill else ("REJECTED" if g.status == "rejected" else "not FlashInfer"),
            g.decode.backend if g.decode else ("" if g.status == "rejected" else "-"),
        ))
    out.append(table(("layers", "n", "kind", "window/chunk", "heads q/kv", "head dim", "scale", "soft-cap",
                      "sinks", "rope", "prefill", "decode"), rows))
    for g in a.layer_groups:
        if g.status == "rejected":
            out.append("")
            out.append(f"{paint('REJECTED', '31;1')} layers {compact_layers(g.layers, a.num_layers)} ({g.kind}):")
            for v in g.violations:
                where = v.phase if v.backend is None else f"{v.phase}/{v.backend}"
                out.append(f"  - [{v.rule}] {where}: {v.message}")
            for s in g.suggestions:
                out.append(f"  * {s.field}={s.value}: {s.message}")
        if g.chunked_local is not None and g.status == "ok":
            out.append("")
            out.append(f"layers {compact_layers(g.layers, a.num_layers)}: chunked local attention, {g.chunked_local.chunk_size}-token "
                       "chunks run as virtual requests on a causal kernel (no CUDA graph for these layers)")
    for v in a.violations:
        out.append(f"  - [{v.rule}] {v.phase}: {v.message}")
    kv = a.kv_cache_groups
    if kv is not None:
        out.append("")
        out.append(f"KV cache: {len(kv.groups)} vLLM KV-cache groups of {kv.layers_per_group} layers, block {kv.block_size} tokens "
                   f"(kernel page {kv.kernel_page_size}), {kv.page_bytes} bytes per block"
                   + (f"; recurrent state {kv.recurrent_state_bytes} bytes padded to the block" if kv.recurrent_state_bytes else ""))
    notes = all_notes_text(a)
    if notes:
        out.append("")
        out.extend(f"note: {n}" for n in notes)
    return "\n".join(out)


def render_groups_explain(a: ModelPlanAnswer, explanations: Sequence[Optional[Explanation]]) -> str:
    """``explain`` for a layered model: the groups, then each attention group's verdict and its rule
    table (``explanations`` from ``attnplan.model.explain_groups``, one per layer group)."""
    from .tables import render_explain

    from .verdict import finish

    a = finish(a)
    out = [render_groups(a)]
    for g, e in zip(a.layer_groups, explanations):
        if e is None:
            continue
        verdict = paint("OK", "32;1") if g.status == "ok" else paint("REJECTED", "31;1")
        out += ["", f"== layers {compact_layers(g.layers, a.num_layers)} ({g.kind}{', ' + _param(g) if _param(g) != '-' else ''}): {verdict}",
                render_explain(e)]
    return "\n".join(out)

"""A people table of a model's layer groups (the JSON is ``ModelPlanAnswer.to_json``)."""

from __future__ import annotations

from typing import Sequence

from attnplan.policy.model_plan import GroupPlan, ModelPlanAnswer

from .tables import node_label, paint, table


def _runs(layers: Sequence[int]) -> str:
    out: list[str] = []
    start = prev = layers[0]
    for x in list(layers[1:]) + [None]:  # type: ignore[list-item]
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if x is not None:
            start = prev = x
    return ",".join(out)


def compact_layers(layers: Sequence[int], num_layers: int | None = None) -> str:
    """Layer indices for people: ``all``, ``3..47 every 4``, ``all but 5..59 every 6``, ``0-4,6-10``."""
    xs = sorted(layers)
    if not xs:
        return "-"
    if num_layers is not None and xs == list(range(num_layers)):
        return f"all {num_layers}"
    steps = {b - a for a, b in zip(xs, xs[1:])}
    if len(xs) >= 3 and len(steps) == 1 and (d := steps.pop()) > 1:
        return f"{xs[0]}..{xs[-1]} every {d}"
    text = _runs(xs)
    if num_layers is not None and len(text) > 24:
        rest = sorted(set(range(num_layers)) - set(xs))
        if rest and len(rest) < len(xs):
            return f"all but {compact_layers(rest)}"
    return text


def _param(g: GroupPlan) -> str:
    if g.kind == "sliding":
        return f"window {g.sliding_window}"
    if g.kind == "chunked_local":
        return f"chunk {g.chunk_size}"
    if g.recurrent is not None:
        return g.recurrent.mixer
    return "-"


def render_groups(a: ModelPlanAnswer) -> str:
    head = paint("OK", "32;1") if a.ok else paint("REJECTED", "31;1")
    out = [f"{head}  {a.model_type or 'model'}, {a.num_layers} layers, {len(a.layer_groups)} layer groups  {node_label(a.node)}", ""]
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
    if a.notes:
        out.append("")
        out.extend(f"note: {n}" for n in a.notes)
    return "\n".join(out)


def render_groups_explain(a: ModelPlanAnswer, ruleset=None) -> str:
    """``explain`` for a layered model: each attention group's verdict, then its rule table."""
    from attnplan.policy.explain import explain

    from .tables import render_explain

    out = [render_groups(a)]
    for g in a.layer_groups:
        if g.config is None:
            continue
        verdict = paint("OK", "32;1") if g.status == "ok" else paint("REJECTED", "31;1")
        out += ["", f"== layers {compact_layers(g.layers, a.num_layers)} ({g.kind}{', ' + _param(g) if _param(g) != '-' else ''}): {verdict}",
                render_explain(explain(g.config, a.node, ruleset))]
    return "\n".join(out)

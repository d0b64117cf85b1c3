"""The notes ``plan_model`` tells about a model as a whole, written from the answer's own data (issue 36
item 6): a layer group FlashInfer attention does not serve, a model with no attention layer, a hybrid model's
attention block raised to hold the recurrent state (model/plan.py ``_kv_cache_groups``).

TRANSITIONAL: model/plan.py still appends the same text to ``ModelPlanAnswer.notes`` (the JSON contract's
``notes``); tests/test_verdict_render.py holds the two equal, so the planner's copy can go once the JSON is
finished above the planner (render/answer.py).
"""

from __future__ import annotations

from typing import Any

from attnplan.model import compact_layers

NOT_SERVED = "not served by FlashInfer attention"


def kv_cache_notes(kv: Any) -> list[str]:
    """A KVCacheGroupsPlan's notes: the hybrid block raise, when there was one."""
    if kv is None or kv.raised_attention_page_bytes is None:
        return []
    return [f"hybrid KV cache: attention block raised to {kv.block_size} tokens so that its page "
            f"({kv.raised_attention_page_bytes} bytes) holds one request's recurrent state "
            f"({kv.recurrent_state_bytes} bytes); kernels still see {kv.kernel_page_size}-token pages"]


def group_notes(g: Any) -> list[str]:
    """A layer group's own note when FlashInfer attention does not serve it (a recurrent mixer)."""
    if g.status != "not_served":
        return []
    return [f"{NOT_SERVED} (a recurrent mixer); its state is paged beside the KV cache"]


def model_notes(m: Any) -> list[str]:
    """The notes ``plan_model`` writes about the model (a ModelPlanAnswer), in its order."""
    out = kv_cache_notes(m.kv_cache_groups)
    for g in m.layer_groups:
        if not g.is_attention:
            what = g.recurrent.mixer if g.recurrent is not None else g.kind
            out.append(f"layers {compact_layers(g.layers, m.num_layers)} ({g.kind}, {what}): {NOT_SERVED}")
    if not m.attention_groups:
        out.append("no attention layers: nothing for FlashInfer attention to serve")
    return out

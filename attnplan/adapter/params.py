"""The scalar attention parameters every backend applies, read once from the plan answer.

Scale, window and soft cap come from ``plan.attention`` (the policy computed them from the model's
own attention code: head_dim^-0.5, Gemma's query_pre_attn_scalar, YaRN's mscale^2, ...); nothing
here recomputes them. Head counts and dims come from the config the plan was made for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from attnplan.policy import PlanAnswer


@dataclass(frozen=True)
class AttentionParams:
    num_qo_heads: int
    num_kv_heads: int
    head_dim_qk: int
    head_dim_vo: int
    sm_scale: float
    window_left: int            # FlashInfer's inclusive left window: sliding_window - 1, or -1
    soft_cap: Optional[float]
    sinks: bool
    mla: bool = False
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    causal: bool = True

    @classmethod
    def from_answer(cls, answer: PlanAnswer) -> "AttentionParams":
        c = answer.config
        assert answer.plan is not None
        a = answer.plan.attention
        return cls(
            num_qo_heads=c.num_qo_heads, num_kv_heads=c.kv_heads, head_dim_qk=c.qk_head_dim,
            head_dim_vo=c.vo_head_dim, sm_scale=float(a.sm_scale), window_left=int(a.window_left),
            # plan.attention says 0.0 for "no soft cap"; FlashInfer's wrappers take None for it.
            soft_cap=float(a.logits_soft_cap) if a.logits_soft_cap else None, sinks=bool(a.sinks),
            mla=c.is_mla, kv_lora_rank=int(c.kv_lora_rank or 0), qk_rope_head_dim=int(c.qk_rope_head_dim or 0),
            causal=bool(a.causal),
        )


def split_kv_kwargs(attention: object) -> dict:
    """FlashInfer's plan() arguments for the plan's split-KV policy (``plan.attention``); batch
    invariance: ``fixed`` -> ``fixed_split_size`` pages, ``disabled`` -> ``disable_split_kv``."""
    mode = getattr(attention, "split_kv")
    if mode == "fixed":
        return dict(fixed_split_size=int(getattr(attention, "fixed_split_size")))
    if mode == "disabled":
        return dict(disable_split_kv=True)
    return {}

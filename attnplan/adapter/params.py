"""The scalar attention parameters every backend applies, read once from the plan answer."""

from __future__ import annotations

import math
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

    @classmethod
    def from_answer(cls, answer: PlanAnswer) -> "AttentionParams":
        c = answer.config
        # HF's sliding_window counts the query's own token; FlashInfer's window_left does not.
        window = c.sliding_window - 1 if c.sliding_window is not None else -1
        return cls(
            num_qo_heads=c.num_qo_heads, num_kv_heads=c.kv_heads, head_dim_qk=c.qk_head_dim,
            head_dim_vo=c.vo_head_dim, sm_scale=1.0 / math.sqrt(c.qk_head_dim), window_left=window,
            soft_cap=c.logits_soft_cap, sinks=c.sinks, mla=c.is_mla,
            kv_lora_rank=int(c.kv_lora_rank or 0), qk_rope_head_dim=int(c.qk_rope_head_dim or 0),
        )

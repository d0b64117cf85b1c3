"""What FlashInfer's device-tensor entry points (TRTLLM-gen and XQA) take alike, from the plan.

These calls take only device tensors (block tables, seq lens, cumsums), which is why a batch
that runs trtllm-gen in every phase needs no host metadata (seed 001). The builders are pure:
tests bind their output to FlashInfer 0.7.2's real signatures on the CPU (``signatures.py``).
"""

from __future__ import annotations

from typing import Any, Optional

from attnplan.policy import Plan

from ..dtypes import NVFP4
from ..params import AttentionParams
from ..step import PhaseBatch


def scales(params: AttentionParams, q_scale: float, k_scale: float, v_scale: float) -> tuple[float, float]:
    # trtllm-gen folds dequantization into the two GEMMs: S = (q k^T) * bmm1, O = (P v) * bmm2.
    return params.sm_scale * q_scale * k_scale, v_scale


def _kv_and_scales(plan: Plan, cache: Any) -> tuple[Any, Optional[tuple[Any, Any]]]:
    if plan.kv_cache.kv_view_dtype == NVFP4:
        # Packed e2m1 bytes plus the fp8 block scales, split per K and V as trtllm-gen takes them.
        return cache.data, (cache.scales[:, 0], cache.scales[:, 1])
    return cache.kernel_view(), None


def paged_kwargs(plan: Plan, params: AttentionParams, batch: PhaseBatch, q: Any, cache: Any, workspace: Any,
                 out: Any, q_scale: float, k_scale: float, v_scale: float, sinks: Optional[Any]) -> dict[str, Any]:
    """What the paged decode and context entry points take alike."""
    bmm1, bmm2 = scales(params, q_scale, k_scale, v_scale)
    kv, kv_sf = _kv_and_scales(plan, cache)
    return dict(
        query=q, kv_cache=kv, workspace_buffer=workspace, block_tables=batch.block_table,
        seq_lens=batch.seq_lens, bmm1_scale=bmm1, bmm2_scale=bmm2, window_left=params.window_left, out=out,
        # One float32 value per query head; XQA reshapes it per KV head (decode.py
        # xqa_batch_decode_with_kv_cache: sinks.reshape(num_kv_heads, -1)), so a tensor, not a list.
        sinks=sinks, kv_layout=plan.kv_cache.layout, kv_cache_sf=kv_sf,
    )

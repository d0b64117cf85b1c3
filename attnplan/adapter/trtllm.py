"""Keyword arguments for FlashInfer's TRTLLM-gen entry points, built from the plan.

These calls take only device tensors (block tables, seq lens, cumsums), which is why a batch
that runs trtllm-gen in every phase needs no host metadata (seed 001). The builders are pure:
tests bind their output to FlashInfer 0.7.2's real signatures on the CPU (``signatures.py``).
"""

from __future__ import annotations

from typing import Any, Optional

from attnplan.policy import Plan

from .dtypes import NVFP4
from .metadata import PhaseBatch
from .params import AttentionParams

# Where each entry point lives in flashinfer 0.7.2.post1: (module, function).
ENTRY_POINTS = {
    "trtllm_decode": ("flashinfer.decode", "trtllm_batch_decode_with_kv_cache"),
    "trtllm_context": ("flashinfer.prefill", "trtllm_batch_context_with_kv_cache"),
    "trtllm_mla_decode": ("flashinfer.mla", "trtllm_batch_decode_with_kv_cache_mla"),
    "trtllm_ragged": ("flashinfer.prefill", "trtllm_ragged_attention_deepseek"),
}


def _scales(params: AttentionParams, q_scale: float, k_scale: float, v_scale: float) -> tuple[float, float]:
    # trtllm-gen folds dequantization into the two GEMMs: S = (q k^T) * bmm1, O = (P v) * bmm2.
    return params.sm_scale * q_scale * k_scale, v_scale


def _kv_and_scales(plan: Plan, cache: Any) -> tuple[Any, Optional[tuple[Any, Any]]]:
    if plan.kv_cache.view_dtype == NVFP4:
        # Packed e2m1 bytes plus the fp8 block scales, split per K and V as trtllm-gen takes them.
        return cache.data, (cache.scales[:, 0], cache.scales[:, 1])
    return cache.kernel_view(), None


def _paged_kwargs(plan: Plan, params: AttentionParams, batch: PhaseBatch, q: Any, cache: Any, workspace: Any,
                  out: Any, q_scale: float, k_scale: float, v_scale: float, sinks: Optional[Any]) -> dict[str, Any]:
    """What the paged decode and context entry points take alike."""
    bmm1, bmm2 = _scales(params, q_scale, k_scale, v_scale)
    kv, kv_sf = _kv_and_scales(plan, cache)
    return dict(
        query=q, kv_cache=kv, workspace_buffer=workspace, block_tables=batch.block_table,
        seq_lens=batch.seq_lens, bmm1_scale=bmm1, bmm2_scale=bmm2, window_left=params.window_left, out=out,
        sinks=[sinks] if sinks is not None else None, kv_layout=plan.kv_cache.layout, kv_cache_sf=kv_sf,
    )


def decode_kwargs(plan: Plan, params: AttentionParams, batch: PhaseBatch, q: Any, cache: Any, workspace: Any,
                  out: Any, *, q_scale: float = 1.0, k_scale: float = 1.0, v_scale: float = 1.0,
                  sinks: Optional[Any] = None) -> dict[str, Any]:
    """``trtllm_batch_decode_with_kv_cache`` for the decode phase (q_len_per_req from the plan)."""
    return dict(
        _paged_kwargs(plan, params, batch, q, cache, workspace, out, q_scale, k_scale, v_scale, sinks),
        max_seq_len=batch.max_kv_len,
        # "auto" would pick xqa off 10.x; the plan says trtllm-gen, so name it.
        backend="trtllm-gen", q_len_per_req=plan.decode.q_len_per_req,
    )


def context_kwargs(plan: Plan, params: AttentionParams, batch: PhaseBatch, q: Any, cache: Any, workspace: Any,
                   out: Any, *, q_scale: float = 1.0, k_scale: float = 1.0, v_scale: float = 1.0,
                   sinks: Optional[Any] = None) -> dict[str, Any]:
    """``trtllm_batch_context_with_kv_cache`` for the prefill phase (paged, causal)."""
    return dict(
        _paged_kwargs(plan, params, batch, q, cache, workspace, out, q_scale, k_scale, v_scale, sinks),
        max_q_len=batch.max_q_len, max_kv_len=batch.max_kv_len, batch_size=batch.num_reqs,
        cum_seq_lens_q=batch.qo_indptr,
        # Seed 001: the paged context kernel takes the KV *page* indptr here (FlashInfer's own
        # wrapper passes its paged_kv_indptr), computed on the device this step - never stale.
        cum_seq_lens_kv=batch.kv_page_indptr, causal=True,
    )


def mla_decode_kwargs(plan: Plan, params: AttentionParams, batch: PhaseBatch, q: Any, cache: Any, workspace: Any,
                      out: Any, *, q_scale: float = 1.0, k_scale: float = 1.0) -> dict[str, Any]:
    """``trtllm_batch_decode_with_kv_cache_mla``: q [B, q_len, H, rank + rope] over the latent pages."""
    bmm1, bmm2 = params.sm_scale * q_scale * k_scale, k_scale   # V is the latent itself
    return dict(
        query=q, kv_cache=cache.kernel_view(), workspace_buffer=workspace,
        qk_nope_head_dim=params.head_dim_qk - params.qk_rope_head_dim, kv_lora_rank=params.kv_lora_rank,
        qk_rope_head_dim=params.qk_rope_head_dim, block_tables=batch.block_table, seq_lens=batch.seq_lens,
        max_seq_len=batch.max_kv_len, out=out, bmm1_scale=bmm1, bmm2_scale=bmm2, backend="trtllm-gen",
    )


def ragged_kwargs(params: AttentionParams, *, q: Any, k: Any, v: Any, workspace: Any, seq_lens: Any,
                  cum_seq_lens_q: Any, cum_seq_lens_kv: Any, max_q_len: int, max_kv_len: int, batch_size: int,
                  causal: bool, out: Any, lse: Any) -> dict[str, Any]:
    """``trtllm_ragged_attention_deepseek``: MLA prefill over decompressed K/V, with LSE for the
    context merge. FlashInfer's kernels write base-2 LSE (its ragged wrapper hands this function's
    LSE to ``_finish_lse`` as base 2), which is what the merge reads."""
    return dict(
        query=q, key=k, value=v, workspace_buffer=workspace, seq_lens=seq_lens, max_q_len=max_q_len,
        max_kv_len=max_kv_len, bmm1_scale=params.sm_scale, bmm2_scale=1.0, o_sf_scale=1.0,
        batch_size=batch_size, window_left=-1, cum_seq_lens_q=cum_seq_lens_q, cum_seq_lens_kv=cum_seq_lens_kv,
        enable_pdl=None, is_causal=causal, return_lse=True, out=out, lse=lse,
    )

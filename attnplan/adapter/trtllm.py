"""Keyword arguments for FlashInfer's device-tensor entry points (TRTLLM-gen and XQA), from the plan.

These calls take only device tensors (block tables, seq lens, cumsums), which is why a batch
that runs trtllm-gen in every phase needs no host metadata (seed 001). The builders are pure:
tests bind their output to FlashInfer 0.7.2's real signatures on the CPU (``signatures.py``).
``trtllm_batch_decode_with_kv_cache`` runs both trtllm-gen and XQA; which one is the plan's
``flashinfer_backend`` (never "auto", which would pick by capability behind the plan's back).
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
    "xqa_decode": ("flashinfer.decode", "trtllm_batch_decode_with_kv_cache"),
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
        # One float32 value per query head; XQA reshapes it per KV head (decode.py
        # xqa_batch_decode_with_kv_cache: sinks.reshape(num_kv_heads, -1)), so a tensor, not a list.
        sinks=sinks, kv_layout=plan.kv_cache.layout, kv_cache_sf=kv_sf,
    )


def xqa_draft_mask(q_len: int, num_reqs: int, device: Any) -> Any:
    """XQA's causal draft mask for speculative decode (q_len > 1), uint16 [B, q_len, 2 * words]:
    row i lets draft token i see draft tokens 0..i (xqa.py ``mask``; vLLM 0.33
    ``_make_xqa_draft_block_mask`` builds the same)."""
    import torch

    words = (q_len + 31) // 32
    q_idx = torch.arange(q_len, device=device).unsqueeze(1)
    kv_idx = torch.arange(words * 32, device=device).unsqueeze(0)
    bits = 1 << torch.arange(32, device=device, dtype=torch.int64)
    packed = ((kv_idx <= q_idx).view(q_len, words, 32).to(torch.int64) * bits).sum(-1).to(torch.uint32)
    per_req = packed.view(torch.uint16).reshape(q_len, words * 2)
    return per_req.unsqueeze(0).expand(num_reqs, -1, -1).contiguous()


def decode_kwargs(plan: Plan, params: AttentionParams, batch: PhaseBatch, q: Any, cache: Any, workspace: Any,
                  out: Any, *, q_scale: float = 1.0, k_scale: float = 1.0, v_scale: float = 1.0,
                  sinks: Optional[Any] = None, mask: Optional[Any] = None) -> dict[str, Any]:
    """``trtllm_batch_decode_with_kv_cache`` for the decode phase (q_len_per_req from the plan);
    ``backend`` is the plan's (trtllm-gen or xqa). XQA's speculative decode takes ``mask``
    (``xqa_draft_mask``), which the caller builds once per batch size and reuses."""
    d = plan.decode
    kw = dict(
        _paged_kwargs(plan, params, batch, q, cache, workspace, out, q_scale, k_scale, v_scale, sinks),
        max_seq_len=batch.max_kv_len, backend=d.flashinfer_backend, q_len_per_req=d.q_len_per_req,
    )
    if mask is not None:
        kw["mask"] = mask
    return kw


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
        max_seq_len=batch.max_kv_len, out=out, bmm1_scale=bmm1, bmm2_scale=bmm2, backend=plan.decode.flashinfer_backend,
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

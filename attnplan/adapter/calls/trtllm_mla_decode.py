"""``trtllm_mla_decode``: flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla (the same
function as flashinfer.mla's), TRTLLM-gen MLA decode cubins over the latent pages."""

from __future__ import annotations

from typing import Any

from attnplan.policy import Plan

from ..params import AttentionParams
from ..step import PhaseBatch
from ._contract import CallContext, KernelCall


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


class TrtllmMlaDecode(KernelCall):
    name = "trtllm_mla_decode"
    entry_point = "flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla"
    phases = ("decode",)
    returns_lse = False
    host_planned = False
    runs = "latent"

    def run_latent(self, b: CallContext, wrapper: Any, step: Any, q_nope: Any, q_pe: Any, cache: Any,
                   out: Any) -> None:
        import torch

        batch = step.decode
        assert batch is not None
        q_len = b.plan.decode.q_len_per_req
        q = torch.cat([q_nope, q_pe], -1).view(batch.num_reqs, q_len, *q_nope.shape[1:-1], -1)
        kw = mla_decode_kwargs(b.plan, b.params, batch, q, cache, b.device_workspace,
                               out.view(batch.num_reqs, q_len, *out.shape[1:]))
        self.entry()(**kw)

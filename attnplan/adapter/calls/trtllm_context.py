"""``trtllm_context``: flashinfer.prefill.trtllm_batch_context_with_kv_cache, paged causal prefill
over TRTLLM-gen cubins (loaded at first call: no JIT module)."""

from __future__ import annotations

from typing import Any, Optional

from attnplan.policy import Plan

from ..params import AttentionParams
from ..step import PhaseBatch
from ._contract import CallContext, KernelCall
from ._trtllm import paged_kwargs


def context_kwargs(plan: Plan, params: AttentionParams, batch: PhaseBatch, q: Any, cache: Any, workspace: Any,
                   out: Any, *, q_scale: float = 1.0, k_scale: float = 1.0, v_scale: float = 1.0,
                   sinks: Optional[Any] = None) -> dict[str, Any]:
    """``trtllm_batch_context_with_kv_cache`` for the prefill phase (paged, causal)."""
    return dict(
        paged_kwargs(plan, params, batch, q, cache, workspace, out, q_scale, k_scale, v_scale, sinks),
        max_q_len=batch.max_q_len, max_kv_len=batch.max_kv_len, batch_size=batch.num_reqs,
        cum_seq_lens_q=batch.qo_indptr,
        # Seed 001: the paged context kernel takes the KV *page* indptr here (FlashInfer's own
        # wrapper passes its paged_kv_indptr), computed on the device this step - never stale.
        cum_seq_lens_kv=batch.kv_page_indptr, causal=True,
    )


class TrtllmContext(KernelCall):
    name = "trtllm_context"
    entry_point = "flashinfer.prefill.trtllm_batch_context_with_kv_cache"
    phases = ("prefill",)
    returns_lse = False
    host_planned = False
    runs = "paged"

    def run(self, b: CallContext, wrapper: Any, step: Any, phase: str, q: Any, cache: Any, out: Any, *,
            k_scale: float, v_scale: float, sinks: Optional[Any]) -> None:
        assert step.prefill is not None
        kw = context_kwargs(b.plan, b.params, step.prefill, q, cache, b.device_workspace, out, k_scale=k_scale,
                            v_scale=v_scale, sinks=None if sinks is None else sinks.float())
        self.entry()(**kw)

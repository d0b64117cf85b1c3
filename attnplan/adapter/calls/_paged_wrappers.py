"""What the paged-KV wrappers share (paged_prefill, paged_decode, sink): FlashInfer's prefill
planner, the run arguments of a paged cache, and the prefill wrappers' CUDA-graph buffers."""

from __future__ import annotations

from typing import Any

from ..dtypes import NVFP4
from ._contract import CallContext


def plan_prefill(b: CallContext, wrapper: Any, batch: Any, phase: str) -> None:
    """The (causal) prefill planner: BatchPrefillWithPagedKVCacheWrapper.plan and its subclasses."""
    p = b.params
    # The batch's longest query, which the metadata already holds as a host int: FlashInfer would
    # otherwise work it out again with host torch ops (prefill.py plan: ``(qo_indptr_host[1:] -
    # qo_indptr_host[:-1]).max().item()``). Exact in a CUDA graph too, whose recorded plan arguments
    # are replayed (host_plan.py _PlanRecorder): a graph's shape fixes its query length. The longest KV
    # length is not passed: a recorded plan would replay a stale one, and with it cuDNN reads KV
    # lengths on the device only up to that bound (prefill.py plan ``max_sequence_kv``).
    wrapper.plan(batch.qo_indptr_cpu, batch.kv_page_indptr_cpu, batch.kv_indices, batch.last_page_len_cpu,
                 p.num_qo_heads, p.num_kv_heads, p.head_dim_qk, b.plan.kv_cache.page_size, head_dim_vo=p.head_dim_vo,
                 causal=p.causal, seq_lens=batch.seq_lens_cpu, max_token_per_sequence=batch.max_q_len,
                 **b.common[phase])


def run_kwargs(b: CallContext, cache: Any, k_scale: float, v_scale: float) -> dict[str, Any]:
    kw: dict[str, Any] = dict(k_scale=None if k_scale == 1.0 else k_scale,
                              v_scale=None if v_scale == 1.0 else v_scale)
    if b.kv_view == NVFP4:
        # Packed e2m1 pages plus their fp8 block scales, same [pages, 2, ...] layout (kv_cache.py).
        kw["kv_cache_sf"] = cache.scales
    return kw


def run_paged(b: CallContext, wrapper: Any, q: Any, cache: Any, out: Any, k_scale: float, v_scale: float) -> None:
    wrapper.run(q, cache.kernel_view(), out=out, **run_kwargs(b, cache, k_scale, v_scale))


def paged_scheduler(wrapper: Any) -> Any:
    """The paged wrappers' scheduler (``KernelCall.graph_scheduler``): flashinfer/decode.py and
    prefill.py ``plan`` end in ``self._plan_info = self._cached_module.plan(self._float_workspace_buffer,
    self._int_workspace_buffer, self._pin_memory_int_workspace_buffer, <host indptrs and lengths>,
    ...)``. None where the plan ran no scheduler (cuDNN, trtllm-gen: no plan info)."""
    from ..plan_replay import Scheduler

    module = getattr(wrapper, "_cached_module", None)
    if module is None or getattr(wrapper, "_plan_info", None) is None or not hasattr(module, "plan"):
        return None
    return Scheduler(module, "plan", wrapper._int_workspace_buffer)


def prefill_graph_buffers(layout: Any) -> dict[str, Any]:
    """flashinfer/prefill.py BatchPrefillWithPagedKVCacheWrapper.__init__'s CUDA-graph buffers."""
    return dict(use_cuda_graph=True, qo_indptr_buf=layout.qo_indptr, paged_kv_indptr_buf=layout.kv_indptr,
                paged_kv_indices_buf=layout.kv_indices[:-1],       # the spare last entry stays ours
                paged_kv_last_page_len_buf=layout.last_page_len)

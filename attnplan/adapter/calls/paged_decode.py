"""``paged_decode``: flashinfer.BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores, backend=...).
With tensor cores FlashInfer runs its prefill module for decode (flashinfer/decode.py
BatchDecodeWithPagedKVCacheWrapper.__init__: ``use_tensor_cores`` selects the prefill getter)."""

from __future__ import annotations

from typing import Any, Optional

from ._contract import CallContext, JitBuild, KernelCall
from ._jit import DECODE, PREFILL, module_dtypes, prefill_args
from ._paged_wrappers import paged_scheduler, run_paged


class PagedDecode(KernelCall):
    name = "paged_decode"
    entry_point = "flashinfer.BatchDecodeWithPagedKVCacheWrapper"
    phases = ("decode",)
    returns_lse = True
    host_planned = True
    runs = "paged"

    def construct(self, b: CallContext, pp: Any, **graph_buffers: Any) -> Any:
        return self.entry()(b.workspace, b.plan.kv_cache.layout, use_tensor_cores=bool(pp.use_tensor_cores),
                            backend=pp.flashinfer_backend, **graph_buffers)

    def graph_buffers(self, layout: Any) -> dict[str, Any]:
        # flashinfer/decode.py names its CUDA-graph buffers apart from the prefill wrapper's.
        return dict(use_cuda_graph=True, paged_kv_indptr_buffer=layout.kv_indptr,
                    paged_kv_indices_buffer=layout.kv_indices[:-1], paged_kv_last_page_len_buffer=layout.last_page_len)

    def plan(self, b: CallContext, wrapper: Any, batch: Any, phase: str) -> None:
        p = b.params
        wrapper.plan(batch.kv_page_indptr_cpu, batch.kv_indices, batch.last_page_len_cpu, p.num_qo_heads,
                     p.num_kv_heads, p.head_dim_qk, b.plan.kv_cache.page_size, seq_lens=batch.seq_lens_cpu,
                     **b.common[phase])

    def graph_plan_pages_only(self, pp: Any) -> bool:
        # FlashInfer's fa2 schedulers read the KV page indptr, not the token lengths: with tensor
        # cores csrc/batch_prefill.cu BatchPrefillWithKVCachePlan hands PrefillPlan (scheduler.cuh)
        # qo_indptr and kv_indptr and drops kv_len_arr; without, BatchDecodeWithPagedKVCachePlan
        # takes the indptr only. Its other writes in graph mode (decode.py plan: the indptr and
        # last-page lengths into the graph's buffers) the graph recomputes on the device. fa3's
        # planner (PrefillSM90Plan) and cuDNN / trtllm-gen read the lengths: planned every step.
        return pp.flashinfer_backend == "fa2"

    def graph_scheduler(self, wrapper: Any) -> Optional[Any]:
        return paged_scheduler(wrapper)

    def general_replay(self, pp: Any) -> bool:
        # fa2's decode in mixed steps, on tensor cores (the prefill module's scheduler) and on CUDA cores
        # (BatchDecodeWithPagedKVCachePlan): held to the float32 reference on the H100
        # (tests/gpu/test_general_replay_gpu.py "fa2", "cuda-core").
        return pp.flashinfer_backend == "fa2"

    def jit(self, params: dict[str, Any]) -> Optional[JitBuild]:
        if params["use_tensor_cores"]:
            return JitBuild(PREFILL, params["flashinfer_backend"], prefill_args(params))
        q, kv, o, sw, cap = module_dtypes(params)
        import torch

        return JitBuild(DECODE, params["flashinfer_backend"],
                        (q, kv, o, torch.int32, params["head_dim_qk"], params["head_dim_vo"], 0, sw, cap))

    def run(self, b: CallContext, wrapper: Any, step: Any, phase: str, q: Any, cache: Any, out: Any, *,
            k_scale: float, v_scale: float, sinks: Optional[Any]) -> None:
        run_paged(b, wrapper, q, cache, out, k_scale, v_scale)

"""``mla_paged_decode``: flashinfer.mla.BatchMLAPagedAttentionWrapper(backend=...), paged MLA
decode over the compressed (kv_lora_rank + rope) cache, planned on the host each step."""

from __future__ import annotations

from typing import Any, Optional

from ._contract import CallContext, JitBuild, KernelCall
from ._jit import MLA, module_dtypes


class MlaPagedDecode(KernelCall):
    name = "mla_paged_decode"
    entry_point = "flashinfer.mla.BatchMLAPagedAttentionWrapper"
    phases = ("decode",)
    returns_lse = True
    host_planned = True
    runs = "latent"
    # Its plan checks the page indices' count (mla/_batch_mla/_wrapper.py plan).
    graph_plan_counts_indices = True

    def construct(self, b: CallContext, pp: Any, **graph_buffers: Any) -> Any:
        return self.entry()(b.workspace, backend=pp.flashinfer_backend, **graph_buffers)

    def graph_buffers(self, layout: Any) -> dict[str, Any]:
        # mla/_batch_mla/_wrapper.py BatchMLAPagedAttentionWrapper.__init__'s names.
        return dict(use_cuda_graph=True, qo_indptr=layout.qo_indptr, kv_indptr=layout.kv_indptr,
                    kv_indices=layout.kv_indices[:-1], kv_len_arr=layout.seq_lens)

    def plan(self, b: CallContext, wrapper: Any, batch: Any, phase: str) -> None:
        from flashinfer.mla import MLAPlanMetadata

        p = b.params
        wrapper.plan(
            metadata=MLAPlanMetadata.csr(batch.qo_indptr_cpu, batch.kv_page_indptr_cpu, batch.kv_indices,
                                         batch.seq_lens_cpu),
            num_heads=p.num_qo_heads, head_dim_ckv=p.kv_lora_rank, head_dim_kpe=p.qk_rope_head_dim,
            page_size=b.plan.kv_cache.page_size, causal=getattr(b.plan, phase).q_len_per_req > 1, sm_scale=p.sm_scale,
            q_data_type=b.q_dtype[phase], kv_data_type=b.kv_data_type(), query_layout="split",
            kv_cache_layout="packed")

    def graph_scheduler(self, wrapper: Any) -> Optional[Any]:
        # mla/_batch_mla/_wrapper.py plan makes a new backend object per plan (plan_from_wrapper);
        # in CUDA-graph mode it reuses the previous one's int workspace, and its _plan_generated_fa
        # (_backends/_fa_common.py) calls cached_module.plan_with_staged_workspace_bytes(float, int,
        # pinned scratch, qo_indptr, kv_indptr, kv_len_arr host tensors, num_heads, head_dim_ckv,
        # causal), which stages the schedule through a fresh pinned buffer of its own.
        from ..plan_replay import Scheduler

        backend = getattr(wrapper, "_planned_backend", None)
        module = getattr(backend, "_cached_module", None)
        if module is None or getattr(backend, "_int_workspace_buffer", None) is None:
            return None
        if hasattr(module, "plan_with_staged_workspace_bytes"):     # (plan info, bytes staged)
            return Scheduler(module, "plan_with_staged_workspace_bytes", backend._int_workspace_buffer, _first)
        return Scheduler(module, "plan", backend._int_workspace_buffer)

    def jit(self, params: dict[str, Any]) -> Optional[JitBuild]:
        import torch

        q, kv, o, _, _ = module_dtypes(params)
        return JitBuild(MLA, params["flashinfer_backend"],
                        (q, kv, o, torch.int32, params["kv_lora_rank"], params["qk_rope_head_dim"], False))

    def run_latent(self, b: CallContext, wrapper: Any, step: Any, q_nope: Any, q_pe: Any, cache: Any,
                   out: Any) -> None:
        wrapper.run(query=(q_nope, q_pe), kv_cache=cache.kernel_view(), out=out)


def _first(result: Any) -> Any:
    return result[0]

"""``paged_prefill``: flashinfer.BatchPrefillWithPagedKVCacheWrapper - prefill, and speculative
decode (q_len_per_req > 1 runs the causal prefill kernel, plan.decode.runs_on_prefill_kernel)."""

from __future__ import annotations

from typing import Any, Optional

from ._contract import CallContext, JitBuild, KernelCall
from ._jit import PREFILL, prefill_args
from ._paged_wrappers import paged_scheduler, plan_prefill, prefill_graph_buffers, run_paged


class PagedPrefill(KernelCall):
    name = "paged_prefill"
    entry_point = "flashinfer.BatchPrefillWithPagedKVCacheWrapper"
    phases = ("prefill", "decode")
    returns_lse = True
    host_planned = True
    runs = "paged"

    def construct(self, b: CallContext, pp: Any, **graph_buffers: Any) -> Any:
        return self.entry()(b.workspace, b.plan.kv_cache.layout, backend=pp.flashinfer_backend, **graph_buffers)

    def graph_buffers(self, layout: Any) -> dict[str, Any]:
        return prefill_graph_buffers(layout)

    def plan(self, b: CallContext, wrapper: Any, batch: Any, phase: str) -> None:
        plan_prefill(b, wrapper, batch, phase)

    def graph_scheduler(self, wrapper: Any) -> Optional[Any]:
        return paged_scheduler(wrapper)

    def general_replay(self, pp: Any) -> bool:
        # fa2 and fa3 prefill, and the speculative decode that runs on either: held to the float32
        # reference on the H100 (tests/gpu/test_general_replay_gpu.py: probed, fa2, spec-q3, fa3-spec-q3;
        # bench/logs/h100-2026-11-26s/). cuDNN / trtllm-gen run no scheduler to replay.
        return pp.flashinfer_backend in ("fa2", "fa3")

    def jit(self, params: dict[str, Any]) -> Optional[JitBuild]:
        return JitBuild(PREFILL, params["flashinfer_backend"], prefill_args(params))

    def run(self, b: CallContext, wrapper: Any, step: Any, phase: str, q: Any, cache: Any, out: Any, *,
            k_scale: float, v_scale: float, sinks: Optional[Any]) -> None:
        run_paged(b, wrapper, q, cache, out, k_scale, v_scale)

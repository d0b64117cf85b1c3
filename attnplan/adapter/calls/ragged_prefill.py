"""``ragged_prefill``: flashinfer.BatchPrefillWithRaggedKVCacheWrapper(backend=...), MLA prefill
over decompressed K/V with LSE for the context merge. One wrapper per part (``new`` causal,
``context`` not), made on first use and planned on the host each step; none per phase."""

from __future__ import annotations

from typing import Any, Optional

from ._contract import CallContext, JitBuild, KernelCall
from ._jit import PREFILL, prefill_args
from ._paged_wrappers import paged_scheduler


class RaggedPrefill(KernelCall):
    name = "ragged_prefill"
    entry_point = "flashinfer.BatchPrefillWithRaggedKVCacheWrapper"
    phases = ("prefill",)
    returns_lse = True
    host_planned = True
    runs = "ragged"

    def graph_scheduler(self, wrapper: Any) -> Optional[Any]:
        # flashinfer/prefill.py BatchPrefillWithRaggedKVCacheWrapper.plan ends as the paged wrappers' do
        return paged_scheduler(wrapper)

    def general_replay(self, pp: Any) -> bool:
        # fa2 and fa3: both ragged parts (new tokens causal, the cached context not) held to the float32
        # reference on the H100 over 12 chunked-prefill steps each, both parts replaying
        # (tests/gpu/test_mla_prefill_replay_gpu.py; fa2 in bench/logs/h100-2026-11-27u/call1, fa2 and fa3 in
        # call2). Another backend opens once the same test has held it (it opens the gate for its own
        # executor); cuDNN / trtllm-gen run no scheduler to replay. Over stand-ins of FlashInfer's ragged plan
        # the replay learns and holds on the CPU, gate open and closed (tests/test_general_scheduler_replay.py).
        return pp.flashinfer_backend in ("fa2", "fa3")

    def jit(self, params: dict[str, Any]) -> Optional[JitBuild]:
        return JitBuild(PREFILL, params["flashinfer_backend"], prefill_args(params))

    def plan_part(self, b: CallContext, step: Any, key: str, qo_indptr_cpu: Any, kv_indptr_cpu: Any,
                  causal: bool) -> None:
        if key not in b.parts:
            b.parts[key] = self.entry()(b.workspace, "NHD", backend=b.plan.prefill.flashinfer_backend)
        p = b.params
        b.parts[key].plan(qo_indptr_cpu, kv_indptr_cpu, p.num_qo_heads, p.num_qo_heads, p.head_dim_qk,
                          head_dim_vo=p.head_dim_vo, causal=causal, sm_scale=p.sm_scale,
                          q_data_type=b.q_dtype["prefill"], kv_data_type=b.q_dtype["prefill"],
                          o_data_type=b.o_dtype, non_blocking=True)

    def run_part(self, b: CallContext, step: Any, key: str, q: Any, k: Any, v: Any, out: Any, lse: Any) -> None:
        b.parts[key].run(q, k, v, out=out, lse=lse, return_lse=True)

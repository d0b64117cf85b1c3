"""``sink``: flashinfer.BatchAttentionWithAttentionSinkWrapper (flashinfer/attention/_core.py), a
BatchPrefillWithPagedKVCacheWrapper over the "AttentionSink" JIT variant; decode runs it with
q_len_per_req query rows per request."""

from __future__ import annotations

from typing import Any, Optional

from ..dtypes import torch_dtype
from ._contract import CallContext, JitBuild
from ._jit import SINK, module_dtypes
from .paged_prefill import PagedPrefill
from attnplan.errors import AdapterCallError


def sink_jit_args(backend: str, q: Any, kv: Any, hd_qk: int, hd_vo: int, sw: bool) -> tuple:
    """What ``BatchAttentionWithAttentionSinkWrapper.__init__`` (flashinfer/attention/_core.py)
    passes to ``get_customize_batch_prefill_module``: (args, kwargs), the same URI included."""
    import torch
    from flashinfer.jit.attention.variants import attention_sink_decl
    from flashinfer.jit.utils import filename_safe_dtype_map

    args = (f"batch_prefill_attention_sink_{filename_safe_dtype_map[q]}_swa_{sw}_{backend}", q, kv, q, torch.int32,
            hd_qk, hd_vo, ["sink"], ["float"], ["sm_scale"], ["double"], "AttentionSink", attention_sink_decl[backend])
    kwargs = dict(use_sliding_window=sw, use_fp16_qk_reduction=False, pos_encoding_mode=0,
                  paged_kv_stride_mode="independent" if backend == "fa2" else "runtime", module_surface="full")
    return args, kwargs


class Sink(PagedPrefill):
    """FlashInfer's sink wrapper subclasses BatchPrefillWithPagedKVCacheWrapper: planned, graph-captured
    and replayed in prefill / mixed steps (general_replay; tests/gpu/test_general_replay_gpu.py "sink") as
    the paged prefill; constructed, built and run as its variant."""

    name = "sink"
    entry_point = "flashinfer.BatchAttentionWithAttentionSinkWrapper"

    def construct(self, b: CallContext, pp: Any, **graph_buffers: Any) -> Any:
        # The sink variant is compiled in the constructor: dtypes, dims and the window's presence.
        p = b.params
        return self.entry()(
            b.workspace, b.plan.kv_cache.layout, backend=pp.flashinfer_backend, q_data_type=torch_dtype(pp.query_dtype),
            kv_data_type=b.kv_data_type(), head_dim_qk=p.head_dim_qk, head_dim_vo=p.head_dim_vo,
            window_left=p.window_left, **graph_buffers)

    def jit(self, params: dict[str, Any]) -> Optional[JitBuild]:
        q, kv, _, sw, _ = module_dtypes(params)
        fb = params["flashinfer_backend"]
        return JitBuild(SINK, fb, sink_jit_args(fb, q, kv, params["head_dim_qk"], params["head_dim_vo"], sw))

    def run(self, b: CallContext, wrapper: Any, step: Any, phase: str, q: Any, cache: Any, out: Any, *,
            k_scale: float, v_scale: float, sinks: Optional[Any]) -> None:
        if sinks is None:
            raise AdapterCallError("the plan runs the attention-sink kernel: pass sinks (float32 [num_qo_heads])")
        # The sink variant takes its tensor and its scale positionally (attention/_core.py
        # "sink" / "sm_scale"); K's dequant scale folds into the scale as vLLM 0.33 does.
        wrapper.run(q, cache.kernel_view(), sinks.float(), b.params.sm_scale * k_scale,
                    v_scale=None if v_scale == 1.0 else v_scale, out=out)

"""The query a phase runs with, quantized as vLLM 0.33 does (issue 21).

vLLM's FlashInferMetadataBuilder.get_q_data_type quantizes the query to the fp8 KV dtype for prefill on
9.0 (fa3) and both phases on 10.x (trtllm-gen), and to fp8_e4m3 over an NVFP4 cache on 10.x; the plan
says so per phase (``PhasePlan.query_dtype``). FlashInferImpl.maybe_quant_query does it with
``scaled_fp8_quant(query, layer._q_scale)``: q / q_scale, saturated to the fp8 range. The scale comes
back in the kernel's softmax scale: ``q_scale`` for the paged wrappers, ``sm_scale * q_scale * k_scale``
for the sink wrapper, ``bmm1_scale *= q_scale`` for trtllm-gen and XQA.
(vllm/v1/attention/backends/flashinfer.py FlashInferImpl.maybe_quant_query, forward.)
"""

from __future__ import annotations

from typing import Any

from .dtypes import is_float8, torch_dtype


def quantize_query(q: Any, query_dtype: str, q_scale: float = 1.0) -> Any:
    """``q`` in the dtype the plan names for the phase: unchanged unless that is an fp8 type, then
    ``(q / q_scale)`` saturated to the type's range and cast (vLLM's scaled_fp8_quant, per tensor)."""
    if not is_float8(query_dtype):
        return q
    import torch

    want = torch_dtype(query_dtype)
    if q.dtype == want:
        return q
    limit = torch.finfo(want).max
    return (q.float() / q_scale).clamp(-limit, limit).to(want)


def folded_sm_scale(sm_scale: float, query_dtype: str, q_scale: float = 1.0, k_scale: float = 1.0) -> float:
    """The softmax scale a kernel applies to a quantized query's logits: ``sm_scale * q_scale * k_scale``
    (vLLM's bmm1_scale); a 16-bit query folds only K's dequant scale."""
    return sm_scale * (q_scale if is_float8(query_dtype) else 1.0) * k_scale

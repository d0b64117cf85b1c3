"""``trtllm_decode``: flashinfer.decode.trtllm_batch_decode_with_kv_cache(backend="trtllm-gen").

The same entry point runs XQA (``xqa_decode.py`` builds on this class); which one is the plan's
``flashinfer_backend`` (never "auto", which would pick by capability behind the plan's back)."""

from __future__ import annotations

from typing import Any, Optional

from attnplan.policy import Plan

from ..params import AttentionParams
from ..step import PhaseBatch
from ._contract import CallContext, KernelCall
from ._trtllm import paged_kwargs


def decode_kwargs(plan: Plan, params: AttentionParams, batch: PhaseBatch, q: Any, cache: Any, workspace: Any,
                  out: Any, *, q_scale: float = 1.0, k_scale: float = 1.0, v_scale: float = 1.0,
                  sinks: Optional[Any] = None, mask: Optional[Any] = None) -> dict[str, Any]:
    """``trtllm_batch_decode_with_kv_cache`` for the decode phase (q_len_per_req from the plan);
    ``backend`` is the plan's (trtllm-gen or xqa). XQA's speculative decode takes ``mask``
    (``xqa_decode.xqa_draft_mask``), which the caller builds once per batch size and reuses."""
    d = plan.decode
    kw = dict(
        paged_kwargs(plan, params, batch, q, cache, workspace, out, q_scale, k_scale, v_scale, sinks),
        max_seq_len=batch.max_kv_len, backend=d.flashinfer_backend, q_len_per_req=d.q_len_per_req,
    )
    if mask is not None:
        kw["mask"] = mask
    return kw


class TrtllmDecode(KernelCall):
    name = "trtllm_decode"
    entry_point = "flashinfer.decode.trtllm_batch_decode_with_kv_cache"
    phases = ("decode",)
    returns_lse = False
    host_planned = False
    runs = "paged"

    def kwargs(self, b: CallContext, step: Any, q: Any, cache: Any, out: Any, *, k_scale: float = 1.0,
               v_scale: float = 1.0, sinks: Optional[Any] = None) -> dict[str, Any]:
        """The entry point's arguments for this step's decode batch (benchmarks call it too)."""
        assert step.decode is not None
        return decode_kwargs(b.plan, b.params, step.decode, q, cache, b.device_workspace, out, k_scale=k_scale,
                             v_scale=v_scale, sinks=None if sinks is None else sinks.float(),
                             mask=step.extra.get("xqa_mask"))

    def run(self, b: CallContext, wrapper: Any, step: Any, phase: str, q: Any, cache: Any, out: Any, *,
            k_scale: float, v_scale: float, sinks: Optional[Any]) -> None:
        self.entry()(**self.kwargs(b, step, q, cache, out, k_scale=k_scale, v_scale=v_scale, sinks=sinks))

"""The FlashInfer backend: the kernels the plan names, planned once per step.

Each phase is run by its ``PhasePlan.call`` (``calls.py``): a FlashInfer wrapper planned on the
host once per step from host metadata and then run once per layer, or a function that takes
device tensors only (TRTLLM-gen, XQA). ``PhasePlan.flashinfer_backend`` is what FlashInfer's
``backend=`` arguments get; nothing here looks at a backend's name.

Workspaces: the wrappers share one zeroed float workspace (they run one after another on one
stream). Calls whose phase plan says ``zero_workspace`` (TRTLLM-gen, XQA) keep semaphores in
theirs, which a wrapper would dirty (seen on the H100: XQA over a workspace a wrapper had used
gave relative error 1.0), so they get a zeroed buffer of their own.

Importing this module imports flashinfer; ``attnplan.adapter`` imports it only when an executor
is built with the FlashInfer backend.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import flashinfer
import torch
from flashinfer.mla import MLAPlanMetadata

from attnplan.errors import AdapterCallError
from attnplan.policy import Plan

from . import trtllm
from .calls import spec, workspace_layout
from .dtypes import NVFP4, torch_dtype
from .merge import fold_heads
from .metadata import PhaseBatch, StepMetadata
from .params import AttentionParams, split_kv_kwargs


class FlashInferBackend:
    name = "flashinfer"

    def __init__(self, plan: Plan, params: AttentionParams, device: Any):
        self.plan = plan
        self.params = params
        self.device = torch.device(device)
        layout = workspace_layout({"prefill": plan.prefill, "decode": plan.decode})
        # Zeroed, not empty: FA2 decode wants a zero first use; semaphores start at zero.
        self.workspace = torch.zeros(max(layout["shared"], 1), dtype=torch.uint8, device=self.device)
        self.device_workspace = (torch.zeros(layout["private"], dtype=torch.uint8, device=self.device)
                                 if layout["private"] else self.workspace)
        self.q_dtype = {p: torch_dtype(getattr(plan, p).query_dtype) for p in ("prefill", "decode")}
        self.o_dtype = torch_dtype(plan.decode.output_dtype)
        self.kv_view = plan.kv_cache.view_dtype
        # plan() arguments that never change for the plan, built once (per step only the batch's).
        p = params
        self._common = {ph: dict(window_left=p.window_left, logits_soft_cap=p.soft_cap, sm_scale=p.sm_scale,
                                 q_data_type=self.q_dtype[ph], kv_data_type=self._kv_dtype(), o_data_type=self.o_dtype,
                                 non_blocking=True, **split_kv_kwargs(plan.attention)) for ph in ("prefill", "decode")}
        self._ragged: dict[str, Any] = {}
        self._masks: dict[int, Any] = {}
        self._decode = self.make_wrapper("decode")
        self._prefill = self.make_wrapper("prefill")

    # -- wrappers, by call -------------------------------------------------------------------
    def make_wrapper(self, phase: str, **graph_buffers: Any) -> Any:
        """The FlashInfer wrapper that runs ``phase`` (None for device-tensor calls and for MLA's
        ragged prefill, whose wrappers are made per part). ``graph_buffers``: CUDA-graph mode."""
        pp = getattr(self.plan, phase)
        make = _WRAPPERS.get(pp.call)
        return None if make is None else make(self, pp, **graph_buffers)

    def _kv_dtype(self) -> Any:
        return torch.uint8 if self.kv_view == NVFP4 else torch_dtype(self.kv_view)

    # -- planning (host side, once per step) -------------------------------------------------
    def plan_wrapper(self, wrapper: Any, b: PhaseBatch, phase: str) -> None:
        """Plan one host-planned wrapper for this step's batch of ``phase``."""
        pp = getattr(self.plan, phase)
        p = self.params
        common = self._common[phase]
        page = self.plan.kv_cache.page_size
        if pp.call == "paged_decode":
            wrapper.plan(b.kv_page_indptr_cpu, b.kv_indices, b.last_page_len_cpu, p.num_qo_heads, p.num_kv_heads,
                         p.head_dim_qk, page, seq_lens=b.seq_lens_cpu, **common)
        elif pp.call == "mla_paged_decode":
            wrapper.plan(
                metadata=MLAPlanMetadata.csr(b.qo_indptr_cpu, b.kv_page_indptr_cpu, b.kv_indices, b.seq_lens_cpu),
                num_heads=p.num_qo_heads, head_dim_ckv=p.kv_lora_rank, head_dim_kpe=p.qk_rope_head_dim,
                page_size=page, causal=pp.q_len_per_req > 1, sm_scale=p.sm_scale, q_data_type=self.q_dtype[phase],
                kv_data_type=self._kv_dtype(), query_layout="split", kv_cache_layout="packed")
        else:            # paged_prefill, sink: the (causal) prefill planner
            wrapper.plan(b.qo_indptr_cpu, b.kv_page_indptr_cpu, b.kv_indices, b.last_page_len_cpu, p.num_qo_heads,
                         p.num_kv_heads, p.head_dim_qk, page, head_dim_vo=p.head_dim_vo, causal=p.causal,
                         seq_lens=b.seq_lens_cpu, **common)

    def plan_step(self, step: StepMetadata) -> None:
        if step.decode is not None:
            if self._decode is not None:
                self.plan_wrapper(self._decode, step.decode, "decode")
            elif self.plan.decode.call == "xqa_decode" and self.plan.decode.q_len_per_req > 1:
                step.extra["xqa_mask"] = self.xqa_mask(step.decode.num_reqs)
        if step.prefill is not None and self._prefill is not None:
            self.plan_wrapper(self._prefill, step.prefill, "prefill")

    def xqa_mask(self, num_reqs: int) -> Any:
        """XQA's causal draft mask for ``num_reqs`` requests, built once per batch size."""
        m = self._masks.get(num_reqs)
        if m is None:
            m = self._masks[num_reqs] = trtllm.xqa_draft_mask(self.plan.decode.q_len_per_req, num_reqs, self.device)
        return m

    def plan_ragged(self, step: StepMetadata, key: str, qo_indptr_cpu: Any, kv_indptr_cpu: Any, causal: bool) -> None:
        """MLA prefill: one ragged plan per part (``new`` causal, ``context`` not)."""
        pp = self.plan.prefill
        if not spec(pp.call).wrapper:            # trtllm_ragged: device tensors only
            dev = dict(qo=qo_indptr_cpu.to(self.device, non_blocking=True),
                       kv=kv_indptr_cpu.to(self.device, non_blocking=True))
            kv_lens = kv_indptr_cpu[1:] - kv_indptr_cpu[:-1]
            q_lens = qo_indptr_cpu[1:] - qo_indptr_cpu[:-1]
            step.extra[key] = dict(**dev, seq_lens=kv_lens.to(self.device, non_blocking=True), causal=causal,
                                   max_q=int(q_lens.max()), max_kv=int(kv_lens.max()), n=len(kv_lens))
            return
        if key not in self._ragged:
            self._ragged[key] = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(
                self.workspace, "NHD", backend=pp.flashinfer_backend)
        p = self.params
        self._ragged[key].plan(qo_indptr_cpu, kv_indptr_cpu, p.num_qo_heads, p.num_qo_heads, p.head_dim_qk,
                               head_dim_vo=p.head_dim_vo, causal=causal, sm_scale=p.sm_scale,
                               q_data_type=self.q_dtype["prefill"], kv_data_type=self.q_dtype["prefill"],
                               o_data_type=self.o_dtype, non_blocking=True)

    # -- running (device side, once per layer) -----------------------------------------------
    def _wrapper_kwargs(self, cache: Any, k_scale: float, v_scale: float) -> dict[str, Any]:
        kw: dict[str, Any] = dict(k_scale=None if k_scale == 1.0 else k_scale,
                                  v_scale=None if v_scale == 1.0 else v_scale)
        if self.kv_view == NVFP4:
            # Packed e2m1 pages plus their fp8 block scales, same [pages, 2, ...] layout (kv_cache.py).
            kw["kv_cache_sf"] = cache.scales
        return kw

    def run_wrapper(self, wrapper: Any, call: str, q: Any, cache: Any, out: Any, *, k_scale: float,
                    v_scale: float, sinks: Optional[Any]) -> None:
        if call == "sink":
            if sinks is None:
                raise AdapterCallError("the plan runs the attention-sink kernel: pass sinks (float32 [num_qo_heads])")
            # The sink variant takes its tensor and its scale positionally (attention/_core.py
            # "sink" / "sm_scale"); K's dequant scale folds into the scale as vLLM 0.33 does.
            wrapper.run(q, cache.kernel_view(), sinks.float(), self.params.sm_scale * k_scale,
                        v_scale=None if v_scale == 1.0 else v_scale, out=out)
            return
        wrapper.run(q, cache.kernel_view(), out=out, **self._wrapper_kwargs(cache, k_scale, v_scale))

    def device_decode_kwargs(self, step: StepMetadata, q: Any, cache: Any, out: Any, *, k_scale: float = 1.0,
                             v_scale: float = 1.0, sinks: Optional[Any] = None) -> dict[str, Any]:
        assert step.decode is not None
        return trtllm.decode_kwargs(self.plan, self.params, step.decode, q, cache, self.device_workspace, out,
                                    k_scale=k_scale, v_scale=v_scale,
                                    sinks=None if sinks is None else sinks.float(), mask=step.extra.get("xqa_mask"))

    def run_decode(self, step: StepMetadata, q: Any, cache: Any, out: Any, *, k_scale: float = 1.0,
                   v_scale: float = 1.0, sinks: Optional[Any] = None) -> None:
        assert step.decode is not None
        call = self.plan.decode.call
        if self._decode is not None:
            self.run_wrapper(self._decode, call, q, cache, out, k_scale=k_scale, v_scale=v_scale, sinks=sinks)
            return
        # xqa_decode, trtllm_decode: one entry point, the plan's backend argument.
        flashinfer.decode.trtllm_batch_decode_with_kv_cache(
            **self.device_decode_kwargs(step, q, cache, out, k_scale=k_scale, v_scale=v_scale, sinks=sinks))

    def run_prefill(self, step: StepMetadata, q: Any, cache: Any, out: Any, *, k_scale: float = 1.0,
                    v_scale: float = 1.0, sinks: Optional[Any] = None) -> None:
        assert step.prefill is not None
        call = self.plan.prefill.call
        if self._prefill is not None:
            self.run_wrapper(self._prefill, call, q, cache, out, k_scale=k_scale, v_scale=v_scale, sinks=sinks)
            return
        kw = trtllm.context_kwargs(self.plan, self.params, step.prefill, q, cache, self.device_workspace, out,
                                   k_scale=k_scale, v_scale=v_scale, sinks=None if sinks is None else sinks.float())
        flashinfer.prefill.trtllm_batch_context_with_kv_cache(**kw)

    def run_ragged(self, step: StepMetadata, key: str, q: Any, k: Any, v: Any, out: Any, lse: Any) -> None:
        if key in self._ragged:                  # ragged_prefill
            self._ragged[key].run(q, k, v, out=out, lse=lse, return_lse=True)
            return
        e = step.extra[key]                      # trtllm_ragged
        kw = trtllm.ragged_kwargs(self.params, q=q, k=k, v=v, workspace=self.device_workspace, seq_lens=e["seq_lens"],
                                  cum_seq_lens_q=e["qo"], cum_seq_lens_kv=e["kv"], max_q_len=e["max_q"],
                                  max_kv_len=e["max_kv"], batch_size=e["n"], causal=e["causal"], out=out, lse=lse)
        flashinfer.prefill.trtllm_ragged_attention_deepseek(**kw)

    def run_mla_decode(self, step: StepMetadata, q_nope: Any, q_pe: Any, cache: Any, out: Any) -> None:
        assert step.decode is not None
        if self._decode is not None:             # mla_paged_decode
            self._decode.run(query=(q_nope, q_pe), kv_cache=cache.kernel_view(), out=out)
            return
        b = step.decode                          # trtllm_mla_decode
        q = torch.cat([q_nope, q_pe], -1).view(b.num_reqs, self.plan.decode.q_len_per_req, *q_nope.shape[1:-1], -1)
        kw = trtllm.mla_decode_kwargs(self.plan, self.params, b, q, cache, self.device_workspace,
                                      out.view(b.num_reqs, self.plan.decode.q_len_per_req, *out.shape[1:]))
        flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla(**kw)

    def merge(self, out: Any, lse: Any, v_ctx: Any, s_ctx: Any, has_context: Any) -> None:
        # The kernel merges only rows whose mask is set and leaves the others untouched (seed 004).
        t, h, d = out.shape
        f = fold_heads(h, d, out.element_size())
        mask = has_context.to(torch.uint8)
        if f > 1:
            out, v_ctx = out.view(t * f, h // f, d), v_ctx.reshape(t * f, h // f, d)
            lse, s_ctx = lse.view(t * f, h // f), s_ctx.reshape(t * f, h // f)
            mask = mask.repeat_interleave(f)
        flashinfer.merge_state_in_place(out, lse, v_ctx, s_ctx, mask=mask)


# -- one constructor per wrapper call (calls.py says which calls are wrappers) ----------------
def _paged_prefill(b: FlashInferBackend, pp: Any, **g: Any) -> Any:
    return flashinfer.BatchPrefillWithPagedKVCacheWrapper(b.workspace, b.plan.kv_cache.layout,
                                                          backend=pp.flashinfer_backend, **g)


def _paged_decode(b: FlashInferBackend, pp: Any, **g: Any) -> Any:
    return flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        b.workspace, b.plan.kv_cache.layout, use_tensor_cores=bool(pp.use_tensor_cores),
        backend=pp.flashinfer_backend, **g)


def _sink(b: FlashInferBackend, pp: Any, **g: Any) -> Any:
    # The sink variant is compiled in the constructor: dtypes, dims and the window's presence.
    p = b.params
    return flashinfer.BatchAttentionWithAttentionSinkWrapper(
        b.workspace, b.plan.kv_cache.layout, backend=pp.flashinfer_backend, q_data_type=torch_dtype(pp.query_dtype),
        kv_data_type=b._kv_dtype(), head_dim_qk=p.head_dim_qk, head_dim_vo=p.head_dim_vo,
        window_left=p.window_left, **g)


def _mla_paged_decode(b: FlashInferBackend, pp: Any, **g: Any) -> Any:
    return flashinfer.BatchMLAPagedAttentionWrapper(b.workspace, backend=pp.flashinfer_backend, **g)


_WRAPPERS: dict[str, Callable[..., Any]] = {
    "paged_prefill": _paged_prefill,
    "paged_decode": _paged_decode,
    "sink": _sink,
    "mla_paged_decode": _mla_paged_decode,
}
# Calls run without a per-phase wrapper: device-tensor functions, and MLA's ragged prefill
# (one wrapper per part, made in plan_ragged). A CPU test holds these two sets to calls.CALLS.
UNWRAPPED = frozenset({"xqa_decode", "trtllm_decode", "trtllm_context", "trtllm_mla_decode", "trtllm_ragged",
                       "ragged_prefill"})

"""The FlashInfer backend: the kernels the plan names, planned once per step.

Native phases (fa2, fa3, fa2-mla, fa3-mla) run FlashInfer's wrappers, each planned once per step
from host metadata (the plan says native kernels need it) and then run once per layer. TRTLLM-gen
phases call FlashInfer's functions with device tensors only (``trtllm.py``). One zeroed float
workspace is shared by every wrapper: they run one after another on one stream.

Importing this module imports flashinfer; ``kernels_adapter`` imports it only when an executor is
built with the FlashInfer backend.
"""

from __future__ import annotations

from typing import Any, Optional

import flashinfer
import torch
from flashinfer.mla import MLAPlanMetadata

from attnplan.policy import Plan

from . import trtllm
from .dtypes import NVFP4, torch_dtype
from .merge import fold_heads
from .metadata import PhaseBatch, StepMetadata
from .params import AttentionParams


def native_name(backend: str) -> str:
    """Plan backend -> the ``backend=`` FlashInfer's wrappers take (``fa3-mla`` -> ``fa3``)."""
    return backend.removesuffix("-mla")


def is_trtllm(backend: str) -> bool:
    return backend.startswith("trtllm")


class FlashInferBackend:
    name = "flashinfer"

    def __init__(self, plan: Plan, params: AttentionParams, device: Any):
        self.plan = plan
        self.params = params
        self.device = torch.device(device)
        nbytes = max(plan.prefill.workspace_bytes, plan.decode.workspace_bytes)
        # Zeroed, not empty: trtllm-gen keeps semaphores in it and FA2 decode wants a zero first use.
        self.workspace = torch.zeros(nbytes, dtype=torch.uint8, device=self.device)
        self.q_dtype = {p: torch_dtype(getattr(plan, p).query_dtype) for p in ("prefill", "decode")}
        self.o_dtype = torch_dtype(plan.decode.output_dtype)
        self.kv_view = plan.kv_cache.view_dtype
        self._decode: Any = None
        self._prefill: Any = None
        self._ragged: dict[str, Any] = {}
        layout = plan.kv_cache.layout
        d, p = plan.decode, plan.prefill
        if not is_trtllm(d.backend):
            if plan.kv_cache.mla:
                self._decode = flashinfer.BatchMLAPagedAttentionWrapper(self.workspace, backend=native_name(d.backend))
            elif d.runs_on_prefill_kernel:
                self._decode = flashinfer.BatchPrefillWithPagedKVCacheWrapper(self.workspace, layout, backend=d.backend)
            else:
                self._decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                    self.workspace, layout, use_tensor_cores=bool(d.use_tensor_cores), backend=d.backend)
        if not is_trtllm(p.backend) and not plan.kv_cache.mla:
            self._prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(self.workspace, layout, backend=p.backend)

    # -- planning (host side, once per step) -------------------------------------------------
    def _kv_dtype(self) -> Any:
        return torch.uint8 if self.kv_view == NVFP4 else torch_dtype(self.kv_view)

    def _plan_paged(self, wrapper: Any, b: PhaseBatch, phase: str, *, decode_kernel: bool) -> None:
        p = self.params
        common = dict(window_left=p.window_left, logits_soft_cap=p.soft_cap, sm_scale=p.sm_scale,
                      q_data_type=self.q_dtype[phase], kv_data_type=self._kv_dtype(), o_data_type=self.o_dtype,
                      non_blocking=True, seq_lens=b.seq_lens_cpu)
        page = self.plan.kv_cache.page_size
        if decode_kernel:
            wrapper.plan(b.kv_page_indptr_cpu, b.kv_indices, b.last_page_len_cpu, p.num_qo_heads, p.num_kv_heads,
                         p.head_dim_qk, page, **common)
        else:
            wrapper.plan(b.qo_indptr_cpu, b.kv_page_indptr_cpu, b.kv_indices, b.last_page_len_cpu, p.num_qo_heads,
                         p.num_kv_heads, p.head_dim_qk, page, head_dim_vo=p.head_dim_vo, causal=True, **common)

    def plan_step(self, step: StepMetadata) -> None:
        plan = self.plan
        if step.decode is not None and self._decode is not None:
            if plan.kv_cache.mla:
                b = step.decode
                self._decode.plan(
                    metadata=MLAPlanMetadata.csr(b.qo_indptr_cpu, b.kv_page_indptr_cpu, b.kv_indices, b.seq_lens_cpu),
                    num_heads=self.params.num_qo_heads, head_dim_ckv=self.params.kv_lora_rank,
                    head_dim_kpe=self.params.qk_rope_head_dim, page_size=plan.kv_cache.page_size,
                    causal=plan.decode.q_len_per_req > 1, sm_scale=self.params.sm_scale,
                    q_data_type=self.q_dtype["decode"], kv_data_type=self._kv_dtype(),
                    query_layout="split", kv_cache_layout="packed")
            else:
                self._plan_paged(self._decode, step.decode, "decode", decode_kernel=not plan.decode.runs_on_prefill_kernel)
        if step.prefill is not None and self._prefill is not None:
            self._plan_paged(self._prefill, step.prefill, "prefill", decode_kernel=False)

    def plan_ragged(self, step: StepMetadata, key: str, qo_indptr_cpu: Any, kv_indptr_cpu: Any, causal: bool) -> None:
        """MLA prefill: one ragged plan per part (``new`` causal, ``context`` not)."""
        b = self.plan.prefill.backend
        if is_trtllm(b):
            dev = dict(qo=qo_indptr_cpu.to(self.device, non_blocking=True),
                       kv=kv_indptr_cpu.to(self.device, non_blocking=True))
            kv_lens = kv_indptr_cpu[1:] - kv_indptr_cpu[:-1]
            q_lens = qo_indptr_cpu[1:] - qo_indptr_cpu[:-1]
            step.extra[key] = dict(**dev, seq_lens=kv_lens.to(self.device, non_blocking=True), causal=causal,
                                   max_q=int(q_lens.max()), max_kv=int(kv_lens.max()), n=len(kv_lens))
            return
        if key not in self._ragged:
            self._ragged[key] = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(self.workspace, "NHD", backend=b)
        p = self.params
        self._ragged[key].plan(qo_indptr_cpu, kv_indptr_cpu, p.num_qo_heads, p.num_qo_heads, p.head_dim_qk,
                               head_dim_vo=p.head_dim_vo, causal=causal, sm_scale=p.sm_scale,
                               q_data_type=self.q_dtype["prefill"], kv_data_type=self.q_dtype["prefill"],
                               o_data_type=self.o_dtype, non_blocking=True)

    # -- running (device side, once per layer) -----------------------------------------------
    def _scale_kwargs(self, k_scale: float, v_scale: float) -> dict[str, Any]:
        return dict(k_scale=None if k_scale == 1.0 else k_scale, v_scale=None if v_scale == 1.0 else v_scale)

    def run_decode(self, step: StepMetadata, q: Any, cache: Any, out: Any, *, k_scale: float = 1.0,
                   v_scale: float = 1.0, sinks: Optional[Any] = None) -> None:
        assert step.decode is not None
        if is_trtllm(self.plan.decode.backend):
            kw = trtllm.decode_kwargs(self.plan, self.params, step.decode, q, cache, self.workspace, out,
                                      k_scale=k_scale, v_scale=v_scale, sinks=sinks)
            flashinfer.decode.trtllm_batch_decode_with_kv_cache(**kw)
            return
        self._decode.run(q, cache.kernel_view(), out=out, **self._scale_kwargs(k_scale, v_scale))

    def run_prefill(self, step: StepMetadata, q: Any, cache: Any, out: Any, *, k_scale: float = 1.0,
                    v_scale: float = 1.0, sinks: Optional[Any] = None) -> None:
        assert step.prefill is not None
        if is_trtllm(self.plan.prefill.backend):
            kw = trtllm.context_kwargs(self.plan, self.params, step.prefill, q, cache, self.workspace, out,
                                       k_scale=k_scale, v_scale=v_scale, sinks=sinks)
            flashinfer.prefill.trtllm_batch_context_with_kv_cache(**kw)
            return
        self._prefill.run(q, cache.kernel_view(), out=out, **self._scale_kwargs(k_scale, v_scale))

    def run_ragged(self, step: StepMetadata, key: str, q: Any, k: Any, v: Any, out: Any, lse: Any) -> None:
        if is_trtllm(self.plan.prefill.backend):
            e = step.extra[key]
            kw = trtllm.ragged_kwargs(self.params, q=q, k=k, v=v, workspace=self.workspace, seq_lens=e["seq_lens"],
                                      cum_seq_lens_q=e["qo"], cum_seq_lens_kv=e["kv"], max_q_len=e["max_q"],
                                      max_kv_len=e["max_kv"], batch_size=e["n"], causal=e["causal"], out=out, lse=lse)
            flashinfer.prefill.trtllm_ragged_attention_deepseek(**kw)
            return
        self._ragged[key].run(q, k, v, out=out, lse=lse, return_lse=True)

    def run_mla_decode(self, step: StepMetadata, q_nope: Any, q_pe: Any, cache: Any, out: Any) -> None:
        assert step.decode is not None
        if is_trtllm(self.plan.decode.backend):
            b = step.decode
            q = torch.cat([q_nope, q_pe], -1).view(b.num_reqs, self.plan.decode.q_len_per_req, *q_nope.shape[1:-1], -1)
            kw = trtllm.mla_decode_kwargs(self.plan, self.params, b, q, cache, self.workspace,
                                          out.view(b.num_reqs, self.plan.decode.q_len_per_req, *out.shape[1:]))
            flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla(**kw)
            return
        self._decode.run(query=(q_nope, q_pe), kv_cache=cache.kernel_view(), out=out)

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

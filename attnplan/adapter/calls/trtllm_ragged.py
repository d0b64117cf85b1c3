"""``trtllm_ragged``: flashinfer.prefill.trtllm_ragged_attention_deepseek, TRTLLM-gen ragged MLA
prefill (vLLM TRTLLM_RAGGED) with LSE for the context merge; device tensors only."""

from __future__ import annotations

from typing import Any

from ..params import AttentionParams
from ._contract import CallContext, KernelCall


def ragged_kwargs(params: AttentionParams, *, q: Any, k: Any, v: Any, workspace: Any, seq_lens: Any,
                  cum_seq_lens_q: Any, cum_seq_lens_kv: Any, max_q_len: int, max_kv_len: int, batch_size: int,
                  causal: bool, out: Any, lse: Any) -> dict[str, Any]:
    """``trtllm_ragged_attention_deepseek``: MLA prefill over decompressed K/V, with LSE for the
    context merge. FlashInfer's kernels write base-2 LSE (its ragged wrapper hands this function's
    LSE to ``_finish_lse`` as base 2), which is what the merge reads."""
    return dict(
        query=q, key=k, value=v, workspace_buffer=workspace, seq_lens=seq_lens, max_q_len=max_q_len,
        max_kv_len=max_kv_len, bmm1_scale=params.sm_scale, bmm2_scale=1.0, o_sf_scale=1.0,
        batch_size=batch_size, window_left=-1, cum_seq_lens_q=cum_seq_lens_q, cum_seq_lens_kv=cum_seq_lens_kv,
        enable_pdl=None, is_causal=causal, return_lse=True, out=out, lse=lse,
    )


class TrtllmRagged(KernelCall):
    name = "trtllm_ragged"
    entry_point = "flashinfer.prefill.trtllm_ragged_attention_deepseek"
    phases = ("prefill",)
    returns_lse = True
    host_planned = False
    runs = "ragged"

    def plan_part(self, b: CallContext, step: Any, key: str, qo_indptr_cpu: Any, kv_indptr_cpu: Any,
                  causal: bool) -> None:
        # Device tensors only: the part's indptrs and lengths go to the device with the step.
        dev = dict(qo=qo_indptr_cpu.to(b.device, non_blocking=True),
                   kv=kv_indptr_cpu.to(b.device, non_blocking=True))
        kv_lens = kv_indptr_cpu[1:] - kv_indptr_cpu[:-1]
        q_lens = qo_indptr_cpu[1:] - qo_indptr_cpu[:-1]
        step.extra[key] = dict(**dev, seq_lens=kv_lens.to(b.device, non_blocking=True), causal=causal,
                               max_q=int(q_lens.max()), max_kv=int(kv_lens.max()), n=len(kv_lens))

    def run_part(self, b: CallContext, step: Any, key: str, q: Any, k: Any, v: Any, out: Any, lse: Any) -> None:
        e = step.extra[key]
        kw = ragged_kwargs(b.params, q=q, k=k, v=v, workspace=b.device_workspace, seq_lens=e["seq_lens"],
                           cum_seq_lens_q=e["qo"], cum_seq_lens_kv=e["kv"], max_q_len=e["max_q"],
                           max_kv_len=e["max_kv"], batch_size=e["n"], causal=e["causal"], out=out, lse=lse)
        self.entry()(**kw)

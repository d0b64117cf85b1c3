"""A pure-torch backend with the FlashInfer backend's interface (CPU or GPU).

It reads the same paged cache through the same step metadata, in float32, one request at a time:
slow and obviously correct. CI runs the adapter's plumbing on it (layouts, indptrs, views, merge,
speculative shapes, sliding window, soft cap, GQA); GPU tests compare FlashInfer against it.
It syncs with the host freely (it loops over requests): never time it.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from . import kv_cache as kvc
from .merge import merge_context_into
from .params import AttentionParams
from .step import PhaseBatch, RaggedPart, StepMetadata

LOG2E = 1.0 / math.log(2.0)


def attention_ref(q: Any, k: Any, v: Any, *, sm_scale: float, causal: bool = True, window_left: int = -1,
                  soft_cap: Optional[float] = None, sinks: Optional[Any] = None) -> tuple[Any, Any]:
    """One request. q [Tq, Hq, D], k [L, Hk, D], v [L, Hk, Dv] -> (out [Tq, Hq, Dv] float32,
    lse [Tq, Hq] base 2). Queries are the last Tq positions of the L keys (bottom-right causal)."""
    import torch

    tq, hq, _ = q.shape
    length, hk = k.shape[0], k.shape[1]
    dv = v.shape[-1]
    if length == 0:
        return (torch.zeros(tq, hq, dv, device=q.device), torch.full((tq, hq), -math.inf, device=q.device))
    group = hq // hk
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.float(), k) * sm_scale
    if soft_cap:
        s = soft_cap * torch.tanh(s / soft_cap)
    pos_q = torch.arange(length - tq, length, device=q.device).unsqueeze(1)
    pos_k = torch.arange(length, device=q.device).unsqueeze(0)
    allowed = torch.ones(tq, length, dtype=torch.bool, device=q.device)
    if causal:
        allowed &= pos_k <= pos_q
    if window_left >= 0:
        allowed &= (pos_q - pos_k) <= window_left
    s = s.masked_fill(~allowed, -math.inf)
    if sinks is not None:
        sink = sinks.float().view(hq, 1, 1).expand(hq, tq, 1)
        lse_e = torch.logsumexp(torch.cat([s, sink], -1), -1)
    else:
        lse_e = torch.logsumexp(s, -1)                         # [H, Tq]
    p = torch.exp(s - lse_e.unsqueeze(-1)).nan_to_num(0.0)
    out = torch.einsum("hqk,khd->qhd", p, v)
    return out, (lse_e * LOG2E).transpose(0, 1)


class ReferenceBackend:
    name = "reference"

    def __init__(self, plan: Any, params: AttentionParams, device: Any):
        self.plan = plan
        self.params = params
        self.device = device

    # Planning is a no-op: the step metadata is all the reference needs.
    def plan_step(self, step: StepMetadata) -> None:
        pass

    def replays_ragged(self) -> bool:
        return False                     # nothing planned: nothing to replay

    def plan_ragged(self, part: RaggedPart) -> None:
        part.step.extra[part.key] = (part.qo_indptr_cpu.tolist(), part.kv_indptr_cpu.tolist(), part.causal)

    def _paged(self, batch: PhaseBatch, q: Any, cache: kvc.PagedKVCache, out: Any, *, k_scale: float,
               v_scale: float, sinks: Optional[Any]) -> None:
        p = self.params
        qo = batch.qo_indptr.tolist()
        seq = batch.seq_lens.tolist()
        page = cache.plan.page_size
        for r in range(batch.num_reqs):
            pages = batch.block_table[r, : (seq[r] + page - 1) // page].long()
            k, v = kvc.gather(cache, pages, seq[r], k_scale=k_scale, v_scale=v_scale)
            o, _ = attention_ref(q[qo[r]:qo[r + 1]], k, v, sm_scale=p.sm_scale, causal=True,
                                 window_left=p.window_left, soft_cap=p.soft_cap, sinks=sinks)
            out[qo[r]:qo[r + 1]] = o.to(out.dtype)

    def run_decode(self, step: StepMetadata, q: Any, cache: Any, out: Any, *, k_scale: float = 1.0,
                   v_scale: float = 1.0, sinks: Optional[Any] = None) -> None:
        assert step.decode is not None
        self._paged(step.decode, q, cache, out, k_scale=k_scale, v_scale=v_scale, sinks=sinks)

    def run_prefill(self, step: StepMetadata, q: Any, cache: Any, out: Any, *, k_scale: float = 1.0,
                    v_scale: float = 1.0, sinks: Optional[Any] = None) -> None:
        assert step.prefill is not None
        self._paged(step.prefill, q, cache, out, k_scale=k_scale, v_scale=v_scale, sinks=sinks)

    def run_ragged(self, step: StepMetadata, key: str, q: Any, k: Any, v: Any, out: Any, lse: Any) -> None:
        qo, kv, causal = step.extra[key]
        for r in range(len(qo) - 1):
            o, s = attention_ref(q[qo[r]:qo[r + 1]], k[kv[r]:kv[r + 1]], v[kv[r]:kv[r + 1]],
                                 sm_scale=self.params.sm_scale, causal=causal)
            out[qo[r]:qo[r + 1]] = o.to(out.dtype)
            lse[qo[r]:qo[r + 1]] = s

    def run_mla_decode(self, step: StepMetadata, q_nope: Any, q_pe: Any, cache: Any, out: Any) -> None:
        import torch

        batch = step.decode
        assert batch is not None
        qo = batch.qo_indptr.tolist()
        seq = batch.seq_lens.tolist()
        page = cache.plan.page_size
        rank = self.params.kv_lora_rank
        q = torch.cat([q_nope, q_pe], -1)
        for r in range(batch.num_reqs):
            pages = batch.block_table[r, : (seq[r] + page - 1) // page].long()
            latent, _ = kvc.gather(cache, pages, seq[r])
            k = latent.unsqueeze(1)                                   # one latent "head" shared by all
            o, _ = attention_ref(q[qo[r]:qo[r + 1]], k, k[..., :rank], sm_scale=self.params.sm_scale, causal=True)
            out[qo[r]:qo[r + 1]] = o.to(out.dtype)

    def merge(self, out: Any, lse: Any, v_ctx: Any, s_ctx: Any, has_context: Any) -> None:
        merge_context_into(out, lse, v_ctx, s_ctx, has_context)

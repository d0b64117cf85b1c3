"""``AttentionExecutor``: run a plan's attention kernels, checked and warmed up at startup.

    answer = attnplan.require_plan(config)              # the rules decide (this node probed)
    ex = AttentionExecutor(answer)                      # re-checks the plan on this device first
    ex.warmup(progress=print)                           # compiles/loads exactly the plan's kernels
    cache = ex.allocate_kv_cache(num_pages=4096)
    step = ex.plan_step(StepInput(...))                 # once per step: metadata + kernel plans
    ex.append_kv(step, cache, k, v); out = ex.forward(step, q, cache)   # once per layer

Standard attention reads cached context and new tokens from the same pages in one causal pass
(the new tokens are appended first). MLA stores context compressed, so chunked MLA prefill
attends to the decompressed context and to the new tokens separately and merges the two by
log-sum-exp (``mla_prefill(..., context=...)``, seed 004).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from attnplan.errors import AdapterCallError
from attnplan.policy import NodeFacts, PlanAnswer, RuleSet, UnsupportedConfigurationError

from . import kv_cache as kvc
from .backend import AttentionBackend
from .calls import DEFAULT, DecodeSwitch, decode_phases, needs_finite_page_tail
from .decode_layout import DecodeLayouts
from .dtypes import torch_dtype
from .host_metadata import HostStaging
from .metadata import build_step
from .params import AttentionParams
from .query_quant import quantize_query
from .reference import ReferenceBackend
from .startup import check_plan
from .step import RaggedPart, StepInput, StepMetadata
from .warmup import WarmupReport, warmup
from attnplan.render.verdict import verdict_message


class AttentionExecutor:
    def __init__(self, answer: PlanAnswer, *, device: Any = "cuda", backend: str = "flashinfer",
                 node: Optional[NodeFacts] = None, check: Optional[bool] = None,
                 ruleset: Optional[RuleSet] = None, strict_selection: bool = True):
        """``backend``: ``flashinfer`` (the plan's kernels) or ``reference`` (pure torch, any device).
        ``check`` (default: on for flashinfer): re-evaluate the rules on ``node`` (default: this
        machine, probed now) and refuse a plan that does not hold, before touching the device."""
        if answer.plan is None:
            raise UnsupportedConfigurationError(answer, verdict_message(answer.verdict) if answer.verdict is not None else None)
        if check if check is not None else backend == "flashinfer":
            self.live = check_plan(answer, node, ruleset=ruleset, strict_selection=strict_selection)
        self.answer = answer
        self.plan = answer.plan
        self.params = AttentionParams.from_answer(answer)
        import torch

        self.device = torch.device(device)
        self._staging = HostStaging(self.device)
        self._layouts = DecodeLayouts(self.plan.kv_cache.page_size, self.device,
                                      indices=self.plan.metadata.decode_only.needs_paged_kv_indices)
        self.o_dtype = torch_dtype(self.plan.decode.output_dtype)
        self._mla = self.plan.kv_cache.mla
        # The one switch of a plan with a per-shape decode choice: the backend picks with it per step
        # and ``decode_call_for`` answers from it (graph keys); the reference backend runs either.
        self._switch = DecodeSwitch(self.plan) if getattr(self.plan, "decode_choice", None) is not None else None
        if backend == "flashinfer":
            from .flashinfer_backend import FlashInferBackend

            self.backend: AttentionBackend = FlashInferBackend(self.plan, self.params, self.device,
                                                               switch=self._switch)
        elif backend == "reference":
            self.backend = ReferenceBackend(self.plan, self.params, self.device)
        else:
            raise AdapterCallError(f"backend must be 'flashinfer' or 'reference', got {backend!r}")

    # -- startup -------------------------------------------------------------------------------
    def warmup(self, progress: Optional[Callable[[dict], None]] = None, *, parallel: bool = True) -> WarmupReport:
        """Compile/load every kernel the plan lists, then run one tiny step of each batch kind
        (prefill-only, decode-only, mixed) so that the first request compiles nothing. A plan with a
        per-shape decode choice lists both decode calls' modules (policy/plan.py build_plan); its tiny
        steps run the call a tiny batch picks, so each decode call then runs one decode-only step too."""
        report = warmup(self, progress, parallel=parallel)
        forced = getattr(self.backend, "forced_decode", None)
        if getattr(self.plan, "decode_choice", None) is None or forced is None:
            return report
        import time

        from .warmup import _built, _jit_dir, exercise

        jit_dir = _jit_dir()
        before = _built(jit_dir)
        for index, pp in enumerate(decode_phases(self.plan)):
            t0 = time.perf_counter()
            with forced(index):
                exercise(self, "decode_only")
            if self.device.type == "cuda":
                import torch

                torch.cuda.synchronize(self.device)
            report.batch_kinds[f"decode_only:{pp.call}"] = time.perf_counter() - t0
        after = _built(jit_dir)
        report.compiled_during_exercise = sorted({*report.compiled_during_exercise,
                                                  *(p for p, m in after.items() if before.get(p) != m)})
        return report

    def decode_call_for(self, num_pages: int) -> Any:
        """The phase plan of the decode call that runs a decode batch reading ``num_pages`` KV pages:
        ``plan.decode``, or where the plan carries a measured per-shape choice (``Plan.decode_choice``)
        the one its boundary picks - the comparison ``plan_step`` makes (calls/_choice.py). For
        CUDA-graph decode, which captures one call per graph: the key of the graph to replay."""
        return decode_phases(self.plan)[self._switch.for_pages(num_pages) if self._switch is not None else DEFAULT]

    def allocate_kv_cache(self, num_pages: int) -> kvc.PagedKVCache:
        return kvc.allocate(self.plan.kv_cache, num_pages, self.device, zeroed=needs_finite_page_tail(self.plan))

    # -- per step ------------------------------------------------------------------------------
    def plan_step(self, inp: StepInput) -> StepMetadata:
        """Metadata for this step's batch, and every kernel planned for it (once per step)."""
        step = build_step(self.plan, inp, self._staging, self._layouts, defer_launch=True)
        self.backend.plan_step(step)
        extra = step.extra
        launch = extra.pop("launch", None)
        if launch is not None:
            # After FlashInfer's plan: its pageable copies would otherwise wait for this replay.
            # A decode-only step of a shape seen before ends here: its layout, host arrays and
            # views come from the shape's cache (decode_layout.decode_step), nothing to release.
            launch()
            return step
        if self._mla and step.prefill is not None:
            self._plan_mla_prefill(step)
        # Every reader of this step's pinned host arrays is enqueued: their buffer may be reused.
        self._staging.release(extra.get("staging_slot", -1))
        return step

    def append_kv(self, step: StepMetadata, cache: kvc.PagedKVCache, k: Any, v: Any, *,
                  k_scale: float = 1.0, v_scale: float = 1.0) -> None:
        slots, parts = _targets(step)
        kvc.append(cache, slots, k, v, k_scale=k_scale, v_scale=v_scale, pages_offsets=parts)

    def append_latent(self, step: StepMetadata, cache: kvc.PagedKVCache, latent: Any) -> None:
        """MLA: this step's latent rows [T, kv_lora_rank + rope] into their pages."""
        slots, parts = _targets(step)
        kvc.append(cache, slots, latent, pages_offsets=parts)

    def _query(self, q: Any, phase: str, q_scale: float) -> Any:
        # The phase's query dtype (fp8 for vLLM's fa3 prefill / trtllm-gen over fp8 or nvfp4 KV): query_quant.py.
        return quantize_query(q, getattr(self.plan, phase).query_dtype, q_scale)

    def forward(self, step: StepMetadata, q: Any, cache: kvc.PagedKVCache, out: Optional[Any] = None, *,
                k_scale: float = 1.0, v_scale: float = 1.0, sinks: Optional[Any] = None) -> Any:
        """Standard attention for every token of the step: q [T, Hq, D] -> out [T, Hq, Dv].
        Decode tokens (first) and prefill tokens write disjoint slices of one output."""
        import torch

        if out is None:
            out = torch.empty(step.num_tokens, self.params.num_qo_heads, self.params.head_dim_vo,
                              dtype=self.o_dtype, device=q.device)
        kw = dict(k_scale=k_scale, v_scale=v_scale, sinks=sinks)
        if step.decode is not None:
            t = step.decode.tok
            self.backend.run_decode(step, self._query(q[t], "decode", 1.0), cache, out[t], **kw)
        if step.prefill is not None:
            t = step.prefill.tok
            self.backend.run_prefill(step, self._query(q[t], "prefill", 1.0), cache, out[t], **kw)
        return out

    # -- MLA -----------------------------------------------------------------------------------
    def _plan_mla_prefill(self, step: StepMetadata) -> None:
        b = step.prefill
        assert b is not None and b.qo_indptr_cpu is not None
        if b.seq_lens_cpu is None:
            raise AdapterCallError("MLA prefill needs host seq lens: the ragged context split is planned on the host")
        qo = b.qo_indptr_cpu
        replay = self.backend.replays_ragged()
        # The new tokens over themselves: the part's KV indptr is the query's, its KV lengths the query
        # lengths (what a replay of the part's scheduler call hands it, general_plans.py).
        self.backend.plan_ragged(RaggedPart(
            "new", True, step, qo, qo, b.num_reqs, b.num_tokens, b.max_q_len, b.max_q_len, qo_indptr=b.qo_indptr,
            seq_lens_cpu=step.extra["new_lens"] if replay else None))
        # The context's lengths, indptr and per-token mask came in the step's one copy (host_metadata.from_host,
        # host_step.c fill_context): planning only here.
        extra = step.extra
        if extra["any_context"]:
            ctx_indptr = extra["context_indptr_cpu"]
            for_replay = dict(qo_indptr=b.qo_indptr, kv_page_indptr_cpu=ctx_indptr, seq_lens_cpu=extra["context_lens"],
                              kv_page_indptr=extra["context_indptr"]) if replay else {}
            self.backend.plan_ragged(RaggedPart("context", False, step, qo, ctx_indptr, b.num_reqs, b.num_tokens,
                                                b.max_q_len, extra["longest_context"], **for_replay))

    def gather_context(self, step: StepMetadata, cache: kvc.PagedKVCache) -> Any:
        """The prefill requests' cached latent rows, ragged by context (``context_indptr_cpu``):
        [sum(context lens), rank + rope]. The caller decompresses them (kv_b_proj) for
        ``mla_prefill(context=...)``."""
        import torch

        b, extra = step.prefill, step.extra
        assert b is not None
        rows = cache.kernel_view().reshape(-1, self.plan.kv_cache.head_dim_k)
        if not extra["any_context"]:
            return rows[:0]                # no request has context: the step brought no context parts
        slots = extra.get("context_slots")
        if slots is None:
            # The context rows' slots, worked out once a step (every layer's cache shares the block table).
            total = extra["context_tokens"]
            owner = torch.repeat_interleave(torch.arange(b.num_reqs, device=self.device), extra["context_lens_dev"],
                                            output_size=total)
            pos = torch.arange(total, device=self.device, dtype=torch.int32) - extra["context_indptr"][owner]
            page = self.plan.kv_cache.page_size
            slots = extra["context_slots"] = b.block_table[owner, pos // page].long() * page + (pos % page).long()
        return rows[slots]

    def mla_decode(self, step: StepMetadata, q_nope: Any, q_pe: Any, cache: kvc.PagedKVCache,
                   out: Optional[Any] = None) -> Any:
        """Absorbed MLA decode: q_nope [T, H, rank], q_pe [T, H, rope] -> out [T, H, rank]."""
        import torch

        assert step.decode is not None
        if out is None:
            out = torch.empty(step.decode.num_tokens, self.params.num_qo_heads, self.params.kv_lora_rank,
                              dtype=self.o_dtype, device=q_nope.device)
        self.backend.run_mla_decode(step, q_nope, q_pe, cache, out)
        return out

    def mla_prefill(self, step: StepMetadata, q: Any, k: Any, v: Any, out: Optional[Any] = None, *,
                    context: Optional[tuple[Any, Any]] = None) -> Any:
        """MLA prefill over the step's prefill tokens: q/k [T, H, qk], v [T, H, vo] (new tokens),
        ``context`` = decompressed (k_ctx, v_ctx) ragged by ``context_indptr_cpu``. New-token
        attention writes every row; rows whose request has context then absorb the context part
        by LSE (seed 004); the others keep the new-token result unchanged."""
        import torch

        assert step.prefill is not None
        t, h = step.prefill.num_tokens, self.params.num_qo_heads
        if out is None:
            out = torch.empty(t, h, self.params.head_dim_vo, dtype=self.o_dtype, device=q.device)
        lse = torch.empty(t, h, dtype=torch.float32, device=q.device)
        self.backend.run_ragged(step, "new", q, k, v, out, lse)
        if step.extra["any_context"]:
            if context is None:
                raise AdapterCallError("this step's prefill requests have cached context: pass context=(k_ctx, v_ctx)")
            v_ctx = torch.empty_like(out)
            s_ctx = torch.empty_like(lse)
            self.backend.run_ragged(step, "context", q, context[0], context[1], v_ctx, s_ctx)
            self.backend.merge(out, lse, v_ctx, s_ctx, step.extra["has_context"])
        return out


def _targets(step: StepMetadata) -> tuple[Optional[Any], Optional[tuple[Any, Any]]]:
    """Where an append writes: (None, the new tokens' pages and offsets) where the metadata has them - a
    step whose slots are made at their first read (step._Slots) then never makes them - else (the slots, None)."""
    if step.slot_pages is None:
        return step.slots, None
    return None, (step.slot_pages, step.slot_offsets)

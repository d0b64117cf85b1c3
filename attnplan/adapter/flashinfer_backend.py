"""The FlashInfer backend: the kernels the plan names, planned once per step.

Each phase is run by the strategy of its ``PhasePlan.call`` (``calls/``): a FlashInfer wrapper
planned on the host once per step from host metadata and then run once per layer, or a function
that takes device tensors only (TRTLLM-gen, XQA). The backend holds what lives per executor -
workspaces, the phases' wrappers, MLA's per-part wrappers, memoised masks - and asks the
strategies for the rest; ``PhasePlan.flashinfer_backend`` is what FlashInfer's ``backend=``
arguments get. Nothing here looks at a call's or a backend's name.

Workspaces: the wrappers share one zeroed float workspace (they run one after another on one
stream). Calls whose phase plan says ``zero_workspace`` (TRTLLM-gen, XQA) keep semaphores in
theirs, which a wrapper would dirty (seen on the H100: XQA over a workspace a wrapper had used
gave relative error 1.0), so they get a zeroed buffer of their own (``calls.workspace_layout``).

A plan with a measured per-shape decode choice (``Plan.decode_choice``, issue 41 item 3) runs one of two
decode calls per step: both are built here at startup (wrappers made, workspaces sized for both), each
behind its own ``CallContext`` - the backend itself for ``plan.decode``, a view of it whose plan's decode
is the alternative - and ``plan_step`` picks one by one comparison of the decode batch's pages with the
boundary (``calls.DecodeSwitch``); the step carries the pick to ``run_decode``.

Importing this module imports flashinfer; ``attnplan.adapter`` imports it only when an executor
is built with the FlashInfer backend.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Callable, Iterator, Optional

import flashinfer
import torch

from attnplan.errors import AdapterCallError
from attnplan.policy import Plan

from .calls import DEFAULT, DecodeSwitch, FixedDecode, KernelCall, strategy, workspace_layout
from .dtypes import NVFP4, torch_dtype
from .eager_plans import EagerPlans
from .general_plans import GeneralPlans
from .merge import fold_heads
from .params import AttentionParams, split_kv_kwargs
from .step import PhaseBatch, RaggedPart, StepMetadata

PHASES = ("decode", "prefill")      # the order a step plans them in


class FlashInferBackend:
    name = "flashinfer"

    def __init__(self, plan: Plan, params: AttentionParams, device: Any, switch: Optional[DecodeSwitch] = None):
        """``switch``: the executor's ``DecodeSwitch`` for a plan with a decode choice (one per executor;
        made here when the backend is built alone)."""
        self.plan = plan
        self.params = params
        self.device = torch.device(device)
        self.calls: dict[str, KernelCall] = {ph: strategy(getattr(plan, ph).call) for ph in PHASES}
        alt = plan.decode_choice.alternative if getattr(plan, "decode_choice", None) is not None else None
        # both decode calls' needs: an XQA alternative gets zeroed memory no wrapper writes
        layout = workspace_layout({"prefill": plan.prefill, "decode": plan.decode,
                                   **({"decode_alternative": alt} if alt is not None else {})})
        # Zeroed, not empty: FA2 decode wants a zero first use; semaphores start at zero.
        self.workspace = torch.zeros(max(layout["shared"], 1), dtype=torch.uint8, device=self.device)
        self.device_workspace = (torch.zeros(layout["private"], dtype=torch.uint8, device=self.device)
                                 if layout["private"] else self.workspace)
        self.q_dtype = {p: torch_dtype(getattr(plan, p).query_dtype) for p in ("prefill", "decode")}
        self.o_dtype = torch_dtype(plan.decode.output_dtype)
        self.kv_view = plan.kv_cache.kv_view_dtype
        # plan() arguments that never change for the plan, built once (per step only the batch's).
        p = params
        self.common = {ph: dict(window_left=p.window_left, logits_soft_cap=p.soft_cap, sm_scale=p.sm_scale,
                                q_data_type=self.q_dtype[ph], kv_data_type=self.kv_data_type(), o_data_type=self.o_dtype,
                                non_blocking=True, **split_kv_kwargs(plan.attention)) for ph in ("prefill", "decode")}
        self.parts: dict[str, Any] = {}
        self._memo: dict[Any, Any] = {}
        self._folded: Any = None                 # (a step's context mask, folded for merge): made once a step
        self.eager = EagerPlans(self.device)     # repeated decode shapes' own wrappers (shared by the views)
        self.general = GeneralPlans(self.device)   # the other steps' plans by the scheduler call alone, once learned
        self._decode = self.make_wrapper("decode")
        self._prefill = self.make_wrapper("prefill")
        self._wrappers = {"decode": self._decode, "prefill": self._prefill}
        # the decode calls this backend can run, by DecodeSwitch index: the context each runs in
        self.switch: Any = None
        self.decode_contexts: tuple[Any, ...] = (self,)
        if alt is not None:
            self.switch = switch if switch is not None else DecodeSwitch(plan)
            self.decode_contexts = (self, self._alternative_context(alt))

    def _alternative_context(self, alt: Any) -> "FlashInferBackend":
        """The ``CallContext`` the alternative decode call runs in: this backend (its workspaces, memo,
        prefill) seen through a plan whose decode is the alternative, with its own strategy, plan()
        arguments and wrapper, made now - nothing is built per step."""
        view = copy.copy(self)
        view.plan = self.plan.model_copy(update={"decode": alt})
        view.calls = {**self.calls, "decode": strategy(alt.call)}
        view.q_dtype = {**self.q_dtype, "decode": torch_dtype(alt.query_dtype)}
        view.common = {**self.common, "decode": {**self.common["decode"], "q_data_type": view.q_dtype["decode"]}}
        view.switch, view.decode_contexts = None, ()
        view._decode = view.make_wrapper("decode")
        view._wrappers = {"decode": view._decode, "prefill": self._prefill}
        return view

    def decode_context(self, index: int = DEFAULT) -> "FlashInferBackend":
        """The context of decode call ``index`` (``DEFAULT``: plan.decode; ``ALTERNATIVE``: the plan's
        decode_choice.alternative): its ``plan.decode``, ``calls["decode"]`` and ``_decode`` wrapper are
        that call's. CUDA-graph decode captures one per (batch size, call)."""
        return self.decode_contexts[index]

    def decode_index_for(self, num_pages: int) -> int:
        """Which decode call runs a decode batch reading ``num_pages`` KV pages (DEFAULT without a choice)."""
        return DEFAULT if self.switch is None else self.switch.for_pages(num_pages)

    @contextlib.contextmanager
    def forced_decode(self, index: int) -> Iterator[None]:
        """Run decode call ``index`` whatever the batch (warm-up exercises each; benchmarks time each)."""
        if self.switch is None:
            if index != DEFAULT:
                raise AdapterCallError("this plan has one decode call")
            yield
            return
        keep, self.switch = self.switch, FixedDecode(index)
        try:
            yield
        finally:
            self.switch = keep

    # -- what the strategies read (calls/_contract.py CallContext) -----------------------------
    def make_wrapper(self, phase: str, **graph_buffers: Any) -> Any:
        """The FlashInfer wrapper that runs ``phase`` (None for device-tensor calls and for MLA's
        ragged prefill, whose wrappers are made per part). ``graph_buffers``: CUDA-graph mode."""
        return self.calls[phase].construct(self, getattr(self.plan, phase), **graph_buffers)

    def kv_data_type(self) -> Any:
        return torch.uint8 if self.kv_view == NVFP4 else torch_dtype(self.kv_view)

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        """A value built once per executor (XQA's draft mask per batch size)."""
        value = self._memo.get(key)
        if value is None:
            value = self._memo[key] = make()
        return value

    # -- planning (host side, once per step) -------------------------------------------------
    def plan_wrapper(self, wrapper: Any, b: PhaseBatch, phase: str) -> None:
        """Plan one host-planned wrapper for this step's batch of ``phase``."""
        self.calls[phase].plan(self, wrapper, b, phase)

    def plan_step(self, step: StepMetadata) -> None:
        for phase in PHASES:
            batch = getattr(step, phase)
            if batch is None:
                continue
            ctx, index = self, DEFAULT
            if phase == "decode" and self.switch is not None:
                # one comparison of a host int the metadata holds (calls/_choice.py); the pick rides the step
                index = self.switch.pick(batch)
                ctx = step.extra["decode_context"] = self.decode_contexts[index]
            wrapper = ctx._wrappers[phase]
            if wrapper is not None:
                # A decode shape that repeats plans through a wrapper of its own over its layout's
                # buffers, with FlashInfer's scheduler alone once checked (eager_plans.py).
                own = None
                if phase == "decode":
                    own = self.eager.planned(ctx, index, step)
                if own is None:
                    # Every other step: the wrapper's whole plan until its scheduler call alone was
                    # learned and checked on it, that call after (general_plans.py).
                    self.general.plan(ctx, phase, wrapper, batch)
                else:
                    step.extra["decode_wrapper"] = own
            else:
                step.extra.update(ctx.calls[phase].device_extras(ctx, getattr(ctx.plan, phase), batch.num_reqs))

    def replays_ragged(self) -> bool:
        return self.general.replays(self, self.calls["prefill"], "prefill")

    def plan_ragged(self, part: RaggedPart) -> None:
        """MLA prefill: one ragged plan per part (``new`` causal, ``context`` not) - the part's wrapper's
        whole plan until its scheduler call alone was learned and checked on it (general_plans.py)."""
        self.general.plan_part(self, part)

    # -- running (device side, once per layer) -----------------------------------------------
    def run_decode(self, step: StepMetadata, q: Any, cache: Any, out: Any, *, k_scale: float = 1.0,
                   v_scale: float = 1.0, sinks: Optional[Any] = None) -> None:
        assert step.decode is not None
        ctx = self if self.switch is None else step.extra.get("decode_context", self)
        ctx.calls["decode"].run(ctx, ctx.decode_wrapper(step), step, "decode", q, cache, out, k_scale=k_scale,
                                v_scale=v_scale, sinks=sinks)

    def run_prefill(self, step: StepMetadata, q: Any, cache: Any, out: Any, *, k_scale: float = 1.0,
                    v_scale: float = 1.0, sinks: Optional[Any] = None) -> None:
        assert step.prefill is not None
        self.calls["prefill"].run(self, self._prefill, step, "prefill", q, cache, out, k_scale=k_scale,
                                  v_scale=v_scale, sinks=sinks)

    def run_ragged(self, step: StepMetadata, key: str, q: Any, k: Any, v: Any, out: Any, lse: Any) -> None:
        self.calls["prefill"].run_part(self, step, key, q, k, v, out, lse)

    def run_mla_decode(self, step: StepMetadata, q_nope: Any, q_pe: Any, cache: Any, out: Any) -> None:
        assert step.decode is not None
        self.calls["decode"].run_latent(self, self.decode_wrapper(step), step, q_nope, q_pe, cache, out)

    def decode_wrapper(self, step: StepMetadata) -> Any:
        """The wrapper ``plan_step`` planned this step's decode on: its layout's own (eager_plans.py) or
        this context's."""
        wrapper = step.extra.get("decode_wrapper")
        return self._decode if wrapper is None else wrapper

    def merge(self, out: Any, lse: Any, v_ctx: Any, s_ctx: Any, has_context: Any) -> None:
        # The kernel merges only rows whose mask is set and leaves the others untouched (seed 004).
        t, h, d = out.shape
        f = fold_heads(h, d, out.element_size())
        if f > 1:
            out, v_ctx = out.view(t * f, h // f, d), v_ctx.reshape(t * f, h // f, d)
            lse, s_ctx = lse.view(t * f, h // f), s_ctx.reshape(t * f, h // f)
        flashinfer.merge_state_in_place(out, lse, v_ctx, s_ctx, mask=self._merge_mask(has_context, f))

    def _merge_mask(self, has_context: Any, f: int) -> Any:
        """The step's context mask as the merge kernel reads it: a uint8 view of its bytes (host_metadata.
        _context_parts: no launch), repeated ``f`` times where the heads fold - once a step, not once a layer
        (every layer of a step passes the same mask object; the one kept here holds it, so its identity is
        never a freed tensor's)."""
        kept = self._folded
        if kept is not None and kept[0] is has_context and kept[1] == f:
            return kept[2]
        mask = has_context.view(torch.uint8) if has_context.dtype == torch.bool else has_context.to(torch.uint8)
        if f > 1:
            mask = mask.repeat_interleave(f)
        self._folded = (has_context, f, mask)
        return mask

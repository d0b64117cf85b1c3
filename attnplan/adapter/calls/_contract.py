"""The private contract between the FlashInfer backend and its kernel-call strategies.

One strategy per ``PhasePlan.call`` (the call names rules/backends.yaml declares), one module
each beside this one, as FlashInfer keeps one module per backend behind a small private contract
(flashinfer/mla/_batch_mla/_backends/, their ``MLAPlanCapabilities`` and ``_PlannedBackend``).
A strategy holds everything the adapter knows about its call: the facts (entry point, phases,
LSE, whether it is planned on the host, workspace and cache needs), how it is constructed, its
plan arguments, how it runs, its CUDA-graph buffers and the JIT module warm-up builds for it.
The backend asks the strategy; nothing tests a call's name.

Strategies are stateless singletons: what lives per executor (workspaces, per-part wrappers,
memoised masks) stays on the backend, which they read through ``CallContext``. Importing this
module imports neither torch nor flashinfer; strategies import them where they run.
"""

from __future__ import annotations

from attnplan.errors import AdapterCallError

import importlib
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal, Optional, Protocol

Runs = Literal["paged", "latent", "ragged"]
WorkspaceRole = Literal["shared", "private"]


class CallContext(Protocol):
    """What a strategy reads from the backend that holds it (``FlashInferBackend``)."""

    plan: Any                       # policy.Plan
    params: Any                     # params.AttentionParams
    device: Any
    workspace: Any                  # the wrappers' shared float workspace
    device_workspace: Any           # zeroed, private to device-tensor calls that need it (workspace_layout)
    q_dtype: dict[str, Any]         # torch dtype of each phase's query
    o_dtype: Any
    kv_view: str                    # the plan's KV view dtype (kv_cache.kv_view_dtype)
    common: dict[str, dict[str, Any]]   # per phase: plan() arguments fixed for the plan
    parts: dict[str, Any]           # MLA prefill: one ragged wrapper per part ("new", "context")

    def kv_data_type(self) -> Any: ...

    def memo(self, key: Any, make: Callable[[], Any]) -> Any: ...


@dataclass(frozen=True)
class JitGetter:
    """One of FlashInfer's module getters: ``loader(backend, args)`` imports it and returns the
    zero-argument call that builds and loads the module (memoised by FlashInfer, so a wrapper's
    own call at plan time reuses it); ``spec(backend, args)`` the JitSpec that call builds."""

    kind: str
    loader: Callable[[str, tuple], Callable[[], Any]]
    spec: Callable[[str, tuple], Any]


@dataclass(frozen=True)
class JitBuild:
    """The JIT module a plan module names: its getter, FlashInfer's backend argument, the getter's arguments."""

    getter: JitGetter
    backend: str
    args: tuple


class KernelCall:
    """Base of every strategy. Subclasses set the facts and override what their call does; the
    defaults say "this call does not do that" (a wrapper-free call has no graph buffers, a paged
    call no latent run), so a backend that asks the wrong strategy gets an error naming the call."""

    name: ClassVar[str]                       # the call name in rules/backends.yaml and PhasePlan.call
    entry_point: ClassVar[str]                # dotted path in flashinfer 0.7.2.post1; backends.yaml names the same
    phases: ClassVar[tuple[str, ...]]
    returns_lse: ClassVar[bool]
    # A FlashInfer wrapper planned on the host once per step; else a function of device tensors only.
    host_planned: ClassVar[bool]
    runs: ClassVar[Runs]                      # which executor entry runs it: paged, latent (MLA decode), ragged (MLA prefill)
    # The kernel reads every slot of a request's last page and weights the unused ones by zero,
    # so those slots must hold finite values (0 x NaN = NaN): the cache is allocated zeroed.
    finite_page_tail: ClassVar[bool] = False
    # In CUDA-graph mode the graph writes the page indices and the wrapper's plan is handed none,
    # unless its plan checks their count against the lengths: then it gets the graph's own buffer.
    graph_plan_counts_indices: ClassVar[bool] = False

    def graph_plan_pages_only(self, pp: Any) -> bool:
        """Whether this call's wrapper, in CUDA-graph mode, plans from the batch's KV page counts
        alone (besides the plan's constants): then a step whose page counts repeat the last plan's
        would get the same schedule, already in the wrapper's int workspace, and its plan is skipped
        (graphs.py ``DecodeGraph.update``). Default no: plan every step."""
        return False

    def general_replay(self, pp: Any) -> bool:
        """Whether a prefill / mixed step may plan this call's wrapper (for phase plan ``pp``) with its
        scheduler call alone once learned and checked on the wrapper (general_plans.py; its
        ``graph_scheduler`` names the scheduler of an eager plan too). Default no: only the wrappers
        whose replay ran on the GPU against the float32 reference say yes."""
        return False

    def graph_scheduler(self, wrapper: Any) -> Optional[Any]:
        """Where this call's wrapper, after a CUDA-graph-mode plan, calls FlashInfer's scheduler and
        which int workspace holds the schedule (``plan_replay.Scheduler``): a graph step that plans
        may then call the scheduler alone, once ``SchedulerReplay.learn`` checked it on this
        wrapper. Default None: the graph replays the wrapper's whole plan."""
        return None

    _resolved: Any = None

    def entry(self) -> Any:
        """The FlashInfer object ``entry_point`` names (a wrapper class or a function), resolved once."""
        if self._resolved is None:
            module, _, attr = self.entry_point.rpartition(".")
            self._resolved = getattr(importlib.import_module(module), attr)
        return self._resolved

    def workspace_role(self, pp: Any) -> WorkspaceRole:
        """FlashInfer's wrappers share one float workspace (one stream, one after another); a
        device-tensor call whose plan says ``zero_workspace`` (flashinfer/decode.py keeps the
        TRTLLM-gen and XQA semaphores in its first MiBs) gets zeroed memory no wrapper writes."""
        return "private" if pp.zero_workspace and not self.host_planned else "shared"

    def _refusal(self, what: str) -> str:
        return f"the kernel call {self.name!r} (runs {self.runs}) has no {what}"

    # -- construction and host planning ----------------------------------------------------
    def construct(self, b: CallContext, pp: Any, **graph_buffers: Any) -> Optional[Any]:
        """The wrapper that runs this phase, made once per executor (``graph_buffers``: CUDA-graph
        mode); None for device-tensor calls and for wrappers made per part."""
        return None

    def graph_buffers(self, layout: Any) -> dict[str, Any]:
        """The CUDA-graph buffer arguments of this call's wrapper over a ``DecodeLayout``."""
        raise AdapterCallError(self._refusal("wrapper to capture in CUDA-graph mode"))

    def plan(self, b: CallContext, wrapper: Any, batch: Any, phase: str) -> None:
        """The wrapper's host ``plan`` for this step's batch of ``phase``."""
        raise AdapterCallError(self._refusal("host plan"))

    def device_extras(self, b: CallContext, pp: Any, num_reqs: int) -> dict[str, Any]:
        """What a step of ``num_reqs`` requests carries for this device-tensor call besides its
        metadata (``StepMetadata.extra``), built once per batch size."""
        return {}

    def jit(self, params: dict[str, Any]) -> Optional[JitBuild]:
        """The JIT module a plan module of this call names (its params, with the phase plan's
        backend argument, q_len_per_req and use_tensor_cores); None where the call loads cubins."""
        return None

    # -- running (once per layer), one shape per kind of call --------------------------------
    def run(self, b: CallContext, wrapper: Any, step: Any, phase: str, q: Any, cache: Any, out: Any, *,
            k_scale: float, v_scale: float, sinks: Optional[Any]) -> None:
        """Standard attention over the paged cache (``wrapper``: the phase's, None for device calls)."""
        raise AdapterCallError(self._refusal("paged attention run"))

    def run_latent(self, b: CallContext, wrapper: Any, step: Any, q_nope: Any, q_pe: Any, cache: Any,
                   out: Any) -> None:
        """Absorbed MLA decode over the latent pages."""
        raise AdapterCallError(self._refusal("latent (MLA decode) run"))

    def plan_part(self, b: CallContext, step: Any, key: str, qo_indptr_cpu: Any, kv_indptr_cpu: Any,
                  causal: bool) -> None:
        """MLA prefill: plan one ragged part (``new`` causal, ``context`` not)."""
        raise AdapterCallError(self._refusal("ragged part to plan"))

    def run_part(self, b: CallContext, step: Any, key: str, q: Any, k: Any, v: Any, out: Any, lse: Any) -> None:
        """MLA prefill: one ragged part, output and base-2 LSE."""
        raise AdapterCallError(self._refusal("ragged part to run"))

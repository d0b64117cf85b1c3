"""A host-planned decode call planned over fixed buffers: what a CUDA-graph step and a repeated
eager decode shape share (issue 41).

FlashInfer's wrappers in CUDA-graph mode read their metadata from buffers of fixed address; built
over a ``DecodeLayout``'s (``KernelCall.graph_buffers``), whatever computes the layout - the step's
graph (``graphs.DecodeGraph``) or the eager step's metadata launch (``decode_layout.decode_step``) -
is what the kernels read, and a step's plan is left only FlashInfer's scheduler: the host arrays it
reads (``HostDecodeArrays``, rewritten in place) into the int workspace. ``HostPlan.plan`` runs it:
the wrapper's whole ``plan`` until the first plan learned and checked that the scheduler call alone
leaves the same schedule (``plan_replay.SchedulerReplay``), that call alone after; for FlashInfer's
fa2 schedulers, which read page counts only, nothing on a step whose page counts repeat the last
plan's (``KernelCall.graph_plan_pages_only``) - unless the int workspace is shared with other
wrappers (``shared_workspace``: the eager path's, one per backend), where the last plan may be
another wrapper's.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .decode_layout import DecodeLayout, HostDecodeArrays
from .plan_replay import PinnedGuard, SchedulerReplay


class _PlanRecorder:
    """Stands for a wrapper while a strategy plans it: forwards everything, keeps ``plan``'s arguments."""

    def __init__(self, wrapper: Any):
        self._wrapper = wrapper
        self.seen: Optional[tuple] = None

    def plan(self, *args: Any, **kwargs: Any) -> Any:
        self.seen = (args, kwargs)
        return self._wrapper.plan(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapper, name)


class HostPlan:
    """``HostPlan(backend, layout, host, learn=...)``: the decode call of ``backend`` (a
    ``CallContext``) in CUDA-graph mode over ``layout``'s buffers, planned from ``host``; each step
    ``plan()`` after the caller filled ``host`` with the step's lengths. ``learn``: check and use
    the scheduler replay (else ``refused`` says why not). ``shared_workspace``: (device int
    workspace, pinned host buffer, the buffer's ``PinnedGuard``) to plan into instead of the
    wrapper's own, for wrappers whose steps all plan before they run (no page-count skip then).
    ``graph``: a CUDA graph captures the wrapper's first plan (a later plan info of another value is
    an error); else (eager steps) such a step plans whole."""

    def __init__(self, backend: Any, layout: DecodeLayout, host: HostDecodeArrays, *, learn: bool = True,
                 refused: str = "", shared_workspace: Optional[tuple[Any, Any, PinnedGuard]] = None,
                 graph: bool = True):
        import torch

        self.backend = backend
        self.call = backend.calls["decode"]
        self.layout = layout
        self.host = host
        d = backend.plan.decode
        self.wrapper = backend.make_wrapper("decode", **self.call.graph_buffers(layout))
        self.shared = shared_workspace is not None and _share(self.wrapper, shared_workspace)
        # One PhaseBatch over the layout's buffers and the host arrays, whose only per-step fields
        # are the KV bound and, where the plan counts them, the page indices. Otherwise the plan
        # gets no indices: the layout's own computation writes them.
        self._batch = layout.phase_batch(layout.seq_lens, layout.table, 0,
                                         torch.empty(0, dtype=torch.int32, device=layout.device), host)
        # A call that hands its plan no per-step tensor (all but those that count the page indices)
        # gets its first plan's arguments recorded and replayed: the host arrays (rewritten in
        # place), the layout's buffers and the plan's constants.
        self._record = not self.call.graph_plan_counts_indices
        self._planned: Optional[tuple] = None
        # Where the wrapper plans from page counts alone (FlashInfer's fa2 schedulers), a step whose
        # page counts per request repeat the last plan's has that plan's schedule in the int
        # workspace already - if no other wrapper planned into it since.
        self.pages_only = self._record and self.call.graph_plan_pages_only(d) and not self.shared
        self._planned_pages: Optional[bytes] = None
        self.plans_skipped = 0
        # A CUDA graph captured the first plan's info: another one is an error there; an eager step
        # whose scheduler returns another one plans whole instead (the wrapper's run reads its own state).
        self.scheduler = SchedulerReplay(strict=graph)
        self._learn = learn
        if not learn:
            self.scheduler.refused = refused
        # One step in flight per pinned staging buffer: a shared buffer's guard is shared too.
        self._guard = shared_workspace[2] if self.shared else PinnedGuard(layout.device)
        self._first_state = True            # the wrapper's own plan state is the first plan's info

    def plan(self) -> None:
        """Plan this step's lengths (already in ``host``)."""
        if self.pages_only:
            key = self.host.page_counts_key()
            if key == self._planned_pages:
                self.plans_skipped += 1
                return
            self._replan()
            self._planned_pages = key
        else:
            self._replan()

    def _replan(self) -> None:
        self._guard.before()
        if self.scheduler.ready:
            same = self.scheduler()
            if not same or not self._first_state:
                # Another plan info (eager steps only; a graph raises): the whole plan leaves the wrapper's
                # own state this step's; and once it did, the first step back on the first info plans whole
                # too, so that the wrapper's state is that info again before replays alone resume.
                self.full_plan()
                self._first_state = same
        else:
            self.full_plan()
            if self._learn:                 # the first plan: check the scheduler call alone, once
                self._learn = False
                host = self.host
                real = host.seq_lens.numpy().copy()
                self.scheduler.learn(lambda: self.call.graph_scheduler(self.wrapper), self.full_plan,
                                     lambda attempt: other_lengths(host, real, attempt), lambda: host.fill(real))
        self._guard.after()

    def full_plan(self) -> None:
        """The wrapper's whole plan over the host arrays as they are now (recorded the first time,
        where it can be)."""
        if self._planned is not None:
            plan, args, kwargs = self._planned
            plan(*args, **kwargs)
            return
        batch, host = self._batch, self.host
        batch.max_kv_len = host.max_kv_len
        if not self._record:
            # The plan checks the page indices' count (``KernelCall.graph_plan_counts_indices``):
            # it gets the layout's own buffer (a copy onto itself).
            batch.kv_indices = self.layout.indices_upto(host.num_pages)
            self.call.plan(self.backend, self.wrapper, batch, "decode")
            return
        rec = _PlanRecorder(self.wrapper)
        self.call.plan(self.backend, rec, batch, "decode")
        if rec.seen is not None:
            self._planned = (self.wrapper.plan, *rec.seen)


def other_lengths(host: HostDecodeArrays, real: Any, attempt: int) -> bool:
    """Rewrite ``host`` with other valid lengths for the scheduler check (plan_replay.py): attempt 0
    halves every request's page count (at least its query's pages; doubled from one page where the
    table holds two), attempt 1 fills every request's table. False where that changes no request's
    page count."""
    page, q, cap = host.page, host.q_len, host.width * host.page
    pages = (real + page - 1) // page
    if attempt == 0:
        other = np.where(pages >= 2, np.maximum(q, (pages // 2) * page), np.minimum(cap, 2 * page))
    else:
        other = np.full_like(real, cap)
    other = other.astype(np.int32)
    if ((other + page - 1) // page == pages).all():
        return False
    host.fill(other)
    return True


def _share(wrapper: Any, workspace: tuple[Any, Any, Any]) -> bool:
    """Point a paged wrapper's int workspace and its pinned staging buffer at ``workspace``
    (flashinfer/decode.py and prefill.py ``__init__`` allocate 8 MiB of each per wrapper; their
    ``plan`` hands both to the scheduler and ``run`` reads the first). False, and nothing changed,
    for a wrapper without those two attributes (MLA's planned backends own theirs)."""
    dev, pinned, _ = workspace
    names = ("_int_workspace_buffer", "_pin_memory_int_workspace_buffer")
    if not all(isinstance(getattr(wrapper, n, None), type(dev)) for n in names):
        return False
    if getattr(wrapper, "_plan_info", None) is not None:
        return False                        # already planned into its own
    wrapper._int_workspace_buffer, wrapper._pin_memory_int_workspace_buffer = dev, pinned
    return True

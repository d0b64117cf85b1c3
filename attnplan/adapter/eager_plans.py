"""Eager decode steps of a repeated shape planned with FlashInfer's scheduler alone (issue 41).

An eager decode-only step of a shape seen before already has everything but FlashInfer's plan
from its shape's cache (``decode_layout.decode_step``): the layout's device buffers, which its
metadata launch recomputes, and the host arrays, refilled in place. The backend's wrapper, made
once per executor for any batch, then plans the step in full: FlashInfer's Python ``plan`` copies
the host arrays into buffers of its own and validates them (40-120 us fa2, 300-1,000 us MLA on the
H100's host, bench/RESULTS.md round ten) around one scheduler call. Here a layout that ran
``AFTER`` eager steps gets a wrapper of its own in CUDA-graph mode over its buffers, and from then
on a step plans through its ``HostPlan`` (host_plan.py): the scheduler call alone, once checked on
the real wrapper as a CUDA-graph step's is (plan_replay.py); the step carries that wrapper to the
kernel call (``step.extra["decode_wrapper"]``). A check that refuses leaves the layout on the
backend's own wrapper, as before.

Memory: the paged wrappers (fa2, fa3, sinks) plan into one int workspace and pinned buffer shared
by every layout's (8 MiB each; a step plans before it runs, one stream; one guard keeps the host from
rewriting the pinned buffer before the previous step's copy out of it ran); MLA's wrapper plans into
its own (16 MiB with its pinned staging: 8 on the device, 8 pinned), so at most ``MAX_OWN`` (16) MLA layouts
at once get one - a batch size's own layout and the one bound to an engine's tensors are two.
``ATTNPLAN_EAGER_SCHEDULER_REPLAY=0`` keeps every eager step on the backend's wrapper.

What the check costs, once per layout (its ``AFTER``-th step): the wrapper's whole plan three times
more and one device synchronization (it compares workspaces on the device); a step after that reads
nothing back from the device. The whole plans write the layout's buffers in stream order before the
step's metadata launch rewrites them - for MLA also the KV lengths, which on a layout bound to an
engine's tensors (``DecodeLayouts.pick``) are the engine's own: the check's other lengths, then this
step's again, as FlashInfer's own CUDA-graph MLA wrapper writes its host lengths into that buffer
each plan.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Optional

from .host_plan import HostPlan

_NONE = False       # a layout's entry for a decode call that stays on the backend's wrapper


class EagerPlans:
    """One per backend (its decode contexts share it). ``planned(ctx, index, step)`` plans a
    decode-only step's batch for the decode call ``index`` of context ``ctx`` and returns the
    wrapper that then runs it, or None where the caller plans its own wrapper as before."""

    AFTER = 3           # eager steps of a layout before it gets a wrapper of its own
    MAX_OWN = 16        # layouts at once whose wrapper keeps a workspace of its own (MLA): 256 MiB

    def __init__(self, device: Any):
        self.enabled = os.environ.get("ATTNPLAN_EAGER_SCHEDULER_REPLAY") != "0"
        self.device = device
        self._shared: Optional[tuple[Any, Any, Any]] = None
        self._own: "weakref.WeakSet[HostPlan]" = weakref.WeakSet()
        self.refused: dict[tuple, str] = {}      # (batch size, q_len, width, index) -> why, the last few

    def _workspace(self) -> tuple[Any, Any, Any]:
        """(int workspace, pinned staging buffer, its one-step-in-flight guard), made on first use."""
        if self._shared is None:
            import torch

            from .plan_replay import PinnedGuard

            # The size FlashInfer's wrappers allocate for themselves (flashinfer/decode.py __init__).
            dev = torch.empty(8 * 1024 * 1024, dtype=torch.uint8, device=self.device)
            cuda = dev.device.type == "cuda"
            self._shared = (dev, torch.empty(dev.shape, dtype=torch.uint8, pin_memory=cuda), PinnedGuard(dev.device))
        return self._shared

    def planned(self, ctx: Any, index: int, step: Any) -> Optional[Any]:
        if not self.enabled:
            return None
        extra = step.extra
        layout, host = extra.get("layout"), extra.get("host_arrays")
        if layout is None or host is None:
            return None
        hp = layout.planners.get(index)
        if hp is None:
            layout.eager_steps += 1
            if layout.eager_steps < self.AFTER:
                return None
            hp = None
            try:
                hp = self._make(ctx, index, layout, host)
                if hp is None:
                    return None
                hp.plan()
            except Exception as exc:  # noqa: BLE001 - an optimisation: what it trips on keeps the backend's wrapper
                if hp is not None:
                    self._own.discard(hp)
                layout.planners[index] = _NONE
                self._note(layout, index, f"the layout's own wrapper raised {type(exc).__name__}: {exc}")
                return None
        elif hp is _NONE:
            return None
        else:
            hp.plan()
        if not hp.scheduler.ready:
            # Refused at its first plan (which planned this step in full): this step runs on it,
            # the next ones on the backend's wrapper.
            layout.planners[index] = _NONE
            self._own.discard(hp)
            self._note(layout, index, hp.scheduler.refused or "")
        return hp.wrapper

    def _make(self, ctx: Any, index: int, layout: Any, host: Any) -> Optional[HostPlan]:
        hp = HostPlan(ctx, layout, host, shared_workspace=self._workspace(), graph=False)
        if not hp.shared:
            if len(self._own) >= self.MAX_OWN:
                layout.planners[index] = _NONE
                self._note(layout, index, f"{self.MAX_OWN} layouts already hold a wrapper with a workspace of its own")
                return None
            self._own.add(hp)
        layout.planners[index] = hp
        return hp

    def _note(self, layout: Any, index: int, why: str) -> None:
        if len(self.refused) >= 64:
            self.refused.pop(next(iter(self.refused)))
        self.refused[(layout.batch_size, layout.q_len, layout.width, index)] = why

"""What ``AttentionExecutor`` asks of a backend: the FlashInfer backend (the plan's kernels,
``flashinfer_backend.py``) and the pure-torch reference (``reference.py``) both provide it.

A structural type (``typing.Protocol``): neither class inherits from it, and a test holds both to
it on the CPU. Planning happens once per step (``plan_step``, MLA's ``plan_ragged``); the
``run_*`` calls once per layer, writing into the ``out`` they are given.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, runtime_checkable

from .step import RaggedPart, StepMetadata


@runtime_checkable
class AttentionBackend(Protocol):
    name: str

    def plan_step(self, step: StepMetadata) -> None:
        """Plan every kernel of the step's phases (host side, once per step)."""

    def run_decode(self, step: StepMetadata, q: Any, cache: Any, out: Any, *, k_scale: float = 1.0,
                   v_scale: float = 1.0, sinks: Optional[Any] = None) -> None:
        """Standard attention for the step's decode tokens."""

    def run_prefill(self, step: StepMetadata, q: Any, cache: Any, out: Any, *, k_scale: float = 1.0,
                    v_scale: float = 1.0, sinks: Optional[Any] = None) -> None:
        """Standard attention for the step's prefill tokens."""

    def plan_ragged(self, part: RaggedPart) -> None:
        """MLA prefill: plan one ragged part (``new`` or ``context``)."""

    def replays_ragged(self) -> bool:
        """Whether ``plan_ragged`` may replay a part's scheduler call (general_plans.py): the executor then
        hands each part the values the replay reads besides the indptrs the plan takes."""

    def run_ragged(self, step: StepMetadata, key: str, q: Any, k: Any, v: Any, out: Any, lse: Any) -> None:
        """MLA prefill: run one ragged part, writing its output and base-2 LSE."""

    def run_mla_decode(self, step: StepMetadata, q_nope: Any, q_pe: Any, cache: Any, out: Any) -> None:
        """Absorbed MLA decode over the latent pages."""

    def merge(self, out: Any, lse: Any, v_ctx: Any, s_ctx: Any, has_context: Any) -> None:
        """Fold the context part into ``out`` by LSE where ``has_context`` is set (seed 004)."""

"""The adapter's calling conventions: one entry per ``PhasePlan.call`` (policy/answer.py ``Call``).

The plan says how a phase is called; this table says what that means for the adapter - which
FlashInfer entry point runs it and whether it is a wrapper planned on the host once per step
(``host_plan``) or a function that takes device tensors only. Nothing in the adapter, the warm-up
or the CUDA-graph code reads meaning out of a backend's name: they look a phase's ``call`` up here
and pass ``PhasePlan.flashinfer_backend`` wherever FlashInfer takes a ``backend=`` argument.
Importing this module imports neither torch nor flashinfer (tests check the table on the CPU).
"""

from __future__ import annotations

from typing import Any

from dataclasses import dataclass

from attnplan.errors import AdapterCallError


@dataclass(frozen=True)
class CallSpec:
    entry_point: str        # dotted path in flashinfer 0.7.2.post1 (what rules/backends.yaml names)
    wrapper: bool           # a class planned on the host each step; else a device-tensor function
    phases: tuple[str, ...]
    returns_lse: bool
    # The kernel reads every slot of a request's last page and weights the unused ones by zero,
    # so those slots must hold finite values (0 x NaN = NaN): the cache is allocated zeroed.
    finite_page_tail: bool = False


CALLS: dict[str, CallSpec] = {
    # flashinfer/prefill.py BatchPrefillWithPagedKVCacheWrapper: prefill, and speculative decode
    # (q_len_per_req > 1 runs the causal prefill kernel, plan.decode.runs_on_prefill_kernel).
    "paged_prefill": CallSpec("flashinfer.BatchPrefillWithPagedKVCacheWrapper", True, ("prefill", "decode"), True),
    "paged_decode": CallSpec("flashinfer.BatchDecodeWithPagedKVCacheWrapper", True, ("decode",), True),
    # flashinfer/attention/_core.py: a BatchPrefillWithPagedKVCacheWrapper over the "AttentionSink"
    # variant; decode runs it with q_len_per_req query rows per request.
    "sink": CallSpec("flashinfer.BatchAttentionWithAttentionSinkWrapper", True, ("prefill", "decode"), True),
    # flashinfer/decode.py trtllm_batch_decode_with_kv_cache(backend="xqa"): no LSE (decode.py
    # raises NotImplementedError for return_lse on xqa).
    "xqa_decode": CallSpec("flashinfer.decode.trtllm_batch_decode_with_kv_cache", False, ("decode",), False,
                           finite_page_tail=True),
    "trtllm_context": CallSpec("flashinfer.prefill.trtllm_batch_context_with_kv_cache", False, ("prefill",), False),
    "trtllm_decode": CallSpec("flashinfer.decode.trtllm_batch_decode_with_kv_cache", False, ("decode",), False),
    "mla_paged_decode": CallSpec("flashinfer.mla.BatchMLAPagedAttentionWrapper", True, ("decode",), True),
    "trtllm_mla_decode": CallSpec("flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla", False, ("decode",), False),
    "ragged_prefill": CallSpec("flashinfer.BatchPrefillWithRaggedKVCacheWrapper", True, ("prefill",), True),
    "trtllm_ragged": CallSpec("flashinfer.prefill.trtllm_ragged_attention_deepseek", False, ("prefill",), True),
}


def spec(call: str) -> CallSpec:
    try:
        return CALLS[call]
    except KeyError:
        raise AdapterCallError(f"the adapter has no calling convention {call!r} (known: {sorted(CALLS)})") from None


def host_planned(phase_plan: object) -> bool:
    """Whether a phase's kernel is a FlashInfer wrapper planned on the host once per step."""
    return spec(getattr(phase_plan, "call")).wrapper


def needs_finite_page_tail(plan: object) -> bool:
    """Whether some phase's kernel needs the unused slots of last pages finite (``CallSpec``)."""
    return any(spec(getattr(plan, p).call).finite_page_tail for p in ("prefill", "decode"))


def workspace_layout(phases: Any) -> dict[str, Any]:
    """Who shares the wrappers' workspace and who gets zeroed memory of its own, per phase plan.

    FlashInfer's wrappers (planned on the host) take one float workspace between them: they run one
    after another on one stream. A device-tensor call whose plan says ``zero_workspace`` (TRTLLM-gen,
    XQA: flashinfer/decode.py keeps their semaphores in the first MiBs and needs them zero) gets a
    zeroed buffer no wrapper ever writes. Returns {"roles": {phase: "shared" | "private"}, "shared":
    bytes, "private": bytes} for the given {phase: PhasePlan}; pure, so the CPU tests hold it.
    """
    roles = {ph: ("private" if pp.zero_workspace and not spec(pp.call).wrapper else "shared")
             for ph, pp in phases.items()}
    shared = max((pp.workspace_bytes for ph, pp in phases.items() if roles[ph] == "shared"), default=0)
    private = max((pp.workspace_bytes for ph, pp in phases.items() if roles[ph] == "private"), default=0)
    return {"roles": roles, "shared": shared, "private": private}

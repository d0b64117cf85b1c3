"""Every kernel-call strategy, run end to end through the FlashInfer backend on the CPU, makes
calls that bind to FlashInfer 0.7.2's real signatures (issue 25.4).

No GPU here, so each strategy's FlashInfer object (``KernelCall.entry``) is swapped for a recorder:
the executor builds its FlashInfer backend from a real plan, warm-up's ``exercise`` runs one step
of each batch kind through it (constructors, host plans, runs, MLA's ragged parts and merge), and
every recorded call is then bound with ``inspect.Signature.bind`` to the class or function its
strategy names - a missing or unknown argument is a TypeError. The GPU tests (tests/gpu) check
what the kernels compute.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from attnplan.policy import AttentionConfig, plan_for, simulated_node

torch = pytest.importorskip("torch")
flashinfer = pytest.importorskip("flashinfer")

from attnplan.adapter import AttentionExecutor, calls  # noqa: E402
from attnplan.adapter.warmup import exercise  # noqa: E402

LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)
GPT_OSS = dict(head_dim=64, num_qo_heads=64, num_kv_heads=8, sliding_window=128, sinks=True)
MLA = dict(num_qo_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)

CASES = {
    "fa3-prefill-fa2-tc-decode": ("H100", "flashinfer", LLAMA),
    "fa2-decode": ("A100", "vllm", LLAMA),
    "spec-decode-on-prefill": ("A100", "vllm", dict(LLAMA, num_speculative_tokens=2)),
    "xqa": ("H100", "vllm", LLAMA),
    "xqa-spec": ("H100", "vllm", dict(LLAMA, num_speculative_tokens=2)),
    "xqa-fp8": ("H100", "vllm", dict(LLAMA, kv_cache_dtype="fp8")),
    "sink": ("H100", "flashinfer", GPT_OSS),
    "mla-native": ("H100", "flashinfer", MLA),
    "trtllm": ("B200", "vllm", LLAMA),
    "trtllm-nvfp4": ("B200", "vllm", dict(LLAMA, kv_cache_dtype="nvfp4")),
    "trtllm-mla": ("B200", "vllm", MLA),
}


class _Wrapper:
    """Stands in for a FlashInfer wrapper class: records the constructor, plan and run calls."""

    log: list

    def __init__(self, *args: Any, **kwargs: Any):
        self.log.append(("__init__", args, kwargs))

    def plan(self, *args: Any, **kwargs: Any) -> None:
        self.log.append(("plan", args, kwargs))

    def run(self, *args: Any, **kwargs: Any) -> None:
        self.log.append(("run", args, kwargs))


def _recorder(st: calls.KernelCall, log: list) -> Any:
    if inspect.isclass(st.entry()):
        return type(f"Recorded{st.entry().__name__}", (_Wrapper,), {"log": log})

    def fn(*args: Any, **kwargs: Any) -> None:
        log.append(("call", args, kwargs))
    return fn


def _bind_method(cls: Any, name: str, args: tuple, kwargs: dict) -> None:
    fn = getattr(cls, name)
    sig = inspect.signature(getattr(fn, "__wrapped__", fn))
    sig.bind(None, *args, **kwargs)
    if name == "plan" and any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        # BatchDecodeWithPagedKVCacheWrapper.plan(**kwargs) forwards to _plan_impl: bind there.
        impl = getattr(cls, "_plan_impl", None)
        if impl is not None:
            inspect.signature(impl).bind(None, *args, **kwargs)


def bind_log(real: Any, log: list) -> None:
    """Every recorded entry-point call of ``log`` bound against the real FlashInfer object ``real``."""
    for what, args, kwargs in log:
        if what == "call":
            inspect.signature(getattr(real, "__wrapped__", real)).bind(*args, **kwargs)
        elif what == "__init__":
            inspect.signature(real.__init__).bind(None, *args, **kwargs)
        else:
            _bind_method(real, what, args, kwargs)


@pytest.fixture
def recorded(monkeypatch):
    """{call: [(what, args, kwargs)]} of everything the strategies hand FlashInfer."""
    logs: dict[str, list] = {}
    for name, st in calls.STRATEGIES.items():
        logs[name] = []
        monkeypatch.setattr(st, "_resolved", _recorder(st, logs[name]))
    merges: list = []
    monkeypatch.setattr(flashinfer, "merge_state_in_place", lambda *a, **k: merges.append((a, k)))
    logs["merge"] = merges
    yield logs
    for st in calls.STRATEGIES.values():
        st._resolved = None                   # resolve the real entry point again


@pytest.mark.parametrize("case", list(CASES))
def test_strategies_make_calls_that_bind_to_flashinfer(case, recorded):
    device, engine, cfg = CASES[case]
    node = simulated_node(device, cubins="available") if device.startswith("B") else simulated_node(device)
    answer = plan_for(AttentionConfig(**cfg), node, engine=engine)
    assert answer.ok, answer.violations
    ex = AttentionExecutor(answer, device="cpu", backend="flashinfer", check=False)
    for kind in ("prefill_only", "decode_only", "mixed"):
        exercise(ex, kind)
    for index in range(len(ex.backend.decode_contexts)):     # a per-shape decode choice: each decode call
        with ex.backend.forced_decode(index):
            exercise(ex, "decode_only")
    used = {ph: getattr(answer.plan, ph).call for ph in ("prefill", "decode")}
    for phase, call in used.items():
        st = calls.strategy(call)
        log = recorded[call]
        assert log, f"{case}: nothing reached {call}'s entry point"
        st._resolved = None                   # the real FlashInfer object, to bind against
        bind_log(st.entry(), log)
        if st.host_planned:
            assert {w for w, _, _ in log} == {"__init__", "plan", "run"}, (case, call)
        else:
            assert {w for w, _, _ in log} == {"call"}, (case, call)
        # What the plan says reaches FlashInfer: its backend argument, never "auto".
        backends = {kw.get("backend") for what, _, kw in log if what in ("__init__", "call")} - {None}
        assert backends <= {getattr(answer.plan, ph).flashinfer_backend for ph, c in used.items() if c == call}, case
    if answer.plan.kv_cache.mla:
        (args, kwargs), *_ = recorded["merge"]
        inspect.signature(flashinfer.merge_state_in_place).bind(*args, **kwargs)

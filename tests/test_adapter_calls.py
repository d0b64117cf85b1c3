"""The adapter acts on the plan's fields, never on a backend's name (issue 11.4, issue 15.2).

Every calling convention the plan can name (``policy.answer.Call``) has an adapter mapping, the
rule data's entry points agree with it, FlashInfer's backend argument and the attention scalars
come from the plan, and the adapter's modules contain no string test on a backend name.

Plans for calls that the rules do not produce yet (xqa_decode, sink) are derived from a real fa2
plan with ``model_copy(update=...)``, setting the new PhasePlan fields as the policy will.
"""

from __future__ import annotations

import ast
import importlib
import math
import typing
from pathlib import Path

import pytest

from attnplan.policy import AttentionConfig, default_ruleset, plan_for, simulated_node
from attnplan.policy.answer import Call

torch = pytest.importorskip("torch")

from attnplan.adapter import AttentionExecutor, AttentionParams, StepInput, build_step  # noqa: E402
from attnplan.adapter import calls, trtllm  # noqa: E402
from attnplan.adapter.signatures import flashinfer_root, real_signature  # noqa: E402

ADAPTER = Path(__file__).resolve().parents[1] / "attnplan" / "adapter"
H100 = simulated_node("H100")
LLAMA = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8)


def _flashinfer_importable() -> bool:
    try:
        flashinfer_root()
        importlib.import_module("flashinfer")
        return True
    except Exception:  # noqa: BLE001 - no flashinfer or no CUDA-side deps on this CI node
        return False


def xqa_answer(sinks: bool = False, **cfg):
    """A real H100 answer whose decode phase is rewritten as the policy will write an XQA phase
    (and, with ``sinks``, whose attention has sinks: today's rules refuse sinks on 9.x)."""
    a = plan_for(AttentionConfig(**{**LLAMA, **cfg}), H100, engine="flashinfer")
    assert a.ok, a.violations
    if sinks:
        att = a.plan.attention.model_copy(update={"sinks": True})
        a = a.model_copy(update={"plan": a.plan.model_copy(update={"attention": att})})
    d = a.plan.decode
    dec = d.model_copy(update=dict(backend="xqa", family="xqa", flashinfer_backend="xqa", call="xqa_decode",
                                   entry_point="flashinfer.decode.trtllm_batch_decode_with_kv_cache",
                                   returns_lse=False, zero_workspace=True, runs_on_prefill_kernel=False,
                                   use_tensor_cores=None, workspace_bytes=128 << 20))
    return a.model_copy(update={"plan": a.plan.model_copy(update={"decode": dec})})


def test_every_call_has_an_adapter_mapping():
    literal = set(typing.get_args(Call))
    assert literal == set(calls.CALLS), f"unmapped: {literal - set(calls.CALLS)}, stale: {set(calls.CALLS) - literal}"
    for name, cs in calls.CALLS.items():
        assert cs.phases and set(cs.phases) <= {"prefill", "decode"}, name
    with pytest.raises(ValueError, match="no calling convention"):
        calls.spec("cudnn_prefill")


@pytest.mark.skipif(not _flashinfer_importable(), reason="flashinfer does not import here")
def test_every_call_is_run_by_the_flashinfer_backend():
    """Each call is either built as a wrapper or run as a device-tensor function, never both,
    and a wrapper call is one that calls.py says is planned on the host."""
    from attnplan.adapter.flashinfer_backend import _WRAPPERS, UNWRAPPED

    assert set(_WRAPPERS) | UNWRAPPED == set(calls.CALLS) and not set(_WRAPPERS) & UNWRAPPED
    assert all(calls.CALLS[c].wrapper for c in _WRAPPERS)
    assert {c for c in UNWRAPPED if calls.CALLS[c].wrapper} == {"ragged_prefill"}    # one wrapper per part


@pytest.mark.skipif(not _flashinfer_importable(), reason="flashinfer does not import here")
def test_entry_points_exist_in_the_installed_flashinfer():
    for name, cs in calls.CALLS.items():
        module, attr = cs.entry_point.rsplit(".", 1)
        assert callable(getattr(importlib.import_module(module), attr)), f"{name}: {cs.entry_point}"


def test_rule_data_agrees_with_the_adapter():
    """rules/backends.yaml's calls: every entry point and LSE flag is the adapter's for that call."""
    rs = default_ruleset()
    seen = set()
    for name, b in rs.backends.items():
        for phase, c in [*b.calls.items(), *b.mla_calls.items()]:
            cs = calls.spec(c.call)
            seen.add(c.call)
            assert phase in cs.phases, (name, phase, c.call)
            assert c.entry_point == cs.entry_point, (name, phase, c.entry_point, cs.entry_point)
            assert c.returns_lse == cs.returns_lse, (name, phase)
    assert seen, "the catalog names no call"


def _backend_names() -> set[str]:
    return set(default_ruleset().backends)


@pytest.mark.parametrize("module", ["flashinfer_backend.py", "graphs.py", "warmup.py", "trtllm.py", "executor.py",
                                    "metadata.py", "kv_cache.py", "params.py", "calls.py"])
def test_no_string_test_on_backend_names(module):
    """No ``startswith``/``removesuffix``/``in``/``==`` on a catalog backend name: the adapter reads
    ``call``, ``flashinfer_backend`` and ``family``. (FlashInfer's own backend arguments, e.g.
    "fa2" in warm-up's module getter, are FlashInfer's vocabulary and are allowed in comparisons
    only where FlashInfer itself branches on them.)"""
    tree = ast.parse((ADAPTER / module).read_text())
    plan_only = _backend_names() - {"fa2", "fa3", "xqa", "trtllm-gen"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            assert node.func.attr not in ("startswith", "removesuffix", "endswith") or not any(
                isinstance(a, ast.Constant) and isinstance(a.value, str) and ("trtllm" in a.value or "mla" in a.value
                                                                               or a.value.startswith("fa"))
                for a in node.args), f"{module}:{node.lineno}: string test on a backend name"
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            assert node.value not in plan_only, f"{module}:{node.lineno}: backend name {node.value!r}"
        if isinstance(node, ast.Attribute) and node.attr == "backend" and isinstance(node.value, ast.Attribute):
            assert node.value.attr not in ("decode", "prefill"), f"{module}:{node.lineno}: reads plan.<phase>.backend"


def test_attention_scalars_come_from_the_plan():
    """Issue 15.2: sm_scale, window and soft cap are the plan's (Gemma-3's 168^-0.5, not 128^-0.5)."""
    a = plan_for(AttentionConfig(**LLAMA), H100)
    gemma = a.model_copy(update={"plan": a.plan.model_copy(update={"attention": a.plan.attention.model_copy(
        update=dict(sm_scale=168 ** -0.5, window_left=1023, logits_soft_cap=0.0, split_kv="fixed",
                    fixed_split_size=32))})})
    p = AttentionParams.from_answer(gemma)
    assert math.isclose(p.sm_scale, 168 ** -0.5) and p.window_left == 1023 and p.soft_cap is None
    assert math.isclose(AttentionParams.from_answer(a).sm_scale, 128 ** -0.5)
    from attnplan.adapter.params import split_kv_kwargs

    assert split_kv_kwargs(gemma.plan.attention) == {"fixed_split_size": 32}
    assert split_kv_kwargs(a.plan.attention) == {}
    off = a.plan.attention.model_copy(update={"split_kv": "disabled"})
    assert split_kv_kwargs(off) == {"disable_split_kv": True}


def test_reference_backend_applies_the_plans_scale():
    """Same inputs, two plans differing only in plan.attention.sm_scale: the outputs follow it."""
    a = plan_for(AttentionConfig(head_dim=64, num_qo_heads=4, num_kv_heads=2), H100)
    outs = []
    for scale in (64 ** -0.5, 168 ** -0.5):
        ans = a.model_copy(update={"plan": a.plan.model_copy(update={"attention": a.plan.attention.model_copy(
            update={"sm_scale": scale})})})
        ex = AttentionExecutor(ans, device="cpu", backend="reference")
        gen = torch.Generator().manual_seed(3)
        cache = ex.allocate_kv_cache(4)
        table = torch.arange(4, dtype=torch.int32).view(1, 4)
        inp = StepInput([9], torch.tensor([9], dtype=torch.int32), table, 0, seq_lens_cpu=torch.tensor([9]))
        step = ex.plan_step(inp)
        k, v, q = (torch.randn(9, n, 64, generator=gen) for n in (2, 2, 4))
        ex.append_kv(step, cache, k, v)
        out = ex.forward(step, q, cache).float()
        # float64 softmax(q k^T * scale) v, causal, GQA group 2
        kk, vv = k.double().repeat_interleave(2, 1), v.double().repeat_interleave(2, 1)
        s = torch.einsum("qhd,khd->hqk", q.double(), kk) * scale
        s = s.masked_fill(torch.ones(9, 9, dtype=torch.bool).triu(1), -math.inf)
        ref = torch.einsum("hqk,khd->qhd", s.softmax(-1), vv)
        assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2     # bf16 output
        outs.append(out)
    assert ((outs[0] - outs[1]).norm() / outs[0].norm()).item() > 5e-2


def test_xqa_plan_allocates_a_zeroed_cache():
    """XQA weights a last page's unused slots by zero: they must be finite, so the cache starts at 0."""
    assert calls.needs_finite_page_tail(xqa_answer().plan)
    ex = AttentionExecutor(xqa_answer(kv_cache_dtype="fp8"), device="cpu", backend="reference")
    cache = ex.allocate_kv_cache(5)
    assert cache.data.dtype == torch.uint8 and not cache.data.any()
    assert not calls.needs_finite_page_tail(plan_for(AttentionConfig(**LLAMA), H100, engine="flashinfer").plan)


@pytest.mark.parametrize("spec_tokens", [0, 2])
def test_xqa_decode_call_binds_and_names_xqa(spec_tokens):
    a = xqa_answer(num_speculative_tokens=spec_tokens, sliding_window=128, sinks=True)
    plan, params = a.plan, AttentionParams.from_answer(a)
    qd = plan.decode.q_len_per_req
    seq = [40, 17]
    page = plan.kv_cache.page_size
    table = torch.arange(2 * 3, dtype=torch.int32).view(2, 3)
    step = build_step(plan, StepInput([qd, qd], torch.tensor(seq, dtype=torch.int32), table, 2,
                                      seq_lens_cpu=torch.tensor(seq, dtype=torch.int32)))
    from attnplan.adapter.kv_cache import allocate

    cache = allocate(plan.kv_cache, 6, "cpu")
    q = torch.zeros(2 * qd, 32, 128, dtype=torch.bfloat16)
    sinks = torch.zeros(32)
    mask = trtllm.xqa_draft_mask(qd, 2, "cpu") if qd > 1 else None
    kw = trtllm.decode_kwargs(plan, params, step.decode, q, cache, torch.zeros(16, dtype=torch.uint8),
                              torch.empty_like(q), sinks=sinks, mask=mask)
    sig, _ = real_signature("flashinfer.decode", "trtllm_batch_decode_with_kv_cache")
    sig.bind(**kw)
    assert kw["backend"] == "xqa" and kw["kv_layout"] == plan.kv_cache.layout == "NHD"
    assert kw["sinks"] is sinks                     # a tensor: XQA reshapes it per KV head
    assert kw["window_left"] == 127 and kw["q_len_per_req"] == qd and page == 16
    assert math.isclose(kw["bmm1_scale"], params.sm_scale)
    if qd > 1:
        m = kw["mask"]
        assert m.dtype == torch.uint16 and m.shape == (2, qd, 2)
        bits = m[0, :, 0].to(torch.int32)
        assert bits.tolist() == [(1 << (i + 1)) - 1 for i in range(qd)]      # causal among draft tokens
    else:
        assert "mask" not in kw


def test_reference_sinks_match_a_naive_softmax_with_a_sink_logit():
    """The reference's sinks (used by every GPU sink test): one extra logit per head in the
    softmax's denominator, attending to nothing."""
    from attnplan.adapter import attention_ref

    gen = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(3, 4, 16, generator=gen), torch.randn(7, 2, 16, generator=gen), torch.randn(7, 2, 16, generator=gen)
    sinks = torch.randn(4, generator=gen)
    out, _ = attention_ref(q, k, v, sm_scale=0.25, causal=True, window_left=3, sinks=sinks)
    for i in range(3):
        pos = 7 - 3 + i
        for h in range(4):
            keys = [j for j in range(7) if j <= pos and pos - j <= 3]
            s = torch.tensor([float(q[i, h] @ k[j, h // 2]) * 0.25 for j in keys], dtype=torch.float64)
            w = torch.exp(s) / (torch.exp(s).sum() + math.exp(float(sinks[h])))
            ref = sum(w[t] * v[j, h // 2].double() for t, j in enumerate(keys))
            assert torch.allclose(out[i, h].double(), ref, atol=1e-5)

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
from attnplan.adapter import calls  # noqa: E402
from attnplan.adapter.calls.trtllm_decode import decode_kwargs  # noqa: E402
from attnplan.adapter.calls.xqa_decode import xqa_draft_mask  # noqa: E402
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


def test_every_call_has_a_strategy_and_every_strategy_a_call():
    """The plan's Call vocabulary, the strategies and the calls rules/backends.yaml declares are one set."""
    literal = set(typing.get_args(Call))
    assert literal == set(calls.STRATEGIES), f"unserved: {literal - set(calls.STRATEGIES)}, stale: {set(calls.STRATEGIES) - literal}"
    assert set(calls.registry()) == set(calls.STRATEGIES)
    for name, st in calls.STRATEGIES.items():
        assert st.name == name and st.phases and set(st.phases) <= {"prefill", "decode"}, name
        assert st.runs in ("paged", "latent", "ragged"), name
    with pytest.raises(ValueError, match="no kernel call 'cudnn_prefill'"):
        calls.strategy("cudnn_prefill")


def _with_call(table: str, phase: str, **call):
    rs = default_ruleset()
    fa2 = rs.backends["fa2"]
    calls_ = dict(getattr(fa2, table))
    calls_[phase] = calls_[phase].model_copy(update=call)
    return {**rs.backends, "fa2": fa2.model_copy(update={table: calls_})}


@pytest.mark.parametrize("table, phase", [("calls", "decode"), ("sink_calls", "prefill"), ("mla_calls", "prefill")])
def test_a_call_the_data_names_without_a_strategy_fails_the_registry_build(table, phase):
    from attnplan.policy import RulePackError

    with pytest.raises(RulePackError, match=rf"backends\.fa2\.{table}\.{phase} names the kernel call "
                                            r"'cudnn_attention', which the adapter has no strategy for"):
        calls.build_registry(_with_call(table, phase, call="cudnn_attention"))


def test_data_that_disagrees_with_its_strategy_fails_the_registry_build():
    from attnplan.policy import RulePackError

    with pytest.raises(RulePackError, match="entry_point 'flashinfer.Elsewhere'.*paged_decode.py"):
        calls.build_registry(_with_call("calls", "decode", entry_point="flashinfer.Elsewhere"))
    with pytest.raises(RulePackError, match="returns_lse False"):
        calls.build_registry(_with_call("calls", "decode", returns_lse=False))
    with pytest.raises(RulePackError, match="phase 'prefill'"):
        calls.build_registry(_with_call("calls", "prefill", call="paged_decode",
                                        entry_point="flashinfer.BatchDecodeWithPagedKVCacheWrapper"))


def _overrides(st, method: str) -> bool:
    return getattr(type(st), method) is not getattr(calls.KernelCall, method)


def test_each_strategy_implements_what_its_kind_of_call_does():
    """A host-planned call with a wrapper per phase constructs, plans and captures one; a
    device-tensor call does none of that; MLA's ragged prefill makes its wrappers per part. Each
    call runs through exactly the entry of its kind (paged, latent, ragged)."""
    runs = {"paged": ("run",), "latent": ("run_latent",), "ragged": ("plan_part", "run_part")}
    for name, st in calls.STRATEGIES.items():
        per_phase = st.host_planned and st.runs != "ragged"
        for method in ("construct", "plan", "graph_buffers"):
            assert _overrides(st, method) == per_phase, (name, method)
        for kind, methods in runs.items():
            assert all(_overrides(st, m) == (kind == st.runs) for m in methods), (name, kind)
        if not per_phase:
            assert st.construct(None, None) is None, name
    assert {n for n, st in calls.STRATEGIES.items() if st.host_planned and st.runs == "ragged"} == {"ragged_prefill"}


def test_a_strategy_refuses_what_its_call_does_not_do():
    with pytest.raises(ValueError, match="'xqa_decode' .* has no wrapper to capture"):
        calls.strategy("xqa_decode").graph_buffers(None)
    with pytest.raises(ValueError, match="'paged_decode' .* has no latent"):
        calls.strategy("paged_decode").run_latent(None, None, None, None, None, None, None)


@pytest.mark.skipif(not _flashinfer_importable(), reason="flashinfer does not import here")
def test_entry_points_exist_in_the_installed_flashinfer():
    for name, st in calls.STRATEGIES.items():
        assert callable(st.entry()), f"{name}: {st.entry_point}"


def test_rule_data_agrees_with_the_adapter():
    """rules/backends.yaml's calls: every entry point and LSE flag is the strategy's for that call."""
    rs = default_ruleset()
    seen = set()
    for name, b in rs.backends.items():
        for phase, c in [*b.calls.items(), *b.mla_calls.items(), *b.sink_calls.items()]:
            st = calls.strategy(c.call)
            seen.add(c.call)
            assert phase in st.phases, (name, phase, c.call)
            assert c.entry_point == st.entry_point, (name, phase, c.entry_point, st.entry_point)
            assert c.returns_lse == st.returns_lse, (name, phase)
    assert seen == set(calls.STRATEGIES)


def test_xqa_draft_mask_is_the_strategys_not_the_graphs():
    """XQA's speculative decode carries a causal draft mask (q_len > 1 only), built once per batch
    size; TRTLLM-gen's decode carries none, whatever its q_len."""

    class Ctx:
        device = "cpu"

        def __init__(self):
            self.built = {}

        def memo(self, key, make):
            if key not in self.built:
                self.built[key] = make()
            return self.built[key]

    pp = xqa_answer(num_speculative_tokens=2).plan.decode
    ctx = Ctx()
    extras = calls.strategy("xqa_decode").device_extras(ctx, pp, 3)
    assert set(extras) == {"xqa_mask"} and extras["xqa_mask"].shape == (3, 3, 2)
    assert calls.strategy("xqa_decode").device_extras(ctx, pp, 3)["xqa_mask"] is extras["xqa_mask"]
    one = pp.model_copy(update={"q_len_per_req": 1})
    assert calls.strategy("xqa_decode").device_extras(ctx, one, 3) == {}
    assert calls.strategy("trtllm_decode").device_extras(ctx, pp, 3) == {}


def test_both_backends_are_attention_backends():
    """The executor's backend is typed by a Protocol (adapter/backend.py) that both backends meet."""
    from attnplan.adapter.backend import AttentionBackend
    from attnplan.adapter.reference import ReferenceBackend

    a = plan_for(AttentionConfig(**LLAMA), H100)
    ex = AttentionExecutor(a, device="cpu", backend="reference")
    assert isinstance(ex.backend, ReferenceBackend) and isinstance(ex.backend, AttentionBackend)
    members = [m for m in dir(AttentionBackend) if not m.startswith("_")]
    if _flashinfer_importable():
        from attnplan.adapter.flashinfer_backend import FlashInferBackend

        assert all(hasattr(FlashInferBackend, m) for m in members if m != "name")
        assert FlashInferBackend.name == "flashinfer"


def _backend_names() -> set[str]:
    return set(default_ruleset().backends)


ADAPTER_MODULES = sorted(str(p.relative_to(ADAPTER)) for p in ADAPTER.rglob("*.py"))


@pytest.mark.parametrize("module", ADAPTER_MODULES)
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


CALL_NAMES = set(typing.get_args(Call)) | {"xqa", "attention_sink"}      # and the old alias spellings
VERIFY = ADAPTER.parent / "verify"


@pytest.mark.parametrize("path", [*(ADAPTER / m for m in ADAPTER_MODULES),
                                  *(VERIFY / m for m in ("generate.py", "tolerance.py", "calls.py"))],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_comparison_with_a_call_name(path):
    """Issue 25.4: behaviour per call lives in its strategy (adapter/calls/) or, in verify, in the
    per-call table (verify/call_facts.py): no ``== "xqa_decode"`` or ``in ("sink", ...)`` chains."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            consts = [n.value for side in (node.left, *node.comparators) for n in ast.walk(side)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str)]
            assert not set(consts) & CALL_NAMES, f"{path.name}:{node.lineno}: compares with a call name {consts}"


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
    # fa2 decode alone (forced: no per-shape choice, whose XQA alternative would read page tails too)
    assert not calls.needs_finite_page_tail(plan_for(AttentionConfig(**LLAMA, attention_backend="fa2"), H100,
                                                     engine="flashinfer").plan)


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
    mask = xqa_draft_mask(qd, 2, "cpu") if qd > 1 else None
    kw = decode_kwargs(plan, params, step.decode, q, cache, torch.zeros(16, dtype=torch.uint8),
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
